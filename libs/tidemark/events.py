"""Timeline events as CloudEvents 1.0 in Kafka *binary* content mode.

One Kafka message is one event:

* the **key** is the table's location (UTF-8), so every event of a table lands in one partition
  and keeps its order;
* the **value** is the event data, Avro-encoded without a container (fastavro "schemaless") with
  the fixed schema :data:`EVENT_SCHEMA` (record ``tidemark.events.TimelineEvent``);
* the CloudEvents attributes are **headers**: ``ce_specversion`` (``1.0``), ``ce_id``,
  ``ce_source``, ``ce_type``, ``ce_time`` (RFC 3339), ``ce_subject`` (the instant) and
  ``content-type`` (``avro/binary``).

``ce_id`` is deterministic: the first 32 hex digits of a SHA-256 over (type, table, instant,
action, state). An event published twice (a retried send, a service that crashed after publishing
and ran again) carries the same id, so consumers can de-duplicate on it.

This module is part of the core: it imports no Kafka client. :mod:`tidemark.kafka_adapter` moves
the ``(key, value, headers)`` triples produced by :func:`encode` over the wire.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

import fastavro

from tidemark.errors import EventDecodeError

#: The only CloudEvents spec version written and accepted.
SPEC_VERSION: Final = "1.0"
#: ``content-type`` header value: the payload is Avro binary without a container.
CONTENT_TYPE: Final = "avro/binary"
#: ``ce_source`` used when an event does not name one (a URI-reference, as CloudEvents asks).
DEFAULT_SOURCE: Final = "/tidemark"

H_SPECVERSION: Final = "ce_specversion"
H_ID: Final = "ce_id"
H_SOURCE: Final = "ce_source"
H_TYPE: Final = "ce_type"
H_TIME: Final = "ce_time"
H_SUBJECT: Final = "ce_subject"
H_CONTENT_TYPE: Final = "content-type"

#: Headers every event carries (``ce_subject`` is written too, but optional on reading).
REQUIRED_HEADERS: Final = (H_SPECVERSION, H_ID, H_SOURCE, H_TYPE, H_TIME, H_CONTENT_TYPE)
_KNOWN_HEADERS: Final = frozenset((*REQUIRED_HEADERS, H_SUBJECT))


class EventType(StrEnum):
    """The ``ce_type`` of a timeline event."""

    INSTANT_COMPLETED = "tidemark.instant.completed"
    CLEAN_REQUESTED = "tidemark.clean.requested"
    CLEAN_COMPLETED = "tidemark.clean.completed"
    ARCHIVE_REQUESTED = "tidemark.archive.requested"
    ARCHIVE_COMPLETED = "tidemark.archive.completed"
    #: the writer-coordinator's: a write registered, lost to a conflict, or ended without commit
    WRITE_STARTED = "tidemark.write.started"
    WRITE_CONFLICTED = "tidemark.write.conflicted"
    WRITE_ABORTED = "tidemark.write.aborted"


#: Avro schema of the event data (the Kafka message value).
EVENT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "record",
    "name": "TimelineEvent",
    "namespace": "tidemark.events",
    "doc": "A change on a Hudi table's timeline, published by a tidemark table service.",
    "fields": [
        {"name": "table", "type": "string", "doc": "The table's location (base path or URI)."},
        {"name": "instant", "type": "string", "doc": "Instant time, e.g. 20240101120000000."},
        {"name": "action", "type": "string", "doc": "Timeline action: commit, deltacommit, clean, ..."},
        {"name": "state", "type": "string", "doc": "Instant state: REQUESTED, INFLIGHT or COMPLETED."},
        {"name": "earliestCommitToRetain", "type": ["null", "string"], "default": None},
        {"name": "earliestCommitToNotArchive", "type": ["null", "string"], "default": None},
        {"name": "extra", "type": {"type": "map", "values": "string"}, "default": {}},
    ],
}
_PARSED_SCHEMA: Final = fastavro.parse_schema(dict(EVENT_SCHEMA))


def event_id(type_: EventType | str, table: str, instant: str, action: str, state: str) -> str:
    """The deterministic ``ce_id``: first 32 hex digits of SHA-256 over the identifying fields.

    The fields are hashed as a JSON array, so no choice of field values can make two different
    tuples hash the same input.
    """
    canonical = json.dumps([str(type_), table, instant, action, state], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class TimelineEvent:
    """A timeline change of one table, as published by the cleaner, the archiver, or a writer.

    ``time`` (``ce_time``) must be timezone-aware; it is not part of the id, so re-publishing the
    same change later keeps the id. ``extra`` takes free-form string attributes (it is left out of
    the hash so events stay hashable).
    """

    type: EventType
    table: str
    instant: str
    action: str
    state: str
    time: datetime = field(default_factory=lambda: datetime.now(UTC))
    source: str = DEFAULT_SOURCE
    earliest_commit_to_retain: str | None = None
    earliest_commit_to_not_archive: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        given: object = self.type
        if not isinstance(given, EventType):
            object.__setattr__(self, "type", EventType(str(given)))  # ValueError for an unknown type
        for name in ("table", "instant", "action", "state", "source"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"TimelineEvent.{name} must be a non-empty string, got {value!r}")
        if self.time.tzinfo is None or self.time.utcoffset() is None:
            raise ValueError(f"TimelineEvent.time must be timezone-aware, got {self.time!r}")
        for k, v in self.extra.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError(f"TimelineEvent.extra must map strings to strings, got {k!r}: {v!r}")

    @property
    def id(self) -> str:
        """The deterministic CloudEvents id (see :func:`event_id`)."""
        return event_id(self.type, self.table, self.instant, self.action, self.state)


Header = tuple[str, bytes]


def _format_time(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def encode(event: TimelineEvent) -> tuple[bytes, bytes, list[Header]]:
    """``(key, value, headers)`` of the Kafka message carrying ``event``."""
    datum = {
        "table": event.table,
        "instant": event.instant,
        "action": event.action,
        "state": event.state,
        "earliestCommitToRetain": event.earliest_commit_to_retain,
        "earliestCommitToNotArchive": event.earliest_commit_to_not_archive,
        "extra": dict(event.extra),
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED_SCHEMA, datum)
    headers: list[Header] = [
        (H_SPECVERSION, SPEC_VERSION.encode()),
        (H_ID, event.id.encode()),
        (H_SOURCE, event.source.encode("utf-8")),
        (H_TYPE, str(event.type).encode()),
        (H_TIME, _format_time(event.time).encode()),
        (H_SUBJECT, event.instant.encode("utf-8")),
        (H_CONTENT_TYPE, CONTENT_TYPE.encode()),
    ]
    return event.table.encode("utf-8"), buf.getvalue(), headers


def _header_map(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """The CloudEvents headers as text; other headers are ignored (Kafka lets anyone add some)."""
    found: dict[str, str] = {}
    for item in headers or ():
        try:
            name, raw = item
        except (TypeError, ValueError):
            raise EventDecodeError(f"header {item!r} is not a (name, value) pair") from None
        if not isinstance(name, str):
            raise EventDecodeError(f"header name {name!r} is not a string")
        if name not in _KNOWN_HEADERS:
            continue
        if name in found:
            raise EventDecodeError(f"header {name} appears more than once")
        if raw is None:
            raise EventDecodeError(f"header {name} has no value")
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            raise EventDecodeError(f"header {name} is not bytes: {type(raw).__name__}")
        try:
            found[name] = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EventDecodeError(f"header {name} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return found


def _parse_time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise EventDecodeError(f"header {H_TIME} is not an RFC 3339 timestamp: {text!r}") from None
    if t.tzinfo is None:
        raise EventDecodeError(f"header {H_TIME} has no UTC offset: {text!r}")
    return t


def _read_payload(value: bytes) -> dict[str, Any]:
    try:
        buf = io.BytesIO(value)
        datum = fastavro.schemaless_reader(buf, _PARSED_SCHEMA, None)
        consumed = buf.tell()
    except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError...
        raise EventDecodeError(
            f"payload is not valid Avro of {EVENT_SCHEMA['name']} ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(datum, dict):
        raise EventDecodeError(
            f"payload is not valid Avro of {EVENT_SCHEMA['name']} (decoded to {type(datum).__name__})"
        )
    if consumed != len(value):
        raise EventDecodeError(
            f"payload is not valid Avro of {EVENT_SCHEMA['name']} ({len(value) - consumed} trailing bytes "
            f"after the record's {consumed})"
        )
    # a string whose declared length runs past the end decodes "short" in some fastavro readers:
    # only bytes that re-encode to themselves are the record they claim to be.
    try:
        again = io.BytesIO()
        fastavro.schemaless_writer(again, _PARSED_SCHEMA, datum)
    except Exception as exc:
        raise EventDecodeError(f"payload is not valid Avro of {EVENT_SCHEMA['name']} ({exc})") from None
    if again.getvalue() != value:
        raise EventDecodeError(f"payload is not valid Avro of {EVENT_SCHEMA['name']} (truncated or non-canonical)")
    return datum


def decode(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None) -> TimelineEvent:
    """The event carried by a Kafka message (as written by :func:`encode`).

    Raises :class:`EventDecodeError`, and nothing else, saying what is wrong: a missing, repeated
    or non-UTF-8 header, an unsupported spec version or content type, an unknown ``ce_type``, a
    payload that is not Avro of the event schema, or a key, subject or id that does not match the
    payload.
    """
    h = _header_map(headers)
    for name in REQUIRED_HEADERS:
        if name not in h:
            raise EventDecodeError(f"missing header {name}")
    if h[H_SPECVERSION] != SPEC_VERSION:
        raise EventDecodeError(f"unsupported CloudEvents specversion {h[H_SPECVERSION]!r} (expected {SPEC_VERSION!r})")
    if h[H_CONTENT_TYPE] != CONTENT_TYPE:
        raise EventDecodeError(f"unsupported content-type {h[H_CONTENT_TYPE]!r} (expected {CONTENT_TYPE!r})")
    try:
        type_ = EventType(h[H_TYPE])
    except ValueError:
        raise EventDecodeError(f"unknown ce_type {h[H_TYPE]!r}") from None
    if not h[H_SOURCE]:
        raise EventDecodeError(f"header {H_SOURCE} is empty")
    time = _parse_time(h[H_TIME])
    if value is None:
        raise EventDecodeError("message has no payload (null value)")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise EventDecodeError(f"payload is not bytes: {type(value).__name__}")
    datum = _read_payload(bytes(value))

    table: str = datum["table"]
    instant: str = datum["instant"]
    if key is not None:
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise EventDecodeError(f"message key is not bytes: {type(key).__name__}")
        try:
            key_text = bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            raise EventDecodeError("message key is not valid UTF-8") from None
        if key_text != table:
            raise EventDecodeError(f"message key {key_text!r} is not the event's table {table!r}")
    if H_SUBJECT in h and h[H_SUBJECT] != instant:
        raise EventDecodeError(f"header {H_SUBJECT} {h[H_SUBJECT]!r} is not the event's instant {instant!r}")
    try:
        event = TimelineEvent(
            type=type_,
            table=table,
            instant=instant,
            action=datum["action"],
            state=datum["state"],
            time=time,
            source=h[H_SOURCE],
            earliest_commit_to_retain=datum["earliestCommitToRetain"],
            earliest_commit_to_not_archive=datum["earliestCommitToNotArchive"],
            extra=dict(datum["extra"]),
        )
    except ValueError as exc:
        raise EventDecodeError(f"payload holds an invalid event: {exc}") from None
    if h[H_ID] != event.id:
        raise EventDecodeError(f"header {H_ID} {h[H_ID]!r} does not match the event's content (expected {event.id!r})")
    return event
