"""kopf handlers: thin wiring of :mod:`spec`, :mod:`schedule` and :mod:`status` to Kubernetes,
Kafka and Prometheus.

One timer per ``HudiTable`` does everything on each tick: parse the spec, read the table when its
observation is stale (or an event said it changed), decide what is due, publish the requests
(and create the compaction Job), and write the status when it changed. kopf's peering pauses the
timers of every replica but the one of the highest priority, so several replicas make one
request per due time; and a request's identity is its instant (see :mod:`schedule`), so a replica
taking over, or a restarted one, repeats at worst the same request with the same CloudEvents id
and the same Job name.

A bad spec or a table out of reach is a ``Degraded`` condition and a Warning Event, never an
exception out of a handler (kopf would retry it forever, the crash loop of a bad spec)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemark.errors import BrokerUnavailableError, EventDecodeError, TidemarkError
from tidemark.events import H_TYPE, EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, EventProducer, Outgoing, RawMessage, outgoing
from tidemark.kafka_security import PLAINTEXT, KafkaSecurity
from tidemark.storage import S3Options, canonical_location, open_storage
from tidemark.timeline import COMPACTION
from tidemark_operator.jobs import DEFAULT_ACTIVE_DEADLINE_S, compaction_job, job_name
from tidemark_operator.kube import JobClient, KubeError
from tidemark_operator.schedule import Decision, LastRequest, Request, TableFacts, answer, decide
from tidemark_operator.spec import Service, SpecError, TableSpec, parse_spec
from tidemark_operator.status import (
    ARCHIVAL_BLOCKED,
    DEGRADED,
    EventMemory,
    Observation,
    degraded,
    facts,
    last_requests,
    merge_conditions,
    observe,
    table_status,
)

log = logging.getLogger("tidemark.operator")

GROUP, VERSION, PLURAL = "tidemark.io", "v1alpha1", "huditables"
SOURCE = "/tidemark/operator"
REQUEST_TYPES = {
    Service.CLEAN: EventType.CLEAN_REQUESTED,
    Service.ARCHIVE: EventType.ARCHIVE_REQUESTED,
    Service.COMPACTION: EventType.COMPACTION_REQUESTED,
}
#: the events that change what the status shows, make a commit trigger due, or answer a request
CONSUMED = frozenset(
    {
        EventType.CLEAN_COMPLETED,
        EventType.ARCHIVE_COMPLETED,
        EventType.CLEAN_SKIPPED,
        EventType.ARCHIVE_SKIPPED,
        EventType.WRITE_CONFLICTED,
        EventType.INSTANT_COMPLETED,
    }
)
_CONSUMED_TYPES = frozenset(str(t).encode() for t in CONSUMED)  # as the ce_type header carries them
#: how far before a request its answer is looked for (see :meth:`EventListener.cover`)
_CLOCK_SKEW = timedelta(seconds=60)


@dataclass(frozen=True)
class OperatorConfig:
    bootstrap: str
    topic: str = "tidemark.timeline"
    security: KafkaSecurity = PLAINTEXT
    #: the consumer group's prefix; each process adds its own suffix (see :class:`EventListener`)
    group: str = "tidemark-operator"
    tick_s: float = 10.0
    #: the longest a table goes without its timeline being read again (events shorten it)
    refresh_s: float = 60.0
    s3: S3Options = field(default_factory=S3Options)
    #: threads reading the tables' timelines: a table whose storage does not answer holds one for
    #: as long as its read waits (see ``s3.timeout_s``), and the others must still be read
    read_threads: int = 16
    job_image: str = "tidemark:0.1.0"
    job_service_account: str | None = None
    job_ttl_s: int = 86400
    job_deadline_s: int = DEFAULT_ACTIVE_DEADLINE_S
    #: seconds after start in which nothing is published: replicas started together lead at once
    #: until their peering records meet, and two leaders would both make the first request
    settle_s: float = 0.0


class OperatorMetrics:
    def __init__(self, tables: Callable[[], Iterable[_Seen]] = tuple, stale_s: float = 60.0) -> None:
        r = self.registry = CollectorRegistry()

        def scheduled() -> list[_Seen]:
            """The tables this replica's timers looked at within ``stale_s``: none on a replica
            that kopf's peering paused (its timers stopped), whatever it saw before."""
            fresh_after = time.monotonic() - stale_s
            return [seen for seen in list(tables()) if seen.ticked_at >= fresh_after]

        self.scheduled = scheduled
        r.register(TableCollector(scheduled))
        # computed at each scrape, as the per-table series: a paused replica's would stay frozen
        self.tables = Gauge("tidemark_operator_tables_managed", "HudiTable resources scheduled", registry=r)
        self.tables.set_function(lambda: len(scheduled()))
        self.degraded = Gauge("tidemark_operator_tables_degraded", "HudiTables with a Degraded condition", registry=r)
        self.degraded.set_function(lambda: sum(1 for s in scheduled() if s.problem or s.degraded_reason))
        self.requests = Counter(
            "tidemark_operator_requests_published", "Requests published, by service", ["service"], registry=r
        )
        self.held = Counter(
            "tidemark_operator_requests_held", "Looks at a due request held back by Forbid", ["service"], registry=r
        )
        self.lag = Histogram(
            "tidemark_operator_schedule_lag_seconds",
            "From a request's due time to its publication",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.events = Counter(
            "tidemark_operator_events_consumed", "Timeline events consumed, by type", ["type"], registry=r
        )
        self.kafka_errors = Counter(
            "tidemark_operator_kafka_errors", "Requests the broker did not take (retried next tick)", registry=r
        )


class TableCollector(Collector):
    """The per-table series the alerts look at, computed at each scrape from what the timers last
    saw of each table. Only the tables ``tables`` gives (those looked at lately, see
    :class:`OperatorMetrics`) are exported: a replica that kopf's peering paused or that lost a
    table shows nothing for it, rather than a frozen value the active replica no longer agrees with.

    ``resource`` is the HudiTable's ``namespace/name`` (``namespace`` is the scrape's own label),
    ``table_service`` one of compaction, clean, archive (``service`` is the scrape's too)."""

    def __init__(self, tables: Callable[[], Iterable[_Seen]]) -> None:
        self.tables = tables

    def collect(self) -> Iterator[Metric]:
        table = ["resource", "table"]
        overdue = GaugeMetricFamily(
            "tidemark_operator_request_overdue_seconds",
            "Seconds a due request of a table service has been held back (a compaction Job still running, "
            "the previous request unanswered under Forbid, the broker refusing it); 0 when none is",
            labels=[*table, "table_service"],
        )
        blocked = GaugeMetricFamily(
            "tidemark_operator_archival_blocked_seconds",
            "Seconds the table's ArchivalBlocked condition has been True, by the guard holding archival back",
            labels=[*table, "guard"],
        )
        pending = GaugeMetricFamily(
            "tidemark_operator_pending_compactions", "Compactions planned and not completed", labels=table
        )
        delta = GaugeMetricFamily(
            "tidemark_operator_delta_commits_since_compaction",
            "Completed delta commits after the latest compaction",
            labels=table,
        )
        degraded = GaugeMetricFamily(
            "tidemark_operator_table_degraded",
            "1 while the table's Degraded condition is True (reason InvalidSpec, TableUnreachable, JobRefused, ...)",
            labels=[*table, "reason"],
        )
        now = datetime.now(UTC)
        for seen in self.tables():
            labels = [seen.resource, seen.location]
            degraded.add_metric([*labels, seen.degraded_reason or ""], 1.0 if seen.degraded_reason else 0.0)
            if seen.observation is None:
                continue  # its spec or its storage is at fault: nothing else about it is known
            for service in Service:
                since = seen.overdue_since.get(service)
                overdue.add_metric([*labels, str(service)], 0.0 if since is None else (now - since).total_seconds())
            if seen.archival_blocked is not None:
                guard, blocked_since = seen.archival_blocked
                blocked.add_metric([*labels, guard], max(0.0, (now - blocked_since).total_seconds()))
            if seen.pending_compactions is not None:
                pending.add_metric(labels, seen.pending_compactions)
            if seen.delta_commits is not None:
                delta.add_metric(labels, seen.delta_commits)
        yield from (overdue, blocked, pending, delta, degraded)


class EventListener:
    """Consumes the timeline topic in a thread and remembers the latest events of each table.

    Each process reads every event (a consumer group of its own, started at the end of the topic,
    never committing), since any replica may be the one scheduling a table; what it missed while
    down is on the timeline, which the status is read from anyway, but for the answers that leave
    nothing there (a ``*.skipped``): a look finding a request made before this process read the
    topic unanswered has it read again from then (:meth:`cover`).

    :attr:`ready` is set once the consumer reads from the end of the topic: a request published
    before then could be answered before the consumer is placed, and its ``*.completed`` lost."""

    def __init__(self, config: OperatorConfig, metrics: OperatorMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.memories: dict[str, EventMemory] = {}
        self.changed: set[str] = set()
        self.ready = threading.Event()
        #: why the topic cannot be read now (the broker, TLS or SASL), None while it can
        self.error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._polling = threading.Event()
        self._polling.set()
        self._thread = threading.Thread(target=self._run, name="tidemark-events", daemon=True)
        self.group = f"{config.group}-{uuid.uuid4().hex[:12]}"
        #: since when every event published is read (once the consumer is placed), and the
        #: earlier time :meth:`cover` asks for, to read the topic again from
        self._covered: datetime | None = None
        self._wanted: datetime | None = None
        #: the time a rewind to failed last (said once, tried again at each poll)
        self._failed_rewind: datetime | None = None
        #: the last offset read per partition: what a rewind reads again is not counted again
        self._read_up_to: dict[tuple[str, int], int] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """No polling meanwhile: a batch of requests going out comes back to this consumer, and
        reading it as it arrives would take the CPU the batch needs (it is read just after)."""
        self._polling.clear()
        try:
            yield
        finally:
            self._polling.set()

    def memory(self, location: str) -> EventMemory:
        with self._lock:
            return EventMemory(dict(self.memories.get(location, EventMemory()).latest))

    def take_changed(self, location: str) -> bool:
        with self._lock:
            if location in self.changed:
                self.changed.discard(location)
                return True
            return False

    def cover(self, since: datetime) -> None:
        """Have every event published since ``since`` read: a request made then, before this
        process read the topic (by a process that crashed, or a leader that went), may have been
        answered meanwhile, and under Forbid an answer never seen holds the next request until
        the request times out. Events read twice are harmless (:meth:`EventMemory.remember`)."""
        with self._lock:
            if (self._covered is None or since < self._covered) and (self._wanted is None or since < self._wanted):
                self._wanted = since

    def _rewind(self, consumer: EventConsumer) -> None:
        """Read the topic again from what :meth:`cover` asked for, if anything."""
        with self._lock:
            since, covered = self._wanted, self._covered
            if since is None or covered is None or since >= covered:
                return
        try:
            # the answer is stamped by its service's clock, which may lag the operator's
            if not consumer.rewind((since - _CLOCK_SKEW).timestamp()):
                return  # no partition now: once there is one
            log.info("reading %s again from %s: requests made then may have been answered", self.config.topic, since)
        except TidemarkError as e:  # tried again at the next poll; said once
            if self._failed_rewind != since:
                self._failed_rewind = since
                log.warning("cannot read %s again from %s (trying again): %s", self.config.topic, since, e)
            return
        with self._lock:
            self._covered = min(covered, since)
            if self._wanted is not None and self._wanted >= self._covered:
                self._wanted = None

    def remember(self, event: TimelineEvent) -> None:
        """Kept under the table's canonical location, which a spec's ``canonical_location`` looks
        up: a producer spelling the table otherwise (``s3a://``, an older service echoing a
        request's spelling) still answers that table's requests."""
        table = canonical_location(event.table)
        with self._lock:
            self.memories.setdefault(table, EventMemory()).remember(event)
            self.changed.add(table)

    def _run(self) -> None:
        consumer = EventConsumer(
            self.config.bootstrap,
            [self.config.topic],
            self.group,
            client_id="tidemark-operator",
            config={"auto_offset_reset": "latest"},
            security=self.config.security,
        )
        try:
            while not self._stop.is_set():
                if not self._polling.wait(0.5):
                    continue
                try:
                    messages = consumer.poll(1.0)
                except TidemarkError as e:  # broker or TLS/SASL trouble: said, and tried again
                    log.warning("consuming %s: %s", self.config.topic, e)
                    self.error = str(e)
                    self._stop.wait(2.0)
                    continue
                self.error = None
                if not self.ready.is_set() and consumer.positioned():
                    log.info("reading %s from its end: requests may be published", self.config.topic)
                    with self._lock:
                        self._covered = datetime.now(UTC)
                    self.ready.set()
                if self.ready.is_set():
                    self._rewind(consumer)
                for message in messages:
                    self.consume(message)
        finally:
            consumer.close()

    def consume(self, message: RawMessage) -> None:
        """Remember what ``message`` says of its table, if it is an event the operator reads."""
        if dict(message.headers).get(H_TYPE) not in _CONSUMED_TYPES:
            return  # the requests, this operator's own among them: not decoded
        try:
            event = decode(message.key, message.value, message.headers)
        except EventDecodeError:
            return  # the services dead-letter it; not the operator's to judge
        if event.type not in CONSUMED:
            return
        where = (message.topic, message.partition)
        if message.offset > self._read_up_to.get(where, -1):  # read again after a rewind: counted once
            self._read_up_to[where] = message.offset
            self.metrics.events.labels(str(event.type)).inc()
        self.remember(event)


@dataclass
class _Seen:
    """What this process knows of one resource between ticks."""

    location: str
    observation: Observation | None = None
    observed_at: float = 0.0
    spec_key: str = ""
    #: the reason and message of the last Warning Event (see ``report``), until the problem clears
    problem: tuple[str, str] | None = None
    job: dict[str, Any] | None = None
    #: why the API server refused the last compaction Job made (status and one Warning), until
    #: one is made or the spec changes
    job_refused: str | None = None
    #: what the per-table metrics show (see :class:`TableCollector`)
    resource: str = ""
    ticked_at: float = float("-inf")
    overdue_since: dict[Service, datetime] = field(default_factory=dict)
    pending_compactions: int | None = None
    delta_commits: int | None = None
    #: the guard and since when the ArchivalBlocked condition is True (its lastTransitionTime)
    archival_blocked: tuple[str, datetime] | None = None
    #: the Degraded condition's reason while it is True
    degraded_reason: str | None = None
    #: the requests this process made: a tick's status patch may not be back in the body kopf
    #: gives the next tick (a busy API server or watch), which must not make them again
    made: dict[Service, LastRequest] = field(default_factory=dict)
    #: the requests planned for a coming fire time (see :class:`FireTimes`) while it has not come:
    #: a look meanwhile neither plans nor makes them again
    plan: _Plan | None = None
    planned: dict[Service, LastRequest] = field(default_factory=dict)

    def latest_requests(self, status: Mapping[str, Any] | None) -> dict[Service, LastRequest]:
        """The last request of each service: the one ``status`` records, or a newer one this
        process made whose status patch is not back yet."""
        known = last_requests(status)
        for service, request in self.made.items():
            if service not in known or request.instant > known[service].instant:
                known[service] = request
        return known

    def shown(self, conditions: list[dict[str, Any]], guard: str | None) -> None:
        """Remember what the status just written says, for the metrics."""
        by_type = {c["type"]: c for c in conditions}
        degraded = by_type.get(DEGRADED, {})
        self.degraded_reason = str(degraded.get("reason")) if degraded.get("status") == "True" else None
        blocked = by_type.get(ARCHIVAL_BLOCKED, {})
        if blocked.get("status") == "True" and guard is not None:
            since = datetime.fromisoformat(str(blocked["lastTransitionTime"]).replace("Z", "+00:00"))
            self.archival_blocked = (guard, since)
        else:
            self.archival_blocked = None


#: what publishing a group of events came to: each one's error (None once acknowledged), and when
Outcomes = tuple[list[BrokerUnavailableError | None], datetime]


class BatchPublisher:
    """Publishes the requests on the timeline topic in batches: each event sent, then the
    acknowledgements gathered (:meth:`EventProducer.publish_all`), rather than one acknowledged
    round trip each. Groups handed over while a batch is on its way go together in the next. On a
    thread of its own, not the pool the timeline reads use."""

    def __init__(
        self, producer: EventProducer, topic: str, aside: Callable[[], contextlib.AbstractContextManager[None]]
    ) -> None:
        self.producer = producer
        self.topic = topic
        #: what must stand aside while a batch goes out (:meth:`EventListener.aside`)
        self.aside = aside
        self._queue: list[tuple[list[TimelineEvent | Outgoing], asyncio.Future[Outcomes]]] = []
        self._sending: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tidemark-publish")

    def publish(self, events: list[TimelineEvent | Outgoing]) -> asyncio.Future[Outcomes]:
        """Publish ``events`` with the batch they join; what it came to, once it has."""
        future: asyncio.Future[Outcomes] = asyncio.get_running_loop().create_future()
        self._queue.append((events, future))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send())
        return future

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            batch, self._queue = self._queue, []
            events = [event for group, _ in batch for event in group]
            try:
                outcomes = await loop.run_in_executor(self._thread, self._publish_all, events)
            except BrokerUnavailableError as e:  # TLS or SASL: the broker is unusable for all
                outcomes = [e] * len(events)
            except Exception as e:  # every waiting table must hear of it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            acked = datetime.now(UTC)
            for group, future in batch:
                if not future.done():  # its table's timer may have given up meanwhile
                    future.set_result((outcomes[: len(group)], acked))
                outcomes = outcomes[len(group) :]

    def _publish_all(self, events: list[TimelineEvent | Outgoing]) -> list[BrokerUnavailableError | None]:
        with self.aside():
            return self.producer.publish_all(self.topic, events)

    def close(self) -> None:
        self._thread.shutdown(wait=False)


@dataclass
class _Plan:
    events: list[TimelineEvent | Outgoing]
    #: asked at the fire time: whether the table still wants them (its spec unchanged, its timer
    #: not stopped, ...)
    wanted: Callable[[], bool]
    #: what publishing them came to; None when they were not wanted any more
    outcome: asyncio.Future[Outcomes | None]


class FireTimes:
    """The requests planned for each coming fire time, published together when it comes.

    Every table with the same interval or cron fires at the same instant. At its look before a
    fire time, a table's timer decides what that fire time will request and plans it here; when
    the time comes one callback asks each plan whether it is still wanted and hands them all to
    the publisher as one batch. A thousand timers waking at the same instant to decide and
    publish each would cost the event loop more than the publication itself."""

    def __init__(self, publisher: BatchPublisher) -> None:
        self.publisher = publisher
        self._plans: dict[datetime, list[_Plan]] = {}
        self._publishing: set[asyncio.Task[None]] = set()

    def plan(self, due: datetime, events: list[TimelineEvent], wanted: Callable[[], bool]) -> _Plan:
        """Publish ``events`` at ``due`` if ``wanted()`` then; see the plan's outcome."""
        loop = asyncio.get_running_loop()
        plan = _Plan([outgoing(e) for e in events], wanted, loop.create_future())  # encoded now, not at due
        if due not in self._plans:
            self._plans[due] = []
            loop.call_later(max(0.0, (due - datetime.now(UTC)).total_seconds()), self._fire, due)
        self._plans[due].append(plan)
        return plan

    def _fire(self, due: datetime) -> None:
        left = (due - datetime.now(UTC)).total_seconds()
        if left > 0:  # the loop's clock is not the wall clock: never before the fire time
            asyncio.get_running_loop().call_later(left, self._fire, due)
            return
        wanted = []
        for plan in self._plans.pop(due, []):
            if plan.outcome.done():
                continue  # given up: its timer stopped
            if plan.wanted():
                wanted.append(plan)
            else:
                plan.outcome.set_result(None)
        if wanted:
            task = asyncio.create_task(self._publish(wanted))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)

    async def _publish(self, plans: list[_Plan]) -> None:
        try:
            outcomes, acked = await self.publisher.publish([event for plan in plans for event in plan.events])
        except Exception as e:  # every waiting table must hear of it
            for plan in plans:
                if not plan.outcome.done():
                    plan.outcome.set_exception(e)
            return
        for plan in plans:
            if not plan.outcome.done():
                plan.outcome.set_result((outcomes[: len(plan.events)], acked))
            outcomes = outcomes[len(plan.events) :]


class Waits:
    """The timers waiting for a fire time, woken when it has come or when kopf stops them
    (deleted, exiting, paused by peering: they must then return at once). kopf's own
    ``stopped.wait()`` costs a few tasks per waiter, which a thousand timers stopping together
    do not get through in the instant kopf gives them; one task looks at every waiting timer's
    stopper ten times a second instead."""

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Future[None], Any] = {}
        self._watching: asyncio.Task[None] | None = None

    async def until(self, future: asyncio.Future[Any], stopped: Any) -> None:
        """Until ``future`` is done, or ``stopped`` (a timer's kopf.DaemonStopped) is set."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(_: object) -> None:
            if not wake.done():
                wake.set_result(None)

        future.add_done_callback(done)
        self._waiting[wake] = stopped
        if self._watching is None or self._watching.done():
            self._watching = asyncio.create_task(self._watch())
        try:
            await wake
        finally:
            del self._waiting[wake]
            future.remove_done_callback(done)

    async def _watch(self) -> None:
        while self._waiting:
            await asyncio.sleep(0.1)
            for wake, stopped in list(self._waiting.items()):
                if stopped and not wake.done():
                    wake.set_result(None)


class Runtime:
    """The operator's state in one process: Kafka clients, caches, metrics, the Job client."""

    def __init__(
        self, config: OperatorConfig, login: Callable[[Mapping[str, Any]], kopf.ConnectionInfo | None] | None = None
    ) -> None:
        self.config = config
        #: how to reach the API server; default: in-cluster, then kubeconfig (as kopf does)
        self.login = login or default_login
        self.seen: dict[str, _Seen] = {}
        # a table not looked at for three ticks (and at least a minute) is no longer this replica's
        self.metrics = OperatorMetrics(lambda: self.seen.values(), max(3 * config.tick_s, 60.0))
        self.listener = EventListener(config, self.metrics)
        self.producer = EventProducer(config.bootstrap, security=config.security)
        self.publisher = BatchPublisher(self.producer, config.topic, self.listener.aside)
        self.fire_times = FireTimes(self.publisher)
        self.waits = Waits()
        self.jobs: JobClient | None = None
        # the timeline reads' own pool, not asyncio's default (min(32, cpus + 4) threads, shared
        # with kopf's sync handlers): a few tables out of reach must not queue the others' reads
        self.reads = ThreadPoolExecutor(config.read_threads, thread_name_prefix="tidemark-read")
        self.publish_error: str | None = None
        self.started = time.monotonic()
        #: why kopf no longer orchestrates (no watch, no timer: nothing is scheduled), or None
        self.stopped: str | None = None

    def settled(self) -> bool:
        """Whether requests may go out: not while settling (see :attr:`OperatorConfig.settle_s`),
        nor before the answers to them can be read (:attr:`EventListener.ready`)."""
        return time.monotonic() - self.started >= self.config.settle_s and self.listener.ready.is_set()

    def kopf_ended(self, task: asyncio.Task[Any]) -> None:
        """One of kopf's root tasks ended (main.operate): kopf has stopped. The process may stay
        (kopf can wait for ever on a task that ignores its cancellation), so the health checks
        fail from now on and a liveness probe restarts it."""
        if self.stopped is None:
            failure = None if task.cancelled() else task.exception()
            self.stopped = f"kopf has stopped ({task.get_name()} ended{f': {failure}' if failure else ''})"
            log.info("%s: nothing is scheduled any more", self.stopped)

    def healthy(self) -> tuple[bool, str]:
        """``/healthz``: fails once kopf has stopped. A broker refusing requests, out of reach or
        refusing TLS/SASL is said after ``ok`` (a restarted process would find it no better);
        :meth:`ready` fails then."""
        if self.stopped:
            return False, f"operator: {self.stopped}\n"
        trouble = self.trouble()
        return True, f"operator: ok, {len(self.metrics.scheduled())} tables{f' ({trouble})' if trouble else ''}\n"

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: unready once kopf has stopped, and while the broker refuses requests or the
        timeline topic cannot be read."""
        if self.stopped:
            return False, f"operator: {self.stopped}\n"
        trouble = self.trouble()
        if trouble:
            return False, f"operator: {trouble}\n"
        return True, f"operator: ok, {len(self.metrics.scheduled())} tables\n"

    def trouble(self) -> str | None:
        """Why requests cannot go out now, or None."""
        if self.publish_error:
            return f"the broker did not take a request: {self.publish_error}"
        if self.listener.error:  # nothing is requested either until it is read (EventListener.ready)
            return f"the timeline topic cannot be read: {self.listener.error}"
        return None

    def close(self) -> None:
        self.listener.stop()
        self.publisher.close()
        self.producer.close()
        self.reads.shutdown(wait=False, cancel_futures=True)


def request_event(spec: TableSpec, request: Request, resource: str, now: datetime) -> TimelineEvent:
    """The request as a timeline event; its id is a function of the table, the type and the
    instant only (not of ``now``), so a repeated request has the same id."""
    service = spec.service(request.service)
    extra = {"resource": resource, "trigger": request.trigger, **service.conf}
    if request.due is not None:
        extra["due"] = request.due.astimezone(UTC).isoformat()
    return TimelineEvent(
        REQUEST_TYPES[request.service],
        spec.canonical_location,  # the key of the table's other events: one partition, one order
        request.instant,
        str(request.service),
        "REQUESTED",
        time=now,
        source=SOURCE,
        extra=extra,
    )


def _status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch turning ``old`` into ``new``: the fields that changed, each replacing its old
    value whole (see :func:`_replacing`), and None for the fields gone."""
    return {
        key: None if key not in new else _replacing(old.get(key), new[key])
        for key in old.keys() | new.keys()
        if key not in new or new[key] != old.get(key)
    }


def _replacing(old: Any, new: Any) -> Any:
    """``new`` as a merge patch value that replaces ``old`` whole: the API server merges a mapping
    into the one it has at every depth, so each key only ``old`` has is None, however deep (a new
    request's entry has no ``answer`` or ``job`` yet, and must not keep the previous request's)."""
    if not (isinstance(new, Mapping) and isinstance(old, Mapping)):
        return new
    return {**{k: None for k in old if k not in new}, **{k: _replacing(old.get(k), v) for k, v in new.items()}}


def _created(meta: Mapping[str, Any]) -> datetime:
    stamp = meta.get("creationTimestamp")
    if stamp:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return datetime.now(UTC)


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """Register the handlers of ``runtime``'s operator in ``registry``."""
    config = runtime.config
    resource = (GROUP, VERSION, PLURAL)

    def report(body: Any, seen: _Seen, reason: str, message: str) -> None:
        """A Warning Event, once per distinct problem (not every tick, nor at every start of the
        operator: a problem the status already shows was warned of by an earlier process)."""
        if seen.problem is None and _degraded_by(body, reason, message):
            seen.problem = (reason, message)
        if seen.problem is None or seen.problem[1] != message:
            kopf.warn(body, reason=reason, message=message)
            log.warning("%s/%s: %s", body["metadata"].get("namespace"), body["metadata"]["name"], message)
        seen.problem = (reason, message)

    def stand_aside(body: Any, seen: _Seen, owner: str, location: str, patch: Any, old: Any, meta: Any) -> None:
        """This resource names a table that ``owner`` schedules: it schedules nothing (one table,
        one set of settings: both would send requests of the same id with different settings)."""
        message = f"HudiTable {owner}, created first, schedules {location}: this one schedules nothing while it does"
        report(body, seen, "DuplicateTable", message)
        if seen.plan is not None and not seen.plan.outcome.done():
            seen.plan.outcome.cancel()
        seen.plan, seen.planned, seen.observation = None, {}, None
        seen.overdue_since.clear()
        fields, conditions = degraded("DuplicateTable", message)
        seen.shown(_write(patch, old, fields, conditions, datetime.now(UTC), meta.get("generation")), None)

    # the id is the keyword the handlers get the index by (kopf's default, the qualified name, is none)
    @kopf.index(*resource, id="huditables_by_table", registry=registry)
    def huditables_by_table(spec: Any, meta: Any, name: str, namespace: str | None, **_: Any) -> dict[str, Claim]:
        """Each table's HudiTables, by its one spelling (``canonical_location``): what a look
        asks to know whether another one has it (see :func:`_first_claim`)."""
        if meta.get("deletionTimestamp"):
            return {}
        try:
            location = parse_spec(spec).canonical_location
        except SpecError:
            return {}  # names no table until its spec is valid
        return {location: _claim(meta, name, namespace)}

    def cleared(body: Any, seen: _Seen, reason: str, message: str) -> None:
        """A Normal Event saying the problem ``report`` told of is gone. kopf.info would be
        dropped: the posting level (main.settings_for) keeps kopf's per-handler Events out."""
        kopf.event(body, type="Normal", reason=reason, message=message)
        log.info("%s/%s: %s", body["metadata"].get("namespace"), body["metadata"]["name"], message)
        seen.problem = None

    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, field="spec", registry=registry)
    @kopf.on.resume(*resource, registry=registry)
    def validate(body: Any, spec: Any, uid: str, **_: Any) -> None:
        """Check the spec at once, so a bad one is reported without waiting for a tick."""
        seen = runtime.seen.setdefault(uid, _Seen(str(spec.get("location", ""))))
        try:
            parsed = parse_spec(spec)
        except SpecError as e:
            report(body, seen, "InvalidSpec", str(e))
            return
        seen.location = parsed.location
        seen.observed_at = 0.0  # a new spec: read the table again on the next tick
        seen.job_refused = None  # the next Job is made from the new spec
        # only a bad spec is cleared here: the first look may have found the table unreachable
        # before this handler ran, and only a look can tell that it is readable again
        if seen.problem is not None and seen.problem[0] == "InvalidSpec":
            cleared(body, seen, "SpecAccepted", f"the spec is valid; scheduling {parsed.location}")

    @kopf.timer(*resource, interval=config.tick_s, sharp=True, registry=registry)
    async def tick(
        body: Any,
        spec: Any,
        meta: Any,
        status: Any,
        uid: str,
        name: str,
        namespace: str | None,
        patch: Any,
        stopped: Any = None,  # kopf gives timers their stopper (kopf.DaemonStopped)
        huditables_by_table: Any = None,  # kopf gives handlers its indexes by name
        **_: Any,
    ) -> None:
        if meta.get("deletionTimestamp"):
            return
        seen = runtime.seen.setdefault(uid, _Seen(str(spec.get("location", ""))))
        seen.resource, seen.ticked_at = f"{namespace or 'default'}/{name}", time.monotonic()
        now = datetime.now(UTC)
        old = dict(status or {})
        generation = meta.get("generation")
        try:
            parsed = parse_spec(spec)
        except SpecError as e:
            report(body, seen, "InvalidSpec", str(e))
            seen.observation = None
            seen.shown(_write(patch, old, *degraded("InvalidSpec", str(e)), now, generation), None)
            return
        seen.location = parsed.location
        owner = _first_claim(huditables_by_table, parsed)
        if owner is not None and owner != _claim(meta, name, namespace):
            stand_aside(body, seen, owner[1], parsed.location, patch, old, meta)
            return
        made = seen.latest_requests(old)
        # a Job seen ended has changed the timeline: the delta commits it compacted, read before
        # it, would otherwise make the next request (a second Job, with nothing to compact)
        job_ended = await _refresh_job(runtime, seen, namespace or "default", made.get(Service.COMPACTION))
        changed = runtime.listener.take_changed(parsed.canonical_location)
        stale = time.monotonic() - seen.observed_at >= config.refresh_s
        if seen.observation is None or changed or stale or job_ended or seen.spec_key != repr(parsed):
            try:
                storage = open_storage(parsed.location, _s3(config.s3, parsed))
                loop = asyncio.get_running_loop()
                seen.observation = await loop.run_in_executor(runtime.reads, observe, storage, parsed)
            except (TidemarkError, OSError) as e:
                message = f"cannot read the table at {parsed.location}: {e}"
                report(body, seen, "TableUnreachable", message)
                seen.observation = None
                seen.shown(_write(patch, old, *degraded("TableUnreachable", message), now, generation), None)
                return
            seen.observed_at, seen.spec_key = time.monotonic(), repr(parsed)
        observation = seen.observation
        assert observation is not None
        parsed = _schedulable(parsed, observation)
        if seen.plan is not None and not seen.plan.outcome.done() and not seen.plan.wanted():
            seen.plan.outcome.cancel()  # its timer stopped, or its spec changed: decided again below
            seen.plan, seen.planned = None, {}
        created = _created(meta)

        async def request_due(parsed: TableSpec, now: datetime) -> tuple[Decision, TableFacts, EventMemory]:
            """Decide what is due now and publish it (``made`` and ``published`` follow)."""
            events = runtime.listener.memory(parsed.canonical_location)
            table_facts = facts(observation, events)
            active = _job_active(seen.job, made.get(Service.COMPACTION))
            table_facts = replace(table_facts, compaction_job_active=active)
            for service, last in made.items():
                # a compaction's Job answers it (see _refresh_job), the others' answers are events
                unanswered = last.job is None and answer(service, last, table_facts) is None
                if unanswered and now - last.requested_at < parsed.request_timeout:
                    runtime.listener.cover(last.requested_at)
            decision = decide(parsed, table_facts, {**made, **seen.planned}, created, now)
            for service, why in decision.held.items():
                if why != "suspended":
                    runtime.metrics.held.labels(str(service)).inc()
            if runtime.settled():
                done = await _publish(runtime, seen, body, parsed, decision, name, namespace or "default", now)
                made.update(done)
                seen.made.update(done)
                published.update(done)
                if (compaction := done.get(Service.COMPACTION)) is not None and compaction.job:
                    # unfinished until read otherwise (the next look's _refresh_job): the decisions
                    # after it, in this look too, must hold the next compaction under Forbid
                    seen.job = {"name": compaction.job, "active": True, "failed": False, "message": ""}
                    table_facts = replace(table_facts, compaction_job_active=True)  # for the plans
            return decision, table_facts, events

        published: dict[Service, LastRequest] = {}
        decision, table_facts, events = await request_due(parsed, now)
        next_look = now + timedelta(seconds=config.tick_s)
        while (
            stopped is not None
            and (upcoming := min(decision.next_scheduled.values(), default=None)) is not None
            and upcoming < next_look
        ):
            # a fire time before the next look: what it will request is decided now and published
            # when it comes, with every other table's (see FireTimes), rather than at the look after
            plan = decide(parsed, table_facts, {**made, **seen.planned}, created, upcoming)
            on_time = [r for r in plan.requests if r.due == upcoming and r.service is not Service.COMPACTION]
            # a compaction's Job is made first, at the fire time itself (below)
            compaction = any(r.service is Service.COMPACTION for r in plan.requests)
            if on_time:
                _plan_fire(runtime, seen, parsed, on_time, upcoming, f"{namespace or 'default'}/{name}", stopped, meta)
            # the status is written when the handler returns: this look waits for the fire time
            # (the status then records its requests at once) unless what it found is news that
            # must not wait, a first look, a new spec or a new phase (the requests are in the status
            # from the next look)
            phase = table_status(parsed, observation, events, decision, made, seen.job, seen.job_refused)[0].get(
                "phase"
            )
            quiet = old.get("observedGeneration") == generation and old.get("phase") == phase
            if not quiet or (seen.plan is None and not compaction):
                break
            if (pending := seen.plan) is not None:  # (its callback clears seen.plan)
                await runtime.waits.until(pending.outcome, stopped)
            else:
                fire: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                at = asyncio.get_running_loop().call_later(
                    max(0.0, (upcoming - datetime.now(UTC)).total_seconds()), fire.set_result, None
                )
                await runtime.waits.until(fire, stopped)
                at.cancel()
                if not stopped and (early := (upcoming - datetime.now(UTC)).total_seconds()) > 0:
                    await asyncio.sleep(early)  # the loop's clock is not the wall clock
            if stopped:
                # deleted, exiting, or another replica leads: kopf waits for a stopped timer only
                # an instant, and the status is the next look's (or the new leader's)
                return
            await asyncio.sleep(0)  # the plan's own callback records its outcome first
            made = seen.latest_requests(old)
            try:
                parsed = _schedulable(parse_spec(spec), observation)
            except SpecError:
                break  # changed into a bad one meanwhile: the next look reports it
            # the rest due now (the compaction, a plan the spec changed under), and the next fire
            # times (for the status, and for this loop while they come before the next look)
            now = datetime.now(UTC)
            decision, table_facts, events = await request_due(parsed, now)
        for service in Service:
            since = None if service in published else decision.overdue_since(service)
            if since is None:
                seen.overdue_since.pop(service, None)
            else:  # the oldest due time held back counts, not the latest fire time
                seen.overdue_since[service] = min(since, seen.overdue_since.get(service, since))
        seen.pending_compactions = len(observation.timeline.pending().of_actions(COMPACTION))
        seen.delta_commits = len(table_facts.delta_commits_since_compaction)
        fields, conditions = table_status(parsed, observation, events, decision, made, seen.job, seen.job_refused)
        if observation.refusal:
            report(body, seen, "ChangeRefused", observation.refusal)
        elif seen.job_refused is not None:
            report(body, seen, "JobRefused", seen.job_refused)
        elif seen.problem is not None:
            cleared(body, seen, "Recovered", f"{parsed.location} is scheduled again")
        guard = observation.archival_blocked[0] if observation.archival_blocked else None
        seen.shown(_write(patch, old, fields, conditions, now, generation), guard)

    @kopf.on.delete(*resource, registry=registry)
    def stop(uid: str, spec: Any, name: str, namespace: str | None, **_: Any) -> None:
        """Scheduling stops with the resource; the table and its data are left as they are."""
        runtime.seen.pop(uid, None)
        log.info(
            "%s/%s deleted: no more requests for %s (its data is untouched)", namespace, name, spec.get("location")
        )

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = runtime.login(kwargs)
        if info is not None:
            runtime.jobs = JobClient(info)
        return info

    @kopf.on.startup(registry=registry)
    def startup(**_: Any) -> None:
        runtime.listener.start()

    @kopf.on.cleanup(registry=registry)
    def cleanup(**_: Any) -> None:
        runtime.close()


#: a HudiTable's claim on its table: its creationTimestamp and ``namespace/name``
Claim = tuple[str, str]


def _claim(meta: Mapping[str, Any], name: str, namespace: str | None) -> Claim:
    return str(meta.get("creationTimestamp") or ""), f"{namespace or 'default'}/{name}"


def _first_claim(index: Mapping[str, Iterable[Claim]] | None, spec: TableSpec) -> Claim | None:
    """The HudiTable that schedules the table ``spec`` names: of those naming it, the one
    created first (then by ``namespace/name``), the same in every replica; the others stand
    aside until it goes."""
    return min((index or {}).get(spec.canonical_location, ()), default=None)


def _degraded_by(body: Any, reason: str, message: str) -> bool:
    """Whether the resource's status already has the Degraded condition of this problem."""
    for c in (body.get("status") or {}).get("conditions") or ():
        if c.get("type") == DEGRADED:
            return bool(c.get("status") == "True" and c.get("reason") == reason and c.get("message") == message)
    return False


def _schedulable(spec: TableSpec, observation: Observation) -> TableSpec:
    """``spec`` without the services the table refuses (see :func:`status.refusals`): the
    services would dead-letter every request."""
    refused = observation.refused
    if not refused:
        return spec
    return replace(
        spec,
        compaction=replace(spec.compaction, enabled=False) if Service.COMPACTION in refused else spec.compaction,
        clean=replace(spec.clean, enabled=False) if Service.CLEAN in refused else spec.clean,
        archive=replace(spec.archive, enabled=False) if Service.ARCHIVE in refused else spec.archive,
    )


def default_login(kwargs: Mapping[str, Any]) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _s3(base: S3Options, spec: TableSpec) -> S3Options:
    return replace(base, endpoint_url=spec.endpoint or base.endpoint_url, region=spec.region or base.region)


def _write(
    patch: Any,
    old: Mapping[str, Any],
    fields: Mapping[str, Any],
    conditions: list[dict[str, str]],
    now: datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Patch the status into ``fields`` and ``conditions``; the conditions as written."""
    new: dict[str, Any] = dict(fields)
    if "requests" not in new and old.get("requests"):
        new["requests"] = old["requests"]  # a degraded table keeps its request history
    for key in ("lastClean", "lastArchive", "lastCompaction", "lastConflict") if new.get("phase") == "Degraded" else ():
        if key in old and key not in new:
            new[key] = old[key]
    new["conditions"] = merge_conditions(old.get("conditions") or [], conditions, now, generation)
    if generation is not None:
        new["observedGeneration"] = generation
    for key, value in _status_patch(old, new).items():
        patch.status[key] = value
    merged: list[dict[str, Any]] = new["conditions"]
    return merged


async def _refresh_job(runtime: Runtime, seen: _Seen, namespace: str, last: LastRequest | None) -> bool:
    """The state of the last compaction Job, while it may still change; whether it was just seen
    ended (once per Job: a Job known ended is not read again)."""
    if last is None or not last.job or runtime.jobs is None:
        return False
    if seen.job is not None and seen.job["name"] == last.job and not seen.job.get("active"):
        return False
    try:
        seen.job = await runtime.jobs.job_state(namespace, last.job)
    except (KubeError, OSError) as e:
        log.warning("reading compaction Job %s: %s", last.job, e)
        return False
    return seen.job is not None and not seen.job.get("active")


def _job_active(job: Mapping[str, Any] | None, last: LastRequest | None) -> bool:
    """Whether the compaction Job of the last request ``last`` may still run, as ``job`` (the Job
    last read) says. A Job read of another request says nothing of this one's: running, until its
    own is read; none read (gone, or never made): not running."""
    if job is None:
        return False
    if last is not None and last.job and job["name"] != last.job:
        return True
    return bool(job.get("active"))


def _plan_fire(
    runtime: Runtime,
    seen: _Seen,
    spec: TableSpec,
    requests: list[Request],
    due: datetime,
    resource: str,
    stopped: Any,
    meta: Any,
) -> None:
    """Hand ``requests`` of the fire time ``due`` to :class:`FireTimes`; what it comes to is
    recorded in ``seen`` (and counted, and logged) when it has, whether or not a look waits."""
    generation = meta.get("generation")
    events = [request_event(spec, r, resource, due) for r in requests]

    def wanted() -> bool:
        # the spec as planned (not suspended meanwhile), and this replica still leads
        return not stopped and meta.get("generation") == generation and runtime.settled()

    def record(outcome: asyncio.Future[Outcomes | None]) -> None:
        if seen.plan is plan:
            seen.plan, seen.planned = None, {}
        result = None if outcome.cancelled() or outcome.exception() is not None else outcome.result()
        if result is None:
            return  # given up, not wanted any more, or failed: the next look decides again
        errors, acked = result
        for request, event, error in zip(requests, events, errors, strict=True):
            done = _recorded(runtime, spec, request, event, None, error, due, acked, resource)
            if done is not None:
                seen.made[request.service] = done

    plan = runtime.fire_times.plan(due, events, wanted)
    plan.outcome.add_done_callback(record)
    seen.plan = plan
    seen.planned = {r.service: LastRequest(r.instant, due, r.trigger) for r in requests}


async def _publish(
    runtime: Runtime,
    seen: _Seen,
    body: Any,
    spec: TableSpec,
    decision: Decision,
    name: str,
    namespace: str,
    now: datetime,
) -> dict[Service, LastRequest]:
    """Publish the due requests (and create the compaction Job); what was made. A Job the API
    server refuses is ``seen.job_refused``: asked again at every look, it would be refused again."""
    ready: list[tuple[Request, TimelineEvent, str | None]] = []
    for request in decision.requests:
        event = request_event(spec, request, f"{namespace}/{name}", now)
        job = None
        if request.service is Service.COMPACTION:
            if runtime.jobs is None:
                continue
            job = job_name(name, event.id)
            manifest = compaction_job(
                spec,
                resource=name,
                namespace=namespace,
                name=name,
                request_id=event.id,
                instant=request.instant,
                image=runtime.config.job_image,
                service_account=runtime.config.job_service_account,
                ttl_seconds=runtime.config.job_ttl_s,
                owner=kopf.build_owner_reference(body),
                active_deadline_s=runtime.config.job_deadline_s,
            )
            try:
                await runtime.jobs.create_job(namespace, manifest)
            except KubeError as e:
                if e.refused:  # shown in the status, and warned of once (see tick)
                    seen.job_refused = f"the API server refused the compaction Job: {e}"
                else:
                    log.warning("%s/%s: creating compaction Job %s: %s", namespace, name, job, e)
                continue
            except OSError as e:
                log.warning("%s/%s: creating compaction Job %s: %s", namespace, name, job, e)
                continue
            seen.job_refused = None
        ready.append((request, event, job))
    if not ready:
        return {}
    outcomes, acked = await runtime.publisher.publish([event for _, event, _ in ready])
    made: dict[Service, LastRequest] = {}
    for (request, event, job), error in zip(ready, outcomes, strict=True):
        done = _recorded(runtime, spec, request, event, job, error, now, acked, f"{namespace}/{name}")
        if done is not None:
            made[request.service] = done
    return made


def _recorded(
    runtime: Runtime,
    spec: TableSpec,
    request: Request,
    event: TimelineEvent,
    job: str | None,
    error: BrokerUnavailableError | None,
    now: datetime,
    acked: datetime,
    resource: str,
) -> LastRequest | None:
    """Count and log what publishing ``request`` came to; the request made, if it was."""
    if error is not None:
        runtime.publish_error = str(error)
        runtime.metrics.kafka_errors.inc()
        log.warning("%s: %s", resource, error)
        return None  # not recorded: the next look makes the same request again (same id)
    runtime.publish_error = None
    runtime.metrics.requests.labels(str(request.service)).inc()
    if request.due is not None:
        runtime.metrics.lag.observe(max(0.0, (acked - request.due).total_seconds()))
    log.info(
        "%s: requested %s of %s at %s (%s, id %s)",
        resource,
        request.service,
        spec.location,
        request.instant,
        request.trigger,
        event.id,
    )
    return LastRequest(request.instant, now, request.trigger, job)
