"""The log-format demo behind ``make demo``: write a Hudi log file with several block types,
damage a copy (a flipped byte and a truncation), and show both through ``tidemark log inspect``.

Usage: python scripts/demo_logformat.py [OUTPUT_DIR]   (default: demo-output/logformat)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from tidemark.logformat import (
    DeleteRecord,
    HeaderKey,
    LogWriter,
    avro_data_block,
    delete_block,
    parquet_data_block,
    read_blocks,
    rollback_block,
)
from tidemark.storage import LocalStorage

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "trips_record",
        "namespace": "hoodie.trips",
        "fields": [
            {"name": "_hoodie_commit_time", "type": ["null", "string"], "default": None},
            {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
            {"name": "_hoodie_partition_path", "type": ["null", "string"], "default": None},
            {"name": "ts", "type": "long"},
            {"name": "uuid", "type": "string"},
            {"name": "rider", "type": "string"},
            {"name": "fare", "type": "double"},
            {"name": "city", "type": "string"},
        ],
    }
)
FILE_ID = "3f1c2e9a-demo-4b8e-9d2f-6a7b8c9d0e1f-0"
BASE_INSTANT = "20250301120000000"
RIDERS = {"3eeb61f7": "rider-I", "c8abbe79": "rider-J", "9909a8b1": "rider-D"}


def trips(instant: str, fares: dict[str, float]) -> list[dict[str, object]]:
    return [
        {
            "_hoodie_commit_time": instant,
            "_hoodie_record_key": uuid,
            "_hoodie_partition_path": "city=chennai",
            "ts": 1_695_173_887_231 + i,
            "uuid": uuid,
            "rider": RIDERS[uuid],
            "fare": fare,
            "city": "chennai",
        }
        for i, (uuid, fare) in enumerate(fares.items())
    ]


def inspect(path: Path, *extra: str) -> None:
    cmd = ["tidemark", "log", "inspect", str(path), *extra]
    print(f"$ {' '.join(cmd)}", flush=True)
    subprocess.run([sys.executable, "-m", "tidemark.cli.main", *cmd[1:]], check=True)
    print(flush=True)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output/logformat")
    shutil.rmtree(out, ignore_errors=True)
    storage = LocalStorage(out)
    writer = LogWriter(storage, "city=chennai", FILE_ID, BASE_INSTANT, "0-12-34")
    t1, t2, t3, t4 = "20250301120500000", "20250301121000000", "20250301121500000", "20250301122000000"
    keys = ["3eeb61f7", "c8abbe79", "9909a8b1"]
    writer.append([avro_data_block(trips(t1, dict(zip(keys, [41.06, 17.85, 33.9], strict=True))), SCHEMA, t1)])
    writer.append(
        [
            avro_data_block(trips(t2, {keys[0]: 45.0}), SCHEMA, t2, {HeaderKey.BLOCK_IDENTIFIER: "0,0"}),
            delete_block([DeleteRecord(keys[1], "city=chennai", 1_695_173_887_300, "LongWrapper")], t2, SCHEMA),
        ]
    )
    writer.append([parquet_data_block(pa.Table.from_pylist(trips(t3, {keys[2]: 25.0})), SCHEMA, t3)])
    result = writer.append([rollback_block(t4, t3)])
    log_file = out / result.path

    print("== 1. A Hudi log file with five blocks: Avro data, Avro data + delete, Parquet data, rollback\n")
    inspect(log_file)
    print("== 2. The same file as JSON lines, with the decoded records after each block\n")
    inspect(log_file, "--json", "--records")

    damaged = log_file.with_name(log_file.name.replace(".log.1_", ".log.2_"))
    data = bytearray(log_file.read_bytes())
    with storage.open_input(result.path) as source:
        offsets = [b.offset for b in read_blocks(source)]
    data[offsets[1] + 9] ^= 0x5A  # a flipped byte in the second block's size field
    damaged.write_bytes(bytes(data[:-10]))  # and the last block cut short, as by a crash
    print(
        f"== 3. A damaged copy: byte {offsets[1] + 9} flipped (inside block 2's size) and the last "
        "10 bytes cut off.\n   The reader skips to the next magic, reports each skipped range, and "
        "keeps every good block.\n"
    )
    inspect(damaged)
    print(f"Files are in {out}/city=chennai/. Try: .venv/bin/tidemark log inspect --help")


if __name__ == "__main__":
    main()
