"""Image build: digest, hardening, idempotence (fake trees) and one real debootstrap build."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from cellblock.cli.main import cli
from cellblock.images import build as b
from cellblock.images.build import (
    BuildRequest,
    ImageBuildError,
    harden_tree,
    parse_debootstrap_line,
    remove_tree,
    source_date_epoch,
    tar_stream,
    tree_digest,
    tree_size,
    up_to_date,
)
from cellblock.images.store import ImageInfo, docker_tag, image_dir

EPOCH = 1_700_000_000
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CELLBLOCK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_tree(root: Path) -> Path:
    """A small tree shaped like a fresh debootstrap: what harden_tree works on."""
    files = {
        "etc/passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/bin/false\n",
        "etc/group": "root:x:0:\nnogroup:x:65534:\n",
        "etc/shadow": "root:*:20100:0:99999:7:::\nnobody:*:20100:0:99999:7:::\n",
        "etc/gshadow": "root:*::\n",
        "etc/resolv.conf": "nameserver 10.0.0.53\n",
        "etc/hosts": "10.1.2.3 buildhost\n",
        "usr/share/doc/libc6/copyright": "text",
        "usr/share/man/man1/ls.1.gz": "man",
        "usr/share/info/dir": "info",
        "usr/share/locale/de/LC_MESSAGES/x.mo": "mo",
        "usr/share/locale/locale.alias": "alias",
        "var/log/dpkg.log": "2026-11-29 installed",
        "var/log/apt/history.log": "history",
        "var/lib/dpkg/status": "Package: x\n",
        "var/lib/dpkg/status-old": "old",
        "var/cache/debconf/config.dat-old": "old",
        "var/cache/apt/pkgcache.bin": "cache",
        "var/lib/apt/lists/x_Packages": "lists",
        "usr/bin/su": "suid binary",
        "usr/bin/tool": "private tool",
        "usr/lib/secret.conf": "owner only",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (root / "tmp").mkdir()
    (root / "var/local").mkdir(parents=True)
    os.chmod(root / "var/local", 0o2775)
    os.chmod(root / "usr/bin/su", 0o4755)
    os.chmod(root / "usr/bin/tool", 0o700)
    os.chmod(root / "usr/lib/secret.conf", 0o600)
    os.symlink("usr/bin", root / "bin")
    os.mkfifo(root / "tmp/fifo")
    os.link(root / "usr/bin/su", root / "usr/bin/su-hardlink")
    return root


# --------------------------------------------------------------------------- digest


def test_digest_depends_on_contents_not_times(tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a")
    before = tree_digest(a)
    os.utime(a / "etc/passwd", (1, 1))
    assert tree_digest(a) == before

    (a / "etc/passwd").write_text("changed\n")
    changed_content = tree_digest(a)
    assert changed_content != before

    os.chmod(a / "usr/bin/tool", 0o755)
    changed_mode = tree_digest(a)
    assert changed_mode != changed_content

    (a / "bin").unlink()
    os.symlink("usr/sbin", a / "bin")
    changed_link = tree_digest(a)
    assert changed_link != changed_mode

    (a / "new").mkdir()
    assert tree_digest(a) != changed_link


def test_digest_equal_for_equal_trees(tmp_path: Path) -> None:
    assert tree_digest(make_tree(tmp_path / "a")) == tree_digest(make_tree(tmp_path / "b"))
    assert tree_digest(tmp_path / "a").startswith("sha256:")


@needs_root
def test_digest_includes_owner(tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a")
    before = tree_digest(a)
    os.chown(a / "etc/hosts", 1000, 1000)
    assert tree_digest(a) != before


def test_size_counts_hard_links_once(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    (root / "f").write_bytes(b"x" * 1000)
    os.link(root / "f", root / "g")
    (root / "h").write_bytes(b"y" * 10)
    os.symlink("f", root / "l")
    assert tree_size(root) == 1010


# --------------------------------------------------------------------------- hardening


def test_harden_tree(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r")
    old = EPOCH - 86400 * 30
    os.utime(root / "var/lib/dpkg/status", (old, old))
    harden_tree(root, EPOCH)

    passwd = (root / "etc/passwd").read_text().splitlines()
    assert "sandbox:x:1000:1000:sandbox:/work:/bin/bash" in passwd
    assert "sandbox:x:1000:" in (root / "etc/group").read_text().splitlines()
    shadow = (root / "etc/shadow").read_text().splitlines()
    assert all(line.split(":")[2] == str(EPOCH // 86400) for line in shadow)
    assert any(line.startswith("sandbox:*:") for line in shadow)
    assert "sandbox:*::" in (root / "etc/gshadow").read_text()

    assert (root / "etc/hostname").read_text() == "sandbox\n"
    hosts = (root / "etc/hosts").read_text()
    assert "buildhost" not in hosts
    assert all("localhost" in line for line in hosts.splitlines())
    assert (root / "etc/resolv.conf").read_text() == ""

    for rel in ("usr/share/doc", "usr/share/man", "usr/share/info", "var/cache/apt",
                "var/lib/apt/lists"):
        assert (root / rel).is_dir() and not list((root / rel).iterdir()), rel
    assert [p.name for p in (root / "usr/share/locale").iterdir()] == ["locale.alias"]
    assert not [p for p in (root / "var/log").rglob("*") if p.is_file()]
    assert not (root / "var/lib/dpkg/status-old").exists()
    assert not (root / "var/cache/debconf/config.dat-old").exists()

    assert (root / "work").is_dir() and not list((root / "work").iterdir())
    assert stat.S_IMODE((root / "tmp").stat().st_mode) == 0o1777
    assert not (root / "tmp/fifo").exists()

    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), p
        assert st.st_mode & stat.S_IROTH, p
        if p.is_dir():
            assert st.st_mode & stat.S_IXOTH, p
        assert st.st_mtime <= EPOCH, p
    assert (root / "usr/bin/tool").stat().st_mode & stat.S_IXOTH
    assert not (root / "usr/lib/secret.conf").stat().st_mode & stat.S_IXOTH
    # Packaged files keep their (older) times, so .pyc timestamps stay valid.
    assert (root / "var/lib/dpkg/status").stat().st_mtime == old

    # Idempotent: a second pass changes nothing.
    digest = tree_digest(root)
    harden_tree(root, EPOCH)
    assert tree_digest(root) == digest
    lines = (root / "etc/passwd").read_text().splitlines()
    assert [line for line in lines if line.startswith("sandbox:")] == [
        "sandbox:x:1000:1000:sandbox:/work:/bin/bash"]


@needs_root
def test_harden_tree_removes_device_nodes(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r")
    (root / "dev").mkdir()
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    harden_tree(root, EPOCH)
    assert (root / "dev").is_dir()
    assert not (root / "dev/null").exists()


def test_uid_1000_taken_is_an_error(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r")
    with (root / "etc/passwd").open("a") as f:
        f.write("someone:x:1000:1000::/home/someone:/bin/sh\n")
    with pytest.raises(ImageBuildError, match="uid 1000 is already taken"):
        harden_tree(root, EPOCH)


def test_source_date_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    lists = tmp_path / "var/lib/apt/lists"
    lists.mkdir(parents=True)
    (lists / "deb.debian.org_debian_dists_bookworm_Release").write_text(
        "Origin: Debian\nDate: Sat, 11 Jul 2026 10:16:37 UTC\nSuite: stable\n")
    assert source_date_epoch(tmp_path) == 1783764997
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    assert source_date_epoch(tmp_path) == 1234567890


def test_parse_debootstrap_line() -> None:
    assert parse_debootstrap_line("I: Retrieving InRelease ") == ("Retrieving", "InRelease")
    assert parse_debootstrap_line("I: Validating libc6 2.36-9") == ("Validating", "libc6 2.36-9")
    assert parse_debootstrap_line("I: Extracting bash...") == ("Extracting", "bash")
    assert parse_debootstrap_line("I: Unpacking dpkg...") == ("Unpacking", "dpkg")
    assert parse_debootstrap_line("I: Configuring python3...") == ("Configuring", "python3")
    assert parse_debootstrap_line("I: Base system installed successfully.")[0] == "Installing"  # type: ignore[index]
    assert parse_debootstrap_line("W: Cannot check Release signature") is None
    assert parse_debootstrap_line("random") is None


# --------------------------------------------------------------------------- requests, manifest


def test_build_request_validates_and_normalises() -> None:
    req = BuildRequest(packages=("curl", "python3", "curl", "jq"))
    assert req.packages == ("curl", "jq")
    assert req.include == ["curl", "iputils-ping", "jq", "python3"]
    for bad in ("python3,evil", "--foo", "Caps", "a b", ""):
        with pytest.raises(ValueError, match="package"):
            BuildRequest(packages=(bad,))
    with pytest.raises(ValueError):
        BuildRequest(name="../escape")
    with pytest.raises(ValueError):
        BuildRequest(suite="bookworm --foo")
    with pytest.raises(ValueError, match="mirror"):
        BuildRequest(mirror="ftp://x y")


def write_fake_image(name: str, extra: list[str], digest: str = "sha256:abc") -> ImageInfo:
    root = image_dir(name)
    (root / "rootfs/usr/bin").mkdir(parents=True)
    info = ImageInfo(name=name, packages={"python3": "3.11", "iputils-ping": "1", "jq": "1.6"},
                     extra_packages=extra, digest=digest, built_at="2026-01-01T00:00:00+00:00")
    (root / "manifest.json").write_text(info.model_dump_json())
    return info


def test_up_to_date_matches_package_set(home: Path) -> None:
    info = write_fake_image("img", ["jq"])
    assert up_to_date(BuildRequest(name="img", packages=("jq",))) == info
    assert up_to_date(BuildRequest(name="img", packages=("jq", "python3"))) == info
    assert up_to_date(BuildRequest(name="img")) is None
    assert up_to_date(BuildRequest(name="img", packages=("jq", "curl"))) is None
    assert up_to_date(BuildRequest(name="img", packages=("jq",), suite="trixie")) is None
    assert up_to_date(BuildRequest(name="other")) is None


def test_build_is_a_no_op_when_up_to_date(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = write_fake_image("img", [])
    calls: list[BuildRequest] = []

    def fake_build_rootfs(request: BuildRequest, progress: object) -> tuple[ImageInfo, bool]:
        calls.append(request)
        return info, True

    monkeypatch.setattr(b, "_build_rootfs", fake_build_rootfs)
    assert b.build(BuildRequest(name="img")) == (info, False)
    assert calls == []
    assert b.build(BuildRequest(name="img", force=True)) == (info, True)
    assert len(calls) == 1
    assert b.build(BuildRequest(name="img", packages=("jq",))) == (info, True)
    assert len(calls) == 2


def test_cli_up_to_date_message(home: Path) -> None:
    write_fake_image("default", [])
    result = CliRunner().invoke(cli, ["image", "build", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output


def test_cli_list(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_fake_image("default", [], digest="sha256:" + "ab" * 32)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    result = CliRunner().invoke(cli, ["image", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "default" in result.output and "abababababab" in result.output
    assert "daemon unreachable" in result.output


# --------------------------------------------------------------------------- clear errors


def test_missing_debootstrap_is_a_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(b.shutil, "which", lambda name: None)
    monkeypatch.setattr(b.os, "access", lambda path, mode: False)
    with pytest.raises(ImageBuildError) as info:
        b.build(BuildRequest(force=True))
    assert info.value.hint == "apt-get install debootstrap"
    result = CliRunner().invoke(cli, ["image", "build", "-q"])
    assert result.exit_code == 2
    assert "debootstrap is not installed" in result.output
    assert "Traceback" not in result.output


def test_not_root_is_a_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(b.os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(cli, ["image", "build", "-q"])
    assert result.exit_code == 2
    assert "needs root" in result.output
    assert "sudo" in result.output
    assert "Traceback" not in result.output
    assert not (home / "images").exists() or not list((home / "images").iterdir())


@pytest.mark.integration
@needs_root
def test_unreachable_mirror_is_a_clear_error_and_leaves_nothing(home: Path) -> None:
    # Port 9 on loopback: nothing listens, so the connection is refused at once.
    with pytest.raises(ImageBuildError) as info:
        b.build(BuildRequest(mirror="http://127.0.0.1:9/debian"))
    assert "could not download" in info.value.safe_message
    assert info.value.detail is not None and "Release" in info.value.detail
    assert "--mirror" in (info.value.hint or "")
    assert list((home / "images").iterdir()) == []


# --------------------------------------------------------------------------- mounts, swap, tar


@needs_root
def test_remove_tree_unmounts_first_and_never_crosses_a_mount(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    staging = tmp_path / "staging"
    (staging / "rootfs/proc").mkdir(parents=True)
    (staging / "rootfs/mnt").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(staging / "rootfs/proc")], check=True)
    subprocess.run(["mount", "--bind", str(outside), str(staging / "rootfs/mnt")], check=True)
    try:
        assert len(b.mounts_under(staging)) == 2
        with pytest.raises(ImageBuildError, match="mounted inside"):
            tree_digest(staging)
        remove_tree(staging)
    finally:
        for p in b.mounts_under(tmp_path):
            subprocess.run(["umount", "-l", str(p)], check=False)
    assert not staging.exists()
    assert (outside / "precious").read_text() == "keep me"


def test_swap_into_place_exchanges_atomically(tmp_path: Path) -> None:
    final = tmp_path / "img"
    staging = tmp_path / ".img.build"
    final.mkdir()
    (final / "old").write_text("old")
    staging.mkdir()
    (staging / "new").write_text("new")
    b._swap_into_place(staging, final)
    assert (final / "new").exists() and not (final / "old").exists()
    assert (staging / "old").exists()
    fresh = tmp_path / ".fresh"
    fresh.mkdir()
    b._swap_into_place(fresh, tmp_path / "another")
    assert (tmp_path / "another").is_dir() and not fresh.exists()


def test_tar_stream_is_a_valid_tar_with_numeric_owners(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r")
    data = b"".join(tar_stream(root))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["etc/passwd"].isreg()
        assert tar.extractfile("etc/passwd").read().startswith(b"root:x:0:0")  # type: ignore[union-attr]
        assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
        assert members["usr/bin/su-hardlink"].islnk() or members["usr/bin/su"].islnk()
        assert all(m.uname == "" and m.gname == "" for m in members.values())
        assert not any(name.startswith(("/", "..")) for name in members)


# --------------------------------------------------------------------------- the real build


@pytest.fixture(scope="module")
def real_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ImageInfo]]:
    home = tmp_path_factory.mktemp("cellblock-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("CELLBLOCK_HOME", str(home))
    name = f"test-{uuid.uuid4().hex[:8]}"
    try:
        info = b.build_image(name, progress=False)
        yield image_dir(name) / "rootfs", info
    finally:
        remove_tree(home / "images")
        mp.undo()


@pytest.mark.integration
@needs_root
def test_real_build(real_image: tuple[Path, ImageInfo]) -> None:
    rootfs, info = real_image
    assert {"python3", "iputils-ping", "dpkg"} <= set(info.packages)
    assert info.digest == tree_digest(rootfs)
    assert info.digest == tree_digest(rootfs)  # stable across computations
    assert info.size_bytes == tree_size(rootfs)
    manifest = json.loads((rootfs.parent / "manifest.json").read_text())
    assert manifest["digest"] == info.digest

    assert "sandbox:x:1000:1000:sandbox:/work:/bin/bash" in (rootfs / "etc/passwd").read_text()
    assert "sandbox:x:1000:" in (rootfs / "etc/group").read_text()
    assert (rootfs / "etc/hostname").read_text() == "sandbox\n"
    assert (rootfs / "etc/resolv.conf").read_text() == ""
    assert (rootfs / "work").is_dir() and not list((rootfs / "work").iterdir())
    assert not list((rootfs / "usr/share/doc").iterdir())
    for p in [rootfs, *rootfs.rglob("*")]:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode), p
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), p
        assert st.st_mode & stat.S_IROTH, p
    for d in (rootfs.parent, rootfs.parent.parent, rootfs.parent.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, d
    assert not b.mounts_under(rootfs.parent.parent)
    assert [p.name for p in rootfs.parent.parent.iterdir()] == [rootfs.parent.name]

    out = subprocess.run(
        ["/usr/sbin/chroot", "--userspec=1000:1000", str(rootfs), "/usr/bin/python3", "-c",
         "import os, pwd; print(pwd.getpwuid(os.getuid()).pw_name, os.path.exists('/work'))"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "sandbox True"


@pytest.mark.integration
@needs_root
def test_real_build_second_run_is_a_no_op(real_image: tuple[Path, ImageInfo]) -> None:
    rootfs, info = real_image
    inode = rootfs.stat().st_ino
    again, built = b.build(BuildRequest(name=info.name))
    assert not built
    assert again == info
    assert rootfs.stat().st_ino == inode


@pytest.mark.integration
@needs_root
def test_real_build_docker_import(real_image: tuple[Path, ImageInfo]) -> None:
    _, info = real_image
    client = docker.from_env()
    tag = docker_tag(info.name)
    try:
        image_id = b.import_to_docker(info)
        image = client.images.get(tag)
        assert image.id == image_id
        assert image.labels["cellblock.digest"] == info.digest
        assert image.attrs["Config"]["User"] == "1000"
        assert image.attrs["Config"]["WorkingDir"] == "/work"
        assert "PATH=/usr/local/bin:/usr/bin:/bin" in image.attrs["Config"]["Env"]
        assert b.docker_image_present(info, client)
        out = client.containers.run(tag, ["python3", "-c", "import os; print(os.getuid())"],
                                    network_mode="none", remove=True)
        assert out.strip() == b"1000"
        # Same digest: no second import, same image.
        assert b.import_to_docker(info) == image_id
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag)


def test_docker_unreachable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from cellblock.errors import SandboxUnavailable

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    info = ImageInfo(name="x", digest="sha256:00")
    with pytest.raises(SandboxUnavailable) as exc:
        b.import_to_docker(info)
    assert "not reachable" in exc.value.safe_message
    assert exc.value.hint and "dockerd" in exc.value.hint


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.integration
@needs_root
def test_ctrl_c_mid_build_leaves_nothing(home: Path) -> None:
    """SIGINT while debootstrap runs: no staging dir, no mount, no process is left."""
    script = (
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from cellblock.images.build import build_image\n"
        "try:\n"
        "    build_image('ctrlc', progress=False)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    images = home / "images"
    try:
        # Wait until debootstrap has mounted /proc in the target (or, where it does not,
        # is configuring packages): the worst moment to be interrupted.
        while proc.poll() is None:
            if images.is_dir() and (b.mounts_under(images)
                                    or list(images.glob(".ctrlc.build-*/rootfs/usr/bin/python3"))):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the build ended before it could be interrupted"
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "interrupted" in out
    assert list(images.iterdir()) == []
    assert b.mounts_under(home) == []
    assert _processes_mentioning(str(home)) == []



def test_blocked_ancestor() -> None:
    # Not under tmp_path: pytest's base temp dir is itself 0700.
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)
        private = Path(tmp) / "private"
        (private / "home/images").mkdir(parents=True)
        assert b.blocked_ancestor(private / "home/images") is None
        os.chmod(private, 0o700)
        assert b.blocked_ancestor(private / "home/images") == private
        os.chmod(private, 0o755)


@needs_root
def test_stale_staging_dirs_are_removed_under_the_lock(home: Path) -> None:
    images = home / "images"
    stale = images / ".default.build-abc123"
    (stale / "rootfs/usr").mkdir(parents=True)
    (images / ".default.build-def456.old").mkdir()
    (images / "keep").mkdir()
    with b._build_lock(images):
        b._remove_stale_staging(images)
    assert sorted(p.name for p in images.iterdir()) == ["keep"]
