"""Fixture helpers for detector tests: build run records tersely."""

from __future__ import annotations

import itertools
from typing import Any

from cellblock.logs.record import RunRecord

_counter = itertools.count()


def rec(agent: str = "a1", **fields: Any) -> RunRecord:
    """A run record with a unique run id and sensible defaults."""
    n = next(_counter)
    base: dict[str, Any] = {
        "run_id": f"run-{n}",
        "agent_id": agent,
        "started_at": f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00",
        "exit_code": 0,
        "duration_ms": 80.0,
    }
    base.update(fields)
    if "stdout" in fields and "stdout_raw" not in fields:
        base["stdout_raw"] = fields["stdout"]
    if "stderr" in fields and "stderr_raw" not in fields:
        base["stderr_raw"] = fields["stderr"]
    return RunRecord(**base)
