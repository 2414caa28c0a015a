"""Hudi's comprehensive schema evolution (schema on read, ``hoodie.schema.on.read.enable=true``):
tidemark reads and writes none of these tables.

Such a table keeps its columns' history as an InternalSchema, whose columns have ids: Hudi's
writer (``saveInternalSchema``) and ``ALTER TABLE`` (``AlterTableCommand.commitWithSchema``) put
the history in ``.hoodie/.schema/<instant>.schemacommit`` (``FileBasedInternalSchemaStorageManager``)
and the latest schema in the commit's ``latest_schema`` (``SerDeHelper.LATEST_SCHEMA``). After a
``RENAME COLUMN`` a data file keeps the name the column had when it was written, and Apache's
reader and merge map it by id; tidemark matches columns by name, so it would read the renamed
column as null, and a merge would write it back null in every row it copies. The first schema in a
history was taken from the Avro schema (ids by position), so whether a column was renamed before
it cannot be told from the history alone: the history's presence is the test.
"""

from __future__ import annotations

from tidemark.errors import UnsupportedTableFeatureError
from tidemark.storage.base import Storage
from tidemark.timeline import Timeline, load_timeline

#: Hudi's folder of InternalSchema histories (``FileBasedInternalSchemaStorageManager.SCHEMA_NAME``)
SCHEMA_FOLDER = ".hoodie/.schema"
#: the history files' action (``HoodieTimeline.SCHEMA_COMMIT_ACTION``)
SCHEMA_COMMIT = "schemacommit"


def schema_history(storage: Storage, timeline: Timeline | None = None) -> str | None:
    """The path of the schema history Hudi reads (``getHistorySchemaStr``): the latest
    ``<instant>.schemacommit`` in ``.hoodie/.schema/`` of a completed write; None for a table
    without one. Files of writes that did not complete are ignored, as Hudi ignores (and later
    deletes) them. ``timeline``: the whole active timeline, loaded only when the folder has files."""
    names = [n for n in storage.list_dir(SCHEMA_FOLDER).files if n.endswith(f".{SCHEMA_COMMIT}")]
    if not names:
        return None
    completed = (timeline if timeline is not None else load_timeline(storage)).completed().write_instants().timestamps()
    valid = sorted(n for n in names if n.split(".")[0] in completed)
    return f"{SCHEMA_FOLDER}/{valid[-1]}" if valid else None


def _found(storage: Storage, history: str) -> str:
    return (
        f"the table has Hudi's comprehensive schema evolution (schema on read: hoodie.schema.on.read.enable=true; "
        f"its column history is in {storage.full_uri(history)}). Its columns may have been renamed, dropped or "
        "reordered since its data files were written, which Apache Hudi maps by column id; tidemark matches "
        "columns by name"
    )


def check_writable(storage: Storage, command: str, timeline: Timeline | None = None) -> None:
    """Refuse ``command``, a change that writes rows (a write, a compaction), on such a table: a
    merge would write a renamed column back as null in every row it copies, and tidemark's commits
    carry no ``latest_schema`` for Apache's next reader and writer to map the new files by."""
    history = schema_history(storage, timeline)
    if history is not None:
        raise UnsupportedTableFeatureError(
            f"{storage.uri}: refusing to {command}: {_found(storage, history)}, so this change could write a "
            "renamed column as null in every row it rewrites. Nothing was changed; use Apache Hudi to change this table"
        )


def check_readable(storage: Storage, timeline: Timeline | None = None) -> None:
    """Refuse to read such a table: a renamed column would read as null under its old name."""
    history = schema_history(storage, timeline)
    if history is not None:
        raise UnsupportedTableFeatureError(
            f"{storage.uri}: refusing to read: {_found(storage, history)}, so a renamed column would read as null "
            "(and its old name as a column of its own). Nothing was read; read this table with Apache Hudi's reader "
            "(Spark with hoodie.schema.on.read.enable=true)"
        )
