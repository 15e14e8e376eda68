"""The run log store against SQLite and a real PostgreSQL: chain, idempotency, alerts."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from cellblock.detect.base import Alert
from cellblock.logs.chain import GENESIS_HASH, canonical_json, link_hash
from cellblock.logs.record import RunRecord
from cellblock.logs.store import InvalidRecord, Store

from .helpers import make_record

pytestmark = pytest.mark.integration


def test_append_chains_records_in_order(db_url: str) -> None:
    store = Store(db_url)
    try:
        recs = [make_record(i) for i in range(5)]
        result = store.append(recs)
        assert [s.seq for s in result.inserted] == [1, 2, 3, 4, 5]
        assert result.inserted[0].prev_hash == GENESIS_HASH
        for prev, cur in zip(result.inserted, result.inserted[1:], strict=False):
            assert cur.prev_hash == prev.hash
        first = result.inserted[0]
        assert first.hash == link_hash(GENESIS_HASH, canonical_json(recs[0]))
        assert store.head() == (5, result.inserted[-1].hash)
        stored = store.list_runs()
        assert [s.record for s in stored] == recs
        assert store.verify().ok
    finally:
        store.close()


def test_duplicate_run_id_is_a_noop_and_different_content_a_conflict(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.append([make_record(1), make_record(2)])
        again = store.append([make_record(2), make_record(3)])
        assert again.duplicates == ["run-000002"]
        assert [s.record.run_id for s in again.inserted] == ["run-000003"]
        changed = store.append([make_record(1, stdout_raw="forged\n")])
        assert changed.conflicts == ["run-000001"]
        assert changed.inserted == []
        assert store.count_runs() == 3
        assert store.get_run("run-000001").record.stdout_raw == "1\n"  # type: ignore[union-attr]
        # the same run_id twice inside one batch: first wins, identical repeat is a no-op
        batch = store.append([make_record(4), make_record(4), make_record(4, code="x")])
        assert len(batch.inserted) == 1
        assert batch.duplicates == ["run-000004"]
        assert batch.conflicts == ["run-000004"]
        assert store.verify().ok
    finally:
        store.close()


def test_over_long_ids_are_rejected(db_url: str) -> None:
    store = Store(db_url)
    try:
        with pytest.raises(InvalidRecord):
            store.append([make_record(1, run_id="x" * 129)])
        assert store.count_runs() == 0
    finally:
        store.close()


def test_runs_table_refuses_update_and_delete(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.append([make_record(1)])
        with pytest.raises(Exception, match="append-only"), store.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET body = 'x'"))
        with pytest.raises(Exception, match="append-only"), store.engine.begin() as conn:
            conn.execute(text("DELETE FROM runs"))
        assert store.count_runs() == 1
    finally:
        store.close()


def _drop_guards(store: Store) -> None:
    """What an attacker with DDL rights would do first."""
    with store.engine.begin() as conn:
        if store.dialect == "sqlite":
            conn.execute(text("DROP TRIGGER runs_append_only_update"))
            conn.execute(text("DROP TRIGGER runs_append_only_delete"))
        else:
            conn.execute(text("DROP TRIGGER runs_append_only ON runs"))


@pytest.mark.parametrize(
    ("tamper", "broken_seq"),
    [
        ("UPDATE runs SET body = replace(body, 'print(3)', 'print(4)') WHERE seq = 3", 3),
        ("DELETE FROM runs WHERE seq = 2", 2),
        ("DELETE FROM runs WHERE seq = 5", 5),
        ("UPDATE runs SET run_id = 'other' WHERE seq = 4", 4),
    ],
)
def test_tampering_is_evident(db_url: str, tamper: str, broken_seq: int) -> None:
    store = Store(db_url)
    try:
        store.append([make_record(i) for i in range(1, 6)])
        assert store.verify().ok
        _drop_guards(store)
        with store.engine.begin() as conn:
            conn.execute(text(tamper))
        result = store.verify()
        assert not result.ok
        assert result.first_broken_seq == broken_seq
        assert result.reason
    finally:
        store.close()


def test_rehashed_edit_still_breaks_the_next_link(db_url: str) -> None:
    """Editing a record and fixing up its own hash is not enough: its successor links to
    the old hash."""
    store = Store(db_url)
    try:
        store.append([make_record(i) for i in range(1, 4)])
        _drop_guards(store)
        forged = make_record(2, stdout_raw="forged\n")
        prev = store.list_runs()[0].hash
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET body = :b, hash = :h WHERE seq = 2"),
                         {"b": canonical_json(forged),
                          "h": link_hash(prev, canonical_json(forged))})
        result = store.verify()
        assert result.first_broken_seq == 3
    finally:
        store.close()


def test_alerts_are_deduplicated_by_id(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.append([make_record(1, agent="a"), make_record(2, agent="b")])
        alert = Alert(detector="shared-token", severity="high", agents=("a", "b"),
                      run_ids=("run-000001", "run-000002"), evidence="tok <b>", details={"n": 1})
        assert store.add_alerts([alert, alert], trigger_seq=2) == [alert]
        assert store.add_alerts([alert]) == []
        found = store.list_alerts()
        assert len(found) == 1
        assert found[0].alert == alert
        assert found[0].trigger_seq == 2
        assert [a.alert_id for a in store.list_alerts(agent_id="b")] == [alert.alert_id]
        assert store.list_alerts(agent_id="c") == []
        assert len(store.list_alerts(run_id="run-000002")) == 1
        assert store.list_alerts(run_id="run-00000") == []
        summary = {a.agent_id: (a.runs, a.alerts) for a in store.agents()}
        assert summary == {"a": (1, 1), "b": (1, 1)}
    finally:
        store.close()


def test_concurrent_writers_never_fork_the_chain(db_url: str) -> None:
    """Several stores (as several processes would) append at once: one chain, no gaps."""
    stores = [Store(db_url) for _ in range(4)]
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for j in range(10):
                stores[k].append([make_record(k * 1000 + j * 10 + n) for n in range(5)])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert stores[0].count_runs() == 200
        result = stores[0].verify()
        assert result.ok, result.reason
        assert result.head_seq == 200
    finally:
        for s in stores:
            s.close()


def test_reopening_skips_migration_and_keeps_data(db_url: str) -> None:
    store = Store(db_url)
    store.append([make_record(1)])
    store.close()
    again = Store(db_url)
    try:
        assert again.has_schema()
        assert again.count_runs() == 1
        assert again.append([make_record(2)]).inserted[0].seq == 2
    finally:
        again.close()


def test_records_from_newer_runners_keep_unknown_fields_out() -> None:
    rec = RunRecord.model_validate({**make_record(1).model_dump(), "future_field": 1})
    assert "future_field" not in canonical_json(rec)


def test_recent_runs_are_the_newest_oldest_first(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.append([make_record(i) for i in range(12)])
        assert [r.seq for r in store.recent_runs(5)] == [8, 9, 10, 11, 12]
        assert [r.seq for r in store.recent_runs(100)] == list(range(1, 13))
        assert store.recent_runs(0) == []
    finally:
        store.close()
