"""Reconciling the log blocks of a file slice written by Spark task retries and speculation.

Every data and delete block tidemark writes carries ``BLOCK_IDENTIFIER = "<attempt>,<sequence>"``:
the Spark task attempt, and a sequence starting at 0 for each attempt of each file slice. In one
header-only pass, the blocks of each instant are grouped by attempt and exactly one attempt is
kept:

- **the commit decides where it can**: a write records in its commit metadata which attempt it
  accepted for each file slice and the log files that attempt wrote. Then only blocks in those log
  files count, whatever the sequence lengths (Apache's 0.14 rule kept the wrong attempt when two
  complete attempts tied, apache/hudi#10803).
- **otherwise the seed's rule (HUDI-6758)**: the longest valid sequence ``0, 1, 2, ...`` wins, a
  tie goes to the latest attempt; a corrupt block ends the sequence of the attempt whose block it
  follows; blocks without the header (Apache Hudi, older tidemark) are all kept.

Everything not kept is reported with the reason, never silently dropped. The module is pure: it
looks at headers only and does no I/O.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidemark.logformat import BlockType, HeaderKey, LogBlock

#: extraMetadata key of a commit recording the accepted attempt of every file slice it wrote
ACCEPTED_ATTEMPTS_KEY = "tidemark.accepted.attempts"
#: the identifier rollback command blocks carry (the seed: a fixed sequence)
ROLLBACK_BLOCK_IDENTIFIER = "0,1"

_RECONCILED_TYPES = (
    BlockType.AVRO_DATA_BLOCK,
    BlockType.PARQUET_DATA_BLOCK,
    BlockType.HFILE_DATA_BLOCK,
    BlockType.CDC_DATA_BLOCK,
    BlockType.DELETE_BLOCK,
)


@dataclass(frozen=True, order=True)
class BlockId:
    attempt: int
    sequence: int

    def __str__(self) -> str:
        return f"{self.attempt},{self.sequence}"


def parse_block_identifier(value: str | None) -> BlockId | None:
    """``"<attempt>,<sequence>"`` as a :class:`BlockId`; None when absent or malformed."""
    if value is None:
        return None
    attempt, sep, sequence = value.partition(",")
    if not sep or not attempt.strip().isdigit() or not sequence.strip().isdigit():
        return None
    return BlockId(int(attempt), int(sequence))


@dataclass(frozen=True)
class AcceptedAttempt:
    """What a commit accepted for one file slice: the attempt, its block count, its log files."""

    attempt: int
    blocks: int
    log_files: frozenset[str]

    def to_json(self) -> dict[str, object]:
        return {"attempt": self.attempt, "blocks": self.blocks, "logFiles": sorted(self.log_files)}


def slice_key(partition: str, file_id: str) -> str:
    return f"{partition}|{file_id}"


def encode_accepted(accepted: Mapping[str, AcceptedAttempt]) -> str:
    return json.dumps({k: v.to_json() for k, v in sorted(accepted.items())}, separators=(",", ":"))


def decode_accepted(value: str | None) -> dict[str, AcceptedAttempt]:
    """The accepted attempts recorded in a commit; {} when absent or unreadable (then the seed's
    rule decides)."""
    if not value:
        return {}
    try:
        raw = json.loads(value)
        return {
            k: AcceptedAttempt(int(v["attempt"]), int(v["blocks"]), frozenset(str(f) for f in v["logFiles"]))
            for k, v in raw.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


@dataclass(frozen=True)
class SlicedBlock:
    """A block with the name of the log file it is in."""

    log_file: str
    block: LogBlock


@dataclass(frozen=True)
class SkippedBlock:
    log_file: str
    block: LogBlock
    reason: str


@dataclass
class Reconciled:
    kept: list[SlicedBlock] = field(default_factory=list)
    skipped: list[SkippedBlock] = field(default_factory=list)
    #: things worth a warning that did not drop a block (a committed attempt with fewer blocks
    #: on storage than its commit recorded)
    problems: list[str] = field(default_factory=list)


def reconcile(blocks: Sequence[SlicedBlock], accepted: Mapping[str, AcceptedAttempt] | None = None) -> Reconciled:
    """Which blocks of one file slice to read. ``accepted`` maps an instant to the attempt its
    commit accepted for this slice (absent for commits that say nothing)."""
    accepted = accepted or {}
    by_instant: dict[str, list[int]] = defaultdict(list)
    for i, sb in enumerate(blocks):
        if sb.block.corrupt is None and sb.block.block_type in _RECONCILED_TYPES and sb.block.instant_time:
            by_instant[sb.block.instant_time].append(i)
    skip: dict[int, str] = {}
    problems: list[str] = []
    for instant, indexes in by_instant.items():
        decision = accepted.get(instant)
        if decision is not None:
            _by_commit(blocks, instant, indexes, decision, skip, problems)
        else:
            _by_sequence(blocks, instant, indexes, skip)
    result = Reconciled(problems=problems)
    for i, sb in enumerate(blocks):
        if i in skip:
            result.skipped.append(SkippedBlock(sb.log_file, sb.block, skip[i]))
        else:
            result.kept.append(sb)
    return result


def _by_commit(
    blocks: Sequence[SlicedBlock],
    instant: str,
    indexes: list[int],
    decision: AcceptedAttempt,
    skip: dict[int, str],
    problems: list[str],
) -> None:
    kept = 0
    for i in indexes:
        if blocks[i].log_file in decision.log_files:
            kept += 1
        else:
            found = parse_block_identifier(blocks[i].block.header(HeaderKey.BLOCK_IDENTIFIER))
            who = f"attempt {found.attempt}" if found else "a block"
            skip[i] = f"{who} of {instant} not accepted by its commit (attempt {decision.attempt} was)"
    if kept != decision.blocks:
        problems.append(
            f"instant {instant}: the commit accepted {decision.blocks} blocks of attempt {decision.attempt}, "
            f"{kept} are readable"
        )


def _by_sequence(blocks: Sequence[SlicedBlock], instant: str, indexes: list[int], skip: dict[int, str]) -> None:
    ids: dict[int, BlockId] = {}
    for i in indexes:
        raw = blocks[i].block.header(HeaderKey.BLOCK_IDENTIFIER)
        if raw is None:
            continue  # written without identifiers: kept, as the seed asks for old data
        parsed = parse_block_identifier(raw)
        if parsed is None:
            skip[i] = f"malformed BLOCK_IDENTIFIER {raw!r} (expected attempt,sequence)"
        else:
            ids[i] = parsed
    if not ids:
        return
    # a corrupt block ends the sequence of the attempt whose block precedes it in the same file
    ended_at: dict[int, int] = {}
    for i in range(1, len(blocks)):
        if blocks[i].block.corrupt is not None and blocks[i - 1].log_file == blocks[i].log_file:
            prev = ids.get(i - 1)
            if prev is not None and prev.attempt not in ended_at:
                ended_at[prev.attempt] = i
    valid: dict[int, list[int]] = defaultdict(list)  # attempt -> its valid prefix, in file order
    broken: dict[int, str] = {}
    for i in sorted(ids):
        bid = ids[i]
        if bid.attempt in broken:
            skip[i] = broken[bid.attempt]
            continue
        if bid.attempt in ended_at and i > ended_at[bid.attempt]:
            broken[bid.attempt] = f"after a corrupt block that ended attempt {bid.attempt}'s sequence"
            skip[i] = broken[bid.attempt]
            continue
        expected = len(valid[bid.attempt])
        if bid.sequence != expected:
            broken[bid.attempt] = f"attempt {bid.attempt}'s sequence breaks at {bid.sequence} (expected {expected})"
            skip[i] = broken[bid.attempt]
            continue
        valid[bid.attempt].append(i)
    if not valid:
        return
    winner = max(valid, key=lambda a: (len(valid[a]), a))
    for attempt, members in valid.items():
        if attempt == winner:
            continue
        reason = (
            f"attempt {attempt} of {instant} ({len(members)} blocks) superseded by attempt {winner} "
            f"({len(valid[winner])} blocks{', the latest of equals' if len(members) == len(valid[winner]) else ''})"
        )
        for i in members:
            skip[i] = reason
