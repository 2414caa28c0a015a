"""The bytes tidemark writes follow Hudi's layout, checked by walking them here by hand (not with
tidemark's reader)."""

from __future__ import annotations

import struct

import pytest

from tests.logformat.samples import TRIPS_SCHEMA, every_block_type
from tidemark.errors import LogBlockEncodeError
from tidemark.logformat import BlockSpec, BlockType, HeaderKey, header_key_from_name, header_name


def _walk(data: bytes) -> list[dict[str, object]]:
    """An independent parse of Hudi's block layout: magic, size, version, type, header map,
    content length, content, footer map, trailing length."""
    out = []
    pos = 0
    while pos < len(data):
        start = pos
        assert data[pos : pos + 6] == b"#HUDI#"
        pos += 6
        (size,) = struct.unpack_from(">q", data, pos)
        pos += 8
        after_size = pos
        version, block_type, count = struct.unpack_from(">iii", data, pos)
        pos += 12
        headers = {}
        for _ in range(count):
            key, length = struct.unpack_from(">ii", data, pos)
            pos += 8
            headers[key] = data[pos : pos + length].decode()
            pos += length
        (content_length,) = struct.unpack_from(">q", data, pos)
        pos += 8
        content = data[pos : pos + content_length]
        pos += content_length
        (footer_count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        assert footer_count == 0
        (trailing,) = struct.unpack_from(">q", data, pos)
        assert trailing == pos - start, "trailing long = bytes written before it, magic included"
        pos += 8
        assert size == pos - after_size, "size = everything after the size field"
        assert trailing == size + 6
        out.append({"version": version, "type": block_type, "headers": headers, "content": content})
    assert pos == len(data)
    return out


def test_written_bytes_follow_the_layout() -> None:
    specs = every_block_type()
    data = b"".join(s.encode() for s in specs)
    walked = _walk(data)
    assert [w["type"] for w in walked] == [int(s.block_type) for s in specs]
    assert all(w["version"] == 1 for w in walked)
    for w, s in zip(walked, specs, strict=True):
        assert w["headers"] == dict(s.headers)
        assert w["content"] == s.content


def test_avro_content_layout() -> None:
    [avro, *_] = every_block_type()
    content = avro.content
    version, count = struct.unpack_from(">ii", content, 0)
    assert (version, count) == (3, 5)
    pos = 8
    for _ in range(count):
        (length,) = struct.unpack_from(">i", content, pos)
        assert length > 0
        pos += 4 + length
    assert pos == len(content)
    assert avro.headers[HeaderKey.SCHEMA] == TRIPS_SCHEMA


def test_delete_content_layout() -> None:
    delete = every_block_type()[1]
    version, length = struct.unpack_from(">ii", delete.content, 0)
    assert version == 3
    assert length == len(delete.content) - 8


def test_rollback_is_a_command_block_with_target() -> None:
    rollback = every_block_type()[-1]
    assert rollback.block_type is BlockType.COMMAND_BLOCK
    assert rollback.content == b""
    assert rollback.headers == {
        HeaderKey.INSTANT_TIME: "20250101000000009",
        HeaderKey.COMMAND_BLOCK_TYPE: "0",
        HeaderKey.TARGET_INSTANT_TIME: "20250101000000005",
    }


def test_header_order_is_kept_as_given() -> None:
    a = BlockSpec(BlockType.COMMAND_BLOCK, {HeaderKey.SCHEMA: "s", HeaderKey.INSTANT_TIME: "1"}).encode()
    b = BlockSpec(BlockType.COMMAND_BLOCK, {HeaderKey.INSTANT_TIME: "1", HeaderKey.SCHEMA: "s"}).encode()
    assert a != b
    assert len(a) == len(b)


def test_header_names_round_trip() -> None:
    for key in HeaderKey:
        assert header_key_from_name(header_name(key)) == key
    assert header_name(42) == "UNKNOWN_HEADER_42"
    assert header_key_from_name("UNKNOWN_HEADER_42") == 42
    with pytest.raises(LogBlockEncodeError, match="unknown header name"):
        header_key_from_name("NOPE")


def test_bad_records_raise_encode_error() -> None:
    from tidemark.logformat import avro_data_block

    with pytest.raises(LogBlockEncodeError, match="record 1"):
        avro_data_block([{"ts": 1}, {"ts": "not a long"}], TRIPS_SCHEMA, "20250101000000000")
    with pytest.raises(LogBlockEncodeError, match="INSTANT_TIME"):
        avro_data_block([], TRIPS_SCHEMA, "")
    with pytest.raises(LogBlockEncodeError, match="schema"):
        avro_data_block([], "{not json", "20250101000000000")
