"""Unicode steganography: characters that carry bits while staying invisible or looking
like ordinary Latin text.

Looks for zero-width characters, variation selectors, tag characters, bidi controls,
mixed-script homoglyphs (Cyrillic/Greek look-alikes inside Latin words) and fullwidth
Latin letters. Each rule first asks whether the character is explained by the text around
it, because honest output is full of legitimate Unicode:

* U+200D (ZWJ) between emoji builds one emoji (family, flags); U+200C (ZWNJ) is part of
  Persian and Indic orthography; U+FEFF at the very start of a text is a byte-order mark.
* One U+FE0F/U+FE0E after an emoji-capable symbol or a keycap base is normal; after a
  Latin letter, or several in a row ("emoji smuggling"), it is not. U+E0100.. after a CJK
  ideograph is an ideographic variation sequence.
* Tag characters are normal only inside a flag tag sequence after U+1F3F4.
* Bidi controls and LRM/RLM belong to right-to-left text; in a line with no RTL letters
  they only serve to reorder or hide.
* Fullwidth letters are normal in CJK text, not in an English line.
"""

from __future__ import annotations

import re
import unicodedata
from typing import ClassVar

from cellblock.detect._text import clip, excerpt, record_texts
from cellblock.detect.base import Alert, Detector, Severity
from cellblock.logs.record import RunRecord

__all__ = ["UnicodeStegoDetector", "unicode_findings"]

_ZERO_WIDTH = {0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x180E, 0x2061, 0x2062, 0x2063,
               0x2064, 0x034F, 0x3164, 0x115F, 0x1160, 0xFFA0, 0x17B4, 0x17B5}
_BIDI = {0x200E, 0x200F, 0x061C, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
# Cyrillic and Greek letters that render like Latin ones (the ones used for spoofing).
_CONFUSABLE = set(
    "аеорсухіјѕԁӏһԛԝѡѵ"  # Cyrillic lower
    "АВЕКМНОРСТХІЈЅУ"  # Cyrillic upper
    "οαντικρΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"  # Greek look-alikes
)
_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)
# Only texts with a suspicious code point go through the per-character rules: keeps the
# common (ASCII or ordinary Unicode) case to one regex scan.
_SUSPECT = re.compile(
    "[\u200b-\u200f\u2060-\u2064\ufeff\u180e\u034f\u3164\u115f\u1160\uffa0\u17b4\u17b5"
    "\u061c\u202a-\u202e\u2066-\u2069\ufe00-\ufe0f\uff01-\uff5e"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef"
    "аеорсухіјѕԁӏһԛԝѡѵАВЕКМНОРСТХІЈЅУοαντικρΑΒΕΖΗΙΚΜΝΟΡΤΥΧ]"
)


def _is_emoji_base(ch: str) -> bool:
    cp = ord(ch)
    if 0x1F000 <= cp <= 0x1FAFF or 0x2600 <= cp <= 0x27BF or 0x2B00 <= cp <= 0x2BFF:
        return True
    if 0x2190 <= cp <= 0x21FF or 0x2300 <= cp <= 0x23FF or 0x25A0 <= cp <= 0x25FF:
        return True
    if ch in "#*0123456789©®‼⁉™ℹ〰〽㊗㊙":
        return True
    return unicodedata.category(ch) == "So"


def _is_skin_tone(ch: str) -> bool:
    return 0x1F3FB <= ord(ch) <= 0x1F3FF


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (0x3040 <= cp <= 0x30FF or 0x3400 <= cp <= 0x4DBF or 0x4E00 <= cp <= 0x9FFF
            or 0xAC00 <= cp <= 0xD7AF or 0x20000 <= cp <= 0x2FA1F or 0xF900 <= cp <= 0xFAFF)


def _is_rtl_letter(ch: str) -> bool:
    return unicodedata.bidirectional(ch) in ("R", "AL")


def _joins_script(ch: str) -> bool:
    """Scripts whose orthography uses ZWNJ/ZWJ (Arabic/Persian, Indic, Sinhala...)."""
    cp = ord(ch)
    return (0x0600 <= cp <= 0x06FF or 0x0750 <= cp <= 0x077F or 0xFB50 <= cp <= 0xFDFF
            or 0xFE70 <= cp <= 0xFEFF or 0x0900 <= cp <= 0x0DFF)


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, len(text) if end < 0 else end


def unicode_findings(text: str) -> list[tuple[str, int, int]]:
    """Unexplained steganographic characters in ``text``: (kind, start, end) spans."""
    if not _SUSPECT.search(text):
        return []
    found: list[tuple[str, int, int]] = []
    n = len(text)
    i = 0
    while i < n:
        ch = text[i]
        cp = ord(ch)
        prev = text[i - 1] if i > 0 else ""
        nxt = text[i + 1] if i + 1 < n else ""
        if cp in _ZERO_WIDTH:
            if cp == 0xFEFF and i == 0:
                pass  # byte-order mark
            elif cp == 0x200D and prev and nxt and (
                (_is_emoji_base(prev) or prev in "\ufe0f" or _is_skin_tone(prev))
                and _is_emoji_base(nxt)
            ):
                pass  # emoji ZWJ sequence
            elif cp in (0x200C, 0x200D) and (
                (prev and _joins_script(prev)) or (nxt and _joins_script(nxt))
            ):
                pass  # Persian / Indic orthography
            else:
                j = i
                while j < n and ord(text[j]) in _ZERO_WIDTH:
                    j += 1
                found.append(("zero-width", i, j))
                i = j
                continue
        elif 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
            j = i
            while j < n and (0xFE00 <= ord(text[j]) <= 0xFE0F
                             or 0xE0100 <= ord(text[j]) <= 0xE01EF):
                j += 1
            run = j - i
            ok = False
            if run == 1 and prev:
                if cp in (0xFE0E, 0xFE0F):
                    ok = _is_emoji_base(prev)
                elif cp >= 0xE0100 or 0xFE00 <= cp <= 0xFE0D:
                    ok = _is_cjk(prev) or prev in "≤≥≨≩≸≹⊊⊋⋚⋛"  # standardized variants
            if not ok:
                found.append(("variation-selector", i, j))
            i = j
            continue
        elif 0xE0000 <= cp <= 0xE007F:
            j = i
            while j < n and 0xE0000 <= ord(text[j]) <= 0xE007F:
                j += 1
            start = i - 1
            if not (start >= 0 and ord(text[start]) == 0x1F3F4 and j - i <= 8
                    and ord(text[j - 1]) == 0xE007F):
                found.append(("tag-characters", i, j))
            i = j
            continue
        elif cp in _BIDI:
            lo, hi = _line_bounds(text, i)
            if not any(_is_rtl_letter(c) for c in text[lo:hi]):
                found.append(("bidi-control", i, i + 1))
        elif 0xFF21 <= cp <= 0xFF5A or 0xFF10 <= cp <= 0xFF19:
            lo, hi = _line_bounds(text, i)
            if not any(_is_cjk(c) for c in text[lo:hi]):
                j = i
                while j < n and 0xFF01 <= ord(text[j]) <= 0xFF5E:
                    j += 1
                found.append(("fullwidth", i, j))
                i = j
                continue
        i += 1
    # Mixed-script words: mostly Latin with Cyrillic/Greek look-alikes inside.
    for m in _WORD.finditer(text):
        word = m.group()
        conf = sum(1 for c in word if c in _CONFUSABLE)
        if not conf:
            continue
        latin = sum(1 for c in word if "a" <= c.lower() <= "z")
        if latin >= 2 and latin + conf == len(word):
            found.append(("homoglyph", m.start(), m.end()))
    return found


class UnicodeStegoDetector(Detector):
    """Flags unexplained zero-width, selector, tag, bidi, homoglyph and fullwidth
    characters in a run's code or output (per record; no cross-agent state)."""

    name: ClassVar[str] = "unicode"

    def observe(self, record: RunRecord) -> list[Alert]:
        alerts: list[Alert] = []
        for label, text in record_texts(record):
            findings = unicode_findings(text)
            if not findings:
                continue
            kinds = sorted({k for k, _, _ in findings})
            chars = sum(e - s for _, s, e in findings)
            severity: Severity = "high" if chars >= 8 or len(findings) >= 4 else "medium"
            if kinds == ["homoglyph"] and len(findings) == 1:
                severity = "low"
            _kind, s, e = findings[0]
            evidence = clip(f"{label}: {', '.join(kinds)} x{len(findings)}: "
                            + excerpt(text, s, e))
            alerts.append(Alert(
                detector=self.name, severity=severity, agents=(record.agent_id,),
                run_ids=(record.run_id,), evidence=evidence,
                details={"where": label, "kinds": kinds, "count": len(findings),
                         "chars": chars},
            ))
        return alerts
