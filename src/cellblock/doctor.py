"""``cellblock doctor``: what this host can enforce, and how to fix what it cannot.

Each check returns a :class:`~cellblock.backends.base.HostCheck` (``ok`` / ``warn`` /
``fail`` with a fix). Checks run real commands (``bwrap``, ``unshare``) the way sandboxes
do: as an unprivileged uid, because that is what sandboxes run under and what root would
otherwise hide (root can create namespaces that an unprivileged uid cannot).

A check never raises: a crash inside one (a backend's ``host_checks`` included) becomes a
``fail`` line naming the error, so the report is always complete.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cellblock.backends import available_backends, get_backend_class
from cellblock.backends.base import HostCheck
from cellblock.errors import CellblockError
from cellblock.images.build import blocked_ancestor
from cellblock.images.store import (
    DEFAULT_IMAGE,
    docker_tag,
    image_dir,
    list_images,
    require_rootfs,
)

__all__ = [
    "BWRAP_CHECKS",
    "BWRAP_MIN_VERSION",
    "BWRAP_REQUIRED_OPTIONS",
    "bwrap_works",
    "check_backends",
    "check_bwrap",
    "check_bwrap_sandbox",
    "check_cgroups",
    "check_debootstrap",
    "check_default_image",
    "check_docker",
    "check_seccomp",
    "check_userns",
    "render_report",
    "report_json",
    "run_checks",
]

BWRAP_MIN_VERSION = (0, 8)
BWRAP_REQUIRED_OPTIONS = ("--disable-userns", "--json-status-fd", "--block-fd")
BWRAP_CHECKS = ("bwrap", "bwrap sandbox")
"""The checks that decide the exit code: bwrap is the backend that must always work."""
NOBODY = 65534
_BUG = "a bug in this check: report it with the detail shown"
_TIMEOUT = 20.0


def _as_unprivileged(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` as the unprivileged ``nobody`` uid when we are root, else as ourselves."""
    kwargs: dict[str, Any] = {}
    if os.geteuid() == 0:
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT, check=False,
                          cwd="/", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, **kwargs)


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_bwrap() -> HostCheck:
    """bubblewrap installed, >= 0.8, with the options the bwrap backend relies on."""
    fix = "apt-get install bubblewrap (0.8 or newer: Debian 12, Ubuntu 24.04)"
    path = shutil.which("bwrap")
    if path is None:
        return HostCheck("bwrap", "fail", "bubblewrap (bwrap) is not installed", fix)
    try:
        version_out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     timeout=_TIMEOUT, check=False).stdout
        help_out = subprocess.run([path, "--help"], capture_output=True, text=True,
                                  timeout=_TIMEOUT, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostCheck("bwrap", "fail", f"{path} does not run: {exc}", fix)
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version_out)
    if not match:
        return HostCheck("bwrap", "fail", f"cannot read the version of {path}", fix)
    version = (int(match.group(1)), int(match.group(2)))
    shown = match.group(0)
    if version < BWRAP_MIN_VERSION:
        return HostCheck("bwrap", "fail", f"bwrap {shown} is older than 0.8", fix)
    missing = [opt for opt in BWRAP_REQUIRED_OPTIONS if opt not in help_out]
    if missing:
        return HostCheck("bwrap", "fail", f"bwrap {shown} lacks {', '.join(missing)}", fix)
    return HostCheck("bwrap", "ok", f"bwrap {shown} at {path}")


def check_bwrap_sandbox() -> HostCheck:
    """bwrap can actually build a sandbox with every namespace, as an unprivileged uid."""
    path = shutil.which("bwrap")
    if path is None:
        return HostCheck("bwrap sandbox", "fail", "bwrap is not installed",
                         "apt-get install bubblewrap")
    cmd = [path, "--unshare-all", "--die-with-parent", "--new-session",
           "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
           "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
           "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        proc = _as_unprivileged(cmd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostCheck("bwrap sandbox", "fail", f"bwrap did not run: {exc}",
                         "reinstall bubblewrap: apt-get install --reinstall bubblewrap")
    if proc.returncode == 0:
        return HostCheck("bwrap sandbox", "ok",
                         "an unprivileged uid can create a sandbox with all namespaces")
    return HostCheck(
        "bwrap sandbox", "fail", f"bwrap --unshare-all failed: {_short(proc.stderr)}",
        "enable unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1 "
        "user.max_user_namespaces=15000 (and, on Ubuntu 24.04+, "
        "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)",
    )


def check_userns() -> HostCheck:
    """Unprivileged user namespaces (``unshare -Ur true`` as an unprivileged uid)."""
    fix = ("sysctl -w kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000; "
           "in a container, run it with a seccomp profile that allows unshare/clone")
    unshare = _which("unshare")
    if unshare is None:
        return HostCheck("user namespaces", "warn", "unshare(1) is missing, cannot test",
                         "apt-get install util-linux")
    try:
        proc = _as_unprivileged([unshare, "-Ur", "true"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostCheck("user namespaces", "fail", f"unshare did not run: {exc}", fix)
    if proc.returncode == 0:
        return HostCheck("user namespaces", "ok", "unprivileged user namespaces work")
    return HostCheck("user namespaces", "fail",
                     f"unshare -Ur failed as uid {NOBODY}: {_short(proc.stderr)}", fix)


def _cgroup_fs_type(path: Path) -> str | None:
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[1] == str(path):
                return fields[2]
    except OSError:
        return None
    return None


_NOT_ROOT_FIX = ("run cellblock as root (it creates a cgroup per call), or accept weaker "
                 "per-process rlimits with Policy(unsafe_allow_missing={'cgroups'})")


def check_cgroups(root: Path = Path("/sys/fs/cgroup")) -> HostCheck:
    """cgroup v2 with memory+pids, or writable v1 memory and pids hierarchies."""
    fix_v2 = ("mount cgroup2 at /sys/fs/cgroup (systemd.unified_cgroup_hierarchy=1) and "
              "enable memory and pids in cgroup.subtree_control; under Docker, run with "
              "--cgroupns=host or delegate a writable subtree")
    fs_type = _cgroup_fs_type(root)
    controllers_file = root / "cgroup.controllers"
    if fs_type == "cgroup2" or controllers_file.exists():
        try:
            controllers = set(controllers_file.read_text().split())
        except OSError as exc:
            return HostCheck("cgroups", "fail", f"cgroup v2: cannot read controllers: {exc}",
                             fix_v2)
        missing = {"memory", "pids"} - controllers
        if missing:
            return HostCheck("cgroups", "fail",
                             f"cgroup v2 without {', '.join(sorted(missing))} controller",
                             fix_v2)
        if not os.access(root, os.W_OK) or os.geteuid() != 0:
            return HostCheck("cgroups", "fail",
                             "cgroup v2 with memory+pids, but cellblock is not root: the "
                             "bwrap backend refuses to run (no per-sandbox memory and pids "
                             "limits)", _NOT_ROOT_FIX)
        return HostCheck("cgroups", "ok", "cgroup v2 (unified) with memory and pids")
    v1 = {name: root / name for name in ("memory", "pids")}
    absent = [n for n, p in v1.items() if not p.is_dir()]
    if absent:
        return HostCheck("cgroups", "fail",
                         f"no cgroup v2, and cgroup v1 lacks {', '.join(absent)}", fix_v2)
    readonly = [n for n, p in v1.items() if not os.access(p, os.W_OK)]
    if readonly or os.geteuid() != 0:
        what = f"{', '.join(readonly)} hierarchy not writable" if readonly else "not root"
        return HostCheck("cgroups", "fail",
                         f"cgroup v1: {what}: the bwrap backend refuses to run (no "
                         "per-sandbox memory and pids limits)", _NOT_ROOT_FIX)
    hybrid = " (hybrid: v2 also at unified/)" if (root / "unified").is_dir() else ""
    return HostCheck("cgroups", "ok", f"cgroup v1 with writable memory and pids{hybrid}")


def check_seccomp() -> HostCheck:
    """The kernel filters syscalls and libseccomp.so.2 can be loaded."""
    fix = "apt-get install libseccomp2"
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    if "Seccomp:" not in status:
        return HostCheck("seccomp", "fail", "the kernel has no seccomp support",
                         "use a kernel built with CONFIG_SECCOMP_FILTER")
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return HostCheck("seccomp", "fail", "libseccomp is not installed", fix)
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        return HostCheck("seccomp", "fail", f"cannot load {name}: {exc}", fix)
    version = ""
    get_version = getattr(lib, "seccomp_version", None)
    if get_version is not None:
        get_version.restype = ctypes.POINTER(ctypes.c_uint * 3)
        v = get_version().contents
        version = f" {v[0]}.{v[1]}.{v[2]}"
    return HostCheck("seccomp", "ok", f"{name}{version} loads; kernel filters syscalls")


def check_debootstrap() -> HostCheck:
    path = _which("debootstrap")
    if path is None:
        return HostCheck("debootstrap", "warn",
                         "debootstrap is missing: images cannot be built here",
                         "apt-get install debootstrap")
    return HostCheck("debootstrap", "ok", path)


def check_default_image() -> HostCheck:
    try:
        require_rootfs(DEFAULT_IMAGE)
    except CellblockError as exc:
        return HostCheck("default image", "warn",
                         f"{exc.safe_message} (looked in {image_dir(DEFAULT_IMAGE)})",
                         exc.hint or "cellblock image build")
    blocked = blocked_ancestor(image_dir(DEFAULT_IMAGE))
    if blocked is not None:
        return HostCheck("default image", "warn",
                         f"built, but {blocked} is not searchable by other users: sandboxes "
                         "under an unprivileged uid cannot reach it",
                         f"chmod o+x {blocked}, or set CELLBLOCK_HOME to a shared path")
    info = next((i for i in list_images() if i.name == DEFAULT_IMAGE), None)
    digest = info.digest[:19] if info else "?"
    return HostCheck("default image", "ok", f"{image_dir(DEFAULT_IMAGE)} ({digest})")


def check_docker() -> list[HostCheck]:
    """Docker daemon reachable; runsc registered with --network=none and --oci-seccomp."""
    runsc_fix = ('add to /etc/docker/daemon.json: {"runtimes": {"runsc": {"path": '
                 '"/usr/bin/runsc", "runtimeArgs": ["--network=none", "--oci-seccomp"]}}}, '
                 "then kill -HUP the dockerd process")
    runsc_path = shutil.which("runsc")
    try:
        import docker

        client = docker.from_env(timeout=5)
        info: dict[str, Any] = client.info()
    except Exception as exc:
        checks = [HostCheck("docker", "warn",
                            f"Docker daemon not reachable: {_short(str(exc), 120)}",
                            "apt-get install docker.io, then start dockerd "
                            "(systemctl start docker); the docker/gvisor backends need it")]
        if runsc_path is None:
            checks.append(HostCheck("gvisor (runsc)", "warn", "runsc is not installed",
                                     "apt-get install runsc"))
        else:
            checks.append(HostCheck("gvisor (runsc)", "warn",
                                    f"{runsc_path} installed; cannot check registration "
                                    "without the daemon", runsc_fix))
        return checks
    checks = [HostCheck("docker", "ok", f"Docker {info.get('ServerVersion', '?')} reachable")]
    checks.append(_check_docker_image(client))
    runtimes: dict[str, Any] = info.get("Runtimes") or {}
    runsc = runtimes.get("runsc")
    if runsc_path is None and runsc is None:
        checks.append(HostCheck("gvisor (runsc)", "warn", "runsc is not installed",
                                "apt-get install runsc, then register it: " + runsc_fix))
    elif runsc is None:
        checks.append(HostCheck("gvisor (runsc)", "warn",
                                f"{runsc_path} installed but not a Docker runtime", runsc_fix))
    else:
        args = runsc.get("runtimeArgs") or runsc.get("args") or []
        if "--network=none" not in args:
            checks.append(HostCheck(
                "gvisor (runsc)", "warn",
                "runsc is registered without --network=none: --network none containers "
                "fail with 'cannot run with network enabled in root network namespace'",
                runsc_fix))
        elif "--oci-seccomp" not in args:
            checks.append(HostCheck(
                "gvisor (runsc)", "warn",
                "runsc is registered without --oci-seccomp: gVisor would ignore the seccomp "
                "profile, so the gvisor backend refuses to run", runsc_fix))
        else:
            checks.append(HostCheck("gvisor (runsc)", "ok",
                                    f"runtime runsc ({runsc.get('path', '?')}) "
                                    "--network=none --oci-seccomp"))
    return checks


def _check_docker_image(client: Any) -> HostCheck:
    """The default image's Docker mirror exists and was imported from the current tree."""
    name = "docker image"
    info = next((i for i in list_images() if i.name == DEFAULT_IMAGE), None)
    if info is None:
        return HostCheck(name, "warn", "no default root filesystem to mirror yet",
                         "cellblock image build --docker")
    found = client.images.list(filters={"label": f"cellblock.digest={info.digest}"})
    if not found:
        return HostCheck(name, "warn",
                         f"{docker_tag(DEFAULT_IMAGE)} is missing or older than the rootfs",
                         "cellblock image build --docker")
    return HostCheck(name, "ok", f"{docker_tag(DEFAULT_IMAGE)} matches the default rootfs")


def check_backends() -> list[HostCheck]:
    """Each registered backend's own ``host_checks()``, prefixed with its name."""
    checks: list[HostCheck] = []
    for name in available_backends():
        try:
            cls = get_backend_class(name)
        except CellblockError as exc:
            checks.append(HostCheck(f"{name} backend", "fail", exc.safe_message,
                                    exc.hint or "pip install the package that provides it"))
            continue
        except Exception as exc:
            checks.append(HostCheck(f"{name} backend", "fail",
                                    f"unavailable: {type(exc).__name__}: {_short(str(exc))}",
                                    "reinstall cellblock, or its extra for this backend"))
            continue
        try:
            own = cls.host_checks()
        except Exception as exc:
            checks.append(HostCheck(f"{name} backend", "fail",
                                    f"host_checks() raised {type(exc).__name__}: "
                                    f"{_short(str(exc))}", _BUG))
            continue
        if not own:
            checks.append(HostCheck(f"{name} backend", "ok", "loads; no host checks of its own"))
        for c in own:
            # Some backends already name their checks "<backend>: ..."; do not say it twice.
            label = c.name if c.name.startswith(f"{name}:") else f"{name}: {c.name}"
            checks.append(HostCheck(label, c.status, c.detail, c.fix))
    return checks


def _safe(name: str, check: Callable[[], HostCheck | list[HostCheck]]) -> list[HostCheck]:
    try:
        result = check()
    except Exception as exc:
        return [HostCheck(name, "fail", f"check crashed: {type(exc).__name__}: {_short(str(exc))}",
                          _BUG)]
    return result if isinstance(result, list) else [result]


def run_checks(*, backends: bool = True) -> list[HostCheck]:
    """Every host check, in report order."""
    plan: list[tuple[str, Callable[[], HostCheck | list[HostCheck]]]] = [
        ("bwrap", check_bwrap),
        ("bwrap sandbox", check_bwrap_sandbox),
        ("user namespaces", check_userns),
        ("cgroups", check_cgroups),
        ("seccomp", check_seccomp),
        ("debootstrap", check_debootstrap),
        ("default image", check_default_image),
        ("docker", check_docker),
    ]
    if backends:
        plan.append(("backends", check_backends))
    checks: list[HostCheck] = []
    for name, check in plan:
        checks.extend(_safe(name, check))
    return checks


def bwrap_works(checks: list[HostCheck]) -> bool:
    """True when every bwrap check is present and ok: the exit-code criterion."""
    by_name = {c.name: c for c in checks}
    return all(name in by_name and by_name[name].status == "ok" for name in BWRAP_CHECKS)


_STYLE = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]fail[/]"}


def render_report(checks: list[HostCheck], console: Console) -> None:
    """The report as a rich table: check, status, what was found, how to fix it."""
    table = Table(title="cellblock doctor", show_lines=False)
    table.add_column("check", style="bold")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    table.add_column("fix", overflow="fold")
    for c in checks:
        table.add_row(c.name, _STYLE[c.status], c.detail, c.fix or "")
    console.print(table)
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail")}
    verdict = ("bwrap sandboxes work on this host" if bwrap_works(checks)
               else "bwrap sandboxes do NOT work on this host")
    console.print(f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail: {verdict}")


def report_json(checks: list[HostCheck]) -> dict[str, Any]:
    """The report as JSON-ready data (``cellblock doctor --json``)."""
    return {"bwrap_works": bwrap_works(checks), "checks": [asdict(c) for c in checks]}
