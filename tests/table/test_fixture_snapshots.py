"""tidemark's snapshot of every table Apache Hudi wrote equals what its SQL implies and what
Apache's own reader (the ``hudi`` package, hudi-rs) returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.fixtures import extract_table, fixtures_root, sql_model, sql_primary_key, table_zips
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import META_COLUMNS, read_snapshot

TABLES = [p.relative_to(p.parents[1]).with_suffix("").as_posix() for p in table_zips()]


def _apache_snapshot(path: Path) -> pa.Table:
    hudi = pytest.importorskip("hudi", reason="Apache's hudi reader (hudi-rs) is not installed")
    batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    data = [c for c in table.column_names if c not in META_COLUMNS]
    return sorted(table.select(sorted(data)).to_pylist(), key=repr)


def _scalars_match(model: dict[str, Any], row: dict[str, Any]) -> None:
    for column, want in model.items():
        if isinstance(want, str) and "(" in want:
            continue  # CAST/ARRAY/STRUCT/MAP expressions: compared against Apache's reader instead
        got = row[column]
        if isinstance(want, float):
            assert float(got) == pytest.approx(want), column
        else:
            assert got == want, column


@pytest.mark.parametrize("name", TABLES or ["(fixtures missing)"])
def test_snapshot_equals_sql_and_apache_reader(name: str, tmp_path: Path) -> None:
    root = fixtures_root()
    zip_path = root / "tables" / f"{name}.zip"
    table_path = extract_table(zip_path, tmp_path)
    ours = read_snapshot(LocalStorage(table_path))

    assert _rows(ours) == _rows(_apache_snapshot(table_path))

    model = sql_model(zip_path.with_suffix(".sql"))
    key_cols = sql_primary_key(zip_path.with_suffix(".sql"))
    assert ours.num_rows == len(model)
    if not model:
        return
    by_key = {tuple(r[k] for k in key_cols): r for r in ours.to_pylist()}
    assert set(by_key) == set(model)
    for key, expected in model.items():
        _scalars_match(expected, by_key[key])


def test_meta_columns_are_hudi_s(tmp_path: Path) -> None:
    root = fixtures_root()
    table_path = extract_table(root / "tables/mor/v6_trips_8i1u.zip", tmp_path)
    ours = read_snapshot(LocalStorage(table_path))
    assert ours.column_names[:5] == list(META_COLUMNS)
    updated = [r for r in ours.to_pylist() if r["rider"] == "rider-D"]
    assert [r["_hoodie_commit_time"] for r in updated] == ["20250331030645735"]  # the UPDATE's deltacommit
