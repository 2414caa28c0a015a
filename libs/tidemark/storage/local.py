"""Local file system storage. Create-if-absent writes a temporary file and hard-links it into
place (``link`` fails when the name exists), so it is atomic on POSIX and a reader never sees the
new file empty or half written."""

from __future__ import annotations

import errno
import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from tidemark.errors import ObjectAlreadyExistsError, ObjectNotFoundError, StorageError, VersionMismatchError
from tidemark.storage.base import ByteSource, DirListing, FileInfo, Storage

#: In the names of temporary files a write is still filling; listings skip them.
_TMP_MARK = ".tidemark-tmp-"
#: ``link`` errors meaning the file system has no hard links (some FUSE and SMB mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def _path_of(info: FileInfo) -> str:
    return info.path


class LocalByteSource(ByteSource):
    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd
        self.size = os.fstat(fd).st_size

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"negative offset or length: {offset}, {length}")
        try:
            return os.pread(self._fd, length, offset)
        except OSError as e:
            raise StorageError(f"cannot read {self.path} at offset {offset}: {e}") from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        # blocks read lazily keep their source; the descriptor goes when the last of them does
        self.close()


class LocalStorage(Storage):
    supports_append = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.uri = str(self.root)

    def _abs(self, path: str) -> Path:
        return self.root / path if path else self.root

    def read(self, path: str) -> bytes:
        try:
            # a plain string path: planners read thousands of small instant files
            with open(f"{self.uri}/{path}" if path else self.uri, "rb") as f:
                return f.read()
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot read {self.full_uri(path)}: {e}") from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with self.open_input(path) as source:
            return source.read_at(offset, length)

    @staticmethod
    def _write_tmp(target: Path, data: bytes) -> Path:
        """A new, fsynced temporary file next to ``target`` holding ``data``.

        The name is unique per call, so concurrent writers (threads too) never share one.
        """
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex}")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def write(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            # write then rename, so a reader never sees half a file
            tmp = self._write_tmp(target, data)
            try:
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as e:
            raise StorageError(f"cannot write {self.full_uri(path)}: {e}") from e

    def create_if_absent(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            tmp = self._write_tmp(target, data)
        except OSError as e:
            raise StorageError(f"cannot create {self.full_uri(path)}: {e}") from e
        try:
            # link, unlike rename, fails when the name is taken; the file appears complete
            os.link(tmp, target)
        except FileExistsError as e:
            raise ObjectAlreadyExistsError(f"already exists: {self.full_uri(path)}") from e
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise StorageError(f"cannot create {self.full_uri(path)}: {e}") from e
            self._create_exclusive(target, path, data)  # a file system without hard links
        finally:
            tmp.unlink(missing_ok=True)

    def _create_exclusive(self, target: Path, path: str, data: bytes) -> None:
        """Create-if-absent with ``O_EXCL`` alone: still one winner, but readers may briefly see
        the file empty."""
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError as e:
            raise ObjectAlreadyExistsError(f"already exists: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot create {self.full_uri(path)}: {e}") from e
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise StorageError(f"cannot write {self.full_uri(path)}: {e}") from e

    @staticmethod
    def _version(st: os.stat_result) -> str:
        # a write replaces the file by a rename, so a new inode; with the time and size this
        # changes on every write, even one of identical bytes
        return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        try:
            with open(self._abs(path), "rb") as f:
                # the version of the very file read, whatever replaces it meanwhile
                version = self._version(os.fstat(f.fileno()))
                return f.read(), version
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot read {self.full_uri(path)}: {e}") from e

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        target = self._abs(path)
        if expected_version is None:
            self.create_if_absent(path, data)
            try:
                return self._version(target.stat())
            except FileNotFoundError as e:
                raise VersionMismatchError(f"{self.full_uri(path)} was removed right after it was created") from e
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # the compare and the swap happen under an exclusive lock of a side file every
            # conditional writer of this path takes, across processes
            guard = os.open(target.with_name(f".{target.name}{_TMP_MARK}cas"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot write {self.full_uri(path)}: {e}") from e
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                current = self._version(target.stat())
            except FileNotFoundError as e:
                raise VersionMismatchError(
                    f"{self.full_uri(path)} is gone: it was expected at {expected_version}"
                ) from e
            if current != expected_version:
                raise VersionMismatchError(
                    f"{self.full_uri(path)} changed: version {current}, expected {expected_version}"
                )
            tmp = self._write_tmp(target, data)
            try:
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            return self._version(target.stat())
        except OSError as e:
            raise StorageError(f"cannot write {self.full_uri(path)}: {e}") from e
        finally:
            os.close(guard)  # closing releases the flock

    def modified_ms(self, path: str) -> int:
        try:
            return self._abs(path).stat().st_mtime_ns // 1_000_000
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e

    def append(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise StorageError(f"cannot append to {self.full_uri(path)}: {e}") from e

    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        # walk only the deepest directory the prefix names, then filter by the full prefix; plain
        # strings and scandir, since a timeline of 50k instants means 150k names per listing
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        found: list[FileInfo] = []
        pending = [(str(self._abs(base)), f"{base}/" if base else "")]
        while pending:
            directory, rel_dir = pending.pop()
            try:
                entries = os.scandir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise StorageError(f"cannot list {self.full_uri(rel_dir)}: {e}") from e
            with entries:
                for entry in entries:
                    rel = rel_dir + entry.name
                    if entry.is_dir(follow_symlinks=False):
                        # descend only where the prefix can still match
                        if prefix.startswith(f"{rel}/") or (recursive and rel.startswith(prefix)):
                            pending.append((entry.path, f"{rel}/"))
                    elif entry.is_dir():
                        continue  # a symlink to a folder: not followed, as os.walk does not
                    elif rel.startswith(prefix) and _TMP_MARK not in entry.name:
                        try:
                            found.append(FileInfo(rel, entry.stat().st_size))
                        except FileNotFoundError:
                            continue  # deleted while listing
        found.sort(key=_path_of)
        return iter(found)

    def list_dir(self, folder: str) -> DirListing:
        folders: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(self._abs(folder.rstrip("/"))) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.name)
                    elif _TMP_MARK not in entry.name and not entry.is_dir():
                        files.append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return DirListing((), ())
        except OSError as e:
            raise StorageError(f"cannot list {self.full_uri(folder)}: {e}") from e
        return DirListing(tuple(sorted(folders)), tuple(sorted(files)))

    def delete(self, path: str) -> None:
        try:
            self._abs(path).unlink(missing_ok=True)
        except OSError as e:
            raise StorageError(f"cannot delete {self.full_uri(path)}: {e}") from e

    def exists(self, path: str) -> bool:
        return self._abs(path).is_file()

    def size(self, path: str) -> int:
        try:
            return self._abs(path).stat().st_size
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e

    def open_input(self, path: str) -> ByteSource:
        if self._abs(path).is_dir():
            raise StorageError(f"is a directory, not a file: {self.full_uri(path)}")
        try:
            fd = os.open(self._abs(path), os.O_RDONLY)
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot open {self.full_uri(path)}: {e}") from e
        return LocalByteSource(self.full_uri(path), fd)
