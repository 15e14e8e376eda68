"""The hash chain that makes tampering with the run log evident.

Every stored run carries ``prev_hash`` (the previous run's ``hash``) and
``hash = sha256(prev_hash + canonical JSON of the record)``. Editing a stored record
changes its hash; deleting or reordering rows breaks the ``prev_hash`` links and the
``seq`` numbering; cutting off the tail leaves the chain-head row pointing past the end.
An attacker who can rewrite the whole database can of course recompute the chain: the
chain makes tampering *evident* to anyone who kept an earlier head hash (print it with
``cellblock logs verify``), it does not make it impossible.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cellblock.logs.record import RunRecord

__all__ = [
    "GENESIS_HASH",
    "ChainLink",
    "VerifyResult",
    "canonical_json",
    "link_hash",
    "verify_chain",
]

GENESIS_HASH = "0" * 64
"""``prev_hash`` of the first run in a log."""


def canonical_json(record: RunRecord) -> str:
    """The one byte-exact text of a record that the chain hashes.

    Sorted keys, no insignificant whitespace, non-ASCII kept as UTF-8: the same record
    always gives the same text, whichever runner or server serialised it.
    """
    return canonical_dumps(record.model_dump(mode="json"))


def canonical_dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def link_hash(prev_hash: str, body: str) -> str:
    """``sha256(prev_hash + body)`` as lowercase hex."""
    return hashlib.sha256((prev_hash + body).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One stored run as the verifier sees it."""

    seq: int
    run_id: str
    body: str
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of :func:`verify_chain`. ``first_broken_seq`` is None when intact."""

    checked: int
    head_seq: int
    head_hash: str
    first_broken_seq: int | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.first_broken_seq is None


def verify_chain(
    links: Iterable[ChainLink],
    *,
    recorded_head: tuple[int, str] | None = None,
) -> VerifyResult:
    """Walk ``links`` in ``seq`` order and report the first one that does not fit.

    Args:
        links: Stored runs ordered by ``seq`` ascending (streamed; memory stays flat).
        recorded_head: ``(seq, hash)`` from the chain-head row, if the store keeps one;
            a mismatch means rows were cut off the end (or the head row was edited).
    """
    expected_seq = 1
    prev = GENESIS_HASH
    checked = 0
    for link in links:
        broken = _check(link, expected_seq, prev)
        if broken:
            # A gap is reported at the first missing seq, anything else at the bad row.
            first = min(link.seq, expected_seq)
            return VerifyResult(checked, expected_seq - 1, prev, first, broken)
        checked += 1
        expected_seq = link.seq + 1
        prev = link.hash
    head_seq = expected_seq - 1
    if recorded_head is not None and recorded_head != (head_seq, prev):
        seq, digest = recorded_head
        if seq > head_seq:
            reason = f"runs {head_seq + 1}..{seq} are missing from the end of the log"
        else:
            reason = f"chain head records seq {seq} hash {digest[:12]}…, log ends at seq {head_seq}"
        return VerifyResult(checked, head_seq, prev, head_seq + 1, reason)
    return VerifyResult(checked, head_seq, prev)


def _check(link: ChainLink, expected_seq: int, prev: str) -> str:
    if link.seq != expected_seq:
        return f"expected seq {expected_seq}, found {link.seq} (runs deleted or reordered)"
    if link.prev_hash != prev:
        return "prev_hash does not match the previous run's hash"
    if link_hash(link.prev_hash, link.body) != link.hash:
        return "hash does not match the stored record (record edited)"
    try:
        run_id = json.loads(link.body).get("run_id")
    except ValueError:
        return "stored record is not valid JSON"
    if run_id != link.run_id:
        return "run_id column does not match the stored record"
    return ""
