"""``cellblock bench``: per-call latency and throughput against a same-run baseline."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from cellblock.cli._common import friendly_errors
from cellblock.cli._options import backend_options


@click.command()
@click.option("--backend", "-b", default="bwrap", show_default=True)
@click.option("--n", "n", type=click.IntRange(10, 100000), default=200, show_default=True,
              help="Calls per series.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Concurrent callers for the throughput figure.")
@click.option("--image", default=None)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@friendly_errors
def bench(backend: str, n: int, concurrency: int, image: str | None, as_json: bool) -> None:
    """Measure per-call wall time of print(1) against a baseline measured in the same run."""
    from cellblock.bench import run_bench

    console = Console(stderr=True)
    options = backend_options(backend, image, pool=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=console, disable=as_json, transient=True) as progress:
        tasks: dict[str, object] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=total)
            progress.update(tasks[phase], completed=done)  # type: ignore[arg-type]

        report = run_bench(backend, n=n, concurrency=concurrency, options=options,
                           progress=update)
    if as_json:
        click.echo(json.dumps(report.model_dump()))
        return
    table = Table(title=f"{backend}: {report.code!r}, {n} calls per series")
    for col in ("series", "p50 ms", "p95 ms", "mean ms", "min ms"):
        table.add_column(col, justify="left" if col == "series" else "right")
    for s in (report.sandbox, report.baseline):
        table.add_row(s.label, f"{s.p50_ms:.2f}", f"{s.p95_ms:.2f}", f"{s.mean_ms:.2f}",
                      f"{s.min_ms:.2f}")
    out = Console()
    out.print(table)
    out.print(f"overhead p50 {report.overhead_p50_ms:+.2f} ms, p95 {report.overhead_p95_ms:+.2f} ms,"
              f" ratio p50 {report.ratio_p50:.2f}x")
    out.print(f"throughput with {concurrency} concurrent callers: {report.calls_per_s:.1f} calls/s")
    if report.failures:
        out.print(f"[red]{report.failures} calls failed[/]")
