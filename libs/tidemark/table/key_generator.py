"""Record keys and partition paths as Apache Hudi's key generators compute them.

Behaviour follows Hudi's Avro key generators (``hudi-client-common`` ``org.apache.hudi.keygen``:
``KeyGenUtils``, ``SimpleAvroKeyGenerator``, ``ComplexAvroKeyGenerator``,
``NonpartitionedAvroKeyGenerator``, ``TimestampBasedAvroKeyGenerator``, ``CustomAvroKeyGenerator``
and ``parser.HoodieDateTimeParser``), which the Spark row writers are kept consistent with:

* a value becomes text as Java prints it (``Double.toString``, a date as ``yyyy-MM-dd``, a
  ``timestamp-micros`` column as its long, unless ``...consistent.logical.timestamp.enabled``);
* a simple record key that is null or empty is an error; in a complex key a null part is
  ``__null__``, an empty one ``__empty__``, and a key whose parts are all so is an error;
* a null or empty partition value is ``__HIVE_DEFAULT_PARTITION__``; URL-encoding escapes the
  characters Hive escapes (``%XX``), hive-style puts ``field=`` in front;
* a ComplexKeyGenerator with one record key field writes ``field:value`` (Hudi 0.14.0 and older,
  table version 9+) or the bare value (0.14.1 to 1.0.2): ``field_prefixed_single_key``;
* TimestampBasedKeyGenerator patterns are Joda-Time's (``DateTimeFormat.forPattern``), with
  Joda's parsing: an offset in the text (``Z`` or ``+08:00``) is the zone of the result unless
  an input time zone is set; the output zone is the output (or common) time zone, else the zone
  parsed from the text, else the JVM's default zone, which tidemark takes to be UTC; a time zone
  setting is read as ``DateTimeZone.forTimeZone(TimeZone.getTimeZone(id))`` reads it
  (``hudi_time_zone``).

Values are small and immutable, so a key generator travels to Spark executors in a task plan.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import logging
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from tidemark.config import conf_bool
from tidemark.errors import KeyGeneratorError
from tidemark.timeline.active import METAFOLDER

_log = logging.getLogger("tidemark.write")

_PKG = "org.apache.hudi.keygen."
SIMPLE = _PKG + "SimpleKeyGenerator"
COMPLEX = _PKG + "ComplexKeyGenerator"
NONPARTITIONED = _PKG + "NonpartitionedKeyGenerator"
TIMESTAMP = _PKG + "TimestampBasedKeyGenerator"
CUSTOM = _PKG + "CustomKeyGenerator"

#: every class name (and Hudi's ``keygenerator.type``) tidemark computes keys for, by kind
_KINDS = {
    SIMPLE: "simple",
    _PKG + "SimpleAvroKeyGenerator": "simple",
    COMPLEX: "complex",
    _PKG + "ComplexAvroKeyGenerator": "complex",
    NONPARTITIONED: "nonpartitioned",
    _PKG + "NonpartitionedAvroKeyGenerator": "nonpartitioned",
    TIMESTAMP: "timestamp",
    _PKG + "TimestampBasedAvroKeyGenerator": "timestamp",
    CUSTOM: "custom",
    _PKG + "CustomAvroKeyGenerator": "custom",
}
_TYPES = {
    "SIMPLE": SIMPLE,
    "COMPLEX": COMPLEX,
    "NON_PARTITION": NONPARTITIONED,
    "TIMESTAMP": TIMESTAMP,
    "CUSTOM": CUSTOM,
}
SUPPORTED = (SIMPLE, COMPLEX, NONPARTITIONED, TIMESTAMP, CUSTOM)

DEFAULT_PARTITION_PATH = "__HIVE_DEFAULT_PARTITION__"
NULL_RECORDKEY_PLACEHOLDER = "__null__"
EMPTY_RECORDKEY_PLACEHOLDER = "__empty__"

# configuration keys (Hudi's names; ``hoodie.deltastreamer.keygen.timebased.*`` are their old names)
TABLE_CLASS = "hoodie.table.keygenerator.class"
WRITE_CLASS = "hoodie.datasource.write.keygenerator.class"
WRITE_TYPE = "hoodie.datasource.write.keygenerator.type"
WRITE_PARTITION_FIELDS = "hoodie.datasource.write.partitionpath.field"
WRITE_RECORD_KEY_FIELDS = "hoodie.datasource.write.recordkey.field"
CONSISTENT_TIMESTAMP = "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled"
COMPLEX_ENCODING = "hoodie.table.complex.keygen.encoding"
COMPLEX_NEW_ENCODING = "hoodie.write.complex.keygen.new.encoding"
TIMEBASED = "hoodie.keygen.timebased."
TIMESTAMP_TYPE = TIMEBASED + "timestamp.type"
SCALAR_UNIT = TIMEBASED + "timestamp.scalar.time.unit"
INPUT_FORMAT = TIMEBASED + "input.dateformat"
INPUT_FORMAT_DELIMITER = TIMEBASED + "input.dateformat.list.delimiter.regex"
INPUT_TIMEZONE = TIMEBASED + "input.timezone"
OUTPUT_FORMAT = TIMEBASED + "output.dateformat"
OUTPUT_TIMEZONE = TIMEBASED + "output.timezone"
TIMEZONE = TIMEBASED + "timezone"

TIMESTAMP_TYPES = ("UNIX_TIMESTAMP", "DATE_STRING", "MIXED", "EPOCHMILLISECONDS", "EPOCHMICROSECONDS", "SCALAR")
#: java.util.concurrent.TimeUnit in milliseconds (a fraction for the finer units)
_UNIT_MS = {
    "NANOSECONDS": (1, 1_000_000),
    "MICROSECONDS": (1, 1_000),
    "MILLISECONDS": (1, 1),
    "SECONDS": (1_000, 1),
    "MINUTES": (60_000, 1),
    "HOURS": (3_600_000, 1),
    "DAYS": (86_400_000, 1),
}


#: folder names a partition path cannot hold: the file system (and Hadoop's Path) would take them
#: for the folder itself, its parent or nothing, so the files would land elsewhere
_NOT_FOLDER_NAMES: Final = ("", ".", "..")
#: the longest folder name local file systems and HDFS (its default component limit) hold
_MAX_FOLDER_NAME_BYTES: Final = 255
_SLASH_HINT: Final = "set hoodie.datasource.write.partitionpath.urlencode=true to keep a '/' in a value"


def partition_ancestors(path: str) -> Iterator[str]:
    """The folders ``path`` lies in, outermost first (``a``, ``a/b`` for ``a/b/c``)."""
    parts = path.split("/")
    for depth in range(1, len(parts)):
        yield "/".join(parts[:depth])


def check_partition_paths(paths: Iterable[str], hive_style: bool = False) -> None:
    """Refuse partition paths whose files could not be found where the path says: a folder named
    ``.`` or ``..`` or nothing (values such as ``..`` or ``a//b``), a folder name longer than
    file systems allow, or one partition's folder inside another's (values ``x`` and ``x/y``),
    or inside the timeline folder ``.hoodie``, which Apache's readers do not look into; and a
    control character (a newline), which fails hudi-rs on the whole table. ``hive_style``: the
    write's paths are hive-style already, so that is no way out to suggest."""
    chosen = set(paths)
    for path in sorted(chosen):
        if path.split("/", 1)[0] == METAFOLDER:
            raise KeyGeneratorError(
                f"partition path {path!r}: its files would be in the table's timeline folder {METAFOLDER}, where no "
                "reader looks for data; use hive-style partitioning (hoodie.datasource.write.hive_style_partitioning)"
            )
        control = next((c for c in path if ord(c) < 32 or ord(c) == 127), None)
        if control is not None:
            raise KeyGeneratorError(
                f"partition path {path!r}: the control character {control!r} in a folder name makes the table "
                "unreadable to Apache's reader (hudi-rs); set hoodie.datasource.write.partitionpath.urlencode=true "
                "to write it escaped"
            )
        bad = [i for i, part in enumerate(path.split("/")) if part in _NOT_FOLDER_NAMES] if path else []
        if bad:
            # hive-style puts 'field=' before a value's first folder only ('..' is 'p=..', '../a'
            # 'p=../a'); a bad folder further on may be inside one value ('a/..' is 'p=a/..'),
            # which only escaping keeps
            hive_hint = "" if hive_style or bad != [0] else ", or use hive-style partitioning"
            raise KeyGeneratorError(
                f"partition path {path!r}: a folder name in it is empty, '.' or '..', so its files would not "
                f"be in that partition; {_SLASH_HINT}{hive_hint}"
            )
        long = next((part for part in path.split("/") if len(part.encode()) > _MAX_FOLDER_NAME_BYTES), None)
        if long is not None:
            raise KeyGeneratorError(
                f"partition path {path[:80]!r}...: a folder name of {len(long.encode())} bytes, longer than the "
                f"{_MAX_FOLDER_NAME_BYTES} a file system (and HDFS) allows"
            )
        outer = next((a for a in partition_ancestors(path) if a in chosen), None)
        if outer is not None:
            raise KeyGeneratorError(
                f"partition path {path!r} would be a folder inside partition {outer!r}; {_SLASH_HINT}"
            )


def key_generator_class(config: Mapping[str, str]) -> str | None:
    """The key generator a configuration names: a class (table or write setting), or Hudi's
    ``keygenerator.type``."""
    name = config.get(TABLE_CLASS) or config.get(WRITE_CLASS)
    if name:
        return name.strip()
    kind = config.get(WRITE_TYPE, "").strip().upper()
    if kind:
        if kind not in _TYPES:
            raise KeyGeneratorError(f"{WRITE_TYPE}={kind} is not a key generator type tidemark implements")
        return _TYPES[kind]
    return None


def check_supported(class_name: str) -> str:
    """The kind of ``class_name``; an unknown class is refused, naming it."""
    kind = _KINDS.get(class_name.strip())
    if kind is None:
        raise KeyGeneratorError(
            f"key generator {class_name} is not supported: tidemark computes record keys and partition paths "
            f"as Hudi's {', '.join(c.rsplit('.', 1)[1] for c in SUPPORTED)} do"
        )
    return kind


def infer_class(record_key_fields: Sequence[str], partition_fields: Sequence[str]) -> str:
    """The key generator Hudi infers for a new table (``KeyGenUtils.inferKeyGeneratorType``)."""
    if partition_fields and ":" in partition_fields[0]:
        return CUSTOM
    if not partition_fields:
        return NONPARTITIONED
    if len(partition_fields) == 1 and len(record_key_fields) <= 1:
        return SIMPLE
    return COMPLEX


# --- values as Java prints them ------------------------------------------------------------------


def java_double(value: float) -> str:
    """``Double.toString``: plain between 10^-3 and 10^7, else ``d.dddE±n``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    # the shortest digits that read back as the same double, as d.dddE±n
    exact = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, exact.digits))
    exponent = len(digits) - 1 + int(exact.exponent)
    return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def java_float(value: float) -> str:
    """``Float.toString`` of a 32-bit float (the shortest text that reads back as the same float)."""
    single = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return java_double(float(text))
    return java_double(single)


def value_text(value: Any, consistent_timestamp: bool = False, single_precision: bool = False) -> str | None:
    """A field's value as Hudi's ``getNestedFieldValAsString`` prints it (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_float(value) if single_precision else java_double(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        if consistent_timestamp:  # java.sql.Timestamp.toString, in UTC
            millis = _timestamp_millis(value)
            at = _EPOCH + datetime.timedelta(milliseconds=millis)
            fraction = f"{millis % 1000:03d}".rstrip("0") or "0"
            return f"{at:%Y-%m-%d %H:%M:%S}.{fraction}"
        return str(_epoch_micros(value))  # Avro timestamp-micros: its long
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, str):
        return value
    raise KeyGeneratorError(f"a {type(value).__name__} value cannot be part of a record key or partition path")


_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


def _epoch_micros(value: datetime.datetime) -> int:
    aware = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _java_quotient(dividend: int, divisor: int) -> int:
    """Java's ``/`` of longs: toward zero (Python's ``//`` rounds down, a millisecond early before 1970)."""
    quotient = abs(dividend) // divisor
    return quotient if dividend >= 0 else -quotient


def _timestamp_millis(value: datetime.datetime) -> int:
    """With consistent logical timestamps Hudi reads a ``timestamp-micros`` value as
    ``new java.sql.Timestamp(micros / 1000)`` (``HoodieAvroUtils.convertValueForAvroLogicalTypes``):
    its milliseconds, the microseconds dropped."""
    return _java_quotient(_epoch_micros(value), 1000)


def _long_value(value: float | decimal.Decimal | int) -> int:
    """Java's ``Number.longValue()``: toward zero; a double's NaN is 0 and one past a long's
    range the nearest long (Hudi partitions a NaN at the epoch)."""
    if isinstance(value, float):
        if value != value:
            return 0
        if value >= 2.0**63:
            return _LONG_MAX
        if value <= -(2.0**63):
            return _LONG_MIN
    return int(value)


#: Hive's (and Hudi's PartitionPathEncodeUtils) characters to escape in a partition value
_ESCAPED = {chr(c) for c in range(0x20)} | set("\"#%'*/:=?\\\x7f{[]^")


def escape_path_name(text: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in text)


def field_value(row: Mapping[str, Any], name: str) -> Any:
    """A (possibly nested, ``a.b``) field of a row; a missing field is an error, as in Hudi."""
    current: Any = row
    for part in name.split("."):
        if not isinstance(current, Mapping) or part not in current:
            if current is None:
                return None
            raise KeyGeneratorError(f"field {name!r} does not exist in the input record (fields: {', '.join(row)})")
        current = current[part]
    return current


# --- Joda-Time patterns ----------------------------------------------------------------------------

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NUMERIC = set("yYxCwedDMHhKkmsS")
_SUPPORTED_LETTERS = set("yYMdDHhKkmsSaEZz")


def _tokens(pattern: str) -> list[tuple[str, str]]:
    """(letter, run) for pattern letters, ("'", text) for literal text."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            j, text = i + 1, []
            while j < len(pattern):
                if pattern[j] == "'":
                    if j + 1 < len(pattern) and pattern[j + 1] == "'":
                        text.append("'")
                        j += 2
                        continue
                    break
                text.append(pattern[j])
                j += 1
            out.append(("'", "".join(text) if j > i + 1 else "'"))
            i = j + 1
        elif ch.isascii() and ch.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == ch:
                j += 1
            if ch not in _SUPPORTED_LETTERS:
                raise KeyGeneratorError(f"date format {pattern!r}: pattern letter {ch!r} is not supported")
            out.append((ch, pattern[i:j]))
            i = j
        else:
            out.append(("'", ch))
            i += 1
    return out


def _offset_text(offset: datetime.timedelta, colon: bool) -> str:
    total = int(offset.total_seconds()) // 60
    sign = "-" if total < 0 else "+"
    hours, minutes = divmod(abs(total), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"


def format_joda(pattern: str, epoch_ms: int, zone: datetime.tzinfo) -> str:
    """``new DateTime(epochMs, zone).toString(pattern)``."""
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=epoch_ms)
    local = moment.astimezone(zone)
    millis = epoch_ms % 1000
    out = []
    for letter, run in _tokens(pattern):
        n = len(run)
        if letter == "'":
            out.append(run)
        elif letter in "yY":
            out.append(f"{local.year % 100:02d}" if n == 2 else f"{local.year:0{n}d}")
        elif letter == "M":
            out.append(
                _MONTHS[local.month - 1][:3]
                if n == 3
                else _MONTHS[local.month - 1]
                if n > 3
                else f"{local.month:0{n}d}"
            )
        elif letter == "E":
            out.append(_DAYS[local.weekday()] if n > 3 else _DAYS[local.weekday()][:3])
        elif letter == "a":
            out.append("AM" if local.hour < 12 else "PM")
        elif letter == "S":
            out.append((f"{millis:03d}" + "0" * n)[:n])
        elif letter == "Z":
            offset = local.utcoffset() or datetime.timedelta(0)
            out.append(_offset_text(offset, n == 2) if n < 3 else str(zone))
        elif letter == "z":
            out.append(local.tzname() or "UTC")
        else:
            number = {
                "d": local.day,
                "D": local.timetuple().tm_yday,
                "H": local.hour,
                "k": local.hour or 24,
                "K": local.hour % 12,
                "h": local.hour % 12 or 12,
                "m": local.minute,
                "s": local.second,
            }[letter]
            out.append(f"{number:0{n}d}")
    return "".join(out)


_MAX_DIGITS = {"d": 2, "D": 3, "H": 2, "k": 2, "K": 2, "h": 2, "m": 2, "s": 2, "M": 2}


def _parser(pattern: str) -> re.Pattern[str]:
    tokens = _tokens(pattern)
    parts = []
    for i, (letter, run) in enumerate(tokens):
        n = len(run)
        nxt = tokens[i + 1][0] if i + 1 < len(tokens) else ""
        fixed = nxt in _NUMERIC  # Joda parses a numeric field followed by another at its width
        group = f"(?P<{letter}{i}>"
        if letter == "'":
            parts.append(re.escape(run))
        elif letter in "yY":
            parts.append(group + (r"\d{2})" if n == 2 else rf"\d{{{n}}})" if fixed else r"[-+]?\d{1,9})"))
        elif letter == "M" and n >= 3:
            parts.append(group + "|".join(m if n > 3 else m[:3] for m in _MONTHS) + ")")
        elif letter == "E":
            parts.append(group + "|".join(d if n > 3 else d[:3] for d in _DAYS) + ")")
        elif letter == "a":
            parts.append(group + "AM|PM|am|pm)")
        elif letter == "S":
            parts.append(group + (rf"\d{{{n}}})" if fixed else rf"\d{{1,{n}}})"))
        elif letter == "Z":
            parts.append(group + (r"Z|[-+]\d{2}:?\d{2}(?::?\d{2})?)" if n < 3 else r"[A-Za-z_][A-Za-z0-9_/+\-]*)"))
        elif letter == "z":
            raise KeyGeneratorError(
                f"date format {pattern!r}: time zone names (z) cannot be parsed (Joda cannot either)"
            )
        else:
            width = _MAX_DIGITS[letter]
            parts.append(group + (rf"\d{{{n}}})" if fixed else rf"\d{{1,{max(width, n)}}})"))
    return re.compile("".join(parts))


def parse_joda(patterns: Sequence[str], text: str, input_zone: datetime.tzinfo | None) -> tuple[int, datetime.tzinfo]:
    """Joda's ``parseDateTime`` with ``withZone(input_zone)`` (or ``withOffsetParsed()`` when
    there is none): (epoch milliseconds, zone of the result). The first pattern that matches the
    whole text wins, as Joda's list of parsers does."""
    for pattern in patterns:
        m = _parser(pattern).fullmatch(text)
        if m is None:
            continue
        fields: dict[str, str] = {k[0]: v for k, v in m.groupdict().items() if v is not None}
        year = int(fields.get("y") or fields.get("Y") or 1970)
        ylen = next((len(run) for letter, run in _tokens(pattern) if letter in "yY"), 4)
        if ylen == 2:  # Joda's two-digit year: the century that puts it near (now - 30)
            pivot = datetime.date.today().year - 30
            year += pivot - pivot % 100
            if year < pivot - 50:
                year += 100
            elif year > pivot + 49:
                year -= 100
        month_text = fields.get("M", "1")
        month = (
            int(month_text)
            if month_text.isdigit()
            else next(i + 1 for i, name in enumerate(_MONTHS) if name.startswith(month_text))
        )
        hour = int(fields.get("H") or fields.get("k") or 0) % 24
        if "h" in fields or "K" in fields:
            hour = int(fields.get("h") or fields.get("K") or 0) % 12
        if fields.get("a", "").upper() == "PM":
            hour += 12
        fraction = fields.get("S", "")
        micros = int((fraction + "000")[:3]) * 1000 if fraction else 0
        if "D" in fields and "d" not in fields and "M" not in fields:
            base = datetime.date(year, 1, 1) + datetime.timedelta(days=int(fields["D"]) - 1)
            month, day = base.month, base.day
        else:
            day = int(fields.get("d", "1"))
        try:
            naive = datetime.datetime(year, month, day, hour, int(fields.get("m", 0)), int(fields.get("s", 0)), micros)
        except ValueError as e:
            raise KeyGeneratorError(f"cannot parse {text!r} with {pattern!r}: {e}") from e
        parsed_zone: datetime.tzinfo | None = None
        offset_text = fields.get("Z")
        if offset_text:
            parsed_zone = _parsed_zone(offset_text)
        if parsed_zone is not None:
            instant = naive.replace(tzinfo=parsed_zone)
            result_zone = input_zone or parsed_zone
        else:
            result_zone = input_zone or datetime.UTC
            instant = naive.replace(tzinfo=result_zone)
            if instant.astimezone(datetime.UTC).astimezone(result_zone).replace(tzinfo=None) != naive:
                # Joda's parser throws IllegalInstantException, failing Hudi's write
                raise KeyGeneratorError(
                    f"{text!r} is a local time that does not exist in the time zone {result_zone} (it falls in "
                    "a daylight saving time gap), so Hudi's writer refuses it"
                )
        delta = instant - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000, result_zone
    raise KeyGeneratorError(f"cannot parse {text!r} with the input date format {' or '.join(map(repr, patterns))}")


#: the old short ids ``DateTimeZone.forTimeZone`` converts before anything else (Joda's
#: ``ZONE_ID_CONVERSION``, measured with Joda 2.14.1 on Java 17): Hudi reads a time zone setting as
#: ``forTimeZone(TimeZone.getTimeZone(id))``, so EST, MST and HST keep daylight saving time there,
#: where zoneinfo's EST, MST and HST are fixed offsets, and the others are no zoneinfo keys at all
JODA_OLD_IDS: Final = {
    "MET": "CET",
    "ECT": "CET",
    "MIT": "Pacific/Apia",
    "HST": "Pacific/Honolulu",
    "AST": "America/Anchorage",
    "PST": "America/Los_Angeles",
    "MST": "America/Denver",
    "PNT": "America/Phoenix",
    "CST": "America/Chicago",
    "EST": "America/New_York",
    "IET": "America/Indiana/Indianapolis",
    "PRT": "America/Puerto_Rico",
    "CNT": "America/St_Johns",
    "AGT": "America/Argentina/Buenos_Aires",
    "BET": "America/Sao_Paulo",
    "ART": "Africa/Cairo",
    "CAT": "Africa/Harare",
    "EAT": "Africa/Addis_Ababa",
    "NET": "Asia/Yerevan",
    "PLT": "Asia/Karachi",
    "IST": "Asia/Kolkata",
    "BST": "Asia/Dhaka",
    "VST": "Asia/Ho_Chi_Minh",
    "CTT": "Asia/Shanghai",
    "JST": "Asia/Tokyo",
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "SST": "Pacific/Guadalcanal",
    "NST": "Pacific/Auckland",
}
#: zoneinfo keys java.util.TimeZone does not know (so Java reads them as GMT)
_NOT_JAVA_IDS: Final = frozenset({"Factory", "ROC", "localtime", "posixrules"})
#: ids java.util.TimeZone (Java 17) knows but Joda cannot convert: Hudi's write fails on them
_NOT_JODA_PREFIX: Final = "SystemV/"


def fixed_zone(offset: datetime.timedelta) -> datetime.tzinfo:
    """A fixed-offset zone named as Joda names it (``+05:30``; ``UTC`` for no offset), so that
    the pattern letters ``z`` and ``ZZZ`` print what Joda prints."""
    if not offset:
        return datetime.UTC
    return datetime.timezone(offset, _offset_text(offset, colon=True))


def _java_custom_offset(text: str) -> datetime.timedelta | None:
    """The offset of a custom id ``GMT+h``, ``GMT+hh``, ``GMT+hhmm`` or ``GMT+hh:mm`` as
    ``TimeZone.parseCustomTimeZone`` reads it (hours up to 23, minutes up to 59); None for an id
    it does not take (Java then reads the id as GMT)."""
    m = re.fullmatch(r"GMT([-+])(?:(\d{0,2}):(\d{2})|(\d+))", text, re.ASCII)
    if m is None:
        return None
    if m[4] is not None:
        number = int(m[4])
        hours, minutes = (number, 0) if len(m[4]) <= 2 else divmod(number, 100)
    else:
        hours, minutes = int(m[2] or 0), int(m[3])
    if hours > 23 or minutes > 59:
        return None
    return (-1 if m[1] == "-" else 1) * datetime.timedelta(hours=hours, minutes=minutes)


@functools.cache
def _zoneinfo_keys() -> frozenset[str]:
    return frozenset(available_timezones())


@functools.cache
def hudi_time_zone(zone_id: str) -> datetime.tzinfo | None:
    """The zone Hudi reads a time zone setting as: ``DateTimeZone.forTimeZone(TimeZone.getTimeZone(id))``.
    None when ``java.util.TimeZone`` does not know the id (``UTC+8``, ``+08:00``, ``Asia/kolkata``),
    which Java then reads as GMT; an id Joda refuses is an error, as Hudi's write fails on it."""
    if zone_id in JODA_OLD_IDS:
        return ZoneInfo(JODA_OLD_IDS[zone_id])
    if zone_id in ("UTC", "GMT"):
        return datetime.UTC
    if zone_id.startswith(_NOT_JODA_PREFIX):
        raise KeyGeneratorError(
            f"time zone {zone_id!r}: Hudi's writer fails on it (Joda-Time does not know it); use a region id "
            "such as America/New_York or an offset such as GMT-05:00"
        )
    if zone_id in _zoneinfo_keys() and zone_id not in _NOT_JAVA_IDS:
        return ZoneInfo(zone_id)
    offset = _java_custom_offset(zone_id)
    return fixed_zone(offset) if offset is not None else None


def _parsed_zone(text: str) -> datetime.tzinfo:
    """The zone of an offset (``Z``, ``+0530``, ``+05:30``) or a zone id parsed from a value's text."""
    if text == "Z":
        return datetime.UTC
    m = re.fullmatch(r"([-+])(\d{2}):?(\d{2})(?::?(\d{2}))?", text)
    if m:
        delta = datetime.timedelta(hours=int(m[2]), minutes=int(m[3]), seconds=int(m[4] or 0))
        return fixed_zone(-delta if m[1] == "-" else delta)
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise KeyGeneratorError(f"time zone {text!r} in a value is not a time zone id Joda-Time knows") from None


# --- the key generators ------------------------------------------------------------------------


#: offset ids java.util.TimeZone reads as GMT that earlier tidemark versions read as their offset
_READ_AS_OFFSET_BEFORE: Final = re.compile(r"(?:GMT|UTC)?[-+]\d{1,2}(?::?\d{2}){0,2}")
#: ids Java reads as GMT that mean GMT anyway: no surprise in following Java
_MEANS_GMT: Final = frozenset({"Z", "UT", "UCT", "UTC", "GMT", "ZULU", "GMT0", "UTC0", "GREENWICH", "UNIVERSAL"})


def _check_time_zone(key: str, zone_id: str, new_table: bool) -> None:
    """Refuse (a new table) or warn of (an existing one) a time zone id Hudi reads as GMT, such
    as ``UTC+8`` or ``+08:00``: java.util.TimeZone takes custom offsets only as ``GMT+08:00``."""
    try:
        if hudi_time_zone(zone_id) is not None or zone_id.upper() in _MEANS_GMT:
            return
    except KeyGeneratorError as e:
        raise KeyGeneratorError(f"{key}={zone_id}: {str(e).split(': ', 1)[1]}") from None
    says = (
        f"{key}={zone_id}: java.util.TimeZone does not know this time zone id, so Apache Hudi computes "
        "partition paths with it in GMT"
    )
    if new_table:
        raise KeyGeneratorError(f"{says}; give a region id (Asia/Shanghai) or an offset as GMT+08:00, or GMT itself")
    if _READ_AS_OFFSET_BEFORE.fullmatch(zone_id):
        # earlier tidemark versions read this id as its offset: which of the two the table's paths
        # follow depends on who wrote it, and a guess would put updates beside their records
        raise KeyGeneratorError(
            f"{says}, where earlier tidemark versions read it as an offset: this table's partition paths may follow "
            f"either, so nothing was written; set {key} in .hoodie/hoodie.properties (and in the write's options, "
            "where given) to the zone its paths follow (GMT when Apache Hudi wrote the table, the offset as "
            "GMT+08:00 when tidemark did)"
        )
    _log.warning("%s; tidemark does too, so that records land in the partitions Hudi gave them", says)


@dataclass(frozen=True)
class TimestampSettings:
    """``hoodie.keygen.timebased.*`` of a TimestampBasedKeyGenerator (or a CustomKeyGenerator's
    TIMESTAMP fields)."""

    timestamp_type: str
    output_format: str
    input_formats: tuple[str, ...] = ()
    input_zone: str | None = None
    output_zone: str | None = None
    scalar_unit: str = "SECONDS"

    @classmethod
    def from_config(
        cls, config: Mapping[str, str], partition_is_text: bool | None = None, new_table: bool = False
    ) -> TimestampSettings:
        """``new_table``: nothing is written yet, so a time zone id Java would read as GMT is
        refused; an existing table's paths were computed with GMT, so its writes follow them."""

        def setting(key: str) -> tuple[str, str | None]:
            old_name = key.replace("hoodie.keygen.", "hoodie.deltastreamer.keygen.", 1)
            if config.get(key) is None and config.get(old_name) is not None:
                return old_name, config[old_name]
            return key, config.get(key)

        def get(key: str) -> str | None:
            return setting(key)[1]

        kind = (get(TIMESTAMP_TYPE) or "").strip().upper()
        inputs = get(INPUT_FORMAT) or ""
        if not kind:
            # Apache's writer records only the date formats in hoodie.properties; a table with an
            # input format and text values can only have been DATE_STRING (or MIXED, which reads
            # text the same way): Hudi parses text with the input format under no other type
            if inputs and partition_is_text:
                kind = "DATE_STRING"
            else:
                raise KeyGeneratorError(
                    f"TimestampBasedKeyGenerator needs {TIMESTAMP_TYPE} (one of {', '.join(TIMESTAMP_TYPES)}); "
                    f"hoodie.properties does not record it: give --conf {TIMESTAMP_TYPE}=..."
                )
        if kind not in TIMESTAMP_TYPES:
            raise KeyGeneratorError(f"{TIMESTAMP_TYPE}={kind} is not one of {', '.join(TIMESTAMP_TYPES)}")
        output = get(OUTPUT_FORMAT)
        if not output:
            raise KeyGeneratorError(f"TimestampBasedKeyGenerator needs {OUTPUT_FORMAT}")
        delimiter = get(INPUT_FORMAT_DELIMITER) or ","
        formats = tuple(f.strip() for f in re.split(delimiter, inputs) if f.strip()) if inputs else ()
        if kind in ("DATE_STRING", "MIXED") and not formats:
            raise KeyGeneratorError(f"{TIMESTAMP_TYPE}={kind} needs {INPUT_FORMAT}")
        common = setting(TIMEZONE)
        in_zone = common if common[1] is not None else setting(INPUT_TIMEZONE)
        out_zone = common if common[1] is not None else setting(OUTPUT_TIMEZONE)
        for key, zone_id in {in_zone, out_zone}:
            if zone_id and zone_id.strip():
                _check_time_zone(key, zone_id.strip(), new_table)
        unit = (get(SCALAR_UNIT) or "SECONDS").strip().upper()
        if unit not in _UNIT_MS:
            raise KeyGeneratorError(f"{SCALAR_UNIT}={unit} is not a java.util.concurrent.TimeUnit")
        for pattern in (*formats, output):
            _tokens(pattern)  # an unsupported pattern letter is refused before anything is written
        return cls(
            kind,
            output,
            formats,
            (in_zone[1] or "").strip() or None,
            (out_zone[1] or "").strip() or None,
            unit,
        )

    @property
    def _unit(self) -> str | None:
        return {
            "EPOCHMILLISECONDS": "MILLISECONDS",
            "EPOCHMICROSECONDS": "MICROSECONDS",
            "UNIX_TIMESTAMP": "SECONDS",
            "SCALAR": self.scalar_unit,
        }.get(self.timestamp_type)

    def _to_millis(self, value: int) -> int:
        unit = self._unit
        if unit is None:
            raise KeyGeneratorError(f"{TIMESTAMP_TYPE}={self.timestamp_type} takes text values, got the number {value}")
        multiply, divide = _UNIT_MS[unit]
        # TimeUnit.toMillis: toward zero, and a long past the range saturates
        return max(_LONG_MIN, min(_LONG_MAX, _java_quotient(value * multiply, divide)))

    def partition_value(self, value: Any, consistent_timestamp: bool = False) -> str:
        """The formatted partition value (before URL-encoding and hive-style)."""
        # an id java.util.TimeZone does not know is GMT (from_config refused or warned of it)
        in_zone = (hudi_time_zone(self.input_zone) or datetime.UTC) if self.input_zone else None
        out_zone = (hudi_time_zone(self.output_zone) or datetime.UTC) if self.output_zone else None
        if value is None:  # Hudi's default: 1 (ms or unit), or that instant printed in the input format
            if self.timestamp_type in ("DATE_STRING", "MIXED"):
                value = format_joda(self.input_formats[0], 1, in_zone or out_zone or datetime.UTC)
            else:
                value = 1
        zone = out_zone
        if isinstance(value, str):
            millis, parsed_zone = parse_joda(self.input_formats, value, in_zone)
            zone = out_zone or parsed_zone
        elif isinstance(value, bool):
            raise KeyGeneratorError(f"a boolean ({value}) is not a timestamp")
        elif isinstance(value, float | decimal.Decimal | int):
            millis = self._to_millis(_long_value(value))
        elif isinstance(value, datetime.datetime):
            # consistent: Timestamp.getTime(); else the Avro long, in the timestamp type's unit
            millis = _timestamp_millis(value) if consistent_timestamp else self._to_millis(_epoch_micros(value))
        elif isinstance(value, datetime.date):
            millis = self._to_millis(value.toordinal() - datetime.date(1970, 1, 1).toordinal())
        else:
            raise KeyGeneratorError(f"a {type(value).__name__} value is not a timestamp")
        try:
            return format_joda(self.output_format, millis, zone or datetime.UTC)
        except OverflowError:
            raise KeyGeneratorError(
                f"the timestamp {value!r} ({millis} ms since the epoch) is outside the years 1 to 9999 in the "
                "output time zone: tidemark cannot print its partition path"
            ) from None


@dataclass(frozen=True)
class PartitionField:
    name: str
    #: "simple" or "timestamp" (a CustomKeyGenerator's ``field:TYPE``; the TimestampBased one's)
    kind: str = "simple"


@dataclass(frozen=True)
class KeyGenerator:
    """One table's key generator: record key and partition path of a row (a mapping of column
    name to Python value, as ``pyarrow``'s ``to_pylist`` gives)."""

    class_name: str
    kind: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[PartitionField, ...] = ()
    hive_style: bool = False
    url_encode: bool = False
    #: a ComplexKeyGenerator with one record key field writes ``field:value`` (else the value)
    field_prefixed_single_key: bool = False
    timestamp: TimestampSettings | None = None
    consistent_timestamp: bool = False
    #: columns holding 32-bit floats (printed as Java's Float.toString)
    float_columns: frozenset[str] = frozenset()

    @property
    def partition_field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.partition_fields)

    @property
    def is_simple_text(self) -> bool:
        """Whether keys and paths are plain concatenations of the values' text (no timestamp
        formatting, no URL-encoding): a Spark expression can compute them."""
        # java.sql.Timestamp's text (consistent timestamps) is no Spark cast: printed per row
        return (
            not self.url_encode
            and not self.consistent_timestamp
            and all(f.kind == "simple" for f in self.partition_fields)
        )

    @property
    def complex_record_key(self) -> bool:
        """Whether the record key is written ``field:value,...`` (else the single value)."""
        if self.kind == "complex":
            return len(self.record_key_fields) > 1 or self.field_prefixed_single_key
        return len(self.record_key_fields) > 1  # nonpartitioned and custom: complex for several fields

    def _text(self, row: Mapping[str, Any], name: str) -> str | None:
        return value_text(field_value(row, name), self.consistent_timestamp, name in self.float_columns)

    def record_key(self, row: Mapping[str, Any]) -> str:
        if not self.complex_record_key:
            name = self.record_key_fields[0]
            text = self._text(row, name)
            if not text:
                raise KeyGeneratorError(f'record key value "{text}" for field "{name}" cannot be null or empty')
            return text
        parts, all_missing = [], True
        for name in self.record_key_fields:
            text = self._text(row, name)
            if text is None:
                parts.append(f"{name}:{NULL_RECORDKEY_PLACEHOLDER}")
            elif text == "":
                parts.append(f"{name}:{EMPTY_RECORDKEY_PLACEHOLDER}")
            else:
                parts.append(f"{name}:{text}")
                all_missing = False
        if all_missing:
            raise KeyGeneratorError(
                f"record key fields {', '.join(self.record_key_fields)} are all null or empty: {','.join(parts)}"
            )
        return ",".join(parts)

    def _path_part(self, field: PartitionField, row: Mapping[str, Any]) -> str:
        if field.kind == "timestamp":
            assert self.timestamp is not None
            try:
                text = self.timestamp.partition_value(field_value(row, field.name), self.consistent_timestamp)
            except KeyGeneratorError as e:  # which column, and which record
                try:
                    record = f" of the record with key {self.record_key(row)!r}"
                except KeyGeneratorError:
                    record = ""
                raise KeyGeneratorError(f"partition field {field.name!r}{record}: {e}") from None
        else:
            raw = self._text(row, field.name)
            text = raw or DEFAULT_PARTITION_PATH
        if self.url_encode:
            text = escape_path_name(text)
        return f"{field.name}={text}" if self.hive_style else text

    def partition_path(self, row: Mapping[str, Any]) -> str:
        if self.kind == "nonpartitioned" or not self.partition_fields:
            return ""
        if self.kind == "timestamp":
            return self._path_part(self.partition_fields[0], row)
        return "/".join(self._path_part(f, row) for f in self.partition_fields)

    def key_and_path(self) -> Callable[[Mapping[str, Any]], tuple[str, str]]:
        return lambda row: (self.record_key(row), self.partition_path(row))


def parse_partition_fields(text: str, kind: str) -> tuple[PartitionField, ...]:
    """``a,b`` or (CustomKeyGenerator) ``a:simple,b:timestamp``."""
    fields = []
    for item in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, typ = item.partition(":")
        if kind == "custom":
            if not sep:
                typed = ",".join(p.strip() + ":SIMPLE" for p in text.split(",") if p.strip())
                raise KeyGeneratorError(
                    f"CustomKeyGenerator needs each partition field's type, as field:SIMPLE or field:TIMESTAMP "
                    f"(got {item!r}); hoodie.properties of a version 6 table does not record it: give "
                    f"--partition-field {typed} or similar, or {WRITE_PARTITION_FIELDS}={typed} in a Hudi options dict"
                )
            if typ.strip().upper() not in ("SIMPLE", "TIMESTAMP"):
                raise KeyGeneratorError(f"partition field {item!r}: the type is SIMPLE or TIMESTAMP")
            fields.append(PartitionField(name.strip(), typ.strip().lower()))
        else:
            fields.append(PartitionField(name.strip(), "timestamp" if kind == "timestamp" else "simple"))
    return tuple(fields)


def build_key_generator(
    class_name: str,
    record_key_fields: Sequence[str],
    partition_fields: str,
    config: Mapping[str, str],
    hive_style: bool = False,
    url_encode: bool = False,
    field_prefixed_single_key: bool = False,
    text_partition: bool | None = None,
    float_columns: frozenset[str] = frozenset(),
    new_table: bool = False,
) -> KeyGenerator:
    """A key generator from the table's (resolved) settings. ``config`` holds the
    ``hoodie.keygen.timebased.*`` and other key generator settings; ``text_partition`` says
    whether the (first) timestamp partition column holds text, for Hudi's type inference;
    ``new_table`` that the write creates the table (``TimestampSettings.from_config``)."""
    kind = check_supported(class_name)
    keys = tuple(record_key_fields)
    if not keys:
        raise KeyGeneratorError(f"{class_name.rsplit('.', 1)[1]} needs a record key field")
    if kind in ("simple", "timestamp") and len(keys) > 1:
        raise KeyGeneratorError(
            f"{class_name.rsplit('.', 1)[1]} takes one record key field, got {', '.join(keys)} "
            "(use ComplexKeyGenerator or CustomKeyGenerator)"
        )
    fields = () if kind == "nonpartitioned" else parse_partition_fields(partition_fields, kind)
    if kind in ("simple", "timestamp") and len(fields) != 1:
        raise KeyGeneratorError(
            f"{class_name.rsplit('.', 1)[1]} takes one partition field, got {len(fields)} ({partition_fields or '-'})"
        )
    timestamp = None
    if any(f.kind == "timestamp" for f in fields):
        timestamp = TimestampSettings.from_config(config, text_partition, new_table)
    return KeyGenerator(
        class_name=class_name,
        kind=kind,
        record_key_fields=keys,
        partition_fields=fields,
        hive_style=hive_style,
        url_encode=url_encode,
        field_prefixed_single_key=field_prefixed_single_key,
        timestamp=timestamp,
        consistent_timestamp=conf_bool(config, CONSISTENT_TIMESTAMP, default=False),
        float_columns=float_columns,
    )
