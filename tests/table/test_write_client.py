"""The driver's side of a write without Spark: table creation, instants raced by two writers,
commit with marker reconciliation, and rollbacks that survive a crash half-way."""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.faults import FaultyStorage
from tests.support.listings import CountedListings
from tests.support.model import apache_snapshot
from tests.support.s3 import create_bucket, s3_options
from tests.support.table_builder import PARTITION, RECOVERY, TableBuilder
from tests.support.table_builder import _table as _keyed
from tidemark.errors import (
    InstantStateError,
    InvalidTablePropertiesError,
    OutcomeUnknownError,
    PendingRollbackError,
    StorageError,
    TableError,
    TableNotFoundError,
    WriteConflictError,
)
from tidemark.storage import LocalStorage, S3Options, open_storage
from tidemark.table import compaction, write_client
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.compaction import compact, schedule_compaction
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.file_system_view import read_compaction_plan
from tidemark.table.heartbeat import Heartbeat
from tidemark.table.markers import IOType, create_marker, write_marker_type
from tidemark.table.properties import PROPERTIES_PATH, read_properties
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import (
    begin_write,
    commit_write,
    create_table,
    load_or_create_table,
    rollback_pending_writes,
    start_write,
)
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint, list_savepoints
from tidemark.timeline import DELTA_COMMIT, RESTORE, Instant, WriteStat, load_timeline, transition_to_completed
from tidemark.timeline.archived import read_archived


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {"id": [f"k{i}" for i in range(start, start + n)], "ts": [1] * n, "v": list(range(start, start + n))}
    )


def _write(storage: LocalStorage, n: int, start: int = 0) -> str:
    schema = avro_schema_json(_rows(1).schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    ctx = TaskContext(inflight.timestamp, 0, 1, 0)
    rows = _rows(n, start)
    stat = create_base_file(storage, ctx, "", f"fg-{start}", rows, rows["id"], schema)
    commit_write(storage, inflight, [stat], "insert", schema)
    return inflight.timestamp


def test_properties_checksum_and_version(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    create_table(storage, "orders", ["id"], "ts")
    props = read_properties(storage)
    assert props["hoodie.table.checksum"] == str(zlib.crc32(b"default.orders"))
    text = (tmp_path / ".hoodie/hoodie.properties").read_text()
    (tmp_path / ".hoodie/hoodie.properties").write_text(
        text.replace("hoodie.table.name=orders", "hoodie.table.name=other")
    )
    with pytest.raises(InvalidTablePropertiesError, match="checksum"):
        read_properties(storage)
    (tmp_path / ".hoodie/hoodie.properties").write_text(
        text.replace("hoodie.table.version=6", "hoodie.table.version=8")
    )
    with pytest.raises(InvalidTablePropertiesError, match="table version '8' is not supported"):
        read_properties(storage)
    (tmp_path / ".hoodie/hoodie.properties").write_text(text + "hoodie.table.type=MERGE_ON_READS\n")
    with pytest.raises(InvalidTablePropertiesError, match="MERGE_ON_READS' is not a Hudi table type"):
        read_properties(storage)


def test_a_new_table_inside_another_table_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # a table made in a partition folder hid that partition from Apache's readers of the outer
    # table; one in its .hoodie folder put data files among the outer table's metadata
    outer = tmp_path / "outer"
    create_table(LocalStorage(outer), "t", ["id"], "ts", ["city"])
    before = sorted(p.relative_to(outer) for p in outer.rglob("*"))
    for inner, where in (
        ("x", "partition x"),
        ("x/y", "partition x/y"),
        ("x/../y", "partition y"),
        (".hoodie", "its .hoodie metadata folder"),
        (".hoodie/archived", "its .hoodie metadata folder"),
    ):
        storage = open_storage(f"{outer}/{inner}")
        message = f"{storage.uri} is inside the Hudi table at {outer} ({where}); write to {outer}"
        with pytest.raises(TableError) as refused:
            create_table(storage, "t", ["id"], "ts")
        assert str(refused.value) == message
        with pytest.raises(TableError) as refused:
            load_or_create_table(storage, "t", ["id"], "ts", ["city"], False)
        assert str(refused.value) == message
    assert sorted(p.relative_to(outer) for p in outer.rglob("*")) == before
    # a .hoodie folder is a table's metadata even where no table holds it (yet)
    with pytest.raises(TableError, match=r"cannot be made inside a \.hoodie folder"):
        create_table(LocalStorage(tmp_path / "other/.hoodie/t"), "t", ["id"], "ts")
    assert not (tmp_path / "other").exists()
    create_table(LocalStorage(tmp_path / "beside"), "t", ["id"], "ts")  # a sibling folder is fine
    # a table whose properties file is gone reads from its backup, as Hudi's does: a table still
    (outer / ".hoodie/hoodie.properties").rename(outer / ".hoodie/hoodie.properties.backup")
    with pytest.raises(TableError, match=r"is inside the Hudi table at .* \(partition x\)"):
        create_table(LocalStorage(outer / "x"), "t", ["id"], "ts")


def test_a_new_table_around_another_table_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # every reader of the outer table returned the inner table's rows as its own, twice over
    lake = tmp_path / "lake"
    TableBuilder(LocalStorage(lake / "db/inner")).insert(["a"], 1)
    before = sorted(p.relative_to(lake) for p in lake.rglob("*"))
    for around in (lake, lake / "db"):
        with pytest.raises(TableError) as refused:
            load_or_create_table(LocalStorage(around), "t", ["id"], "ts", [], False)
        assert str(refused.value) == (
            f"{around} holds the Hudi table at {lake}/db/inner: a table made around it would read that "
            "table's folders as its partitions and its rows as its own; choose a folder beside it"
        )
    assert sorted(p.relative_to(lake) for p in lake.rglob("*")) == before
    # a table known by its properties backup alone is one too; other files are no table
    (lake / "db/inner/.hoodie/hoodie.properties").rename(lake / "db/inner/.hoodie/hoodie.properties.backup")
    with pytest.raises(TableError, match=r"holds the Hudi table at .*/db/inner:"):
        create_table(LocalStorage(lake), "t", ["id"], "ts")
    (tmp_path / "plain/x").mkdir(parents=True)
    (tmp_path / "plain/x/data.parquet").write_bytes(b"PAR1")
    create_table(LocalStorage(tmp_path / "plain"), "t", ["id"], "ts")
    # a table reached through a linked folder: the readers follow the link, so it is one too
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked/to-inner").symlink_to(lake / "db/inner")
    (tmp_path / "linked/loop").symlink_to(tmp_path / "linked")  # a link back up ends the walk there
    with pytest.raises(TableError, match=r"linked holds the Hudi table at .*/linked/to-inner:"):
        create_table(LocalStorage(tmp_path / "linked"), "t", ["id"], "ts")


def test_reading_a_folder_of_a_table_names_the_table(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    create_table(LocalStorage(outer), "t", ["id"], "ts", ["city"])
    with pytest.raises(TableNotFoundError) as e:
        read_properties(LocalStorage(outer / "city=x"))
    assert str(e.value) == (
        f"not a Hudi table: {outer}/city=x/.hoodie/hoodie.properties does not exist; "
        f"{outer}/city=x is inside the Hudi table at {outer} (partition city=x)"
    )
    with pytest.raises(TableNotFoundError, match=r"is inside the Hudi table at .* \(its \.hoodie metadata folder\)$"):
        read_properties(LocalStorage(outer / ".hoodie"))
    with pytest.raises(TableNotFoundError) as e:
        read_properties(LocalStorage(tmp_path / "elsewhere"))
    assert str(e.value) == f"not a Hudi table: {tmp_path}/elsewhere/.hoodie/hoodie.properties does not exist"


@pytest.mark.s3
def test_a_new_table_inside_another_table_is_refused_on_s3(s3_location: tuple[str, S3Options]) -> None:
    location, options = s3_location
    create_table(open_storage(location, options), "t", ["id"], "ts", ["city"])
    for inner, where in (("city=x", "partition city=x"), (".hoodie", "its .hoodie metadata folder")):
        storage = open_storage(f"{location}/{inner}", options)
        with pytest.raises(TableError) as refused:
            create_table(storage, "t", ["id"], "ts")
        assert (
            str(refused.value)
            == f"{location}/{inner} is inside the Hudi table at {location} ({where}); write to {location}"
        )
        assert not storage.exists(".hoodie/hoodie.properties")
    with pytest.raises(TableNotFoundError, match=rf"; {location}/city=x is inside the Hudi table at {location} \("):
        read_properties(open_storage(f"{location}/city=x", options))
    create_table(open_storage(f"{location}-beside", options), "t", ["id"], "ts")  # a prefix is not a folder
    around = location.rsplit("/", 1)[0]
    with pytest.raises(TableError, match=rf"^{around} holds the Hudi table at {location}(-beside)?: "):
        create_table(open_storage(around, options), "t", ["id"], "ts")


class _CreatedMeanwhile(LocalStorage):
    """Storage where another writer makes the table, keyed by ``v``, just before this one's
    create of the properties: two first writes racing."""

    def create_if_absent(self, path: str, content: bytes) -> None:
        if path == PROPERTIES_PATH and not self.exists(path):
            create_table(LocalStorage(self.root), "t", ["v"], "ts", ["city"])
        super().create_if_absent(path, content)


def test_a_first_write_that_another_writer_beat_to_creating_the_table_is_told_to_run_again(tmp_path: Path) -> None:
    # it failed with a bare "already exists: .../hoodie.properties", which reads as damage
    with pytest.raises(WriteConflictError) as lost:
        load_or_create_table(_CreatedMeanwhile(tmp_path), "t", ["id"], "ts", ["city"], False)
    assert str(lost.value) == (
        f"write conflict: another writer created the table at {tmp_path} while this write was starting; "
        "nothing was written: run this write again"
    )
    assert read_properties(LocalStorage(tmp_path)).record_key_fields == ("v",)  # the other's table
    assert not list((tmp_path / ".hoodie").glob("*.deltacommit*"))
    # run again, it finds the table and names the setting that differs
    with pytest.raises(TableError, match=r"record key id \(table: v\)"):
        load_or_create_table(LocalStorage(tmp_path), "t", ["id"], "ts", ["city"], False)
    assert load_or_create_table(LocalStorage(tmp_path), "t", ["v"], "ts", ["city"], False).record_key_fields == ("v",)


class _WriteBegunMeanwhile(LocalStorage):
    """A restore's (or a rollback's) storage: as it creates its instant (its check for running
    writes done), a write begins in another process, and finds no restore (or rollback) yet."""

    def __init__(self, root: Path, action: str = "restore") -> None:
        super().__init__(root)
        self.action = action
        self.begun: list[write_client.PendingWrite] = []

    def create_if_absent(self, path: str, content: bytes) -> None:
        if path.endswith(f".{self.action}.requested") and not self.begun:
            self.begun.append(begin_write(LocalStorage(self.root), DELTA_COMMIT, "upsert", ConcurrencyConfig()))
        super().create_if_absent(path, content)


def test_a_write_begun_while_a_restore_was_planned_loses_at_its_commit(tmp_path: Path) -> None:
    """A write that began after a restore's check for live writers, before its instant existed, was
    not in the restore's plan and committed anyway: on copy-on-write its merged file carried the
    rolled-back rows back into the restored table. Now its commit finds the restore begun since it
    started: a conflict, named, and the write is rolled back."""
    t = TableBuilder(LocalStorage(tmp_path))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    t.update(["a"], 2)
    storage = _WriteBegunMeanwhile(tmp_path)
    done = restore(storage, savepoint).instant
    (write,) = storage.begun
    rows = _keyed(["b"], 7)
    ((group, base),) = t.groups.items()
    stat = append_log_blocks(
        write.storage, TaskContext(write.instant, 0, 7, 0), PARTITION, group, base, None, rows, rows["id"], [], t.schema
    )
    with pytest.raises(WriteConflictError) as lost:
        write.commit([stat], "upsert", t.schema)
    assert str(lost.value) == (
        f"write conflict: restore {done.timestamp} of {tmp_path} began while write {write.instant} ran, and this "
        "write may carry rows it rolls back; this write was rolled back: write it again"
    )
    assert write.instant not in load_timeline(t.storage).timestamps()
    assert not (tmp_path / (stat.path or "")).exists()
    assert t.snapshot() == {"a": 1, "b": 1}  # the savepoint's table
    t.update(["b"], 7)  # written again
    assert t.snapshot() == {"a": 1, "b": 7}


def _a_write_stalled_after_a_savepoint(root: Path) -> tuple[TableBuilder, str, write_client.PendingWrite]:
    """Keys a and b at 1, savepointed, and a write begun after it whose process stalled past its
    heartbeat's 50 ms expiry."""
    t = TableBuilder(LocalStorage(root))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    write = begin_write(t.storage, DELTA_COMMIT, "upsert", ConcurrencyConfig(heartbeat_interval_ms=50))
    write.heartbeat.stop(delete=False)  # its process stalls
    time.sleep(0.2)
    return t, savepoint, write


def test_a_write_a_restore_rolled_back_as_dead_names_the_restore_at_its_commit(tmp_path: Path) -> None:
    # it said "another writer rolled it back after its heartbeat expired"; lost as to a conflict
    # (`tidemark write` exits 3: write it again)
    t, savepoint, write = _a_write_stalled_after_a_savepoint(tmp_path)
    done = restore(
        t.storage, savepoint, ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1)
    ).instant
    with pytest.raises(WriteConflictError) as lost:
        write.commit([], "upsert", t.schema)
    assert str(lost.value) == (
        f"write conflict: write {write.instant} on {tmp_path} was rolled back by restore {done.timestamp}, which "
        "began while it ran (its heartbeat had expired); nothing was completed: write it again"
    )
    assert (lost.value.other, lost.value.stage) == (done.timestamp, "commit")
    assert t.snapshot() == {"a": 1, "b": 1}


def test_a_write_an_unfinished_restore_was_rolling_back_says_to_finish_the_restore(tmp_path: Path) -> None:
    """The restore stopped inside its rollback of the write (the write's inflight file still
    there): the write said another process had rolled it back and to write it again, which was
    then refused for the unfinished restore."""
    t, savepoint, write = _a_write_stalled_after_a_savepoint(tmp_path)
    restoring = FaultyStorage(t.storage)
    restoring.arm_at(f"{write.instant}.deltacommit.inflight")
    with pytest.raises(StorageError):  # a restore that judges it dead, and stops in its rollback
        restore(restoring, savepoint, RECOVERY)
    (pending,) = load_timeline(t.storage).pending().of_actions(RESTORE)
    write.heartbeat = Heartbeat(t.storage, write.instant, ConcurrencyConfig(heartbeat_interval_ms=50)).start()
    with pytest.raises(WriteConflictError) as lost:
        write.commit([], "upsert", t.schema)
    assert str(lost.value) == (
        f"write conflict: write {write.instant} on {tmp_path} was rolled back by restore {pending.timestamp}, which "
        f"began while it ran (its heartbeat had expired); nothing was completed: restore {pending.timestamp} to "
        f"savepoint {savepoint} is unfinished: finish it first with `tidemark restore {tmp_path} {savepoint}`, "
        "then write it again"
    )
    restore(t.storage, savepoint)
    assert t.snapshot() == {"a": 1, "b": 1}


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_rollback_of_the_latest_write_is_refused_while_a_later_write_is_pending(
    tmp_path: Path, copy_on_write: bool
) -> None:
    """It was accepted: a copy-on-write write begun after it merged the rolled-back rows into its
    own base file, and the table came out neither rolled back nor kept (Hudi refuses it too)."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    t.insert(["a", "b"], 1)
    written = t.upsert(["a"], 2)
    later = begin_write(t.storage, t.write_action, "upsert", ConcurrencyConfig())
    with pytest.raises(InstantStateError) as refused:
        write_client.rollback(t.storage, written)
    assert str(refused.value) == (
        f"{tmp_path}: the write {later.instant} began after {written}.{t.write_action}[COMPLETED] and is still "
        f"pending (it may carry rows of {written}); let it finish (then restore to a savepoint instead), or roll it "
        f"back first (tidemark rollback {tmp_path} {later.instant})"
    )
    assert load_timeline(t.storage).find(written, t.write_action).is_completed  # type: ignore[union-attr]
    later.abort()
    assert write_client.rollback(t.storage, written).rolled_back.timestamp == written
    assert t.snapshot() == {"a": 1, "b": 1}


def test_a_write_begun_while_a_rollback_of_a_write_it_saw_was_planned_loses_at_its_commit(tmp_path: Path) -> None:
    """A write that began after the rollback's check for running writes saw the rolled-back write
    completed, and committed anyway: on copy-on-write its merged file carries that write's rows."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    written = t.update(["a"], 2)
    storage = _WriteBegunMeanwhile(tmp_path, "rollback")
    done = write_client.rollback(storage, written)
    (write,) = storage.begun
    rows = _keyed(["b"], 7)
    ((group, base),) = t.groups.items()
    stat = append_log_blocks(
        write.storage, TaskContext(write.instant, 0, 7, 0), PARTITION, group, base, None, rows, rows["id"], [], t.schema
    )
    with pytest.raises(WriteConflictError) as lost:
        write.commit([stat], "upsert", t.schema)
    assert str(lost.value) == (
        f"write conflict: the rollback {done.rollback_instant.timestamp} of {written} on {tmp_path} began while write "
        f"{write.instant} ran, and this write may carry rows of {written}; this write was rolled back: write it again"
    )
    assert write.instant not in load_timeline(t.storage).timestamps()
    assert t.snapshot() == {"a": 1, "b": 1}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()} == {"a": 1, "b": 1}
    t.update(["b"], 7)  # written again
    assert t.snapshot() == {"a": 1, "b": 7}


class _MeanwhileAtRollbackPlan(LocalStorage):
    """A rollback's storage: as it writes its plan (its checks done), another process starts
    ``meanwhile`` on the table, given a second to finish (it waits for the lock if it takes it)."""

    def __init__(self, root: Path, meanwhile: Any) -> None:
        super().__init__(root)
        self.meanwhile = meanwhile
        self.thread: threading.Thread | None = None
        self.outcome: list[object] = []

    def create_if_absent(self, path: str, content: bytes) -> None:
        if path.endswith(".rollback.requested") and self.thread is None:

            def run() -> None:
                try:
                    self.outcome.append(self.meanwhile(LocalStorage(self.root)))
                except Exception as e:  # what the other process said
                    self.outcome.append(e)

            self.thread = threading.Thread(target=run)
            self.thread.start()
            self.thread.join(1.0)
        super().create_if_absent(path, content)


def test_a_clean_during_a_rollback_of_the_latest_write_waits_for_it(tmp_path: Path) -> None:
    """The rollback of a completed write took no lock: a clean that planned while it ran kept
    only the latest file versions (the write's), which the rollback then deleted: the table read
    empty, in both readers, without an error."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.insert(["a", "b"], 1)
    t.upsert(["a"], 2)
    latest = t.upsert(["b"], 3)
    keep_one = CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1)
    storage = _MeanwhileAtRollbackPlan(tmp_path, lambda s: clean(s, keep_one))
    write_client.rollback(storage, latest)
    assert storage.thread is not None
    storage.thread.join(30)
    assert not isinstance(storage.outcome[0], Exception), storage.outcome
    assert t.snapshot() == {"a": 2, "b": 1}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path)).to_pylist()} == {"a": 2, "b": 1}


def test_a_savepoint_of_a_write_being_rolled_back_is_refused(tmp_path: Path) -> None:
    """It was accepted while the rollback ran, and outlived the write: a restore to it then
    failed, blaming a restore that never ran."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    latest = t.update(["a"], 2)
    storage = _MeanwhileAtRollbackPlan(tmp_path, lambda s: create_savepoint(s, latest))
    write_client.rollback(storage, latest)
    assert storage.thread is not None
    storage.thread.join(30)
    (refused,) = storage.outcome
    assert isinstance(refused, InstantStateError), refused
    assert not list_savepoints(t.storage)
    assert t.snapshot() == {"a": 1, "b": 1}


def test_only_one_of_two_racing_writers_completes_an_instant(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    outcomes: list[str] = []

    def complete(payload: bytes) -> None:
        try:
            transition_to_completed(storage, inflight, payload, finished_by=None)
            outcomes.append("won")
        except InstantStateError:
            outcomes.append("lost")

    threads = [threading.Thread(target=complete, args=(f'{{"w": {i}}}'.encode(),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]


def test_commit_removes_files_of_unaccepted_attempts(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts")
    schema = avro_schema_json(_rows(1).schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    rows = _rows(3)
    failed = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", "fg", rows, rows["id"], schema)
    accepted = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 1), "", "fg", rows, rows["id"], schema)
    result = commit_write(storage, inflight, [accepted], "insert", schema)
    assert result.removed_files == (failed.path,)
    assert not (tmp_path / str(failed.path)).exists()
    assert read_snapshot(storage).num_rows == 3


def test_a_stage_tried_again_keeps_its_committed_files(tmp_path: Path) -> None:
    # Spark tries a write stage again when its shuffle input is lost, numbering task attempts
    # from 0 again: the first try's attempt, still running, has the same partition, stage and
    # attempt number as the accepted one; Spark's task attempt id tells them apart (Hudi's token)
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts")
    schema = avro_schema_json(_rows(1).schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    rows = _rows(3)
    second_try = TaskContext(inflight.timestamp, 0, 1, 0, attempt_id=17)
    accepted = create_base_file(storage, second_try, "", "fg", rows, rows["id"], schema)
    result = commit_write(storage, inflight, [accepted], "insert", schema)
    other = _rows(3, 100)
    first_try = TaskContext(inflight.timestamp, 0, 1, 0, attempt_id=4)
    late = create_base_file(storage, first_try, "", "fg", other, other["id"], schema)
    assert late.path != accepted.path
    assert sorted(read_snapshot(storage).column("id").to_pylist()) == sorted(rows["id"].to_pylist())
    assert result.removed_files == ()


def test_a_rollback_interrupted_by_a_crash_is_finished_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts")
    _write(storage, 4)
    schema = avro_schema_json(_rows(1).schema, "t")
    dead = start_write(storage, DELTA_COMMIT, "insert")  # a writer that died after one file
    rows = _rows(2, 100)
    create_base_file(storage, TaskContext(dead.timestamp, 0, 1, 0), "", "fg-dead", rows, rows["id"], schema)

    def crash(*_: object) -> None:
        raise RuntimeError("the driver died during the rollback")

    monkeypatch.setattr(write_client, "delete_instant_files", crash)
    with pytest.raises(RuntimeError, match="died during the rollback"):
        rollback_pending_writes(storage, RECOVERY)
    pending = load_timeline(storage).pending()
    assert sorted(i.action for i in pending) == ["deltacommit", "rollback"]
    monkeypatch.undo()

    results = rollback_pending_writes(storage, RECOVERY)
    assert [r.rolled_back.timestamp for r in results] == [dead.timestamp]
    timeline = load_timeline(storage)
    assert not timeline.pending().instants
    assert [i.action for i in timeline] == ["deltacommit", "rollback"]
    assert read_snapshot(storage).column("id").to_pylist() == ["k0", "k1", "k2", "k3"]
    assert not list(tmp_path.glob("fg-dead_*"))


def _committed_with_a_zombie(tmp_path: Path) -> tuple[LocalStorage, Instant, WriteStat, WriteStat]:
    """A table with a committed upsert (storage, its inflight instant, its log file's stat) and the
    log file a speculative twin of its task, still running, wrote (and marked) after the commit."""
    from tidemark.logformat import DeleteRecord

    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts")
    first = _write(storage, 4)
    schema = avro_schema_json(_rows(1).schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "upsert")
    update = _rows(1, 0).set_column(2, "v", pa.array([99]))
    ctx = TaskContext(inflight.timestamp, 0, 2, 0)
    accepted = append_log_blocks(storage, ctx, "", "fg-0", first, None, update, update["id"], [], schema)
    commit_write(storage, inflight, [accepted], "upsert", schema)
    zombie = append_log_blocks(
        storage,
        TaskContext(inflight.timestamp, 0, 2, 1),
        "",
        "fg-0",
        first,
        None,
        update.set_column(2, "v", pa.array([-1])),
        update["id"],
        [DeleteRecord("k3", "", 5)],
        schema,
    )
    return storage, inflight, accepted, zombie


def test_files_a_zombie_attempt_wrote_after_the_commit_are_removed(tmp_path: Path) -> None:
    from tidemark.table.write_client import remove_zombie_files

    storage, _inflight, accepted, zombie = _committed_with_a_zombie(tmp_path)
    assert (tmp_path / zombie.path).exists()
    assert dict(zip(*[read_snapshot(storage).column(c).to_pylist() for c in ("id", "v")], strict=True)) == {
        "k0": 99,
        "k1": 1,
        "k2": 2,
        "k3": 3,
    }  # reconciliation already ignores the zombie's blocks
    assert remove_zombie_files(storage) == [zombie.path]
    assert not (tmp_path / zombie.path).exists()
    assert (tmp_path / accepted.path).exists()
    assert read_snapshot(storage).num_rows == 4


@pytest.mark.parametrize("compacted", [False, True])
def test_a_completed_writes_damaged_markers_are_removed_with_its_zombies_files(
    tmp_path: Path, compacted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A committed write's marker folder left behind (its removal refused) whose ``MARKERS0`` was
    then damaged (not UTF-8): every later write, ``tidemark compact`` and archival exited 1 with
    ``MARKERS0 is not a MARKERS file``, nothing written, until someone deleted the folder by hand.
    The zombie removal now warns naming the file, finds by listing what a zombie attempt of that
    write left (its files the commit does not name), removes them and the folder, and goes on."""
    from tidemark.table.write_client import remove_zombie_files

    storage, inflight, accepted, zombie = _committed_with_a_zombie(tmp_path)
    folder = tmp_path / ".hoodie" / ".temp" / inflight.timestamp
    for marker in list(folder.rglob("*")):
        if marker.is_file():
            marker.unlink()
    write_marker_type(storage, inflight.timestamp)
    damaged = f".hoodie/.temp/{inflight.timestamp}/MARKERS0"
    storage.write(damaged, b"p\xff\xfe\n")

    with caplog.at_level(logging.WARNING, logger="tidemark.write"):
        if compacted:
            assert compact(storage) is not None
        else:
            assert remove_zombie_files(storage) == [zombie.path]
    assert f"{storage.full_uri(damaged)} is not a MARKERS file (not UTF-8 at byte 1)" in caplog.text
    said = f"2 files of it: {accepted.path}, {zombie.path}; those its commit does not name are removed"
    assert said in caplog.text
    assert not (tmp_path / zombie.path).exists()
    assert not folder.exists()
    assert (tmp_path / accepted.path).exists()  # the commit's, kept
    expected = {"k0": 99, "k1": 1, "k2": 2, "k3": 3}
    assert dict(zip(*[read_snapshot(storage).column(c).to_pylist() for c in ("id", "v")], strict=True)) == expected
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidemark.write"):
        assert remove_zombie_files(storage) == []
    assert "MARKERS" not in caplog.text  # said once: the folder is gone


class _ZombieInCommitWindow(LocalStorage):
    """Storage on which a task attempt (a losing speculative copy) marks and writes a file just
    before the commit's completed instant is created: after the commit's first sweep of unaccepted
    attempts' files, while the write is still pending (so its pending check passes); Spark then
    kills it before its end check, so it never takes the file away itself."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.zombie: Any = None  # () -> WriteStat, played once before the completed file's create
        self.wrote: WriteStat | None = None
        self.refuse_delete = ""  # a data file path whose delete is refused

    def delete(self, path: str) -> None:
        if path == self.refuse_delete:
            raise StorageError(f"cannot delete {self.full_uri(path)}: access denied")
        super().delete(path)

    def create_if_absent(self, path: str, content: bytes) -> None:
        if self.zombie is not None and path.startswith(".hoodie/") and path.endswith((".commit", ".deltacommit")):
            play, self.zombie = self.zombie, None
            self.wrote = play()
        super().create_if_absent(path, content)


@pytest.mark.parametrize("copy_on_write", [True, False])
@pytest.mark.parametrize("mode", ["OPTIMISTIC_CONCURRENCY_CONTROL", "SINGLE_WRITER"])
def test_a_file_a_zombie_attempt_wrote_while_the_commit_ran_is_removed_by_it(
    tmp_path: Path, copy_on_write: bool, mode: str
) -> None:
    """A speculative copy of a task that marked and wrote a file between the commit's sweep of
    unaccepted attempts and its completed instant, and was killed before its end check, left that
    file for good: the commit deleted the marker folder, so no later write or archival found it (a
    second base file of the group and instant on copy-on-write, which Apache's readers fail on; on
    merge-on-read a log file of an attempt the commit did not accept, whose blocks Apache's reader
    takes as committed). The commit now lists the markers again once completed and removes every
    marked file it does not name, then the folder."""
    from tidemark.table.write_client import remove_zombie_files

    storage = _ZombieInCommitWindow(tmp_path / "t")
    builder = TableBuilder(storage, copy_on_write=copy_on_write)
    builder.insert(["a", "b"], 1)
    config = ConcurrencyConfig(heartbeat_interval_ms=60_000, mode=mode)
    if copy_on_write:
        action, operation, group = builder.write_action, "insert", "fg-new"
    else:
        action, operation, group = DELTA_COMMIT, "upsert", builder.keys["a"]
    pending = begin_write(storage, action, operation, config, partitions=[PARTITION])

    def attempt(attempt: int, value: int) -> WriteStat:
        ctx = TaskContext(pending.instant, 0, 1, attempt, True, attempt + 1)
        rows = _keyed(["a"], value)
        if copy_on_write:
            return create_base_file(storage, ctx, PARTITION, group, rows, rows["id"], builder.schema)
        base = builder.groups[group]
        return append_log_blocks(storage, ctx, PARTITION, group, base, None, rows, rows["id"], [], builder.schema)

    accepted = attempt(0, 2)
    storage.zombie = lambda: attempt(1, 3)
    result = pending.commit([accepted], operation, builder.schema)
    zombie = storage.wrote
    assert zombie is not None
    assert zombie.path != accepted.path
    assert result.removed_files == (zombie.path,)
    assert not (storage.root / zombie.path).exists()
    assert (storage.root / accepted.path).exists()  # the commit's, kept
    assert not (storage.root / ".hoodie" / ".temp" / pending.instant).exists()
    assert remove_zombie_files(storage) == []
    assert builder.snapshot() == {"a": 2, "b": 1}


def test_a_zombie_file_the_commit_cannot_remove_keeps_its_marker_for_the_next_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tidemark.table.write_client import remove_zombie_files

    storage = _ZombieInCommitWindow(tmp_path / "t")
    builder = TableBuilder(storage, copy_on_write=True)
    pending = begin_write(storage, builder.write_action, "insert", ConcurrencyConfig(heartbeat_interval_ms=60_000))
    rows = _keyed(["a"], 1)

    def attempt(attempt: int) -> WriteStat:
        ctx = TaskContext(pending.instant, 0, 1, attempt, True, attempt + 1)
        return create_base_file(storage, ctx, PARTITION, "fg-new", rows, rows["id"], builder.schema)

    accepted = attempt(0)

    def zombie() -> WriteStat:
        stat = attempt(1)
        storage.refuse_delete = str(stat.path)
        return stat

    storage.zombie = zombie
    with caplog.at_level(logging.WARNING, logger="tidemark.write"):
        result = pending.commit([accepted], "insert", builder.schema)  # committed all the same
    assert result.removed_files == ()
    assert f"write {pending.instant} is committed, but the files its task attempts marked" in caplog.text
    assert storage.wrote is not None
    storage.refuse_delete = ""
    assert remove_zombie_files(storage) == [storage.wrote.path]  # its marker was kept
    assert builder.snapshot() == {"a": 1}


def test_a_commit_whose_outcome_is_unknown_stops_its_heartbeat(tmp_path: Path) -> None:
    """A commit whose completed instant's answer was lost, with storage then unreachable, left the
    write's heartbeat beating for as long as the driver process lived (a notebook, a streaming
    query that goes on): the write looked live, so no rollback took it if it had not landed. The
    heartbeat now stops; its file stays, so the next writer judges the write from its last beat."""
    from tidemark.table.heartbeat import last_beat_ms

    storage = _AnswerLost(tmp_path / "t")
    builder = TableBuilder(storage)
    builder.insert(["a"], 1)
    pending = begin_write(storage, DELTA_COMMIT, "insert", ConcurrencyConfig(heartbeat_interval_ms=50))
    rows = _keyed(["b"], 1)
    ctx = TaskContext(pending.instant, 0, 1, 0)
    stat = create_base_file(storage, ctx, PARTITION, "fg-b", rows, rows["id"], builder.schema)
    storage.lose, storage.then_unreachable = ".deltacommit", True
    with pytest.raises(OutcomeUnknownError, match=r"may or may not have landed"):
        pending.commit([stat], "insert", builder.schema)
    storage.unreachable = False
    beat = last_beat_ms(storage, pending.instant)
    assert beat is not None  # the heartbeat file stays
    time.sleep(0.3)
    assert last_beat_ms(storage, pending.instant) == beat
    assert not [t.name for t in threading.enumerate() if pending.instant in t.name]


class _AnswerLost(LocalStorage):
    """Storage whose create of a completed write instant lands but whose answer is lost (an S3
    endpoint gone mid-request), and, with ``unreachable``, which then cannot be asked either."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.lose: str | None = None  # the completed instant file's suffix whose answer is lost
        self.then_unreachable = False
        self.unreachable = False

    def create_if_absent(self, path: str, content: bytes) -> None:
        super().create_if_absent(path, content)
        if self.lose is not None and path.endswith(self.lose):
            self.lose, self.unreachable = None, self.then_unreachable
            raise StorageError(f"cannot create {self.full_uri(path)}: the S3 endpoint is unreachable")

    def read(self, path: str) -> bytes:
        if self.unreachable and path.startswith(".hoodie/"):
            raise StorageError(f"cannot read {self.full_uri(path)}: the S3 endpoint is unreachable")
        return super().read(path)


@pytest.mark.parametrize("unreachable", [False, True])
def test_a_commit_whose_answer_was_lost_is_never_reported_failed_and_taken_back(
    tmp_path: Path, unreachable: bool
) -> None:
    """The completed instant landed but its answer was lost: the write failed with "unreachable",
    and a rerun of that "failed" write wrote every row twice. Storage is now asked whether it
    landed; when it cannot be asked, the error says the outcome is unknown, and nothing is
    rolled back on the guess."""
    from tests.support.table_builder import TableBuilder

    storage = _AnswerLost(tmp_path / "t")
    builder = TableBuilder(storage)
    builder.insert(["a", "b"], 1)
    storage.lose, storage.then_unreachable = ".deltacommit", unreachable
    if unreachable:
        with pytest.raises(OutcomeUnknownError, match=r"may or may not have landed.*tidemark timeline"):
            builder.update(["a"], 2)
        storage.unreachable = False  # storage answers again: the next write recovers, rolling back nothing
        rollback_pending_writes(storage, RECOVERY)
    else:
        builder.update(["a"], 2)
    assert {r["id"]: r["v"] for r in read_snapshot(storage).to_pylist()} == {"a": 2, "b": 1}
    assert len(load_timeline(storage).completed().write_instants().instants) == 2


def test_a_write_a_pending_compaction_is_planned_after_is_not_rolled_back(tmp_path: Path) -> None:
    """The rollback deleted the log file the compaction plan lists: the compaction then failed
    at every run, and once a write landed on top of it, it could be neither run nor rolled back."""
    from tests.support.table_builder import TableBuilder
    from tidemark.table.compaction import compact, schedule_compaction

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a", "b"], 1)
    update = builder.update(["a"], 2)
    planned = schedule_compaction(builder.storage)
    assert planned is not None
    with pytest.raises(InstantStateError, match=rf"compaction {planned.timestamp} is planned after .*run it"):
        write_client.rollback(builder.storage, update)
    compact(builder.storage)
    assert builder.snapshot() == {"a": 2, "b": 1}


def test_a_precombine_field_given_for_a_table_that_records_none_is_accepted_not_recorded() -> None:
    """Hudi's validateTableConfig objects only when both the write and the table name one: the
    write was refused ("precombine field ts (table: (none))")."""
    from tidemark.errors import TableError
    from tidemark.table import properties as P
    from tidemark.table.properties import TableProperties
    from tidemark.table.write_client import TableSettings, resolve_table_settings

    def settings(precombine: str) -> TableSettings:
        return TableSettings(record_key=("id",), precombine=precombine)

    unordered = TableProperties.create({**resolve_table_settings("t", None, TableSettings(("id",))), P.NAME: "t"})
    assert P.PRECOMBINE_FIELD not in resolve_table_settings("t", unordered, settings("ts"))
    ordered = TableProperties.create({**resolve_table_settings("t", None, settings("ts")), P.NAME: "t"})
    assert resolve_table_settings("t", ordered, settings("ts"))[P.PRECOMBINE_FIELD] == "ts"
    with pytest.raises(TableError, match=r"precombine field when \(table: ts\)"):
        resolve_table_settings("t", ordered, settings("when"))


def test_a_new_table_without_a_record_key_is_told_both_ways_to_give_it() -> None:
    # a caller of tidemark.spark.write was told to "give --record-key", a flag it has not
    from tidemark.errors import TableError
    from tidemark.table.write_client import TableSettings, resolve_table_settings

    with pytest.raises(TableError, match=r"give --record-key, or hoodie\.datasource\.write\.recordkey\.field in"):
        resolve_table_settings("t", None, TableSettings(partition_fields=("p",)))


def test_a_merge_mode_is_recorded_with_its_payload_class_and_a_contradiction_refused() -> None:
    """``--conf hoodie.record.merge.mode=COMMIT_TIME_ORDERING`` was silently ignored: the table
    merged by event time, and restating the mode to it was not refused either."""
    from tidemark.errors import PayloadError, TableError
    from tidemark.table.payload import rule_for_table
    from tidemark.table.properties import TableProperties
    from tidemark.table.write_client import TableSettings, resolve_table_settings

    def settings(**conf: str) -> TableSettings:
        return TableSettings.from_conf(conf, record_key=["id"], precombine="ts", partition_fields=["p"])

    values = resolve_table_settings("t", None, settings(**{"hoodie.record.merge.mode": "commit_time_ordering"}))
    assert values["hoodie.record.merge.mode"] == "COMMIT_TIME_ORDERING"
    assert values["hoodie.compaction.payload.class"].endswith(".OverwriteWithLatestAvroPayload")  # Apache 0.x's rule
    table = TableProperties.create({**values, "hoodie.table.name": "t"})
    assert rule_for_table(table).rule.name == "COMMIT_TIME_ORDERING"
    assert resolve_table_settings("t", table, settings(**{"hoodie.write.record.merge.mode": "COMMIT_TIME_ORDERING"}))
    with pytest.raises(TableError, match=r"merge.mode=EVENT_TIME_ORDERING \(table: COMMIT_TIME_ORDERING\)"):
        resolve_table_settings("t", table, settings(**{"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}))
    with pytest.raises(PayloadError, match=r"merge.mode=CUSTOM is not one tidemark implements"):
        resolve_table_settings("t", None, settings(**{"hoodie.record.merge.mode": "CUSTOM"}))
    latest = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
    both = {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING", "hoodie.datasource.write.payload.class": latest}
    with pytest.raises(PayloadError, match=r"contradicts the payload class"):
        resolve_table_settings("t", None, settings(**both))


@pytest.mark.parametrize("rewrite", ["compaction", "insert_overwrite"])
def test_a_write_whose_previous_slices_a_clean_deleted_is_not_rolled_back(tmp_path: Path, rewrite: str) -> None:
    """Rolling back the latest write after a clean removed the slices it had superseded deleted
    the only copy of the data: the table read empty, with no error."""
    from tests.support.table_builder import TableBuilder
    from tidemark.table.compaction import compact
    from tidemark.table_services.clean import CleanConfig, clean

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a", "b"], 1)
    builder.update(["a"], 2)
    latest = compact(builder.storage) if rewrite == "compaction" else None
    target = latest.timestamp if latest is not None else builder.insert_overwrite(["c"], 3)
    clean(builder.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    before = builder.snapshot()
    with pytest.raises(InstantStateError, match=rf"rolling back {target}.*a clean has since partly deleted"):
        write_client.rollback(builder.storage, target)
    assert builder.snapshot() == before


def _archived_all_but(latest: str, tmp_path: Path, folder: str = "archived") -> TableBuilder:
    """A table (``a``=2, ``b``=1 before its latest write) whose earlier writes the archiver has
    all moved to the archived timeline (in ``.hoodie/<folder>``): the latest write, an upsert
    (commit), an insert_overwrite (replacecommit) or a compaction, is the only one left active."""
    builder = TableBuilder(LocalStorage(tmp_path / "t"), copy_on_write=latest != "compaction")
    path = tmp_path / "t" / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text().replace("hoodie.archivelog.folder=archived", f"hoodie.archivelog.folder={folder}"))
    builder.insert(["a", "b"], 1)
    builder.upsert(["a"], 2)
    if latest == "compaction":
        assert compact(builder.storage) is not None
    elif latest == "insert_overwrite":
        builder.insert_overwrite(["c"], 3)
    else:
        builder.upsert(["c"], 3)
    clean(builder.storage, CleanConfig(commits_retained=1))
    archive(builder.storage, ArchiveConfig(min_commits=1, max_commits=2))
    assert len(load_timeline(builder.storage).write_instants()) == 1
    assert read_archived(builder.storage, f".hoodie/{folder}")
    return builder


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("latest", "folder", "rows"),
    [
        ("upsert", "archived", {"a": 2, "b": 1, "c": 3}),
        ("insert_overwrite", "archived", {"c": 3}),
        ("compaction", "history", {"a": 2, "b": 1}),
    ],
)
def test_the_only_write_left_after_archival_is_not_rolled_back(
    tmp_path: Path, latest: str, folder: str, rows: dict[str, int]
) -> None:
    """Rolled back, it left no write on the active timeline, and every reader (tidemark's and
    hudi-rs) took the archived writes' files for uncommitted: the table read empty, with no error."""
    builder = _archived_all_but(latest, tmp_path, folder)
    storage = builder.storage
    (target,) = load_timeline(storage).write_instants()
    assert builder.snapshot() == rows
    files = _files(tmp_path / "t")
    with pytest.raises(
        InstantStateError,
        match=rf"{target.timestamp}\S* is the only completed write left on the active timeline .*"
        rf"in \.hoodie/{folder}\).*read the table empty; .*new write",
    ):
        write_client.rollback(storage, target.timestamp)
    assert _files(tmp_path / "t") == files
    assert builder.snapshot() == rows
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path / "t")).to_pylist()} == rows


def test_a_failed_write_after_archival_and_a_tables_only_write_are_still_rolled_back(tmp_path: Path) -> None:
    """The refusal above is of the last completed write only: a failed write over an archived
    history is rolled back, and so is a table's only write when nothing is archived."""
    builder = _archived_all_but("upsert", tmp_path)
    before = builder.snapshot()
    failed = start_write(builder.storage, "commit", "upsert")
    assert [r.rolled_back.timestamp for r in rollback_pending_writes(builder.storage, RECOVERY)] == [failed.timestamp]
    assert builder.snapshot() == before
    assert {r["id"]: r["v"] for r in apache_snapshot(str(tmp_path / "t")).to_pylist()} == before

    fresh = TableBuilder(LocalStorage(tmp_path / "fresh"))
    only = fresh.insert(["a"], 1)
    assert write_client.rollback(fresh.storage, only).rolled_back.timestamp == only
    assert fresh.snapshot() == {}


def _uncommitted_update(builder: TableBuilder, root: Path, value: int) -> tuple[str, str]:
    """``a`` updated to ``value`` by a write left inflight with its log file written and no
    markers, as a Hudi writer that died leaves it once its marker folder is gone: (the write,
    its log file)."""
    before = set(builder.storage.list_dir("p=1").files)
    failed = builder.update(["a"], value)
    (log,) = set(builder.storage.list_dir("p=1").files) - before
    (root / ".hoodie" / f"{failed}.deltacommit").unlink()
    assert not builder.storage.exists(f".hoodie/.temp/{failed}/")
    return failed, f"p=1/{log}"


@pytest.mark.parametrize(
    "case",
    ["own log file", "log file shared with a committed write", "markers kept", "MARKERS0 emptied", "MARKERS0 damaged"],
)
def test_a_failed_write_without_markers_is_rolled_back_by_listing_and_stays_gone_after_archival(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its markers gone, the rollback found no file ("0 files deleted, 0 rollback blocks
    written"), its log block stayed, and once the archiver moved the writes before it out every
    reader (tidemark's and hudi-rs) took the block for committed: the rolled-back value came back.
    So did it with its timeline-server markers' folder kept but its ``MARKERS0`` emptied; with
    ``MARKERS0`` not UTF-8, every rollback and write of the table stopped on it."""
    root = tmp_path / "t"
    builder = TableBuilder(LocalStorage(root))
    storage = builder.storage
    builder.insert(["a", "b"], 1)
    builder.upsert(["z"], 1, partition="p=2")
    before_update = set(storage.list_dir("p=1").files)
    update = builder.update(["a"], 2)
    (update_log,) = (f"p=1/{n}" for n in set(storage.list_dir("p=1").files) - before_update)
    failed, log = _uncommitted_update(builder, root, 9)
    listed: tuple[str, ...] | None = ("p=1", "p=2")  # tidemark's inflight file names no partition
    if case == "log file shared with a committed write":
        # Hudi appends to the latest log file where storage can; its inflight names the partitions
        # (and file groups) it writes
        (root / update_log).write_bytes((root / update_log).read_bytes() + (root / log).read_bytes())
        (root / log).unlink()
        log = update_log
        profile = {"partitionToWriteStats": {"p=1": [{"fileId": builder.keys["a"], "prevCommit": update}]}}
        (root / ".hoodie" / f"{failed}.deltacommit.inflight").write_text(json.dumps(profile))
        listed = ("p=1",)
    elif case == "markers kept":
        create_marker(storage, failed, log, IOType.APPEND)
        listed = None
    elif case.startswith("MARKERS0"):  # as the writer-coordinator writes them, then damaged
        write_marker_type(storage, failed)
        storage.write(f".hoodie/.temp/{failed}/MARKERS0", b"" if case == "MARKERS0 emptied" else b"p\xff\xfe\n")
    assert builder.snapshot() == {"a": 2, "b": 1, "z": 1}

    with caplog.at_level(logging.INFO, logger="tidemark.write"):
        (result,) = rollback_pending_writes(storage, RECOVERY)
    assert (result.rolled_back.timestamp, result.listed_partitions) == (failed, listed)
    assert result.markers_unreadable == (case == "MARKERS0 damaged")
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "found by listing" in r.getMessage()]
    why = (
        f"has markers that cannot be read ({storage.full_uri(f'.hoodie/.temp/{failed}/MARKERS0')} "
        "is not a MARKERS file (not UTF-8 at byte 1))"
        if result.markers_unreadable
        else f"has no markers (none in .hoodie/.temp/{failed}/)"
    )
    if listed is None:
        assert not said
    else:
        assert said == [
            (
                "WARNING",
                f"{storage.uri}: {failed}.deltacommit[INFLIGHT] {why}, "
                f"so its files were found by listing partitions {', '.join(listed)}: 1 files of it: {log}",
            )
        ]
    assert not storage.exists(f".hoodie/.temp/{failed}/")
    if log == update_log:  # the committed write's block stays: the failed one's is marked rolled back
        assert (result.deleted_files, len(result.rollback_log_files)) == ((), 1)
    else:
        assert (result.deleted_files, result.rollback_log_files) == ((log,), ())
        assert not storage.exists(log)

    for value in range(2, 6):
        builder.upsert(["z"], value, partition="p=2")
    clean(storage, CleanConfig(commits_retained=1))
    archive(storage, ArchiveConfig(min_commits=2, max_commits=3))
    assert update not in load_timeline(storage).write_instants().timestamps()  # archived
    assert builder.snapshot() == {"a": 2, "b": 1, "z": 5}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(root)).to_pylist()} == {"a": 2, "b": 1, "z": 5}


def test_a_listing_rollback_lists_each_partition_once_and_only_those_its_write_names(tmp_path: Path) -> None:
    """Without markers, the rollback walked every folder to find the partitions and then listed
    each again for its files (1,750 requests for 300 partitions on S3). A write that names its
    partitions in its inflight file, as Hudi's workload profile does, has only those listed."""
    root = tmp_path / "t"
    builder = TableBuilder(LocalStorage(root))
    builder.insert(["a"], 1)
    for n in (2, 3):
        builder.upsert([f"k{n}"], n, partition=f"p={n}")
    failed, log = _uncommitted_update(builder, root, 9)
    counted = CountedListings(root)
    (result,) = rollback_pending_writes(counted, RECOVERY)
    assert (result.rolled_back.timestamp, result.deleted_files) == (failed, (log,))
    assert result.listed_partitions == ("p=1", "p=2", "p=3")
    assert {f: n for f, n in counted.listed.items() if f.startswith("p=")} == {"p=1": 1, "p=2": 1, "p=3": 1}
    assert builder.snapshot() == {"a": 1, "k2": 2, "k3": 3}

    named = begin_write(builder.storage, DELTA_COMMIT, "upsert", RECOVERY, partitions=["p=3", "p=2", "p=3"])
    named.heartbeat.stop()
    inflight = json.loads((root / ".hoodie" / named.inflight.file_name).read_text())
    assert inflight["partitionToWriteStats"] == {"p=2": [], "p=3": []}
    assert inflight["operationType"] == "UPSERT"
    counted = CountedListings(root)
    (result,) = rollback_pending_writes(counted, RECOVERY)
    assert (result.rolled_back.timestamp, result.listed_partitions) == (named.instant, ("p=2", "p=3"))
    assert "p=1" not in counted.listed
    assert builder.snapshot() == {"a": 1, "k2": 2, "k3": 3}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(root)).to_pylist()} == {"a": 1, "k2": 2, "k3": 3}


class _UndeletableStorage(LocalStorage):
    """A file system that refuses to delete the files in ``refused`` (a partition directory an
    operator made read-only, say)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.refused: set[str] = set()

    def delete(self, path: str) -> None:
        if path in self.refused:
            raise StorageError(f"cannot delete {self.full_uri(path)}: Permission denied")
        super().delete(path)


def _half_rolled_back(tmp_path: Path) -> tuple[TableBuilder, _UndeletableStorage, str, str]:
    """A table whose latest write (``a`` updated to 2, in a log file of its own) has a rollback
    that stopped on a delete: (builder, storage, the write, its log file)."""
    storage = _UndeletableStorage(tmp_path / "t")
    builder = TableBuilder(storage)
    builder.insert(["a", "b"], 1)
    builder.update(["b"], 3)
    before = set((tmp_path / "t" / "p=1").iterdir())
    update = builder.update(["a"], 2)
    (log,) = (f"p=1/{f.name}" for f in set((tmp_path / "t" / "p=1").iterdir()) - before)
    storage.refused = {log}
    with pytest.raises(StorageError, match=rf"of {update} stays pending.*`tidemark rollback \S+ {update}` run again"):
        write_client.rollback(storage, update)
    assert [i.action for i in load_timeline(storage).pending()] == ["deltacommit", "rollback"]
    return builder, storage, update, log


def _check_table(builder: TableBuilder, rows: dict[str, int]) -> None:
    """The table holds ``rows`` for both readers, nothing is left pending, and compaction runs."""
    storage = builder.storage
    assert isinstance(storage, LocalStorage)
    assert not load_timeline(storage).pending().instants
    assert builder.snapshot() == rows
    assert {r["id"]: r["v"] for r in apache_snapshot(str(storage.root)).to_pylist()} == rows
    builder.update(["b"], 5)
    assert compact(storage) is not None
    assert builder.snapshot() == {**rows, "b": 5}
    assert not load_timeline(storage).pending().instants


def test_a_rollback_that_failed_on_a_delete_is_finished_by_running_it_again(tmp_path: Path) -> None:
    """Run again, the rollback made a second, empty one ("0 files deleted"): the first stayed
    pending and the rolled-back write's log file stayed on storage."""
    builder, storage, update, log = _half_rolled_back(tmp_path)
    storage.refused.clear()
    result = write_client.rollback(storage, update)
    assert (result.rolled_back.timestamp, log in result.deleted_files) == (update, True)
    assert not storage.exists(log)
    assert [i.action for i in load_timeline(storage) if i.action == "rollback"] == ["rollback"]
    _check_table(builder, {"a": 1, "b": 3})


def test_a_pending_rollback_whose_plan_holds_full_locations_deletes_its_files(tmp_path: Path) -> None:
    """Hudi 0.14's plans list full locations (file:/x/t/p/f, of wherever the table was then):
    taken as paths in the table, every delete missed, the rollback completed saying it had
    deleted them, and the rolled-back write came back once its instant was archived."""
    from tidemark.timeline import Instant, State, instant_path, read_instant
    from tidemark.timeline import avro_metadata as avro

    builder, storage, update, log = _half_rolled_back(tmp_path)
    (pending,) = load_timeline(storage).pending().of_actions("rollback").instants
    requested = Instant(pending.timestamp, "rollback", State.REQUESTED)
    plan = avro.deserialize(read_instant(storage, requested), "HoodieRollbackPlan", "plan")
    here = f"file:{(tmp_path / 't').as_posix()}/"
    for request in plan["RollbackRequests"]:  # a table written elsewhere, then moved here
        request["filesToBeDeleted"] = [f.replace(here, "file:/elsewhere/t/") for f in request["filesToBeDeleted"] or []]
        blocks = request.get("logBlocksToBeDeleted") or {}
        request["logBlocksToBeDeleted"] = {f.replace(here, "file:/elsewhere/t/"): n for f, n in blocks.items()}
    assert any(log.endswith(f.rsplit("/", 1)[-1]) for r in plan["RollbackRequests"] for f in r["filesToBeDeleted"])
    (tmp_path / "t" / instant_path(requested)).write_bytes(avro.serialize("HoodieRollbackPlan", plan))
    storage.refused.clear()
    result = write_client.rollback(storage, update)
    assert result.rolled_back.timestamp == update
    assert not storage.exists(log)
    _check_table(builder, {"a": 1, "b": 3})


def _rollback_plan_paths(storage: LocalStorage) -> tuple[Path, dict[str, Any], list[str]]:
    """The pending rollback's plan: (its file, the plan, every file it lists)."""
    from tidemark.timeline import avro_metadata as avro

    (requested,) = storage.root.glob(".hoodie/*.rollback.requested")
    plan = avro.deserialize(requested.read_bytes(), "HoodieRollbackPlan", str(requested))
    listed = [
        f
        for r in plan["RollbackRequests"]
        for f in [*(r["filesToBeDeleted"] or []), *(r.get("logBlocksToBeDeleted") or {})]
    ]
    return requested, plan, listed


def test_a_rollback_plan_and_its_result_list_full_locations_as_hudi_writes_them(tmp_path: Path) -> None:
    """Plans held paths in the table ("p=1/f"): Hudi's rollback, finishing a pending one, takes
    each file's partition from its location under the base path, and failed on every such plan."""
    from tidemark.timeline import avro_metadata as avro

    builder, storage, update, log = _half_rolled_back(tmp_path)
    root = (tmp_path / "t").as_posix()
    _, _, listed = _rollback_plan_paths(storage)
    assert f"file:{root}/{log}" in listed
    for path in listed:
        assert path.startswith(f"file:{root}/"), path
        assert Path(path.removeprefix("file:")).is_file(), path
    storage.refused.clear()
    result = write_client.rollback(storage, update)
    assert not storage.exists(log)
    metadata = avro.deserialize(
        storage.read(f".hoodie/{result.rollback_instant.file_name}"), "HoodieRollbackMetadata", ""
    )
    recorded = [f for p in metadata["partitionMetadata"].values() for f in p["successDeleteFiles"]]
    assert f"file:{root}/{log}" in recorded
    _check_table(builder, {"a": 1, "b": 3})


def test_a_rollback_plan_of_an_earlier_tidemark_holding_paths_in_the_table_still_runs(tmp_path: Path) -> None:
    from tidemark.timeline import avro_metadata as avro

    builder, storage, update, log = _half_rolled_back(tmp_path)
    requested, plan, _ = _rollback_plan_paths(storage)
    prefix = f"file:{(tmp_path / 't').as_posix()}/"
    for request in plan["RollbackRequests"]:
        request["filesToBeDeleted"] = [f.removeprefix(prefix) for f in request["filesToBeDeleted"] or []]
        blocks = request.get("logBlocksToBeDeleted") or {}
        request["logBlocksToBeDeleted"] = {f.removeprefix(prefix): n for f, n in blocks.items()}
    requested.write_bytes(avro.serialize("HoodieRollbackPlan", plan))
    assert log in _rollback_plan_paths(storage)[2]
    storage.refused.clear()
    assert write_client.rollback(storage, update).rolled_back.timestamp == update
    assert not storage.exists(log)
    _check_table(builder, {"a": 1, "b": 3})


def test_no_compaction_is_planned_while_a_rollback_is_pending(tmp_path: Path) -> None:
    """A compaction planned over the log file of a write whose rollback had stopped lost that file
    when the next write finished the rollback: it failed at every run, and could not be rolled
    back once writes were logged on top of it."""
    builder, storage, update, _ = _half_rolled_back(tmp_path)
    with pytest.raises(PendingRollbackError, match=rf"rollback \d+ of {update} is unfinished.*tidemark rollback"):
        schedule_compaction(storage)
    with pytest.raises(StorageError, match="stays pending"):  # compact finishes it first: it still fails
        compact(storage)
    assert not load_timeline(storage).pending().of_actions("compaction").instants
    storage.refused.clear()
    assert builder.recover() == [update]  # the next write
    _check_table(builder, {"a": 1, "b": 3})


def test_a_pending_rollback_never_deletes_a_file_a_pending_compaction_plans_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan made over the files of a pending rollback (by an earlier tidemark) is run before the
    rollback deletes them, instead of failing at every run."""
    builder, storage, update, log = _half_rolled_back(tmp_path)
    monkeypatch.setattr(compaction, "check_no_pending_rollback", lambda *_: None)
    planned = schedule_compaction(storage)
    monkeypatch.undo()
    assert planned is not None
    assert any(log.endswith(name) for op in read_compaction_plan(storage, planned) for name in op.log_files)
    storage.refused.clear()
    refusal = rf"rolling back {update} would delete .*compaction {planned.timestamp} .*run the compaction first"
    with pytest.raises(PendingRollbackError, match=refusal):
        builder.recover()  # the next write
    assert storage.exists(log)
    assert compact(storage) is not None  # runs the plan, then finishes the rollback
    assert not storage.exists(log)
    _check_table(builder, {"a": 1, "b": 3})


@pytest.mark.s3
def test_a_rollback_stopped_at_its_inflight_file_on_s3_says_to_run_it_again(moto_server: str) -> None:
    """S3 gone while `tidemark rollback` moves its plan to inflight: before, the error was only
    `cannot create ...rollback.inflight`, with the rollback left pending."""
    location = f"s3://{create_bucket(moto_server)}/t"
    builder = TableBuilder(open_storage(location, s3_options(moto_server)))
    builder.insert(["a", "b"], 1)
    update = builder.update(["a"], 2)
    down = FaultyStorage(open_storage(location, s3_options(moto_server)))
    down.arm_at(".rollback.inflight")  # that request fails, and S3 stays down

    with pytest.raises(StorageError, match=r"injected fault: create_if_absent \S+\.rollback\.inflight") as e:
        write_client.rollback(down, update)
    (pending,) = load_timeline(builder.storage).pending().instants
    assert (
        f"the rollback {pending.timestamp} of {update} stays pending; once the cause is removed, "
        f"`tidemark rollback {location} {update}` run again finishes it"
    ) in str(e.value)

    write_client.rollback(builder.storage, update)  # what the error said, once S3 answers
    assert not load_timeline(builder.storage).pending().instants
    assert {r["id"]: r["v"] for r in read_snapshot(builder.storage).to_pylist()} == {"a": 1, "b": 1}
