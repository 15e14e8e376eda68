"""Labels on every cellblock container, and the reaper of leftovers.

Every container cellblock creates carries :data:`MANAGED_LABEL` and the identity of the
process that owns it (boot id, pid and that pid's start time, so a recycled pid does not
look alive). A container outlives its call only when its owner dies mid-call (SIGKILL,
power loss) or between creating pool containers and using them. Such leftovers are
removed when a backend starts in any later process, and by ``cellblock gc``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cellblock.backends.docker.engine import engine_errors

__all__ = [
    "MANAGED_LABEL",
    "GcReport",
    "OwnerIdentity",
    "container_labels",
    "list_managed",
    "owner_alive",
    "reap",
]

log = logging.getLogger("cellblock.docker")

MANAGED_LABEL = "cellblock.managed"
OWNER_PID = "cellblock.owner_pid"
OWNER_START = "cellblock.owner_start"
OWNER_BOOT = "cellblock.owner_boot"
CREATED = "cellblock.created"
POOL_KEY = "cellblock.pool_key"


@dataclass(frozen=True, slots=True)
class OwnerIdentity:
    """Who owns a container: a process, unambiguously (pids are recycled)."""

    boot_id: str
    pid: int
    start_ticks: str


@cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _start_ticks(pid: int) -> str | None:
    """The process start time (field 22 of /proc/PID/stat), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def current_owner() -> OwnerIdentity:
    pid = os.getpid()
    return OwnerIdentity(_boot_id(), pid, _start_ticks(pid) or "0")


def container_labels(pool_key: str) -> dict[str, str]:
    """Labels of a new container owned by this process."""
    owner = current_owner()
    return {
        MANAGED_LABEL: "1",
        OWNER_PID: str(owner.pid),
        OWNER_START: owner.start_ticks,
        OWNER_BOOT: owner.boot_id,
        CREATED: f"{time.time():.3f}",
        POOL_KEY: pool_key,
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """True when the process named by ``labels`` is still running on this machine.

    A container from another boot, or one whose owner pid is gone or now belongs to a
    different process, has no live owner. (One daemon shared by several client machines
    is not supported: another machine's boot id differs, so its containers look dead.)
    """
    if labels.get(OWNER_BOOT) != _boot_id():
        return False
    try:
        pid = int(labels.get(OWNER_PID, ""))
    except ValueError:
        return False
    start = _start_ticks(pid)
    return start is not None and start == labels.get(OWNER_START)


def list_managed(client: Any) -> list[dict[str, Any]]:
    """Every cellblock container the daemon knows, in any state."""
    with engine_errors("list cellblock containers"):
        result: list[dict[str, Any]] = client.containers(
            all=True, filters={"label": f"{MANAGED_LABEL}=1"}
        )
    return result


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a reap did."""

    removed: tuple[str, ...]
    kept_live: int
    failed: tuple[str, ...]


def reap(client: Any, *, include_live: bool = False) -> GcReport:
    """Remove cellblock containers whose owner process is dead.

    ``include_live`` also removes containers of running cellblock processes: only for an
    operator who knows no sandbox is running (their calls would then fail).
    """
    import docker.errors

    removed: list[str] = []
    failed: list[str] = []
    kept = 0
    for entry in list_managed(client):
        labels = entry.get("Labels") or {}
        cid = str(entry.get("Id", ""))
        if not include_live and owner_alive(labels):
            kept += 1
            continue
        try:
            client.remove_container(cid, force=True, v=True)
            removed.append(cid)
        except docker.errors.NotFound:
            removed.append(cid)  # someone else removed it first
        except Exception as exc:  # keep going: one stuck container must not block the rest
            log.warning("could not remove leftover container %s: %s", cid[:12], exc)
            failed.append(cid)
    if removed:
        log.info("removed %d leftover cellblock container(s)", len(removed))
    return GcReport(tuple(removed), kept, tuple(failed))
