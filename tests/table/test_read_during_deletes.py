"""Reads that a rollback, restore or clean overtakes: the reader listed its snapshot's files, then
another process deleted one of them before the reader opened it. These run beside readers; the
read must say that the table changed while it ran and that it is to read again, not give a bare
"no such file" that reads as a damaged table. A file missing with no such change is damage, and
still said so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.table_builder import TableBuilder
from tidemark.errors import ObjectNotFoundError, TableError
from tidemark.storage import LocalStorage
from tidemark.storage.base import ByteSource
from tidemark.table.compaction import compact, schedule_compaction
from tidemark.table.incremental import read_incremental
from tidemark.table.snapshot import SnapshotReader, read_snapshot
from tidemark.table.write_client import rollback
from tidemark.table_services.clean import CleanConfig, clean

KEYS = [f"k{i}" for i in range(4)]


class _ChangedAtFirstOpen(LocalStorage):
    """The reader's storage: as the reader opens its first data file (its timeline loaded and
    its files listed), ``change`` runs, as another process would."""

    def __init__(self, root: Path, change: Callable[[], object]) -> None:
        super().__init__(root)
        self.change = change
        self.changed = False

    def _opening(self, path: str) -> None:
        if not path.startswith(".hoodie/") and not self.changed:
            self.changed = True
            self.change()

    def open_input(self, path: str) -> ByteSource:
        self._opening(path)
        return super().open_input(path)

    def read(self, path: str) -> bytes:
        self._opening(path)
        return super().read(path)


def test_a_rollback_while_a_read_opens_its_files_says_read_again(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(KEYS, 1)
    t.upsert(KEYS, 2)
    last = t.upsert(KEYS, 3)  # its log file goes with its rollback
    reader = SnapshotReader(_ChangedAtFirstOpen(tmp_path, lambda: rollback(LocalStorage(tmp_path), last)))
    with pytest.raises(TableError, match=r"changed while this read ran \(the rollback .*no such file: .*; read again"):
        reader.read()
    assert t.snapshot() == dict.fromkeys(KEYS, 2)  # read again: the table as it is


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["mor", "cow"])
def test_an_incremental_read_overtaken_by_a_rollback_says_read_again(tmp_path: Path, copy_on_write: bool) -> None:
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    t.insert(KEYS, 1)
    t.upsert(KEYS, 2)
    last = t.upsert(KEYS, 3)  # its log file, or its rewritten base file, goes with its rollback
    storage = _ChangedAtFirstOpen(tmp_path, lambda: rollback(LocalStorage(tmp_path), last))
    with pytest.raises(TableError, match=r"changed while this read ran .*no such file: .*; read again"):
        read_incremental(storage, "000")


def test_a_clean_while_a_read_opens_its_files_says_read_again(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(KEYS, 1)
    t.upsert(KEYS, 2)

    def compact_then_clean() -> None:
        compact(t.storage)
        t.upsert(KEYS, 3)
        compact(t.storage)
        clean(t.storage, CleanConfig(commits_retained=1))  # deletes the slice the reader listed

    reader = SnapshotReader(_ChangedAtFirstOpen(tmp_path, compact_then_clean))
    with pytest.raises(TableError, match=r"changed while this read ran \(the clean .*no such file: .*; read again"):
        reader.read()
    assert t.snapshot() == dict.fromkeys(KEYS, 3)


def test_a_clean_after_a_plain_read_started_says_read_again_not_read_as_of_a_later_instant(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(KEYS, 1)
    t.upsert(KEYS, 2)
    reader = SnapshotReader(LocalStorage(tmp_path))  # no as-of: the user asked for no instant
    compact(t.storage)
    t.upsert(KEYS, 3)
    compact(t.storage)
    clean(t.storage, CleanConfig(commits_retained=1))
    with pytest.raises(
        TableError, match=r"changed while this read ran \(the clean \d{17} ran; no such file: .*\); read again$"
    ):
        reader.read()


def test_a_compaction_rolled_back_after_a_read_loaded_its_timeline_says_read_again(tmp_path: Path) -> None:
    """The view reads each pending compaction's plan: a restore or a rollback of the compaction
    since the timeline was loaded removed it."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(KEYS, 1)
    t.upsert(KEYS, 2)
    planned = schedule_compaction(t.storage)
    assert planned is not None

    class _RolledBackAtPlan(LocalStorage):
        def read(self, path: str) -> bytes:
            if path == f".hoodie/{planned.timestamp}.compaction.requested":
                rollback(LocalStorage(tmp_path), planned.timestamp)
            return super().read(path)

    with pytest.raises(TableError, match=rf"rolled back or archived while it read .*{planned.timestamp}.*; read again"):
        read_snapshot(_RolledBackAtPlan(tmp_path))


def test_a_file_missing_without_a_change_to_the_timeline_is_said_missing(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(KEYS, 1)
    t.upsert(KEYS, 2)
    (log,) = tmp_path.rglob(".fg-*.log.*")
    reader = SnapshotReader(_ChangedAtFirstOpen(tmp_path, log.unlink))  # damage, not a table service
    with pytest.raises(ObjectNotFoundError, match=f"no such file: .*{log.name}"):
        reader.read()


def test_a_file_missing_while_an_archival_ran_is_said_missing(tmp_path: Path) -> None:
    # an archival takes instants off the active timeline and deletes no data file: it was taken
    # for a rollback of the writes it moved, and damage called a change to read again
    from tidemark.table_services.archive import ArchiveConfig, archive

    t = TableBuilder(LocalStorage(tmp_path))
    for i in range(8):
        t.insert([f"k{i}"], i)
    clean(t.storage, CleanConfig(commits_retained=1))

    def archive_then_damage() -> None:
        assert archive(LocalStorage(tmp_path), ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
        for data_file in tmp_path.rglob("*.parquet"):
            data_file.unlink()  # by hand: no table service deletes these

    reader = SnapshotReader(_ChangedAtFirstOpen(tmp_path, archive_then_damage))
    with pytest.raises(ObjectNotFoundError, match="no such file: "):
        reader.read()
