"""The run record: everything the log service knows about one sandbox call.

One record per call, written by the runner for every backend. It holds the raw output
(before sanitising) next to what the model actually saw, so detectors can look at the
whole picture while the model only ever got the sanitised view.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EgressEvent", "Recorder", "RunRecord"]


class EgressEvent(BaseModel):
    """One connection attempt seen by the egress proxy."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str
    port: int
    allowed: bool
    bytes_out: int = 0
    bytes_in: int = 0


class RunRecord(BaseModel):
    """One sandbox call, as stored by the log service. Unknown fields are ignored on input
    so that older services accept records from newer runners."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    agent_id: str = "anonymous"
    session_id: str = "default"
    started_at: str
    """ISO 8601 timestamp with timezone."""
    duration_ms: float = 0.0
    backend: str = "unknown"
    language: str = "python"
    code: str = ""
    stdout_raw: str = ""
    """What the program wrote, before sanitising (capped at the output limit)."""
    stderr_raw: str = ""
    stdout: str = ""
    """What the model saw."""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    killed_reason: str | None = None
    truncated: bool = False
    violations: tuple[str, ...] = ()
    egress: tuple[EgressEvent, ...] = ()
    extra: dict[str, Any] = Field(default_factory=dict)
    """Free-form metadata from integrations (tool name, model, ...)."""


class Recorder(Protocol):
    """Where the runner sends each record. Must not raise for transport failures: a
    recorder that cannot deliver spools and retries, it never loses a record and never
    fails the sandbox call."""

    def record(self, record: RunRecord) -> None: ...

    def close(self) -> None: ...
