"""What a cellblock container looks like: its create configuration and its bootstrap.

How code gets in. Containers are created (by the warm pool) before the code is known, the
root filesystem is read-only and ``put_archive`` refuses read-only roots, and anything
extracted beneath a tmpfs mount point before start is hidden by the tmpfs at start. A host
bind mount would work but needs a host directory per call and shows host paths in
``/proc/self/mountinfo``. So the code travels over the container's own stdin:

1. The container's command is a fixed POSIX-shell bootstrap, started as uid 0 with every
   capability dropped except SETUID, SETGID and SETPCAP (needed only to drop to the
   sandbox user below), no-new-privileges set, and tini as PID 1.
2. cellblock writes ``"<language> <n>\\n"`` then an ``n``-byte tar on stdin. The
   bootstrap reads exactly that and no more: ``read`` takes one byte at a time, and GNU
   tar reads whole 10240-byte records (``-b 20``, full records on a pipe) and stops at
   the record holding the end-of-archive blocks; the tar is padded to whole records. It
   extracts the tar as root into the tmpfs mounts: ``/work/main.py`` (0444, root-owned), input files in the
   root-only ``/.input`` tmpfs with root-owned symlinks beside the code in ``/work``, and
   ``/work`` itself made 1777 with the sticky bit. The sandbox user can create files in
   ``/work`` but can neither modify nor remove the code and input files.
3. It prints a fixed ready marker on stdout (so a bootstrap failure is an infrastructure
   error, not program output), then execs the program through ``setpriv``: uid/gid 1000,
   no supplementary groups, empty bounding, inheritable and ambient sets (CapEff,
   CapPrm and CapBnd all 0), no-new-privileges. Everything after the tar on stdin is the
   program's stdin.

Input files live in a separate tmpfs so that they do not eat the program's scratch
space: ``/work`` is capped at exactly ``scratch_mb`` (minus the code, which is small).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from typing import Any, Literal

from cellblock.backends.base import CODE_DIR, SANDBOX_ENV, ExecRequest
from cellblock.backends.docker.options import DockerOptions
from cellblock.backends.seccomp_rules import docker_profile
from cellblock.policy import Policy

__all__ = [
    "READY_MARKER",
    "ContainerSpec",
    "build_bundle",
    "build_spec",
]

Runtime = Literal["runc", "runsc"]

SANDBOX_UID = 1000
SANDBOX_GID = 1000
INPUT_DIR = "/.input"
READY_MARKER = b"\x00cellblock-ready\n"
"""First bytes of stdout, written by the bootstrap just before it execs the program.
The program cannot write before it, so it cannot be forged; cellblock strips it."""

# Input files may total 64 MiB (see Sandbox); the tmpfs that holds them is root-only, so
# its size is not scratch the program can use.
_INPUT_TMPFS_MB = 72
_TAR_RECORD = 20 * 512  # tar -b 20, also tarfile.RECORDSIZE
# gVisor's Sentry runs inside the container's memory cgroup; give it room of its own so
# that ``memory_mb`` stays what the program can use.
GVISOR_MEMORY_OVERHEAD_MB = 96
# The host pids cgroup of a gVisor container counts Sentry and gofer threads (about 45
# idle, about 9 per guest process on the ptrace platform), not guest processes. Guest
# processes are limited by RLIMIT_NPROC, which gVisor's kernel counts per sandbox.
_GVISOR_HOST_PIDS_BASE = 256
_GVISOR_HOST_PIDS_PER_GUEST = 16

_BOOTSTRAP = r"""
read -r lang n || exit 97
case $lang in
  python) set -- python3 /work/main.py ;;
  bash) set -- bash /work/main.sh ;;
  *) echo "cellblock bootstrap: bad header" >&2; exit 97 ;;
esac
tar -x -b 20 -f - -C / || { echo "cellblock bootstrap: extract failed" >&2; exit 98; }
command -v setpriv >/dev/null && command -v "$1" >/dev/null || {
  echo "cellblock bootstrap: setpriv or $1 missing from the image" >&2; exit 99; }
unset OLDPWD PWD __UNSET__
printf '\000cellblock-ready\n'
exec setpriv --reuid=1000 --regid=1000 --clear-groups --bounding-set=-all \
  --inh-caps=-all --ambient-caps=-all --no-new-privs -- "$@"
"""


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """Everything needed to create one container, and the pool key derived from it."""

    image: str
    runtime: Runtime
    config: dict[str, Any]
    """Keyword arguments of ``APIClient.create_container`` except ``host_config``/labels."""
    host_config: dict[str, Any]
    """Keyword arguments of ``APIClient.create_host_config``."""

    @property
    def key(self) -> str:
        """Identical configurations share pool containers; anything else does not."""
        blob = json.dumps(
            [self.image, self.runtime, self.config, self.host_config], sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


def bootstrap_script(policy: Policy) -> str:
    """The shell bootstrap; it unsets the variables Docker adds that the policy did not ask for."""
    drop = [name for name in ("HOSTNAME",) if name not in policy.env]
    return _BOOTSTRAP.replace("__UNSET__", " ".join(drop)).strip() + "\n"


def build_spec(options: DockerOptions, policy: Policy, runtime: Runtime) -> ContainerSpec:
    """The hardened create configuration for one call under ``policy``."""
    env = dict(SANDBOX_ENV)
    env.update(policy.env)
    scratch = f"{policy.scratch_mb}m"
    tmpfs_opts = f"rw,exec,nosuid,nodev,size={scratch}"
    memory_mb = policy.memory_mb
    ulimits: list[dict[str, Any]] = [
        {"Name": "core", "Soft": 0, "Hard": 0},
        {"Name": "nofile", "Soft": 4096, "Hard": 4096},
    ]
    # The same seccomp profile on both runtimes. runc loads it into the host kernel;
    # runsc enforces it inside the sandbox (gVisor's Sentry) when the runtime is
    # registered with --oci-seccomp, which cellblock requires (see _check_ready). Without
    # it gVisor would allow, e.g., unshare(CLONE_NEWUSER) and AF_PACKET sockets in its
    # own kernel.
    security_opt = [
        "no-new-privileges:true",
        "seccomp=" + json.dumps(docker_profile(), separators=(",", ":")),
    ]
    if runtime == "runc":
        # The pids cgroup counts every task of the container: exact and per sandbox.
        pids_limit = policy.max_pids
    else:
        # Under runsc the host pids cgroup counts Sentry and gofer threads, not guest
        # processes, so guest processes are limited by RLIMIT_NPROC, which gVisor's
        # kernel counts per sandbox (under runc it would count every process of host uid
        # 1000, shared by all sandboxes). gVisor charges a task to the uid it was created
        # with: the program's first process is forked by root (tini) and only then
        # becomes uid 1000, so it is not counted; one less keeps "alive at once" at
        # max_pids, as under runc.
        pids_limit = _GVISOR_HOST_PIDS_BASE + _GVISOR_HOST_PIDS_PER_GUEST * policy.max_pids
        nproc = max(1, policy.max_pids - 1)
        ulimits.append({"Name": "nproc", "Soft": nproc, "Hard": nproc})
        memory_mb += GVISOR_MEMORY_OVERHEAD_MB
    host_config: dict[str, Any] = {
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {
            CODE_DIR: tmpfs_opts,
            "/tmp": tmpfs_opts,
            INPUT_DIR: f"rw,nosuid,nodev,noexec,size={_INPUT_TMPFS_MB}m",
        },
        "ipc_mode": "private",
        "shm_size": policy.scratch_mb * 1024 * 1024,
        "cap_drop": ["ALL"],
        # Only for the bootstrap's drop to uid 1000; setpriv empties every set before the
        # program runs (see the module docstring).
        "cap_add": ["SETUID", "SETGID", "SETPCAP"],
        "security_opt": security_opt,
        "pids_limit": pids_limit,
        "mem_limit": memory_mb * 1024 * 1024,
        "memswap_limit": memory_mb * 1024 * 1024,
        "nano_cpus": int(options.cpus * 1e9),
        "init": True,
        "oom_score_adj": 1000,
        "log_config": {"type": "none", "config": {}},
        "ulimits": ulimits,
        "cgroupns": "private",
        "runtime": runtime,
    }
    config: dict[str, Any] = {
        # As the entrypoint, so an image's own ENTRYPOINT/CMD never runs instead.
        "entrypoint": ["/bin/sh", "-c", bootstrap_script(policy), "cellblock-bootstrap"],
        "user": "0:0",
        "working_dir": CODE_DIR,
        "hostname": "sandbox",
        "environment": env,
        "stdin_open": True,
        "network_disabled": True,
    }
    return ContainerSpec(options.image_reference, runtime, config, host_config)


DOCKER_DEFAULT_MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
    "/sys/firmware", "/sys/devices/virtual/powercap",
)
"""What Docker masks by default (setting ``MaskedPaths`` replaces its list)."""

HOST_ACTIVITY_PATHS = (
    "/proc/stat", "/proc/loadavg", "/proc/uptime", "/proc/meminfo", "/proc/vmstat",
    "/proc/schedstat",
    "/proc/softirqs", "/proc/interrupts", "/proc/diskstats", "/proc/zoneinfo",
    "/proc/buddyinfo", "/proc/pagetypeinfo", "/proc/locks", "/proc/pressure",
    "/proc/sys/fs/file-nr", "/proc/sys/fs/inode-nr", "/proc/sys/fs/inode-state",
    "/proc/sys/fs/dentry-state", "/proc/sys/fs/aio-nr", "/proc/sys/kernel/pty/nr",
)
"""Host-wide readers a sandbox could watch another sandbox's activity through (a covert
channel measured at 20 bit/s error-free by bench/covert_timing.py): masked, so they read
as empty (files) or are hidden (directories)."""

MASKED_PATHS = [*DOCKER_DEFAULT_MASKED_PATHS, *HOST_ACTIVITY_PATHS]


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o444
    tar.addfile(info, io.BytesIO(data))


def build_bundle(request: ExecRequest) -> bytes:
    """Header plus tar that the bootstrap reads from stdin (see the module docstring)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        # uid/gid 0 and fixed mtimes come from TarInfo's defaults: no host detail leaks.
        _add_dir(tar, "work", 0o1777)
        _add_file(tar, f"work/{request.code_filename}", request.code.encode("utf-8", "surrogatepass"))
        if request.files:
            _add_dir(tar, INPUT_DIR.lstrip("/"), 0o755)
            for name, content in sorted(request.files.items()):
                _add_file(tar, f"{INPUT_DIR.lstrip('/')}/{name}", content)
                link = tarfile.TarInfo(f"work/{name}")
                link.type = tarfile.SYMTYPE
                link.linkname = f"{INPUT_DIR}/{name}"
                link.mode = 0o777
                tar.addfile(link)
    body = buf.getvalue()
    # The bootstrap's tar reads whole records; a partial one would swallow program stdin.
    if len(body) % _TAR_RECORD:
        body += b"\0" * (_TAR_RECORD - len(body) % _TAR_RECORD)
    return f"{request.language} {len(body)}\n".encode() + body
