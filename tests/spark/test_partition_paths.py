"""Partition values that would put files somewhere other than their partition's folder: ``.``,
``..`` and empty folder names, and one partition's folder inside another's, which Apache's readers
do not look into. Refused before their files are committed; the table keeps what it held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tidemark.spark
from tests.support.model import apache_snapshot
from tidemark.errors import TableError
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import load_timeline

pytestmark = pytest.mark.spark

OPTIONS = {
    "hoodie.table.name": "parts",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "city",
}


def write(spark: Any, path: Path, cities: list[str], **options: str) -> None:
    df = spark.createDataFrame([(f"k-{city}", 1, city) for city in cities], "id string, ts long, city string")
    tidemark.spark.write(df, str(path), **OPTIONS, **options)


def keys(path: Path) -> tuple[list[str], list[str]]:
    return (
        sorted(read_snapshot(LocalStorage(path)).column("id").to_pylist()),
        sorted(apache_snapshot(str(path)).column("id").to_pylist()),
    )


# URL-encoding escapes a '/', not a '.'
@pytest.mark.parametrize(("city", "urlencode"), [(".", "true"), ("..", "true"), ("..", "false"), ("a//b", "false")])
def test_a_value_naming_no_folder_of_its_own_is_refused_before_anything_is_written(
    spark: Any, tmp_path: Path, city: str, urlencode: str
) -> None:
    with pytest.raises(TableError, match=r"a folder name in it is empty, '\.' or '\.\.'"):
        write(spark, tmp_path / "t", ["ok", city], **{"hoodie.datasource.write.partitionpath.urlencode": urlencode})
    assert not (tmp_path / "t").exists()
    assert list(tmp_path.iterdir()) == []  # nothing landed beside the table either


def test_hive_style_keeps_such_values_in_folders_of_their_own(spark: Any, tmp_path: Path) -> None:
    write(spark, tmp_path / "t", ["ok", ".", ".."], **{"hoodie.datasource.write.hive_style_partitioning": "true"})
    assert keys(tmp_path / "t") == (["k-.", "k-..", "k-ok"], ["k-.", "k-..", "k-ok"])


def test_one_partition_inside_another_is_refused_in_one_write_or_across_two(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(TableError, match=r"partition path 'x/y' would be a folder inside partition 'x'"):
        write(spark, tmp_path / "one", ["x", "x/y"])
    assert not (tmp_path / "one").exists()

    for first, second, says in (
        ("x/y", "x", "partition path 'x' would hold partition 'x/y'"),
        ("x", "x/y", "partition path 'x/y' would be a folder inside partition 'x'"),
    ):
        table = tmp_path / first.replace("/", "_")
        write(spark, table, [first])
        with pytest.raises(TableError, match=says):
            write(spark, table, [second])
        # the refused write is rolled back: every reader reads the first write alone
        assert keys(table) == ([f"k-{first}"], [f"k-{first}"])
        assert not load_timeline(LocalStorage(table)).pending().write_instants().instants
