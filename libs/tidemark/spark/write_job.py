"""The PySpark write job for Merge-On-Read tables: upsert, insert, bulk_insert, delete and
insert_overwrite of a DataFrame.

The driver opens an instant, looks existing keys up in the table (a non-global index: a key is
unique within its partition), and sends every file group's records to one Spark task. Tasks write
new file groups as Parquet base files and append updates and deletes as Avro log blocks, each file
under a marker, and return write statuses. The driver completes the instant only when every
task's status is in; if the job fails, the write is rolled back from its markers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DecimalType,
    FloatType,
    FractionalType,
    IntegralType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from tidemark.config import comma_fields, conf_bool, conf_int, switch
from tidemark.errors import (
    CoordinatorError,
    InstantStateError,
    KeyGeneratorError,
    ObjectNotFoundError,
    OutcomeUnknownError,
    StorageError,
    TableChangedError,
    TableError,
    TidemarkError,
    WriteConflictError,
    raised_by_interrupt,
)
from tidemark.logformat import delete_records, ordering_field_type
from tidemark.spark.interrupts import SparkInterrupts, spark_interrupts
from tidemark.spark.task_errors import failure_line, task_error
from tidemark.storage import S3Options, Storage, canonical_location, open_storage
from tidemark.table import key_generator as KG
from tidemark.table.avro_schema import (
    META_FIELDS,
    RECORD_KEY,
    arrow_schema_of,
    avro_schema_json,
    column_paths,
    empty_structs,
    evolution_problems,
    field_path,
    instant_paths,
    latest_table_schema,
    new_invalid_names,
    new_local_timestamps,
    with_utc_timestamps,
)
from tidemark.table.base_file import open_base_file
from tidemark.table.bloom_filter import INDEX_TYPE
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.conflict import (
    EarlyConflictDetector,
    WriteStart,
    file_group_of_data_file,
    from_wire,
    to_wire,
)
from tidemark.table.coordinator_client import (
    CoordinatorEndpoint,
    CoordinatorMarkerWriter,
    CoordinatorSession,
    DirectMarkerWriter,
    check_write_pending,
)
from tidemark.table.expressions import EXPRESSIONS_KEY, columns_of, compile_expression
from tidemark.table.file_system_view import FileSlice, FileSystemView, file_gone_while_reading
from tidemark.table.index import FILE_ID, KEY, PARTITION, read_index, slice_key_count, slices_with_logged_inserts
from tidemark.table.key_generator import KeyGenerator
from tidemark.table.markers import IOType, MarkerWriter, list_markers
from tidemark.table.merge_handle import merge_base_file
from tidemark.table.metadata_table import CDC_ENABLED, check_changeable, disable_requested, prepare_table_change
from tidemark.table.partitioner import (
    InsertBucket,
    SmallFileConfig,
    insert_buckets,
)
from tidemark.table.payload import MergeRule, rule_for_table, with_delete_marker
from tidemark.table.properties import (
    COPY_ON_WRITE,
    DROP_PARTITION_COLUMNS,
    HIVE_STYLE,
    KEY_GENERATOR,
    PARTITION_FIELDS,
    PRECOMBINE_FIELD,
    RECORD_KEY_FIELDS,
    TABLE_TYPE,
    URL_ENCODE,
    TableProperties,
    find_properties,
)
from tidemark.table.snapshot import SnapshotReader, read_snapshot
from tidemark.table.write_client import (
    CommitResult,
    PendingWrite,
    TableSettings,
    begin_write,
    committed_paths,
    create_table_from,
    mark_expression_blocks,
    remove_zombie_files,
    resolve_table_settings,
    rollback_pending_writes,
)
from tidemark.table.write_handles import (
    AVRO_BLOCKS,
    BeforeAppend,
    ParquetConfig,
    TaskContext,
    append_log_blocks,
    base_file_path,
    create_base_file,
    data_block_format,
)
from tidemark.timeline import (
    COMMIT,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    Timeline,
    WriteStat,
    load_timeline,
)

OPERATIONS = ("upsert", "insert", "bulk_insert", "delete", "insert_overwrite", "merge_update")
#: the operations that write an input's records as they are unless COMBINE_BEFORE_INSERT
_UNCOMBINED_OPERATIONS: Final = ("insert", "bulk_insert", "insert_overwrite")
COMBINE_BEFORE_INSERT: Final = "hoodie.combine.before.insert"
#: the operations that look their records up in the index
INDEXED_OPERATIONS = ("upsert", "delete", "merge_update")

#: the largest index (keys in the input's partitions) that is broadcast to the tasks; a larger
#: one is joined by a shuffle. Spark builds a broadcast on the driver, so this bounds its memory.
INDEX_BROADCAST_MAX_KEYS = "tidemark.index.broadcast.max.keys"
DEFAULT_INDEX_BROADCAST_MAX_KEYS = 1_000_000

# helper columns the job adds to the input while routing records to file groups
_KEY, _PART, _FILE, _KIND = "_tm_key", "_tm_partition", "_tm_file_id", "_tm_kind"
#: a record's file group, as its number in the write's bucket list (Hudi's bucket number): the
#: shuffle and the Arrow transfer carry a small integer, not two strings, per record
_BUCKET = "_tm_bucket"
_HELPERS = (_KEY, _PART, _FILE, _KIND, _BUCKET)
#: a record's kind travels as its number here (the tasks see the names again)
_KINDS = ("insert", "update", "delete")


def _kind(name: str) -> Column:
    return F.lit(_KINDS.index(name)).cast("byte")


class WriteFailedError(TidemarkError):
    """The Spark job failed; the write was rolled back and the table is as it was."""


@dataclass(frozen=True)
class WriteOptions:
    """A write's settings. The key settings (record key, precombine, partition fields, hive
    style) default to the existing table's; for a new table the record key is required."""

    operation: str
    record_key: tuple[str, ...] = ()
    precombine: str | None = None
    #: None: the table's (none for a new table); names, or ``name:SIMPLE|TIMESTAMP`` for a
    #: CustomKeyGenerator
    partition_fields: tuple[str, ...] | None = None
    hive_style: bool | None = None
    table_name: str | None = None
    #: COPY_ON_WRITE or MERGE_ON_READ: for a new table (default MERGE_ON_READ, or Hudi's
    #: hoodie.datasource.write.table.type in ``conf``); an existing table's may only be restated
    table_type: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    #: for ``merge_update``: column → expression of the row's current values ("fare * 2")
    set_expressions: Mapping[str, str] = field(default_factory=dict)
    #: where the embedding process acts at fixed points of the job (see :class:`WriteHooks`)
    hooks: WriteHooks = field(default_factory=lambda: WriteHooks())

    def __post_init__(self) -> None:
        # "id" or "id,city", as Hudi's option reads it: a string iterated as a tuple was its
        # characters, and the write looked for columns "i" and "d"
        for name in ("record_key", "partition_fields"):
            given: object = getattr(self, name)  # typed a tuple; an untyped caller may give text
            if isinstance(given, str):
                object.__setattr__(self, name, comma_fields(given))
        # "false" from a config file was a true value, and made a hive-style table
        if self.hive_style is not None:
            object.__setattr__(self, "hive_style", switch("hive_style", self.hive_style))


class WriteHooks:
    """Fixed points of a write where the process that runs it may act: instrumentation, or the
    faults a test injects (task attempts that die, a speculative twin, a driver that dies before
    its commit). This one does nothing. Task hooks run on the executors, so a subclass must be
    picklable and importable there."""

    def task_point(self, point: str, attempt: int) -> None:
        """In a task attempt: ``before_write``, ``after_file`` (after each file group) and
        ``after_all_files``."""

    def before_append(self, attempt: int) -> BeforeAppend | None:
        """What a task attempt calls before each log block it appends, if anything."""
        return None

    def after_log_file(
        self, ctx: TaskContext, data: pa.Table | None, append: Callable[[TaskContext, pa.Table | None], str]
    ) -> None:
        """After a task attempt appended ``data`` to a file group's log with ``append``, which
        appends again for another attempt context (as a speculative copy of the task would)."""

    def before_commit(self) -> None:
        """On the driver, after every task succeeded and before the commit."""

    def keep_unaccepted_files(self) -> bool:
        """Whether the commit leaves the files of attempts it did not accept in place (as Apache
        Hudi leaves log files), instead of deleting them."""
        return False


@dataclass(frozen=True)
class WriteResult:
    instant: str
    operation: str
    inserts: int
    updates: int
    deletes: int
    files_written: int
    removed_files: tuple[str, ...]
    rolled_back: tuple[str, ...]
    #: the file groups an insert_overwrite replaced (their rows left the snapshot), by partition
    replaced_file_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class _TaskPlan:
    """Everything a task needs; pickled to the executors."""

    location: str
    s3: S3Options
    instant: str
    #: the write's action (commit, deltacommit, replacecommit): its inflight file's name
    action: str
    schema_json: str
    data_columns: tuple[str, ...]
    precombine: str | None
    hooks: WriteHooks
    rollover_bytes: int | None
    #: collapse duplicate keys to the largest precombine value (upsert and delete, as Hudi's
    #: combine-before-upsert); a file group's records all reach one task, so it is done there
    dedupe: bool = False
    max_block_bytes: int | None = None
    concurrency: ConcurrencyConfig = field(default_factory=ConcurrencyConfig)
    #: set when early conflict detection is on: what the timeline held when the write started
    start: WriteStart | None = None
    #: the writer-coordinator the tasks send markers to (timeline-server-based markers), with
    #: the API token read on the driver (executors may not have its file; never in a repr)
    coordinator: CoordinatorEndpoint | None = None
    #: a copy-on-write table: file groups with a base file are rewritten (merge handle), never
    #: appended to
    copy_on_write: bool = False
    #: (partition, file id) -> (base instant for log files, base file or None) of the file
    #: groups the write may touch: sent once in the plan, not in every row
    bases: Mapping[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)
    #: how the table's payload precombines a key's records (its ordering field bound)
    merge_rule: MergeRule = field(default_factory=lambda: rule_for_table({}).rule)
    #: log data blocks in Avro or Parquet (Hudi's hoodie.logfile.data.block.format)
    block_format: str = AVRO_BLOCKS
    #: (partition, file id) of each bucket number the records carry
    buckets: tuple[tuple[str, str], ...] = ()
    #: how base files and Parquet log blocks are written (codec, bloom filter)
    parquet: ParquetConfig = field(default_factory=ParquetConfig)
    #: the data column whose values are the record keys, when one is (a string record key
    #: field): the key does not travel twice
    key_column: str | None = None
    #: whether the table keeps Hudi's meta fields (else they are written null)
    meta_fields: bool = True


# --- validation ----------------------------------------------------------------------------------


def _check_columns(df: DataFrame, options: WriteOptions, keygen: KeyGenerator | None = None, rows: bool = True) -> None:
    """The key columns are in the input; with ``rows``, no record's key is null or empty (a Spark
    job of its own: the write folds these checks into its first pass where it can)."""
    columns = set(df.columns)
    partition_names = tuple(f.split(":", 1)[0] for f in options.partition_fields or ())
    needed = {"record key": options.record_key, "partition field": partition_names}
    if options.precombine and options.operation != "delete":  # a delete needs only its keys, as Hudi's
        needed["precombine field"] = (options.precombine,)
    for what, names in needed.items():
        missing = [n for n in names if n.split(".", 1)[0] not in columns]
        if missing:
            raise TableError(f"the input has no {what} column {', '.join(missing)} (columns: {', '.join(df.columns)})")
    if not rows:
        return
    bad_key, null_ordering = _bad_rows(options, keygen)
    checks = [F.max(bad_key.cast("int")).alias("bad_keys")]
    if null_ordering is not None:
        checks.append(F.max(null_ordering.cast("int")).alias("null_ordering"))
    _raise_bad_rows(df.agg(*checks).collect()[0].asDict(), options)


def _bad_rows(options: WriteOptions, keygen: KeyGenerator | None) -> tuple[Column, Column | None]:
    """Per row: whether its record key is missing; whether its precombine value is (None when
    the write has no precombine field)."""
    # as Hudi: a single-field key may be neither null nor empty; a complex key not all of its parts
    empty = [F.col(k).isNull() | (F.col(k).cast("string") == "") for k in options.record_key]
    complex_key = keygen is not None and keygen.complex_record_key
    bad = F.lit(True) if complex_key else F.lit(False)
    for e in empty:
        bad = (bad & e) if complex_key else (bad | e)
    # a delete needs only its keys: a delete without an ordering value wins over the stored
    # record ("natural order"), as Hudi's
    if not options.precombine or options.operation == "delete":
        return bad, None
    # Hudi's inserts read no ordering value unless they combine first (HoodieCreateRecordUtils),
    # so they write a null one; a later merge against a null keeps the newer version, as Hudi's
    combined = conf_bool(options.conf, COMBINE_BEFORE_INSERT, default=False)
    if options.operation in _UNCOMBINED_OPERATIONS and not combined:
        return bad, None
    return bad, F.col(options.precombine).isNull()


def _partition_value_checks(options: WriteOptions) -> list[Column]:
    """Per partition field, whether some record of the input has a value for it: a column a JSON
    input lacks is read as null on every line, and the key generator would take every record to
    the default partition (for a delete or merge_update, look every key up there)."""
    names = [f.split(":", 1)[0] for f in options.partition_fields or ()]
    return [F.max(F.col(n).isNotNull().cast("int")).alias(f"has_partition_{i}") for i, n in enumerate(names)]


def _raise_null_partition_fields(found: Sequence[Mapping[str, Any]], options: WriteOptions) -> None:
    """Refuses a partition field that ``found`` (rows of :func:`_partition_value_checks`) says is
    null on every record; an empty input has nothing to refuse."""
    if not found:
        return
    for i, spec in enumerate(options.partition_fields or ()):
        name = spec.split(":", 1)[0]
        values = [r.get(f"has_partition_{i}") for r in found]
        if all(v == 0 for v in values):
            raise TableError(
                f"the input's partition field {name} is null on every record (a column the input lacks reads as "
                f"null): refused rather than taken as {KG.DEFAULT_PARTITION_PATH}"
            )


def _raise_bad_rows(found: Mapping[str, Any], options: WriteOptions) -> None:
    if found.get("bad_keys"):
        raise TableError(f"the input has records whose record key ({', '.join(options.record_key)}) is null or empty")
    if found.get("null_ordering"):
        raise TableError(
            f"the input has records whose precombine field {options.precombine} is null: {options.operation} "
            f"orders each key's versions by it, as Hudi's does (insert, bulk_insert and insert_overwrite write "
            f"such records unless {COMBINE_BEFORE_INSERT}=true)"
        )


def _as_table_timestamps(df: DataFrame, latest: str | None) -> DataFrame:
    """Input timestamps without a zone (what pandas and pyarrow write to Parquet by default, which
    Spark reads as TimestampNTZ) where the table holds instants, at the top level or inside a
    struct, an array or a map, taken as instants in the session's time zone, as Spark casts them
    (UTC in tidemark's own session). One the table does not have stays, to be refused."""
    if latest is None:
        return df
    instants = instant_paths(latest)
    targets = {f.name: (f.dataType, _as_instants(f.dataType, f.name, instants)) for f in df.schema.fields}
    casts = {name: F.col(name).cast(to) for name, (was, to) in targets.items() if to != was}
    return df.withColumns(casts) if casts else df


def _as_instants(dtype: DataType, path: str, instants: set[str]) -> DataType:
    """``dtype`` (the column at ``path``, named as :func:`instant_paths` names it) with every
    TimestampNTZ at a path in ``instants`` made a TimestampType: a cast to it converts nested
    values field by field, as it converts a top-level one."""
    if isinstance(dtype, TimestampNTZType):
        return TimestampType() if path in instants else dtype
    if isinstance(dtype, StructType):
        return StructType(
            [
                StructField(
                    f.name, _as_instants(f.dataType, field_path(path, f.name), instants), f.nullable, f.metadata
                )
                for f in dtype.fields
            ]
        )
    if isinstance(dtype, ArrayType):
        return ArrayType(_as_instants(dtype.elementType, f"{path}[]", instants), dtype.containsNull)
    if isinstance(dtype, MapType):
        return MapType(dtype.keyType, _as_instants(dtype.valueType, f"{path}{{}}", instants), dtype.valueContainsNull)
    return dtype


#: Hudi's switch that fills the table's columns an input lacks with nulls (else it is refused)
SET_NULL_FOR_MISSING: Final = "hoodie.write.set.null.for.missing.columns"


def _with_table_columns(df: DataFrame, latest: str) -> DataFrame:
    """The table's columns ``df`` lacks added as nulls, in the table's order, so that the commit
    records the table's schema: for a delete, whose input may hold its keys only (as Hudi's), and
    under :data:`SET_NULL_FOR_MISSING`."""
    try:
        table = from_arrow_schema(arrow_schema_of(latest))
    except (TableError, TypeError, ValueError):
        return df  # a type Spark does not map: the schema check names what the input lacks
    columns = _filled_fields(lambda name: F.col(f"`{name}`"), df.schema, table)
    return df if columns is None else df.select(*columns)


def _with_struct_fields(column: Column, have: DataType, want: DataType) -> Column | None:
    """``column`` (of type ``have``) with the fields of the table's struct type ``want`` that it
    lacks added as nulls, at any depth of structs, array items and map values (Hudi fills nested
    columns too); None when it lacks none. A null struct stays null; fields only the input has
    (new ones) stay, at the end."""
    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        if _with_struct_fields(column, have.elementType, want.elementType) is None:  # only asks
            return None
        return F.transform(column, lambda item: _filled(item, have.elementType, want.elementType))
    if isinstance(have, MapType) and isinstance(want, MapType):
        if _with_struct_fields(column, have.valueType, want.valueType) is None:
            return None
        return F.transform_values(column, lambda _, value: _filled(value, have.valueType, want.valueType))
    if not isinstance(have, StructType) or not isinstance(want, StructType):
        return None
    fields = _filled_fields(column.getField, have, want)
    return None if fields is None else F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def _filled_fields(field_of: Callable[[str], Column], have: StructType, want: StructType) -> list[Column] | None:
    """The fields of ``want``, taken from ``have`` by ``field_of`` (nested ones filled), those it
    lacks as nulls, then the fields only ``have`` has; None when it lacks none."""
    held = {f.name: f.dataType for f in have.fields}
    fields: list[Column] = []
    changed = False
    for f in want.fields:
        if f.name not in held:
            fields.append(F.lit(None).cast(f.dataType).alias(f.name))
            changed = True
            continue
        inner = _with_struct_fields(field_of(f.name), held[f.name], f.dataType)
        changed = changed or inner is not None
        fields.append((field_of(f.name) if inner is None else inner).alias(f.name))
    if not changed:
        return None
    wanted = {f.name for f in want.fields}
    return fields + [field_of(f.name).alias(f.name) for f in have.fields if f.name not in wanted]


def _filled(column: Column, have: DataType, want: DataType) -> Column:
    filled = _with_struct_fields(column, have, want)
    return column if filled is None else filled


def new_case_twins(existing: set[str], incoming: Iterable[str]) -> list[str]:
    """Two columns whose names differ only in case, one of them new to the table (``existing``:
    the table's columns; a case-sensitive session lets the input hold both; a table that already
    has both keeps them). Nested ones are compared by their paths (:func:`column_paths_of`): two
    fields of one struct differ only in case when their paths do."""
    names = sorted(existing | set(incoming))
    by_lower: dict[str, list[str]] = {}
    for name in names:
        by_lower.setdefault(name.lower(), []).append(name)
    for group in by_lower.values():
        if len(group) > 1 and not set(group) <= existing:
            return group
    return []


def column_paths_of(dtype: DataType, path: str = "") -> Iterator[str]:
    """Every column path under a Spark type, named as :func:`column_paths` names a table's: a
    struct's fields (``s.x``), array items (``a[]``) and map values (``m{}``), nested ones too."""
    if isinstance(dtype, StructType):
        for f in dtype.fields:
            inner = field_path(path, f.name)
            yield inner
            yield from column_paths_of(f.dataType, inner)
    elif isinstance(dtype, ArrayType):
        yield from column_paths_of(dtype.elementType, f"{path}[]")
    elif isinstance(dtype, MapType):
        yield from column_paths_of(dtype.valueType, f"{path}{{}}")


def case_twins_error(twins: Sequence[str]) -> TableError:
    """The refusal of columns whose names differ only in case (see :func:`new_case_twins`)."""
    return TableError(
        f"columns {' and '.join(twins)} differ only in case: Spark's default session (case-insensitive), "
        "Hive and most catalogs cannot tell them apart, and a query of either would fail; rename one"
    )


def _invalid_names_error(invalid: Sequence[str]) -> TableError:
    return TableError(
        f"column {', '.join(repr(c) for c in invalid)}: not a name Avro allows (a letter or _, then letters, "
        "digits or _), which Hudi's writers refuse and Apache's readers cannot read; rename it"
    )


def _check_top_level_names(df: DataFrame, latest: str | None) -> None:
    """No new top-level column name has a dot or a backtick, checked before anything names a
    column to Spark: Spark reads ``a.b`` as field b of a struct a and backticks as quotes, so such
    a column failed as unresolved, or, as a record key or partition field, as missing. Other names
    Avro does not allow wait for :func:`_check_schema`, which names the nested ones with them."""
    fields = [{"name": c, "type": "string"} for c in df.columns]
    invalid = new_invalid_names(latest, {"type": "record", "name": "input", "fields": fields})
    if any("." in name or "`" in name for name in invalid):
        raise _invalid_names_error(invalid)


def _check_schema(storage: Storage, incoming: dict[str, Any], latest: str | None, keygen: KeyGenerator) -> None:
    """The input's schema may evolve the table's (``latest``: its schema, None for a new table) as
    Hudi allows on write (new nullable columns, promoted types, but none that would change how
    ``keygen`` prints a record key or partition path); the commit then records it."""
    invalid = new_invalid_names(latest, incoming)
    if invalid:
        raise _invalid_names_error(invalid)
    empty = empty_structs(incoming)
    if empty:
        raise TableError(
            f"column {', '.join(repr(c) for c in empty)}: a struct without fields, which Parquet cannot hold; "
            "give it a field or drop it"
        )
    local = new_local_timestamps(latest, incoming)
    if local:
        raise TableError(
            f"column {', '.join(local)} is a timestamp without time zone (TimestampNTZType), which Hudi's "
            "version-6 writers do not write and Apache's readers cannot read; cast it to TimestampType"
        )
    if latest is None:
        return
    problems = evolution_problems(latest, incoming, keygen)
    if problems:
        raise TableError(f"the input does not match the schema of {storage.uri}: " + "; ".join(problems))


# --- index -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _IndexPlan:
    """What an index task needs to read the keys of the latest file slices; pickled to the
    executors (file-slice metadata, never keys)."""

    location: str
    s3: S3Options
    properties: TableProperties
    keygen: KeyGenerator | None
    #: a slice's position here is its bucket number
    slices: tuple[FileSlice, ...]
    #: partition -> the smallest and largest key of the input there: a key of the table outside
    #: that range matches no record of the input, and is left out of the index
    key_ranges: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: (partition, file id) of the slices whose log blocks are read too: their logs may hold
    #: inserts (:func:`~tidemark.table.index.slices_with_logged_inserts`, found by the driver)
    logged_inserts: frozenset[tuple[str, str]] = frozenset()


def _index_slices(storage: Storage, timeline: Timeline, partitions: Iterable[str]) -> list[FileSlice]:
    """The latest file slices of the partitions the input touches: the only ones a record of
    the input can be in (the index is partition-scoped, as Hudi's simple index)."""
    view = FileSystemView(storage, timeline)
    return [
        latest
        for p in sorted(partitions)
        for group in view.file_groups(p)
        if (latest := group.latest_slice()) is not None and not latest.is_empty
    ]


def _read_index(plan: _IndexPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """An index task: the keys of the slices whose numbers it receives, read on the executor,
    each with its slice's number (the file group's bucket)."""
    storage = open_storage(plan.location, plan.s3)
    for batch in batches:
        numbers = batch.column(0).cast(pa.int32())
        slices = [plan.slices[number] for number in numbers.to_pylist()]
        rows = read_index(storage, slices, plan.keygen, plan.properties, plan.logged_inserts)
        groups = pc.binary_join_element_wise(rows.column(PARTITION), rows.column(FILE_ID), "/")
        found = pc.index_in(groups, value_set=pa.array([f"{fs.partition_path}/{fs.file_id}" for fs in slices]))
        index = pa.table({_PART: rows.column(PARTITION), _KEY: rows.column(KEY), _BUCKET: pc.take(numbers, found)})
        if plan.key_ranges:
            ranges = [plan.key_ranges.get(fs.partition_path) for fs in slices]
            low = pc.take(pa.array([r[0] if r else None for r in ranges], pa.string()), found)
            high = pc.take(pa.array([r[1] if r else None for r in ranges], pa.string()), found)
            keys = index.column(_KEY)
            index = index.filter(pc.and_(pc.greater_equal(keys, low), pc.less_equal(keys, high)))
        yield from index.to_batches()


def _index_frame(spark: SparkSession, plan: _IndexPlan) -> DataFrame:
    """(partition, key, bucket) of every record in ``plan``'s slices, as a DataFrame whose rows
    the executors read: the driver holds the slices, never the keys."""
    tasks = max(1, min(len(plan.slices), 4 * spark.sparkContext.defaultParallelism))
    numbers = spark.range(0, len(plan.slices), 1, tasks)
    return numbers.mapInArrow(lambda it: _read_index(plan, it), f"{_PART} string, {_KEY} string, {_BUCKET} int")


def _index_is_small(
    storage: Storage, slices: Sequence[FileSlice], limit: int, logged_inserts: frozenset[tuple[str, str]]
) -> bool:
    """Whether the index holds at most ``limit`` keys, counted from the base files' footers (a
    few bytes each, read eight at a time, and no further than the limit). The keys of a log-only
    group, or of a slice whose logs may hold inserts, cannot be counted without reading them:
    such an index is not small."""
    from concurrent.futures import ThreadPoolExecutor

    if logged_inserts or any(fs.base_file is None for fs in slices):
        return False
    total = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        for start in range(0, len(slices), 8):
            total += sum(c or 0 for c in pool.map(lambda fs: slice_key_count(storage, fs), slices[start : start + 8]))
            if total > limit:
                return False
    return True


# --- tasks ---------------------------------------------------------------------------------------


def _write_partition(plan: _TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext as SparkTaskContext

    tc = SparkTaskContext.get()
    ctx = (
        TaskContext(
            plan.instant, tc.partitionId(), tc.stageId(), tc.attemptNumber(), plan.meta_fields, tc.taskAttemptId()
        )
        if tc
        else TaskContext(plan.instant, 0, 0, 0, plan.meta_fields)
    )
    received = list(batches)
    # Spark labels timestamps with its session's zone; the table's are UTC (the same values)
    table = _with_file_groups(plan, with_utc_timestamps(pa.Table.from_batches(received))) if received else None
    storage = open_storage(plan.location, plan.s3)
    markers = _marker_writer(storage, plan)
    statuses: list[str] = []
    plan.hooks.task_point("before_write", ctx.attempt)
    try:
        if table is not None and table.num_rows:
            statuses = _write_task_files(storage, plan, ctx, table, markers)
        plan.hooks.task_point("after_all_files", ctx.attempt)
        if markers.paths:
            # a write rolled back (or committed) while this attempt wrote: the rollback took
            # away what was marked before it ended, this attempt takes the rest
            check_write_pending(storage, plan.instant, plan.action)
    except InstantStateError:
        # never a file the commit names (no other attempt has this one's write token, so none
        # should be: a file lost here would be a committed row lost)
        keep = committed_paths(storage, plan.instant, plan.action)
        if keep is not None:  # unknown: all left to the next write
            for path in markers.paths:
                if path not in keep:
                    with contextlib.suppress(StorageError):  # under a marker: the next write removes it
                        storage.delete(path)
        raise
    yield pa.RecordBatch.from_pydict({"status": statuses}, schema=pa.schema([("status", pa.string())]))


def _write_task_files(
    storage: Storage, plan: _TaskPlan, ctx: TaskContext, table: pa.Table, markers: _TaskMarkers
) -> list[str]:
    """A task's file groups written (the write statuses)."""
    statuses: list[str] = []
    # the new file groups' base files are known now: their markers in one go (through the
    # coordinator one request instead of one per file; a conflict stops the task here)
    if plan.copy_on_write:
        # every touched group gets a new base file: a rewrite (MERGE) where it has one
        touched = table.group_by([_PART, _FILE]).aggregate([]).to_pylist()
        files = [
            (g[_PART], g[_FILE], IOType.MERGE if _base_file_of(plan, g[_PART], g[_FILE]) else IOType.CREATE)
            for g in touched
        ]
    else:
        inserts = table.filter(pc.equal(table[_KIND], "insert")).group_by([_PART, _FILE]).aggregate([]).to_pylist()
        files = [(g[_PART], g[_FILE], IOType.CREATE) for g in inserts]
    markers.prepare(sorted((base_file_path(ctx, part, file_id), io) for part, file_id, io in files))
    write = _write_cow_file_group if plan.copy_on_write else _write_file_group
    for rows in _by_file_group(table):
        statuses.extend(write(storage, plan, ctx, rows, markers))
        plan.hooks.task_point("after_file", ctx.attempt)
    return statuses


def _with_file_groups(plan: _TaskPlan, table: pa.Table) -> pa.Table:
    """The records as the shuffle delivers them (a bucket and a kind number each) with their
    partition, file id and kind by name again."""
    buckets = table.column(_BUCKET)
    partitions = pa.array([p for p, _ in plan.buckets], pa.string())
    file_ids = pa.array([f for _, f in plan.buckets], pa.string())
    kinds = pc.take(pa.array(_KINDS), table.column(_KIND))
    table = table.drop_columns([_KIND])
    if plan.key_column is not None:
        table = table.append_column(_KEY, table.column(plan.key_column))
    return (
        table.append_column(_PART, pc.take(partitions, buckets))
        .append_column(_FILE, pc.take(file_ids, buckets))
        .append_column(_KIND, kinds)
    )


def _by_file_group(table: pa.Table) -> Iterator[pa.Table]:
    """The task's rows by file group, in bucket order: one stable sort of the bucket numbers and
    a slice per group (the input order of a key's versions is kept for the precombine's ties)."""
    buckets = table.column(_BUCKET)
    bounds = pc.min_max(buckets)
    if bounds["min"] == bounds["max"]:
        yield table
        return
    stable = pc.sort_indices(buckets)  # a stable sort
    numbers = pc.take(buckets, stable).combine_chunks()
    table = table.take(stable)
    start = 0
    for end in pc.run_end_encode(numbers).run_ends.to_pylist():
        yield table.slice(start, end - start)
        start = end


def _dedupe(rows: pa.Table, rule: MergeRule) -> pa.Table:
    """One row per key, its versions in the batch precombined as the table's payload says. A
    record the payload takes as a delete (``_hoodie_is_deleted``, ``Op = D``...) becomes a delete
    of its key, as Hudi's append handle writes it, or is dropped when the key is new."""
    rows = rule.precombine_rows(rows, _KEY)
    deleted = rule.deleted_mask(rows)
    if not pc.any(deleted).as_py():
        return rows
    new_key = pc.equal(rows[_KIND].cast(pa.string()), "insert")  # judged before the kinds change
    kinds = pc.if_else(deleted, pa.scalar("delete"), rows[_KIND])
    rows = rows.set_column(rows.column_names.index(_KIND), _KIND, kinds)
    return rows.filter(pc.invert(pc.and_(deleted, new_key)))


class _TaskMarkers:
    """A task's markers: through the coordinator when the write uses one (direct ones once it
    cannot be reached), else direct with the direct early check (RFC-56) after each. A conflict
    fails the task with a line the driver reads back."""

    def __init__(self, inner: MarkerWriter) -> None:
        self.inner = inner
        #: the data files marked (every file this attempt writes is its own, log files too)
        self.paths: list[str] = []

    def create(self, data_path: str, io_type: IOType) -> None:
        self.paths.append(data_path)
        try:
            self.inner.create(data_path, io_type)
        except WriteConflictError as e:
            raise _on_the_wire(e) from None

    def prepare(self, files: Sequence[tuple[str, IOType]]) -> None:
        self.paths.extend(path for path, _ in files)
        try:
            self.inner.prepare(files)
        except WriteConflictError as e:
            raise _on_the_wire(e) from None


def _on_the_wire(e: WriteConflictError) -> WriteConflictError:
    return WriteConflictError(to_wire(e), instant=e.instant, other=e.other, file_groups=e.file_groups, stage=e.stage)


def _marker_writer(storage: Storage, plan: _TaskPlan) -> _TaskMarkers:
    detector = EarlyConflictDetector(storage, plan.concurrency, plan.start) if plan.start is not None else None
    direct = DirectMarkerWriter(storage, plan.instant, detector, action=plan.action)
    if plan.coordinator is None:
        return _TaskMarkers(direct)
    return _TaskMarkers(CoordinatorMarkerWriter(plan.coordinator.client(plan.location), plan.instant, direct))


def _write_file_group(
    storage: Storage, plan: _TaskPlan, ctx: TaskContext, rows: pa.Table, markers: MarkerWriter
) -> list[str]:
    # without the precombine, as Hudi's create handle: a record the payload takes as a delete is
    # not written
    rows = _dedupe(rows, plan.merge_rule) if plan.dedupe else rows.filter(pc.invert(plan.merge_rule.deleted_mask(rows)))
    if not rows.num_rows:  # a new group's records were all deletes: nothing to write
        return []
    partition = rows[_PART][0].as_py()
    file_id = rows[_FILE][0].as_py()
    kinds = rows[_KIND]
    data_cols = list(plan.data_columns)
    inserts = rows.filter(pc.equal(kinds, "insert"))
    updates = rows.filter(pc.equal(kinds, "update"))
    deletes = rows.filter(pc.equal(kinds, "delete"))
    out = []
    if inserts.num_rows:
        out.append(_new_base_file(storage, plan, ctx, partition, file_id, inserts, markers))
    if updates.num_rows or deletes.num_rows:
        base, base_file = plan.bases[(partition, file_id)]
        ordering = deletes[plan.precombine].to_pylist() if plan.precombine else None
        field_type = ordering_field_type(plan.schema_json, plan.precombine) if plan.precombine else None
        deleted = delete_records(deletes[_KEY].to_pylist(), partition, ordering, field_type)

        def append(task: TaskContext, data: pa.Table | None) -> str:
            stat = append_log_blocks(
                storage,
                task,
                partition,
                file_id,
                base,
                base_file,
                data,
                updates[_KEY],
                deleted,
                plan.schema_json,
                rollover_bytes=plan.rollover_bytes,
                max_block_bytes=plan.max_block_bytes,
                before_append=plan.hooks.before_append(task.attempt),
                markers=markers,
                block_format=plan.block_format,
                parquet=plan.parquet,
            )
            return json.dumps({**stat.to_json(), "kind": "log"})

        data = updates.select(data_cols) if updates.num_rows else None
        out.append(append(ctx, data))
        plan.hooks.after_log_file(ctx, data, append)
    return out


def _new_base_file(
    storage: Storage,
    plan: _TaskPlan,
    ctx: TaskContext,
    partition: str,
    file_id: str,
    inserts: pa.Table,
    markers: MarkerWriter,
) -> str:
    """A new file group's first base file, of the inserts routed to it; its write status."""
    data = inserts.select(list(plan.data_columns))
    stat = create_base_file(
        storage,
        ctx,
        partition,
        file_id,
        data,
        inserts[_KEY],
        plan.schema_json,
        markers=markers,
        parquet=plan.parquet,
    )
    return json.dumps({**stat.to_json(), "kind": "insert"})


def _base_file_of(plan: _TaskPlan, partition: str, file_id: str) -> str | None:
    found = plan.bases.get((partition, file_id))
    return found[1] if found is not None else None


def _write_cow_file_group(
    storage: Storage, plan: _TaskPlan, ctx: TaskContext, rows: pa.Table, markers: MarkerWriter
) -> list[str]:
    """A copy-on-write file group: its base file rewritten with the group's records merged in
    (updates, deletes, and inserts routed to it as a small file), or a new group's first file."""
    partition = rows[_PART][0].as_py()
    file_id = rows[_FILE][0].as_py()
    base_file = _base_file_of(plan, partition, file_id)
    if plan.dedupe or base_file is not None:
        # precombined only: the merge handle combines a record the payload takes as a delete with
        # the stored row as the payload says (the delete operation's keys go whatever they hold).
        # A merge takes one record per key, as Hudi's merge handle keeps its incoming records in a
        # map by key: an insert's duplicates routed to a small file are precombined too (else each
        # copy would merge with the stored row, or both stay), while a new group keeps them
        rows = plan.merge_rule.precombine_rows(rows, _KEY)
    data_cols = list(plan.data_columns)
    kinds = rows[_KIND]
    inserts = rows.filter(pc.equal(kinds, "insert"))
    if base_file is None and inserts.num_rows < rows.num_rows:
        raise TableError(f"file group {partition}/{file_id} has no base file to merge updates into")
    if base_file is None:  # a new file group's first file
        inserts = inserts.filter(pc.invert(plan.merge_rule.deleted_mask(inserts)))
        if not inserts.num_rows:  # its records were all deletes: nothing to write
            return []
        return [_new_base_file(storage, plan, ctx, partition, file_id, inserts, markers)]
    updates = rows.filter(pc.equal(kinds, "update"))
    deletes = rows.filter(pc.equal(kinds, "delete"))
    stat = merge_base_file(
        storage,
        ctx,
        partition,
        file_id,
        base_file,
        plan.bases[(partition, file_id)][0],
        updates.select(data_cols),
        updates[_KEY],
        deletes[_KEY],
        inserts.select(data_cols),
        inserts[_KEY],
        plan.schema_json,
        plan.merge_rule,
        markers=markers,
        parquet=plan.parquet,
    )
    return [json.dumps({**stat.to_json(), "kind": "merge"})]


# --- the driver ----------------------------------------------------------------------------------


def _field_types(schema: StructType, prefix: str = "") -> dict[str, DataType]:
    """The type of every column and struct field, by the dotted name a key field gives it
    (``a.b``): a nested field's values print by its own type, as a top-level column's do."""
    types: dict[str, DataType] = {}
    for f in schema.fields:
        types[prefix + f.name] = f.dataType
        if isinstance(f.dataType, StructType):
            types.update(_field_types(f.dataType, f"{prefix}{f.name}."))
    return types


def _key_generator(values: Mapping[str, str], df: DataFrame, storage: Storage, table_exists: bool) -> KeyGenerator:
    """The table's key generator for this input (its column types decide how values print)."""
    types = _field_types(df.schema)
    record_keys = comma_fields(values[RECORD_KEY_FIELDS]) or ()
    spec = values.get(KG.WRITE_PARTITION_FIELDS) or values.get(PARTITION_FIELDS, "")
    partition_names = [p.split(":", 1)[0].strip() for p in spec.split(",") if p.strip()]
    for column in (*record_keys, *partition_names):
        if isinstance(types.get(column), BinaryType):
            raise KeyGeneratorError(f"column {column} is binary: Hudi's key generators cannot use it for keys")
    first = types.get(partition_names[0]) if partition_names else None
    class_name = values[KEY_GENERATOR]
    prefixed = False
    if KG.check_supported(class_name) == "complex" and len(record_keys) == 1:
        prefixed = _single_key_field_prefixed(values, storage, record_keys[0], table_exists)
    return KG.build_key_generator(
        class_name,
        record_keys,
        spec,
        values,
        hive_style=values.get(HIVE_STYLE) == "true",
        url_encode=values.get(URL_ENCODE) == "true",
        field_prefixed_single_key=prefixed,
        text_partition=isinstance(first, StringType) if first is not None else None,
        float_columns=frozenset(n for n, t in types.items() if isinstance(t, FloatType)),
        new_table=not table_exists,
    )


def _single_key_field_prefixed(
    values: Mapping[str, str], storage: Storage, field_name: str, table_exists: bool
) -> bool:
    """Whether a ComplexKeyGenerator with one record key field writes ``field:value`` (Hudi
    0.14.0 and older) or the bare value (0.14.1 to 1.0.2): as the table says, else as the write's
    ``hoodie.write.complex.keygen.new.encoding`` says, else as the table's records are keyed."""
    encoding = values.get(KG.COMPLEX_ENCODING)
    if encoding:
        return encoding.strip().upper() == "FIELD_PREFIXED"
    new_encoding = values.get(KG.COMPLEX_NEW_ENCODING)
    if new_encoding is not None:
        return new_encoding.strip().lower() != "true"
    if table_exists:
        reader = SnapshotReader(storage)
        if reader.properties.populate_meta_fields:
            for fs in reader.view.latest_file_slices():
                if fs.base_file is not None:
                    with open_base_file(storage, fs.base_file.path) as f:  # one key is enough
                        first = next(f.iter_batches(batch_size=1, columns=[RECORD_KEY]), None)
                    if first is not None and first.num_rows:
                        return str(first.column(0)[0].as_py()).startswith(f"{field_name}:")
    return False


def _text(df_types: Mapping[str, Any], name: str, consistent_timestamp: bool) -> Column:
    """A column's values as Hudi prints them in keys (``Double.toString`` is Spark's cast too; a
    timestamp is its Avro long, microseconds, unless the consistent-timestamp setting is on)."""
    column = F.col(name)
    kind = df_types.get(name)
    if isinstance(kind, TimestampType | TimestampNTZType) and not consistent_timestamp:
        return F.unix_micros(column.cast("timestamp")).cast("string")
    if isinstance(kind, DecimalType) and kind.scale > 6:
        return _big_decimal_text(column, kind.scale)
    return column.cast("string")


def _big_decimal_text(column: Column, scale: int) -> Column:
    """``BigDecimal.toString`` of a decimal column of ``scale`` (above 6, or it is plain text, as
    Spark's cast prints it): scientific when the value's adjusted exponent is below -6, so 0 of a
    decimal(38, 18) is ``0E-18``, as Hudi's key generators print it."""
    # the unscaled digits, without sign or leading zeros ("0" for zero)
    digits = F.regexp_replace(F.regexp_replace(F.abs(column).cast("string"), r"\.", ""), r"^0+(?=\d)", "")
    adjusted = F.length(digits) - F.lit(scale + 1)
    coefficient = F.when(
        F.length(digits) > 1, F.concat(F.substring(digits, 1, 1), F.lit("."), F.substring(digits, 2, 100))
    ).otherwise(digits)
    sign = F.when(column < 0, F.lit("-")).otherwise(F.lit(""))
    scientific = F.concat(sign, coefficient, F.lit("E"), adjusted.cast("string"))
    return F.when(adjusted < -6, scientific).otherwise(column.cast("string"))


def _key_expr(keygen: KeyGenerator, types: Mapping[str, Any]) -> Column:
    fields = keygen.record_key_fields
    if not keygen.complex_record_key:
        return _text(types, fields[0], keygen.consistent_timestamp)
    parts = []
    for f in fields:
        text = _text(types, f, keygen.consistent_timestamp)
        value = (
            F.when(text.isNull(), F.lit(KG.NULL_RECORDKEY_PLACEHOLDER))
            .when(text == "", F.lit(KG.EMPTY_RECORDKEY_PLACEHOLDER))
            .otherwise(text)
        )
        parts.append(F.concat(F.lit(f"{f}:"), value))
    return F.concat_ws(",", *parts)


def _partition_expr(keygen: KeyGenerator, types: Mapping[str, Any]) -> Column:
    if keygen.kind == "nonpartitioned" or not keygen.partition_fields:
        return F.lit("")
    parts = []
    for f in keygen.partition_field_names:
        text = _text(types, f, keygen.consistent_timestamp)
        value = F.when(text.isNull() | (text == ""), F.lit(KG.DEFAULT_PARTITION_PATH)).otherwise(text)
        parts.append(F.concat(F.lit(f"{f}="), value) if keygen.hive_style else value)
    return F.concat_ws("/", *parts)


def _key_column(keygen: KeyGenerator, df: DataFrame) -> str | None:
    """The column whose values are the record keys as they are: one string record key field
    whose text Spark computes (:func:`_key_expr` casts a string to itself)."""
    if not keygen.is_simple_text or keygen.complex_record_key or len(keygen.record_key_fields) != 1:
        return None
    name = keygen.record_key_fields[0]
    types = {f.name: f.dataType for f in df.schema.fields}
    return name if isinstance(types.get(name), StringType) else None


def _with_keys(df: DataFrame, keygen: KeyGenerator) -> DataFrame:
    """``df`` with each record's key and partition path: Spark expressions where they are plain
    concatenations of values, else (timestamp formats, URL-encoding) the key generator's pure
    function per row, on the executors."""
    types = _field_types(df.schema)
    if keygen.is_simple_text:
        return df.withColumn(_KEY, _key_expr(keygen, types)).withColumn(_PART, _partition_expr(keygen, types))
    out_schema = StructType([*df.schema.fields, StructField(_KEY, StringType()), StructField(_PART, StringType())])

    def compute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys, paths = [], []
            for row in batch.to_pylist():
                keys.append(keygen.record_key(row))
                paths.append(keygen.partition_path(row))
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array(keys, pa.string()), pa.array(paths, pa.string())],
                names=[*batch.schema.names, _KEY, _PART],
            )

    return df.mapInArrow(compute, out_schema)


def _route_inserts(
    frame: DataFrame,
    buckets: Mapping[str, Sequence[InsertBucket]],
    numbers: Mapping[tuple[str, str], int],
    new: Column | None = None,
) -> DataFrame:
    """Route new records (the rows where ``new`` holds; every row when None) to their
    partition's insert buckets (:mod:`tidemark.table.partitioner`): a record's bucket is chosen by
    the hash of its key, each bucket taking the share its record count says (Hudi's weighted
    buckets). Sets their bucket number only (``numbers``): file ids and base files reach the
    tasks in their plan, not in every row."""
    if not buckets:
        bucket = F.lit(None).cast("int")
    else:

        def by_partition(values: Mapping[str, Column]) -> Column:
            return F.create_map(*[x for p, v in values.items() for x in (F.lit(p), v)])

        totals = by_partition({p: F.lit(max(1, sum(b.records for b in bs))).cast("long") for p, bs in buckets.items()})
        bounds = by_partition(
            {
                p: F.array(*[F.lit(c).cast("long") for c in itertools.accumulate(b.records for b in bs)])
                for p, bs in buckets.items()
            }
        )
        ids = by_partition(
            {p: F.array(*[F.lit(numbers[(p, b.file_id)]).cast("int") for b in bs]) for p, bs in buckets.items()}
        )
        slot = F.pmod(F.xxhash64(F.col(_KEY)), totals[F.col(_PART)])
        # 1-based: how many buckets end at or before the slot, plus one
        index = F.size(F.filter(bounds[F.col(_PART)], lambda end: end <= slot)) + 1
        bucket = F.element_at(ids[F.col(_PART)], index)
    if new is not None:
        return frame.withColumn(_BUCKET, F.when(new, bucket).otherwise(F.col(_BUCKET)))
    return frame.withColumn(_BUCKET, bucket)


def write_dataframe(
    df: DataFrame, location: str | os.PathLike[str], options: WriteOptions, s3: S3Options | None = None
) -> WriteResult:
    """Write ``df`` to the Hudi table at ``location`` (created on first write). A Ctrl-C cancels
    its Spark jobs and leaves the write uncommitted (rolled back)."""
    if not isinstance(options, WriteOptions):
        raise TypeError(
            f"write_dataframe takes a WriteOptions, not {type(options).__name__}; for a Hudi options dict "
            "use tidemark.spark.write(df, location, **hudi_options)"
        )
    with spark_interrupts(df.sparkSession) as interrupts:
        return _write_dataframe(df, location, options, s3, interrupts)


def _write_dataframe(
    df: DataFrame,
    location: str | os.PathLike[str],
    options: WriteOptions,
    s3: S3Options | None,
    interrupts: SparkInterrupts,
) -> WriteResult:
    op = options.operation
    tuning = check_write_settings(options)
    s3 = s3 or S3Options()
    # one spelling from here on: a relative path means nothing to a Python worker or to a service
    # (the write's event names the table) in another working directory
    location = canonical_location(location)
    storage = open_storage(location, s3)
    existing = find_properties(storage)
    # a table with a metadata table, or whose properties say copy-on-write over deltacommits (a
    # copy-on-write write would leave their logs merged by no one), is refused before any work; the
    # metadata table is disabled, when asked, only once the write's settings and input have passed
    # their checks, and the type is checked then
    if existing is not None and not disable_requested(options.conf):
        check_changeable(storage, "write", existing)
    latest = latest_table_schema(storage) if existing is not None else None
    _check_top_level_names(df, latest)
    if op != "merge_update":  # a flag naming a column the input lacks is an input error first
        _check_columns(df, options, rows=False)
    # the table's own configuration is the default; a write's flags may restate it, not change it
    settings = TableSettings.from_conf(
        options.conf,
        options.record_key,
        options.precombine,
        options.partition_fields,
        options.hive_style,
        table_type=options.table_type,
    )
    values = resolve_table_settings(storage.uri, existing, settings)
    # a table that records no precombine field precombines this write's input by the write's, as
    # Hudi's writer does; its hoodie.properties keeps none, so its readers merge by arrival
    precombine = values.get(PRECOMBINE_FIELD) or options.precombine
    write_values = {**values, PRECOMBINE_FIELD: precombine} if precombine else values
    merge_rule = with_delete_marker(rule_for_table(write_values).rule, options.conf, storage.uri)
    # a table that does not say is copy-on-write, as for Hudi
    copy_on_write = values.get(TABLE_TYPE, COPY_ON_WRITE) == COPY_ON_WRITE
    if copy_on_write and existing is not None and not existing.populate_meta_fields:
        raise TableError(
            f"{storage.uri} is a copy-on-write table without meta fields (hoodie.populate.meta.fields=false): "
            "tidemark cannot rewrite its base files by record key yet"
        )
    sizing, block_format, parquet = tuning.sizing, tuning.block_format, tuning.parquet
    tasks, broadcast_max = tuning.tasks, tuning.broadcast_max
    max_block_bytes, rollover_bytes = tuning.max_block_bytes, tuning.rollover_bytes
    options = dataclasses.replace(
        options,
        record_key=comma_fields(values[RECORD_KEY_FIELDS]) or (),
        precombine=precombine or None,
        partition_fields=comma_fields(values.get(PARTITION_FIELDS, "")),
        hive_style=values.get(HIVE_STYLE) == "true",
    )
    extra_metadata: dict[str, str] = {}
    if op == "merge_update":
        # the keys need the record key and partition columns, not the precombine (the table's
        # rows carry theirs); a key looked up in the wrong partition would match nothing, unseen
        _check_columns(df, dataclasses.replace(options, precombine=None), rows=False)
        if options.partition_fields:
            _raise_null_partition_fields([df.agg(*_partition_value_checks(options)).collect()[0].asDict()], options)
        df = _expression_rows(df, storage, options)
        extra_metadata[EXPRESSIONS_KEY] = json.dumps(dict(options.set_expressions), sort_keys=True)
    keygen = _key_generator(values, df, storage, existing is not None)
    # keys that Python code computes may fail on a bad key first: those are checked on their own
    _check_columns(df, options, keygen, rows=not keygen.is_simple_text)
    data_columns = tuple(c for c in df.columns if c not in META_FIELDS and c not in _HELPERS)
    # before anything selects them: a case-insensitive session takes either name for both, at
    # any depth (a struct's field too)
    data_types = StructType([f for f in df.schema.fields if f.name in data_columns])
    twins = new_case_twins(column_paths(latest) if latest else set(), column_paths_of(data_types))
    if twins:
        raise case_twins_error(twins)
    cached_input = df.storageLevel.useMemory or df.storageLevel.useDisk
    df = df.select(*data_columns)
    name = options.table_name or location.rstrip("/").rsplit("/", 1)[-1] or "table"
    name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    if latest is not None and (op == "delete" or conf_bool(options.conf, SET_NULL_FOR_MISSING, default=False)):
        df = _with_table_columns(df, latest)
        data_columns = tuple(df.columns)
    df = _as_table_timestamps(df, latest)
    arrow_schema = to_arrow_schema(df.schema, timezone="UTC")
    # named as the table's own schema (a decimal's Avro type carries the name): a table whose
    # folder is not its name must not look like another schema
    incoming = json.loads(avro_schema_json(arrow_schema, existing.name if existing else name, with_meta_fields=False))
    _check_schema(storage, incoming, latest, keygen)
    # every record's key and partition path, as the table's key generator computes them; the
    # input is evaluated once: here (a record the key generator refuses stops the write before
    # anything is written), for sizing new file groups, and for the write itself. An input the
    # caller cached already is read from its cache each time, and keys that Spark expressions
    # compute come out the same again: no second copy of it is cached.
    keyed = _with_keys(df, keygen)
    bad_key, null_ordering = _bad_rows(options, keygen)
    checks = [
        F.count(F.lit(1)).alias("count"),
        F.max(bad_key.cast("int")).alias("bad_keys"),
        # the input's key range per partition: the index carries no key outside it
        F.min(_KEY).alias("min_key"),
        F.max(_KEY).alias("max_key"),
    ]
    if null_ordering is not None:
        checks.append(F.max(null_ordering.cast("int")).alias("null_ordering"))
    if op != "merge_update":  # its rows are the table's, its keys checked above
        checks.extend(_partition_value_checks(options))
    try:
        # persisting plans the input: an expression Spark folds (an overflow in ANSI mode) fails here
        df = keyed if cached_input and keygen.is_simple_text else keyed.persist(StorageLevel.MEMORY_AND_DISK)
        # one pass: the records per partition, and the checks of every record's key and ordering
        by_partition = df.groupBy(_PART).agg(*checks).collect()
        for r in by_partition:
            _raise_bad_rows(r.asDict(), options)
        _raise_null_partition_fields([r.asDict() for r in by_partition], options)
        KG.check_partition_paths((r[_PART] for r in by_partition), bool(options.hive_style))
    except TableError:
        df.unpersist()
        raise
    except Exception as e:
        df.unpersist()
        raise task_error(e, KeyGeneratorError) or WriteFailedError(
            f"the write to {storage.uri} failed before it started: {failure_line(e)}"
        ) from e
    counts = {r[_PART]: r["count"] for r in by_partition}
    key_ranges = {r[_PART]: (r["min_key"], r["max_key"]) for r in by_partition}
    interrupts.check()  # a Ctrl-C during the checks' job: nothing started yet
    endpoint = CoordinatorEndpoint.from_conf(options.conf)  # its settings refused before any change
    prepare_table_change(storage, options.conf, "write")  # the first change to storage
    props = existing if existing is not None else create_table_from(storage, name, values)
    schema = json.loads(avro_schema_json(arrow_schema, props.name, with_meta_fields=True))
    concurrency = ConcurrencyConfig.from_conf(options.conf)
    rolled_back = tuple(r.rolled_back.timestamp for r in rollback_pending_writes(storage, concurrency))
    remove_zombie_files(storage)

    action = REPLACE_COMMIT if op == "insert_overwrite" else COMMIT if copy_on_write else DELTA_COMMIT
    replaced: dict[str, list[str]] = {}
    pending = begin_write(storage, action, op, concurrency, partitions=counts)
    inflight = pending.inflight
    loaded = load_timeline(storage)  # what the write reads the table by
    early = concurrency.optimistic and concurrency.early_detection
    spark: SparkSession = df.sparkSession
    session = None
    if endpoint is not None:
        session = CoordinatorSession(endpoint.client(location), pending.start, concurrency, action)
        if not session.open():
            session = None
    detector = AsyncConflictDetector(
        storage, concurrency, pending.start, spark, f"tidemark-write-{inflight.timestamp}", session
    )
    try:
        # counts (records per partition): for upserts an upper bound of the inserts, which is
        # enough to size the new file groups (a small file is never given more than fits). Every
        # operation sizes new groups alike, as Hudi's partitioners (the Merge-On-Read one extends
        # the copy-on-write one) and bulk insert's roll-over at max.file.size do
        fill_small_files = copy_on_write and op in ("upsert", "insert", "merge_update")
        buckets = insert_buckets(storage, loaded, counts, sizing, inflight.timestamp, fill_small_files)
        bases: dict[tuple[str, str], tuple[str, str | None]] = {
            (p, b.file_id): (b.base_instant, b.base_file)
            for p, bs in buckets.items()
            for b in bs
            if b.base_file is not None and b.base_instant is not None
        }
        slices = _index_slices(storage, loaded, counts) if op in INDEXED_OPERATIONS else []
        # every file group the write may touch gets a bucket number: the index's slices first
        # (a slice's number is its position), then new groups and small files
        numbers: dict[tuple[str, str], int] = {}
        for group in [
            *((fs.partition_path, fs.file_id) for fs in slices),
            *((p, b.file_id) for p, bs in buckets.items() for b in bs),
        ]:
            numbers.setdefault(group, len(numbers))
        if op in INDEXED_OPERATIONS:
            # each group's base files travel in the plan; the keys stay on the executors
            bases.update(
                {
                    (fs.partition_path, fs.file_id): (fs.log_base_instant, fs.base_file.path if fs.base_file else None)
                    for fs in slices
                }
            )
            logged = slices_with_logged_inserts(storage, loaded, slices)
            index = _index_frame(spark, _IndexPlan(location, s3, props, keygen, tuple(slices), key_ranges, logged))
            # a small index is broadcast (no shuffle of the input); a large one is joined by a
            # shuffle, so that no process ever holds all keys
            small = _index_is_small(storage, slices, broadcast_max, logged)
            # (the hint both ways: Spark sizes the index by its slice numbers, and would
            # broadcast any index on its own)
            joined = df.join(F.broadcast(index) if small else index.hint("merge"), [_PART, _KEY], "left")
            if op == "delete":
                work = joined.filter(F.col(_BUCKET).isNotNull()).withColumn(_KIND, _kind("delete"))
            else:
                # one pass over the join: found keys are updates, the others are routed as inserts
                kind = F.when(F.col(_BUCKET).isNull(), _kind("insert")).otherwise(_kind("update"))
                work = _route_inserts(joined.withColumn(_KIND, kind), buckets, numbers, F.col(_KIND) == _kind("insert"))
        else:
            work = _route_inserts(df, buckets, numbers).withColumn(_KIND, _kind("insert"))
            if op == "insert_overwrite":
                touched = {r[_PART] for r in df.select(_PART).distinct().collect()}
                view = FileSystemView(storage, load_timeline(storage))
                for partition in sorted(touched):
                    ids = [g.file_id for g in view.file_groups(partition)]
                    if ids:
                        replaced[partition] = ids
        # a bucket number implies the partition: the shuffle carries the data, the key (unless a
        # data column is the key) and two numbers
        key_column = _key_column(keygen, df)
        carried = () if key_column in data_columns else (_KEY,)
        work = work.select(*data_columns, *carried, _BUCKET, _KIND).repartition(tasks, _BUCKET)
        plan = _TaskPlan(
            location=location,
            s3=s3,
            instant=inflight.timestamp,
            action=inflight.action,
            schema_json=json.dumps(schema, separators=(",", ":")),
            data_columns=data_columns,
            # the delete operation's records carry no ordering value (Hudi's EmptyHoodieRecordPayload):
            # they win over the stored record whatever the input's precombine column holds
            precombine=None if op == "delete" else options.precombine,
            hooks=options.hooks,
            # insert and bulk_insert keep duplicate keys unless asked, as Hudi's
            dedupe=op in ("upsert", "delete", "merge_update")
            or conf_bool(options.conf, COMBINE_BEFORE_INSERT, default=False),
            merge_rule=merge_rule,
            max_block_bytes=max_block_bytes,
            rollover_bytes=rollover_bytes,
            concurrency=concurrency,
            start=pending.start if early else None,
            coordinator=endpoint if session is not None else None,
            copy_on_write=copy_on_write,
            bases=bases,
            block_format=block_format,
            buckets=tuple(numbers),
            key_column=key_column if not carried else None,
            parquet=parquet,
            meta_fields=props.populate_meta_fields,
        )
        if early:
            detector.start()
        spark.sparkContext.addJobTag(detector.job_group)
        try:
            statuses = [
                json.loads(r.status)
                for r in work.mapInArrow(lambda it: _write_partition(plan, it), "status string").collect()
            ]
        finally:
            detector.stop()
            spark.sparkContext.removeJobTag(detector.job_group)
        if detector.found is not None:  # the job finished before the cancel took effect
            raise detector.found
        interrupts.check()  # the job ended before the Ctrl-C's cancel reached it
    except BaseException as e:
        stopped = raised_by_interrupt(e) or interrupts.requested
        # after a Ctrl-C too: a log block a task appends after the rollback has no rollback
        # command block after it, and Apache's reader takes it as data once the rolled-back
        # instant is older than the active timeline (a second Ctrl-C leaves the write to the next)
        _await_task_ends(spark, detector.job_group)
        df.unpersist()
        conflict = detector.found or _conflict_of(e)
        # a file of the slices it read deleted meanwhile (a rollback, restore or clean ran): judged
        # before this write's own rollback joins the timeline
        gone = task_error(e, ObjectNotFoundError) if conflict is None else None
        changed = file_gone_while_reading(storage, loaded, gone, doing="write") if gone is not None else None
        if session is not None:
            session.close("conflicted" if conflict is not None else "aborted", conflict)
        try:
            pending.abort()
        except WriteConflictError:
            raise  # rolled back by another process meanwhile: its tasks stopped for that
        except TidemarkError as rb:
            why = conflict or failure_line(e)  # one line: not the task's traceback Spark's text carries
            raise WriteFailedError(
                f"the write {inflight.timestamp} to {storage.uri} failed ({why}) and its rollback failed too ({rb}); "
                "the next write will roll it back once its heartbeat expires"
            ) from e
        if conflict is not None:
            raise conflict from None
        if changed is not None:
            raise TableChangedError(f"{changed} (the write {inflight.timestamp} was rolled back)") from None
        if isinstance(e, TidemarkError | KeyboardInterrupt):
            raise
        if stopped:  # an interrupt stays one, whatever py4j made of it: rolled back
            raise interrupts.interrupt() from e
        refused = task_error(e, KeyGeneratorError)  # a record the table cannot hold: said as such
        if refused is not None:
            raise type(refused)(f"{refused}; the write {inflight.timestamp} was rolled back") from None
        raise WriteFailedError(
            f"the write {inflight.timestamp} to {storage.uri} failed and was rolled back: {failure_line(e)}"
        ) from e
    df.unpersist()
    options.hooks.before_commit()
    if session is not None:
        session.stop_renewing()
    stats = [WriteStat.from_json({k: v for k, v in s.items() if k != "kind"}) for s in statuses]
    if op == "merge_update" and not copy_on_write:  # a rewritten base file holds the computed values
        mark_expression_blocks(storage)
    from tidemark.announcements import announce_completed

    with interrupts.committing():
        result = _commit(pending, session, stats, op, schema, replaced, extra_metadata, options, interrupts)
        announce_completed(options.conf, location, result.instant.timestamp, result.instant.action, "tidemark.write")
    if interrupts.late:
        logging.getLogger("tidemark.write").warning(
            "%s came while the write %s was being committed: it is committed",
            interrupts.signal_name,
            inflight.timestamp,
        )
    return WriteResult(
        instant=inflight.timestamp,
        operation=op,
        inserts=sum(s.num_inserts for s in stats),
        updates=sum(s.num_update_writes for s in stats),
        deletes=sum(s.num_deletes for s in stats),
        files_written=len(stats),
        removed_files=result.removed_files,
        rolled_back=rolled_back,
        replaced_file_groups={p: tuple(ids) for p, ids in replaced.items() if ids},
    )


def _commit(
    pending: PendingWrite,
    session: CoordinatorSession | None,
    stats: list[WriteStat],
    op: str,
    schema: dict[str, Any],
    replaced: dict[str, list[str]],
    extra_metadata: dict[str, str],
    options: WriteOptions,
    interrupts: SparkInterrupts,
) -> CommitResult:
    """Commit the write, rolled back where the commit fails (unless its outcome is unknown) or a
    Ctrl-C came before it."""
    try:
        interrupts.check()  # the last moment a Ctrl-C stops the write
        result: CommitResult = pending.commit(
            stats,
            # Hudi's readers know only their own operation names
            "upsert" if op == "merge_update" else op,
            json.dumps(_without_meta(schema)),
            replaced_file_ids=replaced,
            extra_metadata=extra_metadata,
            remove_unaccepted=not options.hooks.keep_unaccepted_files(),
        )
    except WriteConflictError as e:
        if session is not None:
            session.close("conflicted", e)
        raise  # already rolled back
    except OutcomeUnknownError:
        # the commit may have landed: rolling back now could take a completed write back, and
        # the coordinator, told nothing, learns the outcome from the timeline
        raise
    except BaseException:
        if session is not None:
            session.close("aborted")
        with contextlib.suppress(TidemarkError):  # else the next writer rolls it back once expired
            pending.abort()
        raise
    if session is not None:
        session.close("committed")
    return result


#: how long a failed write waits for its job's tasks to end before rolling back
_TASK_END_WAIT_S = 60.0
#: how long it waits for Spark's status store to know of its job at all
_JOB_KNOWN_WAIT_S = 2.0


def _await_task_ends(spark: SparkSession, tag: str, limit_s: float = _TASK_END_WAIT_S) -> None:
    """Wait for the tasks of the failed jobs tagged ``tag`` to end. Spark reports a job failed as
    soon as one task has failed its last attempt, while the job's other tasks still run until
    killed (a Python worker within ``spark.python.task.killTimeout``). A rollback done meanwhile
    misses the files they write after it has read the markers: left in the table under an
    instant no longer on the timeline, which no reader sees and nothing removes. A job still
    running is cancelled: a Ctrl-C's cancel misses a job that started after it (the driver was
    reading the job's results when the interrupt came, and Spark starts the job as it connects)."""
    log = logging.getLogger("tidemark.write")
    try:
        sc = spark.sparkContext
        tracker = sc.statusTracker()
        started = time.monotonic()
        while True:
            # asked again each time: Spark's status store learns of jobs from its listener bus,
            # which may lag; the Python tracker wraps the Java one, which has no lookup by tag
            jobs = list(sc._jsc.sc().statusTracker().getJobIdsForTag(tag))
            infos = [tracker.getJobInfo(j) for j in jobs]
            # a job the status store still takes as running may have tasks it has not heard of
            running = any(i is not None and i.status == "RUNNING" for i in infos)
            stages = [tracker.getStageInfo(s) for i in infos if i is not None for s in i.stageIds]
            active = sum(s.numActiveTasks for s in stages if s is not None)
            if running:  # the failed write's job runs on (one that started after a Ctrl-C's cancel): stopped
                sc.cancelJobsWithTag(tag)
            # no job known yet: none ran (the write failed before its job), or the store lags
            if (jobs or time.monotonic() - started > _JOB_KNOWN_WAIT_S) and not running and not active:
                return
            if time.monotonic() - started > limit_s:
                log.warning(
                    "%d task(s) of the failed write's job still run after %.0f s; rolling back now: files they "
                    "write later stay under the rolled-back instant, unseen by readers",
                    active,
                    limit_s,
                )
                return
            time.sleep(0.1)
    except Exception as e:  # the rollback goes ahead whatever stops the waiting
        log.warning("could not wait for the failed write's tasks to end (%s); rolling back now", e)


def _conflict_of(error: BaseException) -> WriteConflictError | None:
    """The conflict a task found early, from the failed job's error text (Spark wraps the task's
    exception in its own)."""
    if isinstance(error, WriteConflictError):
        return error
    found = from_wire(str(error))
    if found is None:
        return None
    groups = found.get("groups")
    return WriteConflictError(
        str(found.get("message")),
        instant=str(found.get("instant")),
        other=str(found.get("other")),
        file_groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        stage="early",
    )


class AsyncConflictDetector:
    """The driver's periodic check of all this write's markers so far (Hudi's
    ``async.conflict.detector`` settings), for writes whose tasks are busy between markers. A
    conflict cancels the Spark job; a failed check is logged, counted and tried again at the next
    period, never ending the checking."""

    def __init__(
        self,
        storage: Storage,
        config: ConcurrencyConfig,
        start: WriteStart,
        spark: SparkSession,
        job_group: str,
        session: CoordinatorSession | None = None,
    ) -> None:
        self.session = session
        self.storage = storage
        self.config = config
        self.detector = EarlyConflictDetector(storage, config, start)
        self.spark = spark
        self.job_group = job_group
        self.found: WriteConflictError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self.job_group}-conflicts", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self.config.async_detector_initial_delay_ms / 1000
        while not self._stop.wait(wait):
            wait = self.config.async_detector_period_ms / 1000
            try:
                if not self._check_with_coordinator():
                    groups = {
                        g
                        for m in list_markers(self.storage, self.detector.instant)
                        if (g := file_group_of_data_file(m.data_path)) is not None
                    }
                    if groups:
                        self.detector.check(groups)
            except WriteConflictError as e:
                self.found = e
                self.spark.sparkContext.cancelJobsWithTag(self.job_group)
                return
            except Exception as e:  # never stop checking on an unexpected error (Hudi's checker did)
                COUNTERS.add("early_check_errors")
                logging.getLogger("tidemark.write").warning(
                    "asynchronous conflict check of write %s failed (tried again in %d ms): %s",
                    self.detector.instant,
                    self.config.async_detector_period_ms,
                    e,
                )

    def _check_with_coordinator(self) -> bool:
        """Ask the coordinator (it holds every task's markers in memory); False when there is
        none or it cannot answer, and the markers on storage are checked instead."""
        if self.session is None:
            return False
        try:
            found = self.session.check()
        except CoordinatorError as e:
            logging.getLogger("tidemark.write").warning(
                "write %s: the writer-coordinator could not check for conflicts, checking storage: %s",
                self.detector.instant,
                e,
            )
            return False
        if found is not None:
            raise found
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def _expression_rows(keys: DataFrame, storage: Storage, options: WriteOptions) -> DataFrame:
    """For ``merge_update``: the current rows of the given keys with the expressions applied.
    These rows are what the log blocks carry, so Apache's reader sees the values computed at write
    time; tidemark's reader evaluates the expressions again on the merged current values."""
    current = read_snapshot(storage)
    data = [c for c in current.column_names if c not in META_FIELDS]
    protected = set(options.record_key) | set(options.partition_fields or ()) | {options.precombine}
    for column, text in options.set_expressions.items():
        compile_expression(text)
        if column not in data:
            raise TableError(f"merge_update sets column {column!r}, which the table does not have")
        if column in protected:
            raise TableError(
                # bandit's B608 takes "update ... set" for SQL: this is an error message
                f"merge_update cannot set {column!r}: it is a key, partition or precombine column"  # nosec B608
            )
        missing = columns_of(text) - set(data)
        if missing:
            raise TableError(f"expression {text!r} names columns the table does not have: {', '.join(sorted(missing))}")
    spark = keys.sparkSession
    table = spark.createDataFrame(current.select(data))
    on = list(options.record_key) + list(options.partition_fields or ())
    wanted = keys.select(*on).distinct()
    rows = table.join(wanted, on, "inner")
    computed = rows.select(
        *[F.expr(options.set_expressions[c]).alias(c) if c in options.set_expressions else F.col(c) for c in data]
    )
    # tidemark's reader evaluates the expressions again, in Python, as it merges: only numbers,
    # and only what keeps the column's type (an int divided by 2 is a double in Spark); a decimal
    # is cast to its column's decimal type (rounded half up, null where it overflows without ANSI
    # mode), as Spark's MERGE INTO assigns it
    for column, text in options.set_expressions.items():
        kind, given = table.schema[column].dataType, computed.schema[column].dataType
        operands = [table.schema[c].dataType for c in columns_of(text)]
        if not all(isinstance(t, IntegralType | FractionalType) for t in (kind, *operands)) or not (
            given == kind or (isinstance(kind, DecimalType) and isinstance(given, DecimalType))
        ):
            raise TableError(
                f"merge_update {column}={text}: it gives {given.simpleString()} for the {kind.simpleString()} column "
                f"{column} (of {', '.join(sorted(columns_of(text))) or 'no column'}); an expression must be of "
                "numeric columns and keep its column's type (an integer divided is a double: use % or *)"
            )
    return computed.select(
        *[F.col(c).cast(table.schema[c].dataType).alias(c) if c in options.set_expressions else F.col(c) for c in data]
    )


#: Hudi indexes that find a key within its partition only, as tidemark's index does
_PARTITION_INDEXES: Final = ("BLOOM", "SIMPLE", "INMEMORY")
#: Hudi settings of which rows a write keeps, refused unless they restate the default
INSERT_DUP_POLICY: Final = "hoodie.datasource.insert.dup.policy"
COMBINE_BEFORE_UPSERT: Final = "hoodie.combine.before.upsert"
ALLOW_DUPLICATE_ON_INSERTS: Final = "hoodie.merge.allow.duplicate.on.inserts"


@dataclass(frozen=True)
class WriteTuning:
    """A write's settings that need neither the table nor the input, parsed once."""

    sizing: SmallFileConfig
    block_format: str
    parquet: ParquetConfig
    tasks: int
    broadcast_max: int
    max_block_bytes: int | None
    rollover_bytes: int | None


def check_write_settings(options: WriteOptions) -> WriteTuning:
    """Every check of a write's options that needs neither the table nor the input, so that the
    CLI can run them before it starts Spark (a bad value was told after a minute of Spark)."""
    if options.operation not in OPERATIONS:
        raise TableError(f"unknown operation {options.operation!r} (use one of: {', '.join(OPERATIONS)})")
    if options.operation == "merge_update" and not options.set_expressions:
        raise TableError("merge_update needs at least one column expression (e.g. fare=fare * 2)")
    conf = options.conf
    _check_event_settings(conf)
    _check_write_semantics(conf)
    CoordinatorEndpoint.from_conf(conf)  # the coordinator's settings, token and CA files
    return WriteTuning(
        sizing=SmallFileConfig.from_conf(conf),
        block_format=data_block_format(conf),
        parquet=ParquetConfig.from_conf(conf),
        tasks=min(conf_int(conf, "tidemark.write.parallelism", 8, least=1), 200),
        broadcast_max=conf_int(conf, INDEX_BROADCAST_MAX_KEYS, DEFAULT_INDEX_BROADCAST_MAX_KEYS),
        max_block_bytes=conf_int(conf, "hoodie.logfile.data.block.max.size", 0, least=0) or None,
        rollover_bytes=conf_int(conf, "hoodie.logfile.max.size", 0, least=0) or None,
    )


def _check_write_semantics(conf: Mapping[str, str]) -> None:
    """Hudi settings that change which rows a table ends up holding, and which tidemark does not
    apply: refused, since writing without them would double or misplace keys unseen."""
    refused = []
    index = conf.get(INDEX_TYPE, "").strip().upper()
    if index and index not in _PARTITION_INDEXES:
        refused.append(
            f"{INDEX_TYPE}={conf[INDEX_TYPE]} (tidemark's index finds a key within its partition, as Hudi's "
            f"{', '.join(_PARTITION_INDEXES)} do; a global or bucket index would place keys differently)"
        )
    if conf_bool(conf, "hoodie.datasource.write.insert.drop.duplicates", default=False):
        refused.append(
            "hoodie.datasource.write.insert.drop.duplicates=true (not applied by tidemark: use the upsert "
            "operation to keep one row per key)"
        )
    # Hudi 0.14+'s successor of insert.drop.duplicates: an insert of a key the table holds is
    # dropped, or fails the write; tidemark's insert does not look its keys up in the table
    dup_policy = conf.get(INSERT_DUP_POLICY, "none").strip().lower()
    if dup_policy != "none":
        refused.append(
            f"{INSERT_DUP_POLICY}={conf[INSERT_DUP_POLICY]} (not applied by tidemark, whose insert does not look "
            "its keys up in the table: leave it none, or use the upsert operation to keep one row per key)"
        )
    if not conf_bool(conf, COMBINE_BEFORE_UPSERT, default=True):
        refused.append(
            f"{COMBINE_BEFORE_UPSERT}=false (tidemark's upsert always collapses the input's duplicate keys to one "
            "row: leave it true, or use insert or bulk_insert to keep them)"
        )
    if conf_bool(conf, ALLOW_DUPLICATE_ON_INSERTS, default=False):
        refused.append(
            f"{ALLOW_DUPLICATE_ON_INSERTS}=true (tidemark's copy-on-write insert merges a key the small file it "
            "fills holds, as Hudi 0.x's default: leave it false, or use bulk_insert, which fills no small file, "
            "to keep both rows)"
        )
    if conf_bool(conf, DROP_PARTITION_COLUMNS, default=False):
        refused.append(f"{DROP_PARTITION_COLUMNS}=true (tidemark keeps the partition columns in the files)")
    if conf_bool(conf, CDC_ENABLED, default=False):
        refused.append(f"{CDC_ENABLED}=true (tidemark does not write change data capture files)")
    if refused:
        raise TableError(f"not supported, refused before anything is written: {'; '.join(refused)}")


def _check_event_settings(conf: Mapping[str, str]) -> None:
    from tidemark.announcements import announcement_security

    try:
        announcement_security(conf)
    except ValueError as e:
        raise TableError(f"the write's event settings: {e}") from None


def _without_meta(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "fields": [f for f in schema["fields"] if f["name"] not in META_FIELDS]}
