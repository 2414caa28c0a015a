"""The table demo behind ``make demo``: a partitioned Merge-On-Read table written through local
Spark (inserts, upserts with an out-of-order update, deletes), compacted, cleaned and archived,
and read back by tidemark and by Apache's own reader (the ``hudi`` package) side by side.

Usage: python scripts/demo_table.py [OUTPUT_DIR]   (default: demo-output/table)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from tidemark.spark.session import local_session
from tidemark.spark.write_job import WriteOptions, write_dataframe
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import META_FIELDS
from tidemark.table.compaction import compact
from tidemark.table.snapshot import read_snapshot

TRIPS = [
    ("334e26e9", "rider-A", "driver-K", 19.10, "san_francisco"),
    ("e96c4396", "rider-C", "driver-M", 27.70, "san_francisco"),
    ("9909a8b1", "rider-D", "driver-L", 33.90, "san_francisco"),
    ("1dced545", "rider-E", "driver-O", 93.50, "san_francisco"),
    ("e3cf430c", "rider-F", "driver-P", 34.15, "sao_paulo"),
    ("7a84095f", "rider-G", "driver-Q", 43.40, "sao_paulo"),
    ("3eeb61f7", "rider-I", "driver-S", 41.06, "chennai"),
    ("c8abbe79", "rider-J", "driver-T", 17.85, "chennai"),
]


def rows(items: list[tuple[str, str, str, float, str]], ts: int) -> list[dict[str, Any]]:
    return [{"uuid": u, "ts": ts, "rider": r, "driver": d, "fare": f, "city": c} for u, r, d, f, c in items]


def show(title: str, table: pa.Table) -> None:
    data = [c for c in table.column_names if c not in META_FIELDS]
    lines = sorted(
        f"  {r['uuid']:<9} {r['rider']:<8} {r['driver']:<9} {r['fare']:>7.2f}  {r['city']}"
        for r in table.select(data).to_pylist()
    )
    print(f"{title} ({len(lines)} rows)")
    print("\n".join(lines))


def apache(path: Path) -> pa.Table:
    import hudi

    batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output/table").resolve()
    shutil.rmtree(out, ignore_errors=True)
    path = out / "trips"
    spark = local_session("local[2]", "tidemark-demo")
    spark.sparkContext.setLogLevel("ERROR")

    def write(op: str, data: list[dict[str, Any]]) -> None:
        options = WriteOptions(op, record_key=("uuid",), precombine="ts", partition_fields=("city",), hive_style=True)
        result = write_dataframe(spark.createDataFrame(data), str(path), options)
        print(
            f"   {op}: instant {result.instant}, {result.inserts} inserted, {result.updates} updated, "
            f"{result.deletes} deleted, {result.files_written} files"
        )

    step("1. Insert 8 trips into a new table partitioned by city (local Spark, local[2])")
    write("insert", rows(TRIPS, ts=1))
    step("2. Upsert: two fares change (ts=2), and a late update with an older ts=0 arrives for rider-I")
    write("upsert", rows([(*TRIPS[2][:3], 25.00, TRIPS[2][4]), (*TRIPS[4][:3], 39.90, TRIPS[4][4])], ts=2))
    write("upsert", rows([(*TRIPS[6][:3], 99.99, TRIPS[6][4])], ts=0))
    step("3. Delete rider-A and rider-J")
    write("delete", rows([TRIPS[0], TRIPS[7]], ts=3))
    storage = LocalStorage(path)
    show("\n   tidemark reads, before compaction", read_snapshot(storage))
    show("   Apache hudi (hudi-rs) reads, before compaction", apache(path))
    step("4. Compact: fold the log blocks into new base files")
    done = compact(storage)
    print(f"   compaction committed at {done.timestamp if done else '-'}")
    show("\n   tidemark reads, after compaction", read_snapshot(storage))
    show("   Apache hudi (hudi-rs) reads, after compaction", apache(path))
    step("5. The timeline and the files")
    cli = [sys.executable, "-m", "tidemark.cli.main"]
    subprocess.run([*cli, "timeline", str(path)], check=True)
    subprocess.run([*cli, "table", "show", str(path)], check=True)
    step("6. Another upsert and compaction: the first file slices are now history")
    write("upsert", rows([(*TRIPS[1][:3], 30.00, TRIPS[1][4]), (*TRIPS[5][:3], 45.00, TRIPS[5][4])], ts=4))
    again = compact(storage)
    print(f"   compaction committed at {again.timestamp if again else '-'}")
    spark.stop()
    step("7. Table services: clean (a dry run first), then archive, keeping one commit")
    small = ["--conf", "hoodie.cleaner.commits.retained=1"]
    small += ["--conf", "hoodie.keep.min.commits=1", "--conf", "hoodie.keep.max.commits=2"]
    subprocess.run([*cli, "clean", str(path), "--dry-run", *small], check=True)
    subprocess.run([*cli, "clean", str(path), *small], check=True)
    subprocess.run([*cli, "archive", str(path), *small], check=True)
    subprocess.run([*cli, "timeline", str(path), "--archived"], check=True)
    show("\n   tidemark reads, after clean and archive", read_snapshot(storage))
    show("   Apache hudi (hudi-rs) reads, after clean and archive", apache(path))


if __name__ == "__main__":
    main()
