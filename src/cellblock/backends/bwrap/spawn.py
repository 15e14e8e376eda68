"""One bubblewrap sandbox, from spawn to teardown.

Life of one sandbox::

    spawn():  prlimit -> bwrap (as an unprivileged, per-sandbox host uid)
              bwrap builds the namespaces, reports the sandbox's pid on --info-fd and
              then blocks, inside its mount setup, reading the program's code from a pipe
              we hold. We move that pid into a fresh cgroup while it waits.
    start():  we write the code and close the pipe: bwrap finishes the mounts, applies
              seccomp, drops to uid 1000 and runs the program. The clock starts.
    supervise(): read stdout/stderr with caps, watch the clock and the cgroup's limit
              events; on any limit, kill.
    destroy(): SIGKILL the pid-namespace init (the kernel then kills every process in the
              namespace, whatever it did to daemonise), reap bwrap, check the cgroup is
              empty, hand the empty cgroup to the reaper for rmdir.

Why block on the code pipe: moving a process into a cgroup does not move children it
already has, and on cgroup v1 a move costs an RCU grace period (~10 ms). Blocking bwrap
before it forks the program means the program and everything it spawns start inside the
cgroup with no window for a fork to escape, and it lets the pool do the slow part
(spawn + cgroup move) before a call arrives. A spawned sandbox that has not been started
has never run any code: it is "created but never used", and is used at most once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import queue
import secrets
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cellblock.backends.base import (
    CODE_DIR,
    CODE_FILENAMES,
    SANDBOX_ENV,
    CancelToken,
    RawOutcome,
)
from cellblock.backends.bwrap.cgroups import CgroupManager, RunCgroup
from cellblock.backends.bwrap.launcher import LaunchedProcess, Launcher
from cellblock.errors import ProtectionUnavailable, SandboxUnavailable
from cellblock.policy import Language
from cellblock.result import KilledReason, LimitsEnforcement

__all__ = ["PreparedSandbox", "SpawnConfig", "SpawnKey"]

log = logging.getLogger("cellblock.bwrap")

SANDBOX_UID = 1000
SANDBOX_HOSTNAME = "sandbox"
INTERPRETERS: Mapping[Language, tuple[str, ...]] = {"python": ("python3",), "bash": ("bash",)}
# Per-sandbox host uids when cellblock runs as root: a sandbox that somehow reached the
# host would be an unprivileged uid that owns nothing and differs from every other one.
_HOST_UID_BASE = 1_500_000_000
_HOST_UID_SPAN = 100_000_000
_SETUP_TIMEOUT_S = 15.0
_TICK_S = 0.05
_READ_CHUNK = 65536
_PIPE_BUF = 65536
KILL_EXIT = 128 + signal.SIGKILL


@dataclass(frozen=True, slots=True)
class SpawnKey:
    """Everything fixed at spawn time. Sandboxes with equal keys are interchangeable."""

    language: Language
    scratch_mb: int
    memory_mb: int
    max_pids: int
    env: tuple[tuple[str, str], ...]
    seccomp: bool
    rlimit_fallback: bool = False
    """The policy opted out of cgroups: when no cgroup can be created, fall back to
    rlimits instead of refusing the call."""


@dataclass(frozen=True, slots=True)
class SpawnConfig:
    """Host-side facts shared by every sandbox of one backend instance."""

    bwrap: str
    rootfs: Path
    nofile: int
    seccomp_program: bytes | None
    cgroups: CgroupManager | None
    reaper: Reaper
    launcher: Launcher
    hide_host_proc: bool = True
    """Fixed or empty views of the host-wide files in /proc (see :func:`proc_views`)."""


# Host-wide /proc readers are a covert channel between concurrent sandboxes: a sender
# that burns CPU shows up in every other sandbox's /proc/stat (20 bit/s error-free in
# bench/covert_timing.py before this). Each sandbox gets fixed views instead: an idle
# machine with the sandbox's own memory limit, and empty files for the rest.
_PROC_EMPTY = ("vmstat", "schedstat", "softirqs", "interrupts", "diskstats", "zoneinfo",
               "buddyinfo", "pagetypeinfo", "locks")  # slabinfo: root-only already
# /proc/sys holds host-wide counters too (fs/file-nr, fs/inode-nr, fs/dentry-state,
# fs/aio-nr, kernel/pty/nr: a sender opening files moves them), and a sandbox has no
# use for kernel tunables: one empty tmpfs hides them all.
_PROC_HIDDEN_DIRS = ("pressure", "sys")


@functools.lru_cache(maxsize=64)
def proc_views(memory_mb: int) -> dict[str, bytes]:
    """Fixed contents for host-wide files under /proc (path below /proc -> content)."""
    cpus = len(os.sched_getaffinity(0))
    zeros = " 0" * 10
    stat = [f"cpu {zeros}"] + [f"cpu{i}{zeros}" for i in range(cpus)]
    stat += ["intr 0", "ctxt 0", "btime 0", "processes 1", "procs_running 1",
             "procs_blocked 0", "softirq 0"]
    kb = memory_mb * 1024
    meminfo = "".join(f"{name + ':':<16}{value:>8} kB\n" for name, value in (
        ("MemTotal", kb), ("MemFree", kb), ("MemAvailable", kb), ("Buffers", 0),
        ("Cached", 0), ("SwapTotal", 0), ("SwapFree", 0), ("Shmem", 0)))
    views = {"stat": ("\n".join(stat) + "\n").encode(),
             "loadavg": b"0.00 0.00 0.00 1/1 1\n",
             # The second field is the host's idle CPU time: a CPU channel too.
             "uptime": b"0.00 0.00\n",
             "meminfo": meminfo.encode()}
    return {name: content for name, content in views.items()
            if os.path.exists(f"/proc/{name}")}


@functools.lru_cache(maxsize=1)
def _proc_masks() -> tuple[list[str], list[str]]:
    """(files masked with /dev/null, directories hidden under an empty tmpfs), for the
    ones this host's /proc has."""
    files = [f"/proc/{n}" for n in _PROC_EMPTY if os.path.exists(f"/proc/{n}")]
    dirs = [f"/proc/{n}" for n in _PROC_HIDDEN_DIRS if os.path.isdir(f"/proc/{n}")]
    return files, dirs


def cgroups_unavailable(detail: str) -> ProtectionUnavailable:
    """The error for a call whose memory and pids limits cannot be enforced per sandbox."""
    return ProtectionUnavailable(
        "cgroups",
        detail=detail,
        hint="run cellblock as root so that it can create a cgroup per call, or accept "
        "weaker per-process limits with Policy(unsafe_allow_missing={'cgroups'})",
    )


_NPROC_SLACK = 64
"""Headroom over the user's current process count for a non-root sandbox's RLIMIT_NPROC:
bwrap and its namespace init, and other sandboxes (pool refills) starting meanwhile."""
_rlimit_warned = threading.Event()


def _warn_rlimits_once(why: str) -> None:
    if not _rlimit_warned.is_set():
        _rlimit_warned.set()
        log.warning("%s; memory and pids limits fall back to rlimits (the policy opted out "
                    "of cgroups)", why)


def _processes_of(uid: int) -> int:
    """How many processes (zombies included: they count for RLIMIT_NPROC) ``uid`` has."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:  # exited meanwhile
                continue
    return count


class Reaper:
    """Removes empty cgroups off the hot path (the kernel frees a cgroup asynchronously
    after its last process is reaped, so rmdir can need a few retries)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[RunCgroup | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, cgroup: RunCgroup) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="cellblock-reaper", daemon=True
                )
                self._thread.start()
        self._queue.put(cgroup)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                item.remove()
            except Exception:  # never let one bad cgroup stop the reaper
                log.exception("failed to remove a cgroup")

    def drain(self) -> None:
        """Remove everything queued so far, synchronously (used on close)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item.remove()


class PreparedSandbox:
    """A spawned sandbox waiting for its code. Use once: start, supervise, destroy."""

    def __init__(self, config: SpawnConfig, key: SpawnKey, files: Mapping[str, bytes]) -> None:
        self.config = config
        self.key = key
        self.created = time.monotonic()
        self._fds: list[int] = []
        self.proc: LaunchedProcess | None = None
        self.cgroup: RunCgroup | None = None
        self.sandbox_pid: int | None = None
        self.enforcement: LimitsEnforcement = "rlimit"
        self._destroyed = False
        try:
            self._spawn(files)
        except BaseException:
            self.destroy()
            raise

    # -- file descriptors ---------------------------------------------------------------

    def _memfd(self, name: str, data: bytes) -> int:
        fd = os.memfd_create(f"cellblock-{name}", os.MFD_CLOEXEC)
        self._fds.append(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def _pipe(self) -> tuple[int, int]:
        r, w = os.pipe2(os.O_CLOEXEC)
        self._fds.extend((r, w))
        return r, w

    def _close(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.remove(fd)
            os.close(fd)

    # -- spawn --------------------------------------------------------------------------

    def _spawn(self, files: Mapping[str, bytes]) -> None:
        cfg, key = self.config, self.key
        scratch = str(key.scratch_mb * 1024 * 1024)
        code_path = f"{CODE_DIR}/{CODE_FILENAMES[key.language]}"
        # Descriptors the child gets, by the number it sees them under. bwrap's arguments
        # name those numbers, not ours.
        child_fds: dict[int, int] = {}

        def give(fd: int) -> str:
            number = 3 + len(child_fds)  # 0-2 (stdio) are added last
            child_fds[number] = fd
            return str(number)

        args = [
            cfg.bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", SANDBOX_HOSTNAME,
            "--ro-bind", str(cfg.rootfs), "/",
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", scratch, "--tmpfs", "/dev/shm",
            "--size", scratch, "--tmpfs", "/tmp",
            "--size", scratch, "--tmpfs", CODE_DIR,
        ]
        views = proc_views(key.memory_mb) if cfg.hide_host_proc else {}
        for name, content in views.items():
            args += ["--perms", "0444", "--ro-bind-data", give(self._memfd("proc", content)),
                     f"/proc/{name}"]
        masked_files, hidden_dirs = _proc_masks() if cfg.hide_host_proc else ([], [])
        for path in masked_files:
            # /dev/null over it, as Docker masks paths: reads are empty, writes vanish. A
            # dev-bind, because the sandbox's other mounts are nodev.
            args += ["--dev-bind", "/dev/null", path]
        for path in hidden_dirs:
            args += ["--perms", "0555", "--tmpfs", path]
        for fname, content in sorted(files.items()):
            fd = self._memfd("file", content)
            args += ["--perms", "0444", "--ro-bind-data", give(fd), f"{CODE_DIR}/{fname}"]
        # The code comes last through a pipe: bwrap blocks reading it (see module doc).
        code_r, self.code_w = self._pipe()
        args += ["--perms", "0444", "--ro-bind-data", give(code_r), code_path]
        if cfg.seccomp_program is not None:
            args += ["--seccomp", give(self._memfd("seccomp", cfg.seccomp_program))]
        info_r, info_w = self._pipe()
        self.status_r, status_w = self._pipe()
        args += ["--info-fd", give(info_w), "--json-status-fd", give(status_w)]
        args += ["--chdir", CODE_DIR, "--clearenv"]
        for name, value in (*SANDBOX_ENV.items(), *key.env):
            args += ["--setenv", name, value]
        args += ["--", *INTERPRETERS[key.language], code_path]

        stdin_r, self.stdin_w = self._pipe()
        self.out_r, out_w = self._pipe()
        self.err_r, err_w = self._pipe()
        child_fds.update({0: stdin_r, 1: out_w, 2: err_w})

        rlimits = self._limits()
        # A fresh unprivileged host uid per sandbox when we are root.
        uid = _HOST_UID_BASE + secrets.randbelow(_HOST_UID_SPAN) if os.geteuid() == 0 else None
        self.proc = cfg.launcher.spawn(args, child_fds, uid, rlimits)
        # Our copies of the child's ends must go, or we would never see EOF.
        for fd in child_fds.values():
            self._close(fd)

        info = self._read_info(info_r)
        self._close(info_r)
        if info is None:
            raise self._setup_failure("bwrap did not report the sandbox pid")
        self.sandbox_pid = info
        if self.cgroup is not None:
            try:
                self.cgroup.add(self.sandbox_pid)
            except ProcessLookupError as exc:
                # bwrap died during setup (bad mount, no permission): say why.
                raise self._setup_failure("bwrap exited during setup") from exc
            except OSError as exc:
                raise SandboxUnavailable(
                    detail=f"cannot move the sandbox into its cgroup: {exc}"
                ) from exc

    def _limits(self) -> dict[str, int]:
        """Create the cgroup; return the per-sandbox rlimits the launcher must add.

        The launcher itself always runs with RLIMIT_CORE=0 (no dump files, and
        core_pattern may pipe to a host program) and the configured RLIMIT_NOFILE, so
        every sandbox inherits those.
        """
        key = self.key
        mem = key.memory_mb * 1024 * 1024
        manager = self.config.cgroups
        failure = "no cgroup hierarchy this process can write to (not root)"
        if manager is not None:
            try:
                self.cgroup = manager.create(f"sb-{secrets.token_hex(8)}", mem, key.max_pids)
                self.enforcement = "cgroup"
                return {}
            except OSError as exc:
                failure = f"cgroup setup failed: {exc}"
        if not key.rlimit_fallback:
            raise cgroups_unavailable(failure)
        _warn_rlimits_once(failure)
        # Weaker (the policy opted out of cgroups): per-process address space, per-file
        # size (a memfd or tmpfs file is memory too), and a process count per host uid.
        # As root that uid is unique to the sandbox, so the count is exact. Otherwise it
        # is the user's own uid: the sandbox gets max_pids on top of the processes the
        # user has now, plus slack for other sandboxes starting meanwhile (approximate:
        # concurrent sandboxes of one user share the headroom).
        self.enforcement = "rlimit"
        nproc = key.max_pids
        if os.geteuid() != 0:
            nproc += _processes_of(os.getuid()) + _NPROC_SLACK
        return {"as": mem, "fsize": mem, "nproc": nproc}

    def _read_info(self, fd: int) -> int | None:
        buf = bytearray()
        deadline = time.monotonic() + _SETUP_TIMEOUT_S
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(deadline - time.monotonic()):
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                buf += chunk
                with contextlib.suppress(ValueError):
                    value = json.loads(buf)
                    if isinstance(value, dict) and "child-pid" in value:
                        return int(value["child-pid"])
        return None

    def _setup_failure(self, what: str) -> SandboxUnavailable:
        self._kill()
        detail = what
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            os.set_blocking(self.err_r, False)
            with contextlib.suppress(OSError):
                detail += ": " + os.read(self.err_r, 4096).decode(errors="replace").strip()
        low = detail.lower()
        if "resource temporarily unavailable" in low:
            # fork/clone refused by RLIMIT_NPROC: the host uid has too many processes.
            return SandboxUnavailable(
                detail=detail,
                hint="the host user has reached its process limit (ulimit -u)",
            )
        if "uid map" in low or "creating new namespace" in low:
            return ProtectionUnavailable(
                "user namespaces",
                detail=detail,
                hint="enable unprivileged user namespaces (sysctl user.max_user_namespaces=10000"
                " and, on Debian kernels, kernel.unprivileged_userns_clone=1)",
            )
        return SandboxUnavailable(detail=detail)

    @property
    def alive(self) -> bool:
        return not self._destroyed and self.proc is not None and self.proc.poll() is None

    # -- run ----------------------------------------------------------------------------

    def run(
        self,
        code: bytes,
        stdin: bytes | None,
        timeout_s: float,
        output_limit: int,
        cancel: CancelToken,
    ) -> RawOutcome:
        """Hand the code to the waiting sandbox and supervise it to the end."""
        try:
            os.set_blocking(self.code_w, True)
            view = memoryview(code)
            while view:
                view = view[os.write(self.code_w, view):]
        except BrokenPipeError as exc:
            raise self._setup_failure("bwrap exited before it read the code") from exc
        finally:
            self._close(self.code_w)
        start = time.monotonic()
        self._feed_stdin(stdin or b"")
        return self._supervise(start, timeout_s, output_limit, cancel)

    def _feed_stdin(self, data: bytes) -> None:
        fd = self.stdin_w
        if len(data) <= _PIPE_BUF:
            with contextlib.suppress(BrokenPipeError):
                if data:
                    os.write(fd, data)
            self._close(fd)
            return
        # Larger than the pipe buffer: feed it from a thread so a program that never
        # reads its stdin cannot block us. The fd is ours; close it when done.
        self._fds.remove(fd)

        def feed() -> None:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError:
                pass
            finally:
                os.close(fd)

        threading.Thread(target=feed, name="cellblock-stdin", daemon=True).start()

    def _supervise(
        self, start: float, timeout_s: float, cap: int, cancel: CancelToken
    ) -> RawOutcome:
        assert self.proc is not None
        out_r, err_r, status_r = self.out_r, self.err_r, self.status_r
        deadline = start + timeout_s
        buffers = {out_r: bytearray(), err_r: bytearray()}
        truncated = {out_r: False, err_r: False}
        status_buf = bytearray()
        exit_code: int | None = None
        end: float | None = None
        killed: KilledReason | None = None
        limits_hit: set[str] = set()

        sel = selectors.DefaultSelector()
        for fd in (out_r, err_r, status_r):
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        try:
            open_fds = {out_r, err_r, status_r}
            while open_fds:
                now = time.monotonic()
                if killed is None:
                    if cancel.cancelled:
                        killed = "cancelled"
                    elif now >= deadline:
                        killed = "timeout"
                    elif self.cgroup is not None and now - start >= _TICK_S:
                        hit = self.cgroup.limits_hit()
                        limits_hit |= hit
                        if "memory" in hit:
                            killed = "memory"
                        elif "pids" in hit:
                            killed = "pids"
                    if killed is not None:
                        end = now
                        self._kill()
                if killed is None:
                    wait = max(0.0, min(_TICK_S, deadline - now))
                else:
                    wait = 0.5
                    if now - (end or now) > 5:
                        break  # killed, and still no EOF after 5 s: give up reading
                for key, _ in sel.select(wait):
                    fd = key.fd
                    try:
                        chunk = os.read(fd, _READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        open_fds.discard(fd)
                        continue
                    if fd == status_r:
                        status_buf += chunk
                        code = _exit_code_from_status(status_buf)
                        if code is not None and exit_code is None:
                            exit_code, end = code, time.monotonic()
                        continue
                    buf = buffers[fd]
                    room = cap - len(buf)
                    if len(chunk) > room:
                        buf += chunk[: max(room, 0)]
                        truncated[fd] = True
                        if killed is None:
                            killed, end = "output", time.monotonic()
                            self._kill()
                    else:
                        buf += chunk
        finally:
            sel.close()

        if end is None:
            end = time.monotonic()
        self._kill()
        rc = self.proc.wait()
        if self.cgroup is not None:
            limits_hit |= self.cgroup.limits_hit()
            if killed is None and "memory" in limits_hit:
                killed = "memory"
        if killed is not None and killed != "cancelled":
            limits_hit.add(killed)
        if exit_code is None:
            if killed is None:
                raise SandboxUnavailable(
                    detail=f"bwrap exited without the program's exit status (rc {rc})"
                )
            exit_code = KILL_EXIT
        if killed in ("timeout", "cancelled", "pids", "output"):
            # The exit status of a process we killed says nothing about the program.
            exit_code = KILL_EXIT
        stderr = bytes(buffers[err_r])
        if exit_code == 1 and stderr.startswith(b"bwrap: execvp"):
            raise SandboxUnavailable(
                "the sandbox image has no interpreter for this language",
                detail=stderr.decode(errors="replace"),
            )
        return RawOutcome(
            exit_code=exit_code,
            stdout=bytes(buffers[out_r]),
            stderr=stderr,
            stdout_truncated=truncated[out_r],
            stderr_truncated=truncated[err_r],
            timed_out=killed == "timeout",
            killed_reason=killed,
            duration_ms=(end - start) * 1000,
            limits_enforced_by=self.enforcement,
            limits_hit=tuple(sorted(limits_hit)),
            violations=tuple(sorted(f"{name} limit" for name in limits_hit)),
            host_secrets=(str(self.config.rootfs),),
        )

    # -- teardown -----------------------------------------------------------------------

    def _kill(self) -> None:
        """Kill every process of the sandbox. Safe to call repeatedly."""
        if self.sandbox_pid is not None:
            # SIGKILL to the pid-namespace init: the kernel kills every process in the
            # namespace, including ones that called setsid() or ignored SIGTERM.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.sandbox_pid, signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def destroy(self) -> None:
        """Kill, reap and release everything. Idempotent; never raises."""
        if self._destroyed:
            return
        self._destroyed = True
        try:
            self._kill()
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log.exception("bwrap pid %s did not exit after SIGKILL", self.proc.pid)
                self.proc.close()
            if self.cgroup is not None:
                # bwrap has exited, so the namespace is gone; anything still in the cgroup
                # is killed now, and the empty cgroup is removed off the hot path.
                if self.cgroup.pids():
                    self.cgroup.kill_all()
                self.config.reaper.submit(self.cgroup)
        finally:
            for fd in list(self._fds):
                self._close(fd)


def _exit_code_from_status(buf: bytearray) -> int | None:
    """bwrap writes one JSON object per line; the last one carries ``exit-code``."""
    if b"exit-code" not in buf:
        return None
    for line in bytes(buf).splitlines():
        if b"exit-code" in line:
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict) and "exit-code" in obj:
                    return int(obj["exit-code"])
    return None
