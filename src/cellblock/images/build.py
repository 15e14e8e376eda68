"""Build a sandbox root filesystem with debootstrap, harden it, and publish it atomically.

What a build does, in order:

1. ``debootstrap --variant=minbase --include=python3,iputils-ping,<extra>`` into a staging
   directory *next to* the final one (``images/.<name>.build-XXXX``, same filesystem), in a
   new session so that Ctrl-C reaches us, not debootstrap, and we decide how it dies.
2. Read the package list with the host's ``dpkg-query --admindir`` (no chroot, no mounts).
3. Post-process on the host side: trim docs/man/info/locales/apt caches, remove files that
   only record *when* the build ran, add the ``sandbox`` user (uid/gid 1000, home /work),
   set hostname/hosts, empty resolv.conf, remove device nodes, fifos and sockets, strip
   every setuid/setgid bit, make the tree world-readable (sandboxes run under an
   unprivileged host uid), and clamp modification times.
4. Compute the digest, write ``manifest.json`` beside ``rootfs/`` in the staging dir, and
   swap the staging dir into ``images/<name>`` with ``renameat2(RENAME_EXCHANGE)`` (two
   renames where the filesystem lacks it). Readers see the old image or the new one.
5. On any failure, Ctrl-C included, the staging dir is removed: mounts under it are
   unmounted first, and the removal refuses to cross into another filesystem.

What "reproducible" means here, honestly:

* The digest (:func:`tree_digest`) covers each entry's path, type, permission bits,
  owner, and file content or symlink target. It ignores timestamps, so it depends only on
  what is in the tree.
* Two builds give the same digest when they install the *same package versions* (the
  manifest records them), which in practice means the same mirror state: a mirror that
  moved on between builds gives a different tree, and the manifest shows why. Files that
  only record the build time or run (logs, ``*-old`` backups, ldconfig's aux-cache,
  machine-id, password-change dates) are removed or normalised.
* Modification times are clamped to ``SOURCE_DATE_EPOCH`` (from the environment, else the
  ``Date:`` of the mirror's Release file) rather than reset: files unpacked from packages
  keep their packaged times, so Python's timestamp-based ``.pyc`` files stay valid.
* Checked: four bookworm builds on one machine from the same mirror state, minutes apart,
  gave the same digest. Not guaranteed: the ``.pyc`` files that Debian's ``py3compile``
  writes during configuration are not promised byte-stable by CPython (marshal output can
  depend on reference counts), and maintainer scripts of extra packages may write other
  build-time state. A differing digest then shows up in the manifest; it is not hidden.
* Not covered: a different host kernel or debootstrap version may change what the
  maintainer scripts do; the digest would then differ, correctly.

Replacing an image (``--force`` or a new package set) deletes the old tree after the swap;
sandboxes still running over the old tree lose their files, so rebuild between workloads.
"""

from __future__ import annotations

import contextlib
import ctypes
import email.utils
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, field_validator
from rich.markup import escape

from cellblock.errors import CellblockError, SandboxUnavailable
from cellblock.images.store import (
    DEFAULT_IMAGE,
    ImageInfo,
    cellblock_home,
    docker_tag,
    image_dir,
    validate_image_name,
)

__all__ = [
    "BASE_PACKAGES",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "BuildProgress",
    "BuildRequest",
    "ImageBuildError",
    "RichProgress",
    "SilentProgress",
    "blocked_ancestor",
    "build",
    "build_image",
    "docker_client",
    "docker_image_present",
    "dpkg_packages",
    "harden_tree",
    "import_to_docker",
    "mounts_under",
    "parse_debootstrap_line",
    "read_manifest",
    "remove_tree",
    "source_date_epoch",
    "tar_stream",
    "tree_digest",
    "tree_size",
    "up_to_date",
]

BASE_PACKAGES: tuple[str, ...] = ("iputils-ping", "python3")
"""Always installed. ``iputils-ping`` is there so that red-team tests can show ping fails."""
SANDBOX_UID = 1000
SANDBOX_GID = 1000
DIGEST_LABEL = "cellblock.digest"

_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,62}$")
_SUITE = re.compile(r"^[a-z][a-z0-9-]{1,31}$")
_PHASES = ("Retrieving", "Validating", "Extracting", "Unpacking", "Configuring")
_FALLBACK_EPOCH = 1672531200  # 2023-01-01, only if neither env nor Release file has a date
_TRIM_DIRS = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "var/cache/apt",
    "var/lib/apt/lists",
)
_KEEP_LOCALE = frozenset({"locale.alias"})  # glibc reads it; the catalogues are not needed
_NETWORK_FAILURE = re.compile(
    r"Failed getting release file|Couldn't download|Temporary failure resolving|"
    r"Could not resolve|Connection (refused|timed out)|Network is unreachable|"
    r"Couldn't find these debs|Unable to fetch",
    re.IGNORECASE,
)


class ImageBuildError(CellblockError):
    """The root filesystem could not be built; ``hint`` says what to do about it."""

    default_safe_message = "the sandbox image could not be built"


class BuildRequest(BaseModel):
    """What to build. Validated before anything touches the disk."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = DEFAULT_IMAGE
    suite: str = "bookworm"
    """Debian release passed to debootstrap."""
    packages: tuple[str, ...] = ()
    """Extra Debian packages on top of :data:`BASE_PACKAGES`."""
    mirror: str | None = None
    """Debian mirror URL; None lets debootstrap pick its default."""
    docker: bool = False
    """Also import the tree as the local Docker image :func:`docker_tag` names."""
    force: bool = False
    """Rebuild even if the manifest says the image is up to date."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_image_name(value)

    @field_validator("suite")
    @classmethod
    def _suite(cls, value: str) -> str:
        if not _SUITE.match(value):
            raise ValueError(f"invalid Debian suite {value!r}")
        return value

    @field_validator("packages")
    @classmethod
    def _packages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # The list ends up in a comma-separated debootstrap argument: only plain names.
        for pkg in value:
            if not _PACKAGE.match(pkg):
                raise ValueError(f"invalid Debian package name {pkg!r}")
        return tuple(sorted(set(value) - set(BASE_PACKAGES)))

    @field_validator("mirror")
    @classmethod
    def _mirror(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|file)://\S+$", value):
            raise ValueError(f"mirror must be an http(s):// or file:// URL, got {value!r}")
        return value

    @property
    def include(self) -> list[str]:
        return sorted(set(BASE_PACKAGES) | set(self.packages))


# --------------------------------------------------------------------------- progress


class BuildProgress(Protocol):
    """Where a build reports what it is doing (a rich spinner, or nothing)."""

    def update(self, phase: str, detail: str) -> None: ...

    def log(self, message: str) -> None: ...


class SilentProgress:
    """Reports nothing (``--quiet``, library use)."""

    def update(self, phase: str, detail: str) -> None:
        pass

    def log(self, message: str) -> None:
        pass


class RichProgress:
    """A spinner with the current debootstrap phase and the package it is working on."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._console = Console(stderr=True)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold cyan]{task.fields[phase]:<12}"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self._console,
            transient=True,
        )
        self._task = self._progress.add_task("", phase="Starting")

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def update(self, phase: str, detail: str) -> None:
        self._progress.update(self._task, phase=phase, description=detail[:80])

    def log(self, message: str) -> None:
        self._progress.console.print(message)


def parse_debootstrap_line(line: str) -> tuple[str, str] | None:
    """``("Unpacking", "libc6")`` for debootstrap's ``I: Unpacking libc6...``, else None."""
    if not line.startswith("I: "):
        return None
    text = line[3:].strip().rstrip(".")
    for phase in _PHASES:
        if text.startswith(phase):
            return phase, text[len(phase):].strip()
    if text.startswith(("Base system installed", "Installing core", "Unpacking the base")):
        return "Installing", text
    return None


# --------------------------------------------------------------------------- tree walking


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` as (relative path, lstat), never following symlinks.

    Raises :class:`ImageBuildError` on a directory on another filesystem: something is
    mounted inside the tree, and hashing, chmod-ing or deleting through it would reach
    outside the image.
    """
    root_dev = root.lstat().st_dev
    stack = [""]
    while stack:
        rel = stack.pop()
        base = os.path.join(root, rel) if rel else str(root)
        with os.scandir(base) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev != root_dev:
                    raise ImageBuildError(
                        "a filesystem is mounted inside the image tree",
                        detail=f"{root}/{child}",
                    )
                stack.append(child)
            yield child, st


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """sha256 over the sorted (path, type+mode, owner, content hash or link target) list.

    Timestamps are left out on purpose: the digest names the tree's contents. Owner is
    included because a file's owner changes what the sandbox user may do with it.
    """
    entries = sorted(_walk(root), key=lambda item: os.fsencode(item[0]))
    h = hashlib.sha256()
    for rel, st in entries:
        full = os.path.join(root, rel)
        mode = st.st_mode
        if stat.S_ISREG(mode):
            kind, payload = "f", _file_sha256(full)
        elif stat.S_ISLNK(mode):
            kind, payload = "l", os.readlink(full)
        elif stat.S_ISDIR(mode):
            kind, payload = "d", ""
        else:
            kind, payload = "s", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        record = f"{kind} {stat.S_IMODE(mode):04o} {st.st_uid}:{st.st_gid}"
        h.update(os.fsencode(rel) + b"\0" + record.encode() + b"\0")
        h.update(os.fsencode(payload) + b"\n")
    return "sha256:" + h.hexdigest()


def tree_size(root: Path) -> int:
    """Bytes in regular files, counting hard-linked files once."""
    seen: set[int] = set()
    total = 0
    for _, st in _walk(root):
        if stat.S_ISREG(st.st_mode) and st.st_ino not in seen:
            seen.add(st.st_ino)
            total += st.st_size
    return total


# --------------------------------------------------------------------------- mounts & removal


def _unescape_mount_path(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below ``path``, deepest first (the order to unmount them)."""
    base = os.path.realpath(path)
    found: list[Path] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape_mount_path(fields[4])
        if point == base or point.startswith(base + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _unmount_all(path: Path) -> None:
    for point in mounts_under(path):
        # A plain umount first; a lazy one if something still holds it busy, which
        # detaches it from the tree at once (so the removal below cannot cross it).
        if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    left = mounts_under(path)
    if left:
        raise ImageBuildError(
            "could not unmount filesystems inside the build directory",
            detail=", ".join(map(str, left)),
            hint="unmount them by hand (umount -l PATH), then delete the directory",
        )


def remove_tree(path: Path) -> None:
    """Delete ``path`` after unmounting anything below it; never crosses a filesystem."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    _unmount_all(path)
    root_dev = path.lstat().st_dev
    # Re-check per directory: shutil.rmtree does not follow symlinks, and we refuse to
    # descend into a directory that lives on another device (a mount we failed to see).
    for dirpath, dirnames, _ in os.walk(path, topdown=True, followlinks=False):
        for d in dirnames:
            full = os.path.join(dirpath, d)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode) and st.st_dev != root_dev:
                raise ImageBuildError(
                    "refusing to delete across a mount point", detail=full,
                    hint=f"unmount {full}, then delete {path}",
                )
    shutil.rmtree(path)


def _swap_into_place(staging: Path, final: Path) -> None:
    """Make ``staging`` appear at ``final`` atomically; the old image ends at ``staging``."""
    try:
        os.rename(staging, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    else:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        rc = renameat2(at_fdcwd, os.fsencode(staging), at_fdcwd, os.fsencode(final),
                       rename_exchange)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), str(final))
    # No atomic exchange here: a short window where the image is missing, never a mix.
    old = staging.with_name(staging.name + ".old")
    os.rename(final, old)
    os.rename(staging, final)
    os.rename(old, staging)


# --------------------------------------------------------------------------- post-processing


def _empty_dir(path: Path, keep: frozenset[str] = frozenset()) -> None:
    if not path.is_dir() or path.is_symlink():
        return
    for child in path.iterdir():
        if child.name in keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _trim(rootfs: Path) -> None:
    for rel in _TRIM_DIRS:
        _empty_dir(rootfs / rel)
    _empty_dir(rootfs / "usr/share/locale", keep=_KEEP_LOCALE)


def _remove_build_traces(rootfs: Path) -> None:
    """Remove files whose content depends on when or how often the build ran."""
    log_dir = rootfs / "var/log"
    if log_dir.is_dir():
        for dirpath, _, files in os.walk(log_dir):
            for name in files:
                os.unlink(os.path.join(dirpath, name))
    for pattern in ("var/cache/debconf/*-old", "var/lib/dpkg/*-old",
                    "etc/passwd-", "etc/group-", "etc/shadow-", "etc/gshadow-",
                    "var/cache/ldconfig/aux-cache", "var/lib/dbus/machine-id"):
        for found in rootfs.glob(pattern):
            if found.is_file() or found.is_symlink():
                found.unlink()
    machine_id = rootfs / "etc/machine-id"
    if machine_id.exists():
        machine_id.write_text("")  # empty means "not initialised" to systemd tools


def _append_line(path: Path, line: str, mode: int = 0o644) -> None:
    text = path.read_text() if path.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + line + "\n")
    os.chmod(path, mode)


def _add_sandbox_user(rootfs: Path, epoch: int) -> None:
    etc = rootfs / "etc"
    passwd = (etc / "passwd").read_text().splitlines()
    for entry in passwd:
        fields = entry.split(":")
        if fields[0] == "sandbox":
            return  # already there (a rebuild of a customised tree)
        if len(fields) > 2 and fields[2] == str(SANDBOX_UID):
            raise ImageBuildError(
                f"uid {SANDBOX_UID} is already taken in the image by {fields[0]!r}",
                hint="remove the package that creates that user from --package",
            )
    days = epoch // 86400
    _append_line(etc / "passwd", f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:/work:/bin/bash")
    _append_line(etc / "group", f"sandbox:x:{SANDBOX_GID}:")
    # Locked password ('*'): the account exists for names in ps/ls, never for logins.
    _append_line(etc / "shadow", f"sandbox:*:{days}:0:99999:7:::", mode=0o640)
    if (etc / "gshadow").exists():
        _append_line(etc / "gshadow", "sandbox:*::", mode=0o640)


def _normalise_shadow_dates(rootfs: Path, epoch: int) -> None:
    """Field 3 of /etc/shadow is the day of the last password change: the build day."""
    shadow = rootfs / "etc/shadow"
    if not shadow.exists():
        return
    days = str(epoch // 86400)
    lines = []
    for line in shadow.read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 2 and fields[2]:
            fields[2] = days
        lines.append(":".join(fields))
    shadow.write_text("\n".join(lines) + "\n")


def _set_identity(rootfs: Path, epoch: int) -> None:
    etc = rootfs / "etc"
    _normalise_shadow_dates(rootfs, epoch)
    _add_sandbox_user(rootfs, epoch)
    (etc / "hostname").write_text("sandbox\n")
    (etc / "hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    resolv = etc / "resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("")  # no resolver inside: name lookups fail at once, not after a timeout
    work = rootfs / "work"
    work.mkdir(mode=0o755, exist_ok=True)
    _empty_dir(work)
    tmp = rootfs / "tmp"
    tmp.mkdir(exist_ok=True)
    os.chmod(tmp, 0o1777)  # noqa: S103 - the usual sticky, world-writable /tmp


def _fix_modes(rootfs: Path) -> None:
    """Drop device nodes, fifos and sockets; strip setuid/setgid; make everything o+rX.

    Backends give sandboxes their own /dev, so a device node in the image could only be a
    way around that. setuid bits are stripped even though sandboxes run with NoNewPrivs:
    defence in depth. World-readable because sandboxes run under an unprivileged host uid;
    nothing in a fresh image is secret (the shadow file holds only locked passwords).
    """
    for rel, st in list(_walk(rootfs)):
        full = os.path.join(rootfs, rel)
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            os.unlink(full)
            continue
        perms = stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID)
        perms |= stat.S_IROTH
        if stat.S_ISDIR(mode) or perms & stat.S_IXUSR:
            perms |= stat.S_IXOTH
        if perms != stat.S_IMODE(mode):
            os.chmod(full, perms)
    os.chmod(rootfs, 0o755)  # noqa: S103 - sandboxes' unprivileged uid reads it


def _clamp_mtimes(rootfs: Path, epoch: int) -> None:
    # Clamp, not reset: packaged files keep their times so .pyc timestamps still match.
    for rel, st in list(_walk(rootfs)):
        if st.st_mtime > epoch or st.st_atime > epoch:
            os.utime(os.path.join(rootfs, rel), (epoch, min(int(st.st_mtime), epoch)),
                     follow_symlinks=False)
    st = rootfs.lstat()
    os.utime(rootfs, (epoch, min(int(st.st_mtime), epoch)))


def harden_tree(rootfs: Path, epoch: int) -> None:
    """All post-processing of a freshly bootstrapped tree (see the module docstring)."""
    _trim(rootfs)
    _remove_build_traces(rootfs)
    _set_identity(rootfs, epoch)
    _fix_modes(rootfs)
    _clamp_mtimes(rootfs, epoch)


def source_date_epoch(rootfs: Path) -> int:
    """``$SOURCE_DATE_EPOCH``, else the Date of the mirror's Release file in the tree."""
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env and env.isdigit():
        return int(env)
    lists = rootfs / "var/lib/apt/lists"
    for release in sorted(lists.glob("*_Release")) + sorted(lists.glob("*_InRelease")):
        try:
            for line in release.read_text(errors="replace").splitlines():
                if line.startswith("Date:"):
                    return int(email.utils.parsedate_to_datetime(line[5:].strip()).timestamp())
        except (OSError, ValueError, TypeError):
            continue
    return _FALLBACK_EPOCH


def dpkg_packages(rootfs: Path) -> dict[str, str]:
    """Installed packages and versions, read with the host's dpkg-query (no chroot)."""
    try:
        out = subprocess.run(
            ["dpkg-query", f"--admindir={rootfs / 'var/lib/dpkg'}", "-W",
             "-f=${db:Status-Abbrev}\t${Package}\t${Version}\n"],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ImageBuildError("could not list the packages in the new image",
                              detail=str(exc), hint="apt-get install dpkg") from exc
    packages: dict[str, str] = {}
    for line in out.splitlines():
        status, _, rest = line.partition("\t")
        name, _, version = rest.partition("\t")
        if status.startswith("ii") and name:
            packages[name] = version
    return dict(sorted(packages.items()))


# --------------------------------------------------------------------------- manifest


def read_manifest(name: str) -> ImageInfo | None:
    """The manifest of a built image, or None if there is none (or it is unreadable)."""
    path = image_dir(name) / "manifest.json"
    try:
        return ImageInfo.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def up_to_date(request: BuildRequest) -> ImageInfo | None:
    """The existing image if it was built for the same suite and extra package set."""
    info = read_manifest(request.name)
    if info is None or not (image_dir(request.name) / "rootfs" / "usr" / "bin").is_dir():
        return None
    if info.suite != request.suite or sorted(info.extra_packages) != list(request.packages):
        return None
    if not info.digest or any(pkg not in info.packages for pkg in request.include):
        return None
    return info


# --------------------------------------------------------------------------- debootstrap


def _debootstrap_path() -> str:
    found = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.access(p, os.X_OK)),
        None,
    )
    if found is None:
        raise ImageBuildError("debootstrap is not installed",
                              hint="apt-get install debootstrap")
    return found


def _check_root() -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building an image needs root: debootstrap creates device nodes, sets file "
            "owners and chroots into the new tree",
            hint=f"run it with sudo: sudo env CELLBLOCK_HOME={cellblock_home()} "
                 f"{shutil.which('cellblock') or 'cellblock'} image build",
        )


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop debootstrap and everything it started (dpkg, chroot'ed maintainer scripts)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            break
    # The leader is gone; children it left in the group (dpkg, maintainer scripts) must not
    # keep writing into the tree we are about to delete.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _run_debootstrap(request: BuildRequest, rootfs: Path, progress: BuildProgress) -> None:
    cmd = [_debootstrap_path(), "--variant=minbase", f"--include={','.join(request.include)}",
           request.suite, str(rootfs)]
    if request.mirror:
        cmd.append(request.mirror)
    env = {**os.environ, "LC_ALL": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    tail: deque[str] = deque(maxlen=25)
    progress.update("Starting", " ".join(cmd[1:3]))
    # New session: a Ctrl-C on the terminal reaches only us; we then stop debootstrap's
    # whole group before removing its half-built target.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env, start_new_session=True)
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            parsed = parse_debootstrap_line(line)
            if parsed:
                progress.update(*parsed)
            elif line.startswith(("W: ", "E: ")):
                progress.log(f"[yellow]{escape(line)}[/]")
        rc = proc.wait()
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
    if rc == 0:
        return
    log_tail: list[str] = []
    log_file = rootfs / "debootstrap" / "debootstrap.log"
    with contextlib.suppress(OSError):
        log_tail = log_file.read_text(errors="replace").splitlines()[-20:]
    text = "\n".join(tail)
    detail = "debootstrap output:\n" + text
    if log_tail:
        detail += "\ndebootstrap.log (last lines):\n" + "\n".join(log_tail)
    if _NETWORK_FAILURE.search(text + "\n".join(log_tail)):
        mirror = request.mirror or "debootstrap's default mirror"
        raise ImageBuildError(
            f"debootstrap could not download from {mirror}",
            detail=detail,
            hint="check network access to the Debian mirror, or pass --mirror URL",
        )
    raise ImageBuildError(f"debootstrap failed with exit code {rc}", detail=detail,
                          hint="see the debootstrap output in the detail above")


def blocked_ancestor(path: Path) -> Path | None:
    """The first directory above ``path`` that other users cannot traverse, if any.

    Sandboxes run under an unprivileged host uid: an image below a 0700 directory (root's
    home, a private ~/.cache) exists but cannot be mounted by them.
    """
    for parent in reversed(path.resolve().parents):
        try:
            mode = parent.stat().st_mode
        except OSError:
            return parent
        if not mode & stat.S_IXOTH:
            return parent
    return None


def _ensure_home_dirs() -> Path:
    """Create cellblock's home and images dir as 0755: sandboxes' uid must traverse them."""
    images = cellblock_home() / "images"
    for d in (cellblock_home(), images):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)  # noqa: S103 - sandboxes' unprivileged uid traverses it
    return images


@contextlib.contextmanager
def _build_lock(images: Path) -> Iterator[None]:
    """Serialise builds on this host; the lock dies with the process, so never goes stale."""
    fd = os.open(images, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_stale_staging(images: Path) -> None:
    """Staging dirs of builds that were SIGKILLed (only called while holding the lock)."""
    for stale in sorted(images.glob(".*.build-*")):
        remove_tree(stale)


def _build_rootfs(request: BuildRequest, progress: BuildProgress) -> tuple[ImageInfo, bool]:
    _debootstrap_path()
    _check_root()
    images = _ensure_home_dirs()
    with _build_lock(images):
        # A concurrent build of the same image may have finished while we waited.
        existing = None if request.force else up_to_date(request)
        if existing is not None:
            return existing, False
        _remove_stale_staging(images)
        return _build_rootfs_locked(request, progress, images), True


def _build_rootfs_locked(request: BuildRequest, progress: BuildProgress,
                         images: Path) -> ImageInfo:
    staging = Path(tempfile.mkdtemp(prefix=f".{request.name}.build-", dir=images))
    try:
        os.chmod(staging, 0o755)  # noqa: S103 - becomes images/<name>
        rootfs = staging / "rootfs"
        _run_debootstrap(request, rootfs, progress)
        if not (rootfs / "usr/bin/python3").exists():
            raise ImageBuildError("debootstrap finished but python3 is missing in the tree",
                                  detail=str(rootfs))
        progress.update("Finishing", "reading package list")
        packages = dpkg_packages(rootfs)
        epoch = source_date_epoch(rootfs)
        progress.update("Finishing", "trimming and hardening the tree")
        harden_tree(rootfs, epoch)
        progress.update("Finishing", "computing the digest")
        info = ImageInfo(
            name=request.name,
            suite=request.suite,
            packages=packages,
            extra_packages=list(request.packages),
            digest=tree_digest(rootfs),
            built_at=datetime.now(UTC).isoformat(timespec="seconds"),
            size_bytes=tree_size(rootfs),
        )
        manifest = staging / "manifest.json"
        manifest.write_text(info.model_dump_json(indent=2) + "\n")
        os.chmod(manifest, 0o644)
        if mounts_under(staging):
            raise ImageBuildError("debootstrap left filesystems mounted in the new tree",
                                  detail=", ".join(map(str, mounts_under(staging))))
        _swap_into_place(staging, image_dir(request.name))
        os.chmod(image_dir(request.name), 0o755)  # noqa: S103
        blocked = blocked_ancestor(images)
        if blocked is not None:
            progress.log(escape(f"warning: {blocked} is not searchable by other users: "
                                "sandboxes under an unprivileged uid cannot reach this "
                                f"image (chmod o+x {blocked}, or set CELLBLOCK_HOME "
                                "elsewhere)"))
        return info
    finally:
        # On success this is the previous image (or nothing); on failure the half-built one.
        remove_tree(staging)


# --------------------------------------------------------------------------- docker


def docker_client(timeout: int = 300) -> Any:
    try:
        # Imported here: building a rootfs without --docker must not need the Docker SDK.
        import docker
        from docker.errors import DockerException
    except ImportError as exc:  # pragma: no cover - docker is a core dependency
        raise SandboxUnavailable("the Docker SDK is not installed",
                                 hint="pip install docker") from exc
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise SandboxUnavailable(
            "the Docker daemon is not reachable",
            detail=str(exc),
            hint="install and start it: apt-get install docker.io && dockerd & "
                 "(or systemctl start docker); check DOCKER_HOST",
        ) from exc
    return client


class _Sink:
    """A write-only file for tarfile's stream mode; the generator drains it per member."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


def tar_stream(rootfs: Path) -> Iterator[bytes]:
    """The tree as an uncompressed tar, generated while it is read: no temporary tar file.

    Owner names are dropped so Docker uses the numeric ids of the image, not the host's
    name-to-id mapping. Hard links stay hard links.
    """
    sink = _Sink()
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for rel, _ in sorted(_walk(rootfs), key=lambda item: os.fsencode(item[0])):
            full = os.path.join(rootfs, rel)
            info = tar.gettarinfo(full, arcname=rel)
            info.uname = info.gname = ""
            if info.isreg():
                with open(full, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
            chunk = sink.drain()
            if chunk:
                yield chunk
    chunk = sink.drain()
    if chunk:
        yield chunk


def docker_image_present(info: ImageInfo, client: Any | None = None) -> bool:
    """Whether the Docker daemon already has an image built from this exact tree."""
    client = client or docker_client(timeout=10)
    found = client.images.list(filters={"label": f"{DIGEST_LABEL}={info.digest}"})
    return bool(found)


def import_to_docker(info: ImageInfo, progress: BuildProgress | None = None) -> str:
    """Import the image's tree as :func:`docker_tag` (skipped if already there); its id."""
    progress = progress or SilentProgress()
    rootfs = image_dir(info.name) / "rootfs"
    client = docker_client()
    tag = docker_tag(info.name)
    repo, _, version = tag.rpartition(":")
    found = client.images.list(filters={"label": f"{DIGEST_LABEL}={info.digest}"})
    if found:
        image = found[0]
        if tag not in image.tags:
            image.tag(repo, version)
        progress.log(f"docker image {tag} is up to date")
        return str(image.id)
    progress.update("Docker", f"importing {tag}")
    changes = [
        "USER 1000",
        "WORKDIR /work",
        "ENV PATH=/usr/local/bin:/usr/bin:/bin",
        f"LABEL {DIGEST_LABEL}={info.digest}",
        f"LABEL cellblock.image={info.name}",
    ]
    from docker.errors import DockerException

    try:
        out = client.api.import_image(src=tar_stream(rootfs), repository=repo, tag=version,
                                      changes=changes, stream_src=True)
        image = client.images.get(tag)
    except DockerException as exc:
        raise SandboxUnavailable("importing the image into Docker failed", detail=str(exc),
                                 hint="check `docker info` and the daemon's log") from exc
    if "errorDetail" in str(out) or image.labels.get(DIGEST_LABEL) != info.digest:
        raise SandboxUnavailable("importing the image into Docker failed", detail=str(out)[-2000:])
    return str(image.id)


# --------------------------------------------------------------------------- entry point


def build(request: BuildRequest, progress: BuildProgress | None = None) -> tuple[ImageInfo, bool]:
    """Build (or keep) the image ``request`` describes; (manifest, whether it was rebuilt)."""
    progress = progress or SilentProgress()
    existing = None if request.force else up_to_date(request)
    info, built = (existing, False) if existing is not None else _build_rootfs(request, progress)
    if request.docker:
        import_to_docker(info, progress)
    return info, built


def build_image(
    name: str = DEFAULT_IMAGE,
    packages: Sequence[str] = (),
    *,
    suite: str = "bookworm",
    mirror: str | None = None,
    docker: bool = False,
    force: bool = False,
    progress: bool = True,
) -> ImageInfo:
    """Build root filesystem ``name`` unless an up-to-date one exists; return its manifest.

    Raises :class:`ImageBuildError` (debootstrap missing, not root, mirror unreachable,
    ...) and, with ``docker=True``, :class:`~cellblock.errors.SandboxUnavailable` when the
    Docker daemon cannot be reached.
    """
    request = BuildRequest(name=name, packages=tuple(packages), suite=suite, mirror=mirror,
                           docker=docker, force=force)
    if not progress:
        return build(request)[0]
    with RichProgress() as bar:
        return build(request, bar)[0]
