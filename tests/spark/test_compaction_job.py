"""Compaction on Spark (``tidemark compact``'s default engine): the same table as a compaction in
one process, read alike by tidemark and Apache's reader; a task killed after writing its base file
is retried by Spark and leaves one base file per file group; a driver that stalled before starting
its plan, which another process completed meanwhile, keeps that commit."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.cli.test_table_commands import tidemark
from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot
from tests.support.spark_faults import (
    compaction_storage_killing_every_attempt,
    compaction_storage_killing_first_attempts,
    compaction_storage_taken_over_after_first_base_file,
)
from tests.support.table_builder import TableBuilder
from tidemark.logformat.file_name import BaseFileName
from tidemark.spark.compaction_job import compact_on_spark
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.compaction import compact
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.snapshot import META_COLUMNS, read_snapshot
from tidemark.timeline import Instant, load_timeline

pytestmark = pytest.mark.spark


def rows(table: pa.Table) -> list[str]:
    """Rows without the file name (each compaction names its base files after its own instant)."""
    kept = [c for c in table.column_names if c != "_hoodie_file_name"]
    return sorted(map(repr, table.select(kept).to_pylist()))


def data_rows(table: pa.Table) -> list[str]:
    return sorted(map(repr, table.select(sorted(c for c in table.column_names if c not in META_COLUMNS)).to_pylist()))


def base_files(table: Path, instant: str) -> list[BaseFileName]:
    return sorted(
        (BaseFileName.parse(p.name) for p in table.rglob("*.parquet") if p.name.endswith(f"_{instant}.parquet")),
        key=lambda b: b.file_id,
    )


def a_table_with_logs(root: Path) -> Path:
    """Two partitions, updates and deletes in the logs of several file groups."""
    builder = TableBuilder(LocalStorage(root))
    builder.insert(["a", "b", "c", "d"], 1)
    builder.insert(["e", "f"], 1)
    builder.update(["a", "e"], 2)
    builder.delete(["b"], 3)
    builder.upsert(["c", "x"], 4, partition="p=2")
    builder.upsert(["x", "y"], 5, partition="p=2")
    return root


@pytest.mark.parametrize("kind", ["tidemark", "apache"])
def test_compaction_on_spark_equals_compaction_in_one_process(kind: str, spark: Any, tmp_path: Path) -> None:
    if kind == "apache":
        source = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path / "a")
    else:
        source = a_table_with_logs(tmp_path / "a")
    twin = tmp_path / "b" / source.name
    shutil.copytree(source, twin)
    before = read_snapshot(LocalStorage(source))

    local = compact(LocalStorage(source))
    on_spark = compact_on_spark(spark, str(twin))
    assert local is not None
    assert on_spark is not None
    after = read_snapshot(LocalStorage(twin))
    assert rows(after) == rows(read_snapshot(LocalStorage(source))) == rows(before)
    assert data_rows(apache_snapshot(str(twin))) == data_rows(before)
    # the same new base files, file group by file group
    assert [b.file_id for b in base_files(twin, on_spark.timestamp)] == [
        b.file_id for b in base_files(source, local.timestamp)
    ]
    assert on_spark.is_completed


def test_a_killed_task_is_retried_and_leaves_one_base_file_per_group(spark: Any, tmp_path: Path) -> None:
    table = a_table_with_logs(tmp_path / "t")
    before = read_snapshot(LocalStorage(table))
    done = compact_on_spark(spark, str(table), open_table=compaction_storage_killing_first_attempts)
    assert done is not None
    written = base_files(table, done.timestamp)
    ids = [b.file_id for b in written]
    assert len(ids) == len(set(ids)) >= 2  # every task died once, and no group has two files
    assert rows(read_snapshot(LocalStorage(table))) == rows(before)
    assert data_rows(apache_snapshot(str(table))) == data_rows(before)
    # nothing half-written left next to them, and no pending compaction
    assert not [p for p in table.rglob(".*") if p.is_file() and ".hoodie" not in p.parts and ".tmp" in p.name]
    assert not load_timeline(LocalStorage(table)).pending().instants


def test_the_cli_compacts_on_spark_and_says_so(tmp_path: Path) -> None:
    table = a_table_with_logs(tmp_path / "t")
    before = read_snapshot(LocalStorage(table))
    done = tidemark("compact", str(table), "--conf", "spark.master=local[1]")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("compaction committed at ")
    assert "log4j" in done.stderr  # Spark started, and said so
    assert rows(read_snapshot(LocalStorage(table))) == rows(before)
    again = tidemark("compact", str(table))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "nothing to compact"
    # with nothing to compact, no Spark is started
    assert "log4j" not in again.stderr


def test_a_damaged_base_file_fails_the_cli_compaction_in_one_line_and_changes_nothing(tmp_path: Path) -> None:
    """The task's error reaches the user as tidemark's one line naming the file (not Spark's
    traces of every attempt), and the compaction it planned is taken back."""
    table = a_table_with_logs(tmp_path / "t")
    (base,) = table.rglob("fg-001_*.parquet")  # a group with logs: the plan reads it
    base.write_bytes(base.read_bytes()[:100])
    done = tidemark("compact", str(table), "--conf", "spark.master=local[1]")
    assert done.returncode == 1, done.stdout
    errors = [line for line in done.stderr.splitlines() if "Error" in line or "error" in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"tidemark: error: {base} is not a readable Parquet file")
    assert "taken back" in errors[0]
    assert "Traceback" not in done.stderr
    assert not load_timeline(LocalStorage(table)).pending().instants


def test_a_task_failing_for_no_reason_of_tidemarks_fails_the_cli_compaction_in_one_line_left_pending(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Python worker killed at each attempt (the OOM killer, a lost executor) fails the job: the
    command says so in tidemark's one line, that the compaction is left pending and what finishes
    it, not with Spark's Python and Java traces (174 lines); run again, it commits that compaction.
    In this process, so that the command's tasks open the table through the failing seam."""
    from tidemark.cli.main import main
    from tidemark.spark import compaction_job

    table = a_table_with_logs(tmp_path / "t")
    before = read_snapshot(LocalStorage(table))
    killing = functools.partial(compact_on_spark, open_table=compaction_storage_killing_every_attempt)
    monkeypatch.setattr(compaction_job, "compact_on_spark", killing)
    assert main(["compact", str(table)]) == 1
    out, err = capsys.readouterr()
    assert not out
    (line,) = err.splitlines()
    (pending,) = load_timeline(LocalStorage(table)).pending().instants
    uri = open_storage(str(table)).uri
    assert line.startswith(
        f"tidemark: error: the compaction {pending.timestamp} on {uri} failed and is left pending "
        f"(`tidemark compact {uri}` run again finishes it): "
    ), err
    assert "Python worker exited unexpectedly" in line  # why, as Spark says it
    monkeypatch.undo()
    assert main(["compact", str(table)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"compaction committed at {pending.timestamp}"
    assert not load_timeline(LocalStorage(table)).pending().instants
    assert rows(read_snapshot(LocalStorage(table))) == rows(before)
    assert data_rows(apache_snapshot(str(table))) == data_rows(before)
    ids = [b.file_id for b in base_files(table, pending.timestamp)]
    assert len(ids) == len(set(ids)) >= 2  # the failed run's files replaced, not doubled


class _StalledBeforeStart(LocalStorage):
    """The driver's storage: just before the compaction goes inflight (where the driver stalled
    past its heartbeat's expiry), another process takes the plan up and completes it."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.other: list[Instant | None] = []
        self.files: dict[Path, int] = {}  # the other process's base files, by inode

    def create_if_absent(self, path: str, data: bytes) -> None:
        if path.endswith(".compaction.inflight") and not self.other:
            impatient = ConcurrencyConfig(heartbeat_interval_ms=1, heartbeat_tolerable_misses=1)
            self.other.append(compact(LocalStorage(self.root), impatient))
            self.files = {p: p.stat().st_ino for p in self.root.rglob("*.parquet")}
        super().create_if_absent(path, data)


def test_a_driver_stalled_before_starting_keeps_the_commit_of_the_process_that_completed_it(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stalled driver failed with "...compaction.inflight already exists ...: another writer got
    there first" (exit 1); now it answers with the other process's commit, as a stall after the
    start does, and runs no task."""
    table = a_table_with_logs(tmp_path / "t")
    before = read_snapshot(LocalStorage(table))
    driver = _StalledBeforeStart(str(table))

    def open_table(location: str, s3: S3Options | None = None) -> Storage:
        return driver

    done = compact_on_spark(spark, str(table), open_table=open_table)
    assert done is not None
    assert done.is_completed
    assert driver.other == [done]
    # no task wrote a base file again over the committed ones
    assert {p: p.stat().st_ino for p in table.rglob("*.parquet")} == driver.files
    assert base_files(table, done.timestamp)
    assert f"compaction {done.timestamp} on {driver.uri} was completed by another process" in caplog.text
    assert rows(read_snapshot(LocalStorage(table))) == rows(before)
    assert not load_timeline(LocalStorage(table)).pending().instants


def test_tasks_after_a_takeover_write_nothing_and_the_driver_keeps_that_commit(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once another process had taken over and committed the compaction (this driver stalled past
    its heartbeat's expiry after its first task's base file), the remaining tasks wrote their base
    files again over the committed ones. Now they write nothing, and the driver answers with the
    other process's commit, as a single-process runner does."""
    table = a_table_with_logs(tmp_path / "t")
    before = read_snapshot(LocalStorage(table))
    done = compact_on_spark(spark, str(table), open_table=compaction_storage_taken_over_after_first_base_file)
    assert done is not None
    assert done.is_completed
    record = json.loads((tmp_path / "taken-over.json").read_text())
    assert record["instant"] == done.timestamp
    assert len(record["files"]) >= 2
    now = {
        str(p.relative_to(table)): [hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_ino]
        for p in table.rglob(f"*_{done.timestamp}.parquet")
    }
    assert now == record["files"]  # the committed files as the other process wrote them
    assert caplog.text.count(f"compaction {done.timestamp} on {table} was completed by another process") == 1
    assert "Traceback" not in caplog.text
    assert rows(read_snapshot(LocalStorage(table))) == rows(before)
    assert data_rows(apache_snapshot(str(table))) == data_rows(before)
    assert not load_timeline(LocalStorage(table)).pending().instants
