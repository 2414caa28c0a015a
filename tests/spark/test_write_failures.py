"""Writes that fail: tasks that die beyond Spark's retries, tasks retried by Spark, a driver
killed before commit, and bad input. Neither reader ever sees partial data, and the next write
proceeds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_write_job import CITIES, Harness, trips
from tests.support.spark_faults import StorageGoneAway, fail_at
from tidemark.errors import TableError, TableNotFoundError
from tidemark.logformat.file_name import BaseFileName
from tidemark.spark.write_job import WriteHooks
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import load_timeline

pytestmark = pytest.mark.spark


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".hoodie" not in p.parts}


@pytest.mark.parametrize("point", ["before_write", "after_first_file", "after_all_files"])
def test_task_failing_beyond_retries_leaves_nothing_visible(spark: Any, tmp_path: Path, point: str) -> None:
    from tidemark.spark.write_job import WriteFailedError, WriteOptions, write_dataframe

    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(12), ts=1))
    files_before = _files(tmp_path / "t")
    failing = WriteOptions("upsert", ("uuid",), "ts", ("city",), True, hooks=fail_at(f"{point}:4"))  # all 4 attempts
    with pytest.raises(WriteFailedError, match="failed and was rolled back"):
        write_dataframe(
            spark.createDataFrame(trips(range(6), ts=2, fare_base=70) + trips([90], ts=1)), h.location, failing
        )
    h.check()  # both readers: exactly the first write
    timeline = load_timeline(h.storage)
    assert not timeline.pending().write_instants().instants
    assert [i.action for i in timeline.completed()] == ["deltacommit", "rollback"]
    # the failed write's base files are gone; its log files are marked rolled back
    leftovers = _files(tmp_path / "t") - files_before
    assert not [f for f in leftovers if f.endswith(".parquet")]
    h.write("upsert", trips(range(3), ts=3, fare_base=300))
    h.check()


def test_a_write_whose_s3_endpoint_goes_away_fails_in_one_line(spark: Any, moto_process: tuple[str, Any]) -> None:
    # the write fails, and so does its rollback: the error names both, in one line (no task traceback)
    from tests.support.s3 import create_bucket, s3_options
    from tidemark.spark.write_job import WriteFailedError, WriteOptions, write_dataframe

    endpoint, server = moto_process
    s3 = s3_options(endpoint)
    h = Harness(spark, f"s3://{create_bucket(endpoint)}/t", "city", True, s3)
    h.write("upsert", trips(range(6), ts=1))
    failing = WriteOptions("upsert", ("uuid",), "ts", ("city",), True, hooks=StorageGoneAway(server.pid))
    with pytest.raises(WriteFailedError) as raised:
        write_dataframe(spark.createDataFrame(trips(range(12), ts=2)), h.location, failing, s3)
    message = str(raised.value)
    assert "\n" not in message, message
    assert "Traceback" not in message, message
    assert "its rollback failed too" in message, message
    assert "next write will roll it back" in message, message
    assert message.count(f"S3 endpoint {endpoint} is unreachable") == 2, message  # why each failed


class _KeepsInflight(WriteHooks):
    """Before the commit, copies the write's inflight file beside the table."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def before_commit(self) -> None:
        # the newest: completed writes keep theirs
        inflight = max(p for p in (self.root / ".hoodie").iterdir() if p.name.endswith(".inflight"))
        shutil.copy(inflight, self.root.parent / "inflight.json")


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_writes_inflight_names_the_partitions_it_writes(spark: Any, tmp_path: Path, copy_on_write: bool) -> None:
    """Its inflight file named no partition, so a rollback that found no markers (a marker folder
    deleted, a writer killed before its first marker) listed every partition of the table; Hudi's
    writer puts its workload profile there."""
    from tidemark.spark.write_job import write_dataframe

    table_type = "COPY_ON_WRITE" if copy_on_write else "MERGE_ON_READ"
    h = Harness(spark, str(tmp_path / "t"), "city", True, conf={"hoodie.datasource.write.table.type": table_type})
    h.write("upsert", trips(range(12), ts=1))
    rows = [r for r in trips(range(12), ts=2, fare_base=70) + trips([40], ts=1) if r["city"] != CITIES[0]]
    options = replace(h.options("upsert"), hooks=_KeepsInflight(tmp_path / "t"))
    write_dataframe(spark.createDataFrame(rows), h.location, options)
    h.model.upsert(rows)
    profile = json.loads((tmp_path / "inflight.json").read_text())
    assert sorted(profile["partitionToWriteStats"]) == sorted({f"city={r['city']}" for r in rows})
    assert len(profile["partitionToWriteStats"]) < len({r["city"] for r in trips(range(12), ts=1)})
    assert profile["operationType"] == "UPSERT"
    h.check()


class _RolledBackUnderTheWrite(WriteHooks):
    """As the write's first task starts, another process rolls back the write the table's files
    came from (its checks passed before this write began: run here as its own rollback)."""

    def __init__(self, location: str, target: str) -> None:
        self.location = location
        self.target = target

    def task_point(self, point: str, attempt: int) -> None:
        from tidemark.storage import open_storage
        from tidemark.table.write_client import rollback

        try:  # one task does it
            os.close(os.open(f"{self.location}.rolled-back", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        rollback(open_storage(self.location), self.target, own=True)


def test_a_write_whose_files_a_rollback_took_meanwhile_says_the_table_changed(spark: Any, tmp_path: Path) -> None:
    """It failed with a bare "ObjectNotFoundError: no such file" of a base file, as if the table
    were damaged; a read in the same case says what ran and to read again."""
    from tidemark.errors import TableChangedError
    from tidemark.spark.write_job import write_dataframe

    conf = {"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}
    h = Harness(spark, str(tmp_path / "t"), "city", True, conf=conf)
    h.write("upsert", trips(range(6), ts=1))
    latest = h.write("upsert", trips(range(6), ts=2, fare_base=50)).instant
    options = replace(h.options("upsert"), hooks=_RolledBackUnderTheWrite(h.location, latest))
    with pytest.raises(TableChangedError) as changed:
        write_dataframe(spark.createDataFrame(trips(range(6), ts=3, fare_base=90)), h.location, options)
    message = str(changed.value)
    # the first rollback since: the other one is the write's own
    rollback = min(i for i in load_timeline(h.storage).completed() if i.action == "rollback" and i.timestamp > latest)
    assert message.startswith(
        f"{h.location}: the table changed while this write ran (the rollback {rollback.timestamp} ran"
    ), message
    assert re.search(rf"no such file: \S+_{latest}\.parquet\)", message), message
    assert re.search(r"\); write again \(the write \d{17} was rolled back\)$", message), message
    assert "\n" not in message
    # the table is the first write's: the rollback's, and this write left nothing
    fares = {r["uuid"]: r["fare"] for r in read_snapshot(h.storage).to_pylist()}
    assert fares == {r["uuid"]: r["fare"] for r in trips(range(6), ts=1)}
    assert not load_timeline(h.storage).pending().instants


def test_task_retried_by_spark_commits_exactly_one_attempt(spark: Any, tmp_path: Path) -> None:
    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(12), ts=1))
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    retried = WriteOptions("upsert", ("uuid",), "ts", ("city",), True, hooks=fail_at("after_first_file:1"))
    rows = trips(range(6), ts=2, fare_base=70) + trips(range(20, 26), ts=1)
    result = write_dataframe(spark.createDataFrame(rows), h.location, retried)
    h.model.upsert(rows)
    assert result.removed_files, "the failed first attempts' files are removed at commit"
    h.check()
    # one base file per file group and instant: no leftover of a failed attempt
    seen = set()
    for f in _files(tmp_path / "t"):
        if f.endswith(".parquet"):
            name = BaseFileName.parse(f)
            assert (name.file_id, name.instant) not in seen
            seen.add((name.file_id, name.instant))


def test_driver_killed_before_commit(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A driver that dies leaves its write pending; other writers roll it back only once its
    heartbeat has expired, never before."""
    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(9), ts=1))
    script = textwrap.dedent(
        f"""
        from tidemark.spark.session import local_session
        from tidemark.spark.write_job import WriteOptions, write_dataframe
        from tests.spark.test_write_job import trips
        from tests.support.spark_faults import StorageGoneAway, fail_at
        spark = local_session("local[2]")
        beats = {{"hoodie.client.heartbeat.interval_in_ms": "5000"}}
        opts = WriteOptions(
            "upsert", ("uuid",), "ts", ("city",), True, conf=beats, hooks=fail_at("driver_before_commit")
        )
        write_dataframe(spark.createDataFrame(trips(range(5), ts=2, fare_base=50)), {h.location!r}, opts)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2]
    )
    assert proc.returncode == 137, proc.stderr[-2000:]
    pending = load_timeline(h.storage).pending().write_instants().instants
    assert len(pending) == 1
    # it beat every 5 s, so its last beat landed just before it died (beating every 60 s, it could
    # die with its last beat a minute old); judged by the default (dead after two missed beats of
    # 60 s) it is fresh: the rollback command refuses, the next writer leaves it alone. Both ask
    # first: on a busy machine the reads and Spark jobs before them took half a minute more
    from tidemark.cli.main import main

    assert main(["rollback", h.location, pending[0].timestamp]) == 1
    assert "is still running" in capsys.readouterr().err
    result = h.write("upsert", trips(range(2), ts=3, fare_base=80))
    assert result.rolled_back == ()
    assert load_timeline(h.storage).find(pending[0].timestamp) == pending[0]
    h.check()  # the dead write is invisible to both readers
    # a writer that counts 1 s without a beat as death rolls it back once that has passed; it
    # beats every 250 ms itself, so a busy machine's late beat does not make it doubt its own write
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    time.sleep(1.2)
    impatient = WriteOptions(
        "upsert",
        ("uuid",),
        "ts",
        ("city",),
        True,
        conf={"hoodie.client.heartbeat.interval_in_ms": "250", "hoodie.client.heartbeat.tolerable.misses": "4"},
    )
    rows = trips(range(3, 4), ts=4, fare_base=90)
    result = write_dataframe(spark.createDataFrame(rows), h.location, impatient)
    h.model.upsert(rows)
    assert result.rolled_back == (pending[0].timestamp,)
    h.check()


def test_a_write_into_a_tables_partition_folder_is_refused(spark: Any, tmp_path: Path) -> None:
    # it made a second table there, and Apache's readers of the outer table lost that partition
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("insert", trips(range(3), ts=1))
    files_before = _files(tmp_path / "t")
    inner = f"{h.location}/city={trips([0], ts=1)[0]['city']}"
    with pytest.raises(TableError, match=f"^{inner} is inside the Hudi table at {h.location} \\(partition city="):
        write_dataframe(spark.createDataFrame(trips([7], ts=1)), inner, WriteOptions("insert", ("uuid",), "ts"))
    assert _files(tmp_path / "t") == files_before
    assert not Path(inner, ".hoodie").exists()
    h.check()


def test_bad_input_is_refused_and_the_table_unchanged(spark: Any, tmp_path: Path) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(6), ts=1))
    timeline_before = load_timeline(h.storage)
    files_before = _files(tmp_path / "t")

    def attempt(rows: list[dict[str, Any]], options: WriteOptions, match: str) -> None:
        with pytest.raises(TableError, match=match):
            write_dataframe(spark.createDataFrame(rows), h.location, options)
        assert load_timeline(h.storage) == timeline_before
        assert _files(tmp_path / "t") == files_before
        h.check()

    upsert = WriteOptions("upsert", ("uuid",), "ts", ("city",), True)
    wrong_type = [{**r, "fare": str(r["fare"])} for r in trips(range(2), ts=2)]
    attempt(wrong_type, upsert, "column fare has type")
    missing = [{k: v for k, v in r.items() if k != "rider"} for r in trips(range(2), ts=2)]
    attempt(missing, upsert, "column rider is missing")
    attempt(
        trips(range(2), ts=2), WriteOptions("upsert", ("nope",), "ts", ("city",), True), "no record key column nope"
    )
    attempt(
        trips(range(2), ts=2),
        WriteOptions("upsert", ("uuid",), "when", ("city",), True),
        "no precombine field column when",
    )
    attempt(trips(range(2), ts=2), WriteOptions("upsert", ("uuid",), "ts", ("rider",), True), "partition field rider")
    null_key = [{**trips([1], ts=2)[0], "uuid": None}, *trips([2], ts=2)]
    attempt(null_key, upsert, "record key .* is null")
    null_ordering = [{**trips([1], ts=2)[0], "ts": None}, *trips([2], ts=2)]
    attempt(null_ordering, upsert, "precombine field ts is null")
    not_a_number = WriteOptions(
        "upsert", ("uuid",), "ts", ("city",), True, conf={"tidemark.index.broadcast.max.keys": "lots"}
    )
    attempt(
        trips(range(2), ts=2), not_a_number, r"tidemark\.index\.broadcast\.max\.keys='lots': expected a whole number"
    )
    # into a new table: nothing is created
    with pytest.raises(TableError, match=r"record key .* is null"):
        write_dataframe(spark.createDataFrame(null_key), str(tmp_path / "new"), upsert)
    assert not (tmp_path / "new").exists()


def test_reading_a_path_that_is_not_a_table(tmp_path: Path) -> None:
    from tidemark.storage import LocalStorage

    with pytest.raises(TableNotFoundError, match="not a Hudi table"):
        read_snapshot(LocalStorage(tmp_path))


def test_a_failure_in_the_jvm_is_told_by_the_jvm_exception_not_the_call(spark: Any) -> None:
    """py4j's error about a failed JVM call begins with the call ('An error occurred while calling
    o646.collectToPython.'): a write whose job was cancelled said only that."""
    from py4j.protocol import Py4JJavaError

    from tidemark.spark.task_errors import failure_line

    with pytest.raises(Py4JJavaError) as failed:
        spark.sparkContext._jvm.java.lang.Class.forName("no.such.Payload")
    assert str(failed.value).startswith("An error occurred while calling")
    assert failure_line(failed.value) == "java.lang.ClassNotFoundException: no.such.Payload"
