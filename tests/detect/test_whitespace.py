from __future__ import annotations

import pytest

from cellblock.detect.whitespace import WhitespaceStegoDetector, whitespace_findings

from .conftest import rec

LINES = ["Revenue grew in most regions.", "Churn fell after onboarding.",
         "Missing values were imputed.", "The model converged early.",
         "Outliers were removed.", "Delays hit the north.", "Sessions got longer.",
         "Complaints mention billing."]
BITS = "10110010"


def _join(suffixes: list[str], endings: list[str] | None = None) -> str:
    ends = endings or ["\n"] * len(LINES)
    return "".join(ln + s + e for ln, s, e in zip(LINES, suffixes, ends, strict=True))


POSITIVE = {
    "trailing spaces as bits": _join([" " if b == "1" else "" for b in BITS]),
    "space or tab": _join([" " if b == "1" else "\t" for b in BITS]),
    "crlf as bits": _join([""] * 8, ["\r\n" if b == "1" else "\n" for b in BITS]),
    "indent mix": "".join((" \t" if b == "1" else "\t ") + ln + "\n"
                          for ln, b in zip(LINES, BITS, strict=True)),
    "double spaces": ("the  cat sat on  the mat today\nwe went  home at once and slept\n"
                      "a dog  ran far away from here\n"),
}

NEGATIVE = {
    "plain": _join([""] * 8),
    "same trailing space everywhere": _join([" "] * 8),
    "left-justified last column": "".join(f"{v:>8.2f}  {name:<10}\n" for v, name in
                                          [(1.5, "North"), (22.25, "South"), (3.0, "Central"),
                                           (4.75, "East")]),
    "tsv with empty last field": "id\tname\tamount\n1\tJosé\t\n2\tZoë\t3.5\n3\tAna\t\n4\tBo\t\n",
    "windows csv printed verbatim": ("== a.csv ==\nid,x\r\n1,2\r\n3,4\r\n(2 rows)\n"
                                     "== b.csv ==\nid,x\r\n5,6\r\n7,8\r\n(2 rows)\n"),
    "aligned table": "name     value\nalpha      1.0\nbeta      22.5\n",
    "two spaces after full stop": "It rained.  Then it stopped.  We left.\n" * 3,
    "markdown hard breaks": ("**Summary**  \nRevenue grew.  \nChurn fell.\n\n"
                             "Next steps:  \n- clean data\n- retrain\n"),
    "progress bar": "\rprocessing:  10%\rprocessing:  50%\rprocessing: 100%\ndone\n",
}


@pytest.mark.parametrize("text", POSITIVE.values(), ids=POSITIVE.keys())
def test_positive(text: str) -> None:
    assert whitespace_findings(text)


@pytest.mark.parametrize("text", NEGATIVE.values(), ids=NEGATIVE.keys())
def test_negative(text: str) -> None:
    assert whitespace_findings(text) == []


def test_alert_shows_whitespace_visibly() -> None:
    (alert,) = WhitespaceStegoDetector().observe(rec(stdout=POSITIVE["space or tab"]))
    assert "SP,TAB" in alert.evidence and len(alert.evidence) <= 200


def test_trailing_spaces_in_code_are_not_reported() -> None:
    code = "x = 1 \ny = 2\nz = 3  \nprint(x)\t\nw = 4 \n"
    assert WhitespaceStegoDetector().observe(rec(code=code)) == []
