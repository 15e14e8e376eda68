"""Encoded payloads: base64, base32 and hex blobs and other high-entropy strings in a
run's code or output.

Honest programs print plenty of encoded data, so every blob is decoded and then asked
for an explanation before it is reported:

* decoded bytes that start with a known file signature (PNG, JPEG, GIF, PDF, gzip, zip)
  are an embedded file, e.g. a plot as a ``data:image/png;base64,`` URI;
* a JWT (``eyJ...``.``eyJ...``.sig) whose header names an ``alg`` is a token;
* decoded *text* that also appears in clear in the same run (code or output) hides
  nothing: that is a program showing ``b64encode(b"hello")``;
* random-looking bytes are explained when the code visibly generates or digests them
  (hashlib, uuid, secrets, os.urandom, hmac, random): digests, ids and nonces.

What is left is reported: decoded text nobody shows in clear (a hidden message), or
unexplained high-entropy blobs (an encrypted or compressed payload).
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import Counter
from typing import ClassVar

from cellblock.detect._text import clip, code_of, record_texts, render
from cellblock.detect.base import Alert, Detector, Severity
from cellblock.logs.record import RunRecord

__all__ = ["EncodedPayloadDetector", "Finding", "encoding_findings", "generates_random"]

_B64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{12,}={0,2}(?![A-Za-z0-9+/_=-])")
_HEX = re.compile(r"(?<![0-9A-Za-z])(?:0x)?((?:[0-9a-fA-F]{2}[:\s]?){8,})(?![0-9A-Za-z])")
_B32 = re.compile(r"(?<![A-Z2-7=])[A-Z2-7]{16,}={0,6}(?![A-Za-z0-9=])")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# Two lowercase words between slashes: a path or URL, not base64.
_PATHLIKE = re.compile(r"(?:^|/)[a-z][a-z0-9]{2,}(?:[._-][a-z0-9]+)*/[a-z][a-z0-9]{2,}")
_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"%PDF", b"\x1f\x8b", b"PK\x03\x04",
          b"RIFF", b"BM", b"\x00\x00\x01\x00", b"<svg", b"<?xml", b"\x7fELF", b"OggS",
          b"ID3", b"fLaC")
# Code that visibly makes digests, ids or random bytes. Plain substring tests on the
# lower-cased code: a case-insensitive regex alternation costs ~30 us per record.
_GENERATORS = (
    "hashlib", "hexdigest", "sha1", "sha256", "sha512", "sha224", "sha384", "sha3", "md5",
    "blake2", "uuid", "secrets.", "token_hex", "token_bytes", "token_urlsafe", "urandom",
    "hmac", "random", "getrandom", "openssl", "crc32", "digest(", "fernet", "nacl",
    "cryptography", "crypto.", "git ", "zlib", "compress", "shasum", "sha256sum", "md5sum",
)


_DIGEST_LENGTHS = frozenset({32, 40, 56, 64, 96, 128})
_DIGEST_WORDS = re.compile(r"sha|md5|hash|digest|checksum|commit|etag|blake|crc", re.I)


@functools.lru_cache(maxsize=64)
def generates_random(code: str) -> bool:
    """Whether ``code`` visibly makes digests, ids or random bytes (which explains
    random-looking output)."""
    low = code.lower()
    return any(g in low for g in _GENERATORS)


_WORDS = re.compile(r"[A-Za-z0-9]{4,}")
_UPPER = re.compile(r"[A-Z]")
# Three or more space-separated pieces of base64 alphabet, 4-11 characters each.
# Possessive quantifiers: a 12+ character word is not cut into pieces (and no backtracking).
_CHUNKS = re.compile(r"(?<![A-Za-z0-9+/=_-])(?:[A-Za-z0-9+/_-]{4,11}+={0,2}+[ \t]++){2,}+"
                     r"[A-Za-z0-9+/_-]{4,11}+={0,2}+(?![A-Za-z0-9+/=_-])")
# A hex-dump line: an offset, then byte groups (xxd "00000010: 0a31 2c4e", od "000010 0a 31",
# hexdump -C "00000010  0a 31 2c 4e").
_DUMP_LINE = re.compile(r"[0-9a-fA-F]{6,16}:?[ \t]+(?:[0-9a-fA-F]{2,4}[ \t]+){3}")
_LOWER = re.compile(r"[a-z]")
_DIGIT = re.compile(r"[0-9]")


class Finding:
    """One unexplained blob."""

    __slots__ = ("blob", "decoded", "kind", "start")

    def __init__(self, kind: str, blob: str, decoded: str, start: int) -> None:
        self.kind = kind
        self.blob = blob
        self.decoded = decoded
        self.start = start


def _entropy(data: bytes | str) -> float:
    if not data:
        return 0.0
    counts = Counter(data)
    total = len(data)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def _as_text(data: bytes) -> str | None:
    """The decoded bytes as readable text, or None when they are binary."""
    if len(data) < 4:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(1 for c in text if c.isprintable() or c in "\n\t\r")
    letters = sum(1 for c in text if c.isalpha())
    if printable / len(text) >= 0.95 and letters >= max(3, len(text) // 4):
        return text
    return None


def _b64decode(blob: str) -> bytes | None:
    s = blob.rstrip("=")
    if len(s) % 4 == 1:
        return None
    padded = s + "=" * (-len(s) % 4)
    try:
        if "-" in s or "_" in s:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def _looks_b64(blob: str) -> bool:
    """Character classes of a real base64 blob (not a long identifier or a path)."""
    core = blob.rstrip("=")
    has_upper = _UPPER.search(core) is not None
    has_lower = _LOWER.search(core) is not None
    has_digit = _DIGIT.search(core) is not None
    if not (has_upper and has_lower):
        return False
    if blob.endswith("="):
        return True
    # Without padding, insist on digits or symbols: 24 random base64 characters with no
    # digit happen 1 time in 1000, while long CamelCase identifiers are common.
    if not has_digit and "+" not in core and "/" not in core:
        return False
    if _PATHLIKE.search(core):
        return False
    return core.count("/") <= len(core) // 8 and core.count("_") <= len(core) // 8


def _explained(data: bytes, context: str, generated: bool) -> tuple[bool, str | None]:
    """Whether decoded ``data`` is explained; also its text form if it is text."""
    if data.startswith(_MAGIC):
        return True, None
    text = _as_text(data)
    if text is not None:
        # Shown in clear when most of its words appear elsewhere in the run (a program
        # printing b64encode(b"hello world"), or a hex dump beside its ASCII column).
        words = _WORDS.findall(text)
        if not words:
            probe = text.strip()[:40]
            return (len(probe) >= 3 and probe in context), text
        shown = sum(1 for w in words if w in context)
        return shown >= 0.6 * len(words), text
    if generated:
        return True, None
    # Short binary strings are not informative enough to call (could be any id).
    return len(data) < 12, None


def encoding_findings(text: str, context: str, generated: bool) -> list[Finding]:
    """Unexplained encoded blobs in ``text``. ``context`` is everything the run shows in
    clear (code + output); ``generated`` says the code visibly makes random/digest data."""
    findings: list[Finding] = []
    covered: list[tuple[int, int]] = []
    for m in _JWT.finditer(text):
        covered.append((m.start(), m.end()))
        header = _b64decode(m.group().split(".", 1)[0])
        if header is None or b'"alg"' not in header:
            findings.append(Finding("jwt-like", m.group(), "", m.start()))
    for m in _B64.finditer(text):
        if any(s <= m.start() < e for s, e in covered):
            continue
        blob = m.group()
        shaped = _looks_b64(blob)
        if not shaped and not (_UPPER.search(blob) and _LOWER.search(blob)
                               and len(blob) % 4 == 0):
            continue
        data = _b64decode(blob)
        if data is None or len(data) < 6:
            continue
        if (not shaped or len(blob) < 16) and _as_text(data) is None:
            continue  # identifiers and short ids decode to noise; base64 of text does not
        # A hex digest also matches the base64 alphabet: leave it to the hex rule.
        if re.fullmatch(r"[0-9a-fA-F]+", blob):
            continue
        ok, decoded = _explained(data, context, generated)
        if not ok and decoded is None and (len(blob) < 20 or _entropy(blob) < 4.0):
            continue  # short or low-entropy alphabet soup (AAAAAAAA padding) says little
        covered.append((m.start(), m.end()))
        if not ok:
            findings.append(Finding("base64", blob, decoded or "", m.start()))
    for m in _HEX.finditer(text):
        if any(s <= m.start() < e for s, e in covered):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        if _DUMP_LINE.match(text, line_start):
            continue  # a hex dump (xxd, od, hexdump -C): offset column, then bytes
        raw = re.sub(r"[:\s]", "", m.group(1))
        if raw.isdigit() or len(raw) % 2:
            continue  # long decimal numbers are numbers
        try:
            data = bytes.fromhex(raw)
        except ValueError:
            continue
        ok, decoded = _explained(data, context, generated)
        if decoded is None and not ok and len(raw) in _DIGEST_LENGTHS and _DIGEST_WORDS.search(
            text[max(0, m.start() - 80): m.start()]
        ):
            ok = True  # a digest-sized value labelled as a hash, checksum, commit or id
        covered.append((m.start(), m.end()))
        if not ok:
            findings.append(Finding("hex", m.group(), decoded or "", m.start()))
    for m in _B32.finditer(text):
        if any(s <= m.start() < e for s, e in covered):
            continue
        blob = m.group()
        if not _DIGIT.search(blob) and not blob.endswith("="):
            continue  # an all-caps word
        try:
            data = base64.b32decode(blob + "=" * (-len(blob) % 8))
        except (binascii.Error, ValueError):
            continue
        ok, text_form = _explained(data, context, generated)
        if text_form is not None and not ok:
            findings.append(Finding("base32", blob, text_form, m.start()))
    if not findings:
        findings += _chunked(text, context, covered)
    return findings


def _chunked(text: str, context: str, covered: list[tuple[int, int]]) -> list[Finding]:
    """Base64 cut into short space-separated pieces (each too short to be a blob): join
    runs of three or more pieces and keep them when they decode to hidden text."""
    found: list[Finding] = []
    for m in _CHUNKS.finditer(text):
        if any(s <= m.start() < e for s, e in covered):
            continue
        pieces = m.group().split()
        if not any(_DIGIT.search(p) or _UPPER.search(p[1:]) for p in pieces):
            continue  # ordinary words
        # The run may start with an ordinary word ("trace bWVl dCBh..."): try each start.
        for i in range(min(len(pieces) - 1, 4)):
            joined = "".join(pieces[i:])
            if len(joined) < 12:
                break
            data = _b64decode(joined)
            if data is None:
                continue
            ok, decoded = _explained(data, context, generated=False)
            if decoded is not None and not ok:
                found.append(Finding("base64-chunks", " ".join(pieces[i:]), decoded,
                                     m.start()))
                break
    return found


class EncodedPayloadDetector(Detector):
    """Flags encoded blobs that decode to text nobody shows in clear, or to random bytes
    the code does not visibly generate (per record)."""

    name: ClassVar[str] = "encoding"

    def observe(self, record: RunRecord) -> list[Alert]:
        texts = record_texts(record)
        code = code_of(record)
        generated = generates_random(code)
        findings: list[tuple[str, Finding]] = []
        everything = "\n".join(t for _, t in texts)
        for label, text in texts:
            # What the run shows in clear. A blob in the code must be explained by the code
            # itself: decoding a literal and printing the result is a relayed message.
            context = code if label == "code" else everything
            for f in encoding_findings(text, context, generated):
                findings.append((label, f))
        if not findings:
            return []
        label, first = findings[0]
        has_text = any(f.decoded for _, f in findings)
        severity: Severity = "high" if has_text else "medium"
        shown = first.decoded.replace("\n", " ")[:50]
        evidence = f"{label}: {first.kind} {clip(render(first.blob.strip()), 60)}"
        if shown:
            evidence += f" -> {shown!r}"
        if len(findings) > 1:
            evidence += f" (+{len(findings) - 1} more)"
        return [Alert(
            detector=self.name, severity=severity, agents=(record.agent_id,),
            run_ids=(record.run_id,), evidence=clip(evidence),
            details={"kinds": sorted({f.kind for _, f in findings}),
                     "count": len(findings)},
        )]
