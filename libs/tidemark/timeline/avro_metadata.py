"""Avro timeline metadata as Hudi 0.14/0.15 (table version 6) writes and reads it.

Some instant files under ``.hoodie/`` hold Avro rather than JSON: rollback plans and rollback
metadata, compaction plans, cleaner plans and clean metadata, savepoints, restores and requested
replace commits. Each such file is an Avro *object container file* (what Java's ``DataFileWriter``
writes: the magic ``Obj\\x01``, a header carrying the writer schema, then one block) holding exactly
one record, with the ``null`` codec. Hudi writes them with ``TimelineMetadataUtils.serializeAvroMetadata``
and reads them with ``deserializeAvroMetadata``, which resolves the file's writer schema to the
reader's own, so fields added later with a default read fine both ways.

The schemas below state the shape of the ``org.apache.hudi.avro.model`` records as of Hudi
0.14/0.15: field names, types, defaults and order. Fields that later Hudi versions added (for
instance ``extraMetadata`` in the cleaner plan, ``missingSchedulePartitions`` in the compaction and
clustering plans) are left out: a reader of either version skips or defaults them.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import fastavro

from tidemark.errors import InstantMetadataError

NAMESPACE: Final = "org.apache.hudi.avro.model"
#: the first four bytes of every Avro object container file
AVRO_MAGIC: Final = b"Obj\x01"

#: ``version`` Hudi 0.14/0.15 writes in rollback plans (``LATEST_ROLLBACK_PLAN_VERSION``)
ROLLBACK_PLAN_VERSION: Final = 1
#: ``version`` Hudi writes in rollback, clean, savepoint and restore metadata
METADATA_VERSION: Final = 1
#: ``version`` of compaction plans Hudi 0.14/0.15 writes: file names, not paths, in operations
COMPACTION_PLAN_VERSION: Final = 2

Schema = dict[str, Any]


# --- schema building blocks ----------------------------------------------------------------------


def _opt(avro_type: Any) -> list[Any]:
    """A nullable type whose default is null (``["null", T]``)."""
    return ["null", avro_type]


def _array(items: Any) -> dict[str, Any]:
    return {"type": "array", "items": items}


def _map(values: Any) -> dict[str, Any]:
    return {"type": "map", "values": values}


_NO_DEFAULT: Final = object()


def _field(name: str, avro_type: Any, default: Any = _NO_DEFAULT) -> dict[str, Any]:
    """A record field; without ``default`` it is required."""
    out: dict[str, Any] = {"name": name, "type": avro_type}
    if default is not _NO_DEFAULT:
        out["default"] = default
    return out


def _version_field() -> dict[str, Any]:
    return _field("version", ["int", "null"], default=1)


def _full(name: str) -> str:
    return f"{NAMESPACE}.{name}"


def _instant_info() -> Schema:
    return {
        "type": "record",
        "name": "HoodieInstantInfo",
        "namespace": NAMESPACE,
        "fields": [_field("commitTime", "string"), _field("action", "string")],
    }


def _rollback_plan() -> Schema:
    request = {
        "type": "record",
        "name": "HoodieRollbackRequest",
        "fields": [
            _field("partitionPath", "string"),
            _field("fileId", _opt("string"), default=None),
            _field("latestBaseInstant", _opt("string"), default=None),
            _field("filesToBeDeleted", _array("string"), default=[]),
            _field("logBlocksToBeDeleted", _opt(_map("long")), default=None),
        ],
    }
    return {
        "type": "record",
        "name": "HoodieRollbackPlan",
        "namespace": NAMESPACE,
        "fields": [
            _field("instantToRollback", _opt(_instant_info()), default=None),
            _field("RollbackRequests", _opt(_array(request)), default=None),
            _version_field(),
        ],
    }


def _rollback_metadata() -> Schema:
    partition = {
        "type": "record",
        "name": "HoodieRollbackPartitionMetadata",
        "fields": [
            _field("partitionPath", "string"),
            _field("successDeleteFiles", _array("string")),
            _field("failedDeleteFiles", _array("string")),
            _field("rollbackLogFiles", _opt(_map("long")), default=None),
            _field("logFilesFromFailedCommit", _opt(_map("long")), default=None),
        ],
    }
    return {
        "type": "record",
        "name": "HoodieRollbackMetadata",
        "namespace": NAMESPACE,
        "fields": [
            _field("startRollbackTime", "string"),
            _field("timeTakenInMillis", "long"),
            _field("totalFilesDeleted", "int"),
            _field("commitsRollback", _array("string")),
            _field("partitionMetadata", _map(partition)),
            _version_field(),
            _field("instantsRollback", _array(_instant_info()), default=[]),
        ],
    }


def _compaction_plan() -> Schema:
    operation = {
        "type": "record",
        "name": "HoodieCompactionOperation",
        "fields": [
            _field("baseInstantTime", _opt("string")),
            _field("deltaFilePaths", _opt(_array("string")), default=None),
            _field("dataFilePath", _opt("string"), default=None),
            _field("fileId", _opt("string")),
            _field("partitionPath", _opt("string"), default=None),
            _field("metrics", _opt(_map("double")), default=None),
            _field("bootstrapFilePath", _opt("string"), default=None),
        ],
    }
    strategy = {
        "type": "record",
        "name": "HoodieCompactionStrategy",
        "fields": [
            _field("compactorClassName", _opt("string"), default=None),
            _field("strategyParams", _opt(_map("string")), default=None),
            _version_field(),
        ],
    }
    return {
        "type": "record",
        "name": "HoodieCompactionPlan",
        "namespace": NAMESPACE,
        "fields": [
            _field("operations", _opt(_array(operation)), default=None),
            _field("extraMetadata", _opt(_map("string")), default=None),
            _version_field(),
            _field("strategy", _opt(strategy), default=None),
            _field("preserveHoodieMetadata", ["boolean", "null"], default=False),
        ],
    }


def _cleaner_plan() -> Schema:
    action_instant = {
        "type": "record",
        "name": "HoodieActionInstant",
        "fields": [_field("timestamp", "string"), _field("action", "string"), _field("state", "string")],
    }
    clean_file_info = {
        "type": "record",
        "name": "HoodieCleanFileInfo",
        "fields": [
            _field("filePath", _opt("string"), default=None),
            _field("isBootstrapBaseFile", _opt("boolean"), default=None),
        ],
    }
    return {
        "type": "record",
        "name": "HoodieCleanerPlan",
        "namespace": NAMESPACE,
        "fields": [
            _field("earliestInstantToRetain", _opt(action_instant), default=None),
            _field("lastCompletedCommitTimestamp", "string", default=""),
            _field("policy", "string"),
            # deprecated by filePathsToBeDeletedPerPartition; Hudi writes an empty map
            _field("filesToBeDeletedPerPartition", _opt(_map(_array("string"))), default=None),
            _version_field(),
            _field("filePathsToBeDeletedPerPartition", _opt(_map(_array(clean_file_info))), default=None),
            _field("partitionsToBeDeleted", _opt(_array("string")), default=None),
            # Hudi 0.15+ (PR #11440): savepointed_timestamps, and tidemark's
            # earliest_commit_to_not_archive (HUDI-7779); older readers take the default
            _field("extraMetadata", _opt(_map("string")), default=None),
        ],
    }


def _clean_metadata() -> Schema:
    partition = {
        "type": "record",
        "name": "HoodieCleanPartitionMetadata",
        "fields": [
            _field("partitionPath", "string"),
            _field("policy", "string"),
            _field("deletePathPatterns", _array("string")),
            _field("successDeleteFiles", _array("string")),
            _field("failedDeleteFiles", _array("string")),
            _field("isPartitionDeleted", _opt("boolean"), default=None),
        ],
    }
    return {
        "type": "record",
        "name": "HoodieCleanMetadata",
        "namespace": NAMESPACE,
        "fields": [
            _field("startCleanTime", "string"),
            _field("timeTakenInMillis", "long"),
            _field("totalFilesDeleted", "int"),
            _field("earliestCommitToRetain", "string"),
            _field("lastCompletedCommitTimestamp", "string", default=""),
            _field("partitionMetadata", _map(partition)),
            _version_field(),
            _field("bootstrapPartitionMetadata", _opt(_map(_full("HoodieCleanPartitionMetadata"))), default=None),
            _field("extraMetadata", _opt(_map("string")), default=None),
        ],
    }


def _savepoint_metadata() -> Schema:
    partition = {
        "type": "record",
        "name": "HoodieSavepointPartitionMetadata",
        "fields": [_field("partitionPath", "string"), _field("savepointDataFile", _array("string"))],
    }
    return {
        "type": "record",
        "name": "HoodieSavepointMetadata",
        "namespace": NAMESPACE,
        "fields": [
            _field("savepointedBy", "string"),
            _field("savepointedAt", "long"),
            _field("comments", "string"),
            _field("partitionMetadata", _map(partition)),
            _version_field(),
        ],
    }


def _restore_metadata() -> Schema:
    return {
        "type": "record",
        "name": "HoodieRestoreMetadata",
        "namespace": NAMESPACE,
        "fields": [
            _field("startRestoreTime", "string"),
            _field("timeTakenInMillis", "long"),
            _field("instantsToRollback", _array("string")),
            # instant rolled back -> the rollback metadata of that rollback
            _field("hoodieRestoreMetadata", _map(_array(_opt(_rollback_metadata())))),
            _version_field(),
            _field("restoreInstantInfo", _array(_full("HoodieInstantInfo")), default=[]),
        ],
    }


def _restore_plan() -> Schema:
    return {
        "type": "record",
        "name": "HoodieRestorePlan",
        "namespace": NAMESPACE,
        "fields": [
            _field("instantsToRollback", _array(_instant_info()), default=[]),
            _field("version", ["int", "null"], default=2),
            # Hudi's own order, string first, although its default is null: the encoding follows
            # the order of the union's branches
            _field("savepointToRestoreTimestamp", ["string", "null"], default=None),
        ],
    }


def _requested_replace_metadata() -> Schema:
    slice_info = {
        "type": "record",
        "name": "HoodieSliceInfo",
        "fields": [
            _field("dataFilePath", _opt("string"), default=None),
            _field("deltaFilePaths", _opt(_array("string")), default=None),
            _field("fileId", _opt("string")),
            _field("partitionPath", _opt("string"), default=None),
            _field("bootstrapFilePath", _opt("string"), default=None),
            _version_field(),
        ],
    }
    group = {
        "type": "record",
        "name": "HoodieClusteringGroup",
        "fields": [
            _field("slices", _opt(_array(slice_info)), default=None),
            _field("metrics", _opt(_map("double")), default=None),
            _field("numOutputFileGroups", ["int", "null"], default=1),
            _field("extraMetadata", _opt(_map("string")), default=None),
            _version_field(),
        ],
    }
    strategy = {
        "type": "record",
        "name": "HoodieClusteringStrategy",
        "fields": [
            _field("strategyClassName", _opt("string"), default=None),
            _field("strategyParams", _opt(_map("string")), default=None),
            _version_field(),
        ],
    }
    plan = {
        "type": "record",
        "name": "HoodieClusteringPlan",
        "fields": [
            _field("inputGroups", _opt(_array(group)), default=None),
            _field("strategy", _opt(strategy), default=None),
            _field("extraMetadata", _opt(_map("string")), default=None),
            _version_field(),
            _field("preserveHoodieMetadata", _opt("boolean"), default=None),
        ],
    }
    return {
        "type": "record",
        "name": "HoodieRequestedReplaceMetadata",
        "namespace": NAMESPACE,
        "fields": [
            _field("operationType", _opt("string"), default=None),
            _field("clusteringPlan", _opt(plan), default=None),
            _field("extraMetadata", _opt(_map("string")), default=None),
            _version_field(),
        ],
    }


# --- the schemas ---------------------------------------------------------------------------------

HOODIE_ROLLBACK_PLAN: Final[Schema] = _rollback_plan()
HOODIE_ROLLBACK_METADATA: Final[Schema] = _rollback_metadata()
HOODIE_COMPACTION_PLAN: Final[Schema] = _compaction_plan()
HOODIE_CLEANER_PLAN: Final[Schema] = _cleaner_plan()
HOODIE_CLEAN_METADATA: Final[Schema] = _clean_metadata()
HOODIE_SAVEPOINT_METADATA: Final[Schema] = _savepoint_metadata()
HOODIE_RESTORE_METADATA: Final[Schema] = _restore_metadata()
HOODIE_RESTORE_PLAN: Final[Schema] = _restore_plan()
HOODIE_REQUESTED_REPLACE_METADATA: Final[Schema] = _requested_replace_metadata()

#: the schemas by short record name (``HoodieRollbackPlan``, ...)
SCHEMAS: Final[Mapping[str, Schema]] = {
    s["name"]: s
    for s in (
        HOODIE_ROLLBACK_PLAN,
        HOODIE_ROLLBACK_METADATA,
        HOODIE_COMPACTION_PLAN,
        HOODIE_CLEANER_PLAN,
        HOODIE_CLEAN_METADATA,
        HOODIE_SAVEPOINT_METADATA,
        HOODIE_RESTORE_METADATA,
        HOODIE_RESTORE_PLAN,
        HOODIE_REQUESTED_REPLACE_METADATA,
    )
}

_PARSED: Final[Mapping[str, Any]] = {name: fastavro.parse_schema(schema) for name, schema in SCHEMAS.items()}

_PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_INT_RANGE: Final = (-(2**31), 2**31 - 1)
_LONG_RANGE: Final = (-(2**63), 2**63 - 1)


def _collect_named(schema: Any, namespace: str, into: dict[str, Schema]) -> None:
    """Index every record defined in ``schema`` by its full name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect_named(branch, namespace, into)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            ns = schema.get("namespace", namespace)
            name = schema["name"] if "." in schema["name"] else f"{ns}.{schema['name']}"
            into[name] = schema
            for f in schema["fields"]:
                _collect_named(f["type"], ns, into)
        elif kind == "array":
            _collect_named(schema["items"], namespace, into)
        elif kind == "map":
            _collect_named(schema["values"], namespace, into)


def _named_types(schema: Schema) -> dict[str, Schema]:
    index: dict[str, Schema] = {}
    _collect_named(schema, NAMESPACE, index)
    return index


_NAMED: Final[Mapping[str, Mapping[str, Schema]]] = {name: _named_types(s) for name, s in SCHEMAS.items()}


def short_schema_name(name: str) -> str:
    """The short record name for ``name`` (short or ``org.apache.hudi.avro.model.``-qualified)."""
    short = name.removeprefix(NAMESPACE + ".")
    if short not in SCHEMAS:
        raise InstantMetadataError(f"unknown Hudi Avro metadata schema {name!r}; known: {sorted(SCHEMAS)}")
    return short


# --- checking a record against a schema ----------------------------------------------------------


class _MisfitError(Exception):
    """A value does not fit its schema; ``path`` names the field (``a.b[0]['k'].c``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _describe(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(s) for s in schema) + "]"
    if isinstance(schema, dict):
        kind = str(schema["type"])
        if kind == "record":
            return str(schema["name"])
        if kind == "array":
            return f"array<{_describe(schema['items'])}>"
        if kind == "map":
            return f"map<{_describe(schema['values'])}>"
        return kind
    return str(schema)


def _got(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


class _Checker:
    """Checks a record against one schema and returns a normalized copy for fastavro.

    Normalized: defaults filled in for missing fields that have one, tuples made lists, mappings made
    dicts, ints in float fields made floats. Unknown fields are refused so a misspelt field name
    cannot silently turn into a default.
    """

    def __init__(self, named: Mapping[str, Schema]) -> None:
        self._named = named

    def check(self, value: Any, schema: Any, path: str, namespace: str) -> Any:
        if isinstance(schema, list):
            return self._union(value, schema, path, namespace)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self._primitive(value, schema, path)
            full = schema if "." in schema else f"{namespace}.{schema}"
            return self._record(value, self._named[full], path, namespace)
        kind = schema["type"]
        if kind == "record":
            return self._record(value, schema, path, namespace)
        if kind == "array":
            if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
                raise _MisfitError(path, f"expected {_describe(schema)}, got {_got(value)}")
            return [self.check(v, schema["items"], f"{path}[{i}]", namespace) for i, v in enumerate(value)]
        if kind == "map":
            if not isinstance(value, Mapping):
                raise _MisfitError(path, f"expected {_describe(schema)}, got {_got(value)}")
            out: dict[str, Any] = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise _MisfitError(path, f"map keys must be strings, got {_got(k)}")
                out[k] = self.check(v, schema["values"], f"{path}[{k!r}]", namespace)
            return out
        if kind in _PRIMITIVES:
            return self._primitive(value, kind, path)
        raise _MisfitError(path, f"unsupported Avro type {kind!r}")  # pragma: no cover - not in our schemas

    def _union(self, value: Any, branches: list[Any], path: str, namespace: str) -> Any:
        if value is None:
            if "null" in branches:
                return None
            raise _MisfitError(path, f"is null but its type {_describe(branches)} does not allow null")
        candidates = [b for b in branches if b != "null"]
        if len(candidates) == 1:
            return self.check(value, candidates[0], path, namespace)
        for branch in candidates:  # pragma: no cover - no such union in our schemas
            try:
                return self.check(value, branch, path, namespace)
            except _MisfitError:
                continue
        raise _MisfitError(path, f"expected {_describe(branches)}, got {_got(value)}")  # pragma: no cover

    def _record(self, value: Any, schema: Schema, path: str, namespace: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise _MisfitError(path, f"expected record {schema['name']}, got {_got(value)}")
        ns = schema.get("namespace", namespace)
        known = {f["name"] for f in schema["fields"]}
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            where = f"{path}." if path else ""
            raise _MisfitError(
                f"{where}{unknown[0]}", f"is not a field of {schema['name']} (fields: {', '.join(sorted(known))})"
            )
        out: dict[str, Any] = {}
        for f in schema["fields"]:
            name = f["name"]
            sub = f"{path}.{name}" if path else name
            if name in value:
                out[name] = self.check(value[name], f["type"], sub, ns)
            elif "default" in f:
                default = f["default"]
                out[name] = list(default) if isinstance(default, list) else default
            else:
                raise _MisfitError(sub, f"is a required field of {schema['name']} and is missing")
        return out

    @staticmethod
    def _primitive(value: Any, kind: str, path: str) -> Any:
        ok: bool
        if kind == "null":
            ok = value is None
        elif kind == "boolean":
            ok = isinstance(value, bool)
        elif kind in ("int", "long"):
            low, high = _INT_RANGE if kind == "int" else _LONG_RANGE
            ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        elif kind in ("float", "double"):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                return float(value)
        elif kind == "string":
            ok = isinstance(value, str)
        else:  # bytes
            ok = isinstance(value, (bytes, bytearray))
        if not ok:
            raise _MisfitError(path, f"expected {kind}, got {_got(value)}")
        return value


# --- serialize / deserialize ---------------------------------------------------------------------


def serialize(schema_name: str, record: Mapping[str, Any]) -> bytes:
    """``record`` as an Avro object container file with the named schema embedded, one record,
    ``null`` codec: the bytes Hudi's ``serializeAvroMetadata`` would write for it.

    Fields with a default may be left out. Raises :class:`InstantMetadataError` naming the schema
    and the field when the record does not fit.
    """
    short = short_schema_name(schema_name)
    schema = SCHEMAS[short]
    try:
        normalized = _Checker(_NAMED[short]).check(record, schema, "", NAMESPACE)
    except _MisfitError as misfit:
        field = misfit.path or "<record>"
        raise InstantMetadataError(f"{short}: field {field} {misfit.message}") from None
    buf = io.BytesIO()
    try:
        fastavro.writer(buf, _PARSED[short], [normalized], codec="null")
    except Exception as exc:  # the check above should have caught it; keep the error ours
        raise InstantMetadataError(f"{short}: record cannot be written as Avro: {exc}") from exc
    return buf.getvalue()


def deserialize(data: bytes, schema_name: str, where: str) -> dict[str, Any]:
    """The one record of an Avro object container file, resolved to our schema ``schema_name``.

    The file's own (writer) schema is used to decode it; fields it lacks get our defaults and fields
    our schema lacks are dropped, as Avro schema resolution says. ``where`` (a path or an instant)
    goes into every error: empty, truncated or corrupt input, a file of another record type, or a
    file not holding exactly one record raise :class:`InstantMetadataError`.
    """
    short = short_schema_name(schema_name)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InstantMetadataError(f"{where}: expected bytes of Avro {short}, got {type(data).__name__}")
    raw = bytes(data)
    if not raw:
        raise InstantMetadataError(f"{where}: empty file, expected Avro {short}")
    if not raw.startswith(AVRO_MAGIC):
        raise InstantMetadataError(
            f"{where}: not an Avro object container file (starts with {raw[:4]!r}, expected {AVRO_MAGIC!r})"
        )
    try:
        writer_schema = fastavro.reader(io.BytesIO(raw)).writer_schema
    except Exception as exc:
        raise InstantMetadataError(f"{where}: corrupt Avro header: {exc}") from exc
    writer_name = writer_schema.get("name") if isinstance(writer_schema, dict) else None
    if not isinstance(writer_name, str) or writer_name.rsplit(".", 1)[-1] != short:
        got = writer_name if isinstance(writer_name, str) else _describe(writer_schema)
        raise InstantMetadataError(f"{where}: holds Avro {got}, expected {_full(short)}")
    try:
        records = list(fastavro.reader(io.BytesIO(raw), reader_schema=_PARSED[short]))
    except Exception as exc:
        raise InstantMetadataError(f"{where}: corrupt or incompatible Avro {short}: {exc}") from exc
    if len(records) != 1:
        raise InstantMetadataError(f"{where}: expected exactly one {short} record, found {len(records)}")
    record = records[0]
    if not isinstance(record, dict):  # pragma: no cover - a record schema always decodes to a dict
        raise InstantMetadataError(f"{where}: decoded {short} is not a record")
    return record


# --- helpers for what tidemark writes ------------------------------------------------------------


class RollbackRequest(NamedTuple):
    """One entry of a rollback plan (Hudi's ``HoodieRollbackRequest``).

    Either ``files_to_delete`` lists files to delete (Hudi then leaves file id and base instant
    empty), or ``log_blocks_to_be_deleted`` maps log files of the failed instant to their sizes, for
    which a rollback command block is appended to the file group ``file_id`` / ``latest_base_instant``.
    """

    partition_path: str
    file_id: str | None
    latest_base_instant: str | None
    files_to_delete: Sequence[str]
    log_blocks_to_be_deleted: Mapping[str, int] | None


class RollbackPartition(NamedTuple):
    """What a rollback did in one partition (Hudi's ``HoodieRollbackPartitionMetadata``)."""

    success_delete_files: Sequence[str]
    failed_delete_files: Sequence[str]
    #: log files the rollback wrote command blocks to -> their size
    rollback_log_files: Mapping[str, int] | None
    #: log files the failed instant had written -> their size
    log_files_from_failed_commit: Mapping[str, int] | None = None


class CompactionOperation(NamedTuple):
    """One file slice to compact (Hudi's ``HoodieCompactionOperation``)."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file_path: str | None
    delta_file_paths: Sequence[str]
    metrics: Mapping[str, float]


RollbackRequestTuple = tuple[str, str | None, str | None, Sequence[str], Mapping[str, int] | None]
RollbackPartitionTuple = (
    tuple[Sequence[str], Sequence[str], Mapping[str, int] | None]
    | tuple[Sequence[str], Sequence[str], Mapping[str, int] | None, Mapping[str, int] | None]
)
CompactionOperationTuple = tuple[str, str, str, str | None, Sequence[str], Mapping[str, float]]


def _instant_info_record(instant: tuple[str, str]) -> dict[str, Any]:
    timestamp, action = instant
    return {"commitTime": timestamp, "action": action}


def rollback_plan(
    instant_to_rollback: tuple[str, str], rollback_requests: Iterable[RollbackRequestTuple]
) -> dict[str, Any]:
    """A ``HoodieRollbackPlan`` (the ``.rollback.requested`` file) for ``(timestamp, action)``.

    Like Hudi, a missing file id or base instant is written as ``""`` and missing log blocks as an
    empty map (Hudi's rollback executor does not expect nulls there).
    """
    requests = []
    for partition_path, file_id, latest_base_instant, files_to_delete, log_blocks in rollback_requests:
        requests.append(
            {
                "partitionPath": partition_path,
                "fileId": file_id if file_id is not None else "",
                "latestBaseInstant": latest_base_instant if latest_base_instant is not None else "",
                "filesToBeDeleted": list(files_to_delete),
                "logBlocksToBeDeleted": dict(log_blocks) if log_blocks is not None else {},
            }
        )
    return {
        "instantToRollback": _instant_info_record(instant_to_rollback),
        "RollbackRequests": requests,
        "version": ROLLBACK_PLAN_VERSION,
    }


def rollback_metadata(
    start_rollback_time: str,
    time_taken_ms: int,
    commits_rolled_back: Sequence[str],
    instants_rolled_back: Sequence[tuple[str, str]],
    partition_metadata: Mapping[str, RollbackPartitionTuple],
) -> dict[str, Any]:
    """A ``HoodieRollbackMetadata`` (the completed ``.rollback`` file).

    ``partition_metadata`` maps each partition path to ``(success_delete_files, failed_delete_files,
    rollback_log_files[, log_files_from_failed_commit])``; ``totalFilesDeleted`` is the number of
    successful deletes, as Hudi counts it. Absent log-file maps are written empty, as Hudi does.
    """
    partitions: dict[str, Any] = {}
    total_deleted = 0
    for partition_path, entry in partition_metadata.items():
        success, failed, rollback_logs = entry[0], entry[1], entry[2]
        from_failed = entry[3] if len(entry) > 3 else None
        total_deleted += len(success)
        partitions[partition_path] = {
            "partitionPath": partition_path,
            "successDeleteFiles": list(success),
            "failedDeleteFiles": list(failed),
            "rollbackLogFiles": dict(rollback_logs) if rollback_logs is not None else {},
            "logFilesFromFailedCommit": dict(from_failed) if from_failed is not None else {},
        }
    return {
        "startRollbackTime": start_rollback_time,
        "timeTakenInMillis": time_taken_ms,
        "totalFilesDeleted": total_deleted,
        "commitsRollback": list(commits_rolled_back),
        "partitionMetadata": partitions,
        "version": METADATA_VERSION,
        "instantsRollback": [_instant_info_record(i) for i in instants_rolled_back],
    }


def compaction_plan(
    operations: Iterable[CompactionOperationTuple], extra_metadata: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A ``HoodieCompactionPlan`` (the ``.compaction.requested`` file), plan version 2.

    Version 2 plans hold file *names*: the base file and log files are given as paths or names and
    stored as names (Hudi joins them with the partition path when it runs the plan). Non-partitioned
    tables use the partition path ``""``.
    """
    ops = []
    for partition_path, file_id, base_instant, base_file_path, delta_file_paths, metrics in operations:
        ops.append(
            {
                "baseInstantTime": base_instant,
                "deltaFilePaths": [posixpath.basename(p) for p in delta_file_paths],
                "dataFilePath": posixpath.basename(base_file_path) if base_file_path is not None else None,
                "fileId": file_id,
                "partitionPath": partition_path,
                "metrics": dict(metrics),
                "bootstrapFilePath": None,
            }
        )
    return {
        "operations": ops,
        "extraMetadata": dict(extra_metadata) if extra_metadata is not None else None,
        "version": COMPACTION_PLAN_VERSION,
        "strategy": None,
        "preserveHoodieMetadata": False,
    }
