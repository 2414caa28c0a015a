"""Property tests: whatever damage a log file suffers (truncation, bit flips, garbage before,
after or inside, lengths beyond the file, unknown types or header keys, empty files), the reader
returns every block the damage left intact, accounts for every other byte as a reported corrupt
range, raises only tidemark's documented errors, never hangs and never allocates from a length it
has not checked against the file size."""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.logformat.samples import TRIPS_SCHEMA, trip
from tidemark.errors import LogFormatError
from tidemark.logformat import (
    MAGIC,
    BlockSpec,
    BlockType,
    DeleteRecord,
    HeaderKey,
    LogBlock,
    avro_data_block,
    delete_block,
    parquet_data_block,
    read_blocks,
    rollback_block,
)
from tidemark.storage import BytesSource

# CI runs the same examples every time; locally hypothesis explores new ones on each run
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

MANY = settings(
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _base_files() -> list[list[bytes]]:
    i = "20250101000000001"
    small = [
        avro_data_block([trip(n, i) for n in range(3)], TRIPS_SCHEMA, i),
        delete_block([DeleteRecord("key-000001", "city=x", 5)], i, TRIPS_SCHEMA),
        rollback_block("20250101000000002", i),
    ]
    mixed = [
        avro_data_block([trip(n, i) for n in range(20)], TRIPS_SCHEMA, i, {HeaderKey.BLOCK_IDENTIFIER: "0,0"}),
        parquet_data_block(pa.table({"k": ["a", "b", "c"], "v": [1, 2, 3]}), TRIPS_SCHEMA, i),
        avro_data_block([trip(7, i)], TRIPS_SCHEMA, i, {HeaderKey.BLOCK_IDENTIFIER: "0,1"}),
        BlockSpec(BlockType.COMMAND_BLOCK, {HeaderKey.INSTANT_TIME: i, 77: "unknown key"}),
    ]
    content_with_magic = [
        BlockSpec(BlockType.HFILE_DATA_BLOCK, {HeaderKey.INSTANT_TIME: i}, MAGIC * 5 + b"\x00" * 30),
        rollback_block("20250101000000003", i),
    ]
    return [[b.encode() for b in f] for f in (small, mixed, content_with_magic, small[:1])]


BASES = _base_files()


@dataclass
class Damaged:
    data: bytearray
    #: original blocks untouched by the damage: (offset now, bytes)
    intact: list[tuple[int, bytes]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    def _drop(self, lo: int, hi: int) -> None:
        """Forget blocks overlapping [lo, hi)."""
        self.intact = [(s, b) for s, b in self.intact if s + len(b) <= lo or s >= hi]

    def truncate(self, at: int) -> None:
        at = min(at, len(self.data))
        self._drop(at, 1 << 62)
        del self.data[at:]
        self.steps.append(f"truncate {at}")

    def flip(self, at: int, mask: int) -> None:
        if not self.data:
            return
        at %= len(self.data)
        self.data[at] ^= mask
        self._drop(at, at + 1)
        self.steps.append(f"flip {at} ^{mask:#x}")

    def insert(self, at: int, junk: bytes) -> None:
        at = min(at, len(self.data))
        self.intact = [(s + len(junk) if s >= at else s, b) for s, b in self.intact if not (s < at < s + len(b))]
        self.data[at:at] = junk
        self.steps.append(f"insert {len(junk)} at {at}")

    def overwrite(self, at: int, junk: bytes) -> None:
        if not self.data:
            return
        at %= len(self.data)
        junk = junk[: len(self.data) - at]
        self.data[at : at + len(junk)] = junk
        self._drop(at, at + len(junk))
        self.steps.append(f"overwrite {len(junk)} at {at}")


EXTREMES = [0, 1, -1, 31, 2**31 - 1, -(2**31), 2**62, -(2**63), 2**63 - 1, 7, 100_000]
junk_bytes = st.one_of(
    st.binary(min_size=1, max_size=48),
    st.builds(lambda a, b: a + MAGIC + b, st.binary(max_size=12), st.binary(max_size=40)),
)
mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 4000)),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 255])),
    st.tuples(st.just("insert"), st.integers(0, 4000), junk_bytes),
    st.tuples(st.just("overwrite"), st.integers(0, 10**6), junk_bytes),
    st.tuples(
        st.just("overwrite"),
        st.integers(0, 10**6),
        st.builds(
            lambda v, w: struct.pack(">q" if w == 8 else ">i", v if w == 8 else max(min(v, 2**31 - 1), -(2**31))),
            st.sampled_from(EXTREMES),
            st.sampled_from([4, 8]),
        ),
    ),
)


@st.composite
def damaged_files(draw: st.DrawFn) -> Damaged:
    blocks = draw(st.sampled_from(BASES))
    damaged = Damaged(bytearray(b"".join(blocks)))
    pos = 0
    for b in blocks:
        damaged.intact.append((pos, b))
        pos += len(b)
    for m in draw(st.lists(mutation, max_size=4)):
        getattr(damaged, m[0])(*m[1:])
    return damaged


def _check(damaged: Damaged) -> list[LogBlock]:
    data = bytes(damaged.data)
    blocks = read_blocks(BytesSource(data, "fuzz.log"))
    # every byte is accounted for, in order, exactly once
    pos = 0
    for b in blocks:
        assert b.offset == pos, damaged.steps
        assert b.end > b.offset, damaged.steps
        if b.corrupt is not None:
            assert (b.corrupt.start, b.corrupt.end) == (b.offset, b.end)
            assert b.corrupt.reason
        pos = b.end
    assert pos == len(data), damaged.steps
    # every block the damage did not touch comes back whole
    valid = {b.offset: b for b in blocks if b.corrupt is None}
    for start, original in damaged.intact:
        assert start in valid, (damaged.steps, start)
        assert valid[start].end == start + len(original)
        assert valid[start].to_spec().encode() == original
    # decoding anything raises only documented errors
    for b in valid.values():
        try:
            b.record_count()
            records = b.records()
        except LogFormatError:
            records = None
        if b.block_type is BlockType.AVRO_DATA_BLOCK:
            # the column-by-column decoder gives the same records, or leaves the block to
            # the record-by-record one (which then words the error)
            try:
                table = b.avro_table()
            except LogFormatError:
                table = None
            if table is not None:
                assert records is not None, damaged.steps
                assert _same(table.to_pylist(), records), damaged.steps
    return blocks


def _same(found: list[dict[str, Any]], expected: list[dict[str, Any]]) -> bool:
    def key(row: dict[str, Any]) -> list[Any]:  # NaN equals NaN here: both decoders read one
        return [("nan",) if isinstance(v, float) and math.isnan(v) else v for v in row.values()]

    return [key(r) for r in found] == [key(r) for r in expected]


@MANY
@given(damaged_files())
def test_damaged_files_lose_no_intact_block(damaged: Damaged) -> None:
    _check(damaged)


def memory_check(examples: int = 300) -> None:
    """Reads are bounded by the file (small windows), never by a length field's claim. Run in a
    process of its own (see the test below): tracemalloc is started once, and no other thread
    allocates while it switches its hooks, which can crash CPython."""
    tracemalloc.start()

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(damaged_files())
    def bounded(damaged: Damaged) -> None:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        _check(damaged)
        _, peak = tracemalloc.get_traced_memory()
        assert peak - base < 8 * len(damaged.data) + 2 * 1024 * 1024, (peak - base, damaged.steps)

    bounded()


def test_memory_is_bounded_by_the_file_size() -> None:
    repo = Path(__file__).resolve().parents[2]
    code = "from tests.logformat.test_reader_properties import memory_check; memory_check()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data: bytes) -> None:
    _check(Damaged(bytearray(data)))
