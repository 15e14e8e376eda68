"""Small text helpers shared by the detectors: which text of a record to scan, and how to
show a short, visible excerpt of what was found."""

from __future__ import annotations

import unicodedata

from cellblock.logs.record import RunRecord

__all__ = ["EVIDENCE_MAX", "SCAN_HEAD", "SCAN_TAIL", "clip", "code_of", "excerpt",
           "record_texts", "render", "scanned", "stderr_of", "stdout_of"]

EVIDENCE_MAX = 200
"""Alert evidence is at most this many characters: short enough for a table cell."""

SCAN_HEAD = 48 * 1024
SCAN_TAIL = 16 * 1024
"""Detectors scan at most the first 48 KiB and the last 16 KiB of each text. An output
flood (up to the sandbox's output cap) must not stall ingestion. The cost is a blind spot
in the middle of huge outputs, which the record's ``truncated`` flag and size show anyway."""

_NAMED = {"\t": "<TAB>", "\r": "<CR>", "\n": "<LF>"}


def render(text: str) -> str:
    """Make invisible and control characters visible as ``<U+XXXX>`` (tab, CR and LF get
    short names) so that an operator can see what a detector saw."""
    out: list[str] = []
    for ch in text:
        if ch in _NAMED:
            out.append(_NAMED[ch])
            continue
        cat = unicodedata.category(ch)
        hidden = cat in ("Cf", "Cc", "Co", "Cn", "Zl", "Zp") or (cat == "Zs" and ch != " ")
        if hidden or (cat == "Mn" and _is_selector(ch)):
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    return "".join(out)


def _is_selector(ch: str) -> bool:
    cp = ord(ch)
    return 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF or cp == 0x034F


def clip(text: str, limit: int = EVIDENCE_MAX) -> str:
    """Shorten ``text`` to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(text: str, start: int, end: int, context: int = 30, limit: int = 120) -> str:
    """A rendered window of ``text`` around ``[start, end)``, at most ``limit`` characters."""
    lo = max(0, start - context)
    hi = min(len(text), end + context)
    body = render(text[lo:hi])
    prefix = "…" if lo > 0 else ""
    suffix = "…" if hi < len(text) else ""
    return clip(prefix + body + suffix, limit)


def scanned(text: str) -> str:
    """``text``, or its head and tail when it is longer than the scan limit."""
    if len(text) <= SCAN_HEAD + SCAN_TAIL:
        return text
    return text[:SCAN_HEAD] + "\n" + text[-SCAN_TAIL:]


def code_of(record: RunRecord) -> str:
    """The run's code, within the scan limit."""
    return scanned(record.code)


def stdout_of(record: RunRecord) -> str:
    """What the program wrote to stdout (raw when the record has it, else the sanitised
    view the model saw), within the scan limit."""
    return scanned(record.stdout_raw or record.stdout)


def stderr_of(record: RunRecord) -> str:
    """Like :func:`stdout_of`, for stderr."""
    return scanned(record.stderr_raw or record.stderr)


def record_texts(record: RunRecord) -> list[tuple[str, str]]:
    """The texts of a record worth scanning, labelled: code, then what the program wrote
    (raw when the record has it, else the sanitised view)."""
    texts = [("code", code_of(record))]
    stdout = stdout_of(record)
    stderr = stderr_of(record)
    if stdout:
        texts.append(("stdout", stdout))
    if stderr:
        texts.append(("stderr", stderr))
    return [(label, text) for label, text in texts if text]
