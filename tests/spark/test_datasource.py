"""``spark.read.format("tidemark")``: the Spark reader equals ``read_snapshot`` and Apache's reader
on every fixture table, with time travel, read-optimized queries, selected columns and partition
pruning; bad options get one clear error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.fixtures import extract_table, fixtures_root, table_zips
from tests.support.model import apache_incremental, apache_snapshot
from tests.support.table_builder import TableBuilder
from tidemark.spark.datasource import PARTITION_PRUNING, SPLIT_BYTES, register
from tidemark.spark.read import read_dataframe
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import arrow_schema_of, latest_table_schema
from tidemark.table.incremental import BEGIN_INSTANT, END_INSTANT, read_incremental
from tidemark.table.snapshot import META_COLUMNS, as_of_instant, read_snapshot
from tidemark.timeline import load_timeline

pytestmark = pytest.mark.spark

TABLES = [p.relative_to(p.parents[1]).with_suffix("").as_posix() for p in table_zips()]


@pytest.fixture(scope="module")
def source(spark: Any) -> Any:
    register(spark)
    return spark


def rows(table: pa.Table, columns: list[str] | None = None) -> list[str]:
    """A table's rows, comparable across readers (order is no reader's promise)."""
    picked = table.select(columns) if columns is not None else table
    return sorted(map(repr, picked.to_pylist()))


def data_rows(table: pa.Table) -> list[str]:
    return rows(table, sorted(c for c in table.column_names if c not in META_COLUMNS))


@pytest.mark.parametrize("name", TABLES or ["(fixtures missing)"])
def test_every_fixture_table_reads_as_read_snapshot_and_apache_reader(name: str, source: Any, tmp_path: Path) -> None:
    zip_path = fixtures_root() / "tables" / f"{name}.zip"
    table = extract_table(zip_path, tmp_path)
    ours = read_snapshot(LocalStorage(table))
    df = source.read.format("tidemark").load(str(table))
    got = df.toArrow()
    # a table without a schema: read_snapshot has no columns, a DataFrame keeps Hudi's meta columns
    # and the columns the table was created with
    declared = latest_table_schema(LocalStorage(table))
    created = [f.name for f in arrow_schema_of(declared) if f.name not in META_COLUMNS] if declared else []
    assert got.column_names == (ours.column_names or [*META_COLUMNS, *created])
    assert rows(got) == rows(ours)
    assert data_rows(got) == data_rows(apache_snapshot(str(table)))
    # selected columns: the data columns after the meta columns, two of them
    picked = [c for c in ours.column_names if c not in META_COLUMNS][:2] or ["_hoodie_record_key"]
    assert rows(df.select(*picked).toArrow()) == (rows(ours, picked) if ours.num_columns else [])


def test_time_travel_logs_and_read_optimized(source: Any, tmp_path: Path) -> None:
    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    first = builder.insert(["a", "b", "c"], 1)
    builder.update(["a"], 2)
    builder.delete(["b"], 3)
    location = str(tmp_path / "t")
    latest = read_dataframe(source, location).toArrow()
    assert rows(latest) == rows(read_snapshot(builder.storage))
    assert sorted(latest.column("id").to_pylist()) == ["a", "c"]
    # Hudi's as.of.instant, as an instant and as a date-time (the second is within `first`'s)
    then = read_snapshot(builder.storage, as_of=first)
    assert rows(read_dataframe(source, location, as_of=first).toArrow()) == rows(then)
    moment = f"{first[:4]}-{first[4:6]}-{first[6:8]} {first[8:10]}:{first[10:12]}:{first[12:14]}.{first[14:]}"
    assert as_of_instant(moment) == first
    by_time = source.read.format("tidemark").option("as.of.instant", moment).load(location).toArrow()
    assert rows(by_time) == rows(then)
    # read-optimized: base files only, the update and the delete still in the logs
    optimized = source.read.format("tidemark").option("hoodie.datasource.query.type", "read_optimized").load(location)
    assert rows(optimized.toArrow()) == rows(then)


def test_time_travel_shows_the_schema_as_of_then(source: Any, tmp_path: Path) -> None:
    """A read as of a write before a column was added and another widened has the table's
    columns and types as of then, as read_snapshot and Hudi's readers (the schema resolved at the
    query's instant); it had the latest ones, the new column all null."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    location = str(tmp_path / "t")
    options = WriteOptions("upsert", ("id",), "ts", ())
    write_dataframe(source.sql("select 'a' id, 1L ts, 1 n"), location, options)
    first = load_timeline(LocalStorage(location)).completed().write_instants().instants[-1].timestamp
    write_dataframe(source.sql("select 'b' id, 2L ts, 5000000000L n, 'x' added"), location, options)
    then = source.read.format("tidemark").option("as.of.instant", first).load(location).toArrow()
    ours = read_snapshot(LocalStorage(location), as_of=first)
    assert then.schema.field("n").type == ours.schema.field("n").type == pa.int32()
    assert then.column_names == ours.column_names
    assert "added" not in then.column_names
    assert rows(then) == rows(ours)
    # an incremental range without commits, ending then: no rows, the columns as of then
    empty = read_incremental(LocalStorage(location), first, first)
    assert (empty.num_rows, empty.column_names) == (0, ours.column_names)
    options = {"hoodie.datasource.query.type": "incremental", BEGIN_INSTANT: first, END_INSTANT: first}
    assert read_dataframe(source, location, options=options).columns == ours.column_names
    # ending before the first write: the first write's columns, as read_incremental's (the
    # source had the meta columns only, the library none)
    before_first = {**options, BEGIN_INSTANT: "000", END_INSTANT: "20000101000000000"}
    assert read_dataframe(source, location, options=before_first).columns == ours.column_names
    assert read_incremental(LocalStorage(location), "000", "20000101000000000").column_names == ours.column_names
    now = source.read.format("tidemark").load(location).toArrow()
    assert now.schema.field("n").type == pa.int64()
    assert "added" in now.column_names


def test_incremental_queries_read_as_the_library_and_apache_reader(source: Any, tmp_path: Path) -> None:
    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    first = builder.insert(["a", "b", "c"], 1)
    second = builder.upsert(["a", "d"], 2)
    third = builder.upsert(["c"], 3)
    location = str(tmp_path / "t")
    for begin, end in [("000", None), (first, None), (first, second), (second, third)]:
        options = {"hoodie.datasource.query.type": "incremental", BEGIN_INSTANT: begin}
        if end is not None:
            options[END_INSTANT] = end
        got = read_dataframe(source, location, options=options).toArrow()
        ours = read_incremental(builder.storage, begin, end)
        assert rows(got) == rows(ours), (begin, end)
        assert data_rows(got) == data_rows(apache_incremental(location, begin, end)), (begin, end)
    # the range after `first` holds a (updated), c (updated again) and d (new), not b
    after_first = (
        source.read.format("tidemark")
        .options(**{"hoodie.datasource.query.type": "incremental", BEGIN_INSTANT: first})
        .load(location)
    )
    assert sorted(r.id for r in after_first.select("id").collect()) == ["a", "c", "d"]
    # Hudi's deprecated hoodie.datasource.view.type, as old examples give it: the same pull
    by_view_type = read_dataframe(
        source, location, options={"hoodie.datasource.view.type": "incremental", BEGIN_INSTANT: first}
    )
    assert sorted(r.id for r in by_view_type.select("id").collect()) == ["a", "c", "d"]
    incremental = {"hoodie.datasource.query.type": "incremental", BEGIN_INSTANT: first}
    with pytest.raises(Exception, match=r"an incremental query ends at hoodie\.datasource\.read\.end\.instanttime"):
        read_dataframe(source, location, as_of=third, options=incremental).collect()


def test_an_incremental_query_is_not_refused_for_a_clean_of_a_group_it_does_not_read(
    source: Any, tmp_path: Path
) -> None:
    """The executors checked every file group against the cleans as of the range's end, and
    failed on a file of another partition, where the library and the CLI answered."""
    from tidemark.table_services.clean import CleanConfig, clean

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    first = builder.insert(["a", "b"], 1)
    second = builder.upsert(["q"], 2, partition="p=2")
    builder.insert_overwrite(["x"], 3)  # replaces the first file group, which the clean then deletes
    builder.upsert(["x"], 4)
    clean(builder.storage, CleanConfig(commits_retained=1))
    options = {"hoodie.datasource.query.type": "incremental", BEGIN_INSTANT: first, END_INSTANT: second}
    got = read_dataframe(source, str(tmp_path / "t"), options=options).toArrow()
    assert rows(got) == rows(read_incremental(builder.storage, first, second))
    assert got.column("id").to_pylist() == ["q"]


def test_partition_filters_prune_file_slices_before_they_are_read(source: Any, tmp_path: Path) -> None:
    table = str(extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path))
    ours = read_snapshot(LocalStorage(table))
    # one task per file slice: three partitions, one slice each
    df = source.read.format("tidemark").option(SPLIT_BYTES, "1").option(PARTITION_PRUNING, "true").load(table)
    assert df.rdd.getNumPartitions() == 3
    for where, city in [
        ("city = 'san_francisco'", "san_francisco"),
        ("_hoodie_partition_path = 'city=chennai'", "chennai"),
    ]:
        pruned = df.where(where)
        assert pruned.rdd.getNumPartitions() == 1
        want = ours.filter(pa.compute.equal(ours.column("city"), city))
        assert rows(pruned.toArrow()) == rows(want)
    both = df.where("city in ('chennai', 'sao_paulo')")
    assert both.rdd.getNumPartitions() == 2
    assert sorted(set(both.toArrow().column("city").to_pylist())) == ["chennai", "sao_paulo"]
    # a filter the path cannot decide reads every slice, and Spark still filters the rows
    fares = df.where("fare > 30")
    assert fares.rdd.getNumPartitions() == 3
    assert fares.count() == sum(1 for f in ours.column("fare").to_pylist() if f > 30)


def test_a_dataframe_queried_again_after_a_partition_filter_reads_every_slice(source: Any, tmp_path: Path) -> None:
    """Spark keeps the read plan a filtered query made and reuses it for the DataFrame's next
    query that pushes no filter: with pruning, a count after a filtered count counted the
    filtered partition only. Pruning is therefore off unless asked for."""
    table = str(extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path))
    everything = read_snapshot(LocalStorage(table)).num_rows
    df = source.read.format("tidemark").load(table)
    df.createOrReplaceTempView("trips")
    assert df.count() == everything
    assert df.where("city = 'chennai'").count() == 2
    assert df.count() == everything
    assert source.sql("select count(*) from trips").collect()[0][0] == everything
    assert len(df.select("uuid").collect()) == everything


def _slices(*mib: float) -> list[Any]:
    from tidemark.logformat.file_name import BaseFileName
    from tidemark.table.file_system_view import BaseFile, FileSlice

    out = []
    for i, size in enumerate(mib):
        name = BaseFileName(f"fg-{i}", "0-1-0", "20250101000000000")
        out.append(FileSlice("p", f"fg-{i}", name.instant, BaseFile(f"p/{name.name}", name, int(size * 2**20))))
    return out


def test_a_small_table_is_spread_over_tasks_and_tiny_slices_grouped() -> None:
    from tidemark.spark.datasource import group_slices

    def sizes(groups: list[list[Any]]) -> list[list[float]]:
        return sorted(sorted(s.base_file.size / 2**20 for s in g) for g in groups)

    # six slices of 7 MiB: one 128 MiB split would make one task on one core; Spark's rule
    # spreads the table (42 MiB / 16 tasks is under the 4 MiB floor: one slice a task)
    assert sizes(group_slices(_slices(*[7] * 6), 128 * 2**20)) == [[7]] * 6
    # tiny slices are grouped up to the open cost (4 MiB), not a task each
    assert sizes(group_slices(_slices(*[0.5] * 10), 128 * 2**20)) == [[0.5] * 2, [0.5] * 8]
    # a large table takes the split size; a slice larger than it goes alone
    big = group_slices(_slices(*[100] * 20, 300), 128 * 2**20)
    assert sizes(big) == [[100]] * 20 + [[300]]
    # fewer tasks asked for: bigger groups, never above the split size
    assert sizes(group_slices(_slices(*[7] * 6), 128 * 2**20, min_partitions=2)) == [[7, 7, 7], [7, 7, 7]]
    assert group_slices([], 128 * 2**20) == []


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("as.of.instnt", "20240101", "unknown option(s) of the tidemark source: as.of.instnt"),
        ("as.of.instant", "2000-01-01", "as.of.instant=2000-01-01: no completed write at or before it"),
        ("as.of.instant", "yesterday", "expected an instant time (yyyyMMddHHmmssSSS) or yyyy-MM-dd"),
        ("hoodie.datasource.query.type", "changes", "tidemark reads snapshot, read_optimized or incremental"),
        ("hoodie.datasource.view.type", "changes", "Hudi's deprecated query type is one of read_optimized, realtime"),
        # Hudi's deprecated name, read as Hudi reads it: an incremental pull, not the whole table
        ("hoodie.datasource.view.type", "incremental", "an incremental query needs hoodie.datasource.read.begin"),
        ("hoodie.datasource.query.type", "incremental", "an incremental query needs hoodie.datasource.read.begin"),
        ("tidemark.read.min.partitions", "0", "tidemark.read.min.partitions='0': expected a positive number"),
        # a misspelt query option read the snapshot (Hudi's other hoodie.* keys pass)
        (
            "hoodie.datasource.query.typ",
            "read_optimized",
            "unknown option(s) of the tidemark source: hoodie.datasource.query.typ",
        ),
        ("hoodie.datasource.read.as.of.instant", "2000-01-01", "of Hudi's query options it reads"),
    ],
)
def test_bad_options_are_refused_with_what_was_wrong(
    option: str, value: str, message: str, source: Any, tmp_path: Path
) -> None:
    from pyspark.errors import PySparkException

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a"], 1)
    with pytest.raises(PySparkException) as caught:
        source.read.format("tidemark").option(option, value).load(str(tmp_path / "t")).collect()
    assert message in str(caught.value)


def test_hudis_full_table_scan_fallback_switch_is_taken_as_true_and_refused_as_false(tmp_path: Path) -> None:
    """A job ported from Hudi that sets hoodie.datasource.read.incr.fallback.fulltablescan.enable
    (as Hudi's docs advise) failed to load as an unknown option, though tidemark reads every file
    group for a range reaching into the archive anyway; false, which it would not heed, is refused.
    The options are checked as the source plans, before any Spark job (no session needed)."""
    from tidemark.errors import TableError
    from tidemark.spark.datasource import FALLBACK_FULL_TABLE_SCAN, TidemarkDataSource

    builder = TableBuilder(LocalStorage(tmp_path))
    first = builder.insert(["a"], 1)
    builder.upsert(["b"], 2)
    incremental = {"path": str(tmp_path), "hoodie.datasource.query.type": "incremental", BEGIN_INSTANT: first}
    accepted = TidemarkDataSource({**incremental, FALLBACK_FULL_TABLE_SCAN: "TRUE"})
    assert {"id", "v"} <= set(accepted.schema().fieldNames())
    with pytest.raises(TableError, match=rf"{FALLBACK_FULL_TABLE_SCAN}=false: tidemark always reads every file group"):
        TidemarkDataSource({**incremental, FALLBACK_FULL_TABLE_SCAN: "false"}).schema()
    with pytest.raises(TableError, match=rf"{FALLBACK_FULL_TABLE_SCAN}='yes': expected true or false"):
        TidemarkDataSource({**incremental, FALLBACK_FULL_TABLE_SCAN: "yes"}).schema()


def test_time_travel_past_a_pending_write_is_refused(source: Any, tmp_path: Path) -> None:
    """as.of.instant after a write still inflight answered without it, and with it once it
    completed; refused as Hudi's validateTimestampAsOf refuses it."""
    from pyspark.errors import PySparkException

    from tidemark.table.write_client import start_write
    from tidemark.timeline import DELTA_COMMIT

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    first = builder.insert(["a"], 1)
    pending = start_write(builder.storage, DELTA_COMMIT, "upsert").timestamp
    with pytest.raises(PySparkException) as caught:
        source.read.format("tidemark").option("as.of.instant", "2999-01-01").load(str(tmp_path / "t")).collect()
    refused = f"as.of.instant=2999-01-01: the deltacommit {pending}, at or before it, is still inflight"
    assert refused in str(caught.value)
    before = source.read.format("tidemark").option("as.of.instant", first).load(str(tmp_path / "t"))
    assert [r.id for r in before.select("id").collect()] == ["a"]


def test_pruning_never_drops_a_slice_by_a_timestamp_s_text(source: Any, tmp_path: Path) -> None:
    """A timestamp's partition path text depends on a key generator setting (consistent logical
    timestamps write '2024-01-01 00:00:00.0'): pruning compared another text and dropped every
    slice. Timestamp filters prune nothing; Spark filters the rows."""
    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    write(
        source.sql("select 'k1' id, 1L ts, TIMESTAMP'2024-01-01 00:00:00' tp"),
        location,
        **{
            "hoodie.table.name": "t",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.partitionpath.field": "tp",
            "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled": "true",
        },
    )
    df = source.read.format("tidemark").option(PARTITION_PRUNING, "true").load(location)
    assert df.where("tp = TIMESTAMP'2024-01-01 00:00:00'").count() == 1


@pytest.mark.parametrize("generator", ["TimestampBasedKeyGenerator", "TimestampBasedAvroKeyGenerator"])
def test_pruning_never_compares_a_field_with_a_path_a_key_generator_formatted(
    source: Any, tmp_path: Path, generator: str
) -> None:
    # the path is '2024-01-01', the field 1704067200000: the filter cannot decide the slice
    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    day = 1704067200000
    write(
        source.sql(f"select concat('k', id) id, {day}L + id * 86400000L ts, id v from range(3)"),
        location,
        **{
            "hoodie.table.name": "t",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "v",
            "hoodie.datasource.write.partitionpath.field": "ts",
            "hoodie.datasource.write.keygenerator.class": f"org.apache.hudi.keygen.{generator}",
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.output.dateformat": "yyyy-MM-dd",
            "hoodie.keygen.timebased.output.timezone": "UTC",
        },
    )
    df = source.read.format("tidemark").option(PARTITION_PRUNING, "true").load(location)
    assert sorted(r.id for r in df.where(f"ts in ({day}, {day + 86400000})").collect()) == ["k0", "k1"]


def test_s3_keys_given_as_options_stay_out_of_the_query_plan(
    source: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: keys given as the source's options travel with the query (into every task), but
    Spark's plan strings (explain, the UI's SQL tab) do not show a Python source's options; Spark's
    option redaction (spark.sql.redaction.options.regex, ``(?i)url`` by default) is not what keeps
    them out."""
    TableBuilder(LocalStorage(tmp_path)).insert(["a"], 1)
    df = (
        source.read.format("tidemark")
        .option("tidemark.s3.access.key.id", "AKIAEXAMPLEKEYID")
        .option("tidemark.s3.secret.access.key", "not-a-real-secret")
        .load(str(tmp_path))
    )
    df.explain("extended")
    for plan in (capsys.readouterr().out, df._jdf.queryExecution().toString()):
        assert "RelationV2" in plan
        assert "AKIAEXAMPLEKEYID" not in plan
        assert "not-a-real-secret" not in plan
    assert df.count() == 1
    assert source.conf.get("spark.sql.redaction.options.regex") == "(?i)url"


def test_a_dataframe_whose_files_a_clean_deleted_after_its_load_says_so(source: Any, tmp_path: Path) -> None:
    """A DataFrame reads as of the instant its load() fixed: a compaction and a clean since then
    deleted the files it listed. Its next action failed with a bare 'no such file' in the task's
    traceback, which reads as a damaged table."""
    from pyspark.errors import PySparkException

    from tidemark.errors import TableError
    from tidemark.spark.task_errors import failure_line, task_error
    from tidemark.table.compaction import compact
    from tidemark.table_services.clean import CleanConfig, clean

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a", "b"], 1)
    builder.upsert(["a"], 2)
    df = read_dataframe(source, str(tmp_path / "t")).select("id", "v")
    assert sorted(df.collect()) == [("a", 2), ("b", 1)]  # the workers have read that snapshot
    compact(builder.storage)
    builder.upsert(["a"], 3)
    compact(builder.storage)
    clean(builder.storage, CleanConfig(commits_retained=1))  # deletes the slice the DataFrame reads
    with pytest.raises(PySparkException) as failed:
        df.collect()
    error = task_error(failed.value, TableError)
    assert error is not None, failure_line(failed.value)
    assert re.search(r"changed while this read ran \(the clean \d+ .*: load\(\) it again\)$", str(error)), str(error)


def test_a_time_zone_id_java_reads_as_gmt_is_refused_for_a_new_table(source: Any, tmp_path: Path) -> None:
    """'UTC+8' was taken as +08:00, where Apache Hudi (java.util.TimeZone) computes GMT paths."""
    from tidemark.spark.hudi_options import write

    location = tmp_path / "t"
    with pytest.raises(Exception, match=r"hoodie\.keygen\.timebased\.timezone=UTC\+8: java\.util\.TimeZone does not"):
        write(
            source.sql("select 'k1' id, 1719808200000L ts, 1 v"),
            str(location),
            **{
                "hoodie.table.name": "t",
                "hoodie.datasource.write.recordkey.field": "id",
                "hoodie.datasource.write.precombine.field": "v",
                "hoodie.datasource.write.partitionpath.field": "ts",
                "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
                "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
                "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd/HH",
                "hoodie.keygen.timebased.timezone": "UTC+8",
            },
        )
    assert not list(location.rglob("*.parquet"))
