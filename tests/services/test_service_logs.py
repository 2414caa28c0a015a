"""What an on-call reads in the cleaner's and archiver's logs: a line per clean or archival, naming
the table, the instant and what was done, and a line per event that found nothing to do (the
services logged only failures: a clean of 8 files left no line naming the table)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.kafka import TansuBroker
from tests.support.services import (
    create_topics,
    logs,
    metric_value,
    publish_completed,
    service_processes,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType, TimelineEvent
from tidemark.kafka_adapter import EventProducer
from tidemark.storage import LocalStorage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.lock import TableLock
from tidemark.timeline import CLEAN, load_timeline
from tidemark.timeline.archived import read_archived


def test_each_clean_and_archival_is_a_log_line_naming_the_table_and_instant(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    t.insert_overwrite(["d", "e"], 2)  # a replaced file group: files for the cleaner
    last = ""
    for v in range(3, 7):
        last = t.update(["d"], v)
    table = str(tmp_path / "t")
    topic, dead = unique_topics("logs")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    with service_processes(["cleaner", "archiver"], kafka_broker.bootstrap, topic, dead) as (cleaner, archiver):
        with EventProducer(kafka_broker.bootstrap) as producer:
            publish_completed(producer, topic, table, [last], times=2)  # the second finds nothing to do

        def done() -> bool:
            runs = cleaner.metrics()
            return (
                metric_value(runs, "tidemark_service_runs_total", outcome="ok") == 1
                and metric_value(runs, "tidemark_service_runs_total", outcome="nothing-to-do") == 1
                and archiver.metric("tidemark_archive_instants_total") > 0
            )

        wait_until(done, 60, "cleaned once, archived", detail=lambda: logs(cleaner, archiver))
        deleted = int(cleaner.metric("tidemark_clean_files_deleted_total", table=table))
        archived = int(archiver.metric("tidemark_archive_instants_total", table=table))
        cleaner_log, archiver_log = cleaner.log_tail(100_000), archiver.log_tail(100_000)
    (clean,) = load_timeline(t.storage).completed().of_actions(CLEAN).instants
    assert deleted > 0
    assert f"cleaner INFO cleaner: {table}: clean {clean.timestamp} completed: {deleted} files deleted, " in cleaner_log
    assert f"cleaner: {table}: nothing to clean after tidemark.instant.completed {last}" in cleaner_log
    entries = sorted({e.timestamp for e in read_archived(t.storage)})  # requested, inflight, completed
    assert len(entries) == archived
    line = f"archiver INFO archiver: {table}: {archived} instants archived, {entries[0]} to {entries[-1]}"
    assert line in archiver_log


def test_a_clean_waiting_half_a_minute_for_the_table_lock_stays_in_its_group(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    """A restore or a rollback may hold the table lock for a while, and a killed command's lease
    lasts a minute: the cleaner waits and says so, then cleans. It stayed a member of its consumer
    group (Kafka's own poll limit of 5 minutes, not 30 s): no commit refused, no broker trouble."""
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    last = [t.insert(["a"], 1)] + [t.update(["a"], v) for v in range(2, 6)]
    table = str(tmp_path / "t")
    topic, dead = unique_topics("lockwait")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    holder = TableLock(t.storage, ConcurrencyConfig(lock_lease_ms=5000))
    with service_processes(["cleaner"], kafka_broker.bootstrap, topic, dead) as (cleaner,):
        holder.acquire()
        try:
            with EventProducer(kafka_broker.bootstrap) as producer:
                producer.publish(topic, TimelineEvent(EventType.CLEAN_REQUESTED, table, last[-1], "clean", "REQUESTED"))
            wait_until(
                lambda: "waiting for the table lock" in cleaner.log_tail(100_000), 30, "the cleaner waits for the lock"
            )
            time.sleep(33)  # past the 30 s poll limit the services had
        finally:
            holder.release()
        wait_until(
            lambda: cleaner.metric("tidemark_service_runs_total", outcome="ok") == 1,
            30,
            "cleaned once the lock is free",
            detail=cleaner.log_tail,
        )
        broker_errors = cleaner.metric("tidemark_broker_errors_total", service="cleaner")
        lock_waits = cleaner.metric("tidemark_lock_waits_total", service="cleaner")
        redeliveries = cleaner.metric("tidemark_redeliveries_total", service="cleaner")
        cleaner_log = cleaner.log_tail(100_000)
    assert len(load_timeline(t.storage).completed().of_actions(CLEAN).instants) == 1
    assert (broker_errors, redeliveries, lock_waits) == (0, 0, 1), cleaner_log
    assert "broker trouble" not in cleaner_log
    assert "could not commit" not in cleaner_log
