"""Archival guarded by the cleaner's EarliestCommitToNotArchive: the seed's scenarios (HUDI-7779),
apache/hudi#6938, a clean that fails to delete replaced files, cleaner settings changed between a
clean and an archival, and an archival interrupted half-way. Both readers see no duplicate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model import apache_snapshot
from tests.support.table_builder import TableBuilder
from tidemark.errors import InstantStateError, StorageError, TableError
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import read_snapshot
from tidemark.table_services import archive as archive_module
from tidemark.table_services.archive import ArchiveConfig, archive, plan_archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import archived_entries, read_archived, write_archived

ARCHIVE = ArchiveConfig(min_commits=2, max_commits=3)
CLEAN = CleanConfig(commits_retained=2)


def _apache(t: TableBuilder) -> dict[str, int]:
    table = apache_snapshot(str(t.storage.root))
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def _replace_scenario(tmp_path: Path) -> tuple[TableBuilder, dict[int, str]]:
    """t1 insert; t2 update; t3 update (savepointed); t4 replacecommit over t3's file group;
    t5…t8 updates; a clean while the savepoint exists keeps the replaced files."""
    t = TableBuilder(LocalStorage(tmp_path))
    times = {1: t.insert(["a", "b"], 1), 2: t.update(["a"], 2), 3: t.update(["b"], 3)}
    create_savepoint(t.storage, times[3])
    times[4] = t.insert_overwrite(["c", "d"], 4)
    for n in range(5, 9):
        times[n] = t.update(["c"], n)
    first = clean(t.storage, CLEAN)
    assert first is not None
    assert first.plan.earliest_commit_to_not_archive == times[3]
    return t, times


def test_b_savepoint_then_replacecommit_then_savepoint_removed_with_cleaner_off(tmp_path: Path) -> None:
    t, times = _replace_scenario(tmp_path)
    expected = {"c": 8, "d": 4}
    delete_savepoint(t.storage, times[3])  # and the cleaner stays off
    result = archive(t.storage, ARCHIVE)
    archived = {i.timestamp for i in result.plan.instants}
    assert times[4] not in archived, "the replacecommit must stay while its replaced files exist"
    assert result.plan.blocked_by == "earliest commit to not archive (latest clean)"
    assert t.snapshot() == expected
    assert _apache(t) == expected
    # the cleaner comes back: it sees the savepoint gone, removes the replaced files, and only then
    # lets archival pass the replacecommit
    again = clean(t.storage, CLEAN)
    assert again is not None
    assert again.plan.full_scan
    assert again.deleted
    archive(t.storage, ARCHIVE)
    assert times[4] in {a.timestamp for a in read_archived(t.storage)}
    assert t.snapshot() == expected
    assert _apache(t) == expected


def test_a_savepoint_removed_with_cleaner_disabled(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    times = {1: t.insert(["a"], 1), 2: t.update(["a"], 2), 3: t.update(["a"], 3)}
    create_savepoint(t.storage, times[3])
    for n in range(4, 9):
        times[n] = t.update(["a"], n)
    clean(t.storage, CLEAN)
    delete_savepoint(t.storage, times[3])
    plan = plan_archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, enabled=True))
    assert max(i.timestamp for i in plan.instants) < times[3]
    # one switch turns cleaning and archival off together
    off = ArchiveConfig.from_conf(
        {"tidemark.clean.archive.enabled": "false", "hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"}
    )
    assert plan_archive(t.storage, off).instants == ()
    assert clean(t.storage, CleanConfig.from_conf({"tidemark.clean.archive.enabled": "false"})) is None


def test_the_savepoint_is_named_as_what_holds_archival(tmp_path: Path) -> None:
    # the clean records the savepoint's instant as its earliest commit to not archive: the two
    # guards tie, and the savepoint is what a user must delete
    t = TableBuilder(LocalStorage(tmp_path))
    times = {1: t.insert(["a"], 1), 2: t.update(["a"], 2)}
    create_savepoint(t.storage, times[2])
    for n in range(3, 7):
        times[n] = t.update(["a"], n)
    assert clean(t.storage, CLEAN) is not None
    plan = plan_archive(t.storage, ARCHIVE)
    assert (plan.blocked_by, plan.boundary) == ("savepoint", times[2])
    assert [i.timestamp for i in plan.instants] == [times[1]]


def test_never_without_a_completed_clean_nor_below_max_commits(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"])
    for n in range(2, 7):
        t.update(["a"], n)
    assert plan_archive(t.storage, ARCHIVE).blocked_by == "no completed clean"
    clean(t.storage, CLEAN)
    assert "not above hoodie.keep.max.commits" in (plan_archive(t.storage, ArchiveConfig(2, 30)).blocked_by or "")
    assert plan_archive(t.storage, ARCHIVE).instants


def test_hudi_6938_and_a_clean_that_fails_to_delete_replaced_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, times = _replace_scenario(tmp_path)
    delete_savepoint(t.storage, times[3])
    original = LocalStorage.delete

    def failing_delete(self: LocalStorage, path: str) -> None:
        if path.startswith("p=1/fg-001"):
            raise StorageError(f"permission denied: {path}")
        original(self, path)

    monkeypatch.setattr(LocalStorage, "delete", failing_delete)
    with pytest.raises(
        InstantStateError,
        match=r"could not delete 1 files \(first: permission denied: p=1/fg-001.*\); it stays pending",
    ):
        clean(t.storage, CLEAN)
    monkeypatch.undo()
    # the failed clean stays pending: archival stops before it and never reaches the replacecommit
    plan = plan_archive(t.storage, ARCHIVE)
    assert times[4] not in {i.timestamp for i in plan.instants}
    archive(t.storage, ARCHIVE)
    assert t.snapshot() == {"c": 8, "d": 4}
    assert _apache(t) == {"c": 8, "d": 4}
    # the next clean finishes the pending one first
    clean(t.storage, CLEAN)
    assert not load_timeline(t.storage).pending().instants


def test_cleaner_settings_changed_between_clean_and_archival(tmp_path: Path) -> None:
    """Archival follows what the clean recorded, not what the settings say now (PR #18380)."""
    t, times = _replace_scenario(tmp_path)
    delete_savepoint(t.storage, times[3])
    recorded = plan_archive(t.storage, ARCHIVE)
    # someone lowers retention after the clean: the archiver must not believe more was cleaned
    lowered = ArchiveConfig.from_conf(
        {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2", "hoodie.cleaner.commits.retained": "1"}
    )
    after = plan_archive(t.storage, lowered)
    assert after.boundary == recorded.boundary == times[3]
    archive(t.storage, lowered)
    assert t.snapshot() == {"c": 8, "d": 4}


def test_archival_interrupted_after_writing_the_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for n in range(2, 9):
        t.update(["a"], n)
    clean(t.storage, CLEAN)
    active_before = {(i.timestamp, i.action) for i in load_timeline(t.storage)}

    def crash(*_: object) -> None:
        raise RuntimeError("killed after the archive file was written")

    monkeypatch.setattr(archive_module, "_drop_active", crash)
    with pytest.raises(RuntimeError, match="killed"):
        archive(t.storage, ARCHIVE)
    monkeypatch.undo()
    result = archive(t.storage, ARCHIVE)
    assert result.finished_from_before
    assert result.active_instants == len(load_timeline(t.storage))
    archived = [(a.timestamp, a.action) for a in read_archived(t.storage) if a.state.name == "COMPLETED"]
    active = {(i.timestamp, i.action) for i in load_timeline(t.storage)}
    assert len(archived) == len(set(archived)), "nothing archived twice"
    assert not set(archived) & active, "nothing both archived and active"
    assert set(archived) | active == active_before, "nothing lost"
    assert t.snapshot() == {"a": 8}


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for n in range(2, 9):
        t.update(["a"], n)
    clean(t.storage, CLEAN)
    before = sorted(p.name for p in (tmp_path / ".hoodie").iterdir())
    planned = archive(t.storage, ARCHIVE, dry_run=True)
    assert planned.plan.instants
    assert sorted(p.name for p in (tmp_path / ".hoodie").iterdir()) == before
    real = archive(t.storage, ARCHIVE)
    assert real.plan.instants == planned.plan.instants


def test_restore_to_a_savepoint(tmp_path: Path) -> None:
    from tidemark.table.compaction import compact
    from tidemark.table_services.restore import restore

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    sp = t.update(["a"], 2)
    create_savepoint(t.storage, sp)
    expected = t.snapshot()
    t.update(["b"], 3)
    compact(t.storage)
    t.insert_overwrite(["z"], 9)
    assert t.snapshot() == {"z": 9}
    done = restore(t.storage, sp).instant
    assert done.action == "restore"
    assert t.snapshot() == expected
    assert _apache(t) == expected
    actions = [i.action for i in load_timeline(t.storage).completed()]
    assert actions.count("rollback") == 3
    assert "compaction" not in actions
    with pytest.raises(InstantStateError, match="no savepoint"):
        restore(t.storage, "20990101000000000")


def test_a_restore_instant_stays_on_the_active_timeline(tmp_path: Path) -> None:
    """Found by the model-based test: archival chose the restore instant, could not turn it into
    an archived entry (Hudi 0.14/0.15 has no field for it), and failed from then on."""
    from tidemark.table_services.restore import restore

    t = TableBuilder(LocalStorage(tmp_path))
    sp = t.insert(["a"], 1)
    create_savepoint(t.storage, sp)
    t.update(["a"], 2)
    restore(t.storage, sp)
    delete_savepoint(t.storage, sp)
    for v in range(3, 8):
        t.update(["a"], v)
    clean(t.storage, CleanConfig(commits_retained=1))
    result = archive(t.storage, ArchiveConfig(min_commits=1, max_commits=2))
    assert result.plan.instants, "archival goes past the restore"
    restores = [i for i in load_timeline(t.storage) if i.action == "restore"]
    assert len(restores) == 1
    assert result.plan.instants[-1].timestamp > restores[0].timestamp
    assert "restore" not in {a.action for a in read_archived(t.storage)}
    assert t.snapshot() == {"a": 7}
    assert _apache(t) == {"a": 7}


def test_a_stopped_archival_that_wrote_several_blocks_is_finished(tmp_path: Path) -> None:
    # Hudi's archiver writes a block per batch of instants (hoodie.commits.archival.batch), so a
    # run of it that stopped before deleting active files may leave several blocks to finish;
    # earlier, finished archivals stay as they are
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for n in range(2, 13):
        t.update(["a"], n)
    clean(t.storage, CLEAN)
    archive(t.storage, ARCHIVE)
    finished_before = read_archived(t.storage)
    assert finished_before, "a first archival to leave history behind"
    for n in range(13, 20):
        t.update(["a"], n)
    clean(t.storage, CLEAN)
    active_before = {(i.timestamp, i.action) for i in load_timeline(t.storage)}
    plan = plan_archive(t.storage, ARCHIVE)
    assert len(plan.instants) >= 4
    half = len(plan.instants) // 2
    for batch, time in ((plan.instants[:half], "20990101000000000"), (plan.instants[half:], "20990101000000001")):
        write_archived(t.storage, [e for i in batch for e in archived_entries(t.storage, i)], time)
    result = archive(t.storage, ARCHIVE)
    assert sorted(result.finished_from_before) == sorted(str(i) for i in plan.instants)
    assert result.active_instants == len(load_timeline(t.storage))
    archived = [(a.timestamp, a.action) for a in read_archived(t.storage) if a.state.name == "COMPLETED"]
    active = {(i.timestamp, i.action) for i in load_timeline(t.storage)}
    assert len(archived) == len(set(archived)), "nothing archived twice"
    assert not set(archived) & active, "nothing both archived and active"
    history = {(a.timestamp, a.action) for a in finished_before if a.state.name == "COMPLETED"}
    assert set(archived) | active == active_before | history, "nothing lost"
    assert t.snapshot() == {"a": 19}


def test_the_dry_run_after_a_stopped_archival_says_what_the_real_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dry run said `would archive N instants` (the stopped run's instants, planned again), where
    the real run finishes the stopped archival and then archives what is left: both now say that."""
    from tests.support.cli import listing
    from tidemark.cli.main import main

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for n in range(2, 13):
        t.update(["a"], n)
    clean(t.storage, CLEAN)
    plan = plan_archive(t.storage, ARCHIVE)
    assert len(plan.instants) >= 4
    stopped, rest = plan.instants[:2], plan.instants[2:]
    # a run killed after writing its archive log, before removing its instants from the active timeline
    write_archived(t.storage, [e for i in stopped for e in archived_entries(t.storage, i)], "20990101000000000")
    conf = ["--conf", "hoodie.keep.min.commits=2", "--conf", "hoodie.keep.max.commits=3"]
    before = listing(tmp_path)
    assert main(["archive", str(tmp_path), *conf, "--dry-run"]) == 0
    dry = capsys.readouterr().out.splitlines()
    assert listing(tmp_path) == before
    assert main(["archive", str(tmp_path), *conf]) == 0
    real = capsys.readouterr().out.splitlines()
    finishing = [f"  {i}" for i in stopped]
    archiving = [f"  {i.timestamp}  {i.action}" for i in rest]
    assert dry == [
        "would finish the archival a stopped run left: remove 2 archived instants from the active timeline",
        *finishing,
        f"would archive {len(rest)} instants; stopped by: {plan.blocked_by}",
        *archiving,
    ]
    assert real[0] == "finished the archival a stopped run left: removed 2 archived instants from the active timeline"
    assert real[1:3] == finishing
    assert real[3].startswith(f"archived {len(rest)} instants into ")
    assert real[4:] == archiving
    assert t.snapshot() == {"a": 12}


def test_an_expression_update_reads_the_same_once_its_commit_is_archived(tmp_path: Path) -> None:
    """A merge_update's log block holds the rows as the write saw them, and its commit the
    expressions the reader applies to the row it merges with. Archived before a compaction, its
    commit was looked for on the active timeline only, and the reader took the block's rows:
    ``v`` went from the evaluated 40 back to the write-time 20 without a word."""
    import json

    from tests.support.table_builder import _table
    from tidemark.table.expressions import EXPRESSIONS_KEY
    from tidemark.table.file_system_view import FileSystemView
    from tidemark.table.write_client import commit_write, mark_expression_blocks, start_write
    from tidemark.table.write_handles import TaskContext, append_log_blocks
    from tidemark.timeline import DELTA_COMMIT

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 10)
    t.insert(["z"], 1)
    t.upsert(["a"], 20)
    # v = v * 2, as the Spark job writes it: the write-time row in a block, the expression in the commit
    inflight = start_write(t.storage, DELTA_COMMIT, "merge_update")
    rows = _table(["a"], 20)
    view = FileSystemView(t.storage, load_timeline(t.storage))
    (group,) = [g for g in view.file_groups("p=1") if g.file_id == t.keys["a"]]
    latest = group.latest_slice()
    assert latest is not None
    ctx = TaskContext(inflight.timestamp, 0, 9, 0)
    stat = append_log_blocks(
        t.storage, ctx, "p=1", group.file_id, latest.log_base_instant, None, rows, rows["id"], [], t.schema
    )
    expressions = {EXPRESSIONS_KEY: json.dumps({"v": "v * 2"})}
    commit_write(t.storage, inflight, [stat], "merge_update", t.schema, extra_metadata=expressions)
    mark_expression_blocks(t.storage)
    assert t.snapshot()["a"] == 40
    for v in range(6):
        t.upsert(["z"], 100 + v)  # later writes touch only the other file group
    clean(t.storage, CleanConfig(commits_retained=2))
    archived = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    assert inflight.timestamp in {i.timestamp for i in archived}
    assert t.snapshot()["a"] == 40


def _file_versions_life(t: TableBuilder, updates: range) -> dict[str, int]:
    """Upserts, each followed by a KEEP_LATEST_FILE_VERSIONS clean and an archival."""
    keys = ["k0", "k1", "k2"]
    t.insert(keys, updates.start)
    expected = dict.fromkeys(keys, updates.start)
    for n in updates[1:]:
        key = keys[n % 3]
        t.upsert([key], n)
        expected[key] = n
        clean(t.storage, VERSIONS)
        archive(t.storage, ARCHIVE)
    return expected


VERSIONS = CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1)


@pytest.mark.parametrize("copy_on_write", [True, False], ids=["cow", "mor"])
def test_archival_goes_on_under_keep_latest_file_versions(tmp_path: Path, copy_on_write: bool) -> None:
    # such a clean retains no commit (Hudi's records none): it held archival at the first write
    # for good, and the active timeline grew with every commit
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    expected = _file_versions_life(t, range(1, 13))
    archived = {a.timestamp for a in read_archived(t.storage)}
    timeline = load_timeline(t.storage)
    assert len(archived) > 6
    assert len(timeline.completed().write_instants().instants) <= ARCHIVE.max_commits
    assert len(timeline.instants) <= 2 * ARCHIVE.max_commits
    assert t.snapshot() == expected
    assert _apache(t) == expected
    # time travel to an archived write says it is archived
    with pytest.raises(TableError, match=r"as_of=\d+: the writes at or before it are archived"):
        read_snapshot(t.storage, as_of=min(archived))


def test_keep_latest_file_versions_still_holds_archival_at_a_savepoint_and_a_later_replacecommit(
    tmp_path: Path,
) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    times = {1: t.insert(["a", "b"], 1), 2: t.update(["a"], 2)}
    create_savepoint(t.storage, times[2])
    for n in range(3, 8):
        times[n] = t.update(["a"], n)
    first = clean(t.storage, VERSIONS)
    assert first is not None
    assert first.plan.earliest_commit_to_not_archive == times[2]
    plan = plan_archive(t.storage, ARCHIVE)
    assert (plan.blocked_by, plan.boundary) == ("savepoint", times[2])
    delete_savepoint(t.storage, times[2])
    # a replacecommit after the clean: its replaced files stay until the next clean
    times[8] = t.insert_overwrite(["c"], 8)
    for n in range(9, 12):
        times[n] = t.update(["c"], n)
    clean(t.storage, VERSIONS)  # frees the savepoint's files; the replaced group goes too
    times[12] = t.insert_overwrite(["d"], 12)
    for n in range(13, 17):
        times[n] = t.update(["d"], n)
    plan = plan_archive(t.storage, ARCHIVE)
    assert (plan.blocked_by, plan.boundary) == (
        "replacecommit after the latest clean (KEEP_LATEST_FILE_VERSIONS)",
        times[12],
    )
    archive(t.storage, ARCHIVE)
    archived = {a.timestamp for a in read_archived(t.storage)}
    assert times[8] in archived
    assert times[12] not in archived
    assert t.snapshot() == _apache(t) == {"d": 16}
    clean(t.storage, VERSIONS)
    archive(t.storage, ARCHIVE)
    assert times[12] in {a.timestamp for a in read_archived(t.storage)}
    assert t.snapshot() == _apache(t) == {"d": 16}


@pytest.mark.parametrize("folder", ["history", "x/../history", "./history/"])
def test_archival_goes_to_the_tables_archivelog_folder_and_every_reader_looks_there(
    tmp_path: Path, folder: str
) -> None:
    """hoodie.archivelog.folder was ignored: tidemark archived into .hoodie/archived/ and read
    only from there, where Hudi (getArchivePath: .hoodie/<hoodie.archivelog.folder>) does not look.
    A ``..`` that stays inside ``.hoodie`` was refused for leading out of it, and every read failed:
    it is resolved as Hadoop's Path resolves it, to the same folder."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    first = t.insert(["a", "b"], 1)
    for v in range(2, 7):
        t.upsert(["a"], v)
    path = tmp_path / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text().replace("hoodie.archivelog.folder=archived", f"hoodie.archivelog.folder={folder}"))
    clean(t.storage, CleanConfig(commits_retained=1))
    moved = {i.timestamp for i in archive(t.storage, ARCHIVE).plan.instants}
    assert first in moved
    assert [p.name for p in (tmp_path / ".hoodie" / "history").iterdir()] == [".commits_.archive.1_1-0-1"]
    assert not (tmp_path / ".hoodie" / "archived").exists()
    assert not (tmp_path / ".hoodie" / "x").exists()
    assert moved <= {a.timestamp for a in read_archived(t.storage, ".hoodie/history")}
    # the readers of the archive find it: a savepoint of an archived write says so
    with pytest.raises(InstantStateError, match="it is archived"):
        create_savepoint(t.storage, first)
    # and an archival that stopped half-way is found there and finished
    assert archive(t.storage, ARCHIVE).finished_from_before == ()
    assert t.snapshot() == {"a": 6, "b": 1}
    assert _apache(t) == {"a": 6, "b": 1}


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_twin_base_file_with_no_marker_is_removed_before_its_commit_is_archived(
    tmp_path: Path, copy_on_write: bool
) -> None:
    """A task attempt killed after the commit wrote its own copy of a base file (under another
    write token, from input cut short) and left no marker. The reader took the base file the
    commit names while the commit was active; once archived, the last by name: one row of two,
    without an error. The archiver removes the twin first, so every reader reads the commit's."""
    import pyarrow.parquet as pq

    from tests.support.table_builder import PARTITION

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    first = t.insert(["a", "b"], 1)
    (committed,) = (tmp_path / PARTITION).glob(f"*_{first}.parquet")
    twin = committed.with_name(committed.name.replace("_0-1-0_", "_0-1-9_"))
    pq.write_table(pq.read_table(committed).slice(0, 1), twin)
    for n in range(2, 9):
        t.insert([f"k{n}"], n)  # other file groups: the first one's base stays its latest slice
    expected = {"a": 1, "b": 1} | {f"k{n}": n for n in range(2, 9)}
    assert t.snapshot() == expected
    clean(t.storage, CLEAN)
    archived = archive(t.storage, ARCHIVE).plan.instants
    assert first in {i.timestamp for i in archived}
    assert not twin.exists()
    assert committed.exists()
    assert t.snapshot() == expected
    assert _apache(t) == expected


def _replaced_group_with_twin(tmp_path: Path, copy_on_write: bool) -> tuple[TableBuilder, Path, Path, str]:
    """a and b in file group F, whose base file has a twin (a killed attempt's copy under another
    write token, marker gone); an insert_overwrite replaces F with c and d; four upserts follow.
    Returns the builder, F's committed base file, its twin and the replacecommit."""
    import shutil

    from tests.support.table_builder import PARTITION

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    first = t.insert(["a", "b"], 1)
    (committed,) = (tmp_path / PARTITION).glob(f"*_{first}.parquet")
    twin = committed.with_name(committed.name.replace("_0-1-0_", "_9-99-99_"))
    shutil.copy(committed, twin)
    replace = t.insert_overwrite(["c", "d"], 2)
    for n in range(3, 7):
        t.upsert(["c"], n)
    return t, committed, twin, replace


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_replaced_file_groups_twin_base_file_is_cleaned_and_never_reads_again(
    tmp_path: Path, copy_on_write: bool
) -> None:
    """The clean of a replaced file group deleted only the base file its commit names: the twin
    stayed, and once the replacecommit was archived nothing said the group was replaced, so both
    readers read its rows again. The clean now deletes every base file of the group's slices."""
    t, committed, twin, replace = _replaced_group_with_twin(tmp_path, copy_on_write)
    expected = {"c": 6, "d": 2}
    assert t.snapshot() == expected
    done = clean(t.storage, CleanConfig(commits_retained=1))
    assert done is not None
    assert not committed.exists()
    assert not twin.exists()
    assert t.snapshot() == expected
    assert _apache(t) == expected
    archived = archive(t.storage, ARCHIVE).plan.instants
    assert replace in {i.timestamp for i in archived}
    assert t.snapshot() == expected
    assert _apache(t) == expected


def test_a_replacecommit_is_not_archived_while_a_twin_of_its_replaced_group_is_on_storage(tmp_path: Path) -> None:
    """A table an earlier clean left with the twin of a replaced group (it deleted only the named
    base file, and let archival pass the replacecommit): the archiver holds the replacecommit
    while the twin is there, and the next clean deletes it."""
    t, _, twin, replace = _replaced_group_with_twin(tmp_path, copy_on_write=True)
    kept = twin.read_bytes()
    assert clean(t.storage, CleanConfig(commits_retained=1)) is not None
    twin.write_bytes(kept)  # as the earlier clean left it
    expected = {"c": 6, "d": 2}
    assert t.snapshot() == expected
    held = archive(t.storage, ARCHIVE).plan
    assert replace not in {i.timestamp for i in held.instants}
    assert (held.blocked_by, held.boundary) == ("replaced files on storage", replace)
    assert t.snapshot() == expected
    assert _apache(t) == expected
    again = clean(t.storage, CleanConfig(commits_retained=1))
    assert again is not None
    assert str(twin.relative_to(tmp_path)) in again.deleted
    assert replace in {i.timestamp for i in archive(t.storage, ARCHIVE).plan.instants}
    assert t.snapshot() == expected
    assert _apache(t) == expected


def test_a_savepoint_keeps_a_replaced_group_with_its_twin(tmp_path: Path) -> None:
    """A savepoint of the write that made the replaced group keeps its files: the clean deletes
    neither the named base file nor the twin, and the replacecommit stays active."""
    from tidemark.table_services.restore import restore

    t, committed, twin, replace = _replaced_group_with_twin(tmp_path, copy_on_write=True)
    first = committed.stem.rsplit("_", 1)[1]
    create_savepoint(t.storage, first)
    done = clean(t.storage, CleanConfig(commits_retained=1))
    assert done is not None
    assert committed.exists()
    assert twin.exists()  # the slice a savepoint holds a file of stays whole
    assert done.plan.earliest_commit_to_not_archive is not None
    assert done.plan.earliest_commit_to_not_archive <= replace
    archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, beyond_savepoint=True))
    assert replace not in {a.timestamp for a in read_archived(t.storage)}
    assert t.snapshot() == {"c": 6, "d": 2}
    restore(t.storage, first)
    assert t.snapshot() == {"a": 1, "b": 1}


def _beyond_savepoint_scenario(tmp_path: Path) -> tuple[TableBuilder, str, str]:
    """c1, c2 (savepointed after a KLFV clean, which records no bound), c3 writes b alone in p=2,
    then four updates of a: archival beyond the savepoint leaves a hole at c2."""
    from tidemark.table_services.savepoint import list_savepoints

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.insert(["a"], 1)
    sp = t.upsert(["a"], 2)
    assert clean(t.storage, KLFV) is not None
    create_savepoint(t.storage, sp)
    hole = t.upsert(["b"], 10, partition="p=2")
    for v in range(3, 7):
        t.upsert(["a"], v)
    result = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, beyond_savepoint=True))
    archived = {(i.timestamp, i.action) for i in result.plan.instants}
    assert (hole, "commit") in archived
    assert not {a for a in archived if a[0] == sp}, "the savepoint and its commit stay active"
    assert list_savepoints(t.storage) == [sp]
    active = load_timeline(t.storage)
    assert active.completed().write_instants().instants[0].timestamp == sp
    return t, sp, hole


KLFV = CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1)


def test_archival_beyond_a_savepoint_keeps_it_and_reads_the_writes_archived_after_it(tmp_path: Path) -> None:
    """Review 31 #1: beyond-savepoint archival archived the savepoint and its commit; the next
    clean deleted its files and the savepoint could not be restored. Hudi keeps both, and its
    readers take the writes archived between the savepointed commit and the next one as archived."""
    t, sp, hole = _beyond_savepoint_scenario(tmp_path)
    expected = {"a": 6, "b": 10}
    assert t.snapshot() == expected
    # hudi-rs 0.5 takes the active timeline to start at its first write, savepointed or not, and
    # misses the write archived after it (the README says so)
    assert _apache(t) == {"a": 6}
    as_of = read_snapshot(t.storage, as_of=sp)
    assert dict(zip(as_of.column("id").to_pylist(), as_of.column("v").to_pylist(), strict=True)) == {"a": 2}
    again = clean(t.storage, KLFV)
    deleted = again.all_deleted if again is not None else ()
    assert not [p for p in deleted if sp in p], "the savepointed base file is kept"
    assert not [p for p in deleted if hole in p], "the archived write's latest file is no old version"
    assert t.snapshot() == expected
    from tidemark.table_services.restore import restore

    # its file would stay after a restore (which rolls back active writes only) and read again
    with pytest.raises(InstantStateError, match=f"the write {hole} after it is archived.*nothing was rolled back"):
        restore(t.storage, sp)
    assert t.snapshot() == expected


def test_deleting_a_savepoint_archival_went_beyond_archives_its_commit_first(tmp_path: Path) -> None:
    """The delete moved the active timeline's start (Hudi's firstNonSavepointCommit) back to the
    savepointed commit, so the write archived after it read as uncommitted: every reader lost b.
    The commit is archived first now, and the timeline starts after both."""
    from tidemark.table.incremental import read_incremental
    from tidemark.table_services.savepoint import list_savepoints

    t, sp, hole = _beyond_savepoint_scenario(tmp_path)
    expected = {"a": 6, "b": 10}
    archived = delete_savepoint(t.storage, sp)
    assert t.snapshot() == expected
    assert _apache(t) == expected  # hudi-rs's timeline now starts after both archived writes
    assert archived == (sp,)
    assert list_savepoints(t.storage) == []
    assert load_timeline(t.storage).find(sp) is None
    assert {(sp, "commit"), (hole, "commit")} <= {(a.timestamp, a.action) for a in read_archived(t.storage)}
    assert sorted(read_incremental(t.storage, sp).column("id").to_pylist()) == ["a", "b"]
    assert clean(t.storage, KLFV) is not None  # the old versions the savepoint kept go
    assert t.snapshot() == expected
    assert _apache(t) == expected


def test_savepoint_delete_says_it_archived_the_commit(tmp_path: Path) -> None:
    from tests.support.cli import tidemark

    t, sp, _ = _beyond_savepoint_scenario(tmp_path)
    done = tidemark("savepoint", "delete", str(t.storage.root), sp)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"savepoint {sp} deleted; its commit was archived first, as archival had gone beyond it\n"
    assert sp not in tidemark("timeline", str(t.storage.root)).stdout  # the active timeline's
    assert t.snapshot() == {"a": 6, "b": 10}


def test_deleting_a_savepointed_replacecommit_whose_replaced_files_are_back_is_refused(tmp_path: Path) -> None:
    """Its commit would have to be archived, and then nothing would say the group is replaced: a
    file of it on storage (a killed attempt's twin, say) would read again. Refused, table unchanged."""
    from tidemark.table_services.savepoint import list_savepoints

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    first = t.insert(["a"], 1)
    (old,) = [f for f in t.storage.list_folder("p=1").files if first in f.path]
    sp = t.insert_overwrite(["c"], 2)
    assert clean(t.storage, KLFV) is not None
    assert not t.storage.exists(old.path), "the replaced group's file is cleaned"
    create_savepoint(t.storage, sp)
    hole = t.upsert(["b"], 10, partition="p=2")
    for v in range(3, 7):
        t.upsert(["c"], v)
    result = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, beyond_savepoint=True))
    assert hole in {i.timestamp for i in result.plan.instants}
    t.storage.write(old.path, b"twin")  # back, after archival went beyond the replacecommit
    with pytest.raises(InstantStateError, match=f"cannot delete the savepoint {sp} yet: .*the table is unchanged"):
        delete_savepoint(t.storage, sp)
    assert list_savepoints(t.storage) == [sp]
    assert load_timeline(t.storage).find(sp, "replacecommit") is not None


def test_deleting_a_savepoint_archival_stopped_at_leaves_its_commit_active(tmp_path: Path) -> None:
    """Without archival beyond it, nothing after the savepoint is archived: its commit stays."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.insert(["a"], 1)
    sp = t.upsert(["a"], 2)
    assert clean(t.storage, KLFV) is not None
    create_savepoint(t.storage, sp)
    for v in range(3, 8):
        t.upsert(["a"], v)
    assert archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants  # the write before it
    assert delete_savepoint(t.storage, sp) == ()
    assert load_timeline(t.storage).completed().write_instants().instants[0].timestamp == sp
    assert t.snapshot() == _apache(t) == {"a": 7}


@pytest.mark.parametrize("stopped", ["after-the-archive-file", "before-the-savepoint-files"])
def test_a_savepoint_delete_killed_between_its_steps(tmp_path: Path, stopped: str) -> None:
    """Killed after archiving the savepointed commit (in both timelines, or archived alone) and
    before deleting the savepoint, the table reads right to both readers, a clean keeps the
    savepoint's files, and the command run again finishes."""
    from tests.support import crash
    from tests.support.cli import tidemark
    from tests.support.crash import SHORT_LEASE, KillAt
    from tidemark.table_services.clean import savepointed_files
    from tidemark.table_services.restore import restore
    from tidemark.table_services.savepoint import list_savepoints
    from tidemark.timeline import State

    t, sp, _ = _beyond_savepoint_scenario(tmp_path)
    expected = {"a": 6, "b": 10}
    table = str(t.storage.root)
    kill = {
        "after-the-archive-file": KillAt(1, "after", r"\.hoodie/archived/"),
        "before-the-savepoint-files": KillAt(1, "before", rf"^delete \.hoodie/{sp}\.savepoint"),
    }[stopped]
    killed = crash.run("tidemark", ["savepoint", "delete", table, sp, *SHORT_LEASE], tmp_path / "log", kill)
    assert killed.killed, killed.stderr
    assert list_savepoints(t.storage) == [sp]
    assert t.snapshot() == expected
    # the commit still active, hudi-rs 0.5 misses the write archived after it, as before the delete
    assert _apache(t) == (expected if stopped == "before-the-savepoint-files" else {"a": 6})
    if stopped == "before-the-savepoint-files":
        assert load_timeline(t.storage).find(sp, "commit") is None
        with pytest.raises(InstantStateError, match=f"savepoint {sp} holds a commit that is no longer on the timeline"):
            restore(t.storage, sp)
    kept = savepointed_files(t.storage)[sp]
    clean(t.storage, KLFV)
    assert all(t.storage.exists(path) for path in kept), "the clean keeps what the savepoint keeps"
    assert t.snapshot() == expected
    again = tidemark("savepoint", "delete", table, sp)
    assert again.returncode == 0, again.stderr
    # its commit archived by the killed run (finished by this one, when left in both timelines)
    note = (
        ""
        if stopped == "before-the-savepoint-files"
        else "; its commit was archived first, as archival had gone beyond it"
    )
    assert again.stdout == f"savepoint {sp} deleted{note}\n"
    completed = [a for a in read_archived(t.storage) if a.timestamp == sp and a.state is State.COMPLETED]
    assert [a.action for a in completed] == ["commit"], "archived once"
    assert list_savepoints(t.storage) == []
    assert load_timeline(t.storage).find(sp, "commit") is None
    assert t.snapshot() == expected
    assert _apache(t) == expected


def test_a_restore_to_a_savepoint_archival_went_beyond(tmp_path: Path) -> None:
    """Once the archived writes after the savepoint have no file left, the restore goes, and a
    write after it brings none of them back."""
    from tidemark.table_services.restore import restore

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.insert(["a"], 1)
    sp = t.upsert(["a"], 2)
    assert clean(t.storage, KLFV) is not None
    create_savepoint(t.storage, sp)
    for v in range(3, 8):
        t.upsert(["a"], v)
    result = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, beyond_savepoint=True))
    assert [i for i in result.plan.instants if i.timestamp > sp]
    assert clean(t.storage, KLFV) is not None  # the archived writes' old versions go
    restore(t.storage, sp)
    assert t.snapshot() == {"a": 2}
    assert _apache(t) == {"a": 2}
    t.upsert(["c"], 9, partition="p=2")
    assert t.snapshot() == {"a": 2, "c": 9}
    assert _apache(t) == {"a": 2, "c": 9}


@pytest.mark.parametrize(("min_commits", "max_commits"), [(0, 3), (3, 3), (4, 3), (-1, 2)])
def test_an_archive_config_built_directly_is_checked(min_commits: int, max_commits: int) -> None:
    """Review 31 #7: only from_conf checked it; built directly it failed later with an IndexError."""
    with pytest.raises(TableError, match=r"hoodie\.keep\.min\.commits .* must be positive and below hoodie\.keep\.max"):
        ArchiveConfig(min_commits=min_commits, max_commits=max_commits)


def test_archival_beyond_a_savepoint_a_clean_tracks_goes_past_it(tmp_path: Path) -> None:
    """Review 32: a clean records the first savepoint before the commit it retains as its earliest
    commit to not archive, so archival beyond savepoints still stopped at the savepoint after any
    clean made while it existed; beyond savepoints, the clean's commit to retain is the bound."""
    from tidemark.table_services.savepoint import list_savepoints

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.insert(["a"], 1)
    sp = t.upsert(["a"], 2)
    create_savepoint(t.storage, sp)
    between = [t.upsert(["b"], v, partition="p=2") for v in range(3, 6)]
    done = clean(t.storage, CleanConfig(commits_retained=1))
    assert done is not None
    assert done.plan.earliest_commit_to_not_archive == sp
    for v in range(6, 9):
        t.upsert(["a"], v)
    stopped = plan_archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3))
    assert stopped.boundary == sp  # not beyond savepoints: held at the savepoint
    result = archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3, beyond_savepoint=True))
    archived = {i.timestamp for i in result.plan.instants}
    assert set(between[:-1]) <= archived, "the writes between the savepoint and the retained commit go"
    assert sp not in archived
    assert list_savepoints(t.storage) == [sp]
    assert t.snapshot() == {"a": 8, "b": 5}
    as_of = read_snapshot(t.storage, as_of=sp)
    assert dict(zip(as_of.column("id").to_pylist(), as_of.column("v").to_pylist(), strict=True)) == {"a": 2}


def test_searches_of_the_archive_newest_first_pass_the_block_a_savepoint_delete_appended(tmp_path: Path) -> None:
    """The delete appends the old savepointed commit alone, as the newest block: searches that
    stopped at the first block wholly older than what they looked for stopped there, before the
    writes archived after that commit (the time travel, restore and commit-path checks missed
    them). A block's archival time ends a search, not its instants alone."""
    from tidemark.table.file_system_view import archived_commit_paths, archived_write_paths
    from tidemark.timeline.archived import archived_blocks_newest_first

    t, sp, hole = _beyond_savepoint_scenario(tmp_path)
    delete_savepoint(t.storage, sp)
    newest = next(archived_blocks_newest_first(t.storage))
    assert newest.completed == (sp,)  # the delete's block, in front of the hole's
    paths = archived_commit_paths(t.storage, hole)
    assert paths is not None
    assert any(path.startswith("p=2/") for path in paths)  # b's base file
    assert hole in {ts for ts, _ in archived_write_paths(t.storage, hole)}
