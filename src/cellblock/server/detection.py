"""Where the detectors run: inline in the request, or in a worker process.

Inline (``detection="inline"``): the engine observes each new record right after the
batch commits, under the service's lock, so an alert is stored before the POST that
carried its record returns. Simple and exact, but detection shares the ingesting core.

Process (``detection="process"``, the default for ``cellblock serve``): forked workers
own the engines. The service only wakes them after a commit; each worker reads the new
runs from the store in seq order, observes them and stores the alerts itself.
Ingestion and detection then run on different cores, and a slow detector delays alerts
instead of slowing ingestion. The built-in detectors are split into two workers of
about equal cost, the per-record and per-agent detectors and the corpus-wide ones (see
:func:`default_engine_groups`), so detection uses both cores and one group falling
behind under peak load never delays the alerts of the other. A worker exits on its own
when the service dies.

Some decisions are deferred (is a key shared by two agents rare, or about to become
common?) and bounded in time: workers sleep only until the next one falls due and poll
the engine after every chunk of runs, and inline detection has a ticker thread for it,
so an alert never waits for more traffic to arrive.

Both warm up the same way: the newest ``warm_runs`` stored runs are replayed into a
fresh engine at start, so a restart keeps recent correlation context; alerts found
while replaying are stored too (deduplicated by id), which also covers runs that were
committed just before a crash but not yet analysed.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, Protocol, runtime_checkable

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.logs.store import Store, StoredRun
from cellblock.server.metrics import Metrics

__all__ = [
    "AlertSource",
    "Detection",
    "InlineDetection",
    "ProcessDetection",
    "default_engine",
    "default_engine_groups",
]

log = logging.getLogger(__name__)

_READ_CHUNK = 500
# CPU priority of the workers: ingestion (nice 0) first; the detectors get what is left
# during a burst and catch up afterwards.
_NICE = 5


class AlertSource(Protocol):
    """What the service needs from the detection engine."""

    def observe(self, record: RunRecord) -> list[Alert]: ...


@runtime_checkable
class Pollable(Protocol):
    """An engine with deferred, time-bounded decisions (the built-in one): it is polled
    when idle so that an alert never waits for more records to arrive."""

    def poll(self) -> list[Alert]: ...

    def next_deadline(self) -> float | None: ...


_IDLE_WAIT_S = 0.5
"""Longest sleep of a worker with nothing deferred (it checks for a dead parent)."""
_MIN_WAIT_S = 0.01


def _poll(engine: AlertSource) -> list[Alert]:
    if not isinstance(engine, Pollable):
        return []
    try:
        return engine.poll()
    except Exception:  # detection must never stop the worker
        log.exception("detection poll failed")
        return []


def _idle_timeout(engine: AlertSource) -> float:
    """How long a worker may sleep before a deferred decision falls due."""
    deadline = engine.next_deadline() if isinstance(engine, Pollable) else None
    if deadline is None:
        return _IDLE_WAIT_S
    # A floor, so that a detector whose poll keeps failing cannot make a worker spin.
    return min(_IDLE_WAIT_S, max(_MIN_WAIT_S, deadline - time.monotonic()))


class Detection(Protocol):
    """How the service hands committed runs to the detectors."""

    warmed: int

    def start(self) -> None:
        """Warm up (replay stored runs); return when ready for new runs."""

    def after_commit(self, inserted: Sequence[StoredRun]) -> list[Alert]:
        """Called in chain order, under the service's write lock, after each commit.
        Returns the alerts it stored now (inline) or an empty list (process)."""

    def detected_seq(self) -> int:
        """Every run up to this seq has been analysed."""

    def close(self) -> None: ...


CORPUS_DETECTORS = frozenset({"shared-tokens", "near-duplicate-code"})
"""Built-in detectors that judge a record against the whole recent corpus (document
frequencies, a MinHash window) and defer their decisions. Together they cost about as
much per record as all the others together (~50 µs each group on this project's 2-core
reference machine; see docs/log-service.md), so they get a worker of their own and the
two workers share the load evenly."""


def default_engine() -> AlertSource:
    """Every built-in detector in one engine (inline detection, batch use)."""
    from cellblock.detect.engine import DetectionEngine

    return DetectionEngine()


def _record_engine() -> AlertSource:
    from cellblock.detect.engine import DetectionEngine, default_detectors

    return DetectionEngine([d for d in default_detectors() if d.name not in CORPUS_DETECTORS])


def _corpus_engine() -> AlertSource:
    from cellblock.detect.engine import DetectionEngine, default_detectors

    return DetectionEngine([d for d in default_detectors() if d.name in CORPUS_DETECTORS])


def default_engine_groups() -> list[Callable[[], AlertSource]]:
    """Factories for the detection workers: per-record and per-agent detectors, then
    the corpus-wide ones."""
    return [_record_engine, _corpus_engine]


def _observe(engine: AlertSource, record: RunRecord) -> list[Alert]:
    try:
        return engine.observe(record)
    except Exception:  # detection must never make ingestion fail
        log.exception("detection failed on run %s", record.run_id)
        return []


def _warm(store: Store, engine: AlertSource, warm_runs: int) -> tuple[int, int, list[Alert]]:
    """Replay the newest runs; return (count, last seq replayed, alerts stored)."""
    head = store.head()[0]
    found = store.recent_runs(warm_runs) if warm_runs else []
    stored: list[Alert] = []
    for run in found:
        alerts = _observe(engine, run.record)
        if alerts:
            stored.extend(store.add_alerts(alerts, run.seq))
    last = found[-1].seq if found else head
    return len(found), last, stored


class InlineDetection:
    """Detection in the request thread (see the module docstring), plus a small thread
    that takes the engine's time-bounded decisions when no request brings new runs."""

    def __init__(self, store: Store, engine_factory: Callable[[], AlertSource],
                 metrics: Metrics, warm_runs: int) -> None:
        self.store = store
        self.metrics = metrics
        self.warm_runs = warm_runs
        self._factory = engine_factory
        self._engine: AlertSource = engine_factory()
        self._seq = 0
        self.warmed = 0
        # The engine is not thread-safe: requests (already serialised by the service's
        # lock) and the ticker take turns on it.
        self._engine_lock = threading.Lock()
        self._closing = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        with self._engine_lock:
            self._engine = self._factory()
            self.warmed, self._seq, alerts = _warm(self.store, self._engine, self.warm_runs)
        for alert in alerts:
            self.metrics.alerts_raised.labels(detector=alert.detector).inc()
        if isinstance(self._engine, Pollable) and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="cellblock-detect-tick",
                                            daemon=True)
            self._ticker.start()

    def after_commit(self, inserted: Sequence[StoredRun]) -> list[Alert]:
        t0 = time.perf_counter()
        raised: list[Alert] = []
        with self._engine_lock:
            for run in inserted:
                found = _observe(self._engine, run.record)
                if found:
                    raised.extend(self._store(found, run.seq))
                self._seq = run.seq
            if inserted:
                raised.extend(self._store(_poll(self._engine), self._seq))
        self.metrics.detect_seconds.observe(time.perf_counter() - t0)
        return raised

    def _store(self, alerts: list[Alert], seq: int) -> list[Alert]:
        if not alerts:
            return []
        stored = self.store.add_alerts(alerts, seq)
        for alert in stored:
            self.metrics.alerts_raised.labels(detector=alert.detector).inc()
        return stored

    def _tick(self) -> None:
        while True:
            with self._engine_lock:
                timeout = _idle_timeout(self._engine)
            if self._closing.wait(timeout):
                return
            try:
                with self._engine_lock:
                    self._store(_poll(self._engine), self._seq)
            except Exception:  # the database may be briefly unavailable: try again later
                log.exception("storing time-bounded alerts failed")

    def detected_seq(self) -> int:
        return self._seq

    def close(self) -> None:
        self._closing.set()
        if self._ticker is not None:
            self._ticker.join(timeout=10)


class ProcessDetection:
    """Detection in forked worker processes (see the module docstring).

    One worker per engine factory: each sees every run and keeps its own cursor, so a
    slow group of detectors only delays its own alerts, never the other group's.
    """

    def __init__(self, store: Store, engine_factories: Sequence[Callable[[], AlertSource]],
                 metrics: Metrics, warm_runs: int) -> None:
        self.store = store
        self.metrics = metrics
        self.warm_runs = warm_runs
        self._workers = [_Worker(self, factory, i) for i, factory in enumerate(engine_factories)]
        self.warmed = 0

    def start(self) -> None:
        for worker in self._workers:
            worker.spawn()
        self.warmed = max((w.warmed for w in self._workers), default=0)

    def after_commit(self, inserted: Sequence[StoredRun]) -> list[Alert]:
        if inserted:
            for worker in self._workers:
                worker.wake()
        return []

    def detected_seq(self) -> int:
        return min((w.seq for w in self._workers), default=self.store.head()[0])

    def worker_seqs(self) -> list[int]:
        return [w.seq for w in self._workers]

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid]

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()


class _Worker:
    """One detection worker process and the thread that reads its progress reports."""

    def __init__(self, owner: ProcessDetection, factory: Callable[[], AlertSource],
                 index: int) -> None:
        self.owner = owner
        self.factory = factory
        self.index = index
        self._ctx = multiprocessing.get_context("fork")
        self._wake: Any = None
        self._stop: Any = None
        self.proc: Any = None
        self._events: Connection | None = None
        self.seq = 0
        self.warmed = 0
        self._closing = False

    @property
    def pid(self) -> int:
        return int(self.proc.pid) if self.proc is not None and self.proc.pid else 0

    def spawn(self) -> None:
        wake, stop = self._ctx.Event(), self._ctx.Event()
        ours, theirs = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=_worker_main, name=f"cellblock-detect-{self.index}", daemon=True,
            args=(self.owner.store, self.factory, self.owner.warm_runs, wake, stop,
                  theirs, os.getpid(), _NICE),
        )
        proc.start()
        theirs.close()
        # Wait for the warm-up to finish, so "started" means "detecting".
        try:
            kind, warmed, seq = ours.recv()
        except EOFError as exc:
            proc.join(timeout=10)
            raise RuntimeError(f"detection worker failed to start ({proc.exitcode})") from exc
        assert kind == "ready"
        self.warmed, self.seq = int(warmed), int(seq)
        self._wake, self._stop, self.proc, self._events = wake, stop, proc, ours
        threading.Thread(target=self._read_events, args=(ours, proc),
                         name=f"cellblock-detect-events-{self.index}", daemon=True).start()

    def _read_events(self, conn: Connection, proc: Any) -> None:
        metrics = self.owner.metrics
        while True:
            try:
                kind, seq, detectors, seconds = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "progress":
                self.seq = max(self.seq, int(seq))
                for name in detectors:
                    metrics.alerts_raised.labels(detector=name).inc()
                metrics.detect_seconds.observe(float(seconds))
        proc.join(timeout=5)
        if not self._closing:
            # The worker died (a bug or the OOM killer): start a fresh one, which
            # replays the newest runs and carries on from there.
            log.error("detection worker exited (code %s); restarting it", proc.exitcode)
            time.sleep(1.0)
            if not self._closing:
                self.spawn()

    def wake(self) -> None:
        # A wake-up, not a message: any number of commits coalesce into one pass of
        # the worker, and the service never blocks on a full pipe.
        if self._wake is not None:
            self._wake.set()

    def stop(self) -> None:
        self._closing = True
        if self._stop is not None:
            self._stop.set()
            self._wake.set()
        if self.proc is not None:
            self.proc.join(timeout=10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=10)
        if self._events is not None:
            self._events.close()


def _worker_main(inherited: Store, factory: Callable[[], AlertSource], warm_runs: int,
                 wake: Any, stop: Any, events: Connection, parent: int, nice: int) -> None:
    """The detection worker: warm up, then follow the chain until told to stop."""
    # Forked: the service's pooled connections are copies of the parent's sockets and
    # files. Forget them without closing (closing would hang up on the parent's behalf)
    # and open our own.
    inherited.engine.dispose(close=False)
    url = inherited.url
    # Ingestion first: under a burst the workers yield the CPU to the service (a run
    # must never be refused or delayed because analysis is busy) and catch up after.
    with contextlib.suppress(OSError):
        os.nice(nice)
    store = Store(url, migrate=False)
    engine = factory()
    warmed, last, _ = _warm(store, engine, warm_runs)
    events.send(("ready", warmed, last))
    while not stop.is_set() and os.getppid() == parent:  # parent gone (even SIGKILL): exit
        # Sleep until woken by a commit or until a deferred decision falls due.
        wake.wait(_idle_timeout(engine))
        # Clear before reading: a commit that lands during the pass sets it again.
        wake.clear()
        last = _follow(store, engine, last, events, lambda: stop.is_set() or
                       os.getppid() != parent)
    store.close()
    events.close()


def _follow(store: Store, engine: AlertSource, last: int, events: Connection,
            quit_now: Callable[[], bool]) -> int:
    """Analyse every run after ``last``, then take the deferred decisions that are due;
    report progress after each chunk."""
    while not quit_now():
        t0 = time.perf_counter()
        runs = store.list_runs(after_seq=last, limit=_READ_CHUNK)
        detectors: list[str] = []
        for run in runs:
            alerts = _observe(engine, run.record)
            if alerts:
                detectors.extend(a.detector for a in store.add_alerts(alerts, run.seq))
        if runs:
            last = runs[-1].seq
        # Time-bounded decisions: after every chunk, so a backlog does not hold them up.
        due = _poll(engine)
        if due:
            detectors.extend(a.detector for a in store.add_alerts(due, last))
        if runs or detectors:
            try:
                events.send(("progress", last, detectors, time.perf_counter() - t0))
            except OSError:  # the service is gone
                break
        if not runs:
            return last
    return last
