"""End to end with real processes: the operator (on kmock's API emulator), ``tidemark-cleaner`` and
``tidemark-archiver``, a tansu broker and a table with history. A ``HudiTable`` schedules a clean
and an archival; the services run them with the table's own settings (the services' ``--conf``
alone would do nothing); the resource's status shows what the timeline says happened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import TansuBroker
from tests.support.kube import TABLES, KubeApi, Operator, eventually, resource, status
from tests.support.model import apache_snapshot, data_rows
from tests.support.services import (
    create_topics,
    events_of,
    logs,
    metric_value,
    of_type,
    read_topics,
    service_processes,
    unique_topics,
)
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType
from tidemark.storage import open_storage
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import CLEAN, load_timeline
from tidemark.timeline.archived import read_archived

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

#: the services' own settings keep 20 commits: without the table's settings they clean and archive nothing
SERVICE_CONF = {
    "hoodie.cleaner.commits.retained": "20",
    "hoodie.keep.min.commits": "20",
    "hoodie.keep.max.commits": "30",
    "hoodie.write.lock.storage.validity.timeout.secs": "1",
}


def _snapshots(location: str) -> tuple[dict[str, int], dict[str, int]]:
    """The table as tidemark's reader and Apache's (hudi-rs) read it: key → value."""
    ours = {r["id"]: r["v"] for r in data_rows(read_snapshot(open_storage(location)), "id")}
    apache = {r["id"]: r["v"] for r in data_rows(apache_snapshot(location), "id")}
    return ours, apache


def test_a_hudi_table_is_cleaned_and_archived_on_schedule_with_its_settings(
    kube: KubeApi, kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    # a history after which a clean keeping 2 commits deletes the file group an overwrite replaced
    location = str(tmp_path / "orders")
    storage = open_storage(location)
    builder = TableBuilder(storage)
    expected: dict[str, int] = {}
    for keys, value in ((["a", "b"], 1), (["a"], 2)):
        (builder.insert if value == 1 else builder.update)(keys, value)
        expected.update(dict.fromkeys(keys, value))
    replaced = set(builder.groups)
    builder.insert_overwrite(["a", "b"], 3)
    expected = {"a": 3, "b": 3}
    builder.insert(["c"], 4)
    for value in range(5, 9):
        builder.update(["a", "c"], value)
        expected.update({"a": value, "c": value})
    before = {i.path for i in storage.list() if not i.path.startswith(".hoodie/")}
    doomed = {p for p in before if any(g in p.rsplit("/", 1)[-1] for g in replaced)}
    assert doomed
    assert _snapshots(location) == (expected, expected)

    topic, dlq = unique_topics("e2e")
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    spec: dict[str, Any] = {
        "location": location,
        "clean": {"interval": "2s", "commitsRetained": 2},
        "archive": {"interval": "2s", "keepMinCommits": 2, "keepMaxCommits": 3},
        "requestTimeoutSeconds": 5,
    }
    operator = Operator(kube, kafka_broker.bootstrap, topic).start()
    try:
        with service_processes(["cleaner", "archiver"], kafka_broker.bootstrap, topic, dlq, conf=SERVICE_CONF) as (
            cleaner,
            archiver,
        ):
            kube.create(TABLES, resource("orders", spec))

            def archived_shown() -> Any:
                shown = status(kube, "orders")
                return shown.get("lastClean") and shown.get("lastArchive", {}).get("instantsArchived") and shown

            shown = eventually(archived_shown, 120, "status.lastClean and lastArchive")
            detail = logs(cleaner, archiver) + operator.log_tail()

            # the clean on the timeline is the one the status shows, and it deleted the replaced files
            timeline = load_timeline(storage)
            cleans = [i.timestamp for i in timeline.completed().of_actions(CLEAN)]
            assert shown["lastClean"]["instant"] in cleans, detail
            after = {i.path for i in storage.list() if not i.path.startswith(".hoodie/")}
            assert before - after == doomed, detail
            first_clean = min(cleans)
            # the archived instants left the active timeline for the archived one
            archived = {a.timestamp for a in read_archived(storage)}
            active = {i.timestamp for i in load_timeline(storage)}
            assert archived, detail
            assert not archived & active
            assert shown["lastArchive"]["instant"] in archived, detail
            assert shown["lastArchive"]["instantsArchived"] >= 1
            # keep.max.commits of the table, not the service's 30
            assert len(load_timeline(storage).completed().write_instants()) <= 3, detail

            # the requests carried the table's settings; the services answered them
            messages = read_topics(
                kafka_broker.bootstrap,
                [topic],
                lambda got: bool(of_type(events_of(got), EventType.ARCHIVE_COMPLETED)),
            )
            events = events_of(messages)
            requested = of_type(events, EventType.CLEAN_REQUESTED)
            assert requested, detail
            assert requested[0].extra["hoodie.cleaner.commits.retained"] == "2"
            assert requested[0].extra["resource"] == "lake/orders"
            assert of_type(events, EventType.ARCHIVE_REQUESTED)[0].extra["hoodie.keep.max.commits"] == "3"
            completed = of_type(events, EventType.CLEAN_COMPLETED)
            assert completed[0].instant == first_clean
            assert completed[0].extra["filesDeleted"] == str(len(doomed))
            if shown["lastClean"]["instant"] == first_clean:
                assert shown["lastClean"]["filesDeleted"] == len(doomed)
            assert not cleaner.metric("tidemark_events_dead_lettered_total")
            assert not archiver.metric("tidemark_events_dead_lettered_total")

            # the operator's metrics say so
            metrics = operator.metrics()
            for service in ("clean", "archive"):
                published = metric_value(metrics, "tidemark_operator_requests_published_total", service=service)
                assert (published or 0) >= 1, metrics
            assert metric_value(metrics, "tidemark_operator_tables_managed") == 1
            assert metric_value(metrics, "tidemark_operator_schedule_lag_seconds_count")
            assert cleaner.stop() == 0, cleaner.log_tail()
            assert archiver.stop() == 0, archiver.log_tail()
    finally:
        operator.stop()
        operator.close()

    # both readers read the same rows after the clean and the archival
    assert _snapshots(location) == (expected, expected)
