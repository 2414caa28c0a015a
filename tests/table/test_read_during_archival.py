"""A snapshot read that an archival overtakes: the reader loaded the active timeline, then the
archiver moved one of its writes to the archived timeline (and deleted its state file) before the
reader got to that write's log block. The archiver runs every few seconds beside readers (the
operator's schedule); a read must give the rows it would have given a moment earlier or later."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import SnapshotReader
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean


def _rows(reader: SnapshotReader) -> dict[str, int]:
    table = reader.read()
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def test_a_write_archived_while_a_read_runs_reads_the_same(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    t.insert(["z"], 1)
    updated = t.upsert(["a"], 2)  # a log block in a's file group, not compacted
    for v in range(6):
        t.upsert(["z"], 10 + v)  # later writes touch only the other file group
    clean(t.storage, CleanConfig(commits_retained=2))
    before = t.snapshot()
    assert before == {"a": 2, "z": 15}

    reader = SnapshotReader(t.storage)  # its timeline loaded: the update still active
    archived = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    assert updated in {i.timestamp for i in archived}
    assert _rows(reader) == before
    assert t.snapshot() == before


def test_a_view_set_up_from_a_timeline_an_archival_overtook_says_read_again(tmp_path: Path) -> None:
    """The view reads every completed replacecommit's metadata when it is set up: one the archiver
    moved since the reader loaded its timeline is a 'read again', not a missing state file."""
    from tidemark.errors import TableError
    from tidemark.table.file_system_view import FileSystemView
    from tidemark.timeline import load_timeline

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    replaced_by = t.insert_overwrite(["c"], 2)
    for v in range(6):
        t.upsert(["c"], 10 + v)
    clean(t.storage, CleanConfig(commits_retained=2))
    loaded = load_timeline(t.storage)  # a reader's timeline, the replacecommit still active
    archived = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    assert replaced_by in {i.timestamp for i in archived}
    with pytest.raises(TableError, match=f"archived while it read .*{replaced_by}.*; read again"):
        FileSystemView(t.storage, loaded)
    assert t.snapshot() == {"c": 15}  # read again: the table as it is


class _ArchivedAtFirstCommitRead(LocalStorage):
    """An incremental pull's storage: as the pull reads its first commit's metadata (its timeline
    loaded), the archiver moves that commit, as it would beside the pull."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.archived: list[str] = []

    def read(self, path: str) -> bytes:
        if path.endswith(".commit") and not self.archived:
            done = archive(LocalStorage(self.root), ArchiveConfig(min_commits=2, max_commits=3))
            self.archived = [i.timestamp for i in done.plan.instants] or ["nothing"]
        return super().read(path)


def test_an_incremental_pull_an_archival_overtakes_reads_the_same(tmp_path: Path) -> None:
    """A pull beginning on the active timeline reads its commits' metadata, not the archive: one
    the archiver moved since the pull loaded its timeline was a missing state file. The range's
    commits are read as when they reach the archive, every file group, the same rows."""
    from tidemark.table.incremental import read_incremental

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.insert(["a"], 1)
    begin = t.insert(["z"], 1)
    updated = t.upsert(["a"], 2)
    for v in range(6):
        t.upsert(["z"], 10 + v)
    clean(t.storage, CleanConfig(commits_retained=2))
    storage = _ArchivedAtFirstCommitRead(tmp_path)
    pulled = read_incremental(storage, begin)
    assert updated in storage.archived
    rows = zip(pulled.column("id").to_pylist(), pulled.column("v").to_pylist(), strict=True)
    assert dict(rows) == {"a": 2, "z": 15}
