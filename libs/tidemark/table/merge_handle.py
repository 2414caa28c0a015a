"""Hudi's merge handle, for copy-on-write tables: a file group's incoming records merged with its
latest base file, written whole as the group's next file slice (the same file id, this instant,
this task attempt's write token), under a ``MERGE`` marker. The old slice stays for readers of
older instants until the cleaner removes it.

As Hudi's handle does, rows no incoming record touches are copied with their meta columns (their
commit time and sequence number stay, so incremental readers see them unchanged; only
``_hoodie_file_name`` names the new file), and so are stored rows the payload keeps over their
incoming record (a stale update); updated rows and inserts get this instant's meta columns;
deleted keys are left out. A group whose rows are all deleted gets an empty base file. Rows keep
the old file's order (a merged row in its stored row's place), new keys after them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidemark.errors import TableError
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import FILE_NAME, META_FIELDS, RECORD_KEY, promoted
from tidemark.table.base_file import read_base_file
from tidemark.table.markers import IOType, MarkerWriter
from tidemark.table.payload import MergeRule
from tidemark.table.write_handles import (
    AfterMarker,
    Keys,
    ParquetConfig,
    TaskContext,
    base_file_path,
    ensure_partition_metadata,
    mark_data_file,
    with_meta_columns,
    write_base_file,
)
from tidemark.timeline import WriteStat


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns in ``schema``'s order and types; a column it lacks (a nullable column
    added since it was written) is null."""
    columns = []
    present = set(table.column_names)  # once: column_names is a new list at each access
    for f in schema:
        if f.name in present:
            column = table.column(f.name)
            try:
                if column.type != f.type:
                    column = promoted(column, f.type)
                columns.append(column)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise TableError(
                    f"column {f.name}: the rows already in the table cannot take the write's type {f.type} ({e})"
                ) from e
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _nullable(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every nested field nullable, as the table's Avro schema records them."""
    if pa.types.is_struct(dtype):
        return pa.struct([pa.field(f.name, _nullable(f.type), True, f.metadata) for f in dtype])
    if pa.types.is_large_list(dtype):
        return pa.large_list(pa.field(dtype.value_field.name, _nullable(dtype.value_type), True))
    if pa.types.is_list(dtype):
        return pa.list_(pa.field(dtype.value_field.name, _nullable(dtype.value_type), True))
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_type, pa.field(dtype.item_field.name, _nullable(dtype.item_type), True))
    return dtype


def merge_base_file(
    storage: Storage,
    ctx: TaskContext,
    partition: str,
    file_id: str,
    base_file: str,
    base_instant: str,
    updates: pa.Table,
    update_keys: Keys,
    delete_keys: Keys,
    inserts: pa.Table,
    insert_keys: Keys,
    avro_schema_json: str,
    rule: MergeRule,
    markers: MarkerWriter | None = None,
    after_marker: AfterMarker | None = None,
    parquet: ParquetConfig | None = None,
) -> WriteStat:
    """Rewrite the file group's base file ``base_file`` (of ``base_instant``) with ``updates``
    merged in by the table's payload ``rule``, ``delete_keys`` removed (the delete operation:
    whatever their ordering, as Hudi's ``EmptyHoodieRecordPayload``) and ``inserts`` added (new
    keys routed to this small file). ``updates`` and ``inserts`` have the write's data columns,
    even when empty; a record the payload takes as a delete removes its key, or is dropped."""
    ensure_partition_metadata(storage, partition, ctx.instant)
    path = base_file_path(ctx, partition, file_id)
    name = path.rpartition("/")[2]
    mark_data_file(storage, ctx, path, IOType.MERGE, markers, after_marker)
    old = read_base_file(storage, base_file)
    if RECORD_KEY not in old.column_names:
        raise TableError(f"{storage.full_uri(base_file)} has no {RECORD_KEY} column: it cannot be merged by key")
    # the new file has the write's schema (``updates``' columns); the old rows follow it. Its
    # nested fields are nullable, as the commit's schema says: a field new to a struct that the
    # input holds as non-null (a Spark literal) is null in the rows already in the file
    schema = pa.schema([pa.field(f.name, _nullable(f.type), f.nullable, f.metadata) for f in updates.schema])
    data_names = [c for c in old.column_names if c not in META_FIELDS]
    old_keys = old.column(RECORD_KEY).cast(pa.string()).combine_chunks()
    # the incoming records, one per key (Hudi's keyToNewRecords). An insert whose key this file
    # holds merges with it, as Hudi's merge handle does unless hoodie.merge.allow.duplicate.on.inserts;
    # an update whose key the file does not hold after all is an insert
    incoming = pa.concat_tables([inserts, updates])
    incoming_keys = pa.concat_arrays([_array(insert_keys), _array(update_keys)])
    # one lookup of every stored row in the incoming keys (one hash of the incoming keys): the
    # index of its key's record, or null. Each stored row of a key merges with that record on its
    # own, as Hudi's HoodieMergeHandle.write(oldRecord) does for each old record: a file that
    # holds a key twice (an insert or bulk_insert leaves duplicates) gets the record written once
    # for each stored row it wins over, in that row's place, and keeps each row that wins over it
    deleted = _flat(pc.is_in(old_keys, value_set=_array(delete_keys)))
    record_of = pc.index_in(old_keys, value_set=incoming_keys)
    matched = pc.and_(pc.is_valid(record_of), pc.invert(deleted)).to_numpy(zero_copy_only=False)
    stored_at = np.flatnonzero(matched)  # the stored rows merged, in file order
    records = record_of.filter(pa.array(matched)).to_numpy(zero_copy_only=False)
    in_file = np.zeros(incoming.num_rows, dtype=bool)
    in_file[records] = True
    inserts = incoming.filter(pa.array(~in_file))
    insert_keys = incoming_keys.filter(pa.array(~in_file))
    alive = _flat(pc.invert(rule.deleted_mask(inserts)))  # getInsertValue of a delete is nothing
    inserts, insert_keys = inserts.filter(alive), insert_keys.filter(alive)

    stored = conform(old.take(stored_at).select(data_names), schema)
    merged, written, stayed = _combine(rule, stored, conform(incoming, schema).take(records))
    # a stored row the payload kept is copied as it is, as Hudi's handle copies the old record
    # when the combined one is it, so this commit neither claims nor counts it
    copy = ~(matched | deleted.to_numpy(zero_copy_only=False))
    copy[stored_at[stayed]] = True
    written_new = with_meta_columns(
        pa.concat_tables([merged, conform(inserts, schema)]),
        ctx,
        partition,
        name,
        pa.concat_arrays([incoming_keys.take(records[written]), insert_keys]),
    )
    copied = _copied_rows(old, name if ctx.meta_fields else None, data_names, written_new.schema)
    table = pa.concat_tables([copied, written_new])
    if not copy.all():
        # one take: the rows copied and each merged row in its stored row's place, then the new
        # keys, as Hudi's handle walks the old file and then writes the records it has not
        # written (writeIncomingRecords): the file keeps the layout clustering or a sort mode gave it
        n = old.num_rows
        place = np.where(copy, np.arange(n), -1)
        place[stored_at[written]] = np.arange(n, n + len(written))
        in_place = place[place >= 0]
        table = table.take(np.concatenate([in_place, np.arange(n + len(written), table.num_rows)]))
    size = write_base_file(storage, path, table, avro_schema_json, parquet)
    return WriteStat(
        file_id=file_id,
        path=path,
        partition_path=partition,
        prev_commit=base_instant,
        num_writes=table.num_rows,
        num_update_writes=merged.num_rows,
        num_deletes=_count(deleted) + len(stored_at) - merged.num_rows - int(np.count_nonzero(stayed)),
        num_inserts=inserts.num_rows,
        total_write_bytes=size,
        file_size=size,
        extra={"tidemarkWriteToken": ctx.write_token},
    )


def _combine(rule: MergeRule, stored: pa.Table, incoming: pa.Table) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Each stored row combined with its key's incoming record (``combineAndGetUpdateValue``; the
    i-th row of each): the new rows to write, which pairs they come from (in order), and per pair
    whether the stored row stays as it is (the payload returned it, not a new record); a pair
    whose combination is a delete is in neither. Vectorised where the payload keeps one version
    whole."""
    field = rule.ordering_field
    deletes = rule.deleted_mask(incoming)
    wins = None
    if not pc.any(deletes).as_py():
        if field and field in stored.column_names and field in incoming.column_names:
            wins = rule.incoming_wins(stored.column(field), incoming.column(field))
        else:
            # no ordering values: the incoming record wins, as Hudi's payloads keep it over a null
            nulls = pa.nulls(incoming.num_rows, pa.int64())
            wins = rule.incoming_wins(nulls, nulls)
    if wins is not None:
        won = _flat(wins).to_numpy(zero_copy_only=False)
        return incoming.filter(pa.array(won)), np.flatnonzero(won), ~won
    stored_records = stored.to_pylist()
    combined = [rule.combine(s, i) for s, i in zip(stored_records, incoming.to_pylist(), strict=True)]
    # the stored record itself, as Hudi's handle tells it apart (by identity): a payload that
    # merges fields builds a new record, which this commit writes even when no value changed
    stayed = np.array([row is s for row, s in zip(combined, stored_records, strict=True)], dtype=bool)
    written = np.array([i for i, row in enumerate(combined) if row is not None and not stayed[i]], dtype=np.int64)
    rows = pa.Table.from_pylist([combined[i] for i in written], schema=incoming.schema)
    return rows, written, stayed


def _flat(mask: pa.Array | pa.ChunkedArray) -> pa.Array:
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def _count(mask: pa.Array) -> int:
    return int(pc.sum(mask).as_py() or 0)


def _array(keys: Keys) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        return keys.combine_chunks().cast(pa.string())
    if isinstance(keys, pa.Array):
        return keys.cast(pa.string())
    return pa.array(list(keys), pa.string())


def _copied_rows(kept: pa.Table, file_name: str | None, data_names: list[str], schema: pa.Schema) -> pa.Table:
    """Old rows as they are, meta columns included, but for the file name (None: a table without
    meta fields, whose rows name none)."""
    meta = [
        pa.repeat(file_name, kept.num_rows)
        if m == FILE_NAME and file_name is not None
        else kept.column(m).cast(pa.string())
        for m in META_FIELDS
    ]
    data = conform(kept.select(data_names), pa.schema([schema.field(n) for n in schema.names[len(META_FIELDS) :]]))
    return pa.Table.from_arrays(meta + list(data.columns), schema=schema)
