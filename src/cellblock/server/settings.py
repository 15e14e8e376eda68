"""Settings of the log service (``cellblock serve``)."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ServerSettings", "is_loopback"]


class ServerSettings(BaseModel):
    """Where the service listens, where it stores, and who may read and write.

    Access: with ``token`` set, every endpoint but ``GET /healthz`` requires it (or, on
    ``GET``/``HEAD`` requests only, ``read_token``). Without a token, which is allowed on
    loopback only, every endpoint is open.
    """

    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)  # inputs hold tokens

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    db_url: str | None = None
    """SQLAlchemy URL or SQLite path; default ``<cellblock_home>/runs.db``."""
    token: str | None = Field(default=None, repr=False)
    """Required on every endpoint but ``GET /healthz`` (as ``Authorization: Bearer
    <token>``, or HTTP Basic auth with any user name and the token as password). The only
    credential that may ``POST``. Mandatory beyond loopback; without it all is open."""
    read_token: str | None = Field(default=None, repr=False)
    """Optional second credential accepted on ``GET``/``HEAD`` endpoints only (dashboard,
    query API, ``/metrics``), never to ``POST`` runs. Requires ``token``."""
    warm_runs: int = Field(default=10_000, ge=0)
    """How many of the newest stored runs are replayed into the detectors at start, so a
    restart keeps recent correlation context (bounded to keep start-up quick)."""
    detection: Literal["process", "inline"] = "process"
    """``process``: detectors run in a worker process (ingestion and detection use
    separate cores; alerts follow a few ms after the POST). ``inline``: in the request,
    so an alert is stored before the POST returns (slower ingestion)."""
    max_batch: int = Field(default=10_000, ge=1)
    """Most records accepted in one POST."""
    max_body_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)

    @field_validator("token", "read_token")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    @model_validator(mode="after")
    def _check_tokens(self) -> ServerSettings:
        if self.read_token and not self.token:
            raise ValueError("read_token requires token (the write token)")
        if self.read_token and self.read_token == self.token:
            raise ValueError("read_token must differ from token")
        return self

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 / ::1; False for anything else (incl. 0.0.0.0)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
