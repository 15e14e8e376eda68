"""A small helper process that starts bwrap with the right uid and rlimits.

Why a helper: every sandbox must start as a fresh unprivileged host uid with
``RLIMIT_CORE=0`` and a low ``RLIMIT_NOFILE``. Doing that from the cellblock process
itself means either ``Popen(user=...)`` (CPython then fork()s the whole, possibly large,
parent instead of vfork()ing) or two extra programs per sandbox (``prlimit`` and
``setpriv``), which cost a tenth of the throughput. The launcher is a tiny Python
process (standard library only, started with ``-I -S``) that has the rlimits set on
itself once; for each sandbox it forks (cheap: it is small), drops to the requested uid
and execs bwrap directly.

Protocol (a SOCK_SEQPACKET socketpair): a request is one message with a JSON body
``{"argv": [...], "targets": [fd numbers], "uid": int | null}`` and the file descriptors
to install at those numbers as SCM_RIGHTS; the reply is ``{"pid": N}`` or
``{"error": "..."}``. The launcher reaps its children; the caller watches a child with a
pidfd. The launcher exits when its socket reaches EOF (cellblock closed it or died), and
every bwrap it starts dies with the launcher (``--die-with-parent``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from cellblock.errors import SandboxUnavailable

__all__ = ["LaunchedProcess", "Launcher"]

_MAX_FDS = 64

# Runs as `python3 -I -S -c _LAUNCHER FD NOFILE`: standard library only.
_LAUNCHER = r"""
import fcntl, json, os, resource, select, signal, socket, sys
fd, nofile = int(sys.argv[1]), int(sys.argv[2])
# No PR_SET_PDEATHSIG: it fires when the *thread* that started us exits, and cellblock
# may start the launcher from a short-lived worker thread. The socket's EOF tells us
# when cellblock is gone, however it died.
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
sock = socket.socket(fileno=fd)
os.set_blocking(fd, True)
signal.signal(signal.SIGINT, signal.SIG_IGN)

def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return

def child(req, fds):
    try:
        os.setsid()
        targets = req["targets"]
        # Targets are small (0..3+n); park every received descriptor above them first so
        # that installing one target never clobbers a descriptor not yet installed.
        parked = [fcntl.fcntl(f, fcntl.F_DUPFD, 100) for f in fds]
        for target, src in zip(targets, parked):
            os.dup2(src, target, inheritable=True)
        keep = set(targets)
        for f in range(3, nofile):
            if f not in keep:
                try: os.close(f)
                except OSError: pass
        for name, value in req.get("rlimits", {}).items():
            limit = {"as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE,
                     "nproc": resource.RLIMIT_NPROC}[name]
            hard = resource.getrlimit(limit)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)  # only root may raise a hard limit
            resource.setrlimit(limit, (value, value))
        uid = req.get("uid")
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(req["argv"][0], req["argv"], {})
    except BaseException:
        os._exit(127)

while True:
    r, _, _ = select.select([sock], [], [], 1.0)
    reap()
    if not r:
        continue
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 64)
    except OSError:
        os._exit(0)
    if not msg:
        os._exit(0)
    try:
        req = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            child(req, fds)
        reply = {"pid": pid}
    except Exception as exc:
        reply = {"error": repr(exc)}
    for f in fds:
        os.close(f)
    sock.send(json.dumps(reply).encode())
"""


class LaunchedProcess:
    """A process the launcher started: watched through a pidfd (it is not our child)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = None  # already gone

    def poll(self) -> int | None:
        """0 once the process has exited, None while it runs (no exit status: the
        sandbox reports its own through bwrap's status descriptor)."""
        if self._pidfd is None:
            return 0
        ready, _, _ = select.select([self._pidfd], [], [], 0)
        return 0 if ready else None

    def wait(self, timeout: float | None = None) -> int:
        if self._pidfd is None:
            return 0
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(["bwrap"], timeout or 0.0)
        return 0

    def kill(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class Launcher:
    """The helper process, started lazily; thread-safe."""

    def __init__(self, nofile: int) -> None:
        self.nofile = nofile
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(theirs.fileno()),
                 str(self.nofile)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                env={},
            )
        except OSError as exc:
            ours.close()
            raise SandboxUnavailable(detail=f"cannot start the bwrap launcher: {exc}") from exc
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def spawn(
        self,
        argv: list[str],
        fds: dict[int, int],
        uid: int | None,
        rlimits: dict[str, int] | None = None,
    ) -> LaunchedProcess:
        """Start ``argv`` with ``fds`` (target number -> our descriptor) as ``uid``, with
        ``rlimits`` (``as``, ``fsize``, ``nproc``) lowered further for this process alone."""
        if len(fds) > _MAX_FDS:
            raise SandboxUnavailable(detail="too many descriptors for one sandbox")
        request = json.dumps(
            {"argv": argv, "targets": list(fds), "uid": uid, "rlimits": rlimits or {}}
        ).encode()
        with self._lock:
            for attempt in (1, 2):
                sock = self._sock or self._start()
                error: OSError | None = None
                try:
                    socket.send_fds(sock, [request], list(fds.values()))
                    reply = sock.recv(65536)
                except OSError as exc:
                    reply, error = b"", exc
                if reply:
                    break
                # The launcher died (killed from outside): start a new one, once.
                self._reset()
                if attempt == 2:
                    raise SandboxUnavailable(detail=f"the bwrap launcher is gone: {error}")
        answer = json.loads(reply)
        if "pid" not in answer:
            raise SandboxUnavailable(detail=f"the bwrap launcher failed: {answer.get('error')}")
        return LaunchedProcess(int(answer["pid"]))

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            self._proc = None

    def close(self) -> None:
        """Stop the launcher. Sandboxes it started die with it (``--die-with-parent``)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()  # EOF: the launcher exits on its own
                self._sock = None
            if self._proc is not None:
                deadline = time.monotonic() + 5
                while self._proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                self._reset()
