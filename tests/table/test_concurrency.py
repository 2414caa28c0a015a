"""Several writers on one table, through the library (no Spark): heartbeats, optimistic
concurrency at commit, early conflict detection from markers, and Apache's RFC-56 defects as
regression tests. The Spark processes side by side are in tests/spark/test_concurrent_writers.py."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import FaultyStorage
from tests.support.listings import CountedListings
from tests.support.model import apache_snapshot
from tests.support.s3 import Answer, FaultProxy, Forward, create_bucket, is_conditional_put, s3_error, s3_options
from tests.support.table_builder import PARTITION, TableBuilder, _table, write_beat_at
from tidemark.errors import (
    InstantStateError,
    InvalidInstantError,
    LiveWriterError,
    LockTimeoutError,
    StorageError,
    WriteConflictError,
)
from tidemark.logformat import DeleteRecord
from tidemark.storage import LocalStorage, Storage, open_storage
from tidemark.storage.base import DirListing
from tidemark.table import heartbeat, write_client
from tidemark.table.compaction import compact, schedule_compaction
from tidemark.table.concurrency import COUNTERS, SINGLE_WRITER, ConcurrencyConfig
from tidemark.table.conflict import EarlyConflictDetector, WriteStart, file_group, shared_file_groups
from tidemark.table.heartbeat import Heartbeat, heartbeat_path, heartbeat_status
from tidemark.table.lock import TableLock
from tidemark.table.markers import IOType, create_marker, write_marker_type
from tidemark.table.write_client import (
    PendingWrite,
    begin_write,
    remove_zombie_files,
    rollback,
    rollback_pending_writes,
)
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint
from tidemark.timeline import (
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    ROLLBACK,
    Instant,
    State,
    WriteStat,
    active,
    create_requested,
    load_timeline,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.archived import latest_archival

#: heartbeats that stay fresh for the length of a test
LIVE = ConcurrencyConfig(heartbeat_interval_ms=60_000)
#: the same, without the table lock
SINGLE_WRITER_LIVE = ConcurrencyConfig(heartbeat_interval_ms=60_000, mode=SINGLE_WRITER)
#: a writer judging others with this counts any heartbeat older than 50 ms as expired
IMPATIENT = ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1)


@pytest.fixture
def table(tmp_path: Path) -> TableBuilder:
    builder = TableBuilder(LocalStorage(tmp_path))
    builder.insert(["a", "b"], 1)  # fg-001
    builder.insert(["c", "d"], 1)  # fg-002
    return builder


def _append(
    t: TableBuilder, write: PendingWrite, group: str, keys: list[str], value: int, attempt: int = 0
) -> WriteStat:
    rows = _table(keys, value)
    ctx = TaskContext(write.instant, 0, 7, attempt)
    return append_log_blocks(t.storage, ctx, PARTITION, group, t.groups[group], None, rows, rows["id"], [], t.schema)


def _files_of(storage: LocalStorage, instant: str) -> list[str]:
    """Data files (and markers, heartbeats) that carry ``instant`` in their name or folder."""
    return sorted(
        str(p.relative_to(storage.root))
        for p in storage.root.rglob("*")
        if p.is_file() and instant in str(p.relative_to(storage.root)) and "/rollback" not in str(p)
    )


def test_writes_to_disjoint_file_groups_both_commit(table: TableBuilder) -> None:
    a = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    b = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    stat_a = _append(table, a, "fg-001", ["a"], 5)
    stat_b = _append(table, b, "fg-002", ["c"], 6)
    b.commit([stat_b], "upsert", table.schema)
    a.commit([stat_a], "upsert", table.schema)
    assert table.snapshot() == {"a": 5, "b": 1, "c": 6, "d": 1}
    assert not (table.storage.root / heartbeat_path(a.instant)).exists()


def test_the_second_commit_to_a_shared_file_group_loses_and_leaves_nothing(table: TableBuilder) -> None:
    before = COUNTERS.snapshot()["conflicts_at_commit"]
    a = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    b = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    stat_a = _append(table, a, "fg-001", ["a"], 5)
    stat_b = _append(table, b, "fg-001", ["b"], 7)
    b.commit([stat_b], "upsert", table.schema)  # the first to commit wins, whatever its instant time
    with pytest.raises(WriteConflictError) as caught:
        a.commit([stat_a], "upsert", table.schema)
    err = caught.value
    assert (err.instant, err.other, err.stage) == (a.instant, b.instant, "commit")
    assert err.file_groups == (f"{PARTITION}/fg-001",)
    assert str(err) == (
        f"write conflict: write {a.instant} and committed write {b.instant} both touch 1 file group(s): "
        f"{PARTITION}/fg-001 (found at commit); this write was rolled back: write it again"
    )
    assert COUNTERS.snapshot()["conflicts_at_commit"] == before + 1
    # the loser is rolled back: no data file, marker or heartbeat of it is left
    assert _files_of(table.storage, a.instant) == []
    assert load_timeline(table.storage).find(a.instant) is None
    assert table.snapshot() == {"a": 1, "b": 7, "c": 1, "d": 1}


def test_a_compaction_planned_during_a_write_wins(table: TableBuilder) -> None:
    table.update(["a"], 2)  # fg-001 gets a log file, so it has something to compact
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    stat = _append(table, w, "fg-001", ["b"], 9)
    planned = schedule_compaction(table.storage)
    assert planned is not None
    with pytest.raises(WriteConflictError, match=f"and planned compaction {planned.timestamp} both touch"):
        w.commit([stat], "upsert", table.schema)
    compact(table.storage)
    assert table.snapshot() == {"a": 2, "b": 1, "c": 1, "d": 1}


def test_a_compaction_completed_during_a_write_is_named_as_one(table: TableBuilder) -> None:
    # it was called a "committed write": a user looking for it found a compaction on the timeline
    table.update(["a"], 2)
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    stat = _append(table, w, "fg-001", ["b"], 9)
    done = compact(table.storage)
    assert done is not None
    with pytest.raises(WriteConflictError, match=f"and committed compaction {done.timestamp} both touch"):
        w.commit([stat], "upsert", table.schema)
    assert table.snapshot() == {"a": 2, "b": 1, "c": 1, "d": 1}


def test_a_write_after_a_planned_compaction_goes_to_the_new_slice_without_conflict(table: TableBuilder) -> None:
    table.update(["a"], 2)
    planned = schedule_compaction(table.storage)
    assert planned is not None
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    table.groups["fg-001"] = planned.timestamp  # the write's index routes it to the pending compaction's slice
    stat = _append(table, w, "fg-001", ["b"], 9)
    w.commit([stat], "upsert", table.schema)
    compact(table.storage)
    assert table.snapshot() == {"a": 2, "b": 9, "c": 1, "d": 1}


def test_insert_overwrite_conflicts_with_any_write_to_its_partition(table: TableBuilder) -> None:
    w = begin_write(table.storage, DELTA_COMMIT, "insert", LIVE)
    rows = _table(["z"], 3)
    # a brand-new file group: no file id is shared, the partition is
    stat = create_base_file(
        table.storage, TaskContext(w.instant, 0, 1, 0), PARTITION, "fg-new", rows, rows["id"], table.schema
    )
    table.insert_overwrite(["x"], 4)
    with pytest.raises(WriteConflictError) as caught:
        w.commit([stat], "insert", table.schema)
    assert f"{PARTITION}/fg-new" in caught.value.file_groups or f"{PARTITION}/*" in caught.value.file_groups
    assert table.snapshot() == {"x": 4}


def test_conflicts_on_a_partitioned_table_with_underscores_and_dashes(tmp_path: Path) -> None:
    """HUDI-5831 (the commit check never fired on partitioned tables) and ids parsed by splitting
    on ``_``: partition values and file ids here contain both ``_`` and ``-``, and one file id is
    a prefix of another."""
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    partition = "p=a_b-c_1"
    schema = t.schema
    rows = _table(["k1"], 1, partition)
    setup = begin_write(storage, DELTA_COMMIT, "insert", LIVE)
    stats = [
        create_base_file(storage, TaskContext(setup.instant, i, 1, 0), partition, fid, rows, rows["id"], schema)
        for i, fid in enumerate(("fg_1-x", "fg_1-x_2"))
    ]
    setup.commit(stats, "insert", schema)

    def update(w: PendingWrite, fid: str) -> WriteStat:
        r = _table(["k1"], 5, partition)
        return append_log_blocks(
            storage, TaskContext(w.instant, 0, 2, 0), partition, fid, setup.instant, None, r, r["id"], [], schema
        )

    a = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    b = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    stat_a, stat_b = update(a, "fg_1-x"), update(b, "fg_1-x_2")
    # early: b's markers of fg_1-x_2 are not a's fg_1-x
    EarlyConflictDetector(storage, LIVE, b.start).check([file_group(partition, "fg_1-x_2")])
    a.commit([stat_a], "upsert", schema)
    b.commit([stat_b], "upsert", schema)  # a prefix of a file id is not the file id
    c = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    stat_c = update(c, "fg_1-x_2")
    d = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    d.commit([update(d, "fg_1-x_2")], "upsert", schema)
    with pytest.raises(WriteConflictError) as caught:
        c.commit([stat_c], "upsert", schema)
    assert caught.value.file_groups == (f"{partition}/fg_1-x_2",)


def test_shared_file_groups_of_whole_partitions() -> None:
    assert shared_file_groups({"p=1/a", "p=2/b"}, {"p=1/*"}) == ["p=1/a"]
    assert shared_file_groups({"p=1/a"}, {"p=1/a_b", "p=10/a"}) == []
    assert shared_file_groups({"a"}, {"*"}) == ["a"]
    assert shared_file_groups({"p=1/*"}, {"p=1/*", "p=2/*"}) == ["p=1/*"]


# --- early detection ------------------------------------------------------------------------------


def _marker(storage: Storage, w: PendingWrite, group: str, base_instant: str, attempt: int = 0) -> None:
    name = f".{group}_{base_instant}.log.1_0-1-{attempt}"
    create_marker(storage, w.instant, f"{PARTITION}/{name}", IOType.APPEND)


def test_early_detection_the_later_writer_gives_up(table: TableBuilder) -> None:
    early = ConcurrencyConfig(heartbeat_interval_ms=60_000, early_detection=True)
    a = begin_write(table.storage, DELTA_COMMIT, "upsert", early)
    b = begin_write(table.storage, DELTA_COMMIT, "upsert", early)
    _marker(table.storage, a, "fg-001", table.groups["fg-001"])
    _marker(table.storage, b, "fg-001", table.groups["fg-001"])
    group = [f"{PARTITION}/fg-001"]
    before = COUNTERS.snapshot()["conflicts_early"]
    EarlyConflictDetector(table.storage, early, a.start).check(group)  # the earlier one goes on
    with pytest.raises(WriteConflictError) as caught:
        EarlyConflictDetector(table.storage, early, b.start).check(group)
    assert (caught.value.instant, caught.value.other, caught.value.stage) == (b.instant, a.instant, "early")
    assert "found at a marker" in str(caught.value)
    assert COUNTERS.snapshot()["conflicts_early"] == before + 1
    # another file group, and the same writer's own marker made again by a retried attempt: no conflict
    EarlyConflictDetector(table.storage, early, b.start).check([f"{PARTITION}/fg-002"])
    _marker(table.storage, a, "fg-001", table.groups["fg-001"], attempt=1)
    _marker(table.storage, a, "fg-001", table.groups["fg-001"], attempt=1)
    EarlyConflictDetector(table.storage, early, a.start).check(group)


def test_early_detection_ignores_dead_writers_and_finds_commits(table: TableBuilder) -> None:
    early = ConcurrencyConfig(heartbeat_interval_ms=60_000, early_detection=True, early_check_commit_conflict=True)
    dead = begin_write(table.storage, DELTA_COMMIT, "upsert", early)
    _marker(table.storage, dead, "fg-001", table.groups["fg-001"])
    dead.heartbeat.stop(delete=False)
    write_beat_at(table.storage, dead.instant, 1000)  # its last beat long ago
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", early)
    detector = EarlyConflictDetector(table.storage, early, w.start)
    detector.check([f"{PARTITION}/fg-001"])
    table.update(["c"], 3)  # fg-002 committed by someone else after w started
    with pytest.raises(WriteConflictError, match="committed write"):
        detector.check([f"{PARTITION}/fg-002"])


class _ListingFails(LocalStorage):
    """A local storage whose folder listings fail the first ``failures`` times (an endpoint that
    blinks), to show the early check retries and then carries on."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.failures = failures

    def list_dir(self, folder: str) -> DirListing:
        if self.failures > 0:
            self.failures -= 1
            raise StorageError(f"cannot list {folder}: connection reset (injected)")
        return super().list_dir(folder)


def test_a_failing_early_check_is_retried_and_checking_goes_on(table: TableBuilder) -> None:
    early = ConcurrencyConfig(heartbeat_interval_ms=60_000, early_detection=True)
    a = begin_write(table.storage, DELTA_COMMIT, "upsert", early)
    b = begin_write(table.storage, DELTA_COMMIT, "upsert", early)
    _marker(table.storage, a, "fg-001", table.groups["fg-001"])
    flaky = _ListingFails(table.storage.root, failures=2)
    detector = EarlyConflictDetector(flaky, early, b.start, _sleep=lambda _: None)
    with pytest.raises(WriteConflictError):  # two failures, then the retry finds the conflict
        detector.check([f"{PARTITION}/fg-001"])
    errors = COUNTERS.snapshot()["early_check_errors"]
    flaky.failures = 100
    detector.check([f"{PARTITION}/fg-001"])  # keeps failing: counted, and the write goes on
    assert COUNTERS.snapshot()["early_check_errors"] == errors + 1
    flaky.failures = 0
    with pytest.raises(WriteConflictError):  # and the next check works again
        detector.check([f"{PARTITION}/fg-001"])


# --- heartbeats -----------------------------------------------------------------------------------


def test_a_live_writer_is_never_rolled_back_and_a_dead_one_is(table: TableBuilder) -> None:
    # dead after 1 s without a beat; the live one beats every 250 ms, so a busy machine's late
    # beat does not make it look dead
    config = ConcurrencyConfig(heartbeat_interval_ms=250, heartbeat_tolerable_misses=4)
    live = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    stat = _append(table, live, "fg-001", ["a"], 8)
    dead = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    _append(table, dead, "fg-002", ["c"], 8)
    dead.heartbeat.stop(delete=False)  # its driver died: the file stays, nobody beats
    with pytest.raises(LiveWriterError, match=f"write {dead.instant} is still running"):
        rollback(table.storage, dead.instant, config)
    assert rollback_pending_writes(table.storage, config) == []
    time.sleep(1.3)  # past 4 x 250 ms for the dead one
    assert heartbeat_status(table.storage, dead.instant, config).expired
    assert not heartbeat_status(table.storage, live.instant, config).expired
    done = rollback_pending_writes(table.storage, config)
    assert [r.rolled_back.timestamp for r in done] == [dead.instant]
    with pytest.raises(LiveWriterError):
        rollback(table.storage, live.instant, config)
    live.commit([stat], "upsert", table.schema)
    assert table.snapshot() == {"a": 8, "b": 1, "c": 1, "d": 1}
    assert _files_of(table.storage, dead.instant) == []


def test_a_rollback_waits_for_the_table_lock_a_stalled_commit_holds(table: TableBuilder) -> None:
    """A writer stalled inside its commit (holding the table lock) past its heartbeat's expiry:
    `tidemark rollback` took it for dead without the lock and deleted its files, and the writer,
    resumed, completed the write anyway (its rows lost, the command saying it committed)."""
    stalled = begin_write(table.storage, DELTA_COMMIT, "upsert", IMPATIENT)
    _append(table, stalled, "fg-002", ["c"], 8)
    stalled.heartbeat.stop(delete=False)
    time.sleep(0.2)
    assert heartbeat_status(table.storage, stalled.instant, IMPATIENT).expired
    files = _files_of(table.storage, stalled.instant)  # its instant files and heartbeat
    commit_lock = TableLock(table.storage, LIVE)  # the commit's, renewed while it stalls
    commit_lock.acquire()
    try:
        impatient_waiter = dataclasses.replace(IMPATIENT, lock_wait_ms=300, lock_num_retries=0)
        with pytest.raises(LockTimeoutError, match="held by"):
            rollback(table.storage, stalled.instant, impatient_waiter)
        assert _files_of(table.storage, stalled.instant) == files  # nothing deleted
        # the writer goes on and completes its write while a rollback waits: that one rolls nothing back
        waited: list[BaseException] = []

        def roll_back() -> None:
            try:
                rollback(table.storage, stalled.instant, dataclasses.replace(IMPATIENT, lock_wait_ms=10_000))
            except BaseException as e:  # handed to the test's thread
                waited.append(e)

        waiting = threading.Thread(target=roll_back)
        waiting.start()
        time.sleep(0.5)
        active.transition_to_completed(table.storage, stalled.inflight, b"{}", finished_by=None)
    finally:
        commit_lock.release()
    waiting.join(20)
    assert len(waited) == 1, waited
    assert isinstance(waited[0], InstantStateError)
    assert f"write {stalled.instant} completed while this rollback waited for the table lock" in str(waited[0])
    assert load_timeline(table.storage).find(stalled.instant, DELTA_COMMIT).is_completed  # type: ignore[union-attr]
    assert table.snapshot()["c"] == 8  # its log file was left alone by both rollbacks: its row is read


def test_a_pending_write_dated_ahead_of_this_clock_is_told_as_such_and_not_rolled_back(table: TableBuilder) -> None:
    # an Apache writer east of UTC on a LOCAL table stamps its local time: 5.5 hours ahead here
    ahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=5, minutes=30)
    stamped = ahead.strftime("%Y%m%d%H%M%S000")
    create_requested(table.storage, stamped, DELTA_COMMIT)
    status = heartbeat_status(table.storage, stamped, IMPATIENT)
    assert not status.expired
    requested = f".hoodie/{stamped}.deltacommit.requested"
    assert status.describe().startswith(f"no heartbeat, and its instant time ({requested}) is dated 5:")
    assert "ahead of this machine's clock" in status.describe()
    with pytest.raises(LiveWriterError) as refused:
        rollback(table.storage, stamped, IMPATIENT)
    assert "only once this machine's clock has passed that time, in 5:" in str(refused.value)
    assert f"if that writer is surely dead, remove {requested} by hand" in str(refused.value)
    assert "once no heartbeat has come for 50 ms, or" not in str(refused.value)
    # a heartbeat beaten by a clock 10 minutes ahead: live until this clock passes it
    (table.storage.root / requested).unlink()
    pending = begin_write(table.storage, DELTA_COMMIT, "upsert", IMPATIENT)
    pending.heartbeat.stop(delete=False)
    table.storage.write(heartbeat_path(pending.instant), str(int(time.time() * 1000) + 600_000).encode())
    time.sleep(0.2)  # past the 50 ms expiry
    status = heartbeat_status(table.storage, pending.instant, IMPATIENT)
    assert not status.expired
    assert f"its heartbeat ({heartbeat_path(pending.instant)}) is dated 0:" in status.describe()
    with pytest.raises(LiveWriterError, match=re.escape(f"remove {heartbeat_path(pending.instant)} by hand")):
        rollback(table.storage, pending.instant, IMPATIENT)


def test_a_pending_instant_whose_time_is_no_date(table: TableBuilder) -> None:
    # Hudi's special instant times are older than every other: without a heartbeat, long dead
    create_requested(table.storage, "00000000000001", DELTA_COMMIT)
    assert heartbeat_status(table.storage, "00000000000001", LIVE).expired
    assert [r.rolled_back.timestamp for r in rollback_pending_writes(table.storage, LIVE)] == ["00000000000001"]
    # a damaged one (month 13) cannot be judged: one error naming its file, nothing rolled back
    create_requested(table.storage, "20261327000000000", DELTA_COMMIT)
    named = "the pending instant .hoodie/20261327000000000.deltacommit.requested has no heartbeat, and its instant "
    with pytest.raises(InvalidInstantError, match=re.escape(named + "time is not a date")):
        rollback_pending_writes(table.storage, LIVE)
    removable = re.escape("remove .hoodie/20261327000000000.deltacommit.requested by hand")
    with pytest.raises(InvalidInstantError, match=removable):
        rollback(table.storage, "20261327000000000", LIVE)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_write_rolled_back_by_another_writer_cannot_commit(table: TableBuilder, end: str) -> None:
    """Also when its job failed (``abort``): its tasks found it no longer pending and stopped. That
    ended in exit 1, 'failed ... and its rollback failed too (... was rolled back already ...); the
    next write will roll it back', though nothing was left to roll back."""
    config = ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1)
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    stat = _append(table, w, "fg-001", ["a"], 8)
    w.heartbeat.stop(delete=False)  # paused: no beat lands
    time.sleep(0.15)
    (taken,) = rollback_pending_writes(table.storage, IMPATIENT)
    assert taken.rolled_back.timestamp == w.instant
    late = _append(table, w, "fg-002", ["b"], 8)  # its job ran on after the rollback (a stall, seen on S3)
    # lost as to a conflict (`tidemark write` exits 3): it was "no longer inflight", exit 1
    ending = (lambda: w.commit([stat, late], "upsert", table.schema)) if end == "commit" else w.abort
    with pytest.raises(WriteConflictError) as lost:
        ending()
    assert str(lost.value) == (
        f"write conflict: write {w.instant} on {table.storage.uri} was rolled back by rollback "
        f"{taken.rollback_instant.timestamp}, of another process that took it for dead (its heartbeat had "
        "expired); nothing was completed: write it again"
    )
    assert table.snapshot() == {"a": 1, "b": 1, "c": 1, "d": 1}
    # what it wrote after the rollback went with it: before, it stayed until the next write
    assert not (table.storage.root / late.path).exists()
    assert _files_of(table.storage, w.instant) == []  # nor its marker


@pytest.mark.parametrize("stopped_at", [".rollback.inflight", ".deltacommit.inflight"])
def test_a_write_whose_rollback_by_another_writer_stopped_half_way_cannot_commit(
    table: TableBuilder, stopped_at: str
) -> None:
    """The other process died in its rollback of this write (planned, or its files deleted) before
    the write's inflight file went: the write woke and committed, exit 0, with its log file gone
    (both readers read the old value) or taken by that rollback when it was finished."""
    config = ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1)
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    stat = _append(table, w, "fg-001", ["a"], 8)
    w.heartbeat.stop(delete=False)  # paused: no beat lands
    time.sleep(0.15)
    other = FaultyStorage(table.storage)
    other.arm_at(f"{w.instant}.deltacommit.inflight" if stopped_at == ".deltacommit.inflight" else stopped_at)
    with pytest.raises(StorageError):  # its lease left behind, a second long
        rollback_pending_writes(other, dataclasses.replace(IMPATIENT, lock_lease_ms=1_000))
    (stopped,) = load_timeline(table.storage).pending().of_actions(ROLLBACK)
    w.heartbeat = Heartbeat(table.storage, w.instant, config).start()  # the writer wakes
    with pytest.raises(WriteConflictError) as lost:
        w.commit([stat], "upsert", table.schema)
    assert str(lost.value).startswith(
        f"write conflict: write {w.instant} on {table.storage.uri} was rolled back by rollback {stopped.timestamp}, "
    )
    assert table.snapshot() == {"a": 1, "b": 1, "c": 1, "d": 1}
    rollback_pending_writes(table.storage, IMPATIENT)  # the next writer finishes that rollback
    assert load_timeline(table.storage).find(w.instant, DELTA_COMMIT) is None
    theirs = apache_snapshot(str(table.storage.root))
    assert dict(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist(), strict=True)) == table.snapshot()


@pytest.mark.parametrize("markers", ["readable", "MARKERS0 damaged"])
def test_what_a_zombie_writes_after_its_rollback_is_removed_before_archival_shows_it(
    table: TableBuilder, markers: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer that stalled past its heartbeat was rolled back, then woke and wrote one more log
    file (its marker first). Readers skipped that file while the rolled-back instant was newer
    than the active timeline; once archival moved past it, both readers took its blocks for an
    archived commit's and showed the rolled-back value. Archival (and the next write) removes it first.
    With that marker folder's ``MARKERS0`` damaged (not UTF-8), every later write, compaction and
    archival stopped on it; the file is now found by listing, with a warning naming the damaged one."""
    zombie = begin_write(table.storage, DELTA_COMMIT, "upsert", IMPATIENT)
    zombie.heartbeat.stop(delete=False)  # stalled: no beat lands
    time.sleep(0.15)
    assert [r.rolled_back.timestamp for r in rollback_pending_writes(table.storage, IMPATIENT)] == [zombie.instant]
    late = _append(table, zombie, "fg-001", ["a"], 99)  # woke up and went on
    damaged = f".hoodie/.temp/{zombie.instant}/MARKERS0"
    if markers == "MARKERS0 damaged":
        for info in list(table.storage.list(f".hoodie/.temp/{zombie.instant}/")):
            table.storage.delete(info.path)
        write_marker_type(table.storage, zombie.instant)
        table.storage.write(damaged, b"p\xff\xfe\n")
    assert table.snapshot()["a"] == 1
    for v in range(2, 7):
        table.update(["b"], v)
    clean(table.storage, CleanConfig(commits_retained=1))
    with caplog.at_level(logging.WARNING, logger="tidemark.write"):
        archive(table.storage, ArchiveConfig(min_commits=1, max_commits=2))  # the next write would too
    if markers == "MARKERS0 damaged":
        assert f"{table.storage.full_uri(damaged)} is not a MARKERS file (not UTF-8 at byte 1)" in caplog.text
        assert f"1 files of it: {late.path}; they are removed, as that write was rolled back" in caplog.text
    assert not (table.storage.root / late.path).exists()
    assert not (table.storage.root / ".hoodie" / ".temp" / zombie.instant).exists()
    assert remove_zombie_files(table.storage) == []
    assert load_timeline(table.storage).write_instants().instants[0].timestamp > zombie.instant
    assert table.snapshot() == {"a": 1, "b": 6, "c": 1, "d": 1}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(table.storage.root)).to_pylist()} == table.snapshot()


def test_replacecommit_writes_are_checked_too(table: TableBuilder) -> None:
    w = begin_write(table.storage, REPLACE_COMMIT, "insert_overwrite", LIVE)
    rows = _table(["q"], 2)
    stat = create_base_file(
        table.storage, TaskContext(w.instant, 0, 1, 0), PARTITION, "fg-q", rows, rows["id"], table.schema
    )
    table.update(["a"], 3)
    with pytest.raises(WriteConflictError, match="p=1/fg-001"):
        w.commit([stat], "insert_overwrite", table.schema, replaced_file_ids={PARTITION: ["fg-001", "fg-002"]})
    assert table.snapshot() == {"a": 3, "b": 1, "c": 1, "d": 1}


def test_a_write_that_started_under_a_pending_insert_overwrite_loses_to_it(table: TableBuilder) -> None:
    """The insert_overwrite was pending when the upsert started, and the upsert took it for a
    clustering plan it had seen: both committed, and the upsert's rows went with the groups the
    overwrite replaced."""
    overwrite = begin_write(table.storage, REPLACE_COMMIT, "insert_overwrite", LIVE)
    upsert = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    rows = _table(["q"], 2)
    ctx = TaskContext(overwrite.instant, 0, 1, 0)
    new_group = create_base_file(table.storage, ctx, PARTITION, "fg-q", rows, rows["id"], table.schema)
    overwrite.commit([new_group], "insert_overwrite", table.schema, replaced_file_ids={PARTITION: ["fg-001", "fg-002"]})
    update = _append(table, upsert, "fg-001", ["a"], 3)
    with pytest.raises(WriteConflictError, match=f"{overwrite.instant}.*p=1/fg-001"):
        upsert.commit([update], "upsert", table.schema)
    assert table.snapshot() == {"q": 2}


def test_write_start_round_trips(table: TableBuilder) -> None:
    running = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    start = WriteStart.of("20990101000000000", load_timeline(table.storage))
    assert WriteStart.from_json(start.to_json()) == start
    assert len(start.seen) == 2
    assert start.pending == {running.instant}
    # as a driver of an earlier version sends it to the writer-coordinator
    assert WriteStart.from_json('{"instant": "20990101000000000", "seen": []}').pending == frozenset()


def _archived_while_a_backfill_ran(
    tmp_path: Path, copy_on_write: bool, stream_keys: list[str], savepointed: bool = False
) -> tuple[TableBuilder, PendingWrite, list[WriteStat], PendingWrite]:
    """A stream's write of ``stream_keys`` begins, and another writer's insert, then a backfill
    of ``a`` (file group fg-001, with ``b``) while both run. Both complete, more writes follow,
    and a clean and an archival (as the operator schedules them) take the stream's write off the
    active timeline: archival stops at the earliest pending instant's *time*, and the stream's is
    earlier than the backfill's. The backfill, its files written, is left to commit (with its
    stats); and the stream's write. ``savepointed``: the first commit has a savepoint, the
    archival goes beyond it (hoodie.archive.beyond.savepoint), and the savepoint is deleted
    after it, which archives that old commit in a block of its own, the newest."""
    t = TableBuilder(CountedListings(tmp_path), copy_on_write=copy_on_write)
    first = t.insert(["a", "b"], 1)  # fg-001
    t.insert(["z"], 1)  # fg-002
    if savepointed:
        create_savepoint(t.storage, first, concurrency=LIVE)
    stream = begin_write(t.storage, t.write_action, "upsert", LIVE)
    stream_stats = t.write_upsert(stream.instant, stream_keys, 3)
    other = begin_write(t.storage, t.write_action, "upsert", LIVE)
    other_stats = t.write_upsert(other.instant, ["y"], 3)  # a new file group
    backfill = begin_write(t.storage, t.write_action, "upsert", LIVE)
    backfill_stats = t.write_upsert(backfill.instant, ["a"], 2)
    stream.commit(stream_stats, "upsert", t.schema)
    # the clean keeps the slices of the last write completed before the backfill began, this one
    other.commit(other_stats, "upsert", t.schema)
    for i in range(5):  # the stream goes on, in new file groups
        t.insert([f"k{i}"], 1)
    assert clean(t.storage, CleanConfig(commits_retained=1), concurrency=LIVE) is not None
    archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, beyond_savepoint=savepointed), concurrency=LIVE)
    assert load_timeline(t.storage).find(stream.instant) is None  # archived meanwhile
    if savepointed:
        assert delete_savepoint(t.storage, first, LIVE) == (first,)
        assert latest_archival(t.storage) == (first,)
    return t, backfill, backfill_stats, stream


@pytest.mark.parametrize(
    ("copy_on_write", "savepointed"),
    [(True, False), (False, False), (True, True)],
    ids=["copy-on-write", "merge-on-read", "behind-a-savepoint-delete"],
)
def test_a_conflicting_write_archived_while_a_write_ran_is_found_in_the_archive(
    tmp_path: Path, copy_on_write: bool, savepointed: bool
) -> None:
    """It committed over the archived write's update of ``b`` (found only on the active
    timeline), and ``b`` read 1 again, by Apache's readers too: a lost update. So it did too
    once a savepoint delete had archived an older commit after it: the search stopped at that
    newest block, every instant in it older than the write it looked for."""
    t, backfill, stats, stream = _archived_while_a_backfill_ran(tmp_path, copy_on_write, ["b"], savepointed)
    with pytest.raises(WriteConflictError) as caught:
        backfill.commit(stats, "upsert", t.schema)
    err = caught.value
    assert (err.instant, err.other, err.stage, err.file_groups) == (
        backfill.instant,
        stream.instant,
        "commit",
        (f"{PARTITION}/fg-001",),
    )
    assert str(err) == (
        f"write conflict: write {backfill.instant} and committed write {stream.instant} both touch 1 file group(s): "
        f"{PARTITION}/fg-001 (found at commit, in the archived timeline: it was archived while this write ran); "
        "this write was rolled back: write it again"
    )
    assert load_timeline(t.storage).find(backfill.instant) is None
    assert {"a": 1, "b": 3}.items() <= t.snapshot().items()
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()} == t.snapshot()


def test_a_write_archived_while_a_write_ran_in_other_file_groups_is_no_conflict(tmp_path: Path) -> None:
    t, backfill, stats, _ = _archived_while_a_backfill_ran(tmp_path, False, ["z"])
    backfill.commit(stats, "upsert", t.schema)
    assert (t.snapshot()["a"], t.snapshot()["b"], t.snapshot()["z"]) == (2, 1, 3)


def test_a_write_rolled_back_while_a_write_ran_is_not_looked_for_in_the_archive(table: TableBuilder) -> None:
    """Nor is any write while every write pending at the start is on the active timeline: the
    archive is read only for one that left it."""
    storage = CountedListings(table.storage.root)
    table.storage = storage
    failed = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    _append(table, failed, "fg-001", ["b"], 3)
    write = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    stat = _append(table, write, "fg-001", ["a"], 2)
    failed.abort()  # its job failed: gone from the timeline, and not archived
    storage.listed.clear()
    write.commit([stat], "upsert", table.schema)
    assert table.snapshot()["a"] == 2
    assert storage.listed[".hoodie/archived"] == 0
    # a write pending at the start and committed since, still on the active timeline
    running = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    write = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    running.commit([_append(table, running, "fg-002", ["c"], 4)], "upsert", table.schema)
    write.commit([_append(table, write, "fg-001", ["b"], 4)], "upsert", table.schema)
    assert storage.listed[".hoodie/archived"] == 0
    assert table.snapshot() == {"a": 2, "b": 4, "c": 4, "d": 1}


@pytest.mark.parametrize("config", [SINGLE_WRITER_LIVE, LIVE], ids=["single-writer", "optimistic"])
def test_a_pending_clustering_is_kept_and_its_file_groups_take_no_change(
    table: TableBuilder, config: ConcurrencyConfig
) -> None:
    table.update(["a", "c"], 2)  # logs on both groups
    clustering = table.plan_clustering("fg-001")
    # no failed write: never rolled back, though it has no heartbeat
    assert rollback_pending_writes(table.storage, IMPATIENT) == []
    time.sleep(0.1)
    assert rollback_pending_writes(table.storage, IMPATIENT) == []
    assert load_timeline(table.storage).find(clustering) is not None
    # an update of a group being clustered is refused (it would be lost when the clustering lands)
    write = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    stat = _append(table, write, "fg-001", ["a"], 5)
    with pytest.raises(WriteConflictError, match=f"and planned clustering {clustering} both touch") as caught:
        write.commit([stat], "upsert", table.schema)
    assert caught.value.file_groups == (f"{PARTITION}/fg-001",)
    assert load_timeline(table.storage).find(write.instant) is None
    # other groups and new ones take writes
    write = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    rows = _table(["e"], 3)
    new = create_base_file(
        table.storage, TaskContext(write.instant, 0, 8, 0), PARTITION, "fg-009", rows, rows["id"], table.schema
    )
    write.commit([_append(table, write, "fg-002", ["c"], 3), new], "upsert", table.schema)
    assert table.snapshot() == {"a": 2, "b": 1, "c": 3, "d": 1, "e": 3}
    # a compaction leaves the clustered group to the clustering
    planned = schedule_compaction(table.storage)
    assert planned is not None
    plan = avro.deserialize(table.storage.read(f".hoodie/{planned.file_name}"), "HoodieCompactionPlan", "plan")
    assert [op["fileId"] for op in plan["operations"]] == ["fg-002"]


@pytest.mark.parametrize("config", [SINGLE_WRITER_LIVE, LIVE], ids=["single-writer", "optimistic"])
def test_a_write_a_planned_clustering_refuses_is_told_what_lets_it_be_written_again(
    table: TableBuilder, config: ConcurrencyConfig
) -> None:
    """It said only "this write was rolled back", and exit status 3 says "write it again": every
    attempt did all its work and lost again, as long as the clustering stayed planned."""
    clustering = table.plan_clustering("fg-001")
    for _ in range(2):
        write = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
        stat = _append(table, write, "fg-001", ["a"], 5)
        with pytest.raises(WriteConflictError) as caught:
            write.commit([stat], "upsert", table.schema)
        assert str(caught.value) == (
            f"write conflict: write {write.instant} and planned clustering {clustering} both touch 1 file group(s): "
            f"{PARTITION}/fg-001 (found at commit); this write was rolled back. The clustering {clustering} blocks "
            "updates to these file groups until it is run (by Apache Hudi) or its plan is rolled back "
            f"(`tidemark rollback {table.storage.uri} {clustering}`); write it again only then"
        )
    time.sleep(0.1)  # no heartbeat: judged by its time, as a plan Apache's scheduler left
    rollback(table.storage, clustering, IMPATIENT)
    write = begin_write(table.storage, DELTA_COMMIT, "upsert", config)
    write.commit([_append(table, write, "fg-001", ["a"], 5)], "upsert", table.schema)
    assert table.snapshot()["a"] == 5


@pytest.fixture
def same_millisecond(monkeypatch: pytest.MonkeyPatch) -> Callable[[], str]:
    """``start()`` makes the next instant time any process takes ``T`` (the clock's reading at the
    first call): call it before each of two openings to have them start in one millisecond."""
    real = active.new_instant_time
    first: list[str] = []
    pending: list[str] = []

    def clock(now: datetime.datetime | None = None) -> str:
        return pending.pop() if pending else real(now)

    def start() -> str:
        if not first:
            time.sleep(0.002)  # later than every instant so far
            first.append(real())
        pending[:] = first
        return first[0]

    monkeypatch.setattr(active, "new_instant_time", clock)
    return start


def _then(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, action: Callable[[], object]) -> list[object]:
    """Run ``action`` once, right after the first call of ``owner.name`` returns (another process
    acting in that window); the list gets its result."""
    real = getattr(owner, name)
    results: list[object] = []

    def wrapped(*args: object, **kwargs: object) -> object:
        value = real(*args, **kwargs)
        if not results:
            results.append(action())
        return value

    monkeypatch.setattr(owner, name, wrapped)
    return results


def test_a_compaction_planned_in_a_writes_millisecond_takes_a_later_time(
    table: TableBuilder, same_millisecond: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table.update(["a"], 2)  # fg-001 has a log file to compact
    t = same_millisecond()
    # the scheduler reads the timeline and plans while the write has its time but no instant yet
    scheduled = _then(
        monkeypatch, Heartbeat, "claim", lambda: (same_millisecond(), schedule_compaction(table.storage))[1]
    )
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    planned = scheduled[0]
    assert w.instant == t
    assert isinstance(planned, Instant)
    assert planned.timestamp > t
    w.commit([_append(table, w, "fg-002", ["c"], 9)], "upsert", table.schema)
    compact(table.storage)
    times = [i.timestamp for i in load_timeline(table.storage)]
    assert len(times) == len(set(times))
    assert table.snapshot() == {"a": 2, "b": 1, "c": 9, "d": 1}
    assert list((table.storage.root / ".hoodie" / ".claims").iterdir()) == []


def test_a_write_in_a_planned_compactions_millisecond_takes_a_later_time(
    table: TableBuilder, same_millisecond: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table.update(["a"], 2)
    t = same_millisecond()
    # the write has read the timeline when the compaction, of the same millisecond, is planned
    scheduled = _then(
        monkeypatch,
        write_client,
        "check_no_pending_restore",
        # and the write's clock reads that millisecond after it
        lambda: (same_millisecond(), schedule_compaction(table.storage), same_millisecond())[1],
    )
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    planned = scheduled[0]
    assert isinstance(planned, Instant)
    assert planned.timestamp == t
    assert w.instant > t
    w.commit([_append(table, w, "fg-002", ["c"], 9)], "upsert", table.schema)
    compact(table.storage)
    assert table.snapshot() == {"a": 2, "b": 1, "c": 9, "d": 1}


def test_a_write_sharing_its_time_with_a_compaction_rolls_back_only_itself(table: TableBuilder) -> None:
    # a table from before instant times were claimed: a compaction planned at a running write's time
    table.update(["a"], 2)
    w = begin_write(table.storage, DELTA_COMMIT, "upsert", LIVE)
    _append(table, w, "fg-002", ["c"], 9)
    plan = avro.compaction_plan([(PARTITION, "fg-001", table.groups["fg-001"], None, [], {})], None)
    create_requested(table.storage, w.instant, COMPACTION, avro.serialize("HoodieCompactionPlan", plan))
    w.abort()
    assert [(i.timestamp, i.action, i.state) for i in load_timeline(table.storage).pending()] == [
        (w.instant, COMPACTION, State.REQUESTED)
    ]


def test_a_rollback_another_process_finished_meanwhile_ends_as_done(
    table: TableBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `tidemark rollback` paused half-way while `tidemark compact` finished the same rollback from
    # its plan: the rollback then exited 1 ("already exists: another writer got there first").
    # The rollback holds the table lock, which compact takes too: that happens once the pause
    # outlasts the lock's lease, and compact takes the lock over (``lock_held``: this one thinks
    # it still holds it)
    update = table.update(["a"], 2)
    real = write_client.delete_heartbeat
    compacted: list[object] = []

    def then_compact(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        if not compacted:
            compacted.append(None)  # once: the compaction's own rollback steps pass here too
            compact(table.storage)  # nothing left to compact once the rollback is done
            compacted[0] = [i.is_completed for i in load_timeline(table.storage) if i.action == "rollback"]

    monkeypatch.setattr(write_client, "delete_heartbeat", then_compact)
    result = write_client.rollback(table.storage, update, lock_held=True)
    assert compacted == [[True]]  # the other process finished the rollback first
    assert result.rolled_back.timestamp == update
    rollbacks = [i for i in load_timeline(table.storage) if i.action == "rollback"]
    assert [(i.timestamp, i.is_completed) for i in rollbacks] == [(result.rollback_instant.timestamp, True)]
    assert table.snapshot() == {"a": 1, "b": 1, "c": 1, "d": 1}


@pytest.mark.s3
def test_a_heartbeat_another_writer_claimed_while_ours_was_retried_is_not_taken_for_ours(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers claim one instant's heartbeat in one millisecond. Our conditional PUT is answered
    503 (nothing stored), the other's claim lands meanwhile, and botocore's retry gets 412. A claim
    held only the time, so the other's file held our bytes and was taken for ours: two writers
    shared one heartbeat (the loser deletes the winner's on its way out)."""
    monkeypatch.setattr(heartbeat, "now_ms", lambda: 1_700_000_000_000)
    instant = "20261128000000000"
    bucket = create_bucket(moto_server)
    other = Heartbeat(open_storage(f"s3://{bucket}/t", s3_options(moto_server)), instant, LIVE)
    claimed: list[bool] = []

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> Answer | None:
        if is_conditional_put(method, headers) and "/.heartbeat/" in path and not claimed:
            claimed.append(other.claim())
            return s3_error(503, "SlowDown", "Please reduce your request rate.")
        return None

    with FaultProxy(moto_server, hook) as proxy:
        ours = Heartbeat(open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint)), instant, LIVE)
        try:
            assert not ours.claim()  # another writer's: ours picks another time
        finally:
            ours.stop(delete=False)
            other.stop(delete=False)
    assert claimed == [True]


@pytest.mark.parametrize(
    ("content", "last"),
    [
        (b"1700000000000 0123456789abcdef0123456789abcdef", 1_700_000_000_000),  # a claim's first beat
        (b"1700000000000", 1_700_000_000_000),  # a later beat, or a claim made before tokens
        (b"", None),  # Hudi's empty file: when it was written
    ],
)
def test_every_heartbeat_format_is_read(tmp_path: Path, content: bytes, last: int | None) -> None:
    storage = LocalStorage(tmp_path)
    path = heartbeat_path("20251128000000000")
    storage.write(path, content)
    os.utime(tmp_path / path, ns=(1_600_000_000_000_000_000,) * 2)  # storage got it before the time in it
    assert heartbeat.last_beat_ms(storage, "20251128000000000") == (last or 1_600_000_000_000)


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_live_writer_whose_clock_lags_is_judged_by_when_storage_got_its_beat(
    tmp_path: Path, request: pytest.FixtureRequest, where: str
) -> None:
    """A writer whose clock runs 200 s behind beats just now: its file says 200 s ago, past the
    default 120 s expiry, and it was rolled back while alive. Hudi judges the file's modification
    time on storage, by which the beat is fresh."""
    storage: Storage = LocalStorage(tmp_path) if where == "local" else request.getfixturevalue("s3_storage")
    instant = "20251128000000000"
    lagging = int(time.time() * 1000) - 200_000
    storage.write(heartbeat_path(instant), str(lagging).encode())
    status = heartbeat_status(storage, instant, ConcurrencyConfig())
    assert not status.expired
    assert status.age_ms < 5_000
    assert "(live)" in status.describe()


def test_a_writer_that_lost_the_race_for_a_log_file_name_leaves_the_winners_file_and_removes_its_own(
    tmp_path: Path,
) -> None:
    """Two writes to one file group with one write token (two Spark jobs' tasks are both
    ``0-<stage>-0``): the second had marked the first version, found it taken when it came to
    create it, and wrote the next version unmarked. Losing the conflict at commit, it deleted the
    marked version, the committed winner's update (a lost update), and left its own unmarked file,
    whose delete every reader took for committed once archival passed its rollback."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    group = t.keys["a"]
    winner = begin_write(t.storage, DELTA_COMMIT, "upsert", LIVE)
    loser = begin_write(t.storage, DELTA_COMMIT, "delete", LIVE)
    won: list[WriteStat] = []

    def winner_creates_the_name_first(*_: object) -> None:
        if not won:  # the loser has marked the version it is about to create
            won.append(_append(t, winner, group, ["a"], 2))

    deleted = append_log_blocks(
        t.storage,
        TaskContext(loser.instant, 0, 7, 0),
        PARTITION,
        group,
        t.groups[group],
        None,
        None,
        [],
        [DeleteRecord("b", PARTITION, 0)],
        t.schema,
        before_append=winner_creates_the_name_first,
    )
    assert won[0].log_files != deleted.log_files  # the same version, taken: the loser moved on
    winner.commit(won, "upsert", t.schema)
    with pytest.raises(WriteConflictError):
        loser.commit([deleted], "delete", t.schema)
    assert t.snapshot() == {"a": 2, "b": 1}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(t.storage.root)).to_pylist()} == {"a": 2, "b": 1}
    left = {p.name for p in (tmp_path / PARTITION).iterdir()}
    assert won[0].log_files[0] in left
    assert deleted.log_files[0] not in left  # its rollback found it through its marker
