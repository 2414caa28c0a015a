"""Kafka adapter for timeline events: a producer, a consumer-group consumer, topic creation.

Thin typed wrappers over kafka-python (2.2.x) that move the messages of :mod:`tidemark.events`.
They are built to outlive a broker that goes away and comes back:

* the kafka-python clients are created lazily and re-created when creating them fails, so an
  :class:`EventProducer` or :class:`EventConsumer` can be made while no broker is up;
* :meth:`EventProducer.publish` waits for the broker's acknowledgement (``acks=all``) and keeps
  retrying for ``publish_timeout_s`` seconds, then raises :class:`BrokerUnavailableError`;
* :meth:`EventConsumer.poll` never raises on connection trouble: it backs off and retries until
  its timeout, then returns ``[]``;
* offsets are only committed by :meth:`EventConsumer.commit` (delivery is at least once: what is
  not committed is delivered again to the group; events carry a deterministic ``ce_id`` so that
  redelivered events can be recognised).

The reconnect-related settings are small (sub-second reconnect backoff, a 6 s session) so that a
broker restart is noticed within seconds; ``config=`` overrides any kafka-python setting.

``security=`` (a :class:`~tidemark.kafka_security.KafkaSecurity`) sets TLS and SASL. A client
first probes a bootstrap broker (:func:`~tidemark.kafka_security.probe`; PLAINTEXT too, whose
broker may want TLS or SASL)
when it creates its kafka-python client, and again when that client makes no progress, so a failed
TLS handshake or SASL authentication raises :class:`KafkaSecurityError` within seconds instead of
a timeout after the whole wait (kafka-python only logs such failures and reconnects). A SASL
password file is read again each time a kafka-python client is made (a producer's is made again
after such a failure), so a rotated or fixed Secret is used without a restart.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    CommitFailedError,
    CorruptRecordError,
    IllegalGenerationError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    MessageSizeTooLargeError,
    RebalanceInProgressError,
    RecordListTooLargeError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)
from kafka.structs import OffsetAndMetadata

from tidemark.config import kafka_brokers
from tidemark.errors import (
    BrokerUnavailableError,
    GroupRebalancedError,
    KafkaSecurityError,
    MessageRefusedError,
    UnreadableRecordError,
)
from tidemark.events import TimelineEvent, encode
from tidemark.kafka_security import PLAINTEXT, KafkaSecurity, probe, security_error

log = logging.getLogger(__name__)

#: kafka-python logs every connection attempt that fails (at ERROR) and every client a service
#: makes anew logs its own: while no broker was in reach a service wrote about 20 lines a second
#: (16 MB an hour); each of its messages is let through once in this many seconds
KAFKA_CLIENT_LOG_REPEAT_S: Final = 60.0


class RepeatedKafkaClientLogs(logging.Filter):
    """Drops a record of kafka-python's loggers (``kafka.*``) whose message (the template, not
    its arguments: the node and the error vary) was let through less than ``interval_s`` ago."""

    def __init__(self, interval_s: float = KAFKA_CLIENT_LOG_REPEAT_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[tuple[str, int, str], float] = {}
        self._mutex = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "kafka" and not record.name.startswith("kafka."):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        with self._mutex:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                return False
            self._last[key] = now
        return True


def quiet_kafka_client_logs() -> None:
    """Put :class:`RepeatedKafkaClientLogs` on the root logger's handlers, where every
    ``kafka.*`` record ends (a logger's own filters never see its children's records)."""
    repeated = RepeatedKafkaClientLogs()
    for handler in logging.getLogger().handlers:
        handler.addFilter(repeated)


#: Settings shared by every client: reconnect quickly, notice a dead broker quickly.
_COMMON_CONFIG: Final[Mapping[str, Any]] = {
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1000,
    "retry_backoff_ms": 100,
    "metadata_max_age_ms": 5000,
    "api_version_auto_timeout_ms": 2000,
}

_PRODUCER_CONFIG: Final[Mapping[str, Any]] = {
    **_COMMON_CONFIG,
    "acks": "all",
    "linger_ms": 0,
    "request_timeout_ms": 3000,
    "max_block_ms": 2000,  # waiting for metadata inside send(); publish() retries around it
}

_CONSUMER_CONFIG: Final[Mapping[str, Any]] = {
    **_COMMON_CONFIG,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
    # Kafka's own default. Work between two polls (a clean waiting for the table lock behind a
    # restore, or for a killed command's lease to run out; a long clean on S3) longer than this
    # makes the consumer leave its group and its commit fail, so the events come again. The cost
    # of a long limit: a rebalance (a member joining or leaving) waits up to this long for a busy
    # member; a dead one is noticed by the session timeout.
    "max_poll_interval_ms": 300_000,
    "request_timeout_ms": 7000,  # kafka-python wants it above session_timeout_ms
    "fetch_max_wait_ms": 100,
}

#: What a commit fails with when the group rebalanced since the poll (kafka-python wraps the last
#: two in CommitFailedError; it raises RebalanceInProgressError while it rejoins).
_REBALANCED: Final = (CommitFailedError, RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError)

#: What a publish fails with when the message itself is refused (too large for the producer's
#: ``max_request_size`` or the topic's ``max.message.bytes``, an invalid record): no retry sends it.
_MESSAGE_REFUSALS: Final = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    InvalidRecordError,
    InvalidTimestampError,
    CorruptRecordError,
)

_MAX_BACKOFF_S: Final = 1.0
#: The longest a security probe may take, and the least time between two probes of one client.
_PROBE_TIMEOUT_S: Final = 5.0
_PROBE_INTERVAL_S: Final = 5.0


def _retriable(exc: KafkaError) -> bool:
    return bool(getattr(exc, "retriable", False))


def _bounded_probe(config: Mapping[str, Any], remaining_s: float) -> dict[str, Any]:
    """``config`` with the broker-version probe (made when a client is created) cut to the time left."""
    probe_ms = int(config.get("api_version_auto_timeout_ms", 2000))
    return {**config, "api_version_auto_timeout_ms": max(100, min(probe_ms, int(remaining_s * 1000)))}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _servers(bootstrap: str) -> list[str]:
    """The brokers of ``bootstrap`` as checked (:func:`~tidemark.config.kafka_brokers`), for
    kafka-python: given the text itself it reads an empty entry (a trailing comma) as a broker
    ``:9092`` and logs failed DNS lookups of it."""
    return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in kafka_brokers(bootstrap)]


def _probe(bootstrap: str, security: KafkaSecurity, remaining_s: float) -> None:
    """Raise :class:`KafkaSecurityError` if TLS or SASL fails at a bootstrap broker, or the broker
    drops a client lacking the TLS or SASL its listener may want."""
    probe(bootstrap, security, max(0.5, min(_PROBE_TIMEOUT_S, remaining_s)))


def _current_credentials(
    security: KafkaSecurity, config: dict[str, Any], overrides: Mapping[str, Any]
) -> tuple[KafkaSecurity, dict[str, Any]]:
    """``security`` with the password its file holds now, and ``config`` with it (``overrides``,
    the caller's ``config=``, still winning): read each time a kafka-python client is made, so that
    a rotated or fixed Secret is used by the next client without a restart."""
    current = security.current()
    if current is security:
        return security, config
    return current, {**config, **current.kafka_config(), **overrides}


def _created(bootstrap: str, security: KafkaSecurity, make: Callable[[], Any]) -> Any:
    """``make()``: a kafka-python client, whose creation may run a TLS handshake and raise the
    bare ``ssl`` error (not a KafkaError)."""
    try:
        return make()
    except ssl.SSLError as e:
        raise security_error(bootstrap, security, e) from e


@dataclass(frozen=True)
class Outgoing:
    """A message ready to send, and how an error names it: an event encoded ahead of its
    publication (:func:`outgoing`), so that publishing a burst does not include encoding it."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    what: str


def outgoing(event: TimelineEvent) -> Outgoing:
    """``event`` encoded for :meth:`EventProducer.publish_all`."""
    key, value, headers = encode(event)
    return Outgoing(key, value, headers, f"{event.type} of {event.table} @ {event.instant}")


@dataclass(frozen=True)
class RawMessage:
    """One Kafka message as received, before :func:`tidemark.events.decode`."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: a value is None for a null header (Kafka allows it: Java's ``RecordHeader(name, null)``,
    #: librdkafka), which kafka-python cannot send back
    headers: tuple[tuple[str, bytes | None], ...]


def ensure_topics(
    bootstrap: str,
    names: Iterable[str],
    *,
    partitions: int = 3,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Create the topics that do not exist yet (replication factor 1); existing ones are left as
    they are. Raises :class:`BrokerUnavailableError` if the brokers cannot be reached in time, and
    its subclass :class:`KafkaSecurityError` at once if TLS or SASL fails."""
    wanted = list(dict.fromkeys(names))
    deadline = time.monotonic() + timeout_s
    backoff = 0.05
    last: BaseException | None = None
    while wanted:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerUnavailableError(
                f"could not create topics {wanted} on {bootstrap} within {timeout_s:g}s"
                + (f": {_describe(last)}" if last else "")
            )
        admin: Any = None
        try:
            _probe(bootstrap, security, remaining)
            settings = {
                **_COMMON_CONFIG,
                **security.kafka_config(),
                "request_timeout_ms": max(1, min(5000, int(remaining * 1000))),
            }
            admin = _created(
                bootstrap,
                security,
                functools.partial(
                    KafkaAdminClient, bootstrap_servers=_servers(bootstrap), client_id="tidemark-admin", **settings
                ),
            )
            while wanted:
                topic = wanted[0]
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=int(remaining * 1000))
                wanted.pop(0)
        except KafkaError as exc:
            if not _retriable(exc):
                raise BrokerUnavailableError(
                    f"could not create topics {wanted} on {bootstrap}: {_describe(exc)}"
                ) from exc
            last = exc
            time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
        finally:
            if admin is not None:
                admin.close()


class EventProducer:
    """Publishes timeline events, waiting for each to be acknowledged by all in-sync replicas.

    ``publish_timeout_s`` bounds one :meth:`publish` (connecting, metadata, sending, acks and all
    retries); past it :class:`BrokerUnavailableError` is raised. A timed-out event may still reach
    the broker later; publishing it again is safe (same ``ce_id``).
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        publish_timeout_s: float = 10.0,
        config: Mapping[str, Any] | None = None,
        security: KafkaSecurity = PLAINTEXT,
    ):
        if publish_timeout_s <= 0:
            raise ValueError(f"publish_timeout_s must be positive, got {publish_timeout_s}")
        self.bootstrap = bootstrap
        self.security = security
        self.publish_timeout_s = publish_timeout_s
        timeout_ms = int(publish_timeout_s * 1000)
        request_timeout_ms = min(int(_PRODUCER_CONFIG["request_timeout_ms"]), timeout_ms)
        self._config: dict[str, Any] = {
            **_PRODUCER_CONFIG,
            "bootstrap_servers": _servers(bootstrap),
            "client_id": "tidemark-events-producer",
            "request_timeout_ms": request_timeout_ms,
            "delivery_timeout_ms": max(timeout_ms, request_timeout_ms),
            **security.kafka_config(),
            **(config or {}),
        }
        self._overrides = dict(config or {})
        self._producer: Any = None
        self._closed = False
        self._probed_at = float("-inf")

    def _client(self, remaining_s: float) -> Any:
        if self._closed:
            raise RuntimeError("EventProducer is closed")
        if self._producer is None:
            self.security, self._config = _current_credentials(self.security, self._config, self._overrides)
            self._check(remaining_s)
            settings = _bounded_probe(self._config, remaining_s)
            self._producer = _created(self.bootstrap, self.security, functools.partial(KafkaProducer, **settings))
        return self._producer

    def _check(self, remaining_s: float) -> None:
        self._probed_at = time.monotonic()
        _probe(self.bootstrap, self.security, remaining_s)

    def publish(self, topic: str, event: TimelineEvent) -> None:
        """Send ``event`` to ``topic`` (key: the table) and wait until it is acknowledged."""
        self._send(topic, outgoing(event))

    def publish_all(
        self, topic: str, events: Sequence[TimelineEvent | Outgoing], timeout_s: float | None = None
    ) -> list[BrokerUnavailableError | None]:
        """Send every event of ``events`` (or as encoded already: :func:`outgoing`) to ``topic``,
        then wait for their acknowledgements: the broker takes them in a few requests instead of
        one round trip each (a scheduler's burst of requests due at the same time). Each event's
        outcome, in order: None once acknowledged, else the error :meth:`publish` would have
        raised for it. ``publish_timeout_s`` bounds the whole, or ``timeout_s`` when shorter (a
        process that must be gone within its grace period); a TLS or SASL failure
        (:class:`KafkaSecurityError`) is raised for all at once."""
        messages = [e if isinstance(e, Outgoing) else outgoing(e) for e in events]
        return self._send_all(topic, messages, timeout_s)

    def publish_raw(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
    ) -> None:
        """Send a message as it is (e.g. one that could not be decoded, to a dead-letter topic), with
        the same acknowledgement, retries and bound as :meth:`publish`; :class:`MessageRefusedError`
        when the message itself is refused (too large, say)."""
        self._send(topic, Outgoing(key, value, list(headers), f"message of {len(value or b'')} bytes"))

    def _send(self, topic: str, message: Outgoing) -> None:
        (outcome,) = self._send_all(topic, [message])
        if outcome is not None:
            raise outcome

    def _send_all(
        self, topic: str, messages: Sequence[Outgoing], timeout_s: float | None = None
    ) -> list[BrokerUnavailableError | None]:
        bound = self.publish_timeout_s if timeout_s is None else min(timeout_s, self.publish_timeout_s)
        deadline = time.monotonic() + bound
        outcomes: list[BrokerUnavailableError | None] = [None] * len(messages)
        futures: dict[int, Any] = {}  # sent, acknowledgement awaited
        last: dict[int, BaseException] = {}
        waiting = list(range(len(messages)))  # neither acknowledged nor refused yet
        backoff = 0.05

        def refused(i: int, exc: KafkaError) -> BrokerUnavailableError:
            kind = MessageRefusedError if isinstance(exc, _MESSAGE_REFUSALS) else BrokerUnavailableError
            error = kind(f"broker {self.bootstrap} refused {messages[i].what} for topic {topic!r}: {_describe(exc)}")
            error.__cause__ = exc
            return error

        while waiting:
            if deadline - time.monotonic() <= 0:
                for i in waiting:
                    outcomes[i] = BrokerUnavailableError(
                        f"could not publish {messages[i].what} to topic {topic!r} on {self.bootstrap} "
                        f"within {bound:g}s" + (f": {_describe(last[i])}" if i in last else "")
                    )
                break
            retry: KafkaError | None = None  # a retriable failure: wait a little, then send again
            try:
                producer = self._client(deadline - time.monotonic())
                for i in waiting:
                    if i not in futures:
                        m = messages[i]
                        try:
                            futures[i] = producer.send(topic, key=m.key, value=m.value, headers=m.headers)
                        except (AssertionError, TypeError, ValueError) as exc:
                            # kafka-python checks a record with assert (a header value that is not
                            # bytes): the message is at fault, and no retry sends it
                            error = MessageRefusedError(
                                f"the Kafka client refused {m.what} for topic {topic!r}: not a record it can send "
                                f"({type(exc).__name__}{f': {exc}' if str(exc) else ''})"
                            )
                            error.__cause__ = exc
                            outcomes[i] = error
            except KafkaError as exc:  # no client, or no metadata: what is not sent yet waits or fails
                for i in waiting:
                    if i not in futures and outcomes[i] is None:
                        last[i] = exc
                        if not _retriable(exc):
                            outcomes[i] = refused(i, exc)
                retry = exc if _retriable(exc) else None
            waiting = [i for i in waiting if outcomes[i] is None]
            still: list[int] = []
            for i in waiting:
                future = futures.get(i)
                if future is None:
                    still.append(i)
                    continue
                try:
                    future.get(timeout=max(0.0, deadline - time.monotonic()))  # flushed and acknowledged
                except KafkaError as exc:
                    last[i] = exc
                    if not future.is_done:
                        still.append(i)  # our own wait ran out; the send is still pending
                    elif not _retriable(exc):
                        outcomes[i] = refused(i, exc)
                    else:
                        del futures[i]
                        still.append(i)
                        retry = exc
            waiting = still
            if retry is not None and waiting:
                log.debug("publish to %s on %s failed, retrying: %s", topic, self.bootstrap, _describe(retry))
                if time.monotonic() - self._probed_at >= _PROBE_INTERVAL_S:
                    # no metadata, no connection: kafka-python does not say when that is TLS or SASL
                    try:
                        self._check(deadline - time.monotonic())
                    except KafkaSecurityError:
                        # made again by the next publish, with the password as its file holds it then
                        producer, self._producer = self._producer, None
                        if producer is not None:
                            producer.close(timeout=0)
                        raise
                time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
        return outcomes

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is pending (for at most ``timeout_s``) and release the connections."""
        self._closed = True
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=timeout_s)

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class EventConsumer:
    """Reads ``topics`` as a member of consumer group ``group_id``; offsets are committed only by
    :meth:`commit`, and a new group starts at the earliest offset."""

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        group_id: str,
        *,
        client_id: str = "tidemark-events-consumer",
        config: Mapping[str, Any] | None = None,
        security: KafkaSecurity = PLAINTEXT,
    ):
        if isinstance(topics, str):
            topics = [topics]
        if not topics:
            raise ValueError("EventConsumer needs at least one topic")
        self.bootstrap = bootstrap
        self.topics = tuple(topics)
        self.group_id = group_id
        self.security = security
        self._config: dict[str, Any] = {
            **_CONSUMER_CONFIG,
            "bootstrap_servers": _servers(bootstrap),
            "group_id": group_id,
            "client_id": client_id,
            **security.kafka_config(),
            **(config or {}),
        }
        self._overrides = dict(config or {})
        self._consumer: Any = None
        self._closed = False
        self._probed_at = float("-inf")
        self._polled_at = float("-inf")  # time.monotonic() when the last poll returned

    def _client(self, remaining_s: float) -> Any:
        if self._closed:
            raise RuntimeError("EventConsumer is closed")
        if self._consumer is None:
            self.security, self._config = _current_credentials(self.security, self._config, self._overrides)
            self._check(remaining_s)
            settings = _bounded_probe(self._config, remaining_s)
            self._consumer = _created(
                self.bootstrap, self.security, functools.partial(KafkaConsumer, *self.topics, **settings)
            )
        return self._consumer

    def _check(self, remaining_s: float) -> None:
        self._probed_at = time.monotonic()
        _probe(self.bootstrap, self.security, remaining_s)

    def poll(self, timeout_s: float, *, max_records: int = 500) -> list[RawMessage]:
        """The next messages (at most ``max_records``), returned as soon as there are any; ``[]``
        when ``timeout_s`` passes first, including when no broker can be reached meanwhile.

        A record the client cannot parse (a CRC failure, a header name that is not UTF-8) raises
        :class:`UnreadableRecordError` naming it, the consumer having moved past it (not
        committed: see :meth:`commit`); the next poll goes on with the record after it.

        Joining the group happens inside the first polls and can take several seconds.
        """
        deadline = time.monotonic() + timeout_s
        backoff = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            try:
                batch = self._client(remaining).poll(timeout_ms=max(1, int(remaining * 1000)), max_records=max_records)
            except KafkaError as exc:
                if isinstance(exc, CorruptRecordError) and (skipped := self._skip_unreadable(exc)) is not None:
                    raise skipped from exc
                if not _retriable(exc):
                    raise BrokerUnavailableError(
                        f"consumer of {list(self.topics)} in group {self.group_id!r} on {self.bootstrap} failed: "
                        f"{_describe(exc)}"
                    ) from exc
                log.debug("poll on %s failed, retrying: %s", self.bootstrap, _describe(exc))
                time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                continue
            messages = [
                RawMessage(
                    topic=r.topic,
                    partition=r.partition,
                    offset=r.offset,
                    key=r.key,
                    value=r.value,
                    headers=tuple((name, value) for name, value in (r.headers or ())),
                )
                for records in batch.values()
                for r in records
            ]
            self._polled_at = time.monotonic()
            if messages:
                return messages
            if not self._consumer.assignment() and time.monotonic() - self._probed_at >= _PROBE_INTERVAL_S:
                # still no partitions: a consumer that cannot authenticate polls nothing, silently
                self._check(deadline - time.monotonic())

    def _skip_unreadable(self, exc: CorruptRecordError) -> UnreadableRecordError | None:
        """Move past the record kafka-python could not parse: read again, it fails again, for
        ever, ahead of every later record of its partition. None when the record cannot be told."""
        consumer = self._consumer
        # kafka-python names neither partition nor offset (a header that is not UTF-8 says only
        # "invalid record structure"); the fetcher keeps the records it was reading, positioned
        # at the record that failed
        records = getattr(getattr(consumer, "_fetcher", None), "_next_partition_records", None)
        if records is None or records.record_iterator is None:
            return None
        tp = records.topic_partition
        try:
            offset = consumer.position(tp, timeout_ms=1000)
        except (KafkaError, AssertionError):
            return None
        if offset != records.next_fetch_offset:
            return None
        consumer.seek(tp, offset + 1)
        return UnreadableRecordError(
            f"record {tp.topic}[{tp.partition}]@{offset} cannot be read by the Kafka client: {_describe(exc)}",
            tp.topic,
            tp.partition,
            offset,
        )

    def positioned(self, timeout_s: float = 1.0) -> bool:
        """Whether the group has assigned this consumer its partitions and it knows where it reads
        each from (a new group's reset to the latest offset done, for at most ``timeout_s``):
        every message published from now on will reach it. Call it between polls, on their thread."""
        consumer = self._consumer
        if consumer is None or not consumer.assignment():
            return False
        try:
            return all(
                consumer.position(tp, timeout_ms=int(timeout_s * 1000)) is not None for tp in consumer.assignment()
            )
        except (KafkaError, AssertionError):  # reassigned meanwhile: not yet
            return False

    def rewind(self, since_s: float) -> bool:
        """Read again, on each partition assigned, from the first message stamped at or after
        ``since_s`` (seconds since the epoch) when this consumer reads from further on; False
        (nothing done) while no partition is assigned. Call it between polls, on their thread.

        Raises :class:`BrokerUnavailableError` if the broker does not say where that is."""
        consumer = self._consumer
        if consumer is None or not consumer.assignment():
            return False
        partitions = consumer.assignment()
        try:
            found = consumer.offsets_for_times({tp: int(since_s * 1000) for tp in partitions})
            for tp, at in found.items():
                # none stamped that late (tansu answers timestamp -1 where Kafka answers none)
                if at is not None and at.timestamp >= 0 and at.offset < consumer.position(tp):
                    consumer.seek(tp, at.offset)
        except (KafkaError, AssertionError) as exc:  # AssertionError: reassigned meanwhile
            raise BrokerUnavailableError(
                f"could not find where {list(self.topics)} was at {since_s:.0f} on {self.bootstrap}: {_describe(exc)}"
            ) from exc
        return True

    def reaches_broker(self) -> bool:
        """Whether this consumer is in touch with its group's coordinator (a broker) now: while no
        broker can be reached, :meth:`poll` returns ``[]`` as it does when nothing was published,
        and kafka-python raises nothing. Costs no request; call it between polls, on their thread."""
        consumer = self._consumer
        # kafka-python forgets the coordinator when its connection fails and finds it again when
        # a broker answers; no public call tells a broker outage apart from an idle topic
        return consumer is not None and not consumer._coordinator.coordinator_unknown()

    def commit(self, messages: Iterable[RawMessage], *, timeout_s: float = 10.0) -> None:
        """Commit, for each partition, the offset after the last of ``messages``.

        Raises :class:`BrokerUnavailableError` if the commit does not succeed within ``timeout_s``,
        and its kind :class:`GroupRebalancedError` if the group was rebalanced since the poll (the
        work took longer than ``max_poll_interval_ms``, or a member joined or left): the messages
        will then be delivered again.
        """
        offsets: dict[Any, int] = {}
        for m in messages:
            tp = TopicPartition(m.topic, m.partition)
            offsets[tp] = max(offsets.get(tp, 0), m.offset + 1)
        if not offsets:
            return
        if self._consumer is None:
            raise RuntimeError("EventConsumer.commit: nothing was polled by this consumer")
        to_commit = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()}
        deadline = time.monotonic() + timeout_s
        backoff = 0.05
        while True:
            remaining = deadline - time.monotonic()
            try:
                self._consumer.commit(to_commit, timeout_ms=max(1, int(remaining * 1000)))
                return
            except KafkaError as exc:
                remaining = deadline - time.monotonic()
                if isinstance(exc, _REBALANCED) or not _retriable(exc) or remaining <= 0:
                    positions = ", ".join(f"{tp.topic}/{tp.partition}@{o}" for tp, o in offsets.items())
                    what = f"could not commit offsets {positions} of group {self.group_id!r} on {self.bootstrap}"
                    if isinstance(exc, _REBALANCED):
                        raise self._rebalanced(what) from exc
                    raise BrokerUnavailableError(f"{what}: {_describe(exc)}") from exc
                time.sleep(min(backoff, remaining))
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _rebalanced(self, what: str) -> GroupRebalancedError:
        elapsed_s = time.monotonic() - self._polled_at
        limit_s = int(self._config["max_poll_interval_ms"]) / 1000
        if elapsed_s >= limit_s:
            why = (
                f"the work since the last poll took {elapsed_s:.0f}s, longer than the poll limit of {limit_s:g}s "
                "(max_poll_interval_ms), so the group moved on without this consumer"
            )
        else:
            why = f"the group rebalanced (a member joined or left) in the {elapsed_s:.0f}s of work since the poll"
        return GroupRebalancedError(f"{what}: {why}; the events will be delivered again", elapsed_s, limit_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Leave the group (without committing) and release the connections."""
        self._closed = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close(autocommit=False, timeout_ms=int(timeout_s * 1000))

    def __enter__(self) -> EventConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
