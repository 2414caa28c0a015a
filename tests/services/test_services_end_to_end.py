"""The cleaner and archiver services end to end against a real Kafka-protocol broker (tansu):
events in, work done on storage, events out, metrics scraped over HTTP; duplicates and poison
events; the broker restarted mid-run."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tidemark_services import archiver, cleaner
from tidemark_services.http import MonitoringServer
from tidemark_services.runtime import EventService, ServiceMetrics

from tests.support.table_builder import TableBuilder
from tidemark.events import EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics
from tidemark.storage import LocalStorage, S3Options
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import read_archived

pytestmark = pytest.mark.kafka

CONF = {
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.clean.max.commits": "3",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}


def _service(name: str, broker: Any, topic: str, module: Any, handles: frozenset[EventType]) -> EventService:
    metrics = ServiceMetrics(name)
    handler = module.make_handler(CONF, S3Options(), metrics)
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


def _until(condition: Callable[[], bool], services: list[EventService], seconds: float = 40.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for s in services:
            s.run_once(0.5)
        if condition():
            return
    raise AssertionError("the services did not get there in time")


def _completed(table: str, instant: str) -> TimelineEvent:
    return TimelineEvent(EventType.INSTANT_COMPLETED, table, instant, "deltacommit", "COMPLETED")


def test_events_in_work_done_events_out(kafka_broker: Any, tmp_path: Path) -> None:
    topic = f"timeline-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, [topic, f"{topic}.dlq"])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    producer = EventProducer(kafka_broker.bootstrap)
    instants = [t.insert(["a", "b"], 1)] + [t.update(["a"], v) for v in range(2, 9)]
    clean_svc = _service("cleaner", kafka_broker, topic, cleaner, cleaner.HANDLES)
    archive_svc = _service("archiver", kafka_broker, topic, archiver, archiver.HANDLES)
    monitoring = MonitoringServer(clean_svc.metrics.registry, clean_svc.healthy)
    try:
        for instant in instants:
            producer.publish(topic, _completed(table, instant))
            producer.publish(topic, _completed(table, instant))  # every event twice
        producer.publish_raw(topic, table.encode(), b"\x00garbage", [("ce_type", b"tidemark.instant.completed")])

        def cleaned_and_archived() -> bool:
            timeline = load_timeline(t.storage)
            return bool(timeline.completed().of_actions("clean").instants) and bool(read_archived(t.storage))

        _until(cleaned_and_archived, [clean_svc, archive_svc])
        assert t.snapshot() == {"a": 8, "b": 1}
        cleans = load_timeline(t.storage).completed().of_actions("clean").instants
        assert len(cleans) == 1, "sixteen events, one clean: duplicates and the trigger do nothing twice"
        # events out: clean.completed with the archival boundary, then archive.completed
        reader = EventConsumer(kafka_broker.bootstrap, [topic], f"reader-{uuid.uuid4().hex[:6]}")
        seen: list[TimelineEvent] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(e.type is EventType.ARCHIVE_COMPLETED for e in seen):
            for m in reader.poll(1.0):
                try:
                    seen.append(decode(m.key, m.value, m.headers))
                except Exception:  # the poison message
                    continue
        reader.close()
        done = [e for e in seen if e.type is EventType.CLEAN_COMPLETED]
        assert len(done) == 1
        assert done[0].earliest_commit_to_not_archive
        assert any(e.type is EventType.ARCHIVE_COMPLETED for e in seen)
        # the poison event went to the dead-letter topic with its reason
        dlq = EventConsumer(kafka_broker.bootstrap, [f"{topic}.dlq"], f"dlq-{uuid.uuid4().hex[:6]}")
        dead: list[Any] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not dead:
            dead.extend(dlq.poll(1.0))
        dlq.close()
        assert dead
        assert any(k == "tidemark_dead_letter_reason" for k, _ in dead[0].headers)
        # metrics over HTTP
        body = urllib.request.urlopen(f"http://127.0.0.1:{monitoring.port}/metrics", timeout=5).read().decode()
        assert 'tidemark_clean_files_deleted_total{table="' in body
        assert 'tidemark_events_dead_lettered_total{service="cleaner"} 1.0' in body
        assert "tidemark_seconds_since_last_success" in body
        assert "tidemark_active_timeline_instants" in body
        health = urllib.request.urlopen(f"http://127.0.0.1:{monitoring.port}/healthz", timeout=5)
        assert health.status == 200
    finally:
        monitoring.stop()
        clean_svc.close()
        archive_svc.close()
        producer.close()


def test_broker_restarted_mid_run(fresh_broker: Any, tmp_path: Path) -> None:
    topic = f"timeline-{uuid.uuid4().hex[:8]}"
    ensure_topics(fresh_broker.bootstrap, [topic, f"{topic}.dlq"])
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    table = str(tmp_path / "t")
    producer = EventProducer(fresh_broker.bootstrap)
    clean_svc = _service("cleaner", fresh_broker, topic, cleaner, cleaner.HANDLES)
    try:
        first = [t.insert(["a"], 1), t.update(["a"], 2)]
        for instant in first:
            producer.publish(topic, _completed(table, instant))
        for _ in range(4):
            clean_svc.run_once(0.5)  # the group joins and handles the first events
        fresh_broker.stop()
        for _ in range(3):
            clean_svc.run_once(0.5)  # no broker: nothing happens, nothing crashes
        fresh_broker.restart()
        ensure_topics(fresh_broker.bootstrap, [topic, f"{topic}.dlq"])  # memory storage starts empty
        more = [t.update(["a"], v) for v in range(3, 8)]
        for instant in more:
            producer.publish(topic, _completed(table, instant))
        _until(lambda: bool(load_timeline(t.storage).completed().of_actions("clean").instants), [clean_svc])
        assert t.snapshot() == {"a": 7}
    finally:
        clean_svc.close()
        producer.close()
