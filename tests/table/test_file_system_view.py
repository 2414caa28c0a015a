"""Which folders are the table's partitions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tests.support.model import apache_snapshot
from tests.support.table_builder import TableBuilder
from tidemark.storage import DirListing, FileInfo, LocalStorage, SizedDirListing
from tidemark.table.file_system_view import FileSystemView, list_partitions
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import load_timeline


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


class _CountingStorage(LocalStorage):
    """A local storage that counts its listings per folder (each a ListObjectsV2 request on S3)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed: Counter[str] = Counter()

    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        self.listed[prefix.rstrip("/")] += 1
        return super().list(prefix, recursive)

    def list_dir(self, folder: str) -> DirListing:
        self.listed[folder.rstrip("/")] += 1
        return super().list_dir(folder)

    def list_dir_sized(self, folder: str) -> SizedDirListing:
        self.listed[folder.rstrip("/")] += 1
        return super().list_dir_sized(folder)


def test_the_view_lists_each_partition_folder_once(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.insert_overwrite(["c"], 2, partition="p=2")
    t.insert_overwrite(["d"], 3, partition="p=3")
    storage = _CountingStorage(tmp_path)
    timeline = load_timeline(storage)
    storage.listed.clear()
    view = FileSystemView(storage, timeline)
    slices = view.latest_file_slices()
    # the walk's listing of a partition is the view's listing of its files: on S3 one request
    # per partition, not two
    assert storage.listed == Counter({"": 1, "p=1": 1, "p=2": 1, "p=3": 1})
    assert sorted(s.partition_path for s in slices) == ["p=1", "p=2", "p=3"]
    for s in slices:
        assert s.base_file is not None
        assert s.base_file.size == (tmp_path / s.base_file.path).stat().st_size
