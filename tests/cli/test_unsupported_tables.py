"""Tables with Hudi features tidemark would misread or leave stale are refused, with the feature
named, before anything is read or changed: ORC base files, a bootstrapped table, partition columns
dropped from the files (every command), and change data capture (every command that changes the
table; its reads are ordinary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_metadata_table_guard import DISABLE, _run
from tests.support.cli import listing
from tests.support.fixtures import extract_table, fixtures_root
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
