"""Log block vocabulary and the byte layout of one block.

Layout (all integers big-endian)::

    #HUDI#                 magic, 6 bytes
    block size      long   bytes after this field, through the trailing long
    format version  int    1
    block type      int    BlockType ordinal
    header          map    int count, then per entry: int key ordinal, int length, UTF-8 bytes
    content length  long
    content         bytes
    footer          map    as header (Hudi writes an empty map: int 0)
    block length    long   everything written for the block before it, magic included (= size + 6)
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidemark.errors import LogBlockContentError, LogBlockEncodeError
from tidemark.logformat.content import (
    DeleteRecord,
    avro_record_count,
    decode_avro_records,
    decode_delete_records,
    decode_parquet,
    parquet_record_count,
    parquet_rows,
)
from tidemark.storage.base import ByteSource

_T = TypeVar("_T")

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")


class BlockType(enum.IntEnum):
    """Hudi's ``HoodieLogBlockType``, by ordinal."""

    COMMAND_BLOCK = 0
    DELETE_BLOCK = 1
    CORRUPT_BLOCK = 2
    AVRO_DATA_BLOCK = 3
    HFILE_DATA_BLOCK = 4
    PARQUET_DATA_BLOCK = 5
    CDC_DATA_BLOCK = 6


class HeaderKey(enum.IntEnum):
    """Hudi's ``HeaderMetadataType``, by ordinal."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class CommandBlockType(enum.IntEnum):
    """Hudi's ``HoodieCommandBlockTypeEnum``: the value of the COMMAND_BLOCK_TYPE header."""

    ROLLBACK_BLOCK = 0


def header_name(key: int) -> str:
    """Hudi's name for a header key ordinal; unknown ordinals (newer writers) keep their number."""
    try:
        return HeaderKey(key).name
    except ValueError:
        return f"UNKNOWN_HEADER_{key}"


def header_key_from_name(name: str) -> int:
    """Inverse of :func:`header_name`."""
    if name in HeaderKey.__members__:
        return HeaderKey[name].value
    if name.startswith("UNKNOWN_HEADER_") and name[len("UNKNOWN_HEADER_") :].isdigit():
        return int(name[len("UNKNOWN_HEADER_") :])
    raise LogBlockEncodeError(f"unknown header name {name!r}; known: {', '.join(HeaderKey.__members__)}")


def encode_metadata(entries: Mapping[int, str]) -> bytes:
    """A header or footer map, in the mapping's iteration order (Hudi writes HashMap order, so
    readers must not assume one; keeping the given order is what makes round trips byte-exact)."""
    parts = [_INT.pack(len(entries))]
    for key, value in entries.items():
        if not 0 <= key <= 0x7FFFFFFF:
            raise LogBlockEncodeError(f"header key ordinal out of range: {key}")
        data = value.encode("utf-8")
        parts.append(_INT.pack(int(key)))
        parts.append(_INT.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


@dataclass(frozen=True)
class BlockSpec:
    """A block to be written: type, headers (ordinal → value, in write order), content, footers."""

    block_type: BlockType
    headers: Mapping[int, str]
    content: bytes = b""
    footers: Mapping[int, str] = field(default_factory=dict)
    version: int = LOG_FORMAT_VERSION

    def encode(self) -> bytes:
        """The block's bytes, exactly as Hudi's ``HoodieLogFormatWriter`` lays them out."""
        header = encode_metadata(self.headers)
        footer = encode_metadata(self.footers)
        # version + type + header + content length + content + footer + trailing long
        block_size = 4 + 4 + len(header) + 8 + len(self.content) + len(footer) + 8
        return b"".join(
            (
                MAGIC,
                _LONG.pack(block_size),
                _INT.pack(self.version),
                _INT.pack(int(self.block_type)),
                header,
                _LONG.pack(len(self.content)),
                self.content,
                footer,
                _LONG.pack(block_size + len(MAGIC)),
            )
        )


@dataclass(frozen=True)
class CorruptRange:
    """Bytes ``[start, end)`` of a log file that hold no valid block, and why."""

    start: int
    end: int
    reason: str

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, eq=False)
class LogBlock:
    """One block found in a log file, read header-only: the content stays on storage until
    :meth:`content` or one of the decoders asks for it.

    A corrupt range is reported as a block of type ``CORRUPT_BLOCK`` (as Hudi does) whose
    :attr:`corrupt` says which bytes were skipped and why.
    """

    offset: int
    block_type: BlockType
    version: int | None
    headers: Mapping[int, str]
    footers: Mapping[int, str]
    content_offset: int
    content_length: int
    end: int
    source: ByteSource = field(repr=False)
    corrupt: CorruptRange | None = None

    @property
    def is_corrupt(self) -> bool:
        return self.corrupt is not None

    def header(self, key: HeaderKey) -> str | None:
        return self.headers.get(key)

    def header_value(self, name: str) -> str | None:
        """A header by Hudi's name (``"TARGET_INSTANT_TIME"``)."""
        return self.headers.get(HeaderKey[name])

    @property
    def instant_time(self) -> str | None:
        return self.headers.get(HeaderKey.INSTANT_TIME)

    @property
    def schema(self) -> str | None:
        return self.headers.get(HeaderKey.SCHEMA)

    @property
    def is_rollback(self) -> bool:
        return self.block_type is BlockType.COMMAND_BLOCK and self.headers.get(HeaderKey.COMMAND_BLOCK_TYPE) == str(
            CommandBlockType.ROLLBACK_BLOCK.value
        )

    def content(self) -> bytes:
        """The content bytes (for a corrupt block: the skipped bytes)."""
        data = self.source.read_at(self.content_offset, self.content_length)
        if len(data) != self.content_length:
            raise LogBlockContentError(
                f"{self.source.path}: content of the block at offset {self.offset} shrank while reading "
                f"({len(data)} of {self.content_length} bytes)"
            )
        return data

    def _need_schema(self) -> str:
        if self.schema is None:
            raise LogBlockContentError(
                f"{self.source.path}: the {self.block_type.name} at offset {self.offset} has no SCHEMA header"
            )
        return self.schema

    def avro_records(self) -> list[dict[str, Any]]:
        """Records of an Avro data (or CDC) block, decoded with its SCHEMA header."""
        self._expect(BlockType.AVRO_DATA_BLOCK, BlockType.CDC_DATA_BLOCK)
        return self._decoding(lambda: decode_avro_records(self.content(), self._need_schema()))

    def avro_table(self) -> Any:
        """An Avro data block's records as a ``pyarrow.Table``, decoded column by column; None
        when its schema is not a flat record of simple types, or its content does not decode
        that way (:meth:`avro_records` then decodes it, or says what is wrong)."""
        self._expect(BlockType.AVRO_DATA_BLOCK)
        from tidemark.logformat.avro_columns import decode_avro_table

        return self._decoding(lambda: decode_avro_table(self.content(), self._need_schema()))

    @staticmethod
    def avro_tables(blocks: Sequence[LogBlock]) -> Any:
        """Avro data blocks of one schema (equal SCHEMA headers) as one ``pyarrow.Table``: each
        block's :meth:`avro_table`, in order, decoded together (a slice of many small blocks paid
        numpy's fixed costs once per column of every block). None where a block's own would be
        None or raise: decoded one by one, they say which block is at fault."""
        schemas = {b.schema for b in blocks}
        if len(schemas) != 1 or None in schemas or any(b.block_type is not BlockType.AVRO_DATA_BLOCK for b in blocks):
            return None
        from tidemark.logformat.avro_columns import arrow_schema, decode_avro_tables

        schema = blocks[0]._need_schema()
        if arrow_schema(schema) is None:  # decoded record by record: their contents are not read twice
            return None
        try:
            return decode_avro_tables([b.content() for b in blocks], schema)
        except LogBlockContentError:
            return None

    def delete_records(self) -> list[DeleteRecord]:
        self._expect(BlockType.DELETE_BLOCK)
        return self._decoding(lambda: decode_delete_records(self.content()))

    def parquet_table(self) -> Any:
        """A Parquet data block's records as a ``pyarrow.Table``."""
        self._expect(BlockType.PARQUET_DATA_BLOCK)
        return self._decoding(lambda: decode_parquet(self.content()))

    def record_count(self) -> int | None:
        """How many records the block holds; ``None`` where the block holds no records or the
        count cannot be known without a decoder tidemark lacks (HFile)."""
        t = self.block_type
        if t in (BlockType.AVRO_DATA_BLOCK, BlockType.CDC_DATA_BLOCK):
            return self._decoding(lambda: avro_record_count(self.source.read_at(self.content_offset, 8)))
        if t is BlockType.DELETE_BLOCK:
            return len(self.delete_records())
        if t is BlockType.PARQUET_DATA_BLOCK:
            return self._decoding(lambda: parquet_record_count(self.content()))
        return None

    def records(self) -> list[dict[str, Any]]:
        """Decoded records as plain dicts, whatever the block type (empty for command blocks)."""
        t = self.block_type
        if t in (BlockType.AVRO_DATA_BLOCK, BlockType.CDC_DATA_BLOCK):
            return self.avro_records()
        if t is BlockType.DELETE_BLOCK:
            return [r.to_json() for r in self.delete_records()]
        if t is BlockType.PARQUET_DATA_BLOCK:
            return self._decoding(lambda: parquet_rows(self.parquet_table()))
        if t is BlockType.HFILE_DATA_BLOCK:
            raise LogBlockContentError(
                f"{self.source.path}: the HFILE_DATA_BLOCK at offset {self.offset} cannot be decoded "
                "(tidemark does not read HFile content)"
            )
        return []

    def to_spec(self) -> BlockSpec:
        """The block as a :class:`BlockSpec`, to write it again unchanged."""
        if self.corrupt is not None or self.version is None:
            raise LogBlockEncodeError(f"the corrupt range at offset {self.offset} is not a block")
        return BlockSpec(self.block_type, dict(self.headers), self.content(), dict(self.footers), self.version)

    def _expect(self, *types: BlockType) -> None:
        if self.block_type not in types:
            wanted = " or ".join(t.name for t in types)
            raise LogBlockContentError(
                f"{self.source.path}: the block at offset {self.offset} is a {self.block_type.name}, not {wanted}"
            )

    def _decoding(self, decode: Callable[[], _T]) -> _T:
        try:
            return decode()
        except LogBlockContentError as e:
            if str(e).startswith(self.source.path):
                raise
            raise LogBlockContentError(
                f"{self.source.path}: {self.block_type.name} at offset {self.offset}: {e}"
            ) from e
