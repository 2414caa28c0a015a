"""Timeline events as CloudEvents 1.0 in Kafka *binary* content mode.

One Kafka message is one event:

* the **key** is the table's location (UTF-8), so every event of a table lands in one partition
  and keeps its order;
* the **value** is the event data, Avro-encoded without a container (fastavro "schemaless") with
  the schema of the event's type, shipped in the package as ``schemas/events/<ce_type>.v<N>.avsc``
  (record ``tidemark.events.TimelineEvent``; every version 1 has the same fields);
* the CloudEvents attributes are **headers**: ``ce_specversion`` (``1.0``), ``ce_id``,
  ``ce_source``, ``ce_type``, ``ce_time`` (RFC 3339, UTC, microseconds), ``ce_subject`` (the
  instant), ``ce_dataschema`` (``urn:tidemark:schema:<ce_type>:<N>``, see :func:`dataschema`) and
  ``content-type`` (``avro/binary``).

The mapping of attributes to headers and of the table to the key is the CloudEvents SDK's Kafka
binding (:func:`cloudevents.core.bindings.kafka.to_binary`, which imports no Kafka client).
Decoding is done here: it checks more than the binding does and says precisely what is wrong.

``ce_id`` is deterministic: the first 32 hex digits of a SHA-256 over (type, table, instant,
action, state). An event published twice (a retried send, a service that crashed after publishing
and ran again) carries the same id, so consumers can de-duplicate on it.

Schema evolution: a published ``.avsc`` is never edited; a change is a new version of the type's
schema, fully compatible (backward and forward) with the previous one. Events without
``ce_dataschema`` (written before it existed) are read as version 1; a version this code does not
know is refused.

This module is part of the core: it imports no Kafka client. :mod:`tidemark.kafka_adapter` moves
the ``(key, value, headers)`` triples produced by :func:`encode` over the wire.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from importlib import resources
from typing import Any, Final

import fastavro
from cloudevents.core.base import BaseCloudEvent, EventFactory
from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.v1.event import CloudEvent

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
H_DATASCHEMA: Final = "ce_dataschema"
H_CONTENT_TYPE: Final = "content-type"

#: Headers every event carries (``ce_subject`` and ``ce_dataschema`` are written too, but
#: optional on reading: producers before ``ce_dataschema`` existed did not send it).
REQUIRED_HEADERS: Final = (H_SPECVERSION, H_ID, H_SOURCE, H_TYPE, H_TIME, H_CONTENT_TYPE)
_KNOWN_HEADERS: Final = frozenset((*REQUIRED_HEADERS, H_SUBJECT, H_DATASCHEMA))


class EventType(StrEnum):
    """The ``ce_type`` of a timeline event."""

    INSTANT_COMPLETED = "tidemark.instant.completed"
    CLEAN_REQUESTED = "tidemark.clean.requested"
    CLEAN_COMPLETED = "tidemark.clean.completed"
    ARCHIVE_REQUESTED = "tidemark.archive.requested"
    ARCHIVE_COMPLETED = "tidemark.archive.completed"
    #: a service's answer to a request it handled with nothing to do (no instant was written):
    #: the request is no longer pending (the operator's Forbid policy)
    CLEAN_SKIPPED = "tidemark.clean.skipped"
    ARCHIVE_SKIPPED = "tidemark.archive.skipped"
    #: the operator's: a compaction is due (it runs it as a Kubernetes Job, ``tidemark compact``)
    COMPACTION_REQUESTED = "tidemark.compaction.requested"
    #: the writer-coordinator's: a write registered, lost to a conflict, or ended without commit
    WRITE_STARTED = "tidemark.write.started"
    WRITE_CONFLICTED = "tidemark.write.conflicted"
    WRITE_ABORTED = "tidemark.write.aborted"


# --- schemas -------------------------------------------------------------------------------------

#: Package folder (relative to ``tidemark``) holding one ``<ce_type>.v<N>.avsc`` per published version.
SCHEMA_FOLDER: Final = "schemas/events"
#: ``ce_dataschema`` of version N of a type's schema: ``urn:tidemark:schema:<ce_type>:<N>``.
DATASCHEMA_PREFIX: Final = "urn:tidemark:schema:"
_SCHEMA_FILE: Final = re.compile(r"(?P<type>[a-z0-9.]+)\.v(?P<version>[1-9][0-9]*)\.avsc")
_DATASCHEMA: Final = re.compile(re.escape(DATASCHEMA_PREFIX) + r"(?P<type>[^:]+):(?P<version>[1-9][0-9]{0,8})")


def _load_schemas() -> dict[EventType, dict[int, dict[str, Any]]]:
    """Every published schema version of every event type, from the package's ``.avsc`` files.

    A missing type, a gap in a type's versions or a file of no known type is a broken package:
    it fails here, on import, rather than on the first event of that type."""
    found: dict[EventType, dict[int, dict[str, Any]]] = {t: {} for t in EventType}
    folder = resources.files("tidemark").joinpath(SCHEMA_FOLDER)
    for entry in folder.iterdir():
        match = _SCHEMA_FILE.fullmatch(entry.name)
        if match is None:
            continue
        try:
            type_ = EventType(match["type"])
        except ValueError:
            raise RuntimeError(f"{SCHEMA_FOLDER}/{entry.name}: no event type {match['type']!r}") from None
        found[type_][int(match["version"])] = json.loads(entry.read_text("utf-8"))
    for type_, versions in found.items():
        if sorted(versions) != list(range(1, len(versions) + 1)):
            raise RuntimeError(
                f"{SCHEMA_FOLDER}: the schemas of {type_} must be versions 1..N, found {sorted(versions) or 'none'}"
            )
    return found


_SCHEMAS: Final = _load_schemas()
_PARSED: Final = {
    (type_, version): fastavro.parse_schema(copy.deepcopy(avsc))
    for type_, versions in _SCHEMAS.items()
    for version, avsc in versions.items()
}


def schema_versions(type_: EventType | str) -> tuple[int, ...]:
    """The published schema versions of ``type_``, oldest first; the last one is written."""
    return tuple(sorted(_SCHEMAS[EventType(type_)]))


def current_version(type_: EventType | str) -> int:
    """The schema version :func:`encode` writes for ``type_``."""
    return max(_SCHEMAS[EventType(type_)])


def schema(type_: EventType | str, version: int | None = None) -> dict[str, Any]:
    """The Avro schema (parsed JSON of the ``.avsc``) of ``type_``, the current version by default.

    Raises :class:`ValueError` for an unknown type or version, naming the known ones."""
    try:
        known = _SCHEMAS[EventType(type_)]
    except ValueError:
        raise ValueError(f"unknown event type {type_!r}; the types are: {', '.join(EventType)}") from None
    chosen = max(known) if version is None else version
    if chosen not in known:
        raise ValueError(f"{type_} has no schema version {version}; its versions are {sorted(known)}")
    return copy.deepcopy(known[chosen])


def dataschema(type_: EventType | str, version: int | None = None) -> str:
    """The ``ce_dataschema`` naming a schema version, e.g. ``urn:tidemark:schema:tidemark.clean.completed:1``."""
    return f"{DATASCHEMA_PREFIX}{EventType(type_)}:{current_version(type_) if version is None else version}"


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


#: the answer to each request type that a service may handle with nothing to do
_SKIPPED: Final = {
    EventType.CLEAN_REQUESTED: EventType.CLEAN_SKIPPED,
    EventType.ARCHIVE_REQUESTED: EventType.ARCHIVE_SKIPPED,
}
#: the types that answer a request with nothing done
SKIPPED_TYPES: Final = frozenset(_SKIPPED.values())


def skipped(request: TimelineEvent, reason: str) -> TimelineEvent:
    """The answer to ``request`` (a ``clean.requested`` or ``archive.requested``) that the service
    handled with nothing to do: its instant and action are the request's, its state ``SKIPPED``.
    Without it, an operator under Forbid would count the request pending until it times out."""
    try:
        type_ = _SKIPPED[request.type]
    except KeyError:
        raise ValueError(f"{request.type} is not a request a service answers with a skip") from None
    return TimelineEvent(type_, request.table, request.instant, request.action, "SKIPPED", extra={"reason": reason})


Header = tuple[str, bytes]


def _format_time(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class AvroFormat:
    """The event data format for the CloudEvents SDK's bindings: schemaless Avro of one schema.

    Binary content mode only: an Avro-encoded event has no structured (whole-event) form here."""

    def __init__(self, parsed_schema: Any, name: str):
        self._schema = parsed_schema
        self._name = name

    def write_data(self, data: dict[str, Any] | str | bytes | None, datacontenttype: str | None) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._schema, data)
        return buf.getvalue()

    def read_data(self, body: bytes, datacontenttype: str | None) -> dict[str, Any] | str | bytes | None:
        return _read_payload(body, self._schema, self._name)

    def get_content_type(self) -> str:
        return CONTENT_TYPE

    def read(self, event_factory: EventFactory | None, data: str | bytes) -> BaseCloudEvent:
        raise ValueError("tidemark events are sent in binary content mode only")

    def write(self, event: BaseCloudEvent) -> bytes:
        raise ValueError("tidemark events are sent in binary content mode only")


#: per type, what :func:`encode` writes: the current version's format and ``ce_dataschema``
_WRITTEN: Final = {
    type_: (AvroFormat(_PARSED[type_, current_version(type_)], dataschema(type_)), dataschema(type_))
    for type_ in EventType
}


def event_data(event: TimelineEvent) -> dict[str, Any]:
    """The Avro record of ``event``'s payload (field names as in the schemas)."""
    return {
        "table": event.table,
        "instant": event.instant,
        "action": event.action,
        "state": event.state,
        "earliestCommitToRetain": event.earliest_commit_to_retain,
        "earliestCommitToNotArchive": event.earliest_commit_to_not_archive,
        "extra": dict(event.extra),
    }


def encode(event: TimelineEvent) -> tuple[bytes, bytes, list[Header]]:
    """``(key, value, headers)`` of the Kafka message carrying ``event``."""
    datum = event_data(event)
    data_format, data_schema = _WRITTEN[event.type]
    attributes: dict[str, Any] = {  # in this order on the wire
        "specversion": SPEC_VERSION,
        "id": event.id,
        "source": event.source,
        "type": str(event.type),
        "time": event.time.astimezone(UTC),
        "subject": event.instant,
        "dataschema": data_schema,
        "datacontenttype": CONTENT_TYPE,
    }
    key = event.table.encode("utf-8")
    message = ce_kafka.to_binary(CloudEvent(attributes, datum), data_format, lambda _: key)
    headers = message.headers
    # the SDK leaves out the fraction of a whole-second time; ce_time has always had microseconds
    headers[H_TIME] = _format_time(event.time).encode()
    return key, message.value, list(headers.items())


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


def _read_payload(value: bytes, parsed_schema: Any, name: str) -> dict[str, Any]:
    """The record in ``value``, written with ``parsed_schema`` (named ``name`` in errors)."""
    try:
        buf = io.BytesIO(value)
        datum = fastavro.schemaless_reader(buf, parsed_schema, None)
        consumed = buf.tell()
    except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError...
        raise EventDecodeError(f"payload is not valid Avro of {name} ({type(exc).__name__}: {exc})") from None
    if not isinstance(datum, dict):
        raise EventDecodeError(f"payload is not valid Avro of {name} (decoded to {type(datum).__name__})")
    if consumed != len(value):
        raise EventDecodeError(
            f"payload is not valid Avro of {name} "
            f"({len(value) - consumed} trailing bytes after the record's {consumed})"
        )
    # a string whose declared length runs past the end decodes "short" in some fastavro readers:
    # only bytes that re-encode to themselves are the record they claim to be.
    try:
        again = io.BytesIO()
        fastavro.schemaless_writer(again, parsed_schema, datum)
    except Exception as exc:
        raise EventDecodeError(f"payload is not valid Avro of {name} ({exc})") from None
    if again.getvalue() != value:
        raise EventDecodeError(f"payload is not valid Avro of {name} (truncated or non-canonical)")
    return datum


def _schema_version(type_: EventType, given: str | None) -> int:
    """The schema version an event of ``type_`` was written with, from its ``ce_dataschema``."""
    if given is None:
        return 1  # written before ce_dataschema existed, with what became version 1
    match = _DATASCHEMA.fullmatch(given)
    if match is None:
        raise EventDecodeError(
            f"header {H_DATASCHEMA} {given!r} is not a tidemark event schema "
            f"(expected {DATASCHEMA_PREFIX}<ce_type>:<version>)"
        )
    if match["type"] != type_:
        raise EventDecodeError(
            f"header {H_DATASCHEMA} {given!r} is the schema of another type than ce_type {str(type_)!r}"
        )
    version = int(match["version"])
    if version not in _SCHEMAS[type_]:
        raise EventDecodeError(
            f"unknown schema version {version} of {type_} (header {H_DATASCHEMA} {given!r}); this tidemark "
            f"reads versions {', '.join(map(str, schema_versions(type_)))}: upgrade it to read newer events"
        )
    return version


def _read_event_data(value: bytes, type_: EventType, version: int) -> dict[str, Any]:
    """The event data in the shape of the current schema of ``type_``, resolved from ``version``."""
    name = dataschema(type_, version)
    datum = _read_payload(value, _PARSED[type_, version], name)
    current = current_version(type_)
    if version == current:
        return datum
    try:  # Avro schema resolution: fields added since take their defaults, removed ones are dropped
        resolved = fastavro.schemaless_reader(io.BytesIO(value), _PARSED[type_, version], _PARSED[type_, current])
    except Exception as exc:
        raise EventDecodeError(f"payload of {name} does not resolve to version {current}: {exc}") from None
    if not isinstance(resolved, dict):
        raise EventDecodeError(f"payload of {name} resolved to {type(resolved).__name__}, not a record")
    return resolved


def decode(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None) -> TimelineEvent:
    """The event carried by a Kafka message (as written by :func:`encode`).

    Raises :class:`EventDecodeError`, and nothing else, saying what is wrong: a missing, repeated
    or non-UTF-8 header, an unsupported spec version or content type, an unknown ``ce_type``, a
    ``ce_dataschema`` of another type or of an unknown version, a payload that is not Avro of the
    event's schema, or a key, subject or id that does not match the payload.
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
    datum = _read_event_data(bytes(value), type_, _schema_version(type_, h.get(H_DATASCHEMA)))

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
