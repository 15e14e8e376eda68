"""``cellblock doctor``: report what this host supports and how to fix the rest."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from cellblock.cli._common import friendly_errors

__all__ = ["doctor"]


@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@friendly_errors
def _doctor(as_json: bool) -> None:
    """Check bwrap, namespaces, cgroups, seccomp, images, Docker and gVisor on this host.

    Exits 0 when bwrap sandboxes work here, 1 otherwise.
    """
    from cellblock.doctor import (
        bwrap_works,
        render_report,
        report_json,
        run_checks,
    )

    checks = run_checks()
    if as_json:
        click.echo(json.dumps(report_json(checks), indent=2))
    else:
        render_report(checks, Console())
    sys.exit(0 if bwrap_works(checks) else 1)


# Built explicitly rather than decorated, so that the command object has a declared type.
doctor: click.Command = click.command(name="doctor")(_doctor)
