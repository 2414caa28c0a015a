"""A storage that counts its listings and the files it opens, for tests of how often a folder is
listed and of which files a read touches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tidemark.storage import DirListing, FileInfo, FolderListing, LocalStorage
from tidemark.storage.base import ByteSource


class CountedListings(LocalStorage):
    """A local storage that counts its listings by folder (on S3 each is a request or more), and
    its reads by file."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed: Counter[str] = Counter()
        self.opened: Counter[str] = Counter()

    def read(self, path: str) -> bytes:
        self.opened[path] += 1
        return super().read(path)

    def open_input(self, path: str) -> ByteSource:
        self.opened[path] += 1
        return super().open_input(path)

    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        self.listed[prefix.rstrip("/")] += 1
        return super().list(prefix, recursive)

    def list_dir(self, folder: str) -> DirListing:
        self.listed[folder.rstrip("/")] += 1
        return super().list_dir(folder)

    def list_folder(self, folder: str) -> FolderListing:
        self.listed[folder.rstrip("/")] += 1
        return super().list_folder(folder)

    def list_names(self, folder: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        self.listed[folder.rstrip("/")] += 1
        return super().list_names(folder, prefixes)
