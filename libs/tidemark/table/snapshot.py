"""Snapshot reads: each file slice's base file merged with its log blocks by record key.

Log blocks count when their instant is committed (completed on the timeline at or before the
as-of instant, or older than the active timeline) and no rollback block targets it. Records of
one key merge by the precombine (ordering) field, ties going to the later write; a delete whose
ordering value is 0 or absent follows arrival order, as Hudi's merged log scanner does. Between
base file and logs, ``OverwriteWithLatestAvroPayload`` tables let the log win, others
(``DefaultHoodieRecordPayload``, Spark record merger) compare ordering values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tidemark.errors import TableError
from tidemark.logformat import BlockType, LogBlock, LogFileReader
from tidemark.storage.base import Storage
from tidemark.table.file_system_view import FileSlice, FileSystemView
from tidemark.table.properties import TableProperties, read_properties
from tidemark.timeline import Timeline, load_timeline

RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    RECORD_KEY,
    PARTITION_PATH,
    "_hoodie_file_name",
)
_OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
_DELETED = object()


@dataclass
class ReadStats:
    """What a read skipped, for metrics and for ``--log-blocks`` style reports."""

    file_slices: int = 0
    log_blocks_read: int = 0
    corrupt_blocks: int = 0
    uncommitted_blocks: int = 0
    rolled_back_blocks: int = 0


class SnapshotReader:
    def __init__(self, storage: Storage, as_of: str | None = None) -> None:
        self.storage = storage
        self.properties: TableProperties = read_properties(storage)
        full = load_timeline(storage)
        if as_of is not None and not full.completed().write_instants().is_completed(as_of):
            raise TableError(
                f"--as-of {as_of}: no completed write instant at that time on the active timeline of {storage.uri}"
            )
        self.timeline: Timeline = full.as_of(as_of) if as_of else full
        self.view = FileSystemView(storage, self.timeline)
        self.stats = ReadStats()
        props = self.properties
        self._ordering = props.precombine_field
        self._log_wins_over_base = props.payload_class == _OVERWRITE_PAYLOAD

    # --- keys ------------------------------------------------------------------------------------

    def _key_of(self, record: dict[str, Any]) -> str:
        if self.properties.populate_meta_fields and record.get(RECORD_KEY) is not None:
            return str(record[RECORD_KEY])
        fields = self.properties.record_key_fields
        if len(fields) == 1:
            return str(record.get(fields[0]))
        return ",".join(f"{f}:{record.get(f)}" for f in fields)

    def _key_column(self, table: pa.Table) -> pa.ChunkedArray:
        if self.properties.populate_meta_fields and RECORD_KEY in table.column_names:
            return table.column(RECORD_KEY).cast(pa.string())
        fields = self.properties.record_key_fields
        if len(fields) == 1:
            return table.column(fields[0]).cast(pa.string())
        parts = []
        for i, f in enumerate(fields):
            parts.append(pa.scalar(("," if i else "") + f + ":"))
            parts.append(table.column(f).cast(pa.string()))
        return pc.binary_join_element_wise(*parts, "")

    def _ordering_of(self, record: dict[str, Any]) -> Any:
        return record.get(self._ordering) if self._ordering else None

    # --- log blocks ------------------------------------------------------------------------------

    def _committed_blocks(self, file_slice: FileSlice) -> list[LogBlock]:
        blocks: list[LogBlock] = []
        rolled_back: set[str] = set()
        for log in file_slice.log_files:
            source = self.storage.open_input(log.path)
            for block in LogFileReader(source).blocks():
                self.stats.log_blocks_read += 1
                if block.corrupt is not None:
                    self.stats.corrupt_blocks += 1
                    continue
                if block.is_rollback:
                    target = block.header_value("TARGET_INSTANT_TIME")
                    if target:
                        rolled_back.add(target)
                    continue
                if block.block_type is BlockType.COMMAND_BLOCK:
                    continue
                instant = block.instant_time or ""
                if not self.view.is_committed(instant):
                    self.stats.uncommitted_blocks += 1
                    continue
                blocks.append(block)
        kept = [b for b in blocks if b.instant_time not in rolled_back]
        self.stats.rolled_back_blocks += len(blocks) - len(kept)
        return kept

    def _merge_logs(self, blocks: Iterable[LogBlock]) -> dict[str, Any]:
        """key → winning record dict, or ``_DELETED`` with its ordering value."""
        merged: dict[str, Any] = {}
        orderings: dict[str, Any] = {}
        for block in blocks:
            if block.block_type is BlockType.DELETE_BLOCK:
                for d in block.delete_records():
                    key = d.record_key or ""
                    prev = orderings.get(key)
                    natural = d.ordering_value in (None, 0)
                    if key in merged and not natural and _greater(prev, d.ordering_value):
                        continue  # the stored record is newer than the delete
                    merged[key] = _DELETED
                    orderings[key] = None if natural else d.ordering_value
                continue
            for record in block.records():
                key = self._key_of(record)
                ordering = self._ordering_of(record)
                if key in merged and _greater(orderings.get(key), ordering):
                    continue
                merged[key] = record
                orderings[key] = ordering
        self._log_orderings = orderings
        return merged

    # --- file slices -----------------------------------------------------------------------------

    def read_slice(self, file_slice: FileSlice) -> pa.Table | None:
        self.stats.file_slices += 1
        base = None
        if file_slice.base_file is not None:
            base = pq.read_table(pa.BufferReader(self.storage.read(file_slice.base_file.path)))
        blocks = self._committed_blocks(file_slice)
        if not blocks:
            return base
        merged = self._merge_logs(blocks)
        rows: list[dict[str, Any]] = []
        if base is not None and base.num_rows:
            keys = self._key_column(base)
            touched = pc.is_in(keys, value_set=pa.array(list(merged), pa.string()))
            untouched = base.filter(pc.invert(touched))
            if not self._log_wins_over_base and self._ordering:
                # rows of the base whose key the logs touch: keep whichever is newer
                for row in base.filter(touched).to_pylist():
                    key = self._key_of(row)
                    log_ordering = self._log_orderings.get(key)
                    if log_ordering is not None and _greater(row.get(self._ordering), log_ordering):
                        merged[key] = row
            base = untouched
        rows = [r for r in merged.values() if r is not _DELETED]
        if not rows:
            return base
        log_table = _to_table(rows, base.schema if base is not None else None)
        if base is None:
            return log_table
        return pa.concat_tables([base, log_table], promote_options="permissive")

    def read(self) -> pa.Table:
        tables = []
        for file_slice in self.view.latest_file_slices():
            table = self.read_slice(file_slice)
            if table is not None and table.num_rows:
                tables.append(table)
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")


def _greater(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    try:
        return bool(a > b)
    except TypeError:
        return False


def _to_table(rows: list[dict[str, Any]], schema: pa.Schema | None) -> pa.Table:
    if schema is not None and all(set(r) <= set(schema.names) for r in rows):
        try:
            return pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # types differ (schema evolution): fall back to inference and promotion
    return pa.Table.from_pylist(rows)


def read_snapshot(storage: Storage, as_of: str | None = None) -> pa.Table:
    """The table's snapshot (meta columns included) as of the latest or a given instant."""
    return SnapshotReader(storage, as_of).read()
