"""The cleaner and archiver services end to end against a real Kafka-protocol broker (tansu):
events in, work done on storage, events out, metrics scraped over HTTP; duplicates and poison
events; the broker restarted mid-run, and gone while an event is handled."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from prometheus_client import generate_latest

from tests.support.kafka import send_foreign
from tests.support.services import (
    SERVICE_CONF,
    create_topics,
    events_of,
    http_get,
    metric_value,
    of_type,
    publish_completed,
    publish_poison,
    read_topics,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import TableBuilder
from tidemark.errors import Terminated
from tidemark.events import EventType, TimelineEvent, encode
from tidemark.kafka_adapter import EventConsumer, EventProducer, RawMessage, ensure_topics
from tidemark.storage import LocalStorage, S3Options
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.lock import TableLock
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import read_archived
from tidemark_services import archiver, cleaner
from tidemark_services.http import MonitoringServer
from tidemark_services.runtime import (
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SERVICE_HEADER,
    EventService,
    ServiceMetrics,
)

pytestmark = pytest.mark.kafka


def _service(name: str, broker: Any, topic: str, module: Any, handles: frozenset[EventType]) -> EventService:
    metrics = ServiceMetrics(name)
    handler = module.make_handler(SERVICE_CONF, S3Options(), metrics)
    return EventService(
        name,
        broker.bootstrap,
        handler,
        handles,
        metrics,
        topic=topic,
        group=f"{name}-{uuid.uuid4().hex[:6]}",
        dead_letter_topic=f"{topic}.dlq",
    )


def _running(*services: EventService) -> Callable[[], None]:
    """A tick for :func:`wait_until`: one poll of each in-process service."""

    def tick() -> None:
        for s in services:
            s.run_once(0.5)

    return tick


def test_events_in_work_done_events_out(kafka_broker: Any, tmp_path: Path) -> None:
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    producer = EventProducer(kafka_broker.bootstrap)
    instants = [t.insert(["a", "b"], 1)] + [t.update(["a"], v) for v in range(2, 9)]
    clean_svc = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    archive_svc = _service("archiver", kafka_broker, topic, archiver, archiver.HANDLES)
    monitoring = MonitoringServer(clean_svc.metrics.registry, clean_svc.healthy)
    try:
        publish_completed(producer, topic, table, instants, times=2)  # every event twice
        publish_poison(producer, topic, table)

        def cleaned_and_archived() -> bool:
            timeline = load_timeline(t.storage)
            return bool(timeline.completed().of_actions("clean").instants) and bool(read_archived(t.storage))

        wait_until(cleaned_and_archived, 40, "cleaned and archived", tick=_running(clean_svc, archive_svc))
        assert t.snapshot() == {"a": 8, "b": 1}
        cleans = load_timeline(t.storage).completed().of_actions("clean").instants
        assert len(cleans) == 1, "sixteen events, one clean: duplicates and the trigger do nothing twice"
        # events out: clean.completed with the archival boundary, then archive.completed; the
        # poison event in the dead-letter topic with its reason
        messages = read_topics(
            kafka_broker.bootstrap,
            [topic, dlq],
            lambda ms: bool(of_type(events_of(ms), EventType.ARCHIVE_COMPLETED)) and any(m.topic == dlq for m in ms),
        )
        events = events_of(messages, topic)
        done = of_type(events, EventType.CLEAN_COMPLETED)
        assert len(done) == 1
        assert done[0].earliest_commit_to_not_archive
        assert of_type(events, EventType.ARCHIVE_COMPLETED)
        dead = [m for m in messages if m.topic == dlq]
        assert dead
        assert any(k == DEAD_LETTER_REASON_HEADER for k, _ in dead[0].headers)
        assert [v for k, v in dead[0].headers if k == DEAD_LETTER_SERVICE_HEADER] == [b"cleaner"]
        # metrics over HTTP
        status, body = http_get(monitoring.port, "/metrics")
        assert status == 200
        assert metric_value(body, "tidemark_clean_files_deleted_total", table=table) is not None
        assert metric_value(body, "tidemark_events_dead_lettered_total", service="cleaner") == 1
        assert metric_value(body, "tidemark_seconds_since_last_success", service="cleaner") is not None
        assert metric_value(body, "tidemark_active_timeline_instants", table=table) is not None
        assert http_get(monitoring.port, "/healthz")[0] == 200
    finally:
        monitoring.stop()
        clean_svc.close()
        archive_svc.close()
        producer.close()


def test_events_naming_a_table_otherwise_are_answered_under_its_canonical_location(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """The cleaner and archiver echoed the spelling of the event they handled (a ``//`` or a
    ``/./`` in it, as an ``s3a://``): their answers went out under another key than the table's
    other events (another partition, so out of order, with other ce_ids). They are keyed by the
    table's canonical location, as the write job and the operator key theirs."""
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    producer = EventProducer(kafka_broker.bootstrap)
    reader = EventConsumer(kafka_broker.bootstrap, [topic], f"reader-{uuid.uuid4().hex[:8]}")
    read: list[RawMessage] = []
    instants = [t.insert(["a", "b"], 1)] + [t.update(["a"], v) for v in range(2, 9)]
    clean_svc = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    archive_svc = _service("archiver", kafka_broker, topic, archiver, archiver.HANDLES)
    try:
        publish_completed(producer, topic, f"{tmp_path}//t", instants)
        request = TimelineEvent(
            EventType.ARCHIVE_REQUESTED, f"{tmp_path}/./t/", "29990101000000000", "archive", "REQUESTED"
        )
        answers = {EventType.CLEAN_COMPLETED, EventType.ARCHIVE_COMPLETED, EventType.ARCHIVE_SKIPPED}

        def answered() -> set[EventType]:
            """The types of the services' answers read so far; the request once the clean is done."""
            read.extend(reader.poll(0.5))
            seen = {e.type for e in events_of(read)} & answers
            if EventType.ARCHIVE_COMPLETED in seen and not any(e.type is request.type for e in events_of(read)):
                producer.publish(topic, request)
            return seen

        wait_until(
            lambda: answered() == answers,
            60,
            "cleaned, archived, the request answered",
            tick=_running(clean_svc, archive_svc),
        )
        out = [(m, e) for m in read for e in events_of([m]) if e.type in answers]
        assert {m.key for m, _ in out} == {table.encode()}
        assert {e.table for _, e in out} == {table}
    finally:
        reader.close()
        clean_svc.close()
        archive_svc.close()
        producer.close()


class _NotUtf8(str):
    """A header name sent as bytes that are not UTF-8, as a librdkafka, Go or Rust producer may
    (Kafka's protocol allows it; kafka-python cannot read it back)."""

    def encode(self, *_: Any, **__: Any) -> bytes:
        return b"bad-\xff-name"


def test_a_record_the_kafka_client_cannot_read_is_skipped_and_the_next_event_handled(
    kafka_broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    table = str(tmp_path / "no-table")  # the key: both records go to the same partition
    raw = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        sent = raw.send(topic, key=table.encode(), value=b"x", headers=[(_NotUtf8("x"), b"v")]).get(10)
    finally:
        raw.close()
    producer = EventProducer(kafka_broker.bootstrap)
    service = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    try:
        producer.publish(
            topic, TimelineEvent(EventType.CLEAN_REQUESTED, table, "20240101000000000", "clean", "REQUESTED")
        )
        with caplog.at_level(logging.INFO, logger="tidemark"):
            # the request after it is handled: refused (no table there) and dead-lettered
            wait_until(
                lambda: service.metrics.dead_lettered.labels("cleaner")._value.get() == 1,
                40,
                "the request after the unreadable record dead-lettered",
                tick=_running(service),
            )
        body = generate_latest(service.metrics.registry).decode()
        assert metric_value(body, "tidemark_events_skipped_total", service="cleaner", reason="unreadable") == 1
        assert not metric_value(body, "tidemark_broker_errors_total", service="cleaner")
        skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "skipped" in r.getMessage()]
        assert len(skipped) == 1, caplog.text
        assert skipped[0].startswith(
            f"cleaner: record {topic}[{sent.partition}]@{sent.offset} cannot be read by the Kafka client: "
            "CorruptRecordError"
        )
        assert "broker trouble" not in caplog.text
        assert service.ready()[0]
    finally:
        producer.close()
        service.close()


def test_a_message_too_large_to_dead_letter_is_skipped_and_the_next_event_handled(
    kafka_broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    table = str(tmp_path / "no-table")  # the key: both messages go to the same partition
    # not an event, and above the 1 MiB a producer sends by default (a topic with a larger
    # max.message.bytes takes it; the dead-letter copy is refused)
    with EventProducer(kafka_broker.bootstrap, config={"max_request_size": 4_000_000}) as big:
        big.publish_raw(topic, table.encode(), b"x" * 2_000_000, [])
    producer = EventProducer(kafka_broker.bootstrap)
    service = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    try:
        producer.publish(
            topic, TimelineEvent(EventType.CLEAN_REQUESTED, table, "20240101000000000", "clean", "REQUESTED")
        )
        with caplog.at_level(logging.INFO, logger="tidemark"):
            wait_until(
                lambda: service.metrics.dead_lettered.labels("cleaner")._value.get() == 1,
                40,
                "the request after the large message dead-lettered",
                tick=_running(service),
            )
        body = generate_latest(service.metrics.registry).decode()
        assert metric_value(body, "tidemark_events_skipped_total", service="cleaner", reason="not-dead-lettered") == 1
        assert not metric_value(body, "tidemark_broker_errors_total", service="cleaner")
        skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "skipped" in r.getMessage()]
        assert len(skipped) == 1, caplog.text
        assert re.match(
            rf"cleaner: {re.escape(topic)}\[\d\]@0 \(.*\) cannot be dead-lettered: .*MessageSizeTooLarge", skipped[0]
        )
        assert "broker trouble" not in caplog.text
        dead = read_topics(kafka_broker.bootstrap, [dlq], lambda ms: bool(ms))
        assert [m.key for m in dead] == [table.encode()]  # the request only
    finally:
        producer.close()
        service.close()


def test_messages_with_a_null_header_are_dead_lettered_and_the_next_event_handled(
    kafka_broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic, dlq = unique_topics()
    ensure_topics(kafka_broker.bootstrap, [topic, dlq], partitions=1)  # one partition: in this order
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a"], 1)
    table, missing = str(tmp_path / "t"), str(tmp_path / "no-table")
    # a header with a null value, as a Java producer's RecordHeader("trace", null) sends: on a
    # message that is no event, and on an event the cleaner refuses (no table there)
    send_foreign(kafka_broker.bootstrap, topic, table.encode(), b"not an event", [("trace", None)])
    refused = TimelineEvent(EventType.CLEAN_REQUESTED, missing, "20240101000000000", "clean", "REQUESTED")
    key, value, headers = encode(refused)
    send_foreign(kafka_broker.bootstrap, topic, key, value, [*headers, ("trace", None)])
    producer = EventProducer(kafka_broker.bootstrap)
    service = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    try:
        request = TimelineEvent(EventType.CLEAN_REQUESTED, table, "20240101000000001", "clean", "REQUESTED")
        producer.publish(topic, request)
        with caplog.at_level(logging.INFO, logger="tidemark"):
            wait_until(
                lambda: service.metrics.runs.labels("cleaner", "nothing-to-do")._value.get() == 1,
                40,
                "the request after the messages with a null header handled",
                tick=_running(service),
            )
        body = generate_latest(service.metrics.registry).decode()
        assert metric_value(body, "tidemark_events_dead_lettered_total", service="cleaner") == 2
        assert not metric_value(body, "tidemark_events_skipped_total", service="cleaner", reason="not-dead-lettered")
        assert "Traceback" not in caplog.text
        messages = read_topics(
            kafka_broker.bootstrap,
            [topic, dlq],
            lambda ms: (
                len([m for m in ms if m.topic == dlq]) == 2 and bool(of_type(events_of(ms), EventType.CLEAN_SKIPPED))
            ),
        )
        assert [e.instant for e in of_type(events_of(messages, topic), EventType.CLEAN_SKIPPED)] == [request.instant]
        dead = [m for m in messages if m.topic == dlq]
        assert [(m.key, m.value) for m in dead] == [(table.encode(), b"not an event"), (key, value)]
        for m in dead:
            # the null value is copied empty (kafka-python sends no null), and the reason says so
            assert dict(m.headers)["trace"] == b""
            reason = dict(m.headers)[DEAD_LETTER_REASON_HEADER]
            assert reason is not None
            assert reason.endswith(b"(null value of header trace copied as empty)")
        assert dict(dead[0].headers)[DEAD_LETTER_REASON_HEADER] == (
            b"missing header ce_specversion (null value of header trace copied as empty)"
        )
    finally:
        producer.close()
        service.close()


def test_broker_restarted_mid_run(fresh_broker: Any, tmp_path: Path) -> None:
    topic, dlq = unique_topics()
    create_topics(fresh_broker.bootstrap, [topic, dlq])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    producer = EventProducer(fresh_broker.bootstrap)
    clean_svc = _service("cleaner", fresh_broker, topic, cleaner, cleaner.HANDLES)
    try:
        publish_completed(producer, topic, table, [t.insert(["a"], 1), t.update(["a"], 2)])
        for _ in range(4):
            clean_svc.run_once(0.5)  # the group joins and handles the first events
        fresh_broker.stop()
        for _ in range(3):
            clean_svc.run_once(0.5)  # no broker: nothing happens, nothing crashes
        fresh_broker.restart()
        create_topics(fresh_broker.bootstrap, [topic, dlq])  # memory storage starts empty
        publish_completed(producer, topic, table, [t.update(["a"], v) for v in range(3, 8)])
        wait_until(
            lambda: bool(load_timeline(t.storage).completed().of_actions("clean").instants),
            40,
            "cleaned after the restart",
            tick=_running(clean_svc),
        )
        assert t.snapshot() == {"a": 7}
    finally:
        clean_svc.close()
        producer.close()


def test_broker_gone_while_an_event_is_handled(fresh_broker: Any, tmp_path: Path) -> None:
    """The broker stops while the cleaner cleans: announcing the clean fails. run_once must not
    raise (a service process would die of it), and the announcement must not be lost: the
    redelivered event finds the clean done and would not announce it again."""
    topic, dlq = unique_topics()
    create_topics(fresh_broker.bootstrap, [topic, dlq])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    instants = [t.insert(["a"], 1)] + [t.update(["a"], v) for v in range(2, 6)]
    clean_svc = _service("cleaner", fresh_broker, topic, cleaner, cleaner.HANDLES)
    clean_svc.producer.close()
    clean_svc.producer = EventProducer(fresh_broker.bootstrap, publish_timeout_s=2)  # fail sooner
    handle = clean_svc.handler
    broker_stops: list[str] = []

    def handle_then_lose_the_broker(event: TimelineEvent) -> Sequence[TimelineEvent]:
        outputs = handle(event)
        if outputs and not broker_stops:
            fresh_broker.stop()
            broker_stops.append(event.instant)
        return outputs

    clean_svc.handler = handle_then_lose_the_broker
    try:
        with EventProducer(fresh_broker.bootstrap) as producer:
            publish_completed(producer, topic, table, instants[-1:])
        wait_until(lambda: bool(broker_stops), 30, "the cleaner cleaned", tick=_running(clean_svc))
        clean_svc.run_once(0.5)  # no broker: nothing is published, nothing raises
        registry = clean_svc.metrics.registry
        assert (registry.get_sample_value("tidemark_broker_errors_total", {"service": "cleaner"}) or 0) >= 1
        assert registry.get_sample_value("tidemark_announcements_unpublished", {"service": "cleaner"}) == 1
        fresh_broker.restart()
        create_topics(fresh_broker.bootstrap, [topic, dlq])  # memory storage starts empty
        reader = EventConsumer(fresh_broker.bootstrap, [topic], f"reader-{uuid.uuid4().hex[:6]}")
        messages: list[RawMessage] = []

        def tick() -> None:
            clean_svc.run_once(0.5)
            messages.extend(reader.poll(0.5))

        try:
            wait_until(lambda: bool(messages), 30, "the clean announced after the restart", tick=tick)
        finally:
            reader.close()
        cleans = load_timeline(t.storage).completed().of_actions("clean").instants
        assert len(cleans) == 1
        assert [e.instant for e in of_type(events_of(messages), EventType.CLEAN_COMPLETED)] == [cleans[0].timestamp]
        assert registry.get_sample_value("tidemark_announcements_unpublished", {"service": "cleaner"}) == 0
        assert t.snapshot() == {"a": 5}
    finally:
        clean_svc.close()


class _ShortPollLimitService(EventService):
    """A service whose consumers leave the group after 2 s between polls (the shipped limit is
    Kafka's 300 s), so that a run longer than the limit takes seconds to set up."""

    def _new_consumer(self) -> EventConsumer:
        config = {"max_poll_interval_ms": 2000}
        return EventConsumer(self.bootstrap, [self.topic], self.group, config=config, security=self.security)


_REQUESTED = {"cleaner": EventType.CLEAN_REQUESTED, "archiver": EventType.ARCHIVE_REQUESTED}
_ANSWERS = {
    "cleaner": (EventType.CLEAN_COMPLETED, EventType.CLEAN_SKIPPED),
    "archiver": (EventType.ARCHIVE_COMPLETED, EventType.ARCHIVE_SKIPPED),
}


@pytest.mark.parametrize("name", ["cleaner", "archiver"])
def test_a_run_longer_than_the_poll_limit_is_no_broker_error(
    kafka_broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    """A clean (an archival) that waits for the table lock longer than the consumer group's poll
    limit: the group moves on, the commit is refused and the request comes again. That is one line
    saying so (how long the run took, that the event is handled again to no effect) and a
    redelivery on ``/metrics``, not broker trouble nor a broker error, nor kafka-python's advice to
    change a setting the service has no option for; the redelivered request does nothing twice,
    and is answered again as it was (the same ``*.completed``), never as skipped."""
    module = {"cleaner": cleaner, "archiver": archiver}[name]
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    last = [t.insert(["a"], 1)] + [t.update(["a"], v) for v in range(2, 6)]
    if name == "archiver":
        clean(t.storage, CleanConfig.from_conf(SERVICE_CONF))  # archival goes no further than a clean allows
    metrics = ServiceMetrics(name)
    service = _ShortPollLimitService(
        name,
        kafka_broker.bootstrap,
        module.make_handler(SERVICE_CONF, S3Options(), metrics),
        module.HANDLES,
        metrics,
        topic=topic,
        group=f"{name}-{uuid.uuid4().hex[:6]}",
        dead_letter_topic=dlq,
    )
    holder = TableLock(t.storage, ConcurrencyConfig(lock_lease_ms=2000))  # as a restore would hold it
    caplog.set_level(logging.INFO)
    try:
        holder.acquire()
        waits = COUNTERS.snapshot()["lock_waits"]

        def release_once_waited_for() -> None:
            # the service runs in this process: it counts its wait when it starts waiting
            wait_until(lambda: COUNTERS.snapshot()["lock_waits"] > waits, 60, f"the {name} waits for the lock")
            time.sleep(5)  # past the poll limit
            holder.release()

        threading.Thread(target=release_once_waited_for, daemon=True).start()
        with EventProducer(kafka_broker.bootstrap) as producer:
            action = "clean" if name == "cleaner" else "archive"
            producer.publish(topic, TimelineEvent(_REQUESTED[name], table, last[-1], action, "REQUESTED"))
        registry = metrics.registry

        def handled_again() -> bool:
            runs = registry.get_sample_value("tidemark_service_runs_total", {"service": name, "outcome": "ok"})
            nothing = registry.get_sample_value(
                "tidemark_service_runs_total", {"service": name, "outcome": "nothing-to-do"}
            )
            return (runs or 0) + (nothing or 0) >= 2

        wait_until(handled_again, 60, "the redelivered request handled", tick=_running(service))
        for _ in range(2):
            service.run_once(0.5)  # its answer published
    finally:
        service.close()
        holder.release()
    if name == "cleaner":
        assert len(load_timeline(t.storage).completed().of_actions("clean").instants) == 1
    else:
        assert read_archived(t.storage)
    completed, skipped = _ANSWERS[name]
    events = events_of(
        read_topics(kafka_broker.bootstrap, [topic], lambda ms: len(of_type(events_of(ms), completed)) >= 2), topic
    )
    # the request answered twice with the same event (the same ce_id), never as having had nothing to do
    assert len({e.id for e in of_type(events, completed)}) == 1, events
    assert not of_type(events, skipped), events
    assert registry.get_sample_value("tidemark_service_runs_total", {"service": name, "outcome": "ok"}) == 2
    assert registry.get_sample_value("tidemark_redeliveries_total", {"service": name}) == 1
    assert (registry.get_sample_value("tidemark_broker_errors_total", {"service": name}) or 0) == 0
    assert (registry.get_sample_value("tidemark_lock_waits_total", {"service": name}) or 0) >= 1  # this process's
    said = [r.getMessage() for r in caplog.records if r.name == "tidemark.services" and r.levelno >= logging.WARNING]
    assert len(said) == 1, said
    assert re.fullmatch(
        rf"{name}: could not commit offsets {re.escape(topic)}/\d@\d of group '{name}-\w+' on \S+: the work since "
        r"the last poll took [5-9]s, longer than the poll limit of 2s \(max_poll_interval_ms\), so the group moved "
        r"on without this consumer; the events will be delivered again, and handling them again changes nothing "
        r"\(the work is idempotent\)",
        said[0],
    ), said[0]
    assert not [r for r in caplog.records if "max_poll_interval_ms or" in r.getMessage()]  # kafka-python's advice


def test_a_second_sigterm_while_a_run_stops_is_said_once_and_its_event_comes_again(
    kafka_broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two SIGTERMs (a ``kill``, then the pod's) during a run logged 'stopping the run' twice, the
    second raised again into the run's unwinding (its table lock's release among it)."""
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    table = str(tmp_path / "t")
    group = f"cleaner-{uuid.uuid4().hex[:6]}"
    handled: list[str] = []
    services: list[EventService] = []

    def stopped_twice(event: TimelineEvent) -> Sequence[TimelineEvent]:
        handled.append(event.instant)
        try:
            services[0].terminate()  # a SIGTERM during the run
        finally:
            services[0].terminate()  # and another as the run unwinds
        return []

    def seen(event: TimelineEvent) -> Sequence[TimelineEvent]:
        handled.append(event.instant)
        return []

    def service(handler: Callable[[TimelineEvent], Sequence[TimelineEvent]]) -> EventService:
        kinds = frozenset({EventType.INSTANT_COMPLETED})
        return EventService(
            "cleaner", kafka_broker.bootstrap, handler, kinds, ServiceMetrics("cleaner"), topic=topic, group=group
        )

    with EventProducer(kafka_broker.bootstrap) as producer:
        publish_completed(producer, topic, table, ["20260101000000000"])
    services.append(service(stopped_twice))
    caplog.set_level(logging.INFO, logger="tidemark.services")

    def until_stopped() -> None:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            services[0].run_once(0.5)

    with pytest.raises(Terminated):
        until_stopped()
    services[0].close()
    said = [r.getMessage() for r in caplog.records if "SIGTERM" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"cleaner: SIGTERM: stopping the run for {EventType.INSTANT_COMPLETED} on {table};")
    # not committed: the next process in the group gets it again
    services[0] = service(seen)
    try:
        wait_until(lambda: len(handled) == 2, 40, "the event again", tick=_running(services[0]))
    finally:
        services[0].close()
    assert handled == ["20260101000000000", "20260101000000000"]
