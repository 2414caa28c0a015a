"""Compaction of a slice with nothing left in it: the new base file keeps the table's columns and
the commit records the table's schema, so both tidemark and Apache's reader still read the table
(the model-based test found a compaction that recorded a schema without fields)."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot
from tests.support.table_builder import PARTITION, RECOVERY, TableBuilder
from tidemark.errors import CorruptBaseFileError, InstantStateError, LiveWriterError, LockTimeoutError, TableError
from tidemark.logformat import DeleteRecord
from tidemark.logformat.file_name import BaseFileName
from tidemark.storage import LocalStorage, Storage
from tidemark.table.compaction import (
    COMPACTION_WRITE_TOKEN,
    compact,
    run_compaction,
    schedule_compaction,
    start_compaction,
)
from tidemark.table.concurrency import SINGLE_WRITER, ConcurrencyConfig
from tidemark.table.file_system_view import read_compaction_plan
from tidemark.table.heartbeat import beat
from tidemark.table.lock import LOCK_PATH
from tidemark.table.markers import write_marker_type
from tidemark.table.snapshot import SnapshotReader, read_snapshot
from tidemark.table.write_client import commit_write, rollback, rollback_pending_writes, start_write
from tidemark.table.write_handles import TaskContext, append_log_blocks
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint
from tidemark.timeline import (
    COMPACTION,
    DELTA_COMMIT,
    CommitMetadata,
    Instant,
    State,
    WriteStat,
    instant_path,
    load_timeline,
)
from tidemark.timeline.archived import archived_entry


def _log_only_group(t: TableBuilder, key: str) -> str:
    """A file group started in the logs (no base file) holding ``key``."""
    inflight = start_write(t.storage, DELTA_COMMIT, "upsert")
    rows = pa.table(
        {
            "id": [key],
            "ts": pa.array([1], pa.int64()),
            "v": pa.array([1], pa.int64()),
            "p": ["1"],
        }
    )
    ctx = TaskContext(inflight.timestamp, 0, 7, 0)
    stat = append_log_blocks(t.storage, ctx, PARTITION, "fg-log", inflight.timestamp, None, rows, [key], [], t.schema)
    commit_write(t.storage, inflight, [stat], "upsert", t.schema)
    return inflight.timestamp


def test_compacting_a_slice_whose_records_are_all_deleted(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    started = _log_only_group(t, "z")
    assert t.snapshot() == {"a": 1, "z": 1}
    deleted = start_write(t.storage, DELTA_COMMIT, "delete")
    ctx = TaskContext(deleted.timestamp, 0, 8, 0)
    stat = append_log_blocks(
        t.storage, ctx, PARTITION, "fg-log", started, None, None, [], [DeleteRecord("z", PARTITION, 2)], t.schema
    )
    commit_write(t.storage, deleted, [stat], "delete", t.schema)
    assert t.snapshot() == {"a": 1}

    done = compact(t.storage)
    assert done is not None
    metadata = CommitMetadata.from_bytes(t.storage.read(instant_path(done)))
    (written,) = [s for s in metadata.write_stats() if s.file_id == "fg-log"]
    assert written.num_writes == 0
    schema = json.loads(metadata.schema or "{}")
    assert [f["name"] for f in schema["fields"] if not f["name"].startswith("_hoodie")] == ["id", "ts", "v", "p"]
    empty_base = pq.read_table(tmp_path / written.path)
    assert empty_base.num_rows == 0
    assert {"id", "ts", "v", "p", "_hoodie_record_key"} <= set(empty_base.column_names)
    assert t.snapshot() == {"a": 1}
    apache = apache_snapshot(str(tmp_path.absolute()))
    assert dict(zip(apache.column("id").to_pylist(), apache.column("v").to_pylist(), strict=True)) == {"a": 1}


def test_a_compacted_base_file_carries_its_avro_schema_as_hudi_writes_it(tmp_path: Path) -> None:
    # Hudi's Java readers take the Avro schema of a base file from parquet.avro.schema
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    done = compact(t.storage)
    assert done is not None
    metadata = CommitMetadata.from_bytes(t.storage.read(instant_path(done)))
    (written,) = metadata.write_stats()
    file_metadata = pq.read_schema(tmp_path / written.path).metadata
    schema = json.loads(file_metadata[b"parquet.avro.schema"])
    assert [f["name"] for f in schema["fields"]][:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert {"id", "ts", "v", "p"} <= {f["name"] for f in schema["fields"]}
    assert written.file_size == (tmp_path / written.path).stat().st_size
    assert t.snapshot() == {"a": 2, "b": 1}


def test_a_pending_compaction_with_writes_logged_on_top_is_not_rolled_back(tmp_path: Path) -> None:
    """Rolling back a pending compaction drops its file slice, and with it the writes logged on
    top of it since it was planned: refused, with what to do instead; nothing changes. Without
    writes on top it is rolled back."""
    from tidemark.errors import InstantStateError
    from tidemark.table.compaction import schedule_compaction
    from tidemark.table.write_client import rollback

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    planned = schedule_compaction(t.storage)
    assert planned is not None
    t.update(["b"], 3)  # logged on top of the pending compaction

    def files() -> list[Path]:  # the table lock's lease aside, which the rollback took
        return sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and ".locks" not in p.parts)

    before = files()
    with pytest.raises(InstantStateError, match="writes are logged on top of the pending compaction"):
        rollback(t.storage, planned.timestamp)
    assert files() == before
    assert t.snapshot() == {"a": 2, "b": 3}
    other = TableBuilder(LocalStorage(tmp_path / "other"))
    other.insert(["a"], 1)
    other.update(["a"], 2)
    lone = schedule_compaction(other.storage)
    assert lone is not None
    assert rollback(other.storage, lone.timestamp).rolled_back.timestamp == lone.timestamp
    assert other.snapshot() == {"a": 2}


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_base_file_is_named_and_its_compaction_taken_back(damage: str, tmp_path: Path) -> None:
    """A base file that is not readable Parquet: readers name it (Arrow's own error names a
    nameless buffer), and a compaction planned on it is taken back, so the table is as it was
    instead of holding a plan that fails at every run."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    (base,) = tmp_path.rglob("*.parquet")
    with base.open("r+b") as f:
        f.truncate(base.stat().st_size // 2 if damage == "truncated" else 0)
    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if ".hoodie" not in p.parts)
    with pytest.raises(CorruptBaseFileError, match=f"{base.name} is not a readable Parquet file"):
        read_snapshot(t.storage)
    with pytest.raises(CorruptBaseFileError, match=f"{base.name} is not a readable Parquet file.*taken back"):
        compact(t.storage)
    assert not load_timeline(t.storage).pending().instants
    assert [i.action for i in load_timeline(t.storage).completed()][-1] == "rollback"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if ".hoodie" not in p.parts) == listing


def test_compact_answers_with_the_pending_compaction_it_finished(tmp_path: Path) -> None:
    """Finishing a pending compaction is compacting: the command said "nothing to compact"."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    t.update(["a"], 2)
    pending = schedule_compaction(t.storage)
    assert pending is not None
    done = compact(t.storage)
    assert done is not None
    assert done.timestamp == pending.timestamp
    assert compact(t.storage) is None


@pytest.mark.parametrize("damage", ["truncated", "emptied"])
def test_a_log_file_shorter_than_its_commit_recorded_is_not_compacted(damage: str, tmp_path: Path) -> None:
    """Readers skip a truncated log's lost blocks as they skip a failed attempt's torn one; a
    compaction would write the table without them for good. The deltacommit recorded the file's
    size: a plan over a shorter file is refused, naming it, and nothing is scheduled."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    (log,) = (p for p in tmp_path.rglob(".*.log.*") if ".hoodie" not in p.parts)
    with log.open("r+b") as f:
        f.truncate(log.stat().st_size - 10 if damage == "truncated" else 0)
    with pytest.raises(TableError, match=f"{log.name} is .* bytes, but the deltacommit .* recorded"):
        compact(t.storage)
    assert not load_timeline(t.storage).of_actions("compaction").instants


@pytest.mark.parametrize("damage", ["header byte flipped", "file deleted"])
def test_a_committed_log_block_damaged_or_gone_is_not_compacted(damage: str, tmp_path: Path) -> None:
    """The same loss with the size unchanged (a flipped byte makes the block unreadable; the
    reader resyncs past it) or with the file gone while the slice keeps other logs."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    t.update(["b"], 3)
    logs = sorted((p for p in tmp_path.rglob(".*.log.*") if ".hoodie" not in p.parts), key=lambda p: p.name)
    first = logs[0]
    if damage == "file deleted":
        first.unlink()
        expected = f"{first.name}, which the deltacommit .* wrote, is gone"
    else:
        data = bytearray(first.read_bytes())
        data[40] ^= 0xFF  # inside the header: the block's frame no longer reads
        first.write_bytes(bytes(data))
        expected = f"{first.name} bytes 0\\.\\.{len(data)} are damaged .* inside the log blocks the deltacommit"
    with pytest.raises(TableError, match=expected):
        compact(t.storage)
    assert not load_timeline(t.storage).of_actions("compaction").instants


# --- two processes and one compaction ---------------------------------------------------------
# A compaction's runner is the seam: it runs a second `compact` (or a `rollback`) in the middle of
# the first one's run, after the plan is inflight, as a second process would.

#: another process that takes any heartbeat older than a millisecond for a dead runner's
IMPATIENT = ConcurrencyConfig(heartbeat_interval_ms=1, heartbeat_tolerable_misses=1)


def _markers(tmp_path: Path, instant: str) -> list[Path]:
    return [p for p in (tmp_path / ".hoodie" / ".temp" / instant).rglob("*") if p.is_file()]


def test_a_second_compact_leaves_a_running_compaction_to_its_runner(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two `tidemark compact` at once: the second finished the first one's plan, the first then
    rewrote the committed base files and failed ("another writer got there first", exit 1),
    leaving its markers. Now the second sees the first's live heartbeat, says so and leaves it."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    second: list[Instant | None] = []

    def first_run(storage: Storage, requested: Instant) -> Instant:
        inflight, _ = start_compaction(storage, requested)
        second.append(compact(LocalStorage(tmp_path)))
        return run_compaction(storage, inflight)

    done = compact(t.storage, run=first_run)
    assert done is not None
    assert second == [None]
    assert f"compaction {done.timestamp} on {t.storage.uri} is being run by another process (heartbeat" in caplog.text
    assert [i.timestamp for i in load_timeline(t.storage).of_actions("compaction")] == [done.timestamp]
    assert _markers(tmp_path, done.timestamp) == []
    assert not (tmp_path / ".hoodie" / ".heartbeat" / done.timestamp).exists()
    assert t.snapshot() == {"a": 2, "b": 1}


def test_a_compaction_completed_by_another_process_keeps_that_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """When the first runner's heartbeat has expired for another process (here: one that takes any
    heartbeat for dead), that process finishes the plan; the first one's commit then says the
    compaction was completed by another process and returns that commit, keeping its base files."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    second: list[Instant | None] = []

    def first_run(storage: Storage, requested: Instant) -> Instant:
        inflight, _ = start_compaction(storage, requested)
        second.append(compact(LocalStorage(tmp_path), IMPATIENT))
        return run_compaction(storage, inflight)

    done = compact(t.storage, run=first_run)
    assert done is not None
    assert second == [done]
    assert f"compaction {done.timestamp} on {t.storage.uri} was completed by another process" in caplog.text
    for stat in CommitMetadata.from_bytes(t.storage.read(instant_path(done))).write_stats():
        assert (tmp_path / (stat.path or "")).exists()
    assert _markers(tmp_path, done.timestamp) == []
    assert t.snapshot() == {"a": 2, "b": 1}


def test_rollback_of_a_running_compaction_is_refused(tmp_path: Path) -> None:
    """`tidemark rollback` of a compaction still running was accepted; the compaction went on,
    wrote its base files and failed with "... is not on the timeline". Now the rollback is refused
    while the compaction's heartbeat is live, and the compaction commits."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)

    def run(storage: Storage, requested: Instant) -> Instant:
        inflight, _ = start_compaction(storage, requested)
        with pytest.raises(
            LiveWriterError, match=f"compaction {requested.timestamp} is being run by another process \\(heartbeat"
        ):
            rollback(LocalStorage(tmp_path), requested.timestamp)
        return run_compaction(storage, inflight)

    done = compact(t.storage, run=run)
    assert done is not None
    assert done.is_completed
    assert t.snapshot() == {"a": 2, "b": 1}


class _RolledBackBeforeFirstWrite(LocalStorage):
    """The runner's storage: as it marks its first base file (it has just found its compaction
    still inflight), another process rolls the compaction back."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.rolled_back: list[str] = []

    def create_if_absent(self, path: str, data: bytes) -> None:
        if path.startswith(".hoodie/.temp/") and not self.rolled_back:
            instant = path.split("/")[2]
            self.rolled_back.append(instant)
            rollback(LocalStorage(self.root), instant, IMPATIENT)
        super().create_if_absent(path, data)


def test_a_compaction_rolled_back_by_another_process_says_so_and_removes_its_files(tmp_path: Path) -> None:
    """Once a runner's heartbeat has expired, another process may roll its compaction back; the
    runner's commit then says that another process rolled it back, and deletes the base files it
    wrote (none stays behind for a later write to clean up)."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    runner = _RolledBackBeforeFirstWrite(tmp_path)
    with pytest.raises(
        InstantStateError,
        match="was rolled back by another process while this one ran; the 1 base files it wrote are deleted",
    ):
        compact(runner)
    (ts,) = runner.rolled_back
    assert list(tmp_path.rglob(f"*_{ts}.parquet")) == []
    assert _markers(tmp_path, ts) == []
    assert t.snapshot() == {"a": 2, "b": 1}


def test_a_killed_runners_compaction_is_finished_once_its_heartbeat_expires(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A runner killed mid-compaction leaves its heartbeat: the next compact leaves the compaction
    while that heartbeat is fresh, and finishes it once the heartbeat has expired."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    pending = schedule_compaction(t.storage)
    assert pending is not None
    start_compaction(t.storage, pending)
    beat(t.storage, pending.timestamp)  # the killed runner's last beat
    assert compact(t.storage) is None
    assert "is being run by another process" in caplog.text
    done = compact(t.storage, IMPATIENT)
    assert done is not None
    assert done.timestamp == pending.timestamp
    assert not (tmp_path / ".hoodie" / ".heartbeat" / pending.timestamp).exists()
    assert t.snapshot() == {"a": 2, "b": 1}


# A runner that stalled after writing its first base file: another process took the compaction
# up meanwhile (here called where the stall was, right after that file's write).


class _StallingAfterFirstBaseFile(LocalStorage):
    """The stalled runner's storage: once it has written its first compacted base file, the
    other process (``other``) runs; the paths this runner writes after that are recorded."""

    def __init__(self, root: Path, other: Callable[[str], object]) -> None:
        super().__init__(root)
        self.other = other
        self.stalled_at: str | None = None  # the compaction instant
        self.written_after: list[str] = []

    def write(self, path: str, data: bytes) -> None:
        if self.stalled_at is not None:
            self.written_after.append(path)
        super().write(path, data)
        name = BaseFileName.parse(path) if path.endswith(".parquet") else None
        if name is not None and name.write_token == COMPACTION_WRITE_TOKEN and self.stalled_at is None:
            self.stalled_at = name.instant
            self.other(name.instant)


def _three_slices_with_logs(tmp_path: Path) -> TableBuilder:
    t = TableBuilder(LocalStorage(tmp_path))
    for key in ("a", "b", "c"):
        t.insert([key], 1)
    t.update(["a", "b", "c"], 2)
    return t


def _files(tmp_path: Path, instant: str) -> dict[Path, tuple[bytes, int, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in tmp_path.rglob(f"*_{instant}.parquet")}


def test_a_runner_stalled_after_its_first_base_file_leaves_the_other_process_commit_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stalled runner went on through its remaining slices, writing each base file again over
    the files the other process had committed (a reader of the committed file could mix two
    versions; another codec made its size differ from the commit's), before finding the commit.
    Now it writes nothing more and answers with that commit."""
    t = _three_slices_with_logs(tmp_path)
    other: list[Instant | None] = []
    committed: dict[Path, tuple[bytes, int, int]] = {}

    def take_over(instant: str) -> None:
        other.append(compact(LocalStorage(tmp_path), IMPATIENT))
        committed.update(_files(tmp_path, instant))

    stalled = _StallingAfterFirstBaseFile(tmp_path, take_over)
    done = compact(stalled)
    assert done is not None
    assert other == [done]
    metadata = CommitMetadata.from_bytes(t.storage.read(instant_path(done)))
    assert sorted(tmp_path / (s.path or "") for s in metadata.write_stats()) == sorted(committed)
    assert len(committed) == 3
    assert _files(tmp_path, done.timestamp) == committed  # same bytes, mtime and inode as committed
    assert [p for p in stalled.written_after if p.endswith(".parquet")] == []
    assert caplog.text.count(f"compaction {done.timestamp} on {stalled.uri} was completed by another process") == 1
    assert _markers(tmp_path, done.timestamp) == []
    assert t.snapshot() == {"a": 2, "b": 2, "c": 2}
    apache = apache_snapshot(str(tmp_path.absolute()))
    assert dict(zip(apache.column("id").to_pylist(), apache.column("v").to_pylist(), strict=True)) == t.snapshot()


def test_a_runner_stalled_after_its_first_base_file_whose_compaction_was_rolled_back_stops(
    tmp_path: Path,
) -> None:
    """The stalled runner wrote every remaining base file after the other process's rollback,
    only to delete them at its commit. Now it writes nothing more, deletes the one it wrote, and
    says the compaction was rolled back."""
    t = _three_slices_with_logs(tmp_path)

    def roll_back(instant: str) -> None:
        rollback(LocalStorage(tmp_path), instant, IMPATIENT)

    stalled = _StallingAfterFirstBaseFile(tmp_path, roll_back)
    with pytest.raises(
        InstantStateError,
        match="was rolled back by another process while this one ran; the 1 base files it wrote are deleted",
    ):
        compact(stalled)
    ts = stalled.stalled_at
    assert ts is not None
    assert [p for p in stalled.written_after if p.endswith(".parquet")] == []
    assert list(tmp_path.rglob(f"*_{ts}.parquet")) == []
    assert _markers(tmp_path, ts) == []
    assert not load_timeline(t.storage).of_actions("compaction").instants
    assert t.snapshot() == {"a": 2, "b": 2, "c": 2}


# A runner that stalled after its plan was on the timeline but before starting it: another
# process took the plan up meanwhile (here called where the stall was, before start_compaction).


def test_a_compaction_completed_by_another_process_before_this_one_started_keeps_that_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stalled runner failed with "...compaction.inflight already exists ...: another writer
    got there first" (exit 1), although the compaction was completed. Now it says the commit of the
    other process stands and answers with it (exit 0), writing nothing."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    second: list[Instant | None] = []
    files: list[list[Path]] = []

    def stalled_run(storage: Storage, requested: Instant) -> Instant:
        second.append(compact(LocalStorage(tmp_path), IMPATIENT))
        files.append(sorted(p for p in tmp_path.rglob("*") if p.is_file() and ".heartbeat" not in p.parts))
        return run_compaction(storage, requested)

    done = compact(t.storage, run=stalled_run)
    assert done is not None
    assert done.is_completed
    assert second == [done]
    assert f"compaction {done.timestamp} on {t.storage.uri} was completed by another process" in caplog.text
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file() and ".heartbeat" not in p.parts) == files[0]
    assert not (tmp_path / ".hoodie" / ".heartbeat" / done.timestamp).exists()
    assert t.snapshot() == {"a": 2, "b": 1}


def test_a_compaction_started_by_another_process_before_this_one_started_is_left_to_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The other process has started the plan and beats for it: the stalled runner writes nothing,
    says the compaction is left to that process, and keeps the heartbeat file (deleting it would
    let a third process take the running compaction up at once). Once that heartbeat has expired,
    the next compact finishes it."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    planned: list[str] = []

    def stalled_run(storage: Storage, requested: Instant) -> Instant:
        planned.append(requested.timestamp)
        start_compaction(LocalStorage(tmp_path), requested)  # the other process's start
        beat(storage, requested.timestamp)  # and its heartbeat
        return run_compaction(storage, requested)

    assert compact(t.storage, run=stalled_run) is None
    (ts,) = planned
    assert (
        f"compaction {ts} on {t.storage.uri} was started by another process while this one stalled before "
        "starting it (its heartbeat had expired for that process); left to it" in caplog.text
    )
    assert [(i.timestamp, i.state.name) for i in load_timeline(t.storage).of_actions("compaction")] == [
        (ts, "INFLIGHT")
    ]
    assert list(tmp_path.rglob(f"*_{ts}.parquet")) == []
    assert _markers(tmp_path, ts) == []
    assert (tmp_path / ".hoodie" / ".heartbeat" / ts).exists()
    done = compact(t.storage, IMPATIENT)
    assert done is not None
    assert done.timestamp == ts
    assert t.snapshot() == {"a": 2, "b": 1}


def test_a_compaction_rolled_back_by_another_process_before_this_one_started_says_so(tmp_path: Path) -> None:
    """The other process rolled the plan back: the stalled runner fails saying so, having written
    nothing."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    planned: list[str] = []

    def stalled_run(storage: Storage, requested: Instant) -> Instant:
        planned.append(requested.timestamp)
        rollback(LocalStorage(tmp_path), requested.timestamp, IMPATIENT)
        return run_compaction(storage, requested)

    with pytest.raises(
        InstantStateError, match="was rolled back by another process before this one started it; nothing was written"
    ):
        compact(t.storage, run=stalled_run)
    (ts,) = planned
    assert not load_timeline(t.storage).of_actions("compaction").instants
    assert list(tmp_path.rglob(f"*_{ts}.parquet")) == []
    assert _markers(tmp_path, ts) == []
    assert t.snapshot() == {"a": 2, "b": 1}


def _compaction_stats(storage: Storage, done: Instant) -> dict[str, WriteStat]:
    metadata = CommitMetadata.from_bytes(storage.read(instant_path(done)))
    return {s.file_id: s for s in metadata.write_stats()}


class _StallingAt(LocalStorage):
    """A compaction runner's storage: once armed, at its first write of a path ending with
    ``suffix`` (the commit's lock, or its completed state file), ``meanwhile`` runs once, as another
    process would while the runner stalled there."""

    def __init__(self, root: Path, suffix: str, meanwhile: Callable[[], None]) -> None:
        super().__init__(root)
        self.suffix = suffix
        self.meanwhile = [meanwhile]
        self.armed = False

    def _stall(self, path: str) -> None:
        if self.armed and path.endswith(self.suffix) and self.meanwhile:
            self.meanwhile.pop()()

    def create_if_absent(self, path: str, data: bytes) -> None:
        self._stall(path)
        super().create_if_absent(path, data)

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        self._stall(path)
        return super().write_if_match(path, data, expected_version)


def _run_armed(storage: Storage, requested: Instant) -> Instant:
    assert isinstance(storage, _StallingAt)
    storage.armed = True  # the run's first lock is its commit's
    return run_compaction(storage, requested)


def test_a_rollback_waits_for_a_compaction_completing_under_the_table_lock(tmp_path: Path) -> None:
    """A compaction stalled at its completing write past its heartbeat's expiry: `tidemark
    rollback` took no lock and rolled it back, and the compaction then completed anyway (said
    committed, a lone completed commit with no base files). Now the compaction completes under
    the table lock and the rollback waits for it."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    waiter = dataclasses.replace(IMPATIENT, lock_wait_ms=300, lock_num_retries=0)
    files_before: list[Path] = []

    def roll_back() -> None:
        (pending,) = load_timeline(LocalStorage(tmp_path)).pending().of_actions("compaction")
        files_before.extend(sorted(tmp_path.rglob("*.parquet")))
        with pytest.raises(LockTimeoutError, match="held by"):
            rollback(LocalStorage(tmp_path), pending.timestamp, waiter)
        assert sorted(tmp_path.rglob("*.parquet")) == files_before, "nothing deleted without the lock"

    done = compact(_StallingAt(tmp_path, ".commit", roll_back), run=_run_armed)
    assert done is not None
    assert done.is_completed
    assert files_before, "the compaction stalled at its completing write"
    for stat in CommitMetadata.from_bytes(t.storage.read(instant_path(done))).write_stats():
        assert (tmp_path / (stat.path or "")).exists()
    assert t.snapshot() == {"a": 2, "b": 1}


def test_a_compaction_restored_away_before_its_commit_says_so_and_completes_nothing(tmp_path: Path) -> None:
    """A compaction stalled before its commit past its heartbeat's expiry, and a restore rolled it
    back: the compaction then printed "compaction committed", leaving a lone completed commit with
    no base files. Now its commit, under the table lock, finds it rolled back and says so."""
    t = TableBuilder(LocalStorage(tmp_path))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    t.update(["a"], 2)
    restored: list[str] = []

    def restore_meanwhile() -> None:
        restored.append(restore(LocalStorage(tmp_path), savepoint, IMPATIENT).instant.timestamp)

    with pytest.raises(InstantStateError, match="was rolled back by another process while this one ran") as e:
        compact(_StallingAt(tmp_path, LOCK_PATH, restore_meanwhile), run=_run_armed)
    assert "\n" not in str(e.value)
    assert restored, "the restore ran before the compaction's commit"
    timeline = load_timeline(t.storage)
    assert not timeline.of_actions("compaction").instants
    assert [i.timestamp for i in timeline.completed().write_instants()] == [savepoint]
    assert not list(tmp_path.rglob(f"*_{e.value.args[0].split()[1]}.parquet"))
    assert t.snapshot() == {"a": 1, "b": 1}


def test_a_compaction_commit_counts_what_the_logs_changed(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    # fg-001 has a delete block (the record-by-record merge), fg-002 data blocks only (column-wise)
    t.insert(["a", "b", "c"], 5)
    t.insert(["x", "y"], 5)
    t.keys.update({"e": "fg-001", "z": "fg-002"})  # keys only the logs will hold
    t.update(["a", "e", "x", "z"], 6)  # updates of a and x, inserts of e and z
    t.update(["c", "y"], 1)  # older than the stored rows: they stay
    t.delete(["b"], 6)
    assert t.snapshot() == {"a": 6, "c": 5, "e": 6, "x": 6, "y": 5, "z": 6}
    log_sizes = {
        fs.file_id: sum(log.size for log in fs.log_files) for fs in SnapshotReader(t.storage).view.latest_file_slices()
    }

    done = compact(t.storage)
    assert done is not None
    stats = _compaction_stats(t.storage, done)
    counts = {
        g: (s.num_writes, s.num_update_writes, s.num_deletes, s.num_inserts, s.extra["totalLogRecords"])
        for g, s in stats.items()
    }
    # W, U (the winning update only), D, I, log records (delete records are not counted, as Hudi's scanner)
    assert counts == {"fg-001": (3, 1, 1, 1, 3), "fg-002": (3, 1, 0, 1, 3)}
    assert {g: s.extra["totalUpdatedRecordsCompacted"] for g, s in stats.items()} == {"fg-001": 4, "fg-002": 3}
    assert {g: s.extra["totalLogSizeCompacted"] for g, s in stats.items()} == log_sizes
    assert all(size > 0 for size in log_sizes.values())
    # the archived form (Avro HoodieWriteStat) carries them
    entry = archived_entry(t.storage, done)
    archived = {s["fileId"]: s for s in entry["hoodieCommitMetadata"]["partitionToWriteStats"][PARTITION]}
    fields = ("numUpdateWrites", "numDeletes", "numInserts", "totalLogRecords", "totalUpdatedRecordsCompacted")
    assert {g: tuple(s[f] for f in fields) for g, s in archived.items()} == {
        "fg-001": (1, 1, 1, 3, 4),
        "fg-002": (1, 0, 1, 3, 3),
    }


def test_compacting_apaches_logged_update_counts_it_as_apache_did(tmp_path: Path) -> None:
    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    storage = LocalStorage(table)
    logged = [
        s
        for i in load_timeline(storage).completed().of_actions(DELTA_COMMIT)
        for s in CommitMetadata.from_bytes(storage.read(instant_path(i))).write_stats()
        if s.log_files
    ]
    assert [s.num_update_writes for s in logged] == [1]  # Apache's deltacommit of the update

    done = compact(storage)
    assert done is not None
    stats = _compaction_stats(storage, done)
    (compacted,) = [s for s in stats.values() if s.file_id == logged[0].file_id]
    assert (compacted.num_update_writes, compacted.num_deletes, compacted.num_inserts) == (1, 0, 0)
    assert compacted.extra["totalLogRecords"] == 1
    assert compacted.extra["totalLogSizeCompacted"] == logged[0].file_size


def test_a_dead_write_whose_markers_are_damaged_is_left_out_of_the_plan_by_listing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer killed mid-write whose ``MARKERS0`` (timeline-server markers) was then damaged (not
    UTF-8): ``tidemark compact`` exited 1 with ``MARKERS0 is not a MARKERS file``, as rollbacks and
    writes did before they listed instead. The compaction now finds that write's log files by
    listing, as its rollback will, warns naming the file, and compacts the committed slices
    without them."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    before = set(t.storage.list_dir(PARTITION).files)
    failed = t.update(["a"], 9)
    (dead_log,) = (f"{PARTITION}/{n}" for n in set(t.storage.list_dir(PARTITION).files) - before)
    (tmp_path / ".hoodie" / f"{failed}.deltacommit").unlink()  # its writer died before the commit
    write_marker_type(t.storage, failed)
    damaged = f".hoodie/.temp/{failed}/MARKERS0"
    t.storage.write(damaged, b"p\xff\xfe\n")

    with caplog.at_level(logging.WARNING, logger="tidemark.write"):
        done = compact(t.storage)
    assert done is not None
    (op,) = read_compaction_plan(t.storage, Instant(done.timestamp, COMPACTION, State.REQUESTED))
    assert dead_log.rsplit("/", 1)[1] not in op.log_files
    assert f"{t.storage.full_uri(damaged)} is not a MARKERS file (not UTF-8 at byte 1)" in caplog.text
    assert f"1 files of it: {dead_log}; its log files are left out of the compaction plan" in caplog.text
    assert t.snapshot() == {"a": 2, "b": 1}
    assert t.storage.exists(dead_log)  # the dead write's, for its rollback to take
    assert [r.rolled_back.timestamp for r in rollback_pending_writes(t.storage, RECOVERY)] == [failed]
    assert not t.storage.exists(dead_log)
    assert t.snapshot() == {"a": 2, "b": 1}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()} == {"a": 2, "b": 1}


def test_single_writer_compact_plans_nothing_while_a_write_is_pending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SINGLE_WRITER: an upsert begun before `compact` planned logged onto the slice it had routed
    to, which the compaction's base file then hid: the committed update was lost (a=1). Now no
    plan is made while the write is pending (Hudi's rule), the warning names it and what to do,
    and the next compact plans once it has committed."""
    one = ConcurrencyConfig(mode=SINGLE_WRITER)
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["b"], 2)
    write, stats = t.upsert_pending(["a"], 3)  # routed to a's slice, logged there
    with caplog.at_level(logging.WARNING, logger="tidemark.compaction"):
        assert compact(t.storage, one) is None
    assert load_timeline(t.storage).of_actions(COMPACTION).instants == ()
    assert (
        f"no compaction planned on {t.storage.uri}: the deltacommit {write.timestamp} is pending, and in "
        "single-writer mode (hoodie.write.concurrency.mode=SINGLE_WRITER)" in caplog.text
    )
    assert "its writer runs (no heartbeat (starting, instant " in caplog.text
    assert f"(`tidemark rollback {t.storage.uri} {write.timestamp}`)" in caplog.text
    assert caplog.text.rstrip().endswith("run `tidemark compact` again")
    commit_write(t.storage, write, stats, "upsert", t.schema)
    assert t.snapshot() == {"a": 3, "b": 2}
    assert compact(t.storage, one) is not None
    assert t.snapshot() == {"a": 3, "b": 2}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()} == {"a": 3, "b": 2}


def test_single_writer_compact_plans_nothing_when_a_write_completed_while_it_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SINGLE_WRITER: a write that began and committed between the plan's listing and its
    writing was neither in the plan nor pending at the check: its log was hidden by the new base."""
    from tidemark.table import compaction as module

    one = ConcurrencyConfig(mode=SINGLE_WRITER)
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["b"], 2)
    checked = module._check_logs_whole
    calls = []

    def a_write_in_between(*args: Any) -> None:
        checked(*args)
        calls.append(t.update(["a"], 3))  # after the listing, before the plan is written

    monkeypatch.setattr(module, "_check_logs_whole", a_write_in_between)
    with caplog.at_level(logging.WARNING, logger="tidemark.compaction"):
        assert compact(t.storage, one) is None
    assert calls
    assert load_timeline(t.storage).of_actions(COMPACTION).instants == ()
    assert f"the deltacommit {calls[0]} completed while the plan was made" in caplog.text
    monkeypatch.undo()
    assert compact(t.storage, one) is not None
    assert t.snapshot() == {"a": 3, "b": 2}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()} == {"a": 3, "b": 2}


def test_single_writer_compact_names_a_dead_pending_write_to_roll_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write whose writer died (its heartbeat expired) holds compaction back until rolled back:
    the warning says to roll it back, and with the command."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["b"], 2)
    failed = t.update(["a"], 9)
    (tmp_path / ".hoodie" / f"{failed}.deltacommit").unlink()  # its writer died before the commit
    with caplog.at_level(logging.WARNING, logger="tidemark.compaction"):
        assert compact(t.storage, RECOVERY) is None
    assert "its writer has stopped (no heartbeat (expired, instant " in caplog.text
    command = f"tidemark rollback {t.storage.uri} {failed}"
    assert f": roll it back (`{command}`), then run `tidemark compact` again" in caplog.text
    rollback_pending_writes(t.storage, RECOVERY)
    assert compact(t.storage, RECOVERY) is not None
    assert t.snapshot() == {"a": 1, "b": 2}


def _compact_in_child(root: str, stall_after_listing: bool) -> int:
    """In a child process: `tidemark compact` (optimistic concurrency), the number of compactions it
    planned. The stalling one signals once it has listed the table and waits (until the other
    has compacted, or 2 s) before writing its plan; the other starts at that signal."""
    from tidemark.table import compaction

    signals = Path(root).parent
    if stall_after_listing:
        request = compaction.request_new_instant

        def stalled(*args: object, **kwargs: Any) -> Instant:
            (signals / "listed").touch()
            deadline = time.monotonic() + 2
            while not (signals / "other-done").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            return request(*args, **kwargs)  # type: ignore[arg-type]

        compaction.request_new_instant = stalled  # type: ignore[assignment]
    else:
        deadline = time.monotonic() + 60
        while not (signals / "listed").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    done = compaction.compact(LocalStorage(root), ConcurrencyConfig())
    if not stall_after_listing:
        (signals / "other-done").touch()
    return 0 if done is None else 1


def test_two_compacts_at_once_plan_a_file_group_once(tmp_path: Path) -> None:
    """Two `tidemark compact` at once, one while the other is between its listing and its plan:
    planning holds the table lock (optimistic concurrency, the default), so the second waits,
    then finds the first's plan, where two compactions over the same file groups would make a
    table Apache's view refuses (and lose a write logged on the first plan's slice)."""
    root = tmp_path / "t"
    t = TableBuilder(LocalStorage(root))
    t.insert(["a", "b"], 1)
    t.update(["a", "b"], 2)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        planned = pool.starmap(_compact_in_child, [(str(root), True), (str(root), False)], chunksize=1)
    assert (tmp_path / "listed").exists()
    assert planned == [1, 0]
    assert len(load_timeline(t.storage).of_actions(COMPACTION).instants) == 1
    assert t.snapshot() == {"a": 2, "b": 2}
