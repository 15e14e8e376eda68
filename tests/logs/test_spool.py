"""The spool file: order, partial delivery, torn lines, several writers."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from cellblock.logs.record import RunRecord
from cellblock.logs.spool import Spool

from .helpers import make_record


def test_drain_delivers_in_order_and_empties_the_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.jsonl")
    assert not spool.pending()
    spool.append([make_record(i) for i in range(7)])
    spool.append([make_record(7)])
    assert spool.pending_count() == 8
    got: list[list[str]] = []
    assert spool.drain(lambda b: got.append([r.run_id for r in b]), batch_size=3) == 8
    assert got == [[f"run-{i:06d}" for i in range(j, min(j + 3, 8))] for j in (0, 3, 6)]
    assert not spool.pending()
    assert not spool.path.exists()


def test_failed_delivery_keeps_the_rest_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.jsonl")
    spool.append([make_record(i) for i in range(6)])
    delivered: list[str] = []

    def flaky(batch: list[RunRecord]) -> None:
        if len(delivered) >= 2:
            raise ConnectionError("down")
        delivered.extend(r.run_id for r in batch)

    with pytest.raises(ConnectionError):
        spool.drain(flaky, batch_size=2)
    assert delivered == ["run-000000", "run-000001"]
    assert spool.pending_count() == 4
    rest: list[str] = []
    spool.drain(lambda b: rest.extend(r.run_id for r in b))
    assert rest == [f"run-{i:06d}" for i in range(2, 6)]


def test_a_torn_line_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.jsonl")
    spool.append([make_record(1)])
    with spool.path.open("ab") as fh:
        fh.write(b'{"run_id":"torn","started_')  # a writer died mid-line
    spool.append([make_record(2)])
    got: list[str] = []
    spool.drain(lambda b: got.extend(r.run_id for r in b))
    assert got == ["run-000001", "run-000002"]


def _writer(path: str, k: int) -> None:
    spool = Spool(Path(path))
    for j in range(50):
        spool.append([make_record(k * 100 + j)])


def test_concurrent_processes_append_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), k)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got: list[str] = []
    Spool(path).drain(lambda b: got.extend(r.run_id for r in b))
    assert sorted(got) == sorted(f"run-{k * 100 + j:06d}" for k in range(4) for j in range(50))
    for k in range(4):  # each writer's records stay in its own order
        mine = [g for g in got if g.startswith(f"run-000{k}")]
        assert mine == sorted(mine)
