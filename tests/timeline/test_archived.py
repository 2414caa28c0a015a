"""The archived timeline: HoodieArchivedMetaEntry records in ``.hoodie/archived/.commits_.archive.N``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.timeline.test_avro_metadata import SAMPLES
from tidemark.cli.log import run_inspect
from tidemark.cli.main import build_parser
from tidemark.errors import InstantMetadataError
from tidemark.logformat import BlockType, LogFileName, read_blocks
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.write_client import commit_write, create_table, rollback, start_write
from tidemark.table.write_handles import TaskContext, create_base_file
from tidemark.timeline import (
    CLEAN,
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    RESTORE,
    ROLLBACK,
    SAVEPOINT,
    CommitMetadata,
    Instant,
    State,
    WriteStat,
    create_requested,
    instant_path,
    load_timeline,
    new_instant_time,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline.archived import (
    ARCHIVED_META_ENTRY_FULL_NAME,
    ArchivedInstant,
    archived_entries,
    archived_entry,
    latest_archival,
    latest_archival_block,
    read_archived,
    scan_archive,
    write_archived,
)
from tidemark.timeline.avro_metadata import serialize


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {"id": [f"k{i}" for i in range(start, start + n)], "ts": [1] * n, "v": list(range(start, start + n))}
    )


def _write(storage: LocalStorage, n: int, start: int, partition: str = "") -> str:
    schema = avro_schema_json(_rows(1).schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    ctx = TaskContext(inflight.timestamp, 0, 1, 0)
    rows = _rows(n, start)
    stat = create_base_file(storage, ctx, partition, f"fg-{start}", rows, rows["id"], schema)
    commit_write(storage, inflight, [stat], "insert", schema)
    return inflight.timestamp


def _next_ts(storage: LocalStorage) -> str:
    last = load_timeline(storage).last()
    ts = new_instant_time()
    while last is not None and ts <= last.timestamp:
        ts = new_instant_time()
    return ts


def _complete(storage: LocalStorage, action: str, requested: bytes, completed: bytes) -> Instant:
    ts = _next_ts(storage)
    inflight = transition_to_inflight(storage, create_requested(storage, ts, action, requested))
    return transition_to_completed(storage, inflight, completed, finished_by=None)


@pytest.fixture
def table(tmp_path: Path) -> LocalStorage:
    """Two delta commits, a rolled-back third one, a clean, a savepoint and a compaction."""
    storage = LocalStorage(tmp_path)
    create_table(storage, "t", ["id"], "ts", partition_fields=["p"])
    _write(storage, 3, 0, "p=a")
    _write(storage, 2, 10, "p=b")
    failed = _write(storage, 1, 20, "p=a")
    rollback(storage, failed)
    _complete(storage, CLEAN, serialize("HoodieCleanerPlan", SAMPLES["HoodieCleanerPlan"]), b"")
    clean = load_timeline(storage).last()
    assert clean is not None
    storage.write(instant_path(clean), serialize("HoodieCleanMetadata", SAMPLES["HoodieCleanMetadata"]))
    _complete(storage, SAVEPOINT, b"", serialize("HoodieSavepointMetadata", SAMPLES["HoodieSavepointMetadata"]))
    compacted = CommitMetadata(
        partition_to_write_stats={
            "p=a": (WriteStat("fg-0", "p=a/fg-0_0-1-0_x.parquet", "p=a", prev_commit="20250101000000000"),)
        },
        compacted=True,
        extra_metadata={"schema": "{}"},
        operation_type="COMPACT",
    )
    _complete(
        storage, COMPACTION, serialize("HoodieCompactionPlan", SAMPLES["HoodieCompactionPlan"]), compacted.to_bytes()
    )
    return storage


def _completed_archived(storage: LocalStorage) -> list[ArchivedInstant]:
    return [i for i in read_archived(storage) if i.state is State.COMPLETED]


def test_completed_instants_round_trip(table: LocalStorage) -> None:
    completed = list(load_timeline(table).completed())
    assert [i.action for i in completed] == [DELTA_COMMIT, DELTA_COMMIT, ROLLBACK, CLEAN, SAVEPOINT, COMPACTION]
    path = write_archived(table, [archived_entry(table, i) for i in completed], "20990101000000000")
    assert path == ".hoodie/archived/.commits_.archive.1_1-0-1"

    archived = read_archived(table)
    assert [(a.timestamp, a.state) for a in archived] == [(i.timestamp, State.COMPLETED) for i in completed]
    # a completed compaction is the commit file at its time: Hudi archives it as a commit
    assert [a.action for a in archived] == [DELTA_COMMIT, DELTA_COMMIT, ROLLBACK, CLEAN, SAVEPOINT, COMMIT]

    for instant, got in zip(completed[:2], archived[:2], strict=True):
        expected = CommitMetadata.from_bytes(table.read(instant_path(instant)))
        meta = got.metadata
        assert meta["operationType"] == "INSERT"
        assert meta["extraMetadata"]["schema"] == expected.schema
        assert meta["extraMetadata"]["ROLLING_STAT"] == ""
        assert set(meta["partitionToWriteStats"]) == set(expected.partition_to_write_stats)
        for partition, stats in expected.partition_to_write_stats.items():
            got_stats = meta["partitionToWriteStats"][partition]
            assert [(s["fileId"], s["path"], s["partitionPath"]) for s in got_stats] == [
                (s.file_id, s.path, s.partition_path) for s in stats
            ]
            assert [s["numWrites"] for s in got_stats] == [s.num_writes for s in stats]
            assert [s["prevCommit"] for s in got_stats] == ["null"] * len(stats)  # as Hudi's JSON has it

    rollback_meta = archived[2].metadata
    (rolled_back,) = rollback_meta["commitsRollback"]
    assert completed[1].timestamp < rolled_back < completed[2].timestamp
    assert rollback_meta["instantsRollback"] == [{"commitTime": rolled_back, "action": DELTA_COMMIT}]
    assert archived[3].metadata["earliestCommitToRetain"] == SAMPLES["HoodieCleanMetadata"]["earliestCommitToRetain"]
    assert archived[4].metadata["savepointedBy"] == SAMPLES["HoodieSavepointMetadata"]["savepointedBy"]
    assert archived[5].metadata["operationType"] == "COMPACT"
    assert archived[5].metadata["partitionToWriteStats"]["p=a"][0]["prevCommit"] == "20250101000000000"


def test_entry_fields_as_hudi_sets_them(table: LocalStorage) -> None:
    delta = next(iter(load_timeline(table)))
    entry = archived_entry(table, delta, state_transition_time="20990101000000001")
    assert entry["commitTime"] == delta.timestamp
    assert entry["actionType"] == DELTA_COMMIT
    assert entry["actionState"] == "COMPLETED"
    assert entry["stateTransitionTime"] == "20990101000000001"
    assert entry["version"] is None  # Hudi builds entries with Avro's no-argument constructor
    assert entry["hoodieCommitMetadata"]["version"] is None
    others = {k for k, v in entry.items() if v is not None}
    assert others == {"commitTime", "actionType", "actionState", "stateTransitionTime", "hoodieCommitMetadata"}


def test_all_states_of_a_compaction(table: LocalStorage) -> None:
    compaction = load_timeline(table).last()
    assert compaction is not None
    assert compaction.action == COMPACTION
    entries = archived_entries(table, compaction)
    assert [(e["actionType"], e["actionState"]) for e in entries] == [
        (COMPACTION, "REQUESTED"),
        (COMPACTION, "INFLIGHT"),
        (COMMIT, "COMPLETED"),
    ]
    assert entries[0]["hoodieCompactionPlan"]["operations"]
    assert entries[1]["hoodieCompactionPlan"] is None
    assert entries[2]["hoodieCommitMetadata"]["operationType"] == "COMPACT"
    write_archived(table, entries, compaction.timestamp)
    archived = read_archived(table)
    assert [(a.action, a.state) for a in archived] == [
        (COMPACTION, State.REQUESTED),
        (COMPACTION, State.INFLIGHT),
        (COMMIT, State.COMPLETED),
    ]
    assert archived[0].metadata["operations"] == entries[0]["hoodieCompactionPlan"]["operations"]


def test_archive_file_is_a_hudi_log_file(table: LocalStorage, tmp_path: Path) -> None:
    instants = list(load_timeline(table).completed())
    first = write_archived(table, [archived_entry(table, i) for i in instants[:3]], "20990101000000000")
    second = write_archived(table, [archived_entry(table, i) for i in instants[3:]], "20990101000000001")
    assert first == second  # local storage appends to the latest archive file
    assert LogFileName.parse(first) == LogFileName("commits", "", 1, "1-0-1", "archive")
    with table.open_input(first) as source:
        blocks = read_blocks(source)
        counts = [len(b.avro_records()) for b in blocks]
    assert [b.block_type for b in blocks] == [BlockType.AVRO_DATA_BLOCK, BlockType.AVRO_DATA_BLOCK]
    assert [b.instant_time for b in blocks] == ["20990101000000000", "20990101000000001"]
    for block in blocks:
        schema = json.loads(block.schema or "")
        assert f"{schema['namespace']}.{schema['name']}" == ARCHIVED_META_ENTRY_FULL_NAME
    assert counts == [3, len(instants) - 3]

    out = io.StringIO()
    assert run_inspect(build_parser().parse_args(["log", "inspect", str(tmp_path / first), "--json"]), out) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["type"], line["record_count"], line["corrupt"]) for line in lines] == [
        ("AVRO_DATA_BLOCK", 3, None),
        ("AVRO_DATA_BLOCK", len(instants) - 3, None),
    ]
    assert [a.timestamp for a in read_archived(table) if a.state is State.COMPLETED] == [i.timestamp for i in instants]


def test_truncated_archive_keeps_the_intact_block(table: LocalStorage, tmp_path: Path) -> None:
    instants = list(load_timeline(table).completed())
    path = write_archived(table, [archived_entry(table, i) for i in instants[:2]], "20990101000000000")
    write_archived(table, [archived_entry(table, i) for i in instants[2:]], "20990101000000001")
    full = (tmp_path / path).read_bytes()
    (tmp_path / path).write_bytes(full[: len(full) - 40])

    scan = scan_archive(table)
    assert [i.timestamp for i in scan.instants] == [i.timestamp for i in instants[:2]]
    assert len(scan.skipped) == 1
    assert scan.skipped[0].path == path
    assert scan.files == (path,)


def test_latest_archival_is_the_newest_intact_block(table: LocalStorage, tmp_path: Path) -> None:
    assert latest_archival(table) == ()
    assert latest_archival_block(table) is None
    instants = list(load_timeline(table).completed())
    write_archived(table, [e for i in instants[:2] for e in archived_entries(table, i)], "20990101000000000")
    path = write_archived(table, [e for i in instants[2:4] for e in archived_entries(table, i)], "20990101000000001")
    assert latest_archival(table) == tuple(i.timestamp for i in instants[2:4])
    latest = latest_archival_block(table)
    assert latest is not None
    assert latest.instant_time == "20990101000000001", "when that archival ran"
    full = (tmp_path / path).read_bytes()
    (tmp_path / path).write_bytes(full[: len(full) - 40])  # the newest block torn: the one before it
    assert latest_archival(table) == tuple(i.timestamp for i in instants[:2])
    latest = latest_archival_block(table)
    assert latest is not None
    assert latest.instant_time == "20990101000000000"


def test_a_new_archive_file_follows_the_latest(table: LocalStorage, tmp_path: Path) -> None:
    instants = list(load_timeline(table).completed())
    first = write_archived(table, [archived_entry(table, instants[0])], "20990101000000000")
    # an archive file written by another token (Hudi on HDFS, say) is not appended to
    other = tmp_path / ".hoodie/archived/.commits_.archive.2_0-0-0"
    other.write_bytes((tmp_path / first).read_bytes())
    third = write_archived(table, [archived_entry(table, instants[1])], "20990101000000001")
    assert third == ".hoodie/archived/.commits_.archive.3_1-0-1"
    assert [a.timestamp for a in read_archived(table)] == [
        instants[0].timestamp,
        instants[0].timestamp,
        instants[1].timestamp,
    ]


def test_clear_errors(table: LocalStorage) -> None:
    entry: dict[str, Any] = archived_entry(table, next(iter(load_timeline(table))))
    restore = Instant(_next_ts(table), RESTORE, State.COMPLETED)
    table.write(instant_path(restore), serialize("HoodieRestoreMetadata", SAMPLES["HoodieRestoreMetadata"]))
    with pytest.raises(InstantMetadataError, match="no field for restore metadata"):
        archived_entry(table, restore)

    missing = Instant("20000101000000000", DELTA_COMMIT, State.COMPLETED)
    with pytest.raises(InstantMetadataError, match="does not exist"):
        archived_entry(table, missing)

    broken = Instant("20000101000000001", DELTA_COMMIT, State.COMPLETED)
    table.write(instant_path(broken), b"{not json")
    with pytest.raises(InstantMetadataError, match=r"cannot archive 20000101000000001\.deltacommit.*not JSON"):
        archived_entry(table, broken)

    bad_clean = Instant("20000101000000002", CLEAN, State.COMPLETED)
    table.write(instant_path(bad_clean), b"Obj\x01garbage")
    with pytest.raises(
        InstantMetadataError, match=r"cannot archive 20000101000000002\.clean\[COMPLETED\]: .*corrupt Avro"
    ):
        archived_entry(table, bad_clean)

    with pytest.raises(InstantMetadataError, match="nothing to archive"):
        write_archived(table, [], "20990101000000000")
    entry["commitTime"] = 17
    with pytest.raises(InstantMetadataError, match="field commitTime expected string"):
        write_archived(table, [entry], "20990101000000000")


def test_empty_completed_file_gives_an_entry_without_metadata(table: LocalStorage) -> None:
    empty = Instant("20000101000000003", DELTA_COMMIT, State.COMPLETED)
    table.write(instant_path(empty), b"")
    entry = archived_entry(table, empty)
    assert entry["hoodieCommitMetadata"] is None
    write_archived(table, [entry], "20990101000000000")
    (got,) = read_archived(table)
    assert got == ArchivedInstant("20000101000000003", DELTA_COMMIT, State.COMPLETED)
    assert got.metadata == {}
