"""Turning decoded values into JSON: dates and timestamps as ISO-8601, decimals as strings,
binary as hex, maps as objects. One place, so every command prints values the same way."""

from __future__ import annotations

import codecs
import datetime
import decimal
import functools
import json
import math
import sys
import uuid
from collections.abc import Mapping
from typing import Any


def to_jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        # JSON has no NaN/Infinity: print them as strings rather than emit invalid JSON
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return f"{value:f}"  # plain digits, as written: "0.0000000001", never "1E-10"
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        # Arrow gives maps as lists of (key, value) pairs; they stay lists here
        return [to_jsonable(v) for v in value]
    return str(value)


@functools.cache
def holds_unicode(encoding: str | None) -> bool:
    """Whether text in ``encoding`` can hold any character (a UTF), not only some (ASCII, Latin-1)."""
    try:
        return codecs.lookup(encoding or "ascii").name.startswith("utf")
    except LookupError:
        return False


def dumps(value: Any) -> str:
    # on a stdout that is not UTF (LC_ALL=C without coercion, PYTHONIOENCODING=ascii) the line
    # stays valid JSON, its other characters as \u escapes
    unicode = holds_unicode(getattr(sys.stdout, "encoding", None))
    return json.dumps(to_jsonable(value), ensure_ascii=not unicode, separators=(",", ":"))
