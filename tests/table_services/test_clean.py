"""The cleaner: what it deletes under each policy, what savepoints and pending compactions keep,
and the EarliestCommitToNotArchive of the seed's walk-through (HUDI-7779)."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import tidemark
from tests.support.faults import FaultyStorage
from tests.support.processes import ChildProcess
from tests.support.s3 import create_bucket, s3_options
from tests.support.table_builder import TableBuilder
from tidemark.errors import InstantStateError, StorageError, StorageUnreachableError, TableError
from tidemark.logformat import BaseFileName
from tidemark.storage import LocalStorage, Storage, open_storage
from tidemark.table.compaction import compact
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import commit_write
from tidemark.table_services.clean import CleanConfig, clean, plan_clean, run_clean, should_clean
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint, list_savepoints
from tidemark.timeline import CLEAN, COMPACTION, State, load_timeline
from tidemark.timeline.avro_metadata import deserialize, serialize


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".hoodie" not in p.parts}


def test_keep_latest_commits_deletes_only_slices_no_retained_commit_needs(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"])
    t.update(["a"], 2)
    compact(t.storage)  # a second slice
    t.update(["b"], 3)
    compact(t.storage)  # a third slice
    t.update(["a"], 4)
    before = t.snapshot()
    files_before = _files(tmp_path)
    config = CleanConfig(commits_retained=2)
    plan = plan_clean(t.storage, config)
    assert plan.earliest_commit_to_retain is not None
    result = clean(t.storage, config)
    assert result is not None
    assert result.deleted
    assert set(result.deleted) <= files_before
    assert t.snapshot() == before
    # time travel to the earliest retained commit still reads
    read_snapshot(t.storage, as_of=plan.earliest_commit_to_retain.timestamp)
    # the oldest slice (the first base file and its log) is gone, the newer two remain
    assert len([f for f in _files(tmp_path) if f.endswith(".parquet")]) == 2


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_the_twins_of_an_old_slices_base_file_go_with_it(tmp_path: Path, copy_on_write: bool) -> None:
    """A killed task attempt's copy of a base file (another write token, no marker), of a commit
    and of a compaction: the clean deleted only the base file the commit names, and left the twin
    as the slice's only base file. It deletes the twins with their slice now."""
    import shutil

    from tests.support.model import apache_snapshot
    from tests.support.table_builder import PARTITION
    from tidemark.table_services.archive import ArchiveConfig, archive

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    t.insert(["a", "b"])
    if copy_on_write:
        for v in range(2, 5):
            t.upsert(["a"], v)
    else:
        t.update(["a"], 2)
        compact(t.storage)
        t.update(["b"], 3)
        compact(t.storage)
        t.update(["a"], 4)
    twins = []
    oldest_first = sorted((tmp_path / PARTITION).glob("*.parquet"), key=lambda p: p.stem.rsplit("_", 1)[1])
    for base in oldest_first[:2]:  # the two old slices'
        file_id, _token, instant = base.stem.split("_")
        twins.append(base.with_name(f"{file_id}_9-99-99_{instant}.parquet"))
        shutil.copy(base, twins[-1])
    expected = {"a": 4, "b": 1 if copy_on_write else 3}
    assert t.snapshot() == expected
    result = clean(t.storage, CleanConfig(commits_retained=1))
    assert result is not None
    assert {str(twin.relative_to(tmp_path)) for twin in twins} <= set(result.deleted)
    assert not any(twin.exists() for twin in twins)
    archive(t.storage, ArchiveConfig(min_commits=1, max_commits=2))
    assert t.snapshot() == expected
    table = apache_snapshot(str(tmp_path))
    assert dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True)) == expected


def test_keep_latest_file_versions(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"])
    for v in range(2, 5):
        t.update(["a"], v)
        compact(t.storage)

    def bases() -> list[str]:
        return sorted(
            (f for f in _files(tmp_path) if f.endswith(".parquet")), key=lambda f: BaseFileName.parse(f).instant
        )

    before = bases()
    assert len(before) == 4
    result = clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=2))
    assert result is not None
    assert bases() == before[2:]
    assert t.snapshot() == {"a": 4}


def test_keep_latest_by_hours_retains_recent_commits(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"])
    t.update(["a"], 2)
    compact(t.storage)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=30)
    assert plan_clean(t.storage, CleanConfig(policy="KEEP_LATEST_BY_HOURS")).files_to_delete == {}
    assert (
        plan_clean(t.storage, CleanConfig(policy="KEEP_LATEST_BY_HOURS"), now=later).earliest_commit_to_retain is None
    )


def test_keep_latest_by_hours_cuts_off_to_the_millisecond(tmp_path: Path) -> None:
    # writes a few milliseconds apart, as a busy writer makes them: a cut-off at the second write's
    # time keeps it and drops the first, even when both fall in the same second
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"])
    second = t.update(["a"], 2)
    t.update(["a"], 3)
    moment = datetime.datetime.strptime(second[:14], "%Y%m%d%H%M%S").replace(tzinfo=datetime.UTC)
    cutoff = moment + datetime.timedelta(milliseconds=int(second[14:]))
    config = CleanConfig(policy="KEEP_LATEST_BY_HOURS", hours_retained=2)
    plan = plan_clean(t.storage, config, now=cutoff + datetime.timedelta(hours=2))
    assert first < second
    assert plan.earliest_commit_to_retain is not None
    assert plan.earliest_commit_to_retain.timestamp == second


_CUTOFF_IN_ANOTHER_PROCESS = """
import datetime, sys
from tidemark.storage import LocalStorage
from tidemark.table_services.clean import CleanConfig, plan_clean
now = datetime.datetime.fromisoformat(sys.argv[2])
plan = plan_clean(LocalStorage(sys.argv[1]), CleanConfig(policy="KEEP_LATEST_BY_HOURS", hours_retained=2), now=now)
ectr = plan.earliest_commit_to_retain
print(ectr.timestamp if ectr else None, sorted(p for paths in plan.files_to_delete.values() for p in paths))
"""


@pytest.mark.parametrize("timezone", ["LOCAL", None, "UTC"])
def test_keep_latest_by_hours_cuts_off_in_the_tables_timeline_time_zone(tmp_path: Path, timezone: str | None) -> None:
    # a LOCAL table (Hudi's default, also when the key is missing) written from Los Angeles holds
    # instants in Los Angeles time: two hours after its third write (as Los Angeles time stamps
    # it), a cleaner there keeping two hours keeps every version, as Hudi's does. A UTC table's
    # instants are UTC, whatever zone the cleaner runs in: the first version goes (the second is
    # the one just before the earliest commit to retain, kept as Hudi keeps it).
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    first = t.insert(["a"])
    t.upsert(["a"], 2)
    third = t.upsert(["a"], 3)
    props = tmp_path / ".hoodie" / "hoodie.properties"
    lines = [line for line in props.read_text().splitlines() if not line.startswith("hoodie.table.timeline.timezone=")]
    props.write_text("\n".join(lines + ([f"hoodie.table.timeline.timezone={timezone}"] if timezone else [])) + "\n")
    written = datetime.datetime.strptime(third, "%Y%m%d%H%M%S%f")
    # that moment two hours later, read as UTC: in Los Angeles it is 8 hours earlier (7 in summer)
    now = written.replace(tzinfo=datetime.UTC) + datetime.timedelta(hours=2)
    env = {**os.environ, "TZ": "America/Los_Angeles"}
    code = _CUTOFF_IN_ANOTHER_PROCESS
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), now.isoformat()], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    if timezone == "UTC":
        ectr, deleted = result.stdout.split(" ", 1)
        assert ectr == third
        assert f"_{first}.parquet" in deleted  # the first version is cleaned
    else:
        assert result.stdout.strip() == "None []"


def test_savepoint_keeps_files_until_deleted(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a", "b"])
    create_savepoint(t.storage, first)
    assert list_savepoints(t.storage) == [first]
    for v in range(2, 5):
        t.update(["a"], v)
        compact(t.storage)
    config = CleanConfig(commits_retained=2)
    plan = plan_clean(t.storage, config)
    first_base = next(f for f in _files(tmp_path) if f.endswith(f"_{first}.parquet"))
    assert all(first_base not in files for files in plan.files_to_delete.values())
    assert plan.savepointed == (first,)
    assert plan.earliest_commit_to_not_archive == first  # the savepoint before the retained commit
    clean(t.storage, config)
    assert (tmp_path / first_base).exists()
    delete_savepoint(t.storage, first)
    again = plan_clean(t.storage, config)
    assert again.full_scan
    assert any("were removed since the last clean" in r for r in again.reasons)
    clean(t.storage, config)
    assert not (tmp_path / first_base).exists()
    assert t.snapshot() == {"a": 4, "b": 1}


def test_a_slice_a_savepoint_holds_a_file_of_is_kept_whole(tmp_path: Path) -> None:
    """The clean kept the savepointed base and log file of a slice but deleted the logs written
    on it after the savepoint: a read as of those writes then answered from the partial slice (a
    deleted key back, an update gone) without an error. Hudi keeps the whole slice."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b", "c"], 1)
    savepointed = t.upsert(["a"], 2)
    create_savepoint(t.storage, savepointed)
    deleted = t.delete(["b"], 3)  # logs on the savepointed slice, after the savepoint
    t.upsert(["c"], 4)
    as_of = {r["id"]: r["v"] for r in read_snapshot(t.storage, as_of=deleted).to_pylist()}
    assert as_of == {"a": 2, "c": 1}
    compact(t.storage)
    t.upsert(["a"], 5)
    files = _files(tmp_path)
    clean(t.storage, CleanConfig(commits_retained=1))
    assert _files(tmp_path) == files  # the only older slice is the savepointed one
    assert {r["id"]: r["v"] for r in read_snapshot(t.storage, as_of=deleted).to_pylist()} == as_of
    assert t.snapshot() == {"a": 5, "c": 4}


def test_savepoint_rules(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"])
    with pytest.raises(InstantStateError, match="no completed write instant"):
        create_savepoint(t.storage, "20990101000000000")
    for v in range(2, 6):
        t.update(["a"], v)
    clean(t.storage, CleanConfig(commits_retained=2))
    with pytest.raises(
        InstantStateError,
        match=r"a clean may already have removed its files \(clean \d+ retained commits from \d+ on\)",
    ):
        create_savepoint(t.storage, first)
    with pytest.raises(InstantStateError, match="no savepoint"):
        delete_savepoint(t.storage, first)


def test_pending_compaction_slices_are_kept(tmp_path: Path) -> None:
    from tidemark.table.compaction import schedule_compaction

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"])
    for v in range(2, 5):
        t.update(["a"], v)
    assert schedule_compaction(t.storage) is not None
    plan = plan_clean(t.storage, CleanConfig(commits_retained=1))
    assert plan.files_to_delete == {}


def test_a_replaced_group_waits_for_its_pending_compaction(tmp_path: Path) -> None:
    # a compaction planned (and stopped) before insert_overwrite replaced its file group still
    # reads that group's files when it runs again: deleting them made it fail for good
    from tidemark.table.compaction import schedule_compaction

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"])
    t.update(["a"], 2)
    assert schedule_compaction(t.storage) is not None
    t.insert_overwrite(["b"], 3)
    before = _files(tmp_path)
    result = clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    assert result is None or not result.plan.files_to_delete
    assert _files(tmp_path) == before
    compact(t.storage)
    timeline = load_timeline(t.storage)
    assert not timeline.pending().instants, "the pending compaction finishes"
    assert timeline.completed().of_actions(COMPACTION), "it completed"
    assert t.snapshot() == {"b": 3}
    replaced_group = {f for f in _files(tmp_path) if "fg-001" in f}
    second = clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    assert second is not None
    # every file of the replaced group, its compacted slice too, and nothing else
    deleted = {f for files in second.plan.files_to_delete.values() for f in files}
    assert deleted == replaced_group
    assert not any("fg-001" in f for f in _files(tmp_path))
    assert t.snapshot() == {"b": 3}


def test_the_seeds_walk_through(tmp_path: Path) -> None:
    """t20 … t35 with the retained commit at t30; savepoint t32; five commits: the cleaner sets
    EarliestCommitToNotArchive to t32. Savepoint removed, four commits: it moves to t39."""
    t = TableBuilder(LocalStorage(tmp_path))
    times = {20: t.insert([f"k{i}" for i in range(5)])}
    for n in range(21, 36):
        times[n] = t.update([f"k{n % 5}"], n)
    config = CleanConfig(commits_retained=6)
    first = clean(t.storage, config)
    assert first is not None
    assert first.plan.earliest_commit_to_retain is not None
    assert first.plan.earliest_commit_to_retain.timestamp == times[30]
    assert first.plan.earliest_commit_to_not_archive == times[30]
    create_savepoint(t.storage, times[32])
    for n in range(36, 41):
        times[n] = t.update([f"k{n % 5}"], n)
    second = clean(t.storage, config)
    assert second is not None
    assert second.plan.earliest_commit_to_retain.timestamp == times[35]  # type: ignore[union-attr]
    assert second.plan.earliest_commit_to_not_archive == times[32]
    delete_savepoint(t.storage, times[32])
    for n in range(41, 45):
        times[n] = t.update([f"k{n % 5}"], n)
    third = clean(t.storage, config)
    assert third is not None
    assert third.plan.full_scan
    assert third.plan.earliest_commit_to_retain.timestamp == times[39]  # type: ignore[union-attr]
    assert third.plan.earliest_commit_to_not_archive == times[39]


def test_trigger_and_settings(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"])
    assert should_clean(t.storage, CleanConfig(max_commits=1))
    assert not should_clean(t.storage, CleanConfig(max_commits=2))
    assert clean(t.storage, CleanConfig(enabled=False)) is None
    # a key is named as it was given, in either of Hudi's spellings
    with pytest.raises(TableError, match=r"^hoodie\.cleaner\.policy: unknown cleaner policy"):
        CleanConfig.from_conf({"hoodie.cleaner.policy": "KEEP_NOTHING"})
    with pytest.raises(TableError, match=r"^hoodie\.clean\.policy: unknown cleaner policy"):
        CleanConfig.from_conf({"hoodie.clean.policy": "KEEP_NOTHING"})
    with pytest.raises(TableError, match=r"^hoodie\.cleaner\.commits\.retained=0: must be at least 1"):
        CleanConfig.from_conf({"hoodie.cleaner.commits.retained": "0"})
    with pytest.raises(TableError, match=r"hoodie\.cleaner\.commits\.retained='ten': expected a whole number"):
        CleanConfig.from_conf({"hoodie.cleaner.commits.retained": "ten"})
    with pytest.raises(TableError, match=r"hoodie\.cleaner\.hours\.retained=0: must be at least 1"):
        CleanConfig.from_conf({"hoodie.cleaner.hours.retained": "0"})
    assert CleanConfig.from_conf({"hoodie.cleaner.commits.retained": "4"}).commits_retained == 4


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"policy": "keep_latest_commits"}, "hoodie.clean.policy: unknown cleaner policy 'keep_latest_commits'"),
        ({"policy": "NOPE"}, "unknown cleaner policy 'NOPE' (use one of KEEP_LATEST_COMMITS"),
        ({"commits_retained": 0}, "hoodie.clean.commits.retained=0: must be at least 1"),
        ({"file_versions_retained": 0}, "hoodie.cleaner.fileversions.retained=0: must be at least 1"),
        ({"hours_retained": "24"}, "hoodie.cleaner.hours.retained='24': expected a whole number"),
        ({"max_commits": -1}, "hoodie.clean.max.commits=-1: must be at least 0"),
    ],
)
def test_a_config_built_directly_is_checked_as_hudis_keys_are(settings: dict[str, object], message: str) -> None:
    """CleanConfig built in code was not checked: an unknown (or lower-case) policy cleaned
    nothing and said nothing, no retained commit failed with an IndexError inside the planner."""
    with pytest.raises(TableError) as e:
        CleanConfig(**settings)  # type: ignore[arg-type]
    assert message in str(e.value)


def test_incremental_planning_reads_commits_only_while_that_is_cheaper(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"])
    for v in range(2, 5):
        t.update(["a"], v)
        compact(t.storage)
    config = CleanConfig(commits_retained=1)
    assert clean(t.storage, config) is not None
    t.update(["b"], 5)  # one commit between the last clean's retained commit and the next one
    incremental = plan_clean(t.storage, config)
    off = {"hoodie.cleaner.commits.retained": "1", "hoodie.cleaner.incremental.mode": "false"}
    full = plan_clean(t.storage, CleanConfig.from_conf(off))
    assert not incremental.full_scan
    assert incremental.file_count > 0
    assert full.full_scan
    assert any("incremental.mode is off" in r for r in full.reasons)
    assert full.files_to_delete == incremental.files_to_delete
    for v in range(6, 9):
        t.update(["a"], v)
    # three commits to read against one partition to list: listing is the cheaper way
    many = plan_clean(t.storage, config)
    assert many.full_scan
    assert any("commits since the last clean" in r for r in many.reasons)


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_read_as_of_an_instant_whose_files_a_clean_deleted_is_refused(tmp_path: Path, copy_on_write: bool) -> None:
    """Time travel (and an incremental query ending there) needs the file slices that were latest
    then; once a clean deleted one, the read says so instead of answering from what is left (a
    group with no older slice left vanished from the answer without a word)."""
    from tidemark.table.incremental import read_incremental

    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write)
    first = t.insert(["a", "b"], 1)
    second = t.upsert(["a"], 2)
    if not copy_on_write:
        compact(t.storage)  # a new slice: the first one is an older version now
    replaced = t.insert_overwrite(["c"], 3)  # the group of a and b is replaced
    for v in range(4, 7):
        t.upsert(["c"], v)
    timeline = [i.timestamp for i in load_timeline(t.storage).completed().write_instants()]
    before = {at: read_snapshot(t.storage, as_of=at).to_pylist() for at in timeline if at >= replaced}
    result = clean(t.storage, CleanConfig(commits_retained=1))
    assert result is not None
    assert result.deleted
    assert result.plan.earliest_commit_to_retain is not None
    for as_of in (first, second):
        with pytest.raises(TableError) as e:
            read_snapshot(t.storage, as_of=as_of)
        message = str(e.value)
        assert f"as of {as_of}: the clean {result.instant.timestamp} deleted " in message
        assert "read as of a later instant" in message
    with pytest.raises(TableError, match="which that snapshot needs"):
        read_incremental(t.storage, "000", second)
    # reads whose slices the clean kept answer as before: from its earliest commit to retain on,
    # and (Merge-On-Read) earlier instants within a kept slice, whose logs are read up to them
    answering = [at for at in before if at >= result.plan.earliest_commit_to_retain.timestamp]
    if not copy_on_write:
        answering = list(before)
    assert answering
    for at in answering:
        assert read_snapshot(t.storage, as_of=at).to_pylist() == before[at]
    assert t.snapshot() == {"c": 6}


def test_a_clean_that_stopped_part_way_counts_for_reads_of_the_past(tmp_path: Path) -> None:
    """A cleaner that stopped after deleting files leaves its clean pending, with no record of
    what is gone yet: a read as of an instant whose slice its plan deletes is refused all the same."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    first = t.insert(["a"], 1)
    t.upsert(["a"], 2)
    t.upsert(["a"], 3)
    result = clean(t.storage, CleanConfig(commits_retained=1))
    assert result is not None
    assert result.deleted
    (tmp_path / ".hoodie" / result.instant.file_name).unlink()  # as if it stopped before completing
    assert not load_timeline(t.storage).is_completed(result.instant.timestamp)
    with pytest.raises(TableError, match=f"the clean {result.instant.timestamp} deleted "):
        read_snapshot(t.storage, as_of=first)


class _KilledAfterPlanning(LocalStorage):
    """A cleaner killed right after it wrote its plan: the clean's inflight file is never made."""

    def create_if_absent(self, path: str, data: bytes) -> None:
        if path.endswith(".clean.inflight"):
            raise StorageError(f"cannot create {self.full_uri(path)}: killed")
        super().create_if_absent(path, data)


def _pending_clean(root: Path) -> tuple[TableBuilder, Path, list[str]]:
    """A table with a clean left requested: (builder, the plan's file, the plan's file paths)."""
    t = TableBuilder(_KilledAfterPlanning(root))
    t.insert(["a", "b"], 1)
    for v in range(2, 5):
        t.update(["a"], v)
        compact(t.storage)
    with pytest.raises(StorageError, match="killed"):
        clean(t.storage, CleanConfig(commits_retained=1))
    (requested,) = (root / ".hoodie").glob("*.clean.requested")
    plan = deserialize(requested.read_bytes(), "HoodieCleanerPlan", str(requested))
    paths = [i["filePath"] for infos in plan["filePathsToBeDeletedPerPartition"].values() for i in infos]
    assert paths
    return t, requested, paths


def test_a_clean_plan_lists_full_locations_as_hudi_writes_them(tmp_path: Path) -> None:
    """Plans held paths in the table ("p=1/f.parquet"): Hudi's cleaner, finishing a pending clean,
    deletes each path as written, so it deleted nothing (the path resolved against its working
    directory) and recorded the clean as done."""
    root = tmp_path / "my table"
    t, _, paths = _pending_clean(root)
    for path in paths:
        assert path.startswith(f"file:{root.as_posix()}/"), path
        assert Path(path.removeprefix("file:")).is_file(), path
    result = clean(LocalStorage(root), CleanConfig(commits_retained=1))  # tidemark finishes it
    assert result is not None
    assert not [p for p in paths if Path(p.removeprefix("file:")).exists()]
    assert t.snapshot() == {"a": 4, "b": 1}


def test_a_clean_plan_of_an_earlier_tidemark_holding_paths_in_the_table_still_runs(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, requested, paths = _pending_clean(root)
    plan = deserialize(requested.read_bytes(), "HoodieCleanerPlan", str(requested))
    for infos in plan["filePathsToBeDeletedPerPartition"].values():
        for info in infos:
            info["filePath"] = info["filePath"].removeprefix(f"file:{root.as_posix()}/")
    requested.write_bytes(serialize("HoodieCleanerPlan", plan))
    assert clean(LocalStorage(root), CleanConfig(commits_retained=1)) is not None
    assert not [p for p in paths if Path(p.removeprefix("file:")).exists()]
    assert t.snapshot() == {"a": 4, "b": 1}


def test_a_savepoint_after_a_keep_latest_file_versions_clean_names_what_that_clean_did(tmp_path: Path) -> None:
    # that clean retains no commit: "it retained commits from ... on" did not fit it
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    first = t.insert(["a"])
    for v in range(2, 5):
        last = t.upsert(["a"], v)
    done = clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    assert done is not None
    assert done.deleted
    with pytest.raises(
        InstantStateError,
        match=rf"cannot savepoint {first}: a clean may already have removed its files \(clean "
        rf"{done.instant.timestamp} \(KEEP_LATEST_FILE_VERSIONS\) retained no commit: it may have deleted "
        rf"old file versions of any commit up to {last}\)",
    ):
        create_savepoint(t.storage, first)


def test_the_note_says_why_a_clean_looks_at_every_partition(tmp_path: Path) -> None:
    # every clean said "no usable earlier clean", even the first one and under a policy that
    # always looks at every partition
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"])
    for v in range(2, 6):
        t.update(["a"], v)
    by_commits = CleanConfig(commits_retained=2)
    first = clean(t.storage, by_commits)
    assert first is not None
    assert first.plan.reasons == ("no earlier clean: all partitions",)
    t.update(["a"], 6)
    assert plan_clean(t.storage, by_commits).full_scan is False  # incremental after a commits clean
    versions = clean(t.storage, CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1))
    assert versions is not None
    assert versions.plan.reasons == ("KEEP_LATEST_FILE_VERSIONS looks at all partitions",)
    t.update(["a"], 7)
    after = plan_clean(t.storage, by_commits)
    assert after.reasons == (f"the last clean {versions.instant.timestamp} retained no commit: all partitions",)


class _FreezesServerAtFirstDataDelete(FaultyStorage):
    """Stops the S3 server (SIGSTOP) just before the first data file is deleted: from then on the
    endpoint accepts connections and never answers, as a hung S3 endpoint does."""

    def __init__(self, inner: Storage, server: ChildProcess) -> None:
        super().__init__(inner)
        self.server = server
        self.frozen = False

    def delete(self, path: str) -> None:
        if not self.frozen and not path.startswith(".hoodie/") and self.server.pid is not None:
            os.kill(self.server.pid, signal.SIGSTOP)
            self.frozen = True
        super().delete(path)


@pytest.mark.s3
def test_a_clean_stops_at_the_first_call_a_hung_endpoint_does_not_answer(
    moto_process: tuple[str, ChildProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each file left waited out the timeouts in turn (about 2 minutes a file on a real
    endpoint); now the clean gives up after one and stays pending, and the next one finishes it."""
    from tidemark.storage import s3

    monkeypatch.setattr(s3, "READ_TIMEOUT_S", 1)
    monkeypatch.setattr(s3, "MAX_ATTEMPTS", 1)
    endpoint, server = moto_process
    location = f"s3://{create_bucket(endpoint)}/t"
    t = TableBuilder(open_storage(location, s3_options(endpoint)))
    t.insert(["a", "b"], 1)
    for v in range(2, 5):
        t.update(["a", "b"], v)
        compact(t.storage)
    config = CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1)
    planned = [f for files in plan_clean(t.storage, config).files_to_delete.values() for f in files]
    assert len(planned) >= 6

    frozen = _FreezesServerAtFirstDataDelete(open_storage(location, s3_options(endpoint)), server)
    started = time.monotonic()
    try:
        with pytest.raises(StorageUnreachableError, match=r"is unreachable.*it stays pending and the next clean"):
            clean(frozen, config)
        elapsed = time.monotonic() - started
    finally:
        assert server.pid is not None
        os.kill(server.pid, signal.SIGCONT)
    assert frozen.frozen
    # one call's timeout, not one per file left
    assert elapsed < 3 * s3.READ_TIMEOUT_S * s3.MAX_ATTEMPTS, f"gave up after {elapsed:.1f}s"

    storage = open_storage(location, s3_options(endpoint))
    (pending,) = load_timeline(storage).pending().of_actions(CLEAN).instants
    result = clean(storage, config)
    assert result is not None
    assert pending.timestamp in {r.instant.timestamp for r in (*result.finished_first, result)}
    assert not load_timeline(storage).pending().of_actions(CLEAN).instants
    assert [f for f in planned if storage.exists(f)] == []
    assert t.snapshot() == {"a": 4, "b": 4}


def test_a_write_pending_at_a_clean_is_in_the_next_incremental_clean(tmp_path: Path) -> None:
    """A write pending at a clean, older than the commits it would retain: the clean retains from
    the last write before it (as Hudi), so its files and the version it reads are kept while it
    runs, and once it commits the next incremental clean rescans its partition and deletes the
    version it replaced. It retained from the first write after it, which the pending write then
    committed before: no incremental clean looked at its partition again."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    t.upsert(["a"], 1, "p=1")
    t.upsert(["a"], 2, "p=1")
    for n in range(3, 7):  # partitions enough for the cleans to stay incremental
        t.upsert([f"k{n}"], n, f"p={n}")
    t.upsert(["b"], 7, "p=2")
    (b_before,) = {f for f in _files(tmp_path) if f.startswith("p=2/") and f.endswith(".parquet")}
    pending, stats = t.upsert_pending(["b"], 70, "p=2")  # a write that runs long
    written = {s.path for s in stats}
    assert written
    assert written <= _files(tmp_path)
    t.upsert(["a"], 8, "p=1")
    t.upsert(["a"], 9, "p=1")
    config = CleanConfig(commits_retained=1)
    first = clean(t.storage, config)
    assert first is not None
    # what the pending write wrote, and the version of b it read, are kept while it runs
    assert written | {b_before} <= _files(tmp_path)
    commit_write(t.storage, pending, stats, "upsert", t.schema)
    t.upsert(["a"], 10, "p=1")
    second = clean(t.storage, config)
    assert second is not None
    assert not second.plan.full_scan, second.plan.reasons
    assert b_before in second.deleted
    assert b_before not in _files(tmp_path)
    assert written <= _files(tmp_path)
    assert t.snapshot() == {"a": 10, "b": 70, "k3": 3, "k4": 4, "k5": 5, "k6": 6}


def test_a_write_pending_since_before_every_commit_holds_the_clean_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is deleted while it may read any version; it was silent about why."""
    t = TableBuilder(LocalStorage(tmp_path), copy_on_write=True)
    pending, stats = t.upsert_pending(["b"], 70, "p=2")
    for v in range(1, 4):
        t.upsert(["a"], v, "p=1")
    before = _files(tmp_path)
    with caplog.at_level("WARNING", "tidemark.clean"):
        clean(t.storage, CleanConfig(commits_retained=1))
    assert _files(tmp_path) >= before
    held = f"{pending.action} {pending.timestamp}, pending since before every completed write, holds the clean"
    assert held in caplog.text
    assert f"`tidemark rollback {t.storage.uri} {pending.timestamp}`" in caplog.text
    # the plan (what a dry run prints) says so too, rather than 'no commit to retain yet'
    assert any(r.startswith(held) for r in plan_clean(t.storage, CleanConfig(commits_retained=1)).reasons)
    commit_write(t.storage, pending, stats, "upsert", t.schema)


class _StalledAt(LocalStorage):
    """A cleaner's storage that stalls once at the first call ``call`` (``create_if_absent`` or
    ``size``) of a path ending with ``suffix``, while ``meanwhile`` runs, as another process would."""

    def __init__(self, root: Path, call: str, suffix: str, meanwhile: Callable[[], None]) -> None:
        super().__init__(root)
        self.call, self.suffix, self.meanwhile = call, suffix, [meanwhile]

    def _stall(self, call: str, path: str) -> None:
        if call == self.call and path.endswith(self.suffix) and self.meanwhile:
            self.meanwhile.pop()()

    def create_if_absent(self, path: str, data: bytes) -> None:
        self._stall("create_if_absent", path)
        super().create_if_absent(path, data)

    def size(self, path: str) -> int:
        self._stall("size", path)
        return super().size(path)


@pytest.mark.parametrize(
    ("call", "suffix"),
    [("create_if_absent", ".clean.inflight"), ("size", ".parquet"), ("create_if_absent", ".clean")],
    ids=["making-it-inflight", "between-exists-and-size", "completing-it"],
)
def test_two_cleaners_running_one_pending_clean_both_end_well(tmp_path: Path, call: str, suffix: str) -> None:
    """A cleaner runs the clean it requested outside the table lock; another cleaner (a process of
    its own) finishes every pending clean it sees, this one too, and gets there first. The first
    failed with "another writer got there first", or counted a file the other deleted between its
    two looks as not deleted and left the clean pending; now it ends well, saying the other
    completed the clean."""
    root = tmp_path / "t"
    t, _, paths = _pending_clean(root)
    (pending,) = load_timeline(LocalStorage(root)).pending().of_actions(CLEAN).instants

    def other_cleaner() -> None:
        other = tidemark("clean", str(root), "--conf", "hoodie.cleaner.commits.retained=1")
        assert other.returncode == 0, other.stderr
        assert other.stdout.startswith(f"clean {pending.timestamp} deleted {len(paths)} files;"), other.stdout

    result = run_clean(_StalledAt(root, call, suffix, other_cleaner), pending)
    assert result.completed_by_another
    assert (result.all_deleted, result.all_bytes_reclaimed) == ((), 0)  # the other counts them, once
    assert result.instant == pending.with_state(State.COMPLETED)
    timeline = load_timeline(LocalStorage(root))
    assert timeline.is_completed(pending.timestamp)
    assert not timeline.pending().of_actions(CLEAN).instants
    assert not [p for p in paths if Path(p.removeprefix("file:")).exists()]
    assert t.snapshot() == {"a": 4, "b": 1}
