"""Snapshot reads: each file slice's base file merged with its log blocks by record key.

Log blocks count when their instant is committed (completed on the timeline at or before the
as-of instant, or older than the active timeline) and no rollback block targets it. Records of
one key merge as the table's payload class (or record merge mode) says
(:mod:`tidemark.table.payload`): the log records with each other first (Hudi's ``preCombine``,
in arrival order), then the result with the base file's row (``combineAndGetUpdateValue``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from tidemark.errors import InstantStateError, ObjectNotFoundError, TableError
from tidemark.logformat import BlockType, DeleteRecord, HeaderKey, LogBlock, LogFileReader, ordering_field_type
from tidemark.reconcile import (
    ACCEPTED_ATTEMPTS_KEY,
    AcceptedAttempt,
    SkippedBlock,
    SlicedBlock,
    decode_accepted,
    reconcile,
    slice_key,
)
from tidemark.storage.base import Storage
from tidemark.table.avro_schema import (
    META_FIELDS,
    RECORD_KEY,
    arrow_schema_of,
    as_declared,
    declared_types,
    latest_table_schema,
    promoted,
    promotes,
)
from tidemark.table.base_file import read_base_file
from tidemark.table.conflict import pending_clusterings
from tidemark.table.expressions import EXPRESSIONS_KEY, ColumnType, apply_expressions, column_types
from tidemark.table.file_system_view import (
    FileSlice,
    FileSystemView,
    changed_while_reading,
    check_not_cleaned,
    file_gone_while_reading,
    instant_metadata,
)
from tidemark.table.internal_schema import check_readable
from tidemark.table.payload import (
    MergeRule,
    Record,
    Tombstone,
    delete_ordering,
    rule_for_table,
    warn_unsupported,
)
from tidemark.table.properties import TableProperties, read_properties
from tidemark.timeline import (
    CLEAN,
    COMMIT,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    CommitMetadata,
    State,
    Timeline,
    load_timeline,
    rollback_command,
)
from tidemark.timeline.archived import archive_files, scan_archive
from tidemark.timeline.instant import WRITE_ACTIONS

META_COLUMNS = META_FIELDS
_DELETED = object()
#: the record key beside a log table's columns while it is merged
_KEY_COLUMN = "_tm_merge_key"


@dataclass
class ReadStats:
    """What a read skipped, for metrics and for ``--log-blocks`` style reports."""

    file_slices: int = 0
    log_blocks_read: int = 0
    corrupt_blocks: int = 0
    uncommitted_blocks: int = 0
    rolled_back_blocks: int = 0
    #: blocks of retried or duplicate task attempts that reconciliation skipped
    reconciled_blocks: int = 0
    expression_updates_without_row: int = 0
    #: records of the data blocks merged (Hudi's ``totalLogRecords``: delete records not counted)
    log_records: int = 0
    #: distinct keys of the merged log records, deletes included (Hudi's merged records in log)
    log_keys: int = 0
    #: base rows a log record replaced (a stored row the payload kept is not counted), base rows
    #: the logs deleted, and rows of keys only the logs hold: what a compaction commit counts
    updated_rows: int = 0
    deleted_rows: int = 0
    inserted_rows: int = 0


def key_column(properties: TableProperties, table: pa.Table) -> pa.ChunkedArray:
    """The record keys of rows read from a base file: the meta column where the table has one,
    else built from the key fields as Hudi's key generators build them."""
    if properties.populate_meta_fields and RECORD_KEY in table.column_names:
        return table.column(RECORD_KEY).cast(pa.string())
    fields = properties.record_key_fields
    if len(fields) == 1:
        return table.column(fields[0]).cast(pa.string())
    parts = []
    for i, f in enumerate(fields):
        parts.append(pa.scalar(("," if i else "") + f + ":"))
        parts.append(table.column(f).cast(pa.string()))
    return pc.binary_join_element_wise(*parts, "")


class SnapshotReader:
    def __init__(
        self,
        storage: Storage,
        as_of: str | None = None,
        reconcile: bool = True,
        timeline: Timeline | None = None,
        file_groups: Collection[tuple[str, str]] | None = None,
        as_of_latest: bool = False,
        properties: TableProperties | None = None,
        reads_rows: bool = True,
    ) -> None:
        """``timeline``: the table's whole timeline, and ``properties`` its properties, where the
        caller loaded them already; ``reads_rows``: False for a caller that reads the file slices
        and log blocks but no rows (``table show``), which a table with schema on read allows;
        ``file_groups``: the (partition, file id) of the only groups the caller reads (an
        incremental query's), None for every group; ``as_of_latest``: ``as_of`` is the latest
        write when the caller's read began (a Spark DataFrame's load()), not a time a user asked
        for, so a clean since then is a change while it read."""
        self.storage = storage
        self.properties: TableProperties = properties if properties is not None else read_properties(storage)
        full = timeline if timeline is not None else load_timeline(storage)
        if reads_rows:
            check_readable(storage, full)
        if as_of is not None and not full.completed().write_instants().is_completed(as_of):
            raise TableError(
                f"as of {as_of}: no completed write instant at that time on the active timeline of {storage.uri}"
            )
        self._full_timeline = full
        self.timeline: Timeline = full.as_of(as_of) if as_of else full
        self.view = FileSystemView(storage, self.timeline)
        latest = full.completed().write_instants().last()
        if as_of is not None and latest is not None and as_of < latest.timestamp:
            check_not_cleaned(self.view, full, as_of, file_groups, meanwhile=as_of_latest)
        self.stats = ReadStats()
        #: reconciliation of retried task attempts (off only to show what it prevents)
        self.reconcile = reconcile
        self.problems: list[str] = []
        self._metadata_cache: dict[str, CommitMetadata | None] = {}
        self._archived_extra: dict[str, Mapping[str, str]] | None = None
        self._accepted_cache: dict[str, dict[str, AcceptedAttempt]] = {}
        self._write_instants = self.timeline.completed().write_instants()
        props = self.properties
        # read once: key_of runs for every log record
        self._meta_keys = props.populate_meta_fields
        self._key_fields = props.record_key_fields
        probe = rule_for_table(props)
        # only OverwriteNonDefaultsWithLatestAvroPayload needs the schema (its fields' defaults)
        self.table_rule = (
            rule_for_table(props, latest_table_schema(storage, full))
            if probe.rule.combine_kind == "non_defaults"
            else probe
        )
        warn_unsupported(storage.uri, self.table_rule)
        self.merge_rule: MergeRule = self.table_rule.rule

    # --- keys ------------------------------------------------------------------------------------

    def key_of(self, record: dict[str, Any]) -> str:
        if self._meta_keys and (key := record.get(RECORD_KEY)) is not None:
            return str(key)
        fields = self._key_fields
        if len(fields) == 1:
            return str(record.get(fields[0]))
        return ",".join(f"{f}:{record.get(f)}" for f in fields)

    def key_column(self, table: pa.Table) -> pa.ChunkedArray:
        return key_column(self.properties, table)

    # --- log blocks ------------------------------------------------------------------------------

    def _commit_metadata(self, instant: str) -> CommitMetadata | None:
        """A completed write's commit metadata from the active timeline; None when it is not one
        of the loaded timeline, or when the archiver deleted its state file since it was loaded
        (the archiver runs beside readers)."""
        if instant not in self._metadata_cache:
            found = self._write_instants.find(instant)
            metadata = None
            if found is not None:
                # InstantStateError: archived meanwhile (the archive is written before the state file goes)
                with contextlib.suppress(InstantStateError):
                    metadata = instant_metadata(self.storage, found)
            self._metadata_cache[instant] = metadata
        return self._metadata_cache[instant]

    def _extra_metadata(self, instant: str) -> Mapping[str, str]:
        """A write's extra metadata (its accepted task attempts, its expressions), from the
        active timeline, or from the archive for a write archived with its log blocks not yet
        compacted: they must read the same after archival as before, and while it runs."""
        metadata = self._commit_metadata(instant)
        if metadata is not None:
            return metadata.extra_metadata
        # a loaded write without metadata: the archiver moved it while this read ran
        meanwhile = self._write_instants.find(instant) is not None
        if not meanwhile and self._full_timeline.find(instant) is not None:
            return {}  # pending, or after the read's instant: not archived
        if self._archived_extra is None or (meanwhile and instant not in self._archived_extra):
            self._archived_extra = self._archived_writes_extra()  # again: it may predate that archival
        if meanwhile and instant not in self._archived_extra:
            raise changed_while_reading(self.storage, f"instant {instant}")
        return self._archived_extra.get(instant, {})

    def _archived_writes_extra(self) -> dict[str, Mapping[str, str]]:
        """The extra metadata of every completed write on the archived timeline."""
        found: dict[str, Mapping[str, str]] = {}
        folder = self.properties.archive_folder
        if archive_files(self.storage, folder):
            for archived in scan_archive(self.storage, folder).instants:
                if archived.state is State.COMPLETED and archived.action in WRITE_ACTIONS:
                    extra = archived.metadata.get("extraMetadata") or {}
                    found[archived.timestamp] = {str(k): str(v) for k, v in extra.items()}
        return found

    def _accepted(self, file_slice: FileSlice, instants: Iterable[str]) -> dict[str, AcceptedAttempt]:
        key = slice_key(file_slice.partition_path, file_slice.file_id)
        result = {}
        for instant in instants:
            if instant not in self._accepted_cache:
                raw = self._extra_metadata(instant).get(ACCEPTED_ATTEMPTS_KEY)
                self._accepted_cache[instant] = decode_accepted(raw)
            decision = self._accepted_cache[instant].get(key)
            if decision is not None:
                result[instant] = decision
        return result

    def _expressions(self, instant: str) -> dict[str, str] | None:
        raw = self._extra_metadata(instant).get(EXPRESSIONS_KEY)
        return json.loads(raw) if raw else None

    def slice_blocks(self, file_slice: FileSlice) -> tuple[list[SlicedBlock], list[SkippedBlock]]:
        """The blocks of a file slice to merge, in order, and the ones skipped with the reason:
        reconciliation of retried attempts, corrupt ranges, uncommitted instants, rollbacks."""
        sliced: list[SlicedBlock] = []
        for log in file_slice.log_files:
            with self.listed_file():
                source = self.storage.open_input(log.path)
                sliced.extend(SlicedBlock(log.name.name, block) for block in LogFileReader(source).blocks())
        self.stats.log_blocks_read += len(sliced)
        skipped: list[SkippedBlock] = []
        if self.reconcile:
            instants = {sb.block.instant_time for sb in sliced if sb.block.instant_time}
            reconciled = reconcile(sliced, self._accepted(file_slice, sorted(instants)))
            candidates, skipped = reconciled.kept, list(reconciled.skipped)
            self.stats.reconciled_blocks += len(reconciled.skipped)
            self.problems.extend(reconciled.problems)
        else:
            candidates = sliced
        rolled_back = {
            target
            for sb in candidates
            if sb.block.is_rollback and (target := sb.block.header(HeaderKey.TARGET_INSTANT_TIME))
        }
        kept: list[SlicedBlock] = []
        for sb in candidates:
            block = sb.block
            if block.corrupt is not None:
                self.stats.corrupt_blocks += 1
                skipped.append(SkippedBlock(sb.log_file, block, f"corrupt: {block.corrupt.reason}"))
            elif block.block_type is BlockType.COMMAND_BLOCK:
                continue
            elif not self.view.is_committed(block.instant_time or ""):
                self.stats.uncommitted_blocks += 1
                skipped.append(SkippedBlock(sb.log_file, block, f"instant {block.instant_time} is not committed"))
            elif block.instant_time in rolled_back:
                self.stats.rolled_back_blocks += 1
                skipped.append(SkippedBlock(sb.log_file, block, f"instant {block.instant_time} was rolled back"))
            else:
                kept.append(sb)
        return kept, skipped

    @contextlib.contextmanager
    def listed_file(self) -> Iterator[None]:
        """Around reading a data file of this reader's view: one a clean, rollback or restore
        deleted since the view listed it is a "read again" (:func:`file_gone_while_reading`), not
        a missing file that looks like a damaged table."""
        try:
            yield
        except ObjectNotFoundError as e:
            changed = file_gone_while_reading(self.storage, self._full_timeline, e)
            if changed is None:
                raise
            raise changed from e

    # --- file slices -----------------------------------------------------------------------------

    def read_slice(self, file_slice: FileSlice) -> pa.Table | None:
        """The slice's base file merged with its log blocks."""
        self.stats.file_slices += 1
        base = None
        if file_slice.base_file is not None:
            with self.listed_file():
                base = read_base_file(self.storage, file_slice.base_file.path)
        blocks, _ = self.slice_blocks(file_slice)
        if not blocks:
            return base
        writer = _writer_schema(blocks)  # parsed once: every step below types by it
        if base is not None:
            base = _widened_to_writer(base, writer)
        merged = self._merge_columns(base, blocks, writer)
        if merged is not None:
            return merged
        operations: list[tuple[str, Any, str]] = []  # (key, record or DeleteRecord, instant)
        schemas: dict[str, str] = {}  # instant → its data blocks' schema (the types its expressions had)
        deletes = 0
        for sb in blocks:
            instant = sb.block.instant_time or ""
            if sb.block.block_type is BlockType.DELETE_BLOCK:
                before = len(operations)
                operations.extend((d.record_key or "", d, instant) for d in sb.block.delete_records())
                deletes += len(operations) - before
            else:
                operations.extend((self.key_of(r), r, instant) for r in sb.block.records())
                schemas[instant] = sb.block.header(HeaderKey.SCHEMA) or schemas.get(instant, "")
        touched = {key for key, _, _ in operations}
        self.stats.log_records += len(operations) - deletes
        self.stats.log_keys += len(touched)
        base_rows: dict[str, dict[str, Any]] = {}
        if base is not None and base.num_rows:
            keys = self.key_column(base)
            hit = pc.is_in(keys, value_set=pa.array(sorted(touched), pa.string()))
            for row in base.filter(hit).to_pylist():
                base_rows[self.key_of(row)] = row
        field = self.merge_rule.ordering_field
        # the type the rows' ordering values have: the newest block's (Hudi reads by the newest schema)
        newest = next((t for sb in reversed(blocks) if (t := sb.block.header(HeaderKey.SCHEMA))), None)
        merged = self._merge(operations, base_rows, schemas, ordering_field_type(newest, field) if field else None)
        rows = []
        for key, row in merged.items():
            if row is not _DELETED:
                rows.append(row)
                if key in base_rows:
                    self.stats.updated_rows += 1
                else:
                    self.stats.inserted_rows += 1
            elif key in base_rows:
                self.stats.deleted_rows += 1
        if base is not None:
            changed = pa.array(sorted(merged), pa.string())
            base = base.filter(pc.invert(pc.is_in(self.key_column(base), value_set=changed)))
        if not rows:
            return base
        where = f"file group {file_slice.file_id} of partition {file_slice.partition_path!r}"
        log_table = _to_table(rows, base.schema if base is not None else None, writer, where)
        if base is None:
            return log_table
        return pa.concat_tables([base, log_table], promote_options="permissive")

    def _merge_columns(
        self, base: pa.Table | None, blocks: list[SlicedBlock], writer: pa.Schema | None
    ) -> pa.Table | None:
        """The slice merged column by column, for the common case: data blocks only (no delete
        block, no expression update), a rule that keeps one version of a record whole, no record
        the payload takes as a delete, and ordering values present. The same answer as the
        record-by-record merge; None where the case does not hold (that merge runs then)."""
        rule = self.merge_rule
        if rule.combine_kind not in ("overwrite", "ordering", "event_time") or (
            rule.precombine_kind == "partial" and not rule.commit_time_logs
        ):
            return None
        data_blocks = (BlockType.AVRO_DATA_BLOCK, BlockType.PARQUET_DATA_BLOCK)
        if any(sb.block.block_type not in data_blocks for sb in blocks):
            return None
        if any(self._expressions(sb.block.instant_time or "") is not None for sb in blocks):
            return None
        try:
            logs = self._log_table(base, blocks, writer)
            keys = key_column(self.properties, logs)
            if keys.null_count or pc.any(rule.deleted_mask(logs)).as_py():
                return None
            field = rule.ordering_field
            # slices with ordering values that do not sort take the record-by-record merge
            by_ordering = (
                not rule.commit_time_logs
                and rule.precombine_kind == "ordering"
                and field is not None
                and field in logs.column_names
            )
            if by_ordering and _unordered(logs.column(field)):
                return None
            records = logs.num_rows
            logs = logs.append_column(_KEY_COLUMN, keys)
            precombine = dataclasses.replace(rule, precombine_kind="ordering" if by_ordering else "latest")
            logs = precombine.precombine_rows(logs, _KEY_COLUMN)
            if base is None or not base.num_rows:
                merged, updated, inserted = logs.drop_columns([_KEY_COLUMN]), 0, logs.num_rows
            else:
                merged, updated, inserted = self._combine_columns(base, logs)
        except (pa.ArrowException, ValueError, TypeError):
            return None
        # counted once the merge is done: a fallback to the record-by-record merge counts anew
        self.stats.log_records += records
        self.stats.log_keys += logs.num_rows
        self.stats.updated_rows += updated
        self.stats.inserted_rows += inserted
        return merged

    def _log_table(self, base: pa.Table | None, blocks: list[SlicedBlock], writer: pa.Schema | None) -> pa.Table:
        """The blocks' records in arrival order, typed as the record-by-record merge types them:
        the base file's types, plus the columns a newer writer added (``writer``: the newest
        block's schema)."""
        parts = []
        for run in _runs_of_one_schema(blocks):
            # Avro blocks of one schema in a row are decoded at once (many small commits' blocks)
            together = LogBlock.avro_tables([sb.block for sb in run]) if len(run) > 1 else None
            if together is not None:
                parts.append(_typed_as_base(together, base))
            else:
                parts.extend(self._block_table(sb, base, writer) for sb in run)
        return pa.concat_tables(parts, promote_options="permissive")

    def _block_table(self, sb: SlicedBlock, base: pa.Table | None, writer: pa.Schema | None) -> pa.Table:
        if sb.block.block_type is BlockType.PARQUET_DATA_BLOCK:
            return _typed_as_base(sb.block.parquet_table().replace_schema_metadata(None), base)
        part = sb.block.avro_table()  # Avro: column by column where its schema allows
        if part is not None:
            return _typed_as_base(part, base)
        schema = base.schema if base is not None else None  # else record by record
        return _to_table(sb.block.records(), schema, writer, f"log file {sb.log_file}")

    def _combine_columns(self, base: pa.Table, logs: pa.Table) -> tuple[pa.Table, int, int]:
        """Each key's base row against its precombined log row (``combine``, vectorised); with
        the number of base rows a log row replaced and of log rows whose key the base lacks."""
        import numpy as np

        rule = self.merge_rule
        found = pc.index_in(self.key_column(base), value_set=logs.column(_KEY_COLUMN))
        hit = pc.is_valid(found)
        hit_rows = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
        positions = found.filter(hit)
        field = rule.ordering_field
        wins: Any = None
        if field is not None and field in base.column_names and field in logs.column_names:
            stored = base.column(field).take(pa.array(hit_rows, pa.int64()))
            wins = rule.incoming_wins(stored, logs.column(field).take(positions))
        keep_base = np.invert(hit.to_numpy(zero_copy_only=False))
        keep_logs = np.ones(logs.num_rows, dtype=bool)
        matched = np.zeros(logs.num_rows, dtype=bool)
        matched[positions.to_numpy(zero_copy_only=False)] = True
        replaced = len(hit_rows)
        if wins is not None and rule.combine_kind != "overwrite":
            stays = np.invert(wins.to_numpy(zero_copy_only=False))
            keep_base[hit_rows[stays]] = True  # the stored version is newer: it stays
            keep_logs[positions.to_numpy(zero_copy_only=False)[stays]] = False
            replaced -= int(stays.sum())
        kept_base = base.filter(pa.array(keep_base))
        kept_logs = logs.filter(pa.array(keep_logs)).drop_columns([_KEY_COLUMN])
        merged = pa.concat_tables([kept_base, kept_logs], promote_options="permissive")
        return merged, replaced, int(np.count_nonzero(~matched))

    def _merge(
        self,
        operations: list[tuple[str, Any, str]],
        base_rows: dict[str, dict[str, Any]],
        schemas: Mapping[str, str],
        ordering_type: Any = None,
    ) -> dict[str, Any]:
        """key → the row that wins, or ``_DELETED``; keys whose base row wins are absent.
        ``schemas``: each write's block schema, the integer, decimal and float types its expressions computed in;
        ``ordering_type``: the ordering field's Avro type, which delete records' ordering values are read by."""
        rule = self.merge_rule
        logged: dict[str, Record | Tombstone] = {}  # each key's log records precombined so far
        expressions: dict[str, dict[str, str] | None] = {}
        types: dict[str, dict[str, ColumnType]] = {}
        for key, op, instant in operations:
            current = logged.get(key)
            if isinstance(op, DeleteRecord):
                ordering, natural = delete_ordering(op, ordering_type)
                logged[key] = rule.delete(current, ordering, natural)
                continue
            if instant not in expressions:
                expressions[instant] = self._expressions(instant)
            exprs = expressions[instant]
            record = op
            if exprs is not None:
                row = self._resolve(key, current, base_rows)
                if row is None:
                    self.stats.expression_updates_without_row += 1
                    continue  # an update of a row that is not there (deleted meanwhile)
                record = {**row, **{m: op.get(m) for m in META_COLUMNS if m in op}}
                if instant not in types:
                    types[instant] = _column_types(schemas.get(instant))
                record.update(apply_expressions(exprs, row, types[instant]))
            logged[key] = record if current is None else rule.precombine(current, record)
        merged: dict[str, Any] = {}
        for key, version in logged.items():
            row = self._resolve(key, version, base_rows)
            if row is None:
                merged[key] = _DELETED
            elif row is not base_rows.get(key):
                merged[key] = row
        return merged

    def _resolve(self, key: str, logged: Record | Tombstone | None, base_rows: dict[str, Record]) -> Record | None:
        """The key's row: its base row combined with its logs' version (None: deleted)."""
        base = base_rows.get(key)
        if logged is None:
            return base
        if base is None:
            return None if isinstance(logged, Tombstone) else self.merge_rule.insert_value(logged)
        return self.merge_rule.combine(base, logged)

    def read(self, slices: Iterable[FileSlice] | None = None) -> pa.Table:
        """The latest file slices merged (``slices``: those of them only), one table."""
        tables = []
        for file_slice in self.view.latest_file_slices() if slices is None else slices:
            table = self.read_slice(file_slice)
            if table is not None and table.num_rows:
                tables.append(table)
        self._check_not_cleaned_meanwhile()
        if not tables:
            return no_rows(self.storage, self.timeline, self._meta_keys)
        declared = self._declared_schema()
        if declared is not None:  # each slice first: concatenated, int64 and float32 make float64
            tables = [_of_declared_types(t, declared) for t in tables]
        merged = pa.concat_tables(tables, promote_options="permissive")
        if declared is None:
            return merged
        return _in_columns(_of_declared_types(merged, declared), read_columns(declared, self._meta_keys))

    def _check_not_cleaned_meanwhile(self) -> None:
        """Partitions are listed as they are read: a compaction or a write, then a clean, that ran
        since this reader loaded its timeline may have deleted the slices that timeline needs
        while their replacements are newer than it. Such a group would be left out without a word:
        the clean is named instead, as for a read as of an older instant."""
        loaded = self._full_timeline.last()
        if loaded is None or self._write_instants.last() is None:
            return
        now = load_timeline(self.storage)
        # only cleans newer than anything this reader saw: it accounted for the others
        if any(c.timestamp > loaded.timestamp for c in now.of_actions(CLEAN)):
            check_not_cleaned(self.view, now, loaded.timestamp, meanwhile=True)

    def _declared_schema(self) -> pa.Schema | None:
        return declared_schema(self.storage, self.timeline)


def declared_schema(storage: Storage, timeline: Timeline) -> pa.Schema | None:
    """The schema the latest write of ``timeline`` recorded, as Arrow types; None when there is
    none, or it holds a type tidemark does not map (the files' own types then stand)."""
    try:
        latest = latest_table_schema(storage, timeline)
    except InstantStateError as e:
        raise changed_while_reading(storage, str(e)) from e
    try:
        return arrow_schema_of(latest) if latest else None
    except TableError:
        return None


def no_rows(storage: Storage, timeline: Timeline, meta_fields: bool) -> pa.Table:
    """An answer without rows, with the table's columns as of ``timeline`` (meta columns first,
    where the table keeps them), so that a caller's select of a column works on it too; no
    columns for a table that has no schema yet."""
    declared = declared_schema(storage, timeline)
    if declared is None:
        return pa.table({})
    return read_columns(declared, meta_fields).empty_table()


def read_columns(declared: pa.Schema, meta_fields: bool) -> pa.Schema:
    """The columns a read answers with, in this order: the meta columns (where the table keeps
    them), then the ``declared`` schema's (the table's latest, as of the read), as Hudi's readers
    and hudi-rs project every row onto that schema."""
    meta = [pa.field(m, pa.string()) for m in META_FIELDS] if meta_fields else []
    return pa.schema(meta + [f for f in declared if f.name not in META_FIELDS])


def in_read_order(schema: pa.Schema, columns: pa.Schema) -> pa.Schema:
    """``schema`` as a read answers with it: the read's ``columns`` in their order (one
    ``schema`` lacks added, nullable: Hudi adds only nullable columns), not the order of
    whichever file slice was read first. A meta column the table does not keep stays first, and
    a column of the files no schema declares (which a write does not make) after the others."""
    have = set(schema.names)  # once: names is a new list at each access
    known = set(columns.names)
    fields = [f for f in schema if f.name in META_FIELDS and f.name not in known]
    fields += [schema.field(f.name) if f.name in have else f.with_nullable(True) for f in columns]
    fields += [f for f in schema if f.name not in known and f.name not in META_FIELDS]
    return pa.schema(fields, metadata=schema.metadata)


def _in_columns(table: pa.Table, columns: pa.Schema) -> pa.Table:
    """``table`` in the read's ``columns`` (:func:`in_read_order`), a column it lacks null: one a
    write added, whose rows are all deleted since, is still the table's, as hudi-rs and the Spark
    source show it. Columns are moved, never converted."""
    schema = in_read_order(table.schema, columns)
    if schema.names == table.column_names:
        return table
    present = set(table.column_names)  # once: column_names is a new list at each access
    arrays = [table.column(f.name) if f.name in present else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _runs_of_one_schema(blocks: list[SlicedBlock]) -> list[list[SlicedBlock]]:
    """``blocks`` cut into runs of consecutive Avro data blocks of one schema; any other block is
    a run of its own."""
    runs: list[list[SlicedBlock]] = []
    for sb in blocks:
        block = sb.block
        last = runs[-1][-1].block if runs else None
        if (
            last is not None
            and block.block_type is BlockType.AVRO_DATA_BLOCK
            and last.block_type is BlockType.AVRO_DATA_BLOCK
            and block.schema == last.schema
        ):
            runs[-1].append(sb)
        else:
            runs.append([sb])
    return runs


def _typed_as_base(part: pa.Table, base: pa.Table | None) -> pa.Table:
    """Log records decoded column by column in the base file's types, as Hudi's readers promote
    them (a long past 2^24 to a float)."""
    if base is None:
        return part
    base_names = set(base.schema.names)  # once: schema.names is a new list at each access
    for i, f in enumerate(part.schema):
        want = base.schema.field(f.name) if f.name in base_names else f
        if want.type != f.type:
            part = part.set_column(i, want, promoted(part.column(i), want.type))
    return part


def _unordered(values: pa.ChunkedArray) -> bool:
    """Whether some ordering values do not sort: a null or a NaN is "not greater" than any value
    either way round, so arrival order decides between it and the others, which a sort cannot."""
    if values.null_count:
        return True
    return pa.types.is_floating(values.type) and bool(pc.any(pc.is_nan(values)).as_py())


def _of_declared_types(table: pa.Table, declared: pa.Schema) -> pa.Table:
    """``table`` with its numbers, strings and bytes of the declared types, at any depth
    (:func:`declared_types`), converted as Hudi's readers promote them (:func:`promoted`)."""
    schema = declared_types(table.schema, declared)
    for i, (have, want) in enumerate(zip(table.schema, schema, strict=True)):
        if have.type != want.type:
            table = table.set_column(i, want, promoted(table.column(i), want.type))
    return table


def _writer_schema(blocks: list[SlicedBlock]) -> pa.Schema | None:
    """The newest data block's schema (its SCHEMA header) as Arrow types, meta fields first; None
    when there is none or it has a type tidemark does not read."""
    for sb in reversed(blocks):
        text = sb.block.header(HeaderKey.SCHEMA)
        if sb.block.block_type is not BlockType.DELETE_BLOCK and text:
            try:
                return pa.schema([*[pa.field(m, pa.string()) for m in META_FIELDS], *arrow_schema_of(text)])
            except (TableError, ValueError):
                return None
    return None


def _column_types(schema: str | None) -> dict[str, ColumnType]:
    """The types of the integer, decimal and float columns of a block's schema; none known without one
    (its expressions' integers are taken as ``long`` then, its decimals of their digits)."""
    try:
        return column_types(arrow_schema_of(schema)) if schema else {}
    except (TableError, ValueError):
        return {}


def _widened_to_writer(base: pa.Table, writer: pa.Schema | None) -> pa.Table:
    """The base file's rows with the types a newer writer widened (``int`` to ``long`` or
    ``float``, ``float`` to ``double``, ``bytes`` to ``string`` and back, a field added inside a
    struct, list or map column: null in these rows). The log records are typed by the base file's
    columns; without this, a double written after a widening came out cut to float32 (1e300 as
    inf), a float over an int column lost its fraction, an int beyond 32 bits made the merge guess
    every column's type, and a field new in a struct was cut from every updated record; a
    compaction made the loss permanent."""
    if writer is None:
        return base
    names = set(writer.names)  # once: names is a new list at each access
    columns, fields = [], []
    for f, column in zip(base.schema, base.columns, strict=True):
        wanted = _widened_type(f.type, writer.field(f.name).type) if f.name in names else None
        if wanted is not None and wanted != f.type:
            try:
                column = promoted(column, wanted)
                f = f.with_type(wanted)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass  # not a cast Arrow makes: the records are read as the file's types
        columns.append(column)
        fields.append(f)
    schema = pa.schema(fields, metadata=base.schema.metadata)
    return base if schema == base.schema else pa.Table.from_arrays(columns, schema=schema)


def _widened_type(old: pa.DataType, new: pa.DataType) -> pa.DataType | None:
    """``old`` with what the writer's ``new`` type widened (Hudi's promotions, at any depth; a
    field only ``new`` has, added at the end of its struct); None when ``new`` is no widening."""
    if old == new:
        return old
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        known = {f.name for f in old}
        fields = []
        for f in old:
            index = new.get_field_index(f.name)
            if index < 0:
                fields.append(f)
                continue
            widened = _widened_type(f.type, new.field(index).type)
            nullable = f.nullable or new.field(index).nullable
            fields.append(f.with_type(widened if widened is not None else f.type).with_nullable(nullable))
        return pa.struct(fields + [f.with_nullable(True) for f in new if f.name not in known])
    for is_kind, make in ((pa.types.is_large_list, pa.large_list), (pa.types.is_list, pa.list_)):
        if is_kind(old) and is_kind(new):
            item = _widened_type(old.value_type, new.value_type)
            return make(old.value_field.with_type(item)) if item is not None else None
    if pa.types.is_map(old) and pa.types.is_map(new) and old.key_type == new.key_type:
        item = _widened_type(old.item_type, new.item_type)
        return pa.map_(old.key_field, old.item_field.with_type(item)) if item is not None else None
    return new if promotes(old, new) else None


def _to_table(rows: list[dict[str, Any]], schema: pa.Schema | None, writer: pa.Schema | None, where: str) -> pa.Table:
    """Merged log rows as a table of the declared types: the base file's schema (widened to the
    writer's), plus the columns a newer writer added (schema evolution); the writer's schema for
    a file group without a base file. Values an older write logged in a type since promoted (an
    int over 2^24 under a float, a long, bytes under a string) are converted as Hudi's readers
    convert them, at any depth: inferring types instead made a map a struct, and a compaction
    would write the guess. ``where`` names the file slice or log file in errors."""
    if writer is not None:
        known = set(schema.names) if schema is not None else set()
        schema = writer if schema is None else pa.schema([*schema, *[f for f in writer if f.name not in known]])
    if schema is None:
        return pa.Table.from_pylist(rows)  # no schema anywhere: nothing is declared
    names = set(schema.names)  # once: names is a new list at each access
    fields = list(schema)
    columns = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        try:
            columns.append(pa.array(values, f.type))
            continue
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # values of a type since promoted: converted one by one, only in such a column
        try:
            columns.append(pa.array([as_declared(v, f.type) for v in values], f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise TableError(f"{where}: column {f.name}: the log records do not fit its type {f.type} ({e})") from e
    for name in sorted({k for r in rows for k in r} - names):  # a column no schema declares
        try:
            columns.append(pa.array([r.get(name) for r in rows]))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise TableError(f"{where}: column {name}: the log records' values have no one type ({e})") from e
        fields.append(pa.field(name, columns[-1].type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=schema.metadata))


_INSTANT_TIME: Final = re.compile(r"[0-9]{14}(?:[0-9]{3})?")
_DATE_TIME: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,3}))?)?"
)


def as_of_instant(text: str, option: str = "as.of.instant") -> str:
    """Hudi's ``as.of.instant`` as an instant time to compare with, as Hudi's ``formatQueryInstant``
    makes it: an instant time (14 or 17 digits) as it is, compared as text (so 14 digits come
    before every millisecond instant of that second, as Apache's readers take them); a date-time
    at its last millisecond."""
    given: object = text  # typed text; an untyped caller may give a number, which has no .strip
    if not isinstance(given, str):
        raise TableError(f"{option}={given!r}: expected an instant time as text (yyyyMMddHHmmssSSS or yyyy-MM-dd)")
    text = text.strip()
    if _INSTANT_TIME.fullmatch(text):
        return text
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        raise TableError(
            f"{option}={text!r}: expected an instant time (yyyyMMddHHmmssSSS) or yyyy-MM-dd[ HH:mm:ss[.SSS]]"
        )
    y, mo, d, h, mi, s, ms = match.groups()
    try:  # an impossible date or time is refused, as Hudi's parse does
        dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0))
    except ValueError as e:
        raise TableError(f"{option}={text!r}: not a date and time ({e})") from None
    if h is None:  # a day: its start, as Hudi's formatQueryInstant reads yyyy-MM-dd
        return f"{y}{mo}{d}000000000"
    return f"{y}{mo}{d}{h}{mi}{s}{ms.ljust(3, '0') if ms else '999'}"


def resolve_as_of(storage: Storage, timeline: Timeline, requested: str | None, option: str) -> str | None:
    """The latest completed write instant at or before ``requested`` (Hudi's time travel: the
    table as it was at that time), or the latest at all; ``option`` names it in errors. A time at
    or after a write still pending is refused (:func:`_check_before_pending_writes`)."""
    writes = timeline.completed().write_instants().instants
    if requested is None:
        return writes[-1].timestamp if writes else None
    bound = as_of_instant(requested, option)
    _check_before_pending_writes(storage, timeline, requested, bound, option)
    before = [i.timestamp for i in writes if i.timestamp <= bound]
    if not before:
        # the error path only: the archive is read to say why, not to read from it
        archived = [
            i.timestamp
            for i in scan_archive(storage, read_properties(storage).archive_folder).instants
            if i.state is State.COMPLETED and i.action in WRITE_ACTIONS and i.timestamp <= bound
        ]
        if archived:
            raise TableError(
                f"{option}={requested}: the writes at or before it are archived (the latest is {archived[-1]}) "
                f"and time travel reads only the active timeline of {storage.uri}"
            )
        raise TableError(
            f"{option}={requested}: no completed write at or before it on the active timeline of {storage.uri}"
        )
    return before[-1]


def _check_before_pending_writes(storage: Storage, timeline: Timeline, requested: str, bound: str, option: str) -> None:
    """Refuse time travel to ``bound`` (``requested`` as given) at or after the first write still
    requested or inflight, as Apache Hudi's ``TimelineUtils.validateTimestampAsOf`` does: reads
    order writes by instant time, so once that write completes the same time reads it too, and
    one query has two answers. As in Hudi, only commits, deltacommits and replacecommits count: a
    pending compaction adds no records, and a pending clustering rewrites them as they are."""
    pending = [i for i in timeline.pending().of_actions(COMMIT, DELTA_COMMIT, REPLACE_COMMIT) if i.timestamp <= bound]
    if not pending:
        return
    # plans are read only when a pending replacecommit is in the way
    clusterings = pending_clusterings(storage, timeline) if any(i.action == REPLACE_COMMIT for i in pending) else {}
    first = next((i for i in pending if i.timestamp not in clusterings), None)
    if first is None:
        return
    raise TableError(
        f"{option}={requested}: the {first.action} {first.timestamp}, at or before it, is still "
        f"{first.state.name.lower()} on {storage.uri}. Once it completes, a read as of {requested} includes it, "
        "so time travel must be earlier than the first incomplete write (as in Apache Hudi). Wait until it "
        f"completes, roll it back if its writer is gone (`{rollback_command(storage, first.timestamp)}`), or read "
        f"as of a time before {first.timestamp}"
    )


def read_snapshot(storage: Storage, as_of: str | None = None, reconcile: bool = True) -> pa.Table:
    """The table's snapshot (meta columns included), latest or as of a time: ``as_of`` as Hudi's
    ``as.of.instant`` takes it (``yyyyMMddHHmmssSSS`` or ``yyyy-MM-dd[ HH:mm:ss[.SSS]]``; the
    latest completed write at or before it; refused at or after a write still pending), as
    ``tidemark table read --as-of`` and the Spark source do."""
    if as_of is None:
        return SnapshotReader(storage, None, reconcile).read()
    timeline = load_timeline(storage)
    instant = resolve_as_of(storage, timeline, as_of, "as_of")
    return SnapshotReader(storage, instant, reconcile, timeline=timeline).read()
