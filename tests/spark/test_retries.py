"""Real Spark task retries (``local[2,4]``) with failures injected before, inside, between and
after log blocks, for plain upserts and for expression updates (``fare = fare * 2``), and
apache/hudi#10803 (two complete attempts, different data). The failed attempts' files are left in
place (as Apache Hudi leaves log files, or as a zombie attempt would write them), so what keeps
the snapshot right is the reader's reconciliation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_write_job import Harness, trips
from tests.support.model import apache_snapshot, data_rows
from tests.support.spark_faults import fail_at
from tidemark.table.compaction import SKIPPED_BLOCKS_KEY, compact
from tidemark.table.file_system_view import instant_metadata
from tidemark.table.snapshot import SnapshotReader, read_snapshot

pytestmark = pytest.mark.spark

POINTS = ["before_first_block", "mid_block", "between_blocks", "after_all_files"]
#: small data blocks, so a file group's updates take several blocks
CONF = {"hoodie.logfile.data.block.max.size": "300"}


def _write(h: Harness, op: str, rows: list[dict[str, Any]], fault: str, **extra: Any) -> Any:
    """A write with ``fault`` (see :func:`fail_at`), the files of attempts not accepted left in place."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    hooks = fail_at(fault, keep_unaccepted=True)
    options = WriteOptions(op, ("uuid",), "ts", ("city",), True, conf=CONF, hooks=hooks, **extra)
    return write_dataframe(h.spark.createDataFrame(rows), h.location, options)


def _fares(table: Any) -> dict[str, float]:
    return {r["uuid"]: r["fare"] for r in table.select(["uuid", "fare"]).to_pylist()}


@pytest.mark.parametrize("point", POINTS)
def test_plain_upsert_with_a_retried_task(spark: Any, tmp_path: Path, point: str) -> None:
    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(12), ts=1))
    rows = trips(range(9), ts=2, fare_base=100)
    _write(h, "upsert", rows, f"{point}:1")
    h.model.upsert(rows)
    h.check()  # tidemark and Apache's reader both equal the model


@pytest.mark.parametrize("point", POINTS)
def test_expression_update_with_a_retried_task(spark: Any, tmp_path: Path, point: str) -> None:
    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(12), ts=1, fare_base=10))
    keys = [{"uuid": r["uuid"], "city": r["city"], "ts": r["ts"]} for r in trips(range(9), ts=1)]
    _write(h, "merge_update", keys, f"{point}:1", set_expressions={"fare": "fare * 2"})
    for row in h.model.rows.values():
        if int(row["uuid"][3:]) < 9:
            row["fare"] *= 2
    expected = {r["uuid"]: r["fare"] for r in h.model.sorted_rows()}
    reader = SnapshotReader(h.storage)
    assert _fares(reader.read()) == expected
    if point in ("between_blocks", "mid_block", "after_all_files"):
        # the failed attempt left whole blocks: without reconciliation they apply twice
        assert reader.stats.reconciled_blocks > 0
        doubled = _fares(read_snapshot(h.storage, reconcile=False))
        wrong = {k for k in expected if doubled[k] != expected[k]}
        assert wrong, "reading without reconciliation must show the doubled expression"
        assert all(doubled[k] == expected[k] * 2 for k in wrong)
        show = subprocess.run(
            [sys.executable, "-m", "tidemark.cli.main", "table", "show", h.location, "--log-blocks"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "SKIPPED: attempt 0 of" in show
        assert "attempt=1 seq=0" in show
    props = h.storage.read(".hoodie/hoodie.properties").decode()
    assert "tidemark.expression.blocks=true" in props
    # Apache's reader sees the values computed at write time; after compaction, the same as ours
    done = compact(h.storage)
    assert done is not None
    skipped = json.loads(instant_metadata(h.storage, done).extra_metadata[SKIPPED_BLOCKS_KEY])
    assert (skipped["reconciled"] > 0) == (point != "before_first_block")
    assert _fares(read_snapshot(h.storage)) == expected
    assert _fares(apache_snapshot(h.location)) == expected


def test_hudi_10803_two_complete_attempts_with_different_data(spark: Any, tmp_path: Path) -> None:
    """A speculative twin completes too, same number of blocks, other data: the seed's rule would
    keep the twin (the later attempt); the commit names the attempt whose status was accepted."""
    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(12), ts=1))
    rows = trips(range(9), ts=2, fare_base=100)
    _write(h, "upsert", rows, "speculative_copy")
    h.model.upsert(rows)
    reader = SnapshotReader(h.storage)
    assert data_rows(reader.read(), "uuid", "city") == h.model.sorted_rows()
    assert reader.stats.reconciled_blocks > 0
    assert any(f >= 1000 for f in _fares(read_snapshot(h.storage, reconcile=False)).values()), "the twin's data exists"


def test_apache_reader_sees_only_the_committed_attempt(spark: Any, tmp_path: Path) -> None:
    """By default the commit deletes the files of attempts it did not accept: Apache's reader,
    which knows nothing of block identifiers, sees neither duplicates nor the twin's data."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("upsert", trips(range(12), ts=1))
    rows = trips(range(9), ts=2, fare_base=100)
    options = WriteOptions("upsert", ("uuid",), "ts", ("city",), True, conf=CONF, hooks=fail_at("speculative_copy"))
    result = write_dataframe(spark.createDataFrame(rows), h.location, options)
    assert result.removed_files
    h.model.upsert(rows)
    h.check()
