"""Several writers on one table: what an early conflict check, optimistic concurrency at commit,
and the table lock cost.

1. An early conflict check (RFC-56, direct markers) of one file group against 100,000 live
   markers of 10 other writers, spread over 100 partitions (1a) and all in one partition (1b);
   anchor: listing every marker folder once, what a check that lists all markers would pay.
2. A Spark upsert as a user runs it (2a), and one small commit through the library without Spark
   (2b: begin, append a log block, commit), with optimistic concurrency control against the same
   in single-writer mode.
3. The table lock taken and released, uncontended, on local storage and on a moto S3 server over
   HTTP; anchor: one write of the same small file.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from benchmarks.common import DATA_DIR, Result, percentile, print_table, ratio_text, start_moto, write_json
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.concurrency import SINGLE_WRITER, ConcurrencyConfig
from tidemark.table.conflict import EarlyConflictDetector, WriteStart, file_group
from tidemark.table.lock import TableLock
from tidemark.table.markers import TEMP_FOLDER
from tidemark.table.write_client import begin_write, create_table
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import DELTA_COMMIT, load_timeline

#: RFC-56's own measurement of an early check that lists markers: 1,500 markers in 20 files
RFC_56_MS = 179.0
LIVE = ConcurrencyConfig(heartbeat_interval_ms=3_600_000)


@dataclass(frozen=True)
class Config:
    markers: int
    writers: int
    partitions: int
    checks: int
    upserts: int
    spark_upserts: int
    lock_rounds_local: int
    lock_rounds_s3: int
    quick: bool


# --- 1. early conflict check ---------------------------------------------------------------------


def _marker_table(root: Path, cfg: Config, partitions: int) -> tuple[LocalStorage, WriteStart]:
    """A table with ``cfg.writers`` live pending writes holding ``cfg.markers`` markers in total,
    and a later write that checks one of its file groups against them."""
    storage = LocalStorage(root)
    create_table(storage, "bench", ["id"], None, ["p"], True)
    writers = []
    for _ in range(cfg.writers):
        w = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
        w.heartbeat.stop(delete=False)  # the file stays fresh for an hour: a live writer
        writers.append(w.instant)
    per_writer = cfg.markers // cfg.writers
    for n, instant in enumerate(writers):
        for i in range(per_writer):
            partition = f"p={i % partitions}"
            folder = root / TEMP_FOLDER / instant / partition
            if i < partitions:
                folder.mkdir(parents=True, exist_ok=True)
            file_id = f"{n:04d}{i:08d}-aaaa-bbbb-cccc-dddddddddddd-0"
            name = (
                f".{file_id}_{instant}.log.1_0-1-0.marker.APPEND"
                if i % 2
                else f"{file_id}_0-1-0_{instant}.parquet.marker.CREATE"
            )
            (folder / name).touch()
    checker = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
    checker.heartbeat.stop()
    return storage, checker.start


def bench_early_check(cfg: Config, work: Path, partitions: int, label: str) -> Result:
    storage, start = _marker_table(work / f"markers-{partitions}", cfg, partitions)
    config = ConcurrencyConfig(heartbeat_interval_ms=3_600_000, early_detection=True)
    group = [file_group("p=0", "ffffffff-aaaa-bbbb-cccc-dddddddddddd-0")]  # nobody else's: it looks everywhere
    check_times: list[float] = []
    list_times: list[float] = []
    for _ in range(cfg.checks):
        detector = EarlyConflictDetector(storage, config, start)  # a new task: nothing cached
        t0 = time.perf_counter()
        detector.check(group)
        check_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        listed = sum(1 for _ in storage.list(f"{TEMP_FOLDER}/"))
        list_times.append(time.perf_counter() - t0)
    assert listed == cfg.markers - cfg.markers % cfg.writers, listed
    p50, p99 = statistics.median(check_times), percentile(check_times, 0.99)
    anchor = statistics.median(list_times)
    return Result(
        f"1{label}. early check, {listed:,} live markers in {partitions} partition(s), p99",
        "p99 <= 50 ms",
        "one check of one file group (p99)",
        p99,
        "list every marker folder once (p50)",
        anchor,
        "s",
        p99 / anchor,
        0.050 / anchor,
        {"p50_s": p50, "p99_s": p99, "list_p50_s": anchor, "rfc56_anchor_ms_for_1500_markers": RFC_56_MS},
        lower_is_better=True,
    )


# --- 2. multi-writer overhead on one upsert ------------------------------------------------------


def bench_upsert_overhead(cfg: Config, work: Path) -> Result:
    root = work / "upserts"
    storage = LocalStorage(root)
    create_table(storage, "bench", ["id"], "ts", ["p"], True)
    rows = pa.table({"id": [f"k{i}" for i in range(100)], "ts": [1] * 100, "v": list(range(100)), "p": ["1"] * 100})
    schema = avro_schema_json(rows.schema, "bench")
    setup = begin_write(storage, DELTA_COMMIT, "insert", LIVE)
    stat = create_base_file(storage, TaskContext(setup.instant, 0, 1, 0), "p=1", "fg-1", rows, rows["id"], schema)
    setup.commit([stat], "insert", schema)
    base = setup.instant
    occ, single = ConcurrencyConfig(), ConcurrencyConfig(mode=SINGLE_WRITER)

    def upsert(config: ConcurrencyConfig) -> Callable[[], int]:
        def run() -> int:
            w = begin_write(storage, DELTA_COMMIT, "upsert", config)
            s = append_log_blocks(
                storage, TaskContext(w.instant, 0, 2, 0), "p=1", "fg-1", base, None, rows, rows["id"], [], schema
            )
            w.commit([s], "upsert", schema)
            return 1

        return run

    occ_times: list[float] = []
    single_times: list[float] = []
    for _ in range(cfg.upserts):  # alternating, so a burst of noise hits both
        for config, times in ((occ, occ_times), (single, single_times)):
            t0 = time.perf_counter()
            upsert(config)()
            times.append(time.perf_counter() - t0)
    assert len(load_timeline(storage).completed()) == 1 + 2 * cfg.upserts
    t, a = statistics.median(occ_times), statistics.median(single_times)
    return Result(
        "2b. one commit of 100 rows (library, no Spark), optimistic concurrency vs single writer",
        "report",
        "OPTIMISTIC_CONCURRENCY_CONTROL (p50)",
        t,
        "SINGLE_WRITER (p50)",
        a,
        "s",
        t / a,
        float("inf"),
        {"occ_p50_s": t, "single_p50_s": a, "runs": cfg.upserts, "added_ms": (t - a) * 1000},
        lower_is_better=True,
    )


def bench_spark_upsert_overhead(cfg: Config, work: Path) -> Result:
    """The same, as a user runs it: a Spark upsert of 1,000 rows into a 20,000-row table."""
    from tidemark.spark.session import local_session
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    spark = local_session("local[2]", app_name="tidemark-bench")
    spark.sparkContext.setLogLevel("ERROR")
    location = str(work / "spark-upserts")
    rows = [{"id": f"k{i:05d}", "ts": 1, "v": i, "p": str(i % 4)} for i in range(20_000)]
    base = WriteOptions("insert", ("id",), "ts", ("p",), True)
    write_dataframe(spark.createDataFrame(rows), location, base)

    def upsert(mode: str, value: int) -> float:
        batch = [{**r, "ts": value, "v": value} for r in rows[:: len(rows) // 1_000]]
        options = WriteOptions("upsert", ("id",), "ts", ("p",), True, conf={"hoodie.write.concurrency.mode": mode})
        df = spark.createDataFrame(batch)
        t0 = time.perf_counter()
        write_dataframe(df, location, options)
        return time.perf_counter() - t0

    occ_times: list[float] = []
    single_times: list[float] = []
    upsert("SINGLE_WRITER", 2)  # warm the JVM and the Python workers
    for i in range(cfg.spark_upserts):
        occ_times.append(upsert("OPTIMISTIC_CONCURRENCY_CONTROL", 10 + 2 * i))
        single_times.append(upsert("SINGLE_WRITER", 11 + 2 * i))
    spark.stop()
    t, a = statistics.median(occ_times), statistics.median(single_times)
    return Result(
        "2a. Spark upsert (1,000 of 20,000 rows, local[2]), optimistic concurrency vs single writer",
        "<= 1.05x",
        "OPTIMISTIC_CONCURRENCY_CONTROL (p50)",
        t,
        "SINGLE_WRITER (p50)",
        a,
        "s",
        t / a,
        1.05,
        {"occ_p50_s": t, "single_p50_s": a, "runs": cfg.spark_upserts},
        lower_is_better=True,
    )


# --- 3. the lock ----------------------------------------------------------------------------------


def bench_lock(storage: Storage, rounds: int, where: str) -> Result:
    lock_times: list[float] = []
    write_times: list[float] = []
    config = ConcurrencyConfig()
    TableLock(storage, config).acquire()  # the file exists from then on, as on any table in use
    storage.write(".hoodie/.locks/table_lock.json", b'{"owner": "bench", "fence": 1, "expiration_ms": 0}')
    for _ in range(rounds):
        lock = TableLock(storage, config)
        t0 = time.perf_counter()
        lock.acquire()
        lock.release()
        lock_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        storage.write(".hoodie/.locks/anchor.json", b'{"owner": "bench", "fence": 1, "expiration_ms": 0}')
        write_times.append(time.perf_counter() - t0)
    p50, p99 = statistics.median(lock_times), percentile(lock_times, 0.99)
    anchor = statistics.median(write_times)
    return Result(
        f"3. lock take + release, uncontended, {where}, p50",
        "report",
        "acquire + release (p50)",
        p50,
        "one write of the lock file's size (p50)",
        anchor,
        "s",
        p50 / anchor,
        float("inf"),
        {"p50_s": p50, "p99_s": p99, "write_p50_s": anchor, "rounds": rounds},
        lower_is_better=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-concurrency.json")
    args = parser.parse_args(argv)
    cfg = Config(
        markers=10_000 if args.quick else 100_000,
        writers=10,
        partitions=100,
        checks=20 if args.quick else 50,
        upserts=10 if args.quick else 40,
        spark_upserts=2 if args.quick else 5,
        lock_rounds_local=50 if args.quick else 200,
        lock_rounds_s3=20 if args.quick else 50,
        quick=args.quick,
    )
    print(f"tidemark concurrency benchmarks: {cfg.markers:,} markers of {cfg.writers} writers", flush=True)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-concurrency-"))
    try:
        results = [
            bench_early_check(cfg, work, cfg.partitions, "a"),
            bench_early_check(cfg, work, 1, "b"),
            bench_spark_upsert_overhead(cfg, work),
            bench_upsert_overhead(cfg, work),
            bench_lock(LocalStorage(work / "lock"), cfg.lock_rounds_local, "local"),
        ]
        import logging

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server, endpoint = start_moto()
        try:
            s3 = open_storage("s3://bench/t", S3Options(endpoint_url=endpoint, region="us-east-1"))
            results.append(bench_lock(s3, cfg.lock_rounds_s3, "moto S3"))
        finally:
            server.stop()  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    print_table(results)
    for r in results:
        if "p99_s" in r.details:
            print(f"{r.name}: p50 {r.details['p50_s'] * 1000:.2f} ms, p99 {r.details['p99_s'] * 1000:.2f} ms")
    write_json("concurrency", results, asdict(cfg), {}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
