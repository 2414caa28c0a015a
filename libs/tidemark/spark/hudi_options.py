"""Hudi's own write options: the dict a Hudi quickstart hands ``df.write.format("hudi")``, taken
unchanged by ``tidemark.spark.write(df, path, **hudi_options)``.

The six options that name a write's shape (table name, record key, precombine and partition
fields, operation, hive-style partitioning) and the table type become :class:`WriteOptions`;
every ``hoodie.*`` key also goes into the write's ``conf``, where the write reads the ones it knows
(key generator, payload, file sizes, markers, the metadata table, ...), and so does every
``tidemark.*`` key (the writer-coordinator's, say), as ``--conf`` takes them. A ``hoodie.*`` key
tidemark does not read gets a warning naming it; keys that contradict each other, and keys
neither Hudi's nor tidemark's, are refused before anything is written.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Final

from pyspark.sql import DataFrame

from tidemark.config import comma_fields, conf_bool, is_hudi_key_read
from tidemark.errors import TableError
from tidemark.spark.write_job import WriteOptions, WriteResult, write_dataframe
from tidemark.storage import S3Options
from tidemark.table import key_generator as KG
from tidemark.table import properties as P
from tidemark.table.write_client import TABLE_TYPE_WRITE, table_type_name

WRITE_TABLE_NAME: Final = "hoodie.datasource.write.table.name"
RECORD_KEY: Final = KG.WRITE_RECORD_KEY_FIELDS
PRECOMBINE: Final = "hoodie.datasource.write.precombine.field"
OPERATION: Final = "hoodie.datasource.write.operation"
#: Hudi's operation names → tidemark's (Hudi's default is upsert)
_OPERATIONS: Final = {
    "upsert": "upsert",
    "insert": "insert",
    "bulk_insert": "bulk_insert",
    "bulkinsert": "bulk_insert",
    "delete": "delete",
    "insert_overwrite": "insert_overwrite",
}
#: Hudi's options tidemark does not implement, with what to use instead
_UNSUPPORTED_OPERATIONS: Final = {
    "insert_overwrite_table": "insert_overwrite of every partition",
    "delete_partition": "insert_overwrite with the partition's new rows, or delete with its keys",
}
#: the same setting under two of Hudi's names: both given, they must agree
_SYNONYMS: Final = (
    (P.NAME, WRITE_TABLE_NAME),
    (TABLE_TYPE_WRITE, P.TABLE_TYPE),
    (RECORD_KEY, P.RECORD_KEY_FIELDS),
    (PRECOMBINE, P.PRECOMBINE_FIELD),
    (KG.WRITE_PARTITION_FIELDS, P.PARTITION_FIELDS),
    (KG.WRITE_CLASS, KG.TABLE_CLASS),
)


class IgnoredHudiOptionWarning(UserWarning):
    """A Hudi option tidemark's write does not read (a Spark parallelism, a sync tool, ...)."""


def _text(value: object) -> str:
    # Hudi's options dicts hold ints and booleans as often as strings
    return str(value).lower() if isinstance(value, bool) else str(value)


def _same_setting(key: str, text: str) -> tuple[str | None, ...]:
    # "a, b" is "a,b"; a key generator's class is itself with or without its package; a table
    # type is itself in any of Hudi's spellings (mor, merge_on_read, MERGE_ON_READ)
    if key in (TABLE_TYPE_WRITE, P.TABLE_TYPE):
        return (table_type_name(text),)
    return tuple(
        part.strip().rsplit(".", 1)[-1] if "KeyGenerator" in part else part.strip() for part in text.split(",")
    )


def write_options(hudi_options: Mapping[str, object]) -> WriteOptions:
    """The :class:`WriteOptions` of a Hudi options dict; unknown ``hoodie.*`` keys warned about,
    contradictions and keys neither Hudi's nor tidemark's refused."""
    unset = sorted(k for k, v in hudi_options.items() if v is None)
    if unset:
        # str(None) was taken as the value: a precombine field named "None"
        raise TableError(
            f"Hudi options without a value (None): {', '.join(unset)}; leave a key out for the table's "
            f"setting or Hudi's default"
        )
    options = {k: _text(v) for k, v in hudi_options.items()}
    # tidemark's own keys (the writer-coordinator's URL and token, which a timeline-server-based
    # markers type needs) have no Hudi name: they pass as in --conf, and the write checks them
    foreign = sorted(k for k in options if not k.startswith(("hoodie.", "tidemark.")))
    if foreign:
        raise TableError(
            f"not Hudi or tidemark options: {', '.join(foreign)} "
            f"(tidemark.spark.write takes hoodie.* and tidemark.* keys)"
        )
    clashes = [
        f"{a}={options[a]!r} but {b}={options[b]!r}"
        for a, b in _SYNONYMS
        if a in options and b in options and _same_setting(a, options[a]) != _same_setting(b, options[b])
    ]
    if clashes:
        raise TableError(f"contradictory Hudi options: {'; '.join(clashes)}")
    ignored = sorted(k for k in options if k.startswith("hoodie.") and not is_hudi_key_read(k))
    if ignored:
        warnings.warn(
            f"Hudi options tidemark does not use, ignored: {', '.join(ignored)}",
            IgnoredHudiOptionWarning,
            stacklevel=3,
        )
    operation = options.get(OPERATION, "upsert").strip().lower()
    if operation in _UNSUPPORTED_OPERATIONS:
        raise TableError(
            f"{OPERATION}={operation}: not supported by tidemark; use {_UNSUPPORTED_OPERATIONS[operation]}"
        )
    if operation not in _OPERATIONS:
        raise TableError(f"{OPERATION}={operation!r}: unknown operation (Hudi's: {', '.join(sorted(_OPERATIONS))})")

    def first(*keys: str) -> str | None:
        return next((options[k].strip() for k in keys if k in options), None)

    hive = first(P.HIVE_STYLE)
    return WriteOptions(
        operation=_OPERATIONS[operation],
        record_key=comma_fields(first(RECORD_KEY, P.RECORD_KEY_FIELDS)) or (),
        precombine=first(PRECOMBINE, P.PRECOMBINE_FIELD) or None,
        partition_fields=comma_fields(first(KG.WRITE_PARTITION_FIELDS, P.PARTITION_FIELDS)),
        hive_style=None if hive is None else conf_bool(options, P.HIVE_STYLE, default=False),
        table_name=first(P.NAME, WRITE_TABLE_NAME),
        table_type=first(TABLE_TYPE_WRITE, P.TABLE_TYPE),
        conf=options,
    )


def write(
    df: DataFrame, location: str | os.PathLike[str], s3: S3Options | None = None, **hudi_options: object
) -> WriteResult:
    """Write ``df`` to the table at ``location`` with a Hudi options dict, as
    ``df.write.format("hudi").options(**hudi_options).save(location)`` would."""
    return write_dataframe(df, location, write_options(hudi_options), s3)
