"""Ingestion: store a batch in the chain, hand new runs to detection, flag conflicts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.logs.store import Store
from cellblock.server.detection import Detection
from cellblock.server.metrics import Metrics

__all__ = ["CONFLICT_DETECTOR", "IngestResult", "IngestService"]

log = logging.getLogger(__name__)

CONFLICT_DETECTOR = "run-id-conflict"
"""Pseudo-detector for a record resubmitted under a known run_id with other content:
either a broken runner or someone rewriting history, worth an operator's eye."""


class IngestResult(BaseModel):
    """The answer to ``POST /v1/runs``."""

    model_config = ConfigDict(frozen=True)

    inserted: int
    duplicates: int
    conflicts: list[str]
    alerts: int
    """Alerts stored while handling this batch (inline detection and conflicts only;
    with detection in a worker process they arrive moments later)."""
    head_seq: int


class IngestService:
    """The single writer of a log service: storage and chain, then detection."""

    def __init__(self, store: Store, detection: Detection, metrics: Metrics) -> None:
        self.store = store
        self.detection = detection
        self.metrics = metrics
        # Append + hand-off under one lock, so detection sees runs in chain order even
        # with several concurrent POSTs.
        self._lock = threading.Lock()

    def start(self) -> None:
        self.detection.start()
        self.metrics.chain_head.set(self.store.head()[0])

    def close(self) -> None:
        self.detection.close()
        self.store.close()

    def ingest(self, records: Sequence[RunRecord]) -> IngestResult:
        t0 = time.perf_counter()
        with self._lock:
            result = self.store.append(records)
            raised = self.detection.after_commit(result.inserted)
            if result.conflicts:
                raised = [*raised, *self._conflict_alerts(records, result.conflicts)]
        self.metrics.runs_ingested.inc(len(result.inserted))
        self.metrics.runs_duplicate.inc(len(result.duplicates))
        self.metrics.runs_conflict.inc(len(result.conflicts))
        self.metrics.batch_records.observe(len(records))
        head = result.inserted[-1].seq if result.inserted else self.store.head()[0]
        self.metrics.chain_head.set(head)
        self.metrics.ingest_seconds.observe(time.perf_counter() - t0)
        return IngestResult(inserted=len(result.inserted), duplicates=len(result.duplicates),
                            conflicts=result.conflicts, alerts=len(raised), head_seq=head)

    def _conflict_alerts(self, records: Sequence[RunRecord], conflicts: list[str]) -> list[Alert]:
        out: list[Alert] = []
        wanted = set(conflicts)
        for rec in records:
            if rec.run_id not in wanted:
                continue
            wanted.discard(rec.run_id)
            existing = self.store.get_run(rec.run_id)
            agents = {rec.agent_id} | ({existing.record.agent_id} if existing else set())
            log.warning("rejected a different record under known run_id %s", rec.run_id)
            out.append(Alert(
                detector=CONFLICT_DETECTOR, severity="high", agents=tuple(sorted(agents)),
                run_ids=(rec.run_id,),
                evidence="a different record was submitted under an already logged run_id",
                details={"submitted_agent": rec.agent_id},
            ))
        stored = self.store.add_alerts(out, None)
        for alert in stored:
            self.metrics.alerts_raised.labels(detector=alert.detector).inc()
        return stored
