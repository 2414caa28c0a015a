"""The Spark write job's precombine and deletes follow the table's payload class: duplicates of a
key in one batch combine as the payload says (PartialUpdateAvroPayload fills a winner's nulls from
the other records), and a record the payload reads as a delete (AWSDmsAvroPayload's ``Op = D``) is
written as a delete record, as Hudi's writer writes it, so Apache's reader drops the key too. A
payload class tidemark does not implement is refused before anything is written."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.model import apache_snapshot
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


def test_inserts_skip_what_the_payload_deletes_and_combine_only_when_asked(spark: Any, tmp_path: Path) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    def insert(path: Path, rows: list[tuple[Any, ...]], **conf: str) -> None:
        conf = {"hoodie.datasource.write.payload.class": MODEL + "AWSDmsAvroPayload", **conf}
        options = WriteOptions("insert", record_key=("id",), precombine="ts", conf=conf)
        write_dataframe(spark.createDataFrame(rows, COLUMNS + ", Op string").coalesce(1), str(path), options)

    rows = [("k1", 1, "a1", 1, "I"), ("k2", 1, "a2", 2, "D"), ("k3", 1, "a3", 3, "I"), ("k3", 2, "b3", 4, "I")]
    # as Hudi's create handle: k2's delete is not written; k3 stays twice (no combine on insert)
    plain = tmp_path / "plain"
    insert(plain, rows)
    stored = read_snapshot(LocalStorage(plain)).to_pylist()
    assert sorted((r["id"], r["name"]) for r in stored) == [("k1", "a1"), ("k3", "a3"), ("k3", "b3")]
    # hoodie.combine.before.insert: one record per key, the larger ordering value
    combined = tmp_path / "combined"
    insert(combined, rows, **{"hoodie.combine.before.insert": "true"})
    assert _rows(read_snapshot(LocalStorage(combined))) == {"k1": ("a1", 1), "k3": ("b3", 4)}


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_a_delete_marker_deletes_what_it_marks(spark: Any, tmp_path: Path, table_type: str) -> None:
    """hoodie.payload.delete.field / .marker, as DefaultHoodieRecordPayload reads them: a record
    whose field prints exactly as the marker is a delete (of a stored key, or not written when the
    key is new); a marker in another case is not."""
    import hudi

    from tidemark.spark.write_job import WriteOptions, write_dataframe

    path = tmp_path / "t"
    schema = COLUMNS + ", state string, _hoodie_is_deleted boolean"
    marker = {"hoodie.payload.delete.field": "state", "hoodie.payload.delete.marker": "GONE"}

    def write(rows: list[tuple[Any, ...]], op: str, conf: dict[str, str]) -> None:
        conf = {"hoodie.datasource.write.payload.class": MODEL + "DefaultHoodieRecordPayload", **conf}
        options = WriteOptions(op, record_key=("id",), precombine="ts", conf=conf, table_type=table_type)
        write_dataframe(spark.createDataFrame(rows, schema).coalesce(1), str(path), options)

    write([(f"k{i}", 1, f"a{i}", i, "live", False) for i in range(1, 6)], "insert", {})
    write(
        [
            ("k1", 2, "b1", 10, "GONE", False),  # deleted
            ("k2", 2, "b2", 20, "gone", False),  # another case: an update
            ("k6", 2, "b6", 60, "GONE", False),  # a new key marked: not written
            ("k7", 2, "b7", 70, "live", False),
        ],
        "upsert",
        marker,
    )
    expected = {"k2": ("b2", 20), "k3": ("a3", 3), "k4": ("a4", 4), "k5": ("a5", 5), "k7": ("b7", 70)}
    assert _rows(read_snapshot(LocalStorage(path))) == expected
    apache = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    assert _rows(pa.Table.from_batches(apache)) == expected
    before = sorted(p.relative_to(path) for p in path.rglob("*"))
    # half a marker, or a marker for a payload that ignores it, is refused before any change
    with pytest.raises(
        PayloadError, match=r"hoodie\.payload\.delete\.field is set without hoodie\.payload\.delete\.marker"
    ):
        write([("k8", 3, "c8", 8, "GONE", False)], "upsert", {"hoodie.payload.delete.field": "state"})
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before
    path = tmp_path / "other"
    with pytest.raises(PayloadError, match="applies to DefaultHoodieRecordPayload and EventTimeAvroPayload"):
        write(
            [("k8", 3, "c8", 8, "GONE", False)],
            "insert",
            {**marker, "hoodie.datasource.write.payload.class": MODEL + "OverwriteWithLatestAvroPayload"},
        )
    assert not path.exists()


def test_deletes_on_a_timestamp_ordering_field_are_written_as_hudi_writes_them(spark: Any, tmp_path: Path) -> None:
    """A merge-on-read table ordered by a timestamp: an upsert's ``_hoodie_is_deleted`` records
    are written as delete records holding the timestamp's micros in a LongWrapper (they failed
    the write before), and the delete operation's as the int 0 (they held null, on which Hudi
    0.14/0.15's log scanner fails). An older delete leaves the newer row; both readers agree."""
    from tidemark.logformat import BlockType, LogFileReader
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    path = tmp_path / "t"
    schema = "id string, ts timestamp, name string, _hoodie_is_deleted boolean"
    at = [datetime.datetime(2025, 1, d, 12) for d in (1, 2, 3)]

    def write(rows: list[tuple[Any, ...]], op: str) -> None:
        conf = {"hoodie.datasource.write.payload.class": MODEL + "DefaultHoodieRecordPayload"}
        options = WriteOptions(op, record_key=("id",), precombine="ts", conf=conf, table_type="MERGE_ON_READ")
        write_dataframe(spark.createDataFrame(rows, schema).coalesce(1), str(path), options)

    write([(k, at[1], k, False) for k in ("k1", "k2", "k3")], "insert")
    write([("k1", at[2], "x", True), ("k2", at[0], "x", True)], "upsert")  # k2's delete is older
    write([("k3", at[0], "x", False)], "delete")
    wrappers = sorted(
        (d.record_key, (d.ordering_type or "").rsplit(".", 1)[-1], d.ordering_value)
        for log in path.rglob(".*.log.*")
        for block in LogFileReader(log.read_bytes()).blocks()
        if block.block_type is BlockType.DELETE_BLOCK
        for d in block.delete_records()
    )
    assert [(k, w) for k, w, _ in wrappers] == [("k1", "LongWrapper"), ("k2", "LongWrapper"), ("k3", "IntWrapper")]
    # micros since the epoch (the session's zone places the instants: their difference is known)
    assert wrappers[0][2] - wrappers[1][2] == 2 * 86_400 * 1_000_000
    assert wrappers[2][2] == 0
    ours = sorted(r["id"] for r in read_snapshot(LocalStorage(path)).to_pylist())
    assert ours == ["k2"]
    assert sorted(r["id"] for r in apache_snapshot(str(path)).to_pylist()) == ours
