"""Savepoints: what may be savepointed after cleans and while earlier instants are pending, and a
savepoint command that crashed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.faults import FaultyStorage
from tests.support.table_builder import TableBuilder, slices_to_clean
from tidemark.errors import InstantStateError, InvalidInstantError, StorageError
from tidemark.storage import LocalStorage
from tidemark.table.compaction import compact, schedule_compaction
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.write_client import commit_write, rollback, start_write
from tidemark.table.write_handles import TaskContext
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean, plan_clean
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint, list_savepoints
from tidemark.timeline import CLEAN, COMMIT, SAVEPOINT, create_requested, load_timeline, next_instant_time
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.active import claim_path


def test_a_crashed_savepoint_command_is_finished_by_running_it_again(tmp_path: Path) -> None:
    storage = FaultyStorage(LocalStorage(tmp_path))
    t = TableBuilder(storage)
    first = t.insert(["a"], 1)
    storage.arm_at(".savepoint")  # the inflight file is written, the completed one is not
    with pytest.raises(StorageError):  # its lease on the table lock left, a second long, as a killed one's
        create_savepoint(storage, first, concurrency=ConcurrencyConfig(lock_lease_ms=1_000))
    storage.disarm()
    assert [str(i) for i in load_timeline(storage).of_actions(SAVEPOINT)] == [f"{first}.savepoint[INFLIGHT]"]
    assert list_savepoints(storage) == []
    create_savepoint(storage, first)  # refused before: the inflight file already existed
    assert list_savepoints(storage) == [first]
    # run once more (its answer was lost, say): told it is there, not "another writer got there first"
    with pytest.raises(InstantStateError, match=f"{first} is savepointed already"):
        create_savepoint(storage, first)
    assert list_savepoints(storage) == [first]


def test_no_savepoint_on_files_a_keep_latest_file_versions_clean_deleted(tmp_path: Path) -> None:
    """Found by the model-based test: that policy records no retained commit, so any instant could
    be savepointed, and a restore to it lost the rows of the deleted slice."""
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    result = clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    assert result is not None
    assert result.deleted, "the first slice is gone"
    with pytest.raises(InstantStateError, match="cannot savepoint"):
        create_savepoint(t.storage, first)
    latest = load_timeline(t.storage).completed().write_instants().instants[-1].timestamp
    create_savepoint(t.storage, latest)
    t.update(["b"], 5)
    restore(t.storage, latest)
    assert t.snapshot() == {"a": 4, "b": 3}


def test_no_savepoint_before_what_a_pending_clean_will_delete(tmp_path: Path) -> None:
    """A clean planned and not yet run deletes its files when it resumes: its retained commit
    bounds savepoints as a completed clean's does."""
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    plan = plan_clean(t.storage, CleanConfig(commits_retained=1))
    assert plan.earliest_commit_to_retain is not None
    assert plan.files_to_delete
    ts = next_instant_time(load_timeline(t.storage))
    create_requested(t.storage, ts, CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(t.storage)))
    with pytest.raises(InstantStateError, match="cannot savepoint"):
        create_savepoint(t.storage, first)


class _SavepointWhileACleanPlans(LocalStorage):
    """Storage where `tidemark savepoint create` of ``instant`` runs (in a thread, as another
    process would) once a clean has planned, just before its plan is on the timeline."""

    def __init__(self, root: Path, instant: str) -> None:
        super().__init__(root)
        self.instant = instant
        self.thread: threading.Thread | None = None
        self.outcome: list[object] = []

    def create_if_absent(self, path: str, content: bytes) -> None:
        if path.endswith(".clean.requested") and self.thread is None:
            self.thread = threading.Thread(target=self._savepoint)
            self.thread.start()
            self.thread.join(1.0)  # time enough to finish, unless it waits for the clean
        super().create_if_absent(path, content)

    def _savepoint(self) -> None:
        try:
            self.outcome.append(create_savepoint(LocalStorage(self.root), self.instant))
        except Exception as e:  # handed to the test's thread
            self.outcome.append(e)


def test_a_savepoint_made_while_a_clean_plans_waits_for_that_clean(tmp_path: Path) -> None:
    """It was accepted: the clean, planned without it, then deleted the savepointed files, and a
    restore to the savepoint emptied the table."""
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    storage = _SavepointWhileACleanPlans(tmp_path, first)
    result = clean(storage, CleanConfig(commits_retained=1))
    assert storage.thread is not None
    storage.thread.join(30)
    assert result is not None
    assert result.deleted
    (outcome,) = storage.outcome
    assert isinstance(outcome, InstantStateError), outcome
    assert (
        f"cannot savepoint {first}: a clean may already have removed its files (clean {result.instant.timestamp}"
        in str(outcome)
    )
    assert list_savepoints(t.storage) == []


def test_a_savepointed_commit_is_not_rolled_back_until_its_savepoint_is_deleted(tmp_path: Path) -> None:
    """Rolling back a savepointed commit deleted the files the savepoint keeps, and a restore to
    that savepoint then reported success on a table without them."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    second = t.insert(["b"], 2)
    create_savepoint(t.storage, second)
    files = sorted(p for p in tmp_path.rglob("*") if ".hoodie" not in p.parts)
    with pytest.raises(InstantStateError, match=f"{second}.*is savepointed.*tidemark savepoint delete"):
        rollback(t.storage, second)
    assert sorted(p for p in tmp_path.rglob("*") if ".hoodie" not in p.parts) == files
    assert t.snapshot() == {"a": 1, "b": 2}
    delete_savepoint(t.storage, second)
    rollback(t.storage, second)
    assert t.snapshot() == {"a": 1}


def test_savepointing_an_archived_instant_says_it_is_archived(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"], 1)
    for v in range(2, 7):
        t.update(["a"], v)
    clean(t.storage, CleanConfig(commits_retained=1))
    archive(t.storage, ArchiveConfig(min_commits=1, max_commits=2))
    assert load_timeline(t.storage).instants[0].timestamp > first
    with pytest.raises(InstantStateError, match=f"no completed write instant {first} .*is archived"):
        create_savepoint(t.storage, first)


def test_savepointing_an_instant_that_never_was_does_not_say_it_is_archived(tmp_path: Path) -> None:
    """An instant older than the active timeline was said to be archived on a table whose
    archive was empty: the user went looking for it there."""
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"], 1)
    with pytest.raises(InstantStateError) as raised:
        create_savepoint(t.storage, "20200101000000000")
    assert str(raised.value) == (
        f"{t.storage.uri}: no completed write instant 20200101000000000 to savepoint "
        f"(the active timeline begins at {first})"
    )


def test_a_savepoint_records_when_it_was_made_in_epoch_millis_as_hudi_does(tmp_path: Path) -> None:
    """It was written in seconds: Hudi (``System.currentTimeMillis()``) read it as January 1970."""
    t = TableBuilder(LocalStorage(tmp_path))
    commit = t.insert(["a"])
    done = create_savepoint(t.storage, commit)
    metadata = avro.deserialize(t.storage.read(f".hoodie/{done.file_name}"), "HoodieSavepointMetadata", "")
    assert abs(metadata["savepointedAt"] - time.time() * 1000) < 10_000


def test_a_savepoint_is_made_by_a_uid_with_no_passwd_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod run as an arbitrary uid (OpenShift), no USER nor LOGNAME: `tidemark savepoint create`
    failed with a KeyError traceback (getpwuid(): uid not found), for a field only informational."""
    import os
    import pwd

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    t = TableBuilder(LocalStorage(tmp_path))
    commit = t.insert(["a"])
    done = create_savepoint(t.storage, commit)
    assert list_savepoints(t.storage) == [commit]
    metadata = avro.deserialize(t.storage.read(f".hoodie/{done.file_name}"), "HoodieSavepointMetadata", "")
    assert metadata["savepointedBy"] == f"uid {os.getuid()}"


@pytest.mark.parametrize("bad", [None, "2024-01-01", 20240101000000])
def test_a_savepoint_time_that_is_no_instant_time_is_refused_by_name(tmp_path: Path, bad: object) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for call in (create_savepoint, delete_savepoint, restore):
        with pytest.raises(InvalidInstantError, match=f"not an instant time .*{bad!r}"):
            call(t.storage, bad)  # type: ignore[arg-type]
    assert list_savepoints(t.storage) == []


def _savepoint_files(t: TableBuilder) -> list[str]:
    return sorted(p.name for p in (Path(t.storage.root) / ".hoodie").glob("*.savepoint*"))


def test_no_savepoint_while_a_write_earlier_than_it_is_pending(tmp_path: Path) -> None:
    """A write W started before T and committed after it (optimistic concurrency, other file
    groups): the savepoint of T, made while W ran, listed b's slice of before W, yet reads as of T
    include W once it commits. Nothing kept W's file, a clean deleted it, and the savepoint could no
    longer be restored. Apache Hudi's SavepointActionExecutor does not look for pending instants
    (it lists the latest slices before or on the instant on the timeline as it is); tidemark
    refuses, before writing anything, until W has ended."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.upsert(["b"], 1, "p=2")
    t.upsert(["a"], 1, "p=1")
    w = start_write(t.storage, COMMIT, "upsert")  # updates b, in p=2
    sp = t.upsert(["a"], 2, "p=1")
    with pytest.raises(InstantStateError) as refused:
        create_savepoint(t.storage, sp)
    assert str(refused.value).startswith(
        f"{t.storage.uri}: cannot savepoint {sp} while commit {w.timestamp}, earlier than it, is pending (no heartbeat"
    )
    assert str(refused.value).endswith(
        f"once it completes, reads as of {sp} include its files, which this savepoint would not keep; wait for it "
        f"to end, or roll it back (`tidemark rollback {t.storage.uri} {w.timestamp}`), then savepoint again"
    )
    assert _savepoint_files(t) == []
    index = t._index("p=2")
    stats = t._write_routed(TaskContext(w.timestamp, 0, 4, 0), "p=2", {index["b"]: (["b"], [])}, 50)
    commit_write(t.storage, w, stats, "upsert", t.schema)
    create_savepoint(t.storage, sp)  # W has ended: the savepoint lists its file
    t.upsert(["b"], 60, "p=2")
    for v in range(3, 6):
        t.upsert(["a"], v, "p=1")
    assert clean(t.storage, CleanConfig(commits_retained=1)) is not None
    restore(t.storage, sp)
    assert t.snapshot() == {"a": 2, "b": 50}


def test_no_savepoint_while_a_compaction_earlier_than_it_is_pending(tmp_path: Path) -> None:
    """Reads as of the savepoint's instant read the compaction's base files once it completes
    (not the slices it merges, which the savepoint would list while it is pending)."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    planned = schedule_compaction(t.storage)
    assert planned is not None
    sp = t.update(["b"], 3)
    with pytest.raises(InstantStateError) as refused:
        create_savepoint(t.storage, sp)
    assert str(refused.value).startswith(
        f"{t.storage.uri}: cannot savepoint {sp} while compaction {planned.timestamp}, earlier than it, is pending "
        "(no heartbeat (no process runs it"
    )
    assert str(refused.value).endswith(
        f"once it completes, reads as of {sp} read its base files, which this savepoint would not keep; let it "
        f"finish (`tidemark compact {t.storage.uri}` finishes a pending compaction), then savepoint again"
    )
    assert _savepoint_files(t) == []
    compact(t.storage)
    create_savepoint(t.storage, sp)
    assert list_savepoints(t.storage) == [sp]


def test_no_savepoint_while_an_instant_earlier_than_it_is_being_opened(tmp_path: Path) -> None:
    """A claimed time not yet on the timeline: the instant opening there may be a write."""
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"], 1)
    sp = t.update(["a"], 2)
    opening = str(int(first) + 1)  # read from its clock before sp's writer read its own
    assert opening < sp
    t.storage.create_if_absent(claim_path(opening), b"")
    with pytest.raises(InstantStateError, match=f"cannot savepoint {sp} while an instant at {opening}, earlier"):
        create_savepoint(t.storage, sp)
    assert _savepoint_files(t) == []
    t.storage.delete(claim_path(opening))
    create_savepoint(t.storage, sp)
    assert list_savepoints(t.storage) == [sp]


def test_a_claim_a_killed_process_left_long_ago_does_not_hold_savepoints(tmp_path: Path) -> None:
    """Review 32: it held every savepoint for good while cleaning was off (no clean removed it)."""
    import datetime

    from tidemark.timeline.active import new_instant_time

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    sp = t.update(["a"], 2)
    abandoned = new_instant_time(datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2))
    t.storage.create_if_absent(claim_path(abandoned), b"")
    create_savepoint(t.storage, sp)
    assert list_savepoints(t.storage) == [sp]
