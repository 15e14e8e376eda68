"""`cellblock run`: output, exit codes, JSON, and clear errors instead of tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cellblock.cli.main import cli
from cellblock.images.store import cellblock_home
from tests.helpers import require_default_image


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private CELLBLOCK_HOME that shares the built images but has its own run log."""
    images = cellblock_home() / "images"
    monkeypatch.setenv("CELLBLOCK_HOME", str(tmp_path))
    (tmp_path / "images").symlink_to(images)
    return tmp_path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.integration
def test_run_prints_output_and_propagates_exit_code(home: Path) -> None:
    require_default_image()
    code, out, err = invoke("run", "-c", "import sys; print('hi'); print('oops', file=sys.stderr); sys.exit(7)")
    assert code == 7
    assert out == "hi\n"
    assert "oops" in err
    # The run was recorded in the local run log.
    assert (home / "runs.db").exists()


@pytest.mark.integration
def test_run_json_is_the_whole_result(home: Path, tmp_path: Path) -> None:
    require_default_image()
    script = tmp_path / "job.sh"
    script.write_text("echo from-bash\nexit 3\n")
    code, out, _ = invoke("run", "--json", str(script))
    result = json.loads(out)
    assert code == 3
    assert result["stdout"] == "from-bash\n"
    assert result["exit_code"] == 3
    assert set(result) >= {"run_id", "timed_out", "killed_reason", "truncated", "duration_ms", "backend"}


@pytest.mark.integration
def test_run_timeout_reports_the_kill(home: Path) -> None:
    require_default_image()
    code, out, _ = invoke("run", "--json", "--timeout", "0.5", "-c", "while True: pass")
    result = json.loads(out)
    assert result["killed_reason"] == "timeout" and result["timed_out"] is True
    assert code == 137


def test_unknown_backend_is_a_message_not_a_traceback() -> None:
    code, _, err = invoke("run", "--backend", "nosuch", "-c", "print(1)")
    assert code == 2
    assert "unknown sandbox backend 'nosuch'" in err
    assert "Traceback" not in err


def test_policy_out_of_range_is_a_message(home: Path) -> None:
    code, _, err = invoke("run", "--timeout", "0", "-c", "print(1)")
    assert code == 2
    assert "timeout_s" in err and "Traceback" not in err


def test_missing_image_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELLBLOCK_HOME", str(tmp_path))
    code, _, err = invoke("run", "-c", "print(1)")
    assert code == 2
    assert "not built" in err and "cellblock image build" in err
    assert "Traceback" not in err


def test_code_and_file_are_exclusive() -> None:
    code, _, err = invoke("run")
    assert code == 2 and "exactly one of" in err
