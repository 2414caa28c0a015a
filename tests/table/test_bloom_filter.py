"""Hudi's record key bloom filter: byte for byte what Apache's writer puts in base file footers,
and present in every base file tidemark writes (Apache's BLOOM indexes need it)."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fixtures import extract_table, table_zips
from tests.support.table_builder import TableBuilder
from tidemark.errors import TableError
from tidemark.storage import LocalStorage
from tidemark.table.bloom_filter import (
    BLOOM_FILTER_KEY,
    MAX_RECORD_KEY,
    MIN_RECORD_KEY,
    BloomFilterShape,
    DynamicBloomFilter,
    bit_positions,
    dynamic_bloom_filter,
    footer_metadata,
    record_key_range,
)
from tidemark.table.compaction import compact
from tidemark.timeline import CommitMetadata, instant_path

# --- a key-by-key model of Hudi's Java code, to hold the vectorised one to ------------------------


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _java_murmur(data: bytes, seed: int) -> int:
    """Hadoop's MurmurHash.hash(data, 0, len, seed), Java int semantics (signed bytes)."""
    m, length = 0x5BD1E995, len(data)
    signed = [b - 256 if b > 127 else b for b in data]
    h = _int32(seed ^ length)
    for i in range(length >> 2):
        k = signed[4 * i + 3]
        k = (k << 8) | (data[4 * i + 2])
        k = (k << 8) | (data[4 * i + 1])
        k = (k << 8) | (data[4 * i])
        k = _int32(k * m)
        k ^= (k & 0xFFFFFFFF) >> 24
        k = _int32(k * m)
        h = _int32(_int32(h * m) ^ k)
    left = length - ((length >> 2) << 2)
    if left:
        if left >= 3:
            h ^= _int32(signed[length - 3] << 16)
        if left >= 2:
            h ^= _int32(signed[length - 2] << 8)
        h ^= signed[length - 1]
        h = _int32(h * m)
    h ^= (h & 0xFFFFFFFF) >> 13
    h = _int32(h * m)
    h ^= (h & 0xFFFFFFFF) >> 15
    return _int32(h)


def _java_positions(key: str, shape: BloomFilterShape) -> list[int]:
    out, seed = [], 0
    for _ in range(shape.num_hashes):
        seed = _java_murmur(key.encode(), seed)
        remainder = abs(seed) % shape.vector_size  # Java's % keeps the dividend's sign; abs() after
        out.append(remainder)
    return out


def _java_filter(keys: list[str], num_entries: int, fpp: float, max_entries: int) -> str:
    """InternalDynamicBloomFilter.add, key by key, then write()."""
    shape = BloomFilterShape.for_entries(num_entries, fpp)
    rows: list[set[int]] = [set()]
    current, reached_max, index = 0, False, 0
    for key in keys:
        if reached_max:
            row = index % len(rows)
            index += 1
        elif current >= num_entries and len(rows) * num_entries < max_entries:
            rows.append(set())
            current = 0
            row = len(rows) - 1
        elif current >= num_entries:
            reached_max = True
            row = 0
        else:
            row = len(rows) - 1
        rows[row].update(_java_positions(key, shape))
        current += 1
    header = struct.pack(">iibi", -1, shape.num_hashes, 1, shape.vector_size)
    out = [header, struct.pack(">iii", num_entries, current, len(rows))]
    for bits in rows:
        vector = bytearray((shape.vector_size + 7) // 8)
        for b in bits:
            vector[b // 8] |= 1 << (b % 8)
        out += [header, bytes(vector)]
    return base64.b64encode(b"".join(out)).decode()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=23), min_size=1, max_size=30))
def test_bit_positions_are_hudis_for_any_text(keys: list[str]) -> None:
    # any length modulo 4, and bytes above 0x7f (Java sign-extends them in the tail)
    shape = BloomFilterShape.for_entries(60_000, 0.000000001)
    got = bit_positions(pa.array(keys, pa.string()), shape)
    assert [list(map(int, got[:, i])) for i in range(len(keys))] == [_java_positions(k, shape) for k in keys]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=8), max_size=40),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=1, max_value=20),
)
def test_rows_fill_grow_and_go_round_robin_as_hudis(keys: list[str], num_entries: int, max_entries: int) -> None:
    # small rows so that a few keys fill them, reach the bound and wrap around
    assert dynamic_bloom_filter(pa.array(keys, pa.string()), num_entries, 0.01, max_entries) == _java_filter(
        keys, num_entries, 0.01, max_entries
    )


def test_keys_of_many_lengths_across_hash_chunks() -> None:
    # more keys than one hashing chunk holds, of mixed lengths and scripts
    keys = [("k" * (i % 7)) + str(i) + ("é" if i % 5 == 0 else "") for i in range(70_001)]
    shape = BloomFilterShape.for_entries(60_000, 0.000000001)
    got = bit_positions(pa.array(keys, pa.string()), shape)
    for i in [*range(0, 70_001, 997), 65_535, 65_536, 70_000]:
        assert list(map(int, got[:, i])) == _java_positions(keys[i], shape), keys[i]


def test_the_shape_is_hudis_default() -> None:
    # hoodie.index.bloom.num_entries=60000 and fpp=1e-9: 30 hashes over 2,587,966 bits
    assert BloomFilterShape.for_entries(60_000, 0.000000001) == BloomFilterShape(2_587_966, 30)


def _apache_base_files(tmp_path: Path) -> list[Path]:
    files = []
    for zip_path in table_zips():
        root = extract_table(zip_path, tmp_path / zip_path.stem / zip_path.parent.name)
        files += [p for p in root.rglob("*.parquet") if ".hoodie" not in p.parts]
    if not files:
        pytest.skip("no Hudi fixture tables found (set TIDEMARK_HUDI_FIXTURES to their folder)")
    return files


def test_the_footer_is_byte_for_byte_what_apaches_writer_wrote(tmp_path: Path) -> None:
    compared = 0
    for path in _apache_base_files(tmp_path):
        footer = pq.read_metadata(path).metadata or {}
        if BLOOM_FILTER_KEY.encode() not in footer:
            # a table without meta fields: Hudi writes no filter, its key column being empty
            keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0)
            assert keys.null_count == len(keys), path
            continue
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0)
        ours = footer_metadata(keys)
        assert {k.encode(): v.encode() for k, v in ours.items()} == {
            k: footer[k] for k in footer if k.decode() in ours
        }, path
        assert len(ours) == 4
        assert all(DynamicBloomFilter.parse(footer[BLOOM_FILTER_KEY.encode()]).might_contain(keys.combine_chunks()))
        compared += 1
    assert compared >= 20  # every fixture table with meta fields has several base files


def test_a_filter_holds_its_keys_and_few_others() -> None:
    keys = pa.array([f"id-{i:07d}" for i in range(130_000)])  # past the bound: rows round-robin
    text = footer_metadata(keys)[BLOOM_FILTER_KEY]
    parsed = DynamicBloomFilter.parse(text)
    assert len(parsed.rows) == 2
    assert parsed.current == 70_000
    assert all(parsed.might_contain(keys))
    others = parsed.might_contain([f"other-{i}" for i in range(20_000)])
    assert sum(others) < 200  # 65,000 keys in rows sized for 60,000: a few in ten thousand


def test_a_damaged_filter_is_refused_saying_where() -> None:
    text = footer_metadata(pa.array(["a", "b"]))[BLOOM_FILTER_KEY]
    cut = base64.b64encode(base64.b64decode(text)[:-10]).decode()
    for bad in ("not base64!", cut, base64.b64encode(b"\x00" * 30).decode()):
        with pytest.raises(TableError, match=r"the bloom filter in f\.parquet is not a DYNAMIC_V0 filter"):
            DynamicBloomFilter.parse(bad, "f.parquet")


def test_every_base_file_tidemark_writes_carries_the_filter(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["k3", "k1", "k2"], 1)
    t.update(["k1"], 2)
    done = compact(t.storage)
    assert done is not None
    (compacted,) = CommitMetadata.from_bytes(t.storage.read(instant_path(done))).write_stats()
    base_files = [p for p in tmp_path.rglob("*.parquet") if ".hoodie" not in p.parts]
    assert len(base_files) == 2
    assert compacted.path.rpartition("/")[2] in {p.name for p in base_files}
    for path in base_files:
        footer = {k.decode(): v.decode() for k, v in (pq.read_metadata(path).metadata or {}).items()}
        assert (footer[MIN_RECORD_KEY], footer[MAX_RECORD_KEY]) == ("k1", "k3"), path
        assert footer["hoodie_bloom_filter_type_code"] == "DYNAMIC_V0"
        parsed = DynamicBloomFilter.parse(footer[BLOOM_FILTER_KEY])
        assert parsed.might_contain(["k1", "k2", "k3", "k4"])[:3] == [True, True, True]
        # in the footer only: the Arrow schema pyarrow stores there does not carry it a second time
        assert len(footer["ARROW:schema"]) < 10_000
    assert t.snapshot() == {"k1": 2, "k2": 1, "k3": 1}


def _java_order(key: str) -> bytes:
    return key.encode("utf-16-be")  # Java's String.compareTo: UTF-16 code units


def test_the_footer_key_range_is_in_javas_order(tmp_path: Path) -> None:
    # a fullwidth letter (U+FF21) sorts after an emoji (a surrogate pair) in Java, before it by
    # code point: a range by code point left out the first key, and Apache's BLOOM index pruned the file
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["\uff21-1", "\U0001f600-2", "abc"], 1)
    (path,) = [p for p in tmp_path.rglob("*.parquet") if ".hoodie" not in p.parts]
    footer = {k.decode(): v.decode() for k, v in (pq.read_metadata(path).metadata or {}).items()}
    assert (footer[MIN_RECORD_KEY], footer[MAX_RECORD_KEY]) == ("abc", "\uff21-1")


_MIXED = st.text(
    st.sampled_from(
        ["a", "z", "\x7f", "é", "\ud7ff", "\ue000", "\uff21", "\uffff", "\U00010000", "\U0001f600", "\U0010ffff"]
    ),
    min_size=1,
    max_size=4,
)


@given(st.lists(_MIXED, min_size=1, max_size=12))
@settings(max_examples=300, deadline=None)
def test_the_key_range_is_javas_for_any_keys(keys: list[str]) -> None:
    expected = (min(keys, key=_java_order), max(keys, key=_java_order))
    assert record_key_range(pa.chunked_array([pa.array(keys[:1]), pa.array(keys[1:], pa.string())])) == expected
