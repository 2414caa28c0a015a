"""Column expressions for MERGE-INTO-like updates (``fare = fare * 2``): arithmetic over the
record's current values and literals, evaluated when logs are merged. Only ``+ - * / %``, unary
signs, column names, numbers and parentheses; a null operand gives null. The write computes the
same expressions with Spark SQL, so each operator follows Spark's rule: ``%`` takes the sign of
the dividend (Java's remainder), ``/`` divides doubles, and integers are of Spark's types (a
column's, a literal's: ``int`` where it fits, else ``long``; an operation takes the wider of its
operands') and wrap at their width as Spark SQL does without ANSI mode (with it, the write fails).
A ``float`` (32-bit) with a ``float`` or an integer is a ``float``, rounded to 32 bits after each
operation as Spark's (Java's) float arithmetic rounds; with a double or a decimal, or divided, a double.
Decimals are exact, of Spark's decimal types: a literal with a fraction is a decimal of its digits
(``1.1`` a ``decimal(2,1)``; with an exponent, a double), an integer with a decimal is one too (a
column by its type, ``int`` as ``decimal(10,0)``; a literal of its digits), a decimal with a double
is a double, and each operation's type follows Spark's rules (``allowPrecisionLoss``, its default:
at most 38 digits, keeping a scale of 6), its value rounded half up to it, null where it overflows.
A decimal column's value is then cast to its type, as the write casts it."""

from __future__ import annotations

import ast
import decimal
import math
import operator
import struct
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final, Literal, NamedTuple

import pyarrow as pa

from tidemark.errors import TableError

#: extraMetadata key of a commit whose data blocks hold expression updates: {"column": "expr"}
EXPRESSIONS_KEY = "tidemark.expressions"
#: table property set once a table holds expression blocks
EXPRESSION_BLOCKS_PROPERTY = "tidemark.expression.blocks"


#: a decimal's Spark type: (precision, scale)
DecimalType = tuple[int, int]
#: Spark's ``FloatType`` (32 bits; a double's type is None)
FLOAT: Final = "float"
#: a column's Spark type where an expression needs it: an integer's width in bits (byte 8, short
#: 16, int 32, long 64), a decimal's precision and scale, or :data:`FLOAT`
ColumnType = int | DecimalType | Literal["float"]
#: a value's Spark type: a column type, or None for a double
Kind = ColumnType | None
_INT, _LONG = 32, 64
#: Spark's largest decimal precision, and the least scale its precision-loss adjustment keeps
_MAX_PRECISION, _MIN_ADJUSTED_SCALE = 38, 6
#: the decimal type of an integer column in an operation with a decimal (Spark's ``forType``)
_INTEGER_AS_DECIMAL = {8: (3, 0), 16: (5, 0), 32: (10, 0), 64: (20, 0)}
#: Spark multiplies decimals (Java's BigDecimal) to 39 digits, rounding half up, then rounds to
#: the result's type; a division it takes to a scale of 39 first
_SPARK_DIGITS = decimal.Context(prec=_MAX_PRECISION + 1, rounding=decimal.ROUND_HALF_UP)
#: exact for any two decimals of at most 38 digits
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)


class Typed(NamedTuple):
    """A value with its Spark type; ``literal``: an integer written as a number, which Spark takes
    as a decimal of its digits with a decimal (``3`` a ``decimal(1,0)``)."""

    value: Any
    kind: Kind
    literal: bool = False


def column_types(schema: pa.Schema) -> dict[str, ColumnType]:
    """The type of each integer, decimal and float column of ``schema`` (the schema the
    expressions' write had: the column types Spark computed with)."""
    types: dict[str, ColumnType] = {}
    for f in schema:
        if pa.types.is_signed_integer(f.type):
            types[f.name] = f.type.bit_width
        elif pa.types.is_decimal(f.type):
            types[f.name] = (f.type.precision, f.type.scale)
        elif pa.types.is_float32(f.type):
            types[f.name] = FLOAT
    return types


def _wrapped(value: int, width: int) -> int:
    """``value`` in two's complement of ``width`` bits: Spark's (Java's) integer overflow."""
    half = 1 << (width - 1)
    return (value + half) % (1 << width) - half


def _float32(value: float | int) -> float:
    """``value`` rounded to the nearest 32-bit float (ties to even), as Java's float arithmetic and
    its int and long to float conversions round; infinite beyond the largest."""
    if isinstance(value, int) and abs(value).bit_length() > 53:
        # a long of more than 53 bits rounded straight to 24, not twice (through a double)
        shift = abs(value).bit_length() - 24
        quotient, remainder = divmod(abs(value), 1 << shift)
        half = 1 << (shift - 1)
        quotient += remainder > half or (remainder == half and quotient & 1)
        value = (quotient << shift) * (-1 if value < 0 else 1)
    try:
        return float(struct.unpack("f", struct.pack("f", float(value)))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def _literal_kind(value: int) -> Kind:
    """Spark's type of an integer literal: ``int`` where it fits, else ``long``, else a decimal."""
    for width in (_INT, _LONG):
        if -(1 << (width - 1)) <= value < 1 << (width - 1):
            return width
    return (len(str(abs(value))), 0)


def _divide(left: Any, right: Any) -> Any:
    """Spark's ``/``: of doubles, integers converted first (Python divides integers exactly)."""
    return float(left) / float(right)


def _remainder(left: Any, right: Any) -> Any:
    """Spark's (Java's) ``%``: the sign of the dividend (Python's takes the divisor's)."""
    if isinstance(left, int) and isinstance(right, int):
        if right == 0:
            raise ZeroDivisionError
        magnitude = abs(left) % abs(right)
        return -magnitude if left < 0 else magnitude
    return math.fmod(left, right)


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _divide,
    ast.Mod: _remainder,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


#: Spark's decimal arithmetic: each operation's exact (or 39-digit) value, which
#: :func:`_to_decimal_type` rounds to the result's type; a zero divisor raises (null)
_DECIMAL: dict[type, Callable[[Decimal, Decimal], Decimal]] = {
    ast.Add: _EXACT.add,
    ast.Sub: _EXACT.subtract,
    ast.Mult: _SPARK_DIGITS.multiply,
    ast.Div: lambda left, right: _EXACT.divide(left, right).quantize(Decimal(1).scaleb(-39), context=_EXACT),
    ast.Mod: _EXACT.remainder,  # the sign of the dividend, as Java's
}


def _adjusted(precision: int, scale: int) -> DecimalType:
    """Spark's ``DecimalType.adjustPrecisionScale``: a type beyond 38 digits keeps its integer
    digits and gives up scale, down to 6 (or the scale it had, if less)."""
    if precision <= _MAX_PRECISION:
        return precision, scale
    integer_digits = precision - scale
    return _MAX_PRECISION, max(_MAX_PRECISION - integer_digits, min(scale, _MIN_ADJUSTED_SCALE))


def _decimal_result(op: ast.operator, left: DecimalType, right: DecimalType) -> DecimalType:
    """The type of a decimal operation in Spark SQL (``allowPrecisionLoss``, its default)."""
    (p1, s1), (p2, s2) = left, right
    if isinstance(op, ast.Add | ast.Sub):
        scale = max(s1, s2)
        return _adjusted(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if isinstance(op, ast.Mult):
        return _adjusted(p1 + p2 + 1, s1 + s2)
    if isinstance(op, ast.Div):
        scale = max(_MIN_ADJUSTED_SCALE, s1 + p2 + 1)
        return _adjusted(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)
    return _adjusted(min(p1 - s1, p2 - s2) + scale, scale)


def _as_decimal_type(operand: Typed) -> DecimalType:
    """The decimal type an operand of a decimal operation has: an integer literal of its digits,
    an integer column of its width's, a decimal of its own."""
    kind = operand.kind
    if isinstance(kind, tuple):
        return kind
    if operand.literal and isinstance(operand.value, int):
        return (len(str(abs(operand.value))), 0)
    return _INTEGER_AS_DECIMAL.get(kind if isinstance(kind, int) else _LONG, (20, 0))


def _to_decimal_type(value: Decimal | int, kind: DecimalType) -> Decimal | None:
    """``value`` rounded half up to the type; None where it overflows (Spark without ANSI mode)."""
    precision, scale = kind
    rounded = Decimal(value).quantize(Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP, context=_EXACT)
    return None if abs(rounded.scaleb(scale, context=_EXACT)) >= 10**precision else rounded


def _decimal_kind(value: Decimal) -> DecimalType:
    """The type of a decimal whose column's is not known (a block without a schema): its digits."""
    scale = max(-int(value.as_tuple().exponent), 0)
    return max(len(value.as_tuple().digits), scale), scale


@lru_cache(maxsize=256)
def compile_expression(text: str) -> ast.expr:
    """Parse and check an expression; raises :class:`TableError` naming what is not allowed."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise TableError(f"expression {text!r} cannot be parsed: {e.msg}") from e
    for node in ast.walk(tree):
        allowed = (
            isinstance(node, ast.BinOp | ast.UnaryOp | ast.Name | ast.Load)
            or (
                isinstance(node, ast.Constant)
                and isinstance(node.value, int | float)
                and not isinstance(node.value, bool)
            )
            or type(node) in _BINARY
            or type(node) in _UNARY
        )
        if not allowed:
            raise TableError(
                f"expression {text!r}: {type(node).__name__} is not allowed (use + - * / %, columns and numbers)"
            )
    return tree


def columns_of(text: str) -> set[str]:
    return {n.id for n in ast.walk(compile_expression(text)) if isinstance(n, ast.Name)}


def evaluate(text: str, row: Mapping[str, Any], types: Mapping[str, ColumnType]) -> Any:
    """The expression's value for ``row``; ``types``: the types of the row's integer, decimal and float
    columns (:func:`column_types`), an integer column not named there taken as ``long``."""
    return _eval(compile_expression(text), row, types, text).value


def _eval(node: ast.expr, row: Mapping[str, Any], types: Mapping[str, ColumnType], text: str) -> Typed:
    """The node's value and its Spark type."""
    if isinstance(node, ast.Constant):
        return _constant(node, text)
    if isinstance(node, ast.Name):
        # a column added to the table after the row was written is null in it (the write checked
        # that the table has the column)
        return _column(row.get(node.id), types.get(node.id))
    if isinstance(node, ast.UnaryOp):
        literal = _negative_literal(node, text)
        if literal is not None:
            return Typed(literal, _literal_kind(literal), literal=True)
        value, kind, _ = _eval(node.operand, row, types, text)
        return Typed(None if value is None else _typed(_UNARY[type(node.op)](value), kind), kind)
    if isinstance(node, ast.BinOp):
        return _binary(node.op, _eval(node.left, row, types, text), _eval(node.right, row, types, text))
    raise TableError(f"expression {text!r} is not supported")


def _constant(node: ast.Constant, text: str) -> Typed:
    """A literal as Spark SQL types it: an integer ``int``, ``long`` or a decimal by its size, a
    number with a fraction a decimal of its digits, one with an exponent a double."""
    if isinstance(node.value, int):
        return Typed(node.value, _literal_kind(node.value), literal=True)
    written = ast.get_source_segment(text, node) or ""
    if "e" in written.lower() or not written:
        return Typed(node.value, None)
    value = Decimal(written)
    scale = -int(value.as_tuple().exponent)
    return Typed(value, (max(len(value.as_tuple().digits), scale), scale))


def _column(value: Any, kind: ColumnType | None) -> Typed:
    """A column's value with its type (an integer column not known taken as ``long``)."""
    if value is None:
        return Typed(None, kind)
    if isinstance(value, Decimal):
        return Typed(value, kind if isinstance(kind, tuple) else _decimal_kind(value))
    if isinstance(value, int):
        return Typed(value, kind if isinstance(kind, int) else _LONG)
    if kind == FLOAT:
        return Typed(_float32(value), FLOAT)
    return Typed(value, None)


def _binary(op: ast.operator, left: Typed, right: Typed) -> Typed:
    """Spark's operation: of doubles where either is one, else of decimals where either is one,
    else of floats where either is one, else of integers of the wider type. A float with a decimal
    is a double (Spark casts the decimal to a double), and ``/`` divides doubles."""
    floats = FLOAT in (left.kind, right.kind)
    if left.kind is None or right.kind is None:
        kind: Kind = None
    elif isinstance(left.kind, tuple) or isinstance(right.kind, tuple):
        kind = None if floats else _decimal_result(op, _as_decimal_type(left), _as_decimal_type(right))
    elif floats:
        kind = None if isinstance(op, ast.Div) else FLOAT
    else:
        kind = max(left.kind, right.kind)
    if left.value is None or right.value is None:
        return Typed(None, kind)
    try:
        if isinstance(kind, tuple):
            exact = _DECIMAL[type(op)](Decimal(left.value), Decimal(right.value))
            return Typed(_to_decimal_type(exact, kind), kind)
        if kind == FLOAT:
            # computed in doubles, then rounded: for + - * % of two floats that is exactly Java's
            # float result (53 bits hold twice a float's 24 and more, so no second rounding differs)
            operands = (_float32(left.value), _float32(right.value))
        elif kind is None:
            operands = (float(left.value), float(right.value))
        else:
            operands = (left.value, right.value)
        return Typed(_typed(_BINARY[type(op)](*operands), kind), kind)
    except (ZeroDivisionError, ValueError, decimal.InvalidOperation, decimal.DivisionByZero):
        return Typed(None, kind)  # as Spark SQL without ANSI mode: division by zero is null


def _typed(value: Any, kind: Kind) -> Any:
    if kind == FLOAT and isinstance(value, float):
        return _float32(value)
    return _wrapped(value, kind) if isinstance(kind, int) and isinstance(value, int) else value


def _negative_literal(node: ast.UnaryOp, text: str) -> int | None:
    """The integer of a minus sign written before it (``-2147483648``, an ``int`` in Spark SQL, as
    its parser reads the sign as the literal's), None for anything else (``-(2147483648)``: the
    negation of a ``long``)."""
    operand = node.operand
    if not (isinstance(node.op, ast.USub) and isinstance(operand, ast.Constant) and isinstance(operand.value, int)):
        return None
    if "(" in (ast.get_source_segment(text, node) or "("):
        return None
    return -operand.value


def apply_expressions(
    expressions: Mapping[str, str], current: Mapping[str, Any], types: Mapping[str, ColumnType]
) -> dict[str, Any]:
    """The values the expressions give for ``current`` (``types``: as for :func:`evaluate`); a
    decimal column's cast to its type, as the write casts it."""
    values = {}
    for column, text in expressions.items():
        value, kind = evaluate(text, current, types), types.get(column)
        if isinstance(kind, tuple) and isinstance(value, Decimal):
            value = _to_decimal_type(value, kind)
        values[column] = value
    return values
