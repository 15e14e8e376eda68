"""Deferred decisions, due after a record count or a time bound, whichever comes first.

A cross-agent detector cannot tell at once whether what it saw is rare: it waits for
``delay`` more records. In streaming, it also decides after ``max_wait_s`` seconds so
that a quiet stream still gets its alert, or after ``young_wait_s`` while the corpus is
young (fewer than ``warmup + delay`` records), when every shared input looks rare.
Batch callers never ask for the time-due ones; :meth:`Deferred.due_by_count` with
``flush`` takes everything at the end. An item can come due twice (by time, then by
count); the detector's judgement must be idempotent, as both of ours are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Deferred"]

T = TypeVar("T")


class Deferred(Generic[T]):
    """Pending decisions of one detector (bounded: at most ``max_pending``)."""

    def __init__(self, *, delay: int, warmup: int, max_wait_s: float | None,
                 young_wait_s: float | None, clock: Callable[[], float],
                 max_pending: int) -> None:
        self.delay = delay
        self.warmup = warmup
        self.max_wait_s = max_wait_s
        self.young_wait_s = young_wait_s
        self.max_pending = max_pending
        self._clock = clock
        # Each queue is in insertion order, which is also deadline order within it.
        self._by_count: deque[tuple[int, T]] = deque()
        self._timed: deque[tuple[float, int, T]] = deque()
        self._timed_young: deque[tuple[float, int, T]] = deque()

    @property
    def full(self) -> bool:
        return len(self._by_count) >= self.max_pending

    def defer(self, item: T, n: int, *, timed: bool = True) -> None:
        """Judge ``item`` ``delay`` records after record ``n`` (and, if ``timed``, after
        the time bound that applies at ``n``)."""
        due_n = n + self.delay
        self._by_count.append((due_n, item))
        if not timed:
            return
        mature = n >= self.warmup + self.delay
        wait = self.max_wait_s if mature else self.young_wait_s
        if wait is not None:
            (self._timed if mature else self._timed_young).append(
                (self._clock() + wait, due_n, item))

    def due_by_count(self, n: int, *, flush: bool = False) -> list[T]:
        """Items whose record count has come (none during warm-up), or all with
        ``flush``."""
        out: list[T] = []
        if n < self.warmup and not flush:
            return out
        while self._by_count and (flush or self._by_count[0][0] <= n):
            out.append(self._by_count.popleft()[1])
        for queue in (self._timed, self._timed_young):
            if flush:
                queue.clear()
            # Decided by count already: no reason to wake up for them.
            while queue and queue[0][1] <= n:
                queue.popleft()
        return out

    def due_by_time(self) -> list[T]:
        """Items whose time bound has passed (streaming callers poll this)."""
        out: list[T] = []
        if not self._timed and not self._timed_young:
            return out
        now = self._clock()
        for queue in (self._timed_young, self._timed):
            while queue and queue[0][0] <= now:
                out.append(queue.popleft()[2])
        return out

    def next_deadline(self) -> float | None:
        """When the earliest time bound falls due (on the clock), or ``None``."""
        heads = [q[0][0] for q in (self._timed, self._timed_young) if q]
        return min(heads, default=None)
