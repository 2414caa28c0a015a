"""The copy-on-write pieces without Spark: the merge handle rewriting a base file Apache Hudi
wrote, the insert buckets (small files first), and the table type a write asks for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot
from tidemark.errors import TableError
from tidemark.logformat.file_name import BaseFileName
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.avro_schema import META_FIELDS, avro_schema_json
from tidemark.table.file_system_view import FileSystemView
from tidemark.table.markers import IOType, list_markers
from tidemark.table.merge_handle import merge_base_file
from tidemark.table.partitioner import SmallFileConfig, average_record_size, insert_buckets, new_file_id
from tidemark.table.payload import rule_for_table
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import TableSettings, commit_write, create_table, resolve_table_settings, start_write
from tidemark.table.write_handles import TaskContext, create_base_file
from tidemark.timeline import COMMIT, DELTA_COMMIT, WriteStat, load_timeline


def _rule(payload: str, ordering: str = "longField") -> Any:
    return rule_for_table(
        {P.PAYLOAD_CLASS: f"org.apache.hudi.common.model.{payload}", P.PRECOMBINE_FIELD: ordering}
    ).rule


DEFAULT = _rule("DefaultHoodieRecordPayload")
OVERWRITE = _rule("OverwriteWithLatestAvroPayload")


def _data(table: pa.Table) -> pa.Table:
    return table.select([c for c in table.column_names if c not in META_FIELDS])


def test_merge_handle_rewrites_an_apache_base_file(tmp_path: Path) -> None:
    table = extract_table(fixtures_root() / "tables" / "cow" / "v6_simplekeygen_nonhivestyle.zip", tmp_path)
    storage = LocalStorage(table)
    view = FileSystemView(storage, load_timeline(storage))
    (group,) = view.file_groups("10")
    fs = group.latest_slice()
    assert fs is not None
    assert fs.base_file is not None
    old = pq.read_table(table / fs.base_file.path)
    old_rows = {r["id"]: r for r in old.to_pylist()}
    assert set(old_rows) == {1, 3}
    data = _data(old)
    by_id = {r["id"]: r for r in data.to_pylist()}
    update = pa.Table.from_pylist([{**by_id[1], "name": "Alicia", "longField": by_id[1]["longField"] + 1}], data.schema)
    insert = pa.Table.from_pylist([{**by_id[3], "id": 9, "name": "Ivan"}], data.schema)
    ctx = TaskContext("20300101000000000", 4, 7, 1)
    schema = avro_schema_json(data.schema, "t")
    stat = merge_base_file(
        storage, ctx, "10", group.file_id, fs.base_file.path, fs.base_instant,
        update, ["1"], [], insert, ["9"], schema, DEFAULT,
    )  # fmt: skip
    name = BaseFileName.parse(stat.path or "")
    assert (name.file_id, name.write_token, name.instant) == (group.file_id, "4-7-1", ctx.instant)
    assert [m.io_type for m in list_markers(storage, ctx.instant)] == [IOType.MERGE]
    assert (stat.prev_commit, stat.num_writes, stat.num_update_writes, stat.num_inserts, stat.num_deletes) == (
        fs.base_instant, 3, 1, 1, 0,
    )  # fmt: skip
    written = {r["id"]: r for r in pq.read_table(table / (stat.path or "")).to_pylist()}
    assert set(written) == {1, 3, 9}
    # an untouched row keeps its commit time and sequence number; only its file name changes
    for column in ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path"):
        assert written[3][column] == old_rows[3][column]
    assert {r["_hoodie_file_name"] for r in written.values()} == {name.name}
    assert written[1]["name"] == "Alicia"
    for i in (1, 9):
        assert written[i]["_hoodie_commit_time"] == ctx.instant
        assert written[i]["_hoodie_commit_seqno"].startswith(f"{ctx.instant}_4_")
    assert written[9]["_hoodie_record_key"] == "9"

    # a delete, and an update whose stored ordering value is larger (it loses, as in Hudi's
    # DefaultHoodieRecordPayload), merged into the file just written
    stale = pa.Table.from_pylist([{**by_id[1], "name": "Old", "longField": 0}], data.schema)
    ctx2 = TaskContext("20300101000000001", 0, 8, 0)
    second = merge_base_file(
        storage, ctx2, "10", group.file_id, stat.path or "", ctx.instant,
        stale, ["1"], ["3"], data.slice(0, 0), [], schema, DEFAULT,
    )  # fmt: skip
    rows = {r["id"]: r for r in pq.read_table(table / (second.path or "")).to_pylist()}
    assert set(rows) == {1, 9}
    assert rows[1]["name"] == "Alicia"
    # the stored row stays as the first merge wrote it: this one neither stamps nor counts it
    assert (rows[1]["_hoodie_commit_time"], rows[1]["_hoodie_commit_seqno"]) == (
        written[1]["_hoodie_commit_time"], written[1]["_hoodie_commit_seqno"],
    )  # fmt: skip
    assert (second.num_deletes, second.num_update_writes, second.num_writes) == (1, 0, 2)
    # under OverwriteWithLatestAvroPayload the incoming record wins whatever its ordering
    ctx3 = TaskContext("20300101000000002", 0, 9, 0)
    third = merge_base_file(
        storage, ctx3, "10", group.file_id, second.path or "", ctx2.instant,
        stale, ["1"], ["9"], data.slice(0, 0), [], schema, OVERWRITE,
    )  # fmt: skip
    rows = {r["id"]: r for r in pq.read_table(table / (third.path or "")).to_pylist()}
    assert set(rows) == {1}
    assert rows[1]["name"] == "Old"
    # an insert (not looked up in the index) of a key the file holds merges with it: no duplicate
    again = pa.Table.from_pylist([{**by_id[1], "name": "Again", "longField": 5}], data.schema)
    ctx4 = TaskContext("20300101000000003", 0, 10, 0)
    fourth = merge_base_file(
        storage, ctx4, "10", group.file_id, third.path or "", ctx3.instant,
        data.slice(0, 0), [], [], again, ["1"], schema, DEFAULT,
    )  # fmt: skip
    assert [r["name"] for r in pq.read_table(table / (fourth.path or "")).to_pylist()] == ["Again"]
    assert (fourth.num_update_writes, fourth.num_inserts) == (1, 0)


def _cow_table(storage: LocalStorage, files: dict[str, int]) -> str:
    """A COW table with one commit: a base file of ``n`` rows per file id; its instant."""
    create_table(storage, "t", ["id"], "ts", extra={P.TABLE_TYPE: P.COPY_ON_WRITE})
    inflight = start_write(storage, COMMIT, "insert")
    stats = []
    for file_id, n in files.items():
        pad = [os.urandom(100).hex() for _ in range(n)]  # incompressible: the file size follows n
        rows = pa.table({"id": [f"{file_id}-{i}" for i in range(n)], "ts": [1] * n, "pad": pad})
        ctx = TaskContext(inflight.timestamp, 0, 1, 0)
        stats.append(create_base_file(storage, ctx, "", file_id, rows, rows["id"], avro_schema_json(rows.schema, "t")))
    commit_write(storage, inflight, stats, "insert", "{}")
    return inflight.timestamp


def test_inserts_fill_small_files_first(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    base = _cow_table(storage, {"small": 10, "big": 2000})
    view = FileSystemView(storage, load_timeline(storage))
    sizes = {g.file_id: g.slices[-1].base_file.size for g in view.file_groups("") if g.slices[-1].base_file}
    timeline = load_timeline(storage)
    # 'big' is not small at a limit between the two sizes; 'small' has room for (max - size) / 100
    config = SmallFileConfig(
        small_file_limit=(sizes["small"] + sizes["big"]) // 2,
        max_file_size=sizes["small"] + 100 * 50,
        record_size_estimate=100,
        estimation_threshold=3.0,  # above what the commit wrote: the estimate is used
        split_size=7,
        auto_split=False,
    )
    assert average_record_size(storage, timeline, config) == 100  # no commit above the threshold
    (buckets,) = insert_buckets(storage, timeline, {"": 64}, config, "20300101000000000", True).values()
    assert (buckets[0].file_id, buckets[0].records, buckets[0].base_instant) == ("small", 50, base)
    assert buckets[0].base_file is not None
    assert buckets[0].base_file.endswith(f"_{base}.parquet")
    # the remaining 14 records: two new groups of the split size, ids derived from the instant
    assert [(b.file_id, b.records, b.base_file) for b in buckets[1:]] == [
        (new_file_id("20300101000000000", "", 0), 7, None),
        (new_file_id("20300101000000000", "", 1), 7, None),
    ]
    # the record size of a commit that wrote more than the threshold replaces the estimate
    measured = SmallFileConfig(small_file_limit=10, estimation_threshold=1.0)
    record_size = -(-sum(sizes.values()) // 2010)
    assert average_record_size(storage, timeline, measured) == record_size
    # no small-file handling: new groups only (auto split: max size / record size per group)
    off = SmallFileConfig(small_file_limit=0, max_file_size=record_size * 10)
    (only_new,) = insert_buckets(storage, timeline, {"": 25}, off, "20300101000000000", True).values()
    assert [b.records for b in only_new] == [9, 8, 8]
    assert all(b.base_file is None for b in only_new)
    # a write that fills no small files (merge-on-read, bulk_insert): the same sizing, new groups only
    (mor,) = insert_buckets(storage, timeline, {"": 25}, config, "20300101000000000", False).values()
    assert [(b.records, b.base_file) for b in mor] == [(7, None), (6, None), (6, None), (6, None)]


def test_the_record_size_of_a_deltacommit_counts_its_base_files_only(tmp_path: Path) -> None:
    """As Hudi 0.15's: a log file's bytes per record say little of a base file's."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts")
    inflight = start_write(storage, DELTA_COMMIT, "upsert")
    n = 200
    pad = [os.urandom(100).hex() for _ in range(n)]
    rows = pa.table({"id": [f"k{i}" for i in range(n)], "ts": [1] * n, "pad": pad})
    ctx = TaskContext(inflight.timestamp, 0, 1, 0)
    base = create_base_file(storage, ctx, "", "g1", rows, rows["id"], avro_schema_json(rows.schema, "t"))
    log = WriteStat(
        file_id="g0", path=f".g0_{inflight.timestamp}.log.1_0-1-0", partition_path="", num_writes=10,
        num_update_writes=10, total_write_bytes=10**9,
    )  # fmt: skip
    commit_write(storage, inflight, [base, log], "upsert", "{}")
    timeline = load_timeline(storage)
    measured = SmallFileConfig(small_file_limit=10, estimation_threshold=1.0)
    assert average_record_size(storage, timeline, measured) == -(-base.total_write_bytes // n)
    # a deltacommit whose base files wrote no more than the threshold: the estimate
    assert average_record_size(storage, timeline, SmallFileConfig(small_file_limit=10**8)) == 1024


def test_table_type_of_a_write(tmp_path: Path) -> None:
    assert TableSettings.from_conf({}, ("id",)).table_type is None
    cow = TableSettings.from_conf({"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}, ("id",))
    assert resolve_table_settings("t", None, cow)[P.TABLE_TYPE] == "COPY_ON_WRITE"
    assert resolve_table_settings("t", None, TableSettings(("id",)))[P.TABLE_TYPE] == "MERGE_ON_READ"
    assert TableSettings.from_conf({}, ("id",), table_type="mor").table_type == "MERGE_ON_READ"
    with pytest.raises(TableError, match="unknown table type 'COPY_ON_READ'"):
        TableSettings.from_conf({"hoodie.datasource.write.table.type": "COPY_ON_READ"})
    storage = LocalStorage(tmp_path)
    props = create_table(storage, "t", ["id"], extra={P.TABLE_TYPE: P.COPY_ON_WRITE})
    assert (
        resolve_table_settings("t", props, TableSettings(table_type="COPY_ON_WRITE"))[P.TABLE_TYPE] == "COPY_ON_WRITE"
    )
    with pytest.raises(TableError, match=r"table type MERGE_ON_READ \(table: COPY_ON_WRITE\)"):
        resolve_table_settings("t", props, TableSettings(table_type="MERGE_ON_READ"))


def test_a_record_the_payload_takes_as_a_delete(tmp_path: Path) -> None:
    """``_hoodie_is_deleted`` records in an upsert, combined as the payload says: under
    DefaultHoodieRecordPayload a delete older than the stored row is ignored; a new key's delete
    writes nothing."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", extra={P.TABLE_TYPE: P.COPY_ON_WRITE})
    rows = pa.table({"id": ["a", "b", "c"], "ts": [5, 5, 5], "_hoodie_is_deleted": [False] * 3})
    schema = avro_schema_json(rows.schema, "t")
    inflight = start_write(storage, COMMIT, "insert")
    first = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", "fg", rows, rows["id"], schema)
    commit_write(storage, inflight, [first], "insert", schema)
    incoming = pa.table({"id": ["a", "b"], "ts": [6, 4], "_hoodie_is_deleted": [True, True]})
    new = pa.table({"id": ["n"], "ts": [1], "_hoodie_is_deleted": [True]})
    rule = rule_for_table(
        {P.PAYLOAD_CLASS: "org.apache.hudi.common.model.DefaultHoodieRecordPayload", P.PRECOMBINE_FIELD: "ts"}
    ).rule
    ctx = TaskContext("20300101000000000", 0, 2, 0)
    stat = merge_base_file(
        storage, ctx, "", "fg", first.path or "", inflight.timestamp,
        incoming, incoming["id"], [], new, new["id"], schema, rule,
    )  # fmt: skip
    written = pq.read_table(tmp_path / (stat.path or "")).to_pylist()
    assert sorted(r["id"] for r in written) == ["b", "c"]
    # b's stored row stays as it was: this write neither claims nor counts it
    assert {r["_hoodie_commit_time"] for r in written} == {inflight.timestamp}
    assert (stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (1, 0, 0)


def test_keys_are_matched_to_the_file_whatever_the_index_said(tmp_path: Path) -> None:
    """The merge handle looks every incoming key up in the file itself: an "update" whose key the
    file does not hold is written as an insert, an "insert" whose key it holds (an ``insert``
    into a small file) merges with the stored row, and each row of a key the file holds twice
    (as Hudi's ``insert`` with duplicates allowed can leave it) merges with the incoming record."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", extra={P.TABLE_TYPE: P.COPY_ON_WRITE})
    rows = pa.table({"id": ["a", "b", "c", "a"], "ts": [1, 1, 1, 2], "v": ["a1", "b1", "c1", "a2"]})
    schema = avro_schema_json(rows.schema, "t")
    inflight = start_write(storage, COMMIT, "insert")
    first = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", "fg", rows, rows["id"], schema)
    commit_write(storage, inflight, [first], "insert", schema)
    updates = pa.table({"id": ["a", "z"], "ts": [9, 9], "v": ["a9", "z9"]})
    inserts = pa.table({"id": ["b", "n"], "ts": [9, 9], "v": ["b9", "n9"]})
    ctx = TaskContext("20300101000000000", 0, 2, 0)
    stat = merge_base_file(
        storage, ctx, "", "fg", first.path or "", inflight.timestamp,
        updates, updates["id"], [], inserts, inserts["id"], schema, _rule("DefaultHoodieRecordPayload", "ts"),
    )  # fmt: skip
    written = pq.read_table(tmp_path / (stat.path or "")).to_pylist()
    assert sorted((r["id"], r["v"]) for r in written) == [
        ("a", "a9"), ("a", "a9"), ("b", "b9"), ("c", "c1"), ("n", "n9"), ("z", "z9"),
    ]  # fmt: skip
    by_key = {r["id"]: r["_hoodie_commit_time"] for r in written}
    assert by_key["c"] == inflight.timestamp  # the untouched row keeps its commit time
    assert {by_key[k] for k in "abnz"} == {ctx.instant}
    assert (stat.num_update_writes, stat.num_inserts, stat.num_writes) == (3, 2, 6)


def test_rows_without_the_ordering_field_take_the_incoming_record(tmp_path: Path) -> None:
    """An ordering field the rows do not have compares as null: the incoming record wins (it
    failed in Arrow's comparison of two null columns)."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], None, extra={P.TABLE_TYPE: P.COPY_ON_WRITE})
    rows = pa.table({"id": ["a", "b"], "v": ["a1", "b1"]})
    schema = avro_schema_json(rows.schema, "t")
    inflight = start_write(storage, COMMIT, "insert")
    first = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", "fg", rows, rows["id"], schema)
    commit_write(storage, inflight, [first], "insert", schema)
    updates = pa.table({"id": ["a"], "v": ["a2"]})
    none = updates.slice(0, 0)
    stat = merge_base_file(
        storage, TaskContext("20300101000000000", 0, 2, 0), "", "fg", first.path or "", inflight.timestamp,
        updates, updates["id"], [], none, none["id"], schema, DEFAULT,
    )  # fmt: skip
    written = pq.read_table(tmp_path / (stat.path or "")).to_pylist()
    assert sorted((r["id"], r["v"]) for r in written) == [("a", "a2"), ("b", "b1")]


@pytest.mark.parametrize(
    ("payload", "stale", "fresh", "merged"),
    [
        # kept whole, decided column by column (vectorised)
        ("DefaultHoodieRecordPayload", {"ts": 5, "v": "stale"}, {"ts": 20, "v": "new"}, False),
        ("EventTimeAvroPayload", {"ts": 5, "v": "stale"}, {"ts": 20, "v": "new"}, False),
        # row by row: the payload returns the stored record itself
        ("MySqlDebeziumAvroPayload", {"ts": 5, "v": "stale", "_event_seq": "000001.5"}, {"ts": 20, "v": "new"}, False),
        # a merge of fields is a new record, written by this commit as Hudi writes it
        ("PartialUpdateAvroPayload", {"ts": 5, "v": None}, {"ts": 20, "v": "new"}, True),
    ],
)
def test_a_stored_row_the_payload_keeps_is_copied_with_its_meta_columns(
    tmp_path: Path, payload: str, stale: dict[str, Any], fresh: dict[str, Any], merged: bool
) -> None:
    """A stored row that wins over its incoming record is copied as Hudi's merge handle copies
    the old record: its commit time and sequence number stay, and the write does not count it as
    updated. A payload that builds a merged record writes it with this instant's."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", extra={P.TABLE_TYPE: P.COPY_ON_WRITE})
    rows = pa.table({"id": ["a", "b"], "ts": [10, 10], "v": ["a1", "b1"], "_event_seq": ["000001.9"] * 2})
    schema = avro_schema_json(rows.schema, "t")
    inflight = start_write(storage, COMMIT, "insert")
    first = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", "fg", rows, rows["id"], schema)
    commit_write(storage, inflight, [first], "insert", schema)
    old = {r["id"]: r for r in pq.read_table(tmp_path / (first.path or "")).to_pylist()}
    seq = {"_event_seq": "000001.99"}
    updates = pa.Table.from_pylist([{"id": "a", **seq, **stale}, {"id": "b", **seq, **fresh}], rows.schema)
    ctx = TaskContext("20300101000000000", 0, 2, 0)
    stat = merge_base_file(
        storage, ctx, "", "fg", first.path or "", inflight.timestamp,
        updates, updates["id"], [], updates.slice(0, 0), [], schema, _rule(payload, "ts"),
    )  # fmt: skip
    written = {r["id"]: r for r in pq.read_table(tmp_path / (stat.path or "")).to_pylist()}
    assert (written["a"]["v"], written["b"]["v"]) == ("a1", "new")
    assert written["b"]["_hoodie_commit_time"] == ctx.instant
    if merged:
        assert written["a"]["_hoodie_commit_time"] == ctx.instant
        assert (stat.num_update_writes, stat.num_writes) == (2, 2)
    else:
        for column in ("_hoodie_commit_time", "_hoodie_commit_seqno"):
            assert written["a"][column] == old["a"][column]
        assert written["a"]["_hoodie_file_name"] == (stat.path or "").rsplit("/", 1)[-1]
        assert (stat.num_update_writes, stat.num_writes, stat.num_deletes) == (1, 2, 0)


def _bulk_inserted(storage: LocalStorage, rows: pa.Table, payload: str) -> tuple[WriteStat, str, str]:
    """A copy-on-write table whose one file group ("fg") holds ``rows`` in that order, as a
    bulk_insert (duplicates and all) writes them: its base file's write status, instant, schema."""
    create_table(
        storage, "t", ["id"], "ts",
        extra={P.TABLE_TYPE: P.COPY_ON_WRITE, P.PAYLOAD_CLASS: f"org.apache.hudi.common.model.{payload}"},
    )  # fmt: skip
    schema = avro_schema_json(rows.schema, "t")
    inflight = start_write(storage, COMMIT, "bulk_insert")
    first = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", "fg", rows, rows["id"], schema)
    commit_write(storage, inflight, [first], "bulk_insert", schema)
    return first, inflight.timestamp, schema


@pytest.mark.parametrize(
    ("ts", "kept", "counts"),
    [
        # newer than a@10 only: a@10 is updated, a@12 (the newest) stays
        (11, ["a@11", "a@12", "b@1"], (1, 0, 3)),
        # older than both: nothing changes, nothing is dropped
        (5, ["a@10", "a@12", "b@1"], (0, 0, 3)),
    ],
)
def test_each_stored_row_of_a_key_merges_with_the_incoming_record(
    tmp_path: Path, ts: int, kept: list[str], counts: tuple[int, int, int]
) -> None:
    """A base file holding one key twice (a bulk_insert or insert leaves duplicates) merged under
    event-time ordering: each stored row is combined with the incoming record on its own, as
    Hudi's merge handle does, so a stored version newer than the update survives (only the
    key's first row was compared, and every row of the key replaced by the result)."""
    storage = LocalStorage(tmp_path)
    rows = pa.table({"id": ["a", "b", "a"], "ts": [10, 1, 12], "v": ["a@10", "b@1", "a@12"]})
    first, instant, schema = _bulk_inserted(storage, rows, "DefaultHoodieRecordPayload")
    old = pq.read_table(tmp_path / (first.path or "")).to_pylist()
    update = pa.table({"id": ["a"], "ts": [ts], "v": [f"a@{ts}"]})
    inflight = start_write(storage, COMMIT, "upsert")
    stat = merge_base_file(
        storage, TaskContext(inflight.timestamp, 0, 2, 0), "", "fg", first.path or "", instant,
        update, update["id"], [], update.slice(0, 0), [], schema, _rule("DefaultHoodieRecordPayload", "ts"),
    )  # fmt: skip
    commit_write(storage, inflight, [stat], "upsert", schema)
    assert sorted(r["v"] for r in read_snapshot(storage).to_pylist()) == kept
    assert sorted(r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()) == kept
    assert (stat.num_update_writes, stat.num_deletes, stat.num_writes) == counts
    written = pq.read_table(tmp_path / (stat.path or "")).to_pylist()
    # a stored row that stays is copied with its commit time and sequence number
    meta = {r["v"]: (r["_hoodie_commit_time"], r["_hoodie_commit_seqno"]) for r in old}
    for row in written:
        expected = meta.get(row["v"], (inflight.timestamp, row["_hoodie_commit_seqno"]))
        assert (row["_hoodie_commit_time"], row["_hoodie_commit_seqno"]) == expected


def test_a_rewritten_base_file_keeps_the_stored_row_order(tmp_path: Path) -> None:
    """Each merged row is written where its stored row was, and new keys after them, as Hudi's
    merge handle walks the old file: a file laid out by key (clustering, a bulk_insert sort
    mode) stays so after an upsert (updated rows used to move behind every untouched row)."""
    storage = LocalStorage(tmp_path)
    rows = pa.table({"id": [f"k{i}" for i in range(6)], "ts": [1] * 6, "v": ["old"] * 6})
    first, instant, schema = _bulk_inserted(storage, rows, "DefaultHoodieRecordPayload")
    # k0, k2 and k5 updated, k3's update stale (its stored row stays), k4 deleted, n0 new
    updates = pa.table({"id": ["k5", "k3", "k2", "k0"], "ts": [2, 0, 2, 2], "v": ["new"] * 4})
    inserts = pa.table({"id": ["n0"], "ts": [2], "v": ["new"]})
    ctx = TaskContext("20300101000000000", 0, 2, 0)
    stat = merge_base_file(
        storage, ctx, "", "fg", first.path or "", instant,
        updates, updates["id"], ["k4"], inserts, inserts["id"], schema, _rule("DefaultHoodieRecordPayload", "ts"),
    )  # fmt: skip
    written = pq.read_table(tmp_path / (stat.path or "")).to_pylist()
    assert [(r["id"], r["v"]) for r in written] == [
        ("k0", "new"), ("k1", "old"), ("k2", "new"), ("k3", "old"), ("k5", "new"), ("n0", "new"),
    ]  # fmt: skip
    # this commit's sequence numbers follow the file's order, as Hudi numbers the rows it writes
    seqnos = [int(r["_hoodie_commit_seqno"].rsplit("_", 1)[1]) for r in written if r["v"] == "new"]
    assert seqnos == sorted(seqnos)
    assert (stat.num_update_writes, stat.num_deletes, stat.num_inserts, stat.num_writes) == (3, 1, 1, 6)
