"""Write conflicts between writers of one table: at commit (optimistic concurrency control) and
early, from markers (RFC-56's direct strategy).

A write *touches* file groups, named ``partition/fileId`` (the file id alone in a table without
partitions); a write that replaces whole partitions (insert_overwrite) touches ``partition/*``.
Two writes conflict when they touch a common file group, as in Hudi's
``SimpleConcurrentFileWritesConflictResolutionStrategy``; file groups come from parsing whole file
names from the right (never by splitting on ``_``), and partitioned tables are checked like any
other (HUDI-5831).

What a write must be checked against is fixed when it starts (:class:`WriteStart`): every write
that completes after that moment, and every compaction or clustering planned after it, whatever
its instant time. A compaction planned before the write started is not a conflict: the write
then went to the compaction's new file slice. A write pending at the start may complete, and be
archived, before the write commits (archival stops at the earliest pending instant's *time*, and
its time is earlier): the commit looks for it in the archived timeline.

Early checks settle a race between two running writes in favour of the earlier instant: only the
later one gives up, so a pair of overlapping writes never both abort early. The commit-time check
under the table lock stays the final word.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from tidemark.errors import (
    InvalidBaseFileNameError,
    InvalidLogFileNameError,
    StorageError,
    TidemarkError,
    WriteConflictError,
)
from tidemark.logformat.file_name import BaseFileName, LogFileName
from tidemark.storage.base import Storage, storage_read_pool
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.file_system_view import path_in_partition, read_compaction_plan
from tidemark.table.heartbeat import heartbeat_status
from tidemark.table.markers import TEMP_FOLDER, read_marker_files
from tidemark.table.properties import read_properties
from tidemark.timeline import (
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    RESTORE,
    ROLLBACK,
    CommitMetadata,
    Instant,
    State,
    Timeline,
    load_timeline,
    read_instant,
    rollback_command,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.archived import archived_blocks_newest_first
from tidemark.timeline.instant import WRITE_ACTIONS

_log = logging.getLogger("tidemark.conflict")

#: up to this many shared file groups are named in an error
NAMED_FILE_GROUPS = 10
#: the line a Spark task adds to its error so the driver can rebuild the conflict it found
_WIRE_PREFIX = "tidemark-conflict: "
_WIRE = re.compile(re.escape(_WIRE_PREFIX) + r"(\{[^\n]*\})")


def file_group(partition: str, file_id: str) -> str:
    return f"{partition}/{file_id}" if partition else file_id


def whole_partition(partition: str) -> str:
    return f"{partition}/*" if partition else "*"


def _partition_of(group: str) -> str:
    return group.rpartition("/")[0]


def file_group_of_data_file(path: str) -> str | None:
    """The file group a data file (base or log file, relative to the table) belongs to."""
    partition, _, name = path.rpartition("/")
    try:
        if LogFileName.is_log_file(name):
            return file_group(partition, LogFileName.parse(name).file_id)
        return file_group(partition, BaseFileName.parse(name).file_id)
    except (InvalidLogFileNameError, InvalidBaseFileNameError):
        return None  # not a data file (partition metadata and the like)


def shared_file_groups(mine: Iterable[str], theirs: Iterable[str]) -> list[str]:
    """The file groups both sets touch, a whole-partition entry matching any group in it."""
    a, b = set(mine), set(theirs)
    shared = a & b
    for wide, other in ((a, b), (b, a)):
        for group in wide:
            if group.endswith("*"):
                partition = _partition_of(group) if "/" in group else ""
                shared.update(g for g in other if (_partition_of(g) if "/" in g else "") == partition)
    return sorted(shared)


def touched_by_commit(metadata: CommitMetadata) -> frozenset[str]:
    """The file groups a completed write touched: written, and replaced (insert_overwrite replaces
    its partitions whole)."""
    groups = {file_group(s.partition_path or "", s.file_id) for s in metadata.write_stats() if s.file_id}
    for partition, ids in metadata.partition_to_replace_file_ids.items():
        groups.update(file_group(partition, i) for i in ids)
    if (metadata.operation_type or "").upper() in ("INSERT_OVERWRITE", "INSERT_OVERWRITE_TABLE"):
        groups.update(whole_partition(p) for p in metadata.partition_to_write_stats)
        groups.update(whole_partition(p) for p in metadata.partition_to_replace_file_ids)
    return frozenset(groups)


def _touched_by_plan(storage: Storage, instant: Instant) -> frozenset[str]:
    """The file groups a planned compaction or clustering rewrites (from its requested plan)."""
    if instant.action == COMPACTION:
        return frozenset(file_group(op.partition_path, op.file_id) for op in read_compaction_plan(storage, instant))
    requested = instant.with_state(State.REQUESTED)
    data = read_instant(storage, requested)
    if not data:
        return frozenset()  # a replacecommit of a plain write (insert_overwrite) has no plan
    where = storage.full_uri(f".hoodie/{requested.file_name}")
    requested_replace = avro.deserialize(data, "HoodieRequestedReplaceMetadata", where)
    clustering = requested_replace.get("clusteringPlan") or {}
    return frozenset(
        file_group(s.get("partitionPath") or "", s["fileId"])
        for g in clustering.get("inputGroups") or []
        for s in g.get("slices") or []
    )


@dataclass(frozen=True)
class WriteStart:
    """What the timeline held when a write started: the completed writes and the pending
    compactions it already saw (it logs on top of their plans), and the restores. Everything else
    that touches its file groups, whenever it appears, is a concurrent operation: a replacecommit
    pending at the start too (an insert_overwrite, or a clustering, replaces the groups the write
    updates once it completes); and so is any restore begun since (see :func:`restores_since`).
    ``pending``: the writes (clusterings included) pending at the start, which the commit looks for
    in the archive should they leave the active timeline meanwhile."""

    instant: str
    seen: frozenset[str]
    pending: frozenset[str] = frozenset()

    @classmethod
    def of(cls, instant: str, timeline: Timeline) -> WriteStart:
        seen = {i.timestamp for i in timeline.completed().write_instants()}
        seen.update(i.timestamp for i in timeline.pending().of_actions(COMPACTION))
        seen.update(i.timestamp for i in timeline.of_actions(RESTORE))
        # completed rollbacks: one begun since, of a write it saw completed, is a conflict (the
        # write's own commit judges it, see write_client.PendingWrite)
        seen.update(i.timestamp for i in timeline.completed().of_actions(ROLLBACK))
        pending = {i.timestamp for i in timeline.pending().of_actions(COMMIT, DELTA_COMMIT, REPLACE_COMMIT)}
        return cls(instant, frozenset(seen), frozenset(pending))

    def to_json(self) -> str:
        return json.dumps({"instant": self.instant, "seen": sorted(self.seen), "pending": sorted(self.pending)})

    @classmethod
    def from_json(cls, text: str) -> WriteStart:
        obj = json.loads(text)
        # a driver of an earlier version sends no "pending"
        return cls(obj["instant"], frozenset(obj["seen"]), frozenset(obj.get("pending") or ()))


@dataclass
class ConcurrentOperations:
    """The operations a write must not overlap, read from the timeline; what each touched is read
    once and cached (a completed instant never changes)."""

    storage: Storage
    start: WriteStart
    _touched: dict[tuple[str, str, bool], frozenset[str]] = field(default_factory=dict)

    def candidates(self, timeline: Timeline) -> list[Instant]:
        """Writes completed, and compactions and clusterings planned, since the write started."""
        found = []
        for instant in timeline.of_actions(*WRITE_ACTIONS):
            if instant.timestamp == self.start.instant or instant.timestamp in self.start.seen:
                continue
            if instant.is_completed or instant.action in (COMPACTION, REPLACE_COMMIT):
                found.append(instant)
        return found

    def touched(self, instant: Instant) -> frozenset[str]:
        key = (instant.timestamp, instant.action, instant.is_completed)
        cached = self._touched.get(key)
        if cached is None:
            if instant.is_completed:
                where = self.storage.full_uri(f".hoodie/{instant.file_name}")
                cached = touched_by_commit(CommitMetadata.from_bytes(read_instant(self.storage, instant), where))
            else:
                cached = _touched_by_plan(self.storage, instant)
            self._touched[key] = cached
        return cached

    def first_conflict(self, timeline: Timeline, mine: Iterable[str]) -> tuple[Instant, list[str]] | None:
        groups = frozenset(mine)
        for instant in self.candidates(timeline):
            shared = shared_file_groups(groups, self.touched(instant))
            if shared:
                return instant, shared
        return None

    def left_the_timeline(self, timeline: Timeline) -> frozenset[str]:
        """The writes pending at the start that ``timeline`` holds no more, in any state: rolled
        back, or completed and archived since."""
        return self.start.pending - {i.timestamp for i in timeline.of_actions(*WRITE_ACTIONS)}

    def first_archived_conflict(
        self, timestamps: Collection[str], mine: Iterable[str]
    ) -> tuple[Instant, list[str]] | None:
        """The first of the writes at ``timestamps`` that the archive holds completed and that
        touched one of ``mine``. The archive is read newest block first, only until each of them
        is found: a long-lived table's archive is long, and they were archived lately. Not back
        to a block wholly older than them: a savepoint delete archives an old commit in a newest
        block, in front of them (one not found reads the archive to its start: rare, and right)."""
        groups, wanted = frozenset(mine), set(timestamps)
        if not wanted:
            return None
        folder = read_properties(self.storage).archive_folder
        for block in archived_blocks_newest_first(self.storage, folder):
            for archived in block.instants:
                if (
                    archived.timestamp in wanted
                    and archived.state is State.COMPLETED
                    and archived.action in WRITE_ACTIONS
                ):
                    wanted.discard(archived.timestamp)
                    where = f"{self.storage.full_uri(folder)}: archived {archived.timestamp}.{archived.action}"
                    shared = shared_file_groups(
                        groups, touched_by_commit(CommitMetadata.from_json(archived.metadata, where))
                    )
                    if shared:
                        return Instant(archived.timestamp, archived.action), shared
            if not wanted:
                break
        return None


def conflict_error(
    instant: str,
    other: str,
    other_what: str,
    shared: list[str],
    stage: str,
    rolled_back: bool = True,
    storage: Storage | None = None,
    archived: bool = False,
) -> WriteConflictError:
    """The error of a conflict with ``other``; ``storage``, the table's, for the command that
    rolls back a planned clustering; ``archived``: ``other`` was found in the archived timeline."""
    named = ", ".join(shared[:NAMED_FILE_GROUPS]) + (
        f" and {len(shared) - NAMED_FILE_GROUPS} more" if len(shared) > NAMED_FILE_GROUPS else ""
    )
    where = "at a marker, before the write finished" if stage == "early" else "at commit"
    if archived:
        where += ", in the archived timeline: it was archived while this write ran"
    if not rolled_back:
        outcome = ""
    elif other_what == "planned clustering":
        # written again at once, the write would lose again: Apache Hudi's clustering keeps its
        # file groups from updates until it has run (its SparkRejectUpdateStrategy)
        rollback = rollback_command(storage, other) if storage is not None else f"tidemark rollback PATH {other}"
        outcome = (
            f"; this write was rolled back. The clustering {other} blocks updates to these file groups until "
            f"it is run (by Apache Hudi) or its plan is rolled back (`{rollback}`); write it again only then"
        )
    else:
        outcome = "; this write was rolled back: write it again"
    return WriteConflictError(
        f"write conflict: write {instant} and {other_what} {other} both touch "
        f"{len(shared)} file group(s): {named} (found {where}){outcome}",
        instant=instant,
        other=other,
        file_groups=tuple(shared[:NAMED_FILE_GROUPS]),
        stage=stage,
    )


def other_named(other: Instant) -> str:
    """The other instant as the conflict error names it: a user looks for it on the timeline."""
    if other.is_completed:
        return "committed compaction" if other.action == COMPACTION else "committed write"
    # a pending replacecommit that touches file groups is a clustering (an insert_overwrite's plan is empty)
    return f"planned {'clustering' if other.action == REPLACE_COMMIT else other.action}"


def restores_since(start: WriteStart, timeline: Timeline) -> list[Instant]:
    """The restores (pending or completed) on ``timeline`` begun since the write started: it may
    have read a file one rolls back (a copy-on-write merge carries its rows into the new file), so
    whatever file groups it touched, its commit would bring back what the restore took away."""
    return [i for i in timeline.of_actions(RESTORE) if i.timestamp not in start.seen]


def check_commit_conflicts(
    storage: Storage,
    operations: ConcurrentOperations,
    timeline: Timeline,
    mine: Iterable[str],
    rolled_back: Callable[[], Collection[str]] = frozenset,
) -> None:
    """Raise :class:`WriteConflictError` (stage ``commit``) when a restore began since this write
    started, or when a write completed, or a compaction or clustering was planned, since then and
    touches one of its file groups. Call it under the table lock, with a timeline read under the
    lock (a restore checks for live writers and writes its plan under it too; an archival moves
    instants under it). ``rolled_back``: the writes rolled back since the start (asked only when a
    write pending at the start has left the timeline, to look in the archive only for the others)."""
    start = operations.start
    mine = frozenset(mine)
    for restore in restores_since(start, timeline):
        COUNTERS.add("conflicts_at_commit")
        raise WriteConflictError(
            f"write conflict: restore {restore.timestamp} of {storage.uri} began while write {start.instant} ran, "
            "and this write may carry rows it rolls back; this write was rolled back: write it again"
            + ("" if restore.is_completed else " once the restore is finished"),
            instant=start.instant,
            other=restore.timestamp,
            stage="commit",
        )
    found = operations.first_conflict(timeline, mine)
    if found is not None:
        other, shared = found
        state = other_named(other)
        COUNTERS.add("conflicts_at_commit")
        raise conflict_error(operations.start.instant, other.timestamp, state, shared, "commit", storage=storage)
    # the common case ends here: nothing pending at the start has left the timeline
    gone = operations.left_the_timeline(timeline)
    if gone:
        gone -= frozenset(rolled_back())
    found = operations.first_archived_conflict(gone, mine) if gone else None
    if found is not None:
        other, shared = found
        COUNTERS.add("conflicts_at_commit")
        raise conflict_error(
            start.instant, other.timestamp, other_named(other), shared, "commit", storage=storage, archived=True
        )


def pending_clusterings(storage: Storage, timeline: Timeline) -> dict[str, frozenset[str]]:
    """Each pending clustering (a replacecommit planned with a clustering plan, as Apache Hudi's
    async clustering schedules it; a pending insert_overwrite has none) and the file groups it
    rewrites. A clustering is no failed write: it has no heartbeat, and its executor may run."""
    found = {}
    for instant in timeline.pending().of_actions(REPLACE_COMMIT):
        groups = _touched_by_plan(storage, instant)
        if groups:
            found[instant.timestamp] = groups
    return found


def check_no_pending_clustering(storage: Storage, timeline: Timeline, instant: str, mine: Iterable[str]) -> None:
    """Raise :class:`WriteConflictError` when a pending clustering rewrites a file group this
    write changes: once the clustering completes, its new file groups replace the old ones and
    the change would be lost (Hudi's ``SparkRejectUpdateStrategy`` refuses it for the same reason).
    A write that only adds file groups passes."""
    groups = frozenset(mine)
    for other, rewritten in pending_clusterings(storage, timeline).items():
        shared = shared_file_groups(groups, rewritten)
        if shared:
            COUNTERS.add("conflicts_at_commit")
            raise conflict_error(instant, other, "planned clustering", shared, "commit", storage=storage)


# --- early detection (direct markers) ------------------------------------------------------------


def to_wire(error: WriteConflictError) -> str:
    """The error's message plus a line from which :func:`from_wire` rebuilds it on the driver."""
    detail = {
        "message": str(error).splitlines()[0],
        "instant": error.instant,
        "other": error.other,
        "groups": list(error.file_groups),
        "stage": error.stage,
    }
    return f"{error}\n{_WIRE_PREFIX}{json.dumps(detail)}"


def from_wire(text: str) -> dict[str, object] | None:
    """The conflict a task reported somewhere in ``text`` (a Spark job's failure), if any."""
    m = _WIRE.search(text)
    if m is None:
        return None
    try:
        found: dict[str, object] = json.loads(m.group(1))
    except ValueError:
        return None
    return found


@dataclass
class EarlyConflictDetector:
    """Checks one write's file groups, as its markers are created, against the markers of other
    live writes and (``check_commits``) the writes completed since it started.

    Only earlier live writes count among the pending ones (see the module's docstring); a
    write's own markers never do, so an attempt re-creating its own marker is no conflict. A check
    that fails on storage is retried; if it keeps failing it is counted, logged, and the write goes
    on: the commit-time check decides.
    """

    storage: Storage
    config: ConcurrencyConfig
    start: WriteStart
    retries: int = 3
    #: liveness of other writes, cached for half a heartbeat interval
    _live: dict[str, tuple[float, bool]] = field(default_factory=dict)
    _operations: ConcurrentOperations | None = None
    _sleep: Callable[[float], None] = time.sleep

    @property
    def instant(self) -> str:
        return self.start.instant

    def _is_live(self, instant: str) -> bool:
        now = time.monotonic()
        cached = self._live.get(instant)
        if cached is not None and now - cached[0] < self.config.heartbeat_interval_ms / 2000:
            return cached[1]
        live = not heartbeat_status(self.storage, instant, self.config).expired
        self._live[instant] = (now, live)
        return live

    def _pending_rivals(self) -> list[str]:
        """Earlier writes that have markers and a live heartbeat."""
        folders = self.storage.list_dir(TEMP_FOLDER).folders
        return [i for i in folders if i < self.instant and i != self.instant and self._is_live(i)]

    def _marker_conflict(self, rival: str, groups: Mapping[str, set[str]]) -> list[str]:
        shared = []
        # a rival that writes through the writer-coordinator has its markers in MARKERS<N> files
        for batch in read_marker_files(self.storage, rival).values():
            for marker in batch:
                found = file_group_of_data_file(marker.data_path)
                if found is not None and found.rpartition("/")[2] in groups.get(_partition_of(found), ()):
                    shared.append(found)
        for partition, ids in groups.items():
            folder = path_in_partition(f"{TEMP_FOLDER}/{rival}", partition)
            # the names that may be of these file groups (a base file starts "<id>_", a log file
            # ".<id>_"); which group a name is of comes from parsing it whole, from the right
            prefixes = tuple(p for i in ids for p in (f"{i}_", f".{i}_"))
            for name in self.storage.list_names(folder, prefixes):
                data_name = name.rpartition(".marker.")[0]
                found = file_group_of_data_file(path_in_partition(partition, data_name))
                if found is not None and found.rpartition("/")[2] in ids:
                    shared.append(found)
        return sorted(set(shared))

    def _find(self, mine: Iterable[str]) -> WriteConflictError | None:
        by_partition: dict[str, set[str]] = {}
        for group in mine:
            partition, _, file_id = group.rpartition("/")
            by_partition.setdefault(partition, set()).add(file_id)
        rivals = self._pending_rivals()
        # each rival's folders are listed at once (a listing waits on storage, not on Python):
        # with 10 rivals of 10,000 markers in one partition, half the time on two cores
        listed = storage_read_pool().map(lambda r: self._marker_conflict(r, by_partition), rivals) if rivals else []
        for rival, shared in zip(rivals, listed, strict=True):
            if shared:
                return conflict_error(self.instant, rival, "running write", shared, "early")
        if self.config.early_check_commit_conflict:
            if self._operations is None:
                self._operations = ConcurrentOperations(self.storage, self.start)
            found = self._operations.first_conflict(load_timeline(self.storage), mine)
            if found is not None:
                other, shared = found
                state = other_named(other)
                return conflict_error(self.instant, other.timestamp, state, shared, "early", storage=self.storage)
        return None

    def check(self, mine: Iterable[str]) -> None:
        """Raise :class:`WriteConflictError` (stage ``early``) when one of ``mine`` is touched by
        another write as described above."""
        groups = list(mine)
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                found = self._find(groups)
            except (StorageError, TidemarkError) as e:
                if attempt == self.retries:
                    COUNTERS.add("early_check_errors")
                    _log.warning(
                        "early conflict check of write %s failed %d times, the commit will check instead: %s",
                        self.instant,
                        attempt + 1,
                        e,
                    )
                    return
                self._sleep(delay)
                delay *= 2
                continue
            if found is not None:
                COUNTERS.add("conflicts_early")
                raise found
            return
