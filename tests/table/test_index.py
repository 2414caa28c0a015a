"""The table's simple index: the record keys of each latest file slice, read from the base
file's key column alone, or from the committed blocks of a group that lives in its logs."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.model import apache_snapshot
from tests.support.table_builder import PARTITION, TableBuilder, _table
from tidemark.storage import LocalStorage, SourceFile
from tidemark.storage.base import ByteSource
from tidemark.table.compaction import run_compaction, schedule_compaction
from tidemark.table.index import FILE_ID, KEY, read_index, slice_key_count, slices_with_logged_inserts
from tidemark.table.index import PARTITION as PARTITION_COLUMN
from tidemark.table.snapshot import SnapshotReader, read_snapshot
from tidemark.table.write_client import commit_write, start_write
from tidemark.table.write_handles import TaskContext, append_log_blocks
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.timeline import DELTA_COMMIT, load_timeline


def _index(storage: LocalStorage) -> set[tuple[str, str, str]]:
    slices = SnapshotReader(storage).view.latest_file_slices()
    return {(r[PARTITION_COLUMN], r[KEY], r[FILE_ID]) for r in read_index(storage, slices).to_pylist()}


def _log_only_group(t: TableBuilder, group: str, keys: list[str], commit: bool) -> None:
    inflight = start_write(t.storage, DELTA_COMMIT, "upsert")
    rows = _table(keys, 5)
    ctx = TaskContext(inflight.timestamp, 0, 9, 0)
    stat = append_log_blocks(t.storage, ctx, PARTITION, group, inflight.timestamp, None, rows, rows["id"], [], t.schema)
    if commit:
        commit_write(t.storage, inflight, [stat], "upsert", t.schema)


def _apache_logged_insert(t: TableBuilder, group: str, keys: list[str]) -> str:
    """A deltacommit that logs new keys into ``group``'s latest slice (it has a base file), as an
    Apache writer whose index can index log files pads a small file slice (Flink's,
    Spark's INMEMORY, HBASE or BUCKET index): its append handle counts them as inserts."""
    inflight = start_write(t.storage, DELTA_COMMIT, "upsert")
    rows = _table(keys, 1)
    ctx = TaskContext(inflight.timestamp, 0, 9, 0)
    base = t.groups[group]
    stat = append_log_blocks(t.storage, ctx, PARTITION, group, base, None, rows, rows["id"], [], t.schema)
    inserts = dataclasses.replace(stat, num_update_writes=0, num_inserts=len(keys))
    commit_write(t.storage, inflight, [inserts], "upsert", t.schema)
    return inflight.timestamp


def _logged_inserts(storage: LocalStorage) -> frozenset[tuple[str, str]]:
    timeline = load_timeline(storage)
    return slices_with_logged_inserts(storage, timeline, SnapshotReader(storage).view.latest_file_slices())


def test_keys_an_apache_writer_logged_on_a_base_file_are_its_groups(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"])
    _apache_logged_insert(t, "fg-001", ["z"])
    assert (PARTITION, "z", "fg-001") in _index(storage)
    t.upsert(["z"], 2)  # an update of z where it is, not a second z in a new file group
    assert sorted((r["id"], r["v"]) for r in t.rows()) == [("a", 1), ("b", 1), ("z", 2)]
    assert {key for _, key, group in _index(storage) if group == "fg-001"} == {"a", "b", "z"}


def test_the_logs_of_tidemarks_updates_are_not_read_for_the_index(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"])
    t.insert(["c"])
    t.update(["a"], 2)
    t.upsert(["a", "c", "d"], 3)  # updates logged on two base files, d a new group
    assert _logged_inserts(storage) == frozenset()
    _apache_logged_insert(t, "fg-002", ["y"])
    assert _logged_inserts(storage) == {(PARTITION, "fg-002")}


def test_logs_whose_writes_were_archived_are_read_for_the_index(tmp_path: Path) -> None:
    """The archived deltacommit's stats are not on the active timeline: it may have logged
    inserts, as the writer's later deltacommits show it does."""
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a"], 1)
    t.insert(["x"], 1)
    logged = _apache_logged_insert(t, "fg-001", ["z"])
    for v in range(6):
        _apache_logged_insert(t, "fg-002", [f"y{v}"])  # later writes touch only the other file group
    clean(storage, CleanConfig(commits_retained=2))
    archived = archive(storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    assert logged in {i.timestamp for i in archived}
    assert (PARTITION, "fg-001") in _logged_inserts(storage)
    t.upsert(["z"], 2)
    assert sorted((r["id"], r["v"]) for r in t.rows() if r["id"] in ("a", "x", "z")) == [("a", 1), ("x", 1), ("z", 2)]


def test_the_logs_of_tidemarks_updates_archived_past_their_base_are_not_read_for_the_index(
    tmp_path: Path,
) -> None:
    """On a table no writer logs inserts into, a file group not compacted within
    hoodie.keep.max.commits writes (its base commit and logged updates archived) had every log
    block read by every upsert's index (200 times slower for one slice), and the index was never
    broadcast."""
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"], 1)  # fg-001
    for v in range(2, 8):
        t.upsert(["a"], v)  # logged updates, numInserts 0
    compacted = schedule_compaction(storage)
    assert compacted is not None
    run_compaction(storage, compacted)
    for v in range(8, 12):
        t.upsert(["b"], v)  # on the compacted slice
    clean(storage, CleanConfig(commits_retained=2))
    archive(storage, ArchiveConfig(min_commits=2, max_commits=3))
    timeline = load_timeline(storage)
    assert compacted.timestamp < (timeline.first_non_savepoint_write() or "")  # the slice's base archived
    assert _logged_inserts(storage) == frozenset()
    t.upsert(["a", "c"], 12)
    assert sorted((r["id"], r["v"]) for r in t.rows()) == [("a", 12), ("b", 11), ("c", 12)]


def test_keys_of_base_files_and_of_committed_log_blocks(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"])
    t.insert(["c"])
    t.update(["a"], 2)  # a log file on top changes no key's group
    _log_only_group(t, "fg-logs", ["d", "e"], commit=True)
    _log_only_group(t, "fg-pending", ["f"], commit=False)  # a write still in flight: not indexed
    assert _index(storage) == {
        (PARTITION, "a", "fg-001"),
        (PARTITION, "b", "fg-001"),
        (PARTITION, "c", "fg-002"),
        (PARTITION, "d", "fg-logs"),
        (PARTITION, "e", "fg-logs"),
    }
    counts = {fs.file_id: slice_key_count(storage, fs) for fs in SnapshotReader(storage).view.latest_file_slices()}
    assert counts == {"fg-001": 2, "fg-002": 1, "fg-logs": None}


class _Counting(ByteSource):
    def __init__(self, inner: ByteSource) -> None:
        self.inner, self.path, self.size, self.bytes_read = inner, inner.path, inner.size, 0

    def read_at(self, offset: int, length: int) -> bytes:
        data = self.inner.read_at(offset, length)
        self.bytes_read += len(data)
        return data


def test_a_key_column_is_read_without_the_rest_of_the_file(tmp_path: Path) -> None:
    n = 20_000
    payload = [os.urandom(200) for _ in range(n)]  # incompressible: the file is mostly this column
    wide = pa.table({"_hoodie_record_key": [f"k{i}" for i in range(n)], "payload": payload})
    pq.write_table(wide, tmp_path / "f.parquet", compression="NONE")
    source = _Counting(LocalStorage(tmp_path).open_input("f.parquet"))
    with SourceFile(source) as f:
        keys = pq.ParquetFile(f).read(columns=["_hoodie_record_key"])
    assert keys.num_rows == n
    assert source.bytes_read < source.size / 5, (source.bytes_read, source.size)


def test_a_key_deleted_before_a_compaction_is_planned_is_new_while_it_runs(tmp_path: Path) -> None:
    # Found by `make hunt`: a key deleted in the logs that a compaction plan merges was still in
    # the old base file, so an upsert while the compaction was pending routed it on top of the
    # compaction. The new base file lacks it, the next write's index (base file keys) missed it,
    # and the key was inserted again in another file group: two rows for one key.
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "e"], 1)
    t.delete(["e"], 2)
    t.update(["a"], 3)
    requested = schedule_compaction(storage)
    assert requested is not None
    pending = {fs.file_id: fs.pending_compaction for fs in SnapshotReader(storage).view.latest_file_slices()}
    assert pending == {"fg-001": requested.timestamp}
    # while it is pending the group holds "a" (its new base file will) and not "e"
    assert _index(storage) == {(PARTITION, "a", "fg-001")}
    t.upsert(["a", "e"], 4)  # "a" on top of the compaction, "e" a new file group
    assert _index(storage) == {(PARTITION, "a", "fg-001"), (PARTITION, "e", "fg-002")}
    run_compaction(storage, requested)
    t.upsert(["a", "e"], 5)
    assert _index(storage) == {(PARTITION, "a", "fg-001"), (PARTITION, "e", "fg-002")}
    rows = sorted((r["id"], r["v"]) for r in read_snapshot(storage).to_pylist())
    assert rows == [("a", 5), ("e", 5)]
    theirs = sorted((r["id"], r["v"]) for r in apache_snapshot(str(tmp_path)).to_pylist())
    assert theirs == rows


def test_keys_logged_on_top_of_a_pending_compaction_are_the_groups(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"], 1)
    t.update(["b"], 2)
    requested = schedule_compaction(storage)
    assert requested is not None
    t.delete(["a"], 3)  # deleted on top of the plan: the new base file still holds "a"
    t.upsert(["b"], 4)
    assert _index(storage) == {(PARTITION, "a", "fg-001"), (PARTITION, "b", "fg-001")}
    t.upsert(["a"], 5)  # back in its own group, not a second copy elsewhere
    run_compaction(storage, requested)
    assert _index(storage) == {(PARTITION, "a", "fg-001"), (PARTITION, "b", "fg-001")}
    assert t.snapshot() == {"a": 5, "b": 4}
