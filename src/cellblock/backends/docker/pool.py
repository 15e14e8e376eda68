"""The warm pool: containers prepared ahead of time and never used.

Creating a container (configuration, overlay mount, cgroup set-up in the daemon) is a
large share of ``docker run``. The pool does it in the background, per container
configuration, so a call only starts, waits and removes.

Rules that keep the pool safe:

* No code has ever run in a pool container: it is either created and never started,
  or (``pool_started``) started with its bootstrap blocked reading the code from stdin,
  like the bwrap backend's pool. There is no state to leak. :meth:`WarmPool.take`
  removes it from the pool for good; nothing is ever put back. Every container serves
  at most one call.
* Containers older than ``max_age_s`` are removed, not handed out (a rebuilt image or a
  changed seccomp profile is picked up within that time).
* The pool only holds containers for configurations that were used (or announced with
  :meth:`WarmPool.warm`), at most ``size`` each.
* Pool containers carry the owner labels of :mod:`.gc`: if this process dies they are
  reaped by the next backend start or ``cellblock gc``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["WarmPool"]

log = logging.getLogger("cellblock.docker")

# After a failed refill (daemon down, image missing), wait before trying again rather
# than spinning; calls still create their own containers and report the error.
_RETRY_AFTER_S = 5.0


T = TypeVar("T")


@dataclass(slots=True)
class _Entry(Generic[T]):
    item: T
    created: float


class WarmPool(Generic[T]):
    """A thread-safe pool of prepared, never-used containers, keyed by configuration.

    Args:
        size: Containers kept ready per key. ``0`` disables the pool.
        max_age_s: Containers older than this are removed instead of used.
        create: Prepares a container for a key (called from the filler thread).
        remove: Force-removes a prepared container; must not raise.
        ident: The container id of an item (for :attr:`handed_out`).
    """

    def __init__(
        self,
        size: int,
        max_age_s: float,
        create: Callable[[str], T],
        remove: Callable[[T], None],
        ident: Callable[[T], str],
    ) -> None:
        self.size = size
        self.max_age_s = max_age_s
        self._create = create
        self._remove = remove
        self._ident = ident
        self._lock = threading.Condition()
        self._ready: dict[str, deque[_Entry[T]]] = {}
        self._failed_at: dict[str, float] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        self.created_total = 0
        self.handed_out: set[str] = set()
        """Every container id ever returned by :meth:`take` (for tests and audits)."""

    def warm(self, key: str) -> None:
        """Start keeping ``size`` containers ready for ``key``."""
        if self.size == 0:
            return
        with self._lock:
            if self._closed:
                return
            self._ready.setdefault(key, deque())
            self._ensure_thread()
            self._lock.notify_all()

    def take(self, key: str) -> T | None:
        """A fresh container for ``key``, removed from the pool; None if none is ready."""
        if self.size == 0:
            return None
        stale: list[T] = []
        found: T | None = None
        with self._lock:
            if self._closed:
                return None
            queue = self._ready.setdefault(key, deque())
            now = time.monotonic()
            while queue:
                entry = queue.popleft()
                if now - entry.created > self.max_age_s:
                    stale.append(entry.item)
                    continue
                found = entry.item
                break
            if found is not None:
                self.handed_out.add(self._ident(found))
            self._ensure_thread()
            self._lock.notify_all()
        for item in stale:
            self._remove(item)
        return found

    def pooled(self) -> list[str]:
        """Ids currently waiting in the pool."""
        with self._lock:
            return [self._ident(e.item) for q in self._ready.values() for e in q]

    def close(self) -> None:
        """Stop refilling and remove every pooled container. Idempotent."""
        with self._lock:
            self._closed = True
            entries = [e for q in self._ready.values() for e in q]
            self._ready.clear()
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=60)
        for entry in entries:
            self._remove(entry.item)

    # -- the filler thread ---------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._fill_loop, name="cellblock-docker-pool", daemon=True
            )
            self._thread.start()

    def _next_job(self) -> tuple[str | None, list[T]]:
        """Under the lock: a key that needs a container, and expired items to remove."""
        now = time.monotonic()
        expired: list[T] = []
        need: str | None = None
        for key, queue in self._ready.items():
            while queue and now - queue[0].created > self.max_age_s:
                expired.append(queue.popleft().item)
            if (
                need is None
                and len(queue) < self.size
                and now - self._failed_at.get(key, -_RETRY_AFTER_S) >= _RETRY_AFTER_S
            ):
                need = key
        return need, expired

    def _fill_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                key, expired = self._next_job()
                if key is None and not expired:
                    # Sleep until a take/warm, or until the oldest entry expires.
                    self._lock.wait(timeout=min(self.max_age_s, _RETRY_AFTER_S))
                    continue
            for old in expired:
                self._remove(old)
            if key is None:
                continue
            try:
                item = self._create(key)
            except Exception as exc:
                log.warning("warm pool could not create a container: %s", exc)
                with self._lock:
                    self._failed_at[key] = time.monotonic()
                continue
            with self._lock:
                if self._closed:
                    closed = True
                else:
                    closed = False
                    self._failed_at.pop(key, None)
                    self._ready.setdefault(key, deque()).append(_Entry(item, time.monotonic()))
                    self.created_total += 1
            if closed:
                self._remove(item)
