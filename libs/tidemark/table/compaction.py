"""Compaction: a plan (Hudi's Avro ``HoodieCompactionPlan`` in ``<ts>.compaction.requested``)
naming the file slices whose logs to fold in, and its execution: each slice merged exactly as a
snapshot read merges it, written as a new base file at the compaction instant, committed as
``<ts>.commit``. A snapshot read gives the same rows before and after.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from tidemark.errors import (
    CompactionTakenUpError,
    CorruptBaseFileError,
    EarlierWriteInflightError,
    InstantStateError,
    LogFormatError,
    PendingRestoreError,
    PendingRollbackError,
    TableError,
    TidemarkError,
)
from tidemark.logformat.file_name import BaseFileName, LogFileName
from tidemark.logformat.reader import LogFileReader
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import RECORD_KEY, avro_schema_json, latest_table_schema
from tidemark.table.base_file import open_base_file
from tidemark.table.concurrency import MODE_KEY, SINGLE_WRITER, ConcurrencyConfig
from tidemark.table.conflict import file_group, pending_clusterings
from tidemark.table.file_system_view import (
    BaseFile,
    CompactionOperation,
    FileSlice,
    LogFile,
    instant_metadata,
    path_in_partition,
    read_compaction_plan,
)
from tidemark.table.heartbeat import Heartbeat, heartbeat_status, runner_status
from tidemark.table.lock import TableLock, table_lock
from tidemark.table.markers import IOType, create_marker, delete_markers, delete_markers_of_committed
from tidemark.table.metadata_table import check_changeable
from tidemark.table.payload import rule_for_table
from tidemark.table.properties import read_properties
from tidemark.table.snapshot import SnapshotReader
from tidemark.table.write_client import (
    check_no_pending_restore,
    check_no_pending_rollback,
    marked_files,
    pending_rollbacks,
    remove_zombie_files,
    resume_pending_rollbacks,
    rollback,
    unfinished_restore,
)
from tidemark.table.write_handles import ParquetConfig, TaskContext, write_base_file
from tidemark.timeline import (
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    CommitMetadata,
    Instant,
    State,
    Timeline,
    WriteStat,
    load_timeline,
    request_new_instant,
    rollback_command,
    still_pending,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline import avro_metadata as avro

COMPACTION_WRITE_TOKEN = "0-0-0"
#: extraMetadata key of a compaction commit: the log blocks its merge skipped, by reason
SKIPPED_BLOCKS_KEY = "tidemark.skipped.log.blocks"

_logger = logging.getLogger("tidemark.compaction")


def check_merge_on_read(storage: Storage) -> None:
    """Refuse to compact a copy-on-write table: its writes rewrite base files and never leave log
    files, so there is nothing to compact."""
    props = read_properties(storage)
    if not props.is_merge_on_read:
        raise TableError(
            f"{storage.uri} is a {props.table_type} table: its writes rewrite base files and leave no log files, "
            "so there is nothing to compact (compaction is for MERGE_ON_READ tables)"
        )


def schedule_compaction(
    storage: Storage, take: Callable[[str], bool] | None = None, config: ConcurrencyConfig | None = None
) -> Instant | None:
    """Plan a compaction of every latest file slice that has log files; None when none has.

    With optimistic concurrency the plan is made under the table lock: two plans made at once
    would each miss the other and plan the same file groups twice (the second one's base file
    would hide the writes logged on the first one's slice, and Apache's view refuses a file
    group with two pending compactions). Single-writer mode takes no lock, as Hudi's: its one
    writer and its table services run one at a time (two compacts at once want optimistic
    concurrency).

    With optimistic concurrency, log files that a write still in flight is writing are left
    out: that write will lose its conflict with this plan and be rolled back, its log files
    deleted with it. In single-writer mode no commit-time check would refuse that write, and its
    log files would stay on the slice the plan replaces, hidden: while a write is pending,
    :class:`EarlierWriteInflightError` (Hudi's ScheduleCompactionActionExecutor refuses such a
    plan too). ``take``, as :func:`~tidemark.timeline.claim_instant_time`'s, must accept the
    plan's time (:func:`compact` starts the compaction's heartbeat there, before the plan is on
    the timeline)."""
    config = config or ConcurrencyConfig()
    check_changeable(storage, "schedule a compaction")
    _check_payload(storage)
    check_merge_on_read(storage)
    if not config.optimistic:
        return _schedule(storage, take, config)
    with TableLock(storage, config):
        return _schedule(storage, take, config)


def _schedule(storage: Storage, take: Callable[[str], bool] | None, config: ConcurrencyConfig) -> Instant | None:
    reader = SnapshotReader(storage)
    check_no_pending_restore(storage, reader.timeline)
    # a plan over the files of a write whose rollback stopped half-way would lose them later
    check_no_pending_rollback(storage, reader.timeline)
    if not config.optimistic:
        _check_no_earlier_write(storage, reader.timeline, config)
    # a write whose markers are damaged has its log files found by listing, as its rollback
    # finds them: the plan leaves out what that rollback would take
    in_flight = {
        marker.data_path
        for instant in reader.timeline.pending().write_instants()
        if instant.action != COMPACTION
        for marker in marked_files(storage, instant, "its log files are left out of the compaction plan")[0]
        if marker.io_type is IOType.APPEND
    }
    # a pending clustering rewrites its file groups from the slices it planned: as Hudi, leave them
    clustered = frozenset().union(*pending_clusterings(storage, reader.timeline).values())
    operations = []
    planned: dict[str, LogFile] = {}
    for fs in reader.view.latest_file_slices():
        log_files = [log for log in fs.log_files if log.path not in in_flight]
        if not log_files or fs.pending_compaction is not None or file_group(fs.partition_path, fs.file_id) in clustered:
            continue
        planned.update((log.path, log) for log in log_files)
        operations.append(
            (
                fs.partition_path,
                fs.file_id,
                fs.base_instant,
                fs.base_file.path.rsplit("/", 1)[-1] if fs.base_file else None,
                [log.path.rsplit("/", 1)[-1] for log in log_files],
                {
                    "TOTAL_LOG_FILES": float(len(log_files)),
                    "TOTAL_LOG_FILES_SIZE": float(sum(log.size for log in log_files)),
                },
            )
        )
    if not operations:
        return None
    _check_logs_whole(storage, reader.timeline, planned)
    plan = avro.compaction_plan(operations, None)
    timeline = load_timeline(storage)
    if not config.optimistic:
        # a write begun since the listing routed its records by a view without this plan; one
        # begun and completed since then logged onto slices the plan replaces, unplanned
        _check_no_earlier_write(storage, timeline, config)
        _check_no_write_completed_since(storage, reader.timeline, timeline)
    return request_new_instant(storage, timeline, COMPACTION, avro.serialize("HoodieCompactionPlan", plan), take=take)


def earliest_write_inflight(storage: Storage, timeline: Timeline) -> Instant | None:
    """The earliest pending write, which a compaction planned now would be later than: a commit,
    deltacommit or replacecommit (Hudi's commits timeline without its compactions). A pending
    clustering is none: it logs nothing, and its file groups are left out of the plan."""
    clusterings = pending_clusterings(storage, timeline)
    pending = timeline.pending().of_actions(COMMIT, DELTA_COMMIT, REPLACE_COMMIT)
    return next((i for i in pending if i.timestamp not in clusterings), None)


def _check_no_write_completed_since(storage: Storage, listed: Timeline, now: Timeline) -> None:
    before = {i.timestamp for i in listed.completed().of_actions(COMMIT, DELTA_COMMIT, REPLACE_COMMIT)}
    since = [i for i in now.completed().of_actions(COMMIT, DELTA_COMMIT, REPLACE_COMMIT) if i.timestamp not in before]
    if since:
        write = since[0]
        raise EarlierWriteInflightError(
            f"no compaction planned on {storage.uri}: the {write.action} {write.timestamp} completed while the "
            f"plan was made, and in single-writer mode ({MODE_KEY}={SINGLE_WRITER}) the plan would hide the log "
            "files it wrote; run `tidemark compact` again"
        )


def _check_no_earlier_write(storage: Storage, timeline: Timeline, config: ConcurrencyConfig) -> None:
    write = earliest_write_inflight(storage, timeline)
    if write is None:
        return
    status = heartbeat_status(storage, write.timestamp, config)
    command = rollback_command(storage, write.timestamp)
    if status.expired:
        then = f"its writer has stopped ({status.describe()}): roll it back (`{command}`), then"
    else:
        then = (
            f"its writer runs ({status.describe()}); should it have stopped, roll the write back "
            f"(`{command}`) once no heartbeat has come for {config.heartbeat_expiry_ms} ms. Once it has ended,"
        )
    raise EarlierWriteInflightError(
        f"no compaction planned on {storage.uri}: the {write.action} {write.timestamp} is pending, and in "
        f"single-writer mode ({MODE_KEY}={SINGLE_WRITER}) a compaction planned before it ends would hide the log "
        f"files it writes (Hudi: the earliest write inflight must be later than the compaction); {then} run "
        "`tidemark compact` again"
    )


def _check_logs_whole(storage: Storage, timeline: Timeline, planned: Mapping[str, LogFile]) -> None:
    """Refuse a plan over a slice that lost committed log blocks: a log file shorter than the
    deltacommit that wrote it recorded (truncated or emptied), one that is gone, or damage inside
    the bytes a deltacommit wrote. Readers skip such blocks like a failed attempt's torn one;
    compacting would make the loss permanent once the cleaner removes the old slice."""
    since = min(log.name.base_instant for log in planned.values())
    slices = {(path.rpartition("/")[0], log.name.file_id, log.name.base_instant) for path, log in planned.items()}
    written: dict[str, list[tuple[int, int, str]]] = {}  # log path → the byte ranges commits wrote
    for instant in timeline.completed().of_actions(DELTA_COMMIT):
        if instant.timestamp < since:  # a log file is written after its slice's base instant
            continue
        for stat in instant_metadata(storage, instant).write_stats():
            path = stat.path or ""
            if len(stat.log_files) > 1:  # rolled over: the stat's size is no one file's
                continue
            log = planned.get(path)
            if log is None:
                if _in_slices(path, slices) and not storage.exists(path):
                    raise TableError(
                        f"{storage.full_uri(path)}, which the deltacommit {instant.timestamp} wrote, is gone: its "
                        "committed log blocks are missing, and a compaction would make that loss permanent. Put "
                        "the file back (from a backup or copy) before compacting"
                    )
                continue
            if log.size < stat.file_size:
                raise TableError(
                    f"{storage.full_uri(log.path)} is {log.size} bytes, but the deltacommit {instant.timestamp} that "
                    f"wrote it recorded {stat.file_size}: committed log blocks are missing from it, and a "
                    "compaction would make that loss permanent. Put the file back whole (from a backup or "
                    "copy) before compacting"
                )
            if stat.log_offset is not None:
                written.setdefault(path, []).append((stat.log_offset, stat.file_size, instant.timestamp))
    for path, ranges in written.items():
        for block in LogFileReader(storage.open_input(path)).blocks():
            damage = block.corrupt
            if damage is None:
                continue
            for start, end, instant_time in ranges:
                if damage.start < end and start < damage.end:
                    raise TableError(
                        f"{storage.full_uri(path)} bytes {damage.start}..{damage.end} are damaged ({damage.reason}), "
                        f"inside the log blocks the deltacommit {instant_time} wrote (bytes {start}..{end}): readers "
                        "skip them, and a compaction would make that loss permanent. Put the file back whole (from "
                        "a backup or copy) before compacting"
                    )


def _in_slices(path: str, slices: set[tuple[str, str, str]]) -> bool:
    partition, _, name = path.rpartition("/")
    if not LogFileName.is_log_file(name):
        return False  # a base file an insert wrote in the deltacommit
    parsed = LogFileName.parse(name)
    return (partition, parsed.file_id, parsed.base_instant) in slices


@dataclass(frozen=True)
class CompactedSlice:
    """What compacting one file slice wrote (its base file's write stat) and what its merge
    skipped; gathered on the committer's side, wherever each slice was compacted."""

    stat: WriteStat
    #: log blocks skipped, by reason (the keys of ``SKIPPED_BLOCKS_KEY``'s record)
    skipped: tuple[tuple[str, int], ...]
    #: the Avro schema of the merged rows, for a table whose commits recorded none
    schema_json: str | None = None


def start_compaction(storage: Storage, requested: Instant) -> tuple[Instant, list[CompactionOperation]]:
    """Checks, the plan's operations, and the compaction inflight (as it was, when resuming).

    Should another process have started the plan meanwhile (this runner stalled past its
    heartbeat's expiry before starting it), nothing is written: a compaction that process
    completed is returned completed, with no operations (the caller runs and commits nothing);
    one it rolled back is an :class:`InstantStateError`; one it runs, or ran until it stopped,
    a :class:`CompactionTakenUpError`, for :func:`compact` to leave it to that process."""
    if requested.action != COMPACTION or requested.is_completed:
        raise InstantStateError(f"{requested} is not a pending compaction")
    check_changeable(storage, "run a compaction")
    _check_payload(storage)
    try:
        operations = read_compaction_plan(storage, requested)
        inflight = requested if requested.state is State.INFLIGHT else transition_to_inflight(storage, requested)
    except InstantStateError:
        current = load_timeline(storage).find(requested.timestamp, COMPACTION)
        if current is None:
            raise InstantStateError(
                f"compaction {requested.timestamp} on {storage.uri} was rolled back by another process before this "
                "one started it; nothing was written, and the next `tidemark compact` plans anew"
            ) from None
        if current.is_completed:
            _completed_elsewhere(storage, current)
            return current, []
        if current.state is requested.state:
            raise  # not another process's doing
        # both processes now beat the one heartbeat file, so this one cannot tell whether that
        # process still runs: it leaves the compaction to that process, or to the next compact
        # once the heartbeat has expired; two runners writing one plan at once is what heartbeats avoid
        raise CompactionTakenUpError(
            f"compaction {requested.timestamp} on {storage.uri} was started by another process while this one "
            "stalled before starting it (its heartbeat had expired for that process); left to it. Should that "
            "process have stopped, `tidemark compact` finishes it once its heartbeat has expired"
        ) from None
    return inflight, operations


def compact_slice(
    reader: SnapshotReader, compaction_instant: str, op: CompactionOperation, parquet: ParquetConfig | None = None
) -> CompactedSlice | None:
    """Merge one planned file slice as a snapshot read merges it and write the result as the new
    base file. The file's name is the same in every attempt (the compaction's write token), so
    a retried task replaces what an earlier attempt wrote instead of leaving a second file.

    None, writing nothing, when the compaction is no longer this run's: another process completed
    or rolled it back (this runner stalled past its heartbeat's expiry); :func:`commit_compaction`
    then says which."""
    storage = reader.storage
    ctx = TaskContext(compaction_instant, 0, 0, 0, reader.properties.populate_meta_fields)
    base_path = path_in_partition(op.partition_path, op.base_file) if op.base_file else None
    fs = FileSlice(
        op.partition_path,
        op.file_id,
        op.base_instant,
        None if base_path is None else _base(base_path, storage.size(base_path)),
        tuple(_log(storage, path_in_partition(op.partition_path, name)) for name in op.log_files),
    )
    before = dataclasses.replace(reader.stats)
    merged = reader.read_slice(fs)
    after = reader.stats
    name = BaseFileName(op.file_id, COMPACTION_WRITE_TOKEN, compaction_instant).name
    path = path_in_partition(op.partition_path, name)
    # not this run's any more when another process took it up once this run's heartbeat had
    # expired (and completed or rolled it back): the same name as that process's committed file,
    # which writing over would change under its readers (and its size and bytes from its commit)
    if not still_pending(storage, Instant(compaction_instant, COMPACTION, State.INFLIGHT)):
        return None
    create_marker(storage, compaction_instant, path, IOType.CREATE)
    if merged is None:
        # nothing left in the slice (every block rolled back or deleted): an empty base file
        # that still has the table's columns, which readers expect of every base file
        template = _arrow_schema(reader)
        merged = pa.table({}) if template is None else template.empty_table()
    if "_hoodie_file_name" in merged.column_names:
        idx = merged.column_names.index("_hoodie_file_name")
        merged = merged.set_column(idx, "_hoodie_file_name", pa.array([name] * merged.num_rows, pa.string()))
    schema_json = (
        avro_schema_json(merged.schema, reader.properties.name, with_meta_fields=False) if merged.num_columns else None
    )
    # the file's own Avro schema has the meta fields where the table stores them (Hudi's writer)
    file_schema = (
        avro_schema_json(merged.schema, reader.properties.name, with_meta_fields=RECORD_KEY in merged.column_names)
        if merged.num_columns
        else None
    )
    size = write_base_file(storage, path, merged, file_schema, parquet)
    stat = WriteStat(
        file_id=op.file_id,
        path=path,
        partition_path=op.partition_path,
        prev_commit=op.base_instant,
        num_writes=merged.num_rows,
        # what the logs changed in the base file, as Hudi's compactor counts through its merge handle
        num_update_writes=after.updated_rows - before.updated_rows,
        num_deletes=after.deleted_rows - before.deleted_rows,
        num_inserts=after.inserted_rows - before.inserted_rows,
        total_write_bytes=size,
        file_size=size,
        extra={
            "totalLogRecords": after.log_records - before.log_records,
            "totalUpdatedRecordsCompacted": after.log_keys - before.log_keys,
            "totalLogSizeCompacted": sum(log.size for log in fs.log_files),
            "totalLogFilesCompacted": len(op.log_files),
            "totalLogBlocks": after.log_blocks_read - before.log_blocks_read,
            "totalCorruptLogBlock": after.corrupt_blocks - before.corrupt_blocks,
            "totalRollbackBlocks": after.rolled_back_blocks - before.rolled_back_blocks,
            "tidemarkReconciledBlocks": after.reconciled_blocks - before.reconciled_blocks,
            "tidemarkWriteToken": ctx.write_token,
        },
    )
    skipped = (
        ("reconciled", after.reconciled_blocks - before.reconciled_blocks),
        ("corrupt", after.corrupt_blocks - before.corrupt_blocks),
        ("uncommitted", after.uncommitted_blocks - before.uncommitted_blocks),
        ("rolledBack", after.rolled_back_blocks - before.rolled_back_blocks),
    )
    return CompactedSlice(stat, skipped, schema_json)


def commit_compaction(
    storage: Storage,
    requested: Instant,
    inflight: Instant,
    compacted: Sequence[CompactedSlice | None],
    config: ConcurrencyConfig | None = None,
) -> Instant:
    """Complete the compaction with the write stats of every slice of its plan. A slice that is
    None (:func:`compact_slice` found the compaction no longer this run's) commits nothing: the
    other process's commit is returned, or its rollback is an :class:`InstantStateError`.

    With optimistic concurrency the completing write is made under the table lock, which a
    rollback of the compaction (`tidemark rollback`, a restore's) holds while it deletes its
    files: a runner stalled past its heartbeat's expiry finds the compaction rolled back, or
    being taken back by an unfinished restore or rollback, and completes nothing."""
    written = [c for c in compacted if c is not None]
    if len(written) < len(compacted):
        done = _taken_from_this_run(storage, requested, written)
        if done is None:
            raise InstantStateError(
                f"compaction {requested.timestamp} on {storage.uri} is no longer inflight: another process took it "
                f"back (or is rolling it back) while this one ran; this one stopped, its {len(written)} base files "
                "left to that process"
            )
        return done
    # the table's schema, not one derived from what this compaction happened to merge
    schema_json = latest_table_schema(storage) or next((c.schema_json for c in written if c.schema_json), None)
    by_partition: dict[str, list[WriteStat]] = {}
    for c in written:
        by_partition.setdefault(c.stat.partition_path or "", []).append(c.stat)
    skipped = {"reconciled": 0, "corrupt": 0, "uncommitted": 0, "rolledBack": 0}
    for c in written:
        for reason, count in c.skipped:
            skipped[reason] += count
    metadata = CommitMetadata(
        partition_to_write_stats={p: tuple(v) for p, v in by_partition.items()},
        compacted=True,
        extra_metadata={**({"schema": schema_json} if schema_json else {}), SKIPPED_BLOCKS_KEY: json.dumps(skipped)},
        operation_type="COMPACT",
    )
    try:
        with table_lock(storage, config or ConcurrencyConfig()) as lock:
            _check_not_taken_back(storage, requested.timestamp)
            if lock is not None:
                lock.check_held()  # fencing: a holder whose lease was taken over stops here
            done = transition_to_completed(
                storage, inflight, metadata.to_bytes(), finished_by=f"tidemark compact {storage.uri}"
            )
    except InstantStateError:
        # another process ran the plan too (this one's heartbeat had expired for it), or rolled it back
        taken = _taken_from_this_run(storage, requested, written)
        if taken is None:
            raise
        return taken
    delete_markers_of_committed(storage, requested.timestamp, "compaction")
    return done


def _check_not_taken_back(storage: Storage, compaction_instant: str) -> None:
    """Refuse to complete a compaction that an unfinished restore (begun while it ran: a
    compaction is not started during one) or a rollback stopped half-way is taking back: its
    files are theirs to delete."""
    timeline = load_timeline(storage)
    restore = unfinished_restore(storage, timeline)
    if restore is not None:
        raise PendingRestoreError(
            f"compaction {compaction_instant} on {storage.uri} was not completed: {restore} began while it ran "
            f"and rolls it back; {restore.advice}"
        )
    for stopped in pending_rollbacks(storage, timeline):
        if stopped.target.timestamp == compaction_instant:
            raise PendingRollbackError(
                f"compaction {compaction_instant} on {storage.uri} was not completed: the rollback "
                f"{stopped.instant.timestamp} of it stopped half-way; finish it with "
                f"`{rollback_command(storage, compaction_instant)}`"
            )


def _taken_from_this_run(storage: Storage, requested: Instant, written: Sequence[CompactedSlice]) -> Instant | None:
    """The compaction as another process left it, once this run found it was not its own any
    more: that process's commit (the same plan merged into the same file names: those committed
    files are kept as they are); None while it is still pending (being rolled back). A
    compaction that process rolled back is an :class:`InstantStateError`: its rollback deleted the
    base files it found, and the ones this run wrote (``written``) go too, with the markers."""
    current = load_timeline(storage).find(requested.timestamp, COMPACTION)
    if current is None:
        for c in written:
            if c.stat.path:
                storage.delete(c.stat.path)
        delete_markers(storage, requested.timestamp)
        raise InstantStateError(
            f"compaction {requested.timestamp} on {storage.uri} was rolled back by another process while this "
            f"one ran; the {len(written)} base files it wrote are deleted, and the next `tidemark compact` "
            "plans anew"
        ) from None
    if not current.is_completed:
        return None
    done = _completed_elsewhere(storage, current)
    delete_markers_of_committed(storage, requested.timestamp, "compaction")
    return done


def _completed_elsewhere(storage: Storage, completed: Instant) -> Instant:
    _logger.warning(
        "compaction %s on %s was completed by another process while this one ran; that commit stands",
        completed.timestamp,
        storage.uri,
    )
    return completed


def run_compaction(
    storage: Storage,
    requested: Instant,
    parquet: ParquetConfig | None = None,
    config: ConcurrencyConfig | None = None,
) -> Instant:
    """Execute a scheduled compaction (resuming one left inflight) in this process and commit it
    (under the table lock that ``config`` says). No heartbeat: :func:`compact` beats for the
    compactions it runs."""
    inflight, operations = start_compaction(storage, requested)
    if inflight.is_completed:  # by another process
        return inflight
    reader = SnapshotReader(storage)
    compacted: list[CompactedSlice | None] = []
    for op in operations:
        compacted.append(compact_slice(reader, requested.timestamp, op, parquet))
        if compacted[-1] is None:  # no longer this run's: nothing more is written
            break
    return commit_compaction(storage, requested, inflight, compacted, config)


def _check_payload(storage: Storage) -> None:
    """A compaction writes merged rows: refuse it, before any change, for a payload class or
    merger tidemark does not implement (a read only warns)."""
    rule_for_table(read_properties(storage)).require_supported(storage.uri, "compact")


def _arrow_schema(reader: SnapshotReader) -> pa.Schema | None:
    """The Arrow schema of a base file of the table, if it has any."""
    for fs in reader.view.latest_file_slices():
        if fs.base_file is not None:
            with open_base_file(reader.storage, fs.base_file.path) as f:  # the footer only
                return f.schema_arrow
    return None


def _base(path: str, size: int) -> BaseFile:
    return BaseFile(path, BaseFileName.parse(path.rsplit("/", 1)[-1]), size)


def _log(storage: Storage, path: str) -> LogFile:
    return LogFile(path, LogFileName.parse(path.rsplit("/", 1)[-1]), storage.size(path))


#: runs a scheduled compaction and commits it: :func:`run_compaction`, or one on Spark
CompactionRunner = Callable[[Storage, Instant], Instant]


def compact(
    storage: Storage, config: ConcurrencyConfig | None = None, run: CompactionRunner | None = None
) -> Instant | None:
    """Schedule and run a compaction (finishing any pending one, then any pending rollback,
    first); the last one completed, None when nothing was to do.

    With optimistic concurrency the plan is made under the table lock: a writer's commit-time
    check and the plan's listing of log files then never interleave, so a write either is in the
    plan's view or finds the plan and loses (its log files would be left behind the new slice),
    and of two compacts planning at once the second sees the first's plan. In single-writer mode
    no plan is made while a write is pending (a warning says which, and what to do; see
    :func:`schedule_compaction`).

    A compaction runs under a heartbeat, as a write does (``.hoodie/.heartbeat/<instant>``, created
    before its plan is on the timeline): a pending compaction whose heartbeat is live is another
    process's to finish and is left to it (a warning says so); one whose runner died (its heartbeat
    expired) or that has none (a plan waiting for a runner) is taken up here."""
    config = config or ConcurrencyConfig()
    run = run or functools.partial(run_compaction, config=config)
    timeline = load_timeline(storage)
    check_changeable(storage, "compact", timeline=timeline)
    _check_payload(storage)
    check_merge_on_read(storage)
    check_no_pending_restore(storage, timeline)  # before the lock: a refusal changes nothing
    # what an earlier compaction or write left after its commit (a refused delete), as a write does
    remove_zombie_files(storage)
    finished = []
    for pending in timeline.pending().of_actions(COMPACTION):
        taken = _take_up(storage, pending, config)
        done = None if taken is None else _run_beating(storage, *taken, run)
        if done is not None:
            finished.append(done)
    # a rollback that stopped half-way is finished before planning (the pending compactions it may
    # have waited for have just run): a plan is never made over files it is still to delete
    resume_pending_rollbacks(storage)
    heartbeats: list[Heartbeat] = []

    def start_heartbeat(ts: str) -> bool:
        heartbeat = Heartbeat(storage, ts, config)
        if heartbeat.claim():  # another process's heartbeat there: the time is taken
            heartbeats.append(heartbeat)
            return True
        return False

    try:
        requested = schedule_compaction(storage, start_heartbeat, config)
    except EarlierWriteInflightError as e:
        # not a failure: the plan is for the next compact, once that write has ended (Hudi 1.x skips it too)
        _logger.warning("%s", e)
        return finished[-1] if finished else None
    except BaseException:
        for heartbeat in heartbeats:
            heartbeat.stop()
        raise
    if requested is None:
        return finished[-1] if finished else None
    try:
        done = _run_beating(storage, requested, heartbeats[-1], run)
    except (CorruptBaseFileError, LogFormatError) as e:
        # a damaged file in the plan fails it at every run until repaired: the plan is taken back,
        # so the table is as it was (unless a write logged on top of it meanwhile)
        try:
            rollback(storage, requested.timestamp)
        except TidemarkError:
            raise e from None
        raise type(e)(f"{e} (the compaction {requested.timestamp} planned on it was taken back)") from e
    if done is not None:
        finished.append(done)
    return finished[-1] if finished else None


def _take_up(storage: Storage, pending: Instant, config: ConcurrencyConfig) -> tuple[Instant, Heartbeat] | None:
    """Start this process's heartbeat for a pending compaction: the compaction as it is now and
    the heartbeat, or None when another process runs it (its heartbeat is live) or finished it
    meanwhile. Under the table lock (optimistic concurrency), so that of two processes finding it
    pending exactly one runs it."""

    def take() -> tuple[Instant, Heartbeat] | None:
        current = load_timeline(storage).find(pending.timestamp, COMPACTION)
        if current is None or current.is_completed:
            return None
        status = runner_status(storage, current.timestamp, config)
        if status is not None:
            _logger.warning(
                "compaction %s on %s is being run by another process (%s); left to it. "
                "Should its runner have stopped, `tidemark compact` takes it over (or `tidemark rollback` "
                "takes it back) once no heartbeat has come for %d ms: in %.1f s at the earliest",
                current.timestamp,
                storage.uri,
                status.describe(),
                config.heartbeat_expiry_ms,
                # a beat dated ahead of this clock counts from then
                (status.ahead_ms + config.heartbeat_expiry_ms - status.age_ms) / 1000,
            )
            return None
        return current, Heartbeat(storage, current.timestamp, config).start()

    if not config.optimistic:
        return take()
    with TableLock(storage, config):
        return take()


def _run_beating(storage: Storage, requested: Instant, heartbeat: Heartbeat, run: CompactionRunner) -> Instant | None:
    """Run a compaction while its heartbeat beats; the heartbeat goes when the run ends, however:
    a compaction that failed is pending for the next run to finish at once, not after the expiry.
    None when another process started it first (this one stalled): it is left to that process,
    and the heartbeat file, which that process beats too, stays."""
    try:
        done = run(storage, requested)
    except CompactionTakenUpError as e:
        heartbeat.stop(delete=False)
        _logger.warning("%s", e)
        return None
    except BaseException:
        heartbeat.stop()
        raise
    heartbeat.stop()
    return done
