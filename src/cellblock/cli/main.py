"""``cellblock``: the command-line entry point.

Each sub-command lives in its own module under :mod:`cellblock.cli` and is registered at
the bottom of this file. Errors cellblock raises on purpose are printed as a clear
message with the fix, never as a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cellblock.cli import bench as _bench
from cellblock.cli import check as _check
from cellblock.cli import detect as _detect
from cellblock.cli import doctor as _doctor
from cellblock.cli import gc as _gc
from cellblock.cli import image as _image
from cellblock.cli import logs as _logs
from cellblock.cli import serve as _serve
from cellblock.cli._common import console, friendly_errors
from cellblock.policy import Policy
from cellblock.sandbox import Sandbox


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cellblock")
def cli() -> None:
    """Run AI agents' code in sandboxes they cannot escape, persist in, or use to collude."""


@cli.command()
@click.option("--backend", "-b", default="bwrap", show_default=True, help="Isolation backend.")
@click.option("--timeout", "timeout_s", type=float, default=10.0, show_default=True,
              help="Wall-clock limit in seconds.")
@click.option("--memory", "memory_mb", type=int, default=256, show_default=True,
              help="Memory limit in MiB.")
@click.option("--pids", "max_pids", type=int, default=64, show_default=True,
              help="Process limit.")
@click.option("--lang", "language", type=click.Choice(["python", "bash"]), default=None,
              help="Language (default: from the file extension, else python).")
@click.option("--image", default=None, help="Image name (bwrap/docker/gvisor).")
@click.option("--file", "input_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Input file placed read-only beside the code (repeatable).")
@click.option("--stdin", "stdin_path", type=click.Path(exists=True, dir_okay=False),
              help="File fed to the program's standard input ('-' is not read).")
@click.option("--agent", "agent_id", default="cli", show_default=True, help="Agent id for the run log.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as one JSON object.")
@click.option("-c", "code", default=None, help="Code to run.")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
@friendly_errors
def run(
    backend: str,
    timeout_s: float,
    memory_mb: int,
    max_pids: int,
    language: str | None,
    image: str | None,
    input_files: tuple[str, ...],
    stdin_path: str | None,
    agent_id: str,
    as_json: bool,
    code: str | None,
    path: str | None,
) -> None:
    """Run CODE (-c) or a FILE in a fresh sandbox; exit with the program's exit code."""
    if (code is None) == (path is None):
        raise click.UsageError("give exactly one of -c CODE or a FILE")
    if path is not None:
        source = Path(path)
        if not source.is_file():
            raise click.UsageError(f"no such file: {path}")
        code = source.read_text()
        if language is None and source.suffix == ".sh":
            language = "bash"
    assert code is not None
    policy = Policy(timeout_s=timeout_s, memory_mb=memory_mb, max_pids=max_pids)
    files = {Path(f).name: Path(f).read_bytes() for f in input_files}
    stdin = Path(stdin_path).read_bytes() if stdin_path else None
    from cellblock.cli._options import backend_options

    with Sandbox(backend, policy, options=backend_options(backend, image, pool=False),
                 agent_id=agent_id) as sandbox:
        result = sandbox.run(code, language or "python", files=files, stdin=stdin)  # type: ignore[arg-type]
    if as_json:
        click.echo(json.dumps(result.model_dump(mode="json")))
    else:
        sys.stdout.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.write(result.stderr)
        if result.killed_reason:
            console.print(f"[bold red]killed:[/] {result.killed_reason} limit "
                          f"after {result.duration_ms:.0f} ms")
        if result.truncated:
            console.print("[yellow]output truncated at the output limit[/]")
    sys.exit(result.exit_code if 0 <= result.exit_code <= 255 else 1)


def main() -> None:
    cli()


# Sub-commands from their own modules.
cli.add_command(_image.image)
cli.add_command(_doctor.doctor)
cli.add_command(_serve.serve)
cli.add_command(_logs.logs)
cli.add_command(_check.selfcheck)
cli.add_command(_bench.bench)
cli.add_command(_detect.detect)
cli.add_command(_detect.eval_detectors)
cli.add_command(_gc.gc)
