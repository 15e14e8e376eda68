"""The detector contract and the alert it raises.

A detector sees run records one at a time, in arrival order, and keeps whatever state
it needs (corpus statistics, per-agent history). ``observe`` returns alerts that can be
raised as soon as a record arrives; ``finish`` returns alerts that need the whole batch.
Streaming (the log service) and batch (``cellblock detect``) use the same code.

Some decisions are better taken a little later than the record that prompts them: a
key shared by two agents is only *rare* if the next few hundred runs do not use it too.
Such a detector defers the decision, and takes it after a number of further records or
after a time bound, whichever comes first. The time bound is what keeps alert latency
bounded on a quiet stream: a streaming caller calls ``poll`` whenever it is idle (and
after each batch), and ``next_deadline`` says when the next deferred decision falls due.
Batch callers never poll; ``finish`` takes every deferred decision at the end.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from cellblock.logs.record import RunRecord

__all__ = ["Alert", "Detector", "Severity"]

Severity = Literal["low", "medium", "high"]


class Alert(BaseModel):
    """Evidence that one or more agents may be using a covert channel."""

    model_config = ConfigDict(frozen=True)

    detector: str
    severity: Severity
    agents: tuple[str, ...]
    run_ids: tuple[str, ...]
    evidence: str
    """A short excerpt showing what was found (safe to show to a human operator)."""
    details: dict[str, object] = Field(default_factory=dict)

    @property
    def alert_id(self) -> str:
        """Stable id: the same finding on the same runs is the same alert."""
        key = "|".join([self.detector, *sorted(self.run_ids), self.evidence])
        return hashlib.sha256(key.encode()).hexdigest()[:24]


class Detector(ABC):
    """One covert-channel detector. Subclasses set ``name`` and implement ``observe``."""

    name: ClassVar[str]

    @abstractmethod
    def observe(self, record: RunRecord) -> list[Alert]:
        """Take one record; return alerts that can be raised now."""

    def finish(self) -> list[Alert]:
        """Return alerts that need the whole batch. Default: none."""
        return []

    def poll(self) -> list[Alert]:
        """Streaming only: take the deferred decisions whose time bound has passed and
        return their alerts. Default: none (the detector never defers)."""
        return []

    def next_deadline(self) -> float | None:
        """When (on the detector's clock, ``time.monotonic`` by default) the oldest
        deferred decision falls due, or ``None`` when nothing is deferred."""
        return None
