"""Which folders are the table's partitions."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tidemark
from tests.support.listings import CountedListings
from tests.support.model import apache_snapshot
from tests.support.table_builder import PARTITION, TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.file_system_view import list_partitions
from tidemark.table.markers import IOType, create_marker
from tidemark.table.snapshot import SnapshotReader, read_snapshot


def test_a_partition_linked_from_elsewhere_is_read_and_a_link_back_up_is_not_followed(tmp_path: Path) -> None:
    table, elsewhere = tmp_path / "t", tmp_path / "other-disk"
    t = TableBuilder(LocalStorage(table))
    t.insert(["a", "b"], 1)
    t.insert_overwrite(["c"], 2, partition="p=2")
    elsewhere.mkdir()
    (table / "p=2").rename(elsewhere / "p=2")
    (table / "p=2").symlink_to(elsewhere / "p=2", target_is_directory=True)
    storage = LocalStorage(table)
    assert sorted(apache_snapshot(str(table)).column("id").to_pylist()) == ["a", "b", "c"]
    assert sorted(read_snapshot(storage).column("id").to_pylist()) == ["a", "b", "c"]
    # a link back up would make the walk endless (Apache's reader gives up on it)
    (table / "p=1" / "loop").symlink_to(table, target_is_directory=True)
    assert list_partitions(storage) == ["p=1", "p=2"]
    assert sorted(read_snapshot(storage).column("id").to_pylist()) == ["a", "b", "c"]


def test_a_snapshot_read_lists_each_partition_once(tmp_path: Path) -> None:
    """The walk that found the partitions listed each folder, and then every partition was listed
    again for its files: two requests per partition on S3, one after the other."""
    builder = TableBuilder(LocalStorage(tmp_path))
    builder.insert(["a", "b"], 1)
    for n in range(2, 5):
        builder.upsert([f"k{n}"], n, partition=f"p={n}")
    counted = CountedListings(tmp_path)
    assert sorted(read_snapshot(counted).column("id").to_pylist()) == ["a", "b", "k2", "k3", "k4"]
    partitions = ["p=1", "p=2", "p=3", "p=4"]
    assert {f: n for f, n in counted.listed.items() if f in partitions} == dict.fromkeys(partitions, 1)


def test_what_the_view_answers_cannot_be_edited_under_a_later_read(tmp_path: Path) -> None:
    """file_groups() answered the view's cached list and partitions was a list: a caller that
    cleared or filtered them in place made the same reader drop those rows without an error."""
    builder = TableBuilder(LocalStorage(tmp_path))
    builder.insert(["a", "b"], 1)
    reader = SnapshotReader(builder.storage)
    (partition,) = reader.view.partitions
    groups = reader.view.file_groups(partition)
    with pytest.raises(AttributeError):
        groups.clear()  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        reader.view.partitions.remove(partition)  # type: ignore[attr-defined]
    assert sorted(reader.read().column("id").to_pylist()) == ["a", "b"]


def test_a_partition_whose_metafile_is_in_the_base_format_is_read_and_written_to(tmp_path: Path) -> None:
    """Hudi writes ``.hoodie_partition_metadata.parquet`` instead of the text metafile where the
    table sets hoodie.partition.metafile.use.base.format=true. Only the text file made a folder a
    partition, so such a partition's rows were left out of every read without a word (and an
    upsert of one of its keys, routed by the index, wrote it again as a new record elsewhere)."""
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    t.insert(["a", "b"], 1)
    created = t.upsert(["c"], 2, partition="p=2")
    # as Hudi's writer makes it: an empty Parquet file, the properties in its footer
    (tmp_path / "p=2" / ".hoodie_partition_metadata").unlink()
    footer = {"commitTime": created, "partitionDepth": "1"}
    empty = pa.table({"dummyint": pa.array([], pa.int64())}).replace_schema_metadata(footer)
    pq.write_table(empty, tmp_path / "p=2" / ".hoodie_partition_metadata.parquet")
    everything = [("a", 1), ("b", 1), ("c", 2)]
    assert _id_values(t.rows()) == _id_values(apache_snapshot(str(tmp_path)).to_pylist()) == everything
    assert list_partitions(storage) == ["p=1", "p=2"]
    t.upsert(["c"], 3, partition="p=2")
    updated = [("a", 1), ("b", 1), ("c", 3)]
    assert _id_values(t.rows()) == _id_values(apache_snapshot(str(tmp_path)).to_pylist()) == updated
    # the partition keeps the one metafile it has
    assert sorted(p.name for p in (tmp_path / "p=2").glob(".hoodie_partition_metadata*")) == [
        ".hoodie_partition_metadata.parquet"
    ]


def _id_values(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return sorted((r["id"], r["v"]) for r in rows)


def _jsonl_rows(out: str) -> list[tuple[str, str, int]]:
    return sorted((r["p"], r["id"], r["v"]) for r in map(json.loads, out.splitlines()))


def _apache_rows(table: Path, as_of: str) -> list[tuple[str, str, int]]:
    return sorted((r["p"], r["id"], r["v"]) for r in apache_snapshot(str(table), as_of=as_of).to_pylist())


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_time_travel_past_an_archived_insert_overwrite_reads_what_apache_reads(
    tmp_path: Path, copy_on_write: bool
) -> None:
    """An insert_overwrite replaced p=2's file group; a clean deleted that group's files and the
    archiver then moved the replacecommit out. A read as of the clean's earliest commit to retain
    (and one of a savepoint) was refused for a file of the replaced group, which no snapshot after
    the replace needs: the archived replacecommit did not count, so the group looked live."""
    table = tmp_path / "t"
    t = TableBuilder(LocalStorage(table), copy_on_write=copy_on_write)
    keys = [f"k{i}" for i in range(5)]
    t.upsert(keys, 1, "p=1")
    t.upsert(keys, 1, "p=2")
    t.upsert(keys, 2, "p=2")
    replaced = t.insert_overwrite(keys[:3], 3, "p=2")
    savepointed = t.upsert(keys, 4, "p=1")
    assert tidemark("savepoint", "create", str(table), savepointed).returncode == 0
    for v in range(5, 10):
        t.upsert(keys, v, "p=1")
    cleaned = tidemark("clean", str(table), "--conf", "hoodie.cleaner.commits.retained=2")
    assert cleaned.returncode == 0, cleaned.stderr
    assert "p=2/fg-" in cleaned.stdout  # the replaced group's files are gone
    retain = re.search(r"earliest commit to retain: (\d+)", cleaned.stdout)
    assert retain is not None
    archived = tidemark(
        "archive", str(table), *("--conf", "hoodie.keep.min.commits=2", "--conf", "hoodie.keep.max.commits=3")
    )
    assert archived.returncode == 0, archived.stderr
    assert replaced in archived.stdout
    assert replaced not in tidemark("timeline", str(table)).stdout
    for as_of, expected_v in ((retain.group(1), 8), (savepointed, 4)):
        read = tidemark("table", "read", str(table), "--as-of", as_of, "--format", "jsonl")
        assert read.returncode == 0, read.stderr
        expected = [("1", k, expected_v) for k in keys] + [("2", k, 3) for k in keys[:3]]
        assert _jsonl_rows(read.stdout) == _apache_rows(table, as_of) == expected


def _plant_zombie_base(storage: LocalStorage, instant: str, file_id: str, rows: pa.Table, io_type: IOType) -> str:
    """A base file of ``file_id`` at ``instant`` that a killed attempt (write token attempt 9, sorting after
    the committed attempt 0) wrote after the commit, with its marker, as a speculative twin leaves it."""
    path = f"{PARTITION}/{file_id}_0-4-9_{instant}.parquet"
    create_marker(storage, instant, path, io_type)
    pq.write_table(rows, storage.root / path)
    return path


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge_on_read", "copy_on_write"])
def test_a_base_file_a_killed_task_attempt_wrote_after_the_commit_is_not_read(
    tmp_path: Path, copy_on_write: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A speculative twin killed once the write committed still wrote its copy of a file group's base
    file, under its own write token, from input cut short. The view kept whichever base file of the
    group's instant was listed last, the zombie's: the read returned its rows (older values, or fewer
    rows) without an error, until the next write removed it."""
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage, copy_on_write=copy_on_write)
    t.insert(["a", "b", "c"], 1)
    (old,) = SnapshotReader(storage).view.latest_file_slices()
    assert old.base_file is not None
    latest = t.upsert(["a", "b", "c", "d", "e"], 2)
    model = {"a": 2, "b": 2, "c": 2, "d": 2, "e": 2}
    if copy_on_write:  # the twin merged the group's old records with none of the updates
        zombie = _plant_zombie_base(
            storage, latest, old.file_id, pq.read_table(tmp_path / old.base_file.path), IOType.MERGE
        )
    else:  # the twin of the new group's insert got only its first record
        (new,) = [fs for fs in SnapshotReader(storage).view.latest_file_slices() if fs.base_instant == latest]
        assert new.base_file is not None
        rows = pq.read_table(tmp_path / new.base_file.path).slice(0, 1)
        zombie = _plant_zombie_base(storage, latest, new.file_id, rows, IOType.CREATE)
    with caplog.at_level(logging.INFO, logger="tidemark.file_system_view"):
        assert t.snapshot() == model
    assert f"ignoring {zombie}" in caplog.text
    paths = {fs.base_file.path for fs in SnapshotReader(storage).view.latest_file_slices() if fs.base_file}
    assert zombie not in paths
    t.recover()  # the next write's start takes it away
    assert not (tmp_path / zombie).exists()
    assert t.snapshot() == model


def test_base_files_of_one_instant_that_its_commit_does_not_name_are_read_the_same_way_every_time(
    tmp_path: Path,
) -> None:
    """Two base files of one group and instant, neither named by the commit (as a table copied
    file by file can have): the read takes the last by name, as before, and does not fail."""
    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage, copy_on_write=True)
    first = t.insert(["a", "b"], 1)
    (fs,) = SnapshotReader(storage).view.latest_file_slices()
    assert fs.base_file is not None
    rows = pq.read_table(tmp_path / fs.base_file.path)
    (tmp_path / fs.base_file.path).unlink()
    pq.write_table(rows.slice(0, 1), tmp_path / PARTITION / f"{fs.file_id}_0-1-7_{first}.parquet")
    pq.write_table(rows, tmp_path / PARTITION / f"{fs.file_id}_0-1-8_{first}.parquet")
    assert t.snapshot() == {"a": 1, "b": 1}


def test_a_twin_base_file_of_an_archived_commit_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A twin base file of a commit the archiver has moved out (one archived before the archiver
    removed twins, or archived while the read ran): the commit was looked for on the active
    timeline only, so the view took the last by name, the twin, and lost a row without an error.
    The commit's write stats are read from the archive instead."""
    from tidemark.table_services.archive import ArchiveConfig, archive
    from tidemark.table_services.clean import CleanConfig, clean

    storage = LocalStorage(tmp_path)
    t = TableBuilder(storage)
    first = t.insert(["a", "b"], 1)
    for n in range(2, 9):
        t.insert([f"k{n}"], n)
    clean(storage, CleanConfig(commits_retained=2))
    assert first in {i.timestamp for i in archive(storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants}
    (committed,) = (tmp_path / PARTITION).glob(f"*_{first}.parquet")
    twin = committed.with_name(committed.name.replace("_0-1-0_", "_0-1-9_"))
    pq.write_table(pq.read_table(committed).slice(0, 1), twin)
    with caplog.at_level(logging.INFO, logger="tidemark.file_system_view"):
        assert t.snapshot() == {"a": 1, "b": 1} | {f"k{n}": n for n in range(2, 9)}
    assert f"ignoring {twin.relative_to(tmp_path)}" in caplog.text
