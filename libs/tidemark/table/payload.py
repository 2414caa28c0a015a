"""The table's payload class (or record merge mode): how two versions of one record combine.

Hudi decides this in two places, and so does tidemark:

- **precombine** (older, newer): two incoming versions of a key, in one write's batch or in the
  log blocks of one file slice (Hudi's ``preCombine``);
- **combine** (stored, incoming): the version in the base file and the one the logs end with
  (``combineAndGetUpdateValue``; ``getInsertValue`` when the base file has none).

Each rule below follows its Hudi class as of table version 6 (Hudi 0.14/0.15), but for
``OverwriteWithLatestAvroPayload``, whose log blocks merge in commit order as Hudi 1.x (its
``COMMIT_TIME_ORDERING``) and hudi-rs read them; 0.14/0.15 compared the ordering values of log
records too, which tidemark still does for the duplicates of one write's batch. Every rule treats
a record with ``_hoodie_is_deleted = true`` as a delete, as Hudi's ``BaseAvroPayload`` does.

Delete records of delete blocks (a key and an ordering value, no row) are :class:`Tombstone`: in
the logs they lose to an earlier record with a larger ordering value (a delete without ordering
value, or with the int 0, follows arrival order), as Hudi's merged log scanner decides; a later
record wins over them. Under the event-time rules (``DefaultHoodieRecordPayload``,
``EVENT_TIME_ORDERING``) ordering values decide both ways and against the base file too, as Hudi
1.x's event-time merging and hudi-rs decide; under the others a delete record removes the base
row. ``EventTimeAvroPayload`` is one of the others: its ``combineAndGetUpdateValue`` takes a
delete before it compares ordering values, so a delete removes the stored row on a merge-on-read
table as on a copy-on-write one.

Rules are small immutable values chosen by class name (:data:`PAYLOAD_RULES`) and bound to the
table's ordering field (:func:`rule_for_table`); the functions are pure, so the reader, the
writer's precombine and compaction share them, and Spark tasks can pickle them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from tidemark.errors import LogBlockEncodeError, PayloadError
from tidemark.logformat import DeleteRecord, ordering_from_avro, ordering_wrapper
from tidemark.table import properties as P
from tidemark.table.avro_schema import META_FIELDS

IS_DELETED = "_hoodie_is_deleted"
MODEL = "org.apache.hudi.common.model."
DEBEZIUM = "org.apache.hudi.common.model.debezium."
#: Debezium's flattened columns (Hudi's ``DebeziumConstants``)
DEBEZIUM_OP = "_change_operation_type"
MYSQL_SEQ = "_event_seq"
POSTGRES_LSN = "_event_lsn"
#: what Debezium sends for a Postgres TOAST column that did not change
TOASTED = "__debezium_unavailable_value"
#: Hudi's record merger strategy ids: 0.14's default ("use the payload class"; 1.x reads it as event
#: time), and 1.x's commit-time and payload-based ones
DEFAULT_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
PAYLOAD_STRATEGY = "00000000-0000-0000-0000-000000000000"

Record = dict[str, Any]


@dataclass(frozen=True)
class Tombstone:
    """A delete record of a delete block: the key is gone, ``ordering`` decides against other
    versions (None: arrival order)."""

    ordering: Any = None


@dataclass(frozen=True)
class MergeRule:
    """How one payload class (or merge mode) merges two versions of a record."""

    #: the Hudi class (short name) or merge mode this rule implements
    name: str
    #: precombine: the larger ordering value wins (ties: the newer); ``partial``: that one, with
    #: its null fields taken from the other; ``latest``: the newer always
    precombine_kind: Literal["ordering", "partial", "latest"]
    #: combine with the stored version (see the module functions)
    combine_kind: Literal["overwrite", "ordering", "event_time", "non_defaults", "partial", "mysql", "postgres"]
    #: a column whose value (case-insensitive) marks the record as a delete, besides _hoodie_is_deleted
    delete_flag: tuple[str, str] | None = None
    #: the write's hoodie.payload.delete.field and .marker (DefaultHoodieRecordPayload and
    #: EventTimeAvroPayload): a record is a delete when the field's value, as text, equals the
    #: marker exactly; _hoodie_is_deleted is then not looked at, as in Hudi's isDeleteRecord
    delete_marker: tuple[str, str] | None = None
    #: a delete record keeps a base row whose ordering value is larger, and a later log record
    #: of smaller ordering value out (event-time rules)
    deletes_ordered_against_base: bool = False
    #: log blocks merge in commit (arrival) order: the later record or delete record wins
    #: (OverwriteWithLatestAvroPayload and COMMIT_TIME_ORDERING, as Hudi 1.x and hudi-rs read them)
    commit_time_logs: bool = False
    #: the table's ordering (precombine) field
    ordering_field: str | None = None
    #: fields whose schema default is not null: OverwriteNonDefaults keeps the stored value when
    #: the incoming one equals it
    defaults: tuple[tuple[str, Any], ...] = ()

    # --- one record ------------------------------------------------------------------------------

    def ordering(self, version: Record | Tombstone) -> Any:
        if isinstance(version, Tombstone):
            return version.ordering
        # Hudi's ordering value without a precombine field is the constant 0: arrival order
        return version.get(self.ordering_field) if self.ordering_field else 0

    def is_deleted(self, record: Record) -> bool:
        if self.delete_marker is not None:
            value = record.get(self.delete_marker[0])
            return value is not None and _as_text(value) == self.delete_marker[1]
        if record.get(IS_DELETED) is True:
            return True
        if self.delete_flag is not None:
            value = record.get(self.delete_flag[0])
            return value is not None and str(value).lower() == self.delete_flag[1]
        return False

    def insert_value(self, record: Record) -> Record | None:
        """The record as the first version of its key (``getInsertValue``); None: a delete."""
        return None if self.is_deleted(record) else record

    # --- two versions ----------------------------------------------------------------------------

    def precombine(self, older: Record | Tombstone, newer: Record) -> Record | Tombstone:
        """Two incoming versions of one key: the one that stands for both."""
        if isinstance(older, Tombstone):
            # an event-time delete keeps a later-arriving record of smaller ordering value out;
            # otherwise Hudi's "use natural order for delete record"
            if self.deletes_ordered_against_base and _greater(older.ordering, self.ordering(newer)):
                return older
            return newer
        if self.commit_time_logs:
            return newer
        return self._precombine_records(older, newer)

    def _precombine_records(self, older: Record, newer: Record) -> Record:
        if self.precombine_kind == "latest":
            return newer
        older_wins = _greater(self.ordering(older), self.ordering(newer))
        if self.precombine_kind == "ordering":
            return older if older_wins else newer
        # PartialUpdateAvroPayload: the later version (by ordering) with its nulls filled in; a
        # delete on either side is taken as the newer version, as Hudi's merge falls back to it
        if self.is_deleted(newer) or self.is_deleted(older):
            return newer
        return _merge_disordered(older, newer) if older_wins else _fill_nulls(newer, older)

    def delete(self, current: Record | Tombstone | None, ordering: Any, natural: bool) -> Record | Tombstone:
        """A delete record of a delete block applied to the key's current log version; a
        ``natural`` one (see :func:`natural_order`) follows arrival order."""
        if (
            current is not None
            and not self.commit_time_logs
            and not natural
            and _greater(self.ordering(current), ordering)
        ):
            return current
        return Tombstone(None if natural else ordering)

    def combine(self, stored: Record, incoming: Record | Tombstone) -> Record | None:
        """The stored (base file) version merged with the logs' version; None: the key is gone."""
        if isinstance(incoming, Tombstone):
            keep = (
                self.deletes_ordered_against_base
                and incoming.ordering is not None
                and _greater(self.ordering(stored), incoming.ordering)
            )
            return stored if keep else None
        kind = self.combine_kind
        # Debezium: the stored version stays when its source position is later, even against a delete
        if kind == "mysql":
            return stored if _mysql_stored_newer(stored, incoming) else self.insert_value(incoming)
        if kind == "postgres":
            if _postgres_stored_newer(stored, incoming):
                return stored
            if self.is_deleted(incoming):
                return None
            # a TOAST column Debezium did not send keeps its stored value
            return {
                name: stored.get(name) if value == TOASTED or value == TOASTED.encode() else value
                for name, value in incoming.items()
            }
        if kind == "overwrite":
            return self.insert_value(incoming)
        stored_newer = self.ordering_field is not None and _greater(
            stored.get(self.ordering_field), incoming.get(self.ordering_field)
        )
        if kind == "ordering":  # DefaultHoodieRecordPayload: an older incoming record, delete or not, is ignored
            return stored if stored_newer else self.insert_value(incoming)
        if kind == "event_time":  # EventTimeAvroPayload: a delete wins whatever its ordering value
            if self.is_deleted(incoming):
                return None
            return stored if stored_newer else incoming
        if self.is_deleted(incoming):
            return None
        if kind == "non_defaults":
            # an incoming value equal to its field's default (null for most) keeps the stored one
            defaults = dict(self.defaults)
            merged = dict(stored)
            for name, value in incoming.items():
                if (value != defaults[name]) if name in defaults else (value is not None):
                    merged[name] = value
            return merged
        # partial
        if stored_newer:
            return None if self.is_deleted(stored) else _merge_disordered(stored, incoming)
        return _fill_nulls(incoming, stored)

    # --- whole batches (the writer's precombine, a copy-on-write merge) ---------------------------

    def incoming_wins(self, stored: Any, incoming: Any) -> pa.Array | None:
        """:meth:`combine` vectorised for the rules that keep one version whole, given the stored
        and incoming ordering values of records that are not deletes: per key, whether the
        incoming record replaces the stored one. None for the rules that merge fields or compare
        other columns (call :meth:`combine` per row)."""
        if self.combine_kind not in ("overwrite", "ordering", "event_time"):
            return None
        if self.combine_kind == "overwrite" or not self.ordering_field:
            return pa.array([True] * len(incoming), pa.bool_())
        return pc.invert(pc.fill_null(pc.greater(stored, incoming), False))

    def deleted_mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        """Per row, whether the payload takes it as a delete (vectorised :meth:`is_deleted`)."""
        mask: Any = pa.array([False] * table.num_rows, pa.bool_())
        if self.delete_marker is not None:
            name, marker = self.delete_marker
            if name not in table.column_names:
                return mask
            column = table.column(name)
            if pa.types.is_floating(column.type):  # as Java prints them ("1.0", not Arrow's "1")
                text: Any = pa.array([None if v is None else _as_text(v) for v in column.to_pylist()], pa.string())
            else:
                text = column.cast(pa.string())
            return pc.fill_null(pc.equal(text, marker), False)
        if IS_DELETED in table.column_names and pa.types.is_boolean(table.schema.field(IS_DELETED).type):
            mask = pc.or_(mask, pc.fill_null(table.column(IS_DELETED), False))
        if self.delete_flag is not None and self.delete_flag[0] in table.column_names:
            text = pc.utf8_lower(table.column(self.delete_flag[0]).cast(pa.string()))
            mask = pc.or_(mask, pc.fill_null(pc.equal(text, self.delete_flag[1]), False))
        return mask

    def precombine_rows(self, rows: pa.Table, key: str) -> pa.Table:
        """One row per value of the ``key`` column: the batch's versions of each key precombined
        in row order (later rows are newer)."""
        # no key twice (the usual batch): nothing to combine, no sort (unique is a quarter
        # cheaper than count_distinct on a large batch of strings)
        if rows.num_rows < 2 or len(pc.unique(rows[key])) == rows.num_rows:
            return rows
        index = "_tm_row"
        numbered = rows.append_column(index, pa.array(range(rows.num_rows), pa.int64()))
        field_name = self.ordering_field if self.ordering_field in rows.column_names else None
        if self.precombine_kind == "partial":
            return self._fold_duplicates(numbered, key, index).drop_columns([index])
        order: list[tuple[str, str]] = [(key, "ascending")]
        if self.precombine_kind != "latest" and field_name is not None:
            order.append((field_name, "descending"))
        # the newest row first among equals: Hudi's preCombine keeps the newer one on ties
        order.append((index, "descending"))
        numbered = numbered.sort_by(order)
        keys = numbered[key].combine_chunks()
        first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
        kept = numbered.filter(pa.concat_arrays([pa.array([True]), pc.fill_null(first, True)]))
        return kept.sort_by([(index, "ascending")]).drop_columns([index])

    def _fold_duplicates(self, rows: pa.Table, key: str, index: str) -> pa.Table:
        """Keys that occur once stay as they are; the others are folded with :meth:`precombine`."""
        counts = rows.group_by(key).aggregate([(index, "count")])
        repeated = counts.filter(pc.greater(counts[f"{index}_count"], 1))[key]
        dup = pc.is_in(rows[key], value_set=repeated.combine_chunks())
        single = rows.filter(pc.invert(dup))
        folded: dict[Any, Record] = {}
        for row in rows.filter(dup).sort_by([(index, "ascending")]).to_pylist():
            k = row[key]
            current = folded.get(k)
            merged = row if current is None else self._precombine_records(current, row)
            folded[k] = {**merged, index: row[index]} if merged is not row else row
        if not folded:
            return single
        combined = pa.Table.from_pylist(list(folded.values()), schema=rows.schema)
        return pa.concat_tables([single, combined]).sort_by([(index, "ascending")])


def natural_order(ordering: Any, wrapper: str | None) -> bool:
    """Whether a delete record's ordering value means "arrival order": none, or Hudi's default
    ordering value, the int 0 (Hudi checks ``equals(0)``, so a long 0 is a real value)."""
    return ordering is None or (ordering == 0 and (wrapper or "").rsplit(".", 1)[-1] == "IntWrapper")


def delete_ordering(record: DeleteRecord, field_type: Any) -> tuple[Any, bool]:
    """A delete record's ordering value as the rows of the ordering field (of Avro type
    ``field_type``) hold it, and whether it follows arrival order (:func:`natural_order`). Hudi's
    log scanner (``HoodieMergedLogRecordScanner.processNextDeletedRecord``) compares the two
    ordering values only when they are of one Java class (``ReflectionUtils.isSameClass``) and
    takes the delete otherwise: a wrapper other than the one Hudi writes for the field's type
    (:func:`ordering_wrapper`, a long for an int field say) follows arrival order too. Without
    the field's type the value is compared as it is."""
    value, wrapper = record.ordering_value, record.ordering_type
    if natural_order(value, wrapper):
        return None, True
    if field_type is None:
        return value, False
    try:
        same_class = (wrapper or "").rsplit(".", 1)[-1] == ordering_wrapper(field_type)
    except LogBlockEncodeError:  # a type Hudi has no wrapper for: no delete of the class
        same_class = False
    return (ordering_from_avro(value, field_type), False) if same_class else (None, True)


def _greater(a: Any, b: Any) -> bool:
    """``a > b`` for ordering values; False when either is missing or they do not compare (Hudi
    keeps the newer version then)."""
    if a is None or b is None:
        return False
    try:
        return bool(a > b)
    except TypeError:
        return False


def _fill_nulls(base: Record, other: Record) -> Record:
    """``base`` with its null (or missing) fields taken from ``other``."""
    names = [*base, *(n for n in other if n not in base)]
    return {n: base[n] if base.get(n) is not None else other.get(n) for n in names}


def _merge_disordered(newer: Record, updating: Record) -> Record:
    """PartialUpdateAvroPayload's merge when the record that arrived first has the larger
    ordering value (Hudi's ``mergeDisorderRecordsWithMetadata``): its data, nulls filled from the
    ``updating`` record, but the meta columns of ``updating``: the row changed in that commit, so
    an incremental read of it returns the row."""
    merged = _fill_nulls(newer, updating)
    for name in META_FIELDS:
        if updating.get(name) is not None:
            merged[name] = updating[name]
    return merged


def _required(record: Record, column: str) -> Any:
    value = record.get(column)
    if value is None:
        raise PayloadError(f"{column} cannot be null in an incoming Debezium record (key columns: {_brief(record)})")
    return value


def _brief(record: Record) -> str:
    key = record.get("_hoodie_record_key")
    return f"record key {key}" if key is not None else json.dumps({k: str(v) for k, v in list(record.items())[:4]})


def _mysql_stored_newer(stored: Record, incoming: Record) -> bool:
    """MySqlDebeziumAvroPayload: the stored version stays when its binlog position (the
    ``file.pos`` in ``_event_seq``, compared as numbers) is the same or later."""
    new = _file_pos(str(_required(incoming, MYSQL_SEQ)))
    current = stored.get(MYSQL_SEQ)
    if current is None:  # a bootstrapped row has no position
        return False
    old = _file_pos(str(current))
    if new[0] != old[0]:
        return new[0] < old[0]
    return new[1] <= old[1]


def _file_pos(seq: str) -> tuple[int, int]:
    parts = seq.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise PayloadError(f"{MYSQL_SEQ} {seq!r} is not a binlog file number and position (like 000001.120)") from None


def _postgres_stored_newer(stored: Record, incoming: Record) -> bool:
    """PostgresDebeziumAvroPayload: the stored version stays only when its LSN is later."""
    new = _required(incoming, POSTGRES_LSN)
    current = stored.get(POSTGRES_LSN)
    return current is not None and new < current


# --- the rules by class name ---------------------------------------------------------------------

# a batch's duplicates still go to the largest ordering value (Hudi 0.14/0.15's preCombine): the
# order of rows within a Spark batch means nothing
_OVERWRITE = MergeRule("OverwriteWithLatestAvroPayload", "ordering", "overwrite", commit_time_logs=True)
_DEFAULT = MergeRule("DefaultHoodieRecordPayload", "ordering", "ordering", deletes_ordered_against_base=True)

#: payload class → its rule (unbound: :func:`rule_for_table` sets the ordering field)
PAYLOAD_RULES: Mapping[str, MergeRule] = {
    MODEL + "OverwriteWithLatestAvroPayload": _OVERWRITE,
    MODEL + "DefaultHoodieRecordPayload": _DEFAULT,
    # its deletes follow natural order against the base file and later log records (Hudi's
    # combineAndGetUpdateValue and preCombine take an empty payload before any ordering value)
    MODEL + "EventTimeAvroPayload": MergeRule("EventTimeAvroPayload", "ordering", "event_time"),
    MODEL + "OverwriteNonDefaultsWithLatestAvroPayload": MergeRule(
        "OverwriteNonDefaultsWithLatestAvroPayload", "ordering", "non_defaults"
    ),
    MODEL + "PartialUpdateAvroPayload": MergeRule("PartialUpdateAvroPayload", "partial", "partial"),
    MODEL + "AWSDmsAvroPayload": MergeRule("AWSDmsAvroPayload", "ordering", "overwrite", delete_flag=("Op", "d")),
    DEBEZIUM + "MySqlDebeziumAvroPayload": MergeRule(
        "MySqlDebeziumAvroPayload", "ordering", "mysql", delete_flag=(DEBEZIUM_OP, "d")
    ),
    DEBEZIUM + "PostgresDebeziumAvroPayload": MergeRule(
        "PostgresDebeziumAvroPayload", "ordering", "postgres", delete_flag=(DEBEZIUM_OP, "d")
    ),
}

#: Hudi 1.x's record merge modes
MERGE_MODE_RULES: Mapping[str, MergeRule] = {
    "COMMIT_TIME_ORDERING": MergeRule("COMMIT_TIME_ORDERING", "latest", "overwrite", commit_time_logs=True),
    "EVENT_TIME_ORDERING": dataclasses.replace(_DEFAULT, name="EVENT_TIME_ORDERING"),
}


@dataclass(frozen=True)
class TableRule:
    """The rule a table merges with, and, when tidemark does not implement the table's payload
    class or merger, what it is (reads then use ``rule`` as the nearest one; writes refuse)."""

    rule: MergeRule
    unsupported: str | None = None

    def require_supported(self, uri: str, action: str) -> MergeRule:
        if self.unsupported is not None:
            raise PayloadError(
                f"cannot {action} {uri}: its {self.unsupported} is not one tidemark implements "
                f"(it merges with: {', '.join(sorted(PAYLOAD_RULES))}, "
                f"or hoodie.record.merge.mode {' / '.join(MERGE_MODE_RULES)})"
            )
        return self.rule


def rule_for_table(props: Mapping[str, str], schema_json: str | None = None) -> TableRule:
    """The merge rule of a table from its properties (``hoodie.record.merge.mode`` where set, else
    the payload class), bound to its ordering field; ``schema_json`` (the table's Avro schema) gives
    the field defaults OverwriteNonDefaultsWithLatestAvroPayload compares with."""
    payload_class = props.get(P.PAYLOAD_CLASS) or MODEL + "OverwriteWithLatestAvroPayload"
    mode = (props.get(P.RECORD_MERGE_MODE) or "").strip().upper()
    unsupported = None
    if mode in MERGE_MODE_RULES:
        rule = MERGE_MODE_RULES[mode]
    elif mode == "CUSTOM":
        strategy = props.get(P.RECORD_MERGE_STRATEGY_ID) or PAYLOAD_STRATEGY
        rule = PAYLOAD_RULES.get(payload_class) or _fallback(props)
        if strategy != PAYLOAD_STRATEGY:
            unsupported = f"record merger strategy {strategy} ({P.RECORD_MERGE_MODE}=CUSTOM)"
        elif payload_class not in PAYLOAD_RULES:
            unsupported = f"payload class {payload_class}"
    elif mode:
        rule, unsupported = _fallback(props), f"{P.RECORD_MERGE_MODE} {mode}"
    else:
        strategy = props.get(P.RECORD_MERGER_STRATEGY) or DEFAULT_STRATEGY
        if payload_class not in PAYLOAD_RULES:
            rule, unsupported = _fallback(props), f"payload class {payload_class}"
        elif strategy != DEFAULT_STRATEGY:
            rule, unsupported = PAYLOAD_RULES[payload_class], f"record merger strategy {strategy}"
        else:
            rule = PAYLOAD_RULES[payload_class]
    bound = dataclasses.replace(
        rule,
        ordering_field=props.get(P.PRECOMBINE_FIELD) or None,
        defaults=field_defaults(schema_json) if rule.combine_kind == "non_defaults" and schema_json else (),
    )
    return TableRule(bound, unsupported)


#: Hudi's write options for a delete marker (DefaultHoodieRecordPayload's DELETE_KEY, DELETE_MARKER)
DELETE_FIELD, DELETE_MARKER = "hoodie.payload.delete.field", "hoodie.payload.delete.marker"
_MARKER_RULES = ("DefaultHoodieRecordPayload", "EventTimeAvroPayload")


def with_delete_marker(rule: MergeRule, conf: Mapping[str, str], uri: str) -> MergeRule:
    """``rule`` with the write's delete marker (``hoodie.payload.delete.field`` and
    ``.marker``), where the write sets one; refused where Hudi would ignore or reject it."""
    name = (conf.get(DELETE_FIELD) or "").strip()
    marker = conf.get(DELETE_MARKER) or ""
    if not name and not marker:
        return rule
    if not name or not marker:
        given, missing = (DELETE_FIELD, DELETE_MARKER) if name else (DELETE_MARKER, DELETE_FIELD)
        raise PayloadError(f"{given} is set without {missing}: a delete marker needs both (writing {uri})")
    if rule.name not in _MARKER_RULES:
        raise PayloadError(
            f"{DELETE_FIELD} applies to {' and '.join(_MARKER_RULES)} tables only; {uri} merges with "
            f"{rule.name}, which would ignore it (mark deletes with _hoodie_is_deleted there)"
        )
    return dataclasses.replace(rule, delete_marker=(name, marker))


def _as_text(value: Any) -> str:
    """A value as Java's ``toString`` prints it (what Hudi compares a delete marker with)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fallback(props: Mapping[str, str]) -> MergeRule:
    """The nearest rule for a table tidemark cannot merge exactly: by ordering value when it has
    an ordering field (what Apache's event-time readers do), else the latest write."""
    return _DEFAULT if props.get(P.PRECOMBINE_FIELD) else _OVERWRITE


def check_payload_class(payload_class: str | None, uri: str, action: str) -> None:
    """Refuse a write that names a payload class tidemark does not implement, before anything is
    written."""
    if payload_class and payload_class not in PAYLOAD_RULES:
        TableRule(_OVERWRITE, f"payload class {payload_class}").require_supported(uri, action)


_warned: set[tuple[str, str]] = set()


def warn_unsupported(uri: str, table_rule: TableRule) -> None:
    """Warn once per process and table that a read merges with a stand-in rule."""
    if table_rule.unsupported is None or (uri, table_rule.unsupported) in _warned:
        return
    _warned.add((uri, table_rule.unsupported))
    logging.getLogger("tidemark.read").warning(
        "%s: its %s is not one tidemark implements; reading with the rule of %s (%s)",
        uri,
        table_rule.unsupported,
        table_rule.rule.name,
        "the larger ordering value wins" if table_rule.rule.precombine_kind == "ordering" else "the latest write wins",
    )


def field_defaults(schema_json: str) -> tuple[tuple[str, Any], ...]:
    """Top-level fields of an Avro record schema whose default is a non-null primitive value."""
    try:
        schema = json.loads(schema_json)
    except ValueError:
        return ()
    out = []
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        default = f.get("default")
        if default is not None and isinstance(default, str | int | float | bool):
            out.append((f["name"], default))
    return tuple(out)
