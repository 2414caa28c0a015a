"""Avro data content to and from Arrow columns, with no Python object per record.

An Avro data block holds one datum per record, each behind its 4-byte length (see
:mod:`tidemark.logformat.content`). For the records Spark writers produce most (a flat record
whose fields are booleans, ints, longs, floats, doubles, strings, bytes, dates or timestamps,
each alone or in a union with null) a field has the same layout in every record, so it can be
encoded or decoded for all records at once with numpy: a field at a time, a cursor per record.

Both directions give exactly what the record-by-record codec (fastavro) gives; anything else
(nested types, maps, decimals, enums, a value out of its Avro type's range, damaged content)
returns None, and the caller takes the record-by-record path, which also words the error.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidemark.errors import LogBlockContentError
from tidemark.logformat.content import AVRO_CONTENT_VERSION, avro_record_count, parse_avro_schema

_PRIMITIVES = ("boolean", "int", "long", "float", "double", "string", "bytes")
#: the Arrow type of an Avro logical type on its primitive (Hudi's dates and timestamps)
AVRO_LOGICAL_TYPES: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
}
#: the Arrow type of each Avro primitive that holds a value
AVRO_PRIMITIVE_TYPES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_LENGTH = struct.Struct(">i")


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str  # an Avro primitive
    arrow: pa.DataType
    #: None: not a union; else (the value's branch, the null's branch)
    branches: tuple[int, int] | None


def _field(spec: Any) -> _Field | None:
    """A record field this codec handles, or None."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        return None
    avro = spec.get("type")
    branches = None
    if isinstance(avro, list):
        if len(avro) != 2 or "null" not in avro:
            return None
        null = avro.index("null")
        branches = (1 - null, null)
        avro = avro[1 - null]
    logical = None
    if isinstance(avro, dict):
        logical = avro.get("logicalType")
        if set(avro) - {"type", "logicalType"}:  # e.g. a decimal's precision: not handled here
            return None
        avro = avro.get("type")
    if not isinstance(avro, str) or avro not in _PRIMITIVES:
        return None
    if logical is None:
        arrow = AVRO_PRIMITIVE_TYPES[avro]
    elif (avro, logical) in AVRO_LOGICAL_TYPES:
        arrow = AVRO_LOGICAL_TYPES[(avro, logical)]
    else:
        return None
    return _Field(spec["name"], avro, arrow, branches)


@lru_cache(maxsize=64)
def _layout(schema_json: str) -> tuple[_Field, ...] | None:
    """The record's fields, when every one is handled here (cached: blocks repeat schemas)."""
    try:
        parse_avro_schema(schema_json)  # what fastavro refuses is refused here too
        schema = json.loads(schema_json)
    except (LogBlockContentError, ValueError):
        return None
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(schema.get("fields"), list):
        return None
    fields = tuple(_field(f) for f in schema["fields"])
    if not fields or any(f is None for f in fields):
        return None
    return tuple(f for f in fields if f is not None)


def arrow_schema(schema_json: str) -> pa.Schema | None:
    """The Arrow schema :func:`decode_avro_table` gives blocks of this Avro schema, or None when
    the schema is not one this module handles."""
    layout = _layout(schema_json)
    return None if layout is None else pa.schema([pa.field(f.name, f.arrow) for f in layout])


# --- encoding ----------------------------------------------------------------------------------


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Avro's zig-zag varints of int64 ``values``: each one's length, and all their bytes."""
    signed = values.astype(np.int64, copy=False)
    zigzag = (signed.view(np.uint64) << np.uint64(1)) ^ (signed >> np.int64(63)).view(np.uint64)
    lengths = np.ones(len(values), dtype=np.int64)
    for k in range(1, 10):
        lengths += zigzag >= (np.uint64(1) << np.uint64(7 * k))
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    rows = np.arange(len(values))
    for k in range(int(lengths.max()) if len(values) else 0):  # the k-th byte of the longer ones
        if k:
            rows = rows[lengths[rows] > k]
        group = (zigzag[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = np.where(lengths[rows] > k + 1, np.uint64(0x80), np.uint64(0))
        out[starts[rows] + k] = (group | more).astype(np.uint8)
    return lengths, out


def _fixed(values: np.ndarray, width: int, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = values.view(np.uint8).reshape(len(values), width)
    return np.where(present, width, 0).astype(np.int64), rows[present].ravel()


_Segment = tuple[np.ndarray, np.ndarray]  # per record: its length; all records' bytes in order


def _encode_column(field: _Field, column: pa.Array) -> list[_Segment] | None:
    n = len(column)
    valid = np.ones(n, dtype=bool) if column.null_count == 0 else column.is_valid().to_numpy(zero_copy_only=False)
    segments: list[_Segment] = []
    if field.branches is not None:
        value, null = field.branches
        branch = np.where(valid, value * 2, null * 2).astype(np.uint8)  # zig-zag of 0 or 1: one byte
        segments.append((np.ones(n, dtype=np.int64), branch))
    elif not valid.all():
        return None  # a null where the schema allows none: fastavro says so
    t = column.type
    kind = field.kind
    if kind in ("string", "bytes"):
        text = kind == "string"
        if not ((pa.types.is_string(t) or pa.types.is_large_string(t)) if text else pa.types.is_binary(t)):
            return None
        if column.null_count:
            column = pc.fill_null(column, "" if text else b"")
        offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if pa.types.is_large_string(t) else np.int32)
        offsets = offsets[column.offset : column.offset + n + 1].astype(np.int64)
        sizes = np.diff(offsets)
        data = (
            np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]] if n else np.empty(0, np.uint8)
        )
        lengths, prefix = _varints(sizes[valid])
        prefix_lengths = np.zeros(n, dtype=np.int64)
        prefix_lengths[valid] = lengths
        segments += [(prefix_lengths, prefix), (np.where(valid, sizes, 0), data)]
        return segments
    if kind == "boolean":
        if not pa.types.is_boolean(t):
            return None
        values = column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        segments.append(_fixed(values, 1, valid))
        return segments
    if kind in ("float", "double"):
        width = 4 if kind == "float" else 8
        if not (pa.types.is_float32(t) if kind == "float" else pa.types.is_floating(t)) or pa.types.is_float16(t):
            return None
        values = column.fill_null(0).to_numpy(zero_copy_only=False).astype("<f4" if width == 4 else "<f8")
        segments.append(_fixed(values, width, valid))
        return segments
    # int and long, dates and timestamps: zig-zag varints of the stored integers
    if field.arrow != AVRO_PRIMITIVE_TYPES[kind]:
        if field.arrow.id != t.id or getattr(field.arrow, "unit", None) != getattr(t, "unit", None):
            return None
        if pa.types.is_timestamp(t) and field.arrow.tz is None and t.tz is not None:
            return None  # a local timestamp from a zoned one: fastavro shifts it
        ints = column.view(pa.int32() if pa.types.is_date32(t) else pa.int64())
    elif pa.types.is_integer(t) and not pa.types.is_uint64(t) and (kind == "long" or t.bit_width <= 32):
        ints = column
        if kind == "int" and pa.types.is_uint32(t):
            return None
    else:
        return None
    numbers = ints.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    lengths, data = _varints(numbers[valid])
    per_row = np.zeros(n, dtype=np.int64)
    per_row[valid] = lengths
    segments.append((per_row, data))
    return segments


def _scatter(out: np.ndarray, starts: np.ndarray, lengths: np.ndarray, data: np.ndarray) -> None:
    """Copy each record's piece of ``data`` (pieces in record order) to ``out`` at its start."""
    if not len(data):
        return
    source = np.cumsum(lengths) - lengths
    if (lengths == lengths[0]).all():  # one width for all: a strided copy
        width = int(lengths[0])
        out[(starts[:, None] + np.arange(width)[None, :]).ravel()] = data
        return
    out[np.repeat(starts - source, lengths) + np.arange(len(data))] = data


def encode_avro_table(table: pa.Table, schema_json: str) -> bytes | None:
    """Avro data content (as :func:`~tidemark.logformat.content.encode_avro_records` writes it)
    of ``table``'s rows in the schema's field order; None when the schema or a column is not one
    this module encodes."""
    layout = _layout(schema_json)
    names = set(table.column_names)  # built once: column_names is a new list at each access
    if layout is None or any(f.name not in names for f in layout):
        return None
    n = table.num_rows
    segments: list[_Segment] = []
    for f in layout:
        column = table.column(f.name).combine_chunks()
        found = _encode_column(f, column)
        if found is None:
            return None
        segments += found
    sizes = np.zeros(n, dtype=np.int64)
    for lengths, _ in segments:
        sizes += lengths
    if n and sizes.max() > np.iinfo(np.int32).max:
        return None
    record_starts = 8 + np.cumsum(sizes + 4) - (sizes + 4)
    out = np.empty(8 + int((sizes + 4).sum()), dtype=np.uint8)
    out[:8] = np.frombuffer(struct.pack(">ii", AVRO_CONTENT_VERSION, n), dtype=np.uint8)
    lengths_be = sizes.astype(">i4").view(np.uint8)
    _scatter(out, record_starts, np.full(n, 4, dtype=np.int64), lengths_be)
    cursor = record_starts + 4
    for lengths, data in segments:
        _scatter(out, cursor, lengths, data)
        cursor = cursor + lengths
    return out.tobytes()


# --- decoding ----------------------------------------------------------------------------------


class _DamagedError(Exception):
    """The content is not what the schema says: the record-by-record decoder words the error."""


def _read_varints(buf: np.ndarray, at: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints at ``at``: their values and lengths (each within its record). Byte by
    byte over the ones still going: most varints here (branches, string lengths) are one byte."""
    n = len(at)
    zigzag = np.zeros(n, dtype=np.uint64)
    lengths = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    for k in range(10):
        byte = buf[at[rows] + k]
        zigzag[rows] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        done = (byte & 0x80) == 0
        lengths[rows[done]] = k + 1
        rows = rows[~done]
        if not len(rows):
            break
    else:
        raise _DamagedError
    if (at + lengths > ends).any():
        raise _DamagedError
    values = (zigzag >> np.uint64(1)).view(np.int64) ^ -(zigzag & np.uint64(1)).view(np.int64)
    return values, lengths


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())


def _decode_column(field: _Field, buf: np.ndarray, cursor: np.ndarray, ends: np.ndarray) -> pa.Array:
    n = len(cursor)
    valid = np.ones(n, dtype=bool)
    if field.branches is not None:
        branches, lengths = _read_varints(buf, cursor, ends)
        value, null = field.branches
        if not np.isin(branches, (value, null)).all():
            raise _DamagedError
        valid = branches == value
        cursor += lengths
    rows = np.flatnonzero(valid)
    at = cursor[rows]
    kind = field.kind
    if kind in ("string", "bytes"):
        sizes, lengths = _read_varints(buf, at, ends[rows])
        at = at + lengths
        if (sizes < 0).any() or (at + sizes > ends[rows]).any():
            raise _DamagedError
        cursor[rows] = at + sizes
        per_row = np.zeros(n, dtype=np.int64)
        per_row[rows] = sizes
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(per_row, out=offsets[1:])
        total = int(offsets[-1])
        data = buf[np.repeat(at - offsets[rows], sizes) + np.arange(total)] if total else np.empty(0, np.uint8)
        large = total > np.iinfo(np.int32).max
        arrow = (pa.large_string() if large else pa.string()) if kind == "string" else pa.binary()
        if large and kind == "bytes":
            raise _DamagedError
        array = pa.Array.from_buffers(
            arrow,
            n,
            [_validity(valid), pa.py_buffer(offsets.astype(np.int64 if large else np.int32)), pa.py_buffer(data)],
        )
        try:
            array.validate(full=True)  # UTF-8
        except pa.ArrowInvalid:
            raise _DamagedError from None
        return array if not large else array.cast(pa.string())
    if kind in ("boolean", "float", "double"):
        width = {"boolean": 1, "float": 4, "double": 8}[kind]
        if (at + width > ends[rows]).any():
            raise _DamagedError
        raw = buf[at[:, None] + np.arange(width)[None, :]]
        cursor[rows] = at + width
        if kind == "boolean":
            if (raw > 1).any():
                raise _DamagedError
            values: np.ndarray = np.zeros(n, dtype=bool)
            values[rows] = raw[:, 0] == 1
        else:
            values = np.zeros(n, dtype="<f4" if width == 4 else "<f8")
            if len(rows):
                values[rows] = raw.reshape(-1).view(values.dtype)
        return pa.array(values, type=AVRO_PRIMITIVE_TYPES[kind], mask=None if valid.all() else ~valid)
    numbers, lengths = _read_varints(buf, at, ends[rows])
    cursor[rows] = at + lengths
    if kind == "int" and ((numbers < -(2**31)) | (numbers >= 2**31)).any():
        raise _DamagedError
    values = np.zeros(n, dtype=np.int32 if kind == "int" else np.int64)
    values[rows] = numbers
    ints = pa.array(values, type=AVRO_PRIMITIVE_TYPES[kind], mask=None if valid.all() else ~valid)
    return ints if field.arrow == AVRO_PRIMITIVE_TYPES[kind] else ints.view(field.arrow)


def decode_avro_table(content: bytes, schema_json: str) -> pa.Table | None:
    """The records of Avro data content as an Arrow table (types: :func:`arrow_schema`); None
    when the schema is not one this module decodes, or the content is damaged (the
    record-by-record decoder then says where)."""
    return decode_avro_tables([content], schema_json)


def decode_avro_tables(contents: Sequence[bytes], schema_json: str) -> pa.Table | None:
    """The records of several Avro data contents of one schema (a file slice's blocks, in order)
    as one Arrow table, as :func:`decode_avro_table`: decoded together, since numpy's fixed cost
    per call, paid per column of every block, made slices of many small blocks ten times slower
    than their records. None where any content would give None alone."""
    layout = _layout(schema_json)
    if layout is None:
        return None
    every_start = []
    every_length = []
    unpack = _LENGTH.unpack_from
    base = 0  # where each content begins in the buffer of all
    for content in contents:
        count = avro_record_count(content)
        size = len(content)
        if count > (size - 8) // 4:
            return None
        starts = np.empty(count, dtype=np.int64)
        lengths = np.empty(count, dtype=np.int64)
        pos = 8
        for i in range(count):  # each record's length says where the next one starts
            if pos + 4 > size:
                return None
            (length,) = unpack(content, pos)
            if length < 0 or pos + 4 + length > size:
                return None
            starts[i] = base + pos + 4
            lengths[i] = length
            pos += 4 + length
        every_start.append(starts)
        every_length.append(lengths)
        base += size
    starts = np.concatenate(every_start) if every_start else np.empty(0, dtype=np.int64)
    lengths = np.concatenate(every_length) if every_length else np.empty(0, dtype=np.int64)
    # ten spare zero bytes: a varint window near the end reads them, never past the buffer
    buf = np.frombuffer(b"".join([*contents, b"\0" * 10]), dtype=np.uint8)
    cursor = starts.copy()
    ends = starts + lengths
    try:
        columns = [_decode_column(f, buf, cursor, ends) for f in layout]
    except _DamagedError:
        return None
    if (cursor != ends).any():  # a record longer than its fields: not this schema's
        return None
    return pa.Table.from_arrays(columns, schema=arrow_schema(schema_json))
