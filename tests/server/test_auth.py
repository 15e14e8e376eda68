"""Access control of the log service: with a token, every endpoint but /healthz needs it
(Bearer, or Basic with the token as password); a read-only token reads but never writes;
without a token everything stays open."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cellblock_tests_helpers import LiveServer, make_record
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.logs.transport import RemoteRecorder
from cellblock.server.app import Credentials, create_app
from cellblock.server.settings import ServerSettings

TOKEN = "w-Tok3n:with/odd+chars="
READ = "r-tok3n"

API_ROUTES = ["/v1/runs", "/v1/runs/run-000001", "/v1/alerts", "/v1/agents", "/metrics",
              "/openapi.json"]
PAGES = ["/", "/agents/alice", "/alerts", "/runs/run-000001", "/docs"]
READ_ROUTES = API_ROUTES + PAGES

integration = pytest.mark.integration


class KeyEngine:
    """One alert for every run that prints a word starting with KEY."""

    def observe(self, record: RunRecord) -> list[Alert]:
        if "KEY" not in record.stdout_raw:
            return []
        return [Alert(detector="key", severity="high", agents=(record.agent_id,),
                      run_ids=(record.run_id,), evidence="KEY")]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, password: str) -> dict[str, str]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def _body(records: list[RunRecord]) -> dict[str, Any]:
    return {"runs": [r.model_dump(mode="json") for r in records]}


def _settings(tmp_path: Path, **kw: Any) -> ServerSettings:
    return ServerSettings(db_url=str(tmp_path / "auth.db"), detection="inline", **kw)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(_settings(tmp_path, token=TOKEN, read_token=READ),
                     engine_factory=KeyEngine)
    with TestClient(app) as client:
        resp = client.post("/v1/runs", headers=bearer(TOKEN), json=_body([
            make_record(1, agent="alice", stdout_raw="KEYx\n"), make_record(2, agent="bob")]))
        assert resp.status_code == 200
        assert resp.json()["alerts"] == 1
        yield client


def _assert_refused(resp: Any, path: str, *secrets: str) -> None:
    """A 401 with the challenge that fits the path, echoing none of the secrets."""
    assert resp.status_code == 401
    challenge = resp.headers["www-authenticate"]
    if path in API_ROUTES or path.startswith("/v1/"):
        assert challenge == "Bearer"
        assert resp.json() == {"detail": "missing or wrong token"}
    else:
        assert challenge.startswith('Basic realm="cellblock"')
        assert resp.headers["content-type"].startswith("text/html")
    for secret in (TOKEN, READ, *(s for s in secrets if len(s) > 8)):
        assert secret not in resp.text
        assert all(secret not in value for value in resp.headers.values())


@integration
@pytest.mark.parametrize("path", READ_ROUTES)
def test_every_read_route_refuses_a_request_without_credentials(
        secured: TestClient, path: str) -> None:
    _assert_refused(secured.get(path), path)


@integration
@pytest.mark.parametrize("path", READ_ROUTES)
@pytest.mark.parametrize("headers", [
    bearer(TOKEN), basic("operator", TOKEN), basic("", TOKEN), bearer(READ),
    basic("prometheus", READ), {"Authorization": f"bearer {TOKEN}"},
    {"Authorization": "BASIC " + base64.b64encode(f"x:{READ}".encode()).decode()},
], ids=["bearer", "basic", "basic-no-user", "read-bearer", "read-basic", "lower-scheme",
        "upper-scheme"])
def test_every_read_route_accepts_bearer_and_basic(
        secured: TestClient, path: str, headers: dict[str, str]) -> None:
    resp = secured.get(path, headers=headers)
    assert resp.status_code == 200, resp.text
    if path == "/runs/run-000001":
        assert "stdout (as the model saw it)" in resp.text  # the page, not a sign-in page


@integration
@pytest.mark.parametrize("path", ["/v1/runs", "/metrics", "/", "/runs/run-000001"])
@pytest.mark.parametrize("header", [
    f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer wrong", f"Bearer  {READ}z",
    TOKEN, f"Token {TOKEN}", f"{TOKEN} Bearer", "Bearer", "Bearer ",
    "Basic " + base64.b64encode(f"{TOKEN}:".encode()).decode(),  # token as the user name
    "Basic " + base64.b64encode(TOKEN.encode()).decode(),  # no colon
    "Basic " + base64.b64encode(b"u:wrong").decode(),
    f"Basic {TOKEN}",  # not base64
    "Basic !!!!", "Basic \u00e9t\u00e9",
], ids=lambda h: repr(h)[:24])
def test_wrong_credentials_are_refused_without_echo(
        secured: TestClient, path: str, header: str) -> None:
    resp = secured.get(path, headers={"Authorization": header.encode()})  # raw UTF-8
    _assert_refused(resp, path, header, header.partition(" ")[2].strip())


@integration
def test_unknown_paths_and_other_methods_need_credentials_too(secured: TestClient) -> None:
    _assert_refused(secured.get("/no/such/page"), "/no/such/page")
    _assert_refused(secured.get("/v1/nothing"), "/v1/nothing")
    assert secured.get("/no/such/page", headers=bearer(TOKEN)).status_code == 404
    _assert_refused(secured.delete("/v1/runs"), "/v1/runs")
    assert secured.delete("/v1/runs", headers=bearer(READ)).status_code == 403
    assert secured.delete("/v1/runs", headers=bearer(TOKEN)).status_code == 405
    with pytest.raises(WebSocketDisconnect) as closed, secured.websocket_connect("/ws"):
        pass
    assert closed.value.code == 1008


@integration
def test_healthz_is_open_and_shows_only_counts_and_seqs(secured: TestClient) -> None:
    for headers in ({}, bearer("wrong"), basic("u", "wrong")):
        resp = secured.get("/healthz", headers=headers)
        assert resp.status_code == 200
        body = resp.json()
        assert body == {"status": "ok", "head_seq": 2, "detected_seq": 2, "warmed_runs": 0}
    for headers in (bearer(TOKEN), basic("u", TOKEN), bearer(READ)):
        full = secured.get("/healthz", headers=headers).json()
        assert len(full["head_hash"]) == 64
        assert full["detection"] == "inline"
        assert full["head_seq"] == 2


@integration
def test_post_requires_the_write_token(secured: TestClient) -> None:
    body = _body([make_record(3)])
    for headers in ({}, bearer("wrong"), basic("u", "wrong"), {"Authorization": TOKEN}):
        resp = secured.post("/v1/runs", json=body, headers=headers)
        _assert_refused(resp, "/v1/runs")
    for headers in (bearer(READ), basic("u", READ)):
        resp = secured.post("/v1/runs", json=body, headers=headers)
        assert resp.status_code == 403
        assert resp.json() == {"detail": "the read-only token cannot write"}
        assert READ not in resp.text
    assert secured.get("/v1/runs", headers=bearer(READ)).json()["next_after_seq"] == 2
    ok = secured.post("/v1/runs", json=body, headers=basic("ci", TOKEN))
    assert ok.status_code == 200
    assert ok.json()["inserted"] == 1
    again = secured.post("/v1/runs", json=_body([make_record(4)]), headers=bearer(TOKEN))
    assert again.json()["head_seq"] == 4


@integration
def test_refused_before_the_body_is_read(secured: TestClient) -> None:
    resp = secured.post("/v1/runs", content=b"x" * 4096,
                        headers={"Content-Length": str(10**12)})
    _assert_refused(resp, "/v1/runs")


@integration
def test_without_a_token_everything_stays_open(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path), engine_factory=KeyEngine)
    with TestClient(app) as client:
        ok = client.post("/v1/runs", json=_body([make_record(1, agent="alice",
                                                             stdout_raw="KEYx\n")]))
        assert ok.status_code == 200
        for path in READ_ROUTES:
            assert client.get(path).status_code == 200, path
        health = client.get("/healthz").json()
        assert len(health["head_hash"]) == 64
        assert health["detection"] == "inline"


@integration
def test_over_real_http_browser_prometheus_and_recorder(tmp_path: Path) -> None:
    """A real uvicorn on loopback: a browser's Basic auth after the challenge, a Prometheus
    bearer scrape, and RemoteRecorder with the read token (refused, kept spooled) and the
    write token (delivered)."""
    app = create_app(_settings(tmp_path, token=TOKEN, read_token=READ),
                     engine_factory=KeyEngine)
    with LiveServer(app) as srv:
        page = requests.get(srv.url + "/", timeout=10)
        assert page.status_code == 401
        assert page.headers["WWW-Authenticate"].startswith('Basic realm="cellblock"')
        assert requests.get(srv.url + "/", auth=("me", TOKEN), timeout=10).status_code == 200
        scrape = requests.get(srv.url + "/metrics", headers=bearer(READ), timeout=10)
        assert "cellblock_chain_head_seq" in scrape.text
        assert requests.get(srv.url + "/healthz", timeout=10).json()["head_seq"] == 0

        reader = RemoteRecorder(srv.url, READ, spool_dir=tmp_path / "spool",
                                close_timeout_s=0)
        reader.record(make_record(1))
        reader.close()
        assert reader.delivered == 0
        assert reader.spool.pending_count() == 1
        writer = RemoteRecorder(srv.url, TOKEN, spool_dir=tmp_path / "spool")
        writer.close()  # delivers what the reader could not
        assert writer.delivered == 1
        runs = requests.get(srv.url + "/v1/runs", auth=("x", READ), timeout=10).json()
        assert [r["record"]["run_id"] for r in runs["runs"]] == ["run-000001"]


@pytest.mark.parametrize(("header", "granted"), [
    (None, None), ("", None), (f"Bearer {TOKEN}", "write"), (f"Bearer {READ}", "read"),
    (f"  bEaReR   {TOKEN}  ", "write"), (f"Bearer {TOKEN} ", "write"),
    ("Basic " + base64.b64encode(f"a:b:{TOKEN}".encode()).decode(), None),
    ("Basic " + base64.b64encode(f"a:{TOKEN}".encode()).decode(), "write"),
    ("Basic " + base64.b64encode(f"a:{READ}".encode()).decode(), "read"),
    ("Basic " + base64.b64encode(f"a:{READ}".encode()).decode()[:-1], None),
    (f"Digest {TOKEN}", None), (f"Bearer {TOKEN}{READ}", None),
])
def test_credentials_grant(header: str | None, granted: str | None) -> None:
    assert Credentials(TOKEN, READ).grant(header) == granted


def test_credentials_without_a_token_grant_everything() -> None:
    open_ = Credentials(None)
    assert not open_.required
    assert open_.grant(None) == "write"
    assert open_.grant("Bearer anything") == "write"
    only_write = Credentials(TOKEN)
    assert only_write.grant(f"Bearer {TOKEN}") == "write"
    assert only_write.grant(f"Bearer {READ}") is None


def test_non_ascii_token_matches_its_utf8_bytes() -> None:
    creds = Credentials("s\u00e9same-\u6f22")
    raw = "s\u00e9same-\u6f22".encode()
    assert creds.grant("Bearer " + raw.decode("latin-1")) == "write"  # as Starlette sees it
    pair = base64.b64encode(b"u:" + raw).decode()
    assert creds.grant(f"Basic {pair}") == "write"


def test_settings_tokens() -> None:
    with pytest.raises(ValidationError, match="read_token requires token") as err:
        ServerSettings(read_token=READ)
    assert READ not in str(err.value)
    with pytest.raises(ValidationError, match="must differ") as err:
        ServerSettings(token=TOKEN, read_token=TOKEN)
    assert TOKEN not in str(err.value)
    assert ServerSettings(token="", read_token="").token is None
    shown = repr(ServerSettings(token=TOKEN, read_token=READ))
    assert TOKEN not in shown
    assert READ not in shown


def test_a_read_token_alone_is_refused_even_beyond_loopback() -> None:
    with pytest.raises(ValidationError, match="read_token requires token"):
        ServerSettings(host="0.0.0.0", read_token=READ)
