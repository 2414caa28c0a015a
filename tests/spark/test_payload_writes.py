"""The Spark write job's precombine and deletes follow the table's payload class: duplicates of a
key in one batch combine as the payload says (PartialUpdateAvroPayload fills a winner's nulls from
the other records), and a record the payload reads as a delete (AWSDmsAvroPayload's ``Op = D``) is
written as a delete record, as Hudi's writer writes it, so Apache's reader drops the key too. A
payload class tidemark does not implement is refused before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tidemark.errors import PayloadError
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import read_snapshot

pytestmark = pytest.mark.spark

MODEL = "org.apache.hudi.common.model."
COLUMNS = "id string, ts long, name string, price long"


def _rows(table: Any) -> dict[str, tuple[Any, ...]]:
    return {r["id"]: (r["name"], r["price"]) for r in table.to_pylist()}


def test_precombine_and_deletes_follow_the_payload(spark: Any, tmp_path: Path) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    def write(path: Path, rows: list[tuple[Any, ...]], op: str, payload: str) -> None:
        conf = {"hoodie.datasource.write.payload.class": payload}
        options = WriteOptions(op, record_key=("id",), precombine="ts", conf=conf)
        schema = COLUMNS + (", Op string" if len(rows[0]) == 5 else "")
        write_dataframe(spark.createDataFrame(rows, schema).coalesce(1), str(path), options)

    partial = tmp_path / "partial"
    write(partial, [("k1", 1, "a1", 1), ("k2", 1, "a2", 2)], "insert", MODEL + "PartialUpdateAvroPayload")
    # in one batch: k1 twice (the later ordering value wins, its null name from the other record);
    # k2 once, with a null name the stored row fills
    write(
        partial,
        [("k1", 3, None, 30), ("k1", 2, "x1", None), ("k2", 5, None, 50)],
        "upsert",
        MODEL + "PartialUpdateAvroPayload",
    )
    assert _rows(read_snapshot(LocalStorage(partial))) == {"k1": ("x1", 30), "k2": ("a2", 50)}

    dms = tmp_path / "dms"
    write(dms, [("k1", 1, "a1", 1, "I"), ("k2", 1, "a2", 2, "I")], "insert", MODEL + "AWSDmsAvroPayload")
    # k1's change events: an update, then its delete; k3 is inserted and deleted in the same batch
    write(
        dms,
        [("k1", 2, "b1", 10, "U"), ("k1", 3, "b1", 10, "D"), ("k3", 2, "c3", 3, "I"), ("k3", 4, "c3", 3, "D")],
        "upsert",
        MODEL + "AWSDmsAvroPayload",
    )
    ours = _rows(read_snapshot(LocalStorage(dms)))
    assert ours == {"k2": ("a2", 2)}
    # written as a delete record: Apache's reader drops k1 too, with its reader that merges by
    # ordering value only (its current one refuses AWSDmsAvroPayload tables)
    import hudi

    builder = hudi.HudiTableBuilder.from_base_uri(str(dms)).with_hudi_option(
        "hoodie.read.file.group.reader.version", "1"
    )
    assert _rows(pa.Table.from_batches(builder.build().read())) == ours

    with pytest.raises(PayloadError, match=r"payload class com\.example\.Custom"):
        write(tmp_path / "custom", [("k1", 1, "a1", 1, "I")], "insert", "com.example.Custom")
    assert not (tmp_path / "custom").exists()
