"""Hudi's record key bloom filter, as its writers put it in every base file's footer.

Apache Hudi's Parquet writer adds four footer keys to each base file of a table with meta fields:
the serialized bloom filter of the file's record keys, its type code, and the smallest and largest
record key. Hudi's BLOOM and GLOBAL_BLOOM indexes read them when an Apache writer upserts into the
table: a base file without a filter fails that lookup, so tidemark writes them too.

The filter is Hudi's ``DYNAMIC_V0`` (``HoodieDynamicBoundedBloomFilter``), with Hudi's defaults:
rows of ``num_entries`` keys (60,000), a false positive rate of 1e-9 per row, and at most
``max_entries`` keys (100,000) before the rows are filled round-robin. Each row is a bit vector
set by Hadoop's MurmurHash (hash type 1), chained ``num_hashes`` times from seed 0. Serialized
as Java's ``DataOutput`` writes it (big-endian) and then base64. The hash runs over all keys of
a length at once (numpy), not key by key.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidemark.config import conf_bool
from tidemark.errors import TableError

BLOOM_FILTER_KEY: Final = "org.apache.hudi.bloomfilter"
BLOOM_FILTER_TYPE_CODE_KEY: Final = "hoodie_bloom_filter_type_code"
MIN_RECORD_KEY: Final = "hoodie_min_record_key"
MAX_RECORD_KEY: Final = "hoodie_max_record_key"
DYNAMIC_V0: Final = "DYNAMIC_V0"

#: Hudi's defaults (hoodie.index.bloom.num_entries, hoodie.index.bloom.fpp,
#: hoodie.bloom.index.filter.dynamic.max.entries)
DEFAULT_NUM_ENTRIES: Final = 60_000
DEFAULT_FPP: Final = 0.000000001
DEFAULT_MAX_ENTRIES: Final = 100_000

#: Hudi's switch (0.15): a writer without a BLOOM index may leave the filter out, to save CPU
BLOOM_FILTER_ENABLED: Final = "hoodie.parquet.bloom.filter.enabled"
INDEX_TYPE: Final = "hoodie.index.type"

_MURMUR_HASH: Final = 1  # Hadoop's Hash.MURMUR_HASH
_VERSION: Final = -1  # the filter's serial version, as Hadoop's Filter writes it
_M: Final = np.uint32(0x5BD1E995)


@dataclass(frozen=True)
class BloomFilterShape:
    """A filter's sizes: the bits per row and the hashes per key."""

    vector_size: int
    num_hashes: int

    @classmethod
    def for_entries(cls, num_entries: int, fpp: float) -> BloomFilterShape:
        """As Hudi sizes a row for ``num_entries`` keys at a false positive rate ``fpp``."""
        bits = math.ceil(num_entries * (-math.log(fpp) / (math.log(2) * math.log(2))))
        return cls(bits, math.ceil(math.log(2) * bits / num_entries))


def _key_bytes(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The keys' UTF-8 bytes (one buffer) and their offsets."""
    array = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    array = array.cast(pa.large_string())
    if array.null_count:
        raise TableError("a record key is null: a bloom filter holds only keys")
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


#: keys hashed at a time: numpy's passes over the chunk then stay in the CPU's cache
_CHUNK: Final = 65_536


def _position_chunks(keys: pa.Array | pa.ChunkedArray, shape: BloomFilterShape) -> Iterator[tuple[int, np.ndarray]]:
    """:func:`bit_positions` of the keys a chunk at a time: (the chunk's first key, positions)."""
    data, offsets = _key_bytes(keys)
    count = len(offsets) - 1
    for first in range(0, count, _CHUNK):
        end = min(first + _CHUNK, count)
        starts = offsets[first:end]
        lengths = offsets[first + 1 : end + 1] - starts
        if (lengths == 0).any():
            raise TableError("a record key is empty: Hudi's bloom filter cannot hold it")
        shortest, longest = int(lengths.min()), int(lengths.max())
        if shortest == longest:  # the usual case: keys of one length, one after another in memory
            block = data[starts[0] : starts[0] + len(starts) * shortest].reshape(len(starts), shortest)
            yield first, _murmur_chain(block, shortest, shape)
            continue
        out = np.empty((shape.num_hashes, len(starts)), dtype=np.uint32)
        for length in np.unique(lengths):
            rows = np.nonzero(lengths == length)[0]
            out[:, rows] = _murmur_chain(data[starts[rows, None] + np.arange(length)], int(length), shape)
        yield first, out


def bit_positions(keys: pa.Array | pa.ChunkedArray, shape: BloomFilterShape) -> np.ndarray:
    """Per hash (rows) each key's bit position (columns, keys in order), as Hudi's
    ``HashFunction`` computes them: each hash seeded with the last, taken modulo the vector size
    with Java's remainder and made positive."""
    chunks = [positions for _, positions in _position_chunks(keys, shape)]
    return np.concatenate(chunks, axis=1) if chunks else np.empty((shape.num_hashes, 0), dtype=np.uint32)


def _murmur_chain(matrix: np.ndarray, length: int, shape: BloomFilterShape) -> np.ndarray:
    """Hadoop's MurmurHash of each row of ``matrix`` (keys of one length), ``num_hashes`` times,
    each seeded by the previous hash (the first by 0)."""
    with np.errstate(over="ignore"):
        words = []
        for i in range(length // 4):
            b = matrix[:, 4 * i : 4 * i + 4].astype(np.uint32)
            k = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
            k = k * _M
            k ^= k >> np.uint32(24)
            words.append(k * _M)
        left = length % 4
        tail = None
        if left:
            # Java's (int) of a byte sign-extends: bytes above 0x7f set the high bits
            signed = matrix[:, length - left :].astype(np.int8).astype(np.int32)
            shifted = [signed[:, j] << (8 * (left - 1 - j)) for j in range(left)]
            acc = shifted[0]
            for s in shifted[1:]:
                acc = acc ^ s
            tail = acc.astype(np.uint32)
        out = np.empty((shape.num_hashes, matrix.shape[0]), dtype=np.uint32)
        h = np.zeros(matrix.shape[0], dtype=np.uint32)
        scratch = np.empty_like(h)
        size = np.uint32(shape.vector_size)
        for j in range(shape.num_hashes):
            # the seed is the previous hash (0 for the first): h = seed ^ length
            np.bitwise_xor(h, np.uint32(length), out=h)
            for k in words:
                np.multiply(h, _M, out=h)
                np.bitwise_xor(h, k, out=h)
            if tail is not None:
                np.bitwise_xor(h, tail, out=h)
                np.multiply(h, _M, out=h)
            np.right_shift(h, np.uint32(13), out=scratch)
            np.bitwise_xor(h, scratch, out=h)
            np.multiply(h, _M, out=h)
            np.right_shift(h, np.uint32(15), out=scratch)
            np.bitwise_xor(h, scratch, out=h)
            # Math.abs(hash % size): Java's remainder takes the dividend's sign, so this is
            # |hash| mod size (|Integer.MIN_VALUE| fits an unsigned int)
            np.remainder(np.abs(h.view(np.int32)).view(np.uint32), size, out=out[j])
    return out


def _rows_of(count: int, num_entries: int, max_entries: int) -> tuple[np.ndarray, int, int]:
    """The row each key (by position) is added to, the number of rows and the keys counted in
    the last row (Hudi's ``InternalDynamicBloomFilter``): rows fill in turn while the rows hold
    fewer than ``max_entries`` keys in all; then the key that finds the last row full goes to
    the first row, and the keys after it take the rows round-robin from the first."""
    rows = max(1, math.ceil(max_entries / num_entries))
    grown = rows * num_entries
    position = np.arange(count, dtype=np.int64)
    which = np.minimum(position // num_entries, rows - 1)
    if count > grown:
        which[grown] = 0
        which[grown + 1 :] = (position[grown + 1 :] - grown - 1) % rows
    used = 1 if count == 0 else int(min(rows, (min(count, grown) - 1) // num_entries + 1))
    # the counter is reset when a row is added and counts every key after that
    current = count - (used - 1) * num_entries
    return which, used, current


def dynamic_bloom_filter(
    keys: pa.Array | pa.ChunkedArray,
    num_entries: int = DEFAULT_NUM_ENTRIES,
    fpp: float = DEFAULT_FPP,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> str:
    """The serialized ``DYNAMIC_V0`` bloom filter of ``keys`` (added in their order), as Hudi's
    writer puts it in the footer."""
    shape = BloomFilterShape.for_entries(num_entries, fpp)
    which, used, current = _rows_of(len(keys), num_entries, max_entries)
    bits = np.zeros(used * shape.vector_size, dtype=bool)  # the rows one after another
    for first, positions in _position_chunks(keys, shape):
        row_starts = which[first : first + positions.shape[1]] * shape.vector_size
        for hashed in positions:
            bits[row_starts + hashed] = True
    header = struct.pack(">iibi", _VERSION, shape.num_hashes, _MURMUR_HASH, shape.vector_size)
    parts = [header, struct.pack(">iii", num_entries, current, used)]
    for row in bits.reshape(used, shape.vector_size):
        parts.append(header)
        parts.append(np.packbits(row, bitorder="little").tobytes())
    return base64.b64encode(b"".join(parts)).decode("ascii")


@dataclass(frozen=True)
class DynamicBloomFilter:
    """A parsed ``DYNAMIC_V0`` filter (what an Apache writer's index would test keys against)."""

    shape: BloomFilterShape
    num_entries: int
    current: int
    rows: tuple[bytes, ...]

    @classmethod
    def parse(cls, text: str | bytes, where: str = "the footer") -> DynamicBloomFilter:
        try:
            raw = base64.b64decode(text, validate=True)
            version, hashes, hash_type, size, nr, current, count = struct.unpack_from(">iibiiii", raw)
            if version != _VERSION or hash_type != _MURMUR_HASH or size <= 0 or hashes <= 0 or count <= 0:
                raise ValueError(f"version {version}, hash type {hash_type}, {size} bits, {count} rows")
            width = (size + 7) // 8
            offset, rows = 25, []
            for _ in range(count):
                if struct.unpack_from(">iibi", raw, offset) != (version, hashes, hash_type, size):
                    raise ValueError(f"a row at byte {offset} has another shape")
                offset += 13
                row = raw[offset : offset + width]
                if len(row) != width:
                    raise ValueError(f"a row at byte {offset} is cut short")
                rows.append(row)
                offset += width
        except (ValueError, struct.error) as e:
            raise TableError(f"the bloom filter in {where} is not a DYNAMIC_V0 filter: {e}") from None
        return cls(BloomFilterShape(size, hashes), nr, current, tuple(rows))

    def might_contain(self, keys: Sequence[str] | pa.Array) -> list[bool]:
        """Per key, whether some row has all its bits set (False: certainly absent)."""
        array = keys if isinstance(keys, pa.Array) else pa.array(list(keys), pa.string())
        positions = bit_positions(array, self.shape)
        found = np.zeros(positions.shape[1], dtype=bool)
        for row in self.rows:
            bits = np.unpackbits(np.frombuffer(row, dtype=np.uint8), bitorder="little").astype(bool)
            found |= bits[positions].all(axis=0)
        return [bool(f) for f in found]


def writes_bloom_filter(conf: Mapping[str, str]) -> bool:
    """Whether a write's base files get the filter, by Hudi's rule: unless
    ``hoodie.parquet.bloom.filter.enabled=false``, and always when ``hoodie.index.type`` is a
    BLOOM index (the writer's own index reads the filters)."""
    return conf_bool(conf, BLOOM_FILTER_ENABLED, default=True) or "BLOOM" in conf.get(INDEX_TYPE, "").upper()


def footer_metadata(keys: pa.Array | pa.ChunkedArray) -> dict[str, str]:
    """The footer keys Hudi's writer adds to a base file holding ``keys``: the filter and its
    type code always, the smallest and largest key (:func:`record_key_range`) when there is one."""
    meta = {BLOOM_FILTER_KEY: dynamic_bloom_filter(keys), BLOOM_FILTER_TYPE_CODE_KEY: DYNAMIC_V0}
    if len(keys):
        meta[MIN_RECORD_KEY], meta[MAX_RECORD_KEY] = record_key_range(keys)
    return meta


#: UTF-8 lead bytes of U+E000..U+FFFF, and what they become so that byte order is UTF-16 order
#: (continuation bytes are 0x80..0xBF, so these bytes are lead bytes only; 0xF5 and 0xF6 never
#: occur in UTF-8, and sort after the supplementary characters' 0xF0..0xF4)
_HIGH_BMP_LEADS: Final = ((b"\xee", b"\xf5"), (b"\xef", b"\xf6"))


def record_key_range(keys: pa.Array | pa.ChunkedArray) -> tuple[str, str]:
    """The smallest and largest of ``keys`` (some, none null) in UTF-16 code unit order, as Java's
    ``String.compareTo`` orders them: Hudi's Avro writer takes a base file's key range so, and its
    BLOOM index tests a key against the range so (``BloomIndexFileInfo.isKeyInRange``); a range in
    another order leaves out a key of the file, which that index then inserts a second time.
    Code point (UTF-8 byte) order differs only where a character of U+E000..U+FFFF meets one
    above U+FFFF (a surrogate pair, below U+E000 in UTF-16): the former's lead bytes are moved
    past every other lead byte before comparing. All-ASCII keys, the usual ones, skip that."""
    if pc.all(pc.string_is_ascii(keys)).as_py():
        bounds = pc.min_max(keys)
        return bounds["min"].as_py(), bounds["max"].as_py()
    moved = keys.cast(pa.binary())
    for lead, after in _HIGH_BMP_LEADS:
        moved = pc.replace_substring(moved, lead, after)
    bounds = pc.min_max(moved)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    for lead, after in _HIGH_BMP_LEADS:
        low, high = low.replace(after, lead), high.replace(after, lead)
    return low.decode(), high.decode()
