"""The cleaner: which old file versions to delete (a pure planner over a timeline snapshot), and
an executor that deletes them through a clean instant (Hudi's Avro ``HoodieCleanerPlan`` →
``HoodieCleanMetadata``, requested → inflight → completed).

Every plan also records, in ``extraMetadata``, the savepointed instants it saw
(``savepointed_timestamps``) and the **EarliestCommitToNotArchive** (HUDI-7779, Option C): the
first savepoint earlier than the earliest commit to retain, else the earliest commit to retain,
and never later than a replacecommit whose replaced files are still on storage. The archiver never
passes it. When a savepoint tracked by the last clean has disappeared, the plan covers all
partitions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.bulk import collector_paused
from tidemark.config import conf_bool, conf_int, present_key
from tidemark.errors import (
    InstantStateError,
    ObjectNotFoundError,
    StorageError,
    StorageUnreachableError,
    TableError,
)
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.file_system_view import (
    FileSlice,
    FileSystemView,
    instant_metadata,
    path_in_partition,
    plan_file_path,
    read_compaction_plan,
    snapshot_files,
)
from tidemark.table.lock import TableLock, check_still_held
from tidemark.table.metadata_table import check_changeable
from tidemark.table.properties import TIMELINE_TIMEZONE, read_properties
from tidemark.table.write_client import unfinished_restore
from tidemark.timeline import (
    CLEAN,
    COMPACTION,
    REPLACE_COMMIT,
    SAVEPOINT,
    Instant,
    State,
    Timeline,
    instant_path,
    load_timeline,
    read_instant,
    request_new_instant,
    rollback_command,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.active import abandoned_claims
from tidemark.timeline.instant import instant_time_in_zone

_log = logging.getLogger("tidemark.clean")

SAVEPOINTED_TIMESTAMPS = "savepointed_timestamps"
EARLIEST_COMMIT_TO_NOT_ARCHIVE = "earliest_commit_to_not_archive"
POLICIES = ("KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS")
#: one switch for cleaning and archival together, as the seed proposes: archival without cleaning
#: is what lets replaced files come back
ENABLED_KEY = "tidemark.clean.archive.enabled"
#: cleaner keys Hudi renamed (older spelling -> newer); both are read, the newer first
RENAMED_KEYS = {
    "hoodie.cleaner.policy": "hoodie.clean.policy",
    "hoodie.cleaner.commits.retained": "hoodie.clean.commits.retained",
}


@dataclass(frozen=True)
class CleanConfig:
    """Hudi's cleaner settings and defaults."""

    policy: str = "KEEP_LATEST_COMMITS"
    commits_retained: int = 10
    file_versions_retained: int = 3
    hours_retained: int = 24
    max_commits: int = 1  # hoodie.clean.max.commits: clean after this many commits since the last
    incremental: bool = True  # hoodie.cleaner.incremental.mode: plan only partitions written since
    enabled: bool = True

    def __post_init__(self) -> None:
        """Checked here, for a config built directly as for one read from Hudi's keys: an unknown
        policy planned nothing without a word, no retained commit failed deep in the planner."""
        if self.policy not in POLICIES:
            raise TableError(
                f"hoodie.clean.policy: unknown cleaner policy {self.policy!r} (use one of {', '.join(POLICIES)})"
            )
        for key, value, least in (
            ("hoodie.clean.commits.retained", self.commits_retained, 1),
            ("hoodie.cleaner.fileversions.retained", self.file_versions_retained, 1),
            ("hoodie.cleaner.hours.retained", self.hours_retained, 1),
            ("hoodie.clean.max.commits", self.max_commits, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TableError(f"{key}={value!r}: expected a whole number")
            if value < least:
                raise TableError(f"{key}={value}: must be at least {least}")

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> CleanConfig:
        """The settings from Hudi's keys (either spelling of a renamed one); the values are
        checked as the class checks them."""
        retained_key = present_key(conf, "hoodie.clean.commits.retained", "hoodie.cleaner.commits.retained")
        policy_key = present_key(conf, "hoodie.clean.policy", "hoodie.cleaner.policy")
        try:
            return cls(
                policy=conf.get(policy_key, "KEEP_LATEST_COMMITS"),
                commits_retained=conf_int(conf, retained_key, cls.commits_retained),
                file_versions_retained=conf_int(
                    conf, "hoodie.cleaner.fileversions.retained", cls.file_versions_retained
                ),
                hours_retained=conf_int(conf, "hoodie.cleaner.hours.retained", cls.hours_retained),
                max_commits=conf_int(conf, "hoodie.clean.max.commits", cls.max_commits),
                incremental=conf_bool(conf, "hoodie.cleaner.incremental.mode", default=True),
                enabled=conf_bool(conf, ENABLED_KEY, default=True),
            )
        except TableError as e:  # the check names the newer spelling: tell the key as it was given
            text = str(e)
            for given in (policy_key, retained_key):
                newer = RENAMED_KEYS.get(given, given)
                if given != newer and text.startswith(newer):
                    raise TableError(given + text.removeprefix(newer)) from None
            raise


@dataclass(frozen=True)
class CleanPlan:
    policy: str
    earliest_commit_to_retain: Instant | None
    last_completed_commit: str
    files_to_delete: Mapping[str, tuple[str, ...]]
    savepointed: tuple[str, ...]
    earliest_commit_to_not_archive: str | None
    full_scan: bool
    reasons: tuple[str, ...] = field(default=())

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files_to_delete.values())

    def to_avro(self, storage: Storage) -> dict[str, object]:
        """The plan as Hudi's ``HoodieCleanerPlan`` (version 2) for the table on ``storage``: files
        by their full location, which Hudi's cleaner deletes as written."""
        ectr = self.earliest_commit_to_retain
        return {
            "earliestInstantToRetain": None
            if ectr is None
            else {"timestamp": ectr.timestamp, "action": ectr.action, "state": "COMPLETED"},
            "lastCompletedCommitTimestamp": self.last_completed_commit,
            "policy": self.policy,
            "filesToBeDeletedPerPartition": {},
            "version": 2,
            "filePathsToBeDeletedPerPartition": {
                p: [{"filePath": storage.hadoop_path(f), "isBootstrapBaseFile": False} for f in files]
                for p, files in self.files_to_delete.items()
            },
            "partitionsToBeDeleted": [],
            "extraMetadata": {
                SAVEPOINTED_TIMESTAMPS: ",".join(self.savepointed),
                EARLIEST_COMMIT_TO_NOT_ARCHIVE: self.earliest_commit_to_not_archive or "",
            },
        }


def _slice_files(view: FileSystemView, fs: FileSlice) -> list[str]:
    """The files of a slice, with the twins of its base file (a killed attempt's copies, which
    the view does not read): left behind, a twin would be the slice's only base file once its
    commit is archived, and a replaced group's would read again."""
    files = [log.path for log in fs.log_files]
    if fs.base_file is not None:
        files[:0] = [fs.base_file.path, *view.twin_base_files.get((fs.partition_path, fs.file_id, fs.base_instant), ())]
    return files


def _earliest_commit_to_retain(
    timeline: Timeline, config: CleanConfig, now: datetime.datetime, timeline_timezone: str | None
) -> Instant | None:
    writes = timeline.completed().write_instants().instants
    if config.policy == "KEEP_LATEST_COMMITS":
        ectr = writes[len(writes) - config.commits_retained] if len(writes) > config.commits_retained else None
    elif config.policy == "KEEP_LATEST_BY_HOURS":
        # to the millisecond, as Hudi formats the cut-off (yyyyMMddHHmmssSSS), and in the zone the
        # table's writers stamp (a LOCAL table's instants are its writers' local time)
        cutoff = instant_time_in_zone(now - datetime.timedelta(hours=config.hours_retained), timeline_timezone)
        newer = [i for i in writes if i.timestamp >= cutoff]
        ectr = newer[0] if newer and newer[0] is not writes[0] else None
    else:
        return None
    pending = timeline.pending().write_instants().instants
    if ectr is not None and pending and pending[0].timestamp < ectr.timestamp:
        # never clean what an unfinished write may still need, and retain from the last completed
        # write before it (Hudi's CleanerUtils.getEarliestCommitToRetain): the unfinished write's
        # time is then inside the next incremental clean's window, which rescans its partitions
        # once it commits (retained from after it, the versions it replaced were never looked at)
        before = [i for i in writes if i.timestamp < pending[0].timestamp]
        ectr = before[-1] if before else None
    return ectr


def _holding_write(timeline: Timeline, ectr: Instant | None) -> Instant | None:
    """The write pending since before every completed write, when it leaves the clean no commit
    to retain (it may read any version)."""
    pending = timeline.pending().write_instants().instants
    writes = timeline.completed().write_instants().instants
    if ectr is None and pending and writes and pending[0].timestamp < writes[0].timestamp:
        return pending[0]
    return None


def savepointed_files(storage: Storage, timeline: Timeline | None = None) -> dict[str, set[str]]:
    """Savepoint timestamp → the data files it keeps (paths relative to the table). The savepoint
    an unfinished restore rolls back to keeps its snapshot's files even when it is gone (Apache's
    savepoint delete does not look for a restore): a clean that took them would leave that restore
    to report success on a table short of rows."""
    out: dict[str, set[str]] = {}
    if timeline is None:  # not `or`: an empty timeline is falsy
        timeline = load_timeline(storage)
    for instant in timeline.completed().of_actions(SAVEPOINT):
        where = storage.full_uri(instant_path(instant))
        metadata = avro.deserialize(read_instant(storage, instant), "HoodieSavepointMetadata", where)
        files: set[str] = set()
        for partition, info in (metadata.get("partitionMetadata") or {}).items():
            for name in info.get("savepointDataFile") or []:
                files.add(path_in_partition(partition, name))
        out[instant.timestamp] = files
    restore = unfinished_restore(storage, timeline)
    if restore is not None and restore.savepoint is not None and restore.savepoint not in out:
        out[restore.savepoint] = {
            path_in_partition(partition, name)
            for partition, names in snapshot_files(storage, timeline, restore.savepoint).items()
            for name in names
        }
    return out


def last_clean_plan(storage: Storage, timeline: Timeline) -> tuple[Instant | None, dict[str, Any]]:
    """The latest completed clean and its ``HoodieCleanerPlan`` (empty without a clean)."""
    cleans = timeline.completed().of_actions(CLEAN).instants
    if not cleans:
        return None, {}
    return cleans[-1], _read_raw_plan(storage, cleans[-1])


def last_clean_extra(storage: Storage, timeline: Timeline) -> tuple[Instant | None, dict[str, str], str | None]:
    """The latest completed clean, its plan's extraMetadata, and its earliest commit to retain."""
    last, plan = last_clean_plan(storage, timeline)
    ectr = plan.get("earliestInstantToRetain")
    return last, dict(plan.get("extraMetadata") or {}), (ectr or {}).get("timestamp")


def plan_clean(
    storage: Storage, config: CleanConfig, now: datetime.datetime | None = None, timeline: Timeline | None = None
) -> CleanPlan:
    """What a clean would delete now, and the archival boundary it would record (on ``timeline``
    when the caller has just read it)."""
    with collector_paused():  # one collection at the end, not one per partition
        return _plan_clean(storage, config, now, timeline if timeline is not None else load_timeline(storage))


def _plan_clean(storage: Storage, config: CleanConfig, now: datetime.datetime | None, timeline: Timeline) -> CleanPlan:
    now = now or datetime.datetime.now(datetime.UTC)
    ectr = _earliest_commit_to_retain(timeline, config, now, read_properties(storage).get(TIMELINE_TIMEZONE))
    savepoints = savepointed_files(storage, timeline)
    kept_by_savepoint = set().union(*savepoints.values()) if savepoints else set()
    previous_clean, previous, previous_ectr = last_clean_extra(storage, timeline)
    reasons = []
    holder = _holding_write(timeline, ectr)
    if holder is not None:
        held = (
            f"{holder.action} {holder.timestamp}, pending since before every completed write, holds the clean: "
            f"nothing is deleted until it ends (if it is dead: `{rollback_command(storage, holder.timestamp)}`)"
        )
        _log.warning("%s: %s", storage.uri, held)
        reasons.append(held)
    tracked = {s for s in previous.get(SAVEPOINTED_TIMESTAMPS, "").split(",") if s}
    removed = tracked - set(savepoints)
    view = FileSystemView(storage, timeline, include_replaced=True)
    full_scan = True
    touched: set[str] | None = None
    if not config.incremental:
        reasons.append("hoodie.cleaner.incremental.mode is off: all partitions")
    elif removed:
        reasons.append(f"savepoints {', '.join(sorted(removed))} were removed since the last clean: all partitions")
    elif previous_ectr and ectr and timeline.find(previous_ectr) is not None:
        since = [
            i
            for i in timeline.completed().write_instants()
            if previous_ectr <= i.timestamp < ectr.timestamp or i.action == REPLACE_COMMIT
        ]
        if len(since) > len(view.partitions):
            # reading each commit's metadata would cost more than looking at every partition,
            # and the full plan is the same plan
            reasons.append(f"{len(since)} commits since the last clean, {len(view.partitions)} partitions: all")
        else:
            full_scan = False
            touched = set()
            for instant in since:
                metadata = instant_metadata(storage, instant)
                touched.update(metadata.partition_to_write_stats)
                touched.update(metadata.partition_to_replace_file_ids)
    elif config.policy == "KEEP_LATEST_FILE_VERSIONS":  # Hudi's planner too: versions are counted per file group
        reasons.append("KEEP_LATEST_FILE_VERSIONS looks at all partitions")
    elif ectr is None:
        reasons.append("no commit to retain: all partitions" if holder else "no commit to retain yet: all partitions")
    elif previous_clean is None:
        reasons.append("no earlier clean: all partitions")
    elif not previous_ectr:
        reasons.append(f"the last clean {previous_clean.timestamp} retained no commit: all partitions")
    else:
        reasons.append(
            f"the last clean's earliest commit to retain {previous_ectr} is no longer on the active timeline "
            "(rolled back or restored away): all partitions"
        )
    pending_compaction_bases = set()
    for pending in timeline.pending().of_actions(COMPACTION):
        for op in read_compaction_plan(storage, pending):
            pending_compaction_bases.add((op.partition_path, op.file_id, op.base_instant))
    compacting_groups = {(partition, file_id) for partition, file_id, _ in pending_compaction_bases}
    deletes: dict[str, list[str]] = defaultdict(list)
    blocked_replaces: set[str] = set()
    for partition in view.partitions:
        if touched is not None and partition not in touched:
            continue
        for group in view.file_groups(partition):
            replaced_at = view.replaced.get((partition, group.file_id))
            if replaced_at is not None:
                files = [f for fs in group.slices for f in _slice_files(view, fs)]
                eligible = config.policy == "KEEP_LATEST_FILE_VERSIONS" or (
                    ectr is not None and replaced_at < ectr.timestamp
                )
                # a compaction planned before the group was replaced still needs its files (it
                # would fail for good without them); the group goes once it has run
                compacting = (partition, group.file_id) in compacting_groups
                if eligible and not compacting and not (set(files) & kept_by_savepoint):
                    deletes[partition].extend(files)
                elif files:
                    blocked_replaces.add(replaced_at)
                continue
            newest_first = list(reversed(group.slices))
            if config.policy == "KEEP_LATEST_FILE_VERSIONS":
                old = newest_first[config.file_versions_retained :]
            elif ectr is None:
                old = []
            else:
                # keep every slice at or after the retained commit, and the one visible at it
                old = []
                seen_visible = False
                for fs in newest_first:
                    if fs.base_instant >= ectr.timestamp:
                        continue
                    if not seen_visible:
                        seen_visible = True
                        continue
                    old.append(fs)
            for fs in old:
                if (partition, group.file_id, fs.base_instant) in pending_compaction_bases:
                    continue
                # a slice a savepoint holds a file of stays whole, as Hudi's planner keeps it: the
                # logs written on it after the savepoint are what reads as of those writes need
                files = _slice_files(view, fs)
                if not set(files) & kept_by_savepoint:
                    deletes[partition].extend(files)
    # replacecommits outside the scanned partitions still block archival while their files exist
    for (partition, _file_id), replaced_at in view.replaced.items():
        if touched is not None and partition not in touched:
            blocked_replaces.add(replaced_at)
    sp_times = sorted(savepoints)
    writes = timeline.completed().write_instants().instants
    if config.policy == "KEEP_LATEST_FILE_VERSIONS":
        # it deletes old versions whatever their commit: it retains no commit and records none
        # (as Hudi's cleaner), so only savepoints and replaced files left on storage hold archival.
        # A replacecommit still pending here replaces files this clean cannot see yet.
        boundary = None
    else:
        # no commit to retain yet (too few commits, or none older than the hours retained): Hudi's
        # cleaner retains from the first one
        boundary = ectr.timestamp if ectr else (writes[0].timestamp if writes else None)
    earlier_savepoints = [s for s in sp_times if boundary is None or s < boundary]
    ectna = earlier_savepoints[0] if earlier_savepoints else boundary
    if blocked_replaces:
        first_blocked = min(blocked_replaces)
        if ectna is None or first_blocked < ectna:
            ectna = first_blocked
            reasons.append(f"replacecommit {first_blocked} still has replaced files on storage")
    pending_replaces = timeline.pending().of_actions(REPLACE_COMMIT).instants
    if boundary is None and pending_replaces and (ectna is None or pending_replaces[0].timestamp < ectna):
        # a commit bound stops before any pending write; without one, a replacecommit pending
        # here replaces files this clean could not see, so archival must wait for the next clean
        ectna = pending_replaces[0].timestamp
        reasons.append(f"replacecommit {ectna} is pending: its replaced files wait for the next clean")
    last_write = writes[-1].timestamp if writes else ""
    return CleanPlan(
        policy=config.policy,
        earliest_commit_to_retain=ectr,
        last_completed_commit=last_write,
        files_to_delete={p: tuple(sorted(set(files))) for p, files in sorted(deletes.items()) if files},
        savepointed=tuple(sp_times),
        earliest_commit_to_not_archive=ectna,
        full_scan=full_scan,
        reasons=tuple(reasons),
    )


def should_clean(storage: Storage, config: CleanConfig, timeline: Timeline | None = None) -> bool:
    """Hudi's trigger: at least ``hoodie.clean.max.commits`` write commits since the last clean."""
    if timeline is None:
        timeline = load_timeline(storage)
    last = timeline.completed().of_actions(CLEAN).last()  # only its time: no plan to read
    writes = timeline.completed().write_instants().instants
    since = [i for i in writes if last is None or i.timestamp > last.timestamp]
    return len(since) >= config.max_commits


@dataclass(frozen=True)
class CleanResult:
    instant: Instant
    plan: CleanPlan
    deleted: tuple[str, ...]
    failed: tuple[str, ...]
    bytes_reclaimed: int = 0
    #: the pending cleans (a killed cleaner's) this run finished before it planned its own
    finished_first: tuple[CleanResult, ...] = ()
    #: another cleaner running the same plan at the same time (each runs every pending clean)
    #: completed it first: the clean is done all the same
    completed_by_another: bool = False

    @property
    def all_deleted(self) -> tuple[str, ...]:
        """What this run deleted, the pending cleans it finished first included (not one another
        cleaner completed first: that one counts it)."""
        return tuple(p for r in self._own_runs() for p in r.deleted)

    @property
    def all_bytes_reclaimed(self) -> int:
        return sum(r.bytes_reclaimed for r in self._own_runs())

    def _own_runs(self) -> tuple[CleanResult, ...]:
        return tuple(r for r in (*self.finished_first, self) if not r.completed_by_another)


def clean(
    storage: Storage,
    config: CleanConfig,
    now: datetime.datetime | None = None,
    timeline: Timeline | None = None,
    concurrency: ConcurrencyConfig | None = None,
) -> CleanResult | None:
    """Plan and run a clean (finishing a pending one first), from ``timeline`` when the caller has
    just read it. None when disabled, when there is no commit to retain yet, or when a new clean
    would delete nothing and record what the latest one records; then the pending clean it
    finished, if any, is the result.

    With optimistic concurrency the plan is made under the table lock, as Hudi schedules its
    table services, so it is made from a timeline no commit changes meanwhile; the deletes run
    outside it (they touch only file slices no writer writes to any more)."""
    if not config.enabled:
        return None
    check_changeable(storage, "clean", timeline=timeline, writes_rows=False)
    concurrency = concurrency or ConcurrencyConfig()
    if not concurrency.optimistic:
        finished, requested = _schedule_clean(storage, config, now, timeline)
    else:
        with TableLock(storage, concurrency) as lock:
            finished, requested = _schedule_clean(storage, config, now, timeline, lock)
    if requested is not None:
        return dataclasses.replace(run_clean(storage, *requested), finished_first=tuple(finished))
    if finished:  # no new clean was needed: the last pending one finished is the result
        return dataclasses.replace(finished[-1], finished_first=tuple(finished[:-1]))
    return None


#: How long a temporary file stays untouched before the cleaner takes it for abandoned: a write
#: fills one in seconds, so an hour leaves any live write alone.
TEMPORARY_FILE_AGE_S = 3600.0


def remove_abandoned_temporaries(storage: Storage, dry_run: bool = False) -> tuple[str, ...]:
    """Delete the temporary files that killed writes left in the table (on a file system; an
    object store has none), and the instant-time claims killed processes left (anywhere), and
    return their paths; with ``dry_run`` only return them. They hold no committed data: a write's
    file is in place only once it is renamed or linked from one, and a claim is released as soon
    as its instant exists."""
    found = storage.abandoned_temporaries(TEMPORARY_FILE_AGE_S) + abandoned_claims(storage)
    if not dry_run:
        for path in found:
            storage.delete(path)
    return found


def _schedule_clean(
    storage: Storage,
    config: CleanConfig,
    now: datetime.datetime | None,
    timeline: Timeline | None,
    lock: TableLock | None = None,
) -> tuple[list[CleanResult], tuple[Instant, CleanPlan] | None]:
    """The pending cleans finished first, and the new clean's requested instant and plan (None
    when no new clean is needed, see clean), the plan made under ``lock`` when one is held."""
    # one listing of .hoodie/ for the whole run, two when a pending clean had to be finished first
    if timeline is None:
        timeline = load_timeline(storage)
    finished = [run_clean(storage, pending) for pending in timeline.pending().of_actions(CLEAN)]
    if finished:
        timeline = load_timeline(storage)
    plan = plan_clean(storage, config, now, timeline)
    if (
        plan.earliest_commit_to_retain is None
        and not plan.files_to_delete
        and config.policy != "KEEP_LATEST_FILE_VERSIONS"
    ):
        return finished, None
    if not plan.files_to_delete and _records_nothing_new(storage, plan, timeline):
        # A clean that deletes nothing and moves no boundary is not made: otherwise a clean run
        # again (a restart after a crash, a redelivered event) adds a second clean for the same
        # commits. A clean this call finished from before is the work it did. A
        # KEEP_LATEST_FILE_VERSIONS clean that deletes nothing is made when it moves the archival
        # bound (its first, or after one that held archival at a savepoint since deleted).
        return finished, None
    check_still_held(lock, "the clean")
    requested = request_new_instant(
        storage, timeline, CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(storage))
    )
    check_still_held(lock, "the clean", undo=lambda: storage.delete(instant_path(requested)))
    return finished, (requested, plan)


def _records_nothing_new(storage: Storage, plan: CleanPlan, timeline: Timeline) -> bool:
    """Whether the latest completed clean already records this plan's retained commit, savepoints
    and EarliestCommitToNotArchive."""
    last, extra, ectr = last_clean_extra(storage, timeline)
    retained = plan.earliest_commit_to_retain
    return (
        last is not None
        and ectr == (retained.timestamp if retained else None)
        and extra == plan.to_avro(storage)["extraMetadata"]
    )


def run_clean(storage: Storage, instant: Instant, plan: CleanPlan | None = None) -> CleanResult:
    """Execute a clean plan from its requested file: every delete may run twice safely."""
    if instant.action != CLEAN or instant.is_completed:
        raise InstantStateError(f"{instant} is not a pending clean")
    check_changeable(storage, "clean", writes_rows=False)
    requested = instant.with_state(State.REQUESTED)
    raw_plan = _read_raw_plan(storage, instant)
    started = time.monotonic()
    inflight = instant.with_state(State.INFLIGHT)
    if instant.state is State.REQUESTED:
        try:
            transition_to_inflight(storage, requested, avro.serialize("HoodieCleanerPlan", raw_plan))
        except InstantStateError:
            # another cleaner runs this same plan (every cleaner finishes the pending cleans it
            # sees) and made it inflight first; every delete may run twice, so run it too
            if not storage.exists(instant_path(inflight)):
                raise
    deleted: list[str] = []
    failed: list[str] = []
    first_failure = ""
    reclaimed = 0
    partitions = {}
    # what a savepoint keeps now is never deleted: a plan is made without the savepoints' files,
    # but one whose cleaner lost the table lock (and could not take its plan back) was made from
    # a timeline without a savepoint created meanwhile
    kept = set().union(*savepointed_files(storage).values())
    for partition, infos in (raw_plan.get("filePathsToBeDeletedPerPartition") or {}).items():
        ok, bad = [], []
        for info in infos:
            path = plan_file_path(partition, info["filePath"])
            if path in kept:
                _log.warning(
                    "clean %s: %s is kept by a savepoint made after the plan; not deleted", instant.timestamp, path
                )
                continue
            try:
                # gone already: a retried clean, or another cleaner running this plan
                with contextlib.suppress(ObjectNotFoundError):
                    reclaimed += storage.size(path)
                storage.delete(path)
                ok.append(path.rsplit("/", 1)[-1])
                deleted.append(path)
            except StorageUnreachableError as e:
                # every file left would wait out the same timeouts: stop now, the clean stays pending
                raise StorageUnreachableError(
                    f"clean {instant.timestamp} stopped after deleting {len(deleted)} files: {e}; "
                    "it stays pending and the next clean retries it"
                ) from e
            except StorageError as e:  # recorded as Hudi records it; the clean stays pending
                bad.append(path.rsplit("/", 1)[-1])
                failed.append(path)
                first_failure = first_failure or str(e)
        partitions[partition] = {
            "partitionPath": partition,
            "policy": raw_plan["policy"],
            "deletePathPatterns": [i["filePath"].rsplit("/", 1)[-1] for i in infos],
            "successDeleteFiles": ok,
            "failedDeleteFiles": bad,
            "isPartitionDeleted": False,
        }
    ectr = raw_plan.get("earliestInstantToRetain") or {}
    metadata = {
        "startCleanTime": instant.timestamp,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(deleted),
        "earliestCommitToRetain": ectr.get("timestamp", ""),
        "lastCompletedCommitTimestamp": raw_plan.get("lastCompletedCommitTimestamp", ""),
        "partitionMetadata": partitions,
        "version": 2,
        "bootstrapPartitionMetadata": {},
        "extraMetadata": raw_plan.get("extraMetadata"),
    }
    if failed:
        raise InstantStateError(
            f"clean {instant.timestamp} could not delete {len(failed)} files (first: {first_failure}); "
            "it stays pending and the next clean retries it"
        )
    completed = instant.with_state(State.COMPLETED)
    by_another = False
    try:
        transition_to_completed(
            storage,
            inflight,
            avro.serialize("HoodieCleanMetadata", metadata),
            finished_by=f"tidemark clean {storage.uri}",
        )
    except InstantStateError:
        if not storage.exists(instant_path(completed)):
            raise
        # another cleaner ran the same plan and completed it first: the files are gone, it is done
        _log.info("clean %s: another cleaner running the same plan completed it first", instant.timestamp)
        by_another = True
    if plan is None:
        plan = _plan_from_avro(raw_plan)
    return CleanResult(completed, plan, tuple(deleted), tuple(failed), reclaimed, completed_by_another=by_another)


def pending_clean_plans(storage: Storage, timeline: Timeline) -> list[tuple[Instant, CleanPlan]]:
    """The pending cleans on ``timeline`` and their plans: the next clean finishes them first."""
    return [(i, _plan_from_avro(_read_raw_plan(storage, i))) for i in timeline.pending().of_actions(CLEAN)]


def _read_raw_plan(storage: Storage, instant: Instant) -> dict[str, Any]:
    requested = instant.with_state(State.REQUESTED)
    where = storage.full_uri(instant_path(requested))
    return avro.deserialize(read_instant(storage, requested), "HoodieCleanerPlan", where)


def _plan_from_avro(raw: Mapping[str, object]) -> CleanPlan:
    extra = dict(raw.get("extraMetadata") or {})  # type: ignore[call-overload]
    ectr = raw.get("earliestInstantToRetain") or None
    files = {
        p: tuple(plan_file_path(p, i["filePath"]) for i in infos)
        for p, infos in (raw.get("filePathsToBeDeletedPerPartition") or {}).items()  # type: ignore[attr-defined]
    }
    return CleanPlan(
        policy=str(raw.get("policy")),
        earliest_commit_to_retain=None if not ectr else Instant(ectr["timestamp"], ectr["action"]),  # type: ignore[index]
        last_completed_commit=str(raw.get("lastCompletedCommitTimestamp", "")),
        files_to_delete=files,
        savepointed=tuple(s for s in extra.get(SAVEPOINTED_TIMESTAMPS, "").split(",") if s),
        earliest_commit_to_not_archive=extra.get(EARLIEST_COMMIT_TO_NOT_ARCHIVE) or None,
        full_scan=True,
    )
