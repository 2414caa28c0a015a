"""Savepoints: a completed write instant whose files the cleaner must keep, recorded as Hudi's
``<ts>.savepoint`` (Avro ``HoodieSavepointMetadata``) at the savepointed instant's time."""

from __future__ import annotations

import getpass
import os
import time

from tidemark.errors import InstantStateError, PendingRestoreError, StorageError
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.file_system_view import snapshot_files
from tidemark.table.heartbeat import compaction_status, heartbeat_status
from tidemark.table.lock import TableLock, check_still_held, table_lock
from tidemark.table.metadata_table import check_changeable
from tidemark.table.properties import read_properties
from tidemark.table.write_client import check_no_pending_restore, unfinished_restore
from tidemark.table_services.archive import archive_instants, finish_stopped_archival, replaced_files_left
from tidemark.timeline import (
    CLEAN,
    COMPACTION,
    REPLACE_COMMIT,
    SAVEPOINT,
    Instant,
    State,
    Timeline,
    create_inflight,
    instant_path,
    load_timeline,
    read_instant,
    rollback_command,
    transition_to_completed,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.active import CLAIM_FOLDER, live_claims
from tidemark.timeline.archived import archive_files, read_archived, scan_archive
from tidemark.timeline.instant import WRITE_ACTIONS, check_timestamp


def list_savepoints(storage: Storage) -> list[str]:
    """Timestamps of the completed savepoints, oldest first."""
    return [i.timestamp for i in load_timeline(storage).completed().of_actions(SAVEPOINT)]


def _last_clean_retained(storage: Storage, timeline: Timeline) -> tuple[str, str] | None:
    """The earliest instant whose files no clean may have deleted: the latest of what every clean
    on the active timeline retained. Pending cleans count (their plan runs when they resume), and a
    clean that retained no commit (``KEEP_LATEST_FILE_VERSIONS``, which deletes old versions
    whatever their age) counts up to the last commit it saw. Looking at the latest completed clean
    alone let a savepoint be made on files already gone: a restore to it lost rows. Cleans already
    archived are older than every write still on the active timeline, so they cannot matter.
    With the bound comes what it is, for the error."""
    bounds = []
    for clean in timeline.of_actions(CLEAN):
        requested = clean.with_state(State.REQUESTED)
        where = storage.full_uri(instant_path(requested))
        plan = avro.deserialize(read_instant(storage, requested), "HoodieCleanerPlan", where)
        retained = (plan.get("earliestInstantToRetain") or {}).get("timestamp")
        if retained:
            bounds.append((retained, f"clean {clean.timestamp} retained commits from {retained} on"))
        elif last_seen := plan.get("lastCompletedCommitTimestamp"):
            bounds.append(
                (
                    last_seen,
                    f"clean {clean.timestamp} ({plan.get('policy')}) retained no commit: it may have deleted "
                    f"old file versions of any commit up to {last_seen}",
                )
            )
    return max(bounds, default=None)


def _check_no_earlier_pending_write(
    storage: Storage, timeline: Timeline, claimed: tuple[str, ...], timestamp: str, config: ConcurrencyConfig
) -> None:
    """Refuse to savepoint ``timestamp`` while a write instant earlier than it is pending, or an
    instant time earlier than it is claimed (``claimed``, listed before ``timeline`` was loaded: an
    instant opening there). Reads order by instant time, so once such a write completes, a read as
    of ``timestamp`` includes its files; a pending compaction's are the slices read as of it (its
    base files replace the merged slices listed now); a pending replacecommit's hides the groups it
    replaces. The savepoint, listed now, would keep none of them: a clean would delete them, and
    the savepoint could no longer be restored. Apache Hudi's SavepointActionExecutor does not look
    for pending instants (it lists the slices as of the instant on the timeline as it is)."""
    uri = storage.uri
    for instant in timeline.pending().write_instants():
        if instant.timestamp >= timestamp:
            break
        pending = f"{instant.action} {instant.timestamp}, earlier than it, is pending"
        what = f"{uri}: cannot savepoint {timestamp} while {pending}"
        if instant.action == COMPACTION:
            status = compaction_status(storage, instant.timestamp, config)
            raise InstantStateError(
                f"{what} ({status.describe()}): once it completes, reads as of {timestamp} read its base files, "
                f"which this savepoint would not keep; let it finish (`tidemark compact {uri}` finishes a pending "
                "compaction), then savepoint again"
            )
        status = heartbeat_status(storage, instant.timestamp, config)
        raise InstantStateError(
            f"{what} ({status.describe()}): once it completes, reads as of {timestamp} include its files, which "
            f"this savepoint would not keep; wait for it to end, or roll it back "
            f"(`{rollback_command(storage, instant.timestamp)}`), then savepoint again"
        )
    opening = [ts for ts in claimed if ts < timestamp and timeline.find(ts) is None]
    if opening:
        raise InstantStateError(
            f"{uri}: cannot savepoint {timestamp} while an instant at {opening[0]}, earlier than it, is being "
            f"opened (its time is claimed: {CLAIM_FOLDER}/{opening[0]}): a write there would be read as of "
            f"{timestamp} once it completes, and this savepoint would not keep its files; savepoint again in a "
            "moment (a claim a killed process left counts no more once an hour old)"
        )


def create_savepoint(
    storage: Storage,
    timestamp: str,
    comment: str = "",
    concurrency: ConcurrencyConfig | None = None,
    user: str | None = None,
) -> Instant:
    """Savepoint the completed write instant ``timestamp``: every file of the file slices visible
    as of that instant is kept until the savepoint is deleted. ``user`` and ``comment`` are
    recorded as Hudi's ``savepointedBy`` and ``comments`` (the user running this by default).

    With optimistic concurrency, under the table lock, which a clean holds while it plans: a
    clean that planned without seeing the savepoint would delete its files, and one planned before
    it is then on the timeline for the check against cleans."""
    timeline = load_timeline(storage)
    check_changeable(storage, "create a savepoint", timeline=timeline, writes_rows=False)
    check_timestamp(timestamp)
    check_no_pending_restore(storage, timeline)  # refused without touching the lock; again under it
    config = concurrency or ConcurrencyConfig()
    with table_lock(storage, config) as lock:
        return _create_savepoint(storage, timestamp, comment, user or _current_user(), lock, config)


def _current_user() -> str:
    """Who runs this, for ``savepointedBy``. A process whose uid has no passwd entry and no
    ``USER``/``LOGNAME`` (a pod run as an arbitrary uid) gets ``uid <n>``: the field is only
    informational, and no savepoint should fail for it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # KeyError up to Python 3.12, OSError from 3.13
        return f"uid {os.getuid()}"


def _create_savepoint(
    storage: Storage, timestamp: str, comment: str, user: str, lock: TableLock | None, config: ConcurrencyConfig
) -> Instant:
    # the claims before the timeline: a claim is released only once its instant's state file
    # exists, so an instant opening meanwhile is in one listing or the other
    claimed = live_claims(storage)
    timeline = load_timeline(storage)
    # a savepoint of a write the unfinished restore is about to roll back would keep nothing
    check_no_pending_restore(storage, timeline)
    target = timeline.completed().write_instants().find(timestamp)
    if target is None:
        first = timeline.instants[0].timestamp if timeline.instants else None
        note = ""
        if first and timestamp < first:
            # said archived only when the archive holds it: an instant that never was is not
            folder = read_properties(storage).archive_folder
            archived = any(i.timestamp == timestamp for i in read_archived(storage, folder))
            note = f" (the active timeline begins at {first}{': it is archived' if archived else ''})"
        raise InstantStateError(f"{storage.uri}: no completed write instant {timestamp} to savepoint{note}")
    existing = timeline.completed().of_actions(SAVEPOINT).find(timestamp)
    if existing is not None:  # a command run again after it finished (its answer lost, say)
        raise InstantStateError(
            f"{storage.uri}: {timestamp} is savepointed already ({instant_path(existing)}); "
            "`tidemark savepoint list` shows the savepoints"
        )
    cleaned = _last_clean_retained(storage, timeline)
    if cleaned and timestamp < cleaned[0]:
        raise InstantStateError(
            f"cannot savepoint {timestamp}: a clean may already have removed its files ({cleaned[1]})"
        )
    # under the lock the savepoint is written under: an instant opened after this check claims a
    # time later than every instant on the timeline, so later than ``timestamp``
    _check_no_earlier_pending_write(storage, timeline, claimed, timestamp, config)
    partitions = snapshot_files(storage, timeline, timestamp)
    metadata = {
        "savepointedBy": user,
        "savepointedAt": int(time.time() * 1000),  # epoch millis, as Hudi writes it
        "comments": comment,
        "partitionMetadata": {p: {"partitionPath": p, "savepointDataFile": names} for p, names in partitions.items()},
        "version": 1,
    }
    check_still_held(lock, f"the savepoint of {timestamp}")  # a clean may have taken the lock over
    # a savepoint command that crashed between its two state files left the inflight one: running
    # the command again finishes that savepoint (creating the inflight again would fail forever)
    inflight = timeline.pending().of_actions(SAVEPOINT).find(timestamp) or create_inflight(
        storage, timestamp, SAVEPOINT
    )
    return transition_to_completed(
        storage,
        inflight,
        avro.serialize("HoodieSavepointMetadata", metadata),
        finished_by=f"tidemark savepoint create {storage.uri} {timestamp}",
    )


def delete_savepoint(storage: Storage, timestamp: str, concurrency: ConcurrencyConfig | None = None) -> tuple[str, ...]:
    """Delete the savepoint at ``timestamp``; refused while a restore to it is unfinished. With
    optimistic concurrency under the table lock, which a restore holds while it plans: a delete
    judged outside it could pass its check, and then take the savepoint of a restore planned
    meanwhile, whose files the next clean would delete.

    When archival went beyond the savepoint (``hoodie.archive.beyond.savepoint``), its commit is
    archived first: the times of the write instants archived (none, mostly)."""
    check_timestamp(timestamp)
    _deletable(storage, timestamp)  # refused without waiting for the lock; judged again under it
    with table_lock(storage, concurrency or ConcurrencyConfig()) as lock:
        found = _deletable(storage, timestamp)
        check_still_held(lock, f"the delete of savepoint {timestamp}")
        archived = _archive_savepointed_commit(storage, timestamp, lock)
        # the completed file last: a delete stopped half-way leaves the savepoint listed, and
        # deleted by running it again (a lone inflight file was hidden, and held archival)
        for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
            storage.delete(instant_path(found.with_state(state)))
    return archived


def _archive_savepointed_commit(storage: Storage, timestamp: str, lock: TableLock | None) -> tuple[str, ...]:
    """Archive the commit of the savepoint at ``timestamp`` when archival beyond savepoints has
    archived a write after it. Readers take a write missing from the active timeline for archived
    only before the first write left unsavepointed (Hudi's ``firstNonSavepointCommit`` and
    ``isBeforeTimelineStarts``); with the savepoint gone its commit would be that first write, and
    the archived writes after it would read as uncommitted: rows lost to every reader. Archived
    before the savepoint file goes, so a delete stopped in between leaves a table that reads
    right (the savepoint keeps its files; a restore to it is refused, its commit gone), and the
    delete run again finishes. The times archived."""
    folder = read_properties(storage).archive_folder
    timeline = load_timeline(storage)
    commits = tuple(i for i in timeline.completed().write_instants() if i.timestamp == timestamp)
    start = timeline.first_non_savepoint_write()
    if not commits or start is None or timestamp >= start or not archive_files(storage, folder):
        return ()  # the savepoint does not move the timeline's start back, or nothing is archived
    scan = scan_archive(storage, folder)
    # a damaged part of the archive may hold such a write: the commit is archived all the same
    # (a commit before the timeline's start reads as committed either way)
    beyond = scan.skipped or any(
        a.timestamp > timestamp and a.action in WRITE_ACTIONS and a.state is State.COMPLETED for a in scan.instants
    )
    if not beyond:
        return ()
    # a delete killed after writing the archive file left the commit in both timelines: finished
    # here, not archived twice (and any other stopped archival first, as the archiver does)
    timeline, stopped = finish_stopped_archival(storage, timeline, folder)
    done = tuple(c.timestamp for c in commits if c in stopped)
    commits = tuple(c for c in commits if c not in stopped)
    if not commits:
        return done
    for commit in commits:
        if commit.action == REPLACE_COMMIT and replaced_files_left(storage, commit):
            # archived, nothing would say those groups are replaced, and their rows would read again
            raise InstantStateError(
                f"{storage.uri}: cannot delete the savepoint {timestamp} yet: archival went beyond it "
                f"(hoodie.archive.beyond.savepoint), so its replacecommit must be archived with it (else the "
                f"writes archived after it would read as uncommitted), but a file group it replaced still has "
                f"files on storage, which would read again; the table is unchanged. Run `tidemark clean "
                f"{storage.uri}`, which deletes them once no savepoint keeps them, then delete the savepoint again"
            )
    try:
        archive_instants(storage, timeline, commits, folder, lock)
    except StorageError as e:
        raise type(e)(
            f"{e}; the savepoint {timestamp} is not deleted yet: `tidemark savepoint delete {storage.uri} "
            f"{timestamp}` run again finishes both"
        ) from e
    return done + tuple(c.timestamp for c in commits)


def _deletable(storage: Storage, timestamp: str) -> Instant:
    """The savepoint at ``timestamp``, refused when it may not be deleted."""
    timeline = load_timeline(storage)
    check_changeable(storage, "delete a savepoint", timeline=timeline, writes_rows=False)
    found = timeline.of_actions(SAVEPOINT).find(timestamp)
    if found is None:
        raise InstantStateError(f"{storage.uri}: no savepoint at {timestamp}")
    # the unfinished restore to it rolls back to it; a restore that did not record its savepoint
    # may be to this one
    restore = unfinished_restore(storage, timeline)
    if restore is not None and restore.savepoint in (timestamp, None):
        raise PendingRestoreError(
            f"{storage.uri}: cannot delete the savepoint {timestamp}: {restore} is unfinished; {restore.advice}"
        )
    return found
