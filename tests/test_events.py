"""Timeline events: the CloudEvents/Avro codec, and the Kafka adapter against a real broker (tansu)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro
import pytest

from tests.support.kafka import TansuBroker
from tidemark.errors import BrokerUnavailableError, EventDecodeError, TidemarkError
from tidemark.events import EventType, TimelineEvent, decode, encode, event_id

FROZEN_SCHEMAS = Path(__file__).parent / "data" / "event_schemas"

if TYPE_CHECKING:
    from tidemark.kafka_adapter import EventConsumer, RawMessage

TABLE_A = "s3://lake/warehouse/orders"
TABLE_B = "file:///data/hudi/customers"
T0 = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)


def clean_completed(table: str = TABLE_A, instant: str = "20240501123015123", **kw: Any) -> TimelineEvent:
    args: dict[str, Any] = {
        "type": EventType.CLEAN_COMPLETED,
        "table": table,
        "instant": instant,
        "action": "clean",
        "state": "COMPLETED",
        "time": T0,
        "earliest_commit_to_retain": "20240501100000000",
        **kw,
    }
    return TimelineEvent(**args)


Headers = list[tuple[str, bytes]]


def with_header(headers: Headers, name: str, value: bytes | None) -> Headers:
    """``headers`` with ``name`` replaced by ``value`` (removed when ``value`` is None)."""
    out = [(n, v) for n, v in headers if n != name]
    if value is not None:
        out.append((name, value))
    return out


# --- codec -------------------------------------------------------------------------------------


def test_round_trip_keeps_every_field() -> None:
    event = clean_completed(
        earliest_commit_to_not_archive="20240430000000000",
        source="/tidemark/cleaner",
        extra={"filesDeleted": "12", "partition": "dt=2024-05-01", "ünïcode": "✓"},
    )
    key, value, headers = encode(event)

    assert key == TABLE_A.encode()
    assert headers == [
        ("ce_specversion", b"1.0"),
        ("ce_id", event.id.encode()),
        ("ce_source", b"/tidemark/cleaner"),
        ("ce_type", b"tidemark.clean.completed"),
        ("ce_time", b"2024-05-01T12:30:15.123456Z"),
        ("ce_subject", b"20240501123015123"),
        ("ce_dataschema", b"urn:tidemark:schema:tidemark.clean.completed:1"),
        ("content-type", b"avro/binary"),
    ]
    # the payload is plain schemaless Avro of the published schema
    published = fastavro.schema.load_schema(FROZEN_SCHEMAS / "tidemark.clean.completed.v1.avsc")
    datum: Any = fastavro.schemaless_reader(io.BytesIO(value), published, None)
    assert datum["table"] == TABLE_A
    assert datum["earliestCommitToRetain"] == "20240501100000000"

    decoded = decode(key, value, headers)
    assert decoded == event
    assert decoded.time == T0
    assert decoded.id == event.id


@pytest.mark.parametrize("type_", list(EventType))
def test_round_trip_every_type_with_defaults(type_: EventType) -> None:
    event = TimelineEvent(type=type_, table=TABLE_B, instant="20240101000000000", action="commit", state="COMPLETED")
    decoded = decode(*encode(event))
    assert decoded == event
    assert decoded.earliest_commit_to_retain is None
    assert decoded.extra == {}


def test_non_utc_time_round_trips_as_the_same_instant() -> None:
    local = datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    _, _, headers = encode(clean_completed(time=local))
    assert dict(headers)["ce_time"] == b"2024-05-01T12:30:15.123456Z"
    assert decode(*encode(clean_completed(time=local))).time == T0


def test_a_whole_second_time_keeps_its_microseconds() -> None:
    _, _, headers = encode(clean_completed(time=T0.replace(microsecond=0)))
    assert dict(headers)["ce_time"] == b"2024-05-01T12:30:15.000000Z"


def test_ids_are_deterministic() -> None:
    a = clean_completed()
    # published again later, by another source, with other details: same change, same id
    again = clean_completed(time=T0 + timedelta(hours=1), source="/elsewhere", extra={"retry": "1"})
    assert a.id == again.id
    assert dict(encode(a)[2])["ce_id"] == dict(encode(again)[2])["ce_id"]
    assert len(a.id) == 32
    assert (
        a.id
        == hashlib.sha256(
            b'["tidemark.clean.completed","s3://lake/warehouse/orders","20240501123015123","clean","COMPLETED"]'
        ).hexdigest()[:32]
    )
    assert a.id == event_id(EventType.CLEAN_COMPLETED, TABLE_A, "20240501123015123", "clean", "COMPLETED")


@pytest.mark.parametrize(
    "change",
    [
        {"state": "REQUESTED"},
        {"type": EventType.CLEAN_REQUESTED},
        {"table": TABLE_B},
        {"instant": "20240501123015124"},
        {"action": "commit"},
    ],
)
def test_ids_differ_when_an_identifying_field_differs(change: dict[str, Any]) -> None:
    assert clean_completed(**change).id != clean_completed().id


def test_events_are_hashable_and_validated() -> None:
    assert len({clean_completed(), clean_completed()}) == 1
    with pytest.raises(ValueError, match="timezone-aware"):
        clean_completed(time=datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="table"):
        clean_completed(table="")
    with pytest.raises(ValueError, match=r"tidemark\.no\.such"):
        TimelineEvent(type="tidemark.no.such", table=TABLE_A, instant="1", action="a", state="s")  # type: ignore[arg-type]


def _valid() -> tuple[bytes, bytes, Headers]:
    return encode(clean_completed(extra={"k": "v"}))


def _truncate(n: int) -> Callable[[bytes, bytes, Headers], tuple[bytes, bytes, Headers]]:
    return lambda k, v, h: (k, v[:n], h)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        pytest.param(lambda k, v, h: (k, v, with_header(h, "ce_type", None)), "missing header ce_type", id="no-type"),
        pytest.param(lambda k, v, h: (k, v, with_header(h, "ce_id", None)), "missing header ce_id", id="no-id"),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "content-type", None)), "missing header content-type", id="no-ct"
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_type", b"tidemark.compaction.completed")),
            "unknown ce_type 'tidemark.compaction.completed'",
            id="unknown-type",
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_specversion", b"0.3")),
            "unsupported CloudEvents specversion '0.3'",
            id="specversion",
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "content-type", b"application/json")),
            "unsupported content-type 'application/json'",
            id="content-type",
        ),
        pytest.param(lambda k, v, h: (k, b"not avro at all", h), "payload is not valid Avro", id="garbage"),
        pytest.param(lambda k, v, h: (k, b"", h), "payload is not valid Avro", id="empty-payload"),
        pytest.param(_truncate(-1), "payload is not valid Avro", id="truncated-by-1"),
        pytest.param(_truncate(10), "payload is not valid Avro", id="truncated-to-10"),
        pytest.param(lambda k, v, h: (k, v + b"\x00", h), "1 trailing bytes", id="trailing-byte"),
        pytest.param(lambda k, v, h: (k, None, h), "no payload", id="null-payload"),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_source", b"/tidemark/\xff\xfe")),
            "header ce_source is not valid UTF-8",
            id="non-utf8-header",
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_time", b"yesterday")),
            "header ce_time is not an RFC 3339 timestamp",
            id="bad-time",
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_time", b"2024-05-01T12:30:15")), "no UTC offset", id="naive-time"
        ),
        pytest.param(
            lambda k, v, h: (k, v, [*h, ("ce_type", b"tidemark.clean.completed")]),
            "header ce_type appears more than once",
            id="duplicate-header",
        ),
        pytest.param(lambda k, v, h: (k, v, with_header(h, "ce_id", b"0" * 32)), "does not match", id="wrong-id"),
        pytest.param(lambda k, v, h: (b"s3://other/table", v, h), "is not the event's table", id="wrong-key"),
        pytest.param(lambda k, v, h: (b"\xff", v, h), "message key is not valid UTF-8", id="non-utf8-key"),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_subject", b"20990101000000000")),
            "is not the event's instant",
            id="wrong-subject",
        ),
        pytest.param(lambda k, v, h: (k, v, None), "missing header ce_specversion", id="no-headers"),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_dataschema", b"urn:tidemark:schema:tidemark.clean.completed:2")),
            "unknown schema version 2 of tidemark.clean.completed",
            id="dataschema-newer-version",
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_dataschema", b"urn:tidemark:schema:tidemark.write.started:1")),
            "is the schema of another type than ce_type 'tidemark.clean.completed'",
            id="dataschema-other-type",
        ),
        pytest.param(
            lambda k, v, h: (k, v, with_header(h, "ce_dataschema", b"https://example.com/schema.avsc")),
            "is not a tidemark event schema (expected urn:tidemark:schema:<ce_type>:<version>)",
            id="dataschema-foreign",
        ),
    ],
)
def test_decode_errors_say_why(
    mutate: Callable[[bytes, bytes, Headers], tuple[bytes | None, bytes | None, Headers | None]], reason: str
) -> None:
    key, value, headers = mutate(*_valid())
    with pytest.raises(EventDecodeError) as info:
        decode(key, value, headers)
    assert reason in str(info.value)


def test_events_of_producers_before_dataschema_still_decode() -> None:
    key, value, headers = _valid()
    older = with_header(headers, "ce_dataschema", None)
    assert decode(key, value, older) == decode(key, value, headers)


def test_decode_ignores_foreign_headers_and_accepts_a_null_key() -> None:
    key, value, headers = _valid()
    event = decode(None, value, [("traceparent", b"00-abc-def-01"), ("x-binary", b"\xff"), *headers])
    assert event == decode(key, value, headers)


def test_every_truncation_and_random_damage_raises_only_event_decode_error() -> None:
    key, value, headers = _valid()
    for n in range(len(value)):
        with pytest.raises(EventDecodeError):
            decode(key, value[:n], headers)
    rng = random.Random(20240501)
    for _ in range(2000):
        damaged = bytearray(value)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        with contextlib.suppress(EventDecodeError):  # a damaged detail may still be a valid event
            decode(key, bytes(damaged), headers)
    for _ in range(500):
        junk = rng.randbytes(rng.randint(0, 64))
        with pytest.raises(EventDecodeError):
            decode(key, junk, headers)


def test_error_classes() -> None:
    assert issubclass(EventDecodeError, TidemarkError)
    assert issubclass(BrokerUnavailableError, TidemarkError)


# --- against a real broker ---------------------------------------------------------------------


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:12]
    return f"tidemark-events-{suffix}", f"tidemark-group-{suffix}"


def _poll_until(consumer: EventConsumer, count: int, timeout_s: float) -> list[RawMessage]:
    """Poll ``consumer`` until ``count`` messages arrived or ``timeout_s`` passed."""
    got: list[RawMessage] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and (remaining := deadline - time.monotonic()) > 0:
        got.extend(consumer.poll(min(remaining, 2.0)))
    return got


kafka_tests = pytest.mark.kafka


@kafka_tests
def test_group_receives_events_with_headers_in_per_table_order(kafka_broker: TansuBroker) -> None:
    from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics

    topic, group = _names()
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=3)
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=3)  # exists already: nothing happens
    events = [
        clean_completed(TABLE_A, "20240501000000001"),
        clean_completed(TABLE_B, "20240501000000002"),
        clean_completed(TABLE_A, "20240501000000003", type=EventType.ARCHIVE_COMPLETED, action="commit"),
    ]
    poison_headers = [("ce_specversion", b"1.0"), ("x-reason", b"\xff not text")]
    with EventProducer(kafka_broker.bootstrap, publish_timeout_s=10) as producer:
        for e in events:
            producer.publish(topic, e)
        producer.publish_raw(topic, b"poison", b"\x00garbage", poison_headers)

    with EventConsumer(kafka_broker.bootstrap, [topic], group) as consumer:
        received = _poll_until(consumer, 4, 20)
    assert len(received) == 4
    (poison,) = [m for m in received if m.key == b"poison"]
    assert (poison.value, list(poison.headers)) == (b"\x00garbage", poison_headers)
    with pytest.raises(EventDecodeError, match="missing header ce_id"):
        decode(poison.key, poison.value, poison.headers)
    messages = [m for m in received if m is not poison]
    for m in messages:
        event = decode(m.key, m.value, m.headers)
        expected = next(e for e in events if e.id == event.id)
        assert event == expected
        assert list(m.headers) == encode(expected)[2]  # every header, in order, byte for byte
    a_messages = [m for m in messages if m.key == TABLE_A.encode()]
    assert len({m.partition for m in a_messages}) == 1  # one table, one partition ...
    a_sorted = sorted(a_messages, key=lambda m: m.offset)
    assert [decode(m.key, m.value, m.headers).instant for m in a_sorted] == ["20240501000000001", "20240501000000003"]
    assert [m.offset for m in a_messages] == [m.offset for m in a_sorted]  # ... delivered in offset order


@kafka_tests
def test_a_message_the_kafka_client_cannot_send_is_refused_at_once_and_the_others_are_sent(
    kafka_broker: TansuBroker,
) -> None:
    from tidemark.errors import MessageRefusedError
    from tidemark.kafka_adapter import EventConsumer, EventProducer, Outgoing, ensure_topics

    topic, group = _names()
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=1)
    null_header: Any = [("trace", None)]  # as a RawMessage may hold it; kafka-python sends no null value
    refusal = rf"the Kafka client refused message of 5 bytes for topic '{topic}': not a record it can send "
    refusal += r"\(AssertionError\)"
    event = clean_completed()
    with EventProducer(kafka_broker.bootstrap, publish_timeout_s=10) as producer:
        started = time.monotonic()
        with pytest.raises(MessageRefusedError, match=refusal):
            producer.publish_raw(topic, b"k", b"value", null_header)
        assert time.monotonic() - started < 5, "refused at once, not retried until the timeout"
        unsendable = Outgoing(b"k", b"value", null_header, "message of 5 bytes")
        refused, sent = producer.publish_all(topic, [unsendable, event])
    assert isinstance(refused, MessageRefusedError)
    assert re.fullmatch(refusal, str(refused))
    assert sent is None
    with EventConsumer(kafka_broker.bootstrap, [topic], group) as consumer:
        received = _poll_until(consumer, 1, 20)
    assert [decode(m.key, m.value, m.headers) for m in received] == [event]


@kafka_tests
def test_committed_offsets_are_not_delivered_again(kafka_broker: TansuBroker) -> None:
    from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics

    topic, group = _names()
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=1)
    with EventProducer(kafka_broker.bootstrap) as producer:
        producer.publish(topic, clean_completed(instant="20240501000000001"))
        producer.publish(topic, clean_completed(instant="20240501000000002"))

        with EventConsumer(kafka_broker.bootstrap, [topic], group) as first:
            got = _poll_until(first, 2, 20)
            assert len(got) == 2
            first.commit(got)

        with EventConsumer(kafka_broker.bootstrap, [topic], group) as second:
            # nothing is pending for the group; once the new member has joined, it sees only what
            # is published after the commit
            assert second.poll(4.0) == []
            producer.publish(topic, clean_completed(instant="20240501000000003"))
            later = _poll_until(second, 1, 15)
    assert [decode(m.key, m.value, m.headers).instant for m in later] == ["20240501000000003"]
    assert later[0].offset == 2


@kafka_tests
def test_uncommitted_messages_are_delivered_again(kafka_broker: TansuBroker) -> None:
    from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics

    topic, group = _names()
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=1)
    with EventProducer(kafka_broker.bootstrap) as producer:
        producer.publish(topic, clean_completed(instant="20240501000000001", type=EventType.CLEAN_REQUESTED))
        producer.publish(topic, clean_completed(instant="20240501000000001"))

    with EventConsumer(kafka_broker.bootstrap, [topic], group) as first:
        got = _poll_until(first, 2, 20)
        # no commit: the consumer "crashes" after processing
    with EventConsumer(kafka_broker.bootstrap, [topic], group) as second:
        again = _poll_until(second, 2, 20)
    assert len(got) == 2
    assert [(m.offset, dict(m.headers)["ce_id"]) for m in again] == [(m.offset, dict(m.headers)["ce_id"]) for m in got]


@kafka_tests
def test_a_commit_after_work_longer_than_the_poll_limit_says_so_and_the_events_come_again(
    kafka_broker: TansuBroker,
) -> None:
    """Work between two polls that outlasts ``max_poll_interval_ms`` makes kafka-python leave the
    group; the commit then fails with :class:`GroupRebalancedError`, which says how long the work
    took and that the events will be delivered again, not as broker trouble."""
    from tidemark.errors import GroupRebalancedError
    from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics

    topic, group = _names()
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=1)
    with EventProducer(kafka_broker.bootstrap) as producer:
        producer.publish(topic, clean_completed(instant="20240501000000001"))
    # a short poll limit, through the consumer's kafka-python overrides, so the test is quick
    with EventConsumer(kafka_broker.bootstrap, [topic], group, config={"max_poll_interval_ms": 2000}) as consumer:
        got = _poll_until(consumer, 1, 20)
        assert len(got) == 1
        time.sleep(4)  # "the work"
        with pytest.raises(GroupRebalancedError) as refused:
            consumer.commit(got)
    message = str(refused.value)
    assert f"group {group!r}" in message
    assert re.search(r"the work since the last poll took [4-9]s, longer than the poll limit of 2s", message), message
    assert "will be delivered again" in message
    assert "CommitFailedError" not in message
    with EventConsumer(kafka_broker.bootstrap, [topic], group) as again:
        redelivered = _poll_until(again, 1, 20)
    assert [m.offset for m in redelivered] == [m.offset for m in got]


@kafka_tests
def test_producer_and_consumer_survive_a_broker_restart(fresh_broker: TansuBroker) -> None:
    """The same producer and consumer objects keep working across a restart.

    tansu's memory storage loses topics, messages, groups and offsets on a restart, so the topic is
    created again after it; events published while the broker was down are lost to
    :class:`BrokerUnavailableError`, which the producer raises within its ``publish_timeout_s``.
    """
    from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics

    topic, group = _names()
    bound = 3.0
    ensure_topics(fresh_broker.bootstrap, [topic], partitions=1)
    producer = EventProducer(fresh_broker.bootstrap, publish_timeout_s=bound)
    consumer = EventConsumer(fresh_broker.bootstrap, [topic], group)
    try:
        producer.publish(topic, clean_completed(instant="20240501000000001"))
        before = _poll_until(consumer, 1, 20)
        assert len(before) == 1
        consumer.commit(before)

        fresh_broker.stop()
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match=fresh_broker.bootstrap):
            producer.publish(topic, clean_completed(instant="20240501000000002"))
        assert time.monotonic() - started < bound + 1.0
        started = time.monotonic()
        assert consumer.poll(1.0) == []  # no error while the broker is away
        assert time.monotonic() - started < 1.0 + 1.0

        fresh_broker.start()  # same port, empty memory storage
        ensure_topics(fresh_broker.bootstrap, [topic], partitions=1)
        after = clean_completed(instant="20240501000000003", type=EventType.ARCHIVE_REQUESTED, action="commit")
        producer.publish(topic, after)
        received = _poll_until(consumer, 1, 25)
        assert [decode(m.key, m.value, m.headers) for m in received] == [after]
        consumer.commit(received)
    finally:
        consumer.close(timeout_s=1)
        producer.close(timeout_s=1)


@kafka_tests
def test_producer_waits_for_a_broker_that_is_down_at_creation(fresh_broker: TansuBroker) -> None:
    from tidemark.kafka_adapter import EventProducer

    fresh_broker.stop()
    producer = EventProducer(fresh_broker.bootstrap, publish_timeout_s=1.5)
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match=r"within 1\.5s"):
            producer.publish("tidemark-never", clean_completed())
        assert time.monotonic() - started < 1.5 + 1.0
    finally:
        producer.close(timeout_s=1)


@kafka_tests
def test_a_trailing_comma_in_the_bootstrap_names_no_other_broker(
    kafka_broker: TansuBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """tidemark's check skips the empty entry of ``HOST:PORT,``; kafka-python, given the text
    itself, read it as a broker ``:9092`` and logged failed DNS lookups of it."""
    from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics

    bootstrap = kafka_broker.bootstrap + ","
    topic, group = _names()
    caplog.set_level("DEBUG", logger="kafka")
    ensure_topics(bootstrap, [topic], partitions=1)
    with EventProducer(bootstrap) as producer:
        producer.publish(topic, clean_completed())
    with EventConsumer(bootstrap, [topic], group) as consumer:
        got = _poll_until(consumer, 1, 20)
    assert [decode(m.key, m.value, m.headers) for m in got] == [clean_completed()]
    assert [r.getMessage() for r in caplog.records if ":9092" in r.getMessage()] == []
