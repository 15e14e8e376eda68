"""One cgroup per sandbox call: exact memory and pids limits for the whole process tree.

Supports the unified hierarchy (cgroup v2) and the legacy one (v1 ``memory`` and ``pids``
controllers), since both are common on the hosts cellblock runs on. A cgroup is only
usable when we can create directories in it, i.e. as root or under a delegated subtree;
otherwise the caller falls back to rlimits and says so in the result.

Why a cgroup and not only rlimits: RLIMIT_AS is per process (a tree of processes gets
N times the limit) and RLIMIT_NPROC counts every process of the host uid. A cgroup
caps the sum over the tree, counts tmpfs pages, and reports when a limit fired.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import time
from abc import ABC, abstractmethod
from pathlib import Path

__all__ = ["CgroupManager", "RunCgroup", "detect_cgroups"]

log = logging.getLogger("cellblock.bwrap")

_PARENT = "cellblock"
_CGROOT = Path("/sys/fs/cgroup")


class RunCgroup(ABC):
    """The cgroup(s) of one sandbox call."""

    @abstractmethod
    def add(self, pid: int) -> None:
        """Move ``pid`` (and its future children) into the cgroup."""

    @abstractmethod
    def limits_hit(self) -> set[str]:
        """Which limits fired so far: a subset of {"memory", "pids"}."""

    @abstractmethod
    def pids(self) -> list[int]:
        """Processes still in the cgroup."""

    @abstractmethod
    def remove(self) -> None:
        """Kill anything left and delete the cgroup. Idempotent; never raises."""

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup (best effort, repeated until empty)."""
        for _ in range(100):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)


class CgroupManager(ABC):
    """Creates per-call cgroups under a ``cellblock`` parent."""

    version: str

    @abstractmethod
    def create(self, name: str, memory_bytes: int, max_pids: int) -> RunCgroup: ...

    @abstractmethod
    def reap_stale(self) -> None:
        """Remove empty per-call cgroups left by a process that died mid-call."""


# Plain os-level I/O on string paths: these run several times per sandbox call, and
# pathlib's object churn showed up in profiles.


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, 65536).decode()
    except OSError:
        return ""
    finally:
        os.close(fd)


def _read_kv(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in _read(path).splitlines():
        key, _, val = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[key] = int(val)
    return out


def _rmdir_when_empty(path: str) -> None:
    # The kernel frees a cgroup asynchronously after its last process is reaped.
    for _ in range(200):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                log.warning("cannot remove cgroup %s: %s", path, exc)
                return
            time.sleep(0.005)
    log.warning("cgroup %s still busy; left for reap_stale", path)


def _read_procs(path: str) -> list[int]:
    try:
        return [int(x) for x in _read(f"{path}/cgroup.procs").split()]
    except ValueError:
        return []


# -- cgroup v2 -------------------------------------------------------------------------


class _V2Run(RunCgroup):
    def __init__(self, path: str) -> None:
        self.path = path

    def add(self, pid: int) -> None:
        _write(f"{self.path}/cgroup.procs", str(pid))

    def limits_hit(self) -> set[str]:
        hit: set[str] = set()
        if _read_kv(f"{self.path}/memory.events").get("oom_kill", 0) > 0:
            hit.add("memory")
        if _read_kv(f"{self.path}/pids.events").get("max", 0) > 0:
            hit.add("pids")
        return hit

    def pids(self) -> list[int]:
        return _read_procs(self.path)

    def kill_all(self) -> None:
        try:
            _write(f"{self.path}/cgroup.kill", "1")  # atomic, kernel >= 5.14
        except OSError:
            super().kill_all()

    def remove(self) -> None:
        if os.path.exists(self.path):
            if self.pids():
                self.kill_all()
            _rmdir_when_empty(self.path)


class _V2Manager(CgroupManager):
    version = "v2"

    def __init__(self, parent: Path) -> None:
        self.parent = parent

    def create(self, name: str, memory_bytes: int, max_pids: int) -> RunCgroup:
        path = f"{self.parent}/{name}"
        os.mkdir(path)
        run = _V2Run(path)
        try:
            _write(f"{path}/memory.max", str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):  # no swap accounting
                _write(f"{path}/memory.swap.max", "0")
            _write(f"{path}/pids.max", str(max_pids))
        except OSError:
            run.remove()
            raise
        return run

    def reap_stale(self) -> None:
        _reap_stale(self.parent)


def _reap_stale(parent: Path) -> None:
    for child in parent.iterdir():
        if child.is_dir() and not _read_procs(str(child)):
            with contextlib.suppress(OSError):
                child.rmdir()


# -- cgroup v1 -------------------------------------------------------------------------


class _V1Run(RunCgroup):
    def __init__(self, memory: str, pids_dir: str) -> None:
        self.memory = memory
        self.pids_dir = pids_dir

    def add(self, pid: int) -> None:
        _write(f"{self.memory}/cgroup.procs", str(pid))
        _write(f"{self.pids_dir}/cgroup.procs", str(pid))

    def limits_hit(self) -> set[str]:
        hit: set[str] = set()
        if _read_kv(f"{self.memory}/memory.oom_control").get("oom_kill", 0) > 0:
            hit.add("memory")
        if _read_kv(f"{self.pids_dir}/pids.events").get("max", 0) > 0:
            hit.add("pids")
        return hit

    def pids(self) -> list[int]:
        return sorted(set(_read_procs(self.memory)) | set(_read_procs(self.pids_dir)))

    def remove(self) -> None:
        if os.path.exists(self.memory) or os.path.exists(self.pids_dir):
            if self.pids():
                self.kill_all()
            _rmdir_when_empty(self.memory)
            _rmdir_when_empty(self.pids_dir)


class _V1Manager(CgroupManager):
    version = "v1"

    def __init__(self, memory_parent: Path, pids_parent: Path) -> None:
        self.memory_parent = memory_parent
        self.pids_parent = pids_parent

    def create(self, name: str, memory_bytes: int, max_pids: int) -> RunCgroup:
        mem = f"{self.memory_parent}/{name}"
        pid_dir = f"{self.pids_parent}/{name}"
        os.mkdir(mem)
        try:
            os.mkdir(pid_dir)
        except OSError:
            os.rmdir(mem)
            raise
        run = _V1Run(mem, pid_dir)
        try:
            _write(f"{mem}/memory.limit_in_bytes", str(memory_bytes))
            # RAM + swap equal to RAM: the sandbox cannot page out to escape the limit.
            with contextlib.suppress(FileNotFoundError):
                _write(f"{mem}/memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(f"{pid_dir}/pids.max", str(max_pids))
        except OSError:
            run.remove()
            raise
        return run

    def reap_stale(self) -> None:
        _reap_stale(self.memory_parent)
        _reap_stale(self.pids_parent)


def detect_cgroups(root: Path = _CGROOT) -> CgroupManager | None:
    """A manager for this host's cgroups, or None when we cannot create cgroups here."""
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError:
        controllers = []
    if {"memory", "pids"} <= set(controllers):
        try:
            parent = root / _PARENT
            parent.mkdir(exist_ok=True)
            # Controllers must be enabled on every ancestor's subtree_control.
            _write(f"{root}/cgroup.subtree_control", "+memory +pids")
            _write(f"{parent}/cgroup.subtree_control", "+memory +pids")
            return _V2Manager(parent)
        except OSError as exc:
            log.debug("cgroup v2 not usable: %s", exc)
            return None
    mem_root, pids_root = root / "memory", root / "pids"
    if (mem_root / "memory.limit_in_bytes").exists() and (pids_root / "cgroup.procs").exists():
        try:
            mem_parent, pids_parent = mem_root / _PARENT, pids_root / _PARENT
            mem_parent.mkdir(exist_ok=True)
            pids_parent.mkdir(exist_ok=True)
            probe = mem_parent / f".probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
            return _V1Manager(mem_parent, pids_parent)
        except OSError as exc:
            log.debug("cgroup v1 not usable: %s", exc)
            return None
    return None
