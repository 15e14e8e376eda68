"""``cellblock gc``: remove cellblock containers left behind by dead processes."""

from __future__ import annotations

import json

import click

from cellblock.cli._common import console, friendly_errors


@click.command()
@click.option("--all", "include_live", is_flag=True,
              help="Also remove containers of running cellblock processes (their calls fail).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@friendly_errors
def gc(include_live: bool, as_json: bool) -> None:
    """Remove leftover sandbox containers (Docker and gVisor backends).

    Every cellblock container is labelled with the process that owns it. A container
    whose owner is dead (killed mid-call, or holding never-used pool containers) is
    removed; containers of live cellblock processes are kept unless --all is given.
    """
    from cellblock.backends.docker.engine import EngineClients
    from cellblock.backends.docker.gc import reap

    clients = EngineClients(None, 30)
    try:
        report = reap(clients.get(), include_live=include_live)
    finally:
        clients.close()
    if as_json:
        click.echo(json.dumps({"removed": len(report.removed), "kept_live": report.kept_live,
                               "failed": len(report.failed)}))
    else:
        console.print(f"removed {len(report.removed)} leftover container(s); "
                      f"kept {report.kept_live} of running processes")
        if report.failed:
            console.print(f"[bold red]could not remove {len(report.failed)} container(s);[/] "
                          "see the log, then retry `cellblock gc`")
    if report.failed:
        raise SystemExit(1)
