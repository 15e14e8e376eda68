"""``cellblock serve``: the central log service (ingestion API, detection, dashboard)."""

from __future__ import annotations

import click
from rich.console import Console

from cellblock.cli._common import friendly_errors
from cellblock.errors import CellblockError
from cellblock.server.settings import ServerSettings

__all__ = ["serve"]


@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback requires --token.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--db", "db_url", default=None, envvar="CELLBLOCK_DB_URL",
              help="SQLAlchemy URL or SQLite path [default: <cellblock home>/runs.db; "
                   "env CELLBLOCK_DB_URL]. PostgreSQL: postgresql://user@host/db")
@click.option("--token", default=None, envvar="CELLBLOCK_SERVE_TOKEN",
              help="Token required on every endpoint but /healthz: `Authorization: Bearer "
                   "<token>`, or Basic auth with any user and the token as password (the "
                   "dashboard in a browser) [env CELLBLOCK_SERVE_TOKEN; the variable keeps "
                   "it out of `ps`]. Without it (loopback only) everything is open.")
@click.option("--read-token", default=None, envvar="CELLBLOCK_SERVE_READ_TOKEN",
              help="Optional second token for reading only (GET: API, /metrics, "
                   "dashboard); it cannot POST runs. Needs --token "
                   "[env CELLBLOCK_SERVE_READ_TOKEN].")
@click.option("--warm-runs", default=10_000, show_default=True, type=click.IntRange(0),
              help="Newest stored runs replayed into the detectors at start.")
@click.option("--detection", default="process", show_default=True,
              type=click.Choice(["process", "inline"]),
              help="Run detectors in a worker process (faster ingestion) or inline in "
                   "each request (alert stored before the POST returns).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@friendly_errors
def _serve(*, host: str, port: int, db_url: str | None, token: str | None,
           read_token: str | None, warm_runs: int, detection: str, log_level: str) -> None:
    """Run the log service: POST /v1/runs, GET /v1/runs and /v1/alerts, /metrics,
    /healthz, and the dashboard at /. With --token, all but /healthz require it."""
    settings = ServerSettings(host=host, port=port, db_url=db_url, token=token or None,
                              read_token=read_token or None, warm_runs=warm_runs,
                              detection=detection)
    try:
        import uvicorn

        from cellblock.server.app import create_app
    except ImportError as exc:
        raise CellblockError("the log service needs cellblock's server extra",
                             hint="pip install 'cellblock[server]'") from exc
    app = create_app(settings)
    shown = f"[{host}]" if ":" in host else host
    Console(stderr=True).print(
        f"cellblock log service on http://{shown}:{port} "
        f"(store: {app.state.store.engine.url.render_as_string(hide_password=True)}, "
        f"{'token required on all but /healthz' if settings.token else 'open on loopback'}"
        f"{', read-only token accepted on GET' if settings.read_token else ''})")
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


serve: click.Command = click.command(name="serve")(_serve)
