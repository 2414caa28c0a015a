"""The merge_update expressions as tidemark's reader evaluates them: as Spark SQL computes them
at write time, so that both readers of a table agree."""

from __future__ import annotations

import pytest

from tidemark.errors import TableError
from tidemark.table.expressions import evaluate


@pytest.mark.parametrize(
    ("text", "row", "expected"),
    [
        # Spark's (Java's) remainder takes the dividend's sign; Python's takes the divisor's
        ("v % 3", {"v": -7}, -1),
        ("v % -3", {"v": 7}, 1),
        ("v % 3", {"v": -7.5}, -1.5),
        ("v * 2 + 1", {"v": 4}, 9),
        ("v / 0", {"v": 4.0}, None),
        ("v % 0", {"v": 4}, None),
        ("v + 1", {"v": None}, None),
        # a column added after the row was written is null in it: the read and the compaction
        # failed on such a row ("names column 'w', which the table does not have")
        ("w + 1", {"v": 1}, None),
    ],
)
def test_expressions_evaluate_as_spark_sql(text: str, row: dict[str, object], expected: object) -> None:
    assert evaluate(text, row) == expected


def test_what_spark_sql_has_not_is_refused() -> None:
    with pytest.raises(TableError, match=r"FloorDiv is not allowed \(use \+ - \* / %"):
        evaluate("v // 2", {"v": 4})
