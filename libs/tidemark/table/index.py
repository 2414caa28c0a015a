"""The table's simple index, as Hudi's ``HoodieSimpleIndex``: the record keys of each latest file
slice, read from its base file's key column (or, for a group that lives in its logs only, from
the blocks a reader merges; for a group with a compaction pending, the keys its new base file
will hold and those logged on top of it; for a slice whose log files may hold inserts, see
:func:`slices_with_logged_inserts`, its base file's keys and those of its log blocks). Upserts and
deletes join their input against it by (partition path, record key) to find each existing
record's file group.

The keys of one slice are read by :func:`slice_keys`, wherever it runs (the driver for small
tables, a Spark task for large ones: :mod:`tidemark.spark.write_job`); :func:`slice_key_count`
tells from a base file's footer how many keys a slice holds without reading them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable

import pyarrow as pa

from tidemark.errors import TimelineError
from tidemark.logformat import BlockType
from tidemark.logformat.file_name import LogFileName
from tidemark.storage.base import Storage, storage_read_pool
from tidemark.table.avro_schema import RECORD_KEY
from tidemark.table.base_file import open_base_file, read_base_file
from tidemark.table.file_system_view import FileSlice, instant_metadata
from tidemark.table.key_generator import KeyGenerator
from tidemark.table.properties import TableProperties, read_properties
from tidemark.table.snapshot import SnapshotReader, key_column
from tidemark.timeline import DELTA_COMMIT, CommitMetadata, Instant, Timeline

#: the index's columns: one row per record of the latest file slices
PARTITION, KEY, FILE_ID = "partition_path", "record_key", "file_id"
INDEX_SCHEMA = pa.schema([(PARTITION, pa.string()), (KEY, pa.string()), (FILE_ID, pa.string())])


def slice_keys(
    storage: Storage,
    properties: TableProperties,
    file_slice: FileSlice,
    keygen: KeyGenerator | None = None,
    log_reader: Callable[[], SnapshotReader] | None = None,
    logged_inserts: bool = False,
) -> pa.Array | pa.ChunkedArray:
    """The record keys of one latest file slice. A table without meta fields stores no keys:
    ``keygen`` computes them from the key columns, as for the input. ``log_reader`` gives the
    reader whose timeline decides which log blocks count (needed when log blocks are read).
    ``logged_inserts``: the slice's log files may hold keys its base file lacks
    (:func:`slices_with_logged_inserts`), so their data blocks are read too."""
    computed = keygen if keygen is not None and not properties.populate_meta_fields else None
    if file_slice.pending_compaction is not None:
        return _keys_of_compacting_slice(storage, properties, file_slice, computed, log_reader)
    if file_slice.base_file is not None:
        columns = [RECORD_KEY] if properties.populate_meta_fields else list(properties.record_key_fields)
        base = read_base_file(storage, file_slice.base_file.path, columns)
        keys = _row_keys(properties, base, computed)
        if not logged_inserts or not file_slice.log_files:
            return keys
        reader = log_reader() if log_reader is not None else SnapshotReader(storage)
        return pa.array(sorted(set(keys.to_pylist()) | _logged_keys(reader, file_slice, computed)), pa.string())
    reader = log_reader() if log_reader is not None else SnapshotReader(storage)
    return pa.array(sorted(_logged_keys(reader, file_slice, computed)), pa.string())


def _logs_on_base_file(file_slice: FileSlice) -> bool:
    return file_slice.base_file is not None and bool(file_slice.log_files) and file_slice.pending_compaction is None


def slices_with_logged_inserts(
    storage: Storage, timeline: Timeline, slices: Iterable[FileSlice]
) -> frozenset[tuple[str, str]]:
    """(partition, file id) of the slices among ``slices`` that have a base file and whose log
    files may hold keys it lacks. Apache pads a small file slice's logs with inserts when its
    index can index log files (Flink's, Spark's INMEMORY, HBASE and BUCKET:
    ``SparkUpsertDeltaCommitPartitioner``), and its append handle counts them in the
    deltacommit's ``numInserts``; tidemark logs updates only (``numInserts`` 0). So a slice's
    logs are read when a completed deltacommit says it logged inserts there, or when a commit's
    metadata has gone meanwhile (archived since the timeline was loaded). And, only on a table
    whose active timeline shows such an inserting writer (a deltacommit logging inserts
    anywhere), when the active timeline cannot tell: a log file no completed deltacommit names
    (an archived write's), or a slice older than the active timeline (Apache appends to log
    files, so a later commit naming a file says nothing of the earlier blocks). Without one
    (tidemark's own tables), those are the logs of every file group not compacted within
    ``hoodie.keep.max.commits`` writes: reading them all on every upsert is what it would cost.
    Slices with a compaction pending are left out: their keys are read from their logs anyway."""
    candidates = [fs for fs in slices if _logs_on_base_file(fs)]
    if not candidates:
        return frozenset()
    since = min(fs.base_instant for fs in candidates)
    first_write = timeline.first_non_savepoint_write() or ""
    # before every candidate's base file, a deltacommit wrote none of their log files; every one
    # after it is read (the stats of one it logged inserts on): at once, each a GET on S3
    deltacommits = [i for i in timeline.completed().of_actions(DELTA_COMMIT) if i.timestamp >= since]
    #: (partition, file id, base instant) -> the log file names completed deltacommits name
    named: dict[tuple[str, str, str], set[str]] = {}
    inserted: set[tuple[str, str, str]] = set()
    unreadable: list[str] = []
    for instant, metadata in zip(
        deltacommits, storage_read_pool().map(_readable_metadata(storage), deltacommits), strict=True
    ):
        if metadata is None:
            # archived since the timeline was loaded, or unreadable: it may have logged inserts
            unreadable.append(instant.timestamp)
            continue
        for partition, stats in metadata.partition_to_write_stats.items():
            for stat in stats:
                if not stat.path or not LogFileName.is_log_file(stat.path):
                    continue
                log = LogFileName.parse(stat.path)
                slice_id = (partition, stat.file_id, log.base_instant)
                named.setdefault(slice_id, set()).update(
                    name.rsplit("/", 1)[-1] for name in (stat.path, *stat.log_files)
                )
                if stat.num_inserts > 0:
                    inserted.add(slice_id)
    # every deltacommit at or after the oldest candidate's base is read: when that base is older
    # than the active timeline, they are all of its deltacommits
    inserting_writer = bool(inserted)
    found = set()
    for fs in candidates:
        slice_id = (fs.partition_path, fs.file_id, fs.base_instant)
        names = named.get(slice_id, set())
        if (
            slice_id in inserted
            or any(t >= fs.base_instant for t in unreadable)
            or (
                inserting_writer
                and (
                    fs.base_instant < first_write
                    or any(log.path.rsplit("/", 1)[-1] not in names for log in fs.log_files)
                )
            )
        ):
            found.add((fs.partition_path, fs.file_id))
    return frozenset(found)


def _readable_metadata(storage: Storage) -> Callable[[Instant], CommitMetadata | None]:
    def read(instant: Instant) -> CommitMetadata | None:
        try:
            return instant_metadata(storage, instant)
        except TimelineError:
            return None

    return read


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
    logged_inserts: bool = False,
) -> pa.Table:
    """The index rows of one file slice (``logged_inserts`` as for :func:`slice_keys`)."""
    keys = slice_keys(storage, properties, file_slice, keygen, log_reader, logged_inserts)
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
    logged_inserts: Collection[tuple[str, str]] | None = None,
) -> pa.Table:
    """The index rows of ``slices``, read here: in one process for a small table, or in a Spark
    task for its share of a large one. One reader's timeline decides which log blocks count,
    loaded only if some are read. ``logged_inserts``: :func:`slices_with_logged_inserts` of
    ``slices``, as the driver found it; None to find it here, from that reader's timeline."""
    properties = properties if properties is not None else read_properties(storage)
    slices = list(slices)
    reader: list[SnapshotReader] = []

    def log_reader() -> SnapshotReader:
        if not reader:
            reader.append(SnapshotReader(storage))
        return reader[0]

    if logged_inserts is None:
        on_base = [fs for fs in slices if _logs_on_base_file(fs)]
        logged_inserts = slices_with_logged_inserts(storage, log_reader().timeline, on_base) if on_base else ()
    parts = [
        slice_index(storage, properties, fs, keygen, log_reader, (fs.partition_path, fs.file_id) in logged_inserts)
        for fs in slices
    ]
    return pa.concat_tables(parts) if parts else INDEX_SCHEMA.empty_table()
