"""Restore to a savepoint, and a restore that stopped half-way (its process died at any storage
call): running it again finishes it, under the same restore instant."""

from __future__ import annotations

import dataclasses
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.faults import FaultyStorage
from tests.support.model import apache_snapshot, hudi_s3_options
from tests.support.s3 import create_bucket, s3_options
from tests.support.table_builder import PARTITION, RECOVERY, TableBuilder, slices_to_clean
from tests.support.table_builder import _table as _rows
from tidemark.errors import InstantStateError, LockTimeoutError, PendingRestoreError, StorageError
from tidemark.storage import LocalStorage, open_storage
from tidemark.table.compaction import compact
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.lock import LOCK_PATH, TableLock
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import begin_write, rollback
from tidemark.table.write_handles import TaskContext, append_log_blocks
from tidemark.table_services import clean as clean_module
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean, plan_clean, run_clean
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint, list_savepoints
from tidemark.timeline import (
    CLEAN,
    DELTA_COMMIT,
    RESTORE,
    ROLLBACK,
    SAVEPOINT,
    Instant,
    State,
    create_requested,
    instant_path,
    load_timeline,
    next_instant_time,
    read_instant,
)
from tidemark.timeline import avro_metadata as avro


def _table(path: Path) -> tuple[TableBuilder, str, list[str]]:
    """A savepoint, then four writes after it (a compaction among them)."""
    t = TableBuilder(LocalStorage(path))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    later = [t.update(["a"], 2)]
    compacted = compact(t.storage)
    assert compacted is not None
    later += [compacted.timestamp, t.update(["b"], 3), t.insert(["c"], 3)]
    return t, savepoint, later


def _check_restored(root: Path, savepoint: str, later: list[str]) -> None:
    storage = LocalStorage(root)
    timeline = load_timeline(storage)
    assert not timeline.pending().instants, [str(i) for i in timeline.pending()]
    (done,) = timeline.of_actions(RESTORE).instants
    assert done.is_completed
    assert not set(later) & {i.timestamp for i in timeline.write_instants()}
    metadata = avro.deserialize(read_instant(storage, done), "HoodieRestoreMetadata", str(root))
    assert metadata["instantsToRollback"] == list(reversed(later))
    assert set(metadata["hoodieRestoreMetadata"]) == set(later)
    rollbacks = timeline.completed().of_actions(ROLLBACK).instants
    assert len(rollbacks) == len(later), "each write rolled back once"
    rows = read_snapshot(storage).to_pylist()
    assert {r["id"]: r["v"] for r in rows} == {"a": 1, "b": 1}


class _StallingAtCompletion(LocalStorage):
    """A writer's storage: as its commit creates the completed state file (holding the table lock),
    ``meanwhile`` runs once, as another process would while the writer stalled there."""

    def __init__(self, root: Path, meanwhile: Callable[[], None]) -> None:
        super().__init__(root)
        self.meanwhile = [meanwhile]

    def create_if_absent(self, path: str, data: bytes) -> None:
        if path.endswith(f".{DELTA_COMMIT}") and self.meanwhile:
            self.meanwhile.pop()()
        super().create_if_absent(path, data)


def test_a_restore_waits_for_the_table_lock_a_stalled_commit_holds(tmp_path: Path) -> None:
    """`tidemark restore` while a writer after the savepoint stalled inside its commit (holding the
    table lock) past its heartbeat's expiry: the restore deleted the write's files without the
    lock, and the writer, resumed, completed the write anyway (said committed, its rows gone, a
    completed deltacommit with no files). Now the restore waits for the lock; the write completes
    first, and the restore rolls it back with the other writes after the savepoint."""
    t = TableBuilder(LocalStorage(tmp_path))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    later = [t.update(["a"], 2)]
    writer = ConcurrencyConfig(heartbeat_interval_ms=100, heartbeat_tolerable_misses=1)
    # takes a heartbeat older than 50 ms for dead, and waits 300 ms for the lock
    impatient = ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1, lock_wait_ms=300)
    impatient = dataclasses.replace(impatient, lock_num_retries=0)
    files_before: list[str] = []

    def restore_meanwhile() -> None:
        write.heartbeat.stop(delete=False)  # the writer's process stalls: no more beats
        time.sleep(0.3)
        files_before.extend(_files(tmp_path))
        with pytest.raises(LockTimeoutError, match="held by"):
            restore(LocalStorage(tmp_path), savepoint, impatient)
        assert list(_files(tmp_path)) == files_before, "nothing deleted without the lock"

    storage = _StallingAtCompletion(tmp_path, restore_meanwhile)
    write = begin_write(storage, DELTA_COMMIT, "upsert", writer)
    rows = _rows(["a"], 5)
    ((group, base),) = t.groups.items()
    ctx = TaskContext(write.instant, 0, 7, 0)
    stat = append_log_blocks(storage, ctx, PARTITION, group, base, None, rows, rows["id"], [], t.schema)
    write.commit([stat], "upsert", t.schema)
    later.append(write.instant)
    assert files_before, "the writer stalled in its commit"
    assert t.snapshot() == {"a": 5, "b": 1}  # it completed, with its files
    restore(t.storage, savepoint, impatient)  # the write is the latest one after the savepoint now
    _check_restored(tmp_path, savepoint, later)


def test_restore_records_its_plan_as_hudi_does(tmp_path: Path) -> None:
    t, savepoint, later = _table(tmp_path / "t")
    restore(t.storage, savepoint)
    (done,) = load_timeline(t.storage).of_actions(RESTORE).instants
    requested = done.with_state(State.REQUESTED)
    plan = avro.deserialize(read_instant(t.storage, requested), "HoodieRestorePlan", instant_path(requested))
    assert plan["savepointToRestoreTimestamp"] == savepoint
    assert [i["commitTime"] for i in plan["instantsToRollback"]] == list(reversed(later))
    _check_restored(tmp_path / "t", savepoint, later)


def test_a_restore_stopped_at_any_storage_call_is_finished_by_running_it_again(tmp_path: Path) -> None:
    original = tmp_path / "original"
    _, savepoint, later = _table(original)
    reference = tmp_path / "reference"
    shutil.copytree(original, reference)
    counting = FaultyStorage(LocalStorage(reference))
    restore(counting, savepoint, RECOVERY)
    calls = counting.mutations
    assert calls > 10
    for k in range(1, calls + 1):
        root = tmp_path / f"killed-at-{k}"
        shutil.copytree(original, root)
        storage = FaultyStorage(LocalStorage(root))
        storage.arm(k)
        with pytest.raises(StorageError):
            restore(storage, savepoint, RECOVERY)
        storage.disarm()
        restore(storage, savepoint, RECOVERY)  # what the user does next: run the same command again
        _check_restored(root, savepoint, later)
        shutil.rmtree(root)


def test_an_unfinished_restore_to_another_savepoint_is_named(tmp_path: Path) -> None:
    t, savepoint, later = _table(tmp_path / "t")
    create_savepoint(t.storage, later[1])  # the compaction's commit
    storage = FaultyStorage(t.storage)
    storage.arm(3)
    with pytest.raises(StorageError):
        restore(storage, savepoint, RECOVERY)
    storage.disarm()
    with pytest.raises(InstantStateError, match=f"to savepoint {savepoint} is unfinished"):
        restore(storage, later[1])
    restore(storage, savepoint)
    _check_restored(tmp_path / "t", savepoint, later)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_nothing_changes_a_table_a_restore_left_half_done(tmp_path: Path) -> None:
    # the restore's plan was made before; a write or compaction made now would survive the
    # restore that was meant to remove everything after the savepoint (Hudi refuses them too)
    t, savepoint, later = _table(tmp_path / "t")
    storage = FaultyStorage(t.storage)
    storage.arm(5)
    with pytest.raises(StorageError):
        restore(storage, savepoint, RECOVERY)
    storage.disarm()
    before = _files(tmp_path / "t")
    finish = f"finish it first with `tidemark restore {t.storage.uri} {savepoint}`"
    attempts = (
        t.recover,
        lambda: t.update(["a"], 9),
        lambda: t.insert(["z"], 9),
        lambda: compact(t.storage),
        lambda: create_savepoint(t.storage, later[0]),
    )
    for attempt in attempts:
        with pytest.raises(PendingRestoreError, match=f"to savepoint {savepoint} is unfinished.*{re.escape(finish)}"):
            attempt()
    assert _files(tmp_path / "t") == before, "a refused write changed the table"
    restore(t.storage, savepoint)
    _check_restored(tmp_path / "t", savepoint, later)
    t.update(["a"], 9)
    assert {r["id"]: r["v"] for r in read_snapshot(t.storage).to_pylist()} == {"a": 9, "b": 1}


def test_the_savepoint_of_an_unfinished_restore_is_not_deleted(tmp_path: Path) -> None:
    """Deleting it was accepted, and the table was stuck for good: the restore run again said there
    was no savepoint to restore to, and every other change named that restore as what to run."""
    t, savepoint, later = _table(tmp_path / "t")
    create_savepoint(t.storage, later[1])  # the compaction's commit
    storage = FaultyStorage(t.storage)
    storage.arm(5)
    with pytest.raises(StorageError):
        restore(storage, savepoint, RECOVERY)  # a crash leaves no lock held: nothing waits its lease out
    storage.disarm()
    (pending,) = load_timeline(t.storage).pending().of_actions(RESTORE).instants
    with pytest.raises(PendingRestoreError) as refused:
        delete_savepoint(t.storage, savepoint)
    assert str(refused.value) == (
        f"{t.storage.uri}: cannot delete the savepoint {savepoint}: restore {pending.timestamp} to savepoint "
        f"{savepoint} is unfinished; finish it first with `tidemark restore {t.storage.uri} {savepoint}`"
    )
    assert list_savepoints(t.storage) == [savepoint, later[1]]
    delete_savepoint(t.storage, later[1])  # not the restore's: it rolls that commit back either way
    restore(t.storage, savepoint)
    _check_restored(tmp_path / "t", savepoint, later)
    delete_savepoint(t.storage, savepoint)
    assert list_savepoints(t.storage) == []


@pytest.mark.parametrize("stopped", ["in its rollbacks", "at its completing write"])
def test_a_restore_whose_savepoint_is_gone_is_finished_from_its_plan(tmp_path: Path, stopped: str) -> None:
    """A table earlier versions left stuck (they let the savepoint be deleted meanwhile): the
    restore run again said there was no savepoint to restore to, and `tidemark rollback` of the
    savepointed commit was accepted, which left the table before its savepoint."""
    root = tmp_path / "t"
    t, savepoint, later = _table(root)
    storage = FaultyStorage(t.storage)
    if stopped == "in its rollbacks":
        storage.arm(5)
    else:
        storage.arm_at(".restore")  # every write rolled back, the restore not completed
    with pytest.raises(StorageError):
        restore(storage, savepoint, RECOVERY)  # a crash leaves no lock held: nothing waits its lease out
    storage.disarm()
    for state in State:  # as earlier versions' savepoint delete did
        t.storage.delete(instant_path(Instant(savepoint, SAVEPOINT, state)))
    assert list_savepoints(t.storage) == []
    before = _files(root)
    finish = f"finish it first with `tidemark restore {t.storage.uri} {savepoint}`"
    with pytest.raises(PendingRestoreError, match=f"to savepoint {savepoint} is unfinished.*{re.escape(finish)}"):
        rollback(t.storage, savepoint)
    assert _files(root) == before, "a refused rollback changed the table"
    restore(t.storage, savepoint, RECOVERY)  # what every refusal names
    _check_restored(root, savepoint, later)


def test_a_clean_keeps_the_snapshot_an_unfinished_restore_whose_savepoint_is_gone_restores_to(tmp_path: Path) -> None:
    """With the savepoint gone (Apache's savepoint delete, or an earlier version's), a clean made
    while the restore was unfinished deleted the savepoint's file slices; the restore run again
    then reported success on a table short of rows (both readers)."""
    root = tmp_path / "t"
    t, savepoint, later = _table(root)
    storage = FaultyStorage(t.storage)
    storage.arm_at(f"{later[-1]}.deltacommit")  # stopped at its first rollback, after its plan
    with pytest.raises(StorageError):
        restore(storage, savepoint, RECOVERY)
    storage.disarm()
    for state in State:
        t.storage.delete(instant_path(Instant(savepoint, SAVEPOINT, state)))
    cleaned = clean(t.storage, CleanConfig(commits_retained=1))
    assert cleaned is not None, "the clean had slices after the savepoint to delete"
    restore(t.storage, savepoint, RECOVERY)
    _check_restored(root, savepoint, later)
    theirs = apache_snapshot(str(root))
    assert dict(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist(), strict=True)) == {"a": 1, "b": 1}


class _StallingAtTheLock(LocalStorage):
    """A restore's storage: as it first reads the table lock (its checks made, its plan not yet
    written), ``meanwhile`` runs once, as other processes would while it waited there."""

    def __init__(self, root: Path, meanwhile: Callable[[], None]) -> None:
        super().__init__(root)
        self.meanwhile = [meanwhile]

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        if path == LOCK_PATH and self.meanwhile:
            self.meanwhile.pop()()
        return super().read_versioned(path)


def test_a_savepoint_deleted_and_cleaned_while_a_restore_waited_for_the_lock_is_not_restored_to(
    tmp_path: Path,
) -> None:
    """The restore checked its savepoint before the lock, not again under it: with the savepoint
    deleted and its files cleaned meanwhile, it rolled back every later write and reported success
    on an empty table (both readers)."""
    root = tmp_path / "t"
    t, savepoint, _later = _table(root)

    def meanwhile() -> None:
        delete_savepoint(t.storage, savepoint)
        assert clean(t.storage, CleanConfig(commits_retained=1)) is not None

    before = t.snapshot()
    with pytest.raises(InstantStateError, match=f"no savepoint at {savepoint} to restore to"):
        restore(_StallingAtTheLock(root, meanwhile), savepoint)
    assert t.snapshot() == before, "a refused restore changed the table"
    assert not load_timeline(t.storage).of_actions(RESTORE).instants


def test_a_savepoint_cleaned_while_a_restore_waited_for_the_lock_is_not_restored_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the savepoint kept but its files taken by a clean planned before it was made."""
    _cleans_as_earlier_versions_did(monkeypatch)
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    plan = plan_clean(t.storage, CleanConfig(commits_retained=1))
    create_savepoint(t.storage, first)

    def meanwhile() -> None:
        ts = next_instant_time(load_timeline(t.storage))
        requested = create_requested(t.storage, ts, CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(t.storage)))
        run_clean(t.storage, requested)

    with pytest.raises(InstantStateError, match=f"cannot restore to the savepoint {first}: the clean "):
        restore(_StallingAtTheLock(tmp_path, meanwhile), first)
    assert t.snapshot() == {"a": 4, "b": 3}


def test_a_rollback_of_a_write_an_unfinished_restore_rolled_back_names_the_restore(tmp_path: Path) -> None:
    t, savepoint, later = _table(tmp_path / "t")
    storage = FaultyStorage(t.storage)
    storage.arm_at(f"{later[-2]}.deltacommit")  # the newest write rolled back, the next one not
    with pytest.raises(StorageError):
        restore(storage, savepoint, RECOVERY)
    storage.disarm()
    (pending,) = load_timeline(t.storage).pending().of_actions(RESTORE).instants
    with pytest.raises(InstantStateError) as refused:
        rollback(t.storage, later[-1])
    assert str(refused.value).endswith(
        f"; restore {pending.timestamp} to savepoint {savepoint} is unfinished: finish it first with "
        f"`tidemark restore {t.storage.uri} {savepoint}`"
    )


def test_a_savepoint_delete_is_judged_under_the_table_lock(tmp_path: Path) -> None:
    """The delete took no lock: begun before a restore to its savepoint wrote its plan (under the
    lock), it passed its check for an unfinished restore and deleted the savepoint that restore
    then rolled back to (and a clean then took its files)."""
    t, savepoint, _later = _table(tmp_path / "t")
    ours = ConcurrencyConfig(lock_wait_ms=500, lock_num_retries=0)
    with TableLock(t.storage, ours), pytest.raises(LockTimeoutError):  # held by a restore planning, say
        delete_savepoint(t.storage, savepoint, ours)
    assert list_savepoints(t.storage) == [savepoint]
    delete_savepoint(t.storage, savepoint, ours)
    assert list_savepoints(t.storage) == []


def _cleans_as_earlier_versions_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean plan carried out as earlier versions (and Apache's cleaner) carry it out: every file
    it lists deleted, what savepoints keep by then included."""
    monkeypatch.setattr(clean_module, "savepointed_files", lambda *_args, **_kwargs: {})


def test_a_restore_to_a_savepoint_a_clean_partly_deleted_is_refused_before_any_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean planned before the savepoint was made (as one planning while it was made did)
    deleted its files; the restore then rolled back every later write and reported success on an
    empty table."""
    _cleans_as_earlier_versions_did(monkeypatch)
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    plan = plan_clean(t.storage, CleanConfig(commits_retained=1))
    create_savepoint(t.storage, first)
    ts = next_instant_time(load_timeline(t.storage))
    run_clean(
        t.storage, create_requested(t.storage, ts, CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(t.storage)))
    )
    before = _files(tmp_path)
    with pytest.raises(InstantStateError) as refused:
        restore(t.storage, first)
    said = str(refused.value)
    assert said.startswith(f"{t.storage.uri}: cannot restore to the savepoint {first}: the clean {ts} deleted ")
    assert "which its snapshot needs; nothing was rolled back" in said
    gone = said.split(" deleted ", 1)[1].split(",", 1)[0]
    assert not (tmp_path / gone).exists()
    assert _files(tmp_path) == before, "a refused restore changed the table"
    assert t.snapshot() == {"a": 4, "b": 3}


def test_a_write_after_a_restore_and_an_archival_updates_each_key_where_it_lives(tmp_path: Path) -> None:
    # the restore leaves the overwritten-then-restored partition a log-only group whose only data
    # is a rolled-back update of "a"; once archival has moved the restore's savepoint out, that
    # group counts as committed (it is older than the active timeline), and a writer that took
    # its rolled-back keys for live ones routed the next update of "a" there: two rows of "a"
    t = TableBuilder(LocalStorage(tmp_path))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    t.insert_overwrite(["a"], 2, "p=1")
    t.upsert(["a"], 3, "p=1")
    restore(t.storage, savepoint)
    delete_savepoint(t.storage, savepoint)
    for v in range(4, 8):
        t.upsert(["b"], v, "p=1")
    clean(t.storage, CleanConfig(commits_retained=1))
    archive(t.storage, ArchiveConfig(min_commits=1, max_commits=2))
    first_write = load_timeline(t.storage).completed().write_instants().instants[0].timestamp
    assert first_write > savepoint, "the archival moved the savepointed write out"
    t.upsert(["a"], 9, "p=1")
    ours = sorted((r["id"], r["v"]) for r in read_snapshot(t.storage).to_pylist())
    assert ours == [("a", 9), ("b", 7)]
    theirs = apache_snapshot(str(tmp_path))
    assert sorted(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist(), strict=True)) == ours


def test_a_restored_compaction_leaves_no_slice_behind_for_readers_after_archival(tmp_path: Path) -> None:
    """A restore past a compaction rolls back the writes logged on top of it and the compaction:
    none of their files may stay. Left behind, those log files start a file slice of an instant
    that no longer exists; once archival moves the active timeline past it, readers take it for an
    archived one and read it instead of the slice before it, and the group's rows vanish."""
    t, first, compaction = _savepoint_compaction_and_a_write_on_top(tmp_path)
    _restore_then_archive_past(t, first, compaction)


def _savepoint_compaction_and_a_write_on_top(root: Path) -> tuple[TableBuilder, str, str]:
    """Keys a and b at 1 (savepointed), a at 2 compacted, a at 3 logged on top of the compaction's
    slice: the table, the savepoint and the compaction."""
    t = TableBuilder(LocalStorage(root))
    first = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, first)
    t.update(["a"], 2)
    compacted = compact(t.storage)
    assert compacted is not None
    t.update(["a"], 3)
    return t, first, compacted.timestamp


def _restore_then_archive_past(t: TableBuilder, savepoint: str, compaction: str) -> None:
    """Restore to ``savepoint`` (keys a and b at 1), check no file of ``compaction`` is left, then
    write, clean and archive until the active timeline starts after it: both readers must still
    read a at 1 and b at its last value."""
    root = Path(t.storage.uri)
    restore(t.storage, savepoint)
    delete_savepoint(t.storage, savepoint)
    assert not [p for p in root.rglob(f"*_{compaction}*") if ".hoodie" not in p.parts]
    for v in range(5, 10):
        t.update(["b"], v)
    clean(t.storage, CleanConfig(commits_retained=1))
    archive(t.storage, ArchiveConfig(min_commits=1, max_commits=2))
    first_write = load_timeline(t.storage).write_instants().instants[0].timestamp
    assert first_write > compaction, "the active timeline has moved past the compaction"
    assert {r["id"]: r["v"] for r in read_snapshot(t.storage).to_pylist()} == {"a": 1, "b": 9}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(root)).to_pylist()} == {"a": 1, "b": 9}


def _append_as_hdfs_does(root: Path, later_write: str, log_of_earlier: Path, log_of_later: Path) -> None:
    """Turn two writers' log files into one, as Apache Hudi leaves them on a file system that can
    append (HDFS): the later write's blocks appended to the earlier write's file, and its commit
    naming that file."""
    with log_of_earlier.open("ab") as out:
        out.write(log_of_later.read_bytes())
    log_of_later.unlink()
    commit = root / ".hoodie" / f"{later_write}.deltacommit"
    commit.write_text(commit.read_text().replace(log_of_later.name, log_of_earlier.name))


def test_a_restored_compaction_leaves_no_slice_behind_when_writers_shared_a_log_file(tmp_path: Path) -> None:
    """As above, with the writes on top of the compaction appended to one log file (HDFS): that
    file holds other writes' blocks at each rollback, so it gets rollback blocks rather than
    being deleted; once the compaction is rolled back too, nothing in the slice is live, and the
    slice must go with it."""
    t, first, compaction = _savepoint_compaction_and_a_write_on_top(tmp_path)
    (earlier,) = list(tmp_path.rglob(f".*_{compaction}.log.*"))
    later = t.update(["b"], 4)
    (added,) = [p for p in tmp_path.rglob(f".*_{compaction}.log.*") if p != earlier]
    _append_as_hdfs_does(tmp_path, later, earlier, added)
    assert {r["id"]: r["v"] for r in read_snapshot(t.storage).to_pylist()} == {"a": 3, "b": 4}
    _restore_then_archive_past(t, first, compaction)


def test_a_savepoint_whose_commit_an_earlier_restore_rolled_back_is_refused(tmp_path: Path) -> None:
    """After a restore to the first of two savepoints, a restore to the second reported success
    and left the table at the first one's state."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    first = t.upsert(["a"], 1)
    create_savepoint(t.storage, first)
    second = t.upsert(["a"], 2)
    create_savepoint(t.storage, second)
    restore(t.storage, first)
    with pytest.raises(InstantStateError, match=rf"savepoint {second} holds a commit that is no longer.*delete it"):
        restore(t.storage, second)
    assert t.snapshot() == {"a": 1}
    delete_savepoint(t.storage, second)


class _ImmutablePartition(LocalStorage):
    """A partition folder made immutable (``chattr +i``) while ``locked``: nothing in it can be deleted."""

    def __init__(self, root: Path, partition: str) -> None:
        super().__init__(root)
        self.partition = partition
        self.locked = True

    def delete(self, path: str) -> None:
        if self.locked and path.startswith(f"{self.partition}/"):
            raise StorageError(f"cannot delete {self.full_uri(path)}: [Errno 1] Operation not permitted")
        super().delete(path)


def test_a_restore_stopped_inside_a_rollback_says_to_run_the_restore_again(tmp_path: Path) -> None:
    """Before, the error named `tidemark rollback` (and the next write) as the way to finish: that
    finished the rollback but left the restore unfinished, and the next write was refused."""
    t, savepoint, later = _table(tmp_path / "t")
    storage = _ImmutablePartition(tmp_path / "t", PARTITION)
    again = f"`tidemark restore {storage.uri} {savepoint}` run again finishes it"
    for _ in range(2):  # the first run stops in a rollback it starts, the second in the one it resumes
        with pytest.raises(StorageError, match="Operation not permitted") as excinfo:
            restore(storage, savepoint, RECOVERY)
        assert again in str(excinfo.value)
        assert "tidemark rollback" not in str(excinfo.value)
        assert "next write" not in str(excinfo.value)
    storage.locked = False  # the cause removed; then what the error said to run
    restore(storage, savepoint)
    _check_restored(tmp_path / "t", savepoint, later)
    t.update(["a"], 9)  # writes are taken again
    assert t.snapshot() == {"a": 9, "b": 1}


@pytest.mark.s3
@pytest.mark.parametrize("suffix", [".restore.inflight", ".rollback.requested", ".rollback.inflight"])
def test_a_restore_stopped_at_its_own_instants_on_s3_says_to_run_it_again(moto_server: str, suffix: str) -> None:
    """S3 gone while the restore creates its own state files or one of its rollback's: before,
    the error was only `cannot create ...`, with the restore left pending and every write refused."""
    location = f"s3://{create_bucket(moto_server)}/t"
    t = TableBuilder(open_storage(location, s3_options(moto_server)))
    savepoint = t.insert(["a", "b"], 1)
    create_savepoint(t.storage, savepoint)
    t.update(["a"], 2)
    compact(t.storage)
    t.update(["b"], 3)
    down = FaultyStorage(open_storage(location, s3_options(moto_server)))
    down.arm_at(suffix)  # that request fails, and S3 stays down

    with pytest.raises(StorageError, match=rf"injected fault: create_if_absent \S+{re.escape(suffix)}") as e:
        restore(down, savepoint, RECOVERY)
    (pending,) = load_timeline(t.storage).pending().of_actions(RESTORE).instants
    assert (
        f"the restore {pending.timestamp} to savepoint {savepoint} stays pending; once the cause is removed, "
        f"`tidemark restore {location} {savepoint}` run again finishes it"
    ) in str(e.value)

    restore(t.storage, savepoint)  # what the error said, once S3 answers
    assert not load_timeline(t.storage).pending().instants
    expected = {"a": 1, "b": 1}
    assert {r["id"]: r["v"] for r in read_snapshot(t.storage).to_pylist()} == expected
    apache = apache_snapshot(location, hudi_s3_options(moto_server)).to_pylist()
    assert {r["id"]: r["v"] for r in apache} == expected
