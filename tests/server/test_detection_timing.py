"""How long a detection worker may sleep: until the next deferred decision, never 0."""

from __future__ import annotations

import time

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.server.detection import _idle_timeout, _poll


class _Observer:
    def observe(self, record: RunRecord) -> list[Alert]:
        return []


class _Deferring(_Observer):
    def __init__(self, deadline: float | None, broken: bool = False) -> None:
        self.deadline = deadline
        self.broken = broken

    def poll(self) -> list[Alert]:
        if self.broken:
            raise RuntimeError("bug")
        return []

    def next_deadline(self) -> float | None:
        return self.deadline


def test_an_engine_without_deferred_decisions_sleeps_the_idle_wait() -> None:
    assert _idle_timeout(_Observer()) == 0.5
    assert _poll(_Observer()) == []
    assert _idle_timeout(_Deferring(None)) == 0.5


def test_sleep_ends_at_the_next_deadline() -> None:
    timeout = _idle_timeout(_Deferring(time.monotonic() + 0.2))
    assert 0.1 < timeout <= 0.2
    assert _idle_timeout(_Deferring(time.monotonic() + 60)) == 0.5


def test_an_overdue_deadline_that_poll_cannot_clear_does_not_spin() -> None:
    engine = _Deferring(time.monotonic() - 5, broken=True)
    assert _poll(engine) == []  # the failure is logged, not raised
    assert _idle_timeout(engine) >= 0.01
