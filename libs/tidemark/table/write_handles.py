"""What one writer task does to one file group: create a base file (Hudi's create handle) or
append log blocks to the latest file slice (Hudi's append handle); copy-on-write tables rewrite
the base file instead (Hudi's merge handle, :mod:`tidemark.table.merge_handle`). Plain functions
over storage and Arrow, so the Spark job and tests call the same code."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tidemark.config import conf_bool, conf_int
from tidemark.errors import KeyGeneratorError, ObjectAlreadyExistsError, TableError
from tidemark.logformat import (
    BlockSpec,
    DeleteRecord,
    HeaderKey,
    LogFileName,
    LogWriter,
    avro_data_block,
    delete_block,
    parquet_data_block,
)
from tidemark.logformat.avro_columns import encode_avro_table
from tidemark.logformat.content import encode_avro_records
from tidemark.logformat.file_name import BaseFileName
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import COMMIT_TIME, META_FIELDS, RECORD_KEY, plain_rows
from tidemark.table.bloom_filter import footer_metadata, writes_bloom_filter
from tidemark.table.file_system_view import (
    PARTITION_METADATA,
    PARTITION_METADATA_PARQUET,
    has_partition_metafile,
    list_partitions,
    path_in_partition,
)
from tidemark.table.key_generator import partition_ancestors
from tidemark.table.markers import IOType, MarkerWriter, create_marker
from tidemark.table.properties import read_properties
from tidemark.timeline import WriteStat


def partition_metadata_text(instant: str, depth: int) -> str:
    return f"#partition metadata\ncommitTime={instant}\npartitionDepth={depth}\n"


def partition_metadata_parquet(instant: str, depth: int) -> bytes:
    """The base-format metafile as Hudi's ``HoodiePartitionMetadata.writeMetafile`` writes it: a
    Parquet file of no rows (one placeholder column, Hudi's ``dummyint``) whose footer holds the
    properties, where Hudi's readers look for them (``readFooter``)."""
    sink = pa.BufferOutputStream()
    # no ARROW:schema in the footer: the properties are the file's only content
    with pq.ParquetWriter(sink, pa.schema([("dummyint", pa.int64())]), compression="NONE", store_schema=False) as w:
        w.add_key_value_metadata({"commitTime": instant, "partitionDepth": str(depth)})
    return bytes(sink.getvalue().to_pybytes())


def ensure_partition_metadata(storage: Storage, partition: str, instant: str) -> None:
    if has_partition_metafile(storage, partition):
        return
    _check_not_nested(storage, partition)
    depth = partition.count("/") + 1 if partition else 0
    # the metafile Apache's writers make in this table: the base-format one where the table says
    # so (its properties read only here, once per new partition); its readers take either
    if read_properties(storage).partition_metafile_use_base_format:
        name, data = PARTITION_METADATA_PARQUET, partition_metadata_parquet(instant, depth)
    else:
        name, data = PARTITION_METADATA, partition_metadata_text(instant, depth).encode()
    with contextlib.suppress(ObjectAlreadyExistsError):  # another task made it first
        storage.create_if_absent(path_in_partition(partition, name), data)


def _check_not_nested(storage: Storage, partition: str) -> None:
    """A new partition is neither inside an existing one nor around one (values ``x`` and
    ``x/y`` in two writes): Apache's readers do not look into a partition's folders, so the inner
    one's rows would be hidden from them. Checked once per partition, when it is made."""
    for outer in partition_ancestors(partition):
        if has_partition_metafile(storage, outer):
            raise KeyGeneratorError(
                f"partition path {partition!r} would be a folder inside partition {outer!r} of {storage.uri}"
            )
    inner = next((p for p in list_partitions(storage, partition) if p != partition), None)
    if inner is not None:
        raise KeyGeneratorError(f"partition path {partition!r} would hold partition {inner!r} of {storage.uri}")


@dataclass(frozen=True)
class TaskContext:
    """Who is writing: the instant and the Spark task attempt (for the write token)."""

    instant: str
    partition_id: int
    stage_id: int
    #: the attempt's number among its task's attempts (from 0 again when Spark tries the stage
    #: again), as Hudi's ``BLOCK_IDENTIFIER`` carries it
    attempt: int
    #: whether the table keeps Hudi's meta fields (``hoodie.populate.meta.fields``)
    meta_fields: bool = True
    #: Spark's task attempt id, unique in its application (``TaskContext.taskAttemptId``): the
    #: write token's last part, as in Hudi, so that no two attempts write the same file name
    #: (``attempt`` when not given: one process, no Spark)
    attempt_id: int | None = None
    #: the attempt's next ``_hoodie_commit_seqno`` number (one mutable cell in the frozen context)
    _next_seqno: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    @property
    def write_token(self) -> str:
        attempt_id = self.attempt if self.attempt_id is None else self.attempt_id
        return f"{self.partition_id}-{self.stage_id}-{attempt_id}"

    def take_seqnos(self, count: int) -> int:
        """The first of ``count`` sequence numbers for rows this attempt writes. They continue
        across the file groups the attempt writes: Hudi's seqno (``instant_partition_n``) is
        unique in a commit because each of its buckets is a Spark partition of its own, while one
        task here writes several groups. A retried attempt writes its groups in the same order,
        so it numbers them as the first did."""
        start = self._next_seqno[0]
        self._next_seqno[0] += count
        return start


Keys: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray


def with_meta_columns(data: pa.Table, ctx: TaskContext, partition: str, file_name: str, keys: Keys) -> pa.Table:
    """``data`` with Hudi's five meta columns first (any old ones replaced), its rows numbered
    on from the attempt's earlier ones (:meth:`TaskContext.take_seqnos`); null in a table without
    meta fields, as Hudi writes them there (its files then carry no key filter either)."""
    n = data.num_rows
    body = data.drop_columns([c for c in META_FIELDS if c in data.column_names])
    if not ctx.meta_fields:
        nulls = pa.nulls(n, pa.string())
        return pa.Table.from_arrays(
            [nulls] * len(META_FIELDS) + list(body.columns), names=[*META_FIELDS, *body.column_names]
        )
    start = ctx.take_seqnos(n)
    sequence = pa.array(np.arange(start, start + n, dtype=np.int64)).cast(pa.string())
    meta = {
        COMMIT_TIME: pa.repeat(ctx.instant, n),
        "_hoodie_commit_seqno": pc.binary_join_element_wise(f"{ctx.instant}_{ctx.partition_id}_", sequence, ""),
        "_hoodie_record_key": keys if isinstance(keys, pa.Array | pa.ChunkedArray) else pa.array(keys, pa.string()),
        "_hoodie_partition_path": pa.repeat(partition, n),
        "_hoodie_file_name": pa.repeat(file_name, n),
    }
    columns = list(meta.values()) + list(body.columns)
    names = list(meta) + body.column_names
    return pa.Table.from_arrays(columns, names=names)


def base_file_path(ctx: TaskContext, partition: str, file_id: str) -> str:
    """Where :func:`create_base_file` writes a new file group's first base file (known before it
    is written: its marker can be declared ahead)."""
    return path_in_partition(partition, BaseFileName(file_id, ctx.write_token, ctx.instant).name)


def create_base_file(
    storage: Storage,
    ctx: TaskContext,
    partition: str,
    file_id: str,
    data: pa.Table,
    keys: Keys,
    avro_schema_json: str,
    after_marker: AfterMarker | None = None,
    markers: MarkerWriter | None = None,
    parquet: ParquetConfig | None = None,
) -> WriteStat:
    """Write a new file group's first base file (Parquet), marker first."""
    ensure_partition_metadata(storage, partition, ctx.instant)
    path = base_file_path(ctx, partition, file_id)
    name = path.rpartition("/")[2]
    mark_data_file(storage, ctx, path, IOType.CREATE, markers, after_marker)
    table = with_meta_columns(data, ctx, partition, name, keys)
    size = write_base_file(storage, path, table, avro_schema_json, parquet)
    return WriteStat(
        file_id=file_id,
        path=path,
        partition_path=partition,
        prev_commit=None,
        num_writes=table.num_rows,
        num_inserts=table.num_rows,
        total_write_bytes=size,
        file_size=size,
        extra={"tidemarkWriteToken": ctx.write_token},
    )


def with_avro_schema(table: pa.Table, avro_schema_json: str) -> pa.Table:
    """``table`` as Hudi's Parquet writer gives its files (base files and Parquet log blocks):
    ``parquet.avro.schema`` lets Hudi's Java readers see the Avro schema they expect, and byte and
    short columns are plain 32-bit ints, as Avro's ``int`` is written (annotated 8- or 16-bit,
    hudi-rs refused to merge them with the Avro log blocks' ints)."""
    schema = pa.schema([f.with_type(_avro_ints(f.type)) for f in table.schema])
    if schema != table.schema.remove_metadata():
        table = table.cast(schema)
    return table.replace_schema_metadata({"parquet.avro.schema": avro_schema_json, "writer.model.name": "avro"})


def _avro_ints(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype) or pa.types.is_uint8(dtype) or pa.types.is_uint16(dtype):
        return pa.int32()
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(_avro_ints(f.type)) for f in dtype])
    if pa.types.is_map(dtype):
        return pa.map_(
            dtype.key_field.with_type(_avro_ints(dtype.key_type)),
            dtype.item_field.with_type(_avro_ints(dtype.item_type)),
        )
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        item = dtype.value_field.with_type(_avro_ints(dtype.value_type))
        return pa.list_(item) if pa.types.is_list(dtype) else pa.large_list(item)
    return dtype


#: Hudi's ``hoodie.parquet.compression.codec`` values tidemark writes, as pyarrow names them
#: (LZO, Brotli and Hadoop's LZ4 have no writer here, or no reader in Hudi's parquet-mr)
PARQUET_CODECS: Final = {"snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "uncompressed": "none"}
COMPRESSION_CODEC: Final = "hoodie.parquet.compression.codec"
BLOCK_SIZE: Final = "hoodie.parquet.block.size"
PAGE_SIZE: Final = "hoodie.parquet.page.size"
DICTIONARY_ENABLED: Final = "hoodie.parquet.dictionary.enabled"
#: rows encoded to learn a large base file's size on disk per row, before its row groups are cut
_ROW_GROUP_SAMPLE: Final = 50_000


@dataclass(frozen=True)
class ParquetConfig:
    """How a write's Parquet files are written (Hudi's ``HoodieParquetConfig``): base files and
    Parquet log blocks. Hudi's defaults but for the codec."""

    #: pyarrow's codec name; snappy unless ``hoodie.parquet.compression.codec`` says otherwise
    #: (Apache's default is gzip, which writes several times slower; every reader reads both)
    compression: str = "snappy"
    #: base files get Hudi's record key bloom filter (``hoodie.parquet.bloom.filter.enabled``)
    bloom_filter: bool = True
    #: a base file's row groups, in bytes on disk (``hoodie.parquet.block.size``, 120 MiB)
    row_group_bytes: int = 120 * 1024 * 1024
    #: its data pages, in bytes (``hoodie.parquet.page.size``, 1 MiB)
    page_bytes: int = 1024 * 1024
    #: dictionary encoding, in base files and Parquet log blocks (``hoodie.parquet.dictionary.enabled``)
    dictionary: bool = True

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> ParquetConfig:
        """The settings of a write's ``hoodie.*`` options, checked before anything is written."""
        codec = conf.get(COMPRESSION_CODEC, "snappy").strip().lower()
        if codec not in PARQUET_CODECS:
            raise TableError(
                f"{COMPRESSION_CODEC}={conf[COMPRESSION_CODEC]!r}: tidemark writes {', '.join(PARQUET_CODECS)}"
            )
        return cls(
            PARQUET_CODECS[codec],
            writes_bloom_filter(conf),
            row_group_bytes=conf_int(conf, BLOCK_SIZE, cls.row_group_bytes, least=1),
            page_bytes=conf_int(conf, PAGE_SIZE, cls.page_bytes, least=1),
            dictionary=conf_bool(conf, DICTIONARY_ENABLED, default=cls.dictionary),
        )

    def writer(self, sink: pa.NativeFile, schema: pa.Schema) -> pq.ParquetWriter:
        """A Parquet writer with these settings (row groups are cut by the caller)."""
        return pq.ParquetWriter(
            sink,
            schema,
            compression=self.compression,
            data_page_size=self.page_bytes,
            use_dictionary=self.dictionary,
        )

    def rows_per_row_group(self, table: pa.Table) -> int:
        """How many of ``table``'s rows make a row group of about ``row_group_bytes`` on disk, as
        parquet-mr cuts them (by encoded, compressed size). A table whose size in memory fits is
        one group; a larger one is measured on a sample encoded with these settings."""
        if table.nbytes <= self.row_group_bytes:
            return max(1, int(table.num_rows))
        sample = table.slice(0, _ROW_GROUP_SAMPLE)
        sink = pa.BufferOutputStream()
        with self.writer(sink, table.schema) as writer:
            writer.write_table(sample)
            written = int(sink.tell())  # the row group, before the footer
        per_row = max(1.0, written / max(1, sample.num_rows))
        return max(1, int(self.row_group_bytes / per_row))


def write_base_file(
    storage: Storage, path: str, table: pa.Table, avro_schema_json: str | None, parquet: ParquetConfig | None = None
) -> int:
    """Write ``table`` (meta columns first) as the Parquet base file at ``path``; its size. A
    table without columns (an emptied slice of a table with none known) has no Avro schema.
    With meta fields, the footer gets Hudi's record key bloom filter and key range, as Apache's
    writer adds them (its BLOOM indexes fail on a base file without them), unless ``parquet``
    leaves it out."""
    parquet = parquet or ParquetConfig()
    sink = pa.BufferOutputStream()
    table = with_avro_schema(table, avro_schema_json) if avro_schema_json else table
    with parquet.writer(sink, table.schema) as writer:
        writer.write_table(table, row_group_size=parquet.rows_per_row_group(table))
        if parquet.bloom_filter and RECORD_KEY in table.column_names and not table.column(RECORD_KEY).null_count:
            # in the footer only: as schema metadata it would be stored twice (in ARROW:schema)
            writer.add_key_value_metadata(footer_metadata(table.column(RECORD_KEY)))
    payload = sink.getvalue()
    storage.write(path, payload.to_pybytes())
    return int(payload.size)


#: called with a data file's path once its marker exists and before its first byte: where early
#: conflict detection checks the file group (raising stops the task before it writes)
AfterMarker = Callable[[str], None]


def mark_data_file(
    storage: Storage,
    ctx: TaskContext,
    path: str,
    io_type: IOType,
    markers: MarkerWriter | None,
    after_marker: AfterMarker | None,
) -> None:
    """The data file's marker, by ``markers`` (the coordinator, say) or as a direct marker file."""
    if markers is not None:
        markers.create(path, io_type)
    else:
        create_marker(storage, ctx.instant, path, io_type)
    if after_marker is not None:
        after_marker(path)


#: called before each block is appended: (sequence, writer, the block's bytes); tests use it to
#: make a task attempt die before, between or inside blocks
BeforeAppend = Callable[[int, LogWriter, bytes], None]


#: the data block formats of Hudi's ``hoodie.logfile.data.block.format`` that tidemark writes
AVRO_BLOCKS, PARQUET_BLOCKS = "avro", "parquet"
DATA_BLOCK_FORMAT = "hoodie.logfile.data.block.format"


def data_block_format(conf: Mapping[str, str]) -> str:
    """The write's log data block format (Hudi's key; Avro by default, as Hudi's)."""
    value = conf.get(DATA_BLOCK_FORMAT, AVRO_BLOCKS).strip().lower()
    if value not in (AVRO_BLOCKS, PARQUET_BLOCKS):
        raise TableError(
            f"{DATA_BLOCK_FORMAT}={conf[DATA_BLOCK_FORMAT]!r}: tidemark writes avro or parquet log data blocks"
        )
    return value


def avro_content(table: pa.Table, schema_json: str) -> bytes:
    """Avro data block content of ``table``'s rows: column by column where the schema allows
    (flat records of simple types), else record by record."""
    content = encode_avro_table(table, schema_json)
    return content if content is not None else encode_avro_records(plain_rows(table), schema_json)


def _chunks(table: pa.Table, max_block_bytes: int | None, schema_json: str, block_format: str) -> list[pa.Table]:
    """Split updates into data blocks of about ``max_block_bytes`` (Hudi's
    ``hoodie.logfile.data.block.max.size``), judged from the encoded size of a sample (for
    Parquet blocks, from the size in memory: an upper bound of the encoded size)."""
    if not max_block_bytes or table.num_rows <= 1:
        return [table]
    if block_format == PARQUET_BLOCKS:
        per_record = max(1, table.nbytes // table.num_rows)
    else:
        sample = table.slice(0, min(table.num_rows, 200))
        per_record = max(1, len(avro_content(sample, schema_json)) // sample.num_rows)
    per_block = max(1, max_block_bytes // per_record)
    return [table.slice(i, per_block) for i in range(0, table.num_rows, per_block)]


def append_log_blocks(
    storage: Storage,
    ctx: TaskContext,
    partition: str,
    file_id: str,
    base_instant: str,
    base_file: str | None,
    upserts: pa.Table | None,
    upsert_keys: Keys,
    deletes: Sequence[DeleteRecord],
    avro_schema_json: str,
    rollover_bytes: int | None = None,
    max_block_bytes: int | None = None,
    before_append: BeforeAppend | None = None,
    after_marker: AfterMarker | None = None,
    markers: MarkerWriter | None = None,
    block_format: str = AVRO_BLOCKS,
    parquet: ParquetConfig | None = None,
) -> WriteStat:
    """Append data blocks (updates; Avro, or Parquet with ``block_format``) and a delete block to
    the file slice's log, one block at a time so that the log rolls over between blocks. Each
    block carries
    ``BLOCK_IDENTIFIER = "<attempt>,<sequence>"``, the sequence counting from 0 for this attempt
    across roll-overs; every log file gets its marker before its first byte."""
    ensure_partition_metadata(storage, partition, ctx.instant)
    kwargs: dict[str, Any] = {} if rollover_bytes is None else {"rollover_bytes": rollover_bytes}
    # always a new log file per attempt: a failed attempt's files can then be removed whole
    writer = LogWriter(storage, partition, file_id, base_instant, ctx.write_token, new_file=True, **kwargs)
    specs: list[Callable[[dict[int, str]], BlockSpec]] = []
    if upserts is not None and upserts.num_rows:
        table = with_meta_columns(upserts, ctx, partition, file_id, upsert_keys)
        settings = parquet or ParquetConfig()
        for chunk in _chunks(table, max_block_bytes, avro_schema_json, block_format):
            if block_format == PARQUET_BLOCKS:  # encoded column by column: no row ever in Python
                block_table = with_avro_schema(chunk, avro_schema_json)
                specs.append(
                    lambda h, t=block_table: parquet_data_block(  # type: ignore[misc]
                        t, avro_schema_json, ctx.instant, h, settings.compression, settings.dictionary
                    )
                )
            else:
                content = avro_content(chunk, avro_schema_json)
                specs.append(lambda h, c=content: avro_data_block(c, avro_schema_json, ctx.instant, h))  # type: ignore[misc]
    if deletes:
        specs.append(lambda h: delete_block(deletes, ctx.instant, avro_schema_json, h))
    if not specs:
        raise ValueError("append_log_blocks needs updates or deletes")
    marked: set[str] = set()

    def mark(path: str) -> None:
        # each log file this attempt may create, before its first byte: the next version too,
        # when another writer with the same write token took this one first (its file then keeps
        # this marker, and is no rollback's to delete: see remove_unaccepted_files)
        if path not in marked:
            mark_data_file(storage, ctx, path, IOType.APPEND, markers, after_marker)
            marked.add(path)

    log_files: list[str] = []
    first_path, first_offset, size, total = "", 0, 0, 0
    for sequence, make in enumerate(specs):
        block = make({HeaderKey.BLOCK_IDENTIFIER: f"{ctx.attempt},{sequence}"})
        mark(path_in_partition(partition, writer.log_file.name))
        if before_append is not None:
            before_append(sequence, writer, block.encode())
        result = writer.append([block], before_create=mark)
        if result.log_file.name not in log_files:
            log_files.append(result.log_file.name)
        if not first_path:
            first_path, first_offset = result.path, result.block_offsets[0]
        size = result.size
        total += result.size - result.block_offsets[0]
    n_up = upserts.num_rows if upserts is not None else 0
    first = LogFileName.parse(log_files[0])
    return WriteStat(
        file_id=file_id,
        path=first_path,
        partition_path=partition,
        prev_commit=base_instant,
        num_writes=n_up,
        num_update_writes=n_up,
        num_deletes=len(deletes),
        total_write_bytes=total,
        file_size=size,
        base_file=base_file.rsplit("/", 1)[-1] if base_file else "",
        log_files=tuple(log_files),
        log_version=first.version,
        log_offset=first_offset,
        extra={"tidemarkWriteToken": ctx.write_token, "tidemarkAttempt": ctx.attempt, "tidemarkBlocks": len(specs)},
    )
