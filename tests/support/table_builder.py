"""Builds small Merge-On-Read tables without Spark, through the same write handles and write
client the Spark job uses: inserts as new file groups, updates as log blocks, insert_overwrite as
a replacecommit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tidemark.storage import Storage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.file_system_view import FileSystemView
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import commit_write, create_table, start_write
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import DELTA_COMMIT, REPLACE_COMMIT, load_timeline

PARTITION = "p=1"


def _table(keys: list[str], value: int) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "id": keys,
            "ts": pa.array([value] * n, pa.int64()),
            "v": pa.array([value] * n, pa.int64()),
            "p": pa.array(["1"] * n, pa.string()),
        }
    )


@dataclass
class TableBuilder:
    storage: Storage
    #: file group id → its base instant (latest slice)
    groups: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # key -> file group
    counter: int = 0

    def __post_init__(self) -> None:
        create_table(self.storage, "t", ["id"], "ts", ["p"], True)
        self.schema = avro_schema_json(_table(["x"], 0).schema, "t")

    def _group(self) -> str:
        self.counter += 1
        return f"fg-{self.counter:03d}"

    def insert(self, keys: list[str], value: int = 1) -> str:
        inflight = start_write(self.storage, DELTA_COMMIT, "insert")
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

    def insert_overwrite(self, keys: list[str], value: int) -> str:
        """Replace every file group of the partition with one new group holding ``keys``."""
        inflight = start_write(self.storage, REPLACE_COMMIT, "insert_overwrite")
        group = self._group()
        rows = _table(keys, value)
        ctx = TaskContext(inflight.timestamp, 0, 3, 0)
        stat = create_base_file(self.storage, ctx, PARTITION, group, rows, rows["id"], self.schema)
        replaced = sorted(self.groups)
        commit_write(
            self.storage, inflight, [stat], "insert_overwrite", self.schema, replaced_file_ids={PARTITION: replaced}
        )
        self.groups = {group: inflight.timestamp}
        self.keys = dict.fromkeys(keys, group)
        return inflight.timestamp

    def snapshot(self) -> dict[str, int]:
        table = read_snapshot(self.storage)
        if not table.num_rows:
            return {}
        return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))

    def rows(self) -> list[dict[str, Any]]:
        return read_snapshot(self.storage).to_pylist()
