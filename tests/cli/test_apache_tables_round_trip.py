"""Issue 14's acceptance on every table Apache Hudi wrote (copy-on-write and merge-on-read): the
input is what ``tidemark table read --format jsonl`` prints for the table itself, with values
changed, new keys added, then some keys deleted; ``tidemark write`` gets no key flags. After each
step tidemark's reader, Apache's reader and the test's model agree, and a copy-on-write table holds
no log file and no deltacommit."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.fixtures import extract_table, fixtures_root, table_zips
from tests.support.model import apache_snapshot
from tidemark.cli.main import build_parser
from tidemark.cli.main import main as tidemark_in_process
from tidemark.storage import LocalStorage
from tidemark.table.properties import read_properties
from tidemark.table.snapshot import META_COLUMNS, read_snapshot
from tidemark.timeline import DELTA_COMMIT, load_timeline

pytestmark = pytest.mark.spark

TABLES = [p.relative_to(p.parents[1]).with_suffix("").as_posix() for p in table_zips()]
#: the tables keep their metadata table off for tidemark (the documented way on)
NO_METADATA = ("--conf", "hoodie.metadata.enable=false")


def printed_rows(table: Path) -> list[dict[str, Any]]:
    """What ``tidemark table read --format jsonl`` prints, run in this process (a child process
    under heavy load was seen to abort at exit, after its complete output, in C++ teardown)."""
    args = build_parser().parse_args(["table", "read", str(table), "--format", "jsonl"])
    printed = io.StringIO()
    assert args.run(args, printed) == 0
    return [json.loads(line) for line in printed.getvalue().splitlines() if line.strip()]


def key_of(row: dict[str, Any], fields: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row[f] for f in fields)


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def data_rows(table: Any) -> list[str]:
    columns = sorted(c for c in table.column_names if c not in META_COLUMNS)
    return sorted(map(repr, table.select(columns).to_pylist())) if table.num_rows else []


def check(table: Path, model: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """Both readers, and the model, agree."""
    ours = read_snapshot(LocalStorage(table))
    assert data_rows(ours) == data_rows(apache_snapshot(str(table)))
    assert canonical(printed_rows(table)) == canonical(list(model.values()))


def write(table: Path, rows: list[dict[str, Any]], operation: str, folder: Path) -> None:
    source = folder / f"{operation}-{len(list(folder.iterdir()))}.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = tidemark_in_process(["write", str(table), "--input", str(source), "--operation", operation, *NO_METADATA])
    assert code == 0


def changeable(table: Path, fixed: set[str]) -> tuple[str | None, str | None]:
    """A text column and a double column that are no key, partition or ordering field."""
    schema = read_snapshot(LocalStorage(table)).schema
    free = [f for f in schema if f.name not in fixed and f.name not in META_COLUMNS]
    text = next((f.name for f in free if pa.types.is_string(f.type)), None)
    double = next((f.name for f in free if pa.types.is_float64(f.type)), None)
    return text, double


def changed(row: dict[str, Any], text: str | None, double: str | None) -> dict[str, Any]:
    """The row with a value changed: the text column's if there is one (it goes back exactly),
    else the double's."""
    out = dict(row)
    if text is not None:
        out[text] = f"{row[text]}-changed"
    elif double is not None:
        out[double] = (row[double] or 0.0) + 1.5
    return out


def new_key(row: dict[str, Any], keys: tuple[str, ...], n: int) -> dict[str, Any]:
    out = dict(row)
    for k in keys:
        value = row[k]
        out[k] = value + 1000 + n if isinstance(value, int) else f"{value}-new{n}"
    return out


@pytest.mark.parametrize("name", TABLES or ["(fixtures missing)"])
def test_changes_new_keys_and_deletes_from_the_tables_own_rows(name: str, spark: Any, tmp_path: Path) -> None:
    del spark  # the in-process writes share the session
    table = extract_table(fixtures_root() / "tables" / f"{name}.zip", tmp_path / "t")
    props = read_properties(LocalStorage(table))
    keys = props.record_key_fields
    fixed = {*keys, *props.partition_fields, *(f for f in [props.precombine_field] if f)}
    rows = printed_rows(table)
    model = {key_of(r, keys): r for r in rows}
    inputs = tmp_path / "in"
    inputs.mkdir()
    check(table, model)

    # values changed in half the rows, and new keys copied from the others
    text, double = changeable(table, fixed)
    updates = [changed(r, text, double) for r in rows[::2]]
    inserts = [new_key(r, keys, i) for i, r in enumerate(rows[1::2] or rows[:1])]
    if rows:
        write(table, updates + inserts, "upsert", inputs)
        for r in updates + inserts:
            model[key_of(r, keys)] = r
        check(table, model)

        # some keys deleted, as the table printed them
        gone = [model[key_of(r, keys)] for r in (updates[:1] + inserts[:1])]
        write(table, gone, "delete", inputs)
        for r in gone:
            del model[key_of(r, keys)]
        check(table, model)

    if not props.is_merge_on_read:
        assert not [p for p in table.rglob("*") if ".log." in p.name and ".hoodie" not in p.parts]
        assert not load_timeline(LocalStorage(table)).of_actions(DELTA_COMMIT).instants
    if not props.populate_meta_fields:
        # as Hudi writes such a table: its meta columns null, and no key filter in the footers
        for path in (p for p in table.rglob("*.parquet") if ".hoodie" not in p.parts):
            parquet = pq.ParquetFile(path)
            assert b"org.apache.hudi.bloomfilter" not in (parquet.metadata.metadata or {}), path.name
            keys_written = parquet.read(columns=["_hoodie_record_key"]).column(0)
            assert keys_written.null_count == len(keys_written), path.name
