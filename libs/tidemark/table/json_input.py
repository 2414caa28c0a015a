"""JSON lines typed by a table's schema: what ``tidemark write --input x.jsonl`` reads when the
table exists.

A value is read as the column's Avro type, in the spellings ``tidemark table read --format
jsonl`` prints (so its output is accepted unchanged) and those Hudi's own JSON converter
(``MercifulJsonConverter``) accepts:

- ``int``/``long``: JSON integers in range; ``float``/``double``: numbers, and ``"nan"``,
  ``"inf"``, ``"-inf"`` (``NaN``, ``Infinity``, ``-Infinity`` too), as ``table read`` prints them;
- ``decimal(p,s)``: a number or a string, never rounded (Hudi's rule: at most ``s`` fractional
  digits that are not zero, at most ``p - s`` integer digits);
- ``date``: ``YYYY-MM-DD`` or days since 1970-01-01; ``timestamp-micros``/``-millis``:
  ISO-8601 (an offset is converted to UTC, none means UTC) or the number Hudi stores, micro- or
  milliseconds since the epoch; ``local-timestamp-*`` the same without a zone; all within
  0001-01-01 to 9999-12-31 (in UTC), what Python and Spark can show;
- ``string`` (and map keys): a JSON string that UTF-8 can hold (a lone surrogate escape,
  ``"\\ud800"``, is refused);
- ``bytes`` and ``fixed``: hex, as ``table read`` prints them;
- maps: JSON objects; arrays: JSON lists; records: JSON objects (a field the record does not
  have is refused), and a key missing from a line is null.

Lines are typed in batches with Arrow's JSON reader and an explicit schema (maps, which it
cannot declare, are inferred as records and turned into maps). Anything that path does not
type exactly (mixed spellings, a map value that might be null) is typed again line by line in
Python, which is also what names a value that does not fit. Top-level keys the table does not
have are reported per line, not typed: they are new columns for the caller to type.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import mmap
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from tidemark.errors import TableError

#: the doubles a float column can take: those that round to a finite float, the largest float's
#: half step up excluded (Java prints Float.MAX_VALUE as 3.4028235E38, a little above it)
_FLOAT32_LIMIT = (2 - 2**-24) * 2.0**127
_NON_FINITE = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf}
_NON_FINITE.update({"-inf": -math.inf, "-Infinity": -math.inf})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
#: an inferred record with more fields than this is not turned into a map on the fast path
_MAX_MAP_KEYS = 512
#: a timestamp's range, as Spark's and Python's: 0001-01-01 to 9999-12-31 (a value past it is
#: stored, but no reader can show it), in microseconds since the epoch
_FIRST_MICROS = (dt.datetime(1, 1, 1, tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
_LAST_MICROS = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
#: the same range for dates, in days since the epoch
_FIRST_DAY, _LAST_DAY = ((d - _EPOCH_DATE).days for d in (dt.date(1, 1, 1), dt.date(9999, 12, 31)))
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
#: seconds with more than six fraction digits, finer than a timestamp column keeps
_SUB_MICROS = re.compile(r":\d\d[.,]\d{7,}")
#: an ISO-8601 date's year and the rest, to tell a year outside 1 to 9999 from a misspelling
_YEAR = re.compile(r"\s*([+-]?\d+)(-\d\d-\d\d.*)", re.DOTALL)
#: half of a surrogate pair: JSON can escape one alone (``"\ud800"``), UTF-8 cannot hold it
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonInputError(TableError):
    """A line whose value does not fit its column's type (or that is no JSON object)."""

    def __init__(
        self, index: int, line: str, column: str | None, value: str, expected: str, problem: str | None = None
    ) -> None:
        self.index = index  # the line's position among the lines given (0-based, blank lines counted)
        self.line = line
        self.column = column
        self.value = value
        self.expected = expected
        #: what is wrong with a value of the right kind (out of range); None: it is not ``expected``
        self.problem = problem
        super().__init__(self.describe(f"line {index + 1}"))

    def describe(self, where: str) -> str:
        what = f"{self.value} {self.problem or f'is not {self.expected}'}"
        return f"{where}: {what}" if self.column is None else f"{where}, column {self.column}: {what}"


@dataclass(frozen=True)
class TypedLines:
    table: pa.Table
    #: per row: whether its line has top-level keys (with values) that the schema does not
    unknown: pa.BooleanArray
    #: the schema's columns some line holds as a key (even with a null value); one that none holds
    #: is a column the input lacks, as Spark's JSON reader would give it to Hudi
    held: frozenset[str]


class _BadValueError(Exception):
    def __init__(self, column: str, value: Any, expected: str, problem: str | None = None) -> None:
        super().__init__(column)
        self.column, self.value, self.expected, self.problem = column, value, expected, problem


def _outside(column: str, value: Any, t: pa.DataType, how: str = "") -> _BadValueError:
    """A date or timestamp of the right spelling whose value no reader can show."""
    return _BadValueError(column, value, expected_name(t), f"is outside 0001-01-01 to 9999-12-31 {how}".rstrip())


def _unparsed(value: str, column: str, t: pa.DataType, parse: Any) -> _BadValueError:
    """Why ISO-8601 text ``parse`` refused is refused: its year (0, negative, five digits) when the
    same text in a year Python takes parses, else its spelling."""
    found = _YEAR.fullmatch(value)
    if found and not 1 <= int(found.group(1)) <= 9999:
        try:
            parse("2000" + found.group(2).rstrip())  # a leap year: 02-29 stays a day
        except ValueError:
            pass
        else:
            return _outside(column, value, t)
    return _BadValueError(column, value, expected_name(t))


class _NotExactError(Exception):
    """The fast path cannot type this batch exactly: the line-by-line path decides."""


def expected_name(t: pa.DataType) -> str:
    """A column type as the errors name it (Avro's names, and the JSON spellings accepted)."""
    if pa.types.is_boolean(t):
        return "a boolean"
    if pa.types.is_int32(t):
        return "an int"
    if pa.types.is_int64(t):
        return "a long"
    if pa.types.is_float32(t):
        return "a float"
    if pa.types.is_float64(t):
        return "a double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "a string"
    if pa.types.is_fixed_size_binary(t):
        return f"a fixed of {t.byte_width} bytes (hex)"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes (hex)"
    if pa.types.is_decimal(t):
        return f"a decimal({t.precision},{t.scale})"
    if pa.types.is_date32(t):
        return "a date (YYYY-MM-DD or days since 1970-01-01)"
    if pa.types.is_timestamp(t):
        unit = "micros" if t.unit == "us" else "millis"
        local = "" if t.tz else "local-"
        return f"a {local}timestamp-{unit} (ISO-8601 or {unit[:-1]}seconds since the epoch)"
    if pa.types.is_map(t):
        return "a map (a JSON object)"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "an array"
    if pa.types.is_struct(t):
        return "a record (a JSON object)"
    return str(t)


class _JsonNumber(decimal.Decimal):
    """A JSON number with a fraction or an exponent: exact, as a Decimal, and shown as the line
    wrote it. Decimal's own text normalises it (``1e0`` is ``1``, ``2e3`` is ``2E+3``), and an
    error that said ``1 is not a long`` named a value the line does not hold."""

    __slots__ = ("_text",)
    _text: str

    def __new__(cls, text: str) -> _JsonNumber:
        number = super().__new__(cls, text)
        number._text = text
        return number

    def __str__(self) -> str:
        return self._text


def _shown(value: Any) -> str:
    text = _escaped(_as_written(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _escaped(text: str) -> str:
    """``text`` with a lone surrogate escaped again, as the line wrote it: a message must print
    as UTF-8."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _as_written(value: Any) -> str:
    """A parsed JSON value as JSON again, its numbers as the line wrote them (json.dumps would
    quote a number it parsed as a Decimal)."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_as_written(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_as_written(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


# --- line by line: exact, and the one that names what does not fit --------------------------------


def _hex(value: Any, column: str, t: pa.DataType) -> bytes:
    if not isinstance(value, str) or not _HEX.fullmatch(value):
        raise _BadValueError(column, value, expected_name(t))
    data = bytes.fromhex(value)
    if pa.types.is_fixed_size_binary(t) and len(data) != t.byte_width:
        raise _BadValueError(column, value, expected_name(t))
    return data


def _decimal(value: Any, column: str, t: pa.Decimal128Type) -> decimal.Decimal:
    if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal | str):
        raise _BadValueError(column, value, expected_name(t))
    try:
        d = decimal.Decimal(value.strip() if isinstance(value, str) else value)
    except decimal.InvalidOperation:
        raise _BadValueError(column, value, expected_name(t)) from None
    if not d.is_finite():
        raise _BadValueError(column, value, expected_name(t))
    exact = decimal.Context(prec=t.precision + 40, traps=[decimal.Inexact, decimal.InvalidOperation])
    try:
        scaled = d.quantize(decimal.Decimal(1).scaleb(-t.scale), context=exact)
    except (decimal.Inexact, decimal.InvalidOperation):
        raise _BadValueError(column, value, expected_name(t)) from None  # it would be rounded (Hudi never rounds)
    if len(scaled.as_tuple().digits) > t.precision:
        raise _BadValueError(column, value, expected_name(t))
    return scaled


def _timestamp(value: Any, column: str, t: pa.TimestampType) -> int:
    per_second = 1_000_000 if t.unit == "us" else 1_000
    unit = "microseconds" if per_second == 1_000_000 else "milliseconds"
    if isinstance(value, int) and not isinstance(value, bool):
        micros = value * (1_000_000 // per_second)  # what Hudi stores: micro- or milliseconds since the epoch
        how = f"as {unit} since the epoch"
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _unparsed(value, column, t, dt.datetime.fromisoformat) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        micros = (moment - _EPOCH) // dt.timedelta(microseconds=1)
        finer = (found := _SUB_MICROS.search(value)) is not None and found.group()[10:].strip("0")
        if finer or (per_second == 1_000 and micros % 1_000):
            raise _BadValueError(column, value, expected_name(t))  # finer than the column keeps
        how = "in UTC, once its offset is applied"  # a wall time without one is always in range
    else:
        raise _BadValueError(column, value, expected_name(t))
    # checked in UTC: an offset moves a wall time in range out of it (9999-12-31T23:00-05:00)
    if not _FIRST_MICROS <= micros <= _LAST_MICROS:
        raise _outside(column, value, t, how)
    return micros // (1_000_000 // per_second)


def _in_range(arr: pa.Array) -> bool:
    """Whether every date or timestamp of ``arr`` is within 0001-01-01 to 9999-12-31 (UTC)."""
    if pa.types.is_date32(arr.type):
        numbers, low, high = pc.cast(arr, pa.int32()), _FIRST_DAY, _LAST_DAY
    else:
        unit = arr.type.unit
        numbers = pc.cast(arr, pa.int64())
        low, high = (b * _PER_SECOND[unit] // 1_000_000 for b in (_FIRST_MICROS, _LAST_MICROS))
    return not pc.any(pc.or_(pc.less(numbers, low), pc.greater(numbers, high))).as_py()


def _date(value: Any, column: str, t: pa.DataType) -> dt.date:
    if isinstance(value, int) and not isinstance(value, bool):
        if not _FIRST_DAY <= value <= _LAST_DAY:
            raise _outside(column, value, t, "as days since 1970-01-01")
        return _EPOCH_DATE + dt.timedelta(days=value)
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            raise _unparsed(value, column, t, dt.date.fromisoformat) from None
    raise _BadValueError(column, value, expected_name(t))


def _float(value: Any, column: str, t: pa.DataType) -> float:
    if isinstance(value, str) and value.strip() in _NON_FINITE:
        return _NON_FINITE[value.strip()]
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise _BadValueError(column, value, expected_name(t))
    number = float(value)
    if math.isinf(number) and not (isinstance(value, float) and math.isinf(value)):
        raise _BadValueError(column, value, expected_name(t))
    if pa.types.is_float32(t) and math.isfinite(number) and abs(number) >= _FLOAT32_LIMIT:
        raise _BadValueError(column, value, expected_name(t))
    return number


def _int(value: Any, column: str, t: pa.DataType) -> int:
    bits = 31 if pa.types.is_int32(t) else 63
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**bits) <= value < 2**bits:
        raise _BadValueError(column, value, expected_name(t))
    return value


def _text(value: str, column: str, t: pa.DataType) -> str:
    """A string as Parquet and Avro hold it: UTF-8, which has no lone surrogate (Jackson would
    write one as ``?``, a value the line does not hold, and that no round trip gives back)."""
    found = _SURROGATE.search(value)
    if found:
        raise _BadValueError(
            column,
            value,
            expected_name(t),
            f"holds \\u{ord(found.group()):04x}, half a surrogate pair, which UTF-8 cannot hold",
        )
    return value


def _value(value: Any, t: pa.DataType, column: str) -> Any:
    """One JSON value as the Python value Arrow builds ``t`` from, or :class:`_BadValueError`."""
    if value is None:
        return None
    if pa.types.is_boolean(t):
        if not isinstance(value, bool):
            raise _BadValueError(column, value, expected_name(t))
        return value
    if pa.types.is_integer(t):
        return _int(value, column, t)
    if pa.types.is_floating(t):
        return _float(value, column, t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not isinstance(value, str):
            raise _BadValueError(column, value, expected_name(t))
        return _text(value, column, t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _hex(value, column, t)
    if pa.types.is_decimal(t):
        return _decimal(value, column, t)
    if pa.types.is_date32(t):
        return _date(value, column, t)
    if pa.types.is_timestamp(t):
        return _timestamp(value, column, t)
    if pa.types.is_map(t):
        if not isinstance(value, dict):
            raise _BadValueError(column, value, expected_name(t))
        return [
            (_text(k, f"{column} key", t.key_type), _value(v, t.item_type, f"{column}[{k}]")) for k, v in value.items()
        ]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if not isinstance(value, list):
            raise _BadValueError(column, value, expected_name(t))
        return [_value(v, t.value_type, f"{column}[{i}]") for i, v in enumerate(value)]
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            raise _BadValueError(column, value, expected_name(t))
        names = {t.field(i).name for i in range(t.num_fields)}
        for k in value:
            if k not in names:
                raise _BadValueError(
                    f"{column}.{k}", value[k], f"a field of {column} (it has {', '.join(sorted(names))})"
                )
        return {
            t.field(i).name: _value(value.get(t.field(i).name), t.field(i).type, f"{column}.{t.field(i).name}")
            for i in range(t.num_fields)
        }
    raise _BadValueError(column, value, expected_name(t))


def _line_by_line(lines: Iterable[str | None], schema: pa.Schema) -> TypedLines:
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    unknown: list[bool] = []
    held: set[str] = set()
    fields = list(schema)
    for index, line in enumerate(lines):
        if line is None or not line.strip():
            continue
        try:
            record = json.loads(line, parse_float=_JsonNumber)
        except ValueError as e:
            raise JsonInputError(index, line, None, _shown(line), f"a JSON object ({e})") from None
        if not isinstance(record, dict):
            raise JsonInputError(index, line, None, _shown(record), "a JSON object")
        try:
            for f in fields:
                columns[f.name].append(_value(record.get(f.name), f.type, f.name))
        except _BadValueError as bad:
            column = _escaped(bad.column)  # a record's unknown key, a map's key may hold a surrogate
            raise JsonInputError(index, line, column, _shown(bad.value), bad.expected, bad.problem) from None
        unknown.append(any(v is not None for k, v in record.items() if k not in columns))
        held.update(k for k in record if k in columns)
    arrays = [pa.array(columns[f.name], f.type) for f in fields]
    return TypedLines(pa.Table.from_arrays(arrays, schema=schema), pa.array(unknown, pa.bool_()), frozenset(held))


# --- in batches, with Arrow's JSON reader ---------------------------------------------------------


def _declared(t: pa.DataType) -> pa.DataType | None:
    """What Arrow's JSON reader is told to read for a column of type ``t``; None: it cannot be
    declared (a map), so the reader infers it."""
    if pa.types.is_float32(t):
        return pa.float64()  # narrowed after a range check
    if pa.types.is_date32(t) or pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.string()  # dates cast, hex decoded afterwards
    if pa.types.is_map(t):
        return None
    if pa.types.is_list(t):
        item = _declared(t.value_type)
        return None if item is None else pa.list_(item)
    if pa.types.is_struct(t):
        children = [(f.name, _declared(f.type)) for f in t]
        return pa.struct([(n, c) for n, c in children if c is not None])
    return t


def _single(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _cast(arr: pa.Array, t: pa.DataType) -> pa.Array:
    try:
        return pc.cast(arr, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _NotExactError from None


class _Batch:
    def __init__(self, lines: pa.Array) -> None:
        self.lines = lines
        self._has_null: bool | None = None

    def may_hold_null(self) -> bool:
        """Whether any line spells a null (then a missing key of an inferred map is ambiguous)."""
        if self._has_null is None:
            self._has_null = bool(pc.any(pc.match_substring(self.lines, "null")).as_py())
        return self._has_null

    def convert(self, arr: pa.Array, t: pa.DataType) -> pa.Array:
        src = arr.type
        if pa.types.is_null(src):
            return pa.nulls(len(arr), t)
        if pa.types.is_timestamp(src) and not _in_range(arr):
            raise _NotExactError  # named line by line
        if src == t and not (pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_decimal(t)):
            return arr
        if pa.types.is_struct(t):
            if not pa.types.is_struct(src):
                raise _NotExactError
            have = {src.field(i).name for i in range(src.num_fields)}
            if have - {f.name for f in t}:
                raise _NotExactError  # a field the record does not have: named line by line
            children = [
                self.convert(arr.field(f.name), f.type) if f.name in have else pa.nulls(len(arr), f.type) for f in t
            ]
            return pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())
        if pa.types.is_list(t):
            if not pa.types.is_list(src):
                raise _NotExactError
            values = self.convert(arr.values, t.value_type)
            return pa.ListArray.from_arrays(arr.offsets, values, type=t, mask=arr.is_null())
        if pa.types.is_map(t):
            if not pa.types.is_struct(src):
                raise _NotExactError
            return self._map(arr, t)
        return self._leaf(arr, t)

    def _map(self, arr: pa.Array, t: pa.MapType) -> pa.Array:
        """An object Arrow inferred as a record, as the map it is: a row's entries are its
        non-null fields, in field order."""
        n = len(arr)
        width = arr.type.num_fields
        if width > _MAX_MAP_KEYS:
            raise _NotExactError
        present = pc.invert(arr.is_null())
        counts = pa.nulls(n, pa.int32()).fill_null(0)
        keys, values, rows, order = [], [], [], []
        for j in range(width):
            name = arr.type.field(j).name
            child = arr.field(j)
            valid = pc.and_(child.is_valid(), present)
            counts = pc.add(counts, pc.cast(valid, pa.int32()))
            where = pc.indices_nonzero(valid)
            if not len(where):
                continue
            rows.append(where)
            order.append(pa.repeat(pa.scalar(j, pa.int32()), len(where)))
            keys.append(pa.repeat(pa.scalar(name), len(where)))
            values.append(self.convert(child.take(where), t.item_type))
        missing = pc.and_(present, pc.less(counts, width))
        if width and pc.any(missing).as_py() and self.may_hold_null():
            raise _NotExactError  # a key absent from a row, or present with null: only the line knows
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(counts)])
        if not rows:
            entries_keys, entries_values = pa.array([], pa.string()), pa.array([], t.item_type)
        else:
            entries = pa.table(
                {
                    "row": pa.concat_arrays([r.cast(pa.int64()) for r in rows]),
                    "field": pa.concat_arrays(order),
                    "key": pa.concat_arrays(keys),
                    "value": pa.concat_arrays(values),
                }
            ).sort_by([("row", "ascending"), ("field", "ascending")])
            entries_keys, entries_values = _single(entries["key"]), _single(entries["value"])
        return pa.MapArray.from_arrays(offsets, entries_keys, entries_values, type=t, mask=arr.is_null())

    def _leaf(self, arr: pa.Array, t: pa.DataType) -> pa.Array:
        src = arr.type
        if pa.types.is_decimal(t) and src == t:
            # Arrow's reader checks the fraction's digits, not the integer's
            # (compared as 256-bit decimals: decimal(38, s), Spark's default, has no wider 128-bit type)
            wide = pa.decimal256(76, t.scale)
            bound = pa.scalar(decimal.Decimal(10) ** (t.precision - t.scale), wide)
            if pc.any(pc.greater_equal(pc.abs(arr.cast(wide)), bound)).as_py():
                raise _NotExactError
            return arr
        if pa.types.is_float32(t) and (pa.types.is_floating(src) or pa.types.is_integer(src)):
            wide = _cast(arr, pa.float64())
            finite = pc.is_finite(wide)
            if pc.any(pc.and_(finite, pc.greater_equal(pc.abs(wide), _FLOAT32_LIMIT))).as_py():
                raise _NotExactError
            if pc.any(pc.invert(pc.fill_null(finite, True))).as_py():
                raise _NotExactError  # JSON has no infinities: Arrow overflowed a huge number
            return pc.cast(wide, t, safe=False)
        if pa.types.is_float64(t) and pa.types.is_float64(src):
            if pc.any(pc.invert(pc.fill_null(pc.is_finite(arr), True))).as_py():
                raise _NotExactError
            return arr
        if pa.types.is_floating(t) and pa.types.is_integer(src):
            return _cast(arr, t)
        if pa.types.is_integer(t) and pa.types.is_integer(src):
            return _cast(arr, t)
        if pa.types.is_date32(t) and pa.types.is_string(src):
            days = _cast(arr, t)
            if not _in_range(days):
                raise _NotExactError  # Arrow takes the year 0: named line by line
            return days
        if (pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t)) and pa.types.is_string(src):
            valid = pc.match_substring_regex(arr, r"^(?:[0-9a-fA-F]{2})*$")
            if pc.any(pc.invert(pc.fill_null(valid, True))).as_py():
                raise _NotExactError
            decoded = pa.array([None if s is None else bytes.fromhex(s) for s in arr.to_pylist()], pa.binary())
            return _cast(decoded, t) if pa.types.is_fixed_size_binary(t) else decoded
        if pa.types.is_timestamp(t) and pa.types.is_timestamp(src) and src.tz == t.tz:
            return _cast(arr, t)  # a record inferred with whole seconds: widening is exact
        raise _NotExactError


def _fast(lines: pa.Array, schema: pa.Schema) -> TypedLines:
    declared = pa.schema([(f.name, d) for f in schema if (d := _declared(f.type)) is not None])
    blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(lines), ""), True)
    longest = pc.max(pc.binary_length(lines)).as_py() or 0
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines), "\n")
    data = pa.py_buffer(joined[0].as_py().encode()) if len(lines) else pa.py_buffer(b"")
    try:
        parsed = pj.read_json(
            pa.BufferReader(data),
            # one thread: the caller (a Spark task) is the unit of parallelism
            read_options=pj.ReadOptions(block_size=max(4 << 20, 2 * longest + 2), use_threads=False),
            parse_options=pj.ParseOptions(explicit_schema=declared, unexpected_field_behavior="infer"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _NotExactError from None
    rows = len(lines) - int(pc.sum(pc.cast(blank, pa.int64())).as_py() or 0)
    if parsed.num_rows != rows:
        raise _NotExactError  # two objects on one line, or none
    if (
        any(pa.types.is_timestamp(d) for d in declared.types)
        and pc.any(pc.match_substring_regex(lines, _SUB_MICROS.pattern)).as_py()
    ):
        raise _NotExactError  # Arrow drops a seventh fraction digit: such lines are read one by one
    batch = _Batch(pc.filter(lines, pc.invert(blank)))
    arrays = []
    present = set(parsed.column_names)  # once: column_names is a new list at each access
    for f in schema:
        if f.name in present:
            arrays.append(batch.convert(_single(parsed[f.name]), f.type))
        else:
            arrays.append(pa.nulls(rows, f.type))
    extra = [_single(parsed[c]) for c in parsed.column_names if c not in schema.names]
    unknown = pa.nulls(rows, pa.bool_()).fill_null(False)
    for column in extra:
        unknown = pc.or_(unknown, column.is_valid())
    held = {f.name for f, a in zip(schema, arrays, strict=True) if a.null_count < len(a)}
    nulls = [f.name for f in schema if f.name not in held]
    held.update(_keys_spelt(batch.lines, nulls) if nulls else ())
    return TypedLines(pa.Table.from_arrays(arrays, schema=schema), unknown, frozenset(held))


def _keys_spelt(lines: pa.Array, names: list[str]) -> set[str]:
    """Which of ``names`` (columns null on every line) some line holds as a key, with a null
    value: Arrow's reader gives a key absent and one present with null alike. Only lines that
    spell a name, or escape something (a key may be spelt with escapes), are parsed again."""
    spelt = [json.dumps(n, ensure_ascii=False) for n in names]
    maybe = pc.match_substring(lines, "\\")
    for text in spelt:
        maybe = pc.or_(maybe, pc.match_substring(lines, text))
    held: set[str] = set()
    for line in pc.filter(lines, maybe).to_pylist():
        try:
            record = json.loads(line)
        except ValueError:
            raise _NotExactError from None
        held.update(n for n in names if n in record)
    return held


def type_lines(lines: pa.Array | Iterable[str | None], schema: pa.Schema) -> TypedLines:
    """JSON lines (one object each; blank lines skipped) as rows of ``schema``, or
    :class:`JsonInputError` naming the first line (0-based among ``lines``), column, value and
    expected type that do not fit."""
    array = lines if isinstance(lines, pa.Array) else pa.array(list(lines), pa.string())
    if pa.types.is_large_string(array.type):
        array = array.cast(pa.string())
    array = pc.fill_null(array, "")  # a missing line is a blank one
    try:
        return _fast(array, schema)
    except _NotExactError:
        return _line_by_line(array.to_pylist(), schema)


def line_number_in(data: bytes | mmap.mmap, line: str) -> int | None:
    """The 1-based number of the first line of ``data`` that is exactly ``line`` (LF or CRLF
    ends), or None. ``data`` may be a memory map of a file larger than memory."""
    needle = line.encode()
    start = 0
    while True:
        at = data.find(needle, start)
        if at < 0:
            return None
        end = at + len(needle)
        if (at == 0 or data[at - 1 : at] == b"\n") and (end == len(data) or data[end : end + 1] in (b"\n", b"\r")):
            chunk = 1 << 26
            return 1 + sum(data[i : min(i + chunk, at)].count(b"\n") for i in range(0, at, chunk))
        start = at + 1
