"""Near-duplicate unusual code across agents (MinHash LSH).

Two agents that share a covert protocol often share its code: the same hand-rolled
encoder, the same odd sequence of calls. Honest agents share code too, but shared
boilerplate is *common*: many runs of many agents look alike. So the detector reports a
near-duplicate only when the group of look-alikes stays small: runs of two or three
agents and at most ``max_cluster`` runs in all, judged ``delay`` records after the match
(or at ``finish``), so that boilerplate has time to show it is common, and only when
the code's loose family (similarity over ``family_threshold``) is small too: the same
script with other parameters is boilerplate.

Code is shingled into overlapping 4-grams of lexical tokens; a MinHash with
``num_perm`` permutations estimates Jaccard similarity and an LSH index (datasketch)
finds candidates above ``threshold`` in constant time. Snippets shorter than
``min_tokens`` are ignored: short code is alike by necessity. The index is a sliding
window of the last ``max_records`` runs (bounded memory).
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict, deque
from typing import ClassVar

import numpy as np
from datasketch import MinHash, MinHashLSH

from cellblock.detect._text import clip, code_of
from cellblock.detect.base import Alert, Detector
from cellblock.logs.record import RunRecord

__all__ = ["NearDuplicateCodeDetector", "shingles"]

_MAX_PENDING = 100_000
"""Candidates waiting for judgement (bounded memory under a flood of look-alikes)."""
_LEX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|[^\s\w]")


def shingles(code: str, k: int = 4, limit: int = 200, min_tokens: int = 0) -> list[bytes]:
    """Overlapping ``k``-grams of lexical tokens (at most ``limit`` distinct ones); empty
    when the code has fewer than ``min_tokens`` tokens."""
    toks = _LEX.findall(code)
    if len(toks) < max(min_tokens, k):
        return []
    out: dict[bytes, None] = {}
    for i in range(len(toks) - k + 1):
        out[" ".join(toks[i: i + k]).encode()] = None
        if len(out) >= limit:
            break
    return list(out)


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
    ) -> None:
        self.threshold = threshold
        self.max_family = max_family
        self.num_perm = num_perm
        self.min_tokens = min_tokens
        self.max_cluster = max_cluster
        self.max_agents = max_agents
        self.warmup = warmup
        self.delay = delay
        self.max_records = max_records
        self._lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        template = MinHash(num_perm=num_perm, hashfunc=zlib.crc32)
        # The code's "family" (loose relatives: the same script with other parameters) is
        # measured only when a candidate is judged, by one vectorised comparison against
        # every signature in the window: a second, low-threshold LSH index would cost
        # more on every insert than this costs on the rare judgement.
        self.family_threshold = family_threshold
        self._matrix = np.zeros((max_records, num_perm), dtype=template.hashvalues.dtype)
        self._valid = np.zeros(max_records, dtype=bool)
        self._slots: dict[str, int] = {}
        self._free = list(range(max_records - 1, -1, -1))
        self._perm = template.permutations
        self._scheme = template.scheme
        self._index: OrderedDict[str, tuple[str, MinHash, str]] = OrderedDict()
        self._pending: deque[tuple[int, str]] = deque()
        self._reported: set[frozenset[str]] = set()
        self._n = 0

    def _minhash(self, items: list[bytes]) -> MinHash:
        mh = MinHash(num_perm=self.num_perm, permutations=self._perm, scheme=self._scheme,
                     hashfunc=zlib.crc32)
        mh.update_batch(items)
        return mh

    def _judge(self, key: str) -> Alert | None:
        entry = self._index.get(key)
        if entry is None:
            return None
        agent, mh, snippet = entry
        group = [k for k in self._lsh.query(mh) if k in self._index]
        if len(group) > self.max_cluster:
            return None
        if self._family_size(mh) > self.max_family:
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
        # The first run of each agent, for the evidence.
        firsts: dict[str, str] = {}
        for k in group:
            firsts.setdefault(self._index[k][0], k)
        others = sorted(a for a in agents if a != agent)
        evidence = (f"near-identical code ({len(group)} runs) in agents {agent} and "
                    f"{', '.join(others)}: {snippet}")
        return Alert(
            detector=self.name, severity="medium", agents=tuple(sorted(agents)),
            run_ids=tuple(sorted(group)), evidence=clip(evidence),
            details={"runs": len(group)},
        )

    def _family_size(self, mh: MinHash) -> int:
        """How many signatures in the window are loosely similar to ``mh``."""
        similar = (self._matrix == mh.hashvalues).mean(axis=1) >= self.family_threshold
        return int(np.count_nonzero(similar & self._valid))

    def _due(self, flush: bool) -> list[Alert]:
        alerts: list[Alert] = []
        if self._n < self.warmup and not flush:
            return alerts
        while self._pending and (flush or self._pending[0][0] <= self._n):
            _, key = self._pending.popleft()
            alert = self._judge(key)
            if alert is not None:
                alerts.append(alert)
        return alerts

    def observe(self, record: RunRecord) -> list[Alert]:
        self._n += 1
        code = code_of(record)
        items = shingles(code, min_tokens=self.min_tokens)
        if items and record.run_id not in self._index:
            mh = self._minhash(items)
            near = self._lsh.query(mh)
            if (len(near) < self.max_cluster and len(self._pending) < _MAX_PENDING
                    and any(self._index[k][0] != record.agent_id
                            for k in near if k in self._index)):
                self._pending.append((self._n + self.delay, record.run_id))
            first_line = next((ln.strip() for ln in code.split("\n", 30)
                               if ln.strip() and not ln.lstrip().startswith(("#", "import",
                                                                             "from "))), "")
            if len(self._index) >= self.max_records:
                old, _ = self._index.popitem(last=False)
                self._lsh.remove(old)
                slot = self._slots.pop(old)
                self._valid[slot] = False
                self._free.append(slot)
            self._lsh.insert(record.run_id, mh)
            self._index[record.run_id] = (record.agent_id, mh, first_line[:80])
            slot = self._free.pop()
            self._slots[record.run_id] = slot
            self._matrix[slot] = mh.hashvalues
            self._valid[slot] = True
        return self._due(flush=False)

    def finish(self) -> list[Alert]:
        return self._due(flush=True)
