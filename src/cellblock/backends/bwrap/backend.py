"""The bubblewrap backend: namespaces + seccomp + a cgroup per call, no daemon.

Each call runs in its own bwrap sandbox (see :mod:`.spawn` for its life cycle):

* a read-only root filesystem built by ``cellblock image build`` (never the host's);
* code and input files bound read-only into ``/work``, which is otherwise a size-capped
  tmpfs; ``/tmp`` and ``/dev/shm`` are private size-capped tmpfs mounts;
* new user, PID, IPC, UTS, network and cgroup namespaces, with user namespaces disabled
  inside; only a private loopback interface; hostname ``sandbox``;
* uid 1000 inside, an unprivileged per-sandbox uid outside (when run as root), no
  capabilities, NO_NEW_PRIVS, a new session (no controlling terminal);
* the seccomp filter from :mod:`cellblock.backends.seccomp_rules`;
* memory and pids limits in a per-call cgroup (rlimits where no cgroup can be made);
* a wall-clock timeout and output caps that kill the whole pid namespace.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from cellblock.backends.base import (
    CODE_DIR,
    Backend,
    BackendOptions,
    CancelToken,
    ExecRequest,
    HostCheck,
    RawOutcome,
)
from cellblock.backends.bwrap.cgroups import detect_cgroups
from cellblock.backends.bwrap.launcher import Launcher
from cellblock.backends.bwrap.pool import PrespawnPool
from cellblock.backends.bwrap.seccomp import SeccompUnavailable, compiled_filter
from cellblock.backends.bwrap.spawn import (
    PreparedSandbox,
    Reaper,
    SpawnConfig,
    SpawnKey,
    cgroups_unavailable,
)
from cellblock.errors import ImageNotFound, ProtectionUnavailable, SandboxUnavailable
from cellblock.images.store import DEFAULT_IMAGE, require_rootfs
from cellblock.policy import Policy

__all__ = ["BwrapBackend", "BwrapOptions"]


def _check_world_readable(rootfs: Path) -> None:
    """Sandboxes run under an unprivileged host uid, which must reach the image."""
    for part in [rootfs, *rootfs.parents]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH or (part == rootfs and not mode & stat.S_IROTH):
            raise SandboxUnavailable(
                "the sandbox image is not readable by the sandbox user",
                detail=f"{part} has mode {stat.filemode(mode)}; sandboxes run as an "
                "unprivileged uid and need o+rx on the image and every parent directory",
                hint=f"chmod o+rx {part}, or keep images under a world-readable CELLBLOCK_HOME",
            )


class BwrapOptions(BackendOptions):
    """Options of the bwrap backend."""

    image: str = DEFAULT_IMAGE
    """Name of a root filesystem built with ``cellblock image build``."""
    rootfs: Path | None = None
    """Use this directory as the root filesystem instead of a named image."""
    bwrap: str = "bwrap"
    """The bubblewrap binary (name on PATH or absolute path)."""
    nofile: int = Field(default=256, ge=16, le=65536)
    """Open files per process inside the sandbox."""
    pool_size: int = Field(default=4, ge=0, le=64)
    """Spawned-but-never-started sandboxes kept ready per policy; 0 disables the pool.
    Calls with input files always spawn their own sandbox."""
    pool_max_age_s: float = Field(default=60.0, gt=0, le=3600)
    """A pooled sandbox older than this is destroyed and replaced."""
    hide_host_proc: bool = True
    """Give each sandbox fixed views of the host-wide files in /proc (stat, loadavg,
    uptime, meminfo) and empty ones for the rest (vmstat, interrupts, pressure, the
    counters under /proc/sys, ...), which
    otherwise let concurrent sandboxes watch each other's CPU and memory use (a covert
    channel: 20 bit/s error-free through /proc/stat). Costs a dozen bind mounts per
    sandbox: about 1.5–2 ms of kernel time, ~10% of throughput on 2 cores (see
    docs/benchmarks.md). ``False`` trades that channel for speed."""


class BwrapBackend(Backend):
    """Runs each call in a fresh bubblewrap sandbox over a read-only Debian root."""

    name: ClassVar[str] = "bwrap"
    options_type: ClassVar[type[BackendOptions]] = BwrapOptions

    def __init__(self, options: BackendOptions | None = None) -> None:
        super().__init__(options)
        assert isinstance(self.options, BwrapOptions)
        self.opts: BwrapOptions = self.options
        self._lock = threading.Lock()
        self._config: SpawnConfig | None = None
        self._config_no_seccomp: SpawnConfig | None = None
        self._pool: PrespawnPool | None = None
        self._reaper = Reaper()
        self._launcher = Launcher(self.opts.nofile)
        self._closed = False

    # -- setup ---------------------------------------------------------------------------

    def prepare(self, policy: Policy) -> None:
        self._check_network(policy)
        config = self._spawn_config(allow_no_seccomp="seccomp" in policy.unsafe_allow_missing)
        self._check_cgroups(config, policy)

    @staticmethod
    def _check_cgroups(config: SpawnConfig, policy: Policy) -> None:
        """Fail closed: memory and pids limits per sandbox tree need a cgroup."""
        if config.cgroups is None and "cgroups" not in policy.unsafe_allow_missing:
            raise cgroups_unavailable(
                "no cgroup hierarchy this process can write to"
                + ("" if os.geteuid() == 0 else " (not root)"))

    @staticmethod
    def _check_network(policy: Policy) -> None:
        if policy.network.mode != "none":
            raise ProtectionUnavailable(
                "network allowlist",
                hint="allowlisted egress needs the cellblock egress proxy, which this release "
                "does not include; use network='none'",
            )

    def _spawn_config(self, *, allow_no_seccomp: bool) -> SpawnConfig:
        with self._lock:
            if self._config is None:
                bwrap = shutil.which(self.opts.bwrap)
                if bwrap is None:
                    raise SandboxUnavailable(
                        "the bwrap backend is not installed on this host",
                        hint="apt-get install bubblewrap",
                        detail=f"{self.opts.bwrap!r} not found on PATH",
                    )
                # Resolved: bwrap runs as another uid, which must not have to traverse
                # a private directory that merely holds a symlink to the image.
                rootfs = (self.opts.rootfs or require_rootfs(self.opts.image)).resolve()
                if os.geteuid() == 0:
                    _check_world_readable(rootfs)
                if not (rootfs / CODE_DIR.lstrip("/")).is_dir():
                    raise ImageNotFound(
                        self.opts.image,
                        hint="rebuild it: cellblock image build --force",
                        detail=f"{rootfs} has no {CODE_DIR} mountpoint",
                    )
                try:
                    program: bytes | None = compiled_filter()
                except SeccompUnavailable:
                    if not allow_no_seccomp:
                        raise
                    program = None
                cgroups = detect_cgroups() if os.geteuid() == 0 else None
                if cgroups is not None:
                    cgroups.reap_stale()
                self._config = SpawnConfig(
                    bwrap=bwrap,
                    rootfs=rootfs,
                    nofile=self.opts.nofile,
                    seccomp_program=program,
                    cgroups=cgroups,
                    reaper=self._reaper,
                    launcher=self._launcher,
                    hide_host_proc=self.opts.hide_host_proc,
                )
            if self._config.seccomp_program is None and not allow_no_seccomp:
                raise SeccompUnavailable("libseccomp could not compile the filter")
            return self._config

    # -- calls ---------------------------------------------------------------------------

    def execute(self, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        if self._closed:
            raise SandboxUnavailable("the bwrap backend has been closed")
        policy = request.policy
        self._check_network(policy)
        config = self._spawn_config(allow_no_seccomp="seccomp" in policy.unsafe_allow_missing)
        self._check_cgroups(config, policy)
        key = SpawnKey(
            language=request.language,
            scratch_mb=policy.scratch_mb,
            memory_mb=policy.memory_mb,
            max_pids=policy.max_pids,
            env=tuple(sorted(policy.env.items())),
            seccomp=config.seccomp_program is not None,
            rlimit_fallback="cgroups" in policy.unsafe_allow_missing,
        )
        sandbox: PreparedSandbox | None = None
        if not request.files and self.opts.pool_size > 0:
            sandbox = self._get_pool(config).take(key)
        if sandbox is None:
            sandbox = PreparedSandbox(config, key, request.files)
        try:
            return sandbox.run(
                request.code.encode("utf-8", "surrogateescape"),
                request.stdin,
                policy.timeout_s,
                policy.output_limit_bytes,
                cancel,
            )
        finally:
            sandbox.destroy()

    def _get_pool(self, config: SpawnConfig) -> PrespawnPool:
        with self._lock:
            if self._pool is None:
                self._pool = PrespawnPool(
                    lambda key: PreparedSandbox(config, key, {}),
                    size=self.opts.pool_size,
                    max_age_s=self.opts.pool_max_age_s,
                    workers=min(self.opts.pool_size, 3),
                )
            return self._pool

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self._launcher.close()
        self._reaper.drain()

    @classmethod
    def host_checks(cls) -> list[HostCheck]:
        checks: list[HostCheck] = []
        path = shutil.which("bwrap")
        if path is None:
            checks.append(HostCheck("bwrap", "fail", "bubblewrap is not installed",
                                    "apt-get install bubblewrap"))
        else:
            checks.append(HostCheck("bwrap", "ok", path))
        try:
            compiled_filter()
            checks.append(HostCheck("seccomp", "ok", "libseccomp compiled the filter"))
        except SeccompUnavailable as exc:
            checks.append(HostCheck("seccomp", "fail", exc.detail or exc.safe_message, exc.hint))
        manager = detect_cgroups() if os.geteuid() == 0 else None
        if manager is None:
            checks.append(HostCheck(
                "cgroups", "warn",
                "no writable cgroup hierarchy: memory and pids limits use rlimits (weaker)",
                "run cellblock as root on a host with cgroup v2 or v1 memory+pids controllers",
            ))
        else:
            checks.append(HostCheck("cgroups", "ok", f"per-call cgroups ({manager.version})"))
        try:
            require_rootfs(DEFAULT_IMAGE)
            checks.append(HostCheck("image", "ok", "default root filesystem is built"))
        except ImageNotFound as exc:
            checks.append(HostCheck("image", "fail", exc.safe_message, exc.hint))
        return checks
