"""Writes into copy-on-write tables: Apache-written fixtures and tables tidemark creates. Every
write rewrites the touched base files into new file slices and completes a ``commit`` (or a
``replacecommit`` for insert_overwrite); after each step tidemark's reader, Apache's reader
(hudi-rs) and the test's model agree, and no log file or deltacommit ever appears."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.spark.test_write_job import hudi_options, trips
from tests.support.fixtures import extract_table, fixtures_root, sql_model, sql_primary_key, table_zips
from tests.support.model import TableModel, apache_incremental, apache_snapshot, data_rows
from tests.support.spark_faults import fail_at
from tidemark.logformat.file_name import BaseFileName, LogFileName
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.file_system_view import FileSystemView, instant_metadata
from tidemark.table.incremental import read_incremental
from tidemark.table.snapshot import META_COLUMNS, read_snapshot
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint
from tidemark.timeline import load_timeline

pytestmark = pytest.mark.spark

# listed without skipping: with the fixtures absent the parameter set is empty, and the module's
# other tests still run
COW_FIXTURES = [p.stem for p in table_zips() if p.parent.name == "cow"]


def _data(table: pa.Table) -> pa.Table:
    return table.select([c for c in table.column_names if c not in META_COLUMNS])


def _sorted(rows: list[dict[str, Any]], key: tuple[str, ...]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in key))


def _both_readers(path: Path, key: tuple[str, ...]) -> list[dict[str, Any]]:
    ours = _sorted(_data(read_snapshot(LocalStorage(path))).to_pylist(), key)
    theirs = _sorted(_data(apache_snapshot(str(path))).to_pylist(), key)
    assert ours == theirs
    return ours


def _no_logs_no_deltacommits(path: Path) -> set[str]:
    """The completed actions on the timeline, after checking there is no log file anywhere."""
    logs = [p for p in path.rglob(".*") if p.is_file() and LogFileName.is_log_file(p.name) and ".hoodie" not in p.parts]
    assert not logs
    timeline = load_timeline(LocalStorage(path))
    assert not timeline.of_actions("deltacommit").instants
    return {i.action for i in timeline.completed()}


def _one_base_file_per_slice(path: Path) -> None:
    seen: set[tuple[str, str, str]] = set()
    for f in path.rglob("*.parquet"):
        if ".hoodie" in f.parts:
            continue
        name = BaseFileName.parse(f.name)
        slot = (str(f.parent), name.file_id, name.instant)
        assert slot not in seen, f"two base files for one file slice: {slot}"
        seen.add(slot)


def _file_ids(path: Path) -> dict[str, str]:
    """record key -> the file id of the base file holding it."""
    table = read_snapshot(LocalStorage(path)).select(["_hoodie_record_key", "_hoodie_file_name"]).to_pylist()
    return {r["_hoodie_record_key"]: BaseFileName.parse(r["_hoodie_file_name"]).file_id for r in table}


def _write_rows(spark: Any, tmp: Path, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> Any:
    """The rows as Parquet in the table's own schema (typing JSON input by the table is issue 14
    part 4; what ``table read`` prints for these columns is this data)."""
    source = tmp / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), source)
    return spark.read.parquet(str(source))


@pytest.mark.parametrize("fixture", COW_FIXTURES)
def test_upsert_and_delete_into_an_apache_cow_table(spark: Any, tmp_path: Path, fixture: str) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    zip_path = fixtures_root() / "tables" / "cow" / f"{fixture}.zip"
    table = extract_table(zip_path, tmp_path)
    props = P.read_properties(LocalStorage(table))
    assert props.table_type == "COPY_ON_WRITE"
    key = props.record_key_fields
    assert list(key) == sql_primary_key(zip_path.with_suffix(".sql"))
    current = _data(read_snapshot(LocalStorage(table)))
    schema = current.schema
    model = {tuple(r[k] for k in key): r for r in current.to_pylist()}
    assert set(model) == set(sql_model(zip_path.with_suffix(".sql")))  # what Apache's SQL left
    assert _both_readers(table, key) == _sorted(list(model.values()), key)
    commits_before = len(load_timeline(LocalStorage(table)).completed().instants)

    # values changed on two keys, two new keys (beside existing rows, so in their partitions)
    existing = sorted(model.values(), key=lambda r: r["id"])
    changed = [
        {**r, "intField": r["intField"] + 1, "doubleField": r["doubleField"] + 0.5, "longField": r["longField"] + 1}
        for r in existing[:2]
    ]
    new = [{**r, "id": 100 + i, "intField": -i} for i, r in enumerate(existing[-2:])]
    groups = _file_ids(table)
    write_dataframe(_write_rows(spark, tmp_path, "upsert", changed + new, schema), str(table), WriteOptions("upsert"))
    for r in changed + new:
        model[tuple(r[k] for k in key)] = r
    assert _both_readers(table, key) == _sorted(list(model.values()), key)
    after = _file_ids(table)
    for k, file_id in groups.items():
        assert after[k] == file_id  # every existing record stays in its file group
    metadata = instant_metadata(LocalStorage(table), load_timeline(LocalStorage(table)).completed().instants[-1])
    assert metadata.operation_type == "UPSERT"
    assert sum(s.num_update_writes for s in metadata.write_stats()) == len(changed)
    assert sum(s.num_inserts for s in metadata.write_stats()) == len(new)
    assert all(s.prev_commit for s in metadata.write_stats() if s.num_update_writes)

    gone = [changed[0], new[1]]
    write_dataframe(_write_rows(spark, tmp_path, "delete", gone, schema), str(table), WriteOptions("delete"))
    for r in gone:
        del model[tuple(r[k] for k in key)]
    assert _both_readers(table, key) == _sorted(list(model.values()), key)
    assert _no_logs_no_deltacommits(table) == {"commit"}
    assert len(load_timeline(LocalStorage(table)).completed().instants) == commits_before + 2
    _one_base_file_per_slice(table)


def test_insert_overwrite_of_an_apache_cow_table_partition(spark: Any, tmp_path: Path) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = extract_table(fixtures_root() / "tables" / "cow" / "v6_simplekeygen_nonhivestyle.zip", tmp_path)
    current = _data(read_snapshot(LocalStorage(table)))
    rows = current.to_pylist()
    by_partition = {r["byteField"] for r in rows}
    assert 10 in by_partition
    assert len(by_partition) > 1
    replacement = [{**next(r for r in rows if r["byteField"] == 10), "id": 50, "name": "Zed"}]
    write_dataframe(
        _write_rows(spark, tmp_path, "overwrite", replacement, current.schema),
        str(table),
        WriteOptions("insert_overwrite"),
    )
    expected = [r for r in rows if r["byteField"] != 10] + replacement
    assert _both_readers(table, ("id",)) == _sorted(expected, ("id",))
    assert _no_logs_no_deltacommits(table) == {"commit", "replacecommit"}


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``tidemark ARGS`` in this process (its write takes the tests' Spark session)."""
    from tidemark.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_cow_table_tidemark_creates(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Created by ``tidemark write --table-type COPY_ON_WRITE``; then upserts (changed values and
    new keys, from ``table read --format jsonl`` of the table, no key flags), a write that starts
    new file groups, a delete and an insert_overwrite; compaction is refused."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = tmp_path / "t"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in trips(range(9), ts=1)))
    code, _, err = _cli(
        capsys,
        "write", str(table), "--input", str(first), "--operation", "insert", "--table-type", "copy_on_write",
        "--record-key", "uuid", "--precombine", "ts", "--partition-field", "city", "--hive-style",
    )  # fmt: skip
    assert code == 0, err
    storage = LocalStorage(table)
    assert P.read_properties(storage)[P.TABLE_TYPE] == "COPY_ON_WRITE"
    model = TableModel("uuid", "ts", "city")
    model.insert(trips(range(9), ts=1))

    def check() -> None:
        expected = model.sorted_rows()
        assert data_rows(read_snapshot(storage), "uuid", "city") == expected
        assert data_rows(apache_snapshot(str(table)), "uuid", "city") == expected

    check()
    code, listed, _ = _cli(capsys, "table", "read", str(table), "--format", "jsonl")
    rows = [json.loads(line) for line in listed.splitlines()]
    upserts = [{**r, "fare": r["fare"] + 100, "ts": 2} for r in rows[:4]] + trips(range(20, 23), ts=2)
    groups = _file_ids(table)
    write_dataframe(spark.createDataFrame(upserts), str(table), WriteOptions("upsert"))
    model.upsert(upserts)
    check()
    # the small files took the new keys: still one file group per partition
    assert set(_file_ids(table).values()) == set(groups.values())
    # with small-file handling off, new keys start new file groups
    more = trips(range(30, 36), ts=3)
    write_dataframe(
        spark.createDataFrame(more), str(table), WriteOptions("insert", conf={"hoodie.parquet.small.file.limit": "0"})
    )
    model.insert(more)
    check()
    assert len(set(_file_ids(table).values())) == 2 * len(set(groups.values()))
    # an out-of-order update loses to the newer stored value (DefaultHoodieRecordPayload)
    stale = [{**upserts[0], "fare": -1.0, "ts": 1}]
    write_dataframe(spark.createDataFrame(stale + trips([0], ts=3, fare_base=7)), str(table), WriteOptions("upsert"))
    model.upsert(stale + trips([0], ts=3, fare_base=7))
    check()
    # merge_update: the rewritten base files hold the computed values (Apache's reader sees them)
    doubled = [r for r in model.rows.values() if r["uuid"] in ("id-0002", "id-0020")]
    keys = [{"uuid": r["uuid"], "city": r["city"], "ts": r["ts"]} for r in doubled]
    write_dataframe(
        spark.createDataFrame(keys), str(table), WriteOptions("merge_update", set_expressions={"fare": "fare * 2"})
    )
    for r in doubled:
        r["fare"] *= 2
    check()
    gone = trips([1, 21, 30], ts=3)
    write_dataframe(spark.createDataFrame(gone), str(table), WriteOptions("delete"))
    model.delete(gone)
    check()
    overwrite = trips([40, 43], ts=4)  # both in one city: that partition is replaced whole
    write_dataframe(spark.createDataFrame(overwrite), str(table), WriteOptions("insert_overwrite"))
    model.insert_overwrite(overwrite)
    check()
    assert _no_logs_no_deltacommits(table) == {"commit", "replacecommit"}
    _one_base_file_per_slice(table)

    code, _, err = _cli(capsys, "compact", str(table))
    assert code == 1
    assert "COPY_ON_WRITE table" in err
    assert "nothing to compact" in err
    assert len(err.strip().splitlines()) == 1


def test_an_insert_of_a_key_twice_into_a_small_file_leaves_it_once(spark: Any, tmp_path: Path) -> None:
    """An insert whose input holds a key twice, routed to a small file: one row per key comes out
    of the merge (Hudi's merge handle keeps its incoming records by key), the copies precombined
    first and then merged with a stored row. Into a new file group the copies stay, as Hudi's
    insert keeps them."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = tmp_path / "t"
    cow = {"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}
    write_dataframe(
        spark.createDataFrame(trips(range(6), ts=5)),
        str(table),
        WriteOptions("insert", ("uuid",), "ts", ("city",), conf=cow),
    )
    groups = set(_file_ids(table).values())
    stored_wins = trips([1], ts=3, fare_base=30) + trips([1], ts=4, fare_base=40)  # both older than the stored row
    newer_wins = trips([2], ts=8, fare_base=80) + trips([2], ts=7, fare_base=70)
    new_key = trips([40], ts=2, fare_base=20) + trips([40], ts=1, fare_base=10)
    write_dataframe(spark.createDataFrame(stored_wins + newer_wins + new_key), str(table), WriteOptions("insert"))
    assert set(_file_ids(table).values()) == groups  # the small files took them
    expected = {**{r["uuid"]: r for r in trips(range(6), ts=5)}, "id-0002": newer_wins[0], "id-0040": new_key[0]}
    assert _both_readers(table, ("city", "uuid")) == _sorted(list(expected.values()), ("city", "uuid"))

    twice = trips([50], ts=1) + trips([50], ts=2)
    write_dataframe(
        spark.createDataFrame(twice), str(table), WriteOptions("insert", conf={"hoodie.parquet.small.file.limit": "0"})
    )
    rows = _both_readers(table, ("city", "uuid"))
    assert sorted(r["ts"] for r in rows if r["uuid"] == "id-0050") == [1, 2]
    assert len(rows) == len(expected) + 2


def test_a_stored_row_that_wins_over_its_update_keeps_its_commit_time(spark: Any, tmp_path: Path) -> None:
    """Under DefaultHoodieRecordPayload an upsert of a key whose stored row has the larger
    ordering value leaves that row as it was, meta columns included (Hudi's merge handle copies
    the old record): this commit neither claims nor counts it, so an incremental read after the
    earlier commit, tidemark's or Apache's, returns only what the commit changed. The same for a
    delete record older than the stored row."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = tmp_path / "t"
    schema = "uuid string, ts long, fare double, _hoodie_is_deleted boolean"
    cow = {"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}
    first = write_dataframe(
        spark.createDataFrame([("a", 10, 1.0, False), ("b", 10, 2.0, False), ("d", 10, 4.0, False)], schema),
        str(table),
        WriteOptions("insert", ("uuid",), "ts", conf=cow),
    )
    # a: stale (5 < 10), b: a real update, c: a new key
    second = write_dataframe(
        spark.createDataFrame([("a", 5, 99.0, False), ("b", 11, 3.0, False), ("c", 1, 5.0, False)], schema),
        str(table),
        WriteOptions("upsert"),
    )
    assert (second.updates, second.inserts, second.deletes) == (1, 1, 0)
    # d: a delete older than the stored row (ignored), e: a new key
    third = write_dataframe(
        spark.createDataFrame([("d", 5, 0.0, True), ("e", 1, 6.0, False)], schema),
        str(table),
        WriteOptions("upsert"),
    )
    assert (third.updates, third.inserts, third.deletes) == (0, 1, 0)

    written_by = {"a": first.instant, "b": second.instant, "c": second.instant, "d": first.instant, "e": third.instant}
    for rows in (read_snapshot(LocalStorage(table)), apache_snapshot(str(table))):
        assert {r["uuid"]: r["_hoodie_commit_time"] for r in rows.to_pylist()} == written_by
        assert {r["uuid"]: r["fare"] for r in rows.to_pylist()} == {"a": 1.0, "b": 3.0, "c": 5.0, "d": 4.0, "e": 6.0}
    for begin, changed in ((first.instant, {"b", "c", "e"}), (second.instant, {"e"})):
        assert set(read_incremental(LocalStorage(table), begin)["uuid"].to_pylist()) == changed
        assert set(apache_incremental(str(table), begin)["uuid"].to_pylist()) == changed


def test_a_retried_task_leaves_no_duplicate_base_file(spark: Any, tmp_path: Path) -> None:
    """Spark retries a task whose first attempt died after rewriting its first file group: the
    commit keeps the retry's files only, and removes the dead attempt's from its markers."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    location = str(tmp_path / "t")
    model = TableModel("uuid", "ts", "city")
    cow = {"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}
    write_dataframe(
        spark.createDataFrame(trips(range(12), ts=1)),
        location,
        WriteOptions("insert", ("uuid",), "ts", ("city",), conf=cow),
    )
    model.insert(trips(range(12), ts=1))
    rows = trips(range(6), ts=2, fare_base=70) + trips(range(20, 26), ts=2)
    options = WriteOptions("upsert", conf={"tidemark.write.parallelism": "1"}, hooks=fail_at("after_first_file:1"))
    result = write_dataframe(spark.createDataFrame(rows), location, options)
    model.upsert(rows)
    assert result.removed_files, "the dead attempt's rewritten base file is removed at commit"
    storage = LocalStorage(tmp_path / "t")
    assert data_rows(read_snapshot(storage), "uuid", "city") == model.sorted_rows()
    assert data_rows(apache_snapshot(location), "uuid", "city") == model.sorted_rows()
    _one_base_file_per_slice(tmp_path / "t")
    committed = {
        s.path for s in instant_metadata(storage, load_timeline(storage).completed().instants[-1]).write_stats()
    }
    assert not committed & set(result.removed_files)
    # the dead attempt's, under a write token of its own (its task attempt id), not the retry's
    tokens = {BaseFileName.parse(path.rsplit("/", 1)[-1]).write_token for path in committed}
    assert not tokens & {BaseFileName.parse(f.rsplit("/", 1)[-1]).write_token for f in result.removed_files}

    # a write whose task fails on every attempt is rolled back from its markers: the rewritten
    # base files go, the previous slices stay the latest
    from tidemark.spark.write_job import WriteFailedError

    before = set((tmp_path / "t").rglob("*.parquet"))
    failing = WriteOptions("upsert", hooks=fail_at("after_first_file:4"))
    with pytest.raises(WriteFailedError, match="rolled back"):
        write_dataframe(spark.createDataFrame(trips(range(3), ts=9, fare_base=900)), location, failing)
    assert set((tmp_path / "t").rglob("*.parquet")) == before
    assert data_rows(read_snapshot(storage), "uuid", "city") == model.sorted_rows()
    assert data_rows(apache_snapshot(location), "uuid", "city") == model.sorted_rows()
    assert _no_logs_no_deltacommits(tmp_path / "t") == {"commit", "rollback"}


def test_a_failed_write_is_rolled_back_only_once_its_other_tasks_have_ended(spark: Any, tmp_path: Path) -> None:
    """When one task fails its last attempt, Spark fails the job while the others still run: a
    rollback done at once would miss the files they write after it (CI saw one left behind)."""
    from tests.support.spark_faults import WriteOnAfterRollback
    from tidemark.spark.write_job import WriteFailedError, WriteOptions, write_dataframe

    location = str(tmp_path / "t")
    cow = {"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}
    write_dataframe(
        spark.createDataFrame(trips(range(12), ts=1)),
        location,
        WriteOptions("insert", ("uuid",), "ts", ("city",), conf=cow),
    )
    model = TableModel("uuid", "ts", "city")
    model.insert(trips(range(12), ts=1))
    before = {p.relative_to(tmp_path) for p in (tmp_path / "t").rglob("*.parquet")}
    # rows of every partition, spread over four tasks: some write beside the failing one
    options = WriteOptions("upsert", conf={"tidemark.write.parallelism": "4"}, hooks=WriteOnAfterRollback(location))
    with pytest.raises(WriteFailedError, match="rolled back"):
        write_dataframe(spark.createDataFrame(trips(range(12), ts=9, fare_base=900)), location, options)
    time.sleep(3)  # (long enough for a task that outlived the rollback to write its file)
    assert {p.relative_to(tmp_path) for p in (tmp_path / "t").rglob("*.parquet")} == before
    storage = LocalStorage(tmp_path / "t")
    assert not load_timeline(storage).pending().instants
    assert data_rows(read_snapshot(storage), "uuid", "city") == model.sorted_rows()


def test_clean_archive_savepoint_and_restore_on_a_cow_table(spark: Any, tmp_path: Path) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    location = str(tmp_path / "t")
    storage = LocalStorage(tmp_path / "t")
    model = TableModel("uuid", "ts", "city")
    conf = {"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}
    write_dataframe(
        spark.createDataFrame(trips(range(9), ts=1)),
        location,
        WriteOptions("insert", ("uuid",), "ts", ("city",), conf=conf),
    )
    model.insert(trips(range(9), ts=1))
    for ts in range(2, 7):
        rows = trips(range(ts, ts + 3), ts=ts, fare_base=10 * ts)
        write_dataframe(spark.createDataFrame(rows), location, WriteOptions("upsert"))
        model.upsert(rows)
        if ts == 3:
            savepoint = load_timeline(storage).completed().instants[-1].timestamp
            create_savepoint(storage, savepoint)
            at_savepoint = model.sorted_rows()

    def check(expected: list[dict[str, Any]]) -> None:
        assert data_rows(read_snapshot(storage), "uuid", "city") == expected
        assert data_rows(apache_snapshot(location), "uuid", "city") == expected

    check(model.sorted_rows())
    slices_before = sum(len(g.slices) for g in FileSystemView(storage, load_timeline(storage)).all_file_groups())
    done = clean(storage, CleanConfig(commits_retained=2))
    assert done is not None
    assert done.deleted
    # only superseded base files went, and none the savepoint holds
    timeline = load_timeline(storage)
    view = FileSystemView(storage, timeline)
    latest = {fs.base_file.path for fs in view.latest_file_slices() if fs.base_file}
    assert not latest & set(done.deleted)
    assert all(BaseFileName.parse(p).instant != savepoint for p in done.deleted)
    assert sum(len(g.slices) for g in view.all_file_groups()) < slices_before
    check(model.sorted_rows())

    archived = archive(storage, ArchiveConfig(min_commits=2, max_commits=3))
    assert archived.plan.instants, archived.plan
    check(model.sorted_rows())

    restore(storage, savepoint)
    check(at_savepoint)
    assert _no_logs_no_deltacommits(tmp_path / "t") >= {"commit", "clean", "restore"}
    assert load_timeline(storage).completed().write_instants().instants[-1].timestamp == savepoint


def test_a_merge_on_read_table_whose_properties_say_copy_on_write_is_refused(spark: Any, tmp_path: Path) -> None:
    """A copy-on-write write rewrites base files and merges no log: on a merge-on-read table whose
    hoodie.properties names the wrong type it lost the updates in the logs."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    table = tmp_path / "t"
    mor = {"hoodie.datasource.write.table.type": "MERGE_ON_READ"}
    write_dataframe(
        spark.createDataFrame(trips(range(6), 1)),
        str(table),
        WriteOptions("insert", ("uuid",), "ts", ("city",), conf=mor),
    )
    write_dataframe(
        spark.createDataFrame(trips([1], 2, 50.0)), str(table), WriteOptions("upsert", ("uuid",), "ts", ("city",))
    )
    props = table / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("=MERGE_ON_READ", "=COPY_ON_WRITE"))
    before = sorted((p, p.stat().st_size) for p in table.rglob("*") if p.is_file() and ".hoodie" not in p.parts)
    with pytest.raises(TableError, match=r"type=COPY_ON_WRITE, but its timeline holds deltacommits"):
        write_dataframe(
            spark.createDataFrame(trips([2], 3)), str(table), WriteOptions("upsert", ("uuid",), "ts", ("city",))
        )
    assert sorted((p, p.stat().st_size) for p in table.rglob("*") if p.is_file() and ".hoodie" not in p.parts) == before


def test_a_struct_field_added_from_a_spark_literal_is_null_in_the_rows_already_written(
    spark: Any, tmp_path: Path
) -> None:
    """Spark holds a literal's field as non-null. The commit records every field nullable, and a
    merge-on-read write takes it; a copy-on-write write failed in its task, as it conformed the
    file's old rows (which lack the field) to the input's non-null type."""
    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": "COPY_ON_WRITE"})
    write(spark.sql("select 'a' id, 1L ts, named_struct('x', 1) st"), location, **options)
    write(spark.sql("select 'b' id, 2L ts, named_struct('x', 2, 'y', 'new') st"), location, **options)
    expected = [{"id": "a", "st": {"x": 1, "y": None}}, {"id": "b", "st": {"x": 2, "y": "new"}}]
    assert read_snapshot(LocalStorage(location)).select(["id", "st"]).sort_by("id").to_pylist() == expected
    assert apache_snapshot(location).select(["id", "st"]).sort_by("id").to_pylist() == expected
