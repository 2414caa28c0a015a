"""Restore to a savepoint: roll back, newest first, every write instant after it (compactions
included), under a ``restore`` instant with Hudi's Avro ``HoodieRestoreMetadata``."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from tidemark.errors import InstantStateError, LiveWriterError
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.conflict import pending_clusterings
from tidemark.table.file_system_view import FileSystemView, archived_write_paths, cleaned_file
from tidemark.table.heartbeat import heartbeat_status, runner_status
from tidemark.table.lock import check_still_held, table_lock
from tidemark.table.metadata_table import check_changeable
from tidemark.table.write_client import (
    RollbackPreview,
    check_no_pending_restore,
    pending_rollbacks,
    plan_rollback,
    read_restore_plan,
    resume_pending_rollbacks,
    rollback,
    rollbacks_by_target,
    unfinished_restore,
)
from tidemark.timeline import (
    CLEAN,
    COMPACTION,
    RESTORE,
    SAVEPOINT,
    Instant,
    State,
    Timeline,
    instant_path,
    left_pending,
    load_timeline,
    read_instant,
    request_new_instant,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.instant import check_timestamp


@dataclass(frozen=True)
class RestorePreview:
    """What a restore to ``savepoint`` would do (a dry run): the rollbacks, newest first, each
    judged on the table as the rollbacks before it would leave it."""

    savepoint: str
    rollbacks: tuple[RollbackPreview, ...]
    #: the unfinished restore the real run finishes from its plan, if any
    resumes: Instant | None = None


@dataclass(frozen=True)
class RestoreResult:
    """The completed restore instant."""

    instant: Instant
    #: another restore to the same savepoint running at the same time (a retried Job, a command
    #: run again) completed it first: the table is restored all the same
    completed_by_another: bool = False


def _writes_after(timeline: Timeline, savepoint: str) -> list[tuple[str, str]]:
    """(time, action) of the write instants after ``savepoint``, newest first: only the latest
    completed write can be rolled back."""
    return [(i.timestamp, i.action) for i in reversed(timeline.write_instants().instants) if i.timestamp > savepoint]


def _check_no_live_writer(storage: Storage, timeline: Timeline, savepoint: str, config: ConcurrencyConfig) -> None:
    """Refuse to restore under a write (or compaction) after the savepoint whose writer is still
    running. A pending clustering (Apache's async clustering plans it, a job runs it later) is no
    write: without a live heartbeat of a process running it, it is rolled back at once, as Hudi's
    restore rolls back pending clusterings, not held back as a write that may still be starting."""
    clusterings = pending_clusterings(storage, timeline)
    for instant in timeline.pending().write_instants():
        if instant.timestamp <= savepoint:
            continue
        if instant.action == COMPACTION or instant.timestamp in clusterings:
            service = "compaction" if instant.action == COMPACTION else "clustering"
            runner = runner_status(storage, instant.timestamp, config)
            if runner is not None:
                raise LiveWriterError(
                    f"{storage.uri}: cannot restore to {savepoint} while {service} {instant.timestamp} is being run "
                    f"({runner.describe()}); {runner.rollback_advice(config, 'stop that process first')}"
                )
        else:
            status = heartbeat_status(storage, instant.timestamp, config)
            if not status.expired:
                raise LiveWriterError(
                    f"{storage.uri}: cannot restore to {savepoint} while write {instant.timestamp} is still running "
                    f"({status.describe()}); {status.rollback_advice(config, 'stop that writer first')}"
                )


def _check_savepoint(storage: Storage, timeline: Timeline, savepoint: str) -> None:
    """Refuse a restore to no savepoint. The unfinished restore to ``savepoint`` is finished from
    its plan, which names the writes to roll back, with the savepoint deleted since too (earlier
    versions let it be deleted): refused, it would leave the table refusing every change for good."""
    pending = unfinished_restore(storage, timeline)
    if pending is not None and pending.savepoint == savepoint:
        return
    if timeline.completed().of_actions(SAVEPOINT).find(savepoint) is None:  # the timeline just read
        raise InstantStateError(f"{storage.uri}: no savepoint at {savepoint} to restore to")


def _check_savepoint_kept(storage: Storage, timeline: Timeline, savepoint: str) -> None:
    """Refuse, before any change, a restore to a savepoint whose snapshot a clean has partly
    deleted (one planned before the savepoint was made, which did not know it): it would roll
    back every later write onto the files left, and report success on a table short of rows."""
    if not any(c.timestamp > savepoint for c in timeline.of_actions(CLEAN)):
        return  # what a clean before it deleted, its snapshot did not need: no listing needed
    found = cleaned_file(FileSystemView(storage, timeline.as_of(savepoint)), timeline, savepoint)
    if found is not None:
        clean, path, _ = found
        raise InstantStateError(
            f"{storage.uri}: cannot restore to the savepoint {savepoint}: the clean {clean} deleted {path}, which "
            f"its snapshot needs; nothing was rolled back (delete the savepoint: `tidemark savepoint delete "
            f"{storage.uri} {savepoint}`)"
        )


def _archived_file_after(storage: Storage, savepoint: str) -> tuple[str, str] | None:
    """(write, file) of a completed write after ``savepoint`` that is archived (archival beyond
    savepoints: ``hoodie.archive.beyond.savepoint``) and whose file is still on storage; None when
    there is none. The archive is read newest block first, only back to ``savepoint``."""
    for write, paths in archived_write_paths(storage, savepoint):
        if write > savepoint:
            for path in sorted(paths):
                if storage.exists(path):
                    return write, path
    return None


def _check_restorable(storage: Storage, timeline: Timeline, savepoint: str) -> None:
    """Refuse, before any change, a new restore to a savepoint whose commit or files are gone,
    or one that would leave an archived later write's files in place."""
    if timeline.completed().write_instants().find(savepoint) is None:
        # a restore to an earlier savepoint rolled its commit back: restoring to it would
        # keep that earlier state and report this one
        raise InstantStateError(
            f"{storage.uri}: the savepoint {savepoint} holds a commit that is no longer on the timeline "
            f"(a restore to an earlier savepoint rolled it back, or a `tidemark savepoint delete` of it that stopped "
            f"archived it); delete it with "
            f"`tidemark savepoint delete {storage.uri} {savepoint}`"
        )
    # a clean since cannot take more of it, as it keeps what a savepoint keeps
    _check_savepoint_kept(storage, timeline, savepoint)
    # a restore rolls back the writes on the active timeline (as Hudi's); an archived one's files
    # would stay, and read again once a write after the restore moves the timeline's start past them
    archived = _archived_file_after(storage, savepoint)
    if archived is not None:
        write, path = archived
        raise InstantStateError(
            f"{storage.uri}: cannot restore to the savepoint {savepoint}: the write {write} after it is archived "
            f"(hoodie.archive.beyond.savepoint) and its file {path} is still there, which a restore, rolling back "
            f"only the writes on the active timeline, would leave to be read again; nothing was rolled back and "
            f"the table is unchanged (a restore to a savepoint is possible only while archival has not passed a "
            f"write after it that still has files; its data still reads with time travel: as of {savepoint})"
        )


def _check_unstarted_plan(
    storage: Storage, timeline: Timeline, plan: Instant, savepoint: str, concurrency: ConcurrencyConfig
) -> None:
    """Refuse to carry out a restore plan that nothing was rolled back for yet, when a clean has
    deleted files of its savepoint's snapshot, and remove it. Only a restore that lost the table
    lock and could not take its plan back leaves one (a clean keeps what an unfinished restore
    needs once its plan is on the timeline): finished, it would roll every later write back onto
    the files left, and report success on a table short of rows."""
    with table_lock(storage, concurrency):
        try:
            _check_savepoint_kept(storage, timeline, savepoint)
        except InstantStateError as e:
            storage.delete(instant_path(plan))
            raise InstantStateError(
                f"{e}; the restore plan {plan.timestamp}, written by a restore that had lost the table lock, "
                "was removed: the table is as it was"
            ) from None


def restore(storage: Storage, savepoint: str, concurrency: ConcurrencyConfig | None = None) -> RestoreResult:
    """Bring the table back to the savepoint ``savepoint``: everything written after it is rolled
    back (each as a rollback instant), then the restore completes.

    The plan (Hudi's Avro ``HoodieRestorePlan``) is written first; a restore that stopped half-way
    is finished by running it again, instead of staying pending (which would hold archival back
    for good). A restore is refused before it starts while a write after the savepoint is still
    running (its heartbeat is fresh): stop that writer, or wait for its heartbeat to expire. With
    optimistic concurrency that check and the plan, and each rollback, are made under the table
    lock, which a write's commit holds: no write completes while its files are deleted.

    Two restores to one savepoint at once (a restore has no heartbeat, so neither can tell
    whether the other's process is alive) both carry out the one plan, each rollback under the
    lock; the one completing it second says so in its result."""
    concurrency = concurrency or ConcurrencyConfig()
    timeline = load_timeline(storage)
    check_changeable(storage, "restore", timeline=timeline, writes_rows=False)
    check_timestamp(savepoint)
    _check_savepoint(storage, timeline, savepoint)
    started = time.monotonic()
    pending = timeline.pending().of_actions(RESTORE).instants
    # the plan's restore run again finishes it: a write is refused while it is unfinished, and a
    # rollback alone (of one of its steps) leaves it unfinished
    finished_by = f"tidemark restore {storage.uri} {savepoint}"
    if not pending:
        # a restore that stopped owns the rollbacks of its plan; a new one must not start under a
        # writer that is still running. Judged before the lock, so that a refusal waits for
        # nothing, and again under it: while this waited, the savepoint may have been deleted
        # and a clean taken its files, and a restore to it would empty the table
        _check_restorable(storage, timeline, savepoint)
        # judged and planned under the table lock, which a write's commit holds: a write either
        # completed before the plan (and is rolled back with the rest) or finds this restore at
        # its commit and loses; a writer stalled inside its commit is waited for
        with table_lock(storage, concurrency) as lock:
            before, timeline = timeline, load_timeline(storage)
            # another restore planned while this one waited: finished below with it, from its
            # plan (one to another savepoint is refused there, naming it)
            pending = timeline.pending().of_actions(RESTORE).instants
            if not pending:
                done = _completed_meanwhile(storage, before, timeline, savepoint)
                if done is not None:
                    return RestoreResult(done, completed_by_another=True)
                _check_savepoint(storage, timeline, savepoint)
                _check_restorable(storage, timeline, savepoint)
                _check_no_live_writer(storage, timeline, savepoint, concurrency)
                to_roll_back = _writes_after(timeline, savepoint)
                content = avro.serialize(
                    "HoodieRestorePlan",
                    {
                        "instantsToRollback": [{"commitTime": ts, "action": action} for ts, action in to_roll_back],
                        "version": 2,
                        "savepointToRestoreTimestamp": savepoint,
                    },
                )
                what = f"the restore to savepoint {savepoint}"
                check_still_held(lock, what)
                current = request_new_instant(storage, timeline, RESTORE, content)
                check_still_held(lock, what, undo=lambda: storage.delete(instant_path(current)))
    if pending:  # left by a stopped run, or being carried out by another run
        current = pending[0]
        plan = read_restore_plan(storage, current)
        if plan.get("savepointToRestoreTimestamp") not in (None, savepoint):
            check_no_pending_restore(storage, timeline)  # names the savepoint to finish first
        to_roll_back = [(str(i["commitTime"]), str(i["action"])) for i in plan.get("instantsToRollback") or []]  # type: ignore[attr-defined]
        if not plan:  # no plan recorded: what is still on the timeline after the savepoint
            to_roll_back = _writes_after(timeline, savepoint)
        if current.state is State.REQUESTED:
            _check_unstarted_plan(storage, timeline, current, savepoint, concurrency)
    # from its first state file on, the restore stays pending when a step fails, and says so
    with left_pending(storage, f"the restore {current.timestamp} to savepoint {savepoint}", current, finished_by):
        return _carry_out_restore(storage, current, to_roll_back, started, finished_by, concurrency)


def _completed_meanwhile(storage: Storage, before: Timeline, now: Timeline, savepoint: str) -> Instant | None:
    """The restore to ``savepoint`` that another run planned and completed between the timeline
    ``before`` and the timeline ``now`` (while this one waited for the lock), when nothing was
    written after the savepoint since: that is the restore asked for, done. None otherwise."""
    if _writes_after(now, savepoint):
        return None
    known = {i.timestamp for i in before.of_actions(RESTORE)}
    for done in reversed(now.completed().of_actions(RESTORE).instants):
        if (
            done.timestamp not in known
            and read_restore_plan(storage, done).get("savepointToRestoreTimestamp") == savepoint
        ):
            return done
    return None


def preview_restore(storage: Storage, savepoint: str, concurrency: ConcurrencyConfig | None = None) -> RestorePreview:
    """What :func:`restore` to ``savepoint`` would roll back and delete, changing nothing: the
    same refusals, judged without the table lock (the real run judges them again under it), but
    for what refuses any change to the table (a metadata table, see :func:`check_changeable`),
    which is left to the caller, to say and still show the plan."""
    concurrency = concurrency or ConcurrencyConfig()
    timeline = load_timeline(storage)
    check_timestamp(savepoint)
    _check_savepoint(storage, timeline, savepoint)
    pending = timeline.pending().of_actions(RESTORE).instants
    resumes = pending[0] if pending else None
    if resumes is not None:
        plan = read_restore_plan(storage, resumes)
        if plan.get("savepointToRestoreTimestamp") not in (None, savepoint):
            check_no_pending_restore(storage, timeline)
        planned = [(str(i["commitTime"]), str(i["action"])) for i in plan.get("instantsToRollback") or []]  # type: ignore[attr-defined]
        on_timeline = {(i.timestamp, i.action) for i in timeline.write_instants()}
        to_roll_back = [w for w in planned if w in on_timeline] if plan else _writes_after(timeline, savepoint)
    else:
        _check_restorable(storage, timeline, savepoint)
        _check_no_live_writer(storage, timeline, savepoint, concurrency)
        to_roll_back = _writes_after(timeline, savepoint)
    # a restore finishes the rollbacks its stopped run had begun first, from their plans
    rollbacks = [p.preview(storage) for p in pending_rollbacks(storage, timeline)]
    begun = {p.target.timestamp for p in rollbacks}
    left = timeline
    for ts, action in to_roll_back:
        if ts in begun:
            continue
        judged = plan_rollback(storage, left, ts, concurrency, own=True, action=action)
        # judged as the rollbacks before it leave the table: what they delete is gone by then (a
        # log file a write left on a compaction is its own rollback's, not the compaction's too)
        gone = {path for r in rollbacks for path in r.deleted_files}
        rollbacks.append(
            replace(
                judged,
                deleted_files=tuple(p for p in judged.deleted_files if p not in gone),
                rollback_log_files=tuple(p for p in judged.rollback_log_files if p not in gone),
            )
        )
        left = Timeline(tuple(i for i in left.instants if (i.timestamp, i.action) != (ts, action)))
    return RestorePreview(savepoint, tuple(rollbacks), resumes)


def _carry_out_restore(
    storage: Storage,
    instant: Instant,
    to_roll_back: list[tuple[str, str]],
    started: float,
    finished_by: str,
    concurrency: ConcurrencyConfig,
) -> RestoreResult:
    inflight = instant.with_state(State.INFLIGHT)
    if instant.state is State.REQUESTED:
        try:
            transition_to_inflight(storage, instant, read_instant(storage, instant))
        except InstantStateError:
            # another run of this restore made it inflight first: carried out by both, each
            # rollback under the lock and judged again there
            if not storage.exists(instant_path(inflight)):
                raise
    # a rollback the stopped restore had begun is finished from its own plan; under the lock,
    # which each of a running restore's rollbacks holds: one another run of it is carrying out
    # is done by then, not replayed alongside
    with table_lock(storage, concurrency):
        resume_pending_rollbacks(storage, finished_by)
    for ts, _action in to_roll_back:
        # each under the table lock, judged again there (the plan's were checked for live writers
        # when it was made): a write or compaction whose commit holds the lock completes before
        # its files are deleted, and is rolled back as completed, never after. What a stopped
        # restore, or the write itself on finding this restore, rolled back already is gone
        with table_lock(storage, concurrency):
            if ts in load_timeline(storage).write_instants().timestamps():
                rollback(storage, ts, concurrency, own=True, finished_by=finished_by)
    rolled = rollbacks_by_target(storage, load_timeline(storage), after=inflight.timestamp)
    metadata = {
        "startRestoreTime": inflight.timestamp,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "instantsToRollback": [ts for ts, _ in to_roll_back],
        "hoodieRestoreMetadata": {ts: [rolled[ts]] for ts, _ in to_roll_back if ts in rolled},
        "version": 1,
        "restoreInstantInfo": [{"commitTime": ts, "action": action} for ts, action in to_roll_back],
    }
    try:
        done = transition_to_completed(
            storage, inflight, avro.serialize("HoodieRestoreMetadata", metadata), finished_by=finished_by
        )
    except InstantStateError:
        # another run of this restore completed it first: the same plan, done
        done = inflight.with_state(State.COMPLETED)
        if not storage.exists(instant_path(done)):
            raise
        return RestoreResult(done, completed_by_another=True)
    return RestoreResult(done)
