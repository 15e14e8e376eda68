"""How run records leave the runner: into the embedded store, or to a remote service.

:func:`default_recorder` picks one: a :class:`RemoteRecorder` when ``CELLBLOCK_LOG_URL``
names a log service (token from ``CELLBLOCK_LOG_TOKEN``), else an
:class:`EmbeddedRecorder` writing to ``<cellblock_home>/runs.db``.

Neither ever raises for a transport failure or loses a record: what cannot be delivered
now goes to an append-only spool file under ``<cellblock_home>/spool`` and is delivered
later, in order, before anything newer. Delivery is at-least-once; the store is
idempotent by ``run_id``, so each record is stored exactly once.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import queue
import threading
import time
import weakref
from pathlib import Path

import requests

from cellblock.images.store import cellblock_home
from cellblock.logs.record import Recorder, RunRecord
from cellblock.logs.spool import Spool
from cellblock.logs.store import Store

__all__ = [
    "DeliveryError",
    "EmbeddedRecorder",
    "RemoteRecorder",
    "default_recorder",
]

log = logging.getLogger(__name__)

LOG_URL_ENV = "CELLBLOCK_LOG_URL"
LOG_TOKEN_ENV = "CELLBLOCK_LOG_TOKEN"  # noqa: S105 - the variable's name, not a secret


class DeliveryError(Exception):
    """The destination did not take a batch now; keep it spooled and retry later."""


def default_recorder() -> Recorder:
    """The recorder ``cellblock run`` uses (see the module docstring)."""
    url = os.environ.get(LOG_URL_ENV, "").strip()
    if url:
        return RemoteRecorder(url, os.environ.get(LOG_TOKEN_ENV) or None)
    return EmbeddedRecorder()


def _spool_dir() -> Path:
    return cellblock_home() / "spool"


class EmbeddedRecorder:
    """Writes each record straight into a local :class:`Store` (SQLite by default).

    The store is opened on the first record, so constructing the recorder is free. If
    the database cannot be written (disk full, locked for longer than the busy
    timeout), the record is spooled and delivered by a later ``record``/``close``.
    """

    def __init__(self, url: str | None = None, *, spool_dir: Path | None = None) -> None:
        self.url = url
        self._store: Store | None = None
        key = hashlib.sha256((url or "embedded").encode()).hexdigest()[:16]
        self._spool = Spool((spool_dir or _spool_dir()) / f"embedded-{key}.jsonl")
        self._lock = threading.Lock()

    def _open(self) -> Store:
        if self._store is None:
            self._store = Store(self.url)
        return self._store

    def _send(self, batch: list[RunRecord]) -> None:
        result = self._open().append(batch)
        for run_id in result.conflicts:
            log.error("run %s was already logged with different content; rejected", run_id)

    def record(self, record: RunRecord) -> None:
        with self._lock:
            spooled = False
            try:
                if self._spool.pending():
                    self._spool.append([record])  # keep order behind older records
                    spooled = True
                    self._spool.drain(self._send)
                else:
                    self._send([record])
            except Exception as exc:  # never fail the sandbox call
                log.warning("run log unavailable (%s); spooling run %s", exc, record.run_id)
                if not spooled:
                    self._spool.append([record])

    def close(self) -> None:
        with self._lock:
            try:
                if self._spool.pending():
                    self._spool.drain(self._send)
            except Exception as exc:
                log.warning("run log still unavailable (%s); records stay spooled", exc)
            if self._store is not None:
                self._store.close()
                self._store = None


_STOP = object()


def _close_at_exit(ref: weakref.ref[RemoteRecorder]) -> None:
    recorder = ref()
    if recorder is not None:
        recorder.close()


class RemoteRecorder:
    """Ships records to a ``cellblock serve`` service in batches, from a background thread.

    ``record`` only enqueues (it never blocks on the network). The thread sends up to
    ``batch_size`` records per POST, at most ``flush_interval_s`` after the first one
    arrived. When the service is unreachable or failing, batches go to the spool and
    everything after them too, until the spool has been delivered (retried with
    back-off), so the service sees records in the order they were recorded.

    Records the service rejects for good (invalid, or a different record under a known
    ``run_id``) are logged and kept in ``rejected.jsonl`` beside the spool.

    Args:
        url: Base URL of the service, e.g. ``http://127.0.0.1:8765``.
        token: Bearer token for ingestion (required when the service is not on loopback).
        spool_dir: Where to spool (default ``<cellblock_home>/spool``).
        close_timeout_s: How long ``close`` keeps retrying the spool while the service
            is unreachable. 0 (default): one attempt, so a command-line run never hangs
            on a dead service; what is left stays spooled for the next recorder.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        batch_size: int = 500,
        flush_interval_s: float = 0.05,
        timeout_s: float = 10.0,
        spool_dir: Path | None = None,
        close_timeout_s: float = 0.0,
        max_backoff_s: float = 10.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.endpoint = self.url + "/v1/runs"
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.timeout_s = timeout_s
        self.close_timeout_s = close_timeout_s
        self.max_backoff_s = max_backoff_s
        directory = spool_dir or _spool_dir()
        key = hashlib.sha256(self.endpoint.encode()).hexdigest()[:16]
        self.spool = Spool(directory / f"remote-{key}.jsonl")
        self.rejected = Spool(directory / "rejected.jsonl")
        self._session = requests.Session()
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"
        self._queue: queue.Queue[object] = queue.Queue()
        self._backoff = 0.0
        self._next_retry = 0.0
        self._closed = False
        self.delivered = 0
        """Records the service accepted (stored or already had), for tests and stats."""
        self._thread = threading.Thread(target=self._loop, name="cellblock-log-ship",
                                        daemon=True)
        self._thread.start()
        # A program that forgets close() still gets its queued records sent or spooled.
        atexit.register(_close_at_exit, weakref.ref(self))

    # -- public ----------------------------------------------------------------------

    def record(self, record: RunRecord) -> None:
        if self._closed:
            self.spool.append([record])  # too late to send; the next recorder delivers it
            return
        self._queue.put(record)

    def flush(self) -> None:
        """Block until every record recorded so far has been sent or spooled."""
        self._queue.join()

    def close(self) -> None:
        """Send what is queued, try to deliver the spool, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._session.close()

    # -- the shipping thread -----------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch, stop = self._take_batch()
            try:
                if batch:
                    self._deliver(batch)
                if self.spool.pending() and time.monotonic() >= self._next_retry:
                    self._drain()
            except Exception:  # the thread must survive anything; data is spooled first
                log.exception("run log shipping failed")
            finally:
                for _ in range(len(batch) + (1 if stop else 0)):
                    self._queue.task_done()
            if stop:
                self._final_drain()
                return

    def _take_batch(self) -> tuple[list[RunRecord], bool]:
        batch: list[RunRecord] = []
        wait = max(0.05, self._next_retry - time.monotonic()) if self.spool.pending() else 1.0
        try:
            first = self._queue.get(timeout=wait)
        except queue.Empty:
            return batch, False
        if first is _STOP:
            return batch, True
        assert isinstance(first, RunRecord)
        batch.append(first)
        deadline = time.monotonic() + self.flush_interval_s
        while len(batch) < self.batch_size:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            assert isinstance(item, RunRecord)
            batch.append(item)
        return batch, False

    def _deliver(self, batch: list[RunRecord]) -> None:
        if self.spool.pending():
            # Older records are waiting: queue behind them to keep the order.
            self.spool.append(batch)
            return
        try:
            self._post(batch)
        except DeliveryError as exc:
            self._failed(exc)
            self.spool.append(batch)

    def _drain(self) -> None:
        try:
            self.spool.drain(self._post, self.batch_size)
        except DeliveryError as exc:
            self._failed(exc)
        else:
            self._backoff = 0.0
            self._next_retry = 0.0

    def _final_drain(self) -> None:
        deadline = time.monotonic() + self.close_timeout_s
        while self.spool.pending():
            self._drain()
            if not self.spool.pending():
                break
            pause = min(self._backoff, deadline - time.monotonic())
            if pause <= 0:
                log.warning("log service unreachable; %d records stay in %s for the next "
                            "recorder", self.spool.pending_count(), self.spool.path)
                break
            time.sleep(pause)

    def _failed(self, exc: DeliveryError) -> None:
        self._backoff = min(self.max_backoff_s, max(0.2, self._backoff * 2))
        self._next_retry = time.monotonic() + self._backoff
        log.warning("log service: %s; spooling, retry in %.1f s", exc, self._backoff)

    def _post(self, batch: list[RunRecord]) -> None:
        """POST one batch; raise :class:`DeliveryError` when it should be retried."""
        body = '{"runs":[' + ",".join(r.model_dump_json() for r in batch) + "]}"
        try:
            resp = self._session.post(self.endpoint, data=body.encode(), timeout=self.timeout_s,
                                      headers={"Content-Type": "application/json"})
        except requests.RequestException as exc:
            raise DeliveryError(f"cannot reach {self.url}: {type(exc).__name__}") from exc
        if resp.status_code >= 500 or resp.status_code in (401, 403, 408, 429):
            # Server trouble, overload or a wrong token: the records are fine, keep them.
            raise DeliveryError(f"{self.url} answered HTTP {resp.status_code}")
        if resp.status_code >= 400:
            log.error("log service rejected %d records (HTTP %d: %s); kept in %s",
                      len(batch), resp.status_code, resp.text[:200], self.rejected.path)
            self.rejected.append(batch)
            return
        try:
            conflicts = set(resp.json().get("conflicts", []))
        except ValueError:
            conflicts = set()
        if conflicts:
            log.error("log service rejected %d records whose run_id it already has with "
                      "different content; kept in %s", len(conflicts), self.rejected.path)
            self.rejected.append([r for r in batch if r.run_id in conflicts])
        self.delivered += len(batch) - len(conflicts)
