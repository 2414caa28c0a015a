"""The driver's side of a write, without Spark: create the table, open an instant, commit it
from the tasks' write statuses (removing files of attempts that were not accepted), and roll
back writes that failed.

Order matters for readers: data files are written before the instant completes, and the
completed state file is created (create-if-absent) only once every accepted file is in place;
a rollback first makes a completed instant invisible, then removes its files.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NoReturn

from tidemark.config import comma_fields, conf_bool
from tidemark.errors import (
    InstantMetadataError,
    InstantStateError,
    InvalidBaseFileNameError,
    InvalidTablePropertiesError,
    LiveWriterError,
    MarkerError,
    MetadataTableEnabledError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    OutcomeUnknownError,
    PayloadError,
    PendingRestoreError,
    PendingRollbackError,
    StorageError,
    TableError,
    TidemarkError,
    WriteConflictError,
)
from tidemark.logformat import BaseFileName, HeaderKey, LogFileName, LogFileReader, LogWriter, rollback_block
from tidemark.reconcile import (
    ACCEPTED_ATTEMPTS_KEY,
    ROLLBACK_BLOCK_IDENTIFIER,
    AcceptedAttempt,
    encode_accepted,
    slice_key,
)
from tidemark.storage.base import FileInfo, Storage, canonical_location
from tidemark.table import key_generator as KG
from tidemark.table import properties as P
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.conflict import (
    ConcurrentOperations,
    WriteStart,
    check_commit_conflicts,
    check_no_pending_clustering,
    pending_clusterings,
    restores_since,
    touched_by_commit,
)
from tidemark.table.expressions import EXPRESSION_BLOCKS_PROPERTY
from tidemark.table.file_system_view import (
    BASE_FILE_EXTENSIONS,
    FileSystemView,
    check_not_cleaned,
    instant_metadata,
    partition_files,
    path_in_partition,
    plan_file_path,
    read_compaction_plan,
)
from tidemark.table.heartbeat import HEARTBEAT_FOLDER, Heartbeat, delete_heartbeat, heartbeat_status, runner_status
from tidemark.table.lock import TableLock
from tidemark.table.markers import (
    IOType,
    Marker,
    delete_markers,
    delete_markers_of_committed,
    list_markers,
    markers_folder,
)
from tidemark.table.metadata_table import check_changeable
from tidemark.table.payload import check_payload_class, rule_for_table
from tidemark.table.properties import (
    TableProperties,
    enclosing_table,
    find_properties,
    read_properties,
    table_inside,
    write_properties,
)
from tidemark.timeline import (
    CLEAN,
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    RESTORE,
    ROLLBACK,
    SAVEPOINT,
    CommitMetadata,
    Instant,
    State,
    Timeline,
    WriteStat,
    claim_instant_time,
    create_requested,
    delete_instant_files,
    instant_path,
    left_pending,
    load_timeline,
    read_instant,
    request_new_instant,
    rollback_command,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.active import CLAIM_FOLDER, claim_path
from tidemark.timeline.archived import archived_blocks_newest_first
from tidemark.timeline.instant import WRITE_ACTIONS

_log = logging.getLogger("tidemark.write")

#: the write token of files written by the driver itself (rollback blocks)
DRIVER_WRITE_TOKEN = "0-0-0"


def create_table(
    storage: Storage,
    name: str,
    record_key_fields: Sequence[str],
    precombine_field: str | None = None,
    partition_fields: Sequence[str] = (),
    hive_style_partitioning: bool = False,
    extra: Mapping[str, str] | None = None,
) -> TableProperties:
    """Create a table (version 6) at ``storage``'s root: Merge-On-Read unless ``extra`` says
    ``hoodie.table.type=COPY_ON_WRITE``."""
    if not record_key_fields:
        raise TableError("a table needs at least one record key field")
    check_can_hold_a_table(storage)
    values = {
        P.NAME: name,
        P.DATABASE: "default",
        P.TABLE_TYPE: P.MERGE_ON_READ,
        P.RECORD_KEY_FIELDS: ",".join(record_key_fields),
        P.PARTITION_FIELDS: ",".join(partition_fields),
        P.HIVE_STYLE: str(hive_style_partitioning).lower(),
        "hoodie.datasource.write.partitionpath.urlencode": "false",
        "hoodie.datasource.write.drop.partition.columns": "false",
        P.POPULATE_META_FIELDS: "true",
        P.BASE_FILE_FORMAT: "PARQUET",
        P.PAYLOAD_CLASS: "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        P.KEY_GENERATOR: "org.apache.hudi.keygen.ComplexKeyGenerator"
        if len(record_key_fields) > 1 or len(partition_fields) > 1
        else "org.apache.hudi.keygen.SimpleKeyGenerator"
        if partition_fields
        else "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    }
    if precombine_field:
        values[P.PRECOMBINE_FIELD] = precombine_field
    values.update(extra or {})
    props = TableProperties.create(values)
    write_properties(storage, props, create=True)
    return props


def check_can_hold_a_table(storage: Storage) -> None:
    """Refuse a new table inside another table's folder (a partition, ``.hoodie``): Apache's
    readers of the outer table would take the inner one's folders for its partition's and stop
    reading that partition. A few exists checks (HEADs on S3): run only to create a table."""
    enclosing = enclosing_table(storage)
    if enclosing is not None:
        root, where = enclosing
        raise TableError(f"{storage.uri} is inside the Hudi table at {root} ({where}); write to {root}")
    if ".hoodie" in canonical_location(storage.uri).split("/"):
        raise TableError(f"{storage.uri}: a table cannot be made inside a .hoodie folder (a table's metadata)")
    inner = table_inside(storage)
    if inner is not None:
        raise TableError(
            f"{storage.uri} holds the Hudi table at {inner}: a table made around it would read that table's "
            "folders as its partitions and its rows as its own; choose a folder beside it"
        )


def load_or_create_table(
    storage: Storage,
    name: str,
    record_key_fields: Sequence[str],
    precombine_field: str | None,
    partition_fields: Sequence[str],
    hive_style_partitioning: bool,
) -> TableProperties:
    """The table's properties, creating the table on first write; a write whose keys disagree
    with an existing table's is refused before anything is written."""
    settings = TableSettings(
        tuple(record_key_fields), precombine_field, tuple(partition_fields), hive_style_partitioning
    )
    existing = find_properties(storage)
    values = resolve_table_settings(storage.uri, existing, settings)
    return existing if existing is not None else create_table_from(storage, name, values)


#: write settings (Hudi's names) a write may give with ``--conf`` for its table's keys
_PAYLOAD_WRITE = "hoodie.datasource.write.payload.class"
_MERGE_MODE_WRITE = "hoodie.write.record.merge.mode"
#: the payload class of a version 6 table that merges as each merge mode does
_MERGE_MODE_PAYLOADS = {
    "COMMIT_TIME_ORDERING": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
    "EVENT_TIME_ORDERING": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
}
TABLE_TYPE_WRITE = "hoodie.datasource.write.table.type"


@dataclass(frozen=True)
class TableSettings:
    """What a write says about its table's keys. Empty or None is "the table's" for an existing
    table (and the default for a new one); a value that contradicts the table is refused."""

    record_key: tuple[str, ...] = ()
    precombine: str | None = None
    #: names, or (CustomKeyGenerator) ``name:SIMPLE|TIMESTAMP``
    partition_fields: tuple[str, ...] | None = None
    hive_style: bool | None = None
    url_encode: bool | None = None
    key_generator: str | None = None
    payload_class: str | None = None
    #: Hudi 1.x's ``hoodie.record.merge.mode`` (upper case), recorded with the payload class that
    #: merges the same way, so that Apache's 0.x readers of a version 6 table merge as it says
    merge_mode: str | None = None
    #: key generator settings (``hoodie.keygen.timebased.*``, ...) of the write
    key_generator_conf: Mapping[str, str] = field(default_factory=dict)
    #: COPY_ON_WRITE or MERGE_ON_READ (a new table's; default MERGE_ON_READ)
    table_type: str | None = None
    #: ``hoodie.populate.meta.fields``: False makes a new table keep its meta columns null
    populate_meta_fields: bool | None = None

    @classmethod
    def from_conf(
        cls,
        conf: Mapping[str, str],
        record_key: Sequence[str] = (),
        precombine: str | None = None,
        partition_fields: Sequence[str] | None = None,
        hive_style: bool | None = None,
        table_type: str | None = None,
    ) -> TableSettings:
        """The settings of a write: its flags, and Hudi's write keys among its ``--conf``."""

        def flag(key: str) -> bool | None:
            return None if key not in conf else conf_bool(conf, key, default=False)

        if partition_fields is None and conf.get(KG.WRITE_PARTITION_FIELDS):
            partition_fields = comma_fields(conf[KG.WRITE_PARTITION_FIELDS])
        return cls(
            record_key=tuple(record_key),
            precombine=precombine,
            partition_fields=None if partition_fields is None else tuple(partition_fields),
            hive_style=hive_style if hive_style is not None else flag(P.HIVE_STYLE),
            url_encode=flag(P.URL_ENCODE),
            key_generator=KG.key_generator_class(conf),
            payload_class=conf.get(_PAYLOAD_WRITE) or conf.get(P.PAYLOAD_CLASS) or None,
            merge_mode=(conf.get(P.RECORD_MERGE_MODE) or conf.get(_MERGE_MODE_WRITE) or "").strip().upper() or None,
            key_generator_conf={
                k: v
                for k, v in conf.items()
                if k.startswith((KG.TIMEBASED, "hoodie.deltastreamer.keygen.timebased."))
                or k in (KG.CONSISTENT_TIMESTAMP, KG.COMPLEX_NEW_ENCODING)
            },
            table_type=table_type_name(table_type or conf.get(TABLE_TYPE_WRITE) or conf.get(P.TABLE_TYPE)),
            populate_meta_fields=flag(P.POPULATE_META_FIELDS),
        )


def table_type_name(text: str | None) -> str | None:
    """COPY_ON_WRITE or MERGE_ON_READ for any of Hudi's spellings (None for none given)."""
    if text is None or not text.strip():
        return None
    # Hudi accepts the short names too (the SQL option type = 'cow' / 'mor')
    value = {"COW": P.COPY_ON_WRITE, "MOR": P.MERGE_ON_READ}.get(text.strip().upper(), text.strip().upper())
    if value not in P.TABLE_TYPES:
        raise TableError(f"unknown table type {text!r} (use COPY_ON_WRITE or MERGE_ON_READ)")
    return value


def _names(fields: Sequence[str]) -> tuple[str, ...]:
    return tuple(f.split(":", 1)[0].strip() for f in fields)


def resolve_table_settings(uri: str, existing: TableProperties | None, settings: TableSettings) -> dict[str, str]:
    """The table's configuration for a write: the existing table's properties (with the write's
    key generator settings that the table does not record), or, for a new table, the properties
    to create it with. Refuses, before anything is written, a write that contradicts the table,
    a new table without a record key, and a key generator tidemark does not implement."""
    # a payload class or merger tidemark cannot merge with is refused before anything is written
    check_payload_class(settings.payload_class, uri, "write to")
    mode_payload = _merge_mode_payload(settings, uri)
    if existing is None:
        return _new_table_values(settings)
    rule_for_table(existing).require_supported(uri, "write to")
    if not existing.record_key_fields:
        # Hudi's writer needs it too; a write's --record-key cannot stand in for the table's
        raise InvalidTablePropertiesError(
            f"{uri}/{P.PROPERTIES_PATH} has no {P.RECORD_KEY_FIELDS}: tidemark cannot tell which column is the "
            "record key of the rows already in the table. Nothing was written"
        )
    problems = []
    if settings.record_key and existing.record_key_fields != settings.record_key:
        problems.append(
            f"record key {','.join(settings.record_key)} (table: {','.join(existing.record_key_fields) or '(none)'})"
        )
    if settings.partition_fields is not None and existing.partition_fields != _names(settings.partition_fields):
        problems.append(
            f"partition field {','.join(_names(settings.partition_fields)) or '(none)'} "
            f"(table: {','.join(existing.partition_fields) or '(none)'})"
        )
    # a table that records none takes the write's for this write's own input, as Hudi's
    # validateTableConfig objects only when both name one
    if settings.precombine and existing.precombine_field and existing.precombine_field != settings.precombine:
        problems.append(f"precombine field {settings.precombine} (table: {existing.precombine_field or '(none)'})")
    if settings.hive_style is not None and existing.hive_style_partitioning != settings.hive_style:
        problems.append(
            f"hive-style partitioning {str(settings.hive_style).lower()} "
            f"(table: {str(existing.hive_style_partitioning).lower()})"
        )
    if settings.url_encode is not None and existing.url_encode_partitions != settings.url_encode:
        problems.append(
            f"{P.URL_ENCODE}={str(settings.url_encode).lower()} (table: {str(existing.url_encode_partitions).lower()})"
        )
    table_class = existing.key_generator_class or KG.infer_class(existing.record_key_fields, existing.partition_fields)
    KG.check_supported(table_class)  # a table of a key generator tidemark cannot follow is refused
    if settings.key_generator is not None:
        KG.check_supported(settings.key_generator)
        if KG.check_supported(settings.key_generator) != KG.check_supported(table_class):
            problems.append(f"key generator {settings.key_generator} (table: {table_class})")
    if settings.payload_class and settings.payload_class != existing.payload_class:
        problems.append(f"payload class {settings.payload_class} (table: {existing.payload_class})")
    table_mode = (existing.get(P.RECORD_MERGE_MODE) or "").strip().upper()
    if mode_payload is not None and settings.merge_mode != table_mode and mode_payload != existing.payload_class:
        problems.append(
            f"{P.RECORD_MERGE_MODE}={settings.merge_mode} "
            f"(table: {table_mode or 'payload class ' + str(existing.payload_class)})"
        )
    if settings.table_type and settings.table_type != existing.table_type:
        problems.append(f"table type {settings.table_type} (table: {existing.table_type})")
    meta = settings.populate_meta_fields
    if meta is not None and meta != existing.populate_meta_fields:
        problems.append(
            f"{P.POPULATE_META_FIELDS}={str(meta).lower()} (table: {str(existing.populate_meta_fields).lower()})"
        )
    for key, value in settings.key_generator_conf.items():
        if key in existing and existing[key] != value:
            problems.append(f"{key}={value} (table: {existing[key]})")
    if problems:
        raise TableError(f"{uri} is a Hudi table with other settings: " + "; ".join(problems))
    values = {**settings.key_generator_conf, **existing.entries, P.KEY_GENERATOR: table_class}
    if settings.partition_fields and any(":" in f for f in settings.partition_fields):
        values[KG.WRITE_PARTITION_FIELDS] = ",".join(settings.partition_fields)  # a CustomKeyGenerator's types
    return values


def _new_table_values(settings: TableSettings) -> dict[str, str]:
    if not settings.record_key:
        raise TableError(
            "creating a table needs its record key (the column or columns, comma separated, that identify a "
            f"record): give --record-key, or {KG.WRITE_RECORD_KEY_FIELDS} in a Hudi options dict or --conf"
        )
    partition_fields = settings.partition_fields or ()
    key_generator = settings.key_generator or KG.infer_class(settings.record_key, partition_fields)
    KG.check_supported(key_generator)
    values = {
        P.TABLE_TYPE: settings.table_type or P.MERGE_ON_READ,
        P.RECORD_KEY_FIELDS: ",".join(settings.record_key),
        P.PARTITION_FIELDS: ",".join(_names(partition_fields)),
        P.HIVE_STYLE: str(bool(settings.hive_style)).lower(),
        P.URL_ENCODE: str(bool(settings.url_encode)).lower(),
        P.KEY_GENERATOR: key_generator,
        # the key generator's settings, so later writes need no flags (Apache's writer records
        # only the date formats; Hudi reads the others from the write's settings)
        **settings.key_generator_conf,
    }
    if any(":" in f for f in partition_fields):
        values[KG.WRITE_PARTITION_FIELDS] = ",".join(partition_fields)  # a CustomKeyGenerator's types
    if settings.precombine:
        values[P.PRECOMBINE_FIELD] = settings.precombine
    if settings.populate_meta_fields is False:
        if values[P.TABLE_TYPE] == P.COPY_ON_WRITE:
            # an update rewrites a base file, which tidemark finds records of by their meta fields
            raise TableError(
                f"{P.POPULATE_META_FIELDS}=false: tidemark makes merge-on-read tables without meta fields, not "
                "copy-on-write ones (it cannot rewrite their base files by record key yet). Nothing was written"
            )
        values[P.POPULATE_META_FIELDS] = "false"
    if settings.payload_class:
        values[P.PAYLOAD_CLASS] = settings.payload_class
    if settings.merge_mode:
        values[P.RECORD_MERGE_MODE] = settings.merge_mode
        values[P.PAYLOAD_CLASS] = _MERGE_MODE_PAYLOADS[settings.merge_mode]
    return values


def _merge_mode_payload(settings: TableSettings, uri: str) -> str | None:
    """The payload class of the write's merge mode (None when it names none); a mode tidemark
    cannot merge by, or one that contradicts the write's payload class, is refused."""
    if settings.merge_mode is None:
        return None
    payload = _MERGE_MODE_PAYLOADS.get(settings.merge_mode)
    if payload is None:
        raise PayloadError(
            f"cannot write to {uri}: {P.RECORD_MERGE_MODE}={settings.merge_mode} is not one tidemark implements "
            f"(it merges with {' or '.join(_MERGE_MODE_PAYLOADS)}, or a payload class)"
        )
    if settings.payload_class and settings.payload_class != payload:
        raise PayloadError(
            f"cannot write to {uri}: {P.RECORD_MERGE_MODE}={settings.merge_mode} contradicts the payload class "
            f"{settings.payload_class} (that mode merges as {payload})"
        )
    return payload


def create_table_from(storage: Storage, name: str, values: Mapping[str, str]) -> TableProperties:
    """Create a table from :func:`resolve_table_settings`' values for a new table: the first
    write's, which found no table when it started."""
    partition_fields = comma_fields(values.get(P.PARTITION_FIELDS, "")) or ()
    try:
        return create_table(
            storage,
            name,
            comma_fields(values[P.RECORD_KEY_FIELDS]) or (),
            values.get(P.PRECOMBINE_FIELD),
            partition_fields,
            values.get(P.HIVE_STYLE) == "true",
            extra={k: v for k, v in values.items() if k not in (P.PRECOMBINE_FIELD,)},
        )
    except ObjectAlreadyExistsError:
        # two first writes raced and the other made the table: this one wrote nothing, and its
        # plan assumed an empty table; run again, it writes into that table or names the settings
        # that differ
        raise WriteConflictError(
            f"write conflict: another writer created the table at {storage.uri} while this write was "
            "starting; nothing was written: run this write again"
        ) from None


def read_restore_plan(storage: Storage, requested: Instant) -> dict[str, object]:
    """A restore's Avro ``HoodieRestorePlan`` (empty for restores written before tidemark recorded
    one: their requested file is empty)."""
    requested = requested.with_state(State.REQUESTED)  # the plan is in the requested file only
    data = read_instant(storage, requested)
    return avro.deserialize(data, "HoodieRestorePlan", storage.full_uri(instant_path(requested))) if data else {}


@dataclass(frozen=True)
class UnfinishedRestore:
    """A restore left half done, and how to finish it: what the refusals of changes to its table
    say, and what ``tidemark timeline`` says instead of the changes they refuse."""

    instant: Instant
    #: None: a restore Hudi wrote before plans were recorded does not say which savepoint it was for
    savepoint: str | None
    uri: str

    def __str__(self) -> str:
        target = f"to savepoint {self.savepoint}" if self.savepoint else "(to a savepoint it did not record)"
        return f"restore {self.instant.timestamp} {target}"

    @classmethod
    def of(cls, storage: Storage, restore: Instant) -> UnfinishedRestore:
        savepoint = read_restore_plan(storage, restore).get("savepointToRestoreTimestamp")
        return cls(restore, str(savepoint) if savepoint else None, storage.uri)

    @property
    def command(self) -> str:
        return f"tidemark restore {self.uri} {self.savepoint or 'SAVEPOINT'}"

    @property
    def advice(self) -> str:
        return f"finish it first with `{self.command}`"


def unfinished_restore(storage: Storage, timeline: Timeline) -> UnfinishedRestore | None:
    """The restore ``timeline`` holds pending, None when there is none."""
    pending = timeline.pending().of_actions(RESTORE).instants
    return UnfinishedRestore.of(storage, pending[0]) if pending else None


def check_no_pending_restore(storage: Storage, timeline: Timeline) -> None:
    """Refuse to change a table a restore has left half done, as Hudi's writer does: the restore's
    plan was made from the timeline as it was, so a write or compaction made now would survive a
    restore that was meant to remove everything after the savepoint."""
    restore = unfinished_restore(storage, timeline)
    if restore is not None:
        raise PendingRestoreError(
            f"{storage.uri}: {restore} is unfinished and the table may be half restored; {restore.advice}"
        )


def check_no_pending_rollback(storage: Storage, timeline: Timeline) -> None:
    """Refuse to plan over a table with a rollback stopped half-way: the write it rolls back is
    invisible but its files are partly still there, and a compaction plan listing them would fail
    at every run once the rollback, finished later, deleted them."""
    pending = pending_rollbacks(storage, timeline)
    if not pending:
        return
    first = pending[0]
    raise PendingRollbackError(
        f"{storage.uri}: the rollback {first.instant.timestamp} of {first.target.timestamp} is unfinished; "
        f"finish it first with `{rollback_command(storage, first.target.timestamp)}` (the next write "
        "finishes it too)"
    )


def start_write(storage: Storage, action: str, operation: str) -> Instant:
    """Open a new write instant (requested, then inflight), later than every instant so far."""
    timeline = load_timeline(storage)
    check_changeable(storage, "write", timeline=timeline)
    check_no_pending_restore(storage, timeline)
    requested = request_new_instant(storage, timeline, action)
    inflight_metadata = CommitMetadata(operation_type=operation.upper())
    return transition_to_inflight(storage, requested, inflight_metadata.to_bytes())


@dataclass(frozen=True)
class CommitResult:
    instant: Instant
    metadata: CommitMetadata
    removed_files: tuple[str, ...]


def remove_unaccepted_files(storage: Storage, inflight: Instant, stats: Iterable[WriteStat]) -> tuple[str, ...]:
    """Delete the files that carry a marker of ``inflight`` but no accepted write status (attempts
    Spark retried or speculated), so that no reader, tidemark's or Apache's, ever sees them. A
    marked log file holding another instant's blocks is not its to delete: another writer with
    the same write token created that version first, and this attempt moved on to the next."""
    keep = accepted_paths(stats)
    removed = []
    for marker in list_markers(storage, inflight.timestamp):
        if marker.data_path in keep:
            continue
        if marker.io_type is IOType.APPEND and not _written_only_by(storage, marker.data_path, inflight.timestamp):
            continue
        storage.delete(marker.data_path)
        removed.append(marker.data_path)
    return tuple(removed)


def commit_metadata(
    stats: Iterable[WriteStat],
    operation: str,
    schema_json: str,
    replaced_file_ids: Mapping[str, Sequence[str]] | None = None,
    extra_metadata: Mapping[str, str] | None = None,
) -> CommitMetadata:
    """The commit metadata of a write: its write statuses by partition, what it replaced, and the
    attempt reconciliation accepted per file slice."""
    accepted = list(stats)
    attempts: dict[str, AcceptedAttempt] = {}
    for s in accepted:
        partition = s.partition_path or ""
        if s.log_files and "tidemarkAttempt" in s.extra:
            attempts[slice_key(partition, s.file_id)] = AcceptedAttempt(
                int(s.extra["tidemarkAttempt"]), int(s.extra.get("tidemarkBlocks", 0)), frozenset(s.log_files)
            )
    by_partition: dict[str, list[WriteStat]] = defaultdict(list)
    for s in accepted:
        by_partition[s.partition_path or ""].append(s)
    return CommitMetadata(
        partition_to_write_stats={p: tuple(v) for p, v in by_partition.items()},
        partition_to_replace_file_ids={p: tuple(ids) for p, ids in (replaced_file_ids or {}).items()},
        compacted=False,
        extra_metadata={
            "schema": schema_json,
            **({ACCEPTED_ATTEMPTS_KEY: encode_accepted(attempts)} if attempts else {}),
            **(extra_metadata or {}),
        },
        operation_type=operation.upper(),
    )


def commit_write(
    storage: Storage,
    inflight: Instant,
    stats: Iterable[WriteStat],
    operation: str,
    schema_json: str,
    replaced_file_ids: Mapping[str, Sequence[str]] | None = None,
    extra_metadata: Mapping[str, str] | None = None,
    remove_unaccepted: bool = True,
) -> CommitResult:
    """Complete ``inflight`` with the accepted write statuses, with no check for other writers
    (single-writer mode; :class:`PendingWrite` checks). Files of attempts that were not accepted
    are deleted first."""
    accepted = list(stats)
    metadata = commit_metadata(accepted, operation, schema_json, replaced_file_ids, extra_metadata)
    return _complete_write(storage, inflight, accepted, metadata, remove_unaccepted)


def _complete_write(
    storage: Storage, inflight: Instant, accepted: list[WriteStat], metadata: CommitMetadata, remove_unaccepted: bool
) -> CommitResult:
    removed = remove_unaccepted_files(storage, inflight, accepted) if remove_unaccepted else ()
    completed = transition_to_completed(storage, inflight, metadata.to_bytes(), finished_by=None)  # a write
    removed += _finish_committed(storage, completed, accepted, removed, remove_unaccepted)
    return CommitResult(completed, metadata, removed)


def _finish_committed(
    storage: Storage, completed: Instant, accepted: list[WriteStat], removed: Collection[str], remove_unaccepted: bool
) -> tuple[str, ...]:
    """The files a retried or speculative task attempt marked and wrote between the commit's first
    sweep (``removed``: gone already) and its completed transition (it passed its pending check
    meanwhile, and may be killed before its end check), removed, then the marker folder: deleting
    the folder alone would leave them under no marker, where no later write finds them. A failure
    is no failure of the commit; the markers stay for the next write, compaction or archival."""
    if not remove_unaccepted:
        delete_markers_of_committed(storage, completed.timestamp)
        return ()
    try:
        return tuple(remove_unnamed_marked_files(storage, completed, accepted_paths(accepted) | set(removed)))
    except TidemarkError as e:
        _log.warning(
            "write %s is committed, but the files its task attempts marked after its first sweep were not "
            "removed (the next write, compaction or archival removes them): %s",
            completed.timestamp,
            e,
        )
        return ()


class PendingWrite:
    """One write from its start to its commit or rollback, as its driver sees it: the instant, its
    heartbeat, and what the timeline held when it started (for the conflict checks).

    With optimistic concurrency control (the default) the commit takes the table lock, checks the
    writes completed and the compactions planned since this write started, and completes the
    instant only while it still holds the lock's lease; a conflict rolls this write back and raises
    :class:`WriteConflictError`. The other write is never touched.
    """

    def __init__(
        self, storage: Storage, inflight: Instant, config: ConcurrencyConfig, start: WriteStart, heartbeat: Heartbeat
    ) -> None:
        self.storage = storage
        self.inflight = inflight
        self.config = config
        self.start = start
        self.heartbeat = heartbeat

    @property
    def instant(self) -> str:
        return self.inflight.timestamp

    def commit(
        self,
        stats: Iterable[WriteStat],
        operation: str,
        schema_json: str,
        replaced_file_ids: Mapping[str, Sequence[str]] | None = None,
        extra_metadata: Mapping[str, str] | None = None,
        remove_unaccepted: bool = True,
    ) -> CommitResult:
        try:
            return self._commit(stats, operation, schema_json, replaced_file_ids, extra_metadata, remove_unaccepted)
        except OutcomeUnknownError:
            # the driver gives the write up: a long-lived one (a notebook, a streaming query going
            # on) would otherwise keep a write that did not land looking live, never rolled back.
            # The file stays, so the next writer judges the write expired from its last beat
            # (time for a commit still under way to land) or finds it completed.
            self.heartbeat.stop(delete=False)
            raise

    def _commit(
        self,
        stats: Iterable[WriteStat],
        operation: str,
        schema_json: str,
        replaced_file_ids: Mapping[str, Sequence[str]] | None,
        extra_metadata: Mapping[str, str] | None,
        remove_unaccepted: bool,
    ) -> CommitResult:
        accepted = list(stats)
        self._check_changeable()
        if not self.config.optimistic:
            # the one other writer a single-writer table may have: Apache's async clustering
            metadata = commit_metadata(accepted, operation, schema_json, replaced_file_ids, extra_metadata)
            try:
                check_no_pending_clustering(
                    self.storage, load_timeline(self.storage), self.instant, touched_by_commit(metadata)
                )
            except WriteConflictError:
                self._rollback_quietly()
                raise
            result = _complete_write(self.storage, self.inflight, accepted, metadata, remove_unaccepted)
            self.heartbeat.stop()
            return result
        # the slow part (deletes) before the lock; the critical section is check-then-complete
        removed = remove_unaccepted_files(self.storage, self.inflight, accepted) if remove_unaccepted else ()
        metadata = commit_metadata(accepted, operation, schema_json, replaced_file_ids, extra_metadata)
        touched = touched_by_commit(metadata)
        with TableLock(self.storage, self.config) as lock:
            timeline = load_timeline(self.storage)
            self._check_still_mine(timeline)
            self._check_changeable(timeline)  # again under the lock: an Apache writer may have built one meanwhile
            try:
                check_commit_conflicts(
                    self.storage,
                    ConcurrentOperations(self.storage, self.start),
                    timeline,
                    touched,
                    rolled_back=lambda: rollbacks_by_target(self.storage, timeline, skip=self.start.seen).keys(),
                )
                self._check_base_not_rolled_back(timeline)
            except WriteConflictError:
                self._rollback_quietly()
                raise
            lock.check_held()  # fencing: a holder whose lease was taken over stops here
            completed = transition_to_completed(self.storage, self.inflight, metadata.to_bytes(), finished_by=None)
        removed += _finish_committed(self.storage, completed, accepted, removed, remove_unaccepted)
        self.heartbeat.stop()
        return CommitResult(completed, metadata, removed)

    def _check_base_not_rolled_back(self, timeline: Timeline) -> None:
        """A rollback begun since this write started (or pending then) of a write it saw completed
        took away files this write may have read: a copy-on-write merge carries their rows into
        its new files, and a commit would bring back what the rollback took away."""
        pending = [(p.instant.timestamp, p.target.timestamp) for p in pending_rollbacks(self.storage, timeline)]
        done = rollbacks_by_target(self.storage, timeline, skip=self.start.seen)
        taken = [
            (rollback, target)
            for rollback, target in [*pending, *((str(m.get("startRollbackTime")), t) for t, m in done.items())]
            if target in self.start.seen
        ]
        if taken:
            COUNTERS.add("conflicts_at_commit")
            rollback, target = taken[0]
            raise WriteConflictError(
                f"write conflict: the rollback {rollback} of {target} on {self.storage.uri} began while write "
                f"{self.instant} ran, and this write may carry rows of {target}; this write was rolled back: write "
                "it again",
                instant=self.instant,
                other=rollback,
                stage="commit",
            )

    def _check_changeable(self, timeline: Timeline | None = None) -> None:
        """A metadata table that an Apache writer built while this write ran would go stale with
        this commit: the write is rolled back instead."""
        try:
            check_changeable(self.storage, "commit this write", timeline=timeline)
        except MetadataTableEnabledError:
            self._rollback_quietly()
            raise

    def _check_still_mine(self, timeline: Timeline) -> None:
        current = self._check_not_taken(timeline)
        if current is None or current.state is not State.INFLIGHT:
            raise InstantStateError(
                f"write {self.instant} on {self.storage.uri} is no longer inflight (state: "
                f"{current.state.name if current else 'gone'}): "
                "another writer rolled it back after its heartbeat expired"
            )
        if self.heartbeat.expired_for_others():
            raise InstantStateError(
                f"write {self.instant} on {self.storage.uri}: no heartbeat landed for "
                f"{self.config.heartbeat_expiry_ms} ms, so other writers may take it for dead; not committing"
            )

    def _check_not_taken(self, timeline: Timeline) -> Instant | None:
        """This write's instant on ``timeline``; :meth:`_lost` (a conflict) when another process
        took it for dead and rolled it back, or restored the table past it."""
        current = timeline.find(self.instant, self.inflight.action)
        restored = restores_since(self.start, timeline)
        # also while its inflight file is still there: a rollback that stopped before deleting it
        # may have deleted its files, and finished later it takes back what this would commit
        rolled_back_by = self._rolled_back_by(timeline, gone=current is None or current.state is State.REQUESTED)
        if restored and (current is None or rolled_back_by is not None):
            unfinished = unfinished_restore(self.storage, timeline)
            self._lost(
                restored[0].timestamp,
                f"restore {restored[0].timestamp}, which began while it ran (its heartbeat had expired)",
                # written again now, it would be refused until that restore is finished
                then=f"{unfinished} is unfinished: {unfinished.advice}, then " if unfinished is not None else "",
            )
        if rolled_back_by is not None:
            self._lost(
                rolled_back_by,
                f"rollback {rolled_back_by}, of another process that took it for dead (its heartbeat had expired)",
            )
        return current

    def _rolled_back_by(self, timeline: Timeline, gone: bool) -> str | None:
        """The rollback (completed or under way) of this write by another process, if any; one
        completed only where this write's inflight file is ``gone`` (the rollback deletes it first)."""
        pending = [
            p.instant.timestamp for p in pending_rollbacks(self.storage, timeline) if p.target.timestamp == self.instant
        ]
        done = rollbacks_by_target(self.storage, timeline, after=self.instant).get(self.instant) if gone else None
        return pending[0] if pending else None if done is None else str(done.get("startRollbackTime"))

    def _lost(self, other: str, by: str, then: str = "") -> NoReturn:
        """This write was taken for dead and rolled back by ``other``: lost as to a conflict (exit
        3, write it again, ``then`` saying what comes first), as nothing of it was completed."""
        self.heartbeat.stop()  # nothing to beat for: its instant is gone
        COUNTERS.add("conflicts_at_commit")
        # its tasks went on writing after the rollback had taken its files (a stall, then the job
        # ran on): what they wrote since stayed until the next write or archival took it as a
        # zombie's; this write knows it is over, so it takes its own files away now
        try:
            remove_files_of_rolled_back(self.storage, self.instant)
        except StorageError as e:
            _log.warning(
                "write %s was rolled back; the files its tasks wrote since are left for the next write to remove: %s",
                self.instant,
                e,
            )
        raise WriteConflictError(
            f"write conflict: write {self.instant} on {self.storage.uri} was rolled back by {by}; nothing was "
            f"completed: {then}write it again",
            instant=self.instant,
            other=other,
            stage="commit",
        )

    def _rollback_quietly(self) -> None:
        try:
            rollback(self.storage, self.instant, own=True, action=self.inflight.action)
        except TidemarkError as e:  # the next writer rolls it back once the heartbeat expires
            _log.warning(
                "write %s lost a conflict and its rollback failed (left to the next writer): %s", self.instant, e
            )
        self.heartbeat.stop()

    def abort(self) -> RollbackResult:
        """Roll this write back (its job failed) and stop its heartbeat. Its tasks stop when
        another process rolled it back (they find it no longer pending): then it was lost, as
        at its commit (:class:`WriteConflictError`), not failed."""
        try:
            self._check_not_taken(load_timeline(self.storage))
            return rollback(self.storage, self.instant, own=True, action=self.inflight.action)
        finally:
            self.heartbeat.stop()


def _check_previous_state_kept(storage: Storage, timeline: Timeline, target: Instant) -> None:
    """Refuse to roll back the completed ``target`` when the table it would leave, the one as of
    the write before it, needs file slices a later clean deleted (a compaction's or rewrite's
    previous slice, the file groups a replacecommit replaced): the rollback would delete the
    only copy of the data."""
    earlier = [i for i in timeline.completed().write_instants() if i.timestamp < target.timestamp]
    if not earlier:
        return
    previous = earlier[-1].timestamp
    try:
        check_not_cleaned(FileSystemView(storage, timeline.as_of(previous)), timeline, previous)
    except TableError as e:
        raise InstantStateError(
            f"{storage.uri}: rolling back {target} would leave the table as of {previous}, which a clean has since "
            f"partly deleted ({e}); restore to a savepoint instead, or write the correction as a new write"
        ) from None


def _check_archived_writes_kept(storage: Storage, timeline: Timeline, target: Instant) -> None:
    """Refuse to roll back the completed ``target`` when it is the only completed write left on
    the active timeline and the archive holds writes: readers count data older than the active
    timeline's first write as committed (archived) only while there is one (tidemark's view, and
    Hudi's isBeforeTimelineStarts), so every archived write's files would read as uncommitted."""
    if any(i != target for i in timeline.completed().write_instants()):
        return
    folder = read_properties(storage).archive_folder
    for block in archived_blocks_newest_first(storage, folder):
        archived = [i.timestamp for i in block.instants if i.state is State.COMPLETED and i.action in WRITE_ACTIONS]
        if archived:
            raise InstantStateError(
                f"{storage.uri}: {target} is the only completed write left on the active timeline and the writes "
                f"before it are archived (latest {max(archived)}, in {folder}): rolled back, readers (tidemark's "
                "and Apache Hudi's) would take the archived writes' files for uncommitted and read the table empty; "
                "undo it with a new write instead (write back or delete the rows it changed)"
            )


def begin_write(
    storage: Storage,
    action: str,
    operation: str,
    config: ConcurrencyConfig | None = None,
    partitions: Iterable[str] = (),
) -> PendingWrite:
    """Open a new write instant with a heartbeat (started before the instant exists, so nobody
    ever sees this write pending without one). ``partitions``, those the write is to write in,
    go into its inflight file as Hudi's writer puts its workload profile there: a rollback that
    finds no markers then lists only them, not every partition of the table."""
    config = config or ConcurrencyConfig()
    timeline = load_timeline(storage)
    check_changeable(storage, "write", timeline=timeline)
    check_no_pending_restore(storage, timeline)
    heartbeats: list[Heartbeat] = []

    def start_heartbeat(ts: str) -> bool:
        # its heartbeat file, created if absent, must be this write's alone too: one that is there
        # already (a writer, Apache's included, that did not claim the time) means the time is taken
        heartbeat = Heartbeat(storage, ts, config)
        if heartbeat.claim():
            heartbeats.append(heartbeat)
            return True
        return False

    with claim_instant_time(storage, timeline, take=start_heartbeat) as ts:
        heartbeat = heartbeats[-1]
        try:
            requested = create_requested(storage, ts, action)
            profile = CommitMetadata(
                operation_type=operation.upper(), partition_to_write_stats=dict.fromkeys(sorted(set(partitions)), ())
            )
            inflight = transition_to_inflight(storage, requested, profile.to_bytes())
        except BaseException:
            heartbeat.stop()
            raise
    return PendingWrite(storage, inflight, config, WriteStart.of(ts, timeline), heartbeat)


def mark_expression_blocks(storage: Storage) -> None:
    """Say in ``hoodie.properties`` that the table holds expression updates (see the README:
    Apache's reader shows their write-time values until a compaction materialises them)."""
    props = read_properties(storage)
    if props.get(EXPRESSION_BLOCKS_PROPERTY) != "true":
        write_properties(storage, TableProperties({**props.entries, EXPRESSION_BLOCKS_PROPERTY: "true"}))


# --- rollback ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RollbackResult:
    rollback_instant: Instant
    rolled_back: Instant
    deleted_files: tuple[str, ...]
    rollback_log_files: tuple[str, ...]
    #: False when a resumed rollback can no longer tell the state ``rolled_back`` had when it was
    #: planned (see :class:`PendingRollback`)
    target_state_known: bool = True
    #: the partitions listed to find the files of a pending write that left no markers, or of a
    #: write whose markers could not be read; None when its markers (and its commit) named them
    listed_partitions: tuple[str, ...] | None = None
    #: whether it was listed because its markers could not be read (a damaged ``MARKERS<N>`` file)
    markers_unreadable: bool = False

    @property
    def rolled_back_name(self) -> str:
        """The rolled-back instant, with its state when the rollback was planned if that is known."""
        target = self.rolled_back
        return str(target) if self.target_state_known else f"{target.timestamp}.{target.action}"


@dataclass(frozen=True)
class RollbackPreview:
    """What a rollback deletes and marks, judged before it is carried out (or for a dry run)."""

    target: Instant
    #: base files, and log files only the target wrote
    deleted_files: tuple[str, ...]
    #: log files shared with other writes, which get a rollback block
    rollback_log_files: tuple[str, ...]
    #: as in :class:`RollbackResult`
    listed_partitions: tuple[str, ...] | None = None
    markers_unreadable: bool = False
    #: the rollback that stopped half-way and that the real run finishes, if any
    resumes: Instant | None = None


@dataclass(frozen=True)
class PendingRollback:
    """A rollback that stopped half-way, with what its plan says to do."""

    instant: Instant
    #: in its state when the rollback was planned where that is known, else INFLIGHT
    target: Instant
    #: files to delete (base files, and log files only the target wrote)
    bases: tuple[str, ...]
    #: log files to append a rollback block to
    logs: tuple[str, ...]
    #: the plan records the target's time and action only (Hudi's ``HoodieInstantInfo``): its state
    #: is the timeline's until the rollback starts (inflight) and deletes the completed file first
    target_state_known: bool = True

    def preview(self, storage: Storage) -> RollbackPreview:
        """What finishing it would do: its plan's files less those the stopped run deleted."""
        left = tuple(path for path in self.bases if storage.exists(path))
        return RollbackPreview(self.target, left, self.logs, resumes=self.instant)


def pending_rollbacks(storage: Storage, timeline: Timeline) -> list[PendingRollback]:
    """The rollbacks on ``timeline`` that have not completed, oldest first, from their plans."""
    found = []
    for pending in timeline.pending().of_actions(ROLLBACK):
        requested = pending.with_state(State.REQUESTED)
        where = storage.full_uri(instant_path(requested))
        plan = avro.deserialize(read_instant(storage, requested), "HoodieRollbackPlan", where)
        info = plan["instantToRollback"]
        requests = [(r.get("partitionPath") or "", r) for r in plan.get("RollbackRequests") or []]
        target = Instant(info["commitTime"], info["action"], State.INFLIGHT)
        # a completed file still there was there when the rollback was planned (it goes first)
        on_timeline = timeline.write_instants().find(target.timestamp, target.action)
        known = on_timeline is not None and (pending.state is State.REQUESTED or on_timeline.is_completed)
        found.append(
            PendingRollback(
                pending,
                on_timeline if known and on_timeline is not None else target,
                tuple(plan_file_path(p, f) for p, r in requests for f in r.get("filesToBeDeleted") or []),
                tuple(plan_file_path(p, f) for p, r in requests for f in r.get("logBlocksToBeDeleted") or {}),
                known,
            )
        )
    return found


def _check_not_compacting(storage: Storage, timeline: Timeline, target: Instant, deleting: Sequence[str]) -> None:
    """Refuse to delete a file a pending compaction's plan lists (a log file only the rolled-back
    write wrote, in a plan made while its rollback was pending): the compaction would fail at
    every run without it, and could not be rolled back once writes logged on top of it. Run
    first, it merges the slice without the rolled-back write's blocks, and the old slice's file
    is then the rollback's to delete."""
    doomed = set(deleting)
    for compaction in timeline.pending().of_actions(COMPACTION):
        if compaction.timestamp == target.timestamp:
            continue  # the compaction rolled back itself
        for op in read_compaction_plan(storage, compaction):
            for path in op.paths:
                if path in doomed:
                    raise PendingRollbackError(
                        f"{storage.uri}: rolling back {target.timestamp} would delete {storage.full_uri(path)}, which "
                        f"the pending compaction {compaction.timestamp} plans over (it would then fail at every "
                        f"run); run the compaction first (tidemark compact {storage.uri}), then the rollback "
                        f"({rollback_command(storage, target.timestamp)}, or the next write)"
                    )


def _affected_files(
    storage: Storage, target: Instant
) -> tuple[list[str], list[str], tuple[str, ...] | None, MarkerError | None]:
    """(base files to delete, log files to mark rolled back, the partitions listed, the error that
    made its markers unreadable) of a write instant: from its markers, and from its commit
    metadata once completed. A pending write whose markers name no file (a writer that died
    before its first, a folder someone cleaned or emptied) has its files found by listing
    instead, as Hudi's listing-based rollback does: without it the rollback did nothing, and its
    blocks read as committed once archival passed them. A write that marked no file wrote none,
    so its listing finds nothing, at the cost of listing the partitions of one dead write."""
    markers, listed, unreadable = marked_files(storage, target, list_unmarked=not target.is_completed)
    if listed is not None and unreadable is None:  # unreadable markers: marked_files warned
        _say_listed(storage, target, listed, [m.data_path for m in markers], None)
    bases: list[str] = []
    logs: list[str] = []
    for m in markers:
        (logs if m.io_type is IOType.APPEND else bases).append(m.data_path)
    if target.is_completed:
        metadata = instant_metadata(storage, target)
        for s in metadata.write_stats():
            if not s.path:
                continue
            name = s.path.rsplit("/", 1)[-1]
            (logs if LogFileName.is_log_file(name) else bases).append(s.path)
    return sorted(set(bases)), sorted(set(logs)), listed, unreadable


def marked_files(
    storage: Storage, instant: Instant | str, then: str = "", list_unmarked: bool = False
) -> tuple[list[Marker], tuple[str, ...] | None, MarkerError | None]:
    """(the markers of ``instant``, the partitions listed instead, the error that made its markers
    unreadable). A damaged ``MARKERS<N>`` file (not UTF-8, not Hudi's lines) stops no write,
    rollback or table service, since nothing but ``tidemark rollback`` or deleting the folder by
    hand would get past it: the files of ``instant`` are found by listing instead, as markers of
    the kind they would have had (its base files, named with its time, created; the log files
    holding a block of it appended to), and a warning names the file and says what is done
    ``then``. ``list_unmarked``: listed too when it has no marker. The partitions listed are the
    ones its own state file names (an inflight file, a commit), else every partition."""
    timestamp = instant if isinstance(instant, str) else instant.timestamp
    try:
        markers, unreadable = list_markers(storage, timestamp), None
    except MarkerError as e:
        markers, unreadable = [], e
    if markers or (unreadable is None and not list_unmarked):
        return markers, None, unreadable
    named = [] if isinstance(instant, str) else _named_partitions(storage, instant)
    # each partition listed once: the walk that finds the partitions lists their files too
    files = {p: storage.list_folder(p).files for p in named} if named else partition_files(storage)
    bases, logs = _listed_files(storage, timestamp, files)
    listed = tuple(sorted(files))
    found = sorted(
        [*(Marker(timestamp, b, IOType.CREATE) for b in bases), *(Marker(timestamp, g, IOType.APPEND) for g in logs)]
    )
    if unreadable is not None:
        _say_listed(storage, instant, listed, [m.data_path for m in found], unreadable, then)
    return found, listed, unreadable


def _named_partitions(storage: Storage, target: Instant) -> list[str]:
    """The partitions ``target``'s own state file names: Hudi's writer puts its workload profile
    (the partitions and file groups it is to write) in the inflight file, a compaction's plan
    names its operations, a commit its write statuses. None named, or the file unreadable: every
    partition is listed instead, which misses nothing."""
    try:
        if target.action == COMPACTION:
            return sorted({op.partition_path for op in read_compaction_plan(storage, target)})
        return sorted(instant_metadata(storage, target).partition_to_write_stats)
    except (InstantMetadataError, InstantStateError):
        return []


def _listed_files(
    storage: Storage, instant: str, files: Mapping[str, Sequence[FileInfo]]
) -> tuple[list[str], list[str]]:
    """(base files whose name carries ``instant``, log files holding a block of it) among the
    listed ``files`` of each partition; log files are read by their block headers only."""
    bases: list[str] = []
    logs: list[str] = []
    for partition in sorted(files):
        for info in files[partition]:
            path = info.path
            name = path.rpartition("/")[2]
            if LogFileName.is_log_file(name):
                try:
                    with storage.open_input(path) as source:
                        if any(b.instant_time == instant for b in LogFileReader(source).blocks()):
                            logs.append(path)
                except ObjectNotFoundError:
                    continue  # a clean took it meanwhile: nobody's to roll back
            elif name.rpartition(".")[2] in BASE_FILE_EXTENSIONS:
                try:
                    if BaseFileName.parse(name).instant == instant:
                        bases.append(path)
                except InvalidBaseFileNameError:
                    continue
    return bases, logs


def _say_listed(
    storage: Storage,
    target: Instant | str,
    partitions: Sequence[str],
    found: Sequence[str],
    unreadable: MarkerError | None,
    then: str = "",
) -> None:
    """Log what a listing found (for a rollback, or a table service past damaged markers), so that
    its user sees the markers were missing (or unreadable: always a warning, the file named,
    since that is damage on storage), and what is done ``then``."""
    where = f"partitions {', '.join(p or '(root)' for p in partitions[:5])}" if partitions else "no partition"
    if len(partitions) > 5:
        where += f" and {len(partitions) - 5} more"
    named = f": {', '.join(found[:3])}{f' and {len(found) - 3} more' if len(found) > 3 else ''}" if found else ""
    why = (
        f"has no markers (none in {markers_folder(target if isinstance(target, str) else target.timestamp)})"
        if unreadable is None
        else f"has markers that cannot be read ({unreadable})"
    )
    _log.log(
        logging.WARNING if found or unreadable is not None else logging.INFO,
        "%s: %s %s, so its files were found by listing %s: %d files of it%s%s",
        storage.uri,
        target,
        why,
        where,
        len(found),
        named,
        f"; {then}" if then else "",
    )


def _logs_on_compaction(storage: Storage, timeline: Timeline, compaction: str) -> tuple[list[str], list[str]]:
    """The log files written on top of a compaction (their base instant is its own), as (those
    holding a block of a write still on the timeline, or archived; the others). Rolling the
    compaction back takes its file slice away, and every one of these files with it."""
    view = FileSystemView(storage, timeline)
    pending = timeline.pending().write_instants().timestamps()

    def live(instant: str | None) -> bool:
        return instant is not None and instant != compaction and (instant in pending or view.is_committed(instant))

    held: list[str] = []
    dead: list[str] = []
    for group in view.all_file_groups():
        for fs in group.slices:
            for log in fs.log_files:
                if log.name.base_instant != compaction:
                    continue
                # a rollback block is no write's: its targets are in this slice too
                with storage.open_input(log.path) as source:
                    found = any(live(b.instant_time) for b in LogFileReader(source).blocks() if not b.is_rollback)
                (held if found else dead).append(log.path)
    return held, dead


def _written_only_by(storage: Storage, path: str, instant: str) -> bool:
    """Whether no block of the log file at ``path`` is of another instant (a torn block, which has
    no header, is the dying attempt's own; an absent file is nobody's)."""
    try:
        with storage.open_input(path) as source:
            return all(block.instant_time in (instant, None) for block in LogFileReader(source).blocks())
    except ObjectNotFoundError:
        return True


def rollback(
    storage: Storage,
    target_timestamp: str,
    config: ConcurrencyConfig | None = None,
    own: bool = False,
    action: str | None = None,
    finished_by: str | None = None,
    lock_held: bool = False,
) -> RollbackResult:
    """Roll back a write: a pending one (a failed write), or the latest completed one. A pending
    write of another writer (``own=False``) is rolled back only once its heartbeat has expired:
    a live writer is never rolled back under its feet. With optimistic concurrency such a
    rollback is judged and carried out under the table lock (``lock_held``: the caller holds it),
    which a write's (or compaction's) commit, a clean's planning and a new savepoint take too: a
    writer that stalled past its heartbeat inside its commit cannot complete the write while its
    files are deleted, and no clean or savepoint judges the table half rolled back. ``action``,
    when known, picks the write among instants of one time (a table from before instant times
    were claimed may have a compaction planned at a write's time). ``finished_by`` is the command
    a storage error tells the user to run again (see :func:`_execute_rollback`)."""
    cfg = config or ConcurrencyConfig()
    if not own and not lock_held and cfg.optimistic:
        timeline = load_timeline(storage)
        found = timeline.write_instants().find(target_timestamp, action)
        if found is not None:
            # refused at once, without the lock (a killed restore may have left it held), and
            # judged again under it
            check_no_pending_restore(storage, timeline)
            # judged and carried out under the lock, which a commit (a compaction's too), a clean's
            # planning and a savepoint take: none of them interleaves with the checks below
            what = "compaction" if found.action == COMPACTION else "write"
            with TableLock(storage, cfg):
                current = load_timeline(storage).find(found.timestamp, found.action)
                if not found.is_completed and current is not None and current.is_completed:
                    raise InstantStateError(
                        f"{storage.uri}: {what} {found.timestamp} completed while this rollback waited for the "
                        f"table lock (its {'runner' if what == 'compaction' else 'writer'} was alive after all); "
                        "nothing was rolled back"
                    )
                return rollback(storage, target_timestamp, config, own, found.action, finished_by, lock_held=True)
    timeline = load_timeline(storage)
    if not own:  # a write rolls back its own failure whatever happened to the table meanwhile
        check_changeable(storage, "roll back", timeline=timeline, writes_rows=False)
    # a rollback of it that stopped half-way (the write already invisible, its files partly
    # deleted) is finished from its plan: a new one would find nothing left to do, and leave that
    # one pending and the rest of the files on storage
    stopped = [p for p in pending_rollbacks(storage, timeline) if p.target.timestamp == target_timestamp]
    if stopped:
        return _resume_rollback(storage, timeline, stopped[0], finished_by)
    judged = plan_rollback(storage, timeline, target_timestamp, config, own, action)
    target, bases, logs = judged.target, list(judged.deleted_files), list(judged.rollback_log_files)
    started = time.monotonic()
    # the plan lists full locations, as Hudi's writer does: Hudi deletes them as written, and
    # takes each file's partition from its location under the table's base path
    requests: list[avro.RollbackRequestTuple] = []
    for path in bases:
        partition, _, name = path.rpartition("/")
        file_id = LogFileName.parse(name).file_id if LogFileName.is_log_file(name) else BaseFileName.parse(name).file_id
        requests.append((partition, file_id, target.timestamp, [storage.hadoop_path(path)], {}))
    for path in logs:
        partition, _, name = path.rpartition("/")
        log = LogFileName.parse(name)
        requests.append((partition, log.file_id, log.base_instant, [], {storage.hadoop_path(path): 1}))
    plan = avro.rollback_plan((target.timestamp, target.action), requests)
    requested = request_new_instant(storage, timeline, ROLLBACK, avro.serialize("HoodieRollbackPlan", plan))
    result = _execute_rollback(storage, requested, target, bases, logs, started, finished_by)
    return replace(result, listed_partitions=judged.listed_partitions, markers_unreadable=judged.markers_unreadable)


def plan_rollback(
    storage: Storage,
    timeline: Timeline,
    target_timestamp: str,
    config: ConcurrencyConfig | None,
    own: bool,
    action: str | None,
) -> RollbackPreview:
    """Judge a rollback of ``target_timestamp`` (refusing it as :func:`rollback` says) and find
    the files it deletes and the log files it appends a rollback block to; nothing is changed."""
    # a savepoint shares its commit's time: look among writes only
    target = timeline.write_instants().find(target_timestamp, action)
    if target is None or target.action not in (COMMIT, DELTA_COMMIT, REPLACE_COMMIT, COMPACTION):
        raise InstantStateError(_not_a_write(storage, timeline, target_timestamp))
    if not own:
        # the unfinished restore's plan rolls back what it names, to its savepoint: a write rolled
        # back now (one before the savepoint, say) would leave the table at neither state
        check_no_pending_restore(storage, timeline)
    # log files on top of a compaction: live ones (its rollback would hide them), and what
    # rolled-back writes left there
    on_top, left_on_top = (
        _logs_on_compaction(storage, timeline, target.timestamp) if target.action == COMPACTION else ([], [])
    )
    if target.is_completed:
        later = [i for i in timeline.completed().write_instants() if i.timestamp > target.timestamp]
        if later:
            raise InstantStateError(
                f"{target} is not the latest completed write ({later[-1].timestamp} is later): "
                "restore to a savepoint instead"
            )
        # a write begun after it may merge its files into its own (Hudi refuses too: "Found
        # in-flight commits after time"); a pending compaction has its own refusal below
        running = [
            i for i in timeline.pending().write_instants() if i.timestamp > target.timestamp and i.action != COMPACTION
        ]
        if not own and running:
            raise InstantStateError(
                f"{storage.uri}: the write {running[0].timestamp} began after {target} and is still pending (it may "
                f"carry rows of {target.timestamp}); let it finish (then restore to a savepoint instead), or roll it "
                f"back first ({rollback_command(storage, running[0].timestamp)})"
            )
        if not own:
            _check_previous_state_kept(storage, timeline, target)
        _check_archived_writes_kept(storage, timeline, target)
        # a compaction planned after it may plan over its log files, and would fail for good
        # without them (Hudi refuses a rollback with pending instants after it too)
        planned = [i for i in timeline.pending().of_actions(COMPACTION) if i.timestamp > target.timestamp]
        if not own and planned:
            raise InstantStateError(
                f"{storage.uri}: the compaction {planned[0].timestamp} is planned after {target} and may plan over "
                f"its files; run it (tidemark compact {storage.uri}) or, with nothing logged on top of it, roll it "
                f"back first ({rollback_command(storage, planned[0].timestamp)})"
            )
        # a restore's own rollbacks may pass later savepoints; a user's rollback never deletes
        # what a savepoint keeps (Hudi refuses it too)
        if not own and timeline.completed().of_actions(SAVEPOINT).find(target.timestamp) is not None:
            raise InstantStateError(
                f"{storage.uri}: {target} is savepointed, and rolling it back would delete the files the savepoint "
                f"keeps; delete the savepoint first (tidemark savepoint delete {storage.uri} {target.timestamp})"
            )
    elif not own and (target.action == COMPACTION or target.timestamp in pending_clusterings(storage, timeline)):
        # a table service's plan without a live heartbeat is nobody's: a clustering plan (Apache's
        # async clustering schedules it, a job runs it later) is no write that may be starting
        service = "compaction" if target.action == COMPACTION else "clustering"
        runner = runner_status(storage, target.timestamp, config or ConcurrencyConfig())
        if runner is not None:
            raise LiveWriterError(
                f"{storage.uri}: {service} {target.timestamp} is being run by another process "
                f"({runner.describe()}); "
                f"{runner.rollback_advice(config or ConcurrencyConfig(), 'stop that process first')}"
            )
        if on_top:
            raise InstantStateError(
                f"{storage.uri}: writes are logged on top of the pending compaction {target.timestamp} "
                f"({len(on_top)} log files, e.g. {on_top[0]}); rolling it back would hide them from every "
                "reader. Run it instead (tidemark compact)"
            )
    elif not own:
        status = heartbeat_status(storage, target.timestamp, config or ConcurrencyConfig())
        if not status.expired:
            raise LiveWriterError(
                f"{storage.uri}: write {target.timestamp} is still running ({status.describe()}); "
                f"{status.rollback_advice(config or ConcurrencyConfig(), 'stop its writer first')}"
            )
    bases, logs, listed, unreadable = _affected_files(storage, target)
    # log files only this write wrote (tidemark starts a new log file per task attempt) are
    # deleted whole, so a rolled-back write leaves no file behind, completed or not: a log file
    # left on top of a compaction that a restore rolls back too would start a file slice of an
    # instant that no longer exists, which readers take for an archived one (and read instead of
    # the slice before it) once the active timeline has moved past it. A log file holding other
    # instants' blocks too (Hudi appends on file systems that can) gets a rollback block.
    sole = [path for path in logs if _written_only_by(storage, path, target.timestamp)]
    # what the rolled-back writes on top of a compaction left there (a log file that several
    # writers appended to, as Hudi does on HDFS, is kept with rollback blocks): the compaction's
    # slice goes with it, or it would be taken for an archived one later, as above
    sole += left_on_top
    bases = sorted(set(bases) | set(sole))
    logs = [path for path in logs if path not in sole]
    _check_not_compacting(storage, timeline, target, bases)
    return RollbackPreview(target, tuple(bases), tuple(logs), listed, unreadable is not None)


def preview_rollback(
    storage: Storage, target_timestamp: str, config: ConcurrencyConfig | None = None
) -> RollbackPreview:
    """What :func:`rollback` of ``target_timestamp`` would do, changing nothing (a dry run): the
    same checks, judged without the table lock, so the real run may still be refused by what
    changes meanwhile. A rollback of it that stopped half-way is previewed from its plan, which
    the real run finishes. What refuses any change to the table (a metadata table, see
    :func:`check_changeable`) is left to the caller, which says it and still shows the plan."""
    timeline = load_timeline(storage)
    stopped = [p for p in pending_rollbacks(storage, timeline) if p.target.timestamp == target_timestamp]
    if stopped:
        return stopped[0].preview(storage)
    return plan_rollback(storage, timeline, target_timestamp, config, own=False, action=None)


def _not_a_write(storage: Storage, timeline: Timeline, timestamp: str) -> str:
    """Why ``timestamp`` is not rolled back, when no write or compaction has that time: what the
    instant there is, and what can be done with it instead."""
    uri = storage.uri
    found = timeline.of_actions(CLEAN, ROLLBACK, RESTORE, SAVEPOINT).find(timestamp)
    if found is None:
        undone = rollbacks_by_target(storage, timeline).get(timestamp)
        if undone is not None:  # a second run of one rollback, a rollback after the next write's
            said = f"{uri}: {timestamp} was rolled back already, by the rollback {undone.get('startRollbackTime')}"
            restore = unfinished_restore(storage, timeline)
            # the restore's step, most likely: what is left to do is finishing that restore
            return f"{said}; {restore} is unfinished: {restore.advice}" if restore is not None else said
        return f"{uri}: no write instant {timestamp} to roll back"
    said = f"{uri}: {timestamp} is a {found.action}, not a write: tidemark rollback takes back writes and compactions"
    if found.action == SAVEPOINT:  # one whose write is gone (a savepoint shares its write's time)
        return f"{said}; a savepoint is deleted with `tidemark savepoint delete {uri} {timestamp}`"
    if found.is_completed:
        return f"{said}; a completed {found.action} cannot be undone (the files it deleted are gone)"
    if found.action == CLEAN:
        command = f"tidemark clean {uri}"
    elif found.action == RESTORE:
        command = UnfinishedRestore.of(storage, found).command
    else:
        stopped = [p for p in pending_rollbacks(storage, timeline) if p.instant.timestamp == timestamp]
        command = rollback_command(storage, stopped[0].target.timestamp)
    return f"{said}; a pending {found.action} is finished by `{command}`"


def _execute_rollback(
    storage: Storage,
    instant: Instant,
    target: Instant,
    bases: Sequence[str],
    logs: Sequence[str],
    started: float,
    finished_by: str | None = None,
) -> RollbackResult:
    """Carry out a planned rollback (``instant``, requested or inflight). Every step can run again
    after a crash: deletes of missing files are no-ops, and a second rollback block for the same
    target changes nothing. A storage error leaves the rollback pending; with ``finished_by``, the
    command of which this rollback is a step (a restore's: a write is refused until the restore is
    done) says how to finish that; without, the error says that this rollback run again does."""
    if finished_by is not None:
        return _carry_out_rollback(storage, instant, target, bases, logs, started, finished_by)
    command = rollback_command(storage, target.timestamp)
    with left_pending(storage, f"the rollback {instant.timestamp} of {target.timestamp}", instant, command):
        return _carry_out_rollback(storage, instant, target, bases, logs, started, command)


def _carry_out_rollback(
    storage: Storage,
    instant: Instant,
    target: Instant,
    bases: Sequence[str],
    logs: Sequence[str],
    started: float,
    finished_by: str,
) -> RollbackResult:
    inflight = instant if instant.state is State.INFLIGHT else transition_to_inflight(storage, instant)
    ts = inflight.timestamp
    # first make the write invisible (if it had completed), then take its files away
    storage.delete(instant_path(target.with_state(State.COMPLETED)))
    partition_metadata: dict[str, tuple[list[str], list[str], dict[str, int]]] = defaultdict(lambda: ([], [], {}))
    for path in bases:
        storage.delete(path)
        partition_metadata[path.rpartition("/")[0]][0].append(storage.hadoop_path(path))
    written_logs = []
    for path in logs:
        partition, _, name = path.rpartition("/")
        log = LogFileName.parse(name)
        writer = LogWriter(storage, partition, log.file_id, log.base_instant, DRIVER_WRITE_TOKEN, new_file=True)
        block = rollback_block(ts, target.timestamp, {HeaderKey.BLOCK_IDENTIFIER: ROLLBACK_BLOCK_IDENTIFIER})
        result = writer.append([block])
        partition_metadata[partition][2][storage.hadoop_path(result.path)] = result.size
        written_logs.append(result.path)
    delete_instant_files(storage, target)
    # the write is no longer pending only now: its tasks, still at work if its driver stalled,
    # went on marking and writing until here (they stop at their next marker, or take their files
    # away at their end); what they marked since the plan goes, with the marker folder
    late = remove_files_of_rolled_back(storage, target.timestamp, planned={*bases, *logs})
    for path in late:
        partition_metadata[path.rpartition("/")[0]][0].append(storage.hadoop_path(path))
    delete_heartbeat(storage, target.timestamp)
    metadata = avro.rollback_metadata(
        start_rollback_time=ts,
        time_taken_ms=int((time.monotonic() - started) * 1000),
        commits_rolled_back=[target.timestamp],
        instants_rolled_back=[(target.timestamp, target.action)],
        partition_metadata=partition_metadata,
    )
    try:
        done = transition_to_completed(
            storage, inflight, avro.serialize("HoodieRollbackMetadata", metadata), finished_by=finished_by
        )
    except InstantStateError:
        # another process finished this rollback from its plan meanwhile (a compaction or a write
        # finishes pending rollbacks first): the same steps, done; this one's result stands
        done = inflight.with_state(State.COMPLETED)
        if not storage.exists(instant_path(done)):
            raise
    return RollbackResult(done, target, (*bases, *late), tuple(written_logs))


def resume_pending_rollbacks(storage: Storage, finished_by: str | None = None) -> list[RollbackResult]:
    """Finish rollbacks a crash or a failed delete left pending, from their plans (``finished_by``
    as for :func:`rollback`)."""
    timeline = load_timeline(storage)
    return [
        _resume_rollback(storage, timeline, pending, finished_by) for pending in pending_rollbacks(storage, timeline)
    ]


def _resume_rollback(
    storage: Storage, timeline: Timeline, pending: PendingRollback, finished_by: str | None = None
) -> RollbackResult:
    """Finish one pending rollback from its plan (refused while a pending compaction plans over a
    file it would delete)."""
    _check_not_compacting(storage, timeline, pending.target, pending.bases)
    result = _execute_rollback(
        storage, pending.instant, pending.target, pending.bases, pending.logs, time.monotonic(), finished_by
    )
    return replace(result, target_state_known=pending.target_state_known)


def accepted_paths(stats: Iterable[WriteStat]) -> set[str]:
    """Every data file the write statuses name (base files and log files), relative to the table."""
    paths = set()
    for s in stats:
        partition = s.partition_path or ""
        if s.path:
            paths.add(s.path)
        paths.update(path_in_partition(partition, name) for name in s.log_files)
    return paths


def committed_paths(storage: Storage, instant: str, action: str) -> set[str] | None:
    """The data files the write ``instant`` committed (:func:`accepted_paths` of its commit): none
    when it did not complete (rolled back); None when that cannot be read."""
    completed = Instant(instant, action, State.COMPLETED)
    try:
        if not storage.exists(instant_path(completed)):
            return set()
        return accepted_paths(instant_metadata(storage, completed).write_stats())
    except (StorageError, InstantMetadataError, InstantStateError):
        return None


def rollbacks_by_target(
    storage: Storage, timeline: Timeline, after: str = "", skip: Collection[str] = ()
) -> dict[str, dict[str, object]]:
    """The completed rollbacks on ``timeline`` later than ``after`` (and not in ``skip``): the
    instant each rolled back → its metadata (Hudi's ``HoodieRollbackMetadata``)."""
    found: dict[str, dict[str, object]] = {}
    for instant in timeline.completed().of_actions(ROLLBACK):
        if instant.timestamp <= after or instant.timestamp in skip:
            continue
        where = storage.full_uri(instant_path(instant))
        metadata = avro.deserialize(read_instant(storage, instant), "HoodieRollbackMetadata", where)
        for target in metadata.get("commitsRollback") or []:
            found[str(target)] = metadata
    return found


def remove_zombie_files(storage: Storage) -> list[str]:
    """Files a zombie task attempt wrote after its write was over: they carry a marker of a
    completed instant but are not in its commit, or a marker of a write that was rolled back (a
    writer that stalled past its heartbeat goes on writing after the rollback). tidemark's readers
    skip both meanwhile: a rolled-back write is not completed, a zombie's log blocks are not of
    an attempt its commit accepted, and a zombie's base file is a second one of a file group and
    instant, of which the file-system view reads the one the commit names. This takes them off
    storage before they can mislead anyone else (Apache's readers fail on such a second base
    file), and before archival would make a rolled-back write's blocks look committed.

    Also removed: what a committed write or compaction could not remove after its commit (a
    storage that refused the delete): its markers, its heartbeat and its time's claim, which
    nothing reads any more."""
    timeline = load_timeline(storage)
    completed = {i.timestamp: i for i in timeline.completed().write_instants()}
    removed = []
    folders = {info.path.split("/")[2] for info in storage.list(".hoodie/.temp/") if info.path.count("/") >= 3}
    for instant in sorted(folders & set(completed)):
        keep = accepted_paths(instant_metadata(storage, completed[instant]).write_stats())
        removed.extend(remove_unnamed_marked_files(storage, completed[instant], keep))
    gone = folders - timeline.write_instants().timestamps()
    rolled_back = gone & rollbacks_by_target(storage, timeline).keys() if gone else set()
    for instant in sorted(rolled_back):
        removed.extend(remove_files_of_rolled_back(storage, instant))
    # nothing reads these: one a storage refuses to delete (no delete permission) stops no work
    try:
        for name in sorted(set(storage.list_dir(HEARTBEAT_FOLDER).files) & set(completed)):
            delete_heartbeat(storage, name)
        # a claim is over once its instant's first state file exists, completed or not
        for name in sorted(set(storage.list_dir(CLAIM_FOLDER).files) & timeline.timestamps()):
            storage.delete(claim_path(name))
    except StorageError as e:
        _log.warning("could not remove the heartbeats and claims committed instants left: %s", e)
    return removed


def remove_unnamed_marked_files(storage: Storage, completed: Instant, keep: Collection[str]) -> list[str]:
    """The files under a marker of ``completed``, a committed write, that its commit does not name
    (``keep``: zombie attempts'), removed, then its marker folder; the files' paths."""
    removed = []
    # damaged markers: its files not in its commit, found by listing the partitions it names
    markers, _, _ = marked_files(storage, completed, "those its commit does not name are removed")
    for marker in markers:
        # a log file holding another instant's blocks (Hudi appends where it can) is not the zombie's
        if marker.data_path not in keep and (
            marker.io_type is not IOType.APPEND or _written_only_by(storage, marker.data_path, completed.timestamp)
        ):
            storage.delete(marker.data_path)
            removed.append(marker.data_path)
    delete_markers_of_committed(storage, completed.timestamp)  # housekeeping: a refusal stops no work
    return removed


def remove_files_of_rolled_back(storage: Storage, instant: str, planned: Collection[str] | None = None) -> list[str]:
    """The files under a marker of ``instant``, a write rolled back (what its tasks wrote after the
    rollback planned, or ran), and its marker folder, removed; the files' paths. ``planned``: the
    files the rollback itself deletes or marks rolled back (its logs get a rollback block), left.
    Its markers damaged: its files found by listing every partition (nothing of a rolled-back
    instant is committed), but in a rollback's last step, whose plan listed them already."""
    removed = []
    if planned is None:
        markers, _, _ = marked_files(storage, instant, "they are removed, as that write was rolled back")
    else:
        try:
            markers = list_markers(storage, instant)
        except MarkerError:  # the rollback found its files by listing, and said why
            markers = []
    for marker in markers:
        if planned is not None and marker.data_path in planned:
            continue
        # a log file another write appended to (Hudi on HDFS) is not the zombie's to remove
        if marker.io_type is not IOType.APPEND or _written_only_by(storage, marker.data_path, instant):
            storage.delete(marker.data_path)
            removed.append(marker.data_path)
    delete_markers(storage, instant)
    return removed


def rollback_pending_writes(storage: Storage, config: ConcurrencyConfig | None = None) -> list[RollbackResult]:
    """Finish interrupted rollbacks, then roll back every write left pending by a writer that died:
    one whose heartbeat has expired (a live writer's write is left alone). Under the table lock
    (optimistic concurrency), so a rollback never races the commit of a write it judged dead.
    Nothing while a restore is unfinished: its rollbacks are its own."""
    config = config or ConcurrencyConfig()
    timeline = load_timeline(storage)
    check_changeable(storage, "roll back failed writes", timeline=timeline, writes_rows=False)
    check_no_pending_restore(storage, timeline)
    results = resume_pending_rollbacks(storage)
    timeline = load_timeline(storage)
    planned = pending_clusterings(storage, timeline)  # table services, not writes: never "failed"
    dead = [
        i
        for i in timeline.pending().write_instants()
        if i.action != COMPACTION
        and i.timestamp not in planned
        and heartbeat_status(storage, i.timestamp, config).expired
    ]
    for instant in dead:
        if not config.optimistic:
            results.append(rollback(storage, instant.timestamp, config, action=instant.action))
            continue
        with TableLock(storage, config):
            current = load_timeline(storage).find(instant.timestamp, instant.action)
            # judged again under the lock: it may have committed, or beaten, meanwhile
            if current is None or current.is_completed:
                continue
            if heartbeat_status(storage, instant.timestamp, config).expired:
                results.append(rollback(storage, instant.timestamp, config, action=instant.action, lock_held=True))
    return results
