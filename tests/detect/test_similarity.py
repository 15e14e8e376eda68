from __future__ import annotations

import random

from cellblock.detect.similarity import NearDuplicateCodeDetector

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
