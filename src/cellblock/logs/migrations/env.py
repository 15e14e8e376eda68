"""Alembic environment: always online, on the connection the store hands over."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=None,
    version_table="cellblock_alembic_version",
)
with context.begin_transaction():
    context.run_migrations()
