"""A table larger than the Spark driver's heap is read, upserted and compacted: the CI-sized run
of ``benchmarks/bench_spark_scale.py`` (``make bench`` runs it at 20M rows, 1 GiB). The run is a
process of its own, whose driver gets a 512 MiB heap; it checks each answer itself (the count,
a column's sum against Spark's own Parquet scan, the updated rows after the upsert and after the
compaction) and reports what failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ROWS = 3_000_000  # about 600 MiB as Arrow in memory


def test_a_table_larger_than_the_driver_heap(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "benchmarks.bench_spark_scale", "--rows", str(ROWS), "--driver-memory", "512m"]
    # the JVM's own compilers, as in production (tests/conftest.py gives the small tests' JVMs C1 only)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    done = subprocess.run(
        [*command, "--output", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    details = json.loads(out.read_text())["results"][0]["details"]
    assert details["failed"] == "", details["failed"]  # the upsert and the compaction succeeded
    assert details["table_mb_in_memory"] > 512, details  # larger than the driver's heap
    for step in ("read_s", "upsert_s", "merged_read_s", "compact_s"):
        assert details[step] > 0, (step, details)
