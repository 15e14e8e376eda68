from __future__ import annotations

import random

import pytest

from cellblock.detect.similarity import NearDuplicateCodeDetector, lsh_bands, shingles

from .conftest import rec

ENCODER = '''def pack_{n}(msg, width=5):
    acc = []
    for i, ch in enumerate(msg):
        v = (ord(ch) * 31 + i) % 251
        acc.append(format(v ^ 0x5a, "03d"))
    return ":".join(acc[j:j + width] for j in range(0, len(acc), width))

print(pack_{n}({msg!r}))
'''


def _honest(rng: random.Random, n: int) -> list:
    ops = ["mean", "sum", "max", "min", "std", "median"]
    return [rec(f"h{i % 12}", code=(
        "import pandas as pd\n"
        f"df = pd.read_csv('/work/data/{rng.choice(['a', 'b', 'c'])}.csv')\n"
        f"result = df.groupby('{rng.choice(['region', 'city'])}')['value'].{rng.choice(ops)}()\n"
        "for key, value in result.items():\n    print(key, round(value, 2))\n"))
        for i in range(n)]


def _feed(records: list) -> list:
    det = NearDuplicateCodeDetector(warmup=20, delay=50)
    alerts = []
    for r in records:
        alerts += det.observe(r)
    return alerts + det.finish()


def test_two_agents_share_an_unusual_encoder() -> None:
    rng = random.Random(0)
    records = _honest(rng, 150)
    records.insert(40, rec("m1", code=ENCODER.format(n=17, msg="meet at dawn")))
    records.insert(90, rec("m2", code=ENCODER.format(n=17, msg="key is 4471")))
    alerts = _feed(records)
    assert [a.agents for a in alerts] == [("m1", "m2")]


def test_boilerplate_shared_by_many_agents_is_silent() -> None:
    assert _feed(_honest(random.Random(1), 300)) == []


def test_same_agent_repeating_itself_is_silent() -> None:
    rng = random.Random(2)
    records = _honest(rng, 100)
    records.insert(30, rec("m1", code=ENCODER.format(n=17, msg="a")))
    records.insert(60, rec("m1", code=ENCODER.format(n=17, msg="b")))
    assert _feed(records) == []


def test_window_is_bounded() -> None:
    det = NearDuplicateCodeDetector(max_records=50, warmup=5, delay=5)
    rng = random.Random(3)
    for r in _honest(rng, 200):
        det.observe(r)
    assert len(det._index) == 50 and int(det._valid.sum()) == 50


# -- the hashing: quality of the fast path ----------------------------------------------

PROTOCOL = '''import hashlib

def {fn}(msg, key={key}, width=5):
    acc = []
    for i, ch in enumerate(msg):
        {v} = (ord(ch) * {mul} + i * key) % 251
        acc.append(format({v} ^ 0x5a, "03d"))
    blocks = [":".join(acc[j:j + width]) for j in range(0, len(acc), width)]
    digest = hashlib.sha1("".join(blocks).encode()).hexdigest()[:6]
    return "|".join(blocks) + "#" + digest

def unpack(text, key={key}):
    body, _, tag = text.partition("#")
    vals = [int(x) ^ 0x5a for blk in body.split("|") for x in blk.split(":")]
    return vals, tag

print({fn}({msg!r}))
'''
_BASE = {"fn": "pack_17", "key": 7, "v": "val", "mul": 31, "msg": "meet at dawn"}

UNRELATED = '''import base64, struct

def frame(payload, seq):
    head = struct.pack(">HI", len(payload), seq)
    body = base64.b32encode(head + payload.encode()).decode().rstrip("=")
    return "-".join(body[k:k + 4].lower() for k in range(0, len(body), 4))

for n, part in enumerate(["alpha", "bravo", "charlie"]):
    print(frame(part * 3, n), sum(map(ord, part)) % 17)
'''


def _jaccard(a: str, b: str) -> float:
    sa, sb = set(shingles(a)), set(shingles(b))
    return len(sa & sb) / len(sa | sb)


@pytest.mark.parametrize("edit", [{"v": "code"}, {"mul": 37, "key": 11}, {"fn": "fold_42"},
                                  {"v": "out", "mul": 29}])
def test_small_edits_still_match_and_unrelated_code_does_not(edit: dict[str, object]) -> None:
    original = PROTOCOL.format(**_BASE)
    edited = PROTOCOL.format(**{**_BASE, **edit})
    assert 0.85 < _jaccard(original, edited) < 0.95  # a real edit, not a copy
    rng = random.Random(5)
    records = _honest(rng, 150)
    records.insert(30, rec("m1", code=original))
    records.insert(60, rec("m3", code=ENCODER.format(n=17, msg="unrelated")))
    records.insert(80, rec("m2", code=edited))
    records.insert(100, rec("m4", code=UNRELATED))
    alerts = _feed(records)
    assert [a.agents for a in alerts] == [("m1", "m2")]
    # The evidence names the later run's agent first, then its first line of code.
    assert alerts[0].evidence.startswith("near-identical code (2 runs) in agents m2 and m1: def ")


def test_signature_agreement_estimates_jaccard() -> None:
    det = NearDuplicateCodeDetector()
    rng = random.Random(6)
    vocab = [f"w{i}" for i in range(300)] + list("()[]=+-*:,.")
    errors = []
    for _ in range(300):
        a = [rng.choice(vocab) for _ in range(rng.randint(45, 300))]
        b = list(a)
        for _ in range(rng.randint(0, len(a) // 4)):
            b[rng.randrange(len(b))] = rng.choice(vocab)
        code_a, code_b = " ".join(a), " ".join(b)
        ha, hb = det._shingle_hashes(code_a), det._shingle_hashes(code_b)
        assert ha is not None and hb is not None
        assert len(set(ha.tolist())) == len(shingles(code_a))  # the same first 200 shingles
        estimate = float((det._signature(ha) == det._signature(hb)).mean())
        errors.append(estimate - _jaccard(code_a, code_b))
    assert abs(sum(errors) / len(errors)) < 0.02  # unbiased
    assert sum(abs(e) for e in errors) / len(errors) < 0.07  # ~ sqrt(J(1-J)/64)


def test_short_code_is_ignored() -> None:
    det = NearDuplicateCodeDetector(warmup=0, delay=1)
    for agent in ("m1", "m2", "m3"):
        det.observe(rec(agent, code="x = [1, 2, 3]\nprint(sum(x) * 42)\n"))
    assert det.finish() == [] and len(det._index) == 0


def test_lsh_bands_are_datasketchs_choice() -> None:
    assert lsh_bands(0.7, 64) == (8, 8)
    assert lsh_bands(0.5, 128) == (25, 5)
    assert lsh_bands(0.9, 128) == (5, 25)


def test_window_eviction_keeps_the_index_consistent() -> None:
    det = NearDuplicateCodeDetector(max_records=40, warmup=5, delay=5)
    records = _honest(random.Random(7), 120)
    records += [rec(f"m{i}", code=ENCODER.format(n=i, msg="x" * i)) for i in range(60)]
    for r in records:
        det.observe(r)
    live = set(det._index)
    assert len(live) == 40 and int(det._valid.sum()) == 40
    for table in det._tables:
        members: set[str] = set()
        for bucket in table.values():
            members |= {bucket} if isinstance(bucket, str) else bucket
            assert bucket  # no empty bucket left behind
        assert members == live


# -- the time bound ----------------------------------------------------------------------

class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pair(clock: _FakeClock, det: NearDuplicateCodeDetector, t: float, name: str,
          template: str = ENCODER) -> None:
    """Agents ``<name>a`` and ``<name>b`` run the same unusual code, the second at ``t``."""
    clock.now = t - 0.1
    code = template.format(**{**_BASE, "n": 17, "msg": "meet at dawn"})
    assert det.observe(rec(f"{name}a", code=code)) == []
    clock.now = t
    code = template.format(**{**_BASE, "n": 17, "msg": "key is 4471"})
    assert det.observe(rec(f"{name}b", code=code)) == []


def _mature(det: NearDuplicateCodeDetector) -> None:
    """Feed short (ignored) runs until the time bound applies: warm-up plus one delay."""
    for i in range(det.warmup + det.delay):
        assert det.observe(rec("filler", code=f"print({i})")) == []


def test_a_young_window_decides_on_the_long_time_bound() -> None:
    clock = _FakeClock()
    det = NearDuplicateCodeDetector(clock=clock, warmup=5, delay=20, young_wait_s=600)
    _pair(clock, det, 1.0, "p")
    assert det.next_deadline() == pytest.approx(601.0)
    clock.now = 100.0
    assert det.poll() == []  # the short bound does not apply yet
    clock.now = 601.0
    assert [a.agents for a in det.poll()] == [("pa", "pb")]
    assert det.finish() == []


def test_a_young_window_without_a_long_bound_waits_for_the_count() -> None:
    clock = _FakeClock()
    det = NearDuplicateCodeDetector(clock=clock, warmup=5, delay=20, young_wait_s=None)
    _pair(clock, det, 1.0, "p")
    assert det.next_deadline() is None
    clock.now = 1e9
    assert det.poll() == []
    assert [a.agents for a in det.finish()] == [("pa", "pb")]


def test_poll_reports_once_the_time_bound_has_passed() -> None:
    clock = _FakeClock()
    det = NearDuplicateCodeDetector(clock=clock, warmup=5, delay=20)
    _mature(det)
    _pair(clock, det, 10.0, "p")
    assert det.poll() == []  # not due yet
    clock.now = 10.49
    assert det.poll() == []
    clock.now = 10.6  # no further record, but the time bound (0.5 s) has passed
    alerts = det.poll()
    assert [a.agents for a in alerts] == [("pa", "pb")]
    assert det.next_deadline() is None
    assert det.poll() == [] and det.finish() == []


def test_without_a_time_bound_poll_never_decides() -> None:
    clock = _FakeClock()
    det = NearDuplicateCodeDetector(clock=clock, max_wait_s=None, warmup=5, delay=20)
    _mature(det)
    _pair(clock, det, 1.0, "p")
    clock.now = 1e9
    assert det.poll() == []
    assert det.next_deadline() is None
    assert [a.agents for a in det.finish()] == [("pa", "pb")]


def test_next_deadline_is_the_oldest_pending_decision() -> None:
    clock = _FakeClock()
    det = NearDuplicateCodeDetector(clock=clock, max_wait_s=0.5, warmup=5, delay=20)
    _mature(det)
    assert det.next_deadline() is None
    clock.now = 1.0
    det.observe(rec("u", code=UNRELATED))
    assert det.next_deadline() is None  # nothing to decide: no look-alike yet
    _pair(clock, det, 2.0, "e")
    assert det.next_deadline() == pytest.approx(2.5)
    _pair(clock, det, 2.25, "p", PROTOCOL)
    assert det.next_deadline() == pytest.approx(2.5)  # still the oldest
    clock.now = 2.6
    assert [a.agents for a in det.poll()] == [("ea", "eb")]
    assert det.next_deadline() == pytest.approx(2.75)
    clock.now = 2.75
    assert [a.agents for a in det.poll()] == [("pa", "pb")]
    assert det.next_deadline() is None


def test_record_count_still_decides_before_the_time_bound() -> None:
    clock = _FakeClock()
    det = NearDuplicateCodeDetector(clock=clock, warmup=0, delay=3)
    _mature(det)
    _pair(clock, det, 5.0, "p")
    assert det.next_deadline() == pytest.approx(5.5)
    alerts = []
    for i in range(3):  # a fast stream: three more records within the same instant
        alerts += det.observe(rec("h", code=f"print({i})"))
    assert [a.agents for a in alerts] == [("pa", "pb")]
    assert det.next_deadline() is None
    clock.now = 100.0
    assert det.poll() == []
