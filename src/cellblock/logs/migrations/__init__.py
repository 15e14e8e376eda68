"""Alembic migrations of the run log, run programmatically when a store opens."""
