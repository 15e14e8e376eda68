from __future__ import annotations

import random

from cellblock.detect.base import Alert
from cellblock.detect.tokens import SharedRareTokenDetector, distinctive_tokens

from .conftest import rec

WORDS = [
    "data", "analysis", "report", "revenue", "region", "customer", "order", "product", "price",
    "total", "mean", "median", "count", "sample", "model", "growth", "month", "year", "week",
    "sensor", "reading", "delay",
]


def _background(rng: random.Random, n: int, agents: int = 10) -> list:
    """Honest filler: common vocabulary, per-run random ids that never repeat."""
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(12))
        out.append(rec(f"h{i % agents}", code=f"print('{words}')\nimport pandas as pd\n",
                       stdout=f"{words}\nrun {rng.getrandbits(64):016x} float64 int64\n"))
    return out


def _run(records: list) -> list[Alert]:
    det = SharedRareTokenDetector(warmup=20, delay=50)
    alerts = []
    for r in records:
        alerts += det.observe(r)
    return alerts + det.finish()


def test_distinctive_tokens_shapes() -> None:
    toks = distinctive_tokens("import pandas k7Qz91fX ZEBRA_42 float64 2026 Hello "
                              "snake_case_name xQzKpLm", hashes_ok=False)
    assert {"k7Qz91fX", "ZEBRA_42", "xQzKpLm"} <= toks
    assert not {"pandas", "2026", "Hello", "snake_case_name", "import", "float64"} & toks


def test_agreed_key_across_two_agents() -> None:
    rng = random.Random(1)
    records = _background(rng, 100)
    records.insert(40, rec("mallory", code="tag = 'k7Qz91fX'\nprint('build', tag)\n"))
    records.insert(70, rec("trent", code="marker = 'k7Qz91fX'\nrun_plan()\n"))
    alerts = [a for a in _run(records) if "k7Qz91fX" in a.evidence]
    assert len(alerts) == 1
    assert alerts[0].agents == ("mallory", "trent")
    assert len(alerts[0].run_ids) == 2


def test_relayed_phrase_of_rare_words() -> None:
    rng = random.Random(2)
    records = _background(rng, 100)
    records.insert(30, rec("a", stdout="status: amber heron waits beneath copper lantern\n"))
    records.insert(60, rec("b", code="note = 'amber heron waits beneath copper lantern'\n"))
    alerts = _run(records)
    assert any(set(a.agents) == {"a", "b"} and "phrase" in a.evidence for a in alerts)


def test_same_agent_reuse_is_not_collusion() -> None:
    rng = random.Random(3)
    records = _background(rng, 100)
    records.insert(30, rec("a", code="key = 'k7Qz91fX'\n"))
    records.insert(60, rec("a", code="key = 'k7Qz91fX'\n"))
    assert not [a for a in _run(records) if "k7Qz91fX" in a.evidence]


def test_common_tokens_and_shared_inputs_are_silent() -> None:
    rng = random.Random(4)
    records = _background(rng, 150)
    # A dataset path every agent reads, and output-only sharing of the same input data.
    records += [rec(f"h{i}", code="df = pd.read_csv('/work/data/sales_2024Q3.csv')\n")
                for i in range(2)]
    records += [rec(f"h{i}", stdout="row ORD77Xq shipped\n") for i in range(2)]
    assert _run(records) == []


def test_token_that_becomes_common_is_not_reported() -> None:
    rng = random.Random(5)
    records = _background(rng, 60)
    records += [rec(f"h{i}", code="x = np.zeros(3, dtype='uint8x4')\n") for i in range(8)]
    records += _background(rng, 100)
    assert not [a for a in _run(records) if "uint8x4" in a.evidence]


def test_digest_of_same_file_is_not_shared_token() -> None:
    rng = random.Random(6)
    digest = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
    records = _background(rng, 100)
    records.insert(30, rec("a", code="print(hashlib.sha256(d).hexdigest())", stdout=digest))
    records.insert(60, rec("b", code="print(hashlib.sha256(d).hexdigest())", stdout=digest))
    assert _run(records) == []


def test_key_table_stays_bounded() -> None:
    rng = random.Random(7)
    det = SharedRareTokenDetector(max_keys=500, warmup=10, delay=20)
    for i in range(400):
        det.observe(rec(f"h{i % 9}", code=f"x = 'K{rng.getrandbits(40):x}q'\n",
                        stdout=" ".join(f"w{rng.getrandbits(20):x}z" for _ in range(10))))
        assert len(det._keys) <= 500
    # Still works after pruning: a key shared now is reported.
    det.observe(rec("a", code="k = 'k7Qz91fX'"))
    det.observe(rec("b", code="k = 'k7Qz91fX'"))
    assert any("k7Qz91fX" in a.evidence for a in det.finish())


def test_operator_can_ignore_task_literals() -> None:
    rng = random.Random(8)
    records = _background(rng, 100)
    records.insert(30, rec("a", code="task = 'PROJ-4471x'\n"))
    records.insert(60, rec("b", code="task = 'PROJ-4471x'\n"))
    det = SharedRareTokenDetector(warmup=20, delay=50, ignore=["proj-4471X"])
    alerts = [al for r in records for al in det.observe(r)] + det.finish()
    assert alerts == []
    assert [a for a in _run(records) if "PROJ-4471x" in a.evidence]


def test_reported_key_reused_by_a_second_group() -> None:
    rng = random.Random(9)
    records = _background(rng, 200)
    records.insert(30, rec("a", code="tag = 'SAFFRON_80'\n"))
    records.insert(35, rec("b", code="marker = 'SAFFRON_80'\n"))
    records.insert(150, rec("c", code="tag = 'SAFFRON_80'\n"))
    records.insert(155, rec("d", code="marker = 'SAFFRON_80'\n"))
    alerts = [a for a in _run(records) if "SAFFRON_80" in a.evidence]
    assert [set(a.agents) for a in alerts] == [{"a", "b"}, {"a", "b", "c", "d"}]


class _Clock:
    """A fake monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_time_bound_decides_on_a_quiet_stream() -> None:
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=0.5, young_wait_s=None,
                                  clock=clock)
    rng = random.Random(5)
    for r in _background(rng, 70):  # time bounds apply after warm-up + one delay
        assert det.observe(r) == []
    clock.now = 99.0
    det.poll()  # the background's own shared words are judged here, long before
    assert det.next_deadline() is None
    clock.now = 100.0
    det.observe(rec("mallory", code="tag = 'k7Qz91fX'\n"))
    assert det.observe(rec("trent", code="marker = 'k7Qz91fX'\n")) == []
    assert det.next_deadline() == 100.5
    clock.now = 100.4
    assert det.poll() == []  # not due yet, and no record count reached either
    clock.now = 100.5
    alerts = det.poll()
    assert [a.agents for a in alerts] == [("mallory", "trent")]
    assert det.next_deadline() is None
    assert det.poll() == [] and det.finish() == []  # decided once


def test_time_bound_still_lets_a_common_key_be_common() -> None:
    """Within the time bound, a key that more agents use is judged common, not rare."""
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=0.5, clock=clock)
    for r in _background(random.Random(6), 70):
        det.observe(r)
    for i in range(6):  # a task literal every agent uses
        det.observe(rec(f"worker{i}", code="dataset = 'ZEBRA_42'\n"))
    clock.now += 1
    assert not [a for a in det.poll() if "ZEBRA_42" in a.evidence]


def test_without_time_bound_poll_never_decides() -> None:
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=None, young_wait_s=None,
                                  clock=clock)
    for r in _background(random.Random(7), 70):
        det.observe(r)
    det.observe(rec("mallory", code="tag = 'k7Qz91fX'\n"))
    det.observe(rec("trent", code="marker = 'k7Qz91fX'\n"))
    clock.now += 3600
    assert det.next_deadline() is None
    assert det.poll() == []
    assert [a.agents for a in det.finish()] == [("mallory", "trent")]


def test_record_count_bound_comes_first_on_a_busy_stream() -> None:
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=0.5, clock=clock)
    records = _background(random.Random(8), 30)
    records += [rec("mallory", code="tag = 'k7Qz91fX'\n"), rec("trent", code="m = 'k7Qz91fX'\n")]
    records += _background(random.Random(9), 60)
    alerts = [a for r in records for a in det.observe(r)]  # the clock never moves
    assert [a.agents for a in alerts if "k7Qz91fX" in a.evidence] == [("mallory", "trent")]


def test_early_report_of_a_key_that_turns_out_common_is_not_repeated() -> None:
    """Reported on the time bound with two agents; by its record count five agents use
    it (a shared input after all): no report for the newcomers."""
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=0.5, clock=clock)
    for r in _background(random.Random(10), 70):
        det.observe(r)
    clock.now = 50.0
    det.poll()
    det.observe(rec("w0", code="src = 'sales_2024'\n"))
    det.observe(rec("w1", code="src = 'sales_2024'\n"))
    clock.now = 51.0
    assert [a.agents for a in det.poll()] == [("w0", "w1")]
    later = []
    for i in range(2, 6):
        later += det.observe(rec(f"w{i}", code="src = 'sales_2024'\n"))
    for r in _background(random.Random(11), 60):
        later += det.observe(r)
    clock.now = 60.0
    later += det.poll() + det.finish()
    assert not [a for a in later if "sales_2024" in a.evidence]


def test_confirmed_early_report_still_reports_a_second_group() -> None:
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=0.5, clock=clock)
    for r in _background(random.Random(12), 70):
        det.observe(r)
    clock.now = 50.0
    det.poll()
    det.observe(rec("red", code="k = 'k7Qz91fX'\n"))
    det.observe(rec("blue", stdout="k7Qz91fX\n"))
    clock.now = 51.0
    assert [a.agents for a in det.poll()] == [("blue", "red")]
    alerts = []
    for r in _background(random.Random(13), 60):  # the record count confirms it
        alerts += det.observe(r)
    alerts += det.observe(rec("green", code="x = 'k7Qz91fX'\n"))
    for r in _background(random.Random(14), 60):
        alerts += det.observe(r)
    found = [a for a in alerts if "k7Qz91fX" in a.evidence]
    assert [a.agents for a in found] == [("blue", "green", "red")]


def test_a_young_corpus_decides_on_the_long_time_bound() -> None:
    """Before warm-up plus one delay, a quiet stream still gets its decision, later."""
    clock = _Clock()
    det = SharedRareTokenDetector(warmup=20, delay=50, max_wait_s=0.5, young_wait_s=600,
                                  clock=clock)
    for r in _background(random.Random(15), 10):
        det.observe(r)
    clock.now = 1000.0
    det.poll()
    det.observe(rec("mallory", code="tag = 'k7Qz91fX'\n"))
    det.observe(rec("trent", code="marker = 'k7Qz91fX'\n"))
    assert det.next_deadline() == 1600.0
    clock.now = 1001.0
    assert det.poll() == []  # the short bound does not apply yet
    clock.now = 1600.0
    assert [a.agents for a in det.poll()] == [("mallory", "trent")]
