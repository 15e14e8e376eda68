"""`cellblock logs verify/tail` and `cellblock serve`'s refusal to bind openly."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from cellblock.cli.main import cli
from cellblock.logs.store import Store

from .helpers import make_record


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    store = Store(str(path))
    store.append([make_record(i) for i in range(1, 6)])
    store.close()
    return path


def test_verify_ok(db: Path) -> None:
    result = CliRunner().invoke(cli, ["logs", "verify", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: 5 runs, chain intact")


def test_verify_reports_first_broken_seq(db: Path) -> None:
    store = Store(str(db))
    with store.engine.begin() as conn:
        conn.execute(text("DROP TRIGGER runs_append_only_update"))
        conn.execute(text("UPDATE runs SET body = replace(body, '4', '9') WHERE seq = 4"))
    store.close()
    result = CliRunner().invoke(cli, ["logs", "verify", "--db", str(db)])
    assert result.exit_code == 1
    assert "BROKEN at seq 4" in result.output


def test_verify_without_a_log_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["logs", "verify", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert "no run log" in result.output
    assert "Traceback" not in result.output


def test_tail_shows_newest_runs(db: Path) -> None:
    result = CliRunner().invoke(cli, ["logs", "tail", "-n", "2", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "run-000005" in result.output
    assert "run-000004" in result.output
    assert "run-000003" not in result.output


def test_serve_refuses_public_bind_without_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--db",
                                      str(tmp_path / "x.db")])
    assert result.exit_code == 2
    assert "without an API token" in result.output
    assert not (tmp_path / "x.db").exists()
