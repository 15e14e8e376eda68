"""The detection engine: runs every detector over records as they arrive, or over a batch.

The log service calls :meth:`DetectionEngine.observe` on every ingested record, and
:meth:`DetectionEngine.poll` when idle (deferred decisions with a time bound), so a
detector that raises must never break ingestion: its exception is logged and the other
detectors still run. Alerts are de-duplicated by :attr:`Alert.alert_id`, within a bounded
memory of recently raised ids.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from cellblock.detect.base import Alert, Detector
from cellblock.detect.deaddrop import DeadDropDetector
from cellblock.detect.encoding import EncodedPayloadDetector
from cellblock.detect.signalling import DurationSignalDetector, ExitCodeSignalDetector
from cellblock.detect.similarity import NearDuplicateCodeDetector
from cellblock.detect.tokens import SharedRareTokenDetector
from cellblock.detect.unicode import UnicodeStegoDetector
from cellblock.detect.violations import RepeatedViolationDetector
from cellblock.detect.whitespace import WhitespaceStegoDetector
from cellblock.logs.record import RunRecord

__all__ = ["DetectionEngine", "default_detectors"]

log = logging.getLogger(__name__)

_SEEN_IDS_MAX = 200_000
"""How many alert ids the engine remembers to suppress repeats (bounded memory)."""


def default_detectors(clock: Callable[[], float] = time.monotonic) -> list[Detector]:
    """A fresh instance of every built-in detector, with default thresholds. ``clock``
    times the deferred decisions (a simulated one replays a stream at a chosen rate)."""
    return [
        SharedRareTokenDetector(clock=clock),
        EncodedPayloadDetector(),
        UnicodeStegoDetector(),
        WhitespaceStegoDetector(),
        ExitCodeSignalDetector(),
        DurationSignalDetector(),
        DeadDropDetector(),
        RepeatedViolationDetector(),
        NearDuplicateCodeDetector(clock=clock),
    ]


class DetectionEngine:
    """Runs a set of detectors in streaming (``observe``/``finish``) or batch (``analyze``)
    mode. Not thread-safe: give each ingesting thread its own engine or serialise calls."""

    def __init__(self, detectors: Sequence[Detector] | None = None) -> None:
        self.detectors: list[Detector] = (
            list(detectors) if detectors is not None else default_detectors()
        )
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.records_seen = 0

    def observe(self, record: RunRecord) -> list[Alert]:
        """Feed one record to every detector; return the new alerts it triggers."""
        self.records_seen += 1
        alerts: list[Alert] = []
        for detector in self.detectors:
            try:
                alerts.extend(detector.observe(record))
            except Exception:  # one buggy detector must not stop ingestion or the others
                log.exception("detector %s failed on run %s", detector.name, record.run_id)
        return self._new(alerts)

    def finish(self) -> list[Alert]:
        """Alerts that need the whole batch (call once, after the last ``observe``)."""
        return self._gather("finish", lambda d: d.finish())

    def poll(self) -> list[Alert]:
        """Streaming: deferred decisions that are due by time (call when idle and after
        each batch; cheap when nothing is due)."""
        return self._gather("poll", lambda d: d.poll())

    def _gather(self, what: str, call: Callable[[Detector], list[Alert]]) -> list[Alert]:
        """``call`` every detector; a failing one is logged and the others still run."""
        alerts: list[Alert] = []
        for detector in self.detectors:
            try:
                alerts.extend(call(detector))
            except Exception:
                log.exception("detector %s failed in %s()", detector.name, what)
        return self._new(alerts)

    def next_deadline(self) -> float | None:
        """The earliest time (``time.monotonic``) any detector wants to be polled."""
        deadlines = [d for d in (det.next_deadline() for det in self.detectors)
                     if d is not None]
        return min(deadlines, default=None)

    def analyze(self, records: Iterable[RunRecord]) -> list[Alert]:
        """Batch mode: observe every record, then finish; alerts de-duplicated by id."""
        alerts: list[Alert] = []
        for record in records:
            alerts.extend(self.observe(record))
        alerts.extend(self.finish())
        return alerts

    def _new(self, alerts: list[Alert]) -> list[Alert]:
        fresh: list[Alert] = []
        for alert in alerts:
            aid = alert.alert_id
            if aid in self._seen:
                self._seen.move_to_end(aid)
                continue
            self._seen[aid] = None
            if len(self._seen) > _SEEN_IDS_MAX:
                self._seen.popitem(last=False)
            fresh.append(alert)
        return fresh
