"""Recorders: embedded store, and a remote service over real HTTP on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellblock.logs.record import RunRecord
from cellblock.logs.store import Store
from cellblock.logs.transport import EmbeddedRecorder, RemoteRecorder, default_recorder
from cellblock.server.app import create_app
from cellblock.server.settings import ServerSettings

from .helpers import LiveServer, free_port, make_record

pytestmark = pytest.mark.integration


class NoAlerts:
    def observe(self, record: RunRecord) -> list[object]:
        return []


def _app(db: str, token: str | None = None) -> object:
    return create_app(ServerSettings(db_url=db, token=token, detection="inline"), engine_factory=NoAlerts)  # type: ignore[arg-type]


def _run_ids(db: str) -> list[str]:
    store = Store(db)
    try:
        return [r.record.run_id for r in store.list_runs(limit=10_000)]
    finally:
        store.close()


def test_remote_recorder_delivers_in_order(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'srv.db'}"
    with LiveServer(_app(db)) as srv:
        rec = RemoteRecorder(srv.url, spool_dir=tmp_path / "spool", batch_size=100)
        for i in range(1234):
            rec.record(make_record(i))
        rec.close()
        assert rec.delivered == 1234
    assert _run_ids(db) == [f"run-{i:06d}" for i in range(1234)]
    assert not rec.spool.pending()


def test_service_down_then_up_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'srv.db'}"
    port = free_port()
    rec = RemoteRecorder(f"http://127.0.0.1:{port}", spool_dir=tmp_path / "spool",
                         batch_size=50, max_backoff_s=0.5)
    for i in range(300):
        rec.record(make_record(i))
    rec.flush()
    assert rec.spool.pending_count() == 300  # nobody listening: all spooled
    with LiveServer(_app(db), port=port):
        for i in range(300, 400):
            rec.record(make_record(i))  # must queue behind the spooled ones
        rec.close()
    assert _run_ids(db) == [f"run-{i:06d}" for i in range(400)]
    assert not rec.spool.pending()


def test_spool_left_by_one_recorder_is_delivered_by_the_next(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'srv.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = RemoteRecorder(url, spool_dir=tmp_path / "spool", close_timeout_s=0)
    for i in range(20):
        first.record(make_record(i))
    first.close()
    assert first.spool.pending_count() == 20
    with LiveServer(_app(db), port=port):
        second = RemoteRecorder(url, spool_dir=tmp_path / "spool")
        second.record(make_record(20))
        second.close()
    assert _run_ids(db) == [f"run-{i:06d}" for i in range(21)]


def test_wrong_token_keeps_records_spooled(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'srv.db'}"
    with LiveServer(_app(db, token="right")) as srv:
        bad = RemoteRecorder(srv.url, "wrong", spool_dir=tmp_path / "spool",
                             close_timeout_s=0)
        bad.record(make_record(1))
        bad.close()
        assert bad.spool.pending_count() == 1
        good = RemoteRecorder(srv.url, "right", spool_dir=tmp_path / "spool")
        good.close()  # delivers what the first one could not
    assert _run_ids(db) == ["run-000001"]


def test_conflicting_record_is_set_aside_not_retried(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'srv.db'}"
    with LiveServer(_app(db)) as srv:
        rec = RemoteRecorder(srv.url, spool_dir=tmp_path / "spool")
        rec.record(make_record(1))
        rec.flush()
        rec.record(make_record(1, stdout_raw="forged\n"))
        rec.close()
        assert not rec.spool.pending()
        assert rec.rejected.pending_count() == 1
    store = Store(db)
    try:
        assert store.get_run("run-000001").record.stdout_raw == "1\n"  # type: ignore[union-attr]
        assert [a.alert.detector for a in store.list_alerts()] == ["run-id-conflict"]
    finally:
        store.close()


def test_embedded_recorder_writes_the_local_store(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    rec = EmbeddedRecorder(db, spool_dir=tmp_path / "spool")
    for i in range(3):
        rec.record(make_record(i))
    rec.close()
    assert _run_ids(db) == ["run-000000", "run-000001", "run-000002"]


def test_embedded_recorder_spools_when_the_store_fails(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    rec = EmbeddedRecorder(db, spool_dir=tmp_path / "spool")
    real_send = rec._send
    failing = {"on": True}

    def send(batch: list[RunRecord]) -> None:
        if failing["on"]:
            raise OSError("disk full")
        real_send(batch)

    monkeypatch.setattr(rec, "_send", send)
    rec.record(make_record(1))
    rec.record(make_record(2))
    assert rec._spool.pending_count() == 2
    failing["on"] = False
    rec.record(make_record(3))
    rec.close()
    assert _run_ids(db) == ["run-000001", "run-000002", "run-000003"]
    assert not rec._spool.pending()


def test_default_recorder_follows_the_environment(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELLBLOCK_HOME", str(tmp_path))
    monkeypatch.delenv("CELLBLOCK_LOG_URL", raising=False)
    local = default_recorder()
    assert isinstance(local, EmbeddedRecorder)
    local.record(make_record(1))
    local.close()
    assert (tmp_path / "runs.db").is_file()
    monkeypatch.setenv("CELLBLOCK_LOG_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("CELLBLOCK_LOG_TOKEN", "t")
    remote = default_recorder()
    try:
        assert isinstance(remote, RemoteRecorder)
        assert remote._session.headers["Authorization"] == "Bearer t"
        assert remote.spool.path.parent == tmp_path / "spool"
    finally:
        remote.close_timeout_s = 0
        remote.close()
