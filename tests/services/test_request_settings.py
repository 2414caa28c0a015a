"""Per-table settings carried by a request: the operator puts a HudiTable's Hudi keys in a
``clean.requested`` / ``archive.requested`` event's ``extra``, and the cleaner and archiver run that
one request with them over their own ``--conf`` (SERVICE_CONF here: 2 commits retained, keep 2 to
3 commits). A request whose settings do not parse is dead-lettered with the reason, and the
service goes on. Real tansu broker, the services' own event loop, a real table."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from tests.services.test_services_end_to_end import _running, _service
from tests.support.services import (
    SERVICE_CONF,
    create_topics,
    events_of,
    metric_value,
    of_type,
    publish_completed,
    read_topics,
    service_processes,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType, TimelineEvent
from tidemark.kafka_adapter import EventConsumer, EventProducer
from tidemark.kafka_security import PLAINTEXT
from tidemark.storage import LocalStorage
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import read_archived
from tidemark.timeline.instant import new_instant_time
from tidemark_services import archiver, cleaner
from tidemark_services.runtime import DEAD_LETTER_REASON_HEADER, EventService

pytestmark = pytest.mark.kafka

RESOURCE = "lake/orders"


def request(kind: EventType, table: str, **settings: str) -> TimelineEvent:
    """A request as the operator makes it: its resource and trigger, and the table's Hudi keys."""
    service = "clean" if kind is EventType.CLEAN_REQUESTED else "archive"
    extra = {"resource": RESOURCE, "trigger": "schedule", **settings}
    return TimelineEvent(
        kind, table, new_instant_time(), service, "REQUESTED", source="/tidemark/operator", extra=extra
    )


def runs(service: EventService, outcome: str) -> float:
    exposition = generate_latest(service.metrics.registry).decode()
    return metric_value(exposition, "tidemark_service_runs_total", service=service.name, outcome=outcome) or 0.0


def writes(storage: LocalStorage) -> int:
    return len(load_timeline(storage).completed().write_instants())


def test_requests_run_with_the_table_settings_they_carry(kafka_broker: Any, tmp_path: Path) -> None:
    assert SERVICE_CONF["hoodie.cleaner.commits.retained"] == "2"
    assert (SERVICE_CONF["hoodie.keep.min.commits"], SERVICE_CONF["hoodie.keep.max.commits"]) == ("2", "3")
    builder = TableBuilder(LocalStorage(tmp_path / "orders"))
    table = str(tmp_path / "orders")
    instants = [builder.insert(["a", "b"], 1)] + [builder.update(["a"], v) for v in range(2, 9)]
    # the cleaner and the archiver each on a topic of their own: the archiver here answers only the
    # requests below, not the cleaner's clean.completed (which it would archive after with its own conf)
    clean_topic, clean_dlq = unique_topics("clean-settings")
    archive_topic, archive_dlq = unique_topics("archive-settings")
    create_topics(kafka_broker.bootstrap, [clean_topic, clean_dlq, archive_topic, archive_dlq])
    clean_svc = _service("cleaner", kafka_broker, clean_topic, cleaner, cleaner.HANDLES)
    archive_svc = _service("archiver", kafka_broker, archive_topic, archiver, archiver.HANDLES)
    producer = EventProducer(kafka_broker.bootstrap)
    tick = _running(clean_svc, archive_svc)

    def published(topic: str, kind: EventType, count: int) -> list[TimelineEvent]:
        """The first ``count`` events of ``kind`` on ``topic``, the services running meanwhile."""
        reader = EventConsumer(kafka_broker.bootstrap, [topic], f"reader-{uuid.uuid4().hex[:8]}")
        found: list[TimelineEvent] = []
        try:

            def enough() -> bool:
                found.extend(of_type(events_of(reader.poll(0.5)), kind))
                return len(found) >= count

            wait_until(enough, 60, f"{count} {kind} on {topic}", tick=tick)
        finally:
            reader.close()
        return found

    try:
        # a request with settings the cleaner refuses first: dead-lettered, saying which and from where
        producer.publish(
            clean_topic, request(EventType.CLEAN_REQUESTED, table, **{"hoodie.cleaner.policy": "KEEP_ALL"})
        )
        # then the table's retention, 5 commits where the service keeps 2
        producer.publish(
            clean_topic, request(EventType.CLEAN_REQUESTED, table, **{"hoodie.cleaner.commits.retained": "5"})
        )
        (done,) = published(clean_topic, EventType.CLEAN_COMPLETED, 1)
        assert done.earliest_commit_to_retain == instants[len(instants) - 5]
        dead = read_topics(kafka_broker.bootstrap, [clean_dlq], bool, 30, PLAINTEXT)
        assert len(dead) == 1
        reason = dict(dead[0].headers)[DEAD_LETTER_REASON_HEADER].decode()
        assert "hoodie.cleaner.policy=KEEP_ALL" in reason
        assert f"from {RESOURCE}" in reason
        assert "unknown cleaner policy 'KEEP_ALL'" in reason
        assert clean_svc.healthy()[0]
        assert runs(clean_svc, "rejected") == 1
        exposition = generate_latest(clean_svc.metrics.registry).decode()
        assert metric_value(exposition, "tidemark_events_dead_lettered_total", service="cleaner") == 1

        # the next request without settings: the service's own retention again (2 commits)
        producer.publish(clean_topic, request(EventType.CLEAN_REQUESTED, table))
        second = published(clean_topic, EventType.CLEAN_COMPLETED, 2)[-1]
        assert second.earliest_commit_to_retain == instants[len(instants) - 2]

        # archival keeping 6 to 7 commits for this table: stopped by keep.min.commits at 6
        assert writes(builder.storage) == 8
        producer.publish(
            archive_topic,
            request(
                EventType.ARCHIVE_REQUESTED,
                table,
                **{"hoodie.keep.min.commits": "6", "hoodie.keep.max.commits": "7"},
            ),
        )
        (archived,) = published(archive_topic, EventType.ARCHIVE_COMPLETED, 1)
        assert archived.extra["stoppedBy"] == "hoodie.keep.min.commits"
        assert writes(builder.storage) == 6
        # one without: the service's keep.min.commits (2) no longer holds it; the latest clean does
        producer.publish(archive_topic, request(EventType.ARCHIVE_REQUESTED, table))
        again = published(archive_topic, EventType.ARCHIVE_COMPLETED, 2)[-1]
        assert again.extra["stoppedBy"].startswith("earliest commit to not archive")
        assert writes(builder.storage) < 6
        # contradictory settings for the archiver: refused too
        producer.publish(
            archive_topic,
            request(
                EventType.ARCHIVE_REQUESTED, table, **{"hoodie.keep.min.commits": "9", "hoodie.keep.max.commits": "4"}
            ),
        )
        wait_until(lambda: runs(archive_svc, "rejected") == 1, 60, "the archiver refusing the request", tick=tick)
        (refused,) = read_topics(kafka_broker.bootstrap, [archive_dlq], bool, 30, PLAINTEXT)
        assert (
            "must be positive and below hoodie.keep.max.commits"
            in dict(refused.headers)[DEAD_LETTER_REASON_HEADER].decode()
        )
        assert builder.snapshot() == {"a": 8, "b": 1}
    finally:
        producer.close()
        clean_svc.close()
        archive_svc.close()


def test_with_triggers_requested_the_services_act_on_requests_alone(kafka_broker: Any, tmp_path: Path) -> None:
    """``--triggers requested`` (the chart's choice with the operator): a table's commits and
    cleans no longer clean or archive it by the services' own ``--conf``, only the requests do,
    with the settings they carry. Both services run as processes on one topic, as deployed."""
    builder = TableBuilder(LocalStorage(tmp_path / "orders"))
    table = str(tmp_path / "orders")
    instants = [builder.insert(["a", "b"], 1)] + [builder.update(["a"], v) for v in range(2, 9)]
    topic, dlq = unique_topics("triggers")
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    env = {"TIDEMARK_SERVICE_TRIGGERS": "requested"}
    with service_processes(["cleaner", "archiver"], kafka_broker.bootstrap, topic, dlq, env=env) as procs:
        producer = EventProducer(kafka_broker.bootstrap)
        try:
            # each commit announced: with its own trigger the cleaner would clean after every one
            # (SERVICE_CONF: hoodie.clean.max.commits=1), keeping 2 commits
            publish_completed(producer, topic, table, instants)
            producer.publish(
                topic, request(EventType.CLEAN_REQUESTED, table, **{"hoodie.cleaner.commits.retained": "5"})
            )

            def first(kind: EventType) -> list[TimelineEvent]:
                seen = read_topics(
                    kafka_broker.bootstrap, [topic], lambda read: bool(of_type(events_of(read), kind)), 60, PLAINTEXT
                )
                return of_type(events_of(seen), kind)

            # a table's events are in order on one partition: a clean of the service's own would
            # have been announced before the requested one
            (cleaned,) = first(EventType.CLEAN_COMPLETED)
            assert cleaned.earliest_commit_to_retain == instants[len(instants) - 5]
            # the clean.completed did not make the archiver archive with its own keep 2 to 3
            producer.publish(
                topic,
                request(
                    EventType.ARCHIVE_REQUESTED,
                    table,
                    **{"hoodie.keep.min.commits": "6", "hoodie.keep.max.commits": "7"},
                ),
            )
            (archived,) = first(EventType.ARCHIVE_COMPLETED)
            assert archived.extra["stoppedBy"] == "hoodie.keep.min.commits"
            assert writes(builder.storage) == 6
            assert builder.snapshot() == {"a": 8, "b": 1}
        finally:
            producer.close()
        cleaner_proc, archiver_proc = procs
        assert "acting on tidemark.clean.requested (--triggers requested)" in cleaner_proc.log_tail(10**7)
        assert "acting on tidemark.archive.requested (--triggers requested)" in archiver_proc.log_tail(10**7)


def test_a_request_no_retry_can_serve_is_dead_lettered_and_the_next_one_served(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """A clean request for a folder that is no table, one for a table with Hudi's metadata table,
    and one whose location is too long for the file system, were retried for ever, and every later
    event of their partition waited behind them (the no-table one also left a lock file in the
    folder). Each is dead-lettered with why; the next request is served."""
    builder = TableBuilder(LocalStorage(tmp_path / "orders"))
    for v in range(1, 5):
        builder.upsert(["a"], v)
    nothing = tmp_path / "not-a-table"
    nothing.mkdir()
    with_metadata = TableBuilder(LocalStorage(tmp_path / "with-metadata"))
    with_metadata.insert(["a"], 1)
    props = tmp_path / "with-metadata" / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.table.metadata.partitions=files\n")
    topic, dlq = unique_topics("clean-refused")
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    svc = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    producer = EventProducer(kafka_broker.bootstrap)
    tick = _running(svc)
    try:
        # a name longer than the file system takes (ENAMETOOLONG): no retry makes it a table
        too_long = tmp_path / ("t" * 300)
        for location in (nothing, tmp_path / "with-metadata", too_long, tmp_path / "orders"):
            producer.publish(topic, request(EventType.CLEAN_REQUESTED, str(location)))
        # each on its own partition (keyed by table): served and refused in any order
        wait_until(
            lambda: runs(svc, "ok") == 1 and runs(svc, "rejected") == 3,
            60,
            "the cleaner serving the last request and refusing the others",
            tick=tick,
        )
        dead = read_topics(kafka_broker.bootstrap, [dlq], lambda ms: len(ms) >= 3, 30, PLAINTEXT)
        reasons = [dict(d.headers)[DEAD_LETTER_REASON_HEADER].decode() for d in dead]
        assert len(reasons) == 3
        assert any("not a Hudi table" in r for r in reasons), reasons
        assert f"location {too_long} cannot hold a table: File name too long" in reasons, reasons
        assert any("metadata table" in r for r in reasons), reasons
        assert list(nothing.iterdir()) == []
        assert load_timeline(builder.storage).completed().of_actions("clean").instants
    finally:
        producer.close()
        svc.close()


def test_an_archive_request_for_a_table_with_an_unreadable_commit_is_dead_lettered(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """A completed commit file that is not JSON failed the archiver's run at every retry, and the
    archive request of every other table in its partition waited behind it for ever."""
    broken = TableBuilder(LocalStorage(tmp_path / "broken"))
    healthy = TableBuilder(LocalStorage(tmp_path / "healthy"))
    for builder in (broken, healthy):
        for v in range(1, 9):
            builder.upsert(["a"], v)
        clean(builder.storage, CleanConfig.from_conf(SERVICE_CONF))  # archival stops at what no clean passed
    unreadable = "20200101000000000.deltacommit"
    (tmp_path / "broken" / ".hoodie" / unreadable).write_text("{not json")
    topic, dlq = unique_topics("archive-refused")
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    svc = _service("archiver", kafka_broker, topic, archiver, archiver.HANDLES)
    producer = EventProducer(kafka_broker.bootstrap)
    tick = _running(svc)
    settings = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"}
    try:
        for builder in (broken, healthy):
            producer.publish(topic, request(EventType.ARCHIVE_REQUESTED, str(builder.storage.root), **settings))
        wait_until(lambda: runs(svc, "ok") == 1, 60, "the archiver serving the healthy table", tick=tick)
        (dead,) = read_topics(kafka_broker.bootstrap, [dlq], bool, 30, PLAINTEXT)
        reason = dict(dead.headers)[DEAD_LETTER_REASON_HEADER].decode()
        assert unreadable in reason, reason
        assert "not JSON" in reason, reason
        assert read_archived(healthy.storage)
        assert healthy.snapshot() == {"a": 8}
    finally:
        producer.close()
        svc.close()
