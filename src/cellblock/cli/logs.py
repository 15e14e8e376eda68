"""``cellblock logs``: check and read the run log."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from cellblock.cli._common import friendly_errors
from cellblock.logs.store import LogStoreError, Store, default_db_url, normalize_db_url

__all__ = ["logs"]

_DB_OPTION = click.option(
    "--db", "db_url", default=None, envvar="CELLBLOCK_DB_URL",
    help="SQLAlchemy URL or SQLite path [default: <cellblock home>/runs.db; env "
         "CELLBLOCK_DB_URL].")


def _open(db_url: str | None) -> Store:
    url = normalize_db_url(db_url or default_db_url())
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise LogStoreError(f"no run log at {url}",
                            hint="pass --db, or run something first: cellblock run -c ...")
    store = Store(url, migrate=False)
    if not store.has_schema():
        store.close()
        raise LogStoreError("this database holds no cellblock run log",
                            hint="check --db / CELLBLOCK_DB_URL")
    return store


def _logs() -> None:
    """Check and read the run log (the embedded store or a service's database)."""


# Built explicitly rather than decorated, so that the command object has a declared type.
logs: click.Group = click.group(name="logs")(_logs)


@_DB_OPTION
@friendly_errors
def _verify(db_url: str | None) -> None:
    """Check the hash chain. Exit 0 when intact, 1 with the first broken seq."""
    store = _open(db_url)
    try:
        result = store.verify()
    finally:
        store.close()
    if result.ok:
        click.echo(f"ok: {result.checked} runs, chain intact; head seq {result.head_seq} "
                   f"hash {result.head_hash}")
        sys.exit(0)
    click.echo(f"BROKEN at seq {result.first_broken_seq}: {result.reason} "
               f"({result.checked} runs before it are intact)")
    sys.exit(1)


@click.option("-n", "count", default=20, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--agent", "agent_id", default=None, help="Only this agent's runs.")
@_DB_OPTION
@friendly_errors
def _tail(count: int, agent_id: str | None, db_url: str | None) -> None:
    """Show the newest runs."""
    store = _open(db_url)
    try:
        found = list(reversed(store.list_runs(agent_id=agent_id, limit=count,
                                              newest_first=True)))
    finally:
        store.close()
    table = Table("seq", "started", "agent", "session", "exit", "ms", "run_id")
    for run in found:
        rec = run.record
        exit_text = f"killed:{rec.killed_reason}" if rec.killed_reason else str(rec.exit_code)
        table.add_row(str(run.seq), rec.started_at[:19], rec.agent_id, rec.session_id,
                      exit_text, f"{rec.duration_ms:.1f}", rec.run_id)
    Console().print(table)


logs.add_command(click.command(name="verify")(_verify))
logs.add_command(click.command(name="tail")(_tail))
