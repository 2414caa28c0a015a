"""merge_update expressions on decimals: tidemark evaluates them again, in Python, as it merges the
logs, and must get what Spark SQL computed for the write's log blocks (what Apache's reader reads).
It computed in floats, so ``price + 0.005`` of 2.67 read 2.67 where Spark wrote 2.68, and
``price % price`` read the double 0.0."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.model import apache_snapshot
from tests.support.spark import ansi_off
from tidemark.storage import open_storage
from tidemark.table.expressions import apply_expressions, column_types
from tidemark.table.snapshot import read_snapshot

pytestmark = pytest.mark.spark

#: the row the cases compute over, as Spark SQL and as tidemark's reader has it
_ROW = {
    "price": Decimal("2.67"),
    "round": Decimal("2.68"),
    "big": Decimal("12345678901234567890.1234567891"),
    "tiny": Decimal("0.0000000007"),
    "top": Decimal("99999999.99"),
    "n": 7,
    "m": 3000000000,
    "x": 0.5,
}
_SQL_ROW = (
    "select cast(2.67 as decimal(10,2)) price, cast(2.68 as decimal(10,2)) round, "
    "cast(12345678901234567890.1234567891 as decimal(38,10)) big, cast(0.0000000007 as decimal(10,10)) tiny, "
    "cast(99999999.99 as decimal(10,2)) top, 7 n, 3000000000L m, 0.5D x"
)
_TYPES = pa.schema(
    [
        ("price", pa.decimal128(10, 2)),
        ("round", pa.decimal128(10, 2)),
        ("big", pa.decimal128(38, 10)),
        ("tiny", pa.decimal128(10, 10)),
        ("top", pa.decimal128(10, 2)),
        ("n", pa.int32()),
        ("m", pa.int64()),
        ("x", pa.float64()),
    ]
)

#: expressions whose result type and value Spark decides by its decimal rules: literal typing,
#: integers with decimals, decimals with doubles, precision loss, division's scale, overflow
CASES = [
    "price * 1.1",
    "price + 0.005",
    "price - 0.005",
    "-price - 0.005",
    "price / 3",
    "price / 7 * 3",
    "price % 3",
    "-price % 0.7",
    "price % price",
    "price / 0",
    "price % 0",
    "price * n",
    "price * m",
    "price * 3000000000",
    "price * -3",
    "price * -(3)",
    "price * (3 + 4)",
    "price * 12345678901234567890123",
    "price + .5",
    "price + 1.",
    "price * 1.5e0",
    "price + x",
    "x * 1.1",
    "round / 4",
    "big * big",
    "big * 1.1",
    "big / 7",
    "big / 0.0007",
    "big / tiny",
    "big % 0.0007",
    "big + tiny",
    "tiny * tiny",
    "tiny / 3",
    "top * 10",
    "top + 0.01",
    "top * 1.00000001",
    "n / 2",
    "n * 1.5",
    "-top * top * top * top * top",
]


def _tidemark(text: str) -> Any:
    """tidemark's value, cast to a decimal(10,2) column where it is a decimal, as the write does."""
    types = {**column_types(_TYPES), "out": (10, 2)}
    return apply_expressions({"out": text}, _ROW, types)["out"]


def _spark(spark: Any, text: str) -> Any:
    result = spark.sql(f"select {text} r from ({_SQL_ROW})").selectExpr(
        "case when typeof(r) like 'decimal%' then cast(r as decimal(10,2)) end d", "r"
    )
    row = result.collect()[0]
    kind = result.schema["r"].dataType.simpleString()
    return row["d"] if kind.startswith("decimal") else row["r"]


def test_decimal_expressions_evaluate_as_spark_sql(spark: Any) -> None:
    with ansi_off(spark):
        expected = {text: _spark(spark, text) for text in CASES}
    got = {text: _tidemark(text) for text in CASES}
    assert {text: repr(v) for text, v in got.items()} == {text: repr(v) for text, v in expected.items()}


def test_raw_decimal_results_are_of_spark_sql_types(spark: Any) -> None:
    """Before the column's cast: the value of each operation, and a decimal's scale, which is its
    Spark type's (pyspark's conversion may change a decimal's exponent: its type tells)."""
    from tidemark.table.expressions import evaluate

    def shown(value: Any) -> Any:
        return (value, -int(value.as_tuple().exponent)) if isinstance(value, Decimal) else value

    with ansi_off(spark):
        expected = {}
        for text in CASES:
            result = spark.sql(f"select {text} r from ({_SQL_ROW})")
            value, kind = result.collect()[0]["r"], result.schema["r"].dataType
            expected[text] = (value, kind.scale) if isinstance(value, Decimal) else value
    assert {text: shown(evaluate(text, _ROW, column_types(_TYPES))) for text in CASES} == expected


def test_merge_update_on_a_decimal_column_reads_alike_before_and_after_compaction(spark: Any, tmp_path: Path) -> None:
    """Every reader, before and after compaction, reads what Spark computed: rounded half up to
    the column's decimal(10,2), null where it overflows (without ANSI mode)."""
    from tidemark.spark.datasource import register
    from tidemark.spark.write_job import WriteOptions, write_dataframe
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    rows = spark.sql(
        "select 'a' id, 1L ts, cast(2.67 as decimal(10,2)) price, 0.5D x, 'x' p "
        "union all select 'b', 1L, cast(99999999.99 as decimal(10,2)), 1.5D, 'x'"
    )
    write_dataframe(rows, location, WriteOptions("upsert", ("id",), "ts", ("p",), table_type="MERGE_ON_READ"))
    keys = spark.createDataFrame([("a", "x"), ("b", "x")], "id string, p string")
    with ansi_off(spark):
        expressions = {"price": "price * 1.1 + 0.005", "x": "x * 1.1"}
        write_dataframe(keys, location, WriteOptions("merge_update", set_expressions=expressions))
        write_dataframe(keys, location, WriteOptions("merge_update", set_expressions={"price": "price / 3"}))
    register(spark)

    def readers() -> dict[str, list[dict[str, Any]]]:
        source = spark.read.format("tidemark").load(location).select("id", "price", "x")
        return {
            "read_snapshot": read_snapshot(open_storage(location)).select(["id", "price", "x"]).to_pylist(),
            "apache": apache_snapshot(location).select(["id", "price", "x"]).to_pylist(),
            "spark source": [r.asDict() for r in source.collect()],
        }

    # 2.67 * 1.1 + 0.005 = 2.9420 -> 2.94; / 3 = 0.98; 99999999.99 * 1.1 overflows decimal(10,2)
    spark_sql = [
        {"id": "a", "price": Decimal("0.98"), "x": 0.5 * 1.1},
        {"id": "b", "price": None, "x": 1.5 * 1.1},
    ]
    assert {k: sorted(v, key=lambda r: r["id"]) for k, v in readers().items()} == dict.fromkeys(
        ["read_snapshot", "apache", "spark source"], spark_sql
    )
    assert compact(open_storage(location)) is not None
    assert {k: sorted(v, key=lambda r: r["id"]) for k, v in readers().items()} == dict.fromkeys(
        ["read_snapshot", "apache", "spark source"], spark_sql
    )
