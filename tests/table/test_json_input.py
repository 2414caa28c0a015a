"""JSON lines typed by a table's schema (no Spark): what ``tidemark table read --format jsonl``
prints for Apache-written tables with every kind of column comes back as the same values and
types; the other spellings Hudi accepts (numbers for decimals, epoch numbers for dates and
timestamps) give the same values; a value that does not fit is named by line, column, value and
expected type; and the schema changes Hudi allows on write are told from those it refuses."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.support.fixtures import extract_table, fixtures_root
from tidemark.cli.main import build_parser
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import (
    META_FIELDS,
    arrow_schema_of,
    avro_schema_for,
    evolution_problems,
    latest_table_schema,
)
from tidemark.table.json_input import JsonInputError, line_number_in, type_lines
from tidemark.table.key_generator import COMPLEX, TIMESTAMP, KeyGenerator, build_key_generator
from tidemark.table.snapshot import read_snapshot

#: every Apache-written fixture table that has rows (four of them have every kind of column)
FIXTURES = (
    "cow/v6_complexkeygen_hivestyle",
    "cow/v6_nonpartitioned",
    "cow/v6_simplekeygen_nonhivestyle",
    "cow/v6_timebasedkeygen_nonhivestyle",
    "mor/v6_nonpartitioned",
    "mor/v6_simplekeygen_hivestyle_no_metafields",
    "mor/v6_simplekeygen_nonhivestyle",
    "mor/v6_trips_8i1u",
)


def _table_read_jsonl(path: Path) -> list[str]:
    """What ``tidemark table read PATH --format jsonl`` prints."""
    args = build_parser().parse_args(["table", "read", str(path), "--format", "jsonl"])
    out = io.StringIO()
    assert args.run(args, out) == 0
    return out.getvalue().splitlines()


@pytest.mark.parametrize("fixture", FIXTURES)
def test_what_table_read_prints_is_typed_back_to_the_same_rows(fixture: str, tmp_path: Path) -> None:
    table = extract_table(fixtures_root() / "tables" / f"{fixture}.zip", tmp_path)
    storage = LocalStorage(table)
    schema = arrow_schema_of(latest_table_schema(storage) or "")
    snapshot = read_snapshot(storage)
    data = snapshot.select([c for c in snapshot.column_names if c not in META_FIELDS])
    lines = _table_read_jsonl(table)
    assert len(lines) == data.num_rows > 0

    typed = type_lines(lines, schema)
    assert typed.table.to_pylist() == data.to_pylist()
    # the types are the snapshot's, down to the nested fields (JSON alone infers long, double, string)
    assert [_plain(t) for t in typed.table.schema.types] == [_plain(t) for t in data.schema.types]
    assert typed.unknown.to_pylist() == [False] * len(lines)

    if "decimalField" not in schema.names:
        return
    # one line spelling values as Hudi stores them sends the batch through the line-by-line
    # typing: the same rows again
    first = json.loads(lines[0])
    row = data.to_pylist()[0]
    first["decimalField"] = float(first["decimalField"]) if row["decimalField"] is not None else None
    first["dateField"] = (row["dateField"] - dt.date(1970, 1, 1)).days
    first["timestampField"] = (row["timestampField"] - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
        microseconds=1
    )
    again = type_lines([json.dumps(first), *lines[1:]], schema)
    assert again.table.to_pylist() == data.to_pylist()


def _plain(t: pa.DataType) -> str:
    """A type without the names and nullability Parquet writers give list and map children."""
    if pa.types.is_list(t):
        return f"list<{_plain(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{_plain(t.key_type)}, {_plain(t.item_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {_plain(f.type)}" for f in t) + ">"
    return str(t)


SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("l", pa.int64()),
        ("f", pa.float32()),
        ("d", pa.float64()),
        ("dec", pa.decimal128(10, 5)),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ts_ms", pa.timestamp("ms", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("b", pa.binary()),
        ("fx", pa.binary(2)),
        ("s", pa.string()),
        ("ok", pa.bool_()),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("a", pa.list_(pa.struct([("x", pa.int32()), ("y", pa.string())]))),
        ("r", pa.struct([("n", pa.int32()), ("inner", pa.struct([("z", pa.float64())]))])),
    ]
)


def _one(line: dict[str, Any]) -> dict[str, Any]:
    rows = type_lines([json.dumps(line)], SCHEMA).table.to_pylist()
    assert len(rows) == 1
    return rows[0]


def test_the_spellings_hudi_accepts_give_the_same_values() -> None:
    moment = dt.datetime(2023, 4, 1, 12, 1, 2, 345678, tzinfo=dt.UTC)
    micros = (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    spellings = [
        {"dec": "12345.67890", "day": "2023-04-01", "ts": "2023-04-01T12:01:02.345678+00:00"},
        {"dec": 12345.6789, "day": 19448, "ts": micros},
        {"dec": "12345.6789", "day": "2023-04-01", "ts": "2023-04-01T14:01:02.345678+02:00"},
        {"dec": "1.23456789e4", "day": 19448, "ts": "2023-04-01T12:01:02.345678Z"},
        {"dec": 12345.67890, "day": "2023-04-01", "ts": "2023-04-01 12:01:02.345678"},  # no zone: UTC
    ]
    for spelling in spellings:
        row = _one(spelling)
        assert row["dec"] == decimal.Decimal("12345.67890"), spelling
        assert row["day"] == dt.date(2023, 4, 1), spelling
        assert row["ts"] == moment, spelling
    # the millisecond column takes milliseconds; the local one keeps the wall time it is given
    row = _one({"ts_ms": micros // 1000, "local": "2023-04-01T12:01:02.345678"})
    assert row["ts_ms"] == moment.replace(microsecond=345000)
    assert row["local"] == moment.replace(tzinfo=None)
    assert _one({"ts_ms": "2023-04-01T12:01:02.345Z"})["ts_ms"] == moment.replace(microsecond=345000)


def test_floats_bytes_maps_arrays_and_records() -> None:
    row = _one(
        {
            "i": -(2**31),
            "l": 2**63 - 1,
            "f": 1.100000023841858,
            "d": "-inf",
            "b": "00ff10",
            "fx": "abcd",
            "s": "text",
            "ok": False,
            "m": {"one": 1, "none": None, "two": 2},
            "a": [{"x": 1, "y": "a"}, None, {"x": 2}],
            "r": {"n": 3, "inner": {"z": 0.5}},
        }
    )
    assert row["i"] == -(2**31)
    assert row["l"] == 2**63 - 1
    assert row["f"] == pytest.approx(1.1)
    assert row["d"] == -math.inf
    assert row["b"] == b"\x00\xff\x10"
    assert row["fx"] == b"\xab\xcd"
    assert row["m"] == [("one", 1), ("none", None), ("two", 2)]  # a null value stays an entry
    assert row["a"] == [{"x": 1, "y": "a"}, None, {"x": 2, "y": None}]
    assert row["r"] == {"n": 3, "inner": {"z": 0.5}}
    assert math.isnan(_one({"f": "nan"})["f"])
    # a key a line leaves out is null; blank lines are not rows
    table = type_lines(['{"i": 1}', "", "  ", '{"s": "x"}'], SCHEMA).table
    assert table.column("i").to_pylist() == [1, None]
    assert table.column("s").to_pylist() == [None, "x"]


def test_maps_with_different_keys_per_line() -> None:
    lines = [json.dumps({"m": {f"k{i}": i, f"k{i + 1}": i + 1}}) for i in range(50)]
    rows = type_lines(lines, SCHEMA).table.column("m").to_pylist()
    assert rows == [[(f"k{i}", i), (f"k{i + 1}", i + 1)] for i in range(50)]
    # with a null somewhere in the batch, an absent key and a null value still differ
    lines.append(json.dumps({"m": {"k0": None}, "s": None}))
    rows = type_lines(lines, SCHEMA).table.column("m").to_pylist()
    assert rows[0] == [("k0", 0), ("k1", 1)]
    assert rows[-1] == [("k0", None)]


BAD = [
    ('{"i": 1.5}', "i", "1.5", "an int"),
    ('{"i": 2147483648}', "i", "2147483648", "an int"),
    ('{"i": "7"}', "i", '"7"', "an int"),
    ('{"l": true}', "l", "true", "a long"),
    # a number is shown as the line wrote it (Decimal's text showed 1e0 as 1 and 1e39 as 1E+39)
    ('{"f": 1e39}', "f", "1e39", "a float"),
    ('{"l": 1e0}', "l", "1e0", "a long"),
    ('{"l": 1.0E0}', "l", "1.0E0", "a long"),
    ('{"i": 2e3}', "i", "2e3", "an int"),
    ('{"m": {"k": 1.50}}', "m[k]", "1.50", "a long"),
    ('{"m": [1, 2.0e0]}', "m", "[1, 2.0e0]", "a map (a JSON object)"),
    ('{"d": "many"}', "d", '"many"', "a double"),
    ('{"dec": "12345.678901"}', "dec", '"12345.678901"', "a decimal(10,5)"),
    ('{"dec": 123456.5}', "dec", "123456.5", "a decimal(10,5)"),
    ('{"dec": "abc"}', "dec", '"abc"', "a decimal(10,5)"),
    ('{"day": "2023-13-01"}', "day", '"2023-13-01"', "a date (YYYY-MM-DD or days since 1970-01-01)"),
    ('{"ts": "yesterday"}', "ts", '"yesterday"', "a timestamp-micros (ISO-8601 or microseconds since the epoch)"),
    ('{"ts_ms": "2023-04-01T00:00:00.0001Z"}', "ts_ms", '"2023-04-01T00:00:00.0001Z"', "a timestamp-millis"),
    # a seventh fraction digit was dropped without a word
    ('{"ts": "2023-04-01T12:01:00.1234567Z"}', "ts", '"2023-04-01T12:01:00.1234567Z"', "a timestamp-micros"),
    ('{"b": "0g"}', "b", '"0g"', "bytes (hex)"),
    ('{"b": "abc"}', "b", '"abc"', "bytes (hex)"),
    ('{"fx": "ab"}', "fx", '"ab"', "a fixed of 2 bytes (hex)"),
    ('{"s": 5}', "s", "5", "a string"),
    ('{"ok": "true"}', "ok", '"true"', "a boolean"),
    ('{"m": [1, 2]}', "m", "[1, 2]", "a map (a JSON object)"),
    ('{"m": {"k": "v"}}', "m[k]", '"v"', "a long"),
    ('{"a": {"x": 1}}', "a", '{"x": 1}', "an array"),
    ('{"a": [{"x": 1}, {"x": "two"}]}', "a[1].x", '"two"', "an int"),
    ('{"r": {"inner": {"z": "deep"}}}', "r.inner.z", '"deep"', "a double"),
    ('{"r": {"n": 1, "extra": 2}}', "r.extra", "2", "a field of r (it has inner, n)"),
]


@pytest.mark.parametrize(("line", "column", "value", "expected"), BAD)
def test_a_value_that_does_not_fit_is_named_by_line_column_value_and_type(
    line: str, column: str, value: str, expected: str
) -> None:
    good = '{"i": 1, "s": "fine"}'
    with pytest.raises(JsonInputError) as caught:
        type_lines([good, "", line, good], SCHEMA)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"line 3, column {column}: {value} is not {expected}")
    assert caught.value.line == line


@pytest.mark.parametrize(
    ("line", "column", "value"),
    [
        ('{"s": "bad \\ud800 here"}', "s", '"bad \\ud800 here"'),
        ('{"m": {"k\\udc00": 1}}', "m key", '"k\\udc00"'),
        ('{"a": [{"y": "\\ud83d"}]}', "a[0].y", '"\\ud83d"'),
    ],
)
def test_a_lone_surrogate_escape_is_named_as_no_utf8_text(line: str, column: str, value: str) -> None:
    """``"\\ud800"`` is JSON, but no UTF-8 text: it failed the write with an empty message."""
    good = '{"i": 1, "s": "fine \\ud83d\\ude00"}'  # a whole pair is one character, and fine
    assert type_lines([good], SCHEMA).table.column("s").to_pylist() == ["fine \U0001f600"]
    with pytest.raises(JsonInputError) as caught:
        type_lines([good, line], SCHEMA)
    half = re.search(r"\\ud[89a-f]..", value).group()  # type: ignore[union-attr]
    assert (
        str(caught.value)
        == f"line 2, column {column}: {value} holds {half}, half a surrogate pair, which UTF-8 cannot hold"
    )
    str(caught.value).encode()  # printable


#: dates and timestamps at the top and inside records, arrays and maps
DATED = pa.schema(
    [
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ts_ms", pa.timestamp("ms", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("r", pa.struct([("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))])),
        ("days", pa.list_(pa.date32())),
        ("m", pa.map_(pa.string(), pa.timestamp("us", tz="UTC"))),
        ("dm", pa.map_(pa.string(), pa.date32())),
    ]
)
DAY = "a date (YYYY-MM-DD or days since 1970-01-01)"
MICROS = "a timestamp-micros (ISO-8601 or microseconds since the epoch)"

OUTSIDE = "is outside 0001-01-01 to 9999-12-31"
IN_UTC = f"{OUTSIDE} in UTC, once its offset is applied"
OUT_OF_RANGE = [
    # an offset moves the moment past 9999-12-31 or before 0001-01-01 in UTC
    ('{"ts": "9999-12-31T23:00:00-05:00"}', "ts", '"9999-12-31T23:00:00-05:00"', IN_UTC),
    ('{"ts": "0001-01-01T00:30:00+01:00"}', "ts", '"0001-01-01T00:30:00+01:00"', IN_UTC),
    ('{"ts_ms": "9999-12-31T23:59:59.999-00:01"}', "ts_ms", '"9999-12-31T23:59:59.999-00:01"', IN_UTC),
    ('{"local": "9999-12-31T23:00:00-05:00"}', "local", '"9999-12-31T23:00:00-05:00"', IN_UTC),
    # a year Python does not take, in an ISO-8601 spelling
    ('{"day": "0000-12-31"}', "day", '"0000-12-31"', OUTSIDE),
    ('{"day": "10000-01-01"}', "day", '"10000-01-01"', OUTSIDE),
    ('{"ts": "-0001-06-01T00:00:00Z"}', "ts", '"-0001-06-01T00:00:00Z"', OUTSIDE),
    # as Hudi stores them: a number past 9999-12-31 was taken, and every later read of the table
    # failed; one past a long failed with no line or column
    ('{"day": -719163}', "day", "-719163", f"{OUTSIDE} as days since 1970-01-01"),
    ('{"day": 2932897}', "day", "2932897", f"{OUTSIDE} as days since 1970-01-01"),
    ('{"ts": 253402300800000000}', "ts", "253402300800000000", f"{OUTSIDE} as microseconds since the epoch"),
    ('{"ts": 99999999999999999999}', "ts", "99999999999999999999", f"{OUTSIDE} as microseconds since the epoch"),
    ('{"ts_ms": -62135596800001}', "ts_ms", "-62135596800001", f"{OUTSIDE} as milliseconds since the epoch"),
    ('{"r": {"ts": "9999-12-31T23:00:00-05:00"}}', "r.ts", '"9999-12-31T23:00:00-05:00"', IN_UTC),
    ('{"r": {"day": "0000-01-01"}}', "r.day", '"0000-01-01"', OUTSIDE),
    ('{"days": ["2023-04-01", "0000-12-31"]}', "days[1]", '"0000-12-31"', OUTSIDE),
    ('{"m": {"k": "9999-12-31T23:00:00-05:00"}}', "m[k]", '"9999-12-31T23:00:00-05:00"', IN_UTC),
    ('{"dm": {"k": "0000-12-31"}}', "dm[k]", '"0000-12-31"', OUTSIDE),
]


@pytest.mark.parametrize(("line", "column", "value", "problem"), OUT_OF_RANGE)
def test_a_date_or_time_outside_the_years_1_to_9999_is_named(line: str, column: str, value: str, problem: str) -> None:
    """Such values were taken (an offset was not checked after the move to UTC, and a batch took
    the year 0 that a line alone was refused), after which ``table read`` failed on the whole
    table; a table whose keys are computed in Python failed the write with a bare OverflowError.
    Then they were refused as if misspelt ("is not a timestamp-micros (ISO-8601 ...)"). Alone or
    in a batch, they are refused by line, column and value as out of range."""
    for lines, number in (([line], 1), (['{"day": "2023-04-01", "ts": "2023-04-01T12:00:00Z"}', line], 2)):
        with pytest.raises(JsonInputError) as caught:
            type_lines(lines, DATED)
        assert str(caught.value) == f"line {number}, column {column}: {value} {problem}"


@pytest.mark.parametrize("day", ['"0000-02-30"', '"0000-1-01"', '"2023-02-30"'])
def test_a_misspelt_date_in_a_year_out_of_range_is_named_as_misspelt(day: str) -> None:
    with pytest.raises(JsonInputError, match=f"column day: {day} is not {re.escape(DAY)}$"):
        type_lines([f'{{"day": {day}}}'], DATED)


def test_the_first_and_last_dates_and_times_are_taken() -> None:
    from tidemark.table.json_input import _fast, _line_by_line

    first = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    lines = [
        '{"day": "0001-01-01", "ts": "0001-01-01T00:00:00Z", "ts_ms": "0001-01-01T00:00:00Z", "local": "0001-01-01"}',
        '{"day": "9999-12-31", "ts": "9999-12-31T23:59:59.999999Z", "ts_ms": "9999-12-31T23:59:59.999Z"}',
        # an offset that stays in range
        '{"ts": "9999-12-31T22:59:59.999999-01:00", "r": {"ts": "0001-01-01T00:30:00-01:00", "day": "9999-12-31"}}',
        '{"days": ["0001-01-01", "9999-12-31"]}',
        '{"m": {"a": "0001-01-01T01:00:00+01:00", "b": "9999-12-31T23:59:59Z"}, "dm": {"a": "0001-01-01"}}',
    ]
    rows = [
        {"day": first.date(), "ts": first, "ts_ms": first, "local": first.replace(tzinfo=None)},
        {"day": last.date(), "ts": last, "ts_ms": last.replace(microsecond=999000)},
        {"ts": last, "r": {"ts": first.replace(hour=1, minute=30), "day": last.date()}},
        {"days": [first.date(), last.date()]},
        {"m": [("a", first), ("b", last.replace(microsecond=0))], "dm": [("a", first.date())]},
    ]
    expected = [{**dict.fromkeys(DATED.names), **row} for row in rows]
    assert type_lines(lines, DATED).table.to_pylist() == expected
    assert _line_by_line(lines, DATED).table.to_pylist() == expected
    # the batch path types all but the maps (Arrow infers their values as text or timestamps)
    assert _fast(pa.array(lines[:-1]), DATED).table.to_pylist() == expected[:-1]
    # as Hudi stores them: days and microseconds since the epoch
    numbers = type_lines(
        ['{"day": -719162, "ts": 253402300799999999}', '{"day": 2932896, "ts": -62135596800000000}'], DATED
    )
    assert numbers.table.select(["day", "ts"]).to_pylist() == [
        {"day": first.date(), "ts": last},
        {"day": last.date(), "ts": first},
    ]


def test_a_line_that_is_no_json_object_is_named() -> None:
    for line, shown in (
        ("[1, 2]", "[1, 2]"),
        ('{"i": 1}{"i": 2}', '"{\\"i\\": 1}{\\"i\\": 2}"'),
        ('{"i":', '"{\\"i\\":"'),
    ):
        with pytest.raises(JsonInputError, match=r"^line 2: ") as caught:
            type_lines(['{"i": 1}', line], SCHEMA)
        assert str(caught.value).startswith(f"line 2: {shown} is not a JSON object")


def test_keys_the_table_does_not_have_are_reported_per_line() -> None:
    typed = type_lines(['{"i": 1}', '{"i": 2, "new": 5}', '{"i": 3, "new": null}', '{"i": 4, "other": [1]}'], SCHEMA)
    assert typed.unknown.to_pylist() == [False, True, False, True]
    assert typed.table.column_names == SCHEMA.names


@pytest.mark.parametrize("mixed", [False, True], ids=["in a batch", "line by line"])
def test_the_columns_no_line_holds_as_a_key_are_told_apart_from_null_values(mixed: bool) -> None:
    """A column whose key no line has is one the input lacks (the write refuses it, as Hudi does);
    a key with null, on one line only, or spelt with escapes is held."""
    lines = ['{"i": 1, "l": null}', '{"i": 2, "d": 1.5, "\\u0062": null}', '{"i": 3, "s": "l"}']
    if mixed:
        lines.append('{"i": 4, "day": 19000}')
        lines.append('{"i": 5, "day": "2024-01-01"}')  # two spellings in one batch: typed line by line
    typed = type_lines(lines, SCHEMA)
    assert typed.held == {"i", "l", "d", "b", "s"} | ({"day"} if mixed else set())
    assert typed.table.column("l").null_count == len(lines)


def test_line_numbers_are_found_in_the_input() -> None:
    data = b'{"a": 1}\r\n{"a": 2}\n\n{"a": 22}\n{"a": 2}'
    assert line_number_in(data, '{"a": 2}') == 2
    assert line_number_in(data, '{"a": 22}') == 4
    assert line_number_in(io.BytesIO(data).getvalue(), '{"a": 3}') is None


# --- schema evolution on write --------------------------------------------------------------------

TABLE = pa.schema(
    [
        ("id", pa.int32()),
        ("n", pa.int32()),
        ("price", pa.float32()),
        ("name", pa.string()),
        ("tags", pa.list_(pa.int32())),
        ("attrs", pa.map_(pa.string(), pa.int32())),
        ("nested", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("amount", pa.decimal128(10, 2)),
    ]
)


def _evolved(**changes: pa.DataType | None) -> list[str]:
    kept = [(f.name, changes.pop(f.name, f.type)) for f in TABLE]
    fields = [pa.field(name, t) for name, t in kept if t is not None]
    fields += [pa.field(name, t) for name, t in changes.items() if t is not None]
    current = json.dumps(avro_schema_for(TABLE, "t"))
    return evolution_problems(current, avro_schema_for(pa.schema(fields), "t"))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"added": pa.string()},
        {"n": pa.int64()},
        {"n": pa.float64()},
        {"price": pa.float64()},
        {"name": pa.binary()},
        {"tags": pa.list_(pa.int64())},
        {"attrs": pa.map_(pa.string(), pa.float64())},
        {"nested": pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.bool_())])},
    ],
    ids=[
        "same",
        "new-column",
        "int-long",
        "int-double",
        "float-double",
        "string-bytes",
        "array-items",
        "map-values",
        "nested",
    ],
)
def test_the_changes_hudi_allows_on_write_are_accepted(changes: dict[str, pa.DataType]) -> None:
    assert _evolved(**changes) == []


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"n": pa.string()}, 'column n has type "string", the table has "int"'),
        ({"price": pa.int32()}, 'column price has type "int", the table has "float"'),
        ({"tags": pa.list_(pa.string())}, "column tags[] has type"),
        ({"nested": pa.struct([("a", pa.string()), ("b", pa.string())])}, "column nested.a has type"),
        ({"nested": pa.struct([("a", pa.int32())])}, "column nested.b is missing"),
        ({"amount": pa.decimal128(12, 4)}, "column amount has type"),
        ({"name": None}, "column name is missing"),
    ],
    ids=["int-string", "float-int", "array-items", "nested-type", "nested-missing", "decimal", "missing"],
)
def test_other_changes_are_refused(changes: dict[str, pa.DataType | None], problem: str) -> None:
    problems = _evolved(**changes)
    assert problems
    assert any(p.startswith(problem) for p in problems), problems


def test_a_decimal_named_otherwise_is_the_same_type() -> None:
    """A table whose decimal's Avro ``fixed`` has another name (Flink's ``<record>.fixed``, an Avro
    source's, a renamed table's) took no write back, its own ``table read`` output neither: names
    are not compared, as Hudi's check (checkNaming=false) does not; size, precision, scale are."""
    current = avro_schema_for(TABLE, "t")
    amount = next(f for f in current["fields"] if f["name"] == "amount")["type"][1]
    amount.update(name="fixed", namespace="t_record.amount")
    assert evolution_problems(json.dumps(current), avro_schema_for(TABLE, "renamed")) == []
    wider = avro_schema_for(TABLE.set(TABLE.get_field_index("amount"), pa.field("amount", pa.decimal128(12, 2))), "t")
    assert evolution_problems(json.dumps(current), wider)[0].startswith("column amount has type")


def test_a_new_column_must_be_nullable() -> None:
    current = json.dumps(avro_schema_for(TABLE, "t"))
    incoming = avro_schema_for(TABLE.append(pa.field("added", pa.int32())), "t")
    incoming["fields"][-1]["type"] = "int"  # as a writer that declares it required would
    assert evolution_problems(current, incoming) == ["the new column added is not nullable"]


def _key_evolved(keygen: KeyGenerator, **changes: pa.DataType) -> list[str]:
    fields = [pa.field(f.name, changes.get(f.name, f.type)) for f in TABLE]
    return evolution_problems(json.dumps(avro_schema_for(TABLE, "t")), avro_schema_for(pa.schema(fields), "t"), keygen)


#: record key id, partition fields n and nested.a
KEYGEN = build_key_generator(COMPLEX, ["id"], "n,nested.a", {})


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            {"id": pa.float64()},
            'column id is a record key field: the input\'s type "double" would print the table\'s "int" values '
            "differently in record keys, so an update would not find its record",
        ),
        ({"id": pa.float32()}, 'column id is a record key field: the input\'s type "float"'),
        (
            {"n": pa.float64()},
            'column n is a partition field: the input\'s type "double" would print the table\'s "int" values '
            "differently in partition paths, so an update would write its record again in another partition",
        ),
        (
            {"nested": pa.struct([("a", pa.float64()), ("b", pa.string())])},
            'column nested.a is a partition field: the input\'s type "double"',
        ),
    ],
    ids=["key-int-double", "key-int-float", "partition-int-double", "nested-partition"],
)
def test_a_promotion_that_changes_the_key_or_partition_text_is_refused(
    changes: dict[str, pa.DataType], problem: str
) -> None:
    problems = _key_evolved(KEYGEN, **changes)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem), problems


def test_a_promotion_that_keeps_the_key_and_partition_text_is_accepted() -> None:
    wider = {"id": pa.int64(), "n": pa.int64(), "nested": pa.struct([("a", pa.int64()), ("b", pa.string())])}
    assert _key_evolved(KEYGEN, **wider) == []
    assert _key_evolved(KEYGEN, price=pa.float64()) == []  # not a key field


def test_a_timestamp_partition_field_may_take_a_type_that_holds_its_numbers_exactly() -> None:
    # TimestampBasedKeyGenerator takes a number's whole part: 1700000000 as a double is the same
    # instant, as a float (24 bits of precision) it is 1700000000 rounded to 128 seconds
    config = {
        "hoodie.keygen.timebased.timestamp.type": "UNIX_TIMESTAMP",
        "hoodie.keygen.timebased.output.dateformat": "yyyy",
    }
    keygen = build_key_generator(TIMESTAMP, ["id"], "n", config)
    assert _key_evolved(keygen, n=pa.float64()) == []
    assert _key_evolved(keygen, price=pa.float64()) == []
    assert _key_evolved(keygen, n=pa.float32())[0].startswith("column n is a timestamp partition field: the input")


def _random_value(t: pa.DataType, rnd: random.Random) -> Any:
    """A value for ``t``, mostly as ``table read`` spells it, sometimes one of the other spellings
    or a value that does not fit."""

    def pick(usual: list[Any], rare: list[Any]) -> Any:
        return rnd.choice(rare) if rnd.random() < 0.05 else rnd.choice(usual)

    if rnd.random() < 0.1:
        return None
    if pa.types.is_int32(t):
        return pick([0, -5, 2**31 - 1, -(2**31)], [2**31, 1.5, "3"])
    if pa.types.is_int64(t):
        return pick([0, 2**62, -1], [1.0, 2**63])
    if pa.types.is_floating(t):
        return pick([0.1, 1, -2.5, 3.4e38, 1e-40], ["nan", "inf", 3.5e38, 1e300])
    if pa.types.is_decimal(t):
        return pick(["1.5", 1.5, "99999.99999", 123, "-99999.99999"], ["100000", "1.123456", "1.100000", 1e5])
    if pa.types.is_date32(t):
        return pick(["2023-04-01", "1970-01-01"], [19000, "2023-4-1", "0000-12-31", "9999-12-31"])
    if pa.types.is_timestamp(t):
        usual = ["2023-04-01T12:00:00+00:00", "2023-04-01T12:00:00.123Z", "2023-04-01 12:00:00"]
        rare = [1680350400000000, "2023-04-01T12:00:00.1234567Z", "9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00Z"]
        return pick([*usual, "2023-04-01T12:00:00.123+02:00"], rare)
    if pa.types.is_fixed_size_binary(t):
        return pick(["abcd", "0000"], ["ab", "zz"])
    if pa.types.is_binary(t):
        return pick(["00ff", "", "ABCD"], ["abc", "0g"])
    if pa.types.is_string(t):
        return pick(["x", "", "null", "2023-04-01"], [5])
    if pa.types.is_boolean(t):
        return pick([True, False], ["true"])
    if pa.types.is_map(t):
        return pick([{}, {"a": 1}, {"a": 3, "b": 2}, {"c": 3}], [{"a": None}, {"a": "x"}, {"a": 1.5}])
    if pa.types.is_list(t):
        return [_random_value(t.value_type, rnd) for _ in range(rnd.randint(0, 2))]
    if pa.types.is_struct(t):
        return pick([{f.name: _random_value(f.type, rnd) for f in t if rnd.random() < 0.8}], [{"zz": 1}, [1]])
    raise AssertionError(t)


def test_typing_in_batches_and_line_by_line_agree() -> None:
    """Lines are typed in batches by Arrow's reader where it can be exact, else line by line:
    both ways give the same rows, and a batch never accepts what the other refuses."""
    from tidemark.table.json_input import _fast, _line_by_line, _NotExactError

    rnd = random.Random(14)
    batched = 0
    for _ in range(1500):
        lines = [
            json.dumps({f.name: _random_value(f.type, rnd) for f in SCHEMA if rnd.random() < 0.5})
            for _ in range(rnd.randint(1, 3))
        ]
        try:
            fast = _fast(pa.array(lines), SCHEMA)
        except _NotExactError:
            continue
        batched += 1
        one_by_one = _line_by_line(lines, SCHEMA)  # raises if the batch accepted a bad value
        assert fast.table.schema == one_by_one.table.schema
        assert fast.unknown.to_pylist() == one_by_one.unknown.to_pylist()
        for a, b in zip(fast.table.to_pylist(), one_by_one.table.to_pylist(), strict=True):
            # map entries are unordered (Avro maps): a batch lists a key where the batch first had it
            assert {**a, "m": sorted(a["m"] or [])} == {**b, "m": sorted(b["m"] or [])}, lines
    assert batched > 300


def test_a_decimal_of_38_digits_spark_s_default_is_typed() -> None:
    """Every line was refused for a decimal(38, s) column (Spark's default decimal type), with
    "precision should be between 1 and 38": the range check built a decimal(39, 0)."""
    schema = pa.schema([("amount", pa.decimal128(38, 18))])
    big = "12345678901234567890.123456789012345678"
    rows = type_lines([json.dumps({"amount": big}), '{"amount": -1.5}'], schema).table.column("amount").to_pylist()
    assert rows == [decimal.Decimal(big), decimal.Decimal("-1.5")]
    with pytest.raises(JsonInputError, match=r"line 1, column amount: .* is not a decimal\(38,18\)"):
        type_lines([json.dumps({"amount": "123456789012345678901.5"})], schema)


def test_the_largest_float_as_java_prints_it_is_taken() -> None:
    """``3.4028235E38`` (Java's Float.MAX_VALUE) was refused as "not a float": it is a little
    above the largest float as a double, and was compared before rounding."""
    schema = pa.schema([("f", pa.float32())])
    largest = float(np.finfo(np.float32).max)
    assert type_lines(['{"f": 3.4028235E38}', '{"f": -3.4028235e38}'], schema).table.column("f").to_pylist() == [
        largest,
        -largest,
    ]
    with pytest.raises(JsonInputError, match=r"line 1, column f: 3\.4028236e38 is not a float"):
        type_lines(['{"f": 3.4028236e38}'], schema)
