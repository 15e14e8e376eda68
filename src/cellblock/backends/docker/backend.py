"""The Docker (runc) and gVisor (runsc) backends.

One call: take a never-started container from the warm pool (or create one), attach to
its stdin/stdout/stderr, start it, send the code bundle on stdin (see :mod:`.spec`), read
both streams with per-stream caps until they close, then remove the container. The
wall-clock limit is ours: the SDK's ``wait(timeout=)`` only abandons the HTTP request,
so cellblock watches its own deadline and SIGKILLs the container's init, which takes the
whole PID namespace (every child, ``setsid`` or not) with it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from cellblock.backends import register_backend
from cellblock.backends.base import (
    Backend,
    CancelToken,
    ExecRequest,
    HostCheck,
    RawOutcome,
)
from cellblock.backends.docker import gc
from cellblock.backends.docker.engine import DAEMON_HINT, EngineClients, engine_errors
from cellblock.backends.docker.options import DockerOptions
from cellblock.backends.docker.pool import WarmPool
from cellblock.backends.docker.spec import (
    MASKED_PATHS,
    READY_MARKER,
    ContainerSpec,
    Runtime,
    build_bundle,
    build_spec,
)
from cellblock.backends.docker.stream import CappedDemux
from cellblock.errors import ImageNotFound, ProtectionUnavailable, SandboxUnavailable
from cellblock.policy import Policy
from cellblock.result import KilledReason

__all__ = ["DockerBackend", "GVisorBackend"]

log = logging.getLogger("cellblock.docker")

# How often the call loop wakes to check the deadline, cancellation and the pids cgroup.
_POLL_S = 0.05
# After a kill, how long to wait for the streams to close before giving up on them.
_DRAIN_S = 10.0
_READ_CHUNK = 65536
_SIGKILL_EXIT = 137
_RUNSC_HINT = (
    "install gVisor (`apt-get install runsc`), register it in /etc/docker/daemon.json as "
    '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", '
    '"runtimeArgs": ["--network=none", "--oci-seccomp"]}}} '
    "and reload the daemon with `kill -HUP $(pidof dockerd)`"
)

# Leftovers of dead processes are reaped once per process, when the first backend starts.
_reap_lock = threading.Lock()
_reap_done: set[str] = set()


class _BootstrapFailed(SandboxUnavailable):
    """The container ended before its bootstrap handed over to the program."""


@dataclass(slots=True)
class _Prepared:
    """A container ready for one call: created, or started and attached (``sock``)."""

    cid: str
    sock: socket.socket | None = None


class _Call:
    """Mutable state of one execution, shared by the loop and the stdin writer."""

    def __init__(self) -> None:
        self.killed: KilledReason | None = None
        self.limits_hit: list[str] = []
        self.violations: list[str] = []

    def kill_for(self, reason: KilledReason) -> bool:
        if self.killed is not None:
            return False
        self.killed = reason
        if reason not in ("cancelled",) and reason not in self.limits_hit:
            self.limits_hit.append(reason)
        return True


@register_backend
class DockerBackend(Backend):
    """Docker Engine with runc: a fresh hardened container per call, from a warm pool.

    Per call: no network (``network_mode=none``), read-only root, size-capped tmpfs for
    ``/work``, ``/tmp`` and a private ``/dev/shm``, private IPC/PID/UTS/cgroup namespaces,
    every capability dropped for the program, no-new-privileges, uid 1000, pids, memory
    (swap equal) and CPU limits, tini as init, cellblock's seccomp profile, cellblock
    labels. Limits are enforced by the engine (``limits_enforced_by="engine"``).
    """

    name: ClassVar[str] = "docker"
    options_type: ClassVar[type[DockerOptions]] = DockerOptions
    runtime: ClassVar[Runtime] = "runc"
    # How often the pids probe is consulted: a file read (runc) or a future (gVisor).
    _pids_probe_interval: ClassVar[float] = 0.05

    options: DockerOptions

    def __init__(self, options: DockerOptions | None = None) -> None:
        super().__init__(options)
        self._clients = EngineClients(self.options.docker_host, self.options.api_timeout_s)
        self._specs: dict[str, ContainerSpec] = {}
        self._by_policy: dict[Policy, ContainerSpec] = {}
        self._specs_lock = threading.Lock()
        self._pool_started = self.options.pool_started
        self._pool: WarmPool[_Prepared] = WarmPool(
            self.options.pool_size, self.options.pool_max_age_s, self._create_for_key,
            self._discard, lambda item: item.cid,
        )
        self._active: set[str] = set()
        # Helper threads, each with its own engine client (see EngineClients):
        # kills must not block the stream reader; the exit status is awaited while the
        # streams are still being read; removal of a dead container happens off the
        # caller's path (close() waits for it).
        self._killer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cellblock-kill")
        self._waiter = ThreadPoolExecutor(max_workers=32, thread_name_prefix="cellblock-wait")
        self._remover = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cellblock-rm")
        self._active_lock = threading.Lock()
        self._image_checked = False
        # runc applies the seccomp profile itself; runsc only with --oci-seccomp.
        self._oci_seccomp = self.runtime == "runc"
        self._closed = False

    # -- Backend API -----------------------------------------------------------------

    def prepare(self, policy: Policy) -> None:
        """Check the daemon, the runtime and the image; reap leftovers; warm the pool."""
        self._check_policy(policy)
        self._reap_leftovers_once()
        self._pool.warm(self._spec_for(policy).key)

    def execute(self, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        if self._closed:
            raise SandboxUnavailable(detail="the backend has been closed")
        self._check_policy(request.policy)
        spec = self._spec_for(request.policy)
        item = self._pool.take(spec.key)
        if item is not None:
            try:
                return self._execute_in(item, request, cancel)
            except _BootstrapFailed:
                # A pool container that died while it waited (daemon restart, host OOM
                # kill) never ran the code: try once more in a fresh container.
                log.warning("a pool container was unusable; retrying in a fresh one")
        return self._execute_in(_Prepared(self._create(spec)), request, cancel)

    def _execute_in(self, item: _Prepared, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        cid = item.cid
        with self._active_lock:
            self._active.add(cid)
        try:
            return self._run_in(item, request, cancel)
        finally:
            # Always, also on errors and cancellation: the container never serves again.
            # By now it is dead (its init exited or was SIGKILLed, which kills its PID
            # namespace) unless the engine failed; force-removal covers that case too.
            self._remover.submit(self._remove_active, cid)

    def _remove_active(self, cid: str) -> None:
        try:
            self._remove_quietly(cid)
        finally:
            with self._active_lock:
                self._active.discard(cid)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        self._remover.shutdown(wait=True)
        with self._active_lock:
            active = list(self._active)
        for cid in active:  # calls still running in other threads: end them
            self._remove_quietly(cid)
        self._killer.shutdown(wait=True)
        self._waiter.shutdown(wait=True)
        self._clients.close()

    @classmethod
    def host_checks(cls) -> list[HostCheck]:
        return _host_checks(cls.runtime, cls.name)

    # -- containers ------------------------------------------------------------------

    def _spec_for(self, policy: Policy) -> ContainerSpec:
        with self._specs_lock:
            cached = self._by_policy.get(policy)
        if cached is not None:
            return cached
        spec = build_spec(self.options, policy, self.runtime)
        with self._specs_lock:
            self._specs.setdefault(spec.key, spec)
            if len(self._by_policy) < 256:  # policies are few; never grow without bound
                self._by_policy[policy] = spec
        return spec

    def _create_for_key(self, key: str) -> _Prepared:
        """Prepare a pool container: create it, and with ``pool_started`` start it too."""
        with self._specs_lock:
            spec = self._specs[key]
        cid = self._create(spec)
        if not self._pool_started:
            return _Prepared(cid)
        try:
            sock = self._attach(cid)
            try:
                with engine_errors("start the sandbox container"):
                    self._clients.get().start(cid)
            except BaseException:
                sock.close()
                raise
        except BaseException:
            self._remove_quietly(cid)
            raise
        return _Prepared(cid, sock)

    def _discard(self, item: _Prepared) -> None:
        if item.sock is not None:
            with contextlib.suppress(OSError):
                item.sock.close()
        self._remove_quietly(item.cid)

    def _attach(self, cid: str) -> socket.socket:
        with engine_errors("attach to the sandbox container"):
            attached = self._clients.get().attach_socket(
                cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        sock: socket.socket = getattr(attached, "_sock", attached)
        return sock

    def _create(self, spec: ContainerSpec) -> str:
        client = self._clients.get()
        with engine_errors("create the sandbox container"):
            host_config = client.create_host_config(**spec.host_config)
            # Not a create_host_config argument: the Engine API field itself.
            host_config["MaskedPaths"] = MASKED_PATHS
            created = client.create_container(
                spec.image, host_config=host_config, labels=gc.container_labels(spec.key),
                **spec.config,
            )
        return str(created["Id"])

    def _wait_exit(self, cid: str, timeout_s: float) -> dict[str, Any]:
        """Block until the container has exited; its status (runs on a waiter thread)."""
        status: dict[str, Any] = self._clients.get().wait(cid, timeout=timeout_s)
        return status

    def _kill_container(self, cid: str, errors: list[BaseException]) -> None:
        """SIGKILL the container's init: the whole PID namespace dies with it."""
        import docker.errors

        try:
            with engine_errors("stop the sandbox container"):
                try:
                    self._clients.get().kill(cid)
                except docker.errors.APIError as exc:
                    # Already dead (it exited between our check and the kill): fine.
                    if exc.status_code not in (404, 409):
                        raise
        except Exception as exc:
            errors.append(exc)

    def _remove_quietly(self, cid: str) -> None:
        """Force-remove; failures are logged (gc reaps what is left), never raised."""
        try:
            self._clients.get().remove_container(cid, force=True, v=True)
        except Exception as exc:
            import docker.errors

            if not isinstance(exc, docker.errors.NotFound):
                log.warning("could not remove container %s: %s", cid[:12], exc)

    def _check_ready(self) -> None:
        if self._image_checked:
            return
        import docker.errors

        client = self._clients.get()
        with engine_errors("check the sandbox image"):
            try:
                client.inspect_image(self.options.image_reference)
            except docker.errors.NotFound as exc:
                raise _image_missing(self.options, str(exc)) from exc
            if self.runtime != "runc":
                runtimes = client.info().get("Runtimes") or {}
                entry = runtimes.get(self.runtime)
                if entry is None:
                    raise ProtectionUnavailable(
                        "gvisor runtime", detail=f"runtime {self.runtime!r} is not registered",
                        hint=_RUNSC_HINT,
                    )
                args = _runtime_args(entry)
                if "--network=none" not in args:
                    raise ProtectionUnavailable(
                        "gvisor runtime",
                        detail="runsc is registered without runtimeArgs [\"--network=none\"]",
                        hint=_RUNSC_HINT,
                    )
                self._oci_seccomp = "--oci-seccomp" in args
        self._image_checked = True

    def _check_policy(self, policy: Policy) -> None:
        """Fail closed when a protection ``policy`` requires is missing here."""
        if policy.network.mode != "none":
            raise ProtectionUnavailable(
                "network allowlist",
                detail=f"the {self.name} backend only supports network mode 'none'",
                hint="use network='none', or the bwrap backend for an allowlist",
            )
        self._check_ready()
        if not self._oci_seccomp and "seccomp" not in policy.unsafe_allow_missing:
            raise ProtectionUnavailable(
                "seccomp",
                detail="runsc is registered without --oci-seccomp: gVisor would ignore "
                "cellblock's seccomp profile",
                hint=_RUNSC_HINT,
            )

    def _reap_leftovers_once(self) -> None:
        with _reap_lock:
            if "done" in _reap_done:
                return
            _reap_done.add("done")
        try:
            gc.reap(self._clients.get())
        except Exception as exc:  # never fail a call because of someone else's leftovers
            log.warning("reaping leftover containers failed: %s", exc)

    # -- one call --------------------------------------------------------------------

    def _run_in(self, item: _Prepared, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        client = self._clients.get()
        cid = item.cid
        policy = request.policy
        call = _Call()
        demux = CappedDemux(policy.output_limit_bytes, READY_MARKER)
        payload = build_bundle(request) + (request.stdin or b"")
        sock = item.sock if item.sock is not None else self._attach(cid)
        writer: threading.Thread | None = None
        try:
            t0 = time.monotonic()
            if item.sock is None:
                with engine_errors("start the sandbox container"):
                    client.start(cid)
            # else: started in the pool, its bootstrap waiting for the code: the clock
            # starts now, when the code is sent.
            deadline = t0 + policy.timeout_s
            # Request timeout: the program's own limit plus the kill and drain margins.
            wait_s = policy.timeout_s + _DRAIN_S + self.options.api_timeout_s
            exited = self._waiter.submit(self._wait_exit, cid, wait_s)
            writer = threading.Thread(
                target=_write_stdin, args=(sock, payload), name="cellblock-stdin", daemon=True
            )
            writer.start()
            pids_probe: Callable[[], bool] | None = None
            if self.runtime == "runc":
                events = _pids_events_path(cid)
                if events is not None:
                    pids_probe = functools.partial(_pids_limit_hit, events)
            else:
                pids_probe = _GuestPidsProbe(self, cid, policy.max_pids, t0)

            kill_errors: list[BaseException] = []

            def kill(reason: KilledReason) -> None:
                # The kill request runs on another thread while this one keeps reading:
                # the daemon only reports the container dead once its output streams are
                # drained, so a kill issued while nobody reads would wait for itself.
                if call.kill_for(reason):
                    self._killer.submit(self._kill_container, cid, kill_errors)

            ended_at = self._pump(sock, demux, call, deadline, cancel, pids_probe, kill)
            if kill_errors:
                raise kill_errors[0]
            duration_ms = (ended_at - t0) * 1000
            with engine_errors("collect the sandbox exit status"):
                status = exited.result(timeout=self.options.api_timeout_s + 5)
            exit_code = int(status.get("StatusCode", -1))
            oom = False
            if exit_code != 0 and call.killed is None:
                with engine_errors("inspect the sandbox container"):
                    state = client.inspect_container(cid).get("State") or {}
                oom = bool(state.get("OOMKilled"))
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            if writer is not None:
                writer.join(timeout=5)

        if call.killed is None and not demux.ready:
            # The program never ran: the bootstrap itself failed. That is ours, not the
            # program's; its words go to the log only.
            detail = (
                f"bootstrap failed in {cid[:12]} (exit {exit_code}): "
                f"{bytes(demux.stderr[:2000]).decode(errors='replace')}"
            )
            log.warning("%s", detail)
            raise _BootstrapFailed(detail=detail)
        if oom:
            call.limits_hit.append("memory")
            call.violations.append("memory limit")
            if exit_code == _SIGKILL_EXIT:
                call.killed = "memory"
        if call.killed is not None and call.killed != "memory":
            exit_code = _SIGKILL_EXIT
        if call.killed == "pids":
            call.violations.append("pids limit")
        return RawOutcome(
            exit_code=exit_code,
            stdout=bytes(demux.stdout),
            stderr=bytes(demux.stderr),
            stdout_truncated=demux.stdout_total > demux.cap,
            stderr_truncated=demux.stderr_total > demux.cap,
            timed_out=call.killed == "timeout",
            killed_reason=call.killed,
            duration_ms=duration_ms,
            limits_enforced_by="engine",
            limits_hit=tuple(call.limits_hit),
            violations=tuple(call.violations),
            host_secrets=(cid, cid[:12]),
        )

    def _pump(
        self,
        sock: socket.socket,
        demux: CappedDemux,
        call: _Call,
        deadline: float,
        cancel: CancelToken,
        pids_probe: Callable[[], bool] | None,
        kill: Callable[[KilledReason], None],
    ) -> float:
        """Read the attach stream until it closes, enforcing every limit on the way.

        Returns the monotonic time at which the streams closed (the container's init
        exited, so every process in it is dead).
        """
        drain_until: float | None = None
        next_probe = time.monotonic() + self._pids_probe_interval
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            now = time.monotonic()
            if call.killed is None:
                if cancel.cancelled:
                    kill("cancelled")
                elif now >= deadline:
                    kill("timeout")
                elif demux.overflowed:
                    kill("output")
                elif pids_probe is not None and now >= next_probe:
                    next_probe = now + self._pids_probe_interval
                    if pids_probe():
                        kill("pids")
            if call.killed is not None and drain_until is None:
                drain_until = now + _DRAIN_S
            if drain_until is not None and now >= drain_until:
                log.warning("sandbox streams did not close %.0f s after the kill", _DRAIN_S)
                return now
            wait = _POLL_S
            if call.killed is None:
                wait = max(0.0, min(wait, deadline - now))
            if not poller.poll(wait * 1000):
                continue
            try:
                data = sock.recv(_READ_CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                return time.monotonic()
            if not data:
                return time.monotonic()
            demux.feed(data)


@register_backend
class GVisorBackend(DockerBackend):
    """Docker Engine with gVisor (runsc): the same container, a user-space kernel.

    The program's syscalls are served by gVisor's Sentry, not the host kernel, so host
    kernel bugs are far harder to reach and host-global files (/proc/loadavg,
    /proc/meminfo, /proc/stat, boot_id) are virtualised. Everything else is identical to
    :class:`DockerBackend`. Needs runsc registered with ``--network=none``.
    """

    name: ClassVar[str] = "gvisor"
    runtime: ClassVar[Runtime] = "runsc"


class _GuestPidsProbe:
    """gVisor: has the sandbox user filled its process limit?

    gVisor's own kernel refuses the fork (RLIMIT_NPROC, see :mod:`.spec`), invisibly to
    the host: the host pids cgroup counts Sentry threads, and ``docker top`` lists host
    processes under the guest's pid numbers. So cellblock asks the guest: a ``docker
    exec`` (as root, with the container's empty capability set) that counts /proc entries
    with a shell glob. It costs tens of milliseconds of daemon and gVisor time, so it
    runs only for calls that live longer than :attr:`FIRST_S`, on a helper thread, with
    a growing interval; a fork bomb is stopped within seconds instead of at the timeout.
    An in-sandbox watcher would avoid the exec but made every short call ~50 ms slower.
    """

    FIRST_S = 0.5
    MAX_INTERVAL_S = 5.0
    EXEC_TIMEOUT_S = 5.0
    # The exec'd shell and tini are in /proc too; the sandbox user's processes are the rest.
    COUNT = ("/bin/sh", "-c", "set -- /proc/[0-9]*; echo $#")

    def __init__(self, backend: DockerBackend, cid: str, max_pids: int, started: float) -> None:
        self._backend = backend
        self._cid = cid
        self._threshold = max_pids + 2
        self._next = started + self.FIRST_S
        self._interval = self.FIRST_S
        self._pending: Future[bool] | None = None

    def __call__(self) -> bool:
        now = time.monotonic()
        if self._pending is not None:
            if not self._pending.done():
                return False
            try:
                hit = self._pending.result()
            except Exception:  # the container exited meanwhile, or the daemon is slow
                hit = False
            self._pending = None
            if hit:
                return True
            self._next = now + self._interval
            self._interval = min(self._interval * 2, self.MAX_INTERVAL_S)
        if now >= self._next:
            self._pending = self._backend._waiter.submit(self._count)
        return False

    def _count(self) -> bool:
        client = self._backend._clients.get()
        exec_id = client.exec_create(self._cid, list(self.COUNT), stdout=True, stderr=False,
                                     user="0:0")
        # Our own bounded read: the SDK's exec_start read can block for good when the
        # container is killed while the exec runs (seen under runsc).
        attached = client.exec_start(exec_id, socket=True)
        sock: socket.socket = getattr(attached, "_sock", attached)
        out = CappedDemux(64, b"")
        try:
            sock.settimeout(self.EXEC_TIMEOUT_S)
            while data := sock.recv(4096):
                out.feed(data)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                sock.close()
        try:
            return int(bytes(out.stdout).strip() or b"0") >= self._threshold
        except ValueError:
            return False


def _write_stdin(sock: socket.socket, payload: bytes) -> None:
    """Send the bundle and stdin, then half-close so the program sees EOF."""
    try:
        view = memoryview(payload)
        while view:
            sent = sock.send(view[:_READ_CHUNK])
            view = view[sent:]
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        # The container died or stopped reading (its stdin is not our problem once the
        # program exits); the main loop reports what happened.
        pass


def _pids_events_path(cid: str) -> Path | None:
    """The container's pids.events on this host, if the daemon is local and exposes it."""
    for candidate in (
        Path(f"/sys/fs/cgroup/pids/docker/{cid}/pids.events"),  # v1, cgroupfs driver
        Path(f"/sys/fs/cgroup/pids/system.slice/docker-{cid}.scope/pids.events"),  # v1, systemd
        Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/pids.events"),  # v2, systemd
        Path(f"/sys/fs/cgroup/docker/{cid}/pids.events"),  # v2, cgroupfs driver
    ):
        if candidate.exists():
            return candidate
    return None


def _pids_limit_hit(path: Path) -> bool:
    try:
        text = path.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "max":
            return value.strip() not in ("", "0")
    return False


def _runtime_args(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return []
    args = entry.get("runtimeArgs") or entry.get("RuntimeArgs") or []
    return [str(a) for a in args]


def _image_missing(options: DockerOptions, detail: str) -> ImageNotFound:
    reference = options.image_reference
    if options.is_cellblock_image:
        name = options.image
        build = "cellblock image build --docker" + ("" if name == "default" else f" --name {name}")
        hint = f"run: {build}  (imports the cellblock root filesystem as {reference})"
    else:
        hint = (
            f"the image {reference} must already be on this host (nothing is pulled): "
            f"`docker pull {reference}` where a registry is reachable, or "
            f"`docker save {reference} | docker load` from a machine that has it"
        )
    return ImageNotFound(options.image, hint=hint, detail=detail)


def _host_checks(runtime: Runtime, backend: str) -> list[HostCheck]:
    """Daemon reachable, runtime registered (runsc with --network=none), image present."""
    import docker

    from cellblock.images.store import docker_tag

    checks: list[HostCheck] = []
    try:
        client = docker.from_env(timeout=10).api
        version = client.version().get("Version", "?")
        info = client.info()
    except Exception as exc:
        checks.append(HostCheck(f"{backend}: docker daemon", "fail",
                                f"not reachable ({type(exc).__name__})", DAEMON_HINT))
        return checks
    try:
        checks.append(HostCheck(f"{backend}: docker daemon", "ok", f"Docker Engine {version}"))
        runtimes = info.get("Runtimes") or {}
        if runtime == "runc":
            sec = " ".join(info.get("SecurityOptions") or [])
            if "seccomp" in sec:
                checks.append(HostCheck(f"{backend}: seccomp", "ok", "the daemon supports seccomp"))
            else:
                checks.append(HostCheck(
                    f"{backend}: seccomp", "fail", "the daemon has no seccomp support",
                    "use a Docker Engine built with seccomp (Debian's docker.io is)"))
        else:
            entry = runtimes.get("runsc")
            if entry is None:
                checks.append(HostCheck(f"{backend}: runsc runtime", "fail",
                                        "runsc is not registered with the daemon", _RUNSC_HINT))
            else:
                args = _runtime_args(entry)
                missing = [a for a in ("--network=none", "--oci-seccomp") if a not in args]
                if not missing:
                    checks.append(HostCheck(f"{backend}: runsc runtime", "ok",
                                            f"registered: {entry.get('path', 'runsc')} {' '.join(args)}"))
                else:
                    checks.append(HostCheck(
                        f"{backend}: runsc runtime", "fail",
                        f"runsc is registered without runtimeArgs {missing}: --network=none "
                        "is needed to start network-less containers, --oci-seccomp to apply "
                        "cellblock's seccomp profile inside gVisor", _RUNSC_HINT))
        tag = docker_tag()
        try:
            client.inspect_image(tag)
            checks.append(HostCheck(f"{backend}: image", "ok", f"{tag} is present"))
        except Exception:
            checks.append(HostCheck(f"{backend}: image", "fail", f"{tag} is missing",
                                    "run: cellblock image build --docker"))
    finally:
        client.close()
    return checks
