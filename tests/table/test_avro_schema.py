"""Arrow rows as Python values: what `tidemark table read` shows."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from tidemark.errors import TableError
from tidemark.table.avro_schema import plain_rows


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
