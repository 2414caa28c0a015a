"""Writing log blocks: block builders and a writer that appends to a file slice's log files.

The writer follows Hudi's ``HoodieLogFormatWriter``: it continues the latest log file of the file
slice when that file carries its own write token, the storage can append and the file is below
the roll-over threshold; otherwise it starts the next log version. On object stores (no append)
every append therefore writes a new log version, as Hudi does there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.errors import LogBlockEncodeError, ObjectAlreadyExistsError
from tidemark.logformat.block import BlockSpec, BlockType, CommandBlockType, HeaderKey
from tidemark.logformat.content import (
    DeleteRecord,
    encode_avro_records,
    encode_delete_records,
    encode_parquet,
)
from tidemark.logformat.file_name import LOG_BASE_VERSION, LogFileName
from tidemark.storage.base import Storage

#: Hudi's default ``hoodie.logfile.max.size``: roll over to a new log version past 1 GiB.
DEFAULT_ROLLOVER_BYTES = 1024 * 1024 * 1024


def _headers(instant_time: str, extra: Mapping[int, str] | None, **named: str | None) -> dict[int, str]:
    if not instant_time:
        raise LogBlockEncodeError("a block needs an INSTANT_TIME")
    headers: dict[int, str] = {HeaderKey.INSTANT_TIME: instant_time}
    for name, value in named.items():
        if value is not None:
            headers[HeaderKey[name]] = value
    for key, value in (extra or {}).items():
        headers[key] = value
    return headers


def avro_data_block(
    records: Iterable[Mapping[str, Any]] | bytes,
    schema_json: str,
    instant_time: str,
    extra_headers: Mapping[int, str] | None = None,
) -> BlockSpec:
    """An AVRO_DATA_BLOCK of ``records`` in the Avro schema ``schema_json`` (or of content
    encoded already, by :func:`~tidemark.logformat.avro_columns.encode_avro_table`)."""
    content = records if isinstance(records, bytes) else encode_avro_records(records, schema_json)
    return BlockSpec(BlockType.AVRO_DATA_BLOCK, _headers(instant_time, extra_headers, SCHEMA=schema_json), content)


def delete_block(
    records: Sequence[DeleteRecord],
    instant_time: str,
    schema_json: str | None = None,
    extra_headers: Mapping[int, str] | None = None,
) -> BlockSpec:
    """A DELETE_BLOCK (content version 3) of record keys to delete."""
    content = encode_delete_records(records)
    return BlockSpec(BlockType.DELETE_BLOCK, _headers(instant_time, extra_headers, SCHEMA=schema_json), content)


def parquet_data_block(
    table: Any,
    schema_json: str,
    instant_time: str,
    extra_headers: Mapping[int, str] | None = None,
    compression: str = "snappy",
    dictionary: bool = True,
) -> BlockSpec:
    """A PARQUET_DATA_BLOCK holding a ``pyarrow.Table`` as one Parquet file."""
    return BlockSpec(
        BlockType.PARQUET_DATA_BLOCK,
        _headers(instant_time, extra_headers, SCHEMA=schema_json),
        encode_parquet(table, compression, dictionary),
    )


def rollback_block(
    instant_time: str, target_instant_time: str, extra_headers: Mapping[int, str] | None = None
) -> BlockSpec:
    """A rollback COMMAND_BLOCK: readers ignore the blocks of ``target_instant_time`` before it."""
    headers = _headers(
        instant_time,
        None,
        COMMAND_BLOCK_TYPE=str(CommandBlockType.ROLLBACK_BLOCK.value),
        TARGET_INSTANT_TIME=target_instant_time,
    )
    headers.update(extra_headers or {})
    return BlockSpec(BlockType.COMMAND_BLOCK, headers)


@dataclass(frozen=True)
class AppendResult:
    """Where an append went: the log file, its path, the offset of each block, its new size."""

    log_file: LogFileName
    path: str
    block_offsets: tuple[int, ...]
    size: int


def _join(partition_path: str, name: str) -> str:
    return f"{partition_path.strip('/')}/{name}" if partition_path.strip("/") else name


def list_log_files(
    storage: Storage, partition_path: str, file_id: str, base_instant: str, extension: str = "log"
) -> list[LogFileName]:
    """The log files of one file slice, in Hudi's order (``extension="archive"`` for the
    archived timeline's ``.commits_.archive.N`` files)."""
    prefix = _join(partition_path, f".{file_id}_{base_instant}.{extension}.")
    found = []
    for info in storage.list(prefix):
        name = info.path.rsplit("/", 1)[-1]
        if LogFileName.is_log_file(name):
            parsed = LogFileName.parse(name)
            if parsed.file_id == file_id and parsed.base_instant == base_instant and parsed.extension == extension:
                found.append(parsed)
    return sorted(found)


class LogWriter:
    """Appends blocks to the log files of one file slice (partition, file id, base instant) on
    behalf of one writer (its write token)."""

    def __init__(
        self,
        storage: Storage,
        partition_path: str,
        file_id: str,
        base_instant: str,
        write_token: str,
        rollover_bytes: int = DEFAULT_ROLLOVER_BYTES,
        new_file: bool = False,
        extension: str = "log",
    ) -> None:
        """``new_file`` starts the next log version even where appending would be possible, so
        that the file holds only this writer's blocks. ``extension`` is ``"log"`` for file slices
        and ``"archive"`` for the archived timeline."""
        if rollover_bytes <= 0:
            raise ValueError(f"rollover_bytes must be positive, got {rollover_bytes}")
        self.storage = storage
        self.partition_path = partition_path
        self.rollover_bytes = rollover_bytes
        self.write_token = write_token
        existing = list_log_files(storage, partition_path, file_id, base_instant, extension)
        self._size = 0
        if not existing:
            self._current = LogFileName(file_id, base_instant, LOG_BASE_VERSION, write_token, extension)
            self._exists = False
        else:
            latest = existing[-1]
            size = storage.size(self._path(latest))
            if not new_file and latest.write_token == write_token and storage.supports_append and size < rollover_bytes:
                self._current, self._exists, self._size = latest, True, size
            else:
                self._current, self._exists = latest.roll_over(write_token), False

    def _path(self, log_file: LogFileName) -> str:
        return _join(self.partition_path, log_file.name)

    @property
    def log_file(self) -> LogFileName:
        """The log file the next append goes to."""
        return self._current

    def append(self, blocks: Sequence[BlockSpec], before_create: Callable[[str], None] | None = None) -> AppendResult:
        """Append ``blocks`` (in order) durably, then roll over if the file passed the threshold.
        ``before_create`` is called with the path of each log file this tries to create, before
        its first byte (a writer's marker): also of the next version, when another writer took
        this one first."""
        if not blocks:
            raise LogBlockEncodeError("nothing to append: no blocks given")
        encoded = [block.encode() for block in blocks]
        data = b"".join(encoded)
        if self._exists:
            self.storage.append(self._path(self._current), data)
            start = self._size
        else:
            while True:
                if before_create is not None:
                    before_create(self._path(self._current))
                try:
                    self.storage.create_if_absent(self._path(self._current), data)
                    break
                except ObjectAlreadyExistsError:
                    # another writer took this version with our token: move on, never overwrite
                    self._current = self._current.roll_over()
            start = 0
        offsets = []
        pos = start
        for chunk in encoded:
            offsets.append(pos)
            pos += len(chunk)
        result = AppendResult(self._current, self._path(self._current), tuple(offsets), pos)
        self._size = pos
        self._exists = True
        if not self.storage.supports_append or self._size >= self.rollover_bytes:
            self._current, self._exists, self._size = self._current.roll_over(self.write_token), False, 0
        return result
