"""The archived timeline as Hudi 0.14/0.15 (table version 6, timeline layout 1) writes it.

Hudi's timeline archiver moves old instants out of ``.hoodie/`` into *archive log files* under
``.hoodie/<hoodie.archivelog.folder>/`` (``.hoodie/archived/`` by default): Hudi log files of
file id ``commits``, an empty base instant and the extension ``archive``
(``.commits_.archive.1_1-0-1``, ``.commits_.archive.2_1-0-1``, ...). Each file holds
AVRO_DATA_BLOCKs whose records are ``org.apache.hudi.avro.model.HoodieArchivedMetaEntry``
and whose SCHEMA header is that record's schema.

One entry describes one state file of one instant: ``commitTime`` (the instant time),
``actionType``, ``actionState`` (``REQUESTED``, ``INFLIGHT`` or ``COMPLETED``; archives of older
Hudi versions leave it null, meaning completed), ``stateTransitionTime`` and one metadata field
chosen by action and state, as ``MetadataConversionUtils.createMetaWrapper`` fills it:

* ``commit`` / ``deltacommit``: ``hoodieCommitMetadata``, the JSON commit metadata converted to
  Avro (write stats by field name; ``operationType`` becomes ``COMPACT`` for compaction commits;
  ``extraMetadata`` gets an empty ``ROLLING_STAT``). A completed compaction is the ``commit`` file
  at the compaction's time, so its entry has ``actionType`` ``commit``.
* ``replacecommit``: completed ``hoodieReplaceCommitMetadata``; inflight
  ``HoodieInflightReplaceMetadata`` (commit metadata); requested ``hoodieRequestedReplaceMetadata``.
* ``clean``: completed ``hoodieCleanMetadata``, otherwise ``hoodieCleanerPlan``.
* ``rollback``: completed ``hoodieRollbackMetadata``; ``savepoint``: ``hoodieSavePointMetadata``.
* ``compaction`` (requested): ``hoodieCompactionPlan``.
* A completed state file that is empty yields an entry without metadata.

The archived entry has no field for restore metadata and Hudi 0.14/0.15 does not archive restore
instants, so a restore cannot be turned into an entry.

Records written here leave ``version`` null, as Hudi does (it builds the records with Avro's
no-argument constructors, which set no defaults).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tidemark.errors import InstantMetadataError, LogFormatError, ObjectNotFoundError
from tidemark.logformat.block import BlockType
from tidemark.logformat.file_name import LogFileName
from tidemark.logformat.reader import LogFileReader
from tidemark.logformat.writer import LogWriter, avro_data_block
from tidemark.storage.base import Storage
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.active import METAFOLDER, instant_path
from tidemark.timeline.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    RESTORE,
    ROLLBACK,
    SAVEPOINT,
    Instant,
    State,
)
from tidemark.timeline.metadata import CommitMetadata, WriteStat

#: where the archive log files live, relative to the table root, when ``hoodie.archivelog.folder``
#: is Hudi's default; the functions below take the table's own folder (``TableProperties.archive_folder``)
ARCHIVE_FOLDER: Final = f"{METAFOLDER}/archived"
#: file id, base instant and extension of archive log files (``.commits_.archive.N_token``)
ARCHIVE_FILE_ID: Final = "commits"
ARCHIVE_BASE_INSTANT: Final = ""
ARCHIVE_EXTENSION: Final = "archive"
#: the write token Hudi's archiver uses (``HoodieLogFormat.UNKNOWN_WRITE_TOKEN``)
ARCHIVE_WRITE_TOKEN: Final = "1-0-1"
#: key Hudi sets to ``""`` in archived commit metadata (``HoodieRollingStatMetadata``)
ROLLING_STAT_KEY: Final = "ROLLING_STAT"

_NS: Final = avro.NAMESPACE
_Schema = dict[str, Any]


# --- the HoodieArchivedMetaEntry schema -----------------------------------------------------------


def _nullable(avro_type: Any) -> list[Any]:
    return ["null", avro_type]


def _opt_field(name: str, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": _nullable(avro_type), "default": None}


def _version() -> dict[str, Any]:
    return {"name": "version", "type": ["int", "null"], "default": 1}


#: HoodieWriteStat as of Hudi 0.14/0.15: (field, Avro type); every field is nullable, default null
_WRITE_STAT_FIELDS: Final[tuple[tuple[str, Any], ...]] = (
    ("fileId", "string"),
    ("path", "string"),
    ("prevCommit", "string"),
    ("numWrites", "long"),
    ("numDeletes", "long"),
    ("numUpdateWrites", "long"),
    ("totalWriteBytes", "long"),
    ("totalWriteErrors", "long"),
    ("partitionPath", "string"),
    ("totalLogRecords", "long"),
    ("totalLogFiles", "long"),
    ("totalUpdatedRecordsCompacted", "long"),
    ("numInserts", "long"),
    ("totalLogBlocks", "long"),
    ("totalCorruptLogBlock", "long"),
    ("totalRollbackBlocks", "long"),
    ("fileSizeInBytes", "long"),
    ("logVersion", "int"),
    ("logOffset", "long"),
    ("baseFile", "string"),
    ("logFiles", {"type": "array", "items": "string"}),
    ("cdcStats", {"type": "map", "values": "long"}),
)


def _write_stat() -> _Schema:
    return {
        "type": "record",
        "name": "HoodieWriteStat",
        "fields": [_opt_field(name, t) for name, t in _WRITE_STAT_FIELDS],
    }


def _stats_map(items: Any) -> dict[str, Any]:
    return {"type": "map", "values": {"type": "array", "items": items}}


def _commit_metadata() -> _Schema:
    return {
        "type": "record",
        "name": "HoodieCommitMetadata",
        "namespace": _NS,
        "fields": [
            _opt_field("partitionToWriteStats", _stats_map(_write_stat())),
            _opt_field("extraMetadata", {"type": "map", "values": "string"}),
            _version(),
            _opt_field("operationType", "string"),
        ],
    }


def _compaction_metadata() -> _Schema:
    """The deprecated ``HoodieCompactionMetadata``: still part of the entry's schema, never filled."""
    write_stat = {
        "type": "record",
        "name": "HoodieCompactionWriteStat",
        "fields": [
            {"name": "partitionPath", "type": _nullable("string")},
            {"name": "totalLogRecords", "type": _nullable("long")},
            {"name": "totalLogFiles", "type": _nullable("long")},
            {"name": "totalUpdatedRecordsCompacted", "type": _nullable("long")},
            {"name": "hoodieWriteStat", "type": _nullable(f"{_NS}.HoodieWriteStat")},
        ],
    }
    return {
        "type": "record",
        "name": "HoodieCompactionMetadata",
        "namespace": _NS,
        "fields": [{"name": "partitionToCompactionWriteStats", "type": _nullable(_stats_map(write_stat))}],
    }


def _replace_commit_metadata() -> _Schema:
    return {
        "type": "record",
        "name": "HoodieReplaceCommitMetadata",
        "namespace": _NS,
        "fields": [
            _opt_field("partitionToWriteStats", _stats_map(f"{_NS}.HoodieWriteStat")),
            _opt_field("extraMetadata", {"type": "map", "values": "string"}),
            _version(),
            _opt_field("operationType", "string"),
            _opt_field("partitionToReplaceFileIds", {"type": "map", "values": {"type": "array", "items": "string"}}),
        ],
    }


def _index_commit_metadata() -> _Schema:
    partition_info = {
        "type": "record",
        "name": "HoodieIndexPartitionInfo",
        "fields": [_version(), _opt_field("metadataPartitionPath", "string"), _opt_field("indexUptoInstant", "string")],
    }
    return {
        "type": "record",
        "name": "HoodieIndexCommitMetadata",
        "namespace": _NS,
        "fields": [
            _version(),
            _opt_field("operationType", "string"),
            _opt_field("indexPartitionInfos", {"type": "array", "items": partition_info}),
        ],
    }


def _archived_meta_entry() -> _Schema:
    """Every named type is defined once, at its first use; later uses name it."""

    def embedded(schema: Mapping[str, Any]) -> _Schema:
        return copy.deepcopy(dict(schema))

    return {
        "type": "record",
        "name": "HoodieArchivedMetaEntry",
        "namespace": _NS,
        "fields": [
            _opt_field("hoodieCommitMetadata", _commit_metadata()),
            _opt_field("hoodieCleanMetadata", embedded(avro.HOODIE_CLEAN_METADATA)),
            _opt_field("hoodieCompactionMetadata", _compaction_metadata()),
            _opt_field("hoodieRollbackMetadata", embedded(avro.HOODIE_ROLLBACK_METADATA)),
            _opt_field("hoodieSavePointMetadata", embedded(avro.HOODIE_SAVEPOINT_METADATA)),
            _opt_field("commitTime", "string"),
            _opt_field("actionType", "string"),
            _version(),
            _opt_field("hoodieCompactionPlan", embedded(avro.HOODIE_COMPACTION_PLAN)),
            _opt_field("hoodieCleanerPlan", embedded(avro.HOODIE_CLEANER_PLAN)),
            _opt_field("actionState", "string"),
            _opt_field("hoodieReplaceCommitMetadata", _replace_commit_metadata()),
            _opt_field("hoodieRequestedReplaceMetadata", embedded(avro.HOODIE_REQUESTED_REPLACE_METADATA)),
            _opt_field("HoodieInflightReplaceMetadata", f"{_NS}.HoodieCommitMetadata"),
            _opt_field("hoodieIndexCommitMetadata", _index_commit_metadata()),
            _opt_field("stateTransitionTime", "string"),
        ],
    }


HOODIE_ARCHIVED_META_ENTRY: Final[_Schema] = _archived_meta_entry()
#: the SCHEMA header of archive blocks: the entry's schema as compact JSON
ARCHIVED_META_ENTRY_SCHEMA_JSON: Final = json.dumps(HOODIE_ARCHIVED_META_ENTRY, separators=(",", ":"))
ARCHIVED_META_ENTRY_FULL_NAME: Final = f"{_NS}.HoodieArchivedMetaEntry"

_ENTRY_FIELDS: Final = tuple(f["name"] for f in HOODIE_ARCHIVED_META_ENTRY["fields"])
_NAMED_TYPES: Final = avro._named_types(HOODIE_ARCHIVED_META_ENTRY)
#: the fields that carry an instant's metadata (all but time, action, state and version)
PAYLOAD_FIELDS: Final = tuple(
    n for n in _ENTRY_FIELDS if n not in ("commitTime", "actionType", "version", "actionState", "stateTransitionTime")
)


# --- building entries from the active timeline ---------------------------------------------------

_LONG_STAT_FIELDS: Final = frozenset(n for n, t in _WRITE_STAT_FIELDS if t in ("long", "int"))
_STRING_STAT_FIELDS: Final = frozenset(n for n, t in _WRITE_STAT_FIELDS if t == "string")


def _avro_write_stat(stat: WriteStat, where: str) -> dict[str, Any]:
    """A write stat's JSON mapped onto Avro ``HoodieWriteStat`` by field name, as Jackson's
    ``convertValue`` does; JSON keys the Avro record lacks are dropped."""
    obj = stat.to_json()
    out: dict[str, Any] = {}
    for name, _ in _WRITE_STAT_FIELDS:
        value = obj.get(name)
        if value is None:
            out[name] = None
        elif name in _LONG_STAT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise InstantMetadataError(f"{where}: write stat field {name} is not a number: {value!r}")
            try:
                out[name] = int(value)
            except ValueError:
                raise InstantMetadataError(f"{where}: write stat field {name} is not a number: {value!r}") from None
        elif name in _STRING_STAT_FIELDS:
            out[name] = str(value)
        elif name == "logFiles":
            if not isinstance(value, (list, tuple)):
                raise InstantMetadataError(f"{where}: write stat field logFiles is not a list: {value!r}")
            out[name] = [str(v) for v in value]
        else:  # cdcStats
            if not isinstance(value, Mapping):
                raise InstantMetadataError(f"{where}: write stat field cdcStats is not a map: {value!r}")
            out[name] = {str(k): int(v) for k, v in value.items()}
    return out


def _string_map(values: Mapping[str, Any], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            raise InstantMetadataError(f"{where}: extraMetadata[{key!r}] is null")
        out[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return out


def avro_commit_metadata(metadata: CommitMetadata, where: str = "commit metadata") -> dict[str, Any]:
    """JSON commit metadata as the Avro ``HoodieCommitMetadata`` record Hudi archives
    (``MetadataConversionUtils.convertCommitMetadata``)."""
    stats = {
        partition: [_avro_write_stat(s, where) for s in stats]
        for partition, stats in metadata.partition_to_write_stats.items()
    }
    extra = _string_map(metadata.extra_metadata, where)
    extra[ROLLING_STAT_KEY] = ""
    return {
        "partitionToWriteStats": stats,
        "extraMetadata": extra,
        "version": None,
        "operationType": "COMPACT" if metadata.compacted else metadata.operation_type,
    }


def avro_replace_commit_metadata(metadata: CommitMetadata, where: str = "replace commit metadata") -> dict[str, Any]:
    """JSON replace commit metadata as the Avro ``HoodieReplaceCommitMetadata`` record."""
    record = avro_commit_metadata(metadata, where)
    record["operationType"] = metadata.operation_type
    record["partitionToReplaceFileIds"] = {p: list(ids) for p, ids in metadata.partition_to_replace_file_ids.items()}
    return record


def _read(storage: Storage, instant: Instant) -> bytes:
    try:
        return storage.read(instant_path(instant))
    except ObjectNotFoundError as e:
        raise InstantMetadataError(
            f"cannot archive {instant}: its state file {storage.full_uri(instant_path(instant))} does not exist"
        ) from e


def _commit_record(data: bytes, where: str) -> dict[str, Any]:
    # Hudi reads an empty commit file as a fresh HoodieCommitMetadata (operation UNKNOWN)
    metadata = CommitMetadata.from_bytes(data, where) if data.strip() else CommitMetadata(operation_type="UNKNOWN")
    return avro_commit_metadata(metadata, where)


def archived_entry(storage: Storage, instant: Instant, state_transition_time: str | None = None) -> dict[str, Any]:
    """The ``HoodieArchivedMetaEntry`` record for one state file of ``instant`` (usually the
    completed one), built from that file's content as Hudi's archiver builds it.

    ``state_transition_time`` is what Hudi takes from the state file's modification time
    (``yyyyMMddHHmmssSSS``); storage here does not report it, so it is null unless given.
    Raises :class:`InstantMetadataError` when the file is missing, cannot be parsed, or the
    action cannot be archived (restore).
    """
    try:
        return _archived_entry(storage, instant, state_transition_time)
    except InstantMetadataError as e:
        message = str(e)
        if message.startswith("cannot archive"):
            raise
        raise InstantMetadataError(f"cannot archive {instant}: {message}") from e


def _archived_entry(storage: Storage, instant: Instant, state_transition_time: str | None) -> dict[str, Any]:
    ts, action, state = instant.timestamp, instant.action, instant.state
    where = storage.full_uri(instant_path(instant))
    if action == RESTORE:
        raise InstantMetadataError(
            f"cannot archive {instant}: Hudi's HoodieArchivedMetaEntry has no field for restore metadata "
            "(Hudi 0.14/0.15 never archives restore instants)"
        )
    entry: dict[str, Any] = dict.fromkeys(_ENTRY_FIELDS)
    entry["commitTime"] = ts
    entry["actionState"] = state.name
    entry["stateTransitionTime"] = state_transition_time
    # a completed compaction is the commit file at the compaction's time: Hudi archives a commit
    entry["actionType"] = COMMIT if action == COMPACTION and state is State.COMPLETED else action
    data = _read(storage, instant)
    if state is State.COMPLETED and not data:
        return entry  # Hudi's createMetaWrapperForEmptyInstant: a crash left an empty file
    if action in (COMMIT, DELTA_COMMIT) or (action == COMPACTION and state is State.COMPLETED):
        entry["hoodieCommitMetadata"] = _commit_record(data, where)
    elif action == REPLACE_COMMIT:
        if state is State.COMPLETED:
            metadata = CommitMetadata.from_bytes(data, where)
            entry["hoodieReplaceCommitMetadata"] = avro_replace_commit_metadata(metadata, where)
        elif state is State.INFLIGHT:
            if data.strip():
                entry["HoodieInflightReplaceMetadata"] = _commit_record(data, where)
        elif data:
            entry["hoodieRequestedReplaceMetadata"] = avro.deserialize(data, "HoodieRequestedReplaceMetadata", where)
    elif action == CLEAN:
        if state is State.COMPLETED:
            entry["hoodieCleanMetadata"] = avro.deserialize(data, "HoodieCleanMetadata", where)
        else:
            if not data:  # the plan lives in the requested file; an inflight file may be empty
                requested = instant.with_state(State.REQUESTED)
                data, where = _read(storage, requested), storage.full_uri(instant_path(requested))
            if data:
                entry["hoodieCleanerPlan"] = avro.deserialize(data, "HoodieCleanerPlan", where)
    elif action == ROLLBACK:
        if state is State.COMPLETED:
            entry["hoodieRollbackMetadata"] = avro.deserialize(data, "HoodieRollbackMetadata", where)
    elif action == SAVEPOINT:
        if data:
            entry["hoodieSavePointMetadata"] = avro.deserialize(data, "HoodieSavepointMetadata", where)
    elif action == COMPACTION:
        if state is State.REQUESTED:
            entry["hoodieCompactionPlan"] = avro.deserialize(data, "HoodieCompactionPlan", where)
    else:  # pragma: no cover - Instant accepts no other action
        raise InstantMetadataError(f"cannot archive {instant}: action {action!r} is not supported")
    return entry


def archived_entries(
    storage: Storage, instant: Instant, present: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """Entries for every state file ``instant`` has on storage, requested first: Hudi's archiver
    moves all of an instant's state files (for a compaction: ``compaction.requested``,
    ``compaction.inflight`` and the ``commit``). ``present``: the names in ``.hoodie/``, listed
    once for many instants (else each state file is looked up)."""
    entries = []
    for state in State:
        if state > instant.state:
            break
        step = instant.with_state(state)
        there = step.file_name in present if present is not None else storage.exists(instant_path(step))
        if there:
            entries.append(archived_entry(storage, step))
    return entries


# --- writing -------------------------------------------------------------------------------------


def _check_entry(entry: Mapping[str, Any], index: int) -> dict[str, Any]:
    try:
        checked: dict[str, Any] = avro._Checker(_NAMED_TYPES).check(entry, HOODIE_ARCHIVED_META_ENTRY, "", _NS)
    except avro._MisfitError as misfit:
        where = misfit.path or "<record>"
        raise InstantMetadataError(f"archived entry {index}: field {where} {misfit.message}") from None
    return checked


def write_archived(
    storage: Storage, entries: Sequence[Mapping[str, Any]], instant_time: str, folder: str = ARCHIVE_FOLDER
) -> str:
    """Append one AVRO_DATA_BLOCK holding ``entries`` to the latest archive log file (or start
    ``.commits_.archive.1_1-0-1``) and return the archive file's path.

    ``instant_time`` goes into the block's INSTANT_TIME header. Entries may leave out fields with
    a default; an entry that does not fit the schema raises :class:`InstantMetadataError` naming
    the field, before anything is written.
    """
    if not entries:
        raise InstantMetadataError("nothing to archive: no entries given")
    records = [_check_entry(e, i) for i, e in enumerate(entries)]
    block = avro_data_block(records, ARCHIVED_META_ENTRY_SCHEMA_JSON, instant_time)
    writer = LogWriter(
        storage,
        folder,
        ARCHIVE_FILE_ID,
        ARCHIVE_BASE_INSTANT,
        ARCHIVE_WRITE_TOKEN,
        extension=ARCHIVE_EXTENSION,
    )
    return writer.append([block]).path


# --- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class ArchivedInstant:
    """One archived state of one instant. ``action`` is Hudi's ``actionType`` as written (a
    completed compaction reads back as ``commit``); ``metadata`` is the record of the field that
    carries this action's metadata in this state, empty when there is none."""

    timestamp: str
    action: str
    state: State
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    state_transition_time: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SkippedBlock:
    """A range of an archive file that yielded no entries, and why."""

    path: str
    offset: int
    end: int
    reason: str


@dataclass(frozen=True)
class ArchiveScan:
    """Everything read from the archive folder: the entries, the files read, and what was skipped."""

    instants: tuple[ArchivedInstant, ...]
    files: tuple[str, ...]
    skipped: tuple[SkippedBlock, ...]


def _metadata_field(action: str, state: State) -> str | None:
    """The entry field Hudi reads an archived instant's metadata from."""
    completed = state is State.COMPLETED
    if action in (COMMIT, DELTA_COMMIT):
        return "hoodieCommitMetadata"
    if action == CLEAN:
        return "hoodieCleanMetadata" if completed else "hoodieCleanerPlan"
    if action in (COMPACTION, "logcompaction"):
        return "hoodieCompactionPlan"
    if action in (REPLACE_COMMIT, "clustering"):
        if completed:
            return "hoodieReplaceCommitMetadata"
        return "HoodieInflightReplaceMetadata" if state is State.INFLIGHT else "hoodieRequestedReplaceMetadata"
    if action == ROLLBACK:
        return "hoodieRollbackMetadata"
    if action == SAVEPOINT:
        return "hoodieSavePointMetadata"
    if action == "indexing":
        return "hoodieIndexCommitMetadata"
    return None


def _to_instant(record: Mapping[str, Any], where: str) -> ArchivedInstant:
    ts, action, state_name = record.get("commitTime"), record.get("actionType"), record.get("actionState")
    if not isinstance(ts, str) or not isinstance(action, str):
        raise InstantMetadataError(f"{where}: archived entry without commitTime or actionType")
    if state_name is None:
        state = State.COMPLETED  # archives of Hudi before 0.7 carry no state: only completed instants
    else:
        try:
            state = State[str(state_name)]
        except KeyError:
            raise InstantMetadataError(f"{where}: archived entry {ts} has unknown actionState {state_name!r}") from None
    name = _metadata_field(action, state)
    payload = record.get(name) if name is not None else None
    if payload is None:  # not where Hudi looks first: take whatever metadata the entry carries
        payload = next((record[f] for f in PAYLOAD_FIELDS if record.get(f) is not None), None)
    transition = record.get("stateTransitionTime")
    return ArchivedInstant(ts, action, state, dict(payload or {}), transition if isinstance(transition, str) else None)


def archive_files(storage: Storage, folder: str = ARCHIVE_FOLDER) -> list[str]:
    """Paths of the archive log files in ``folder``, in Hudi's order (by version)."""
    found: list[LogFileName] = []
    for info in storage.list(f"{folder}/"):
        rest = info.path[len(folder) + 1 :]
        if "/" in rest or not LogFileName.is_log_file(rest):
            continue
        parsed = LogFileName.parse(rest)
        if parsed.extension == ARCHIVE_EXTENSION and parsed.file_id == ARCHIVE_FILE_ID:
            found.append(parsed)
    return [f"{folder}/{name.name}" for name in sorted(found)]


def scan_archive(storage: Storage, folder: str = ARCHIVE_FOLDER) -> ArchiveScan:
    """Read every archive log file. Corrupt ranges, blocks of other types and blocks whose records
    cannot be decoded are skipped and listed in :attr:`ArchiveScan.skipped`; the other blocks'
    entries are all returned, sorted by time, then state, then action."""
    instants: list[ArchivedInstant] = []
    skipped: list[SkippedBlock] = []
    files = archive_files(storage, folder)
    for path in files:
        with storage.open_input(path) as source:
            if not source.size:  # every archival writes its file with a block in it
                skipped.append(SkippedBlock(path, 0, 0, "the file is empty"))
            for block in LogFileReader(source).blocks():
                if block.corrupt is not None:
                    skipped.append(SkippedBlock(path, block.offset, block.end, block.corrupt.reason))
                    continue
                if block.block_type is not BlockType.AVRO_DATA_BLOCK:
                    reason = f"a {block.block_type.name}, not an AVRO_DATA_BLOCK"
                    skipped.append(SkippedBlock(path, block.offset, block.end, reason))
                    continue
                try:
                    records = block.avro_records()
                    found = [_to_instant(r, f"{path}@{block.offset}") for r in records]
                except (LogFormatError, InstantMetadataError) as e:
                    skipped.append(SkippedBlock(path, block.offset, block.end, str(e)))
                    continue
                instants.extend(found)
    instants.sort(key=lambda i: (i.timestamp, i.state, i.action))
    return ArchiveScan(tuple(instants), tuple(files), tuple(skipped))


def read_archived(storage: Storage, folder: str = ARCHIVE_FOLDER) -> list[ArchivedInstant]:
    """The archived instants (every archived state), sorted by time; see :func:`scan_archive`
    for what was skipped."""
    return list(scan_archive(storage, folder).instants)


@dataclass(frozen=True)
class ArchivedBlock:
    """One intact data block of the archive: what one archival appended."""

    #: its INSTANT_TIME header: when the archival ran (tidemark's archiver writes it; Hudi's
    #: archiver writes none, so None for the blocks it wrote)
    instant_time: str | None
    instants: tuple[ArchivedInstant, ...]

    @property
    def completed(self) -> tuple[str, ...]:
        """The times of the completed instants it holds, sorted."""
        return tuple(sorted({i.timestamp for i in self.instants if i.state is State.COMPLETED}))

    def ends_search_from(self, bound: str, *, bound_included: bool = False) -> bool:
        """Whether neither this block nor any older one (read after it, newest first) can hold an
        instant after ``bound`` (or at it, unless ``bound_included``): all its instants are before
        it, and so is its archival time. An archival appends after every block written before it
        and archives only instants that existed when it ran; but its instants alone do not say
        it: a ``savepoint delete`` archives the old savepointed commit alone, in a block newer
        than the writes archived after that commit. A block of Hudi's archiver records no time,
        and is judged by its instants."""

        def before(timestamp: str) -> bool:
            return timestamp <= bound if bound_included else timestamp < bound

        return all(before(i.timestamp) for i in self.instants) and (
            self.instant_time is None or before(self.instant_time)
        )


def archived_blocks_newest_first(storage: Storage, folder: str = ARCHIVE_FOLDER) -> Iterator[ArchivedBlock]:
    """Each intact data block, newest first, decoded only as far as the caller iterates: each
    archival appends its block(s) at the end, so what a run that stopped half-way left on both
    timelines is in the newest blocks, and the history before them need not be read (a long-lived
    table's archive holds tens of thousands of instants)."""
    for path in reversed(archive_files(storage, folder)):
        with storage.open_input(path) as source:
            blocks = [b for b in LogFileReader(source).blocks() if b.corrupt is None]
            for block in reversed(blocks):  # decoded while the file is open: content is lazy
                if block.block_type is not BlockType.AVRO_DATA_BLOCK:
                    continue
                try:
                    found = [_to_instant(r, f"{path}@{block.offset}") for r in block.avro_records()]
                except (LogFormatError, InstantMetadataError):
                    continue
                yield ArchivedBlock(block.instant_time, tuple(found))


def latest_archival_block(storage: Storage, folder: str = ARCHIVE_FOLDER) -> ArchivedBlock | None:
    """The latest archival (each appends one block): the newest intact data block, None when
    nothing is archived."""
    for block in archived_blocks_newest_first(storage, folder):
        return block
    return None


def latest_archival(storage: Storage, folder: str = ARCHIVE_FOLDER) -> tuple[str, ...]:
    """The instant times the latest archival moved: the completed instants of the newest intact
    data block."""
    block = latest_archival_block(storage, folder)
    return block.completed if block is not None else ()
