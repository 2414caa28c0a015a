"""Small, realistic blocks for tests: a trips schema, records, and a log file of every type."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from tidemark.logformat import (
    BlockSpec,
    DeleteRecord,
    HeaderKey,
    avro_data_block,
    delete_block,
    parquet_data_block,
    rollback_block,
)

TRIPS_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "trips_record",
        "namespace": "hoodie.trips",
        "fields": [
            {"name": "_hoodie_commit_time", "type": ["null", "string"], "default": None},
            {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
            {"name": "_hoodie_partition_path", "type": ["null", "string"], "default": None},
            {"name": "ts", "type": ["null", "long"], "default": None},
            {"name": "uuid", "type": ["null", "string"], "default": None},
            {"name": "rider", "type": ["null", "string"], "default": None},
            {"name": "fare", "type": ["null", "double"], "default": None},
            {"name": "payload", "type": ["null", "bytes"], "default": None},
            {"name": "city", "type": ["null", "string"], "default": None},
        ],
    }
)


def trip(i: int, instant: str = "20250101000000000", fare: float | None = None) -> dict[str, Any]:
    city = ["san_francisco", "sao_paulo", "chennai"][i % 3]
    return {
        "_hoodie_commit_time": instant,
        "_hoodie_record_key": f"key-{i:06d}",
        "_hoodie_partition_path": f"city={city}",
        "ts": 1_695_000_000_000 + i,
        "uuid": f"key-{i:06d}",
        "rider": f"rider-{i}",
        "fare": float(i) * 1.5 if fare is None else fare,
        "payload": bytes([i % 256]) * (i % 7),
        "city": city,
    }


def every_block_type(instant: str = "20250101000000001") -> list[BlockSpec]:
    """One block of each type tidemark writes (data, delete, Parquet data, rollback)."""
    table = pa.table({"uuid": ["a", "b"], "fare": [1.0, 2.0]})
    return [
        avro_data_block([trip(i, instant) for i in range(5)], TRIPS_SCHEMA, instant),
        delete_block(
            [DeleteRecord(f"key-{i:06d}", "city=chennai", i, "LongWrapper") for i in range(3)],
            instant,
            TRIPS_SCHEMA,
        ),
        parquet_data_block(table, TRIPS_SCHEMA, instant),
        avro_data_block([trip(9, instant)], TRIPS_SCHEMA, instant, {HeaderKey.BLOCK_IDENTIFIER: "0,1"}),
        rollback_block("20250101000000009", "20250101000000005"),
    ]
