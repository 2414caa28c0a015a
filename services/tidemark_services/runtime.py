"""The event loop both services share: consume timeline events, act per table, publish what was
done, commit offsets only after the work is durable, dead-letter what cannot be decoded.

Storage is the source of truth: a handler re-reads the table's timeline and acts idempotently,
so an event delivered twice, late or out of order changes nothing twice."""

from __future__ import annotations

import errno
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemark.cli import EXIT_TERMINATED
from tidemark.errors import (
    BrokerUnavailableError,
    BucketNotFoundError,
    EventDecodeError,
    GroupRebalancedError,
    InstantMetadataError,
    InvalidLocationError,
    InvalidTablePropertiesError,
    KafkaSecurityError,
    MessageRefusedError,
    MetadataTableEnabledError,
    MissingExtraError,
    StorageError,
    TableError,
    TableNotFoundError,
    Terminated,
    TidemarkError,
    UnreadableRecordError,
    raised_by_sigterm,
)
from tidemark.events import SKIPPED_TYPES, EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, EventProducer, RawMessage
from tidemark.kafka_security import PLAINTEXT, KafkaSecurity
from tidemark.storage import S3Options, Storage, canonical_location, open_storage
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.properties import read_properties
from tidemark.table_services.clean import RENAMED_KEYS

log = logging.getLogger("tidemark.services")

TIMELINE_TOPIC = "tidemark.timeline"
DEAD_LETTER_TOPIC = "tidemark.timeline.dead-letter"


def consumer_group(name: str) -> str:
    """The Kafka consumer group of service ``name`` when none is given."""
    return f"tidemark-{name}"


DEAD_LETTER_REASON_HEADER = "tidemark_dead_letter_reason"
#: the service that dead-lettered a message: each service consumes the timeline with its own
#: group, so one bad message is dead-lettered once by each of them, and only this header tells
#: the copies apart
DEAD_LETTER_SERVICE_HEADER = "tidemark_dead_letter_service"
#: The wait after a failed event before it is tried again, doubling with each failure in a row.
RETRY_BACKOFF_S = 0.5
MAX_RETRY_BACKOFF_S = 30.0
#: ``tidemark_service_runs_total``'s outcomes: the first two are successful runs
RUN_OUTCOMES = ("ok", "nothing-to-do", "error", "rejected")
#: ``tidemark_events_skipped_total``'s reasons
SKIP_REASONS = ("unreadable", "not-dead-lettered")
#: The wait after a failed TLS handshake or SASL authentication, doubling up to the maximum: the
#: settings or the brokers need fixing (a renewed CA, a rotated password), which is retried for.
SECURITY_RETRY_BACKOFF_S = 1.0
#: How long no broker may be in reach before ``/readyz`` answers 503: longer than a broker's
#: restart or a group's rebalance take, so that a rolling restart of Kafka goes unseen.
BROKER_GRACE_S = 30.0
#: How long a stopping service waits for the broker to take the events still queued: a few
#: seconds, well within a pod's terminationGracePeriodSeconds (the chart's 30)
CLOSE_PUBLISH_S = 5.0

Handler = Callable[[TimelineEvent], Sequence[TimelineEvent]]


class EventRejectedError(TidemarkError):
    """An event that can never be acted on as it is (a request carrying settings the service
    refuses): dead-lettered with the reason, as an undecodable event is, rather than retried."""


#: what no retry changes until someone fixes the table (its location holds none, not even its
#: bucket, its properties are unreadable or of another version, it has a metadata table, an instant's metadata is not
#: readable): the event is dead-lettered
#: with the reason, instead of being retried for ever ahead of every later event of its partition
PERMANENT_REFUSALS: tuple[type[TidemarkError], ...] = (
    EventRejectedError,
    TableNotFoundError,
    InvalidTablePropertiesError,
    InvalidLocationError,
    BucketNotFoundError,
    MetadataTableEnabledError,
    InstantMetadataError,
    # a package not installed: no retry in this process installs it
    MissingExtraError,
)


#: What the file system answers for a location that can never hold a table, whatever the retries:
#: a name too long for it, a loop of symbolic links, a name it does not take
_IMPOSSIBLE_LOCATION_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL})


def open_table(location: str, s3: S3Options) -> Storage:
    """The table an event names, refused (permanently) before anything is written there when the
    location holds none: a lock or a plan file would otherwise be left in a folder that is no table."""
    storage = open_storage(location, s3)
    try:
        read_properties(storage)
    except StorageError as e:
        cause = e.__cause__
        if isinstance(cause, OSError) and cause.errno in _IMPOSSIBLE_LOCATION_ERRNOS:
            raise InvalidLocationError(f"location {location} cannot hold a table: {cause.strerror}") from e
        raise
    return storage


def request_conf(conf: Mapping[str, str], event: TimelineEvent) -> dict[str, str]:
    """``conf`` with the Hudi keys (``hoodie.*``) a request carries in its ``extra`` on top: the
    per-table settings the operator sends, for this one run. Nothing else in ``extra`` is a
    setting (the operator's resource, trigger and due time), and no ``tidemark.*`` key is taken
    from an event: Kafka security and the services' own settings stay the service's."""
    own = {k: v for k, v in event.extra.items() if k.startswith("hoodie.")}
    merged = dict(conf)
    for spellings in RENAMED_KEYS.items():  # a request setting either spelling replaces both
        if own.keys() & set(spellings):
            for key in spellings:
                merged.pop(key, None)
    merged.update(own)
    return merged


def request_settings(
    conf: Mapping[str, str], event: TimelineEvent, service: str = "cleaner"
) -> tuple[Mapping[str, str], ConcurrencyConfig]:
    """The settings ``event`` asks for (its ``hoodie.*`` keys over ``conf``) and the lock settings
    among them; :class:`EventRejectedError` naming the keys when they do not parse."""
    merged = request_conf(conf, event)
    try:
        return merged, ConcurrencyConfig.from_conf(merged)
    except TableError as e:
        raise rejected(event, service, e) from None


def rejected(event: TimelineEvent, service: str, error: Exception) -> EventRejectedError:
    keys = ", ".join(f"{k}={v}" for k, v in sorted(event.extra.items()) if k.startswith("hoodie."))
    by = f" from {event.extra['resource']}" if event.extra.get("resource") else ""
    return EventRejectedError(
        f"{event.type} {event.instant}{by} carries settings the {service} refuses ({keys}): {error}"
    )


class _LockCounters(Collector):
    """The table lock's counts of this process (:data:`~tidemark.table.concurrency.COUNTERS`): how
    often a run waited for the lock (a restore, a rollback or a writer holding it), and how often
    it took over the lease of a holder that stopped renewing it."""

    HELP = (
        ("lock_waits", "Times a run waited for the table lock, held by another process"),
        ("lock_takeovers", "Times a run took over the table lock from a holder that stopped renewing its lease"),
    )

    def __init__(self, service: str) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        counts = COUNTERS.snapshot()
        for name, help_text in self.HELP:
            family = CounterMetricFamily(f"tidemark_{name}", help_text, labels=["service"])
            family.add_metric([self.service], counts[name])
            yield family


@dataclass
class ServiceMetrics:
    """The metrics both services expose on ``/metrics``."""

    service: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.runs = Counter("tidemark_service_runs", "Work runs by outcome", ["service", "outcome"], registry=r)
        for outcome in RUN_OUTCOMES:
            # exposed at 0 from the start, so that increase() counts a new process's first failure
            # (the alert on runs failing across the restarts its liveness probe makes)
            self.runs.labels(self.service, outcome)
        self.files_deleted = Counter(
            "tidemark_clean_files_deleted", "Files deleted by the cleaner", ["table"], registry=r
        )
        self.bytes_reclaimed = Counter(
            "tidemark_clean_bytes_reclaimed", "Bytes the cleaner reclaimed", ["table"], registry=r
        )
        self.instants_archived = Counter("tidemark_archive_instants", "Instants archived", ["table"], registry=r)
        self.archival_blocked = Counter(
            "tidemark_archive_blocked", "Archival runs stopped by a guard", ["table", "guard"], registry=r
        )
        self.active_timeline = Gauge(
            "tidemark_active_timeline_instants", "Instants on the active timeline", ["table"], registry=r
        )
        self.dead_lettered = Counter(
            "tidemark_events_dead_lettered", "Events sent to the dead-letter topic", ["service"], registry=r
        )
        self.skipped = Counter(
            "tidemark_events_skipped",
            "Messages skipped without reaching the dead-letter topic, by reason: unreadable (the Kafka "
            "client cannot parse them) or not-dead-lettered (the dead-letter topic refuses them)",
            ["service", "reason"],
            registry=r,
        )
        for reason in SKIP_REASONS:
            self.skipped.labels(self.service, reason)
        self.kafka_security_failures = Counter(
            "tidemark_kafka_security_failures",
            "Failed TLS handshakes or SASL authentications with a Kafka broker",
            ["service", "stage"],
            registry=r,
        )
        self.broker_errors = Counter(
            "tidemark_broker_errors",
            "Commits, publishes or dead-letters the broker refused (the service consumes again), "
            f"and times no broker was in reach for {BROKER_GRACE_S:g}s",
            ["service"],
            registry=r,
        )
        self.redeliveries = Counter(
            "tidemark_redeliveries",
            "Commits the consumer group refused because it rebalanced while the events were handled "
            "(most often a run longer than the poll limit): the events come again and change nothing",
            ["service"],
            registry=r,
        )
        r.register(_LockCounters(self.service))
        self.unpublished = Gauge(
            "tidemark_announcements_unpublished",
            "Events of work done that the broker has not taken yet",
            ["service"],
            registry=r,
        )
        self.broker_lost_at: float | None = None  # time.monotonic() when the brokers went out of reach
        out_of_reach = Gauge(
            "tidemark_broker_unreachable_seconds",
            "Seconds no broker has been in reach (0 while one is)",
            ["service"],
            registry=r,
        )
        out_of_reach.labels(self.service).set_function(
            lambda: 0.0 if self.broker_lost_at is None else time.monotonic() - self.broker_lost_at
        )
        self.started = time.time()
        self.last_success: float | None = None  # time.time() of this process's last successful run
        since = Gauge(
            "tidemark_seconds_since_last_success",
            "Seconds since the last successful run, or since the process started if it has had none",
            ["service"],
            registry=r,
        )
        since.labels(self.service).set_function(lambda: time.time() - (self.last_success or self.started))
        # no sample until a run succeeds: a restarted process does not pass its start off as a success
        self.last_success_time = Gauge(
            "tidemark_last_success_timestamp_seconds",
            "Unix time of the last successful run of this process (none before its first)",
            ["service"],
            registry=r,
        )

    def succeeded(self, outcome: str) -> None:
        """A run succeeded, with ``outcome`` ``ok`` or ``nothing-to-do``."""
        self.last_success = time.time()
        self.last_success_time.labels(self.service).set(self.last_success)
        self.runs.labels(self.service, outcome).inc()


class _NoPollLimitAdvice(logging.Filter):
    """Drops kafka-python's advice, when a run outlasts the poll limit, to raise
    ``max_poll_interval_ms`` or lower ``max_poll_records``: the services have no option for either,
    and say what happened themselves once the run ends (:meth:`EventService.run_once`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Consumer poll timeout has expired")


_POLL_LIMIT_ADVICE = _NoPollLimitAdvice()


class EventService:
    """Consumes ``topic`` in consumer group ``group`` and hands the events of ``types`` to
    ``handler``; the events the handler returns are published to ``topic``."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        handler: Handler,
        types: frozenset[EventType],
        metrics: ServiceMetrics,
        topic: str = TIMELINE_TOPIC,
        group: str | None = None,
        dead_letter_topic: str = DEAD_LETTER_TOPIC,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.security = security
        self.handler = handler
        self.types = types
        self.metrics = metrics
        self.topic = topic
        self.group = group or consumer_group(name)
        self.dead_letter_topic = dead_letter_topic
        self.producer = EventProducer(bootstrap, security=security)
        self.consumer = self._new_consumer()
        logging.getLogger("kafka.coordinator.heartbeat").addFilter(_POLL_LIMIT_ADVICE)  # once: the same filter
        self.last_error: str | None = None
        self.kafka_security_error: str | None = None  # the last failed TLS/SASL, until a poll succeeds
        self._security_failures = 0  # in a row
        self._failures = 0  # handler failures in a row
        self._pending: list[TimelineEvent] = []  # outputs of work done, not yet published
        self._pending_mutex = threading.Lock()  # announce() is called from other threads
        self._stop = threading.Event()
        self._outage_reported = False  # the current one, once past BROKER_GRACE_S
        self._working_on: TimelineEvent | None = None  # the event whose handler runs now
        self._terminating = False  # a SIGTERM stopped the run under way

    def healthy(self) -> tuple[bool, str]:
        """``/healthz``: fails while the last run failed, not while the brokers are out of reach
        or refuse TLS/SASL (a restarted process would find them no nearer, nor its CA or password
        any better; a fixed Secret is picked up without one): those are said after ``ok``."""
        if self.last_error:
            return False, f"{self.name}: last run failed: {self.last_error}\n"
        note = self.kafka_security_error or self._outage()
        return True, f"{self.name}: ok{f' ({note})' if note else ''}\n"

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: :meth:`healthy`, and unready while TLS/SASL is refused or no broker has
        been in reach for :data:`BROKER_GRACE_S`: the service consumes nothing then."""
        ok, detail = self.healthy()
        if not ok:
            return ok, detail
        if self.kafka_security_error:
            return False, f"{self.name}: {self.kafka_security_error}\n"
        if outage := self._outage():
            return False, f"{self.name}: {outage}\n"
        return ok, detail

    def _outage(self) -> str | None:
        lost = self.metrics.broker_lost_at
        if lost is None or time.monotonic() - lost < BROKER_GRACE_S:
            return None
        return f"no broker of {self.bootstrap} in reach for {time.monotonic() - lost:.0f}s"

    def _watch_brokers(self, reached: bool) -> None:
        """Note when the brokers go out of reach and come back: kafka-python's poll returns nothing
        then, as for a topic nobody writes to, and raises nothing."""
        metrics = self.metrics
        if reached:
            if self._outage_reported and metrics.broker_lost_at is not None:
                log.info(
                    "%s: a broker of %s is in reach again after %.0fs",
                    self.name,
                    self.bootstrap,
                    time.monotonic() - metrics.broker_lost_at,
                )
            metrics.broker_lost_at, self._outage_reported = None, False
        elif metrics.broker_lost_at is None:
            metrics.broker_lost_at = time.monotonic()
        elif not self._outage_reported and (outage := self._outage()):
            self._outage_reported = True
            metrics.broker_errors.labels(self.name).inc()
            log.warning("%s: %s; not ready until one is", self.name, outage)

    def run_once(self, timeout_s: float = 1.0) -> int:
        """One poll: handle what arrived, then commit. Returns how many events were handled.

        Broker trouble does not escape: a service must outlive a broker restart, and a restarted
        broker may not know this consumer's group any more (tansu in memory, or a rebalance), so
        a commit, a publish or a dead-letter can fail. Nothing is committed past the work done;
        the consumer is recreated, gets the uncommitted events again from the last committed
        offset and the handlers, being idempotent, do nothing twice."""
        try:
            self._publish_pending()
            try:
                messages = self.consumer.poll(timeout_s)
            except UnreadableRecordError as e:
                self.kafka_security_error, self._security_failures = None, 0
                unreadable = RawMessage(e.topic, e.partition, e.offset, None, None, ())
                self._skip("unreadable", str(e))
                self.consumer.commit([unreadable])
                return 0
            self.kafka_security_error, self._security_failures = None, 0
            self._watch_brokers(bool(messages) or self.consumer.reaches_broker())
            return self._handle(messages)
        except KafkaSecurityError as e:
            # not a crash: the service stays up, says so on /readyz and tries again, more and
            # more slowly, until the certificate or credentials are fixed
            self.kafka_security_error = str(e)
            self._security_failures += 1
            self.metrics.kafka_security_failures.labels(self.name, e.stage).inc()
            log.error("%s: %s", self.name, e)
            self._recreate_consumer()
            self._stop.wait(min(SECURITY_RETRY_BACKOFF_S * 2 ** (self._security_failures - 1), MAX_RETRY_BACKOFF_S))
            return 0
        except GroupRebalancedError as e:
            # the brokers are fine: the group gave this member's partitions away meanwhile
            log.warning("%s: %s, and handling them again changes nothing (the work is idempotent)", self.name, e)
            self.metrics.redeliveries.labels(self.name).inc()
            self._recreate_consumer()
            return 0
        except BrokerUnavailableError as e:
            log.warning("%s: broker trouble, consuming again from the last commit: %s", self.name, e)
            self.metrics.broker_errors.labels(self.name).inc()
            self._watch_brokers(reached=False)  # a publish that waits for the broker polls nothing
            self._recreate_consumer()
            return 0

    def _handle(self, messages: list[RawMessage]) -> int:
        handled = 0
        done: list[RawMessage] = []
        for message in messages:
            if self._stop.is_set():  # stopped: the rest of the poll comes again to the next process
                break
            try:
                event = decode(message.key, message.value, message.headers)
            except EventDecodeError as e:
                self._dead_letter(message, str(e))
                done.append(message)
                continue
            if event.type in self.types:
                # the table as the write job and the operator name it (an s3a:// or a // in the
                # event's spelling resolved): what the handler announces is keyed as the table's
                # other events, so they share one partition and one ce_id per change
                event = replace(event, table=canonical_location(event.table))
                try:
                    outputs = self._run(event)
                except PERMANENT_REFUSALS as e:
                    # retrying cannot help; the event is kept, with why, on the dead-letter topic
                    self.metrics.runs.labels(self.name, "rejected").inc()
                    log.error("%s: %s on %s rejected: %s", self.name, event.type, event.table, e)
                    self._dead_letter(message, str(e))
                    done.append(message)
                    continue
                except TidemarkError as e:
                    # not committed: the event comes back after the consumer is recreated
                    self.last_error = str(e)
                    self._failures += 1
                    self.metrics.runs.labels(self.name, "error").inc()
                    log.warning("%s: %s on %s failed: %s", self.name, event.type, event.table, e)
                    self.consumer.commit(done)
                    self._recreate_consumer()
                    # wait before it comes back: while S3 is unreachable, each try would otherwise
                    # cost a new group member (a rebalance) and a failed request every few seconds
                    self._stop.wait(min(RETRY_BACKOFF_S * 2 ** (self._failures - 1), MAX_RETRY_BACKOFF_S))
                    return handled
                handled += 1
                self.last_error = None
                self._failures = 0
                worked = any(e.type not in SKIPPED_TYPES for e in outputs)  # a skip answers, having done nothing
                self.metrics.succeeded("ok" if worked else "nothing-to-do")
                # the work is durable; what it announces is kept until the broker has it (a
                # redelivered event finds the work done and would not announce it again)
                self.announce(outputs, publish=False)
                self._publish_pending()
            done.append(message)
        self.consumer.commit(done)
        return handled

    def _run(self, event: TimelineEvent) -> list[TimelineEvent]:
        self._working_on = event
        try:
            return list(self.handler(event))
        finally:
            self._working_on = None

    def announce(self, events: Sequence[TimelineEvent], publish: bool = False) -> None:
        """Queue events of work done for publishing (at least once: kept until the broker has
        them); from any thread. Published by the service's loop, or now with ``publish``."""
        with self._pending_mutex:
            self._pending.extend(events)
            self.metrics.unpublished.labels(self.name).set(len(self._pending))
        if publish:
            self._publish_pending()

    def _publish_pending(self) -> None:
        """Publish the queue in order; called from the service's own thread only. The mutex is
        not held while the broker is asked, so announcing never waits for a broker that is down."""
        while True:
            with self._pending_mutex:
                self.metrics.unpublished.labels(self.name).set(len(self._pending))
                if not self._pending:
                    return
                event = self._pending[0]
            self.producer.publish(self.topic, event)
            with self._pending_mutex:
                self._pending.pop(0)

    def _dead_letter(self, message: RawMessage, reason: str) -> None:
        # the Kafka client sends no null header value (Java's RecordHeader(name, null) and
        # librdkafka do): such a header is copied empty, and the reason says which
        if nulls := [name for name, value in message.headers if value is None]:
            reason = f"{reason} (null value of header {', '.join(nulls)} copied as empty)"
        headers = [
            *((name, value or b"") for name, value in message.headers),
            (DEAD_LETTER_REASON_HEADER, reason.encode()),
            (DEAD_LETTER_SERVICE_HEADER, self.name.encode()),
        ]
        try:
            self.producer.publish_raw(self.dead_letter_topic, message.key, message.value, headers)
        except MessageRefusedError as e:
            # too large for the dead-letter topic, say: no retry sends it (one that timed out, a
            # broker down or a topic missing, is retried: the offset stays)
            where = f"{message.topic}[{message.partition}]@{message.offset}"
            self._skip("not-dead-lettered", f"{where} ({reason}) cannot be dead-lettered: {e}")
            return
        self.metrics.dead_lettered.labels(self.name).inc()
        log.warning(
            "%s: dead-lettered %s[%s]@%s: %s", self.name, message.topic, message.partition, message.offset, reason
        )

    def _skip(self, reason: str, what: str) -> None:
        """A message no retry can hand on (it cannot be read, or the dead-letter topic refuses it),
        which the caller commits past: retried, it would stop every later message of its partition
        for good. ``what`` (naming its topic, partition and offset) is said at ERROR, and it is
        counted in ``tidemark_events_skipped_total``."""
        log.error("%s: %s; skipped, the next message of its partition goes on", self.name, what)
        self.metrics.skipped.labels(self.name, reason).inc()

    def _new_consumer(self) -> EventConsumer:
        """The consumer of the service's topic and group: the first, and each one made again after
        broker trouble, with the SASL password as its file holds it now (a rotated or fixed Secret)."""
        self.security = self.security.current()
        return EventConsumer(self.bootstrap, [self.topic], self.group, security=self.security)

    def _recreate_consumer(self) -> None:
        self.consumer.close()
        self.consumer = self._new_consumer()

    def run_forever(self, poll_s: float = 1.0) -> None:
        while not self._stop.is_set():
            self.run_once(poll_s)

    def stop(self) -> None:
        self._stop.set()

    def terminate(self) -> None:
        """SIGTERM's handler (a pod stopped, ``docker stop``): between runs the loop ends after its
        poll; a run under way (a clean waiting for the table lock, a long archival) is stopped as
        a Ctrl-C stops a command (:class:`Terminated`), which leaves the table as a crash would
        and releases the table lock. Before, the run went on to its end, past the pod's grace
        period to a SIGKILL, and nothing said a SIGTERM had come. Its event is not committed:
        the next process gets it again and finishes what the run left pending."""
        stopping = self._stop.is_set()
        self._stop.set()
        event = self._working_on
        if event is None:
            if not stopping:
                log.info("%s: SIGTERM: stopping after this poll", self.name)
            return
        if self._terminating:  # a second SIGTERM while the run unwinds: it is stopping already
            return
        self._terminating = True
        log.warning(
            "%s: SIGTERM: stopping the run for %s on %s; the event comes again to the next process, "
            "which finishes what this run left pending",
            self.name,
            event.type,
            event.table,
        )
        raise Terminated

    def run_until_stopped(self, poll_s: float = 1.0) -> int:
        """:meth:`run_forever` with :meth:`terminate` as SIGTERM's handler (from the main thread);
        the process's exit status: 0 once stopped between runs (or by Ctrl-C), 143 when a SIGTERM
        stopped a run."""
        signal.signal(signal.SIGTERM, lambda *_: self.terminate())
        try:
            self.run_forever(poll_s)
        except KeyboardInterrupt as e:
            if raised_by_sigterm(e):
                return EXIT_TERMINATED
        return 0

    def close(self, publish_within_s: float = CLOSE_PUBLISH_S) -> None:
        """Stop consuming, and publish what is still queued, for at most ``publish_within_s``: the
        writer-coordinator's events are queued by its HTTP threads and tied to no offset, so
        nothing sends them again once the process is gone. What the broker did not take in that
        time is named in the log."""
        self.consumer.close()
        with self._pending_mutex:
            queued, self._pending = self._pending, []
        left = queued
        if queued:
            try:
                outcomes = self.producer.publish_all(self.topic, queued, timeout_s=publish_within_s)
                left = [event for event, error in zip(queued, outcomes, strict=True) if error is not None]
            except KafkaSecurityError as e:
                log.error("%s: %s", self.name, e)
        if left:
            log.warning(
                "%s: stopping with %d events not published: %s",
                self.name,
                len(left),
                "; ".join(f"{e.type.value} {e.instant} ({e.action}) on {e.table}" for e in left),
            )
        self.metrics.unpublished.labels(self.name).set(len(left))
        self.producer.close()
