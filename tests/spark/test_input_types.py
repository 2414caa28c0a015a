"""The types of the input as the table stores them. Timestamps written from a Spark session whose
time zone is not UTC: every reader (read_snapshot, the Spark reader, Apache's) reads the instants
written, before and after compaction, in base files and in both kinds of log block; timestamps
without a time zone are refused, as Hudi's version-6 writers refuse them. Decimals, whose Avro
type carries the table's name, in a table whose folder has another name."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import tidemark.spark
from tests.support.model import apache_snapshot
from tidemark.errors import TableError
from tidemark.spark.datasource import register
from tidemark.storage import LocalStorage
from tidemark.table.compaction import compact
from tidemark.table.snapshot import read_snapshot

pytestmark = pytest.mark.spark

UTC = dt.UTC
OPTIONS = {
    "hoodie.table.name": "tz",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
}
# the bounds of what Python shows: in Los Angeles time the first is in year 0
FIRST = dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
LAST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
NOON = dt.datetime(2024, 3, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def los_angeles(spark: Any) -> Iterator[Any]:
    register(spark)
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def frame(spark: Any, rows: list[tuple[str, int, dt.datetime | None]], nested: bool) -> Any:
    # a nested timestamp goes through the record-by-record Avro encoding, a flat one column by column
    if nested:
        schema = "id string, ts long, s struct<t: timestamp>"
        return spark.createDataFrame([(i, ts, {"t": t}) for i, ts, t in rows], schema)
    return spark.createDataFrame(rows, "id string, ts long, t timestamp")


def instants(table: Any) -> dict[str, Any]:
    data = table.to_pydict()
    values = data["t"] if "t" in data else [s and s["t"] for s in data["s"]]
    return {i: t and t.astimezone(UTC) for i, t in zip(data["id"], values, strict=True)}


@pytest.mark.parametrize(("block_format", "nested"), [("avro", False), ("parquet", False), ("avro", True)])
def test_timestamps_from_a_session_in_another_zone_read_the_same_everywhere(
    los_angeles: Any, tmp_path: Path, block_format: str, nested: bool
) -> None:
    path = str(tmp_path / "t")
    options = {**OPTIONS, "hoodie.logfile.data.block.format": block_format}
    tidemark.spark.write(frame(los_angeles, [("a", 1, NOON), ("b", 1, FIRST), ("c", 1, None)], nested), path, **options)
    # updates into the log blocks, with the year-1 and year-9999 instants
    tidemark.spark.write(frame(los_angeles, [("a", 2, LAST), ("c", 2, FIRST)], nested), path, **options)
    want = {"a": LAST, "b": FIRST, "c": FIRST}
    for _ in ("logs", "compacted"):
        assert instants(read_snapshot(LocalStorage(path))) == want
        assert instants(los_angeles.read.format("tidemark").load(path).toArrow()) == want
        if not nested:  # hudi-rs 0.5 reads a nested timestamp of an Avro block with another zone label
            assert instants(apache_snapshot(path)) == want
        compact(LocalStorage(path))


def test_a_timestamp_without_time_zone_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a", 1, dt.datetime(2024, 1, 2, 9, 0))], "id string, ts long, n timestamp_ntz")
    with pytest.raises(TableError, match=r"^column n is a timestamp without time zone .*cast it to TimestampType$"):
        tidemark.spark.write(df, str(tmp_path / "t"), **OPTIONS)
    assert not (tmp_path / "t").exists()


def test_a_table_whose_folder_is_not_its_name_takes_writes_of_its_decimal_columns(spark: Any, tmp_path: Path) -> None:
    # a decimal's Avro type is named after the table: a table restored into another folder was
    # refused every write ("... namespace hoodie.restored ..., the table has ... hoodie.tz ...")
    path = str(tmp_path / "restored")
    schema = "id string, ts long, amount decimal(10,2)"
    tidemark.spark.write(spark.createDataFrame([("a", 1, Decimal("1.50"))], schema), path, **OPTIONS)
    later = {k: v for k, v in OPTIONS.items() if k != "hoodie.table.name"}
    tidemark.spark.write(spark.createDataFrame([("a", 2, Decimal("2.25"))], schema), path, **later)
    assert read_snapshot(LocalStorage(path)).column("amount").to_pylist() == [Decimal("2.25")]


def test_a_column_name_avro_does_not_allow_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a", 1, "x", {"ok": 1})], "id string, ts long, `prénom` string, s struct<`a b`: int>")
    with pytest.raises(TableError, match=r"^column 'prénom', 's\.a b': not a name Avro allows"):
        tidemark.spark.write(df, str(tmp_path / "t"), **OPTIONS)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("name", "keyed"),
    [
        ("a.b", {}),
        ("`x`", {}),
        ("a.b", {"hoodie.datasource.write.recordkey.field": "a.b"}),
        ("a.b", {"hoodie.datasource.write.partitionpath.field": "a.b"}),
    ],
)
def test_a_column_name_with_a_dot_or_backticks_is_refused_as_a_name_avro_does_not_allow(
    spark: Any, tmp_path: Path, name: str, keyed: dict[str, str]
) -> None:
    # Spark takes a dot for a nested field and backticks for quotes: the write failed with Spark's
    # UNRESOLVED_COLUMN, or "the input has no record key column a.b (columns: id, ts, a.b)"
    df = spark.createDataFrame([("a", 1, "v")], ["id", "ts", name])
    with pytest.raises(TableError, match=rf"^column '{re.escape(name)}': not a name Avro allows .*; rename it$"):
        tidemark.spark.write(df, str(tmp_path / "t"), **{**OPTIONS, **keyed})
    assert not (tmp_path / "t").exists()


def test_a_new_column_that_differs_from_another_only_in_case_is_refused(spark: Any, tmp_path: Path) -> None:
    # from a case-sensitive session: the default (case-insensitive) one then could not query either
    path = str(tmp_path / "t")
    tidemark.spark.write(spark.createDataFrame([("a", 1, 1.0)], "id string, ts long, fare double"), path, **OPTIONS)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        df = spark.createDataFrame([("a", 2, 2.0, 9.0)], "id string, ts long, fare double, Fare double")
        with pytest.raises(TableError, match=r"^columns Fare and fare differ only in case"):
            tidemark.spark.write(df, path, **OPTIONS)
    finally:
        spark.conf.set("spark.sql.caseSensitive", "false")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert read_snapshot(LocalStorage(path)).column("fare").to_pylist() == [1.0]


def test_a_json_key_that_differs_from_a_column_only_in_case_is_one_error_line(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON lines into a table are typed by the table's columns, with the new keys beside them:
    ``amount`` beside ``Amount`` failed in Spark's select (AMBIGUOUS_REFERENCE, a traceback)."""
    from tidemark.cli.main import main

    path = str(tmp_path / "t")
    (tmp_path / "a.jsonl").write_text('{"id": "k1", "ts": 1, "Amount": 5}\n')
    (tmp_path / "b.jsonl").write_text('{"id": "k1", "ts": 2, "amount": 7}\n')
    common = ["--operation", "upsert", "--record-key", "id", "--precombine", "ts"]
    assert main(["write", path, "--input", str(tmp_path / "a.jsonl"), *common]) == 0
    capsys.readouterr()
    assert main(["write", path, "--input", str(tmp_path / "b.jsonl"), *common]) == 1
    assert capsys.readouterr().err.startswith("tidemark: error: columns Amount and amount differ only in case")
    assert read_snapshot(LocalStorage(path)).column("Amount").to_pylist() == [5]


def test_timestamps_without_a_zone_into_a_column_of_instants_are_taken_in_the_sessions_zone(
    spark: Any, tmp_path: Path
) -> None:
    # pandas and pyarrow write Parquet timestamps without a zone, which Spark reads as TimestampNTZ
    path = str(tmp_path / "t")
    tidemark.spark.write(spark.createDataFrame([("a", 1, NOON)], "id string, ts long, t timestamp"), path, **OPTIONS)
    wall = dt.datetime(2024, 5, 1, 8, 30)
    naive = spark.createDataFrame([("a", 2, wall)], "id string, ts long, t timestamp_ntz")
    tidemark.spark.write(naive, path, **OPTIONS)
    assert instants(read_snapshot(LocalStorage(path))) == {"a": wall.replace(tzinfo=UTC)}  # the session's zone: UTC
    assert instants(apache_snapshot(path)) == {"a": wall.replace(tzinfo=UTC)}


NESTED = "id string, ts long, s struct<t: {0}, n: int>, a array<{0}>, m map<string, {0}>"


def nested_instants(table: Any) -> list[Any]:
    row = {k: v[0] for k, v in table.to_pydict().items()}
    return [t.astimezone(UTC) for t in (row["s"]["t"], *row["a"], *dict(row["m"]).values())]


def test_timestamps_without_a_zone_in_a_struct_an_array_or_a_map_of_instants_are_taken_in_the_sessions_zone(
    los_angeles: Any, tmp_path: Path
) -> None:
    # a pandas frame of structs, lists or dicts of timestamps: they were refused ("column s.t has
    # type local-timestamp-micros, the table has timestamp-micros") where a top-level one was cast
    path = str(tmp_path / "t")
    first = ("a", 1, {"t": NOON, "n": 1}, [NOON], {"k": NOON})
    tidemark.spark.write(los_angeles.createDataFrame([first], NESTED.format("timestamp")), path, **OPTIONS)
    wall = dt.datetime(2024, 5, 1, 8, 30)
    naive = ("a", 2, {"t": wall, "n": 2}, [wall], {"k": wall})
    tidemark.spark.write(los_angeles.createDataFrame([naive], NESTED.format("timestamp_ntz")), path, **OPTIONS)
    want = [dt.datetime(2024, 5, 1, 15, 30, tzinfo=UTC)] * 3  # 08:30 in Los Angeles (PDT, UTC-7)
    assert nested_instants(read_snapshot(LocalStorage(path))) == want
    assert nested_instants(los_angeles.read.format("tidemark").load(path).toArrow()) == want


def test_a_new_timestamp_without_time_zone_in_a_struct_is_refused_beside_one_taken_as_an_instant(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    tidemark.spark.write(
        spark.createDataFrame([("a", 1, {"t": NOON})], "id string, ts long, s struct<t: timestamp>"), path, **OPTIONS
    )
    wall = dt.datetime(2024, 5, 1, 8, 30)
    df = spark.createDataFrame(
        [("a", 2, {"t": wall, "u": wall})], "id string, ts long, s struct<t: timestamp_ntz, u: timestamp_ntz>"
    )
    with pytest.raises(TableError, match=r"^column s\.u is a timestamp without time zone .*cast it to TimestampType$"):
        tidemark.spark.write(df, path, **OPTIONS)
    assert read_snapshot(LocalStorage(path)).column("s").to_pylist() == [{"t": NOON}]


def test_json_keys_that_differ_from_a_column_only_in_case_on_two_lines_are_one_error_line(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Val`` on one line and the table's ``val`` on another: Spark's inference of the new key's
    type failed (COLUMN_ALREADY_EXISTS, as "--input ... cannot be read")."""
    from tidemark.cli.main import main

    path = str(tmp_path / "t")
    tidemark.spark.write(spark.createDataFrame([("k1", 1, 1)], "id string, ts long, val long"), path, **OPTIONS)
    (tmp_path / "b.jsonl").write_text('{"id": "k1", "ts": 2, "Val": 7}\n{"id": "k2", "ts": 2, "val": 8}\n')
    assert main(["write", path, "--input", str(tmp_path / "b.jsonl"), "--operation", "upsert"]) == 1
    assert capsys.readouterr().err.startswith("tidemark: error: columns Val and val differ only in case")
    assert read_snapshot(LocalStorage(path)).column("val").to_pylist() == [1]


@pytest.mark.parametrize(
    ("lines", "twins"),
    [
        ('{"id": "c", "ts": 2, "s": {"x": 1}}\n{"id": "d", "ts": 2, "s": {"X": 5}}\n', "s.X and s.x"),
        ('{"id": "c", "ts": 2, "q": 1}\n{"id": "d", "ts": 2, "Q": 5}\n', "Q and q"),
    ],
    ids=["nested", "top-level"],
)
def test_json_keys_that_differ_only_in_case_are_refused_for_a_new_table(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: str, twins: str
) -> None:
    """A new table's types are what Spark infers, case-insensitively by default: ``s.x`` and
    ``s.X`` of two lines became one field, and the other line's value was written as null (a
    top-level pair failed as COLUMN_ALREADY_EXISTS)."""
    from tidemark.cli.main import main

    del spark  # the CLI's write shares the session
    (tmp_path / "in.jsonl").write_text(lines)
    path = tmp_path / "t"
    command = ["write", str(path), "--input", str(tmp_path / "in.jsonl"), "--operation", "upsert"]
    command += ["--record-key", "id", "--precombine", "ts"]
    assert main(command) == 1
    assert capsys.readouterr().err.startswith(f"tidemark: error: columns {twins} differ only in case")
    assert not path.exists()
