"""End to end with real processes: the operator (on kmock's API emulator), ``tidemark-cleaner`` and
``tidemark-archiver``, a tansu broker, and tables with history.

* A table on S3 (the moto server over HTTP) written through Spark (tidemark's write job, which
  publishes its commits): its ``HudiTable`` names the endpoint, the region and a credentials
  Secret. The operator has it compacted (a Kubernetes Job, whose pod the test runs as the kubelet
  would), cleaned and archived, each with the table's own settings (the services' ``--conf``
  alone would do nothing). After each step both readers read the same rows, and the status and
  the metrics show what the timeline says happened.
* A savepoint holds archival back: the status's ``ArchivalBlocked`` names it and its instant
  once the archiver stopped there; deleting the savepoint clears the condition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import TansuBroker
from tests.support.kube import (
    NS,
    TABLES,
    KubeApi,
    Operator,
    Topic,
    conditions,
    eventually,
    resource,
    run_job,
    status,
)
from tests.support.model import TableModel, apache_snapshot, data_rows, hudi_s3_options
from tests.support.s3 import REGION, create_bucket, s3_child_env, s3_options
from tests.support.services import ServiceProcess, logs, metric_value, service_processes
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType
from tidemark.storage import Storage, open_storage
from tidemark.table.snapshot import read_snapshot
from tidemark.table_services.savepoint import create_savepoint, delete_savepoint
from tidemark.timeline import CLEAN, COMPACTION, load_timeline
from tidemark.timeline.archived import read_archived

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

#: the services' own settings keep 20 commits: without the table's settings they clean and archive nothing
SERVICE_CONF = {
    "hoodie.cleaner.commits.retained": "20",
    "hoodie.keep.min.commits": "20",
    "hoodie.keep.max.commits": "30",
    # (longer than a service's stall on a loaded machine: one that outlasts it loses the lock)
    "hoodie.write.lock.storage.validity.timeout.secs": "5",
}
#: the keys a pod's environment gets from the table's Secret, and nowhere else
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


@pytest.fixture
def operator(kube: KubeApi, kafka_broker: TansuBroker, topic: Topic) -> Iterator[Operator]:
    """The operator alone (no peering), started first: its start overlaps the services'."""
    op = Operator(kube, kafka_broker.bootstrap, topic.name, "--standalone").start()
    yield op
    op.stop()
    op.close()


@pytest.fixture
def services(kafka_broker: TansuBroker, topic: Topic, moto_server: str) -> Iterator[list[ServiceProcess]]:
    """The cleaner and the archiver on the topic, reaching moto (and local tables)."""
    with service_processes(
        ["cleaner", "archiver"],
        kafka_broker.bootstrap,
        topic.name,
        f"{topic.name}.dlq",
        s3_endpoint=moto_server,
        conf=SERVICE_CONF,
    ) as procs:
        yield procs


def _rows(keys: range, ts: int) -> list[dict[str, Any]]:
    return [{"id": f"k{k:02d}", "ts": ts, "v": ts * 100 + k} for k in keys]


def _data_files(storage: Storage) -> set[str]:
    return {i.path for i in storage.list() if not i.path.startswith(".hoodie") and "/.hoodie" not in i.path}


def test_a_table_on_s3_is_compacted_cleaned_and_archived_as_its_hudi_table_says(
    kube: KubeApi,
    kafka_broker: TansuBroker,
    topic: Topic,
    moto_server: str,
    spark: Any,
    operator: Operator,
    services: list[ServiceProcess],
) -> None:
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    cleaner, archiver = services
    location = f"s3://{create_bucket(moto_server)}/warehouse/orders"
    s3 = s3_options(moto_server)
    storage = open_storage(location, s3)
    model = TableModel("id", "ts", None)
    events = {"tidemark.events.bootstrap": kafka_broker.bootstrap, "tidemark.events.topic": topic.name}

    def write(op: str, rows: list[dict[str, Any]]) -> str:
        result = write_dataframe(
            spark.createDataFrame(rows), location, WriteOptions(op, ("id",), "ts", conf=events), s3
        )
        getattr(model, op)(rows)
        return result.instant

    def both_readers_agree() -> None:
        expected = model.sorted_rows()
        assert data_rows(read_snapshot(storage), "id") == expected
        assert data_rows(apache_snapshot(location, hudi_s3_options(moto_server)), "id") == expected

    def shown(what: str, check: Callable[[dict[str, Any]], Any]) -> Any:
        return eventually(lambda: check(status(kube, "orders")), 60, what)

    # the table's credentials are in a Secret the compaction Job's pod reads (the operator itself
    # reads the table with its own, here the test's environment)
    kube.add_secret(NS, "orders-s3", {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    first = write("insert", _rows(range(6), 1))
    spec = {
        "location": location,
        "storage": {"endpoint": moto_server, "region": REGION, "credentialsSecret": {"name": "orders-s3"}},
        "compaction": {"deltaCommits": 2, "resources": {"limits": {"memory": "1Gi"}}},
        "clean": {"commits": 4, "commitsRetained": 1},
        "archive": {"interval": "2s", "keepMinCommits": 2, "keepMaxCommits": 3},
        "requestTimeoutSeconds": 2,
    }
    kube.create(TABLES, resource("orders", spec))
    shown("Ready, reading the table on S3", lambda s: s.get("latestInstant") == first and s)

    # --- writes: an update of every key makes two delta commits: compaction is due
    second = write("upsert", _rows(range(6), 2))
    both_readers_agree()
    assert shown("the second commit", lambda s: s.get("latestInstant") == second and s)["pendingCompactions"] == 0
    before = _data_files(storage)

    # --- compaction: the operator's Job, run as the kubelet would, with the Secret's keys
    job = eventually(lambda: kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs"), 60, "a compaction Job")[0]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["compact", location]
    assert ["--s3-endpoint", moto_server] == container["args"][2:4]
    pod_env = {k: v for k, v in s3_child_env().items() if k not in CREDENTIALS}
    assert "compaction committed at" in run_job(kube, job, pod_env)
    (compaction,) = load_timeline(storage).completed().of_actions(COMPACTION)
    shown("lastCompaction", lambda s: s.get("lastCompaction", {}).get("instant") == compaction.timestamp)
    assert status(kube, "orders")["pendingCompactions"] == 0
    assert status(kube, "orders")["requests"]["compaction"]["job"] == job["metadata"]["name"]
    both_readers_agree()

    # --- clean: due after four commits (the compaction's included), keeping one: every file of
    # the slices the compaction replaced goes (the last before the commit retained stays)
    fourth = write("upsert", _rows(range(0, 8, 3), 4))
    both_readers_agree()
    clean = shown("lastClean", lambda s: s.get("lastClean"))
    cleans = [i.timestamp for i in load_timeline(storage).completed().of_actions(CLEAN)]
    assert cleans == [clean["instant"]], logs(cleaner, archiver)
    assert before - _data_files(storage) == before, logs(cleaner)
    assert clean["filesDeleted"] == len(before)
    assert clean["earliestCommitToRetain"] == fourth
    both_readers_agree()

    # --- archive: above keepMaxCommits 3, down to keepMinCommits 2
    archive = shown("lastArchive", lambda s: s.get("lastArchive", {}).get("instantsArchived") and s["lastArchive"])
    archived = {a.timestamp for a in read_archived(storage)}
    active = load_timeline(storage)
    assert archive["instant"] in archived
    assert not archived & {i.timestamp for i in active}
    assert first in archived
    assert len(active.completed().write_instants()) == 2, logs(archiver)
    assert conditions(kube, "orders")["ArchivalBlocked"]["status"] == "False"
    both_readers_agree()

    # the requests carried the table's settings; the services answered them
    (clean_request,) = eventually(lambda: topic.requests(EventType.CLEAN_REQUESTED), 30, "clean.requested read")
    assert clean_request.instant == fourth  # the commit that made it due
    assert clean_request.extra["hoodie.cleaner.commits.retained"] == "1"
    assert clean_request.extra["resource"] == f"{NS}/orders"
    assert topic.requests(EventType.ARCHIVE_REQUESTED)[-1].extra["hoodie.keep.max.commits"] == "3"
    (compaction_request,) = topic.requests(EventType.COMPACTION_REQUESTED)
    assert compaction_request.instant == second
    assert not cleaner.metric("tidemark_events_dead_lettered_total")
    assert not archiver.metric("tidemark_events_dead_lettered_total")

    # the operator's metrics say so
    metrics = operator.metrics()
    for service in ("compaction", "clean", "archive"):
        published = metric_value(metrics, "tidemark_operator_requests_published_total", service=service)
        assert (published or 0) >= 1, metrics
    assert metric_value(metrics, "tidemark_operator_tables_managed") == 1
    assert metric_value(metrics, "tidemark_operator_pending_compactions", table=location) == 0


def test_archival_blocked_by_a_savepoint_shows_until_it_is_deleted(
    kube: KubeApi, operator: Operator, services: list[ServiceProcess], tmp_path: Path
) -> None:
    location = str(tmp_path / "orders")
    storage = open_storage(location)
    builder = TableBuilder(storage)
    first = builder.insert(["a", "b"], 1)
    kept = builder.update(["a"], 2)
    create_savepoint(storage, kept)
    for value in range(3, 7):
        builder.update(["a", "b"], value)
    expected = builder.snapshot()

    spec = {
        "location": location,
        "clean": {"interval": "2s", "commitsRetained": 1},
        "archive": {"interval": "2s", "keepMinCommits": 2, "keepMaxCommits": 3},
        "requestTimeoutSeconds": 2,
    }
    kube.create(TABLES, resource("orders", spec))

    # the archiver stops at the savepoint; the status says which guard and where
    def blocked() -> Any:
        found = conditions(kube, "orders").get("ArchivalBlocked", {})
        return (
            found.get("status") == "True" and status(kube, "orders").get("lastArchive", {}).get("stoppedBy") and found
        )

    held = eventually(blocked, 60, "ArchivalBlocked, after an archival")
    assert held["reason"] == "Savepoint", held
    assert held["message"] == f"archival is held before {kept} by the savepoint"
    last = status(kube, "orders")["lastArchive"]
    assert (last["instant"], last["instantsArchived"], last["stoppedBy"]) == (first, 1, "savepoint")
    assert {a.timestamp for a in read_archived(storage)} == {first}
    metrics = operator.metrics()
    assert metric_value(metrics, "tidemark_operator_archival_blocked_seconds", guard="savepoint") is not None

    # the savepoint deleted: the next clean moves the clean's bound, archival goes past it
    delete_savepoint(storage, kept)
    cleared = eventually(
        lambda: (found := conditions(kube, "orders")["ArchivalBlocked"])["status"] == "False" and found,
        60,
        "ArchivalBlocked cleared",
    )
    assert cleared["reason"] == "NotBlocked"
    eventually(lambda: kept in {a.timestamp for a in read_archived(storage)}, 30, f"{kept} archived")
    assert metric_value(operator.metrics(), "tidemark_operator_archival_blocked_seconds") is None
    assert builder.snapshot() == expected
    assert {r["id"]: r["v"] for r in data_rows(apache_snapshot(location), "id")} == expected


def test_a_clean_or_archive_with_nothing_to_do_does_not_hold_the_next_request(
    kube: KubeApi, topic: Topic, operator: Operator, services: list[ServiceProcess], tmp_path: Path
) -> None:
    """Under Forbid (the default) with the default requestTimeoutSeconds (900 s): a request the
    service handled and found nothing to do for is answered, and the next fire time is requested."""
    location = str(tmp_path / "orders")
    TableBuilder(open_storage(location)).insert(["a", "b"], 1)
    spec = {"location": location, "clean": {"interval": "2s"}, "archive": {"interval": "2s"}}
    kube.create(TABLES, resource("orders", spec))

    def requested_twice() -> bool:
        events = topic.read()
        return all(
            len([e for e in events if e.type is t]) >= 2
            for t in (EventType.CLEAN_REQUESTED, EventType.ARCHIVE_REQUESTED)
        )

    eventually(requested_twice, 30, "a second clean and archive request")
    skipped = {e.type for e in topic.read()}
    assert {EventType.CLEAN_SKIPPED, EventType.ARCHIVE_SKIPPED} <= skipped, logs(*services)
    metrics = operator.metrics()
    for service in ("clean", "archive"):
        overdue = metric_value(metrics, "tidemark_operator_request_overdue_seconds", table_service=service)
        assert (overdue or 0) < 5, metrics


_REQUESTS = (EventType.CLEAN_REQUESTED, EventType.ARCHIVE_REQUESTED)


def test_a_restarted_operator_knows_a_skipped_request_was_answered(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, services: list[ServiceProcess], tmp_path: Path
) -> None:
    """A ``*.skipped`` leaves nothing on the timeline, and a restarted operator reads the topic from
    its end: the status records the answer (``requests.<service>.answer``), so the restarted
    operator (or a new leader) requests the next fire time at once, not after
    requestTimeoutSeconds (900 s), and counts nothing overdue. That new request, which no service
    is left to answer, shows no answer and holds the next fire times (it kept the previous
    request's ``answer: skipped``, and a request was made every 5 s)."""
    location = str(tmp_path / "orders")
    TableBuilder(open_storage(location)).insert(["a", "b"], 1)
    spec = {"location": location, "clean": {"interval": "5s"}, "archive": {"interval": "5s"}}
    op = Operator(kube, kafka_broker.bootstrap, topic.name, "--standalone").start()
    try:
        kube.create(TABLES, resource("orders", spec))

        def answered() -> bool:
            requests = status(kube, "orders").get("requests") or {}
            return all(requests.get(s, {}).get("answer") == "skipped" for s in ("clean", "archive"))

        eventually(answered, 60, "the requests answered as skipped in the status")
        op.stop()
        op.close()
        for service in services:
            service.stop()
        last = {s: r["instant"] for s, r in status(kube, "orders")["requests"].items()}
        op = Operator(kube, kafka_broker.bootstrap, topic.name, "--standalone").start()

        def requested_again() -> bool:
            after = {e.action: e.instant for e in topic.read() if e.type in _REQUESTS and e.instant > last[e.action]}
            return after.keys() == last.keys()

        eventually(requested_again, 30, "the next fire time requested after the restart")
        metrics = op.metrics()
        for service in ("clean", "archive"):
            overdue = metric_value(metrics, "tidemark_operator_request_overdue_seconds", table_service=service)
            assert (overdue or 0) < 5, metrics
        made = {e.action: e.instant for e in topic.read() if e.type in _REQUESTS and e.instant > last[e.action]}
        eventually(
            lambda: {s: r["instant"] for s, r in status(kube, "orders")["requests"].items()} == made,
            30,
            f"the status showing the requests {made}",
        )
        time.sleep(12)  # two fire times and more
        requests = status(kube, "orders")["requests"]
        assert {s: r["instant"] for s, r in requests.items()} == made, requests
        assert all("answer" not in r for r in requests.values()), requests
        again = [e.instant for e in topic.read() if e.type in _REQUESTS and e.instant > made[e.action]]
        assert again == [], f"requested while {made} was not answered"
    finally:
        op.stop()
        op.close()
