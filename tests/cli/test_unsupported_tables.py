"""Tables with Hudi features tidemark would misread or leave stale are refused, with the feature
named, before anything is read or changed: ORC base files, a bootstrapped table, partition columns
dropped from the files (every command), and change data capture (every command that changes the
table; its reads are ordinary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_metadata_table_guard import DISABLE, _run
from tests.support.cli import listing
from tests.support.fixtures import extract_table, fixtures_root
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.timeline import load_timeline


def _trips_with(tmp_path: Path, **entries: str) -> Path:
    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    storage = LocalStorage(table)
    P.write_properties(storage, P.TableProperties({**P.read_properties(storage).entries, **entries}))
    return table


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        (P.BASE_FILE_FORMAT, "ORC", "tidemark reads Parquet base files only"),
        (P.DROP_PARTITION_COLUMNS, "true", "the partition columns are not in the files"),
        (P.BOOTSTRAP_BASE_PATH, "/data/source", "a bootstrapped table"),
    ],
)
def test_a_table_tidemark_would_misread_is_refused_by_every_command(
    tmp_path: Path, key: str, value: str, said: str
) -> None:
    table = _trips_with(tmp_path, **{key: value})
    before = listing(table)
    for argv in (["table", "read", str(table)], ["table", "show", str(table)], ["compact", str(table)]):
        code, out, err = _run(*argv)
        assert (code, out) == (1, ""), (argv, out, err)
        assert f"{key}={value} ({said}" in err
        assert "use Apache Hudi for this table" in err
        assert "Traceback" not in err
    assert listing(table) == before


def test_a_table_with_change_data_capture_is_read_but_never_changed(tmp_path: Path) -> None:
    table = _trips_with(tmp_path, **{"hoodie.table.cdc.enabled": "true", P.METADATA_PARTITIONS: "files"})
    path = str(table)
    latest = load_timeline(LocalStorage(table)).completed().write_instants().instants[-1].timestamp
    code, rows, _ = _run("table", "read", path, "--format", "jsonl")
    assert code == 0
    assert rows.count("\n") == 8
    (tmp_path / "input.jsonl").write_text(rows)
    before = listing(table)
    commands = {
        "write": ["write", path, "--input", str(tmp_path / "input.jsonl"), "--operation", "upsert"],
        "compact": ["compact", path],
        "clean": ["clean", path, "--conf", "hoodie.cleaner.commits.retained=1"],
        "roll back": ["rollback", path, latest],
        "create a savepoint": ["savepoint", "create", path, latest],
    }
    for verb, argv in commands.items():
        for extra in ([], DISABLE):  # disabling the metadata table changes nothing either
            code, _, err = _run(*argv, *extra)
            assert code == 1, (verb, err)
            assert f"refusing to {verb}: the table has change data capture on" in err
            assert "Nothing was changed" in err
            assert listing(table) == before, f"{verb} {extra} changed storage"


def test_a_write_into_a_table_that_records_no_record_key_is_refused_in_one_line(tmp_path: Path) -> None:
    table = _trips_with(tmp_path)
    storage = LocalStorage(table)
    entries = {k: v for k, v in P.read_properties(storage).entries.items() if k != P.RECORD_KEY_FIELDS}
    P.write_properties(storage, P.TableProperties(entries))
    code, rows, _ = _run("table", "read", str(table), "--format", "jsonl")
    assert code == 0  # reads need no key fields
    (tmp_path / "input.jsonl").write_text(rows)
    before = listing(table)
    argv = ["--input", str(tmp_path / "input.jsonl"), "--operation", "upsert", "--record-key", "uuid"]
    code, _, err = _run("write", str(table), *argv)
    assert code == 1
    assert "Traceback" not in err
    assert f"hoodie.properties has no {P.RECORD_KEY_FIELDS}" in err
    assert listing(table) == before


@pytest.mark.parametrize("stated", [None, P.COPY_ON_WRITE])
def test_a_merge_on_read_table_whose_properties_say_copy_on_write_is_read_but_never_changed(
    tmp_path: Path, stated: str | None
) -> None:
    """Without hoodie.table.type Hudi takes COPY_ON_WRITE; on a table whose timeline holds
    deltacommits (log files to merge) that type is wrong, and a command acting on it would lose or
    misplace updates: every command that changes the table says so in one line, naming the file
    and the key, and changes nothing. Reads merge the log files, as the timeline says."""
    table = tmp_path / "t"
    builder = TableBuilder(LocalStorage(table))
    first = builder.insert(["a", "b"], 1)
    last = builder.update(["a"], 2)
    props = table / ".hoodie" / "hoodie.properties"
    lines = [line for line in props.read_text().splitlines() if not line.startswith(f"{P.TABLE_TYPE}=")]
    props.write_text("\n".join(lines + ([f"{P.TABLE_TYPE}={stated}"] if stated else [])) + "\n")
    said = f"says {P.TABLE_TYPE}={stated}" if stated else f"says no {P.TABLE_TYPE} (Hudi takes COPY_ON_WRITE)"
    contradiction = f"{props} {said}, but its timeline holds deltacommits (e.g. {last})"
    path = str(table)
    code, rows, err = _run("table", "read", path, "--format", "jsonl")
    assert code == 0, err
    assert sorted((r["id"], r["v"]) for r in map(json.loads, rows.splitlines())) == [("a", 2), ("b", 1)]
    (tmp_path / "input.jsonl").write_text(rows)
    before = listing(table)
    commands = {
        "write": ["write", path, "--input", str(tmp_path / "input.jsonl"), "--operation", "upsert"],
        "compact": ["compact", path, "--engine", "local"],
        "clean": ["clean", path, "--conf", "hoodie.cleaner.commits.retained=1"],
        "archive": ["archive", path, "--conf", "hoodie.keep.min.commits=1", "--conf", "hoodie.keep.max.commits=2"],
        "create a savepoint": ["savepoint", "create", path, first],
        "delete a savepoint": ["savepoint", "delete", path, first],
        "roll back": ["rollback", path, last],
        "restore": ["restore", path, first],
    }
    for verb, argv in commands.items():
        code, out, err = _run(*argv)
        assert (code, out) == (1, ""), (verb, out, err)
        line = err.strip()
        assert "\n" not in line, line
        assert contradiction in line, line
        assert f"refusing to {verb}" in line
        assert f"set {P.TABLE_TYPE}=MERGE_ON_READ" in line
        assert listing(table) == before, f"{verb} changed storage"
    code, out, _ = _run("table", "show", path)
    assert code == 0
    assert out.splitlines()[0] == f"table t (type contradicted by the timeline: see the warning) at {table}"
    assert f"warning: {contradiction}" in out
    assert "merging the log files as for MERGE_ON_READ" in out
    code, out, err = _run("timeline", path, "--json")
    assert code == 0
    assert [json.loads(line)["instant"] for line in out.splitlines()] == [first, last]
    assert f"warning: {contradiction}" in err
    assert listing(table) == before


def test_a_table_without_a_type_and_without_deltacommits_is_shown_as_hudi_reads_it(tmp_path: Path) -> None:
    table = tmp_path / "t"
    TableBuilder(LocalStorage(table), copy_on_write=True).insert(["a"], 1)
    props = table / ".hoodie" / "hoodie.properties"
    props.write_text("".join(line for line in props.read_text().splitlines(True) if P.TABLE_TYPE not in line))
    code, out, err = _run("table", "show", str(table))
    assert code == 0, err
    assert f"(COPY_ON_WRITE: no {P.TABLE_TYPE}, Hudi's default)" in out
    assert "warning" not in out
    assert _run("clean", str(table))[0] == 0


#: the instant of the ALTER TABLE below
_ALTER = "20240419000000000"


def _renamed_by_alter_table(tmp_path: Path, completed: bool = True) -> Path:
    """The copy-on-write fixture after Hudi 0.14's ``ALTER TABLE t RENAME COLUMN name TO full_name``
    with ``hoodie.schema.on.read.enable=true``, as ``AlterTableCommand.commitWithSchema`` commits
    it: an empty ``commit`` (ALTER_SCHEMA) with the renamed Avro ``schema`` and the InternalSchema
    as ``latest_schema`` in its extraMetadata, and the schema history in
    ``.hoodie/.schema/<instant>.schemacommit``. The data files keep the column ``name``."""
    table = extract_table(fixtures_root() / "tables" / "cow" / "v6_simplekeygen_nonhivestyle.zip", tmp_path)
    hoodie = table / ".hoodie"
    last = sorted(p.name for p in hoodie.glob("*.commit"))[-1]
    schema = json.loads(json.loads((hoodie / last).read_text())["extraMetadata"]["schema"])
    for field in schema["fields"]:
        if field["name"] == "name":
            field["name"] = "full_name"
    internal = {  # ids by position, as Hudi converts the Avro schema (abridged types)
        "max_column_id": len(schema["fields"]) - 1,
        "version_id": int(_ALTER),
        "type": "record",
        "fields": [
            {"id": i, "name": f["name"], "optional": True, "type": "int"} for i, f in enumerate(schema["fields"])
        ],
    }
    meta = {
        "partitionToWriteStats": {},
        "compacted": False,
        "operationType": "ALTER_SCHEMA",
        "extraMetadata": {"schema": json.dumps(schema), "latest_schema": json.dumps(internal)},
    }
    (hoodie / f"{_ALTER}.commit.requested").write_text("")
    (hoodie / f"{_ALTER}.inflight").write_text(json.dumps({"operationType": "ALTER_SCHEMA"}))
    if completed:
        (hoodie / f"{_ALTER}.commit").write_text(json.dumps(meta))
    (hoodie / ".schema").mkdir(exist_ok=True)  # Hudi creates it empty with every table
    (hoodie / ".schema" / f"{_ALTER}.schemacommit").write_text(json.dumps({"schemas": [internal]}))
    return table


def test_a_table_with_schema_on_read_is_neither_read_nor_written_rows(tmp_path: Path) -> None:
    """After a RENAME COLUMN the files keep the old name, which Apache Hudi maps by column id:
    tidemark's upsert wrote the renamed column as null in every row it copied (Carol's full_name
    lost for good), and its read showed the old name. Both are refused, naming the history;
    commands that write no rows (a clean) go on, as Hudi's own cleaner does on such a table."""
    table = _renamed_by_alter_table(tmp_path)
    path = str(table)
    history = f"{table}/.hoodie/.schema/{_ALTER}.schemacommit"
    found = (
        "the table has Hudi's comprehensive schema evolution (schema on read: "
        f"hoodie.schema.on.read.enable=true; its column history is in {history})"
    )
    code, out, err = _run("table", "read", path, "--format", "jsonl")
    assert (code, out) == (1, ""), err
    assert f"refusing to read: {found}" in err
    assert "read this table with Apache Hudi's reader" in err
    # what the table holds is still shown: its slices and log blocks, no rows (it was refused)
    code, out, err = _run("table", "show", path)
    assert code == 0, err
    assert "partitions: " in out
    row = {"id": 1, "full_name": "Alicia", "longField": 100000, "byteField": 10}
    (tmp_path / "input.jsonl").write_text(json.dumps(row) + "\n")
    before = listing(table)
    commands = {
        # its other columns filled with nulls, as a write would (its columns fit by name)
        "write": [
            *("write", path, "--input", str(tmp_path / "input.jsonl"), "--operation", "upsert"),
            *("--conf", "hoodie.write.set.null.for.missing.columns=true"),
        ],
        "compact": ["compact", path, "--engine", "local"],
    }
    for verb, argv in commands.items():
        for extra in ([], DISABLE):
            code, out, err = _run(*argv, *extra)
            assert (code, out) == (1, ""), (verb, out, err)
            line = err.strip().splitlines()[-1]  # after the JVM's own warnings, where Spark runs
            assert f"refusing to {verb}: {found}" in line
            assert "could write a renamed column as null in every row it rewrites. Nothing was changed" in line
            assert listing(table) == before, f"{verb} {extra} changed storage"
    code, _, err = _run("clean", path)
    assert code == 0, err


def test_a_schema_history_of_a_write_that_did_not_complete_is_ignored_as_hudi_ignores_it(tmp_path: Path) -> None:
    table = _renamed_by_alter_table(tmp_path, completed=False)
    code, rows, err = _run("table", "read", str(table), "--format", "jsonl")
    assert code == 0, err
    assert all("name" in json.loads(r) for r in rows.splitlines())
