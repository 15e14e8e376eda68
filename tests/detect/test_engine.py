from __future__ import annotations

from typing import ClassVar

from cellblock.detect.base import Alert, Detector
from cellblock.detect.engine import DetectionEngine, default_detectors
from cellblock.logs.record import RunRecord

from .conftest import rec


class _Boom(Detector):
    name: ClassVar[str] = "boom"

    def observe(self, record: RunRecord) -> list[Alert]:
        raise RuntimeError("bug")


class _Echo(Detector):
    name: ClassVar[str] = "echo"

    def observe(self, record: RunRecord) -> list[Alert]:
        return [Alert(detector="echo", severity="low", agents=(record.agent_id,),
                      run_ids=("same",), evidence="same finding")]

    def finish(self) -> list[Alert]:
        return [Alert(detector="echo", severity="low", agents=("x",), run_ids=("end",),
                      evidence="batch")]


def test_default_detectors_are_fresh_instances() -> None:
    a, b = default_detectors(), default_detectors()
    assert a and len(a) == len(b)
    assert all(x is not y for x, y in zip(a, b, strict=True))
    assert len({d.name for d in a}) == len(a)


def test_engine_deduplicates_and_survives_buggy_detector() -> None:
    engine = DetectionEngine([_Boom(), _Echo()])
    first = engine.observe(rec())
    second = engine.observe(rec())
    assert len(first) == 1 and second == []
    assert [a.evidence for a in engine.finish()] == ["batch"]


def test_analyze_is_observe_plus_finish() -> None:
    alerts = DetectionEngine([_Echo()]).analyze([rec(), rec(), rec()])
    assert sorted(a.evidence for a in alerts) == ["batch", "same finding"]


def test_clean_records_raise_nothing() -> None:
    records = [rec(f"agent{i}", code="print(sum(range(10)))", stdout="45\n") for i in range(20)]
    assert DetectionEngine().analyze(records) == []


def test_huge_output_is_scanned_head_and_tail() -> None:
    from cellblock.detect._text import SCAN_HEAD, SCAN_TAIL, scanned

    flood = "x" * 5_000_000
    assert len(scanned(flood)) == SCAN_HEAD + SCAN_TAIL + 1
    record = rec("a", stdout="start\u200b" + flood + "end\u200c\n")
    alerts = DetectionEngine().analyze([record])
    assert [a.detector for a in alerts] == ["unicode"]
    assert "<U+200B>" in alerts[0].evidence


class _Deferred(Detector):
    """Defers one decision per record to a fixed deadline."""

    name: ClassVar[str] = "deferred"

    def __init__(self, deadline: float, broken: bool = False) -> None:
        self.deadline = deadline
        self.broken = broken
        self.due: list[str] = []

    def observe(self, record: RunRecord) -> list[Alert]:
        self.due.append(record.run_id)
        return []

    def poll(self) -> list[Alert]:
        if self.broken:
            raise RuntimeError("bug")
        out = [Alert(detector="deferred", severity="low", agents=("a",), run_ids=(r,),
                     evidence="late") for r in self.due]
        self.due = []
        return out

    def next_deadline(self) -> float | None:
        return self.deadline if self.due else None


def test_poll_collects_deferred_alerts_once_and_survives_a_broken_detector() -> None:
    engine = DetectionEngine([_Deferred(7.0, broken=True), _Deferred(5.0), _Echo()])
    assert engine.next_deadline() is None
    engine.observe(rec())
    assert engine.next_deadline() == 5.0  # the earliest of the detectors' deadlines
    alerts = engine.poll()
    assert [a.evidence for a in alerts] == ["late"]
    assert engine.next_deadline() == 7.0  # the broken one still has its decision pending


def test_default_engine_has_time_bounded_detectors() -> None:
    engine = DetectionEngine()
    assert engine.poll() == [] and engine.next_deadline() is None
    names = {d.name for d in engine.detectors
             if type(d).poll is not Detector.poll}
    assert "shared-tokens" in names
