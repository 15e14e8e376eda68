"""The deferred-decision queue shared by the corpus-wide detectors."""

from __future__ import annotations

from cellblock.detect._deferred import Deferred


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _queue(clock: _Clock, **kw: object) -> Deferred[str]:
    args: dict[str, object] = {"delay": 10, "warmup": 5, "max_wait_s": 0.5,
                               "young_wait_s": 60.0, "clock": clock, "max_pending": 3}
    args.update(kw)
    return Deferred(**args)  # type: ignore[arg-type]


def test_count_or_time_whichever_comes_first() -> None:
    clock = _Clock()
    q = _queue(clock)
    q.defer("mature", 20)  # 20 >= warmup + delay: the short bound
    assert q.next_deadline() == 0.5
    assert q.due_by_count(29) == [] and q.due_by_time() == []
    clock.now = 0.5
    assert q.due_by_time() == ["mature"]
    assert q.next_deadline() is None
    assert q.due_by_count(30) == ["mature"]  # judged again by count (idempotent judges)


def test_count_first_drops_the_time_bound() -> None:
    q = _queue(_Clock())
    q.defer("a", 20)
    assert q.due_by_count(30) == ["a"]
    assert q.next_deadline() is None  # nothing left to wake up for


def test_young_corpus_long_bound_and_untimed_items() -> None:
    clock = _Clock()
    q = _queue(clock)
    q.defer("young", 3)
    q.defer("count-only", 20, timed=False)
    assert q.next_deadline() == 60.0
    clock.now = 1.0
    assert q.due_by_time() == []
    clock.now = 60.0
    assert q.due_by_time() == ["young"]


def test_warmup_holds_counts_until_flush_and_the_queue_is_bounded() -> None:
    q = _queue(_Clock(), max_wait_s=None, young_wait_s=None, warmup=15)
    q.defer("x", 0)
    q.defer("y", 1)
    assert q.due_by_count(12) == []  # still in warm-up, although their counts have passed...
    assert q.due_by_count(15) == ["x", "y"]  # ...decided once it is over
    for item in ("a", "b", "c"):
        q.defer(item, 20)
    assert q.full
    assert q.next_deadline() is None
    assert q.due_by_count(0, flush=True) == ["a", "b", "c"]
    assert not q.full
