"""What one writer task does to one file group: create a base file (Hudi's create handle) or
append log blocks to the latest file slice (Hudi's append handle). Plain functions over storage
and Arrow, so the Spark job and tests call the same code."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tidemark.errors import ObjectAlreadyExistsError
from tidemark.logformat import DeleteRecord, LogWriter, avro_data_block, delete_block
from tidemark.logformat.file_name import BaseFileName
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import META_FIELDS, plain_rows
from tidemark.table.markers import IOType, create_marker
from tidemark.timeline import WriteStat

PARTITION_METADATA = ".hoodie_partition_metadata"


def partition_metadata_text(instant: str, depth: int) -> str:
    return f"#partition metadata\ncommitTime={instant}\npartitionDepth={depth}\n"


def ensure_partition_metadata(storage: Storage, partition: str, instant: str) -> None:
    path = f"{partition}/{PARTITION_METADATA}" if partition else PARTITION_METADATA
    if storage.exists(path):
        return
    depth = partition.count("/") + 1 if partition else 0
    with contextlib.suppress(ObjectAlreadyExistsError):  # another task made it first
        storage.create_if_absent(path, partition_metadata_text(instant, depth).encode())


def _join(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name


@dataclass(frozen=True)
class TaskContext:
    """Who is writing: the instant and the Spark task attempt (for the write token)."""

    instant: str
    partition_id: int
    stage_id: int
    attempt: int

    @property
    def write_token(self) -> str:
        return f"{self.partition_id}-{self.stage_id}-{self.attempt}"


Keys: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray


def with_meta_columns(
    data: pa.Table, ctx: TaskContext, partition: str, file_name: str, keys: Keys, seq_start: int = 0
) -> pa.Table:
    """``data`` with Hudi's five meta columns first (any old ones replaced)."""
    n = data.num_rows
    body = data.drop_columns([c for c in META_FIELDS if c in data.column_names])
    sequence = pa.array(range(seq_start, seq_start + n), pa.int64()).cast(pa.string())
    meta = {
        "_hoodie_commit_time": pa.repeat(ctx.instant, n),
        "_hoodie_commit_seqno": pc.binary_join_element_wise(f"{ctx.instant}_{ctx.partition_id}_", sequence, ""),
        "_hoodie_record_key": keys if isinstance(keys, pa.Array | pa.ChunkedArray) else pa.array(keys, pa.string()),
        "_hoodie_partition_path": pa.repeat(partition, n),
        "_hoodie_file_name": pa.repeat(file_name, n),
    }
    columns = list(meta.values()) + list(body.columns)
    names = list(meta) + body.column_names
    return pa.Table.from_arrays(columns, names=names)


def create_base_file(
    storage: Storage,
    ctx: TaskContext,
    partition: str,
    file_id: str,
    data: pa.Table,
    keys: Keys,
    avro_schema_json: str,
) -> WriteStat:
    """Write a new file group's first base file (Parquet), marker first."""
    ensure_partition_metadata(storage, partition, ctx.instant)
    name = BaseFileName(file_id, ctx.write_token, ctx.instant).name
    path = _join(partition, name)
    create_marker(storage, ctx.instant, path, IOType.CREATE)
    table = with_meta_columns(data, ctx, partition, name, keys)
    sink = pa.BufferOutputStream()
    # parquet.avro.schema lets Hudi's Java readers see the Avro schema they expect
    table = table.replace_schema_metadata({"parquet.avro.schema": avro_schema_json, "writer.model.name": "avro"})
    pq.write_table(table, sink)
    payload = sink.getvalue().to_pybytes()
    storage.write(path, payload)
    return WriteStat(
        file_id=file_id,
        path=path,
        partition_path=partition,
        prev_commit=None,
        num_writes=table.num_rows,
        num_inserts=table.num_rows,
        total_write_bytes=len(payload),
        file_size=len(payload),
        extra={"tidemarkWriteToken": ctx.write_token},
    )


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
    extra_headers: dict[int, str] | None = None,
    rollover_bytes: int | None = None,
) -> WriteStat:
    """Append an Avro data block (updates) and/or a delete block to the file slice's log."""
    ensure_partition_metadata(storage, partition, ctx.instant)
    kwargs: dict[str, Any] = {} if rollover_bytes is None else {"rollover_bytes": rollover_bytes}
    # always a new log file per attempt: a failed attempt's file can then be removed whole
    writer = LogWriter(storage, partition, file_id, base_instant, ctx.write_token, new_file=True, **kwargs)
    log_path = _join(partition, writer.log_file.name)
    create_marker(storage, ctx.instant, log_path, IOType.APPEND)
    blocks = []
    headers = dict(extra_headers or {})
    if upserts is not None and upserts.num_rows:
        table = with_meta_columns(upserts, ctx, partition, file_id, upsert_keys)
        blocks.append(avro_data_block(plain_rows(table), avro_schema_json, ctx.instant, headers))
    if deletes:
        blocks.append(delete_block(deletes, ctx.instant, avro_schema_json, headers))
    if not blocks:
        raise ValueError("append_log_blocks needs updates or deletes")
    result = writer.append(blocks)
    n_up = upserts.num_rows if upserts is not None else 0
    return WriteStat(
        file_id=file_id,
        path=result.path,
        partition_path=partition,
        prev_commit=base_instant,
        num_writes=n_up,
        num_update_writes=n_up,
        num_deletes=len(deletes),
        total_write_bytes=result.size - result.block_offsets[0],
        file_size=result.size,
        base_file=base_file.rsplit("/", 1)[-1] if base_file else "",
        log_files=(result.log_file.name,),
        log_version=result.log_file.version,
        log_offset=result.block_offsets[0],
        extra={"tidemarkWriteToken": ctx.write_token, "tidemarkBlocks": len(blocks)},
    )
