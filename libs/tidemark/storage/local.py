"""Local file system storage. Create-if-absent writes a temporary file and hard-links it into
place (``link`` fails when the name exists), so it is atomic on POSIX and a reader never sees the
new file empty or half written. Every write syncs the file and then its folder (after the link or
rename), so a file whose write returned survives a power cut.

Conditional writes (:meth:`LocalStorage.write_if_match`) compare and swap under ``flock`` on a side
file next to the target, so they are atomic between the processes of one machine (and across
machines only on a file system whose ``flock`` is). A version is the inode number, modification
time (ns) and size of the file a write renamed into place; each swap stamps its file later than the
one it replaces, so a version never comes back, even when the bytes and the inode number do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from tidemark.errors import ObjectAlreadyExistsError, ObjectNotFoundError, StorageError, VersionMismatchError
from tidemark.storage.base import ByteSource, DirListing, FileInfo, FolderListing, Storage

#: In the names of temporary files a write is still filling; listings skip them.
_TMP_MARK = ".tidemark-tmp-"
#: The side file whose ``flock`` serializes the conditional writes of one path; the mark keeps it
#: out of listings.
_CAS_GUARD = f"{_TMP_MARK}cas"
#: ``fsync`` errors of a file system that cannot sync a directory (nothing to do there).
_NO_DIR_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF})
#: ``link`` errors meaning the file system has no hard links (some FUSE and SMB mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def _path_of(info: FileInfo) -> str:
    return info.path


def _version(st: os.stat_result) -> str:
    return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


def _sync_dir(directory: Path) -> None:
    """Make a rename or link in ``directory`` durable: without it a power cut can undo a file
    whose write returned (a completed instant brought back inflight and rolled back, a lock file
    handing out a fencing number again)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _NO_DIR_SYNC:
            raise
    finally:
        os.close(fd)


def _linked_twice(tmp: Path) -> bool:
    """Whether the temporary file ``tmp`` has a second name: the link made of it landed."""
    try:
        return os.stat(tmp).st_nlink == 2
    except OSError:
        return False


def _loops(link: os.DirEntry[str]) -> bool:
    """Whether a symbolic link to a folder points at the folder holding it or one above it."""
    target = os.path.realpath(link.path)
    here = os.path.realpath(os.path.dirname(link.path))
    return here == target or here.startswith(target.rstrip("/") + "/")


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

    def hadoop_path(self, path: str) -> str:
        # Hadoop's local file system qualifies a path as ``file:/x/t/p/f`` (no authority, so no
        # ``//``), and keeps spaces and other characters as they are
        root = self.root.as_posix().rstrip("/")
        return f"file:{root}/{path}" if path else f"file:{root or '/'}"

    def parent(self) -> LocalStorage | None:
        # as canonical_location spells the root: "x/.." is the folder holding x
        root = Path(os.path.normpath(self.root))
        return None if root.parent == root else LocalStorage(root.parent)

    def _abs(self, path: str) -> Path:
        return self.root / path if path else self.root

    def read(self, path: str) -> bytes:
        try:
            # a plain string path: planners read thousands of small instant files
            with open(f"{self.uri}/{path}" if path else self.uri, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError) as e:  # a path through a file: no such file, as on S3
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot read {self.full_uri(path)}: {e}") from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with self.open_input(path) as source:
            return source.read_at(offset, length)

    @staticmethod
    def _write_tmp(target: Path, data: bytes, stamp_after_ns: int | None = None) -> tuple[Path, os.stat_result]:
        """A new, fsynced temporary file next to ``target`` holding ``data``, and its stat.

        The name is unique per call, so concurrent writers (threads too) never share one. With
        ``stamp_after_ns`` the file's modification time is set to now, at nanosecond precision,
        and later than ``stamp_after_ns``: file systems keep coarse (clock tick) times otherwise,
        and two writes within one tick could get one version.
        """
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex}")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                if stamp_after_ns is not None:
                    stamp = max(time.time_ns(), stamp_after_ns + 1)
                    os.utime(f.fileno(), ns=(stamp, stamp))
                os.fsync(f.fileno())
                written = os.fstat(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp, written

    def write(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            # write then rename, so a reader never sees half a file
            tmp, _ = self._write_tmp(target, data)
            try:
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            _sync_dir(target.parent)
        except OSError as e:
            raise StorageError(f"cannot write {self.full_uri(path)}: {e}") from e

    def create_if_absent(self, path: str, data: bytes) -> None:
        self._create(path, data)

    def _create(self, path: str, data: bytes, stamp: bool = False) -> str:
        """Create-if-absent; the version of the file created (its stat, taken before the link
        makes it visible, so no later writer's file can be mistaken for it)."""
        target = self._abs(path)
        try:
            tmp, written = self._write_tmp(target, data, 0 if stamp else None)
        except OSError as e:
            raise StorageError(f"cannot create {self.full_uri(path)}: {e}") from e
        try:
            # link, unlike rename, fails when the name is taken; the file appears complete
            os.link(tmp, target)
        except FileExistsError as e:
            # on NFS a link whose answer was lost is sent again, and the retry finds our own link
            # there: the temporary file's second link says it landed (as open(2) advises)
            if not _linked_twice(tmp):
                raise ObjectAlreadyExistsError(f"already exists: {self.full_uri(path)}") from e
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise StorageError(f"cannot create {self.full_uri(path)}: {e}") from e
            return self._create_exclusive(target, path, data)  # a file system without hard links
        finally:
            tmp.unlink(missing_ok=True)
        self._sync_created(target.parent, path)
        return _version(written)  # the link shares the temporary file's inode and times

    def _sync_created(self, folder: Path, path: str) -> None:
        try:
            _sync_dir(folder)
        except OSError as e:
            raise StorageError(f"cannot create {self.full_uri(path)}: syncing its folder failed: {e}") from e

    def _create_exclusive(self, target: Path, path: str, data: bytes) -> str:
        """Create-if-absent with ``O_EXCL`` alone: still one winner, but readers may briefly see
        the file empty. The version of the file created."""
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
                version = _version(os.fstat(f.fileno()))
        except OSError as e:
            raise StorageError(f"cannot write {self.full_uri(path)}: {e}") from e
        self._sync_created(target.parent, path)
        return version

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        try:
            with open(self._abs(path), "rb") as f:
                # the version of the file opened, whatever is renamed over its name meanwhile
                version = _version(os.fstat(f.fileno()))
                return f.read(), version
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot read {self.full_uri(path)}: {e}") from e

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        target = self._abs(path)
        where = self.full_uri(path)
        if expected_version is None:
            return self._create(path, data, stamp=True)
        try:
            # every conditional writer of this path compares and swaps holding this flock
            guard = os.open(target.with_name(f".{target.name}{_CAS_GUARD}"), os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError as e:  # no folder, so no file
            raise VersionMismatchError(
                f"cannot replace {where}: it does not exist (expected at {expected_version})"
            ) from e
        except OSError as e:
            raise StorageError(f"cannot replace {where}: cannot open its lock file: {e}") from e
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                current = os.stat(target)
            except FileNotFoundError as e:
                raise VersionMismatchError(
                    f"cannot replace {where}: it does not exist (expected at {expected_version})"
                ) from e
            if _version(current) != expected_version:
                raise VersionMismatchError(
                    f"cannot replace {where}: it changed (now at {_version(current)}, expected {expected_version})"
                )
            tmp, written = self._write_tmp(target, data, stamp_after_ns=current.st_mtime_ns)
            try:
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            _sync_dir(target.parent)
            return _version(written)
        except OSError as e:
            raise StorageError(f"cannot replace {where}: {e}") from e
        finally:
            os.close(guard)  # which releases the flock

    def modified_ms(self, path: str) -> int:
        try:
            return self._abs(path).stat().st_mtime_ns // 1_000_000
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot stat {self.full_uri(path)}: {e}") from e

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

    def _children(self, folder: str) -> tuple[Sequence[str], Sequence[os.DirEntry[str]]]:
        """The folder's sub-folders (names) and files (entries), unsorted; an absent folder has none."""
        folders: list[str] = []
        files: list[os.DirEntry[str]] = []
        try:
            with os.scandir(self._abs(folder.rstrip("/"))) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) or (entry.is_dir() and not _loops(entry)):
                        # a linked folder (a partition moved to another disk) is the table's too,
                        # as Apache's readers take it; one leading back up would never end
                        folders.append(entry.name)
                    elif _TMP_MARK not in entry.name and not entry.is_dir():
                        files.append(entry)
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        except OSError as e:
            raise StorageError(f"cannot list {self.full_uri(folder)}: {e}") from e
        return folders, files

    def list_dir(self, folder: str) -> DirListing:
        folders, files = self._children(folder)  # no stat: a timeline folder holds 150k names
        return DirListing(tuple(sorted(folders)), tuple(sorted(f.name for f in files)))

    def list_folder(self, folder: str) -> FolderListing:
        folders, entries = self._children(folder)
        rel_dir = f"{folder.rstrip('/')}/" if folder else ""
        files: list[FileInfo] = []
        for entry in entries:
            try:
                files.append(FileInfo(rel_dir + entry.name, entry.stat().st_size))
            except FileNotFoundError:
                continue  # deleted while listing
        return FolderListing(tuple(sorted(folders)), tuple(sorted(files)))

    def list_names(self, folder: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        # no stat and no sort: a marker folder can hold tens of thousands of names
        try:
            names = os.listdir(self._abs(folder.rstrip("/")))
        except (FileNotFoundError, NotADirectoryError):
            return ()
        except OSError as e:
            raise StorageError(f"cannot list {self.full_uri(folder)}: {e}") from e
        return tuple(n for n in names if n.startswith(prefixes) and _TMP_MARK not in n)

    def delete(self, path: str) -> None:
        try:
            self._abs(path).unlink(missing_ok=True)
        except OSError as e:
            raise StorageError(f"cannot delete {self.full_uri(path)}: {e}") from e

    def abandoned_temporaries(self, older_than_s: float) -> tuple[str, ...]:
        # a write fills its temporary file from bytes it already holds, in seconds; the CAS guards
        # are kept (they are the locks, and empty)
        cutoff = time.time() - older_than_s
        found: list[str] = []
        root = self._abs("")
        for directory, _, names in os.walk(root):
            for name in names:
                if _TMP_MARK not in name or name.endswith(_CAS_GUARD):
                    continue
                path = os.path.join(directory, name)
                try:
                    if os.stat(path).st_mtime < cutoff:
                        found.append(os.path.relpath(path, root))
                except FileNotFoundError:
                    continue  # its write finished meanwhile
        return tuple(sorted(found))

    def remove_empty_folders(self, folder: str) -> None:
        top = self._abs(folder.strip("/"))
        if not top.is_dir() or top == self._abs(""):
            return
        # deepest first; a folder that still holds anything stays (rmdir refuses it). os.walk
        # passes over folders another process removes meanwhile (two commands disabling the
        # metadata table, two rollbacks of one write), where Path.rglob raised FileNotFoundError
        for directory, _, _ in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def exists(self, path: str) -> bool:
        return self._abs(path).is_file()

    def size(self, path: str) -> int:
        try:
            return self._abs(path).stat().st_size
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e

    def open_input(self, path: str) -> ByteSource:
        if self._abs(path).is_dir():
            raise StorageError(f"is a folder, not a file: {self.full_uri(path)}")
        try:
            fd = os.open(self._abs(path), os.O_RDONLY)
        except FileNotFoundError as e:
            raise ObjectNotFoundError(f"no such file: {self.full_uri(path)}") from e
        except OSError as e:
            raise StorageError(f"cannot open {self.full_uri(path)}: {e}") from e
        return LocalByteSource(self.full_uri(path), fd)
