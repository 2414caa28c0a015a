"""JSON lines typed by a table's schema, read by Spark.

The lines are read as text and each task types its own lines with
:func:`tidemark.table.json_input.type_lines`, so the input is parsed once, on the executors, and
the DataFrame has the table's types. A value that does not fit stops the read: the task sends
the line back in its error, and the driver finds the line's number in the input file (only then
is the file read on the driver). Top-level keys the table does not have are new columns: when a
task saw any, Spark infers their types from the input (as ``spark.read.json`` would) and the
lines are typed again with the table's columns and the new ones at the end. A table column that
no line holds as a key is left out, as ``spark.read.json`` would leave it out for Hudi: the
write then refuses it as missing (or fills nulls, as Hudi's switch says), as for Parquet input.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type
from pyspark.sql.types import StructType

from tidemark.errors import TableError
from tidemark.spark.write_job import case_twins_error, column_paths_of, new_case_twins
from tidemark.table.avro_schema import META_FIELDS
from tidemark.table.json_input import JsonInputError, line_number_in, type_lines

#: a row's line when it has keys the table does not (else null); dropped before the rows leave
_UNKNOWN = "_tm_unknown_line"
#: on a batch's first row, the table's columns its lines hold as keys (a JSON list; else null)
_HELD = "_tm_held_columns"
#: how a task's JsonInputError reaches the driver inside Spark's error text
_WIRE = "tidemark-json-input:"


def _spark_type(t: pa.DataType) -> pa.DataType:
    """What Spark holds for ``t``: microsecond timestamps, variable-length binary."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_list(t):
        return pa.list_(_spark_type(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _spark_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _spark_type(f.type)) for f in t])
    return t


def _typed(spark: SparkSession, path: str, schema: pa.Schema) -> DataFrame:
    out = pa.schema(
        [pa.field(f.name, _spark_type(f.type)) for f in schema]
        + [pa.field(_UNKNOWN, pa.string()), pa.field(_HELD, pa.string())]
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            lines = batch.column(0)
            try:
                typed = type_lines(lines, schema)
            except JsonInputError as e:
                wire = {
                    "line": e.line,
                    "column": e.column,
                    "value": e.value,
                    "expected": e.expected,
                    "problem": e.problem,
                }
                raise TableError(_WIRE + json.dumps(wire)) from None
            kept = lines.filter(pc.invert(pc.equal(pc.utf8_trim_whitespace(lines), "")))
            flagged = pc.if_else(typed.unknown, kept, pa.scalar(None, pa.string()))
            columns = [c.cast(_spark_type(c.type)) for c in typed.table.columns]
            held = pa.array([json.dumps(sorted(typed.held))] + [None] * (len(flagged) - 1), pa.string())
            yield pa.RecordBatch.from_arrays(
                [*[_one(c) for c in columns], _one(flagged), held[: len(flagged)]], schema=out
            )

    return spark.read.text(path).mapInArrow(run, from_arrow_schema(out))


def _one(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _input_files(path: str) -> list[Path]:
    root = Path(path.removeprefix("file:"))
    if root.is_file():
        return [root]
    if root.is_dir():  # as Spark lists a folder: hidden and underscore files are not data
        return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
    return []


def _locate(path: str, line: str) -> tuple[Path, int] | None:
    for file in _input_files(path):
        if file.stat().st_size == 0:
            continue
        with file.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            number = line_number_in(data, line)
        if number is not None:
            return file, number
    return None


def _input_error(error: BaseException, path: str, where: str) -> TableError | None:
    """The line a task could not type, from a failed Spark job's error text, with its number."""
    text = str(error)
    at = text.find(_WIRE)
    if at < 0:
        return None
    wire, _ = json.JSONDecoder().raw_decode(text[at + len(_WIRE) :])
    bad = JsonInputError(0, wire["line"], wire["column"], wire["value"], wire["expected"], wire["problem"])
    found = _locate(path, bad.line)
    if found is None:
        return TableError(bad.describe(f"{where}, the line {json.dumps(bad.line[:80])}"))
    file, number = found
    shown = where if Path(path.removeprefix("file:")).is_file() else f"{where} ({file.name})"
    return TableError(bad.describe(f"{shown} line {number}"))


def _materialized(df: DataFrame, path: str, where: str) -> tuple[DataFrame, int, set[str] | None]:
    """``df`` cached, how many of its lines have keys the table does not, and the table's
    columns some line holds as a key (None: the input has no line)."""
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        flagged, rows, held = df.agg(F.count(F.col(_UNKNOWN)), F.count(F.lit(1)), F.collect_set(_HELD)).collect()[0]
    except Exception as e:
        df.unpersist()
        raise _input_error(e, path, where) or TableError(f"{where} cannot be read: {_first_line(e)}") from e
    return df, int(flagged), {n for names in held for n in json.loads(names)} if rows else None


def read_typed_json(spark: SparkSession, path: str, schema: pa.Schema, where: str = "the input") -> DataFrame:
    """The JSON lines at ``path`` (a file or folder) as a DataFrame of ``schema`` (the table's
    columns; one that no line holds as a key, even with null, is left out, as Hudi would see it
    missing), plus, at the end, columns for top-level keys the table does not have (their types
    as Spark infers them). ``where`` names the input in errors.

    The rows are cached (typed once, then written from the cache): ``unpersist()`` the result's
    parent, or clear the session's cache, before reading a changed file at the same path again."""
    df, flagged, held = _materialized(_typed(spark, path, schema), path, where)
    if flagged:
        inferred = _inferred_schema(spark, path, "PERMISSIVE")
        known = set(schema.names)
        new = [f for f in inferred.fields if f.name not in known and f.name != "_corrupt_record"]
        # a new key that differs only in case from a column or another new key, or inside one
        twins = new_case_twins(known, column_paths_of(StructType(new)))
        if twins:
            raise case_twins_error(twins)
        if new:
            df.unpersist()
            extended = pa.schema([*schema, *[pa.field(f.name, to_arrow_type(f.dataType)) for f in new]])
            df, _, held = _materialized(_typed(spark, path, extended), path, where)
            # a key null on every line adds no column: its type cannot be known (Spark says string,
            # which would refuse a later number); an empty array or record is a value, and stays
            counts = df.select(*(F.count(F.col("`" + f.name.replace("`", "``") + "`")) for f in new)).first()
            df = df.drop(*(f.name for f, n in zip(new, counts or (), strict=True) if n == 0))
    # a column no line holds is one the input lacks (Hudi's meta columns may be left out, as ever)
    lacked = [] if held is None else [n for n in schema.names if n not in held and n not in META_FIELDS]
    return df.drop(_UNKNOWN, _HELD, *lacked)


def read_new_table_json(spark: SparkSession, path: str, where: str = "the input") -> DataFrame:
    """JSON lines for a table that does not exist yet, with the types Spark infers; keys that
    differ only in case, at any depth, are refused (:func:`_inferred_schema`)."""
    schema = _inferred_schema(spark, path, "FAILFAST")
    twins = new_case_twins(set(), column_paths_of(schema))
    if twins:
        raise case_twins_error(twins)
    if "_corrupt_record" in schema.names:
        raise TableError(f"{where}: not JSON lines")
    df = spark.read.schema(schema).option("mode", "FAILFAST").json(path)
    df.cache().count()  # malformed lines fail here, with the file named
    return df


def _inferred_schema(spark: SparkSession, path: str, mode: str) -> StructType:
    """The types Spark infers for the JSON lines, inferred case-sensitively: Spark's default
    session merges keys that differ only in case (``s.x`` of one line, ``s.X`` of another) into
    one field and reads the other's values as null, or fails on a top-level pair with
    COLUMN_ALREADY_EXISTS; the caller refuses such keys, naming them."""
    sensitive = spark.conf.get("spark.sql.caseSensitive") or "false"
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        return spark.read.option("mode", mode).json(path).schema
    finally:
        spark.conf.set("spark.sql.caseSensitive", sensitive)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
