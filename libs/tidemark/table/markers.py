"""Markers: before a writer creates or appends to a data file it records the intent under
``.hoodie/.temp/<instant>/<partition>/<file name>.marker.<IOType>`` (Hudi's direct markers).
A failed write is rolled back from its markers; at commit, files that have a marker but no
accepted write status (a failed or duplicate task attempt) are removed."""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass

from tidemark.errors import ObjectAlreadyExistsError
from tidemark.storage.base import Storage

TEMP_FOLDER = ".hoodie/.temp"
_MARKER = ".marker."


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
    def path(self) -> str:
        return f"{TEMP_FOLDER}/{self.instant}/{self.data_path}{_MARKER}{self.io_type.value}"


def markers_folder(instant: str) -> str:
    return f"{TEMP_FOLDER}/{instant}/"


def create_marker(storage: Storage, instant: str, data_path: str, io_type: IOType) -> Marker:
    marker = Marker(instant, data_path, io_type)
    # the same attempt re-marking a file it already marked: the intent is recorded either way
    with contextlib.suppress(ObjectAlreadyExistsError):
        storage.create_if_absent(marker.path, b"")
    return marker


def list_markers(storage: Storage, instant: str) -> list[Marker]:
    folder = markers_folder(instant)
    markers = []
    for info in storage.list(folder):
        rest = info.path[len(folder) :]
        data_path, sep, io = rest.rpartition(_MARKER)
        if sep and io in IOType.__members__:
            markers.append(Marker(instant, data_path, IOType(io)))
    return sorted(markers)


def delete_markers(storage: Storage, instant: str) -> None:
    for info in list(storage.list(markers_folder(instant))):
        storage.delete(info.path)
