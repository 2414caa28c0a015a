"""The archiver: moves completed instants from the active timeline (``.hoodie/``) to the archived
timeline (``.hoodie/<hoodie.archivelog.folder>/``, ``archived`` by default; Hudi's version-6 archive log files).

Guards, each an upper bound on what may go (the lowest wins and is reported):

- the EarliestCommitToNotArchive of the latest completed clean (HUDI-7779), or its earliest
  commit to retain when the clean (written by Apache Hudi) records none; a
  ``KEEP_LATEST_FILE_VERSIONS`` clean retains no commit and may record neither, and then only the
  first replacecommit at or after it stays (its replaced files may still be on storage), as
  Hudi's archiver keeps it;
- the first savepoint, unless ``hoodie.archive.beyond.savepoint``: then only the savepoints and
  their commits stay, and the writes between them go (a hole in the active timeline, which
  readers take for archived writes, as Hudi's do);
- the earliest pending instant of any action (a pending compaction or clustering included);
- the first replacecommit to archive of which a replaced file group still has a file on storage
  (a twin base file an earlier clean left, say): archived, nothing would say the group is
  replaced, and its rows would read again;
- ``hoodie.keep.min.commits`` write instants stay active.

Nothing happens without a completed clean, while the active timeline holds no more than
``hoodie.keep.max.commits`` write instants, or when cleaning and archival are switched off. The
archive file is written before any active instant file is deleted; an archival interrupted after
that is finished by the next run, so every instant is in exactly one of the two timelines.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from tidemark.config import conf_bool, conf_int
from tidemark.errors import StorageError, TableError, TimelineError
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.file_system_view import base_file_name, data_file_slice, instant_metadata
from tidemark.table.lock import TableLock, check_still_held
from tidemark.table.metadata_table import check_changeable
from tidemark.table.properties import read_properties
from tidemark.table.write_client import remove_zombie_files
from tidemark.table_services.clean import EARLIEST_COMMIT_TO_NOT_ARCHIVE, ENABLED_KEY, last_clean_plan
from tidemark.timeline import (
    COMMIT,
    COMPACTION,
    METAFOLDER,
    REPLACE_COMMIT,
    RESTORE,
    SAVEPOINT,
    Instant,
    State,
    Timeline,
    instant_path,
    load_timeline,
    next_instant_time,
)
from tidemark.timeline.archived import archived_blocks_newest_first, archived_entries, write_archived
from tidemark.timeline.instant import WRITE_ACTIONS

_log = logging.getLogger("tidemark.archive")

#: the guard holding archival at a replacecommit whose replaced files are still on storage (a
#: twin an earlier clean left, or files a savepoint keeps): archived, they would read again
REPLACED_FILES_LEFT = "replaced files on storage"


@dataclass(frozen=True)
class ArchiveConfig:
    min_commits: int = 20
    max_commits: int = 30
    beyond_savepoint: bool = False
    enabled: bool = True

    def __post_init__(self) -> None:
        # checked here, not only in from_conf: a config built directly with these failed later
        # with an IndexError at the hoodie.keep.min.commits guard
        if not 0 < self.min_commits < self.max_commits:
            raise TableError(
                f"hoodie.keep.min.commits ({self.min_commits}) must be positive and below "
                f"hoodie.keep.max.commits ({self.max_commits})"
            )

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> ArchiveConfig:
        return cls(
            min_commits=conf_int(conf, "hoodie.keep.min.commits", cls.min_commits),
            max_commits=conf_int(conf, "hoodie.keep.max.commits", cls.max_commits),
            beyond_savepoint=conf_bool(conf, "hoodie.archive.beyond.savepoint", default=False),
            enabled=conf_bool(conf, ENABLED_KEY, default=True),
        )


@dataclass(frozen=True)
class ArchivePlan:
    instants: tuple[Instant, ...]
    #: the guard that stopped archival where it stopped (None when nothing held it back)
    blocked_by: str | None
    boundary: str | None


def plan_archive(storage: Storage, config: ArchiveConfig, timeline: Timeline | None = None) -> ArchivePlan:
    """Which completed instants to archive now, oldest first (from ``timeline``, the table's active
    timeline, when the caller has just listed it)."""
    if not config.enabled:
        return ArchivePlan((), "disabled", None)
    timeline = timeline if timeline is not None else load_timeline(storage)
    last_clean, clean_plan = last_clean_plan(storage, timeline)
    if last_clean is None:
        return ArchivePlan((), "no completed clean", None)
    writes = timeline.completed().write_instants().instants
    if len(writes) <= config.max_commits:
        return ArchivePlan((), f"{len(writes)} write instants, not above hoodie.keep.max.commits", None)
    extra = clean_plan.get("extraMetadata") or {}
    not_archive = extra.get(EARLIEST_COMMIT_TO_NOT_ARCHIVE) or (clean_plan.get("earliestInstantToRetain") or {}).get(
        "timestamp"
    )
    savepoints = timeline.completed().of_actions(SAVEPOINT).instants
    if config.beyond_savepoint and not_archive in {s.timestamp for s in savepoints}:
        # the clean bounds archival at the first savepoint before the commit it retains, for an
        # archiver that stops at savepoints; beyond them, its commit to retain is the bound (a
        # replacecommit whose replaced files are still on storage is held below all the same)
        not_archive = (clean_plan.get("earliestInstantToRetain") or {}).get("timestamp")
    by_versions = clean_plan.get("policy") == "KEEP_LATEST_FILE_VERSIONS"
    if not not_archive and not by_versions:
        return ArchivePlan((), "the latest clean retains every commit", None)
    # on a tie the first is named: a clean records a savepoint's instant as its earliest commit to
    # not archive, and the savepoint (or a pending instant) is what holds archival, not the clean
    guards: list[tuple[str, str]] = []
    if savepoints and not config.beyond_savepoint:
        guards.append((savepoints[0].timestamp, "savepoint"))
    pending = timeline.pending().instants
    if pending:
        guards.append((pending[0].timestamp, f"pending {pending[0].action}"))
    if not_archive:
        guards.append((not_archive, "earliest commit to not archive (latest clean)"))
    else:
        # the clean deleted every replaced file it saw: only a replacecommit made since may have
        # replaced files on storage, which would read again once it is archived
        later = [i for i in timeline.completed().of_actions(REPLACE_COMMIT) if i.timestamp >= last_clean.timestamp]
        if later:
            guards.append((later[0].timestamp, "replacecommit after the latest clean (KEEP_LATEST_FILE_VERSIONS)"))
    guards.append((writes[len(writes) - config.min_commits].timestamp, "hoodie.keep.min.commits"))
    boundary, reason = min(guards, key=lambda guard: guard[0])
    # the latest clean's bound counts the replaced files it saw; this counts what is on storage
    for replace in timeline.completed().of_actions(REPLACE_COMMIT):
        if replace.timestamp >= boundary:
            break
        if replaced_files_left(storage, replace):
            # the boundary names the replacecommit; the reason stays one text (the operator's guard)
            boundary, reason = replace.timestamp, REPLACED_FILES_LEFT
            break
    # as Hudi's archiver: a savepoint is never archived, and beyond savepoints the savepointed
    # commits stay too (readers take the writes between them for archived ones)
    savepointed = {s.timestamp for s in savepoints}
    chosen = tuple(
        i
        for i in timeline.completed()
        if i.timestamp < boundary
        and i != last_clean
        and i.action != SAVEPOINT
        and not (i.action in WRITE_ACTIONS and i.timestamp in savepointed)
        # Hudi 0.14/0.15 never archives restore instants (its archived entry has no field for
        # them): archiving one raised, and every later archival with it
        and i.action != RESTORE
    )
    return ArchivePlan(chosen, reason, boundary)


def replaced_files_left(storage: Storage, replace: Instant) -> bool:
    """Whether a file group the completed ``replace`` replaced still has a data file on storage."""
    for partition, file_ids in instant_metadata(storage, replace).partition_to_replace_file_ids.items():
        replaced = set(file_ids)
        for name in storage.list_dir(partition).files:  # names only: one listing per partition
            found = data_file_slice(name)
            if found is not None and found[0] in replaced:
                _log.info(
                    "%s: %s/%s, of a group replacecommit %s replaced, is on storage",
                    storage.uri,
                    partition,
                    name,
                    replace,
                )
                return True
    return False


@dataclass(frozen=True)
class ArchiveResult:
    plan: ArchivePlan
    archive_file: str | None
    #: the instants of a stopped archival this run removed from the active timeline before its own
    #: (for a dry run: would remove; its plan is the one made after that)
    finished_from_before: tuple[str, ...]
    #: instants on the active timeline after the run (for a dry run: now)
    active_instants: int


def _drop_active(storage: Storage, instant: Instant) -> None:
    # requested and inflight first: a crash in between leaves a completed instant, never a
    # pending-looking one a writer would roll back
    for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
        storage.delete(instant_path(instant.with_state(state)))


@contextlib.contextmanager
def _stops_half_way(storage: Storage, what: str) -> Iterator[None]:
    """A storage error while instants already in the archive log leave the active timeline says
    that they are in both timelines (readers are unaffected) and what finishes it."""
    try:
        yield
    except StorageError as e:
        raise type(e)(
            f"{e}: {what} stopped half-way: its instants are in the archive log and still on the active timeline; "
            f"once the cause is removed, `tidemark archive {storage.uri}` run again finishes it"
        ) from e


def _stopped_archival(storage: Storage, timeline: Timeline, folder: str) -> list[Instant]:
    """The active instants a run that stopped before removing them had archived. They are in the
    newest archive blocks (every run finishes the one before it before it archives), so blocks are
    read newest first until one holds no instant still on the active timeline."""
    # a completed compaction is archived as the commit it completed as
    active = {(i.timestamp, COMMIT if i.action == COMPACTION else i.action): i for i in timeline.completed()}
    stopped: list[Instant] = []
    for block in archived_blocks_newest_first(storage, folder):
        both = {(a.timestamp, a.action) for a in block.instants if a.state is State.COMPLETED} & active.keys()
        if not both:
            break
        stopped.extend(active.pop(key) for key in sorted(both))
    return sorted(stopped)


def remove_twin_base_files(storage: Storage, instants: Iterable[Instant]) -> list[str]:
    """Delete the base files of the write ``instants`` that their commits do not name, of file
    groups whose commit-named base file of that instant is there too: a twin a task attempt
    killed after the commit wrote under its own write token, whose marker is gone (so
    ``remove_zombie_files`` misses it). Readers take the one the commit names; once the commit is
    archived Apache's readers (and the file-system view, should the archive be unreadable) have
    nothing but names to choose by. Only base files: a log file's name carries its slice's base
    instant, not the deltacommit that wrote it. A commit that cannot be read leaves its files."""
    #: partition → (file id, instant) → the base file the commit names
    named: dict[str, dict[tuple[str, str], str]] = {}
    for instant in Timeline(tuple(instants)).write_instants():
        try:
            stats = instant_metadata(storage, instant).write_stats()
        except TimelineError as e:
            _log.warning("%s: cannot read the commit %s to look for twin base files: %s", storage.uri, instant, e)
            continue
        for stat in stats:
            base = base_file_name(stat.path) if stat.path else None
            if base is not None and stat.path and base.instant == instant.timestamp:
                partition = stat.path.rpartition("/")[0]
                named.setdefault(partition, {})[(base.file_id, base.instant)] = stat.path
    removed: list[str] = []
    for partition, committed in named.items():
        files = [info.path for info in storage.list_folder(partition).files]
        listed = set(files)
        for path in files:
            base = base_file_name(path)
            kept = committed.get((base.file_id, base.instant)) if base is not None else None
            if kept is not None and kept != path and kept in listed:
                storage.delete(path)
                removed.append(path)
                _log.warning(
                    "%s: removed %s, a base file its commit does not name (a killed attempt's)", storage.uri, path
                )
    return removed


def archive(
    storage: Storage, config: ArchiveConfig, dry_run: bool = False, concurrency: ConcurrencyConfig | None = None
) -> ArchiveResult:
    """Archive what :func:`plan_archive` allows; with ``dry_run``, only say what it would. Under
    the table lock (optimistic concurrency, as Hudi's archiver takes it), so no commit's conflict
    check reads the active timeline while instants leave it."""
    concurrency = concurrency or ConcurrencyConfig()
    if not dry_run:
        check_changeable(storage, "archive", writes_rows=False)
    if dry_run or not concurrency.optimistic:
        return _archive(storage, config, dry_run)
    with TableLock(storage, concurrency) as lock:
        return _archive(storage, config, dry_run, lock)


def _archive(storage: Storage, config: ArchiveConfig, dry_run: bool, lock: TableLock | None = None) -> ArchiveResult:
    # one listing of .hoodie/ for the whole run
    timeline = load_timeline(storage)
    active_now = len(timeline)
    folder = read_properties(storage).archive_folder
    if dry_run:
        stopped = tuple(_stopped_archival(storage, timeline, folder))
        gone = set(stopped)
        timeline = Timeline(tuple(i for i in timeline if i not in gone))
    else:
        timeline, stopped = finish_stopped_archival(storage, timeline, folder)
    # the stopped archival finished first, then planned without its instants: a dry run says both
    finished = tuple(str(i) for i in stopped)
    plan = plan_archive(storage, config, timeline)
    if dry_run:
        return ArchiveResult(plan, None, finished, active_now)
    if not plan.instants:
        return ArchiveResult(plan, None, finished, len(timeline))
    path = archive_instants(storage, timeline, plan.instants, folder, lock)
    return ArchiveResult(plan, path, finished, len(timeline) - len(plan.instants))


def finish_stopped_archival(storage: Storage, timeline: Timeline, folder: str) -> tuple[Timeline, tuple[Instant, ...]]:
    """Remove from the active timeline the instants an archival that stopped half-way left in both
    timelines; ``timeline`` without them, and them. Done before any archival: the next one finds a
    stopped run's instants in the newest archive blocks only."""
    stopped = tuple(_stopped_archival(storage, timeline, folder))
    if stopped:
        with _stops_half_way(storage, f"finishing the archival of {len(stopped)} instants"):
            for instant in stopped:
                _drop_active(storage, instant)
    gone = set(stopped)
    return Timeline(tuple(i for i in timeline if i not in gone)), stopped


def archive_instants(
    storage: Storage, timeline: Timeline, instants: tuple[Instant, ...], folder: str, lock: TableLock | None
) -> str:
    """Move the completed ``instants`` (oldest first) of ``timeline``, the active timeline with a
    stopped archival finished (:func:`finish_stopped_archival`), to the archive log in ``folder``:
    the archive file first, then the active state files, so a run stopped in between is finished by
    the next. The archive file's path."""
    # archived, a write's instant leaves the timeline; what a zombie wrote for it, or for a
    # rolled-back one, would then look committed: removed first (the next write does it too),
    # and so are twin base files no marker names, which readers would then tell apart by name only
    remove_zombie_files(storage)
    remove_twin_base_files(storage, instants)
    present = frozenset(storage.list_dir(METAFOLDER).files)  # one listing, not a lookup per state file
    entries = [entry for i in instants for entry in archived_entries(storage, i, present)]
    ts = next_instant_time(timeline, after=instants[-1].timestamp, table=storage.uri)
    check_still_held(lock, "the archival")
    path = write_archived(storage, entries, ts, folder)
    with _stops_half_way(storage, f"the archival of {len(instants)} instants into {storage.full_uri(path)}"):
        for instant in instants:
            _drop_active(storage, instant)
    return path
