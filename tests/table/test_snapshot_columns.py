"""The columns of a read: the table's schema (its latest commit's, as of the read), in its order,
meta columns first, as Apache's reader (hudi-rs) answers; not those of the file slices that
happen to hold rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.support.model import apache_snapshot
from tidemark.logformat import DeleteRecord
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import META_FIELDS, avro_schema_json
from tidemark.table.file_system_view import FileSystemView
from tidemark.table.incremental import read_incremental
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import commit_write, create_table, start_write
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import DELTA_COMMIT, load_timeline

PARTITION = "p=1"
OLD = pa.table(
    {"id": ["a", "b"], "ts": pa.array([1, 1], pa.int64()), "v": pa.array([1, 2], pa.int32()), "p": ["1", "1"]}
)
#: an upsert whose input has a new nullable column ``w`` (schema evolution)
WITH_W = pa.table(
    {"id": ["c"], "ts": pa.array([2], pa.int64()), "v": pa.array([3], pa.int32()), "p": ["1"], "w": ["x"]}
)


def _insert(storage: LocalStorage, group: str, rows: pa.Table, task: int) -> str:
    """``rows`` as a new file group, committed with their own schema."""
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    schema = avro_schema_json(rows.schema, "t")
    stat = create_base_file(
        storage, TaskContext(inflight.timestamp, 0, task, 0), PARTITION, group, rows, rows["id"], schema
    )
    commit_write(storage, inflight, [stat], "insert", schema)
    return inflight.timestamp


def _log(storage: LocalStorage, group: str, rows: pa.Table, deletes: list[str], operation: str, task: int) -> str:
    """``rows`` and ``deletes`` as log blocks on ``group``, committed with the rows' schema."""
    inflight = start_write(storage, DELTA_COMMIT, operation)
    schema = avro_schema_json(rows.schema, "t")
    view = FileSystemView(storage, load_timeline(storage))
    (fs,) = [g.latest_slice() for g in view.file_groups(PARTITION) if g.file_id == group]
    assert fs is not None
    base = fs.base_file.path if fs.base_file is not None else None
    ctx = TaskContext(inflight.timestamp, 0, task, 0)
    records = rows if rows.num_rows else None
    stat = append_log_blocks(
        storage,
        ctx,
        PARTITION,
        group,
        fs.log_base_instant,
        base,
        records,
        rows["id"],
        [DeleteRecord(k, PARTITION, 100) for k in deletes],
        schema,
    )
    commit_write(storage, inflight, [stat], operation, schema)
    return inflight.timestamp


def _data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in META_FIELDS]


def _rows(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.select(_data_columns(table)).to_pylist(), key=lambda r: str(r["id"]))


def test_a_column_added_by_a_write_whose_rows_are_all_deleted_is_still_read(tmp_path: Path) -> None:
    """Upsert a and b, then c with a new column w, then delete c: w is the table's column, null in
    a and b, as hudi-rs reads it; it used to drop out of the read (only a and b's slice had rows)."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", ["p"], True)
    first = _insert(storage, "fg-1", OLD, 1)
    _log(storage, "fg-1", WITH_W, [], "upsert", 2)
    _log(storage, "fg-1", WITH_W.slice(0, 0), ["c"], "delete", 3)

    read = read_snapshot(storage)
    apache = apache_snapshot(str(tmp_path))
    assert read.column_names == [*META_FIELDS, "id", "ts", "v", "p", "w"]
    assert _data_columns(read) == _data_columns(apache)
    assert read.schema.field("w").type == pa.string()
    assert (
        _rows(read)
        == _rows(apache)
        == [
            {"id": "a", "ts": 1, "v": 1, "p": "1", "w": None},
            {"id": "b", "ts": 1, "v": 2, "p": "1", "w": None},
        ]
    )
    # an incremental query goes through the same read
    assert _data_columns(read_incremental(storage, "000")) == ["id", "ts", "v", "p", "w"]
    # time travel: the table's schema as of then, before w
    assert _data_columns(read_snapshot(storage, first)) == ["id", "ts", "v", "p"]


def test_a_new_file_group_deleted_whole_leaves_its_column(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", ["p"], True)
    _insert(storage, "fg-1", OLD, 1)
    _insert(storage, "fg-2", WITH_W, 2)
    _log(storage, "fg-2", WITH_W.slice(0, 0), ["c"], "delete", 3)

    read = read_snapshot(storage)
    assert _data_columns(read) == _data_columns(apache_snapshot(str(tmp_path))) == ["id", "ts", "v", "p", "w"]
    assert read.column("w").to_pylist() == [None, None]


def test_the_columns_are_in_the_table_schemas_order_not_the_first_slices(tmp_path: Path) -> None:
    """A later write's input has its columns in another order, and a new one: the commit records
    that order, which hudi-rs reads by; the read used to take the order of the first slice."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", ["p"], True)
    _insert(storage, "fg-1", OLD, 1)
    reordered = WITH_W.select(["w", "id", "p", "v", "ts"])
    _insert(storage, "fg-2", reordered, 2)

    read = read_snapshot(storage)
    apache = apache_snapshot(str(tmp_path))
    assert read.column_names == [*META_FIELDS, "w", "id", "p", "v", "ts"]
    assert _data_columns(read) == _data_columns(apache)
    assert _rows(read) == _rows(apache)
