"""SQLAlchemy tables of the run log. The alembic revisions under ``migrations/`` create
them; these definitions are what the code queries and must match the latest revision."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["alert_agents", "alerts", "chain_head", "metadata", "runs"]

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    # seq is assigned by the single writer (head + 1), never by the database, because it
    # is part of the chain: a gap means a deleted row.
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("run_id", String(128), nullable=False, unique=True),
    Column("agent_id", String(128), nullable=False),
    Column("session_id", String(128), nullable=False),
    Column("started_at", String(64), nullable=False),
    Column("received_at", Float, nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("duration_ms", Float, nullable=False),
    Column("body", Text, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Index("ix_runs_agent_seq", "agent_id", "seq"),
)

alerts = Table(
    "alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", String(64), nullable=False, unique=True),
    Column("detector", String(64), nullable=False, index=True),
    Column("severity", String(16), nullable=False),
    Column("agents", Text, nullable=False),
    Column("run_ids", Text, nullable=False),
    Column("evidence", Text, nullable=False),
    Column("details", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("trigger_seq", BigInteger, nullable=True),
)

alert_agents = Table(
    "alert_agents",
    metadata,
    Column("alert_id", String(64), primary_key=True),
    Column("agent_id", String(128), primary_key=True),
    Index("ix_alert_agents_agent", "agent_id"),
)

chain_head = Table(
    "chain_head",
    metadata,
    # One row (id = 1). Writers lock it (SELECT ... FOR UPDATE on PostgreSQL) so two
    # concurrent writers can never both append after the same head and fork the chain.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
)
