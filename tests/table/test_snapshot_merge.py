"""The snapshot reader's two merges of a file slice agree: column by column (the common case)
and record by record (every payload rule, deletes, expression updates). The column merge is
taken where it applies, and gives the same rows as the record merge."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.table_builder import TableBuilder
from tidemark.errors import TableError
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import SnapshotReader, read_snapshot


def _rows(reader: SnapshotReader) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["ts"], r["v"]) for r in reader.read().to_pylist())


def _both(storage: LocalStorage, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], int]:
    taken = []
    original = SnapshotReader._merge_columns

    def counting(self: SnapshotReader, base: Any, blocks: Any, writer: Any) -> Any:
        merged = original(self, base, blocks, writer)
        taken.append(merged is not None)
        return merged

    monkeypatch.setattr(SnapshotReader, "_merge_columns", counting)
    by_columns = _rows(SnapshotReader(storage))
    monkeypatch.setattr(SnapshotReader, "_merge_columns", lambda self, base, blocks, writer: None)
    by_records = _rows(SnapshotReader(storage))
    return by_columns, by_records, sum(taken)


def test_ordering_values_decide_in_both_merges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b", "c", "d"], value=5)
    t.update(["a"], 3)  # older than the base row: the base row stays
    t.update(["b"], 7)
    t.update(["b", "c"], 6)  # b: arrives later with a smaller value, 7 stays; c: 6 wins
    t.update(["c"], 6)  # a tie: the later arrival wins
    by_columns, by_records, taken = _both(storage, monkeypatch)
    assert by_columns == by_records == [("a", 5, 5), ("b", 7, 7), ("c", 6, 6), ("d", 5, 5)]
    assert taken == 1  # the one file slice, merged column by column


def test_deletes_take_the_record_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"], value=1)
    t.update(["a"], 2)
    t.delete(["b"], 3)
    by_columns, by_records, taken = _both(storage, monkeypatch)
    assert by_columns == by_records == [("a", 2, 2)]
    assert taken == 0


MODEL = "org.apache.hudi.common.model."
PAYLOADS = [
    MODEL + "DefaultHoodieRecordPayload",
    MODEL + "OverwriteWithLatestAvroPayload",
    MODEL + "EventTimeAvroPayload",
]
KEYS = ["a", "b", "c", "d", "e"]
# a write: the keys it updates and their one ordering value
writes = st.lists(st.tuples(st.sets(st.sampled_from(KEYS), min_size=1), st.integers(0, 4)), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(payload=st.sampled_from(PAYLOADS), base_value=st.integers(0, 4), updates=writes)
def test_both_merges_agree_on_any_sequence_of_updates(payload: str, base_value: int, updates: list[Any]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        storage = LocalStorage(tmp)
        t = TableBuilder(storage)
        text = storage.read(".hoodie/hoodie.properties").decode()
        text = re.sub(
            r"(?m)^hoodie\.compaction\.payload\.class=.*$", f"hoodie.compaction.payload.class={payload}", text
        )
        storage.write(".hoodie/hoodie.properties", text.encode())
        t.insert(KEYS[:3], value=base_value)
        for keys, value in updates:
            t.update(sorted(k for k in keys if k in KEYS[:3]) or ["a"], value)
        with pytest.MonkeyPatch.context() as monkeypatch:
            by_columns, by_records, taken = _both(storage, monkeypatch)
        assert by_columns == by_records
        assert taken == 1


def test_read_snapshot_takes_as_of_as_hudi_does(tmp_path: Path) -> None:
    """As `table read --as-of` and the Spark source: a time, not only an exact instant."""
    import datetime as dt

    from tidemark.errors import TableError
    from tidemark.table.snapshot import read_snapshot

    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"], 1)
    t.update(["a"], 2)
    at = dt.datetime.strptime(first[:14], "%Y%m%d%H%M%S")
    between = (at + dt.timedelta(milliseconds=int(first[14:]))).strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
    assert read_snapshot(t.storage, between).column("v").to_pylist() == [1]
    assert read_snapshot(t.storage, "2999-01-01").column("v").to_pylist() == [2]
    with pytest.raises(TableError, match="as_of=2000-01-01: no completed write at or before it"):
        read_snapshot(t.storage, "2000-01-01")
    # 14 digits are compared as text, as Hudi's formatQueryInstant leaves them and Apache's readers
    # compare them: before every millisecond instant of that second (they were padded with 999)
    with pytest.raises(TableError, match=f"as_of={first[:14]}: no completed write at or before it"):
        read_snapshot(t.storage, first[:14])


def test_a_reader_whose_slices_a_clean_deleted_meanwhile_names_the_clean(tmp_path: Path) -> None:
    from tidemark.errors import TableError
    from tidemark.table.compaction import compact
    from tidemark.table_services.clean import CleanConfig, clean

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    reader = SnapshotReader(t.storage)  # its timeline ends at the update
    compact(t.storage)
    clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    # the compacted slice is newer than the reader's timeline, and the clean took the one it needs:
    # read without a word, the group was gone (0 rows); the reader listed it before the clean
    with pytest.raises(
        TableError,
        match=r"changed while this read ran \(the clean \d{17} ran; no such file: .*/p=1/\.?fg-001_.*\); read again",
    ):
        reader.read()
    assert SnapshotReader(t.storage).read().num_rows == 2


def test_a_reader_whose_commit_was_rolled_back_meanwhile_says_so(tmp_path: Path) -> None:
    from tidemark.errors import TableError
    from tidemark.table.write_client import rollback

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    update = t.update(["a"], 2)
    reader = SnapshotReader(t.storage)
    rollback(t.storage, update)
    with pytest.raises(
        TableError,
        match=r"while this read ran \(the rollback \d{17} ran.*; no such file: .*/p=1/\.fg-001_.*\); read again",
    ):
        reader.read()


def test_a_read_as_of_a_slice_an_older_cleaner_took_a_log_file_from_is_refused(tmp_path: Path) -> None:
    # tidemark before 7f67e13 cleaned log files that writes had added to a savepointed slice, and
    # left the slice's base file: read as of those writes, the slice answered older values
    from tidemark.errors import TableError
    from tidemark.table_services.clean import CleanPlan, run_clean
    from tidemark.timeline import CLEAN, create_requested, load_timeline
    from tidemark.timeline import avro_metadata as avro
    from tidemark.timeline.active import next_instant_time

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    second = t.update(["a"], 3)
    third = t.update(["b"], 4)
    logs = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("p=1/.fg-001_*.log.*"))
    assert len(logs) == 3
    plan = CleanPlan("KEEP_LATEST_COMMITS", None, third, {"p=1": (logs[1],)}, (), None, False)
    timeline = load_timeline(t.storage)
    requested = create_requested(
        t.storage, next_instant_time(timeline), CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(t.storage))
    )
    run_clean(t.storage, requested)
    with pytest.raises(TableError, match=rf"as of {second}: the clean {requested.timestamp} deleted {logs[1]}"):
        SnapshotReader(t.storage, as_of=second).read()


def test_a_time_given_as_a_number_is_refused_with_what_to_give(tmp_path: Path) -> None:
    """read_snapshot(storage, as_of=20240101) failed on int.strip."""
    builder = TableBuilder(LocalStorage(tmp_path))
    builder.insert(["a"], 1)
    with pytest.raises(TableError, match=r"as_of=20240101: expected an instant time as text"):
        read_snapshot(builder.storage, as_of=20240101)  # type: ignore[arg-type]


def test_time_travel_at_or_after_a_pending_write_is_refused_as_hudi_does(tmp_path: Path) -> None:
    """As of a time after a write still inflight, the read answered without it, and the same
    query answered with it once it completed (instant times order the timeline); Apache Hudi's
    TimelineUtils.validateTimestampAsOf refuses it."""
    from tidemark.table.write_client import commit_write
    from tidemark.timeline import DELTA_COMMIT, load_timeline, request_new_instant

    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a", "b"], 1)
    inflight, stats = t.upsert_pending(["a"], 2)
    pending = inflight.timestamp
    for as_of in ("2999-01-01", pending):  # at the pending write's time too: Hudi's `>=`
        with pytest.raises(TableError) as refused:
            read_snapshot(t.storage, as_of)
        message = str(refused.value)
        assert f"as_of={as_of}: the deltacommit {pending}, at or before it, is still inflight" in message
        assert f"`tidemark rollback {t.storage.uri} {pending}`" in message
        assert message.endswith(f"read as of a time before {pending}")
    # before it, and the latest snapshot (no time travel), answer as they did
    assert sorted(read_snapshot(t.storage, first).column("v").to_pylist()) == [1, 1]
    assert sorted(read_snapshot(t.storage).column("v").to_pylist()) == [1, 1]
    commit_write(t.storage, inflight, stats, "upsert", t.schema)
    assert sorted(read_snapshot(t.storage, "2999-01-01").column("v").to_pylist()) == [1, 2]
    # a write only requested is as pending
    requested = request_new_instant(t.storage, load_timeline(t.storage), DELTA_COMMIT)
    with pytest.raises(TableError, match=f"the deltacommit {requested.timestamp}, at or before it, is still requested"):
        read_snapshot(t.storage, "2999-01-01")


def test_time_travel_past_a_pending_compaction_or_clustering_answers(tmp_path: Path) -> None:
    """A pending compaction adds no records and a pending clustering rewrites them unchanged, so
    Hudi leaves both out of the check; a pending insert_overwrite (a replacecommit without a
    clustering plan) is refused."""
    from tidemark.table.compaction import schedule_compaction
    from tidemark.table.write_client import start_write
    from tidemark.timeline import REPLACE_COMMIT

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    t.insert(["b"], 1)
    t.update(["a"], 2)
    compaction = schedule_compaction(t.storage)
    assert compaction is not None
    assert not compaction.is_completed
    t.plan_clustering("fg-002")
    assert sorted(read_snapshot(t.storage, "2999-01-01").column("v").to_pylist()) == [1, 2]
    overwrite = start_write(t.storage, REPLACE_COMMIT, "insert_overwrite")
    with pytest.raises(
        TableError, match=f"the replacecommit {overwrite.timestamp}, at or before it, is still inflight"
    ):
        read_snapshot(t.storage, "2999-01-01")
