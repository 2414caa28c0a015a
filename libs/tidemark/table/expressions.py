"""Column expressions for MERGE-INTO-like updates (``fare = fare * 2``): arithmetic over the
record's current values and literals, evaluated when logs are merged. Only ``+ - * / %``, unary
signs, column names, numbers and parentheses; a null operand gives null. The write computes the
same expressions with Spark SQL, so each operator follows Spark's rule: ``%`` takes the sign of
the dividend (Java's remainder)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from tidemark.errors import TableError

#: extraMetadata key of a commit whose data blocks hold expression updates: {"column": "expr"}
EXPRESSIONS_KEY = "tidemark.expressions"
#: table property set once a table holds expression blocks
EXPRESSION_BLOCKS_PROPERTY = "tidemark.expression.blocks"


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
    ast.Div: operator.truediv,
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


def evaluate(text: str, row: Mapping[str, Any]) -> Any:
    return _eval(compile_expression(text), row, text)


def _eval(node: ast.expr, row: Mapping[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        # a column added to the table after the row was written is null in it (the write checked
        # that the table has the column)
        return row.get(node.id)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, row, text)
        return None if value is None else _UNARY[type(node.op)](value)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, row, text), _eval(node.right, row, text)
        if left is None or right is None:
            return None
        try:
            return _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, ValueError):
            return None  # as Spark SQL without ANSI mode: division by zero is null
    raise TableError(f"expression {text!r} is not supported")


def apply_expressions(expressions: Mapping[str, str], current: Mapping[str, Any]) -> dict[str, Any]:
    """The values the expressions give for ``current``."""
    return {column: evaluate(text, current) for column, text in expressions.items()}
