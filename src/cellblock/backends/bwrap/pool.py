"""A small pool of spawned-but-never-started bwrap sandboxes.

Spawning a sandbox (namespaces, mounts, moving it into its cgroup) costs several
milliseconds, most of it an RCU grace period in the cgroup move. The pool does that work
before a call arrives. Each pooled sandbox is blocked before any user code exists in it,
is handed to exactly one call, and is destroyed after that call; nothing is ever returned
to the pool. Entries older than ``max_age_s`` are destroyed and replaced.

Sandboxes are interchangeable only when everything fixed at spawn time matches
(:class:`~cellblock.backends.bwrap.spawn.SpawnKey`), so the pool keeps one queue per key
and refills only the keys used recently.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from cellblock.backends.bwrap.spawn import PreparedSandbox, SpawnKey

__all__ = ["PrespawnPool"]

log = logging.getLogger("cellblock.bwrap")

_MAX_KEYS = 8


class PrespawnPool:
    """Thread-safe pool; ``take`` never blocks on a spawn."""

    def __init__(
        self,
        spawn: Callable[[SpawnKey], PreparedSandbox],
        size: int,
        max_age_s: float,
        workers: int = 2,
    ) -> None:
        self._spawn = spawn
        self._size = size
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._entries: dict[SpawnKey, collections.deque[PreparedSandbox]] = {}
        self._inflight: collections.Counter[SpawnKey] = collections.Counter()
        self._wanted: collections.OrderedDict[SpawnKey, None] = collections.OrderedDict()
        self._closed = False
        # Several workers: a spawn is mostly waiting (for bwrap's setup and for the
        # kernel's RCU grace period in the cgroup move), so spawns overlap well, and one
        # worker alone caps throughput at its spawn rate.
        self._threads = [
            threading.Thread(target=self._refill_loop, name=f"cellblock-pool-{i}", daemon=True)
            for i in range(max(1, workers))
        ]
        for thread in self._threads:
            thread.start()

    def take(self, key: SpawnKey) -> PreparedSandbox | None:
        """A ready sandbox for ``key``, or None (the caller spawns one itself)."""
        stale: list[PreparedSandbox] = []
        found: PreparedSandbox | None = None
        with self._lock:
            if self._closed:
                return None
            self._wanted[key] = None
            self._wanted.move_to_end(key)
            while len(self._wanted) > _MAX_KEYS:
                old, _ = self._wanted.popitem(last=False)
                stale.extend(self._entries.pop(old, ()))
            queue = self._entries.setdefault(key, collections.deque())
            now = time.monotonic()
            while queue:
                candidate = queue.popleft()
                if candidate.alive and now - candidate.created < self._max_age_s:
                    found = candidate
                    break
                stale.append(candidate)
            self._wakeup.notify()
        for entry in stale:
            entry.destroy()
        return found

    def close(self) -> None:
        """Destroy every pooled sandbox and stop refilling. Idempotent."""
        with self._lock:
            self._closed = True
            entries = [e for q in self._entries.values() for e in q]
            self._entries.clear()
            self._wakeup.notify_all()
        for entry in entries:
            entry.destroy()
        for thread in self._threads:
            if thread.is_alive() and threading.current_thread() is not thread:
                thread.join(timeout=10)

    def _next_job(self) -> SpawnKey | None:
        """Under the lock: the key that most needs a sandbox, expiring old ones."""
        now = time.monotonic()
        for key in reversed(self._wanted):
            queue = self._entries.setdefault(key, collections.deque())
            while queue and now - queue[0].created >= self._max_age_s:
                expired = queue.popleft()
                threading.Thread(target=expired.destroy, daemon=True).start()
            if len(queue) + self._inflight[key] < self._size:
                self._inflight[key] += 1
                return key
        return None

    def _refill_loop(self) -> None:
        failures = 0
        while True:
            with self._lock:
                key = None
                while not self._closed:
                    key = self._next_job()
                    if key is not None:
                        break
                    self._wakeup.wait(timeout=self._max_age_s / 2)
                if self._closed:
                    return
            assert key is not None
            try:
                entry = self._spawn(key)
                failures = 0
            except Exception as exc:
                with self._lock:
                    self._inflight[key] -= 1
                # Calls still work (they spawn themselves and report the error); back off.
                failures += 1
                log.warning("pool could not spawn a sandbox: %s", exc)
                time.sleep(min(5.0, 0.1 * 2**failures))
                continue
            with self._lock:
                self._inflight[key] -= 1
                if self._closed:
                    closed = True
                else:
                    closed = False
                    self._entries.setdefault(key, collections.deque()).append(entry)
            if closed:
                entry.destroy()
                return
