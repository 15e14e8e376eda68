"""`cellblock bench` and `cellblock selfcheck` end to end on bwrap."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cellblock.cli.main import cli
from tests.helpers import require_default_image

pytestmark = pytest.mark.integration


def test_bench_reports_both_series() -> None:
    require_default_image()
    result = CliRunner().invoke(cli, ["bench", "--backend", "bwrap", "--n", "10", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["failures"] == 0
    assert report["sandbox"]["n"] == 10 and report["baseline"]["n"] == 10
    assert report["baseline"]["label"].startswith("floor")
    assert report["sandbox"]["p50_ms"] > 0 and report["calls_per_s"] > 0
    assert report["overhead_p50_ms"] == pytest.approx(
        report["sandbox"]["p50_ms"] - report["baseline"]["p50_ms"], abs=0.01)


def test_selfcheck_runs_named_checks_and_rejects_unknown_ones() -> None:
    require_default_image()
    runner = CliRunner()
    ok = runner.invoke(cli, ["selfcheck", "--backend", "bwrap", "--check", "streams_and_exit_code",
                             "--check", "network_blocked", "--json"])
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout.strip().splitlines()[-1])
    assert report["passed"] is True
    assert [c["name"] for c in report["checks"]] == ["streams_and_exit_code", "network_blocked"]
    bad = runner.invoke(cli, ["selfcheck", "--check", "no_such_check"])
    assert bad.exit_code == 2 and "unknown check" in bad.output
