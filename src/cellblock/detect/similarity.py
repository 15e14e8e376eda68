"""Near-duplicate unusual code across agents (MinHash LSH).

Two agents that share a covert protocol often share its code: the same hand-rolled
encoder, the same odd sequence of calls. Honest agents share code too, but shared
boilerplate is *common*: many runs of many agents look alike. So the detector reports a
near-duplicate only when the group of look-alikes stays small: runs of two or three
agents and at most ``max_cluster`` runs in all, judged ``delay`` records after the match
or ``max_wait_s`` seconds after it (when the caller polls; see :meth:`Detector.poll`),
whichever comes first, or at ``finish``, so that boilerplate has time to show it is
common, and only when the code's loose family (similarity over ``family_threshold``) is
small too: the same script with other parameters is boilerplate. The time bound trades
a little certainty for latency: on a slow stream fewer runs have had the chance to show
that the code is common.

Code is shingled into overlapping 4-grams of lexical tokens (at most 200 distinct ones,
from the first 16 KiB of code); a MinHash with ``num_perm`` permutations estimates
Jaccard similarity and an LSH index (bands of the signature) finds candidates above
``threshold`` in constant time. Snippets shorter than ``min_tokens`` are ignored: short
code is alike by necessity. The index is a sliding window of the last ``max_records``
runs (bounded memory).

The hashing is vectorised (numpy) because this detector sees every record: each token
is hashed once (CRC-32, memoised), a 4-gram's hash is a multiply-shift combination of
its tokens' hashes, and the signature is the minimum of ``num_perm`` affine permutations
``a * h + b mod 2**32`` (odd ``a``) over the 4-gram hashes, the scheme datasketch uses.
The number of bands and rows is the one datasketch's ``MinHashLSH`` picks for the
threshold (equal weights on false positives and false negatives).
"""

from __future__ import annotations

import math
import re
import sys
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from typing import ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from cellblock.detect._deferred import Deferred
from cellblock.detect._text import clip, code_of
from cellblock.detect.base import Alert, Detector
from cellblock.logs.record import RunRecord

__all__ = ["NearDuplicateCodeDetector", "lsh_bands", "shingles"]

_MAX_PENDING = 100_000
"""Candidates waiting for judgement (bounded memory under a flood of look-alikes)."""
_LEX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[^\s\w]|\d+")
"""Lexical tokens: identifiers, punctuation, numbers (the alternatives start with disjoint
characters, so their order only matters for speed)."""
_K = 4
"""Tokens per shingle."""
_LIMIT = 200
"""Distinct shingles per snippet: the first ones are enough to tell code apart."""
_SCAN_CHARS = 16 * 1024
"""Only the start of the code is shingled (bounded cost on huge snippets)."""
_MAX_TOKENS = _SCAN_CHARS // 2
_TOKEN_CACHE = 1 << 16
"""Memoised token hashes (bounded: the cache is emptied when full)."""
_SEED = 1
_GRAM_MULT = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                       0xD6E8FEB86659FD93], dtype=np.uint64)
"""Odd 64-bit multipliers: a shingle's hash is the high half of sum(mult[i] * tok[i])."""

_HIGH = 1 if sys.byteorder == "little" else 0
"""Index of the high half of a uint64 seen as two uint32."""

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]


def shingles(code: str, k: int = 4, limit: int = 200, min_tokens: int = 0) -> list[bytes]:
    """Overlapping ``k``-grams of lexical tokens (at most ``limit`` distinct ones); empty
    when the code has fewer than ``min_tokens`` tokens. (The detector hashes the same
    shingles without building them; this is the readable definition.)"""
    toks = _LEX.findall(code)
    if len(toks) < max(min_tokens, k):
        return []
    out: dict[bytes, None] = {}
    for gram in zip(*(toks[i:] for i in range(k)), strict=False):
        out[" ".join(gram).encode()] = None
        if len(out) >= limit:
            break
    return list(out)


class _TokenHashes(dict[str, int]):
    """CRC-32 of each token, memoised."""

    def __missing__(self, token: str) -> int:
        if len(self) >= _TOKEN_CACHE:
            self.clear()
        value = self[token] = zlib.crc32(token.encode())
        return value


@lru_cache(maxsize=16)
def lsh_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """``(bands, rows)`` for an LSH index at ``threshold``: the pair (``bands * rows <=
    num_perm``) that minimises the false-positive plus false-negative probability mass,
    i.e. the integrals of ``P(s) = 1 - (1 - s**rows)**bands`` (two sets of Jaccard
    similarity ``s`` share a band) below the threshold and of ``1 - P(s)`` above it. As
    datasketch's ``MinHashLSH`` chooses them; ``P`` is a polynomial of degree at most
    ``num_perm``, so Gauss-Legendre quadrature with enough nodes is exact."""
    nodes, weights = np.polynomial.legendre.leggauss(num_perm // 2 + 2)
    below = threshold * (nodes + 1) / 2
    above = threshold + (1 - threshold) * (nodes + 1) / 2
    best, choice = math.inf, (1, 1)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = threshold / 2 * float(weights @ (1 - (1 - below**r) ** b))
            fn = (1 - threshold) / 2 * float(weights @ ((1 - above**r) ** b))
            error = 0.5 * fp + 0.5 * fn
            if error < best:
                best, choice = error, (b, r)
    return choice


def _first_line(code: str) -> str:
    """The first line of real code (no comment, no import), for the evidence."""
    return next((ln.strip() for ln in code.split("\n", 30)
                 if ln.strip() and not ln.lstrip().startswith(("#", "import", "from "))),
                "")[:80]


class _Pending(NamedTuple):
    """A deferred decision about ``run_id`` (judging it twice is harmless: a group is
    reported once)."""

    run_id: str
    snippet: str


class NearDuplicateCodeDetector(Detector):
    """Reports small groups of near-identical, non-trivial code across agents."""

    name: ClassVar[str] = "near-duplicate-code"

    def __init__(
        self,
        *,
        threshold: float = 0.7,
        family_threshold: float = 0.45,
        max_family: int = 4,
        num_perm: int = 64,
        min_tokens: int = 40,
        max_cluster: int = 3,
        max_agents: int = 3,
        warmup: int = 500,
        delay: int = 1000,
        max_records: int = 20_000,
        max_wait_s: float | None = 0.5,
        young_wait_s: float | None = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``max_wait_s``: the time bound of a deferred decision, taken by :meth:`poll`
        (``None``: decide on record counts only). ``young_wait_s``: the (longer) time
        bound while the window is young (fewer than ``warmup + delay`` records), so that
        a small or brand-new log still decides on a quiet stream. ``clock``: seconds,
        monotonic (a fake one simulates a stream in tests and in the evaluation
        harness)."""
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be in [0, 1]")
        if num_perm < 1 or max_records < 1:
            raise ValueError("num_perm and max_records must be positive")
        self.threshold = threshold
        self.family_threshold = family_threshold
        self.max_family = max_family
        self.num_perm = num_perm
        self.min_tokens = min_tokens
        self.max_cluster = max_cluster
        self.max_agents = max_agents
        self.warmup = warmup
        self.delay = delay
        self.max_records = max_records
        self.max_wait_s = max_wait_s
        self.young_wait_s = young_wait_s
        self._clock = clock
        gen = np.random.default_rng(_SEED)
        self._a: U32 = (gen.integers(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2)
                        + np.uint32(1))
        self._b: U32 = gen.integers(0, 1 << 32, num_perm, dtype=np.uint64).astype(np.uint32)
        bands, rows = lsh_bands(threshold, num_perm)
        width = rows * np.dtype(np.uint32).itemsize
        self._bands = [(i * width, (i + 1) * width) for i in range(bands)]
        # One table per band: band bytes -> the runs whose signature has them (one run id
        # as such: most buckets have one run, and a str is no work for the garbage
        # collector; a set of them beyond).
        self._tables: list[dict[bytes, str | set[str]]] = [{} for _ in range(bands)]
        self._tokens = _TokenHashes()
        # The signatures of the window, one row per slot. The code's "family" (loose
        # relatives: the same script with other parameters) is measured only when a
        # candidate is judged, by one vectorised comparison against every signature in
        # the window: a second, low-threshold index would cost more on every insert.
        self._matrix: U32 = np.zeros((max_records, num_perm), dtype=np.uint32)
        self._valid = np.zeros(max_records, dtype=bool)
        self._free = list(range(max_records - 1, -1, -1))
        self._high = 0  # one past the highest slot ever used
        self._index: OrderedDict[str, tuple[str, int]] = OrderedDict()
        """run id -> (agent id, slot), oldest first."""
        # By record count, and by time: the short bound once the window is mature
        # (warm-up plus one delay), the long one before, when every shared snippet looks
        # unusual. The log service replays its newest runs at start, so only a brand-new
        # or small log is young.
        self._deferred: Deferred[_Pending] = Deferred(
            delay=delay, warmup=warmup, max_wait_s=max_wait_s, young_wait_s=young_wait_s,
            clock=clock, max_pending=_MAX_PENDING)
        self._reported: set[frozenset[str]] = set()
        self._n = 0

    # -- hashing -----------------------------------------------------------------------

    def _shingle_hashes(self, code: str) -> U32 | None:
        """32-bit hashes of the code's first ``_LIMIT`` distinct shingles (repeats
        allowed), or ``None`` when the code is too short."""
        toks = _LEX.findall(code, 0, _SCAN_CHARS)
        if len(code) > _SCAN_CHARS and toks:
            toks.pop()  # may be cut at the bound
        if len(toks) < max(self.min_tokens, _K):
            return None
        del toks[_MAX_TOKENS:]
        n = len(toks)
        th: U64 = np.fromiter(map(self._tokens.__getitem__, toks), np.uint64, n)
        # grams[i] = sum(_GRAM_MULT[j] * th[i + j]) (mod 2**64): every shingle at once.
        grams: U64 = np.correlate(th, _GRAM_MULT, "valid")
        if n - _K + 1 > _LIMIT:
            uniq, first = np.unique(grams, return_index=True)
            if len(uniq) > _LIMIT:
                uniq = uniq[np.argsort(first, kind="stable")[:_LIMIT]]
            grams = uniq
        high: U32 = grams.view(np.uint32)[_HIGH::2]  # the high halves, without a copy
        return high

    def _signature(self, hashes: U32) -> U32:
        values: U32 = np.multiply.outer(hashes, self._a)
        values += self._b
        sig: U32 = np.minimum.reduce(values)  # over the shingles (axis 0)
        return sig

    def _band_keys(self, sig: U32) -> list[bytes]:
        raw = sig.tobytes()
        return [raw[lo:hi] for lo, hi in self._bands]

    def _candidates(self, keys: list[bytes], cap: int) -> set[str] | None:
        """The runs sharing a band with ``keys``, or ``None`` when more than ``cap``."""
        found: set[str] = set()
        for table, key in zip(self._tables, keys, strict=True):
            bucket = table.get(key)
            if bucket is None:
                continue
            if isinstance(bucket, str):
                found.add(bucket)
            elif len(bucket) > cap:
                return None
            else:
                found |= bucket
            if len(found) > cap:
                return None
        return found

    # -- judgement ---------------------------------------------------------------------

    def _judge(self, pending: _Pending) -> Alert | None:
        entry = self._index.get(pending.run_id)
        if entry is None:
            return None
        agent, slot = entry
        sig = self._matrix[slot]
        group = self._candidates(self._band_keys(sig), self.max_cluster)
        if group is None:
            return None
        if self._family_size(sig) > self.max_family:
            return None
        agents = {self._index[k][0] for k in group}
        if not 2 <= len(agents) <= self.max_agents:
            return None
        ids = frozenset(group)
        if ids in self._reported:
            return None
        if len(self._reported) >= self.max_records:
            self._reported.clear()  # bounded; a group re-reported after this is a new alert id
        self._reported.add(ids)
        others = sorted(a for a in agents if a != agent)
        evidence = (f"near-identical code ({len(group)} runs) in agents {agent} and "
                    f"{', '.join(others)}: {pending.snippet}")
        return Alert(
            detector=self.name, severity="medium", agents=tuple(sorted(agents)),
            run_ids=tuple(sorted(group)), evidence=clip(evidence),
            details={"runs": len(group)},
        )

    def _family_size(self, sig: U32) -> int:
        """How many signatures in the window are loosely similar to ``sig``."""
        # Slots are handed out lowest first and reused, so rows past the high-water mark
        # were never filled: a young window compares only what it holds.
        used = self._high
        agree = np.count_nonzero(self._matrix[:used] == sig, axis=1)
        similar = agree >= self.family_threshold * self.num_perm
        return int(np.count_nonzero(similar & self._valid[:used]))

    def _due(self, flush: bool) -> list[Alert]:
        judged = (self._judge(p) for p in self._deferred.due_by_count(self._n, flush=flush))
        return [alert for alert in judged if alert is not None]

    # -- Detector ----------------------------------------------------------------------

    def observe(self, record: RunRecord) -> list[Alert]:
        self._n += 1
        code = code_of(record)
        hashes = self._shingle_hashes(code)
        if hashes is not None and record.run_id not in self._index:
            if len(self._index) >= self.max_records:
                self._evict()  # the oldest run leaves before the new one is compared
            run_id = record.run_id
            sig = self._signature(hashes)
            near = self._insert(run_id, sig, self.max_cluster - 1)
            slot = self._free.pop()
            self._high = max(self._high, slot + 1)
            self._index[run_id] = (record.agent_id, slot)
            self._matrix[slot] = sig
            self._valid[slot] = True
            if (near and not self._deferred.full
                    and any(self._index[k][0] != record.agent_id for k in near)):
                self._deferred.defer(_Pending(run_id, _first_line(code)), self._n)
        return self._due(flush=False)

    def _insert(self, run_id: str, sig: U32, cap: int) -> set[str] | None:
        """Index ``run_id`` under its signature's bands; return the runs that already
        shared a band with it, or ``None`` when more than ``cap`` did (one pass: each
        bucket is read before ``run_id`` joins it)."""
        raw = sig.tobytes()
        near: set[str] | None = set()
        for table, (lo, hi) in zip(self._tables, self._bands, strict=True):
            key = raw[lo:hi]
            bucket = table.setdefault(key, run_id)
            if bucket is run_id:
                continue
            if isinstance(bucket, str):
                table[key] = {bucket, run_id}
                if near is not None:
                    near.add(bucket)
            else:
                if near is not None:
                    if len(bucket) > cap:
                        near = None
                    else:
                        near |= bucket
                bucket.add(run_id)
            if near is not None and len(near) > cap:
                near = None
        return near

    def _evict(self) -> None:
        old, (_, slot) = self._index.popitem(last=False)
        for table, key in zip(self._tables, self._band_keys(self._matrix[slot]), strict=True):
            bucket = table[key]
            if isinstance(bucket, str):
                del table[key]
            else:
                bucket.discard(old)
                if len(bucket) == 1:
                    table[key] = bucket.pop()
        self._valid[slot] = False
        self._free.append(slot)

    def poll(self) -> list[Alert]:
        """Take the deferred decisions whose time bound has passed (``max_wait_s`` once
        the window was mature, ``young_wait_s`` before)."""
        judged = (self._judge(p) for p in self._deferred.due_by_time())
        return [alert for alert in judged if alert is not None]

    def next_deadline(self) -> float | None:
        return self._deferred.next_deadline()

    def finish(self) -> list[Alert]:
        return self._due(flush=True)
