"""``cellblock selfcheck``: run the conformance suite against a backend on this host."""

from __future__ import annotations

import json
import sys
from typing import get_args

import click
from rich.console import Console
from rich.table import Table

from cellblock.cli._common import friendly_errors
from cellblock.cli._options import backend_options
from cellblock.policy import Protection


@click.command()
@click.option("--backend", "-b", default="bwrap", show_default=True)
@click.option("--image", default=None, help="Image name (default: the default image).")
@click.option("--check", "only", multiple=True, help="Run only this check (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.option("--list", "list_only", is_flag=True, help="List the checks and exit.")
@click.option("--allow-missing", "allow_missing", multiple=True,
              type=click.Choice(list(get_args(Protection))),
              help="Run every check with Policy(unsafe_allow_missing={...}) for this "
                   "protection and expect the weaker guarantee (repeatable; e.g. cgroups "
                   "when not running as root).")
@friendly_errors
def selfcheck(backend: str, image: str | None, only: tuple[str, ...], as_json: bool,
              list_only: bool, allow_missing: tuple[Protection, ...]) -> None:
    """Check that BACKEND gives every guarantee cellblock promises, on this host."""
    from cellblock.conformance import CHECKS, run_checks

    if list_only:
        for item in CHECKS:
            click.echo(f"{item.name:32} {item.description}")
        return
    known = {c.name for c in CHECKS}
    unknown = sorted(set(only) - known)
    if unknown:
        raise click.UsageError(f"unknown check(s): {', '.join(unknown)}")
    console = Console()
    table = Table(title=f"conformance: {backend}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("time", justify="right")
    table.add_column("detail", overflow="fold")
    outcomes = []
    options = backend_options(backend, image, pool=True)
    with console.status(f"running conformance checks on {backend}...", spinner="dots") as status:
        for outcome in run_checks(backend, options, list(only) or None,
                                  frozenset(allow_missing)):
            status.update(f"{outcome.name}: {'ok' if outcome.passed else 'FAILED'}")
            outcomes.append(outcome)
            table.add_row(outcome.name, "[green]pass[/]" if outcome.passed else "[red]FAIL[/]",
                          f"{outcome.seconds:.1f}s", "" if outcome.passed else outcome.detail)
    failed = [o for o in outcomes if not o.passed]
    if as_json:
        click.echo(json.dumps({"backend": backend, "passed": not failed, "checks": [
            {"name": o.name, "passed": o.passed, "detail": o.detail, "seconds": round(o.seconds, 3)}
            for o in outcomes]}))
    else:
        console.print(table)
        console.print(f"{len(outcomes) - len(failed)}/{len(outcomes)} checks passed")
    sys.exit(1 if failed else 0)
