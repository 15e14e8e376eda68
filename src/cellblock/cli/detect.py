"""``cellblock detect`` and ``cellblock eval-detectors``: collusion detection over a
file of run records, and the detectors' evaluation on a generated labelled corpus."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import TextIO

import click
from rich.console import Console
from rich.table import Table

from cellblock.cli._common import friendly_errors
from cellblock.detect.base import Alert
from cellblock.detect.engine import DetectionEngine
from cellblock.detect.jsonl import LineProblem, parse_lines
from cellblock.logs.record import RunRecord

__all__ = ["detect", "eval_detectors"]

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def _alert_json(alert: Alert) -> dict[str, object]:
    return {"detector": alert.detector, "severity": alert.severity,
            "agents": list(alert.agents), "run_ids": list(alert.run_ids),
            "evidence": alert.evidence}


@click.command()
@click.argument("records_file", metavar="RECORDS.jsonl",
                type=click.File("r", encoding="utf-8", errors="replace", lazy=False))
@click.option("--json", "as_json", is_flag=True,
              help='Print {"alerts": [...]} as JSON instead of a table.')
@friendly_errors
def detect(records_file: TextIO, as_json: bool) -> None:
    """Look for collusion in a file of run records (one JSON object per line; '-' reads
    standard input). Malformed lines are reported with their line number and skipped."""
    err = Console(stderr=True)
    problems: list[LineProblem] = []
    count = 0

    def records() -> Iterator[RunRecord]:
        # Streamed into the engine: memory stays bounded however long the file is.
        nonlocal count
        for item in parse_lines(records_file):
            if isinstance(item, LineProblem):
                problems.append(item)
                err.print(f"[yellow]line {item.line}:[/] {_escape(item.error)} (skipped)",
                          highlight=False)
            else:
                count += 1
                yield item

    alerts = DetectionEngine().analyze(records())
    alerts.sort(key=lambda a: (_SEVERITY_ORDER.get(a.severity, 9), a.detector))
    if as_json:
        click.echo(json.dumps({"alerts": [_alert_json(a) for a in alerts]}, ensure_ascii=False))
        return
    out = Console(highlight=False)
    if not alerts:
        out.print(f"no alerts in {_plural(count, 'record')}"
                  + (f" ({len(problems)} lines skipped)" if problems else ""))
        return
    table = Table(title=f"{_plural(len(alerts), 'alert')} in {_plural(count, 'record')}")
    table.add_column("severity")
    table.add_column("detector")
    table.add_column("agents")
    table.add_column("runs")
    table.add_column("evidence", overflow="fold")
    for a in alerts:
        runs = ", ".join(a.run_ids[:3]) + (f" (+{len(a.run_ids) - 3})" if len(a.run_ids) > 3
                                            else "")
        table.add_row(f"[{_SEVERITY_STYLE.get(a.severity, '')}]{a.severity}[/]", a.detector,
                      ", ".join(a.agents), runs, _escape(a.evidence))
    out.print(table)
    if problems:
        err.print(f"[yellow]{_plural(len(problems), 'malformed line')} skipped[/]")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _escape(text: str) -> str:
    """Evidence is untrusted text: keep rich from reading it as markup."""
    return text.replace("[", r"\[")


@click.command("eval-detectors")
@click.option("--seed", type=int, default=0, show_default=True, help="Corpus seed.")
@click.option("--runs", type=click.IntRange(min=200), default=4000, show_default=True,
              help="Honest runs to generate (episodes per channel: runs/100, at least 20).")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Replay the corpus as a stream of this many records/s (simulated "
                   "clock; time-bounded decisions as the log service takes them). "
                   "Default: batch mode, as 'cellblock detect'.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@friendly_errors
def eval_detectors(seed: int, runs: int, rate: float | None, as_json: bool) -> None:
    """Measure the detectors on a generated, labelled multi-agent corpus: detection rate
    per covert channel and false positives on honest runs. Exits 1 if a structural
    channel is under 95 % or false positives exceed 1 %."""
    from cellblock.detect.eval.harness import MAX_FPR, STRUCTURAL_TPR, evaluate

    report = evaluate(seed, runs, rate=rate)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        sys.exit(0 if report.passes() else 1)
    out = Console(highlight=False)
    mode = "batch" if rate is None else f"stream at {rate:g} records/s"
    table = Table(title=f"Detection per channel (seed {seed}, {report.records} records, "
                        f"{mode})")
    table.add_column("channel")
    table.add_column("kind")
    table.add_column("detected", justify="right")
    table.add_column("TPR", justify="right")
    table.add_column("variants (detected/episodes)", overflow="fold")
    for c in report.channels:
        ok = c.tpr >= STRUCTURAL_TPR or c.kind != "structural"
        style = "green" if ok else "bold red"
        variants = ", ".join(f"{v} {d}/{n}" for v, (d, n) in c.variants.items())
        table.add_row(c.channel, c.kind, f"{c.detected}/{c.episodes}",
                      f"[{style}]{c.tpr:.1%}[/]", variants)
    out.print(table)
    fpr_style = "green" if report.fpr <= MAX_FPR else "bold red"
    out.print(f"False positives: [{fpr_style}]{report.fpr:.2%}[/] of honest runs "
              f"({report.honest_flagged}/{report.honest_runs})"
              + (f" by {report.false_positives_by_detector}"
                 if report.false_positives_by_detector else ""))
    out.print(f"Engine throughput: {report.records_per_s:,.0f} records/s "
              f"({report.alerts} alerts)")
    for example in report.false_positive_examples[:5]:
        out.print(f"  [dim]false positive:[/] {_escape(example)}")
    verdict = "[green]PASS[/]" if report.passes() else "[bold red]FAIL[/]"
    out.print(f"{verdict}: structural channels >= {STRUCTURAL_TPR:.0%} detected at "
              f"<= {MAX_FPR:.0%} false positives")
    sys.exit(0 if report.passes() else 1)
