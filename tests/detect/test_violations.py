from __future__ import annotations

from cellblock.detect.violations import RepeatedViolationDetector
from cellblock.logs.record import EgressEvent

from .conftest import rec


def test_repeated_escape_attempts() -> None:
    det = RepeatedViolationDetector()
    alerts = []
    for i in range(8):
        violations = ("mount blocked",) if i % 2 == 0 else ()
        alerts += det.observe(rec("m", violations=violations))
    alerts += det.observe(rec("m", egress=(EgressEvent(host="169.254.169.254", port=80,
                                                       allowed=False),)))
    assert len(alerts) == 1  # at 3, next at 6: no flood
    assert "mount blocked" in alerts[0].evidence and len(alerts[0].run_ids) == 3


def test_occasional_violation_is_not_reported() -> None:
    det = RepeatedViolationDetector()
    alerts = []
    for i in range(100):
        alerts += det.observe(rec("h", violations=("pids limit",) if i % 30 == 0 else ()))
    alerts += det.observe(rec("other", violations=("pids limit",)))
    assert alerts == []
