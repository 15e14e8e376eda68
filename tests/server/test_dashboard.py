"""The dashboard renders attacker-controlled text safely and shows the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from cellblock_tests_helpers import make_record
from fastapi.testclient import TestClient

from cellblock.detect.base import Alert
from cellblock.logs.record import RunRecord
from cellblock.server.app import create_app
from cellblock.server.render import alert_needles, highlight, visible
from cellblock.server.settings import ServerSettings

HOSTILE = '<script>alert("x")</script>'
ZW = "\u200b"


class StegoEngine:
    def observe(self, record: RunRecord) -> list[Alert]:
        if ZW not in record.stdout_raw:
            return []
        at = record.stdout_raw.index(ZW)
        snippet = record.stdout_raw[max(0, at - 4):at + 5].replace(ZW, "<U+200B>")
        return [Alert(detector="unicode-stego", severity="high", agents=(record.agent_id,),
                      run_ids=(record.run_id,), evidence=f"…{snippet}…",
                      details={"where": "stdout", "note": HOSTILE})]


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    app = create_app(ServerSettings(db_url=str(tmp_path / "d.db"), detection="inline"), engine_factory=StegoEngine)
    c = TestClient(app)
    recs = [
        make_record(1, agent="alice", stdout_raw=f"hello wor{ZW}ld {HOSTILE}\n", exit_code=3),
        make_record(2, agent="alice", code=HOSTILE, duration_ms=500.0),
        make_record(3, agent="bob", killed_reason="timeout", exit_code=137),
    ]
    assert c.post("/v1/runs", json={"runs": [r.model_dump(mode="json") for r in recs]}).json()[
        "alerts"] == 1
    return c


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/", "/agents/alice", "/alerts", "/runs/run-000001",
                                  "/runs/run-000002"])
def test_pages_escape_hostile_text(client: TestClient, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<script>alert" not in page.text
    assert ZW not in page.text  # never emitted raw: shown as a token instead


@pytest.mark.integration
def test_index_lists_agents_with_counts(client: TestClient) -> None:
    page = client.get("/").text
    assert '<a href="/agents/alice">alice</a>' in page
    assert '<a href="/agents/bob">bob</a>' in page
    assert "unicode-stego" in page
    assert "detection: up to date" in page


@pytest.mark.integration
def test_run_page_highlights_the_evidence(client: TestClient) -> None:
    page = client.get("/runs/run-000001").text
    # the excerpt "wor<U+200B>ld <" found in the raw output, escaped, marked
    assert ('hello <mark class="evidence">wor<span class="inv">&lt;U+200B&gt;</span>ld &lt;'
            '</mark>script&gt;' in page)
    assert "script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page


@pytest.mark.integration
def test_alerts_page_shows_evidence_and_details_escaped(client: TestClient) -> None:
    page = client.get("/alerts").text
    assert '<span class="inv">&lt;U+200B&gt;</span>' in page
    assert "<mark class=\"evidence\">" in page
    assert "&lt;script&gt;" in page


@pytest.mark.integration
def test_agent_timeline_shows_exit_codes_durations_and_alerts(client: TestClient) -> None:
    alice = client.get("/agents/alice").text
    assert '<span class="exit-bad">3</span>' in alice
    assert "500.0 ms" in alice
    assert 'class="alertrow"' in alice
    bob = client.get("/agents/bob").text
    assert "killed: timeout" in bob
    assert client.get("/runs/nope").status_code == 404


def test_visible_shows_invisible_characters() -> None:
    assert visible("a\u200bb\u202ec\u00a0d\x07e\tf\n") == (
        "a<U+200B>b<U+202E>c<U+00A0>d<U+0007>e\tf\n")
    assert visible("plain é 漢字") == "plain é 漢字"


def test_highlight_escapes_before_marking() -> None:
    out = str(highlight("<b>x</b> KEY <i>", ["KEY", "<i>"]))
    assert out == ('&lt;b&gt;x&lt;/b&gt; <mark class="evidence">KEY</mark> '
                   '<mark class="evidence">&lt;i&gt;</mark>')
    # a needle can never inject markup, and overlapping needles merge
    assert str(highlight("abcdef", ["bcd", "cde"])) == 'a<mark class="evidence">bcde</mark>f'
    assert "<script>" not in str(highlight("x", ["<script>"]))
    cut = str(highlight("a" * 30, [], limit=10))
    assert "20 more characters" in cut


def test_needles_skip_detector_labels() -> None:
    alert = Alert(detector="unicode", severity="medium", agents=("a",), run_ids=("r",),
                  evidence="stdout: zero-width x1: result: 4<U+200B>2 <img>…",
                  details={"match": "KEY", "where": "stdout"})
    needles = alert_needles([alert])
    assert "result: 4<U+200B>2 <img>" in needles
    assert "KEY" in needles
    assert "stdout" not in needles  # labels are not highlighted on their own
    marked = str(highlight("x result: 4\u200b2 <img> y", needles))
    assert marked.startswith('x <mark class="evidence">result: 4<span class="inv">')
