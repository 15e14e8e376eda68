"""Record factories shared by the log and server tests."""

from __future__ import annotations

from cellblock.logs.record import RunRecord


def make_record(i: int, *, agent: str | None = None, **fields: object) -> RunRecord:
    base: dict[str, object] = {
        "run_id": f"run-{i:06d}",
        "agent_id": agent or f"agent-{i % 4}",
        "session_id": "s1",
        "started_at": f"2026-11-29T12:{(i // 60) % 60:02d}:{i % 60:02d}+00:00",
        "duration_ms": 10.0 + i % 7,
        "backend": "bwrap",
        "code": f"print({i})",
        "stdout_raw": f"{i}\n",
        "stdout": f"{i}\n",
        "exit_code": 0,
    }
    base.update(fields)
    return RunRecord.model_validate(base)
