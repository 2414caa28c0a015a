"""Writes into tables Apache Hudi made, with no key flags: the table's own configuration (record
key, precombine, partition fields, hive style, key generator) is the default. After each write
tidemark's reader, Apache's reader (hudi-rs) and the test's model agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot
from tidemark.errors import KeyGeneratorError
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.metadata_table import METADATA_FOLDER
from tidemark.table.snapshot import META_COLUMNS, read_snapshot
from tidemark.timeline import load_timeline

pytestmark = pytest.mark.spark


def _rows(table: pa.Table, key: str) -> list[dict[str, Any]]:
    data = [c for c in table.column_names if c not in META_COLUMNS]
    return sorted(table.select(sorted(data)).to_pylist(), key=lambda r: str(r[key]))


def _both_readers(path: Path, key: str) -> list[dict[str, Any]]:
    ours = _rows(read_snapshot(LocalStorage(path)), key)
    theirs = _rows(apache_snapshot(str(path)), key)
    assert ours == theirs
    return ours


def _table_read_jsonl(path: Path) -> list[dict[str, Any]]:
    """What ``tidemark table read --format jsonl`` prints for the table."""
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", "table", "read", str(path), "--format", "jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _file_group_of(path: Path, key: str) -> set[str]:
    """The file groups whose latest slice holds ``key`` (by _hoodie_record_key)."""
    table = read_snapshot(LocalStorage(path))
    rows = table.select(["_hoodie_record_key", "_hoodie_file_name"]).to_pylist()
    return {r["_hoodie_file_name"].split("_")[0].lstrip(".") for r in rows if r["_hoodie_record_key"] == key}


def test_upsert_and_delete_into_an_apache_mor_table_with_no_key_flags(spark: Any, tmp_path: Path) -> None:
    """JSON lines from ``table read`` of the table itself: its columns are long, string and
    double, which JSON's inferred types match (typing other columns by the table is issue 14
    part 4, not done here)."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    model = {r["uuid"]: r for r in _table_read_jsonl(table)}
    assert len(model) == 8
    changed = []
    for r in list(model.values())[:3]:
        changed.append({**r, "fare": r["fare"] + 100.0, "ts": r["ts"] + 1})
    new = [
        {
            "ts": 1695200000000,
            "uuid": "new-1",
            "rider": "rider-N",
            "driver": "driver-N",
            "fare": 1.5,
            "city": "chennai",
        },
        {"ts": 1695200000001, "uuid": "new-2", "rider": "rider-M", "driver": "driver-M", "fare": 2.5, "city": "oslo"},
    ]
    upserts = tmp_path / "upserts.jsonl"
    upserts.write_text("".join(json.dumps(r) + "\n" for r in changed + new))
    before = {k: _file_group_of(table, k) for k in model}
    write_dataframe(spark.read.json(str(upserts)), str(table), WriteOptions("upsert"))
    for r in changed + new:
        model[r["uuid"]] = r
    assert _both_readers(table, "uuid") == sorted(model.values(), key=lambda r: r["uuid"])
    # an update lands in its file group, with no duplicate
    for r in changed:
        assert _file_group_of(table, r["uuid"]) == before[r["uuid"]]
    assert (table / "city=oslo").is_dir()  # the table's hive style, from hoodie.properties

    deletes = tmp_path / "deletes.jsonl"
    gone = [changed[0], new[1]]
    deletes.write_text("".join(json.dumps(r) + "\n" for r in gone))
    write_dataframe(spark.read.json(str(deletes)), str(table), WriteOptions("delete"))
    for r in gone:
        del model[r["uuid"]]
    assert _both_readers(table, "uuid") == sorted(model.values(), key=lambda r: r["uuid"])
    actions = {i.action for i in load_timeline(LocalStorage(table)).completed()}
    assert actions == {"deltacommit"}


def test_a_non_hive_style_table_with_parquet_input_of_its_own_schema(spark: Any, tmp_path: Path) -> None:
    """A table with ints, decimals, dates, timestamps, bytes, maps and structs: the input is
    Parquet with the table's own schema (JSON input typed by the table is part 4)."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_simplekeygen_nonhivestyle.zip", tmp_path)
    current = read_snapshot(LocalStorage(table))
    data = current.select([c for c in current.column_names if c not in META_COLUMNS])
    rows = data.to_pylist()
    by_id = {r["id"]: r for r in rows}
    update = {**by_id[2], "name": "Bobby", "longField": by_id[2]["longField"] + 1}
    insert = {**by_id[3], "id": 9, "name": "Ivan", "byteField": 40}
    source = tmp_path / "input.parquet"
    pq.write_table(pa.Table.from_pylist([update, insert], schema=data.schema), source)
    write_dataframe(spark.read.parquet(str(source)), str(table), WriteOptions("upsert"))
    by_id[2], by_id[9] = update, insert
    assert _both_readers(table, "id") == _rows(pa.Table.from_pylist(list(by_id.values()), schema=data.schema), "id")
    assert (table / "40").is_dir()  # not hive style, as the table says


def test_write_with_the_metadata_table_disabled(spark: Any, tmp_path: Path) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    storage = LocalStorage(table)
    props = P.read_properties(storage)
    P.write_properties(storage, P.TableProperties({**props.entries, P.METADATA_PARTITIONS: "files"}))
    (table / METADATA_FOLDER / "files").mkdir(parents=True)
    (table / METADATA_FOLDER / "files" / ".files-0000-0_00000000000000010.log.1_0-0-0").write_bytes(b"x")
    rows = _table_read_jsonl(table)
    update = {**rows[0], "rider": "rider-Z"}
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(update) + "\n")
    result = write_dataframe(
        spark.read.json(str(source)), str(table), WriteOptions("upsert", conf={"hoodie.metadata.enable": "false"})
    )
    assert load_timeline(storage).completed().find(result.instant) is not None
    assert P.read_properties(storage)[P.METADATA_PARTITIONS] == ""
    assert not (table / METADATA_FOLDER).exists()
    expected = sorted([update, *rows[1:]], key=lambda r: r["uuid"])
    assert _both_readers(table, "uuid") == expected


TIMEBASED = {
    # the settings of the fixture v6_timebasedkeygen_nonhivestyle (its SQL's TBLPROPERTIES)
    "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "hoodie.keygen.timebased.timestamp.type": "DATE_STRING",
    "hoodie.keygen.timebased.input.dateformat": "yyyy-MM-dd'T'HH:mm:ss.SSSZ",
    "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd/HH",
}


def test_timestamp_based_key_generator_gets_apaches_partition_paths(spark: Any, tmp_path: Path) -> None:
    """A MOR table made by tidemark with the settings of the Apache-written fixture
    ``cow/v6_timebasedkeygen_nonhivestyle``: the same rows land in the partition folders Apache
    made for them; an update of an existing key lands in its file group, with no duplicate."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    fixture = extract_table(fixtures_root() / "tables" / "cow" / "v6_timebasedkeygen_nonhivestyle.zip", tmp_path)
    apache_paths = {r["ts_str"]: r["_hoodie_partition_path"] for r in read_snapshot(LocalStorage(fixture)).to_pylist()}
    assert sorted(set(apache_paths.values())) == ["2023/04/01/12", "2023/04/02/12", "2023/04/03/12", "2023/04/04/13"]
    columns = ["id", "name", "longField", "ts_str"]
    rows = [{c: r[c] for c in columns} for r in _table_read_jsonl(fixture)]
    table = tmp_path / "timebased"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_dataframe(
        spark.read.json(str(first)),
        str(table),
        WriteOptions("upsert", ("id",), "longField", ("ts_str",), False, conf=TIMEBASED),
    )
    props = P.read_properties(LocalStorage(table))
    assert props[P.KEY_GENERATOR] == TIMEBASED["hoodie.datasource.write.keygenerator.class"]
    written = {r["ts_str"]: r["_hoodie_partition_path"] for r in read_snapshot(LocalStorage(table)).to_pylist()}
    assert written == apache_paths
    assert sorted(str(p.parent.relative_to(table)) for p in table.rglob("*.parquet")) == sorted(
        set(apache_paths.values())
    )

    # no flags: the table's key generator and its recorded settings
    groups = {r["id"]: _file_group_of(table, str(r["id"])) for r in rows}
    update = {**rows[0], "name": "Alice2", "longField": rows[0]["longField"] + 1}
    # 23:59:59.999 in UTC: Hudi formats in the zone parsed from the text ("Z"), so day 05, hour 23
    new = {"id": 5, "name": "Eve", "longField": 7, "ts_str": "2023-04-05T23:59:59.999Z"}
    second = tmp_path / "second.jsonl"
    second.write_text(json.dumps(update) + "\n" + json.dumps(new) + "\n")
    write_dataframe(spark.read.json(str(second)), str(table), WriteOptions("upsert"))
    snapshot = read_snapshot(LocalStorage(table)).to_pylist()
    paths = {r["id"]: r["_hoodie_partition_path"] for r in snapshot}
    assert paths[5] == "2023/04/05/23"
    assert paths[update["id"]] == apache_paths[update["ts_str"]]
    assert _file_group_of(table, str(update["id"])) == groups[update["id"]]
    expected = {r["id"]: r for r in rows}
    expected[update["id"]], expected[5] = update, new
    assert _both_readers(table, "id") == sorted(expected.values(), key=lambda r: str(r["id"]))


def test_spark_expressions_give_the_key_generators_keys(spark: Any) -> None:
    """Simple, Complex and Nonpartitioned keys are computed as Spark expressions on the
    executors: for every column type they must print values exactly as the key generator's pure
    function (Hudi's rules, tested on their own in tests/table/test_key_generator.py) does."""
    import datetime
    import decimal

    from pyspark.sql import types as T

    from tidemark.spark.write_job import _KEY, _PART, _with_keys
    from tidemark.table import key_generator as KG

    schema = T.StructType(
        [
            T.StructField("i", T.IntegerType()),
            T.StructField("s", T.StringType()),
            T.StructField("d", T.DoubleType()),
            T.StructField("f", T.FloatType()),
            T.StructField("dec", T.DecimalType(10, 5)),
            T.StructField("day", T.DateType()),
            T.StructField("at", T.TimestampType()),
            T.StructField("b", T.BooleanType()),
            # Spark's default decimal: Hudi prints small values of it in scientific notation
            T.StructField("wide", T.DecimalType(38, 18)),
        ]
    )
    at = datetime.datetime(2023, 4, 1, 12, 1, 0, 123456, tzinfo=datetime.UTC)
    wide = [decimal.Decimal(v) for v in ("0", "-0.0000001234", "12.5", "0.000001")]
    rows = [
        (1, "a", 1e7, 1.1, decimal.Decimal("12345.67890"), datetime.date(2023, 4, 1), at, True, wide[0]),
        (2, "", 0.001, 2.5, decimal.Decimal("-1.50000"), datetime.date(1969, 12, 31), at, False, wide[1]),
        (3, None, -2.5e-5, 3.0, None, None, None, None, None),
        (4, "x/y", 123456.789, 0.1, decimal.Decimal("0.00001"), datetime.date(2000, 2, 29), at, True, wide[2]),
        (5, "z", 1.0, 0.5, decimal.Decimal("0.10000"), datetime.date(2000, 3, 1), at, True, wide[3]),
    ]
    df = spark.createDataFrame(rows, schema)
    floats = frozenset({"f"})
    keygens = [
        KG.build_key_generator(KG.SIMPLE, ["i"], "s", {}, hive_style=True, float_columns=floats),
        KG.build_key_generator(KG.COMPLEX, ["i", "s", "d", "f"], "dec,day,at,b", {}, float_columns=floats),
        KG.build_key_generator(KG.COMPLEX, ["i"], "d,f", {}, field_prefixed_single_key=True, float_columns=floats),
        KG.build_key_generator(KG.NONPARTITIONED, ["dec", "day", "b"], "", {}, float_columns=floats),
        KG.build_key_generator(KG.SIMPLE, ["at"], "d", {}, float_columns=floats),
        KG.build_key_generator(KG.COMPLEX, ["i", "wide"], "wide", {}, float_columns=floats),
    ]
    for keygen in keygens:
        assert keygen.is_simple_text
        computed = _with_keys(df, keygen).toArrow().to_pylist()
        checked = 0
        for row in computed:
            try:
                expected_key = keygen.record_key(row)
            except KeyGeneratorError:  # a key Hudi refuses: the write refuses the input before this
                continue
            assert row[_KEY] == expected_key, (keygen.kind, row)
            assert row[_PART] == keygen.partition_path(row), (keygen.kind, row)
            checked += 1
        assert checked >= 3


def test_an_apache_table_whose_record_key_fields_have_blanks_takes_upserts(spark: Any, tmp_path: Path) -> None:
    """Apache's writer records the record key option as the user typed it ("id, name") and its
    key generators trim each name; tidemark refused every write ("no record key column  name")."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "cow" / "v6_complexkeygen_hivestyle.zip", tmp_path)
    storage = LocalStorage(table)
    props = P.read_properties(storage)
    assert props[P.RECORD_KEY_FIELDS] == "id,name"
    P.write_properties(storage, P.TableProperties({**props.entries, P.RECORD_KEY_FIELDS: "id, name"}))
    current = read_snapshot(storage)
    keys = sorted(current.column("_hoodie_record_key").to_pylist())
    data = current.select([c for c in current.column_names if c not in META_COLUMNS])
    rows = data.to_pylist()
    update = {**rows[0], "longField": rows[0]["longField"] + 1}
    source = tmp_path / "input.parquet"
    pq.write_table(pa.Table.from_pylist([update], schema=data.schema), source)
    write_dataframe(spark.read.parquet(str(source)), str(table), WriteOptions("upsert"))
    # the record updated in place, under the key Apache gave it: no second copy
    assert sorted(read_snapshot(storage).column("_hoodie_record_key").to_pylist()) == keys
    expected = [update if r["id"] == update["id"] and r["name"] == update["name"] else r for r in rows]
    assert _both_readers(table, "id") == _rows(pa.Table.from_pylist(expected, schema=data.schema), "id")


# URL-encoding and consistent timestamps compute keys row by row, else Spark expressions do
@pytest.mark.parametrize(
    ("options", "key"),
    [
        (
            {
                "hoodie.datasource.write.partitionpath.urlencode": "true",
                "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled": "true",
            },
            "2023-04-01 12:01:00.123",  # java.sql.Timestamp of the milliseconds
        ),
        ({}, "1680350460123456"),  # the Avro long, as for a top-level timestamp column
    ],
)
def test_key_fields_in_a_struct_print_as_hudi_prints_them(
    spark: Any, tmp_path: Path, options: dict[str, str], key: str
) -> None:
    """A 32-bit float in a struct printed row by row as the double 0.10000000149011612
    (Float.toString: 0.1), and a timestamp in a struct as Spark's text in an expression; a
    consistent timestamp key carried its microseconds, where Hudi's ends at the millisecond."""
    from tidemark.spark.hudi_options import write

    location = tmp_path / "t"
    df = spark.sql("select 1L ts, named_struct('b', cast(0.1 as float), 't', TIMESTAMP'2023-04-01 12:01:00.123456') a")
    write(
        df,
        str(location),
        **{
            "hoodie.table.name": "t",
            "hoodie.datasource.write.recordkey.field": "a.t",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.partitionpath.field": "a.b",
            **options,
        },
    )
    written = read_snapshot(LocalStorage(location)).select(["_hoodie_record_key", "_hoodie_partition_path"])
    assert written.to_pylist() == [{"_hoodie_record_key": key, "_hoodie_partition_path": "0.1"}]
    assert (location / "0.1").is_dir()
