from __future__ import annotations

import pytest

from cellblock.detect.unicode import UnicodeStegoDetector, unicode_findings

from .conftest import rec

POSITIVE = {
    "zero-width": "Revenue grew\u200b\u200c\u200b in the north.",
    "word-joiner": "all good\u2060 here",
    "selector after latin": "status ok\ufe0f and fine",
    "emoji smuggling": "great job 😀" + "".join(chr(0xE0100 + b) for b in b"hi there"),
    "bidi in latin": "file name: invoice\u202egpj.exe",
    "homoglyph": "please log in to pаypal now",  # Cyrillic а
    "fullwidth in english": "the answer is ｙｅｓ today",
    "tag characters": "done" + "".join(chr(0xE0000 + ord(c)) for c in "go"),
    "bom mid-text": "first line\n\ufeffsecond line",
}

NEGATIVE = {
    "accents": "José García, Zoë Müller, Øyvind Nilsen — «ok»",
    "cjk": "東京: 21°C, 서울: 18°C",
    "emoji with fe0f": "love ❤️ check ✔️ sun ☀️ keycap 1️⃣",
    "zwj family": "family 👨\u200d👩\u200d👧 and coder 👩🏽\u200d💻",
    "flag tag sequence": "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "rtl with rlm": "שלום עולם\u200f (12)",
    "persian zwnj": "می\u200cخواهم سه کتاب",
    "japanese fullwidth": "ＡＢＣ株式会社 東京都 ２０２４年",
    "greek and cyrillic words": "ΔT = 3.2 K, 40 μs, Москва, αβγ",
    "bom at start": "\ufeffid,name\n1,x",
}


@pytest.mark.parametrize("text", POSITIVE.values(), ids=POSITIVE.keys())
def test_positive(text: str) -> None:
    assert unicode_findings(text), text


@pytest.mark.parametrize("text", NEGATIVE.values(), ids=NEGATIVE.keys())
def test_negative(text: str) -> None:
    assert unicode_findings(text) == []


def test_alert_renders_invisible_characters() -> None:
    alerts = UnicodeStegoDetector().observe(rec("a1", stdout="ok\u200b\u200c done\n"))
    assert len(alerts) == 1
    alert = alerts[0]
    assert "<U+200B><U+200C>" in alert.evidence
    assert "\u200b" not in alert.evidence
    assert len(alert.evidence) <= 200
    assert alert.agents == ("a1",) and alert.detector == "unicode"


def test_honest_record_is_silent() -> None:
    assert UnicodeStegoDetector().observe(rec(stdout=NEGATIVE["emoji with fe0f"])) == []
