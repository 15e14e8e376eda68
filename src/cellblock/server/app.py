"""The log service: ingestion API, query API, metrics, health and the dashboard.

``create_app(settings)`` opens (and migrates) the store, warms the detectors up with the
newest stored runs and returns a FastAPI app; ``cellblock serve`` runs it with uvicorn.

Access (one middleware, :class:`RequireToken`, in front of every route): with
``settings.token`` set, every request but ``GET /healthz`` must carry it, as
``Authorization: Bearer <token>`` or as HTTP Basic auth with any user name and the token
as password (so a browser can open the dashboard). ``settings.read_token``, if set, is
accepted on ``GET``/``HEAD`` requests only. Without a token (allowed on loopback only)
everything is open, as it always was.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from cellblock.errors import PolicyError
from cellblock.logs.record import RunRecord
from cellblock.logs.store import InvalidRecord, LogStoreError, Store, StoredAlert, StoredRun
from cellblock.server.detection import (
    AlertSource,
    InlineDetection,
    ProcessDetection,
    default_engine,
    default_engine_groups,
)
from cellblock.server.metrics import Metrics
from cellblock.server.render import alert_needles, highlight, visible
from cellblock.server.service import IngestResult, IngestService
from cellblock.server.settings import ServerSettings

__all__ = ["Credentials", "RequireToken", "RunBatch", "create_app"]

_TEMPLATES = Path(__file__).parent / "templates"

Access = Literal["write", "read"]
_READ_METHODS = frozenset({"GET", "HEAD"})
_API_PATHS = ("/v1/", "/metrics", "/openapi.json", "/healthz")


class Credentials:
    """The configured tokens, and the check of an ``Authorization`` header against them.

    Accepted forms: ``Bearer <token>`` and ``Basic base64(<any user>:<token>)`` (scheme
    names are case-insensitive). Tokens are compared as SHA-256 digests with
    :func:`hmac.compare_digest`, so the time taken reveals neither the token nor its
    length; both tokens are always compared.
    """

    def __init__(self, token: str | None, read_token: str | None = None) -> None:
        self._write = _digest(token.encode()) if token else None
        self._read = _digest(read_token.encode()) if read_token else None

    @property
    def required(self) -> bool:
        """False when no token is configured: then every request is granted ``write``."""
        return self._write is not None

    def grant(self, authorization: str | None) -> Access | None:
        """``"write"`` for the token, ``"read"`` for the read token, else ``None``."""
        if self._write is None:
            return "write"
        given = _presented_secret(authorization or "")
        if given is None:
            return None
        digest = _digest(given)
        write = hmac.compare_digest(digest, self._write)
        read = self._read is not None and hmac.compare_digest(digest, self._read)
        return "write" if write else "read" if read else None


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


def _presented_secret(authorization: str) -> bytes | None:
    """The token in a Bearer or Basic ``Authorization`` value, as the bytes sent."""
    scheme, _, param = authorization.strip().partition(" ")
    param = param.strip()
    if not param:
        return None
    raw = param.encode("latin-1", "replace")  # Starlette decoded the header as latin-1
    if scheme.lower() == "bearer":
        return raw
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return None
        _user, colon, password = decoded.partition(b":")
        return password if colon else None
    return None


class RequireToken:
    """ASGI middleware: refuses requests without an accepted credential.

    Open: ``GET``/``HEAD /healthz``, and everything when no token is configured. Reads
    (``GET``, ``HEAD``) take the token or the read token, anything else only the token.
    Refusals never echo what was sent: 401 (none or a wrong one) with
    ``WWW-Authenticate: Bearer`` on the API (``/v1/…``, ``/metrics``, ``/openapi.json``)
    and ``Basic realm="cellblock"`` elsewhere (the dashboard, so a browser asks for it);
    403 when the read token is used to write.
    """

    def __init__(self, app: ASGIApp, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.credentials.required:
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)
        method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
        if method in _READ_METHODS and path == "/healthz":
            await self.app(scope, receive, send)
            return
        granted = self.credentials.grant(Headers(scope=scope).get("authorization"))
        if granted == "write" or (granted == "read" and method in _READ_METHODS):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        response: Response
        if granted == "read":
            response = JSONResponse({"detail": "the read-only token cannot write"},
                                    status_code=403)
        elif path.startswith(_API_PATHS):
            response = JSONResponse({"detail": "missing or wrong token"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        else:
            response = HTMLResponse(
                _UNAUTHORISED_PAGE, status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="cellblock", charset="UTF-8"'})
        await response(scope, receive, send)


_UNAUTHORISED_PAGE = (
    "<!doctype html><title>cellblock: sign in</title><p>This cellblock log service needs "
    "its token: sign in with any user name and the token as password.</p>\n")


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root):] or "/"
    return path


class RunBatch(BaseModel):
    """Body of ``POST /v1/runs``: records in the order they were recorded."""

    model_config = ConfigDict(frozen=True)

    runs: list[RunRecord] = Field(max_length=100_000)


def _default_engine() -> AlertSource:
    from cellblock.detect.engine import DetectionEngine

    return DetectionEngine()


def create_app(
    settings: ServerSettings | None = None,
    *,
    engine_factory: Callable[[], AlertSource] | None = None,
) -> FastAPI:
    """Build the service.

    Every endpoint but ``GET /healthz`` requires ``settings.token`` when one is set
    (``settings.read_token`` is enough for ``GET``); with no token, everything is open.

    Args:
        settings: Listening address (for the token rule), database, tokens, limits.
        engine_factory: Builds a fresh detection engine (tests pass a fake); defaults to
            :class:`cellblock.detect.engine.DetectionEngine` with every built-in detector.
            With ``detection="process"`` it is called in the forked worker.

    Raises:
        PolicyError: the host is not loopback and no token is set.
        LogStoreError: the database cannot be opened or migrated.
    """
    settings = settings or ServerSettings()
    if not settings.loopback and not settings.token:
        raise PolicyError(
            f"refusing to accept runs on {settings.host} without an API token",
            hint="pass --token (or CELLBLOCK_SERVE_TOKEN), or bind to 127.0.0.1",
        )
    store = Store(settings.db_url)
    metrics = Metrics()
    detection: InlineDetection | ProcessDetection
    if settings.detection == "process":
        groups = [engine_factory] if engine_factory else default_engine_groups()
        detection = ProcessDetection(store, groups, metrics, settings.warm_runs)
    else:
        detection = InlineDetection(store, engine_factory or default_engine, metrics,
                                    settings.warm_runs)
    service = IngestService(store, detection, metrics)
    service.start()

    app = FastAPI(title="cellblock log service", version="1", docs_url="/docs",
                  redoc_url=None)
    app.state.settings = settings
    app.state.service = service
    app.state.store = store

    env = Environment(loader=FileSystemLoader(_TEMPLATES),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["highlight"] = highlight
    env.filters["visible"] = visible
    env.filters["ts"] = _short_ts
    templates = Jinja2Templates(env=env)
    credentials = Credentials(settings.token, settings.read_token)
    app.add_middleware(RequireToken, credentials=credentials)

    # -- API ---------------------------------------------------------------------------

    @app.post("/v1/runs", response_model=IngestResult)
    async def ingest(request: Request) -> Any:
        """Store a batch of run records (idempotent by run_id) and run detection."""
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > settings.max_body_bytes:
            return JSONResponse({"detail": "batch too large"}, status_code=413)
        body = await request.body()
        if len(body) > settings.max_body_bytes:
            return JSONResponse({"detail": "batch too large"}, status_code=413)
        return await run_in_threadpool(_ingest_body, service, body, settings.max_batch)

    @app.get("/v1/runs")
    def list_runs(
        agent_id: str | None = None,
        session_id: str | None = None,
        after_seq: int | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> dict[str, Any]:
        """Runs in chain order; page with ``after_seq=<next_after_seq>``."""
        found = store.list_runs(agent_id=agent_id, session_id=session_id,
                                after_seq=after_seq, limit=limit)
        return {"runs": [_run_json(r) for r in found],
                "next_after_seq": found[-1].seq if found else after_seq}

    @app.get("/v1/runs/{run_id}")
    def get_run(run_id: str) -> dict[str, Any]:
        found = store.get_run(run_id)
        if found is None:
            raise HTTPException(404, "no such run")
        return _run_json(found)

    @app.get("/v1/alerts")
    def list_alerts(
        agent_id: str | None = None,
        detector: str | None = None,
        run_id: str | None = None,
        after_id: int | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> dict[str, Any]:
        """Alerts newest first; with ``after_id``, oldest first from there (for polling)."""
        found = store.list_alerts(agent_id=agent_id, detector=detector, run_id=run_id,
                                  after_id=after_id, limit=limit)
        return {"alerts": [_alert_json(a) for a in found]}

    @app.get("/v1/agents")
    def list_agents() -> dict[str, Any]:
        return {"agents": [a.model_dump() for a in store.agents()]}

    @app.get("/healthz")
    def health(request: Request) -> JSONResponse:
        """Liveness and progress; open to all. Without a credential (when one is
        required) it shows counts and seqs only; ``head_hash`` and the detection mode
        are added for a caller the token check would let in."""
        try:
            seq, digest = store.head()
        except SQLAlchemyError:
            return JSONResponse({"status": "error", "detail": "database unavailable"},
                                status_code=503)
        detected = detection.detected_seq()
        metrics.detected_seq.set(detected)
        body: dict[str, Any] = {
            "status": "ok", "head_seq": seq, "detected_seq": detected,
            "warmed_runs": detection.warmed,
        }
        if isinstance(detection, ProcessDetection):
            body["worker_seqs"] = detection.worker_seqs()
        if credentials.grant(request.headers.get("authorization")) is not None:
            body.update({"head_hash": digest, "detection": settings.detection})
        return JSONResponse(body)

    @app.get("/metrics")
    def prometheus() -> Response:
        metrics.detected_seq.set(detection.detected_seq())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # -- dashboard ---------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        seq, digest = store.head()
        return templates.TemplateResponse(request, "index.html", {
            "agents": store.agents(), "alerts": store.list_alerts(limit=20),
            "head_seq": seq, "head_hash": digest, "detected_seq": detection.detected_seq(),
        })

    @app.get("/agents/{agent_id}", response_class=HTMLResponse)
    def agent_page(request: Request, agent_id: str,
                   before_seq: int | None = None) -> HTMLResponse:
        found = store.list_runs(agent_id=agent_id, before_seq=before_seq, limit=200,
                                newest_first=True)
        agent_alerts = store.list_alerts(agent_id=agent_id, limit=500)
        by_run: dict[str, list[StoredAlert]] = {}
        for a in agent_alerts:
            for rid in a.alert.run_ids:
                by_run.setdefault(rid, []).append(a)
        longest = max((r.record.duration_ms for r in found), default=0.0) or 1.0
        return templates.TemplateResponse(request, "agent.html", {
            "agent_id": agent_id, "runs": found, "alerts": agent_alerts, "by_run": by_run,
            "longest": longest, "older": found[-1].seq if len(found) == 200 else None,
        })

    @app.get("/alerts", response_class=HTMLResponse)
    def alerts_page(request: Request, detector: str | None = None) -> HTMLResponse:
        found = store.list_alerts(detector=detector, limit=500)
        return templates.TemplateResponse(request, "alerts.html", {
            "alerts": found, "detector": detector,
            "needles": {a.alert_id: alert_needles([a.alert]) for a in found},
        })

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str) -> HTMLResponse:
        found = store.get_run(run_id)
        if found is None:
            raise HTTPException(404, "no such run")
        run_alerts = store.list_alerts(run_id=run_id, limit=500)
        return templates.TemplateResponse(request, "run.html", {
            "run": found, "rec": found.record, "alerts": run_alerts,
            "needles": alert_needles(a.alert for a in run_alerts),
        })

    app.router.add_event_handler("shutdown", service.close)
    return app


def _ingest_body(service: IngestService, body: bytes, max_batch: int) -> JSONResponse:
    try:
        batch = RunBatch.model_validate_json(body)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()[:20]]
        return JSONResponse({"detail": errors}, status_code=422)
    if len(batch.runs) > max_batch:
        return JSONResponse({"detail": f"at most {max_batch} runs per batch"}, status_code=413)
    try:
        result = service.ingest(batch.runs)
    except InvalidRecord as exc:
        return JSONResponse({"detail": exc.safe_message}, status_code=422)
    except LogStoreError as exc:
        return JSONResponse({"detail": exc.safe_message}, status_code=503)
    return JSONResponse(result.model_dump())


def _run_json(run: StoredRun) -> dict[str, Any]:
    return {"seq": run.seq, "hash": run.hash, "prev_hash": run.prev_hash,
            "received_at": run.received_at, "record": run.record.model_dump(mode="json")}


def _alert_json(stored: StoredAlert) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(stored.alert.model_dump_json())
    body.update({"id": stored.id, "alert_id": stored.alert_id,
                 "created_at": stored.created_at, "trigger_seq": stored.trigger_seq})
    return body


def _short_ts(value: str) -> str:
    """``2026-11-29 12:01:40 UTC`` from an ISO 8601 timestamp (as given if unparsable)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value[:32]
    if moment.tzinfo is not None:
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S")
