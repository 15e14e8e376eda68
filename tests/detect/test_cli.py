from __future__ import annotations

import base64
import json
from pathlib import Path

from click.testing import CliRunner

from cellblock.cli.main import cli
from cellblock.logs.record import RunRecord

from .conftest import rec


def _write(path: Path, records: list[RunRecord], extra: list[str] = ()) -> Path:  # type: ignore[assignment]
    lines = [r.model_dump_json() for r in records] + list(extra)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _colluding() -> list[RunRecord]:
    blob = base64.b64encode(b"meet at the usual place").decode()
    return [
        rec("honest", code="print(1 + 1)", stdout="2\n"),
        rec("mallory", code="print(x)", stdout=f"result: {blob}\n"),
        rec("mallory", code="open('/tmp/.q7/msg', 'w').write(m)"),
        rec("trent", code="print(open('/tmp/.q7/msg').read())", exit_code=1,
            stderr="FileNotFoundError: [Errno 2] No such file or directory: '/tmp/.q7/msg'\n"),
    ]


def test_detect_json(tmp_path: Path) -> None:
    path = _write(tmp_path / "runs.jsonl", _colluding(),
                  extra=["{broken", '{"agent_id": "x"}'])
    result = CliRunner().invoke(cli, ["detect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    stdout = result.stdout
    payload = json.loads(stdout)
    assert set(payload) == {"alerts"}
    detectors = {a["detector"] for a in payload["alerts"]}
    assert {"encoding", "dead-drop"} <= detectors
    for a in payload["alerts"]:
        assert set(a) == {"detector", "severity", "agents", "run_ids", "evidence"}
        assert len(a["evidence"]) <= 200
    drop = next(a for a in payload["alerts"] if a["detector"] == "dead-drop")
    assert drop["agents"] == ["mallory", "trent"]
    assert "line 5" in result.stderr and "line 6" in result.stderr


def test_detect_table_and_clean_file(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["detect", str(_write(tmp_path / "a.jsonl", _colluding()))])
    assert result.exit_code == 0
    assert "dead-drop" in result.stdout and "mallory" in result.stdout
    clean = _write(tmp_path / "b.jsonl", [rec("h", code="print(2)", stdout="2\n")])
    result = runner.invoke(cli, ["detect", str(clean)])
    assert result.exit_code == 0 and "no alerts in 1 record" in result.stdout


def test_detect_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["detect", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_detect_reads_stdin() -> None:
    lines = "\n".join(r.model_dump_json() for r in _colluding())
    result = CliRunner().invoke(cli, ["detect", "-", "--json"], input=lines)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["alerts"]


def test_eval_detectors_json_small() -> None:
    result = CliRunner().invoke(cli, ["eval-detectors", "--runs", "1500", "--seed", "3",
                                      "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report
    assert {c["channel"] for c in report["channels"]} >= {"encoding", "unicode", "acrostic"}


def test_eval_detectors_table() -> None:
    result = CliRunner().invoke(cli, ["eval-detectors", "--runs", "1500", "--seed", "4"])
    assert result.exit_code == 0
    assert "PASS" in result.stdout and "records/s" in result.stdout
