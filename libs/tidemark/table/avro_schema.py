"""Arrow schemas as the Avro schemas Hudi writes (for log blocks and commit metadata), and Arrow
rows as the Python values fastavro encodes.

Hudi's Spark writer names the record ``{table}_record`` in namespace ``hoodie.{table}`` and makes
every field nullable as ``["null", type]`` with default null; nested records are named after their
field, namespaced by their parent's full name; decimals are fixed-size; timestamps are
``timestamp-micros`` longs (``local-timestamp-micros`` without a zone) and dates ``date`` ints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from tidemark.errors import TableError
from tidemark.logformat.avro_columns import AVRO_LOGICAL_TYPES, AVRO_PRIMITIVE_TYPES
from tidemark.storage.base import Storage
from tidemark.table.key_generator import KeyGenerator
from tidemark.table.properties import CREATE_SCHEMA, PROPERTIES_PATH, read_properties
from tidemark.timeline import CommitMetadata, Timeline, instant_path, load_timeline, read_instant

COMMIT_TIME = "_hoodie_commit_time"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
#: Hudi's five meta columns, in their order in base files
META_FIELDS = (COMMIT_TIME, "_hoodie_commit_seqno", RECORD_KEY, PARTITION_PATH, FILE_NAME)


def _decimal_size(precision: int) -> int:
    # the fewest bytes holding a signed value of `precision` digits (Avro/Parquet convention)
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def _avro_type(dtype: pa.DataType, name: str, namespace: str) -> Any:
    if pa.types.is_boolean(dtype):
        return "boolean"
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype) or pa.types.is_int32(dtype):
        return "int"
    if pa.types.is_uint8(dtype) or pa.types.is_uint16(dtype):
        return "int"
    if pa.types.is_int64(dtype) or pa.types.is_uint32(dtype):
        return "long"
    if pa.types.is_float32(dtype):
        return "float"
    if pa.types.is_float64(dtype):
        return "double"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "bytes"
    if pa.types.is_date32(dtype):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(dtype):
        # an instant (Spark's TimestampType) or a wall-clock time (TimestampNTZType), as Spark's
        # Avro conversion maps them
        return {"type": "long", "logicalType": "timestamp-micros" if dtype.tz is not None else "local-timestamp-micros"}
    if pa.types.is_decimal(dtype):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": _decimal_size(dtype.precision),
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return {"type": "array", "items": _nullable(_avro_type(dtype.value_type, name, namespace))}
    if pa.types.is_map(dtype):
        if not (pa.types.is_string(dtype.key_type) or pa.types.is_large_string(dtype.key_type)):
            raise TableError(f"column {name!r}: Avro maps need string keys, not {dtype.key_type}")
        return {"type": "map", "values": _nullable(_avro_type(dtype.item_type, name, namespace))}
    if pa.types.is_struct(dtype):
        return _record(dtype, name, namespace)
    raise TableError(f"column {name!r} has type {dtype}, which Hudi tables cannot store")


def _nullable(avro: Any) -> list[Any]:
    return ["null", avro]


def _record(struct: Iterable[pa.Field], name: str, namespace: str) -> dict[str, Any]:
    full = f"{namespace}.{name}"
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "fields": [
            {"name": f.name, "type": _nullable(_avro_type(f.type, f.name, full)), "default": None} for f in struct
        ],
    }


def avro_schema_for(schema: pa.Schema, table_name: str, with_meta_fields: bool = True) -> dict[str, Any]:
    """The Avro schema Hudi would write for rows of ``schema`` in table ``table_name``."""
    fields = [f for f in schema if f.name not in META_FIELDS]
    record = _record(fields, f"{table_name}_record", f"hoodie.{table_name}")
    if with_meta_fields:
        meta = [{"name": m, "type": ["null", "string"], "doc": "", "default": None} for m in META_FIELDS]
        record["fields"] = meta + record["fields"]
    return record


def avro_schema_json(schema: pa.Schema, table_name: str, with_meta_fields: bool = True) -> str:
    return json.dumps(avro_schema_for(schema, table_name, with_meta_fields), separators=(",", ":"))


def latest_table_schema(storage: Storage, timeline: Timeline | None = None) -> str | None:
    """The Avro schema (JSON) the latest completed write recorded (Hudi's ``extraMetadata``
    key ``schema``), as Hudi's readers resolve the table's schema (``timeline``: one loaded
    already); before any write, the schema the table was created with
    (``hoodie.table.create.schema``, which Spark SQL's ``CREATE TABLE`` records), as Hudi's
    ``TableSchemaResolver`` falls back to it."""
    timeline = timeline if timeline is not None else load_timeline(storage)
    for instant in reversed(timeline.completed().write_instants().instants):
        where = storage.full_uri(instant_path(instant))
        schema = CommitMetadata.from_bytes(read_instant(storage, instant), where).schema
        if schema and json.loads(schema).get("fields"):
            return schema
    declared = read_properties(storage).get(CREATE_SCHEMA)
    if declared:
        try:
            fields = json.loads(declared).get("fields")
        except (ValueError, AttributeError) as e:
            raise TableError(f"{storage.full_uri(PROPERTIES_PATH)}: {CREATE_SCHEMA} is not an Avro schema: {e}") from e
        if fields:
            return declared
    return None


def _convert(value: Any, dtype: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(dtype):
        return {k: _convert(v, dtype.item_type) for k, v in value}
    if pa.types.is_struct(dtype):
        return {f.name: _convert(value.get(f.name), f.type) for f in dtype}
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [_convert(v, dtype.value_type) for v in value]
    return value


def _needs_conversion(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_map(dtype) or pa.types.is_struct(dtype) or pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
    )


def plain_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of an Arrow table as plain dicts, maps included (Arrow gives them as pair lists):
    what fastavro encodes and what JSON output shows."""
    try:
        rows: list[dict[str, Any]] = table.to_pylist()
    except (OverflowError, pa.ArrowInvalid) as e:
        raise TableError(f"{_unshowable_column(table)}: {e}") from e
    nested = [f for f in table.schema if _needs_conversion(f.type)]
    for row in rows:
        for f in nested:
            row[f.name] = _convert(row[f.name], f.type)
    return rows


def _kind(dtype: pa.DataType) -> str | None:
    """The family a column's promotions stay in: numbers, or text and bytes."""
    t = pa.types
    if t.is_integer(dtype) or t.is_floating(dtype):
        return "number"
    if t.is_string(dtype) or t.is_large_string(dtype) or t.is_binary(dtype) or t.is_large_binary(dtype):
        return "text"
    return None


def declared_types(schema: pa.Schema, declared: pa.Schema) -> pa.Schema:
    """``schema`` with each number, string or bytes column in the type the table's schema
    declares, inside structs, lists and maps too. Files written before a promotion (int to float,
    long to float, bytes to string) keep the old type, and Arrow's permissive concatenation widens
    both past the declared one (int64 and float32 to float64; string and binary to binary), where
    Hudi's readers read the declared type."""
    names = set(declared.names)  # once: names is a new list at each access
    fields = [
        f.with_type(_declared_type(f.type, declared.field(f.name).type)) if f.name in names else f for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def _declared_type(have: pa.DataType, want: pa.DataType) -> pa.DataType:
    """``have`` with each number, string or bytes in it, at any depth, of ``want``'s type."""
    if have == want:
        return have
    if _kind(want) is not None and _kind(want) == _kind(have):
        return want
    if pa.types.is_struct(have) and pa.types.is_struct(want):
        return pa.struct(
            [
                f.with_type(_declared_type(f.type, want.field(f.name).type)) if want.get_field_index(f.name) >= 0 else f
                for f in have
            ]
        )
    for is_kind, make in ((pa.types.is_large_list, pa.large_list), (pa.types.is_list, pa.list_)):
        if is_kind(have) and is_kind(want):
            return make(have.value_field.with_type(_declared_type(have.value_type, want.value_type)))
    if pa.types.is_map(have) and pa.types.is_map(want) and have.key_type == want.key_type:
        return pa.map_(have.key_field, have.item_field.with_type(_declared_type(have.item_type, want.item_type)))
    return have


def _utc_type(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(dtype):
        return pa.timestamp(dtype.unit, tz="UTC") if dtype.tz is not None else dtype
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(_utc_type(f.type)) for f in dtype])
    if pa.types.is_large_list(dtype):
        return pa.large_list(dtype.value_field.with_type(_utc_type(dtype.value_type)))
    if pa.types.is_list(dtype):
        return pa.list_(dtype.value_field.with_type(_utc_type(dtype.value_type)))
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_field, dtype.item_field.with_type(_utc_type(dtype.item_type)))
    return dtype


def utc_timestamps(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every instant timestamp (one with a zone), nested ones too, labelled UTC.
    The zone is only a label on UTC values: Spark hands a write its session's zone, and a Parquet
    file pyarrow wrote keeps it, where Hudi's schema (``timestamp-micros``) and Apache's readers
    have UTC; other readers refuse to merge two labels. Local timestamps (no zone) stay as they are."""
    return pa.schema([f.with_type(_utc_type(f.type)) for f in schema], metadata=schema.metadata)


def with_utc_timestamps(table: pa.Table) -> pa.Table:
    """``table`` with its timestamps labelled UTC (:func:`utc_timestamps`): no value changes. A
    top-level timestamp without a zone that the file's own Avro schema (``parquet.avro.schema``,
    which Hudi's writers and tidemark's put in every base file) calls an instant
    (``timestamp-*``) is labelled UTC too: tidemark before it refused such input wrote them so."""
    schema = utc_timestamps(table.schema)
    naive = [f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.tz is None]
    if naive and schema.metadata and b"parquet.avro.schema" in schema.metadata:
        instants = set(instant_columns(schema.metadata[b"parquet.avro.schema"]))
        schema = pa.schema(
            [
                f.with_type(pa.timestamp(f.type.unit, tz="UTC")) if f.name in naive and f.name in instants else f
                for f in schema
            ],
            metadata=schema.metadata,
        )
    return table if schema == table.schema else table.cast(schema)


def instant_columns(avro_schema: str | bytes) -> Iterator[str]:
    """The top-level columns an Avro record schema (JSON) holds as instants (``timestamp-*``)."""
    try:
        fields = json.loads(avro_schema).get("fields") or []
        types = [(f["name"], _non_null(f["type"])) for f in fields]
    except (ValueError, TypeError, KeyError, AttributeError, TableError):
        return  # not an Avro schema tidemark reads: the file's own types stand
    for name, avro in types:
        if isinstance(avro, dict) and str(avro.get("logicalType", "")).startswith("timestamp-"):
            yield name


def instant_paths(avro_schema: str | bytes) -> set[str]:
    """The column paths an Avro record schema (JSON) holds as instants (``timestamp-*``), nested
    ones too, named as :func:`_nodes` names them: ``s.t`` (a struct's field), ``a[]`` (an array's
    items), ``m{}`` (a map's values)."""
    try:
        nodes = list(_nodes(json.loads(avro_schema), ""))
    except (ValueError, TypeError, KeyError, AttributeError, TableError):
        return set()  # not an Avro schema tidemark reads: the input's own types stand
    return {
        p
        for p, avro, _ in nodes
        if isinstance(avro, dict) and str(avro.get("logicalType", "")).startswith("timestamp-")
    }


def column_paths(avro_schema: str) -> set[str]:
    """Every column path of an Avro record schema (JSON), nested ones too, named as
    :func:`_nodes` names them."""
    return {p for p, _, _ in _nodes(json.loads(avro_schema), "")}


def promoted(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``column`` cast to ``target`` as Hudi's Avro readers promote a value, at any depth (struct
    fields, list items, map values): an integer to a float rounded where the float cannot hold it
    (Arrow's safe cast refuses that), and bytes to a string decoded as Java decodes them, a
    sequence that is no UTF-8 as U+FFFD (Arrow's cast refuses it, or, unchecked, makes a string
    column no reader can read). Raises Arrow's error otherwise."""
    source = column.type
    if pa.types.is_integer(source) and pa.types.is_floating(target):
        return column.cast(target, safe=False)
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        error = e
    try:  # value by value: only a column whose values Arrow's cast refuses comes here
        values = [as_declared(v, target) for v in column.to_pylist()]
        return pa.chunked_array([pa.array(values, target)], target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        raise error from None


def as_declared(value: Any, dtype: pa.DataType) -> Any:
    """A Python value (as Arrow's ``to_pylist`` or an Avro reader gives it) of a type Hudi
    promotes to ``dtype``, converted as Hudi's Java readers convert it, at any depth: an integer to
    a float rounded to the nearest (Java's widening conversion; to a 32-bit float directly, never
    through a double), bytes to a string as Java decodes them (no UTF-8: U+FFFD), a string to its
    UTF-8 bytes. Other values are left as they are."""
    if value is None:
        return None
    t = pa.types
    if t.is_floating(dtype) and isinstance(value, int) and not isinstance(value, bool):
        return _float32(value) if dtype.bit_width == 32 else float(value)
    if (t.is_string(dtype) or t.is_large_string(dtype)) and isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if _is_bytes(dtype) and isinstance(value, str):
        return value.encode("utf-8")
    if t.is_struct(dtype) and isinstance(value, dict):
        return {**value, **{f.name: as_declared(value.get(f.name), f.type) for f in dtype}}
    if (t.is_list(dtype) or t.is_large_list(dtype)) and isinstance(value, list):
        return [as_declared(v, dtype.value_type) for v in value]
    if t.is_map(dtype):
        if isinstance(value, dict):
            return {k: as_declared(v, dtype.item_type) for k, v in value.items()}
        if isinstance(value, list):
            return [(k, as_declared(v, dtype.item_type)) for k, v in value]
    return value


def _float32(value: int) -> float:
    """The 32-bit float nearest ``value``, ties to even (Java's ``(float) long``), as a Python
    float that holds it exactly. Through a double, a long past 2^53 would be rounded twice."""
    magnitude = abs(value)
    shift = magnitude.bit_length() - 24
    if shift > 0:
        kept, rest = divmod(magnitude, 1 << shift)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and kept & 1):
            kept += 1
        magnitude = kept << shift
    return float(magnitude) if value >= 0 else -float(magnitude)


def promotes(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether ``new`` is one of Hudi's (Avro's) promotions of the primitive ``old``: int to long,
    float or double; long to float or double; float to double; bytes to string and back."""
    t = pa.types
    if t.is_integer(old) and (t.is_floating(new) or (t.is_integer(new) and new.bit_width > old.bit_width)):
        return True
    if t.is_floating(old) and t.is_floating(new):
        return bool(new.bit_width > old.bit_width)
    return _kind(old) == _kind(new) == "text"


def _is_bytes(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype))


def _unshowable_column(table: pa.Table) -> str:
    # Arrow holds dates and timestamps past Python's years 1-9999 (Java writers may write them)
    for name in table.column_names:
        try:
            table.column(name).to_pylist()
        except (OverflowError, pa.ArrowInvalid):
            return f"column {name!r} holds a value Python cannot show (a date or time outside the years 1-9999?)"
    return "a value Python cannot show"


# --- the other way: a table's Avro schema as Arrow types, and what a write may change -------------


def _non_null(avro: Any) -> Any:
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise TableError(f"the union {json.dumps(avro)} has no Arrow type (only [null, T] unions do)")
        return branches[0]
    return avro


def _arrow_type(avro: Any, name: str) -> pa.DataType:
    avro = _non_null(avro)
    kind = avro["type"] if isinstance(avro, dict) else avro
    logical = avro.get("logicalType") if isinstance(avro, dict) else None
    if isinstance(kind, dict | list):  # {"type": {...}}: a named type wrapped once more
        return _arrow_type(kind, name)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(avro["precision"]), int(avro.get("scale", 0)))
    if logical is not None and (kind, logical) in AVRO_LOGICAL_TYPES:  # dates and timestamps
        return AVRO_LOGICAL_TYPES[(kind, str(logical))]
    simple = {**AVRO_PRIMITIVE_TYPES, "enum": pa.string()}
    if kind in simple and logical not in ("time-millis", "time-micros"):
        return simple[kind]
    if kind == "fixed":
        return pa.binary(int(avro["size"]))
    if kind == "array":
        return pa.list_(_arrow_type(avro["items"], name))
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(avro["values"], name))
    if kind == "record":
        return pa.struct([pa.field(f["name"], _arrow_type(f["type"], f["name"])) for f in avro["fields"]])
    raise TableError(f"column {name!r} has the Avro type {json.dumps(avro)}, which tidemark cannot type input by")


def arrow_schema_of(avro_schema: str) -> pa.Schema:
    """The data columns (no meta fields) of a table's Avro schema as Arrow types: the inverse of
    :func:`avro_schema_for` (``fixed`` decimals as decimal128, ``timestamp-*`` as UTC timestamps,
    ``local-timestamp-*`` without a zone, enums as strings)."""
    record = json.loads(avro_schema)
    return pa.schema(
        [
            pa.field(f["name"], _arrow_type(f["type"], f["name"]))
            for f in record["fields"]
            if f["name"] not in META_FIELDS
        ]
    )


def _shown(avro: Any) -> str:
    return json.dumps(avro, sort_keys=True)


def _unnamed(avro: Any) -> Any:
    """A ``fixed`` type without its name: Hudi compares a write's schema with the table's without
    names (checkReaderWriterCompatibility with checkNaming=false), so a decimal that Flink, an
    Avro source or an older table name names otherwise is the same type (size, precision, scale)."""
    if isinstance(avro, dict) and avro.get("type") == "fixed":
        return {k: v for k, v in avro.items() if k not in ("name", "namespace", "aliases", "doc")}
    return avro


def _promotable(old: Any, new: Any) -> bool:
    """Avro's schema resolution, as Hudi's AvroSchemaCompatibility applies it to a write: the new
    (reader) type can read values of the old (writer) one. Logical types must not change."""
    old_kind = old.get("type") if isinstance(old, dict) else old
    new_kind = new.get("type") if isinstance(new, dict) else new
    if (isinstance(old, dict) and "logicalType" in old) or (isinstance(new, dict) and "logicalType" in new):
        return False
    widened = {
        "int": ("long", "float", "double"),
        "long": ("float", "double"),
        "float": ("double",),
        "string": ("bytes",),
        "bytes": ("string",),
    }
    return new_kind in widened.get(str(old_kind), ())


#: promotions that print every value as the old type did: Hudi's key generators print a value as
#: Java does (1 as a double is "1.0"; a float widened to a double gains digits, 0.1 becomes
#: 0.10000000149011612), so any other would change the record keys or partition paths of the
#: table's records, and an update would not find its record
_SAME_TEXT = {("int", "long")}
#: a TimestampBasedKeyGenerator partition field's number is taken whole (Java's longValue()):
#: these hold every value of the old type exactly, so its partition path cannot change
_SAME_WHOLE_NUMBER = {("int", "long"), ("int", "double"), ("float", "double")}


def _key_field_problem(old: Any, new: Any, path: str, role: str) -> list[str]:
    """A promotion of a record key or partition field (``role``) that could change its text."""
    pair = (old.get("type") if isinstance(old, dict) else old, new.get("type") if isinstance(new, dict) else new)
    if pair in (_SAME_WHOLE_NUMBER if role == "timestamp partition" else _SAME_TEXT):
        return []
    if role == "record key":
        where, effect = "record keys", "an update would not find its record and would write it again as another one"
    else:
        where, effect = "partition paths", "an update would write its record again in another partition"
    return [
        f"column {path} is a {role} field: the input's type {_shown(new)} would print the table's {_shown(old)} "
        f"values differently in {where}, so {effect}; cast it back to {_shown(old)}"
    ]


def _type_problems(old: Any, new: Any, path: str, keys: Mapping[str, str]) -> list[str]:
    old_nullable = isinstance(old, list) and "null" in old
    new_nullable = isinstance(new, list) and "null" in new
    if old_nullable and not new_nullable:
        return [f"column {path} is not nullable, the table's is"]
    old, new = _non_null(old), _non_null(new)
    if _shown(_unnamed(old)) == _shown(_unnamed(new)):
        return []
    old_kind = old.get("type") if isinstance(old, dict) else old
    new_kind = new.get("type") if isinstance(new, dict) else new
    if old_kind == new_kind == "record":
        return _record_problems(old["fields"], new["fields"], path, keys)
    if old_kind == new_kind == "array":
        return _type_problems(old["items"], new["items"], f"{path}[]", keys)
    if old_kind == new_kind == "map":
        return _type_problems(old["values"], new["values"], f"{path}{{}}", keys)
    if _promotable(old, new):
        return _key_field_problem(old, new, path, keys[path]) if path in keys else []
    return [f"column {path} has type {_shown(new)}, the table has {_shown(old)}"]


def _record_problems(
    old_fields: list[dict[str, Any]], new_fields: list[dict[str, Any]], path: str, keys: Mapping[str, str]
) -> list[str]:
    old = {f["name"]: f["type"] for f in old_fields if f["name"] not in META_FIELDS}
    new = {f["name"]: f for f in new_fields if f["name"] not in META_FIELDS}
    problems = [f"column {field_path(path, n)} is missing" for n in old if n not in new]
    for n, t in old.items():
        if n in new:
            problems += _type_problems(t, new[n]["type"], field_path(path, n), keys)
    for n, f in new.items():
        if n not in old and not (isinstance(f["type"], list) and "null" in f["type"]):
            problems.append(f"the new column {field_path(path, n)} is not nullable")
    return problems


_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def field_path(path: str, name: str) -> str:
    """The path of field ``name`` of the struct at ``path`` ("" for the top level): ``s.x``. A
    field's name with a dot or a backtick is quoted as Spark quotes it (s.`a.b`), else it would
    read as a path."""
    if not path:
        return name
    if "." in name or "`" in name:
        name = "`" + name.replace("`", "``") + "`"
    return f"{path}.{name}"


def _nodes(avro: Any, path: str) -> Iterator[tuple[str, Any, str | None]]:
    """(column path, type without null, field name) of every node under a schema: record fields
    (with their name), array items (``path[]``) and map values (``path{}``), nested ones too."""
    avro = _non_null(avro)
    if not isinstance(avro, dict):
        return
    kind = avro.get("type")
    children: list[tuple[str, Any, str | None]] = []
    if kind == "record":
        children = [(field_path(path, f["name"]), f["type"], f["name"]) for f in avro["fields"]]
    elif kind == "array":
        children = [(f"{path}[]", avro["items"], None)]
    elif kind == "map":
        children = [(f"{path}{{}}", avro["values"], None)]
    for inner, child, name in children:
        yield inner, _non_null(child), name
        yield from _nodes(child, inner)


def _new_nodes(current: str | None, incoming: dict[str, Any], wanted: Callable[[Any, str | None], bool]) -> list[str]:
    """The column paths of ``incoming`` whose node is ``wanted`` and that the table's schema
    ``current`` (JSON; None for a new table) does not have already."""
    have = column_paths(current) if current else set()
    return [p for p, avro, name in _nodes(incoming, "") if wanted(avro, name) and p not in have]


def new_invalid_names(current: str | None, incoming: dict[str, Any]) -> list[str]:
    """The new columns of ``incoming`` (an Avro record schema) whose names Avro does not allow (a
    letter or ``_``, then letters, digits and ``_``): Hudi's writers refuse them, and Apache's
    readers cannot read them."""
    return _new_nodes(current, incoming, lambda _, name: name is not None and not _AVRO_NAME.fullmatch(name))


def empty_structs(incoming: dict[str, Any]) -> list[str]:
    """The columns of ``incoming`` (an Avro record schema) that are structs without fields, at any
    depth: Parquet cannot hold one, and every task of a write would fail at its first file."""
    return _new_nodes(None, incoming, lambda avro, _: isinstance(avro, dict) and avro.get("fields") == [])


def new_local_timestamps(current: str | None, incoming: dict[str, Any]) -> list[str]:
    """The columns that ``incoming`` makes timestamps without a time zone (``local-timestamp-*``,
    Spark's TimestampNTZType) where the table's schema ``current`` has none. Hudi's version-6
    writers do not write such a column and its readers cannot read it (hudi-rs stops at it in an
    Avro log block), so a table only keeps the ones another writer made."""

    def local(avro: Any, _: str | None) -> bool:
        return isinstance(avro, dict) and str(avro.get("logicalType", "")).startswith("local-timestamp")

    return _new_nodes(current, incoming, local)


def evolution_problems(current: str, incoming: dict[str, Any], keygen: KeyGenerator | None = None) -> list[str]:
    """Why a write of ``incoming`` (an Avro record schema) may not change the table's schema
    ``current`` (JSON), as Hudi's schema evolution on write allows it: new nullable columns (at
    the root or in a nested record), and types Avro's resolution promotes (int to long, float or
    double; long to float or double; float to double; string and bytes either way), in nested
    records, array items and map values too. Every column the table has must be there. The
    record key and partition fields of ``keygen`` (the table's key generator) are promoted only
    where their values print as before in keys and paths (int to long; a timestamp partition
    field's number also int to double, float to double)."""
    keys: dict[str, str] = {}
    if keygen is not None:
        for f in keygen.partition_fields:
            keys[f.name] = "timestamp partition" if f.kind == "timestamp" else "partition"
        keys.update((name, "record key") for name in keygen.record_key_fields)  # the stricter rule
    return _record_problems(json.loads(current)["fields"], incoming["fields"], "", keys)
