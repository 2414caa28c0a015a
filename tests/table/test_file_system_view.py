"""Which folders are the table's partitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model import apache_snapshot
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.file_system_view import list_partitions
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
