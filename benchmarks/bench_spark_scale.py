"""A table larger than the Spark driver's heap: read, upserted and compacted on Spark.

Run ``python -m benchmarks.bench_spark_scale`` (20M rows, about 3.5 GiB in memory, with a 1 GiB
driver; ``--quick`` for 2M rows). The work runs in a child process whose Spark driver gets
``--driver-memory``; it reports:

1. read     ``spark.read.format("tidemark")`` count and sum of a column, against Spark's own
            Parquet scan of the same base files (no merge). Reported.
2. upsert   An upsert of 1% of the keys (``write_dataframe``), then the read again (the updates in
            the logs), against the same Parquet scan. Reported.
3. compact  Compaction on Spark of that table, against the first read. Reported.
4. memory   Peak resident memory of the driver's Python process and of its JVM (the executors'
            too, in local mode), beside the table's size in memory. Goal: the JVM's peak below
            the table's size (the driver never holds the rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_table import _frame
from benchmarks.common import DATA_DIR, Result, print_table, write_json


@dataclass(frozen=True)
class Config:
    rows: int
    driver_memory: str
    quick: bool


def _peak_mb(pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _child(rows: int, folder: Path) -> dict[str, Any]:
    """The measured work, in the process whose Spark driver has the small heap."""
    from pyspark.sql import functions as F

    from tidemark.spark.compaction_job import compact_on_spark
    from tidemark.spark.datasource import register
    from tidemark.spark.session import local_session
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    spark = local_session("local[2]", "tidemark-bench-scale")
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    table = str(folder / "table")
    options = WriteOptions("bulk_insert", ("uuid",), "ts", ("city",), hive_style=True)
    started = time.perf_counter()
    write_dataframe(_frame(spark, 0, rows, 1), table, options)
    setup_s = time.perf_counter() - started
    sample = spark.read.format("tidemark").load(table).limit(100_000).toArrow()
    bytes_per_row = sample.nbytes / max(1, sample.num_rows)
    base_files = sorted(str(p) for p in Path(table).rglob("*.parquet"))

    def aggregate(df: Any) -> tuple[float, int, float, int]:
        t = time.perf_counter()
        row = df.agg(F.count("*").alias("n"), F.sum("fare").alias("fare"), F.sum("ts").alias("ts")).collect()[0]
        return time.perf_counter() - t, int(row["n"]), float(row["fare"]), int(row["ts"])

    parquet_s, n_parquet, fare_parquet, _ = aggregate(spark.read.parquet(*base_files))
    read_s, n_read, fare_read, _ = aggregate(spark.read.format("tidemark").load(table))
    assert n_read == n_parquet == rows, (n_read, n_parquet, rows)
    assert abs(fare_read - fare_parquet) < 1e-6 * max(1.0, abs(fare_parquet)), (fare_read, fare_parquet)

    updates = max(1, rows // 100)
    upsert_s = merged_s = compact_s = float("nan")
    failed = ""
    try:
        upsert = WriteOptions("upsert", ("uuid",), "ts", ("city",), hive_style=True)
        t = time.perf_counter()
        write_dataframe(_frame(spark, rows - updates, updates, 2), table, upsert)
        upsert_s = time.perf_counter() - t
        merged_s, n_merged, _, ts_merged = aggregate(spark.read.format("tidemark").load(table))
        assert n_merged == rows, (n_merged, rows)
        assert ts_merged == rows + updates, (ts_merged, rows + updates)  # every updated row has ts 2
        t = time.perf_counter()
        assert compact_on_spark(spark, table) is not None
        compact_s = time.perf_counter() - t
        _, n_compacted, _, ts_compacted = aggregate(spark.read.format("tidemark").load(table))
        assert (n_compacted, ts_compacted) == (rows, rows + updates)
    except Exception as e:  # the figures so far are still reported, with what failed
        failed = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        if "OutOfMemoryError" in str(e):
            failed += " (java.lang.OutOfMemoryError: the driver's heap)"

    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    report = {
        "setup_s": setup_s,
        "parquet_s": parquet_s,
        "read_s": read_s,
        "upsert_s": upsert_s,
        "merged_read_s": merged_s,
        "compact_s": compact_s,
        "table_mb_in_memory": bytes_per_row * rows / 2**20,
        "table_mb_on_disk": sum(p.stat().st_size for p in Path(table).rglob("*") if p.is_file()) / 2**20,
        "driver_python_peak_mb": _peak_mb("self"),
        "driver_jvm_peak_mb": _peak_mb(jvm_pid),
        "updates": updates,
        "failed": failed,
    }
    spark.stop()
    return report


def bench(cfg: Config) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-scale-") as tmp:
        env = {**os.environ, "TIDEMARK_SPARK_DRIVER_MEMORY": cfg.driver_memory}
        out = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "benchmarks.bench_spark_scale", "--child", str(cfg.rows), tmp, str(out)]
        subprocess.run(command, env=env, check=True)
        r = json.loads(out.read_text())
    memory_mb = r["table_mb_in_memory"]
    details = {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}
    if r["failed"]:
        print(f"the upsert or the compaction failed: {r['failed']}", flush=True)
    return [
        Result(
            name="1. read (count, sum) on Spark",
            goal_text="reported",
            tidemark_label=f'spark.read.format("tidemark"), {cfg.rows:,} rows, driver {cfg.driver_memory}',
            tidemark_value=r["read_s"],
            anchor_label="spark.read.parquet of the base files",
            anchor_value=r["parquet_s"],
            unit="s",
            ratio=r["read_s"] / r["parquet_s"],
            goal=float("inf"),
            lower_is_better=True,
            details=details,
        ),
        Result(
            name="2. read after an upsert of 1% (logs)",
            goal_text="reported",
            tidemark_label=f"the same read, {r['updates']:,} updates in the logs",
            tidemark_value=r["merged_read_s"],
            anchor_label="spark.read.parquet of the base files",
            anchor_value=r["parquet_s"],
            unit="s",
            ratio=r["merged_read_s"] / r["parquet_s"],
            goal=float("inf"),
            lower_is_better=True,
            details={"upsert_s": round(r["upsert_s"], 2), "failed": r["failed"]},
        ),
        Result(
            name="3. compaction on Spark",
            goal_text="reported",
            tidemark_label="compact_on_spark",
            tidemark_value=r["compact_s"],
            anchor_label="the first read",
            anchor_value=r["read_s"],
            unit="s",
            ratio=r["compact_s"] / r["read_s"],
            goal=float("inf"),
            lower_is_better=True,
        ),
        Result(
            name="4. driver JVM peak RSS / table in memory",
            goal_text="ratio < 1.0",
            tidemark_label="JVM VmHWM (MB; Python driver: " + f"{r['driver_python_peak_mb']:.0f} MB)",
            tidemark_value=r["driver_jvm_peak_mb"],
            anchor_label="the table's Arrow size in memory (MB)",
            anchor_value=memory_mb,
            unit="MB",
            ratio=r["driver_jvm_peak_mb"] / memory_mb,
            goal=1.0,
            lower_is_better=True,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        rows, folder, out = int(argv[1]), Path(argv[2]), Path(argv[3])
        out.write_text(json.dumps(_child(rows, folder)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2M rows instead of 20M")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-spark-scale.json")
    args = parser.parse_args(argv)
    rows = args.rows or (2_000_000 if args.quick else 20_000_000)
    cfg = Config(rows=rows, driver_memory=args.driver_memory, quick=args.quick)
    print(f"tidemark Spark scale benchmark: {rows:,} rows, driver memory {cfg.driver_memory}", flush=True)
    started = time.perf_counter()
    results = bench(cfg)
    print()
    print_table(results)
    for r in results:
        if r.details:
            print(f"  {r.name}: {r.details}")
    import pyspark

    write_json("spark-scale", results, asdict(cfg), {"pyspark": pyspark.__version__}, args.output)
    print(f"\nresults written to {args.output} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
