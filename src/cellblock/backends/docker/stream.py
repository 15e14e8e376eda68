"""Demultiplex a Docker attach stream into capped stdout and stderr.

Without a TTY, Docker frames the attach stream: an 8-byte header (stream id, three zero
bytes, big-endian payload length) and the payload. Payloads are copied into per-stream
buffers only up to the cap; the rest is counted and dropped, so a program printing
gigabytes without a newline costs the runner at most ``cap`` bytes per stream plus one
read buffer.
"""

from __future__ import annotations

import struct
from typing import Literal

__all__ = ["CappedDemux"]

_HEADER = struct.Struct(">BxxxI")
_STDOUT = 1
_STDERR = 2


class CappedDemux:
    """Incremental parser: feed raw socket bytes, read capped streams.

    The bootstrap's ready marker (the first bytes of stdout) is stripped here and
    reported through :attr:`ready`.
    """

    def __init__(self, cap: int, marker: bytes) -> None:
        self.cap = cap
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.stdout_total = 0
        self.stderr_total = 0
        self._marker = marker
        self._marker_seen = bytearray()
        self.state: Literal["pending", "ready", "failed"] = "pending"
        self._header = bytearray()
        self._stream = 0
        self._remaining = 0

    @property
    def overflowed(self) -> bool:
        return self.stdout_total > self.cap or self.stderr_total > self.cap

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._remaining == 0:
                need = _HEADER.size - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < _HEADER.size:
                    return
                self._stream, self._remaining = _HEADER.unpack(self._header)
                self._header.clear()
                continue
            take = min(self._remaining, len(view))
            self._payload(view[:take])
            view = view[take:]
            self._remaining -= take

    def _payload(self, chunk: memoryview) -> None:
        if self._stream == _STDOUT:
            if self.state == "pending":
                chunk = self._consume_marker(chunk)
            self.stdout_total += len(chunk)
            room = self.cap - len(self.stdout)
            if room > 0:
                self.stdout += chunk[:room]
        elif self._stream == _STDERR:
            self.stderr_total += len(chunk)
            room = self.cap - len(self.stderr)
            if room > 0:
                self.stderr += chunk[:room]

    def _consume_marker(self, chunk: memoryview) -> memoryview:
        need = len(self._marker) - len(self._marker_seen)
        self._marker_seen += chunk[:need]
        if len(self._marker_seen) < len(self._marker):
            return chunk[len(chunk):]
        if bytes(self._marker_seen) == self._marker:
            self.state = "ready"
            return chunk[need:]
        # Not our marker: the bootstrap did not run as expected. Keep the bytes as
        # output (they only ever reach the operator log) and stop looking.
        self.state = "failed"
        seen = bytes(self._marker_seen)
        self._marker_seen.clear()
        self.stdout_total += len(seen)
        self.stdout += seen[: self.cap]
        return chunk[need:]

    @property
    def ready(self) -> bool:
        """True once the bootstrap handed over to the program."""
        return self.state == "ready"
