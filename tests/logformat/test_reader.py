"""Reading damaged and unusual log files: every good block back, every bad range reported."""

from __future__ import annotations

import struct

import pytest

from tests.logformat.samples import every_block_type
from tidemark.errors import LogBlockContentError
from tidemark.logformat import BlockSpec, BlockType, HeaderKey, LogBlock, LogFileReader, read_blocks
from tidemark.storage import BytesSource


class CountingSource(BytesSource):
    """Counts the bytes a reader asks for, to prove what it does not read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, "counting")
        self.bytes_read = 0

    def read_at(self, offset: int, length: int) -> bytes:
        data = super().read_at(offset, length)
        self.bytes_read += len(data)
        return data


def _file() -> tuple[bytes, list[BlockSpec], list[int]]:
    specs = every_block_type()
    encoded = [s.encode() for s in specs]
    offsets = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded))]
    return b"".join(encoded), specs, offsets


def _read(data: bytes) -> list[LogBlock]:
    return read_blocks(BytesSource(data, "test.log"))


def _good(blocks: list[LogBlock]) -> list[LogBlock]:
    return [b for b in blocks if b.corrupt is None]


def _covers(blocks: list[LogBlock], size: int) -> None:
    pos = 0
    for b in blocks:
        assert b.offset == pos
        pos = b.end
    assert pos == size


def test_intact_file_reads_every_block() -> None:
    data, specs, offsets = _file()
    blocks = _read(data)
    assert [b.offset for b in blocks] == offsets
    assert [b.block_type for b in blocks] == [s.block_type for s in specs]
    assert [dict(b.headers) for b in blocks] == [dict(s.headers) for s in specs]
    assert [b.content() for b in blocks] == [s.content for s in specs]
    assert blocks[0].record_count() == 5
    assert blocks[1].record_count() == 3
    assert blocks[2].record_count() == 2
    assert blocks[4].is_rollback


def test_a_files_bytes_are_read_as_they_are_and_a_wrong_argument_is_named() -> None:
    data, specs, offsets = _file()
    blocks = list(LogFileReader(data).blocks())
    assert [b.offset for b in blocks] == offsets
    assert [b.content() for b in blocks] == [s.content for s in specs]
    with pytest.raises(TypeError, match=r"ByteSource .* or bytes, not str"):
        LogFileReader("/lake/t/.f.log.1_0-1-0")  # type: ignore[arg-type]


def test_empty_file_has_no_blocks() -> None:
    assert _read(b"") == []


@pytest.mark.parametrize("cut", [1, 5, 6, 13, 20, 100, -9, -1])
def test_truncated_last_block_is_corrupt_not_a_crash(cut: int) -> None:
    data, specs, offsets = _file()
    last = offsets[-1]
    truncated = data[: last + cut] if cut > 0 else data[:cut]
    blocks = _read(truncated)
    _covers(blocks, len(truncated))
    assert len(_good(blocks)) == len(specs) - 1
    assert blocks[-1].corrupt is not None
    assert blocks[-1].corrupt.start == last
    assert blocks[-1].corrupt.end == len(truncated)


def test_garbage_before_after_and_between() -> None:
    data, specs, offsets = _file()
    junk = b"\x00garbage\xff" * 3
    damaged = junk + data[: offsets[2]] + junk + data[offsets[2] :] + junk
    blocks = _read(damaged)
    _covers(blocks, len(damaged))
    assert [b.block_type for b in _good(blocks)] == [s.block_type for s in specs]
    ranges = [(b.corrupt.start, b.corrupt.end) for b in blocks if b.corrupt]
    mid = len(junk) + offsets[2]
    assert ranges == [(0, len(junk)), (mid, mid + len(junk)), (len(damaged) - len(junk), len(damaged))]
    assert "no block magic" in blocks[0].corrupt.reason  # type: ignore[union-attr]


def test_flipped_byte_in_block_size_skips_only_that_block() -> None:
    data, _, offsets = _file()
    damaged = bytearray(data)
    damaged[offsets[1] + 12] ^= 0x40  # inside block 1's size field
    blocks = _read(bytes(damaged))
    _covers(blocks, len(damaged))
    good = _good(blocks)
    assert [b.offset for b in good] == [o for i, o in enumerate(offsets) if i != 1]
    [bad] = [b for b in blocks if b.corrupt]
    assert (bad.corrupt.start, bad.corrupt.end) == (offsets[1], offsets[2])  # type: ignore[union-attr]


def test_flipped_byte_in_trailing_length() -> None:
    data, _, offsets = _file()
    damaged = bytearray(data)
    damaged[offsets[3] - 1] ^= 0x01  # last byte of block 2's trailing long
    blocks = _read(bytes(damaged))
    [bad] = [b for b in blocks if b.corrupt]
    assert bad.offset == offsets[2]
    assert "trailing block length" in bad.corrupt.reason  # type: ignore[union-attr]


def test_block_size_beyond_the_file() -> None:
    data, _, offsets = _file()
    damaged = bytearray(data)
    struct.pack_into(">q", damaged, offsets[1] + 6, 2**62)
    blocks = _read(bytes(damaged))
    [bad] = [b for b in blocks if b.corrupt]
    assert "past the end of the file" in bad.corrupt.reason  # type: ignore[union-attr]
    assert len(_good(blocks)) == len(offsets) - 1


def test_negative_and_huge_inner_lengths_are_corrupt() -> None:
    spec = BlockSpec(BlockType.COMMAND_BLOCK, {HeaderKey.INSTANT_TIME: "20250101000000000"})
    block = spec.encode()
    for pos, value in [(22, 2**31 - 1), (22, -1), (26 + 4, 2**31 - 1), (26 + 4, -5)]:
        damaged = bytearray(block)
        struct.pack_into(">i", damaged, pos, value)
        [bad] = _read(bytes(damaged))
        assert bad.corrupt is not None, (pos, value)


def test_unknown_block_type_is_skipped_exactly() -> None:
    data, specs, offsets = _file()
    damaged = bytearray(data)
    struct.pack_into(">i", damaged, offsets[1] + 18, 42)
    blocks = _read(bytes(damaged))
    [bad] = [b for b in blocks if b.corrupt]
    assert (bad.corrupt.start, bad.corrupt.end, bad.corrupt.reason) == (  # type: ignore[union-attr]
        offsets[1],
        offsets[2],
        "unknown block type 42",
    )
    assert len(_good(blocks)) == len(specs) - 1


def test_unknown_header_key_is_kept() -> None:
    spec = BlockSpec(BlockType.COMMAND_BLOCK, {HeaderKey.INSTANT_TIME: "20250101000000000", 99: "future"})
    [block] = _read(spec.encode())
    assert block.corrupt is None
    assert block.headers == {0: "20250101000000000", 99: "future"}
    assert block.to_spec().encode() == spec.encode()


def test_unsupported_format_version_is_corrupt() -> None:
    spec = BlockSpec(BlockType.COMMAND_BLOCK, {HeaderKey.INSTANT_TIME: "1"}, version=2)
    [block] = _read(spec.encode())
    assert block.corrupt is not None
    assert "version 2" in block.corrupt.reason


def test_header_pass_reads_no_content() -> None:
    big = [BlockSpec(BlockType.AVRO_DATA_BLOCK, {HeaderKey.INSTANT_TIME: "1"}, b"\x00" * 1_000_000) for _ in range(5)]
    data = b"".join(b.encode() for b in big)
    source = CountingSource(data)
    blocks = read_blocks(source)
    assert len(blocks) == 5
    assert source.bytes_read < 5 * 70 * 1024  # one small window at each end of each block
    before = source.bytes_read
    blocks[3].content()
    assert source.bytes_read - before == 1_000_000


def test_damaged_content_raises_content_error_only() -> None:
    [avro, delete, parquet, *_] = every_block_type()
    for spec in (avro, delete, parquet):
        content = bytearray(spec.content)
        content[len(content) // 2 :] = b"\xff" * (len(content) - len(content) // 2)
        damaged = BlockSpec(spec.block_type, spec.headers, bytes(content))
        [block] = _read(damaged.encode())
        assert block.corrupt is None  # the framing is intact: only decoding can tell
        with pytest.raises(LogBlockContentError, match="offset 0"):
            block.records()


def test_claimed_record_count_beyond_content() -> None:
    [avro, *_] = every_block_type()
    content = bytearray(avro.content)
    struct.pack_into(">i", content, 4, 2**31 - 1)
    [block] = _read(BlockSpec(avro.block_type, avro.headers, bytes(content)).encode())
    with pytest.raises(LogBlockContentError, match="claims 2147483647 records"):
        block.avro_records()


def test_hfile_content_is_reported_not_decoded() -> None:
    spec = BlockSpec(BlockType.HFILE_DATA_BLOCK, {HeaderKey.INSTANT_TIME: "1"}, b"HFILE...")
    [block] = _read(spec.encode())
    assert block.record_count() is None
    with pytest.raises(LogBlockContentError, match="HFile"):
        block.records()


def test_parquet_block_with_invalid_utf8_in_a_string_raises_content_error() -> None:
    # Parquet pages carry no mandatory checksum: a damaged byte inside a string value decodes
    # without complaint unless the block's reader validates it.
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    table = pa.table({"rider": ["rider-\u00e9"]})
    pq.write_table(table, sink, compression="NONE", use_dictionary=False, write_statistics=False)
    # 0xc3 0x41: a lead byte without its continuation, wherever the value is stored
    content = sink.getvalue().to_pybytes().replace("\u00e9".encode(), b"\xc3\x41")
    spec = BlockSpec(BlockType.PARQUET_DATA_BLOCK, {HeaderKey.INSTANT_TIME: "1"}, bytes(content))
    [block] = _read(spec.encode())
    with pytest.raises(LogBlockContentError, match=r"offset 0.*Invalid UTF8"):
        block.records()
