"""Initial run log: runs (append-only, hash-chained), alerts, chain head.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

GENESIS_HASH = "0" * 64


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("run_id", sa.String(128), nullable=False, unique=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("started_at", sa.String(64), nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_runs_agent_seq", "runs", ["agent_id", "seq"])
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("alert_id", sa.String(64), nullable=False, unique=True),
        sa.Column("detector", sa.String(64), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("agents", sa.Text, nullable=False),
        sa.Column("run_ids", sa.Text, nullable=False),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("trigger_seq", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_alerts_detector", "alerts", ["detector"])
    op.create_table(
        "alert_agents",
        sa.Column("alert_id", sa.String(64), primary_key=True),
        sa.Column("agent_id", sa.String(128), primary_key=True),
    )
    op.create_index("ix_alert_agents_agent", "alert_agents", ["agent_id"])
    head = op.create_table(
        "chain_head",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.bulk_insert(head, [{"id": 1, "seq": 0, "hash": GENESIS_HASH}])

    # Append-only in the database itself, not just by convention: an UPDATE or DELETE
    # on runs fails. Someone with DDL rights can drop these triggers, which is why the
    # hash chain exists as well.
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER runs_append_only_{event.lower()} BEFORE {event} ON runs "
                "BEGIN SELECT RAISE(ABORT, 'runs are append-only'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION cellblock_runs_append_only() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'runs are append-only'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            "CREATE TRIGGER runs_append_only BEFORE UPDATE OR DELETE ON runs "
            "FOR EACH ROW EXECUTE FUNCTION cellblock_runs_append_only()"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS runs_append_only ON runs")
        op.execute("DROP FUNCTION IF EXISTS cellblock_runs_append_only()")
    op.drop_table("chain_head")
    op.drop_table("alert_agents")
    op.drop_table("alerts")
    op.drop_table("runs")
