"""A Hudi table as a whole: properties, the file-system view, snapshot reads."""

from tidemark.table.file_system_view import BaseFile, FileGroup, FileSlice, FileSystemView, LogFile
from tidemark.table.properties import TableProperties, read_properties
from tidemark.table.snapshot import SnapshotReader, read_snapshot

__all__ = [
    "BaseFile",
    "FileGroup",
    "FileSlice",
    "FileSystemView",
    "LogFile",
    "SnapshotReader",
    "TableProperties",
    "read_properties",
    "read_snapshot",
]
