"""A table service that stalled past its lease on the table lock (a GC pause, a frozen VM or
container) while another process took the lock over. It planned from a timeline that is no longer
the table's, and went on: a restore rolled back every write of a table whose savepoint had been
deleted and cleaned meanwhile, a clean deleted the files of a savepoint made meanwhile. Each now
checks that it still holds the lock before it writes its plan, and stops there.

The stall is made where the service has read the table and not yet written: its lease is made to
expire there (as a stall leaves it), and the other process's commands run then, taking the lock
over as they would from a stalled holder."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import FaultyStorage
from tests.support.table_builder import TableBuilder, slices_to_clean
from tidemark.errors import InstantStateError, LockLostError, StorageError
from tidemark.storage import LocalStorage
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.lock import LOCK_PATH, Lease, TableLock
from tidemark.table_services import archive as archive_module
from tidemark.table_services import clean as clean_module
from tidemark.table_services import restore as restore_module
from tidemark.table_services import savepoint as savepoint_module
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint, list_savepoints
from tidemark.timeline import SAVEPOINT, load_timeline

#: what the stalled service says
_STOPPED = r"taken over; the lock file now holds the lease of .*stopped before making its changes: run it again"


def _stalled_past_its_lease(storage: Storage) -> None:
    """The lock's lease as a holder's stall leaves it: expired, for the next taker to take over."""
    data, version = storage.read_versioned(LOCK_PATH)
    lease = Lease.from_bytes(data, LOCK_PATH)
    expired = dataclasses.replace(lease, expiration_ms=time.time_ns() // 1_000_000 - 1)
    storage.write_if_match(LOCK_PATH, expired.to_bytes(), version)


def _lock_taken_by_another_process(storage: Storage) -> None:
    with TableLock(storage, ConcurrencyConfig()):
        pass


#: where a service stalls: once it has read the table (after the call named), or between its
#: check of the lock and the write of its plan (before the call that writes it)
AFTER, BEFORE = "after", "before"


def _stalls_at(
    monkeypatch: pytest.MonkeyPatch,
    module: object,
    name: str,
    storage: Storage,
    meanwhile: Callable[[], object],
    when: str = AFTER,
) -> list[int]:
    """The service stalls past its lease at its first call of ``module.name``, ``when`` it runs,
    and ``meanwhile`` runs during the stall, as another process's commands. Returns a list
    counting the stalls."""
    original = getattr(module, name)
    stalls: list[int] = []

    def stall() -> None:
        if not stalls:
            stalls.append(1)
            _stalled_past_its_lease(storage)
            meanwhile()

    def stalled(*args: Any, **kwargs: Any) -> Any:
        if when == BEFORE:
            stall()
        result = original(*args, **kwargs)
        if when == AFTER:
            stall()
        return result

    monkeypatch.setattr(module, name, stalled)
    return stalls


def _savepoint_deleted_and_cleaned(storage: Storage, savepoint: str) -> None:
    """Another process's commands: the savepoint deleted, and a clean that takes its files."""
    delete_savepoint(storage, savepoint)
    cleaned = clean(storage, CleanConfig(commits_retained=1))
    assert cleaned is not None
    assert cleaned.deleted  # the savepoint's files


@pytest.mark.parametrize(("name", "when"), [("_check_no_live_writer", AFTER), ("request_new_instant", BEFORE)])
def test_a_restore_stalled_before_its_plan_does_not_empty_a_table_whose_savepoint_was_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, when: str
) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    create_savepoint(t.storage, first)
    t.update(["b"], 5)
    before = t.snapshot()

    meanwhile = functools.partial(_savepoint_deleted_and_cleaned, t.storage, first)
    stalls = _stalls_at(monkeypatch, restore_module, name, t.storage, meanwhile, when)
    with pytest.raises(LockLostError, match=_STOPPED):
        restore(t.storage, first)
    assert stalls
    assert t.snapshot() == before  # nothing rolled back
    assert not load_timeline(t.storage).pending().instants  # no restore plan left to finish


@pytest.mark.parametrize(("name", "when"), [("plan_clean", AFTER), ("request_new_instant", BEFORE)])
def test_a_clean_stalled_before_its_plan_keeps_the_files_of_a_savepoint_made_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, when: str
) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = slices_to_clean(t)
    meanwhile = functools.partial(create_savepoint, t.storage, first)
    stalls = _stalls_at(monkeypatch, clean_module, name, t.storage, meanwhile, when)
    with pytest.raises(LockLostError, match=_STOPPED):
        clean(t.storage, CleanConfig(commits_retained=1))
    assert stalls
    assert list_savepoints(t.storage) == [first]
    assert not load_timeline(t.storage).pending().instants  # no clean plan left to finish
    t.update(["b"], 5)
    restore(t.storage, first)  # its files are all there
    assert t.snapshot() == {"a": 1, "b": 1}


def test_an_archival_stalled_before_it_writes_archives_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for v in range(2, 7):
        t.update(["a"], v)
    clean(t.storage, CleanConfig(commits_retained=1))
    active = [str(i) for i in load_timeline(t.storage)]

    stalls = _stalls_at(
        monkeypatch, archive_module, "plan_archive", t.storage, lambda: _lock_taken_by_another_process(t.storage)
    )
    with pytest.raises(LockLostError, match=_STOPPED):
        archive(t.storage, ArchiveConfig(min_commits=1, max_commits=2))
    assert stalls
    assert [str(i) for i in load_timeline(t.storage)][: len(active)] == active  # none archived
    assert not (tmp_path / ".hoodie" / "archived").exists() or not any((tmp_path / ".hoodie" / "archived").iterdir())
    assert t.snapshot() == {"a": 6}


def test_a_savepoint_delete_stalled_before_it_deletes_leaves_the_savepoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"], 1)
    create_savepoint(t.storage, first)
    calls: list[int] = []
    original = savepoint_module._deletable

    def deletable(storage: Storage, timestamp: str) -> Any:
        found = original(storage, timestamp)
        calls.append(1)
        if len(calls) == 2:  # judged again under the lock: then the stall
            _stalled_past_its_lease(storage)
            _lock_taken_by_another_process(storage)
        return found

    monkeypatch.setattr(savepoint_module, "_deletable", deletable)
    with pytest.raises(LockLostError, match=_STOPPED):
        delete_savepoint(t.storage, first)
    assert list_savepoints(t.storage) == [first]


def test_a_savepoint_delete_stopped_half_way_leaves_it_listed_and_is_finished_by_running_it_again(
    tmp_path: Path,
) -> None:
    """It deleted the completed file first: stopped there (an S3 endpoint gone), the savepoint was
    no longer listed, its inflight file held archival back, and no command named it."""
    storage = FaultyStorage(LocalStorage(tmp_path))
    t = TableBuilder(storage)
    first = t.insert(["a"], 1)
    create_savepoint(storage, first)
    storage.arm_at(".savepoint.inflight")
    with pytest.raises(StorageError):  # its lease on the table lock left, a second long, as a killed one's
        delete_savepoint(storage, first, ConcurrencyConfig(lock_lease_ms=1_000))
    storage.disarm()
    assert list_savepoints(storage) == [first]
    delete_savepoint(storage, first)
    assert list_savepoints(storage) == []
    assert not load_timeline(storage).of_actions(SAVEPOINT).instants


class _PlanNotTakenBack(LocalStorage):
    """Local files where deleting a clean's or restore's requested plan fails (an S3 endpoint gone
    as the stalled service tried to take its plan back), until :attr:`failing` is cleared."""

    failing = True

    def delete(self, path: str) -> None:
        if self.failing and path.endswith((".clean.requested", ".restore.requested")):
            raise StorageError(f"cannot delete {path}: the endpoint went away")
        super().delete(path)


def test_a_clean_plan_left_by_a_cleaner_that_lost_the_lock_keeps_a_savepoint_made_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its plan could not be taken back: the next clean finished it, deleting the savepoint's
    files, and every restore to the savepoint was refused."""
    storage = _PlanNotTakenBack(tmp_path)
    t = TableBuilder(storage)
    first = slices_to_clean(t)
    meanwhile = functools.partial(create_savepoint, storage, first)
    stalls = _stalls_at(monkeypatch, clean_module, "request_new_instant", storage, meanwhile, BEFORE)
    with pytest.raises(LockLostError, match=_STOPPED):
        clean(storage, CleanConfig(commits_retained=1))
    assert stalls
    assert [i.action for i in load_timeline(storage).pending()] == ["clean"]  # the stale plan stayed
    storage.failing = False
    clean(storage, CleanConfig(commits_retained=1))  # finishes it
    assert not load_timeline(storage).pending().instants
    t.update(["b"], 5)
    restore(storage, first)
    assert t.snapshot() == {"a": 1, "b": 1}


def test_a_restore_plan_left_by_a_restore_that_lost_the_lock_is_removed_not_carried_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its plan could not be taken back: writes were refused until it was finished, and finishing
    it, as the refusal said to, rolled every write back onto a savepoint whose files a clean had
    deleted: the table read empty."""
    storage = _PlanNotTakenBack(tmp_path)
    t = TableBuilder(storage)
    first = slices_to_clean(t)
    create_savepoint(storage, first)
    t.update(["b"], 5)
    before = t.snapshot()

    meanwhile = functools.partial(_savepoint_deleted_and_cleaned, storage, first)
    stalls = _stalls_at(monkeypatch, restore_module, "request_new_instant", storage, meanwhile, BEFORE)
    with pytest.raises(LockLostError, match=_STOPPED):
        restore(storage, first)
    assert stalls
    assert [i.action for i in load_timeline(storage).pending()] == ["restore"]  # the stale plan stayed
    storage.failing = False
    with pytest.raises(InstantStateError, match=r"deleted .*the restore plan .* was removed: the table is as it was"):
        restore(storage, first)
    assert not load_timeline(storage).pending().instants
    assert t.snapshot() == before
    t.update(["a"], 6)  # writes go on
    assert t.snapshot() == {**before, "a": 6}
