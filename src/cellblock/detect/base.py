"""The detector contract and the alert it raises.

A detector sees run records one at a time, in arrival order, and keeps whatever state
it needs (corpus statistics, per-agent history). ``observe`` returns alerts that can be
raised as soon as a record arrives; ``finish`` returns alerts that need the whole batch.
Streaming (the log service) and batch (``cellblock detect``) use the same code.
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
