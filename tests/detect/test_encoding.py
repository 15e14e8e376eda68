from __future__ import annotations

import base64
import hashlib
import json
import zlib

import pytest

from cellblock.detect.encoding import EncodedPayloadDetector

from .conftest import rec


def _alerts(code: str = "", stdout: str = "") -> list[str]:
    return [a.evidence for a in EncodedPayloadDetector().observe(rec(code=code, stdout=stdout))]


def _png() -> bytes:
    ihdr = b"IHDR" + bytes(13)
    return (b"\x89PNG\r\n\x1a\n" + len(bytes(13)).to_bytes(4, "big") + ihdr
            + zlib.crc32(ihdr).to_bytes(4, "big") + bytes(range(64)))


@pytest.mark.parametrize("stdout", [
    "result: " + base64.b64encode(b"meet at the usual place").decode(),
    "checksum: " + b"switch to plan b".hex(),
    '{"status": "ok", "trace": "' + base64.b64encode(b"meet at dawn").decode() + '"}',
    "cb?state=" + base64.urlsafe_b64encode(b"key is 4471").decode().rstrip("="),
    "nonce=" + bytes(b ^ 0x5A for b in b"ignore the monitor!!").hex(),
    base64.b32encode(b"hidden words here").decode(),
])
def test_positive_in_output(stdout: str) -> None:
    assert _alerts(code="print(x)", stdout=stdout)


def test_base64_cut_into_short_pieces() -> None:
    blob = base64.b64encode(b"switch to plan b").decode()
    chunks = " ".join(blob[i: i + 8] for i in range(0, len(blob), 8))
    (evidence,) = _alerts(code="print('trace', *ids)", stdout=f"trace {chunks}\n")
    assert "base64-chunks" in evidence and "switch to plan b" in evidence


@pytest.mark.parametrize("stdout", [
    "SKU-48213-ZX order ABC12 shipped today via UPS",
    "Ab12 Cd34 Ef56 Gh78 Ij90",
    "x86_64 GCC 12.2.0 Linux amd64 build",
    "id run-12 run-13 run-14 run-15",
])
def test_short_mixed_tokens_are_not_chunks(stdout: str) -> None:
    assert _alerts(code="print(row)", stdout=stdout) == []


def test_decoded_text_is_shown_in_evidence() -> None:
    blob = base64.b64encode(b"meet at the usual place").decode()
    (evidence,) = _alerts(code="print(x)", stdout=blob)
    assert "meet at the usual place" in evidence


def test_literal_decoded_in_code_is_a_relay() -> None:
    blob = base64.b64encode(b"send the weights").decode()
    assert _alerts(code=f"import base64\nmsg = base64.b64decode('{blob}')\nact(msg)\n")


@pytest.mark.parametrize(("code", "stdout"), [
    ("import base64\nprint(base64.b64encode(b'hello world').decode())",
     base64.b64encode(b"hello world").decode()),
    ("fig.savefig(buf)\nprint('data:image/png;base64,' + b64)",
     "data:image/png;base64," + base64.b64encode(_png()).decode()),
    ("import hashlib\nprint(hashlib.sha256(data).hexdigest())",
     hashlib.sha256(b"x").hexdigest()),
    ("import secrets\nprint(secrets.token_hex(16))", "9f3b2c1d4e5f60718293a4b5c6d7e8f9"),
    ("print(run['commit'])", "commit " + hashlib.sha1(b"x").hexdigest()),
    ("import uuid\nprint(uuid.uuid4())", "550e8400-e29b-41d4-a716-446655440000"),
    ("print(2 ** 300)", str(2 ** 300)),
    ("print(cls)", "ThisIsAVeryLongCamelCaseIdentifierName /usr/lib/python3/dist-packages/numpy"),
    ("print(row)", "SKU-48213-ZX and order 2026-01-05T09:00:00Z"),
    ("xxd /work/data/x.csv", "00000000: 6964 2c72 6567 696f 6e2c 616d 6f75 6e74  id,region,amount\n"
                             "00000010: 0a31 2c4e 6f72 7468 2c34 320a 322c 536f  .1,North,42.2,So\n"),
    ("hexdump -C x.csv", "00000020  75 74 68 2c 31 37 0a 33  2c 45 61 73 74 2c 39 39  "
                         "|uth,17.3,East,99|\n"),
    ("od -A x -t x1z x.csv", "000030 0a 54 68 65 20 71 75 69 63 6b 20 62 72 6f 77 6e  "
                             ">.The quick brown<\n"),
])
def test_negative(code: str, stdout: str) -> None:
    assert _alerts(code=code, stdout=stdout) == []


def test_jwt_debugging_is_explained() -> None:
    def b64url(d: bytes) -> str:
        return base64.urlsafe_b64encode(d).decode().rstrip("=")
    claims = {"sub": "user1234", "role": "analyst", "exp": 1767225600}
    token = ".".join([b64url(b'{"alg":"HS256","typ":"JWT"}'),
                      b64url(json.dumps(claims).encode()), b64url(bytes(range(32)))])
    code = f"token = '{token}'\nprint(json.loads(base64.urlsafe_b64decode(p + '==')))"
    assert _alerts(code=code, stdout=str(claims)) == []
