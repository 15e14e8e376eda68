"""Kill -9 the real `cellblock serve` mid-stream, restart it: no record lost, none doubled,
the chain verifies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from cellblock_tests_helpers import free_port, make_record

from cellblock.logs.store import Store
from cellblock.logs.transport import RemoteRecorder

pytestmark = pytest.mark.integration

_CLI = "from cellblock.cli.main import main; main()"


def _start(db: str, port: int, home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CELLBLOCK_HOME": str(home)}
    env.pop("CELLBLOCK_SERVE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI, "serve", "--port", str(port), "--db", db,
         "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                return proc
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError("serve did not become healthy")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    if proc.stderr is not None:
        proc.stderr.close()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 30  # bounds a hang only; no timing is asserted
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() for p in pids):
            return
        time.sleep(0.05)
    pytest.fail(f"processes outlived the killed service: {pids}")


def test_sigkill_mid_stream_loses_and_duplicates_nothing(tmp_path: Path, db_url: str) -> None:
    db = db_url  # SQLite file, then a real PostgreSQL
    port = free_port()
    total, kill_at, restart_at = 3000, 1000, 2000
    server = _start(db, port, tmp_path)
    recorder = RemoteRecorder(f"http://127.0.0.1:{port}", spool_dir=tmp_path / "spool",
                              batch_size=100, flush_interval_s=0.01, max_backoff_s=0.5,
                              close_timeout_s=120)
    try:
        for i in range(total):
            if i == kill_at:
                workers = _children(server.pid)
                assert workers  # the detection worker process
                server.send_signal(signal.SIGKILL)  # mid-stream: batches are in flight
                server.wait(timeout=30)
                _wait_gone(workers)  # the worker notices and exits by itself
            if i == restart_at:
                recorder.flush()
                assert recorder.spool.pending()  # the outage went to the spool
                _stop(server)
                server = _start(db, port, tmp_path)
            recorder.record(make_record(i, agent=f"agent-{i % 5}"))
        recorder.close()
        assert not recorder.spool.pending()
    finally:
        _stop(server)

    store = Store(db)
    try:
        stored = [r.record.run_id for r in store.list_runs(limit=10_000)]
    finally:
        store.close()
    expected = [f"run-{i:06d}" for i in range(total)]
    assert len(stored) == len(set(stored))  # exactly once
    assert stored == expected  # nothing lost, in the order recorded
    verify = subprocess.run([sys.executable, "-c", _CLI, "logs", "verify", "--db", db],
                            capture_output=True, text=True, timeout=120, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"ok: {total} runs" in verify.stdout


def test_sigterm_stops_the_service_and_its_workers(tmp_path: Path) -> None:
    port = free_port()
    server = _start(f"sqlite:///{tmp_path / 'runs.db'}", port, tmp_path)
    try:
        workers = _children(server.pid)
        assert len(workers) == 2  # fast and costly detector groups
        server.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)
        _wait_gone(workers)
    finally:
        _stop(server)
