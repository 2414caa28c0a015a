"""Incremental queries (Hudi's ``hoodie.datasource.query.type=incremental``): the records that the
commits after one instant wrote, up to and including another, each at its latest value as of that
end. Deleted records are not in it; a record written in the range and updated again after it is
(at its value as of the end).

The result is the snapshot as of the end instant, its rows filtered to a ``_hoodie_commit_time``
in the range, as Hudi's incremental relations do. Only the file groups the range's commits wrote
(their commit metadata names them) are read. When the range reaches back past the active timeline
(the archive holds some of its commits, whose metadata is not read, or part of the archive is
damaged and may), every file group is read: Hudi's full-table-scan fallback, the same rows.

Instant times order the commits (table version 6), so a write that started before the end of the
range and is still pending (a *hollow* commit) would be missed by a query that ends after it, and
by the next query, which begins there. By Hudi's ``hoodie.read.timeline.holes.resolution.policy``:
``FAIL`` (the default) refuses the query, ``BLOCK`` ends the range before the pending write. A
pending compaction or clustering is no such write: it writes no new records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from tidemark.errors import InstantStateError, TableError
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import COMMIT_TIME
from tidemark.table.conflict import pending_clusterings
from tidemark.table.file_system_view import FileSlice, changed_while_reading, instant_metadata
from tidemark.table.properties import TableProperties, read_properties
from tidemark.table.snapshot import SnapshotReader, declared_schema, no_rows
from tidemark.timeline import Timeline, load_timeline
from tidemark.timeline.archived import archive_files, scan_archive
from tidemark.timeline.instant import COMPACTION, WRITE_ACTIONS, State

#: the value of Hudi's hoodie.datasource.query.type for this query
INCREMENTAL: Final = "incremental"
BEGIN_INSTANT: Final = "hoodie.datasource.read.begin.instanttime"
END_INSTANT: Final = "hoodie.datasource.read.end.instanttime"
HOLES_POLICY: Final = "hoodie.read.timeline.holes.resolution.policy"
FAIL: Final = "FAIL"
BLOCK: Final = "BLOCK"
#: Hudi's third policy orders commits by completion time, which table version 6 does not record
_USE_TRANSITION_TIME: Final = "USE_TRANSITION_TIME"
_MAX_DIGITS: Final = 17


@dataclass(frozen=True)
class RangeNames:
    """What a caller calls a range's begin, end and holes policy, for its errors to name: the
    library's arguments by default, the command line's flags or Hudi's options for theirs."""

    begin: str = "begin"
    end: str = "end"
    policy: str = "policy"


#: the names of the Spark source's options
HUDI_OPTIONS: Final = RangeNames(BEGIN_INSTANT, END_INSTANT, HOLES_POLICY)


def instant_bound(text: object, key: str) -> str:
    """An instant time given as a range bound (``000`` for the table's beginning). Bounds are
    compared as text, so anything else (a date, a number) would select the wrong commits."""
    value = text.strip() if isinstance(text, str) else ""
    if not value.isdigit() or len(value) > _MAX_DIGITS:
        raise TableError(f"{key}={text!r}: expected an instant time (yyyyMMddHHmmss[SSS]; 000 for the beginning)")
    return value


def holes_policy(text: object, key: str = HOLES_POLICY) -> str:
    """Hudi's holes resolution policy (any case), FAIL or BLOCK: another value would otherwise
    act as one of them without a word."""
    value = text.strip().upper() if isinstance(text, str) else ""
    if value == _USE_TRANSITION_TIME:
        raise TableError(
            f"{key}={value}: tidemark orders commits by instant time (table version 6 keeps no "
            f"completion times); use {FAIL} or {BLOCK}"
        )
    if value not in (FAIL, BLOCK):
        raise TableError(f"{key}={text!r}: expected {FAIL} or {BLOCK}")
    return value


@dataclass(frozen=True)
class IncrementalRange:
    """What an incremental query reads: commits after ``begin`` up to ``end`` inclusive."""

    begin: str
    #: the last completed write in the range (None: the range holds no completed write)
    end: str | None
    #: (partition, file id) of every file group the range's commits wrote; None: every group
    file_groups: frozenset[tuple[str, str]] | None
    #: the end asked for (None: none), as of which a range without rows has its columns
    until: str | None = None

    def admits(self, file_slice: FileSlice) -> bool:
        if self.end is None:
            return False
        return self.file_groups is None or (file_slice.partition_path, file_slice.file_id) in self.file_groups

    def rows_in_range(self, table: pa.Table) -> pa.Table:
        """The rows whose commit time is in the range."""
        if self.end is None or not table.num_rows:
            return table.slice(0, 0)
        if COMMIT_TIME not in table.column_names:
            raise TableError(f"the rows have no {COMMIT_TIME} column: an incremental query needs Hudi's meta fields")
        times = table.column(COMMIT_TIME)
        return table.filter(pc.and_(pc.greater(times, self.begin), pc.less_equal(times, self.end)))


def plan_incremental(
    storage: Storage,
    timeline: Timeline,
    begin: str,
    end: str | None = None,
    policy: str = FAIL,
    names: RangeNames = RangeNames(),
    properties: TableProperties | None = None,
) -> IncrementalRange:
    """The range of an incremental query after ``begin`` up to ``end`` (the latest completed write
    when None), on the table's whole active ``timeline``. The bounds and the policy are checked
    here, for every caller; ``names`` says what the caller calls them; ``properties``: the table's,
    where the caller read them already."""
    begin = instant_bound(begin, names.begin)
    end = instant_bound(end, names.end) if end is not None else None
    policy = holes_policy(policy, names.policy)
    props = properties if properties is not None else read_properties(storage)
    if not props.populate_meta_fields:
        raise TableError(
            f"{storage.uri} keeps no meta fields (hoodie.populate.meta.fields=false): an incremental query "
            f"selects records by their {COMMIT_TIME}, which its files do not hold"
        )
    writes = timeline.write_instants()
    completed = [i.timestamp for i in writes.completed() if i.timestamp <= (end or "9" * _MAX_DIGITS)]
    last = completed[-1] if completed else None
    # a pending write older than the range's end; neither a compaction nor a clustering writes new
    # records (a clustering keeps their commit times), so neither opens a hole: Hudi's
    # handleHollowCommitIfNeeded leaves both out, and an async clustering may stay planned for long
    try:
        clusterings = pending_clusterings(storage, timeline)
    except InstantStateError as e:  # its plan rolled back or archived since the timeline was loaded
        raise changed_while_reading(storage, str(e)) from e
    hollow = next(
        (i for i in writes.pending() if i.action != COMPACTION and i.timestamp not in clusterings),
        None,
    )
    if hollow is not None and last is not None and hollow.timestamp < last:
        if policy == FAIL:
            raise TableError(
                f"incremental query of {storage.uri} up to {last}: the {hollow.action} {hollow.timestamp} started "
                f"before it and is still {hollow.state.name.lower()}, so this query and the next would miss what "
                f"it writes. Wait until it completes or is rolled back, end the query before it, or set "
                f"{HOLES_POLICY}={BLOCK} to end the range there"
            )
        before = [t for t in completed if t < hollow.timestamp]
        last = before[-1] if before else None
    folder = props.archive_folder
    # archival takes the oldest writes (beyond savepoints, the writes between them; the savepointed
    # stay active), so a range beginning at or after the first write left unsavepointed holds no
    # archived write, nor one a damaged archive hides: the archive, which grows with the table's
    # age, is read only for a range reaching back past it (Hudi's isBeforeTimelineStarts)
    first = timeline.first_non_savepoint_write()
    reaches_archive = first is None or begin < first
    archived = (
        scan_archive(storage, folder)
        if reaches_archive and (last is None or last > begin) and archive_files(storage, folder)
        else None
    )
    if last is None and archived is not None:
        # the range ends before the active timeline: its commits are all archived
        ends = [
            a.timestamp
            for a in archived.instants
            if begin < a.timestamp <= (end or "9" * _MAX_DIGITS)
            and a.action in WRITE_ACTIONS
            and a.state is State.COMPLETED
        ]
        if ends:
            # Hudi scans the latest file slices for the range's commit times here, which leaves
            # out every row a later commit rewrote without a word; as time travel to the end
            # (archived: its slices are not on the timeline), it is refused
            active = writes.completed().instants
            after = f"an end at or after {active[0].timestamp}" if active else "no end"
            raise TableError(
                f"incremental query of {storage.uri} up to {max(ends)}: the commits of the range are all archived, "
                f"so the table cannot be read as of its end, and the rows later commits rewrote would be missing. "
                f"Give {after} (the first write on the active timeline), as of which the range's rows are read"
            )
    if last is None or last <= begin:
        return IncrementalRange(begin, None, frozenset(), end)
    if archived is not None and (
        # a damaged part of the archive may hold the range's commits too
        archived.skipped
        or any(
            a.timestamp > begin and a.action in WRITE_ACTIONS and a.state is State.COMPLETED for a in archived.instants
        )
    ):
        return IncrementalRange(begin, last, None, end)  # some of the range's commits are archived
    groups: set[tuple[str, str]] = set()
    for instant in writes.completed():
        if begin < instant.timestamp <= last:
            try:
                metadata = instant_metadata(storage, instant)
            except InstantStateError:
                # archived since the timeline was loaded (the archiver writes the archive first):
                # every file group, as for a range reaching the archive
                return IncrementalRange(begin, last, None, end)
            groups.update((p, s.file_id) for p, stats in metadata.partition_to_write_stats.items() for s in stats)
    return IncrementalRange(begin, last, frozenset(groups), end)


def columns_timeline(storage: Storage, timeline: Timeline, span: IncrementalRange) -> Timeline:
    """The timeline whose schema a range without rows answers with, so that a caller's select works
    on it as on a range with rows: the table's as of the range's end; for an end before the
    table's first write, the first write's (its latest when the first write recorded none), not
    no columns at all. The library and the Spark source both answer so."""
    if span.until is None:
        return timeline
    then = timeline.as_of(span.until)
    writes = timeline.write_instants().completed().instants
    if then.write_instants().completed().instants or not writes:
        return then
    first = timeline.as_of(writes[0].timestamp)
    return first if declared_schema(storage, first) is not None else timeline


def read_incremental(
    storage: Storage, begin: str, end: str | None = None, policy: str = FAIL, names: RangeNames = RangeNames()
) -> pa.Table:
    """The records the commits after ``begin`` up to ``end`` wrote (meta columns included), each as
    of the range's end: ``begin`` and ``end`` instant times (``000``: the beginning), ``policy``
    Hudi's holes resolution policy (FAIL or BLOCK)."""
    timeline = load_timeline(storage)
    props = read_properties(storage)
    span = plan_incremental(storage, timeline, begin, end, policy, names, props)
    if span.end is None:
        # only a table with meta fields gets here
        return no_rows(storage, columns_timeline(storage, timeline, span), meta_fields=True)
    reader = SnapshotReader(storage, span.end, timeline=timeline, file_groups=span.file_groups, properties=props)
    return span.rows_in_range(reader.read(s for s in reader.view.latest_file_slices() if span.admits(s)))
