"""JSON lines typed by the table, read by Spark (``tidemark.spark.json_input``): a value that does
not fit is named by its line in the file even when a later task read it; keys the table does not
have become new nullable columns that the commit records and both readers read; a promoted type
is accepted and one Hudi would not promote, or one that would change the record keys, is refused
with nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.cli import listing
from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot
from tidemark.errors import TableError
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import arrow_schema_of, latest_table_schema
from tidemark.table.snapshot import META_COLUMNS, read_snapshot

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int32()), ("amount", pa.decimal128(10, 2)), ("at", pa.timestamp("us", tz="UTC"))])


@pytest.fixture
def small_splits(spark: Any) -> Iterator[None]:
    """Files read in 16 KB splits, so one input is typed by several tasks."""
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "16384")
    yield
    spark.conf.set("spark.sql.files.maxPartitionBytes", before)
    spark.catalog.clearCache()


def _line(i: int) -> str:
    return json.dumps({"id": i, "amount": f"{i}.25", "at": f"2024-01-01T00:00:{i % 60:02d}+00:00"})


def test_a_bad_value_is_named_by_its_line_in_the_file(spark: Any, small_splits: None, tmp_path: Path) -> None:
    from tidemark.spark.json_input import read_typed_json

    source = tmp_path / "in.jsonl"
    lines = [_line(i) for i in range(1, 2001)]
    source.write_text("\n".join(lines) + "\n")
    df = read_typed_json(spark, str(source), SCHEMA, "--input in.jsonl")
    assert df.rdd.getNumPartitions() > 1
    rows = sorted(df.collect(), key=lambda r: r.id)
    assert len(rows) == 2000
    assert [str(rows[6].amount), rows[6].at.second] == ["7.25", 7]

    spark.catalog.clearCache()  # the rows were cached: the same file read again would come from there
    lines[1499] = json.dumps({"id": 1500, "amount": "15.255", "at": "2024-01-01T00:00:00Z"})
    source.write_text("\n".join(lines) + "\n")
    with pytest.raises(TableError) as caught:
        read_typed_json(spark, str(source), SCHEMA, "--input in.jsonl")
    assert str(caught.value) == '--input in.jsonl line 1500, column amount: "15.255" is not a decimal(10,2)'

    # a folder: the file is named too
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n".join(_line(i) for i in range(10)) + "\n")
    (folder / "b.jsonl").write_text(_line(10) + "\n\n" + json.dumps({"id": 11, "at": 1.5}) + "\n")
    with pytest.raises(TableError) as caught:
        read_typed_json(spark, str(folder), SCHEMA, "--input folder")
    assert str(caught.value).startswith("--input folder (b.jsonl) line 3, column at: 1.5 is not a timestamp-micros")

    # a value out of range is named as such, not as misspelt
    spark.catalog.clearCache()
    source.write_text(_line(0) + "\n" + json.dumps({"id": 1, "at": "9999-12-31T23:00:00-05:00"}) + "\n")
    with pytest.raises(TableError) as caught:
        read_typed_json(spark, str(source), SCHEMA, "--input in.jsonl")
    assert str(caught.value) == (
        '--input in.jsonl line 2, column at: "9999-12-31T23:00:00-05:00" '
        "is outside 0001-01-01 to 9999-12-31 in UTC, once its offset is applied"
    )


def _both_readers(path: Path) -> list[dict[str, Any]]:
    ours = read_snapshot(LocalStorage(path))
    theirs = apache_snapshot(str(path))
    columns = sorted(c for c in ours.column_names if c not in META_COLUMNS)
    mine = sorted(ours.select(columns).to_pylist(), key=lambda r: r["id"])
    assert sorted(theirs.select(columns).to_pylist(), key=lambda r: r["id"]) == mine
    return mine


def test_new_keys_become_a_nullable_column_the_commit_records(spark: Any, tmp_path: Path) -> None:
    """An Apache-written MOR table with every kind of column: its own ``table read`` lines, some
    changed, one new key and a new ``note`` key on two lines, and a ``nothing`` key that is null
    on both (no column: its type cannot be known, and a string column would refuse numbers)."""
    from tests.table.test_json_input import _table_read_jsonl
    from tidemark.spark.json_input import read_typed_json
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_simplekeygen_nonhivestyle.zip", tmp_path)
    storage = LocalStorage(table)
    schema = arrow_schema_of(latest_table_schema(storage) or "")
    before = {r["id"]: r for r in _both_readers(table)}
    lines = [json.loads(line) for line in _table_read_jsonl(table)]
    by_id = {r["id"]: r for r in lines}
    changed = {
        **by_id[2],
        "decimalField": "1.5",
        "timestampField": 1700000000000000,
        "note": "checked",
        "nothing": None,
    }
    added = {**by_id[3], "id": 9, "name": "Ivan", "binaryField": "00ff", "mapField": {"k": None}, "note": "new"}
    added["nothing"] = None
    # values, not nulls: they make columns (an empty array, a record of nulls)
    changed["tags"], added["tags"] = [], []
    changed["extra"], added["extra"] = {"x": None}, {"x": None}
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in (changed, added)))

    df = read_typed_json(spark, str(source), schema, "--input in.jsonl")
    assert df.columns == [*schema.names, "extra", "note", "tags"]
    write_dataframe(df, str(table), WriteOptions("upsert"))
    spark.catalog.clearCache()

    recorded = json.loads(latest_table_schema(storage) or "")
    assert [f["name"] for f in recorded["fields"][-3:]] == ["extra", "note", "tags"]
    assert recorded["fields"][-2] == {"name": "note", "type": ["null", "string"], "default": None}
    after = {r["id"]: r for r in _both_readers(table)}
    assert after[2]["note"] == "checked"
    assert after[9]["note"] == "new"
    assert after[1]["note"] is None
    assert (after[2]["tags"], after[9]["extra"], after[1]["tags"], after[1]["extra"]) == ([], {"x": None}, None, None)
    assert str(after[2]["decimalField"]) == "1.50000"
    assert after[2]["timestampField"].timestamp() == 1700000000
    assert after[9]["binaryField"] == b"\x00\xff"
    assert after[9]["mapField"] == [("k", None)]
    for key in before.keys() - {2}:
        assert {k: v for k, v in after[key].items() if k not in ("extra", "note", "tags")} == before[key]


def test_a_promoted_type_is_accepted_and_an_unpromotable_one_refused(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = tmp_path / "t"
    first = spark.createDataFrame([(1, 10, "a"), (2, 20, "b")], "id int, qty int, name string")
    write_dataframe(first, str(table), WriteOptions("upsert", ("id",)))

    # qty int -> long (Avro promotes it; Hudi allows it on write): recorded in the commit's schema
    wider = spark.createDataFrame([(2, 3_000_000_000, "b"), (3, 30, "c")], "id int, qty long, name string")
    write_dataframe(wider, str(table), WriteOptions("upsert"))
    fields = {f["name"]: f["type"] for f in json.loads(latest_table_schema(LocalStorage(table)) or "")["fields"]}
    assert fields["qty"] == ["null", "long"]
    assert [(r["id"], r["qty"]) for r in _both_readers(table)] == [(1, 10), (2, 3_000_000_000), (3, 30)]

    # long -> string is no promotion: refused, nothing written
    before = listing(table)
    text = wider.withColumn("qty", F.col("qty").cast("string"))
    with pytest.raises(TableError, match=r'column qty has type "string", the table has "long"'):
        write_dataframe(text, str(table), WriteOptions("upsert"))
    assert listing(table) == before

    # the record key int -> double is a promotion, but its keys would print 2.0 for 2: the update
    # would find no record and write a second one for id 2; refused, nothing written
    as_double = wider.withColumn("id", F.col("id").cast("double"))
    with pytest.raises(TableError, match=r'column id is a record key field: the input\'s type "double" would print'):
        write_dataframe(as_double, str(table), WriteOptions("upsert"))
    assert listing(table) == before


def test_a_column_no_line_holds_is_missing_and_refused_unless_hudis_switch_fills_nulls(
    spark: Any, tmp_path: Path
) -> None:
    """A partial update in JSON (three of an Apache MOR table's sixteen columns) nulled the other
    thirteen of the row; it is refused as Hudi refuses it, and as the same Parquet input is, unless
    ``hoodie.write.set.null.for.missing.columns=true``. A key left out of one line only is that
    row's null."""
    from tests.table.test_json_input import _table_read_jsonl
    from tidemark.spark.json_input import read_typed_json
    from tidemark.spark.write_job import SET_NULL_FOR_MISSING, WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_nonpartitioned.zip", tmp_path)
    schema = arrow_schema_of(latest_table_schema(LocalStorage(table)) or "")
    before = {r["id"]: r for r in _both_readers(table)}
    source = tmp_path / "partial.jsonl"
    source.write_text(json.dumps({"id": 1, "name": "Alice2", "longField": 1234567899}) + "\n")

    df = read_typed_json(spark, str(source), schema, "--input partial.jsonl")
    unchanged = listing(table)
    with pytest.raises(TableError, match=r"does not match the schema of .*column isActive is missing"):
        write_dataframe(df, str(table), WriteOptions("upsert"))
    assert listing(table) == unchanged
    spark.catalog.clearCache()

    df = read_typed_json(spark, str(source), schema, "--input partial.jsonl")
    write_dataframe(df, str(table), WriteOptions("upsert", conf={SET_NULL_FOR_MISSING: "true"}))
    spark.catalog.clearCache()
    after = {r["id"]: r for r in _both_readers(table)}
    assert (after[1]["name"], after[1]["longField"], after[1]["isActive"], after[1]["structField"]) == (
        "Alice2",
        1234567899,
        None,
        None,
    )

    # every column held by some line: a key one line leaves out is that row's null, not refused
    lines = [json.loads(line) for line in _table_read_jsonl(table) if json.loads(line)["id"] in (2, 3)]
    lines[0]["name"] = "changed"
    del lines[0]["isActive"]
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    write_dataframe(read_typed_json(spark, str(source), schema), str(table), WriteOptions("upsert"))
    spark.catalog.clearCache()
    final = {r["id"]: r for r in _both_readers(table)}
    assert (final[2]["name"], final[2]["isActive"]) == ("changed", None)
    assert final[3] == before[3]
