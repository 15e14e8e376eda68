"""Run records and the transport that delivers them to the log store."""

from cellblock.logs.record import Recorder, RunRecord

__all__ = ["Recorder", "RunRecord"]
