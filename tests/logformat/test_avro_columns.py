"""The column-by-column Avro codec gives exactly what the record-by-record one (fastavro) gives:
the same content bytes when encoding, the same records when decoding; and where it cannot (a
schema it does not handle, damaged content) it says so with None, never with other values."""

from __future__ import annotations

import datetime
import json
import math
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.logformat.samples import TRIPS_SCHEMA, trip
from tidemark.errors import LogBlockContentError
from tidemark.logformat import BlockType, LogBlock, avro_data_block, read_blocks
from tidemark.logformat.avro_columns import arrow_schema, decode_avro_table, encode_avro_table
from tidemark.logformat.content import decode_avro_records, encode_avro_records
from tidemark.storage import BytesSource
from tidemark.table.avro_schema import META_FIELDS, arrow_schema_of, avro_schema_json, plain_rows
from tidemark.table.write_handles import avro_content

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

# Arrow column types, each with values that fit it
COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "flag": (pa.bool_(), st.booleans()),
    "small": (pa.int32(), INT32),
    "count": (pa.int64(), INT64),
    "ratio": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "fare": (pa.float64(), st.floats(allow_nan=False)),
    "name": (pa.string(), st.text(max_size=40)),
    "blob": (pa.binary(), st.binary(max_size=300)),
    "day": (pa.date32(), st.dates()),
    "at": (
        pa.timestamp("us", tz="UTC"),
        st.datetimes(
            min_value=datetime.datetime(1900, 1, 1),
            max_value=datetime.datetime(2200, 1, 1),
            timezones=st.just(datetime.UTC),
        ),
    ),
}


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=len(COLUMNS), unique=True))
    rows = draw(st.integers(0, 40))
    columns = {}
    for name in names:
        dtype, values = COLUMNS[name]
        nullable = draw(st.booleans())
        column = st.one_of(st.none(), values) if nullable else values
        columns[name] = pa.array(draw(st.lists(column, min_size=rows, max_size=rows)), dtype)
    return pa.table(columns)


@settings(max_examples=150, deadline=None)
@given(tables())
def test_encoding_and_decoding_match_the_record_by_record_codec(table: pa.Table) -> None:
    schema = avro_schema_json(table.schema, "t", with_meta_fields=True)
    table = _with_meta(table)
    expected = encode_avro_records(plain_rows(table), schema)
    assert encode_avro_table(table, schema) == expected
    decoded = decode_avro_table(expected, schema)
    assert decoded is not None
    assert decoded.schema == arrow_schema(schema)
    _assert_same_rows(decoded.to_pylist(), decode_avro_records(expected, schema))


def test_the_decoded_types_are_the_tables_types() -> None:
    # the reader types log rows by the table's schema (arrow_schema_of): the two must agree
    table = pa.table({name: pa.array([], dtype) for name, (dtype, _) in COLUMNS.items()})
    schema = avro_schema_json(table.schema, "t", with_meta_fields=True)
    found = arrow_schema(schema)
    assert found is not None
    assert found.names[: len(META_FIELDS)] == list(META_FIELDS)
    assert pa.schema(list(found)[len(META_FIELDS) :]) == arrow_schema_of(schema)


def test_long_strings_and_large_numbers() -> None:
    # varints of every length, strings whose lengths need two and three varint bytes
    numbers = [0, -1, 1, 63, -64, 64, 2**31 - 1, -(2**31), 2**53, -(2**63), 2**63 - 1]
    table = pa.table(
        {
            "count": pa.array(numbers, pa.int64()),
            "name": ["x" * (7**k) for k in range(len(numbers))],
        }
    )
    schema = avro_schema_json(table.schema, "t", with_meta_fields=False)
    expected = encode_avro_records(plain_rows(table), schema)
    assert encode_avro_table(table, schema) == expected
    decoded = decode_avro_table(expected, schema)
    assert decoded is not None
    assert decoded.equals(table)


def test_what_it_does_not_handle_goes_record_by_record() -> None:
    nested = pa.table(
        {
            "tags": pa.array([{"a": 1}], pa.map_(pa.string(), pa.int64())),
            "price": pa.array([1], pa.decimal128(10, 2)),
            "where": pa.array([{"lat": 1.0}], pa.struct([("lat", pa.float64())])),
        }
    )
    for name in nested.column_names:
        one = nested.select([name])
        schema = avro_schema_json(one.schema, "t", with_meta_fields=False)
        assert encode_avro_table(one, schema) is None, name
        assert decode_avro_table(encode_avro_records(plain_rows(one), schema), schema) is None, name
        assert avro_content(one, schema) == encode_avro_records(plain_rows(one), schema)
    # a column whose Arrow type is wider than its Avro type: fastavro's bytes, whatever they are
    wide = pa.table({"small": pa.array([1, 2], pa.int64())})
    schema = json.dumps({"type": "record", "name": "r", "fields": [{"name": "small", "type": "int"}]})
    assert encode_avro_table(wide, schema) is None
    assert avro_content(wide, schema) == encode_avro_records(plain_rows(wide), schema)
    # a null in a field that allows none: fastavro refuses it, with its words
    assert encode_avro_table(pa.table({"small": pa.array([1, None], pa.int32())}), schema) is None


def _content(count: int) -> bytes:
    return encode_avro_records([trip(i) for i in range(count)], TRIPS_SCHEMA)


@pytest.mark.parametrize(
    "damage",
    [
        "truncated inside a record",
        "a record length past the end",
        "a record longer than its fields",
        "an unknown union branch",
        "invalid UTF-8 in a string",
        "a varint that never ends",
        "a string past its record",
    ],
)
def test_damaged_content_is_left_to_the_record_by_record_decoder(damage: str) -> None:
    content = bytearray(_content(3))
    first = 12  # the first record's datum (after version, count and its length)
    (length,) = struct.unpack_from(">i", content, 8)
    if damage == "truncated inside a record":
        content = content[: first + length // 2]
    elif damage == "a record length past the end":
        struct.pack_into(">i", content, 8, len(content))
    elif damage == "a record longer than its fields":
        content[8:12] = struct.pack(">i", length + 1)
        content[first + length : first + length] = b"\0"
    elif damage == "an unknown union branch":
        content[first] = 0x08
    elif damage == "invalid UTF-8 in a string":
        # the commit time's first character (branch byte, length byte, then the text)
        content[first + 2] = 0xFF
    elif damage == "a varint that never ends":
        content[first + 1 : first + 12] = b"\xff" * 11
    else:  # the commit time's length, larger than its record
        content[first + 1] = 0x7E
    data = bytes(content)
    assert decode_avro_table(data, TRIPS_SCHEMA) is None
    with pytest.raises(LogBlockContentError):
        decode_avro_records(data, TRIPS_SCHEMA)


def test_a_block_decodes_both_ways_to_the_same_rows() -> None:
    data = avro_data_block([trip(i) for i in range(50)], TRIPS_SCHEMA, "20250101000000000").encode()
    (block,) = read_blocks(BytesSource(data, "a.log"))
    assert block.block_type is BlockType.AVRO_DATA_BLOCK
    table = block.avro_table()
    assert table is not None
    _assert_same_rows(table.to_pylist(), block.records())


def test_blocks_of_one_schema_decode_together_as_each_alone() -> None:
    blocks = []
    for b, count in enumerate((3, 0, 1, 7)):  # an empty block among them
        rows = [trip(100 * b + i) for i in range(count)]
        data = avro_data_block(rows, TRIPS_SCHEMA, f"2025010100000{b}000").encode()
        blocks.extend(read_blocks(BytesSource(data, f"{b}.log")))
    together = LogBlock.avro_tables(blocks)
    assert together is not None
    assert together.equals(pa.concat_tables([b.avro_table() for b in blocks]))
    _assert_same_rows(together.to_pylist(), [r for b in blocks for r in b.records()])
    # a damaged block among them: None, so that each is decoded alone and the damaged one named
    damaged = bytearray(avro_data_block([trip(0)], TRIPS_SCHEMA, "20250101000009000").encode())
    (intact,) = read_blocks(BytesSource(bytes(damaged), "bad.log"))
    struct.pack_into(">i", damaged, intact.content_offset + 8, 1 << 20)  # a record length past the end
    (bad,) = read_blocks(BytesSource(bytes(damaged), "bad.log"))
    assert bad.avro_table() is None
    assert LogBlock.avro_tables([*blocks, bad]) is None
    # blocks of two schemas are not decoded together
    other = json.dumps({"type": "record", "name": "r", "fields": [{"name": "small", "type": "int"}]})
    (plain,) = read_blocks(BytesSource(avro_data_block([{"small": 1}], other, "20250101000009000").encode(), "p"))
    assert LogBlock.avro_tables([blocks[0], plain]) is None


def _with_meta(table: pa.Table) -> pa.Table:
    n = table.num_rows
    meta = [pa.array([f"{m}-{i}" for i in range(n)], pa.string()) for m in META_FIELDS]
    return pa.Table.from_arrays(meta + list(table.columns), names=[*META_FIELDS, *table.column_names])


def _assert_same_rows(found: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(found) == len(expected)
    for a, b in zip(found, expected, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            x, y = a[k], b[k]
            if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
                continue
            assert x == y, (k, x, y)
