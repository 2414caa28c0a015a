"""tidemark as a Spark data source: ``spark.read.format("tidemark").load(path)``.

The driver holds the timeline and the file-system view, never rows: it plans one input partition
per file slice (small slices grouped up to ``tidemark.read.split.bytes``), pruned by Spark's
filters on partition columns before any data file is opened. Each task merges its slices' base
file and log blocks (reconciled, as :class:`~tidemark.table.snapshot.SnapshotReader` does) on the
executor and yields Arrow record batches. Every task reads the snapshot as of one instant, fixed
when the query is planned, so a commit landing during the read is not half seen.

Options: ``as.of.instant`` (Hudi's time travel: an instant time ``yyyyMMddHHmmss[SSS]`` or
``yyyy-MM-dd[ HH:mm:ss[.SSS]]``; the snapshot of the latest completed write at or before it),
``hoodie.datasource.query.type`` (``snapshot``, the default; ``read_optimized``: base files
only; ``incremental``: the records written after ``hoodie.datasource.read.begin.instanttime`` up
to ``hoodie.datasource.read.end.instanttime``, see :mod:`tidemark.table.incremental`, with
``hoodie.read.timeline.holes.resolution.policy``), ``tidemark.s3.endpoint``,
``tidemark.s3.region`` (credentials from the environment, as boto3 looks them up, or
``tidemark.s3.access.key.id`` and ``tidemark.s3.secret.access.key``), and
``tidemark.read.split.bytes``.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    StringStartsWith,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from tidemark.config import conf_bool
from tidemark.errors import KeyGeneratorError, TableChangedError, TableError
from tidemark.storage import S3Options, Storage, open_storage
from tidemark.table.avro_schema import (
    META_FIELDS,
    PARTITION_PATH,
    arrow_schema_of,
    declared_types,
    latest_table_schema,
    utc_timestamps,
)
from tidemark.table.base_file import open_base_file, read_base_file
from tidemark.table.file_system_view import FileSlice
from tidemark.table.incremental import (
    BEGIN_INSTANT,
    END_INSTANT,
    FAIL,
    HOLES_POLICY,
    HUDI_OPTIONS,
    INCREMENTAL,
    IncrementalRange,
    columns_timeline,
    plan_incremental,
)
from tidemark.table.key_generator import DEFAULT_PARTITION_PATH, check_supported, value_text
from tidemark.table.merge_handle import conform
from tidemark.table.snapshot import SnapshotReader, in_read_order, read_columns, resolve_as_of
from tidemark.timeline import Timeline, load_timeline

SOURCE_NAME: Final = "tidemark"
AS_OF_INSTANT: Final = "as.of.instant"
QUERY_TYPE: Final = "hoodie.datasource.query.type"
#: Hudi's deprecated name of the query type, which it still reads where QUERY_TYPE is not given,
#: translated (DataSourceReadOptions.translateViewTypesToQueryTypes): its read_optimized meant the
#: snapshot; read as another hoodie.* key, an incremental pull read the whole table
VIEW_TYPE: Final = "hoodie.datasource.view.type"
_VIEW_TO_QUERY_TYPE: Final = {"read_optimized": "snapshot", "realtime": "snapshot", "incremental": "incremental"}
SNAPSHOT: Final = "snapshot"
READ_OPTIMIZED: Final = "read_optimized"
#: Hudi's switch for an incremental query's full-table scan where the range's commits or files
#: are gone; tidemark's answer is fixed (:func:`_incremental_range`), so only true is taken
FALLBACK_FULL_TABLE_SCAN: Final = "hoodie.datasource.read.incr.fallback.fulltablescan.enable"
SPLIT_BYTES: Final = "tidemark.read.split.bytes"
DEFAULT_SPLIT_BYTES: Final = 128 * 1024 * 1024
#: a small table is spread over at least this many tasks (Spark's own file source spreads one
#: over the session's cores, which a Python data source's planner cannot see)
MIN_PARTITIONS: Final = "tidemark.read.min.partitions"
DEFAULT_MIN_PARTITIONS: Final = 16
#: no group is made smaller than this (Spark's spark.sql.files.openCostInBytes): a task per
#: tiny slice would cost more than its read
OPEN_COST_BYTES: Final = 4 * 1024 * 1024
#: partition filters prune file slices: off unless asked for, since Spark (4.3) keeps the read
#: plan a filtered query made on the DataFrame and reuses it for the DataFrame's later queries
#: that push no filter (a count after a filtered count read the filtered slices only), and runs
#: every scan of the DataFrame in one query (a union, a self-join) with the first scan's slices
PARTITION_PRUNING: Final = "tidemark.read.partition.pruning"
S3_ENDPOINT: Final = "tidemark.s3.endpoint"
S3_REGION: Final = "tidemark.s3.region"
S3_ACCESS_KEY_ID: Final = "tidemark.s3.access.key.id"
S3_SECRET_ACCESS_KEY: Final = "tidemark.s3.secret.access.key"
#: Spark's switch for Python data sources' filter pushdown; ``register`` turns it on
_PUSHDOWN_CONF: Final = "spark.sql.python.filterPushdown.enabled"
#: Hudi's options that choose which rows a query returns: one tidemark does not read is refused
#: (a misspelt query type read the snapshot); Hudi's other ``hoodie.*`` keys pass
_READ_FAMILIES: Final = ("hoodie.datasource.query.", "hoodie.datasource.read.", "hoodie.datasource.merge.")
_KNOWN_OPTIONS: Final = frozenset(
    {
        "path",
        AS_OF_INSTANT,
        QUERY_TYPE,
        VIEW_TYPE,
        BEGIN_INSTANT,
        END_INSTANT,
        HOLES_POLICY,
        FALLBACK_FULL_TABLE_SCAN,
        SPLIT_BYTES,
        MIN_PARTITIONS,
        PARTITION_PRUNING,
        S3_ENDPOINT,
        S3_REGION,
        S3_ACCESS_KEY_ID,
        S3_SECRET_ACCESS_KEY,
    }
)
#: Arrow record batches handed to Spark at a time
_BATCH_ROWS: Final = 64 * 1024


def register(spark: SparkSession) -> None:
    """Register the ``tidemark`` source with ``spark`` (and Spark's filter pushdown for Python
    data sources, which it uses to prune file slices by partition)."""
    spark.conf.set(_PUSHDOWN_CONF, "true")
    spark.dataSource.register(TidemarkDataSource)


def s3_reader_options(s3: S3Options | None) -> dict[str, str]:
    """The source's options for ``s3`` (what :func:`tidemark.spark.read.read_dataframe` passes)."""
    if s3 is None:
        return {}
    pairs = {
        S3_ENDPOINT: s3.endpoint_url,
        S3_REGION: s3.region,
        S3_ACCESS_KEY_ID: s3.access_key_id,
        S3_SECRET_ACCESS_KEY: s3.secret_access_key,
    }
    return {k: v for k, v in pairs.items() if v}


@dataclass(frozen=True)
class _Location:
    """Where the table is and how executors reach it (pickled into every task)."""

    path: str
    s3: S3Options | None

    @classmethod
    def of(cls, options: Mapping[str, str]) -> _Location:
        path = options.get("path")
        if not path:
            raise TableError('no table location: spark.read.format("tidemark").load("<path or s3://bucket/prefix>")')
        s3 = S3Options(
            endpoint_url=options.get(S3_ENDPOINT),
            region=options.get(S3_REGION),
            access_key_id=options.get(S3_ACCESS_KEY_ID),
            secret_access_key=options.get(S3_SECRET_ACCESS_KEY),
        )
        return cls(path, s3 if s3 != S3Options() else None)


@functools.lru_cache(maxsize=8)
def _executor_reader(
    location: _Location, as_of: str, file_groups: frozenset[tuple[str, str]] | None, latest: bool
) -> SnapshotReader:
    """One reader per table snapshot per Python worker: its timeline and file-system view are
    built once for all the tasks the worker runs (Spark reuses workers). ``file_groups``: an
    incremental query's, as the driver planned it (a clean of a group it does not read is no
    reason to refuse it)."""
    storage = open_storage(location.path, location.s3)
    return SnapshotReader(storage, as_of, file_groups=file_groups, as_of_latest=latest)


@dataclass(frozen=True)
class _PartitionFilter:
    """A filter on one column that a partition path can decide: the texts the column may have."""

    column: str
    texts: frozenset[str] | None = None
    prefix: str | None = None

    def admits(self, text: str) -> bool:
        if self.texts is not None:
            return text in self.texts
        return self.prefix is not None and text.startswith(self.prefix)


@dataclass(frozen=True)
class _Plan:
    location: _Location
    #: the instant every task reads as of (None: the table has no completed write)
    as_of: str | None
    read_optimized: bool
    arrow_schema: pa.Schema
    slices: tuple[FileSlice, ...]
    #: column -> index of its segment in a partition path (simple partition fields only)
    partition_columns: Mapping[str, int]
    hive_style: bool
    url_encoded: bool
    split_bytes: int
    min_partitions: int
    #: an incremental query's range (None: a snapshot)
    incremental: IncrementalRange | None = None
    #: ``as_of`` is the latest write when load() planned the query, not a time the user asked for
    latest: bool = False
    #: whether partition filters prune file slices (see PARTITION_PRUNING)
    prune: bool = False


class SliceGroup(InputPartition):
    """One task's file slices."""

    def __init__(self, slices: Sequence[FileSlice]) -> None:
        super().__init__(tuple(slices))
        self.slices = tuple(slices)


def _slice_bytes(file_slice: FileSlice) -> int:
    base = file_slice.base_file.size if file_slice.base_file is not None else 0
    return base + sum(log.size for log in file_slice.log_files)


def _kind_of(key_generator_class: str | None) -> str | None:
    if key_generator_class is None:
        return "simple"  # Hudi's inference from the fields: simple, complex or non-partitioned alike
    try:
        return check_supported(key_generator_class)
    except KeyGeneratorError:
        return None


def _translated_view_type(view_type: str | None) -> str | None:
    if view_type is None:
        return None
    translated = _VIEW_TO_QUERY_TYPE.get(view_type.strip().lower())
    if translated is None:
        raise TableError(
            f"{VIEW_TYPE}={view_type!r}: Hudi's deprecated query type is one of {', '.join(_VIEW_TO_QUERY_TYPE)} "
            f"(better: {QUERY_TYPE})"
        )
    return translated


def _plan(options: Mapping[str, str]) -> _Plan:
    unknown = sorted(
        k
        for k in options
        if k.lower() not in _KNOWN_OPTIONS
        and (not k.lower().startswith("hoodie.") or k.lower().startswith(_READ_FAMILIES))
    )
    if unknown:
        raise TableError(
            f"unknown option(s) of the tidemark source: {', '.join(unknown)} (of Hudi's query options it reads "
            f"{', '.join(sorted(k for k in _KNOWN_OPTIONS if k.startswith('hoodie.')))} and {AS_OF_INSTANT})"
        )
    location = _Location.of(options)
    query_type = (options.get(QUERY_TYPE) or _translated_view_type(options.get(VIEW_TYPE)) or SNAPSHOT).strip().lower()
    if query_type not in (SNAPSHOT, READ_OPTIMIZED, INCREMENTAL):
        raise TableError(f"{QUERY_TYPE}={query_type!r}: tidemark reads {SNAPSHOT}, {READ_OPTIMIZED} or {INCREMENTAL}")
    split_text = options.get(SPLIT_BYTES) or str(DEFAULT_SPLIT_BYTES)
    if not split_text.isdigit() or int(split_text) <= 0:
        raise TableError(f"{SPLIT_BYTES}={split_text!r}: expected a positive number of bytes")
    min_text = options.get(MIN_PARTITIONS) or str(DEFAULT_MIN_PARTITIONS)
    if not min_text.isdigit() or int(min_text) <= 0:
        raise TableError(f"{MIN_PARTITIONS}={min_text!r}: expected a positive number of partitions")
    storage = open_storage(location.path, location.s3)
    requested = options.get(AS_OF_INSTANT)
    timeline = load_timeline(storage)  # once: the snapshot, its reader and its schema share it
    span = _incremental_range(storage, timeline, options) if query_type == INCREMENTAL else None
    if span is not None and requested is not None:
        raise TableError(f"{AS_OF_INSTANT} is a snapshot's: an incremental query ends at {END_INSTANT}")
    as_of = resolve_as_of(storage, timeline, requested, AS_OF_INSTANT) if span is None else span.end
    if span is not None and span.end is None:
        # a range without commits reads nothing, with the columns read_incremental answers with
        timeline = columns_timeline(storage, timeline, span)
    reader = SnapshotReader(storage, as_of, timeline=timeline, file_groups=span.file_groups if span else None)
    slices = tuple(
        s
        for s in reader.view.latest_file_slices()
        if (query_type != READ_OPTIMIZED or s.base_file is not None) and (span is None or span.admits(s))
    )
    props = reader.properties
    fields = props.partition_fields
    # only where a partition path is the fields' own text can a filter on them decide a slice
    simple = _kind_of(props.key_generator_class) in ("simple", "complex", "nonpartitioned")
    return _Plan(
        location=location,
        as_of=as_of,
        read_optimized=query_type == READ_OPTIMIZED,
        arrow_schema=_table_schema(reader, slices),
        slices=slices,
        partition_columns={name: i for i, name in enumerate(fields)} if simple else {},
        hive_style=props.hive_style_partitioning,
        url_encoded=props.url_encode_partitions,
        split_bytes=int(split_text),
        min_partitions=int(min_text),
        incremental=span,
        prune=conf_bool(options, PARTITION_PRUNING, default=False),
        latest=span is None and requested is None,
    )


def _incremental_range(storage: Storage, timeline: Timeline, options: Mapping[str, str]) -> IncrementalRange:
    begin = options.get(BEGIN_INSTANT)
    if not begin:
        raise TableError(f"an incremental query needs {BEGIN_INSTANT} (the instant after which to read; 000: all)")
    end = options.get(END_INSTANT)
    policy = options.get(HOLES_POLICY) or FAIL
    if not conf_bool(options, FALLBACK_FULL_TABLE_SCAN, default=True):
        # a range beginning in the archive is read from every file group (the same rows), where
        # Hudi without the fallback reads the archived commits' files: false would go unheeded
        raise TableError(
            f"{FALLBACK_FULL_TABLE_SCAN}=false: tidemark always reads every file group for a range that begins "
            f"before the active timeline (some of its commits archived), with the same rows; leave it out or set "
            f"it to true. A range ending in the archive, or whose files a clean deleted, is refused either way"
        )
    return plan_incremental(storage, timeline, begin, end or None, policy, HUDI_OPTIONS)


def _table_schema(reader: SnapshotReader, slices: Sequence[FileSlice]) -> pa.Schema:
    """The columns a snapshot read shows: the latest commit's schema, in its order, as
    read_snapshot answers (:func:`in_read_order`), typed as the base files' types unify (one
    footer per writing instant: one write's files share a schema). Latest as of the read's
    instant: time travel shows the table's schema as of then, as Hudi's readers resolve it
    (``TableSchemaResolver`` at the query's instant)."""
    storage = reader.storage
    footers: dict[str, str] = {}
    for s in slices:
        if s.base_file is not None:
            footers.setdefault(s.base_instant, s.base_file.path)
    schemas = [_footer_schema(storage, path) for _, path in sorted(footers.items())]
    latest = latest_table_schema(storage, reader.timeline)
    if latest is not None:
        schemas.append(read_columns(arrow_schema_of(latest), reader.properties.populate_meta_fields))
    if not schemas:
        return pa.schema([pa.field(m, pa.string()) for m in META_FIELDS])
    schemas = [pa.schema([f.remove_metadata() for f in s]) for s in schemas]
    unified = pa.unify_schemas(schemas, promote_options="permissive")
    return in_read_order(declared_types(unified, schemas[-1]), schemas[-1]) if latest is not None else unified


def _footer_schema(storage: Storage, path: str) -> pa.Schema:
    """A base file's schema from its footer: a few ranged reads, never the file."""
    with open_base_file(storage, path) as f:
        return utc_timestamps(f.schema_arrow)


def group_slices(
    slices: Sequence[FileSlice], split_bytes: int, min_partitions: int = DEFAULT_MIN_PARTITIONS
) -> list[list[FileSlice]]:
    """The read's tasks: file slices grouped by Spark's rule for its file source. Groups hold
    up to ``split_bytes``, less for a small table so that it spreads over ``min_partitions``
    tasks, but never less than a file's open cost; largest slices first, each joining the
    first group it still fits in (a slice larger than the limit alone)."""
    chosen = sorted(slices, key=_slice_bytes, reverse=True)
    spread = -(-sum(_slice_bytes(s) for s in chosen) // min_partitions)
    limit = min(split_bytes, max(OPEN_COST_BYTES, spread))
    groups: list[list[FileSlice]] = []
    sizes: list[int] = []
    for file_slice in chosen:
        size = _slice_bytes(file_slice)
        for i, total in enumerate(sizes):
            if total + size <= limit:
                groups[i].append(file_slice)
                sizes[i] += size
                break
        else:
            groups.append([file_slice])
            sizes.append(size)
    return groups


class TidemarkDataSource(DataSource):
    """``spark.read.format("tidemark")``: a tidemark (Apache Hudi) table's snapshot."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    @functools.cached_property
    def _plan(self) -> _Plan:
        return _plan(dict(self.options))

    def schema(self) -> StructType:
        return from_arrow_schema(self._plan.arrow_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotSourceReader(self._plan, schema)


class SnapshotSourceReader(DataSourceReader):
    def __init__(self, plan: _Plan, schema: StructType) -> None:
        self.plan = plan
        # what Spark expects each batch to be (its own Arrow types: timestamps in us, UTC)
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.filters: list[_PartitionFilter] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        # partition filters prune file slices; Spark still applies every filter to the rows, so
        # pruning only ever has to be sure about what it leaves out
        if not self.plan.prune:
            yield from filters
            return
        for f in filters:
            found = self._partition_filter(f)
            if found is not None:
                self.filters.append(found)
            yield f

    def _partition_filter(self, f: Filter) -> _PartitionFilter | None:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())  # every filter Spark pushes has one
        (column, *nested) = attribute or ("",)
        if nested or (column != PARTITION_PATH and column not in self.plan.partition_columns):
            return None
        if isinstance(f, EqualTo):
            values: tuple[Any, ...] = (f.value,)
        elif isinstance(f, In):
            values = tuple(f.value)
        elif isinstance(f, StringStartsWith) and column == PARTITION_PATH:
            return _PartitionFilter(column, prefix=f.value)
        else:
            return None
        texts = set()
        for value in values:
            # only values whose text is certain to be the path's (Java's float text differs; a
            # timestamp's depends on hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled)
            if value is None or isinstance(value, (float, bytes, datetime.datetime)):
                return None
            text = value if isinstance(value, str) else value_text(value)
            if text is None:
                return None
            texts.add(text)
        return _PartitionFilter(column, texts=frozenset(texts))

    def _admits(self, file_slice: FileSlice) -> bool:
        if not self.filters:
            return True
        path = file_slice.partition_path
        segments = path.split("/") if path else []
        for f in self.filters:
            if f.column == PARTITION_PATH:
                if not f.admits(path):
                    return False
                continue
            index = self.plan.partition_columns[f.column]
            if len(segments) != len(self.plan.partition_columns):
                continue  # a value with a "/" in it: not decidable from the path
            segment = segments[index]
            if self.plan.hive_style:
                name, _, segment = segment.partition("=")
                if name != f.column:
                    continue
            if self.plan.url_encoded:
                segment = unquote(segment)
            if segment != DEFAULT_PARTITION_PATH and not f.admits(segment):
                return False
        return True

    def partitions(self) -> Sequence[InputPartition]:
        chosen = [s for s in self.plan.slices if self._admits(s)]
        return [SliceGroup(g) for g in group_slices(chosen, self.plan.split_bytes, self.plan.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        plan = self.plan
        if plan.as_of is None or not isinstance(partition, SliceGroup):
            return
        file_groups = plan.incremental.file_groups if plan.incremental else None
        for file_slice in partition.slices:
            try:
                reader = _executor_reader(plan.location, plan.as_of, file_groups, plan.latest)
                if plan.read_optimized:
                    assert file_slice.base_file is not None
                    with reader.listed_file():
                        table = read_base_file(reader.storage, file_slice.base_file.path)
                else:
                    table = reader.read_slice(file_slice)
            except TableChangedError as e:
                # reading the DataFrame again reads the same instant: only a new load() sees the table as it is
                raise TableChangedError(
                    f"{e} (this DataFrame reads as of {plan.as_of}, fixed when load() planned it: load() it again)"
                ) from e
            if table is not None and plan.incremental is not None:
                table = plan.incremental.rows_in_range(table)
            if table is None or not table.num_rows:
                continue
            yield from conform(table, self.arrow_schema).to_batches(max_chunksize=_BATCH_ROWS)
