"""The file-system view: which files make up the table as of an instant.

File groups (one file id in one partition) hold file slices (a base file and the log files
written on top of it, keyed by the base instant). Only files of completed instants count; file
groups replaced by a completed replacecommit are gone; a slice waiting for a pending compaction
is read merged with the slice before it, as Hudi does.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from tidemark.bulk import collector_paused
from tidemark.errors import (
    InstantStateError,
    InvalidBaseFileNameError,
    InvalidLogFileNameError,
    ObjectNotFoundError,
    TableChangedError,
    TableError,
    TimelineError,
)
from tidemark.logformat.file_name import BaseFileName, LogFileName
from tidemark.storage.base import FileInfo, Storage
from tidemark.table.properties import read_properties
from tidemark.timeline import (
    CLEAN,
    COMPACTION,
    METAFOLDER,
    REPLACE_COMMIT,
    RESTORE,
    ROLLBACK,
    CommitMetadata,
    Instant,
    State,
    Timeline,
    load_timeline,
    read_instant,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.archived import archived_blocks_newest_first
from tidemark.timeline.instant import WRITE_ACTIONS

_log = logging.getLogger("tidemark.file_system_view")

PARTITION_METADATA = ".hoodie_partition_metadata"
#: the names a partition's metafile has (Hudi's ``HoodiePartitionMetadata``): the properties text
#: file, or a base-format file (its properties in the footer) where the table sets
#: ``hoodie.partition.metafile.use.base.format=true``. Hudi takes a folder holding any of them for
#: a partition; one name only, and such a table's partitions were left out of every read and service
PARTITION_METADATA_PARQUET = f"{PARTITION_METADATA}.parquet"
PARTITION_METAFILES = (PARTITION_METADATA, PARTITION_METADATA_PARQUET, f"{PARTITION_METADATA}.orc")
BASE_FILE_EXTENSIONS = ("parquet",)


@dataclass(frozen=True, slots=True)
class BaseFile:
    path: str
    name: BaseFileName
    size: int


@dataclass(frozen=True, slots=True)
class LogFile:
    path: str
    name: LogFileName
    size: int


@dataclass(frozen=True)
class FileSlice:
    """A base file (or none, for a group started in the logs) and the log files on top of it.
    ``log_files`` are in Hudi's order."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None
    log_files: tuple[LogFile, ...] = ()
    #: a compaction scheduled on this group and not yet done: new log files go on top of it
    pending_compaction: str | None = None

    @property
    def log_base_instant(self) -> str:
        """The base instant for log files written now (Hudi's rule with pending compactions)."""
        return self.pending_compaction or self.base_instant

    @property
    def is_empty(self) -> bool:
        return self.base_file is None and not self.log_files


@dataclass(frozen=True)
class FileGroup:
    partition_path: str
    file_id: str
    slices: tuple[FileSlice, ...] = field(default=())  # ascending base instant

    def latest_slice(self) -> FileSlice | None:
        return self.slices[-1] if self.slices else None


def _log_order(log: LogFile) -> tuple[str, int, tuple[int, str], str]:
    return log.name.sort_key()


def path_in_partition(partition: str, name: str) -> str:
    """A file's path relative to the table: ``name`` in the folder ``partition`` ("" is the table's
    root, where a non-partitioned table keeps its files)."""
    return f"{partition}/{name}" if partition else name


def plan_file_path(partition: str, listed: str) -> str:
    """A file a rollback or clean plan lists for ``partition``, as a path in the table. Plans hold
    full locations, as Hudi's Java writer writes them (``file:/x/t/p/f``, ``s3a://b/t/p/f``), of
    wherever the table was when the plan was made (it may have been copied or moved since);
    earlier tidemark versions wrote paths in the table. Taken as they are, a delete of such a path
    missed the file and a rolled-back write came back; the partition and the file's name say
    where it is, whatever the form."""
    return path_in_partition(partition, listed.rsplit("/", 1)[-1])


def has_partition_metafile(storage: Storage, partition: str) -> bool:
    """Whether the folder ``partition`` holds a partition metafile (:data:`PARTITION_METAFILES`),
    looked for in Hudi's order (``hasPartitionMetadata``): the text file is the common one."""
    return any(storage.exists(path_in_partition(partition, name)) for name in PARTITION_METAFILES)


def list_partitions(storage: Storage, under: str = "") -> list[str]:
    """Partition paths: folders holding a partition metafile ("" for the table root),
    in the folder ``under`` and below it (the whole table by default)."""
    return sorted(partition_files(storage, under))


def partition_files(storage: Storage, under: str = "") -> dict[str, tuple[FileInfo, ...]]:
    """Each partition's own files (paths from the table root, with sizes), of the partitions in
    the folder ``under`` and below it. Walks folder by folder, as Hudi does without a metadata
    table, so ``.hoodie/`` (which grows with the timeline) is never listed; the walk's listings
    are the files, so no partition is listed twice (on S3 a request each)."""
    partitions: dict[str, tuple[FileInfo, ...]] = {}
    pending = [under]
    while pending:
        folder = pending.pop()
        listing = storage.list_folder(folder)
        if any(f.path.rpartition("/")[2] in PARTITION_METAFILES for f in listing.files):
            partitions[folder] = listing.files
        below = (name for name in listing.folders if not (folder == "" and name == METAFOLDER))
        pending.extend(path_in_partition(folder, name) for name in below)
    return partitions


def changed_while_reading(storage: Storage, detail: str) -> TableChangedError:
    """The error of a read whose timeline, loaded when it started, names an instant whose state
    file has gone since: the archiver (which runs beside readers) or a rollback removed it."""
    return TableChangedError(
        f"{storage.uri}: a commit this read started from was rolled back or archived while it read ({detail}); "
        "read again"
    )


def read_loaded_instant(storage: Storage, instant: Instant) -> bytes:
    """The state file of an instant of a timeline loaded earlier (:func:`read_instant`);
    :func:`changed_while_reading` when it has gone since."""
    try:
        return read_instant(storage, instant)
    except InstantStateError as e:
        raise changed_while_reading(storage, str(e)) from e


#: the actions that delete data files a reader may have listed (they run beside readers)
_DELETING_ACTIONS = (CLEAN, ROLLBACK, RESTORE)


def file_gone_while_reading(
    storage: Storage, loaded: Timeline, error: ObjectNotFoundError, doing: str = "read"
) -> TableChangedError | None:
    """The error of a read (or a write, ``doing``) that listed a data file of its snapshot, by
    ``loaded``, and found it gone when it opened it (``error``): a clean, rollback or restore that
    ran since, or a write of ``loaded`` rolled back since (not archived), deletes such files, and
    the read is to run again. None when the timeline shows no such change: then the file is
    missing from the table itself, which ``error`` says as it is."""
    now = load_timeline(storage)
    seen = set(loaded)
    changes = [f"the {i.action} {i.timestamp} ran" for i in now.of_actions(*_DELETING_ACTIONS) if i not in seen]
    completed = now.completed()
    # a write older than every instant left was archived, which deletes no data file
    oldest = now.instants[0].timestamp if now.instants else ""
    changes += [
        f"the write {i.timestamp} it started from was rolled back"
        for i in loaded.completed().write_instants()
        if i.timestamp >= oldest and not completed.is_completed(i.timestamp)
    ]
    if not changes:
        return None
    more = f" and {len(changes) - 1} more" if len(changes) > 1 else ""
    return changed_under_read(storage, f"{changes[0]}{more}; {error}", doing)


def changed_under_read(storage: Storage, what: str, doing: str = "read") -> TableChangedError:
    """The error of a read (or a write, ``doing``) that a clean, rollback or restore overtook:
    ``what`` it did."""
    return TableChangedError(f"{storage.uri}: the table changed while this {doing} ran ({what}); {doing} again")


def replaced_file_ids(storage: Storage, timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) → the completed replacecommit that replaced that file group."""
    replaced: dict[tuple[str, str], str] = {}
    for instant in timeline.completed().of_actions(REPLACE_COMMIT):
        where = storage.full_uri(f".hoodie/{instant.file_name}")
        metadata = CommitMetadata.from_bytes(read_loaded_instant(storage, instant), where)
        for partition, ids in metadata.partition_to_replace_file_ids.items():
            replaced.update({(partition, file_id): instant.timestamp for file_id in ids})
    return replaced


def archived_replaced_file_ids(storage: Storage, after: str, up_to: str) -> dict[tuple[str, str], str]:
    """(partition, file id) → the archived completed replacecommit later than ``after`` and at
    or before ``up_to`` that replaced that file group. The archive is read newest block first,
    only back to ``after``: a long-lived table's archive is long."""
    replaced: dict[tuple[str, str], str] = {}
    for block in archived_blocks_newest_first(storage, read_properties(storage).archive_folder):
        for instant in block.instants:
            if (
                instant.action == REPLACE_COMMIT
                and instant.state is State.COMPLETED
                and after < instant.timestamp <= up_to
            ):
                for partition, ids in (instant.metadata.get("partitionToReplaceFileIds") or {}).items():
                    replaced.update({(partition, file_id): instant.timestamp for file_id in ids or ()})
        if block.ends_search_from(after, bound_included=True):
            break
    return replaced


def archived_commit_paths(storage: Storage, instant: str) -> frozenset[str] | None:
    """The paths the archived completed write ``instant``'s commit names (its write stats); None
    when the archive holds no such commit. Read newest block first, only back to ``instant``."""
    return next((paths for ts, paths in archived_write_paths(storage, instant) if ts == instant), None)


def archived_write_paths(storage: Storage, since: str) -> Iterator[tuple[str, frozenset[str]]]:
    """The archived completed writes at or after ``since``, each with the paths its commit names
    (its write stats), newest block first; blocks wholly before ``since`` are not read."""
    for block in archived_blocks_newest_first(storage, read_properties(storage).archive_folder):
        for archived in block.instants:
            if archived.timestamp >= since and archived.state is State.COMPLETED and archived.action in WRITE_ACTIONS:
                stats = archived.metadata.get("partitionToWriteStats") or {}
                yield (
                    archived.timestamp,
                    frozenset(s["path"] for listed in stats.values() for s in listed or () if s.get("path")),
                )
        if block.ends_search_from(since):
            break


@dataclass(frozen=True)
class CompactionOperation:
    """One file slice a compaction plan merges (Hudi's ``HoodieCompactionOperation``)."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: str | None  # file name within the partition
    log_files: tuple[str, ...]  # file names within the partition

    @property
    def paths(self) -> tuple[str, ...]:
        """The slice's files, relative to the table."""
        names = ((self.base_file,) if self.base_file else ()) + self.log_files
        return tuple(path_in_partition(self.partition_path, name) for name in names)


def read_compaction_plan(storage: Storage, instant: Instant) -> list[CompactionOperation]:
    """The operations of the compaction ``instant`` (any state), from its requested plan. Plans
    of any version are read by file name: Hudi's version-1 plans held paths."""
    requested = instant.with_state(State.REQUESTED)
    where = storage.full_uri(f".hoodie/{requested.file_name}")
    plan = avro.deserialize(read_instant(storage, requested), "HoodieCompactionPlan", where)
    ops = []
    for op in plan.get("operations") or []:
        base = op.get("dataFilePath")
        ops.append(
            CompactionOperation(
                partition_path=op.get("partitionPath") or "",
                file_id=op["fileId"],
                base_instant=op["baseInstantTime"],
                base_file=base.rsplit("/", 1)[-1] if base else None,
                log_files=tuple(p.rsplit("/", 1)[-1] for p in op.get("deltaFilePaths") or []),
            )
        )
    return ops


def pending_compaction_groups(storage: Storage, timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) → instant of the pending compaction planned on that file group.
    A plan gone since ``timeline`` was loaded (a rollback or restore took the compaction back) is
    :func:`changed_while_reading`."""
    groups = {}
    for instant in timeline.pending().of_actions(COMPACTION):
        try:
            operations = read_compaction_plan(storage, instant)
        except InstantStateError as e:
            raise changed_while_reading(storage, str(e)) from e
        groups.update({(op.partition_path, op.file_id): instant.timestamp for op in operations})
    return groups


class FileSystemView:
    """The table's file groups as of ``timeline`` (already cut at the as-of instant)."""

    def __init__(self, storage: Storage, timeline: Timeline, include_replaced: bool = False) -> None:
        """``include_replaced`` keeps replaced file groups in the view (the cleaner deletes them);
        readers leave it off."""
        self.storage = storage
        self.include_replaced = include_replaced
        self.timeline = timeline
        completed_writes = timeline.completed().write_instants()
        self._committed = completed_writes.timestamps()
        self._first_write = timeline.first_non_savepoint_write()
        self._pending_compactions = frozenset(i.timestamp for i in timeline.pending().of_actions(COMPACTION))
        self.replaced = replaced_file_ids(storage, timeline)
        self._compacting = pending_compaction_groups(storage, timeline)
        #: a tuple, as file_groups() answers: the view's own, which a caller's edit would change
        #: for every later read through it
        self._files = partition_files(storage)
        self.partitions: tuple[str, ...] = tuple(sorted(self._files))
        self._groups: dict[str, tuple[FileGroup, ...]] = {}
        #: completed write instant → the base files its commit names (None: it names none we can read)
        self._committed_bases: dict[str, frozenset[str] | None] = {}
        #: (partition, file id, instant) → the base files listed beside the slice's and not read
        #: (twins, see _committed_base), for the partitions built so far: whoever deletes the
        #: slice deletes them too, or they would read once nothing names the slice's file
        self.twin_base_files: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def file_groups(self, partition: str) -> tuple[FileGroup, ...]:
        if partition not in self._groups:
            with collector_paused():
                self._groups[partition] = self._build(partition)
        return self._groups[partition]

    def all_file_groups(self) -> list[FileGroup]:
        return [g for p in self.partitions for g in self.file_groups(p)]

    def _build(self, partition: str) -> tuple[FileGroup, ...]:
        bases: dict[str, dict[str, BaseFile]] = defaultdict(dict)
        logs: dict[str, dict[str, list[LogFile]]] = defaultdict(lambda: defaultdict(list))
        prefix = f"{partition}/" if partition else ""
        # the partition's own files as the view's walk listed them (a folder the walk did not
        # take for a partition is listed now): not nested partitions, and not .hoodie/ at the root
        files = self._files.get(partition)
        #: (file id, instant) → every base file listed for it, when there is more than one
        twins: dict[tuple[str, str], list[BaseFile]] = {}
        for info in files if files is not None else self.storage.list(prefix, recursive=False):
            rest = info.path[len(prefix) :]
            if LogFileName.is_log_file(rest):
                log = LogFileName.parse(rest)
                if log.extension == "log" and not log.suffix:
                    logs[log.file_id][log.base_instant].append(LogFile(info.path, log, info.size))
                continue
            base = base_file_name(rest)
            if base is not None and self.is_committed(base.instant):
                found = BaseFile(info.path, base, info.size)
                of_group = bases[base.file_id]
                if base.instant in of_group:
                    twins.setdefault((base.file_id, base.instant), [of_group[base.instant]]).append(found)
                of_group[base.instant] = found
        for (file_id, instant), candidates in twins.items():
            pick = bases[file_id][instant] = self._committed_base(instant, candidates)
            self.twin_base_files[(partition, file_id, instant)] = tuple(b.path for b in candidates if b is not pick)
        groups = []
        for file_id in sorted(set(bases) | set(logs)):
            if (partition, file_id) in self.replaced and not self.include_replaced:
                continue
            slices = self._slices(partition, file_id, bases.get(file_id, {}), logs.get(file_id, {}))
            if slices:
                groups.append(FileGroup(partition, file_id, tuple(slices)))
        return tuple(groups)

    def _slices(
        self, partition: str, file_id: str, bases: dict[str, BaseFile], logs: dict[str, list[LogFile]]
    ) -> list[FileSlice]:
        result: list[FileSlice] = []
        for instant in sorted(set(bases) | set(logs)):
            visible = instant in self._committed or instant in self._pending_compactions
            # a log-only group starts at a deltacommit: it must be committed (or still old enough
            # to be archived) for its slice to exist
            if not visible and not self._before_active_timeline(instant):
                continue
            found = logs.get(instant, ())
            slice_logs = tuple(found) if len(found) < 2 else tuple(sorted(found, key=_log_order))
            current = FileSlice(partition, file_id, instant, bases.get(instant), slice_logs)
            if instant in self._pending_compactions and result and current.base_file is None:
                # the compaction has not written its base file yet: read the previous slice's
                # base with both slices' logs
                prev = result.pop()
                current = FileSlice(partition, file_id, prev.base_instant, prev.base_file, prev.log_files + slice_logs)
            if not current.is_empty:
                result.append(current)
        pending = self._compacting.get((partition, file_id))
        if result and pending is not None and result[-1].base_instant < pending:
            last = result[-1]
            result[-1] = FileSlice(
                last.partition_path, last.file_id, last.base_instant, last.base_file, last.log_files, pending
            )
        return result

    def _committed_base(self, instant: str, candidates: list[BaseFile]) -> BaseFile:
        """The base file of a file group at ``instant`` when several are listed: a task attempt
        killed after the write committed (a speculative twin) can still write its own copy, under
        another write token, until the next write removes it (``remove_zombie_files``). The one
        the commit names is the data; when it names none of them (a commit of Apache Hudi's, or
        one unreadable) the last by name, as a listing gives it, whatever the storage."""
        named = self._commit_base_paths(instant)
        chosen = [b for b in candidates if named is not None and b.path in named]
        pick = max(chosen or candidates, key=lambda b: b.path)
        ignored = ", ".join(sorted(b.path for b in candidates if b is not pick))
        why = "the one its commit names" if chosen else "its commit names none of them: the last by name"
        _log.info(
            "%s: %d base files of file group %s at %s; reading %s (%s), ignoring %s",
            self.storage.uri,
            len(candidates),
            pick.name.file_id,
            instant,
            pick.path,
            why,
            ignored,
        )
        return pick

    def _commit_base_paths(self, instant: str) -> frozenset[str] | None:
        """The paths the completed write ``instant``'s commit names, from the active timeline or,
        for an instant older than it (or archived while this read ran), from the archive; None when
        neither holds it or its metadata cannot be read (no reason to fail a read that has a choice)."""
        if instant not in self._committed_bases:
            found = self.timeline.completed().write_instants().find(instant)
            paths = None
            archived = found is None and self._before_active_timeline(instant)
            if found is not None:
                try:
                    stats = instant_metadata(self.storage, found).write_stats()
                    paths = frozenset(s.path for s in stats if s.path)
                except InstantStateError:
                    archived = True  # moved meanwhile: the archiver writes the archive before deleting
                except TimelineError as e:
                    _log.info("%s: cannot read the commit %s: %s", self.storage.uri, instant, e)
            if archived:
                paths = archived_commit_paths(self.storage, instant)
            self._committed_bases[instant] = paths
        return self._committed_bases[instant]

    def _before_active_timeline(self, timestamp: str) -> bool:
        # what the archiver moved out was completed; data older than the first write instant still
        # on the active timeline, savepointed ones aside (archival beyond savepoints leaves them
        # with archived writes between), is therefore committed (Hudi's isBeforeTimelineStarts)
        return self._first_write is not None and timestamp < self._first_write

    def latest_file_slices(self) -> list[FileSlice]:
        slices = []
        for group in self.all_file_groups():
            latest = group.latest_slice()
            if latest is not None:
                slices.append(latest)
        return slices

    def is_visible(self, timestamp: str) -> bool:
        """Whether a file slice of ``timestamp`` is in the view: committed, or a pending compaction's."""
        return self.is_committed(timestamp) or timestamp in self._pending_compactions

    def is_committed(self, timestamp: str) -> bool:
        """Whether data written at ``timestamp`` is visible: a completed write on this timeline,
        or older than the active timeline (archived instants were completed)."""
        return timestamp in self._committed or self._before_active_timeline(timestamp)


def check_not_cleaned(
    view: FileSystemView,
    full: Timeline,
    as_of: str,
    file_groups: Collection[tuple[str, str]] | None = None,
    meanwhile: bool = False,
) -> None:
    """Refuse a read as of ``as_of`` (``view`` is the table as of it) that needs a file slice a
    later clean deleted. The cleaner keeps what reads as of its earliest commit to retain and
    later need; a group whose needed slice it removed would otherwise be read from an older slice,
    or not at all: a wrong answer without an error. ``file_groups``: (partition, file id) of the
    only groups the read reads (an incremental query's), None for every group. ``meanwhile``: the
    cleans are newer than the read's start, which ``as_of`` is, so it is to read again (not as of
    a later instant: it may have asked for none)."""
    found = cleaned_file(view, full, as_of, file_groups)
    if found is None:
        return
    storage = view.storage
    clean_time, path, retain = found
    if meanwhile:
        raise changed_under_read(storage, f"the clean {clean_time} deleted {path}, which its snapshot needs")
    kept = f"what reads as of {retain} and later need" if retain else "newer file versions only"
    raise TableError(
        f"{storage.uri} as of {as_of}: the clean {clean_time} deleted {path}, which that "
        f"snapshot needs (the clean kept {kept}): read as of a later instant"
    )


def cleaned_file(
    view: FileSystemView, full: Timeline, as_of: str, file_groups: Collection[tuple[str, str]] | None = None
) -> tuple[str, str, str] | None:
    """A file slice the table as of ``as_of`` (``view``) needs that a later clean deleted, as
    (the clean's time, a file it deleted, the clean's earliest commit to retain); None when every
    needed slice is there. ``file_groups`` as for :func:`check_not_cleaned`."""
    storage = view.storage
    # (partition, file id) -> slice instant -> [(the clean, a file it deleted, its retention bound)]
    deleted: dict[tuple[str, str], dict[str, list[tuple[str, str, str]]]] = defaultdict(lambda: defaultdict(list))
    for clean in full.of_actions(CLEAN):
        if clean.timestamp <= as_of:
            continue  # it kept every slice that was latest when it ran, so every slice as of later
        retain, files = _cleaned_files(storage, clean)
        for partition, names in files.items():
            for name in names:
                file_name = name.rsplit("/", 1)[-1]
                found = data_file_slice(file_name)
                if found is None or (partition, found[0]) in view.replaced:
                    continue
                file_id, instant = found
                if instant <= as_of and view.is_visible(instant):
                    path = path_in_partition(partition, file_name)
                    deleted[(partition, file_id)][instant].append((clean.timestamp, path, retain))
    # groups replaced by a replacecommit the archiver has moved out since (it waits for the clean
    # that deletes their files): read from the archive only when a deleted slice would refuse the read
    archived_replaced: dict[tuple[str, str], str] | None = None
    for (partition, file_id), gone in deleted.items():
        if file_groups is not None and (partition, file_id) not in file_groups:
            continue
        group = next((g for g in view.file_groups(partition) if g.file_id == file_id), None)
        slices = group.slices if group is not None else ()
        there = {s.base_instant for s in slices} | {log.name.base_instant for s in slices for log in s.log_files}
        left = {s.base_file.path for s in slices if s.base_file} | {log.path for s in slices for log in s.log_files}
        instants = sorted(there | set(gone))
        # the reader starts from the latest slice, and from the one before it when the latest is
        # a compaction that had not written its base file yet
        needed = instants[-1:]
        if len(instants) > 1 and not view.is_committed(needed[0]):  # a pending compaction's
            needed.append(instants[-2])
        for instant in needed:
            # the whole slice gone, or a file of it (a log file an older cleaner took from a slice
            # it kept): either way the slice no longer reads as it did
            missing = [g for g in gone.get(instant, ()) if instant not in there or g[1] not in left]
            if not missing:
                continue
            if archived_replaced is None:
                oldest = min(i for slices_gone in deleted.values() for i in slices_gone)
                archived_replaced = archived_replaced_file_ids(storage, oldest, as_of)
            if (partition, file_id) not in archived_replaced:
                return missing[0]
    return None


def _cleaned_files(storage: Storage, clean: Instant) -> tuple[str, dict[str, list[str]]]:
    """A clean's earliest commit to retain and, per partition, the files it deleted; for a clean
    still pending (a cleaner stopped part way), every file its plan deletes: some may be gone."""
    if clean.is_completed:
        where = storage.full_uri(f".hoodie/{clean.file_name}")
        metadata = avro.deserialize(read_loaded_instant(storage, clean), "HoodieCleanMetadata", where)
        files = {
            p: list(info.get("successDeleteFiles") or [])
            for p, info in (metadata.get("partitionMetadata") or {}).items()
        }
        return metadata.get("earliestCommitToRetain") or "", files
    requested = clean.with_state(State.REQUESTED)
    where = storage.full_uri(f".hoodie/{requested.file_name}")
    plan = avro.deserialize(read_loaded_instant(storage, requested), "HoodieCleanerPlan", where)
    files = {
        p: [i.get("filePath") or "" for i in infos]
        for p, infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).items()
    }
    for partition, names in (plan.get("filesToBeDeletedPerPartition") or {}).items():
        files.setdefault(partition, []).extend(names)
    return (plan.get("earliestInstantToRetain") or {}).get("timestamp") or "", files


def base_file_name(path: str) -> BaseFileName | None:
    """The parsed name of a base file (its path's last part), or None for any other file."""
    name = path.rpartition("/")[2]
    if name.rpartition(".")[2] not in BASE_FILE_EXTENSIONS:
        return None
    try:
        return BaseFileName.parse(name)
    except InvalidBaseFileNameError:
        return None


def data_file_slice(name: str) -> tuple[str, str] | None:
    """A data file's (file id, file slice's base instant), or None for another file."""
    try:
        if LogFileName.is_log_file(name):
            log = LogFileName.parse(name)
            return log.file_id, log.base_instant
        base = BaseFileName.parse(name)
        return base.file_id, base.instant
    except (InvalidBaseFileNameError, InvalidLogFileNameError):
        return None


def instant_metadata(storage: Storage, instant: Instant) -> CommitMetadata:
    return CommitMetadata.from_bytes(read_instant(storage, instant), storage.full_uri(f".hoodie/{instant.file_name}"))


def snapshot_files(storage: Storage, timeline: Timeline, timestamp: str) -> dict[str, list[str]]:
    """Partition → the names of the files of the file slices visible as of ``timestamp``."""
    view = FileSystemView(storage, timeline.as_of(timestamp))
    partitions: dict[str, list[str]] = defaultdict(list)
    for fs in view.latest_file_slices():
        names = [f.path.rsplit("/", 1)[-1] for f in fs.log_files]
        if fs.base_file is not None:
            names.insert(0, fs.base_file.path.rsplit("/", 1)[-1])
        partitions[fs.partition_path].extend(names)
    return partitions
