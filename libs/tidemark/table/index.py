"""The table's simple index, as Hudi's ``HoodieSimpleIndex``: the record keys of each latest file
slice, read from its base file's key column (or, for a group that lives in its logs only, from
the blocks a reader merges; for a group with a compaction pending, the keys its new base file
will hold and those logged on top of it). Upserts and deletes join their input against it by
(partition path, record key) to find each existing record's file group.

The keys of one slice are read by :func:`slice_keys`, wherever it runs (the driver for small
tables, a Spark task for large ones: :mod:`tidemark.spark.write_job`); :func:`slice_key_count`
tells from a base file's footer how many keys a slice holds without reading them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import pyarrow as pa

from tidemark.logformat import BlockType
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import RECORD_KEY
from tidemark.table.base_file import open_base_file, read_base_file
from tidemark.table.file_system_view import FileSlice
from tidemark.table.key_generator import KeyGenerator
from tidemark.table.properties import TableProperties, read_properties
from tidemark.table.snapshot import SnapshotReader, key_column

#: the index's columns: one row per record of the latest file slices
PARTITION, KEY, FILE_ID = "partition_path", "record_key", "file_id"
INDEX_SCHEMA = pa.schema([(PARTITION, pa.string()), (KEY, pa.string()), (FILE_ID, pa.string())])


def slice_keys(
    storage: Storage,
    properties: TableProperties,
    file_slice: FileSlice,
    keygen: KeyGenerator | None = None,
    log_reader: Callable[[], SnapshotReader] | None = None,
) -> pa.Array | pa.ChunkedArray:
    """The record keys of one latest file slice. A table without meta fields stores no keys:
    ``keygen`` computes them from the key columns, as for the input. ``log_reader`` gives the
    reader whose timeline decides which log blocks count (needed for log-only groups only)."""
    computed = keygen if keygen is not None and not properties.populate_meta_fields else None
    if file_slice.pending_compaction is not None:
        return _keys_of_compacting_slice(storage, properties, file_slice, computed, log_reader)
    if file_slice.base_file is not None:
        columns = [RECORD_KEY] if properties.populate_meta_fields else list(properties.record_key_fields)
        base = read_base_file(storage, file_slice.base_file.path, columns)
        return _row_keys(properties, base, computed)
    reader = log_reader() if log_reader is not None else SnapshotReader(storage)
    return pa.array(sorted(_logged_keys(reader, file_slice, computed)), pa.string())


def _row_keys(properties: TableProperties, rows: pa.Table, computed: KeyGenerator | None) -> pa.Array | pa.ChunkedArray:
    """The record keys of stored rows: their key column, or (``computed``: a table without meta
    fields) what the key generator makes of their key columns."""
    if computed is not None:
        return pa.array([computed.record_key(r) for r in rows.to_pylist()], pa.string())
    return key_column(properties, rows)


def _logged_keys(reader: SnapshotReader, file_slice: FileSlice, computed: KeyGenerator | None) -> set[str]:
    """The keys of the data blocks the reader merges, not of every block: a block of a write
    that was rolled back (a restore can leave such a group behind, its base file gone) holds keys
    that live in other groups, and routing them here would duplicate them."""
    blocks, _ = reader.slice_blocks(file_slice)
    return {
        computed.record_key(r) if computed is not None else reader.key_of(r)
        for sb in blocks
        if sb.block.block_type in (BlockType.AVRO_DATA_BLOCK, BlockType.PARQUET_DATA_BLOCK)
        for r in sb.block.records()
    }


def _keys_of_compacting_slice(
    storage: Storage,
    properties: TableProperties,
    file_slice: FileSlice,
    computed: KeyGenerator | None,
    log_reader: Callable[[], SnapshotReader] | None,
) -> pa.Array:
    """The keys of a file group whose compaction is planned and not done: the keys its new base
    file will hold (the planned part merged, deletes applied) and those of the logs written on
    top of it since. Not the old base file's keys: a key deleted in the planned logs is in the
    old base file but not in the new one, and an update routed on top of the compaction would
    then live in logs over a base file without it, where the next write's index (base file keys)
    would miss it and insert it a second time, in another file group."""
    reader = log_reader() if log_reader is not None else SnapshotReader(storage)
    pending = file_slice.pending_compaction
    planned = dataclasses.replace(
        file_slice,
        log_files=tuple(log for log in file_slice.log_files if log.name.base_instant != pending),
        pending_compaction=None,
    )
    on_top = dataclasses.replace(
        file_slice,
        base_file=None,
        log_files=tuple(log for log in file_slice.log_files if log.name.base_instant == pending),
        pending_compaction=None,
    )
    merged = reader.read_slice(planned)
    found: set[str] = set()
    if merged is not None and merged.num_rows:
        found.update(_row_keys(properties, merged, computed).to_pylist())
    found.update(_logged_keys(reader, on_top, computed))
    return pa.array(sorted(found), pa.string())


def slice_index(
    storage: Storage,
    properties: TableProperties,
    file_slice: FileSlice,
    keygen: KeyGenerator | None = None,
    log_reader: Callable[[], SnapshotReader] | None = None,
) -> pa.Table:
    """The index rows of one file slice."""
    keys = slice_keys(storage, properties, file_slice, keygen, log_reader)
    n = len(keys)
    return pa.table(
        [
            pa.array([file_slice.partition_path] * n, pa.string()),
            keys,
            pa.array([file_slice.file_id] * n, pa.string()),
        ],
        schema=INDEX_SCHEMA,
    )


def slice_key_count(storage: Storage, file_slice: FileSlice) -> int | None:
    """How many keys the slice's base file holds, from its footer; None for a group that lives in
    its logs (counting those keys means reading them)."""
    if file_slice.base_file is None:
        return None
    with open_base_file(storage, file_slice.base_file.path) as f:
        return int(f.metadata.num_rows)


def read_index(
    storage: Storage,
    slices: Iterable[FileSlice],
    keygen: KeyGenerator | None = None,
    properties: TableProperties | None = None,
) -> pa.Table:
    """The index rows of ``slices``, read here: in one process for a small table, or in a Spark
    task for its share of a large one. One reader's timeline decides the log-only groups' blocks,
    loaded only if there is such a group."""
    properties = properties if properties is not None else read_properties(storage)
    reader: list[SnapshotReader] = []

    def log_reader() -> SnapshotReader:
        if not reader:
            reader.append(SnapshotReader(storage))
        return reader[0]

    parts = [slice_index(storage, properties, fs, keygen, log_reader) for fs in slices]
    return pa.concat_tables(parts) if parts else INDEX_SCHEMA.empty_table()
