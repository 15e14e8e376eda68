from __future__ import annotations

from cellblock.detect.jsonl import LineProblem, parse_lines
from cellblock.logs.record import RunRecord


def test_good_bad_and_tolerated_lines() -> None:
    lines = [
        '{"run_id": "r1", "agent_id": "a", "started_at": "2026-01-01T00:00:00+00:00"}',
        "",
        "not json at all",
        "[1, 2, 3]",
        '{"agent_id": "no run id"}',
        '{"run_id": "r2", "exit_code": "abc"}',
        '{"run_id": "r3", "unknown_field": 1, "stdout": "hi"}',  # unknown + missing optional
        '{"run_id": "r4", "agent_id": null}',
        '{"run_id": "r5"',  # truncated
    ]
    items = list(parse_lines(lines))
    records = [i for i in items if isinstance(i, RunRecord)]
    problems = [i for i in items if isinstance(i, LineProblem)]
    assert [r.run_id for r in records] == ["r1", "r3", "r4"]
    assert records[1].stdout == "hi" and records[2].agent_id == "anonymous"
    assert [p.line for p in problems] == [3, 4, 5, 6, 9]
    assert "JSON" in problems[0].error
    assert "object" in problems[1].error
    assert "run_id" in problems[2].error
    assert "exit_code" in problems[3].error
