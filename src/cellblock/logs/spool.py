"""An append-only JSONL spool that keeps run records until they are delivered.

One spool file per destination, shared by every process that sends there: appends and
deliveries take an exclusive ``flock`` on a sidecar lock file, so records from several
runners interleave whole and are delivered in the order they were spooled. Delivery
progress is a byte offset in a sidecar file, replaced atomically after each delivered
batch; a crash between a delivery and the offset update makes the next delivery resend
that batch, which the receiver ignores (it is idempotent by ``run_id``). So a record is
delivered at least once by the spool and stored exactly once by the service.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from cellblock.logs.record import RunRecord

__all__ = ["Spool"]

log = logging.getLogger(__name__)


class Spool:
    """A spool file at ``path`` (with ``.offset`` and ``.lock`` files beside it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset_path = path.with_name(path.name + ".offset")
        self.lock_path = path.with_name(path.name + ".lock")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def append(self, records: Sequence[RunRecord]) -> None:
        """Append records durably (fsync) in the given order."""
        if not records:
            return
        data = "".join(r.model_dump_json() + "\n" for r in records).encode()
        with self._locked():
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and _last_byte(self.path, size) != b"\n":
                    # A writer died mid-line: end its torn line so ours parses.
                    data = b"\n" + data
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def pending(self) -> bool:
        """True when records are waiting to be delivered."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        return size > self._offset()

    def pending_count(self) -> int:
        if not self.pending():
            return 0
        with self.path.open("rb") as fh:
            fh.seek(self._offset())
            return sum(1 for line in fh if line.strip())

    def drain(self, send: Callable[[list[RunRecord]], None], batch_size: int = 500) -> int:
        """Deliver pending records in order through ``send``, one batch at a time.

        ``send`` raises to stop (destination down): what it had not accepted stays
        spooled. Returns the number of records delivered.
        """
        delivered = 0
        with self._locked():
            if not self.path.exists():
                return 0
            offset = self._offset()
            with self.path.open("rb") as fh:
                fh.seek(offset)
                while True:
                    batch, end = _read_batch(fh, batch_size)
                    if end == offset:
                        break
                    if batch:
                        send(batch)
                        delivered += len(batch)
                    offset = end
                    self._set_offset(offset)
            # Everything delivered: start the file afresh so it does not grow forever.
            # Safe under the lock: no one can append in between.
            if offset >= self.path.stat().st_size:
                self.path.unlink()
                self.offset_path.unlink(missing_ok=True)
        return delivered

    def _offset(self) -> int:
        try:
            return int(self.offset_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _set_offset(self, offset: int) -> None:
        tmp = self.offset_path.with_name(self.offset_path.name + ".tmp")
        with tmp.open("w") as fh:
            fh.write(str(offset))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.offset_path)


def _last_byte(path: Path, size: int) -> bytes:
    with path.open("rb") as fh:
        fh.seek(size - 1)
        return fh.read(1)


def _read_batch(fh: BinaryIO, batch_size: int) -> tuple[list[RunRecord], int]:
    """Up to ``batch_size`` complete lines from ``fh``; returns them and the end offset.
    A torn last line (no newline yet) is left for later."""
    batch: list[RunRecord] = []
    end = fh.tell()
    while len(batch) < batch_size:
        line = fh.readline()
        if not line or not line.endswith(b"\n"):
            break
        end = fh.tell()
        if not line.strip():
            continue
        try:
            batch.append(RunRecord.model_validate_json(line))
        except ValueError:
            log.exception("dropping an unreadable spool line at offset %d", end - len(line))
    return batch, end
