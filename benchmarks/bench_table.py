"""Table benchmarks: the Spark upsert and the snapshot read, each beside an anchor in the same run.

Run ``python -m benchmarks.bench_table`` (``--quick`` for a 10x smaller smoke run).

1. upsert  Upsert of N records (1M; 10% updates of existing keys, 90% new) into a partitioned
           Merge-On-Read table on ``local[2]``, against a plain Spark Parquet write of the same
           cached DataFrame. Goal: tidemark time / anchor time <= 3.0.
1b. The same upsert with Parquet log blocks; 1d. with the bloom filter left out of the base
           files (``hoodie.parquet.bloom.filter.enabled=false``): what the filter costs.
1c. floor The same rows shuffled to the write's 8 tasks and handed to Python through Arrow,
           nothing written: what the Python-task design costs before any Hudi work. Reported.
2. read    Snapshot read of that table after the upsert (updates still in the logs), tidemark's
           reader against Apache's ``hudi`` package (hudi-rs) reading the same table.
           Goal: tidemark time / hudi time <= 1.0.
3. spark   The same read through the ``tidemark`` Spark source (tasks on executors), against
           Spark's own Parquet scan of the table's base files. Reported.
4. cow     The same upsert into a Copy-On-Write table of N records in 12 file groups (4 per
           partition): the updates touch every file group, so every base file is rewritten, and
           the new records fill those small files (Hudi's small-file handling). Anchor: the same
           plain Spark Parquet write. Goal: tidemark time / anchor time <= 3.0.
5. compact Compaction of the MOR table after the upsert on Spark, against the single-process
           compaction of the same table. Reported.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.common import DATA_DIR, Result, best_of_alternating, print_table, ratio_text, write_json

CITIES = ("chennai", "san_francisco", "sao_paulo")


@dataclass(frozen=True)
class Config:
    records: int
    update_fraction: float
    reps: int
    quick: bool


def _frame(spark: Any, start: int, count: int, ts: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(start, start + count).select(
        F.format_string("id-%09d", F.col("id")).alias("uuid"),
        F.lit(ts).cast("long").alias("ts"),
        F.format_string("rider-%05d", F.col("id") % 10000).alias("rider"),
        (F.col("id") % 997 / 10.0 + ts).alias("fare"),
        F.element_at(F.array(*[F.lit(c) for c in CITIES]), (F.col("id") % 3 + 1).cast("int")).alias("city"),
    )


def bench(cfg: Config, tmp: Path) -> list[Result]:
    from tidemark.spark.session import local_session
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    spark = local_session("local[2]", "tidemark-bench")
    spark.sparkContext.setLogLevel("ERROR")
    n = cfg.records
    n_updates = int(n * cfg.update_fraction)
    pristine = tmp / "pristine"
    options = WriteOptions("bulk_insert", ("uuid",), "ts", ("city",), hive_style=True)
    print(f"  setting up: bulk_insert of {n:,} records", flush=True)
    write_dataframe(_frame(spark, 0, n, 1), str(pristine), options)
    # the upsert: the last n_updates existing keys change, the rest are new
    batch = _frame(spark, n - n_updates, n, 2).cache()
    assert batch.count() == n
    table = tmp / "table"
    upsert = WriteOptions("upsert", ("uuid",), "ts", ("city",), hive_style=True)

    def reset() -> None:
        shutil.rmtree(table, ignore_errors=True)
        shutil.copytree(pristine, table)

    def spark_parquet() -> int:
        batch.write.mode("overwrite").parquet(str(tmp / "plain"))
        return n

    def upsert_figure(name: str, label: str, conf: dict[str, str]) -> Result:
        options = WriteOptions("upsert", ("uuid",), "ts", ("city",), hive_style=True, conf=conf)

        def tidemark_upsert() -> int:
            result = write_dataframe(batch, str(table), options)
            return result.inserts + result.updates

        reset()
        upsert_t, upsert_a, written, _ = best_of_alternating(tidemark_upsert, spark_parquet, cfg.reps, after=reset)
        assert written == n, written
        return Result(
            name=name,
            goal_text="ratio <= 3.0",
            tidemark_label=label,
            tidemark_value=upsert_t,
            anchor_label="df.write.parquet of the same cached DataFrame",
            anchor_value=upsert_a,
            unit="s",
            ratio=upsert_t / upsert_a,
            goal=3.0,
            lower_is_better=True,
            details={"records": n, "updates": n_updates, "existing_records": n, **conf},
        )

    parquet_blocks_conf = {"hoodie.logfile.data.block.format": "parquet"}
    parquet_blocks = WriteOptions("upsert", ("uuid",), "ts", ("city",), hive_style=True, conf=parquet_blocks_conf)
    results = [
        upsert_figure("1. upsert (10% updates)", "write_dataframe(upsert) on local[2]", {}),
        upsert_figure(
            "1b. upsert, Parquet log blocks",
            "write_dataframe(upsert), hoodie.logfile.data.block.format=parquet",
            parquet_blocks_conf,
        ),
        upsert_figure(
            "1d. upsert, no bloom filter",
            "write_dataframe(upsert), hoodie.parquet.bloom.filter.enabled=false",
            {"hoodie.parquet.bloom.filter.enabled": "false"},
        ),
    ]

    # what the Python-task design costs before any Hudi work: the same rows shuffled to the write's
    # eight tasks and handed to Python through Arrow (nothing written)
    def shuffle_to_python() -> int:
        counted = batch.repartition(8, "uuid").mapInArrow(_count_rows, "rows long").collect()
        return sum(r.rows for r in counted)

    floor_t, floor_a, moved, _ = best_of_alternating(shuffle_to_python, spark_parquet, cfg.reps)
    assert moved == n, moved
    results.append(
        Result(
            name="1c. floor: shuffle + Arrow to Python",
            goal_text="reported",
            tidemark_label="the same rows repartitioned to 8 tasks and read by mapInArrow (no write)",
            tidemark_value=floor_t,
            anchor_label="df.write.parquet of the same cached DataFrame",
            anchor_value=floor_a,
            unit="s",
            ratio=floor_t / floor_a,
            goal=float("inf"),
            lower_is_better=True,
            details={"records": n},
        )
    )

    # the table as the read benchmark sees it: after one upsert, before compaction
    reset()
    write_dataframe(batch, str(table), upsert)
    table_pq = tmp / "table-parquet-blocks"
    shutil.rmtree(table_pq, ignore_errors=True)
    shutil.copytree(pristine, table_pq)
    write_dataframe(batch, str(table_pq), parquet_blocks)
    spark_read = _spark_read(spark, table, n + (n - n_updates), cfg.reps)
    spark_compaction = _spark_compaction(spark, table, tmp, cfg.reps)
    cow_upsert = _cow_upsert(spark, tmp, batch, n, n_updates, cfg.reps, spark_parquet)
    spark.stop()
    expected = n + (n - n_updates)
    details = {"rows": expected, "updates_in_logs": n_updates}
    results.append(
        _snapshot_read(
            table, expected, cfg.reps, "2. snapshot read (logs not compacted)", "read_snapshot (pyarrow)", details
        )
    )
    results.append(
        _snapshot_read(
            table_pq,
            expected,
            cfg.reps,
            "2b. snapshot read, Parquet log blocks",
            "read_snapshot (pyarrow), the upsert's logs as Parquet blocks",
            details,
        )
    )
    results.append(_small_commits_read(tmp, cfg))
    results.append(spark_read)
    results.append(cow_upsert)
    results.append(spark_compaction)
    return results


def _count_rows(batches: Any) -> Any:
    yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in batches)]})


def _snapshot_read(table: Path, expected: int, reps: int, name: str, label: str, details: dict[str, Any]) -> Result:
    """``read_snapshot`` of ``table`` against Apache's hudi-rs reading it."""
    import hudi

    from tidemark.storage import LocalStorage
    from tidemark.table.snapshot import read_snapshot

    def tidemark_read() -> int:
        return int(read_snapshot(LocalStorage(table)).num_rows)

    def hudi_read() -> int:
        batches = hudi.HudiTableBuilder.from_base_uri(str(table)).build().read()
        return int(pa.Table.from_batches(batches).num_rows)

    read_t, read_a, rows_t, rows_a = best_of_alternating(tidemark_read, hudi_read, reps)
    assert rows_t == rows_a == expected, (rows_t, rows_a, expected)
    return Result(
        name=name,
        goal_text="ratio <= 1.0",
        tidemark_label=label,
        tidemark_value=read_t,
        anchor_label="hudi 0.5 (hudi-rs) HudiTable.read()",
        anchor_value=read_a,
        unit="s",
        ratio=read_t / read_a,
        goal=1.0,
        lower_is_better=True,
        details=details,
    )


def _small_commits_read(tmp: Path, cfg: Config) -> Result:
    """``read_snapshot`` of a file group whose updates came in many small commits (a streaming
    writer's), each its own log block, against hudi-rs. Written through the write client (the
    same files as the Spark job's tasks write), without Spark."""
    import uuid

    from tidemark.storage import LocalStorage
    from tidemark.table.avro_schema import avro_schema_json
    from tidemark.table.write_client import commit_write, create_table, start_write
    from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
    from tidemark.timeline import DELTA_COMMIT

    rows, commits, per_commit = (2_000, 50, 40) if cfg.quick else (20_000, 500, 40)
    table = tmp / "small-commits"
    storage = LocalStorage(table)

    def batch(start: int, count: int, ts: int) -> pa.Table:
        keys = [f"id-{i:09d}" for i in range(start, start + count)]
        return pa.table(
            {
                "uuid": keys,
                "ts": pa.array([ts] * count, pa.int64()),
                "rider": [f"rider-{i % 10000:05d}" for i in range(start, start + count)],
                "fare": pa.array([ts + i % 997 / 10.0 for i in range(start, start + count)], pa.float64()),
                "city": ["chennai"] * count,
            }
        )

    schema = avro_schema_json(batch(0, 1, 1).schema, "trips")
    create_table(storage, "trips", ["uuid"], "ts", ["city"], True)
    file_id = f"{uuid.uuid4()}-0"
    first = start_write(storage, DELTA_COMMIT, "insert")
    base = batch(0, rows, 1)
    stat = create_base_file(
        storage, TaskContext(first.timestamp, 0, 1, 0), "city=chennai", file_id, base, base["uuid"], schema
    )
    commit_write(storage, first, [stat], "insert", schema)
    for c in range(commits):
        pending = start_write(storage, DELTA_COMMIT, "upsert")
        update = batch(c * per_commit % rows, per_commit, c + 2)
        stat = append_log_blocks(
            storage,
            TaskContext(pending.timestamp, 0, 1, 0),
            "city=chennai",
            file_id,
            first.timestamp,
            None,
            update,
            update["uuid"],
            [],
            schema,
        )
        commit_write(storage, pending, [stat], "upsert", schema)
    details = {"rows": rows, "commits_in_logs": commits, "records_per_commit": per_commit}
    return _snapshot_read(
        table,
        rows,
        cfg.reps,
        "2c. snapshot read, many small commits in the logs",
        f"read_snapshot (pyarrow), {commits} log blocks of {per_commit} records",
        details,
    )


def _spark_compaction(spark: Any, table: Path, tmp: Path, reps: int) -> Result:
    """Compaction of the upserted table on Spark (one task per file slice) against the
    single-process compaction of the same table (the same merge code)."""
    from tidemark.spark.compaction_job import compact_on_spark
    from tidemark.storage import LocalStorage
    from tidemark.table.compaction import compact

    local_copy, spark_copy = tmp / "compact-local", tmp / "compact-spark"

    def reset() -> None:
        for copy in (local_copy, spark_copy):
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(table, copy)

    def on_spark() -> int:
        assert compact_on_spark(spark, str(spark_copy)) is not None
        return 1

    def in_process() -> int:
        assert compact(LocalStorage(local_copy)) is not None
        return 1

    reset()
    spark_t, local_t, _, _ = best_of_alternating(on_spark, in_process, reps, after=reset)
    return Result(
        name="5. compaction on Spark (logs of the upsert)",
        goal_text="reported",
        tidemark_label="compact_on_spark on local[2]",
        tidemark_value=spark_t,
        anchor_label="compact() in one process",
        anchor_value=local_t,
        unit="s",
        ratio=spark_t / local_t,
        goal=float("inf"),
        lower_is_better=True,
        details={"log_files": sum(1 for _ in table.rglob(".*.log.*"))},
    )


def _cow_upsert(spark: Any, tmp: Path, batch: Any, n: int, n_updates: int, reps: int, anchor: Any) -> Result:
    """4. The upsert into a Copy-On-Write table whose 12 file groups all take updates."""
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    groups = 12  # 4 per partition: the updates, spread by key hash, touch every one
    pristine, table = tmp / "pristine-cow", tmp / "table-cow"
    setup = WriteOptions(
        "bulk_insert", ("uuid",), "ts", ("city",), hive_style=True, table_type="COPY_ON_WRITE",
        conf={
            "hoodie.copyonwrite.insert.auto.split": "false",  # the split size, not max.file.size
            "hoodie.copyonwrite.insert.split.size": str(-(-n // groups)),
        },
    )  # fmt: skip
    print(f"  setting up: bulk_insert of {n:,} records into a COPY_ON_WRITE table", flush=True)
    write_dataframe(_frame(spark, 0, n, 1), str(pristine), setup)
    upsert = WriteOptions("upsert")

    def reset() -> None:
        shutil.rmtree(table, ignore_errors=True)
        shutil.copytree(pristine, table)

    def cow() -> int:
        result = write_dataframe(batch, str(table), upsert)
        assert result.files_written >= groups, result  # every file group rewritten
        return result.inserts + result.updates

    reset()
    cow_t, anchor_t, written, _ = best_of_alternating(cow, anchor, reps, after=reset)
    assert written == n, written
    return Result(
        name="4. COW upsert (10% updates, every file group)",
        goal_text="ratio <= 3.0",
        tidemark_label="write_dataframe(upsert) into a COPY_ON_WRITE table on local[2]",
        tidemark_value=cow_t,
        anchor_label="df.write.parquet of the same cached DataFrame",
        anchor_value=anchor_t,
        unit="s",
        ratio=cow_t / anchor_t,
        goal=3.0,
        lower_is_better=True,
        details={"records": n, "updates": n_updates, "existing_records": n, "file_groups": groups},
    )


def _spark_read(spark: Any, table: Path, expected: int, reps: int) -> Result:
    """3. The ``tidemark`` Spark source reading every row (Spark's ``noop`` sink) against Spark's
    own Parquet scan of the same table's base files (no merging: the floor of any reader)."""
    from tidemark.spark.datasource import register

    register(spark)
    base_files = sorted(str(p) for p in table.rglob("*.parquet"))

    def source_read() -> int:
        df = spark.read.format("tidemark").load(str(table))
        df.write.format("noop").mode("overwrite").save()
        return expected

    def parquet_read() -> int:
        spark.read.parquet(*base_files).write.format("noop").mode("overwrite").save()
        return expected

    counted = spark.read.format("tidemark").load(str(table)).count()
    assert counted == expected, (counted, expected)
    source_t, parquet_t, _, _ = best_of_alternating(source_read, parquet_read, reps)
    return Result(
        name="3. snapshot read on Spark (logs not compacted)",
        goal_text="reported",
        tidemark_label='spark.read.format("tidemark") on local[2]',
        tidemark_value=source_t,
        anchor_label="spark.read.parquet of the base files (no merge)",
        anchor_value=parquet_t,
        unit="s",
        ratio=source_t / parquet_t,
        goal=float("inf"),
        lower_is_better=True,
        details={"rows": expected, "base_files": len(base_files)},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a 10x smaller smoke run")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per figure (the best is kept)")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-table.json")
    args = parser.parse_args(argv)
    cfg = Config(
        records=100_000 if args.quick else 1_000_000, update_fraction=0.1, reps=max(1, args.reps), quick=args.quick
    )
    print(f"tidemark table benchmarks: upsert of {cfg.records:,} records, best of {cfg.reps}", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-table-") as tmp:
        results = bench(cfg, Path(tmp))
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    print_table(results)
    import pyspark

    write_json("table", results, asdict(cfg), {"pyspark": pyspark.__version__}, args.output)
    print(f"\nresults written to {args.output} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
