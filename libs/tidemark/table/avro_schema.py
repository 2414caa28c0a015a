"""Arrow schemas as the Avro schemas Hudi writes (for log blocks and commit metadata), and Arrow
rows as the Python values fastavro encodes.

Hudi's Spark writer names the record ``{table}_record`` in namespace ``hoodie.{table}`` and makes
every field nullable as ``["null", type]`` with default null; nested records are named after their
field, namespaced by their parent's full name; decimals are fixed-size; timestamps are
``timestamp-micros`` longs and dates ``date`` ints.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from tidemark.errors import TableError
from tidemark.storage.base import Storage
from tidemark.timeline import CommitMetadata, instant_path, load_timeline, read_instant

META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


def _decimal_size(precision: int) -> int:
    # the fewest bytes holding a signed value of `precision` digits (Avro/Parquet convention)
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def _avro_type(dtype: pa.DataType, name: str, namespace: str) -> Any:
    if pa.types.is_boolean(dtype):
        return "boolean"
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype) or pa.types.is_int32(dtype):
        return "int"
    if pa.types.is_uint8(dtype) or pa.types.is_uint16(dtype):
        return "int"
    if pa.types.is_int64(dtype) or pa.types.is_uint32(dtype):
        return "long"
    if pa.types.is_float32(dtype):
        return "float"
    if pa.types.is_float64(dtype):
        return "double"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "bytes"
    if pa.types.is_date32(dtype):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(dtype):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if pa.types.is_decimal(dtype):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": _decimal_size(dtype.precision),
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return {"type": "array", "items": _nullable(_avro_type(dtype.value_type, name, namespace))}
    if pa.types.is_map(dtype):
        if not (pa.types.is_string(dtype.key_type) or pa.types.is_large_string(dtype.key_type)):
            raise TableError(f"column {name!r}: Avro maps need string keys, not {dtype.key_type}")
        return {"type": "map", "values": _nullable(_avro_type(dtype.item_type, name, namespace))}
    if pa.types.is_struct(dtype):
        return _record(dtype, name, namespace)
    raise TableError(f"column {name!r} has type {dtype}, which Hudi tables cannot store")


def _nullable(avro: Any) -> list[Any]:
    return ["null", avro]


def _record(struct: Iterable[pa.Field], name: str, namespace: str) -> dict[str, Any]:
    full = f"{namespace}.{name}"
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "fields": [
            {"name": f.name, "type": _nullable(_avro_type(f.type, f.name, full)), "default": None} for f in struct
        ],
    }


def avro_schema_for(schema: pa.Schema, table_name: str, with_meta_fields: bool = True) -> dict[str, Any]:
    """The Avro schema Hudi would write for rows of ``schema`` in table ``table_name``."""
    fields = [f for f in schema if f.name not in META_FIELDS]
    record = _record(fields, f"{table_name}_record", f"hoodie.{table_name}")
    if with_meta_fields:
        meta = [{"name": m, "type": ["null", "string"], "doc": "", "default": None} for m in META_FIELDS]
        record["fields"] = meta + record["fields"]
    return record


def avro_schema_json(schema: pa.Schema, table_name: str, with_meta_fields: bool = True) -> str:
    return json.dumps(avro_schema_for(schema, table_name, with_meta_fields), separators=(",", ":"))


def latest_table_schema(storage: Storage) -> str | None:
    """The Avro schema (JSON) the latest completed write recorded (Hudi's ``extraMetadata``
    key ``schema``), as Hudi's readers resolve the table's schema."""
    for instant in reversed(load_timeline(storage).completed().write_instants().instants):
        where = storage.full_uri(instant_path(instant))
        schema = CommitMetadata.from_bytes(read_instant(storage, instant), where).schema
        if schema and json.loads(schema).get("fields"):
            return schema
    return None


def _convert(value: Any, dtype: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(dtype):
        return {k: _convert(v, dtype.item_type) for k, v in value}
    if pa.types.is_struct(dtype):
        return {f.name: _convert(value.get(f.name), f.type) for f in dtype}
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [_convert(v, dtype.value_type) for v in value]
    return value


def _needs_conversion(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_map(dtype) or pa.types.is_struct(dtype) or pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
    )


def plain_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of an Arrow table as plain dicts, maps included (Arrow gives them as pair lists):
    what fastavro encodes and what JSON output shows."""
    rows: list[dict[str, Any]] = table.to_pylist()
    nested = [f for f in table.schema if _needs_conversion(f.type)]
    for row in rows:
        for f in nested:
            row[f.name] = _convert(row[f.name], f.type)
    return rows
