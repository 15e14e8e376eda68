"""The log service API against SQLite and a real PostgreSQL (in-process ASGI client)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cellblock_tests_helpers import make_record
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cellblock.detect.base import Alert
from cellblock.errors import PolicyError
from cellblock.logs.record import RunRecord
from cellblock.server.app import create_app
from cellblock.server.settings import ServerSettings, is_loopback

pytestmark = pytest.mark.integration


class SharedWordEngine:
    """A small correlating fake: alerts when two different agents print the same word
    that starts with 'KEY'. Its memory is what a restart must rebuild."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, str]] = {}

    def observe(self, record: RunRecord) -> list[Alert]:
        out: list[Alert] = []
        for word in record.stdout_raw.split():
            if not word.startswith("KEY"):
                continue
            first = self.seen.setdefault(word, (record.agent_id, record.run_id))
            if first[0] != record.agent_id:
                out.append(Alert(detector="shared-word", severity="high",
                                 agents=tuple(sorted({first[0], record.agent_id})),
                                 run_ids=(first[1], record.run_id), evidence=word,
                                 details={"match": word}))
        return out


def _client(db_url: str, token: str | None = None) -> TestClient:
    app = create_app(ServerSettings(db_url=db_url, token=token, detection="inline"), engine_factory=SharedWordEngine)
    return TestClient(app)


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with _client(db_url) as c:
        yield c


def _post(client: TestClient, records: list[RunRecord], **kw: Any) -> Any:
    return client.post("/v1/runs", json={"runs": [r.model_dump(mode="json") for r in records]},
                       **kw)


def test_ingest_is_idempotent_and_reports_conflicts(client: TestClient) -> None:
    first = _post(client, [make_record(i) for i in range(10)])
    assert first.status_code == 200
    assert first.json() == {"inserted": 10, "duplicates": 0, "conflicts": [], "alerts": 0,
                            "head_seq": 10}
    again = _post(client, [make_record(i) for i in range(5, 12)]).json()
    assert (again["inserted"], again["duplicates"], again["head_seq"]) == (2, 5, 12)
    forged = _post(client, [make_record(3, code="rm -rf /")]).json()
    assert forged["conflicts"] == ["run-000003"]
    assert forged["alerts"] == 1
    alerts = client.get("/v1/alerts").json()["alerts"]
    assert [a["detector"] for a in alerts] == ["run-id-conflict"]
    run = client.get("/v1/runs/run-000003").json()
    assert run["record"]["code"] == "print(3)"
    assert run["seq"] == 4


def test_list_runs_pages_in_chain_order(client: TestClient) -> None:
    _post(client, [make_record(i) for i in range(25)])
    page = client.get("/v1/runs", params={"limit": 10}).json()
    assert [r["seq"] for r in page["runs"]] == list(range(1, 11))
    nxt = client.get("/v1/runs", params={"limit": 10, "after_seq": page["next_after_seq"]})
    assert [r["seq"] for r in nxt.json()["runs"]] == list(range(11, 21))
    mine = client.get("/v1/runs", params={"agent_id": "agent-1"}).json()["runs"]
    assert {r["record"]["agent_id"] for r in mine} == {"agent-1"}
    assert len(mine) == 6
    assert client.get("/v1/runs/nope").status_code == 404
    assert client.get("/v1/runs", params={"limit": 0}).status_code == 422


def test_alert_is_stored_before_the_post_returns(client: TestClient) -> None:
    _post(client, [make_record(1, agent="alice", stdout_raw="KEYzebra\n")])
    assert client.get("/v1/alerts").json()["alerts"] == []
    resp = _post(client, [make_record(2, agent="bob", stdout_raw="hi KEYzebra\n")]).json()
    assert resp["alerts"] == 1
    alerts = client.get("/v1/alerts", params={"agent_id": "bob"}).json()["alerts"]
    assert len(alerts) == 1
    assert alerts[0]["agents"] == ["alice", "bob"]
    assert alerts[0]["run_ids"] == ["run-000001", "run-000002"]
    assert alerts[0]["trigger_seq"] == 2
    polled = client.get("/v1/alerts", params={"after_id": alerts[0]["id"]}).json()["alerts"]
    assert polled == []
    agents = {a["agent_id"]: a for a in client.get("/v1/agents").json()["agents"]}
    assert agents["alice"]["alerts"] == 1


def test_restart_keeps_correlation_context(db_url: str) -> None:
    with _client(db_url) as before:
        _post(before, [make_record(1, agent="alice", stdout_raw="KEYowl\n")])
    with _client(db_url) as after:  # a new process: state rebuilt from stored runs
        assert after.get("/healthz").json()["warmed_runs"] == 1
        resp = _post(after, [make_record(2, agent="bob", stdout_raw="KEYowl\n")]).json()
        assert resp["alerts"] == 1


def test_replay_does_not_duplicate_alerts(db_url: str) -> None:
    with _client(db_url) as c:
        _post(c, [make_record(1, agent="a", stdout_raw="KEYx\n"),
                  make_record(2, agent="b", stdout_raw="KEYx\n")])
    with _client(db_url) as c:
        assert len(c.get("/v1/alerts").json()["alerts"]) == 1


def test_token_required_when_configured(db_url: str) -> None:
    with _client(db_url, token="s3cret") as c:
        rec = [make_record(1)]
        assert _post(c, rec).status_code == 401
        assert _post(c, rec, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert _post(c, rec, headers={"Authorization": "s3cret"}).status_code == 401
        ok = _post(c, rec, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert ok.json()["inserted"] == 1


def test_invalid_batches_are_rejected_whole(client: TestClient) -> None:
    assert client.post("/v1/runs", content=b"not json").status_code == 422
    assert client.post("/v1/runs", json={"runs": [{"run_id": "x"}]}).status_code == 422
    long_id = make_record(1, run_id="r" * 200)
    assert _post(client, [make_record(2), long_id]).status_code == 422
    assert client.get("/v1/runs").json()["runs"] == []


def test_health_and_metrics(client: TestClient) -> None:
    _post(client, [make_record(1, agent="a", stdout_raw="KEYq\n"),
                   make_record(2, agent="b", stdout_raw="KEYq\n")])
    _post(client, [make_record(1, agent="a", stdout_raw="KEYq\n")])
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    assert health["head_seq"] == 2
    text = client.get("/metrics").text
    assert "cellblock_runs_ingested_total 2.0" in text
    assert "cellblock_runs_duplicate_total 1.0" in text
    assert 'cellblock_alerts_raised_total{detector="shared-word"} 1.0' in text
    assert "cellblock_ingest_seconds_count 2.0" in text
    assert "cellblock_chain_head_seq 2.0" in text


def test_refuses_non_loopback_without_token(tmp_path: Any) -> None:
    with pytest.raises(PolicyError):
        create_app(ServerSettings(host="0.0.0.0", db_url=str(tmp_path / "x.db")))
    app = create_app(ServerSettings(host="0.0.0.0", token="t", db_url=str(tmp_path / "x.db"),
                                    detection="inline"), engine_factory=SharedWordEngine)
    assert isinstance(app, FastAPI)


@pytest.mark.parametrize(("host", "loop"), [
    ("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
    ("example.org", False),
])
def test_is_loopback(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop
