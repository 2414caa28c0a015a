"""Builds small tables without Spark, through the same write handles and write client the Spark
job uses: inserts as new file groups, updates and deletes as log blocks (Merge-On-Read) or as a
rewrite of the group's base file (``copy_on_write``: ``commit`` instants, no log file),
insert_overwrite as a replacecommit.

``upsert`` and ``delete`` route keys as the Spark job does, through its index of the table
(:mod:`tidemark.table.index`), so they stay right after a restore or a crash;
``recover`` is what the Spark job does before every write (roll back writes a dead writer left
pending, remove files of zombie attempts)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tidemark.logformat import DeleteRecord
from tidemark.storage import LocalStorage, Storage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.compaction import compact
from tidemark.table.concurrency import SINGLE_WRITER, ConcurrencyConfig
from tidemark.table.file_system_view import FileSystemView
from tidemark.table.heartbeat import heartbeat_path
from tidemark.table.merge_handle import merge_base_file
from tidemark.table.payload import rule_for_table
from tidemark.table.properties import COPY_ON_WRITE, TABLE_TYPE, read_properties
from tidemark.table.snapshot import SnapshotReader, read_snapshot
from tidemark.table.write_client import (
    commit_write,
    create_table,
    remove_zombie_files,
    rollback_pending_writes,
    start_write,
)
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import COMMIT, DELTA_COMMIT, REPLACE_COMMIT, Instant, WriteStat, load_timeline, next_instant_time
from tidemark.timeline import avro_metadata as avro

PARTITION = "p=1"
#: recovery here is a later process after the crashed writer's: its heartbeat counts as expired at
#: once (a zero expiry), as it would be once the real expiry had passed; one process writes, so no
#: table lock (a crash while holding it would leave a lease to wait out)
RECOVERY = ConcurrencyConfig(heartbeat_interval_ms=0, mode=SINGLE_WRITER)


#: (file id, base instant for new logs, base file) → (keys to update, keys to delete)
Routed = dict[tuple[str, str, str | None], tuple[list[str], list[str]]]


def partition_value(partition: str) -> str:
    """The ``p`` column of rows in ``partition`` (hive style: ``p=1`` holds ``p = "1"``)."""
    return partition.removeprefix("p=")


def _table(keys: list[str], value: int, partition: str = PARTITION) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "id": pa.array(keys, pa.string()),
            "ts": pa.array([value] * n, pa.int64()),
            "v": pa.array([value] * n, pa.int64()),
            "p": pa.array([partition_value(partition)] * n, pa.string()),
        }
    )


@dataclass
class TableBuilder:
    storage: Storage
    #: file group id → its base instant (latest slice)
    groups: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # key -> file group
    counter: int = 0
    #: a COPY_ON_WRITE table: upserts and deletes rewrite base files (only they do)
    copy_on_write: bool = False
    #: more of the table's properties (``hoodie.properties``), as Apache's writer may have set them
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        extra = {TABLE_TYPE: COPY_ON_WRITE} if self.copy_on_write else {}
        create_table(self.storage, "t", ["id"], "ts", ["p"], True, extra={**extra, **self.properties})
        self.schema = avro_schema_json(_table(["x"], 0).schema, "t")
        self.write_action = COMMIT if self.copy_on_write else DELTA_COMMIT

    def _group(self) -> str:
        self.counter += 1
        return f"fg-{self.counter:03d}"

    def insert(self, keys: list[str], value: int = 1) -> str:
        inflight = start_write(self.storage, self.write_action, "insert")
        group = self._group()
        rows = _table(keys, value)
        ctx = TaskContext(inflight.timestamp, 0, 1, 0)
        stat = create_base_file(self.storage, ctx, PARTITION, group, rows, rows["id"], self.schema)
        commit_write(self.storage, inflight, [stat], "insert", self.schema)
        self.groups[group] = inflight.timestamp
        self.keys.update(dict.fromkeys(keys, group))
        return inflight.timestamp

    def update(self, keys: list[str], value: int) -> str:
        inflight = start_write(self.storage, DELTA_COMMIT, "upsert")
        ctx = TaskContext(inflight.timestamp, 0, 2, 0)
        stats = []
        # logs go on the latest file slice (or the one a pending compaction will make)
        view = FileSystemView(self.storage, load_timeline(self.storage))
        latest = {g.file_id: g.latest_slice() for g in view.file_groups(PARTITION)}
        for group in sorted({self.keys[k] for k in keys}):
            mine = [k for k in keys if self.keys[k] == group]
            rows = _table(mine, value)
            fs = latest[group]
            assert fs is not None
            stats.append(
                append_log_blocks(
                    self.storage, ctx, PARTITION, group, fs.log_base_instant, None, rows, rows["id"], [], self.schema
                )
            )
        commit_write(self.storage, inflight, stats, "upsert", self.schema)
        return inflight.timestamp

    def insert_overwrite(self, keys: list[str], value: int, partition: str = PARTITION) -> str:
        """Replace every file group of ``partition`` with one new group holding ``keys``."""
        inflight = start_write(self.storage, REPLACE_COMMIT, "insert_overwrite")
        group = self._group()
        rows = _table(keys, value, partition)
        ctx = TaskContext(inflight.timestamp, 0, 3, 0)
        stat = create_base_file(self.storage, ctx, partition, group, rows, rows["id"], self.schema)
        # the groups the table has now, as the Spark job finds them
        view = FileSystemView(self.storage, load_timeline(self.storage))
        replaced = [g.file_id for g in view.file_groups(partition)]
        commit_write(
            self.storage,
            inflight,
            [stat],
            "insert_overwrite",
            self.schema,
            replaced_file_ids={partition: replaced} if replaced else None,
        )
        if partition == PARTITION:
            self.groups = {group: inflight.timestamp}
            self.keys = dict.fromkeys(keys, group)
        return inflight.timestamp

    def plan_clustering(self, group: str) -> str:
        """A clustering of ``group`` as Apache Hudi's async clustering schedules it: a
        ``.replacecommit.requested`` holding the plan, no heartbeat."""
        view = FileSystemView(self.storage, load_timeline(self.storage))
        (fs,) = [g.latest_slice() for g in view.file_groups(PARTITION) if g.file_id == group]
        assert fs is not None
        assert fs.base_file is not None
        instant = next_instant_time(load_timeline(self.storage))
        plan = {
            "operationType": "CLUSTER",
            "clusteringPlan": {
                "inputGroups": [
                    {
                        "slices": [
                            {
                                "dataFilePath": fs.base_file.path,
                                "deltaFilePaths": [log.path for log in fs.log_files],
                                "fileId": group,
                                "partitionPath": PARTITION,
                                "bootstrapFilePath": "",
                                "version": 1,
                            }
                        ],
                        "metrics": {},
                        "numOutputFileGroups": 1,
                        "extraMetadata": None,
                        "version": 1,
                    }
                ],
                "strategy": {
                    "strategyClassName": "SparkSortAndSizeExecutionStrategy",
                    "strategyParams": {},
                    "version": 1,
                },
                "extraMetadata": {},
                "version": 1,
                "preserveHoodieMetadata": True,
            },
            "extraMetadata": {},
            "version": 1,
        }
        self.storage.write(
            f".hoodie/{instant}.replacecommit.requested", avro.serialize("HoodieRequestedReplaceMetadata", plan)
        )
        return instant

    # --- writes routed through the table's own index ---------------------------------------------

    def recover(self) -> list[str]:
        """What the Spark job does before a write: finish interrupted rollbacks, roll back writes
        a dead writer left pending, remove files of zombie attempts. The rolled-back instants."""
        rolled_back = [r.rolled_back.timestamp for r in rollback_pending_writes(self.storage, RECOVERY)]
        remove_zombie_files(self.storage)
        return rolled_back

    def _index(self, partition: str) -> dict[str, tuple[str, str, str | None]]:
        """key → (file id, base instant for new logs, base file) in ``partition``."""
        from tidemark.table.index import FILE_ID, KEY, read_index

        slices = {
            fs.file_id: fs
            for fs in SnapshotReader(self.storage).view.latest_file_slices()
            if fs.partition_path == partition
        }
        return {
            row[KEY]: (
                row[FILE_ID],
                slices[row[FILE_ID]].log_base_instant,
                base.path if (base := slices[row[FILE_ID]].base_file) else None,
            )
            for row in read_index(self.storage, slices.values()).to_pylist()
        }

    def _write_routed(self, ctx: TaskContext, partition: str, routed: Routed, value: int) -> list[WriteStat]:
        """Each routed group's updates and deletes: log blocks on it, or (copy-on-write) its base
        file rewritten with them."""
        rule = rule_for_table(read_properties(self.storage)).rule if self.copy_on_write else None
        stats = []
        for (file_id, base_instant, base_file), (updates, deletes) in sorted(routed.items(), key=str):
            rows = _table(updates, value, partition)
            if rule is None:
                stat = append_log_blocks(
                    self.storage,
                    ctx,
                    partition,
                    file_id,
                    base_instant,
                    base_file,
                    rows if updates else None,
                    updates,
                    # the ordering value, as the Spark job takes it from the precombine column
                    [DeleteRecord(k, partition, value) for k in deletes],
                    self.schema,
                )
            else:
                assert base_file is not None, f"a copy-on-write group without a base file: {file_id}"
                empty = rows.slice(0, 0)
                stat = merge_base_file(
                    self.storage,
                    ctx,
                    partition,
                    file_id,
                    base_file,
                    base_instant,
                    rows,
                    rows["id"],
                    pa.array(deletes, pa.string()),
                    empty,
                    empty["id"],
                    self.schema,
                    rule,
                )
            stats.append(stat)
        return stats

    def upsert(self, keys: list[str], value: int, partition: str = PARTITION) -> str:
        """Update the keys the table has in ``partition`` (log blocks on their file groups, or
        their base files rewritten) and insert the others (one new file group)."""
        inflight, stats = self.upsert_pending(keys, value, partition)
        commit_write(self.storage, inflight, stats, "upsert", self.schema)
        return inflight.timestamp

    def upsert_pending(
        self, keys: list[str], value: int, partition: str = PARTITION
    ) -> tuple[Instant, list[WriteStat]]:
        """An upsert still running: its files written, its instant inflight, and what
        ``commit_write(t.storage, inflight, stats, "upsert", t.schema)`` takes to finish it."""
        inflight = start_write(self.storage, self.write_action, "upsert")
        return inflight, self.write_upsert(inflight.timestamp, keys, value, partition)

    def write_upsert(self, instant: str, keys: list[str], value: int, partition: str = PARTITION) -> list[WriteStat]:
        """The files of an upsert of the write ``instant`` (begun elsewhere: ``begin_write`` of
        another writer, say), routed by the table as it is now; its commit's stats."""
        ctx = TaskContext(instant, 0, 4, 0)
        index = self._index(partition)
        routed: Routed = {}
        new = []
        for key in sorted(set(keys)):
            if key in index:
                routed.setdefault(index[key], ([], []))[0].append(key)
            else:
                new.append(key)
        stats = self._write_routed(ctx, partition, routed, value)
        if new:
            rows = _table(new, value, partition)
            stats.append(create_base_file(self.storage, ctx, partition, self._group(), rows, rows["id"], self.schema))
        return stats

    def delete(self, keys: list[str], value: int, partition: str = PARTITION) -> str:
        """Delete the keys from ``partition`` (a delete block on each file group holding some);
        keys the table does not have are ignored, as Hudi ignores them."""
        inflight = start_write(self.storage, self.write_action, "delete")
        ctx = TaskContext(inflight.timestamp, 0, 5, 0)
        index = self._index(partition)
        routed: Routed = {}
        for key in sorted(set(keys)):
            if key in index:
                routed.setdefault(index[key], ([], []))[1].append(key)
        stats = self._write_routed(ctx, partition, routed, value)
        commit_write(self.storage, inflight, stats, "delete", self.schema)
        return inflight.timestamp

    def snapshot(self) -> dict[str, int]:
        table = read_snapshot(self.storage)
        if not table.num_rows:
            return {}
        return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))

    def rows(self) -> list[dict[str, Any]]:
        return read_snapshot(self.storage).to_pylist()


def slices_to_clean(t: TableBuilder) -> str:
    """Keys a and b at 1, then two compactions each over an update, and a last update: the first
    file slices are a clean's to delete (``commits_retained=1``). Returns the first write."""

    first = t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    compact(t.storage)
    t.update(["b"], 3)
    compact(t.storage)
    t.update(["a"], 4)
    return first


def write_beat_at(storage: Storage, instant: str, at_ms: int) -> None:
    """``instant``'s heartbeat file as a last beat at ``at_ms`` leaves it: the time in it, and the
    file's modification time, which readers judge by as Hudi does (so local files only)."""
    if not isinstance(storage, LocalStorage):
        raise TypeError(f"only a local file's modification time can be set, not {storage.uri}'s")
    storage.write(heartbeat_path(instant), str(at_ms).encode())
    os.utime(storage.root / heartbeat_path(instant), ns=(at_ms * 1_000_000, at_ms * 1_000_000))
