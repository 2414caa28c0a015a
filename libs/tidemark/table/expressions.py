"""Column expressions for MERGE-INTO-like updates (``fare = fare * 2``): arithmetic over the
record's current values and literals, evaluated when logs are merged. Only ``+ - * / %``, unary
signs, column names, numbers and parentheses; a null operand gives null. The write computes the
same expressions with Spark SQL, so each operator follows Spark's rule: ``%`` takes the sign of
the dividend (Java's remainder), ``/`` divides doubles, and integers are of Spark's types (a
column's, a literal's: ``int`` where it fits, else ``long``; an operation takes the wider of its
operands') and wrap at their width as Spark SQL does without ANSI mode (with it, the write fails)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import pyarrow as pa

from tidemark.errors import TableError

#: extraMetadata key of a commit whose data blocks hold expression updates: {"column": "expr"}
EXPRESSIONS_KEY = "tidemark.expressions"
#: table property set once a table holds expression blocks
EXPRESSION_BLOCKS_PROPERTY = "tidemark.expression.blocks"


#: an integer's Spark type as its width in bits (byte 8, short 16, int 32, long 64); None for a
#: fractional value, or a literal beyond ``long`` (a decimal in Spark: mixed with a double, a double)
Width = int | None
_INT, _LONG = 32, 64


def integer_widths(schema: pa.Schema) -> dict[str, int]:
    """The width of each integer column of ``schema`` (the schema the expressions' write had: the
    column types Spark computed with)."""
    return {f.name: f.type.bit_width for f in schema if pa.types.is_signed_integer(f.type)}


def _wrapped(value: int, width: int) -> int:
    """``value`` in two's complement of ``width`` bits: Spark's (Java's) integer overflow."""
    half = 1 << (width - 1)
    return (value + half) % (1 << width) - half


def _literal_width(value: int) -> Width:
    """Spark's type of an integer literal: ``int`` where it fits, else ``long``, else a decimal."""
    for width in (_INT, _LONG):
        if -(1 << (width - 1)) <= value < 1 << (width - 1):
            return width
    return None


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


def evaluate(text: str, row: Mapping[str, Any], widths: Mapping[str, int]) -> Any:
    """The expression's value for ``row``; ``widths``: the bits of the row's integer columns
    (:func:`integer_widths`), an integer column not named there taken as ``long``."""
    return _eval(compile_expression(text), row, widths, text)[0]


def _eval(node: ast.expr, row: Mapping[str, Any], widths: Mapping[str, int], text: str) -> tuple[Any, Width]:
    """The node's value and its Spark type's width."""
    if isinstance(node, ast.Constant):
        return node.value, _literal_width(node.value) if isinstance(node.value, int) else None
    if isinstance(node, ast.Name):
        # a column added to the table after the row was written is null in it (the write checked
        # that the table has the column)
        value = row.get(node.id)
        return value, widths.get(node.id, _LONG) if isinstance(value, int) else None
    if isinstance(node, ast.UnaryOp):
        literal = _negative_literal(node, text)
        if literal is not None:
            return literal, _literal_width(literal)
        value, width = _eval(node.operand, row, widths, text)
        return None if value is None else _typed(_UNARY[type(node.op)](value), width), width
    if isinstance(node, ast.BinOp):
        (left, left_width), (right, right_width) = (
            _eval(node.left, row, widths, text),
            _eval(node.right, row, widths, text),
        )
        width = max(left_width, right_width) if left_width and right_width else None
        if left is None or right is None:
            return None, width
        try:
            return _typed(_BINARY[type(node.op)](left, right), width), width
        except (ZeroDivisionError, ValueError):
            return None, width  # as Spark SQL without ANSI mode: division by zero is null
    raise TableError(f"expression {text!r} is not supported")


def _typed(value: Any, width: Width) -> Any:
    return _wrapped(value, width) if width is not None and isinstance(value, int) else value


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
    expressions: Mapping[str, str], current: Mapping[str, Any], widths: Mapping[str, int]
) -> dict[str, Any]:
    """The values the expressions give for ``current`` (``widths``: as for :func:`evaluate`)."""
    return {column: evaluate(text, current, widths) for column, text in expressions.items()}
