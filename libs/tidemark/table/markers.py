"""Markers: before a writer creates or appends to a data file it records the intent. A failed write
is rolled back from its markers; at commit, files that have a marker but no accepted write status
(a failed or duplicate task attempt) are removed.

Two layouts, as in Hudi, both under ``.hoodie/.temp/<instant>/``:

- **direct**: one empty file per marker, ``<partition>/<file name>.marker.<IOType>``;
- **timeline-server-based**: the writer-coordinator gathers markers and writes them in batches
  into ``MARKERS<N>`` files, one marker name (``<partition>/<file name>.marker.<IOType>``) a
  line, each file rewritten whole as it grows; ``MARKERS.type`` holds ``TIMELINE_SERVER_BASED``.

A write's markers are those of both layouts together: a writer that could not reach the
coordinator falls back to direct markers in the same folder."""

from __future__ import annotations

import contextlib
import enum
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidemark.errors import MarkerError, ObjectAlreadyExistsError, ObjectNotFoundError, TidemarkError
from tidemark.storage.base import Storage

_log = logging.getLogger(__name__)

TEMP_FOLDER = ".hoodie/.temp"
_MARKER = ".marker."
#: the file saying which layout a marker folder's ``MARKERS<N>`` files are (Hudi's MarkerType)
MARKER_TYPE_FILE = "MARKERS.type"
TIMELINE_SERVER_BASED = "TIMELINE_SERVER_BASED"
#: Hudi parses the ``N`` of ``MARKERS<N>`` as a Java int
_MARKER_FILE = re.compile(r"MARKERS(\d{1,10})")
MAX_MARKER_FILE_INDEX = 2**31 - 1
_UNWRITABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


class IOType(enum.Enum):
    CREATE = "CREATE"  # a new base file
    MERGE = "MERGE"  # a rewritten base file
    APPEND = "APPEND"  # a log file appended to


@dataclass(frozen=True, order=True)
class Marker:
    instant: str
    data_path: str  # relative to the table root
    io_type: IOType

    @property
    def name(self) -> str:
        """The marker's name within its write's folder, as a line of a ``MARKERS<N>`` file."""
        return f"{self.data_path}{_MARKER}{self.io_type.value}"

    @property
    def path(self) -> str:
        """Where the marker is as a direct marker file."""
        return f"{TEMP_FOLDER}/{self.instant}/{self.name}"

    @classmethod
    def parse(cls, instant: str, name: str) -> Marker:
        """The marker named ``name`` (``<partition>/<file name>.marker.<IOType>``) of ``instant``;
        :class:`MarkerError` for anything else (an absolute path, ``..``, an unknown IOType)."""
        data_path, sep, io = name.rpartition(_MARKER)
        parts = data_path.split("/")
        if not sep or io not in IOType.__members__:
            raise MarkerError(f"{name!r} is not a marker name (<partition>/<file>.marker.CREATE|MERGE|APPEND)")
        if not data_path or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in name:
            raise MarkerError(f"marker {name!r} names no data file inside the table")
        # a MARKERS<N> file is UTF-8 text, one name a line (Java's readLine also ends one at \r)
        if _UNWRITABLE.search(name):
            raise MarkerError(f"marker {name!r} holds a control character or a lone surrogate: no file is named so")
        return cls(instant, data_path, IOType(io))


def markers_folder(instant: str) -> str:
    return f"{TEMP_FOLDER}/{instant}/"


def create_marker(storage: Storage, instant: str, data_path: str, io_type: IOType) -> Marker:
    marker = Marker(instant, data_path, io_type)
    # the same attempt re-marking a file it already marked: the intent is recorded either way
    with contextlib.suppress(ObjectAlreadyExistsError):
        storage.create_if_absent(marker.path, b"")
    return marker


class MarkerWriter(Protocol):
    """Records a data file's marker before its first byte (``data_path`` relative to the table);
    raises :class:`~tidemark.errors.WriteConflictError` when the write must stop, a conflict
    found early. Implementations: ``tidemark.table.coordinator_client``."""

    def create(self, data_path: str, io_type: IOType) -> None: ...

    def prepare(self, files: Sequence[tuple[str, IOType]]) -> None:
        """Declare files about to be written, in one go where that is cheaper (the coordinator
        takes them in one request); :meth:`create` of one of them is then already done. May do
        nothing: :meth:`create` is always called before a file's first byte."""


def marker_file_name(index: int) -> str:
    if not 0 <= index <= MAX_MARKER_FILE_INDEX:
        raise ValueError(f"a MARKERS file index must be 0..{MAX_MARKER_FILE_INDEX}, not {index}")
    return f"MARKERS{index}"


def marker_file_index(name: str) -> int | None:
    """N of a ``MARKERS<N>`` file name; None for any other name (``MARKERS.type`` included)."""
    found = _MARKER_FILE.fullmatch(name)
    return int(found.group(1)) if found and int(found.group(1)) <= MAX_MARKER_FILE_INDEX else None


def format_marker_file(names: Iterable[str]) -> bytes:
    """A ``MARKERS<N>`` file's content: one marker name a line."""
    return "".join(f"{n}\n" for n in names).encode()


def parse_marker_file(content: bytes, where: str) -> list[str]:
    """The marker names of a ``MARKERS<N>`` file (blank lines skipped, as Hudi does)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MarkerError(f"{where} is not a MARKERS file (not UTF-8 at byte {e.start})") from None
    return [line for line in text.split("\n") if line.strip()]


def write_marker_type(storage: Storage, instant: str) -> None:
    """``MARKERS.type`` of ``instant``'s folder, saying TIMELINE_SERVER_BASED (Hudi reads the
    ``MARKERS<N>`` files by it); written once, by whoever is first."""
    with contextlib.suppress(ObjectAlreadyExistsError):
        storage.create_if_absent(f"{markers_folder(instant)}{MARKER_TYPE_FILE}", TIMELINE_SERVER_BASED.encode())


def read_marker_files(storage: Storage, instant: str) -> dict[int, list[Marker]]:
    """The markers in ``instant``'s ``MARKERS<N>`` files, by N (a file that vanished while read,
    its write being rolled back, counts as empty)."""
    folder = markers_folder(instant).rstrip("/")
    found: dict[int, list[Marker]] = {}
    for name in storage.list_names(folder, ("MARKERS",)):
        index = marker_file_index(name)
        if index is None:
            continue
        path = f"{folder}/{name}"
        try:
            content = storage.read(path)
        except ObjectNotFoundError:
            continue
        markers = []
        for line in parse_marker_file(content, storage.full_uri(path)):
            try:
                markers.append(Marker.parse(instant, line))
            except MarkerError as e:
                raise MarkerError(f"{storage.full_uri(path)}: {e}") from None
        found[index] = markers
    return found


def list_direct_markers(storage: Storage, instant: str) -> set[Marker]:
    """``instant``'s direct marker files."""
    folder = markers_folder(instant)
    markers = set()
    for info in storage.list(folder):
        rest = info.path[len(folder) :]
        data_path, sep, io = rest.rpartition(_MARKER)
        if sep and io in IOType.__members__:
            markers.add(Marker(instant, data_path, IOType(io)))
    return markers


def list_markers(storage: Storage, instant: str) -> list[Marker]:
    """Every marker of ``instant``: its direct marker files and the lines of its ``MARKERS<N>``
    files, each marker once."""
    markers = list_direct_markers(storage, instant)
    for batch in read_marker_files(storage, instant).values():
        markers.update(batch)
    return sorted(markers)


def delete_markers(storage: Storage, instant: str) -> None:
    folder = markers_folder(instant)
    for info in list(storage.list(folder)):
        storage.delete(info.path)
    storage.remove_empty_folders(folder)  # as Hudi deletes the instant's marker folder


def delete_markers_of_committed(storage: Storage, instant: str, kind: str = "write") -> None:
    """A committed write's (or compaction's: ``kind``) markers removed; a failure is no failure of
    the commit (its caller would roll the completed instant back), only markers left behind, which
    no reader looks at and the next write, compaction or archival removes."""
    try:
        delete_markers(storage, instant)
    except TidemarkError as e:
        _log.warning("%s %s is committed, but its markers were not removed: %s", kind, instant, e)
