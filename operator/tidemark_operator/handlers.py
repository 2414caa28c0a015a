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
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemark.errors import BrokerUnavailableError, EventDecodeError, TidemarkError
from tidemark.events import EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, EventProducer
from tidemark.kafka_security import PLAINTEXT, KafkaSecurity
from tidemark.storage import S3Options, open_storage
from tidemark.timeline import COMPACTION
from tidemark_operator.jobs import compaction_job, job_name
from tidemark_operator.kube import JobClient, KubeError
from tidemark_operator.schedule import Decision, LastRequest, Request, decide
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
#: the events that change what the status shows, or make a commit trigger due
CONSUMED = frozenset(
    {EventType.CLEAN_COMPLETED, EventType.ARCHIVE_COMPLETED, EventType.WRITE_CONFLICTED, EventType.INSTANT_COMPLETED}
)


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
    job_image: str = "tidemark:0.1.0"
    job_service_account: str | None = None
    job_ttl_s: int = 86400
    #: seconds after start in which nothing is published: replicas started together lead at once
    #: until their peering records meet, and two leaders would both make the first request
    settle_s: float = 0.0


class OperatorMetrics:
    def __init__(self, tables: Callable[[], Iterable[_Seen]] = tuple, stale_s: float = 60.0) -> None:
        r = self.registry = CollectorRegistry()
        r.register(TableCollector(tables, stale_s))
        self.tables = Gauge("tidemark_operator_tables_managed", "HudiTable resources scheduled", registry=r)
        self.degraded = Gauge("tidemark_operator_tables_degraded", "HudiTables with a Degraded condition", registry=r)
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
    saw of each table. Only tables looked at within ``stale_s`` are exported: a replica that kopf's
    peering paused (its timers stopped) or that lost a table shows nothing for it, rather than a
    frozen value the active replica no longer agrees with.

    ``resource`` is the HudiTable's ``namespace/name`` (``namespace`` is the scrape's own label),
    ``table_service`` one of compaction, clean, archive (``service`` is the scrape's too)."""

    def __init__(self, tables: Callable[[], Iterable[_Seen]], stale_s: float) -> None:
        self.tables = tables
        self.stale_s = stale_s

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
            "1 while the table's Degraded condition is True (reason InvalidSpec, TableUnreachable, CompactionFailed)",
            labels=[*table, "reason"],
        )
        now, fresh_after = datetime.now(UTC), time.monotonic() - self.stale_s
        for seen in list(self.tables()):
            if seen.ticked_at < fresh_after:
                continue
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
    down is on the timeline, which the status is read from anyway."""

    def __init__(self, config: OperatorConfig, metrics: OperatorMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.memories: dict[str, EventMemory] = {}
        self.changed: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidemark-events", daemon=True)
        self.group = f"{config.group}-{uuid.uuid4().hex[:12]}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def memory(self, location: str) -> EventMemory:
        with self._lock:
            return EventMemory(dict(self.memories.get(location, EventMemory()).latest))

    def take_changed(self, location: str) -> bool:
        with self._lock:
            if location in self.changed:
                self.changed.discard(location)
                return True
            return False

    def remember(self, event: TimelineEvent) -> None:
        with self._lock:
            self.memories.setdefault(event.table, EventMemory()).remember(event)
            self.changed.add(event.table)

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
                try:
                    messages = consumer.poll(1.0)
                except TidemarkError as e:  # broker or TLS/SASL trouble: said, and tried again
                    log.warning("consuming %s: %s", self.config.topic, e)
                    self._stop.wait(2.0)
                    continue
                for message in messages:
                    try:
                        event = decode(message.key, message.value, message.headers)
                    except EventDecodeError:
                        continue  # the services dead-letter it; not the operator's to judge
                    if event.type in CONSUMED:
                        self.metrics.events.labels(str(event.type)).inc()
                        self.remember(event)
        finally:
            consumer.close()


@dataclass
class _Seen:
    """What this process knows of one resource between ticks."""

    location: str
    observation: Observation | None = None
    observed_at: float = 0.0
    spec_key: str = ""
    degraded_message: str | None = None
    job: dict[str, Any] | None = None
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
        self.jobs: JobClient | None = None
        self.publish_error: str | None = None
        self.started = time.monotonic()

    def healthy(self) -> tuple[bool, str]:
        if self.publish_error:
            return False, f"operator: the broker did not take a request: {self.publish_error}\n"
        return True, f"operator: ok, {len(self.seen)} tables\n"

    def update_gauges(self) -> None:
        self.metrics.tables.set(len(self.seen))
        self.metrics.degraded.set(sum(1 for s in self.seen.values() if s.degraded_message or s.degraded_reason))

    def close(self) -> None:
        self.listener.stop()
        self.producer.close()


def request_event(spec: TableSpec, request: Request, resource: str, now: datetime) -> TimelineEvent:
    """The request as a timeline event; its id is a function of the table, the type and the
    instant only (not of ``now``), so a repeated request has the same id."""
    service = spec.service(request.service)
    extra = {"resource": resource, "trigger": request.trigger, **service.conf}
    if request.due is not None:
        extra["due"] = request.due.astimezone(UTC).isoformat()
    return TimelineEvent(
        REQUEST_TYPES[request.service],
        spec.location,
        request.instant,
        str(request.service),
        "REQUESTED",
        time=now,
        source=SOURCE,
        extra=extra,
    )


def _status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch turning ``old`` into ``new`` (keys gone become None, one level down too)."""
    patch: dict[str, Any] = {}
    for key in set(old) | set(new):
        if key not in new:
            patch[key] = None
        elif isinstance(new[key], Mapping) and isinstance(old.get(key), Mapping):
            inner = {k: None for k in old[key] if k not in new[key]}
            inner.update(new[key])
            if inner != old[key]:
                patch[key] = inner
        elif new[key] != old.get(key):
            patch[key] = new[key]
    return patch


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
        """A Warning Event, once per distinct problem (not every tick)."""
        if seen.degraded_message != message:
            kopf.warn(body, reason=reason, message=message)
            log.warning("%s/%s: %s", body["metadata"].get("namespace"), body["metadata"]["name"], message)
        seen.degraded_message = message

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
        if seen.degraded_message is not None:
            kopf.info(body, reason="SpecAccepted", message=f"the spec is valid; scheduling {parsed.location}")
        seen.degraded_message = None
        runtime.update_gauges()

    @kopf.timer(*resource, interval=config.tick_s, registry=registry)
    async def tick(
        body: Any, spec: Any, meta: Any, status: Any, uid: str, name: str, namespace: str | None, patch: Any, **_: Any
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
            runtime.update_gauges()
            return
        seen.location = parsed.location
        changed = runtime.listener.take_changed(parsed.location)
        stale = time.monotonic() - seen.observed_at >= config.refresh_s
        if seen.observation is None or changed or stale or seen.spec_key != repr(parsed):
            try:
                storage = open_storage(parsed.location, _s3(config.s3, parsed))
                seen.observation = await asyncio.to_thread(observe, storage, parsed)
            except (TidemarkError, OSError) as e:
                message = f"cannot read the table at {parsed.location}: {e}"
                report(body, seen, "TableUnreachable", message)
                seen.observation = None
                seen.shown(_write(patch, old, *degraded("TableUnreachable", message), now, generation), None)
                runtime.update_gauges()
                return
            seen.observed_at, seen.spec_key = time.monotonic(), repr(parsed)
        observation = seen.observation
        assert observation is not None
        events = runtime.listener.memory(parsed.location)
        made = last_requests(old)
        for service, request in seen.made.items():
            if service not in made or request.instant > made[service].instant:
                made[service] = request
        await _refresh_job(runtime, seen, namespace or "default", made.get(Service.COMPACTION))
        table_facts = facts(observation, events)
        if seen.job is not None:
            table_facts = type(table_facts)(
                table_facts.commits_since_clean,
                table_facts.delta_commits_since_compaction,
                table_facts.last_done,
                bool(seen.job.get("active")),
            )
        decision = decide(parsed, table_facts, made, _created(meta), now)
        for service, why in decision.held.items():
            if why != "suspended":
                runtime.metrics.held.labels(str(service)).inc()
        if time.monotonic() - runtime.started < config.settle_s:
            published: dict[Service, LastRequest] = {}  # still settling: what is due waits a tick
        else:
            published = await _publish(runtime, body, parsed, decision, name, namespace or "default", now)
        made.update(published)
        seen.made.update(published)
        for service in Service:
            since = None if service in published else decision.overdue_since(service)
            if since is None:
                seen.overdue_since.pop(service, None)
            else:  # the oldest due time held back counts, not the latest fire time
                seen.overdue_since[service] = min(since, seen.overdue_since.get(service, since))
        seen.pending_compactions = len(observation.timeline.pending().of_actions(COMPACTION))
        seen.delta_commits = len(table_facts.delta_commits_since_compaction)
        fields, conditions = table_status(parsed, observation, events, decision, made, seen.job)
        if seen.degraded_message is not None:
            kopf.info(body, reason="Recovered", message=f"{parsed.location} is scheduled again")
            seen.degraded_message = None
        guard = observation.archival_blocked[0] if observation.archival_blocked else None
        seen.shown(_write(patch, old, fields, conditions, now, generation), guard)
        runtime.update_gauges()

    @kopf.on.delete(*resource, registry=registry)
    def stop(uid: str, spec: Any, name: str, namespace: str | None, **_: Any) -> None:
        """Scheduling stops with the resource; the table and its data are left as they are."""
        runtime.seen.pop(uid, None)
        runtime.update_gauges()
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


def default_login(kwargs: Mapping[str, Any]) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _s3(base: S3Options, spec: TableSpec) -> S3Options:
    return S3Options(
        endpoint_url=spec.endpoint or base.endpoint_url,
        region=spec.region or base.region,
        access_key_id=base.access_key_id,
        secret_access_key=base.secret_access_key,
    )


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


async def _refresh_job(runtime: Runtime, seen: _Seen, namespace: str, last: LastRequest | None) -> None:
    """The state of the last compaction Job, while it may still change."""
    if last is None or not last.job or runtime.jobs is None:
        return
    if seen.job is not None and seen.job["name"] == last.job and not seen.job.get("active"):
        return
    try:
        seen.job = await runtime.jobs.job_state(namespace, last.job)
    except (KubeError, OSError) as e:
        log.warning("reading compaction Job %s: %s", last.job, e)


async def _publish(
    runtime: Runtime, body: Any, spec: TableSpec, decision: Decision, name: str, namespace: str, now: datetime
) -> dict[Service, LastRequest]:
    """Publish the due requests (and create the compaction Job); what was made."""
    made: dict[Service, LastRequest] = {}
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
            )
            try:
                await runtime.jobs.create_job(namespace, manifest)
            except (KubeError, OSError) as e:
                log.warning("%s/%s: creating compaction Job %s: %s", namespace, name, job, e)
                continue
        try:
            await asyncio.to_thread(runtime.producer.publish, runtime.config.topic, event)
        except BrokerUnavailableError as e:
            runtime.publish_error = str(e)
            runtime.metrics.kafka_errors.inc()
            log.warning("%s/%s: %s", namespace, name, e)
            continue  # not recorded: the next tick makes the same request again (same id)
        runtime.publish_error = None
        runtime.metrics.requests.labels(str(request.service)).inc()
        if request.due is not None:
            runtime.metrics.lag.observe(max(0.0, (datetime.now(UTC) - request.due).total_seconds()))
        made[request.service] = LastRequest(request.instant, now, request.trigger, job)
        log.info(
            "%s/%s: requested %s of %s at %s (%s, id %s)",
            namespace,
            name,
            request.service,
            spec.location,
            request.instant,
            request.trigger,
            event.id,
        )
    return made
