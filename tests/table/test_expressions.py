"""The merge_update expressions as tidemark's reader evaluates them: as Spark SQL computes them
at write time, so that both readers of a table agree."""

from __future__ import annotations

import math
from decimal import Decimal

import pyarrow as pa
import pytest

from tidemark.errors import TableError
from tidemark.table.expressions import apply_expressions, column_types, evaluate


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
    assert evaluate(text, row, {"v": 32}) == expected


#: a table's columns as a merge_update's block schema gives them
_TYPES = pa.schema([("n", pa.int32()), ("m", pa.int64()), ("s", pa.int16()), ("b", pa.int8()), ("x", pa.float64())])


@pytest.mark.parametrize(
    ("text", "row", "expected"),
    [
        # what Spark SQL gives without ANSI mode (spark.sql.ansi.enabled=false), which the write's
        # log blocks carry: the integers wrap at their type's width. Python's do not: the Spark
        # source failed ("Integer value 10737418235 not in range"), a long overflowed converting
        # ("Python int too large to convert to C long"), a compaction wrote a value Hudi read as null
        ("n * 2147483647", {"n": 5}, 2147483643),
        ("m * 9223372036854775807", {"m": 7}, 9223372036854775801),
        ("n + 1", {"n": 2147483647}, -2147483648),
        ("-n", {"n": -2147483648}, -2147483648),
        ("n - 1", {"n": -2147483648}, 2147483647),
        ("n % -1", {"n": -2147483648}, 0),
        # an int with a long (a column, or a literal beyond int) is a long
        ("n * 3000000000", {"n": 5}, 15000000000),
        ("n * m", {"n": 2147483647, "m": 2}, 4294967294),
        ("n - 2147483648", {"n": 5}, -2147483643),
        # "-2147483648" is an int literal in Spark SQL; "-(2147483648)" the negation of a long
        ("n + -2147483648", {"n": -1}, 2147483647),
        ("n + -(2147483648)", {"n": -1}, -2147483649),
        ("m * -9223372036854775808", {"m": 7}, -9223372036854775808),
        # byte and short: of their own width between themselves, an int with an int literal
        ("b * b", {"b": 100}, 16),
        ("s * s", {"s": 300}, 24464),
        ("b + s", {"b": 100, "s": 300}, 400),
        ("b * 2", {"b": 100}, 200),
        # with a double, a double; "/" divides doubles (an exact quotient of two longs may differ)
        ("x + n * 2147483647", {"x": 0.5, "n": 5}, 2147483643.5),
        ("m / 3", {"m": 7}, 7 / 3),
        ("m / 3", {"m": 2**53 + 1}, float(2**53) / 3),
        ("n * 2147483647", {"n": None}, None),
    ],
)
def test_integers_wrap_as_spark_sql_without_ansi(text: str, row: dict[str, object], expected: object) -> None:
    assert evaluate(text, row, column_types(_TYPES)) == expected


def test_what_spark_sql_has_not_is_refused() -> None:
    with pytest.raises(TableError, match=r"FloorDiv is not allowed \(use \+ - \* / %"):
        evaluate("v // 2", {"v": 4}, {})


#: a table with a decimal(10,2) column, as a merge_update's block schema gives it
_DECIMALS = column_types(pa.schema([("price", pa.decimal128(10, 2)), ("n", pa.int32()), ("x", pa.float64())]))


@pytest.mark.parametrize(
    ("text", "price", "expected"),
    [
        # exact decimals, rounded half up to the column's type, where floats gave 2.67 (and
        # ``price % price`` the double 0.0): what Spark SQL wrote to the log blocks
        ("price + 0.005", "2.67", Decimal("2.68")),
        ("price * 1.1", "2.67", Decimal("2.94")),
        ("price / 3", "2.00", Decimal("0.67")),
        ("price % price", "2.67", Decimal("0.00")),
        ("-price % 0.7", "2.67", Decimal("-0.57")),
        # an overflow of the column's type is null (Spark without ANSI mode)
        ("price * 10", "99999999.99", None),
        ("price / 0", "2.67", None),
    ],
)
def test_decimals_are_exact_and_cast_to_their_column(text: str, price: str, expected: object) -> None:
    got = apply_expressions({"price": text}, {"price": Decimal(price), "n": 7, "x": 0.5}, _DECIMALS)["price"]
    assert repr(got) == repr(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the result's own type: decimal(13,3), decimal(14,6), decimal(21,2); with a double, a double
        ("price * 1.1", Decimal("2.937")),
        ("price / 3", Decimal("0.890000")),
        ("price * n", Decimal("18.69")),
        ("price * 1.5e0", 2.67 * 1.5),
        ("x * 1.1", 0.5 * 1.1),
    ],
)
def test_decimal_operations_take_spark_sql_types(text: str, expected: object) -> None:
    assert repr(evaluate(text, {"price": Decimal("2.67"), "n": 7, "x": 0.5}, _DECIMALS)) == repr(expected)


#: float (32-bit) columns beside the other types, as a merge_update's block schema gives them
_FLOATS = column_types(
    pa.schema([("a", pa.float32()), ("b", pa.float32()), ("c", pa.float32()), ("n", pa.int32()), ("m", pa.int64())])
    .append(pa.field("x", pa.float64()))
    .append(pa.field("price", pa.decimal128(10, 2)))
)
#: float32 values (as read from a float column)
_A, _B, _C = 948.6494750976562, 311.8314514160156, 423.3264465332031


@pytest.mark.parametrize(
    ("text", "row", "expected"),
    [
        # Spark's float arithmetic rounds each step to 32 bits: Apache's reader shows 125227904.0,
        # tidemark's reader (computing in doubles, rounding once) showed 125227896.0
        ("a * b * c", {"a": _A, "b": _B, "c": _C}, 125227904.0),
        ("a * b * c + a", {"a": _A, "b": _B, "c": _C}, 125228856.0),
        # an int or long with a float is converted to a float first (16777217 has no float), a long
        # rounded once to 24 bits (through a double it would round to 2**60)
        ("a * n", {"a": 1.0, "n": 16777217}, 16777216.0),
        ("a * m", {"a": 1.0, "m": 2**60 + 2**36 + 1}, float(2**60 + 2**37)),
        ("a + 1", {"a": 16777216.0}, 16777216.0),
        ("-a % b", {"a": _A, "b": _B}, -13.155120849609375),
        # beyond the largest float: infinite, as Java's float
        ("a * a", {"a": 3.0000000054977558e38}, math.inf),
        # divided, or with a double or a decimal: a double
        ("a / 3", {"a": 1.0}, 1.0 / 3),
        ("a * x", {"a": 16777216.0, "x": 1.0}, 16777216.0),
        ("a + x", {"a": 16777216.0, "x": 1.0}, 16777217.0),
        ("a + 1.5", {"a": 16777216.0}, 16777217.5),
        ("a + price", {"a": 16777216.0, "price": Decimal("1.25")}, 16777217.25),
        ("a + b", {"a": None, "b": 1.0}, None),
    ],
)
def test_floats_round_to_32_bits_each_step_as_spark_sql(text: str, row: dict[str, object], expected: object) -> None:
    assert repr(evaluate(text, row, _FLOATS)) == repr(expected)


def test_float_column_gets_spark_sql_value() -> None:
    row = {"a": _A, "b": _B, "c": _C}
    assert apply_expressions({"a": "a * b * c"}, row, _FLOATS) == {"a": 125227904.0}
