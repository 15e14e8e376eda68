"""The run log store: SQLAlchemy over SQLite (default, WAL) or PostgreSQL (by URL).

Runs are append-only and hash-chained (see :mod:`cellblock.logs.chain`). Inserting is
idempotent by ``run_id``: the same record twice is a no-op, a different record under a
known ``run_id`` is rejected and reported as a conflict. Every append is one
transaction and holds the chain head exclusively (a lock in this process, ``BEGIN
IMMEDIATE`` across SQLite processes, ``SELECT ... FOR UPDATE`` on PostgreSQL), so
concurrent writers can never fork the chain.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, Engine, and_, create_engine, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from cellblock.detect.base import Alert
from cellblock.errors import CellblockError
from cellblock.images.store import cellblock_home
from cellblock.logs.chain import (
    GENESIS_HASH,
    ChainLink,
    VerifyResult,
    canonical_dumps,
    canonical_json,
    link_hash,
    verify_chain,
)
from cellblock.logs.record import RunRecord
from cellblock.logs.schema import alert_agents, alerts, chain_head, runs

__all__ = [
    "AgentSummary",
    "AppendResult",
    "InvalidRecord",
    "LogStoreError",
    "Store",
    "StoredAlert",
    "StoredRun",
    "default_db_url",
    "normalize_db_url",
]

HEAD_REVISION = "0001"
"""The newest alembic revision; a store already there skips alembic entirely (fast
start for ``cellblock run``, which opens the embedded store on every call)."""

_CHUNK = 500
_ID_MAX = 128


class LogStoreError(CellblockError):
    """The run log database cannot be opened, migrated or written."""

    default_safe_message = "the run log store is unavailable"


class StoredRun(BaseModel):
    """A run as stored: its place in the chain and the record itself."""

    model_config = ConfigDict(frozen=True)

    seq: int
    hash: str
    prev_hash: str
    received_at: float
    record: RunRecord


class StoredAlert(BaseModel):
    """An alert as stored, with the run sequence number that raised it."""

    model_config = ConfigDict(frozen=True)

    id: int
    alert_id: str
    created_at: float
    trigger_seq: int | None
    alert: Alert


class AgentSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    agent_id: str
    runs: int
    alerts: int
    last_seq: int
    last_started_at: str


class InvalidRecord(LogStoreError):
    """A record the store cannot take as it is (e.g. an over-long id)."""

    default_safe_message = "invalid run record"


@dataclass
class AppendResult:
    """What :meth:`Store.append` did with each record of a batch."""

    inserted: list[StoredRun] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    """run_ids already stored with identical content (no-ops)."""
    conflicts: list[str] = field(default_factory=list)
    """run_ids already stored with *different* content (rejected)."""


def default_db_url() -> str:
    """The embedded store: ``sqlite:///<cellblock_home>/runs.db``."""
    return f"sqlite:///{cellblock_home() / 'runs.db'}"


def normalize_db_url(url: str) -> str:
    """Accept a bare path as SQLite and ``postgresql://`` as psycopg 3."""
    if "://" not in url:
        return f"sqlite:///{Path(url).absolute()}"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


class Store:
    """The run log. Thread-safe; one instance per process and database is enough.

    Args:
        url: SQLAlchemy URL (``sqlite:///path``, ``postgresql://...``) or a file path.
        migrate: Bring the schema to the newest revision on open (creates it if new).
    """

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self.url = normalize_db_url(url or default_db_url())
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        self._write_lock = threading.Lock()
        try:
            if self.dialect == "sqlite":
                if parsed.database and parsed.database != ":memory:":
                    Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
                    # The log holds every agent's raw code and output: owner-only. SQLite
                    # gives its -wal and -shm files the database file's permissions.
                    os.close(os.open(parsed.database, os.O_CREAT | os.O_WRONLY, 0o600))
                    with contextlib.suppress(OSError):  # a log created by an older version
                        os.chmod(parsed.database, 0o600)
                self.engine = create_engine(
                    self.url, connect_args={"timeout": 30, "check_same_thread": False}
                )
                _sqlite_tuning(self.engine)
            else:
                self.engine = create_engine(self.url, pool_pre_ping=True)
            if migrate:
                self._migrate()
        except SQLAlchemyError as exc:
            raise LogStoreError(detail=f"{parsed.render_as_string(hide_password=True)}: {exc}",
                                hint="check --db / CELLBLOCK_DB_URL and that the database "
                                     "server is running") from exc

    # -- schema ----------------------------------------------------------------------

    def _migrate(self) -> None:
        if self._schema_revision() == HEAD_REVISION:
            return
        # Imported only when a migration is due: alembic costs ~100 ms to import and
        # `cellblock run` opens the embedded store on every call.
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self._writer() as conn:
            if self.dialect == "postgresql":
                # Two processes opening a fresh database at once must not both migrate.
                conn.execute(text("SELECT pg_advisory_xact_lock(7388251)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def _schema_revision(self) -> str | None:
        try:
            with self.engine.connect() as conn:
                row = conn.execute(text("SELECT version_num FROM cellblock_alembic_version"))
                value = row.scalar()
                return str(value) if value is not None else None
        except SQLAlchemyError:
            return None

    def has_schema(self) -> bool:
        """True when the database holds a run log (any revision)."""
        return self._schema_revision() is not None

    @contextmanager
    def _writer(self) -> Iterator[Connection]:
        """One write transaction holding the chain head exclusively."""
        # Serialise writers in this process first: SQLite would otherwise make the second
        # thread wait on the file lock (busy_timeout) instead of a cheap in-memory lock.
        with self._write_lock, self.engine.connect() as raw:
            conn = raw.execution_options(cellblock_immediate=True) if self.dialect == "sqlite" \
                else raw
            with conn.begin():
                yield conn

    # -- writing ---------------------------------------------------------------------

    def append(self, records: Sequence[RunRecord]) -> AppendResult:
        """Append new records to the chain in one transaction; see :class:`AppendResult`."""
        result = AppendResult()
        if not records:
            return result
        for rec in records:
            if not rec.run_id or len(rec.run_id) > _ID_MAX or len(rec.agent_id) > _ID_MAX \
                    or len(rec.session_id) > _ID_MAX:
                raise InvalidRecord(f"run_id, agent_id and session_id must be 1..{_ID_MAX} "
                                    "characters")
        bodies = [canonical_json(r) for r in records]
        try:
            with self._writer() as conn:
                head = conn.execute(
                    select(chain_head.c.seq, chain_head.c.hash)
                    .where(chain_head.c.id == 1)
                    .with_for_update()
                ).one()
                seq, prev = int(head.seq), str(head.hash)
                known = self._known_bodies(conn, [r.run_id for r in records])
                now = time.time()
                rows: list[dict[str, Any]] = []
                for rec, body in zip(records, bodies, strict=True):
                    stored = known.get(rec.run_id)
                    if stored is not None:
                        if stored == body or _same_record(stored, body):
                            result.duplicates.append(rec.run_id)
                        else:
                            result.conflicts.append(rec.run_id)
                        continue
                    seq += 1
                    digest = link_hash(prev, body)
                    rows.append({
                        "seq": seq, "run_id": rec.run_id, "agent_id": rec.agent_id,
                        "session_id": rec.session_id, "started_at": rec.started_at[:64],
                        "received_at": now, "exit_code": rec.exit_code,
                        "duration_ms": rec.duration_ms, "body": body,
                        "prev_hash": prev, "hash": digest,
                    })
                    result.inserted.append(StoredRun(seq=seq, hash=digest, prev_hash=prev,
                                                     received_at=now, record=rec))
                    known[rec.run_id] = body  # a repeat inside the same batch
                    prev = digest
                if rows:
                    conn.execute(runs.insert(), rows)
                    conn.execute(chain_head.update().where(chain_head.c.id == 1)
                                 .values(seq=seq, hash=prev))
        except SQLAlchemyError as exc:
            raise LogStoreError("could not store run records", detail=str(exc)) from exc
        return result

    def _known_bodies(self, conn: Connection, run_ids: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(run_ids))
        for i in range(0, len(unique), _CHUNK):
            chunk = unique[i:i + _CHUNK]
            for row in conn.execute(select(runs.c.run_id, runs.c.body)
                                    .where(runs.c.run_id.in_(chunk))):
                found[str(row.run_id)] = str(row.body)
        return found

    def add_alerts(self, new: Sequence[Alert], trigger_seq: int | None = None) -> list[Alert]:
        """Store alerts not seen before (deduplicated by ``alert_id``); return those."""
        if not new:
            return []
        by_id: dict[str, Alert] = {}
        for alert in new:
            by_id.setdefault(alert.alert_id, alert)
        stored: list[Alert] = []
        try:
            with self._writer() as conn:
                existing = {
                    str(r[0]) for r in conn.execute(
                        select(alerts.c.alert_id).where(alerts.c.alert_id.in_(list(by_id)))
                    )
                }
                now = time.time()
                for alert_id, alert in by_id.items():
                    if alert_id in existing:
                        continue
                    conn.execute(alerts.insert().values(
                        alert_id=alert_id, detector=alert.detector[:64],
                        severity=alert.severity, agents=json.dumps(list(alert.agents)),
                        run_ids=json.dumps(list(alert.run_ids)), evidence=alert.evidence,
                        details=canonical_dumps(_jsonable(alert.details)), created_at=now,
                        trigger_seq=trigger_seq,
                    ))
                    agents = sorted({a[:_ID_MAX] for a in alert.agents})
                    if agents:
                        conn.execute(alert_agents.insert(),
                                     [{"alert_id": alert_id, "agent_id": a} for a in agents])
                    stored.append(alert)
        except SQLAlchemyError as exc:
            raise LogStoreError("could not store alerts", detail=str(exc)) from exc
        return stored

    # -- reading ---------------------------------------------------------------------

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the newest run; ``(0, GENESIS_HASH)`` for an empty log."""
        with self.engine.connect() as conn:
            row = conn.execute(select(chain_head.c.seq, chain_head.c.hash)
                               .where(chain_head.c.id == 1)).one_or_none()
        return (int(row.seq), str(row.hash)) if row else (0, GENESIS_HASH)

    def count_runs(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(runs)).scalar_one())

    def get_run(self, run_id: str) -> StoredRun | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).one_or_none()
        return _stored_run(row) if row else None

    def list_runs(
        self,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[StoredRun]:
        """Runs filtered by agent/session, paged by ``seq``."""
        query = select(runs)
        conds = []
        if agent_id is not None:
            conds.append(runs.c.agent_id == agent_id)
        if session_id is not None:
            conds.append(runs.c.session_id == session_id)
        if after_seq is not None:
            conds.append(runs.c.seq > after_seq)
        if before_seq is not None:
            conds.append(runs.c.seq < before_seq)
        if conds:
            query = query.where(and_(*conds))
        query = query.order_by(runs.c.seq.desc() if newest_first else runs.c.seq.asc())
        with self.engine.connect() as conn:
            rows = conn.execute(query.limit(max(1, min(limit, 10_000)))).all()
        return [_stored_run(r) for r in rows]

    def recent_runs(self, limit: int) -> list[StoredRun]:
        """The newest ``limit`` runs, oldest first (to warm up detectors)."""
        found: list[StoredRun] = []
        before: int | None = None
        while len(found) < limit:
            page = self.list_runs(before_seq=before, newest_first=True,
                                  limit=min(5000, limit - len(found)))
            if not page:
                break
            found.extend(page)
            before = page[-1].seq
        found.reverse()
        return found

    def list_alerts(
        self,
        *,
        agent_id: str | None = None,
        detector: str | None = None,
        run_id: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[StoredAlert]:
        """Alerts, newest first (or oldest first after ``after_id``, for polling)."""
        query = select(alerts)
        if agent_id is not None:
            query = query.where(alerts.c.alert_id.in_(
                select(alert_agents.c.alert_id).where(alert_agents.c.agent_id == agent_id)))
        if detector is not None:
            query = query.where(alerts.c.detector == detector)
        if run_id is not None:
            # run_ids is a JSON list of quoted ids; match the quoted id exactly.
            query = query.where(alerts.c.run_ids.contains(json.dumps(run_id), autoescape=True))
        if after_id is not None:
            query = query.where(alerts.c.id > after_id).order_by(alerts.c.id.asc())
        else:
            query = query.order_by(alerts.c.id.desc())
        with self.engine.connect() as conn:
            rows = conn.execute(query.limit(max(1, min(limit, 10_000)))).all()
        return [_stored_alert(r) for r in rows]

    def agents(self) -> list[AgentSummary]:
        """Every agent with its run and alert counts, most recently active first."""
        with self.engine.connect() as conn:
            run_rows = conn.execute(
                select(runs.c.agent_id, func.count().label("n"), func.max(runs.c.seq).label("last"))
                .group_by(runs.c.agent_id)
            ).all()
            alert_rows: dict[str, int] = {
                str(agent): int(n) for agent, n in conn.execute(
                    select(alert_agents.c.agent_id, func.count())
                    .group_by(alert_agents.c.agent_id))
            }
            last_seqs = [int(r.last) for r in run_rows]
            started: dict[int, str] = {}
            for i in range(0, len(last_seqs), _CHUNK):
                started.update((int(seq), str(at)) for seq, at in conn.execute(
                    select(runs.c.seq, runs.c.started_at)
                    .where(runs.c.seq.in_(last_seqs[i:i + _CHUNK]))))
        out = [
            AgentSummary(agent_id=str(r.agent_id), runs=int(r.n),
                         alerts=int(alert_rows.get(r.agent_id, 0)), last_seq=int(r.last),
                         last_started_at=started.get(int(r.last), ""))
            for r in run_rows
        ]
        out.sort(key=lambda a: a.last_seq, reverse=True)
        return out

    def verify(self) -> VerifyResult:
        """Check the whole chain, streaming it in ``seq`` order."""
        with self.engine.connect() as plain:
            # One snapshot for the head row and the rows (PostgreSQL's default READ
            # COMMITTED would let a concurrent append slip in between the two reads).
            conn = plain.execution_options(isolation_level="REPEATABLE READ") \
                if self.dialect == "postgresql" else plain
            head = conn.execute(select(chain_head.c.seq, chain_head.c.hash)
                                .where(chain_head.c.id == 1)).one_or_none()
            recorded = (int(head.seq), str(head.hash)) if head else None
            result = conn.execution_options(yield_per=2000).execute(
                select(runs.c.seq, runs.c.run_id, runs.c.body, runs.c.prev_hash, runs.c.hash)
                .order_by(runs.c.seq.asc())
            )
            links = (ChainLink(int(r.seq), str(r.run_id), str(r.body), str(r.prev_hash),
                               str(r.hash)) for r in result)
            return verify_chain(links, recorded_head=recorded)

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_tuning(engine: Engine) -> None:
    """WAL + synchronous=NORMAL, and BEGIN IMMEDIATE for writes.

    pysqlite's own transaction handling starts transactions lazily as DEFERRED, so two
    processes could both read the chain head and then race to write. Taking the write
    lock at BEGIN (IMMEDIATE) makes read-head-then-append atomic across processes.
    """

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves, below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        mode = "IMMEDIATE" if conn.get_execution_options().get("cellblock_immediate") else ""
        conn.exec_driver_sql(f"BEGIN {mode}".strip())


def _same_record(stored_body: str, body: str) -> bool:
    """Equal after re-parsing: tolerates fields added to RunRecord since it was stored."""
    try:
        return canonical_json(RunRecord.model_validate_json(stored_body)) == body
    except ValueError:
        return False


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _stored_run(row: Any) -> StoredRun:
    return StoredRun(seq=int(row.seq), hash=str(row.hash), prev_hash=str(row.prev_hash),
                     received_at=float(row.received_at),
                     record=RunRecord.model_validate_json(row.body))


def _stored_alert(row: Any) -> StoredAlert:
    alert = Alert(detector=row.detector, severity=row.severity,
                  agents=tuple(json.loads(row.agents)), run_ids=tuple(json.loads(row.run_ids)),
                  evidence=row.evidence, details=json.loads(row.details))
    return StoredAlert(id=int(row.id), alert_id=str(row.alert_id),
                       created_at=float(row.created_at),
                       trigger_seq=int(row.trigger_seq) if row.trigger_seq is not None else None,
                       alert=alert)
