"""Log format benchmarks: tidemark against an anchor measured in the same run.

Run ``python -m benchmarks.bench_logformat`` (``--quick`` for a ~10x smaller smoke run). The
machine running this may be noisy, so no figure is reported on its own: every tidemark figure is
set beside an anchor timed in the same process, the two are timed alternately, each is the best
(minimum) of several repetitions, and the comparison is the ratio of the two.

1. read   Full read of Avro data blocks (records/s) against ``fastavro.schemaless_reader`` over
          the same datums back to back in one buffer. Goal: ratio >= 0.8.
2. write  ``avro_data_block`` + ``LogWriter.append`` per batch (records/s) against
          ``fastavro.schemaless_writer`` of the same batches written to a local file.
          Goal: ratio >= 0.8.
3. header Header-only pass over a large log file against a full read of every block's content,
          both with the file in the page cache. Goal: full-read time / header-pass time >= 50.

Results are printed as a table and written as JSON (``--output``). The exit status is 0 whether or
not a goal is met: a benchmark reports, it does not fail.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa

from benchmarks.common import DATA_DIR, Result, best_of_alternating, print_table, ratio_text, write_json
from tidemark.logformat import BlockSpec, BlockType, HeaderKey, LogFileReader, LogWriter, avro_data_block
from tidemark.storage.local import LocalStorage

DEFAULT_OUTPUT = DATA_DIR / "results-logformat.json"

MiB = 1024 * 1024
GiB = 1024 * MiB

FILE_ID = "5f0c3b1e-8a7d-4c2e-9b61-2f4d7e9a0c13-0"
BASE_INSTANT = "20250101000000000"
INSTANT = "20250101000000001"
WRITE_TOKEN = "1-0-1"
PARTITION = "city=chennai"

#: Bump when the generated header-pass file changes, so stale cached files are not reused.
GENERATOR_VERSION = 1

_META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)

#: A Hudi-shaped trips table: the five nullable meta fields, then the data columns.
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "trips_record",
    "namespace": "hoodie.trips",
    "fields": [
        *({"name": name, "type": ["null", "string"], "default": None} for name in _META_FIELDS),
        {"name": "uuid", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "rider", "type": "string"},
        {"name": "driver", "type": "string"},
        {"name": "fare", "type": "double"},
        {"name": "distance_km", "type": ["null", "double"], "default": None},
        {"name": "trip_count", "type": "long"},
        {"name": "city", "type": ["null", "string"], "default": None},
    ],
}
SCHEMA_JSON = json.dumps(SCHEMA)
CITIES = ("chennai", "san_francisco", "sao_paulo", "amsterdam", None)


@dataclass(frozen=True)
class Config:
    records: int
    batch: int
    header_file_bytes: int
    min_block: int
    max_block: int
    reps: int
    quick: bool


# --- data --------------------------------------------------------------------------------------


def make_records(count: int, seed: int = 42) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    riders = [f"rider-{i:03d}" for i in range(500)]
    drivers = [f"driver-{i:03d}" for i in range(200)]
    records = []
    for i in range(count):
        city = CITIES[i % len(CITIES)]
        key = f"{rng.getrandbits(64):016x}-{i:08d}"
        records.append(
            {
                "_hoodie_commit_time": INSTANT,
                "_hoodie_commit_seqno": f"{INSTANT}_0_{i}",
                "_hoodie_record_key": key,
                "_hoodie_partition_path": f"city={city}" if city else None,
                "_hoodie_file_name": f"{FILE_ID}_{WRITE_TOKEN}_{BASE_INSTANT}.parquet",
                "uuid": key,
                "ts": 1_735_689_600_000 + i * 17,
                "rider": rng.choice(riders),
                "driver": rng.choice(drivers),
                "fare": round(rng.uniform(3.0, 120.0), 2),
                "distance_km": round(rng.uniform(0.2, 40.0), 3) if i % 7 else None,
                "trip_count": rng.randrange(1, 5000),
                "city": city,
            }
        )
    return records


def batches(records: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [records[i : i + size] for i in range(0, len(records), size)]


def encode_schemaless(records: list[dict[str, Any]], schema: Any) -> bytes:
    out = io.BytesIO()
    for record in records:
        fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()


# --- 1. full read ------------------------------------------------------------------------------


def _log_to_read(cfg: Config, records: list[dict[str, Any]], folder: Path) -> tuple[LocalStorage, str, Any, bytes]:
    """A log file of ``records`` in Avro blocks, and the anchor's input: the same records
    fastavro-encoded in one buffer (with the parsed schema)."""
    storage = LocalStorage(folder)
    writer = LogWriter(storage, PARTITION, FILE_ID, BASE_INSTANT, WRITE_TOKEN)
    path = writer.append([avro_data_block(b, SCHEMA_JSON, INSTANT) for b in batches(records, cfg.batch)]).path
    parsed = fastavro.parse_schema(SCHEMA)
    return storage, path, parsed, encode_schemaless(records, parsed)


def _fastavro_read(buffer: bytes, parsed: Any, count: int) -> int:
    """The anchor of the reads: ``count`` records decoded by fastavro from one buffer."""
    stream = io.BytesIO(buffer)
    read = fastavro.schemaless_reader
    for _ in range(count):
        read(stream, parsed, None)
    if stream.tell() != len(buffer):
        raise AssertionError("the anchor did not decode the whole buffer")
    return count


def bench_read(cfg: Config, records: list[dict[str, Any]], tmp: Path) -> Result:
    storage, path, parsed, buffer = _log_to_read(cfg, records, tmp / "read")
    file_size = storage.size(path)
    count = len(records)

    def tidemark() -> int:
        n = 0
        with storage.open_input(path) as source:
            for block in LogFileReader(source).blocks():
                n += len(block.avro_records())
        return n

    def anchor() -> int:
        return _fastavro_read(buffer, parsed, count)

    # correctness first: both sides must produce the records that were written
    with storage.open_input(path) as source:
        decoded = [r for block in LogFileReader(source).blocks() for r in block.avro_records()]
    if decoded != records:
        raise AssertionError("tidemark read back different records")
    stream = io.BytesIO(buffer)
    if [fastavro.schemaless_reader(stream, parsed, None) for _ in range(count)] != records:
        raise AssertionError("the anchor decoded different records")

    t_sec, a_sec, n_t, n_a = best_of_alternating(tidemark, anchor, cfg.reps)
    assert n_t == n_a == count
    t_rate, a_rate = count / t_sec, count / a_sec
    return Result(
        name="1. full read (Avro blocks)",
        goal_text="ratio >= 0.8",
        tidemark_label="LogFileReader + avro_records",
        tidemark_value=t_rate,
        anchor_label="fastavro.schemaless_reader",
        anchor_value=a_rate,
        unit="records/s",
        ratio=t_rate / a_rate,
        goal=0.8,
        details={
            "records": count,
            "records_per_block": cfg.batch,
            "log_file_bytes": file_size,
            "anchor_buffer_bytes": len(buffer),
            "anchor_schema": "fastavro.parse_schema of the schema dict, parsed once",
            "tidemark_best_seconds": t_sec,
            "anchor_best_seconds": a_sec,
        },
    )


def bench_read_columns(cfg: Config, records: list[dict[str, Any]], tmp: Path) -> Result:
    """1b: the same file decoded column by column into Arrow (what the snapshot reader does)."""
    storage, path, parsed, buffer = _log_to_read(cfg, records, tmp / "read-columns")
    count = len(records)

    def tidemark() -> int:
        n = 0
        with storage.open_input(path) as source:
            for block in LogFileReader(source).blocks():
                table = block.avro_table()
                if table is None:
                    raise AssertionError("the benchmark schema is one the column decoder handles")
                n += table.num_rows
        return n

    def anchor() -> int:
        return _fastavro_read(buffer, parsed, count)

    with storage.open_input(path) as source:
        decoded = [r for block in LogFileReader(source).blocks() for r in block.avro_table().to_pylist()]
    if decoded != records:
        raise AssertionError("the column decoder read back different records")
    t_sec, a_sec, n_t, n_a = best_of_alternating(tidemark, anchor, cfg.reps)
    assert n_t == n_a == count
    return _reported_rate(
        "1b. full read into Arrow (Avro blocks)",
        "LogFileReader + avro_table (column by column)",
        "fastavro.schemaless_reader (no Arrow table built)",
        count,
        t_sec,
        a_sec,
        {"records": count, "records_per_block": cfg.batch},
    )


def _reported_rate(
    name: str, tidemark_label: str, anchor_label: str, count: int, t_sec: float, a_sec: float, details: dict[str, Any]
) -> Result:
    """A records-per-second figure beside its anchor's, reported (no goal)."""
    return Result(
        name=name,
        goal_text="reported",
        tidemark_label=tidemark_label,
        tidemark_value=count / t_sec,
        anchor_label=anchor_label,
        anchor_value=count / a_sec,
        unit="records/s",
        ratio=a_sec / t_sec,  # the same as records/s over records/s
        goal=0.0,
        details={**details, "tidemark_best_seconds": t_sec},
    )


def bench_write_columns(cfg: Config, records: list[dict[str, Any]], tmp: Path) -> Result:
    """2b: blocks encoded from Arrow tables column by column (what the write tasks do)."""
    from tidemark.logformat.avro_columns import arrow_schema, encode_avro_table
    from tidemark.logformat.content import encode_avro_records

    schema = arrow_schema(SCHEMA_JSON)
    parts = [pa.Table.from_pylist(b, schema=schema) for b in batches(records, cfg.batch)]
    parsed = fastavro.parse_schema(SCHEMA)
    for part, table in zip(batches(records, cfg.batch), parts, strict=True):
        if encode_avro_table(table, SCHEMA_JSON) != encode_avro_records(part, SCHEMA_JSON):
            raise AssertionError("the column encoder wrote different bytes")

    def tidemark() -> int:
        n = 0
        for table in parts:
            content = encode_avro_table(table, SCHEMA_JSON)
            assert content is not None
            n += table.num_rows
        return n

    def anchor() -> int:
        n = 0
        for part in batches(records, cfg.batch):
            out = io.BytesIO()
            for record in part:
                fastavro.schemaless_writer(out, parsed, record)
            n += len(part)
        return n

    t_sec, a_sec, n_t, n_a = best_of_alternating(tidemark, anchor, cfg.reps)
    assert n_t == n_a == len(records)
    return _reported_rate(
        "2b. encode from Arrow (Avro blocks)",
        "encode_avro_table (column by column)",
        "fastavro.schemaless_writer of the same records",
        n_t,
        t_sec,
        a_sec,
        {"records": len(records), "records_per_batch": cfg.batch},
    )


# --- 2. write ----------------------------------------------------------------------------------


def bench_write(cfg: Config, records: list[dict[str, Any]], tmp: Path) -> Result:
    parts = batches(records, cfg.batch)
    parsed = fastavro.parse_schema(SCHEMA)
    root = tmp / "write"
    runs = itertools.count()
    written: dict[str, int] = {}

    def tidemark() -> int:
        storage = LocalStorage(root / f"tidemark-{next(runs)}")
        writer = LogWriter(storage, PARTITION, FILE_ID, BASE_INSTANT, WRITE_TOKEN)
        n = 0
        size = 0
        for part in parts:
            size = writer.append([avro_data_block(part, SCHEMA_JSON, INSTANT)]).size
            n += len(part)
        written["tidemark"] = size
        return n

    def anchor() -> int:
        directory = root / f"anchor-{next(runs)}"
        directory.mkdir(parents=True)
        n = 0
        with open(directory / "records.avro-datums", "wb") as f:
            for part in parts:
                out = io.BytesIO()
                for record in part:
                    fastavro.schemaless_writer(out, parsed, record)
                f.write(out.getvalue())
                n += len(part)
            written["anchor"] = f.tell()
        return n

    def clean_up() -> None:
        shutil.rmtree(root, ignore_errors=True)

    t_sec, a_sec, n_t, n_a = best_of_alternating(tidemark, anchor, cfg.reps, after=clean_up)
    assert n_t == n_a == len(records)
    t_rate, a_rate = n_t / t_sec, n_a / a_sec
    return Result(
        name="2. write (Avro blocks)",
        goal_text="ratio >= 0.8",
        tidemark_label="avro_data_block + LogWriter.append",
        tidemark_value=t_rate,
        anchor_label="fastavro.schemaless_writer + file write",
        anchor_value=a_rate,
        unit="records/s",
        ratio=t_rate / a_rate,
        goal=0.8,
        details={
            "records": len(records),
            "records_per_batch": cfg.batch,
            "appends": len(parts),
            "fsync": "tidemark's LocalStorage.append fsyncs every append; the anchor only writes",
            "tidemark_file_bytes": written["tidemark"],
            "anchor_file_bytes": written["anchor"],
            "tidemark_best_seconds": t_sec,
            "anchor_best_seconds": a_sec,
        },
    )


# --- 3. header-only pass -----------------------------------------------------------------------


def header_file(cfg: Config) -> tuple[Path, bool]:
    """The cached log file for the header pass (generated on first use); whether it was generated."""
    seed = 7
    name = (
        f"header-pass-v{GENERATOR_VERSION}-{cfg.header_file_bytes // MiB}MiB"
        f"-{cfg.min_block // 1024}K-{cfg.max_block // 1024}K-s{seed}.log"
    )
    path = DATA_DIR / name
    if path.exists():
        return path, False
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pool = rng.randbytes(2 * cfg.max_block)  # contents are slices of it: cheap, incompressible
    partial = path.with_name(f".{name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as f:
            total = 0
            i = 0
            while total < cfg.header_file_bytes:
                size = rng.randint(cfg.min_block, cfg.max_block)
                start = rng.randrange(0, len(pool) - size)
                headers: dict[int, str] = {HeaderKey.INSTANT_TIME: f"{int(INSTANT) + i}", HeaderKey.SCHEMA: SCHEMA_JSON}
                data = BlockSpec(BlockType.AVRO_DATA_BLOCK, headers, content=pool[start : start + size]).encode()
                f.write(data)
                total += len(data)
                i += 1
        os.replace(partial, path)  # only a complete file is ever cached under the final name
    finally:
        partial.unlink(missing_ok=True)
    return path, True


def bench_header_pass(cfg: Config) -> list[Result]:
    path, generated = header_file(cfg)
    storage = LocalStorage(path.parent)

    def header_pass() -> int:
        n = 0
        with storage.open_input(path.name) as source:
            for _block in LogFileReader(source).blocks():
                n += 1
        return n

    def full_read() -> int:
        n = 0
        with storage.open_input(path.name) as source:
            for block in LogFileReader(source).blocks():
                n += len(block.content())
        return n

    with storage.open_input(path.name) as source:
        blocks = list(LogFileReader(source).blocks())
    if any(b.is_corrupt or b.block_type is not BlockType.AVRO_DATA_BLOCK for b in blocks):
        raise AssertionError(f"{path} has corrupt blocks: delete it to regenerate")
    content_bytes = sum(b.content_length for b in blocks)

    def cold(run: Callable[[], int]) -> Callable[[], int]:
        def evicted_then_run() -> int:
            _evict_from_page_cache(path)
            return run()

        return evicted_then_run

    results = []
    for label, goal_note, h_run, f_run in (
        (
            "3a. header-only pass, file on disk",
            "not in page cache (evicted before each pass)",
            cold(header_pass),
            cold(full_read),
        ),
        ("3b. header-only pass, page cache warm", "warm (each pass run once before timing)", header_pass, full_read),
    ):
        h_run()
        f_run()
        h_sec, f_sec, n_blocks, n_bytes = best_of_alternating(h_run, f_run, cfg.reps)
        assert n_blocks == len(blocks)
        assert n_bytes == content_bytes
        results.append(
            Result(
                name=label,
                goal_text="speedup >= 50x",
                tidemark_label="LogFileReader.blocks() headers only",
                tidemark_value=h_sec,
                anchor_label="full read (block.content())",
                anchor_value=f_sec,
                unit="s",
                ratio=f_sec / h_sec,
                goal=50.0,
                details={
                    "file": str(path),
                    "file_bytes": path.stat().st_size,
                    "generated_this_run": generated,
                    "blocks": len(blocks),
                    "block_content_bytes": [cfg.min_block, cfg.max_block],
                    "header_pass_seconds": h_sec,
                    "full_read_seconds": f_sec,
                    "full_read_bytes_per_second": content_bytes / f_sec,
                    "page_cache": goal_note,
                },
            )
        )
    return results


def _evict_from_page_cache(path: Path) -> None:
    """Drop the file's pages from the OS cache (no root needed), so reads go to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a ~10x smaller smoke run")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per figure (the best is kept)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the JSON results")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    cfg = Config(
        records=200_000 // scale,
        batch=2_000,
        header_file_bytes=64 * MiB if args.quick else GiB,
        min_block=64 * 1024,
        max_block=4 * MiB,
        reps=max(1, args.reps),
        quick=args.quick,
    )
    print(
        f"tidemark log format benchmarks ({'quick' if cfg.quick else 'full'}): {cfg.records:,} records "
        f"in blocks of {cfg.batch:,}; header pass over {cfg.header_file_bytes // MiB} MiB; "
        f"best of {cfg.reps}",
        flush=True,
    )
    records = make_records(cfg.records)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp:
        steps: list[Callable[[], list[Result]]] = [
            lambda: [bench_read(cfg, records, Path(tmp))],
            lambda: [bench_read_columns(cfg, records, Path(tmp))],
            lambda: [bench_write(cfg, records, Path(tmp))],
            lambda: [bench_write_columns(cfg, records, Path(tmp))],
            lambda: bench_header_pass(cfg),
        ]
        for step in steps:
            for result in step():
                print(f"  done: {result.name} ({ratio_text(result)})", flush=True)
                results.append(result)
    print()
    print_table(results)
    write_json("logformat", results, asdict(cfg), {"fastavro": fastavro.__version__}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
