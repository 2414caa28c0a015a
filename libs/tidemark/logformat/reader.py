"""Reading Hudi log files block by block, header-only, with corrupt-block recovery.

The reader walks a file as Hudi's ``HoodieLogFileReader`` does: magic, block size, then the
trailing long at ``offset + 6 + size - 8`` must equal ``size + 6``. It also checks that the
block's own lengths (headers, content, footer) fill exactly that size. A block failing any check
is a corrupt range: the reader scans forward to the next magic and reports the skipped bytes.

Two choices go past Hudi, both so that no good block is lost and no bad byte goes unreported:
garbage before the first magic is reported as a corrupt range (Hudi raises), and a block whose
framing and structure are intact stays valid even when garbage follows it (Hudi's "next bytes are
magic or EOF" check would drop it); the garbage is then its own corrupt range.

Every length is checked against the block's end, and the block's end against the file size,
before anything is read or allocated, so damaged input can neither exhaust memory nor loop.
Contents are not read here: each :class:`LogBlock` reads its content only when asked.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from tidemark.logformat.block import MAGIC, BlockType, CorruptRange, LogBlock
from tidemark.storage.base import ByteSource, BytesSource

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")
_MAGIC_LEN = len(MAGIC)
# version, type, empty header, content length, empty footer, trailing long
MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8
_HEAD_WINDOW = 4 * 1024  # one read covers the fixed fields and the headers of most blocks
_SCAN_CHUNK = 1024 * 1024


class _BadBlockError(Exception):
    """The block at an offset is not valid; ``resume_at`` is where the next one may start when
    the framing was intact (an unknown block type), else the reader scans for the next magic."""

    def __init__(self, reason: str, resume_at: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.resume_at = resume_at


@dataclass
class _Window:
    """Bytes of the file read ahead from ``start``; reads outside it go to the source. All
    requests are bounded by ``limit`` (the block's end, already checked against the file)."""

    source: ByteSource
    start: int
    data: bytes
    limit: int

    def get(self, offset: int, length: int, what: str) -> bytes:
        if length < 0 or offset + length > self.limit:
            raise _BadBlockError(f"{what} at offset {offset} runs past the block end {self.limit}")
        rel = offset - self.start
        if rel >= 0 and rel + length <= len(self.data):
            return self.data[rel : rel + length]
        fetched = self.source.read_at(offset, max(length, min(_HEAD_WINDOW, self.limit - offset)))
        if len(fetched) < length:
            raise _BadBlockError(f"{what} at offset {offset}: file ends early")
        self.start, self.data = offset, fetched
        return fetched[:length]

    def read_map(self, offset: int, what: str) -> tuple[dict[int, str], int]:
        (count,) = _INT.unpack(self.get(offset, 4, f"{what} count"))
        pos = offset + 4
        if count < 0 or count * 8 > self.limit - pos:
            raise _BadBlockError(f"{what} count {count} at offset {offset} is impossible for the block size")
        entries: dict[int, str] = {}
        for _ in range(count):
            key, length = _TWO_INTS.unpack(self.get(pos, 8, f"{what} entry"))
            if key < 0:
                raise _BadBlockError(f"{what} key {key} at offset {pos} is negative")
            if key in entries:
                raise _BadBlockError(f"{what} key {key} appears twice (offset {pos})")
            pos += 8
            raw = self.get(pos, length, f"{what} value")
            try:
                entries[key] = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _BadBlockError(f"{what} value at offset {pos} is not UTF-8: {e}") from e
            pos += length
        return entries, pos


class LogFileReader:
    """Iterates over the blocks of one log file; see the module docstring for the checks."""

    def __init__(self, source: ByteSource | bytes) -> None:
        # a file's bytes already in memory (read by the caller) are read as they are
        if isinstance(source, (bytes, bytearray, memoryview)):
            source = BytesSource(bytes(source))
        if not isinstance(source, ByteSource):
            raise TypeError(
                f"LogFileReader reads a ByteSource (storage.open_input(path)) or bytes, not {type(source).__name__}"
            )
        self.source = source

    def blocks(self) -> Iterator[LogBlock]:
        """Every block and every corrupt range, in file order. Reads headers only."""
        size = self.source.size
        pos = 0
        while pos < size:
            try:
                block = self._read_block(pos, size)
            except _BadBlockError as bad:
                end = bad.resume_at if bad.resume_at is not None else self._next_magic(pos + 1, size)
                yield self._corrupt(pos, end, bad.reason)
                pos = end
                continue
            yield block
            pos = block.end

    def _corrupt(self, start: int, end: int, reason: str) -> LogBlock:
        return LogBlock(
            offset=start,
            block_type=BlockType.CORRUPT_BLOCK,
            version=None,
            headers={},
            footers={},
            content_offset=start,
            content_length=end - start,
            end=end,
            source=self.source,
            corrupt=CorruptRange(start, end, reason),
        )

    def _read_block(self, pos: int, size: int) -> LogBlock:
        remaining = size - pos
        head = self.source.read_at(pos, min(_HEAD_WINDOW, remaining))
        if head[:_MAGIC_LEN] != MAGIC:
            if remaining < _MAGIC_LEN and MAGIC.startswith(head):
                raise _BadBlockError(f"file ends {remaining} bytes into a block's magic")
            raise _BadBlockError(f"no block magic at offset {pos}")
        if len(head) < _MAGIC_LEN + 8:
            raise _BadBlockError(f"file ends inside the block size field at offset {pos + _MAGIC_LEN}")
        (block_size,) = _LONG.unpack_from(head, _MAGIC_LEN)
        if block_size < MIN_BLOCK_SIZE:
            raise _BadBlockError(f"block size {block_size} is smaller than any block ({MIN_BLOCK_SIZE})")
        end = pos + _MAGIC_LEN + 8 + block_size  # the size counts what follows its own field
        if end > size:
            raise _BadBlockError(
                f"block size {block_size} runs past the end of the file (block ends at {end}, file has {size} bytes)"
            )
        window = _Window(self.source, pos, head, end - 8)
        version, type_ordinal = _TWO_INTS.unpack(window.get(pos + 14, 8, "version and type"))
        headers, cur = window.read_map(pos + 22, "header")
        (content_length,) = _LONG.unpack(window.get(cur, 8, "content length"))
        content_offset = cur + 8
        if content_length < 0 or content_offset + content_length + 4 > end - 8:
            raise _BadBlockError(f"content length {content_length} at offset {cur} does not fit the block size")
        footer_at = content_offset + content_length
        # jump over the content: footer and trailing length come with one small read
        tail_length = end - footer_at
        if tail_length <= _HEAD_WINDOW:
            tail = self.source.read_at(footer_at, tail_length)
            window.start, window.data = footer_at, tail
            trailer = tail[-8:]
        else:
            trailer = self.source.read_at(end - 8, 8)
        (block_length,) = _LONG.unpack(trailer)
        if block_length != block_size + _MAGIC_LEN:
            raise _BadBlockError(
                f"trailing block length {block_length} disagrees with block size {block_size} "
                f"(expected {block_size + _MAGIC_LEN})"
            )
        if version != 1:
            raise _BadBlockError(f"unsupported log format version {version}")
        footers, cur = window.read_map(footer_at, "footer")
        if cur != end - 8:
            raise _BadBlockError(f"the block's fields end at {cur}, but its size says {end - 8}")
        try:
            block_type = BlockType(type_ordinal)
        except ValueError:
            raise _BadBlockError(f"unknown block type {type_ordinal}", resume_at=end) from None
        return LogBlock(
            offset=pos,
            block_type=block_type,
            version=version,
            headers=headers,
            footers=footers,
            content_offset=content_offset,
            content_length=content_length,
            end=end,
            source=self.source,
        )

    def _next_magic(self, start: int, size: int) -> int:
        """Offset of the next magic at or after ``start``, or the file size."""
        pos = start
        while pos < size:
            chunk = self.source.read_at(pos, _SCAN_CHUNK)
            if not chunk:
                break
            found = chunk.find(MAGIC)
            if found >= 0:
                return pos + found
            if len(chunk) < _SCAN_CHUNK:
                break
            pos += len(chunk) - (_MAGIC_LEN - 1)  # overlap: a magic may straddle two chunks
        return size


def read_blocks(source: ByteSource) -> list[LogBlock]:
    """All blocks of a log file (headers only), as a list."""
    return list(LogFileReader(source).blocks())
