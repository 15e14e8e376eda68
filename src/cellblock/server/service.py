"""Ingestion: store a batch, run the detectors on what is new, store their alerts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.logs.store import Store, StoredRun
from cellblock.server.metrics import Metrics

__all__ = ["CONFLICT_DETECTOR", "AlertSource", "IngestResult", "IngestService"]

log = logging.getLogger(__name__)

CONFLICT_DETECTOR = "run-id-conflict"
"""Pseudo-detector for a record resubmitted under a known run_id with other content:
either a broken runner or someone rewriting history, worth an operator's eye."""


class AlertSource(Protocol):
    """What the service needs from the detection engine."""

    def observe(self, record: RunRecord) -> list[Alert]: ...


class IngestResult(BaseModel):
    """The answer to ``POST /v1/runs``."""

    model_config = ConfigDict(frozen=True)

    inserted: int
    duplicates: int
    conflicts: list[str]
    alerts: int
    head_seq: int


class IngestService:
    """The single writer of a log service: storage, chain and streaming detection.

    Detection runs inline, right after the batch commits, so an alert is stored before
    the POST that carried its record returns. Runs are committed before detection: if
    the process dies in between, the alerts are recomputed at the next start, when the
    newest ``warm_runs`` records are replayed into a fresh engine (alerts are
    deduplicated by id, so replaying never doubles one).
    """

    def __init__(
        self,
        store: Store,
        engine_factory: Callable[[], AlertSource],
        metrics: Metrics,
        *,
        warm_runs: int = 10_000,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self._engine_factory = engine_factory
        self._engine = engine_factory()
        # The engine is not thread-safe and must see records in chain order.
        self._detect_lock = threading.Lock()
        self.warm_runs = warm_runs
        self.warmed = 0

    def warm_up(self) -> int:
        """Replay the newest stored runs into the detectors; store alerts they find."""
        records = self.store.recent_records(self.warm_runs) if self.warm_runs else []
        with self._detect_lock:
            self._engine = self._engine_factory()
            for rec in records:
                found = self._observe(rec)
                if found:
                    self._store_alerts(found, None)
        self.warmed = len(records)
        self.metrics.chain_head.set(self.store.head()[0])
        log.info("detectors warmed up with %d stored runs", len(records))
        return len(records)

    def ingest(self, records: Sequence[RunRecord]) -> IngestResult:
        t0 = time.perf_counter()
        with self._detect_lock:
            # Holding the detect lock across append + observe keeps the engine's view in
            # chain order even with several concurrent POSTs.
            result = self.store.append(records)
            t1 = time.perf_counter()
            raised: list[Alert] = []
            for stored in result.inserted:
                found = self._observe(stored.record)
                if found:
                    raised.extend(self._store_alerts(found, stored.seq))
            if result.conflicts:
                raised.extend(self._conflict_alerts(records, result.conflicts))
        self.metrics.detect_seconds.observe(time.perf_counter() - t1)
        self.metrics.runs_ingested.inc(len(result.inserted))
        self.metrics.runs_duplicate.inc(len(result.duplicates))
        self.metrics.runs_conflict.inc(len(result.conflicts))
        self.metrics.batch_records.observe(len(records))
        head = result.inserted[-1].seq if result.inserted else self.store.head()[0]
        self.metrics.chain_head.set(head)
        self.metrics.ingest_seconds.observe(time.perf_counter() - t0)
        return IngestResult(inserted=len(result.inserted), duplicates=len(result.duplicates),
                            conflicts=result.conflicts, alerts=len(raised), head_seq=head)

    def _observe(self, record: RunRecord) -> list[Alert]:
        try:
            return self._engine.observe(record)
        except Exception:  # detection must never make ingestion fail
            log.exception("detection failed on run %s", record.run_id)
            return []

    def _store_alerts(self, alerts: list[Alert], seq: int | None) -> list[Alert]:
        stored = self.store.add_alerts(alerts, seq)
        for alert in stored:
            self.metrics.alerts_raised.labels(detector=alert.detector).inc()
        return stored

    def _conflict_alerts(self, records: Sequence[RunRecord], conflicts: list[str]) -> list[Alert]:
        out: list[Alert] = []
        wanted = set(conflicts)
        for rec in records:
            if rec.run_id not in wanted:
                continue
            wanted.discard(rec.run_id)
            existing: StoredRun | None = self.store.get_run(rec.run_id)
            agents = {rec.agent_id} | ({existing.record.agent_id} if existing else set())
            log.warning("rejected a different record under known run_id %s", rec.run_id)
            out.append(Alert(
                detector=CONFLICT_DETECTOR, severity="high", agents=tuple(sorted(agents)),
                run_ids=(rec.run_id,),
                evidence="a different record was submitted under an already logged run_id",
                details={"submitted_agent": rec.agent_id},
            ))
        return self._store_alerts(out, None)
