"""``tidemark write --input x.jsonl`` into an existing table reads the JSON lines with the table's
types: what ``tidemark table read --format jsonl`` printed goes back unchanged and leaves the
same snapshot for tidemark's reader and Apache's; a value that does not fit is one line naming
the line, column, value and expected type, and nothing is written (not even a requested
instant). Each command starts its own local Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.cli import listing, tidemark
from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import META_COLUMNS, read_snapshot
from tidemark.timeline import load_timeline

pytestmark = pytest.mark.spark


def _snapshots(path: Path) -> list[dict[str, Any]]:
    """The rows (no meta columns) of tidemark's reader, checked equal to Apache's reader's."""
    ours = read_snapshot(LocalStorage(path))
    columns = sorted(c for c in ours.column_names if c not in META_COLUMNS)
    mine = sorted(ours.select(columns).to_pylist(), key=lambda r: (r["id"], r["name"]))
    theirs = sorted(apache_snapshot(str(path)).select(columns).to_pylist(), key=lambda r: (r["id"], r["name"]))
    assert theirs == mine
    return mine


def test_what_table_read_printed_is_written_back_unchanged(tmp_path: Path) -> None:
    """A copy-on-write table Apache wrote, partitioned by a byte and a short column with a
    complex key, with int, float, decimal, date, timestamp, bytes, array, map and nested record
    columns."""
    table = extract_table(fixtures_root() / "tables" / "cow" / "v6_complexkeygen_hivestyle.zip", tmp_path)
    before = _snapshots(table)
    printed = tidemark("table", "read", str(table), "--format", "jsonl")
    assert printed.returncode == 0, printed.stderr
    source = tmp_path / "in.jsonl"
    source.write_text(printed.stdout)

    proc = tidemark("write", str(table), "--input", str(source), "--operation", "upsert")
    assert proc.returncode == 0, proc.stderr
    assert f"upsert committed at {load_timeline(LocalStorage(table)).completed().instants[-1].timestamp}" in proc.stdout
    assert f"{len(before)} updated" in proc.stdout
    assert _snapshots(table) == before
    again = tidemark("table", "read", str(table), "--format", "jsonl")
    assert sorted(again.stdout.splitlines()) == sorted(printed.stdout.splitlines())


@pytest.mark.parametrize(
    ("fixture", "column", "value", "expected"),
    [
        ("mor/v6_simplekeygen_nonhivestyle", "decimalField", "12.3.4", "is not a decimal(10,5)"),
        # a date in the year 0 was taken by the batch typing; this table's keys are computed in
        # Python, which failed the write with a bare "OverflowError: date value out of range"
        (
            "cow/v6_timebasedkeygen_nonhivestyle",
            "dateField",
            "0000-12-31",
            "is outside 0001-01-01 to 9999-12-31",
        ),
    ],
)
def test_a_value_that_does_not_fit_is_one_line_and_nothing_is_written(
    tmp_path: Path, fixture: str, column: str, value: str, expected: str
) -> None:
    table = extract_table(fixtures_root() / "tables" / f"{fixture}.zip", tmp_path)
    printed = tidemark("table", "read", str(table), "--format", "jsonl")
    lines = printed.stdout.splitlines()
    bad = json.loads(lines[2])
    bad[column] = value
    lines[2] = json.dumps(bad)
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    before = listing(table)

    proc = tidemark("write", str(table), "--input", str(source), "--operation", "upsert")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tidemark: error:")]
    assert errors == [f'tidemark: error: --input {source} line 3, column {column}: "{value}" {expected}']
    assert listing(table) == before


def test_the_first_write_into_a_table_spark_sql_created_keeps_its_declared_schema(tmp_path: Path) -> None:
    """A table ``CREATE TABLE`` made and nobody wrote yet has its schema in hoodie.properties
    only: the first write is typed by it (``id INT`` stayed an int, the columns in their declared
    order), where JSON alone made ``id`` a long and sorted the columns."""
    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_empty.zip", tmp_path)
    source = tmp_path / "in.jsonl"
    source.write_text('{"isActive": true, "id": 1, "name": "a"}\n{"id": 2, "name": "b", "isActive": false}\n')
    proc = tidemark("write", str(table), "--input", str(source), "--operation", "upsert")
    assert proc.returncode == 0, proc.stderr
    declared = [("id", pa.int32()), ("name", pa.string()), ("isActive", pa.bool_())]
    for read in (read_snapshot(LocalStorage(table)), apache_snapshot(str(table))):
        data = read.select([c for c in read.column_names if c not in META_COLUMNS])
        assert [(f.name, f.type) for f in data.schema] == declared
        assert sorted(data.to_pylist(), key=lambda r: r["id"]) == [
            {"id": 1, "name": "a", "isActive": True},
            {"id": 2, "name": "b", "isActive": False},
        ]


@pytest.mark.parametrize("operation", ["merge_update", "upsert"])
def test_an_input_without_the_partition_column_is_refused_before_anything_is_written(
    tmp_path: Path, operation: str
) -> None:
    # README's merge_update example, with a keys file that names no city: every key read as null
    # there was looked up in __HIVE_DEFAULT_PARTITION__, and an empty commit said "0 updated"; a
    # column no line holds is now no column of the input (as spark.read.json would leave it out)
    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    row = json.loads(tidemark("table", "read", str(table), "--format", "jsonl").stdout.splitlines()[0])
    keys = tmp_path / "keys.jsonl"
    line = {"uuid": row["uuid"], "ts": row["ts"] + 1}
    if operation == "upsert":
        line.update(rider=row["rider"], driver=row["driver"], fare=1.0)
    keys.write_text(json.dumps(line) + "\n")
    before = listing(table)
    flags = ["--set", "fare=fare * 2"] if operation == "merge_update" else []
    done = tidemark("write", str(table), "--input", str(keys), "--operation", operation, *flags)
    assert done.returncode == 1, done.stderr
    columns = "ts, uuid" if operation == "merge_update" else "ts, uuid, rider, driver, fare"
    assert done.stderr.splitlines()[-1] == (
        f"tidemark: error: the input has no partition field column city (columns: {columns})"
    )
    assert listing(table) == before
