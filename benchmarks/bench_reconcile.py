"""Reconciliation benchmarks (HUDI-6758), each beside an anchor measured in the same run.

Run ``python -m benchmarks.bench_reconcile`` (``--quick`` for a ~10x smaller smoke run).

1. pass   The reconciliation pass (header-only read + ``reconcile``) over one file slice of 1 GiB
          in 10,000 Avro data blocks written by 3 task attempts, against a full read of the same
          slice: (a) every block's content read, (b) every block's records decoded, which is
          what a reader without the header pass would do. Goal: pass / full read <= 0.02.
2. read   Snapshot read of a table written without any retries, reconciliation on against off.
          Goal: on / off <= 1.02.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import fastavro
import pyarrow as pa

from benchmarks.common import DATA_DIR, Result, best_of_alternating, print_table, ratio_text, write_json
from tidemark.logformat import BlockSpec, HeaderKey, LogFileReader, avro_data_block, list_log_files
from tidemark.reconcile import SlicedBlock, reconcile
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import avro_schema_json, plain_rows
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import commit_write, create_table, start_write
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import DELTA_COMMIT

FILE_ID = "7d4c1a2b-3e5f-4a6b-8c7d-9e0f1a2b3c4d-0"
BASE = "20250101000000000"
INSTANT = "20250101000000001"
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class Config:
    blocks: int
    records_per_block: int
    attempts: int
    table_rows: int
    table_updates: int
    reps: int
    quick: bool


def _trips(n: int, start: int = 0, ts: int = 1) -> pa.Table:
    return pa.table(
        {
            "uuid": [f"id-{i:09d}" for i in range(start, start + n)],
            "ts": pa.array([ts] * n, pa.int64()),
            "rider": [f"rider-{i % 5000:05d}" for i in range(start, start + n)],
            "driver": [f"driver-{i % 700:04d}" for i in range(start, start + n)],
            "fare": [round(i * 0.37 % 500, 2) for i in range(start, start + n)],
            "city": ["chennai"] * n,
        }
    )


def slice_dir(cfg: Config) -> Path:
    """A file slice of ``cfg.blocks`` blocks by ``cfg.attempts`` attempts (cached between runs):
    attempt a writes its share of blocks with sequences 0..n-1, rolling over every 256 blocks."""
    path = DATA_DIR / f"reconcile-v{GENERATOR_VERSION}-{cfg.blocks}x{cfg.records_per_block}-a{cfg.attempts}"
    if (path / "done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    rows = _trips(cfg.records_per_block)
    schema = avro_schema_json(rows.schema, "bench")
    # one block's content, reused: every block decodes the same records, only headers differ
    template = avro_data_block(plain_rows(rows), schema, INSTANT)
    shares = [cfg.blocks // cfg.attempts + (1 if a < cfg.blocks % cfg.attempts else 0) for a in range(cfg.attempts)]
    version = 1
    (path / "p").mkdir(parents=True)
    for attempt, share in enumerate(shares):
        for first in range(0, share, 256):
            name = f".{FILE_ID}_{BASE}.log.{version}_0-1-{attempt}"
            version += 1
            with open(path / "p" / name, "wb") as f:
                for seq in range(first, min(share, first + 256)):
                    headers = {**template.headers, HeaderKey.BLOCK_IDENTIFIER: f"{attempt},{seq}"}
                    f.write(BlockSpec(template.block_type, headers, template.content).encode())
    (path / "done").write_text("ok")
    return path


def bench_pass(cfg: Config) -> list[Result]:
    root = slice_dir(cfg)
    storage = LocalStorage(root)
    logs = [f"p/{n.name}" for n in list_log_files(storage, "p", FILE_ID, BASE)]

    def blocks() -> list[SlicedBlock]:
        out = []
        for path in logs:
            with storage.open_input(path) as source:
                out.extend(SlicedBlock(path, b) for b in LogFileReader(source).blocks())
        return out

    def reconciliation_pass() -> int:
        return len(reconcile(blocks()).kept)

    def full_read_bytes() -> int:
        n = 0
        for path in logs:
            with storage.open_input(path) as source:
                for b in LogFileReader(source).blocks():
                    n += len(b.content())
        return n

    def full_read_records() -> int:
        n = 0
        for path in logs:
            with storage.open_input(path) as source:
                for b in LogFileReader(source).blocks():
                    n += len(b.avro_records())
        return n

    kept = reconciliation_pass()
    expected = -(-cfg.blocks // cfg.attempts)  # the longest attempt's share
    assert kept == expected, (kept, expected)
    size = sum(storage.size(p) for p in logs)
    results = []
    for label, anchor, anchor_label in (
        ("1a. reconciliation pass vs reading all bytes", full_read_bytes, "full read: block.content() of every block"),
        (
            "1b. reconciliation pass vs decoding all records",
            full_read_records,
            "full read: avro_records() of every block",
        ),
    ):
        anchor()  # warm the page cache: both sides are measured warm
        p_sec, a_sec, _, _ = best_of_alternating(reconciliation_pass, anchor, cfg.reps)
        results.append(
            Result(
                name=label,
                goal_text="ratio <= 0.02",
                tidemark_label="header-only pass + reconcile()",
                tidemark_value=p_sec,
                anchor_label=anchor_label,
                anchor_value=a_sec,
                unit="s",
                ratio=p_sec / a_sec,
                goal=0.02,
                lower_is_better=True,
                details={"blocks": cfg.blocks, "attempts": cfg.attempts, "log_files": len(logs), "bytes": size},
            )
        )
    return results


def bench_read(cfg: Config, tmp: Path) -> Result:
    """A table written without retries: reconciliation has nothing to drop, only its cost shows."""
    storage = LocalStorage(tmp / "table")
    create_table(storage, "bench", ["uuid"], "ts", ["city"], True)
    base = _trips(cfg.table_rows)
    schema = avro_schema_json(base.schema, "bench")
    inflight = start_write(storage, DELTA_COMMIT, "bulk_insert")
    ctx = TaskContext(inflight.timestamp, 0, 1, 0)
    groups = 4
    per = cfg.table_rows // groups
    stats = []
    for g in range(groups):
        part = base.slice(g * per, per)
        stats.append(create_base_file(storage, ctx, "city=chennai", f"fg-{g}", part, part["uuid"], schema))
    commit_write(storage, inflight, stats, "bulk_insert", schema)
    base_instant = inflight.timestamp
    inflight = start_write(storage, DELTA_COMMIT, "upsert")
    ctx = TaskContext(inflight.timestamp, 0, 2, 0)
    stats = []
    per_update = cfg.table_updates // groups
    for g in range(groups):
        upd = _trips(per_update, g * per, ts=2)
        base_file = None
        stats.append(
            append_log_blocks(
                storage,
                ctx,
                "city=chennai",
                f"fg-{g}",
                base_instant,
                base_file,
                upd,
                upd["uuid"],
                [],
                schema,
                max_block_bytes=256 * 1024,
            )
        )
    commit_write(storage, inflight, stats, "upsert", schema)

    def on() -> int:
        return int(read_snapshot(storage, reconcile=True).num_rows)

    def off() -> int:
        return int(read_snapshot(storage, reconcile=False).num_rows)

    on_sec, off_sec, n_on, n_off = best_of_alternating(on, off, cfg.reps)
    assert n_on == n_off == cfg.table_rows
    return Result(
        name="2. snapshot read, no retries: reconciliation on vs off",
        goal_text="ratio <= 1.02",
        tidemark_label="read_snapshot(reconcile=True)",
        tidemark_value=on_sec,
        anchor_label="read_snapshot(reconcile=False)",
        anchor_value=off_sec,
        unit="s",
        ratio=on_sec / off_sec,
        goal=1.02,
        lower_is_better=True,
        details={"rows": cfg.table_rows, "updates_in_logs": cfg.table_updates},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-reconcile.json")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    cfg = Config(
        blocks=10_000 // scale,
        records_per_block=500,
        attempts=3,
        table_rows=400_000 // scale,
        table_updates=40_000 // scale,
        reps=max(1, args.reps),
        quick=args.quick,
    )
    print(f"tidemark reconciliation benchmarks: {cfg.blocks:,} blocks by {cfg.attempts} attempts", flush=True)
    results = bench_pass(cfg)
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-reconcile-") as tmp:
        results.append(bench_read(cfg, Path(tmp)))
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    print_table(results)
    write_json("reconcile", results, asdict(cfg), {"fastavro": fastavro.__version__}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
