"""Encoding and decoding of block contents: Avro data (v3), delete (v3), Parquet data.

Every length read from content is checked against the bytes actually present before it is used,
so damaged content raises :class:`LogBlockContentError` instead of allocating or looping.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import fastavro
from fastavro import schemaless_reader as _schemaless_reader
from fastavro import schemaless_writer

from tidemark.errors import LogBlockContentError, LogBlockEncodeError

#: Content version Hudi 0.14/0.15 write for Avro data and delete blocks.
AVRO_CONTENT_VERSION = 3
DELETE_CONTENT_VERSION = 3

# fastavro types the datum as any Avro value; records here are always Avro records (dicts)
schemaless_reader: Callable[..., Any] = _schemaless_reader

_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")

# Hudi's HoodieDeleteRecordList as of table version 6 (the ordering-value union's wrappers, in
# Hudi's order: the branch index is part of the encoding).
_WRAPPERS: tuple[tuple[str, Any], ...] = (
    ("BooleanWrapper", "boolean"),
    ("IntWrapper", "int"),
    ("LongWrapper", "long"),
    ("FloatWrapper", "float"),
    ("DoubleWrapper", "double"),
    ("BytesWrapper", "bytes"),
    ("StringWrapper", "string"),
    ("DateWrapper", "int"),
    ("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    ("TimestampMicrosWrapper", "long"),
)
_NAMESPACE = "org.apache.hudi.avro.model"
DELETE_RECORD_LIST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": _NAMESPACE,
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {
                            "name": "orderingVal",
                            "type": [
                                "null",
                                *(
                                    {"type": "record", "name": name, "fields": [{"name": "value", "type": t}]}
                                    for name, t in _WRAPPERS
                                ),
                            ],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}
_PARSED_DELETE_SCHEMA = fastavro.parse_schema(DELETE_RECORD_LIST_SCHEMA)


@dataclass(frozen=True)
class DeleteRecord:
    """One entry of a delete block: the key to delete, its partition, and the ordering value
    (Hudi's precombine value) with the name of the Avro wrapper it was stored in."""

    record_key: str | None
    partition_path: str | None
    ordering_value: Any = None
    ordering_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "recordKey": self.record_key,
            "partitionPath": self.partition_path,
            "orderingVal": self.ordering_value,
        }


def _interned(value: Any) -> Any:
    # fastavro compares field names and types as strings: interned ones make that measurably faster
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, list):
        return [_interned(v) for v in value]
    if isinstance(value, dict):
        return {sys.intern(k): _interned(v) for k, v in value.items()}
    return value


@lru_cache(maxsize=64)
def parse_avro_schema(schema_json: str) -> Any:
    """A fastavro-parsed schema for the SCHEMA header's JSON (cached: blocks repeat schemas)."""
    try:
        return fastavro.parse_schema(_interned(json.loads(schema_json)))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
        raise LogBlockContentError(f"the block's Avro schema cannot be parsed: {e}") from e


# --- Avro data content -------------------------------------------------------------------------


def encode_avro_records(records: Iterable[Mapping[str, Any]], schema_json: str) -> bytes:
    """Avro data content: int version, int count, then per record int length + Avro datum."""
    try:
        schema = parse_avro_schema(schema_json)
    except LogBlockContentError as e:
        raise LogBlockEncodeError(str(e)) from e
    out = io.BytesIO()
    out.write(b"\0" * 8)
    starts: list[int] = []
    try:
        for record in records:
            start = out.tell()
            out.write(b"\0\0\0\0")  # length, patched below: avoids a copy per record
            schemaless_writer(out, schema, record)
            starts.append(start)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
        raise LogBlockEncodeError(f"record {len(starts)} does not fit the block schema: {e}") from e
    total = out.tell()
    with out.getbuffer() as data:  # patch in place: no copy of the content
        _TWO_INTS.pack_into(data, 0, AVRO_CONTENT_VERSION, len(starts))
        ends = [*starts[1:], total] if starts else []
        for start, end in zip(starts, ends, strict=True):
            _INT.pack_into(data, start, end - start - 4)
    return out.getvalue()


def avro_record_count(head: bytes) -> int:
    """The record count from the first 8 bytes of Avro data content."""
    if len(head) < 8:
        raise LogBlockContentError(f"Avro data content is {len(head)} bytes, too short for its header")
    version, count = _TWO_INTS.unpack_from(head, 0)
    _check_avro_version(version)
    if count < 0:
        raise LogBlockContentError(f"Avro data content has a negative record count {count}")
    return int(count)


def _check_avro_version(version: int) -> None:
    if not 1 <= version <= AVRO_CONTENT_VERSION:
        raise LogBlockContentError(f"unsupported Avro data content version {version}")


def decode_avro_records(content: bytes, schema_json: str) -> list[dict[str, Any]]:
    """The records of Avro data content, decoded with the SCHEMA header's schema."""
    schema = parse_avro_schema(schema_json)
    count = avro_record_count(content)
    n = len(content)
    if count > (n - 8) // 4:  # every record needs at least its 4-byte length
        raise LogBlockContentError(f"Avro data content claims {count} records but holds {n} bytes")
    stream = io.BytesIO(content)
    unpack_int = _INT.unpack_from
    records: list[dict[str, Any]] = []
    append = records.append
    pos = 8
    try:
        for _ in range(count):
            if pos + 4 > n:
                raise LogBlockContentError(f"Avro data content ends inside record {len(records)}")
            (length,) = unpack_int(content, pos)
            pos += 4
            end = pos + length
            if length < 0 or end > n:
                raise LogBlockContentError(
                    f"record {len(records)} claims {length} bytes at content offset {pos}, past the end ({n})"
                )
            stream.seek(pos)
            append(schemaless_reader(stream, schema, None))
            if stream.tell() != end:
                raise LogBlockContentError(
                    f"record {len(records) - 1} decoded to {stream.tell() - pos} bytes, header says {length}"
                )
            pos = end
    except LogBlockContentError:
        raise
    except (EOFError, ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as e:
        raise LogBlockContentError(f"record {len(records)} is not valid Avro for the block schema: {e}") from e
    return records


# --- delete content ----------------------------------------------------------------------------


def _wrap_ordering(record: DeleteRecord) -> Any:
    if record.ordering_value is None:
        return None
    name = record.ordering_type or _default_wrapper(record.ordering_value)
    short = name.rsplit(".", 1)[-1]
    if short not in dict(_WRAPPERS):
        raise LogBlockEncodeError(f"unknown ordering value wrapper {name!r}")
    return (f"{_NAMESPACE}.{short}", {"value": record.ordering_value})


def _default_wrapper(value: Any) -> str:
    # a DeleteRecord built without its wrapper (delete_records names it from the field's type)
    if isinstance(value, bool):
        return "BooleanWrapper"
    if isinstance(value, int):
        return "LongWrapper"
    if isinstance(value, float):
        return "DoubleWrapper"
    if isinstance(value, bytes):
        return "BytesWrapper"
    if isinstance(value, str):
        return "StringWrapper"
    raise LogBlockEncodeError(f"no Avro wrapper for an ordering value of type {type(value).__name__}")


# --- ordering values of delete records, by the ordering field's Avro type ----------------------

#: the wrapper of each Avro type without a logical type that Hudi wraps
_PLAIN_WRAPPERS = {
    "boolean": "BooleanWrapper",
    "int": "IntWrapper",
    "long": "LongWrapper",
    "float": "FloatWrapper",
    "double": "DoubleWrapper",
    "bytes": "BytesWrapper",
    "string": "StringWrapper",
}
#: timestamps' units, in microseconds (Hudi wraps the Avro long as it is)
_TIMESTAMP_MICROS = {
    "timestamp-micros": 1,
    "timestamp-millis": 1000,
    "local-timestamp-micros": 1,
    "local-timestamp-millis": 1000,
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()
#: Hudi's natural order: ``DeleteRecord.create(key)``'s ordering value, the int 0
NATURAL_ORDER = (0, "IntWrapper")


def _non_null(avro: Any) -> Any:
    # a nullable field: Hudi takes the union's first branch that is not null
    if isinstance(avro, list):
        return next((_non_null(branch) for branch in avro if branch != "null"), "null")
    if isinstance(avro, dict) and isinstance(avro.get("type"), (dict, list)):
        return _non_null(avro["type"])
    return avro


def _kind(avro: Any) -> tuple[Any, Any]:
    return (avro.get("type"), avro.get("logicalType")) if isinstance(avro, dict) else (avro, None)


@lru_cache(maxsize=64)
def ordering_field_type(schema_json: str | None, field: str) -> Any:
    """The Avro type (JSON, not to be changed) of ``field`` (dotted for a nested field) in a
    record schema's JSON, its null branch left out; None when the schema lacks it."""
    if not schema_json:
        return None
    try:
        node = json.loads(schema_json)
    except ValueError:
        return None
    for part in field.split("."):
        node = _non_null(node)
        if not isinstance(node, dict) or node.get("type") != "record":
            return None
        found = [f for f in node.get("fields", ()) if isinstance(f, dict) and f.get("name") == part]
        if not found:
            return None
        node = found[0].get("type")
    return _non_null(node)


def ordering_wrapper(field_type: Any) -> str:
    """The wrapper Hudi 0.14/0.15 stores a delete record's ordering value in, by the Avro type of
    the ordering field. As ``HoodieAvroUtils.getNestedFieldVal`` gives the value
    (``convertValueForSpecificDataTypes``: a date as ``LocalDate``, a decimal as ``BigDecimal``,
    timestamps as their Avro long, the consistent-logical-timestamp option being off by default)
    and ``HoodieAvroUtils.wrapValueIntoAvro`` wraps it by its Java class."""
    kind, logical = _kind(field_type)
    if kind == "int" and logical == "date":
        return "DateWrapper"
    if kind in ("bytes", "fixed") and logical == "decimal":
        return "DecimalWrapper"
    if isinstance(kind, str) and kind in _PLAIN_WRAPPERS:
        return _PLAIN_WRAPPERS[kind]
    shown = "none (no such field)" if field_type is None else json.dumps(field_type)
    raise LogBlockEncodeError(f"Hudi stores no delete ordering value of the Avro type {shown}")


def ordering_to_avro(value: Any, field_type: Any) -> Any:
    """A row's ordering value (as fastavro or pyarrow give it) as its wrapper holds it: a
    timestamp's Avro long, a date's epoch day; other values as they are."""
    _, logical = _kind(field_type)
    if isinstance(value, dt.datetime) and logical in _TIMESTAMP_MICROS:
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        delta = aware - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros // _TIMESTAMP_MICROS[logical]
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime) and logical == "date":
        return value.toordinal() - _EPOCH_DAY
    return value


def ordering_from_avro(value: Any, field_type: Any) -> Any:
    """A wrapper's value as the rows of a field of ``field_type`` hold it (the inverse of
    :func:`ordering_to_avro`): timestamps as datetimes (with UTC but for local ones), dates as dates."""
    _, logical = _kind(field_type)
    if isinstance(value, int) and not isinstance(value, bool):
        if logical in _TIMESTAMP_MICROS:
            moment = _EPOCH + dt.timedelta(microseconds=value * _TIMESTAMP_MICROS[logical])
            return moment.replace(tzinfo=None) if str(logical).startswith("local-") else moment
        if logical == "date":
            return dt.date.fromordinal(value + _EPOCH_DAY)
    return value


def delete_records(
    keys: Sequence[str | None], partition: str, values: Sequence[Any] | None, field_type: Any = None
) -> list[DeleteRecord]:
    """Delete records of ``keys`` in ``partition``, each ordering value wrapped as Hudi wraps the
    ordering field's values (:func:`ordering_wrapper`, ``field_type`` its Avro type). Without
    ordering values (the delete operation, a table without ordering field) or for a null one,
    Hudi's ``DeleteRecord.create(key)``: the int 0, arrival order (Hudi 0.14/0.15's log scanner
    cannot read a null ordering value of a key it holds)."""
    if values is None:
        return [DeleteRecord(k, partition, *NATURAL_ORDER) for k in keys]
    wrapper = ordering_wrapper(field_type)
    return [
        DeleteRecord(k, partition, *NATURAL_ORDER)
        if v is None
        else DeleteRecord(k, partition, ordering_to_avro(v, field_type), wrapper)
        for k, v in zip(keys, values, strict=True)
    ]


def encode_delete_records(records: Sequence[DeleteRecord]) -> bytes:
    """Delete content v3: int version, int length, Avro ``HoodieDeleteRecordList``."""
    datum = {
        "deleteRecordList": [
            {"recordKey": r.record_key, "partitionPath": r.partition_path, "orderingVal": _wrap_ordering(r)}
            for r in records
        ]
    }
    out = io.BytesIO()
    try:
        schemaless_writer(out, _PARSED_DELETE_SCHEMA, datum)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
        raise LogBlockEncodeError(f"delete records cannot be encoded: {e}") from e
    payload = out.getvalue()
    return _TWO_INTS.pack(DELETE_CONTENT_VERSION, len(payload)) + payload


def decode_delete_records(content: bytes) -> list[DeleteRecord]:
    if len(content) < 8:
        raise LogBlockContentError(f"delete content is {len(content)} bytes, too short for its header")
    version, length = _TWO_INTS.unpack_from(content, 0)
    if version != DELETE_CONTENT_VERSION:
        # versions 1 and 2 were Java (Kryo) serialised objects, not readable outside the JVM
        raise LogBlockContentError(f"unsupported delete content version {version} (tidemark reads version 3)")
    if length < 0 or 8 + length > len(content):
        raise LogBlockContentError(f"delete content claims {length} bytes but holds {len(content) - 8}")
    stream = io.BytesIO(content[8 : 8 + length])
    try:
        datum = schemaless_reader(stream, _PARSED_DELETE_SCHEMA, None, return_record_name=True)
    except (EOFError, ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as e:
        raise LogBlockContentError(f"delete content is not a valid HoodieDeleteRecordList: {e}") from e
    result: list[DeleteRecord] = []
    for entry in datum["deleteRecordList"]:
        ordering = entry["orderingVal"]
        value, kind = (None, None)
        if ordering is not None:
            kind, wrapped = ordering
            value = wrapped["value"]
        result.append(DeleteRecord(entry["recordKey"], entry["partitionPath"], value, kind))
    return result


# --- Parquet data content ----------------------------------------------------------------------


def decode_parquet(content: bytes) -> Any:
    """A Parquet data block's content as a ``pyarrow.Table``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # one block is small: no thread pool (also keeps pyarrow threads out of tracemalloc runs)
        table = pq.read_table(pa.BufferReader(content), use_threads=False)
        # Parquet's page checksums are optional, so a damaged byte inside a string column can
        # decode "successfully"; full validation catches invalid UTF-8 here, not in a caller.
        table.validate(full=True)
        return table
    except (pa.ArrowException, OSError, ValueError) as e:
        raise LogBlockContentError(f"Parquet data content cannot be read: {e}") from e


def parquet_rows(table: Any) -> list[dict[str, Any]]:
    """A decoded Parquet block's rows as plain dicts. Values that validate as Arrow can still be
    out of Python's range (a damaged timestamp far past year 9999): that is damaged content too."""
    import pyarrow as pa

    try:
        # maps as dicts, as Avro blocks decode them (a key twice would be damage: refused)
        rows: list[dict[str, Any]] = table.to_pylist(maps_as_pydicts="strict")
        return rows
    except (pa.ArrowException, ValueError, OverflowError) as e:
        raise LogBlockContentError(f"Parquet data content cannot be converted: {e}") from e


def parquet_record_count(content: bytes) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(pa.BufferReader(content)).num_rows)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise LogBlockContentError(f"Parquet data content cannot be read: {e}") from e


def encode_parquet(table: Any, compression: str = "snappy", dictionary: bool = True) -> bytes:
    """A ``pyarrow.Table`` as Parquet data block content (``compression``: pyarrow's name). Row
    groups and pages are the writer's defaults, as in Hudi's Parquet blocks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression, use_dictionary=dictionary)
    return bytes(sink.getvalue().to_pybytes())
