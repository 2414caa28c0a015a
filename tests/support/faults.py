"""Storage that fails on purpose: a real :class:`Storage` delegating to another one (usually a
:class:`LocalStorage`) that raises :class:`StorageError` on the N-th mutating call.

A *crash* (``sticky=True``, the default) is a process that died at that call: the call has no
effect (or, for an append with ``torn=True``, half its bytes land, as a killed process leaves a
file it was appending to), and every later call of any kind fails too, so nothing the process
would have done afterwards (error handlers included) reaches storage. A *transient* error
(``sticky=False``) fails that one call and lets the library's own error handling run.

"Restarting" is :meth:`FaultyStorage.disarm`: the next caller is a new process on the same files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tidemark.errors import StorageError
from tidemark.storage.base import ByteSource, DirListing, FileInfo, FolderListing, Storage

#: the calls that change storage
MUTATING = ("write", "create_if_absent", "append", "delete", "write_if_match")


class InjectedFaultError(StorageError):
    """The failure a :class:`FaultyStorage` raises (a :class:`StorageError`, as a real storage's
    I/O error is)."""


@dataclass(frozen=True)
class FaultRecord:
    """Where the fault hit: the call, its path, and how many mutating calls came before it."""

    call: str
    path: str
    index: int


class FaultyStorage(Storage):
    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.supports_append = inner.supports_append
        #: mutating calls seen since the last :meth:`arm`
        self.mutations = 0
        self._fail_at: int | None = None
        self._fail_suffix: str | None = None
        self._sticky = True
        self._torn = False
        #: set once the armed fault has fired
        self.fired: FaultRecord | None = None

    # --- control ---------------------------------------------------------------------------------

    def arm(self, fail_at: int, sticky: bool = True, torn: bool = False) -> None:
        """Fail the ``fail_at``-th mutating call from now (1 = the next one)."""
        if fail_at < 1:
            raise ValueError(f"fail_at counts from 1, got {fail_at}")
        self.mutations = 0
        self._fail_at = fail_at
        self._sticky = sticky
        self._torn = torn
        self.fired = None

    def arm_at(self, suffix: str) -> None:
        """Fail the first mutating call from now whose path ends with ``suffix`` (and, sticky, every
        call after it: an S3 endpoint gone from that request on)."""
        self.arm(1)
        self._fail_at, self._fail_suffix = None, suffix

    def disarm(self) -> None:
        """No more faults: the process that crashed is gone and a new one carries on."""
        self._fail_at = None
        self._fail_suffix = None
        self.fired = None

    @property
    def dead(self) -> bool:
        return self.fired is not None and self._sticky and self._fail_at is not None

    # --- plumbing --------------------------------------------------------------------------------

    def _check_alive(self, call: str, path: str) -> None:
        if self.dead:
            raise InjectedFaultError(f"injected crash: {call} {path} after the process died at {self.fired}")

    def _mutating(self, call: str, path: str, data: bytes | None = None) -> None:
        """Count a mutating call and raise if it is the one to fail (after a torn append's half)."""
        self._check_alive(call, path)
        self.mutations += 1
        if self._fail_suffix is not None and self._fail_at is None and path.endswith(self._fail_suffix):
            self._fail_at = self.mutations
        if self._fail_at is None or self.fired is not None or self.mutations != self._fail_at:
            return
        self.fired = FaultRecord(call, path, self.mutations)
        if self._torn and call == "append" and data:
            self.inner.append(path, data[: len(data) // 2])
        raise InjectedFaultError(f"injected fault: {call} {self.inner.full_uri(path)} (mutating call {self.mutations})")

    # --- Storage ---------------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        self._check_alive("read", path)
        return self.inner.read(path)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        self._check_alive("read_range", path)
        return self.inner.read_range(path, offset, length)

    def write(self, path: str, data: bytes) -> None:
        self._mutating("write", path, data)
        self.inner.write(path, data)

    def create_if_absent(self, path: str, data: bytes) -> None:
        self._mutating("create_if_absent", path, data)
        self.inner.create_if_absent(path, data)

    def append(self, path: str, data: bytes) -> None:
        self._mutating("append", path, data)
        self.inner.append(path, data)

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        self._check_alive("read_versioned", path)
        return self.inner.read_versioned(path)

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        self._mutating("write_if_match", path, data)
        return self.inner.write_if_match(path, data, expected_version)

    def modified_ms(self, path: str) -> int:
        self._check_alive("modified_ms", path)
        return self.inner.modified_ms(path)

    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        self._check_alive("list", prefix)
        return self.inner.list(prefix, recursive)

    def list_names(self, folder: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        self._check_alive("list_names", folder)
        return self.inner.list_names(folder, prefixes)

    def list_dir(self, folder: str) -> DirListing:
        self._check_alive("list_dir", folder)
        return self.inner.list_dir(folder)

    def list_folder(self, folder: str) -> FolderListing:
        self._check_alive("list_folder", folder)
        return self.inner.list_folder(folder)

    def delete(self, path: str) -> None:
        self._mutating("delete", path)
        self.inner.delete(path)

    def exists(self, path: str) -> bool:
        self._check_alive("exists", path)
        return self.inner.exists(path)

    def size(self, path: str) -> int:
        self._check_alive("size", path)
        return self.inner.size(path)

    def open_input(self, path: str) -> ByteSource:
        self._check_alive("open_input", path)
        return self.inner.open_input(path)

    def full_uri(self, path: str) -> str:
        return self.inner.full_uri(path)

    def hadoop_path(self, path: str) -> str:
        return self.inner.hadoop_path(path)
