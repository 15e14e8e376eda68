"""Detection in a worker process: alerts follow the chain, survive restarts, and the
worker never outlives the service."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from cellblock_tests_helpers import make_record
from fastapi.testclient import TestClient

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.server.app import create_app
from cellblock.server.settings import ServerSettings

pytestmark = pytest.mark.integration


class SharedWordEngine:
    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, str]] = {}

    def observe(self, record: RunRecord) -> list[Alert]:
        out: list[Alert] = []
        for word in record.stdout_raw.split():
            if word.startswith("KEY"):
                first = self.seen.setdefault(word, (record.agent_id, record.run_id))
                if first[0] != record.agent_id:
                    out.append(Alert(detector="shared-word", severity="high",
                                     agents=tuple(sorted({first[0], record.agent_id})),
                                     run_ids=(first[1], record.run_id), evidence=word))
        return out


def _eventually(check: Callable[[], Any], what: str) -> Any:
    """Poll until ``check`` returns something truthy. The deadline only stops a hang;
    nothing here asserts on timing."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"never happened: {what}")


def _post(client: TestClient, records: list[RunRecord]) -> dict[str, Any]:
    resp = client.post("/v1/runs", json={"runs": [r.model_dump(mode="json") for r in records]})
    assert resp.status_code == 200
    body: dict[str, Any] = resp.json()
    return body


def _app(db_url: str) -> Any:
    return create_app(ServerSettings(db_url=db_url, detection="process"),
                      engine_factory=SharedWordEngine)


def test_worker_raises_alerts_in_chain_order(db_url: str) -> None:
    app = _app(db_url)
    worker = app.state.service.detection._workers[0].proc
    with TestClient(app) as client:
        assert worker.is_alive()
        noise = [make_record(i, stdout_raw=f"n{i}\n") for i in range(300)]
        _post(client, [make_record(1000, agent="alice", stdout_raw="KEYa\n"), *noise])
        head = _post(client, [make_record(1001, agent="bob", stdout_raw="KEYa\n")])["head_seq"]
        alerts = _eventually(lambda: client.get("/v1/alerts").json()["alerts"], "alert stored")
        assert len(alerts) == 1
        assert alerts[0]["agents"] == ["alice", "bob"]
        assert alerts[0]["trigger_seq"] == head
        _eventually(lambda: client.get("/healthz").json()["detected_seq"] == head,
                    "worker caught up")
        metrics = client.get("/metrics").text
        assert 'cellblock_alerts_raised_total{detector="shared-word"} 1.0' in metrics
        assert f"cellblock_detected_seq {float(head)}" in metrics
    worker.join(timeout=30)
    assert not worker.is_alive()  # closed with the app


def test_worker_restart_keeps_correlation_context(db_url: str) -> None:
    with TestClient(_app(db_url)) as client:
        _post(client, [make_record(1, agent="alice", stdout_raw="KEYb\n")])
        _eventually(lambda: client.get("/healthz").json()["detected_seq"] == 1, "analysed")
    with TestClient(_app(db_url)) as client:
        assert client.get("/healthz").json()["warmed_runs"] == 1
        _post(client, [make_record(2, agent="bob", stdout_raw="KEYb\n")])
        alerts = _eventually(lambda: client.get("/v1/alerts").json()["alerts"], "alert")
        assert alerts[0]["run_ids"] == ["run-000001", "run-000002"]


def test_runs_committed_but_not_analysed_are_caught_up_at_start(db_url: str) -> None:
    from cellblock.logs.store import Store

    store = Store(db_url)  # as if the service died right after committing these
    store.append([make_record(1, agent="alice", stdout_raw="KEYc\n"),
                  make_record(2, agent="bob", stdout_raw="KEYc\n")])
    store.close()
    with TestClient(_app(db_url)) as client:
        alerts = client.get("/v1/alerts").json()["alerts"]  # stored during warm-up
        assert [a["detector"] for a in alerts] == ["shared-word"]


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_built_in_detectors_raise_alerts(tmp_path: Any, mode: str) -> None:
    """The default engine (every built-in detector) wired into the service."""
    app = create_app(ServerSettings(db_url=str(tmp_path / "d.db"), detection=mode))  # type: ignore[arg-type]
    stego = "the answer is 4\u200b\u200c\u200b\u200c2\n"
    with TestClient(app) as client:
        _post(client, [make_record(i) for i in range(20)])
        _post(client, [make_record(99, agent="agent-red", stdout_raw=stego, stdout=stego)])
        alerts = _eventually(
            lambda: client.get("/v1/alerts", params={"run_id": "run-000099"}).json()["alerts"],
            "built-in alert on the stego run")
        assert alerts[0]["agents"] == ["agent-red"]
        assert "<U+200B>" in alerts[0]["evidence"]


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_deferred_decision_lands_without_more_traffic(tmp_path: Any, mode: str) -> None:
    """``shared-tokens`` defers its judgement (is the key rare?) by up to 1,000 records,
    or by its time bound: on a quiet stream the alert must still arrive, with no further
    POST to drive it (once the corpus is mature: warm-up plus one delay, 1,500 runs)."""
    app = create_app(ServerSettings(db_url=str(tmp_path / "q.db"), detection=mode))  # type: ignore[arg-type]
    key = "Zq4x7Kv-918273"
    with TestClient(app) as client:
        _post(client, [make_record(i) for i in range(1000, 2600)])
        _post(client, [make_record(100, agent="agent-red", code=f"print('{key}')",
                                   stdout_raw=key + "\n")])
        head = _post(client, [make_record(101, agent="agent-blue",
                                          code=f"k = '{key}'\nprint('ok')",
                                          stdout_raw="ok\n")])["head_seq"]
        alerts = _eventually(
            lambda: client.get("/v1/alerts", params={"detector": "shared-tokens"}).json()[
                "alerts"], "time-bounded shared-tokens alert")
        assert alerts[0]["agents"] == ["agent-blue", "agent-red"]
        assert alerts[0]["run_ids"] == ["run-000101", "run-000100"]
        assert key in alerts[0]["evidence"]
        assert alerts[0]["trigger_seq"] == head
