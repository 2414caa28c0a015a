"""The seed's scenarios (HUDI-6758) and apache/hudi#10803, built as real log files and read back
header-only: reconciliation keeps exactly the blocks the seed (or the commit) says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.logformat.samples import TRIPS_SCHEMA, trip
from tidemark.logformat import HeaderKey, LogWriter, avro_data_block, read_blocks, rollback_block
from tidemark.logformat.block import BlockSpec, BlockType
from tidemark.reconcile import (
    AcceptedAttempt,
    SlicedBlock,
    decode_accepted,
    encode_accepted,
    parse_block_identifier,
    reconcile,
)
from tidemark.storage import LocalStorage

BASE = "20250101000000000"
T1 = "20250101000000001"
FILE_ID = "fg-1"


class Slice:
    """Log files of one file slice, written the way task attempts write them."""

    def __init__(self, root: Path) -> None:
        self.storage = LocalStorage(root)

    def attempt(self, attempt: int, sequences: list[int | str | None], *, per_file: int = 1, instant: str = T1) -> None:
        writer = LogWriter(self.storage, "p", FILE_ID, BASE, f"0-1-{attempt}", new_file=True, rollover_bytes=1)
        pending: list[BlockSpec] = []
        for seq in sequences:
            headers = (
                {} if seq is None else {HeaderKey.BLOCK_IDENTIFIER: seq if isinstance(seq, str) else f"{attempt},{seq}"}
            )
            records = [trip(attempt * 100 + (seq if isinstance(seq, int) else 0), instant)]
            pending.append(avro_data_block(records, TRIPS_SCHEMA, instant, headers))
            if len(pending) == per_file:
                writer.append(pending)
                pending = []
        if pending:
            writer.append(pending)

    def partial(self, attempt: int, seq: int, instant: str = T1) -> None:
        """Half of a block, appended to the attempt's latest log file (a crash mid-write)."""
        block = avro_data_block(
            [trip(999, instant)], TRIPS_SCHEMA, instant, {HeaderKey.BLOCK_IDENTIFIER: f"{attempt},{seq}"}
        )
        names = sorted(p for p in self.storage.root.joinpath("p").iterdir() if p.name.endswith(f"_0-1-{attempt}"))
        with open(names[-1], "ab") as f:
            f.write(block.encode()[:40])

    def raw(self, name: str, blocks: list[BlockSpec]) -> None:
        path = self.storage.root / "p" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(b.encode() for b in blocks))

    def blocks(self) -> list[SlicedBlock]:
        from tidemark.logformat import list_log_files

        out = []
        for name in list_log_files(self.storage, "p", FILE_ID, BASE):
            source = self.storage.open_input(f"p/{name.name}")
            out.extend(SlicedBlock(name.name, b) for b in read_blocks(source))
        return out


def kept_ids(result_blocks: list[SlicedBlock]) -> list[str]:
    return [
        b.block.header(HeaderKey.BLOCK_IDENTIFIER) or "none"
        for b in result_blocks
        if b.block.block_type is not BlockType.COMMAND_BLOCK and b.block.corrupt is None
    ]


def test_scenario_1_happy_path(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    s.attempt(0, [0, 1])
    result = reconcile(s.blocks())
    assert kept_ids(result.kept) == ["0,0", "0,1"]
    assert result.skipped == []


def test_scenario_2_retry_writes_the_longer_sequence(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    s.attempt(0, [0, 1])
    s.attempt(1, [0, 1, 2])
    result = reconcile(s.blocks())
    assert kept_ids(result.kept) == ["1,0", "1,1", "1,2"]
    assert {sk.block.header(HeaderKey.BLOCK_IDENTIFIER) for sk in result.skipped} == {"0,0", "0,1"}
    assert all("superseded by attempt 1" in sk.reason for sk in result.skipped)


def test_scenario_3_equal_sequences_keep_the_latest_attempt(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    s.attempt(0, [0, 1])
    s.attempt(1, [0, 1])
    result = reconcile(s.blocks())
    assert kept_ids(result.kept) == ["1,0", "1,1"]
    assert "the latest of equals" in result.skipped[0].reason


def test_scenario_4_first_attempt_complete_retry_short(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    s.attempt(0, [0, 1])
    s.attempt(1, [0])
    assert kept_ids(reconcile(s.blocks()).kept) == ["0,0", "0,1"]


def test_corrupt_block_ends_its_attempt(tmp_path: Path) -> None:
    """The seed's HDFS case: attempt 0 wrote block 0 and half of block 1 into one file."""
    s = Slice(tmp_path)
    s.attempt(0, [0], per_file=2)
    s.partial(0, 1)
    s.attempt(1, [0, 1])
    blocks = s.blocks()
    assert any(b.block.corrupt is not None for b in blocks)
    result = reconcile(blocks)
    assert kept_ids(result.kept) == ["1,0", "1,1"]


def test_corrupt_block_in_the_longer_attempt(tmp_path: Path) -> None:
    """Attempt 0 wrote 0, 1, then half of 2; attempt 1 only 0: attempt 0's valid run (0, 1) wins."""
    s = Slice(tmp_path)
    s.attempt(0, [0, 1], per_file=2)
    s.partial(0, 2)
    s.attempt(1, [0])
    assert kept_ids(reconcile(s.blocks()).kept) == ["0,0", "0,1"]


def test_blocks_without_identifier_and_rollbacks_are_kept(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    legacy = avro_data_block([trip(1, BASE)], TRIPS_SCHEMA, "20250101000000000")
    s.raw(f".{FILE_ID}_{BASE}.log.1_0-0-0", [legacy, rollback_block("20250101000000005", "20250101000000003")])
    s.attempt(0, [0, 1])
    s.attempt(1, [0])
    result = reconcile(s.blocks())
    assert kept_ids(result.kept) == ["none", "0,0", "0,1"]
    assert any(b.block.is_rollback for b in result.kept)


def test_hudi_10803_the_commit_decides(tmp_path: Path) -> None:
    """Two complete attempts with the same number of blocks but different content: the seed's rule
    keeps the latest (the one Apache 0.14 kept, losing data); the commit names the other."""
    s = Slice(tmp_path)
    s.attempt(0, [0, 1])
    s.attempt(1, [0, 1])
    blocks = s.blocks()
    committed = frozenset(b.log_file for b in blocks if b.log_file.endswith("_0-1-0"))
    by_seed = reconcile(blocks)
    assert kept_ids(by_seed.kept) == ["1,0", "1,1"]
    by_commit = reconcile(blocks, {T1: AcceptedAttempt(0, 2, committed)})
    assert kept_ids(by_commit.kept) == ["0,0", "0,1"]
    assert [sk.reason for sk in by_commit.skipped] == [
        f"attempt 1 of {T1} not accepted by its commit (attempt 0 was)"
    ] * 2
    assert by_commit.problems == []
    records = [r["_hoodie_record_key"] for b in by_commit.kept for r in b.block.avro_records()]
    assert records == ["key-000000", "key-000001"]


def test_committed_attempt_blocks_are_never_dropped(tmp_path: Path) -> None:
    """Even a malformed identifier or a gap inside the committed attempt's files is kept; a missing
    block is reported."""
    s = Slice(tmp_path)
    s.attempt(0, [0, "garbage", 3])
    blocks = s.blocks()
    files = frozenset(b.log_file for b in blocks)
    result = reconcile(blocks, {T1: AcceptedAttempt(0, 4, files)})
    assert len(result.kept) == 3
    assert result.skipped == []
    assert result.problems == [f"instant {T1}: the commit accepted 4 blocks of attempt 0, 3 are readable"]


def test_bad_identifiers_without_a_commit_record(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    s.attempt(1, [0, 1])  # attempts out of order: attempt 1's files come first
    s.attempt(0, [0, "x,y", 2])  # a malformed identifier, then a gap
    result = reconcile(s.blocks())
    assert kept_ids(result.kept) == ["1,0", "1,1"]
    reasons = {sk.block.header(HeaderKey.BLOCK_IDENTIFIER): sk.reason for sk in result.skipped}
    assert reasons["x,y"] == "malformed BLOCK_IDENTIFIER 'x,y' (expected attempt,sequence)"
    assert "breaks at 2" in reasons["0,2"]
    assert "superseded by attempt 1" in reasons["0,0"]


def test_other_instants_are_reconciled_separately(tmp_path: Path) -> None:
    s = Slice(tmp_path)
    s.attempt(0, [0, 1], instant=T1)
    s.attempt(1, [0], instant="20250101000000002")
    assert kept_ids(reconcile(s.blocks()).kept) == ["0,0", "0,1", "1,0"]


@pytest.mark.parametrize(
    ("raw", "parsed"), [("0,1", (0, 1)), ("12,0", (12, 0)), ("1", None), ("a,1", None), ("", None)]
)
def test_parse_block_identifier(raw: str, parsed: tuple[int, int] | None) -> None:
    got = parse_block_identifier(raw)
    assert (None if got is None else (got.attempt, got.sequence)) == parsed


def test_accepted_attempts_round_trip() -> None:
    accepted = {"p|f": AcceptedAttempt(2, 3, frozenset({"a", "b"}))}
    assert decode_accepted(encode_accepted(accepted)) == accepted
    assert decode_accepted("not json") == {}
