"""What an on-call reads in the cleaner's and archiver's logs: a line per clean or archival, naming
the table, the instant and what was done, and a line per event that found nothing to do (the
services logged only failures: a clean of 8 files left no line naming the table)."""

from __future__ import annotations

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
from tidemark.kafka_adapter import EventProducer
from tidemark.storage import LocalStorage
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
