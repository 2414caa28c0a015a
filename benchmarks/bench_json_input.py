"""JSON lines input typed by the table's schema, beside the same file read with inferred types.

Run ``python -m benchmarks.bench_json_input`` (``--quick`` for a 10x smaller smoke run).

1. typed read  N JSON lines (400,000) of a table with int, long, float, double, decimal, date,
               timestamp, bytes, array-of-record, map-of-record and nested-record columns, as
               ``tidemark table read --format jsonl`` prints them, read by
               ``tidemark.spark.json_input.read_typed_json`` with the table's schema into a cached
               DataFrame on ``local[2]`` (what ``tidemark write --input`` does for an existing
               table), against ``spark.read.json`` of the same file with inferred types, cached
               and counted (what it does for a new table). Goal: tidemark time / anchor <= 1.2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.common import DATA_DIR, Result, best_of_alternating, print_table, ratio_text, write_json


@dataclass(frozen=True)
class Config:
    records: int
    reps: int
    quick: bool


SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("name", pa.string()),
        ("isActive", pa.bool_()),
        ("intField", pa.int32()),
        ("longField", pa.int64()),
        ("floatField", pa.float32()),
        ("doubleField", pa.float64()),
        ("decimalField", pa.decimal128(10, 5)),
        ("dateField", pa.date32()),
        ("timestampField", pa.timestamp("us", tz="UTC")),
        ("binaryField", pa.binary()),
        ("arrayField", pa.list_(pa.struct([("arr_struct_f1", pa.string()), ("arr_struct_f2", pa.int32())]))),
        (
            "mapField",
            pa.map_(pa.string(), pa.struct([("map_field_value_struct_f1", pa.float64()), ("f2", pa.bool_())])),
        ),
        (
            "structField",
            pa.struct(
                [
                    ("field1", pa.string()),
                    ("field2", pa.int32()),
                    ("child_struct", pa.struct([("child_field1", pa.float64()), ("child_field2", pa.bool_())])),
                ]
            ),
        ),
    ]
)


def _rows(start: int, count: int) -> pa.Table:
    base = dt.datetime(2023, 4, 1, 12, 1, tzinfo=dt.UTC)
    rows: list[dict[str, Any]] = []
    for i in range(start, start + count):
        rows.append(
            {
                "id": i,
                "name": f"name-{i % 1000}",
                "isActive": i % 2 == 0,
                "intField": i * 7 % 100_000,
                "longField": i * 1_234_567,
                "floatField": (i % 1000) / 8,
                "doubleField": i / 3,
                "decimalField": decimal.Decimal(i % 10_000_000) / 1000,
                "dateField": base.date() + dt.timedelta(days=i % 1000),
                "timestampField": base + dt.timedelta(seconds=i),
                "binaryField": f"binary {i}".encode(),
                "arrayField": [{"arr_struct_f1": c, "arr_struct_f2": i % 100 + j} for j, c in enumerate(("r", "g"))],
                "mapField": {
                    f"key{i % 5}": {"map_field_value_struct_f1": i / 7, "f2": True},
                    f"key{i % 5 + 5}": {"map_field_value_struct_f1": i / 9, "f2": False},
                },
                "structField": {
                    "field1": f"s{i}",
                    "field2": i % 50,
                    "child_struct": {"child_field1": i / 11, "child_field2": i % 3 == 0},
                },
            }
        )
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_input(path: Path, records: int) -> int:
    """The lines ``tidemark table read --format jsonl`` prints for such rows (its own rendering)."""
    from tidemark.cli.render import dumps
    from tidemark.table.avro_schema import plain_rows

    written = 0
    with path.open("w") as out:
        for start in range(0, records, 50_000):
            for row in plain_rows(_rows(start, min(50_000, records - start))):
                out.write(dumps(row) + "\n")
                written += 1
    return written


def bench(cfg: Config, tmp: Path) -> list[Result]:
    from tidemark.spark.json_input import read_typed_json
    from tidemark.spark.session import local_session
    from tidemark.table.avro_schema import arrow_schema_of, avro_schema_json

    source = tmp / "input.jsonl"
    print(f"  setting up: {cfg.records:,} JSON lines", flush=True)
    n = write_input(source, cfg.records)
    size_mb = source.stat().st_size / 1e6
    # the schema as the table's commit records it, read back the way the CLI reads it
    schema = arrow_schema_of(avro_schema_json(SCHEMA, "bench"))
    spark = local_session("local[2]", "tidemark-bench")
    spark.sparkContext.setLogLevel("ERROR")

    def typed() -> int:
        return int(read_typed_json(spark, str(source), schema).count())

    def inferred() -> int:
        df = spark.read.option("mode", "FAILFAST").json(str(source))
        return int(df.cache().count())

    typed()  # warm-up: the JVM, and the Python workers' imports
    spark.catalog.clearCache()
    typed_t, inferred_t, rows_t, rows_a = best_of_alternating(typed, inferred, cfg.reps, after=spark.catalog.clearCache)
    assert rows_t == rows_a == n, (rows_t, rows_a, n)
    spark.stop()
    return [
        Result(
            name="1. JSON lines typed by the table",
            goal_text="ratio <= 1.2",
            tidemark_label="read_typed_json (text + pyarrow per task) into a cached DataFrame, local[2]",
            tidemark_value=typed_t,
            anchor_label="spark.read.json (types inferred) of the same file, cached and counted",
            anchor_value=inferred_t,
            unit="s",
            ratio=typed_t / inferred_t,
            goal=1.2,
            lower_is_better=True,
            details={"records": n, "input_mb": round(size_mb, 1), "columns": len(SCHEMA)},
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a 10x smaller smoke run")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per figure (the best is kept)")
    parser.add_argument("--records", type=int, help="JSON lines to read (default 400,000; 40,000 with --quick)")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-json-input.json")
    args = parser.parse_args(argv)
    records = args.records or (40_000 if args.quick else 400_000)
    cfg = Config(records=records, reps=max(1, args.reps), quick=args.quick)
    print(f"tidemark JSON input benchmark: {cfg.records:,} lines, best of {cfg.reps}", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-json-") as tmp:
        results = bench(cfg, Path(tmp))
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    print_table(results)
    import pyspark

    write_json("json-input", results, asdict(cfg), {"pyspark": pyspark.__version__}, args.output)
    print(f"\nresults written to {args.output} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
