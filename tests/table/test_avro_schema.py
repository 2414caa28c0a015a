"""Arrow rows as Python values: what `tidemark table read` shows; Arrow types as the table holds them."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from tidemark.errors import TableError
from tidemark.table.avro_schema import avro_schema_for, new_invalid_names, plain_rows, with_utc_timestamps


def test_rows_and_maps_become_plain_values() -> None:
    table = pa.table(
        {
            "id": [1],
            "ts": pa.array([0], pa.timestamp("us", tz="UTC")),
            "tags": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64())),
        }
    )
    assert plain_rows(table) == [{"id": 1, "ts": dt.datetime(1970, 1, 1, tzinfo=dt.UTC), "tags": {"a": 1}}]


def test_a_timestamp_past_year_9999_is_named_not_a_traceback() -> None:
    # a Java writer can store one; Python's datetime cannot hold it
    year_10000 = 253402300800 * 10**6
    table = pa.table({"id": [1], "ts": pa.array([year_10000], pa.timestamp("us", tz="UTC"))})
    with pytest.raises(TableError, match=r"column 'ts'.*outside the years 1-9999"):
        plain_rows(table)


def test_a_base_file_timestamp_without_a_zone_that_its_avro_schema_calls_an_instant_reads_as_utc() -> None:
    # tidemark before it refused such input wrote pandas' zone-less timestamps into instant columns
    schema = pa.schema([("t", pa.timestamp("us")), ("w", pa.timestamp("us")), ("z", pa.timestamp("ms", tz="+02:00"))])
    avro = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "t", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
            {"name": "w", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
            {"name": "z", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        ],
    }
    table = pa.table({"t": [1], "w": [2], "z": [3]}, schema=schema).replace_schema_metadata(
        {"parquet.avro.schema": json.dumps(avro)}
    )
    read = with_utc_timestamps(table)
    assert [f.type for f in read.schema] == [
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("us"),
        pa.timestamp("ms", tz="UTC"),
    ]
    assert read.column("t").cast(pa.int64()).to_pylist() == [1]


def test_a_nested_name_with_a_dot_is_quoted_within_its_path() -> None:
    """Field ``a.b`` of struct ``s`` was named 's.a.b', as if it were field b of a struct a in s."""
    schema = pa.schema([("a.b", pa.int32()), ("s", pa.struct([("a.b", pa.int32()), ("c`d", pa.int32())]))])
    assert new_invalid_names(None, avro_schema_for(schema, "t", with_meta_fields=False)) == [
        "a.b",
        "s.`a.b`",
        "s.`c``d`",
    ]
