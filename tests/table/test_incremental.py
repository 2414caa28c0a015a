"""Incremental queries: for every range of a table's commits, tidemark's answer equals a model of
the writes and Apache's reader's incremental query (hudi-rs), on Merge-On-Read and copy-on-write
tables, across a compaction and into the archive; pending writes stop a range as Hudi's policies
say; bad ranges get one clear error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.cli.test_table_commands import tidemark
from tests.support.listings import CountedListings
from tests.support.model import apache_incremental
from tests.support.table_builder import TableBuilder
from tidemark.errors import TableError
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.compaction import run_compaction, schedule_compaction
from tidemark.table.incremental import (
    BLOCK,
    HOLES_POLICY,
    plan_incremental,
    read_incremental,
)
from tidemark.table.write_client import create_table, start_write
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.timeline import DELTA_COMMIT, load_timeline

#: key -> (value, commit time)
Model = dict[str, tuple[int, str]]


class History:
    """The writes and, after each, the table as a model sees it."""

    def __init__(self, builder: TableBuilder) -> None:
        self.builder = builder
        self.state: Model = {}
        self.after: dict[str, Model] = {}

    def write(self, instant: str, values: dict[str, int | None]) -> str:
        for key, value in values.items():
            if value is None:
                self.state.pop(key, None)
            else:
                self.state[key] = (value, instant)
        self.after[instant] = dict(self.state)
        return instant

    def insert(self, keys: list[str], value: int) -> str:
        return self.write(self.builder.insert(keys, value), dict.fromkeys(keys, value))

    def upsert(self, keys: list[str], value: int) -> str:
        return self.write(self.builder.upsert(keys, value), dict.fromkeys(keys, value))

    def delete(self, keys: list[str], ordering: int) -> str:
        return self.write(self.builder.delete(keys, ordering), dict.fromkeys(keys))

    def expected(self, begin: str, end: str | None) -> list[tuple[str, int, str]]:
        instants = [i for i in self.after if end is None or i <= end]
        state = self.after[instants[-1]] if instants else {}
        return sorted((k, v, t) for k, (v, t) in state.items() if begin < t and (end is None or t <= end))


def triples(table: pa.Table) -> list[tuple[str, int, str]]:
    if not table.num_rows:
        return []
    columns = (table[c].to_pylist() for c in ("id", "v", "_hoodie_commit_time"))
    return sorted(zip(*columns, strict=True))


def _history(tmp_path: Path, copy_on_write: bool) -> tuple[History, list[str]]:
    h = History(TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write))
    instants = [
        h.insert(["a", "b", "c"], 1),
        h.upsert(["a", "d"], 2),  # an update and a new key (a new file group)
        h.delete(["b"], 3),
        h.insert(["e", "f"], 4),
        h.upsert(["d", "e"], 5),
    ]
    if not copy_on_write:
        # the compaction keeps each record's commit time: a range after it holds only later writes
        requested = schedule_compaction(h.builder.storage)
        assert requested is not None
        compacted = run_compaction(h.builder.storage, requested).timestamp
        h.after[compacted] = dict(h.state)
        instants.append(compacted)
    instants.append(h.upsert(["c"], 7))
    return h, instants


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_every_range_reads_as_the_model_and_apache_reader(tmp_path: Path, copy_on_write: bool) -> None:
    h, instants = _history(tmp_path, copy_on_write)
    storage = h.builder.storage
    bounds = ["000", *instants]
    checked = 0
    for i, begin in enumerate(bounds):
        for end in [*bounds[i + 1 :], None]:
            expected = h.expected(begin, end)
            assert triples(read_incremental(storage, begin, end)) == expected, (begin, end)
            assert triples(apache_incremental(str(tmp_path), begin, end)) == expected, (begin, end)
            checked += 1
    assert checked == len(bounds) * (len(bounds) + 1) // 2
    # a deleted key is in no range; a key written in a range and again after it shows its value
    # as of the range's end
    assert ("b", 1, instants[0]) not in triples(read_incremental(storage, "000"))
    assert ("a", 2, instants[1]) in triples(read_incremental(storage, instants[0], instants[1]))


def test_only_the_file_groups_the_range_wrote_are_read(tmp_path: Path) -> None:
    h = History(TableBuilder(LocalStorage(tmp_path)))
    first = h.insert(["a", "b"], 1)
    h.insert(["c"], 2)  # a second file group
    third = h.upsert(["a"], 3)
    storage = h.builder.storage
    span = plan_incremental(storage, load_timeline(storage), first)
    groups = {fg for _, fg in span.file_groups or ()}
    assert groups == {h.builder.keys["a"], h.builder.keys["c"]}
    span = plan_incremental(storage, load_timeline(storage), "000", first)
    assert {fg for _, fg in span.file_groups or ()} == {h.builder.keys["a"]}
    assert span.end == first
    empty = plan_incremental(storage, load_timeline(storage), third)
    assert empty.end is None
    assert read_incremental(storage, third).num_rows == 0


def test_a_range_reaching_into_the_archive_reads_every_file_group(tmp_path: Path) -> None:
    h = History(TableBuilder(LocalStorage(tmp_path)))
    h.insert(["a"], 1)
    h.insert(["b"], 2)
    for v in range(3, 9):
        h.upsert(["b"], v)
    storage = h.builder.storage
    clean(storage, CleanConfig(commits_retained=1))
    archived = archive(storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    assert archived, "some instants are archived"
    timeline = load_timeline(storage)
    # "a" was written by an archived commit: only a scan of every file group finds it
    span = plan_incremental(storage, timeline, "000")
    assert span.file_groups is None
    assert triples(read_incremental(storage, "000")) == h.expected("000", None)
    assert ("a", 1, archived[0].timestamp) in triples(read_incremental(storage, "000"))
    # a range that ends in the archive cannot be read as of its end: Hudi's fallback scans the
    # latest slices, where "b" of the second write is gone (rewritten since), without a word
    second = archived[1].timestamp
    first_active = timeline.completed().write_instants().instants[0].timestamp
    with pytest.raises(TableError, match=rf"up to {second}: the commits of the range are all archived") as e:
        read_incremental(storage, "000", second)
    assert f"an end at or after {first_active}" in str(e.value)
    # a range within the active timeline still reads only its file groups
    assert plan_incremental(storage, timeline, first_active).file_groups is not None
    assert triples(read_incremental(storage, first_active)) == h.expected(first_active, None)


def _archive_read(storage: CountedListings) -> list[str]:
    """The archive folder's listings and files the storage saw."""
    return [p for p in (*storage.listed, *storage.opened) if p.startswith(".hoodie/archived")]


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_range_on_the_active_timeline_does_not_read_the_archive(tmp_path: Path, copy_on_write: bool) -> None:
    """Every pull decoded the whole archived timeline, though archival takes the oldest writes and
    none could be in a range beginning on the active timeline: a streaming consumer's pull took
    longer the older the table (seconds for a few thousand archived instants)."""
    h = History(TableBuilder(LocalStorage(tmp_path), copy_on_write=copy_on_write))
    h.insert(["a"], 1)
    h.insert(["b"], 2)
    for v in range(3, 9):
        h.upsert(["b"], v)
    if not copy_on_write:
        # the latest slices hold no log block of an archived write, whose merge reads the archive
        requested = schedule_compaction(h.builder.storage)
        assert requested is not None
        h.after[run_compaction(h.builder.storage, requested).timestamp] = dict(h.state)
    h.upsert(["a"], 9)
    clean(h.builder.storage, CleanConfig(commits_retained=1))
    assert archive(h.builder.storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    storage = CountedListings(tmp_path)
    first_active = load_timeline(storage).first_non_savepoint_write()
    assert first_active is not None
    for begin in (first_active, list(h.after)[-2]):  # the active timeline's range, the latest write's
        rows = triples(read_incremental(storage, begin))
        assert rows == h.expected(begin, None) == triples(apache_incremental(str(tmp_path), begin, None))
    assert _archive_read(storage) == []
    # a range reaching back into the archive reads it
    assert triples(read_incremental(storage, "000")) == h.expected("000", None)
    assert _archive_read(storage)


def test_a_range_beginning_at_a_savepoint_archival_went_beyond_reads_the_writes_archived_after_it(
    tmp_path: Path,
) -> None:
    """Archival beyond a savepoint keeps the savepointed commit active and archives the writes
    after it: a range beginning at the savepoint is before the first write left unsavepointed, so
    the archive is read and the archived write's rows are in it."""
    from tests.table_services.test_archive import _beyond_savepoint_scenario

    _, savepointed, hole = _beyond_savepoint_scenario(tmp_path)
    storage = CountedListings(tmp_path)
    timeline = load_timeline(storage)
    first_active = timeline.first_non_savepoint_write()
    assert first_active is not None
    assert savepointed < hole < first_active
    last = timeline.completed().write_instants().instants[-1].timestamp
    assert triples(read_incremental(storage, savepointed)) == [("a", 6, last), ("b", 10, hole)]
    assert plan_incremental(storage, timeline, savepointed).file_groups is None
    assert _archive_read(storage)


def test_a_pending_write_older_than_the_end_stops_the_range(tmp_path: Path) -> None:
    h = History(TableBuilder(LocalStorage(tmp_path / "t")))
    first = h.insert(["a"], 1)
    storage = h.builder.storage
    pending = start_write(storage, DELTA_COMMIT, "upsert")  # a writer still at work
    later = h.insert(["b"], 2)
    with pytest.raises(TableError) as e:
        read_incremental(storage, "000")
    message = str(e.value)
    assert f"the deltacommit {pending.timestamp} started before it" in message
    assert f"up to {later}" in message
    assert f"{HOLES_POLICY}={BLOCK}" in message
    # BLOCK: the range ends before the pending write; a range ending before it is not stopped
    assert triples(read_incremental(storage, "000", policy=BLOCK)) == h.expected("000", first)
    assert triples(read_incremental(storage, "000", first)) == h.expected("000", first)
    # a pending compaction writes no new records: it stops nothing
    h2 = History(TableBuilder(LocalStorage(tmp_path / "t2")))
    h2.insert(["a"], 1)
    h2.upsert(["a"], 2)
    assert schedule_compaction(h2.builder.storage) is not None
    h2.upsert(["a"], 3)
    assert triples(read_incremental(h2.builder.storage, "000")) == h2.expected("000", None)


def test_a_pending_clustering_stops_no_range(tmp_path: Path) -> None:
    """A clustering Apache Hudi's async clustering planned (a replacecommit requested with a
    clustering plan) was taken for a hollow commit: every incremental query past it was refused
    for as long as it stayed planned. It keeps the records' commit times, so it opens no hole, and
    Hudi's handleHollowCommitIfNeeded leaves it out."""
    h = History(TableBuilder(LocalStorage(tmp_path)))
    first = h.insert(["a"], 1)
    h.builder.plan_clustering("fg-001")
    later = h.insert(["b"], 2)  # a file group of its own: the clustering's takes no change
    storage = h.builder.storage
    assert triples(read_incremental(storage, first)) == h.expected(first, None) == [("b", 2, later)]
    assert triples(read_incremental(storage, "000", policy=BLOCK)) == h.expected("000", None)
    assert triples(apache_incremental(str(tmp_path), first)) == h.expected(first, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"begin": "yesterday"}, "begin='yesterday': expected an instant time"),
        # compared as text, a date would come before every commit
        ({"begin": "2026-01-01 23:59:59"}, "begin='2026-01-01 23:59:59': expected an instant time"),
        ({"begin": None}, "begin=None: expected an instant time"),
        ({"begin": "000", "end": "garbage"}, "end='garbage': expected an instant time"),
        ({"begin": "000", "policy": "sometimes"}, "policy='sometimes': expected FAIL or BLOCK"),
        ({"begin": "000", "policy": "use_transition_time"}, "keeps no completion times"),
    ],
)
def test_bad_ranges_are_refused(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    h = History(TableBuilder(LocalStorage(tmp_path)))
    h.insert(["a"], 1)
    with pytest.raises(TableError) as e:
        read_incremental(h.builder.storage, **kwargs)  # type: ignore[arg-type]
    assert message in str(e.value)


def test_the_holes_policy_is_read_in_any_case(tmp_path: Path) -> None:
    h = History(TableBuilder(LocalStorage(tmp_path)))
    first = h.insert(["a"], 1)
    storage = h.builder.storage
    start_write(storage, DELTA_COMMIT, "upsert")  # a writer still at work
    h.insert(["b"], 2)
    with pytest.raises(TableError, match="still"):
        read_incremental(storage, "000", policy="fail")
    assert triples(read_incremental(storage, "000", policy=" block ")) == h.expected("000", first)


def test_a_range_ending_before_the_first_write_has_the_tables_columns(tmp_path: Path) -> None:
    h = History(TableBuilder(LocalStorage(tmp_path)))
    first = h.insert(["a"], 1)
    h.upsert(["a"], 2)
    storage = h.builder.storage
    columns = read_incremental(storage, "000").column_names
    empty = read_incremental(storage, "000", str(int(first) - 1))
    assert (empty.num_rows, empty.column_names) == (0, columns)
    assert {"id", "v"} <= set(columns)


def test_a_table_without_meta_fields_has_no_incremental_query(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", extra={P.POPULATE_META_FIELDS: "false"})
    with pytest.raises(TableError) as e:
        read_incremental(storage, "000")
    assert "hoodie.populate.meta.fields=false" in str(e.value)


def test_a_range_beginning_at_an_instant_left_on_the_active_timeline_reaches_the_archive(tmp_path: Path) -> None:
    """A restore stays on the active timeline while the commits after it are archived: a range
    beginning at it reaches archived commits, so every file group is read (the first instant on
    the active timeline is no bound for what the archive holds)."""
    from tidemark.table_services.restore import restore
    from tidemark.table_services.savepoint import create_savepoint, delete_savepoint

    h = History(TableBuilder(LocalStorage(tmp_path)))
    first = h.insert(["a"], 1)
    h.upsert(["a"], 2)
    storage = h.builder.storage
    create_savepoint(storage, first)
    h.upsert(["a"], 3)
    restored = restore(storage, first).instant.timestamp
    delete_savepoint(storage, first)
    h.state, h.after = dict(h.after[first]), {first: h.after[first]}  # the model restored too
    inserted = h.insert(["b"], 4)  # a file group only an archived commit wrote
    for v in range(5, 10):
        h.upsert(["a"], v)
    clean(storage, CleanConfig(commits_retained=1))
    archived = {i.timestamp for i in archive(storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants}
    timeline = load_timeline(storage)
    assert inserted in archived
    assert timeline.instants[0].timestamp == restored < inserted
    assert plan_incremental(storage, timeline, restored).file_groups is None
    assert triples(read_incremental(storage, restored)) == h.expected(restored, None)
    assert ("b", 4, inserted) in triples(read_incremental(storage, restored))


@pytest.mark.parametrize("damage", ["overwritten", "truncated", "emptied"])
def test_a_damaged_archive_is_read_around_by_a_scan_of_every_file_group(damage: str, tmp_path: Path) -> None:
    """A damaged archive was read as an empty one, and a range whose commits it held lost their
    records: what the damage hides may be in the range, so every file group is read, and
    ``timeline --archived`` names the damage."""
    from tidemark.table_services.restore import restore
    from tidemark.table_services.savepoint import create_savepoint, delete_savepoint
    from tidemark.timeline.archived import archive_files

    h = History(TableBuilder(LocalStorage(tmp_path)))
    first = h.insert(["a"], 1)
    storage = h.builder.storage
    create_savepoint(storage, first)
    h.upsert(["a"], 2)
    restored = restore(storage, first).instant.timestamp
    delete_savepoint(storage, first)
    h.state, h.after = dict(h.after[first]), {first: h.after[first]}
    inserted = h.insert(["b"], 3)
    for v in range(4, 9):
        h.upsert(["a"], v)
    clean(storage, CleanConfig(commits_retained=1))
    assert inserted in {
        i.timestamp for i in archive(storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    }
    (archive_file,) = (tmp_path / p for p in archive_files(storage))
    data = archive_file.read_bytes()
    damaged = {"overwritten": data[:40] + b"Z" * 64 + data[104:], "truncated": data[: len(data) // 2], "emptied": b""}
    archive_file.write_bytes(damaged[damage])
    assert plan_incremental(storage, load_timeline(storage), restored).file_groups is None
    assert ("b", 3, inserted) in triples(read_incremental(storage, restored))
    assert triples(read_incremental(storage, restored)) == h.expected(restored, None)
    shown = tidemark("timeline", str(tmp_path), "--archived")
    assert shown.returncode == 0, shown.stderr
    assert f"warning: {archive_file}" in shown.stderr
    assert "misses them" in shown.stderr


def test_a_clean_of_a_file_group_the_range_never_wrote_does_not_refuse_it(tmp_path: Path) -> None:
    """The range's reader checked every file group against the cleans, and refused a query whose
    commits wrote only another partition, naming a file it would never read."""
    builder = TableBuilder(LocalStorage(tmp_path))
    first = builder.insert(["a", "b"], 1)
    second = builder.upsert(["q"], 2, partition="p=2")
    builder.insert_overwrite(["x"], 3)  # replaces the first file group, which the clean then deletes
    builder.upsert(["x"], 4)
    clean(builder.storage, CleanConfig(commits_retained=1))
    assert triples(read_incremental(builder.storage, first, second)) == [("q", 2, second)]
    with pytest.raises(TableError, match=r"the clean .* deleted"):
        read_incremental(builder.storage, "000", first)  # that range needs the deleted group


def test_a_poll_that_finds_nothing_new_has_the_table_columns(tmp_path: Path) -> None:
    """A poll after the latest commit answered a table without columns (a range holding only a
    delete answered with them): a consumer's select of a column failed on an ordinary empty poll."""
    builder = TableBuilder(LocalStorage(tmp_path))
    builder.insert(["a"], 1)
    latest = builder.upsert(["a"], 2)
    nothing = read_incremental(builder.storage, latest)
    assert nothing.num_rows == 0
    assert nothing.column_names == read_incremental(builder.storage, "000").column_names
    assert nothing.select(["id", "v"]).num_rows == 0
