"""Safe rendering of attacker-controlled text for the dashboard.

Everything a run record or an alert holds was written, directly or indirectly, by the
sandboxed program, so it is treated as hostile: it is HTML-escaped *before* any markup
is added, invisible and control characters are shown as ``<U+200B>``-style tokens (an
operator must see the zero-width characters a covert channel hides in), and highlights
are added around escaped segments by our own code, never by string substitution on the
input.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from markupsafe import Markup, escape

from cellblock.detect.base import Alert

__all__ = ["alert_needles", "highlight", "visible"]

_NEEDLE_KEYS = ("match", "token", "tokens", "payload", "needle", "value", "shared")
_TOKEN = re.compile(r"&lt;U\+[0-9A-F]{4,6}&gt;")
_MIN_NEEDLE = 3
_MIN_LABELLED = 6


def visible(text: str) -> str:
    """``text`` with every invisible or control character (bar newline and tab) replaced
    by a ``<U+XXXX>`` token. Plain text: escape it before putting it in HTML."""
    out: list[str] = []
    for ch in text:
        if ch in "\n\t":
            out.append(ch)
            continue
        cat = unicodedata.category(ch)
        cp = ord(ch)
        if cat in ("Cf", "Cc", "Co", "Cn", "Zl", "Zp", "Cs") or (cat == "Zs" and ch != " ") \
                or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF or cp == 0x034F:
            out.append(f"<U+{cp:04X}>")
        else:
            out.append(ch)
    return "".join(out)


def alert_needles(alerts: Iterable[Alert]) -> list[str]:
    """Strings worth highlighting for these alerts: the evidence excerpt (without the
    ellipses detectors add) and any matched token named in the details."""
    needles: list[str] = []
    for alert in alerts:
        for piece in (p.strip() for p in alert.evidence.split("…")):
            if len(piece) >= _MIN_NEEDLE:
                needles.append(piece)
            # Detectors prefix the excerpt with labels ("stdout: zero-width x1: …"):
            # the text after each ": " is also a candidate, if long enough to be specific.
            at = piece.find(": ")
            while at != -1:
                tail = piece[at + 2:].strip()
                if len(tail) >= _MIN_LABELLED:
                    needles.append(tail)
                at = piece.find(": ", at + 2)
        for key in _NEEDLE_KEYS:
            value = alert.details.get(key)
            values = value if isinstance(value, list | tuple) else [value]
            needles.extend(v for v in values if isinstance(v, str) and len(v) >= _MIN_NEEDLE)
    return list(dict.fromkeys(needles))


def highlight(text: str, needles: Sequence[str] = (), limit: int = 50_000) -> Markup:
    """Escaped, visible ``text`` with every occurrence of a needle wrapped in ``<mark>``.

    Needles are matched against the visible form (so an evidence excerpt that shows
    ``<U+200B>`` matches the zero-width space in the raw text). Texts longer than
    ``limit`` are cut, with a note.
    """
    cut = len(text) > limit
    shown = visible(text[:limit])
    spans: list[tuple[int, int]] = []
    for needle in needles:
        probe = visible(needle)
        if not probe:
            continue
        start = shown.find(probe)
        while start != -1 and len(spans) < 1000:
            spans.append((start, start + len(probe)))
            start = shown.find(probe, start + len(probe))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    out: list[str] = []
    pos = 0
    for lo, hi in merged:
        out.append(_segment(shown[pos:lo]))
        out.append('<mark class="evidence">' + _segment(shown[lo:hi]) + "</mark>")
        pos = hi
    out.append(_segment(shown[pos:]))
    if cut:
        out.append(f'<span class="cut">[… {len(text) - limit} more characters not shown]</span>')
    return Markup("".join(out))  # noqa: S704 - every piece was escaped by _segment


def _segment(plain: str) -> str:
    escaped = str(escape(plain))
    return _TOKEN.sub(lambda m: f'<span class="inv">{m.group(0)}</span>', escaped)
