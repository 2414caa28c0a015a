"""The storage interface every other layer uses.

Paths given to a :class:`Storage` are relative to its root and always use ``/``. A storage never
interprets file contents; it moves bytes and guarantees that :meth:`Storage.create_if_absent` is
atomic, which is what lets two writers race on an instant file safely.
"""

from __future__ import annotations

import abc
import io
import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)
class FileInfo:
    """One listed file: its path relative to the storage root and its size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class DirListing:
    """One folder's direct children, by name."""

    folders: tuple[str, ...]
    files: tuple[str, ...]


@dataclass(frozen=True)
class FolderListing:
    """One folder's direct children: sub-folder names, and its files with their sizes."""

    folders: tuple[str, ...]
    files: tuple[FileInfo, ...]


class ByteSource(abc.ABC):
    """Random read access to one file, for readers that seek (the log block header pass)."""

    path: str
    size: int

    @abc.abstractmethod
    def read_at(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset``; fewer only at the end of the file."""

    def close(self) -> None:  # noqa: B027 - optional hook, most sources hold nothing
        """Release what the source holds."""

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BytesSource(ByteSource):
    """A :class:`ByteSource` over bytes already in memory."""

    def __init__(self, data: bytes, path: str = "<memory>") -> None:
        self._data = data
        self.path = path
        self.size = len(data)

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"negative offset or length: {offset}, {length}")
        return self._data[offset : offset + length]


class SourceFile(io.RawIOBase):
    """A :class:`ByteSource` as a seekable binary file, so that Parquet reads fetch the footer and
    the column chunks they need, not the whole file."""

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.source.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.source.read_at(self.position, len(buffer))
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)

    def close(self) -> None:
        self.source.close()
        super().close()


class Storage(abc.ABC):
    """A file system or object store rooted at :attr:`uri`."""

    uri: str
    #: True where :meth:`append` works (local file systems); object stores write whole objects.
    supports_append: bool = False

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """The whole file. Raises :class:`ObjectNotFoundError`."""

    @abc.abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end of the file)."""

    @abc.abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace the file with ``data``."""

    @abc.abstractmethod
    def create_if_absent(self, path: str, data: bytes) -> None:
        """Create the file atomically, or raise :class:`ObjectAlreadyExistsError` if it exists.

        Exactly one of several concurrent callers succeeds.
        """

    @abc.abstractmethod
    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """The whole file and an opaque version string of exactly the bytes returned, to hand to
        :meth:`write_if_match`. Raises :class:`ObjectNotFoundError`."""

    @abc.abstractmethod
    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        """Compare-and-swap: write ``data`` and return its new version.

        With ``expected_version`` None the file is created only if absent (else
        :class:`ObjectAlreadyExistsError`); otherwise it is replaced only while its version is
        still ``expected_version`` (else :class:`VersionMismatchError`, also when it is gone). Of
        several concurrent callers expecting one version, exactly one succeeds, and a reader never
        sees a half-written file.

        Locally every write makes a new version, even of identical bytes. On S3 the version is
        the ETag, which for a plain PUT is the MD5 of the bytes: writing identical bytes again
        keeps the version, so a caller that must tell writes apart puts something unique in them.
        """

    @abc.abstractmethod
    def modified_ms(self, path: str) -> int:
        """When the file was last written, in epoch milliseconds by the storage's clock (whole
        seconds on S3). Raises :class:`ObjectNotFoundError`."""

    def append(self, path: str, data: bytes) -> None:
        """Append to the file, creating it when absent (only where :attr:`supports_append`)."""
        from tidemark.errors import AppendNotSupportedError

        raise AppendNotSupportedError(f"{self.uri} cannot append to {path}: write a new file instead")

    @abc.abstractmethod
    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        """Every file whose path starts with ``prefix``, in path order: recursively, or with
        ``recursive=False`` only those directly in the folder the prefix ends in."""

    def list_dir(self, folder: str) -> DirListing:
        """The folder's direct children: sub-folder names and file names, sorted, no sizes. Cheaper
        than :meth:`list` where a folder is large and only names matter (the timeline), and the
        way to walk partitions without listing ``.hoodie/``. An absent folder is empty."""
        listing = self.list_folder(folder)
        return DirListing(listing.folders, tuple(f.path.rpartition("/")[2] for f in listing.files))

    def list_folder(self, folder: str) -> FolderListing:
        """The folder's sub-folders (by name) and files (with sizes, paths from the root), sorted:
        one listing that both walks partitions and gives the files a file-system view needs, where
        :meth:`list_dir` and then :meth:`list` would list every partition twice. An absent folder
        is empty."""
        prefix = f"{folder.rstrip('/')}/" if folder else ""
        folders: set[str] = set()
        files: list[FileInfo] = []
        for info in self.list(prefix):
            head, sep, _ = info.path[len(prefix) :].partition("/")
            if sep:
                folders.add(head)
            else:
                files.append(info)
        return FolderListing(tuple(sorted(folders)), tuple(files))

    def list_names(self, folder: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        """Names of the files directly in ``folder`` that start with one of ``prefixes``, in no
        particular order: for a look-up by name in a large folder (markers of one file group)
        where only a few names match. An absent folder has none."""
        return tuple(name for name in self.list_dir(folder).files if name.startswith(prefixes))

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Delete the file; deleting a missing file is not an error (deletes are retried)."""

    def abandoned_temporaries(self, older_than_s: float) -> tuple[str, ...]:
        """Temporary files a killed write left behind, untouched for ``older_than_s`` seconds, to
        delete with :meth:`delete` (listings never show them). An object store writes each object
        whole, so it leaves none."""
        return ()

    def remove_empty_folders(self, folder: str) -> None:  # noqa: B027 - object stores have no folders
        """Remove ``folder`` and the folders under it once no file is left in them (a file
        system keeps empty directories; an object store has none, so this does nothing)."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether the file exists."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Size in bytes. Raises :class:`ObjectNotFoundError`."""

    @abc.abstractmethod
    def open_input(self, path: str) -> ByteSource:
        """Random read access to the file. Raises :class:`ObjectNotFoundError`."""

    def parent(self) -> Storage | None:
        """The storage rooted at the folder that holds this one's root, or None at the top (``/``,
        a bucket) or where a storage cannot see above its root: for looking for a table that
        encloses this location."""
        return None

    def full_uri(self, path: str) -> str:
        """The location of ``path`` as a user would type it, for messages."""
        return f"{self.uri.rstrip('/')}/{path}" if path else self.uri

    def hadoop_path(self, path: str) -> str:
        """The location of ``path`` as Hudi's Java writer names a file in its clean and rollback
        plans and rollback metadata: a Hadoop ``Path`` string under the table's base path. Apache
        deletes that location as written, so a path in the table would resolve against its
        working directory and miss the file."""
        return self.full_uri(path)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def parse_location(location: str) -> tuple[str, str, str]:
    """(scheme, bucket or host, path) of ``location``; a plain path has scheme and host "". A ``?``
    or ``#`` is part of the path, as in Hadoop's Path: S3 keys and file names may hold them, and
    a URL parser would cut the location there and name another table."""
    scheme, sep, rest = location.partition(":")
    if not sep or not _SCHEME.fullmatch(scheme):
        return "", "", location
    if not rest.startswith("//"):
        return scheme.lower(), "", rest  # file:/x/t, or s3:/x (which has no bucket)
    host, slash, path = rest[2:].partition("/")
    return scheme.lower(), host, slash + path


def require_storage(storage: object) -> None:
    """A library call given a location (a str or a path) where it takes a Storage failed deep
    inside on a missing attribute: it is told what to pass. Checked where every table operation
    starts (its properties, its timeline), not in each entry point."""
    if not isinstance(storage, Storage):
        raise TypeError(
            f"expected a tidemark.storage.Storage, got {type(storage).__name__} {storage!r}: open a location "
            f"with tidemark.storage.open_storage(location)"
        )


def canonical_location(location: str | os.PathLike[str]) -> str:
    """One spelling of the table at ``location``, whichever the user typed: an absolute path for
    ``t/``, ``/x/t/`` and ``file:///x/t``, ``s3://bucket/prefix`` for ``s3a://bucket/prefix/``.
    Services key what they hold per table by it. For a location ``open_storage`` accepts."""
    location = os.fspath(location)
    scheme, host, path = parse_location(location)
    if scheme in ("", "file"):
        return os.path.abspath(path)
    if scheme not in ("s3", "s3a"):
        return location  # not a location open_storage takes: its own error comes when it is opened
    prefix = s3_key_prefix(path)  # as the S3 storage roots it
    if prefix is None:
        return location  # a ".." above the bucket: open_storage refuses it
    return f"s3://{host}/{prefix}" if prefix else f"s3://{host}"


def s3_key_prefix(path: str) -> str | None:
    """The key prefix of an S3 location's path as Hadoop's Path reads it (Spark and Hudi open
    ``s3a://`` tables through it), so that every spelling names one table. None when a ``..``
    climbs above the bucket."""
    segments = resolved_segments(path)
    return None if segments is None else "/".join(segments)


def resolved_segments(path: str) -> list[str] | None:
    """The folders of the relative ``path`` as Hadoop's Path resolves them: empty segments
    (``//``) dropped, ``.`` and ``..`` resolved as ``java.net.URI.normalize`` does. None when a
    ``..`` climbs above where ``path`` starts."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if not segments:
                return None
            segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    return segments


_READ_POOL: ThreadPoolExecutor | None = None
_READ_POOL_MUTEX = threading.Lock()


def storage_read_pool() -> ThreadPoolExecutor:
    """Threads that overlap small storage reads (listings, instant files): on S3 each is a round
    trip. One per process, made on first use; a task run in it must not wait on it."""
    global _READ_POOL
    with _READ_POOL_MUTEX:
        if _READ_POOL is None:
            _READ_POOL = ThreadPoolExecutor(8, thread_name_prefix="storage-read")
        return _READ_POOL
