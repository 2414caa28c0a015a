"""The real operator process (``python -m tidemark_operator.main``, kopf 1.45) against kmock's
Kubernetes API emulator served over HTTP (tests/support/kube.py), a real tansu broker and real
tables: create, update, suspend, resume and delete a HudiTable; a bad spec; the compaction Job;
the status following the services' completed events; two replicas and a killed one making one
request per due time."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.support.kafka import TansuBroker
from tests.support.kube import (
    NS,
    TABLES,
    KubeApi,
    Operator,
    Topic,
    conditions,
    eventually,
    job_calls,
    resource,
    run_job,
    status,
)
from tests.support.services import http_get, metric_value
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType, TimelineEvent, skipped
from tidemark.kafka_adapter import EventProducer
from tidemark.storage import open_storage
from tidemark.table import properties as P
from tidemark.timeline import COMPACTION, load_timeline

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture
def table(tmp_path: Path) -> tuple[str, TableBuilder]:
    location = str(tmp_path / "orders")
    builder = TableBuilder(open_storage(location))
    builder.insert(["a", "b", "c"])
    builder.update(["a"], 2)
    return location, builder


def events_of(kube: KubeApi, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.items(f"/api/v1/namespaces/{NS}/events") if e.get("involvedObject", {}).get("name") == name]


@pytest.fixture
def operator(kube: KubeApi, kafka_broker: TansuBroker, topic: Topic) -> Iterator[Operator]:
    op = Operator(kube, kafka_broker.bootstrap, topic.name).start()
    yield op
    op.stop()
    op.close()


def test_create_update_suspend_resume_delete(
    kube: KubeApi, operator: Operator, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    location, _ = table
    # an unanswered request (no cleaner runs here) stops holding the next one after 1 s
    spec = {"location": location, "clean": {"interval": "2s"}, "requestTimeoutSeconds": 1}
    kube.create(TABLES, resource("orders", spec))

    # a request when due, on Kafka, with the id the services' encoding gives it
    first = eventually(lambda: topic.requests(EventType.CLEAN_REQUESTED), 60, "a clean.requested")[0]
    assert first.table == location
    assert first.source == "/tidemark/operator"
    assert first.extra["resource"] == f"{NS}/orders"
    assert int(first.instant) % 2000 == 0  # a multiple of the interval: the same in every replica
    assert topic.ids[topic.events.index(first)] == first.id
    ready = eventually(lambda: conditions(kube, "orders").get("Ready", {}).get("status") == "True", 30, "Ready")
    assert ready
    shown = status(kube, "orders")
    assert shown["phase"] == "Ready"
    assert shown["activeTimelineLength"] == 2
    assert shown["requests"]["clean"]["trigger"] == "schedule"
    assert shown["observedGeneration"] == 1
    assert "clean" in shown["nextScheduled"]

    # suspend: no new request, and the phase says so
    kube.patch(f"{TABLES}/orders", {"spec": {"suspend": True}})
    eventually(lambda: status(kube, "orders").get("phase") == "Suspended", 30, "phase Suspended")
    assert status(kube, "orders")["observedGeneration"] == 2
    before = len(topic.requests(EventType.CLEAN_REQUESTED))
    time.sleep(5)  # two fire times pass
    assert len(topic.requests(EventType.CLEAN_REQUESTED)) == before

    # resume: requests again
    kube.patch(f"{TABLES}/orders", {"spec": {"suspend": False}})
    eventually(lambda: len(topic.requests(EventType.CLEAN_REQUESTED)) > before, 30, "a request after resume")
    instants = [e.instant for e in topic.requests(EventType.CLEAN_REQUESTED)]
    assert len(instants) == len(set(instants))  # one request per due time

    # a bad spec: Degraded, a Warning Event naming the field, no crash, no request
    kube.patch(f"{TABLES}/orders", {"spec": {"clean": {"interval": "soon"}}})
    degraded = eventually(
        lambda: conditions(kube, "orders").get("Degraded", {}).get("status") == "True" and conditions(kube, "orders"),
        30,
        "Degraded",
    )
    assert degraded["Degraded"]["reason"] == "InvalidSpec"
    assert "spec.clean.interval: 'soon' is not a period" in degraded["Degraded"]["message"]
    warning = eventually(
        lambda: [e for e in events_of(kube, "orders") if e.get("reason") == "InvalidSpec"], 30, "an InvalidSpec Event"
    )[0]
    assert warning["type"] == "Warning"
    assert "spec.clean.interval" in warning["message"]
    assert operator.alive
    assert "tidemark_operator_tables_degraded 1.0" in operator.metrics()
    kube.patch(f"{TABLES}/orders", {"spec": {"clean": {"interval": "2s"}}})
    eventually(lambda: status(kube, "orders").get("phase") == "Ready", 30, "Ready again")

    # delete: the finalizer is released, scheduling stops, the table is untouched
    kube.delete(f"{TABLES}/orders")
    eventually(lambda: kube.get(f"{TABLES}/orders") is None, 30, "the resource gone")
    time.sleep(1)
    after = len(topic.requests(EventType.CLEAN_REQUESTED))
    time.sleep(4)
    assert len(topic.requests(EventType.CLEAN_REQUESTED)) == after
    assert len(load_timeline(open_storage(location))) == 2
    metrics = operator.metrics()
    assert "tidemark_operator_tables_managed 0.0" in metrics
    assert 'tidemark_operator_requests_published_total{service="clean"}' in metrics


def test_compaction_job_and_status_from_completed_events(
    kube: KubeApi, operator: Operator, topic: Topic, table: tuple[str, TableBuilder], kafka_broker: TansuBroker
) -> None:
    location, _ = table
    spec = {
        "location": location,
        "compaction": {"deltaCommits": 2, "resources": {"limits": {"memory": "1Gi"}}},
        "archive": {"interval": "1h", "keepMinCommits": 2, "keepMaxCommits": 3},
    }
    kube.create(TABLES, resource("orders", spec))
    # two delta commits: a compaction is due; its Job is made, and compaction.requested published
    job = eventually(lambda: kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs"), 60, "a compaction Job")[0]
    (request,) = eventually(lambda: topic.requests(EventType.COMPACTION_REQUESTED), 30, "compaction.requested")
    assert job["metadata"]["name"] == f"orders-compact-{request.id[:10]}"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "HudiTable"
    held = eventually(lambda: status(kube, "orders").get("requests", {}).get("compaction"), 30, "recorded")
    assert held["job"] == job["metadata"]["name"]

    # the kubelet's part: run the Job's command (the CLI) on the table, and mark the Job complete
    assert "compaction committed at" in run_job(kube, job, os.environ)
    (compaction,) = load_timeline(open_storage(location)).completed().of_actions(COMPACTION)
    shown = eventually(lambda: status(kube, "orders").get("lastCompaction", {}).get("instant"), 30, "lastCompaction")
    assert shown == compaction.timestamp
    assert status(kube, "orders")["pendingCompactions"] == 0

    # the status follows the services' completed events (read again at once, whatever the refresh)
    archived = TimelineEvent(
        EventType.ARCHIVE_COMPLETED,
        location,
        "20240101000000000",
        "archive",
        "COMPLETED",
        source="/tidemark/archiver",
        extra={"instantsArchived": "4", "stoppedBy": "savepoint"},
    )
    with EventProducer(kafka_broker.bootstrap) as producer:

        def seen() -> Any:
            producer.publish(topic.name, archived)  # until the operator's consumer has joined
            return status(kube, "orders").get("lastArchive", {}).get("stoppedBy")

        assert eventually(seen, 60, "lastArchive from archive.completed") == "savepoint"
    assert status(kube, "orders")["lastArchive"]["instantsArchived"] == 4
    # no second compaction Job for the same request
    assert len(kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs")) == 1


def test_forbid_makes_no_second_compaction_job_while_the_first_runs(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, tmp_path: Path
) -> None:
    """Under Forbid (the default) a compaction request is pending while its Job is unfinished:
    more delta commits, and other services' fire times, make no second Job. A look of 5 s spans
    the clean's fire times (every 2 s): the look that makes the first Job decides again after each
    of them, and so do the looks after it."""
    location = str(tmp_path / "orders")
    builder = TableBuilder(open_storage(location))
    builder.insert(["a", "b"])
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, "--tick", "5").start()
    try:
        # no cleaner answers here: an unanswered clean request holds the next one 1 s at most
        spec = {"location": location, "compaction": {"deltaCommits": 2}, "clean": {"interval": "2s"}}
        kube.create(TABLES, resource("orders", {**spec, "requestTimeoutSeconds": 1}))

        def steady() -> bool:
            return status(kube, "orders").get("phase") == "Ready" and len(topic.requests(EventType.CLEAN_REQUESTED)) > 1

        def jobs() -> list[str]:
            return [j["metadata"]["name"] for j in kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs")]

        eventually(steady, 60, "Ready, with clean requests")
        for value in range(2, 6):  # five delta commits: two compactions' worth
            builder.update(["a"], value)
        job = eventually(jobs, 30, "a compaction Job")[0]
        time.sleep(12)  # the rest of that look, two looks more, six clean fire times
        assert jobs() == [job]
        assert len(topic.requests(EventType.COMPACTION_REQUESTED)) == 1
        assert status(kube, "orders")["requests"]["compaction"]["job"] == job
        assert 'tidemark_operator_requests_held_total{service="compaction"}' in operator.metrics()
        assert len(topic.requests(EventType.CLEAN_REQUESTED)) > 4  # the clean went on meanwhile
    finally:
        operator.stop()
        operator.close()


def test_a_job_read_answered_by_a_proxys_error_page_holds_up_no_other_service(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    """A load balancer in front of the API server answering the operator's Job calls with an HTML
    502: logged, and the table's look goes on (kopf would pause a failed timer for 60 s)."""
    location, _ = table
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, "--tick", "1", "--refresh", "1").start()
    try:
        spec = {"location": location, "compaction": {"deltaCommits": 1}, "clean": {"interval": "2s"}}
        kube.create(TABLES, resource("orders", {**spec, "requestTimeoutSeconds": 1}))
        eventually(lambda: status(kube, "orders").get("requests", {}).get("compaction"), 60, "a compaction Job")
        page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
        kube.server.faults.append(
            job_calls("fetch", lambda: web.Response(status=502, text=page, content_type="text/html"))
        )
        time.sleep(2)
        before = len(topic.requests(EventType.CLEAN_REQUESTED))
        time.sleep(10)  # five fire times of the clean
        assert len(topic.requests(EventType.CLEAN_REQUESTED)) - before >= 3
        log = operator.log_tail()
        assert "GET /apis/batch/v1/namespaces/lake/jobs/" in log
        assert "502, not a JSON answer: '<html>" in log
        assert "Traceback" not in log
    finally:
        operator.stop()
        operator.close()


def test_a_compaction_job_refused_or_never_started_shows_in_the_status(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    """The API server refusing the compaction Job (over a quota here): Degraded with its answer and
    one Warning Event, though each look asks again, until a Job is made. A Job whose pod never
    starts is failed by Kubernetes at its activeDeadlineSeconds, and the status says why."""
    location, _ = table
    quota = 'jobs "orders-compact" is forbidden: exceeded quota: compute, requested: limits.memory=2Gi'
    answer = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "message": quota}
    refuse = job_calls("create", lambda: web.json_response({**answer, "code": 403}, status=403))
    kube.server.faults.append(refuse)
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, "--tick", "1", "--job-deadline", "600").start()
    try:
        # the table's two delta commits make one request: none more after its Job has failed
        kube.create(TABLES, resource("orders", {"location": location, "compaction": {"deltaCommits": 2}}))

        def degraded() -> dict[str, Any] | None:
            found = conditions(kube, "orders").get("Degraded")
            return found if found and found["status"] == "True" else None

        refused = eventually(degraded, 60, "Degraded")
        assert refused["reason"] == "JobRefused"
        assert refused["message"].startswith("the API server refused the compaction Job: creating Job orders-compact-")
        assert refused["message"].endswith(f": 403 Forbidden: {quota}")
        assert status(kube, "orders")["phase"] == "Degraded"
        time.sleep(4)  # more looks, each refused again
        warned = [(e["type"], e["message"]) for e in events_of(kube, "orders") if e["reason"] == "JobRefused"]
        assert warned == [("Warning", refused["message"])]

        kube.server.faults.remove(refuse)  # the quota raised
        (job,) = eventually(lambda: kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs"), 30, "a compaction Job")
        assert job["spec"]["activeDeadlineSeconds"] == 600
        eventually(lambda: status(kube, "orders").get("phase") == "Ready", 30, "Ready once a Job is made")
        assert [e["type"] for e in events_of(kube, "orders") if e["reason"] == "Recovered"] == ["Normal"]

        # its pod never started (the Secret missing, say): Kubernetes fails it at the deadline
        failure = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
        failure["message"] = "Job was active longer than specified deadline"
        name = job["metadata"]["name"]
        kube.patch(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}/status", {"status": {"conditions": [failure]}})
        failed = eventually(degraded, 30, "Degraded by the failed Job")
        assert failed["reason"] == "CompactionFailed"
        expected = f"compaction Job {name} failed (DeadlineExceeded): Job was active longer than specified deadline"
        assert failed["message"] == expected
        assert status(kube, "orders")["lastCompaction"]["message"] == expected
    finally:
        operator.stop()
        operator.close()


def test_tables_whose_storage_never_answers_hold_up_no_other_table(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder], fake_aws_env: None
) -> None:
    """Tables whose S3 endpoint takes connections and never answers (a dead proxy): the readable
    table is read and requested at once, as with none (their reads held asyncio's default pool, 6
    threads here, about 90 s each), and they are told of within a few storage timeouts."""
    location, _ = table
    silent = socket.create_server(("127.0.0.1", 0), backlog=128)  # the kernel takes connections; no answer
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, "--tick", "2", "--refresh", "60").start()
    try:
        for i in range(8):
            storage = {"endpoint": endpoint, "region": "us-east-1"}
            kube.create(TABLES, resource(f"silent{i}", {"location": f"s3://lake/t{i}", "storage": storage}))
        time.sleep(3)  # their reads are waiting
        spec = {"location": location, "clean": {"interval": "2s"}, "requestTimeoutSeconds": 1}
        kube.create(TABLES, resource("orders", spec))
        eventually(lambda: status(kube, "orders").get("phase") == "Ready", 15, "the readable table Ready")

        def cleans() -> int:
            return len([e for e in topic.requests(EventType.CLEAN_REQUESTED) if e.table == location])

        eventually(lambda: cleans() >= 3, 15, "three clean requests of the readable table")
        unreachable = eventually(lambda: conditions(kube, "silent0").get("Degraded"), 45, "silent0 told of")
        assert unreachable["reason"] == "TableUnreachable"
    finally:
        operator.stop()
        operator.close()
        silent.close()


def test_two_replicas_and_a_killed_one_make_one_request_per_due_time(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    location, _ = table
    replicas = [Operator(kube, kafka_broker.bootstrap, topic.name, "--peering-lifetime", "3").start() for _ in range(2)]
    try:
        spec = {"location": location, "clean": {"interval": "1s"}, "concurrencyPolicy": "Allow"}
        kube.create(TABLES, resource("orders", spec))
        eventually(lambda: len(topic.requests(EventType.CLEAN_REQUESTED)) >= 4, 60, "requests from the replicas")
        # the active one killed, then started again: the other takes over, nothing is requested twice
        for replica in replicas:
            replica.signal_and_wait(signal.SIGKILL, 5)
            count = len(topic.requests(EventType.CLEAN_REQUESTED))
            eventually(lambda c=count: len(topic.requests(EventType.CLEAN_REQUESTED)) >= c + 3, 60, "requests go on")
            replica.start()
        time.sleep(3)
        requests = topic.requests(EventType.CLEAN_REQUESTED)
        instants = [e.instant for e in requests]
        assert len(instants) == len(set(instants)), sorted(instants)
        assert len(set(topic.ids)) == len(topic.ids)
    finally:
        for replica in replicas:
            replica.stop()
            replica.close()


def test_events_say_when_a_problem_clears(
    kube: KubeApi, operator: Operator, table: tuple[str, TableBuilder], tmp_path: Path
) -> None:
    """``kubectl describe`` shows a Normal Event after the Warning once the problem is gone, and
    one Warning per problem, not one per look."""

    def reasons(name: str) -> list[tuple[str, str]]:
        return [(e["type"], e["reason"]) for e in events_of(kube, name)]

    # a table that is not there yet: one Warning (the first look may come before the create
    # handler), then a Normal Event once it appears
    location, _ = table
    later = str(tmp_path / "later")
    kube.create(TABLES, resource("missing", {"location": later, "clean": {"interval": "5s"}}))
    eventually(lambda: status(kube, "missing").get("phase") == "Degraded", 30, "Degraded")
    time.sleep(3)  # ten looks
    assert reasons("missing") == [("Warning", "TableUnreachable")]
    os.rename(location, later)
    recovered = eventually(
        lambda: [e for e in events_of(kube, "missing") if e["reason"] == "Recovered"], 30, "a Recovered Event"
    )
    assert (recovered[0]["type"], recovered[0]["message"]) == ("Normal", f"{later} is scheduled again")
    assert status(kube, "missing")["phase"] == "Ready"

    # a bad schedule, then fixed: a Warning, then a Normal Event (on a table of its own: a second
    # HudiTable of one table schedules nothing)
    other = str(tmp_path / "other")
    TableBuilder(open_storage(other)).insert(["a"])
    kube.create(TABLES, resource("bad", {"location": other, "clean": {"schedule": "61 * * * *"}}))
    eventually(lambda: ("Warning", "InvalidSpec") in reasons("bad"), 30, "an InvalidSpec Event")
    kube.patch(f"{TABLES}/bad", {"spec": {"clean": {"schedule": "*/5 * * * *"}}})
    accepted = eventually(
        lambda: [e for e in events_of(kube, "bad") if e["reason"] == "SpecAccepted"], 30, "a SpecAccepted Event"
    )
    assert (accepted[0]["type"], accepted[0]["message"]) == ("Normal", f"the spec is valid; scheduling {other}")
    eventually(lambda: status(kube, "bad").get("phase") == "Ready", 30, "Ready")
    time.sleep(1)
    assert reasons("bad") == [("Warning", "InvalidSpec"), ("Normal", "SpecAccepted")]


def test_a_period_too_long_for_a_date_is_a_bad_spec(
    kube: KubeApi, operator: Operator, table: tuple[str, TableBuilder]
) -> None:
    """A period the CRD's pattern takes but no date can hold: Degraded and a Warning naming the
    field, as any bad spec, not a handler crashing (and retried by kopf) with no status."""
    location, _ = table
    kube.create(TABLES, resource("huge", {"location": location, "clean": {"interval": "3000000d"}}))
    shown = eventually(lambda: conditions(kube, "huge").get("Degraded"), 30, "a Degraded condition")
    assert (shown["status"], shown["reason"]) == ("True", "InvalidSpec")
    assert shown["message"] == "spec.clean.interval: '3000000d' is too long (at most 365 days)"
    assert status(kube, "huge")["phase"] == "Degraded"
    (warning,) = eventually(
        lambda: [e for e in events_of(kube, "huge") if e["reason"] == "InvalidSpec"], 30, "an InvalidSpec Event"
    )
    assert (warning["type"], warning["message"]) == ("Warning", shown["message"])
    assert "OverflowError" not in operator.log_path.read_text(errors="replace")
    assert operator.alive


def test_a_table_tidemark_refuses_to_change_is_degraded_and_gets_no_request(
    kube: KubeApi, operator: Operator, topic: Topic, table: tuple[str, TableBuilder], tmp_path: Path
) -> None:
    """Properties tidemark refuses to clean or archive by (the archived timeline in
    .hoodie/metadata/): the cleaner and the archiver would dead-letter every request, so the
    operator sends none and says why in tidemark's words, once, until the properties are mended."""
    location, _ = table
    storage = open_storage(location)
    mended = P.read_properties(storage)
    P.write_properties(storage, P.TableProperties({**mended.entries, P.ARCHIVELOG_FOLDER: "metadata"}))
    spec = {
        "location": location,
        "clean": {"interval": "1s"},
        "archive": {"interval": "1s"},
        "requestTimeoutSeconds": 1,
    }
    kube.create(TABLES, resource("orders", spec))

    def degraded() -> dict[str, Any] | None:
        found = conditions(kube, "orders").get("Degraded", {})
        return found if found.get("status") == "True" else None

    shown = eventually(degraded, 30, "Degraded")
    conflict = P.archive_folder_conflict({P.ARCHIVELOG_FOLDER: "metadata"})
    assert shown["reason"] == "ChangeRefused"
    assert shown["message"] == f"{storage.uri}: refusing to clean or archive: {conflict}"
    # a table beside it is requested meanwhile: the operator publishes, only not for this one
    other = str(tmp_path / "other")
    TableBuilder(open_storage(other)).insert(["a"])
    kube.create(TABLES, resource("other", {**spec, "location": other}))
    eventually(lambda: len(topic.requests(EventType.ARCHIVE_REQUESTED)) >= 3, 30, "three archive.requested")
    requested = (EventType.CLEAN_REQUESTED, EventType.ARCHIVE_REQUESTED)
    assert {e.table for e in topic.read() if e.type in requested} == {other}
    now = status(kube, "orders")
    assert now["phase"] == "Degraded"
    assert now["activeTimelineLength"] == len(load_timeline(storage))  # the table is still read
    assert [(e["type"], e["reason"], e["message"]) for e in events_of(kube, "orders")] == [
        ("Warning", "ChangeRefused", shown["message"])
    ]

    P.write_properties(storage, mended)
    eventually(lambda: conditions(kube, "orders").get("Ready", {}).get("status") == "True", 30, "Ready")
    assert [(e["type"], e["reason"]) for e in events_of(kube, "orders")][-1] == ("Normal", "Recovered")
    for type_ in (EventType.CLEAN_REQUESTED, EventType.ARCHIVE_REQUESTED):
        eventually(lambda t=type_: [e for e in topic.requests(t) if e.table == location], 30, f"a {type_}")


def test_a_second_huditable_of_one_table_schedules_nothing_until_the_first_goes(
    kube: KubeApi, operator: Operator, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    """Two HudiTables naming one table (spelt differently) would send requests of the same id
    with different settings: the one created later is Degraded, names the other and sends
    nothing; once the first is deleted, it takes over with its own settings."""
    location, _ = table
    first = {"location": location, "clean": {"commitsRetained": 1, "interval": "1s"}, "requestTimeoutSeconds": 1}
    kube.create(TABLES, resource("orders", first))
    eventually(lambda: status(kube, "orders").get("phase") == "Ready", 30, "orders Ready")
    time.sleep(1.1)  # a later creationTimestamp (whole seconds); its name sorts first
    second = {**first, "location": f"file://{location}/", "clean": {"commitsRetained": 3, "interval": "1s"}}
    kube.create(TABLES, resource("a-copy", second))

    def degraded() -> dict[str, Any] | None:
        found = conditions(kube, "a-copy").get("Degraded", {})
        return found if found.get("status") == "True" else None

    shown = eventually(degraded, 30, "a-copy Degraded")
    assert shown["reason"] == "DuplicateTable"
    assert shown["message"] == (
        f"HudiTable {NS}/orders, created first, schedules file://{location}: this one schedules nothing while it does"
    )
    eventually(lambda: len(topic.requests(EventType.CLEAN_REQUESTED)) >= 3, 30, "three clean.requested")
    requests = topic.requests(EventType.CLEAN_REQUESTED)
    assert {(r.extra["resource"], r.extra["hoodie.cleaner.commits.retained"]) for r in requests} == {
        (f"{NS}/orders", "1")
    }
    assert "requests" not in status(kube, "a-copy")
    assert status(kube, "orders")["phase"] == "Ready"
    assert [(e["type"], e["reason"]) for e in events_of(kube, "a-copy")] == [("Warning", "DuplicateTable")]

    kube.delete(f"{TABLES}/orders")
    eventually(lambda: status(kube, "a-copy").get("phase") == "Ready", 30, "a-copy Ready")
    assert [(e["type"], e["reason"]) for e in events_of(kube, "a-copy")][-1] == ("Normal", "Recovered")
    taken_over = eventually(
        lambda: [r for r in topic.requests(EventType.CLEAN_REQUESTED) if r.extra["resource"] == f"{NS}/a-copy"],
        30,
        "a clean.requested of a-copy",
    )
    assert taken_over[0].extra["hoodie.cleaner.commits.retained"] == "3"


@pytest.mark.timeout(420)
def test_healthz_fails_once_kopf_has_stopped(
    kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    """The API server gone for longer than kopf's retries: kopf gives up (its peering keep-alive
    fails) and schedules nothing more. ``/healthz`` then fails, so a liveness probe restarts a
    process that stays (kopf 1.45 can wait for ever on a watch it failed to cancel), and never
    says ``ok`` again; a process that exits exits non-zero."""
    location, _ = table
    kube = KubeApi()
    # kopf finds the API server gone at its next peering keep-alive (every --peering-lifetime s) and
    # retries each failing request for --kube-retry s (defaults: 60 and 54)
    op = Operator(kube, kafka_broker.bootstrap, topic.name, "--kube-retry", "3", "--peering-lifetime", "5").start()
    try:
        kube.create(TABLES, resource("orders", {"location": location, "clean": {"interval": "2s"}}))
        eventually(lambda: status(kube, "orders").get("phase") == "Ready", 60, "Ready")
        assert http_get(op.metrics_port, "/healthz") == (200, "operator: ok, 1 tables\n")
        started = time.monotonic()
        kube.close()

        def healthz() -> tuple[int, str] | None:
            try:
                return http_get(op.metrics_port, "/healthz", 2)
            except OSError:  # not served: the process is exiting
                return None

        # kopf's retries run out, then its cleanup: the failure is served meanwhile
        failed = eventually(lambda: (answer := healthz()) and answer[0] != 200 and answer, 300, "/healthz failing")
        print(f"/healthz failed {time.monotonic() - started:.0f} s after the API server went")
        assert failed[0] == 503
        assert failed[1].startswith("operator: kopf has stopped ("), failed
        with contextlib.suppress(OSError):  # unless the process has exited meanwhile
            assert http_get(op.metrics_port, "/readyz", 2)[0] == 503
        for _ in range(30):
            answer = healthz()
            assert answer is None or answer[0] == 503, answer
            time.sleep(0.1)
        if not op.alive:
            assert op.returncode != 0
            assert "tidemark-operator: error: kopf stopped: " in op.log_tail()
    finally:
        op.close()
        kube.close()


def test_a_finished_compaction_job_makes_no_second_one_before_the_timeline_is_read_again(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, tmp_path: Path
) -> None:
    """Two compactions' worth of delta commits waiting, the timeline read every 60 s: the Job
    compacts them all, and its end is no reason to request again from the timeline read before it."""
    location = str(tmp_path / "orders")
    builder = TableBuilder(open_storage(location))
    builder.insert(["a", "b"])
    for value in range(2, 6):
        builder.update(["a"], value)
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, "--refresh", "60").start()
    try:
        kube.create(TABLES, resource("orders", {"location": location, "compaction": {"deltaCommits": 2}}))
        job = eventually(lambda: kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs"), 60, "a compaction Job")[0]
        assert "compaction committed at" in run_job(kube, job, os.environ)
        eventually(lambda: status(kube, "orders").get("lastCompaction", {}).get("instant"), 30, "lastCompaction")
        time.sleep(3)  # ten looks
        assert [j["metadata"]["name"] for j in kube.items(f"/apis/batch/v1/namespaces/{NS}/jobs")] == [
            job["metadata"]["name"]
        ]
        (request,) = eventually(lambda: topic.requests(EventType.COMPACTION_REQUESTED), 30, "compaction.requested")
        assert job["metadata"]["name"] == f"orders-compact-{request.id[:10]}"
    finally:
        operator.stop()
        operator.close()


def _degraded_seen(operator: Operator) -> bool:
    with contextlib.suppress(OSError):  # (its metrics server starts with it)
        return bool(metric_value(operator.metrics(), "tidemark_operator_table_degraded", reason="ChangeRefused"))
    return False


def test_a_problem_is_not_warned_of_again_by_a_restarted_operator(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    """A table tidemark refuses to change, the operator restarted: the status already says so,
    and the one Warning Event stays one."""
    location, _ = table
    storage = open_storage(location)
    P.write_properties(
        storage, P.TableProperties({**P.read_properties(storage).entries, P.ARCHIVELOG_FOLDER: "metadata"})
    )
    kube.create(TABLES, resource("orders", {"location": location, "clean": {"interval": "1h"}}))
    for _ in range(2):
        operator = Operator(kube, kafka_broker.bootstrap, topic.name).start()
        try:
            eventually(lambda op=operator: _degraded_seen(op), 30, "Degraded, seen by this operator")
            time.sleep(1)  # a few looks more
        finally:
            operator.stop()
            operator.close()
    assert [(e["type"], e["reason"]) for e in events_of(kube, "orders")] == [("Warning", "ChangeRefused")]


def test_an_answer_given_while_the_operator_was_down_is_seen_after_its_restart(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, table: tuple[str, TableBuilder]
) -> None:
    """A clean request answered (``clean.skipped``) while no operator ran: the restarted one reads
    the answer (its consumer starts at the topic's end) and requests the next fire times, rather
    than holding them under Forbid until the request times out (900 s)."""
    location, _ = table
    kube.create(TABLES, resource("orders", {"location": location, "clean": {"interval": "3s"}}))
    operator = Operator(kube, kafka_broker.bootstrap, topic.name).start()
    try:
        (request,) = eventually(lambda: topic.requests(EventType.CLEAN_REQUESTED), 60, "a clean request")
        eventually(lambda: status(kube, "orders").get("requests", {}).get("clean"), 30, "the request recorded")
    finally:
        operator.signal_and_wait(signal.SIGKILL, 15)
        operator.close()
    assert status(kube, "orders")["requests"]["clean"].get("answer") is None
    with EventProducer(kafka_broker.bootstrap) as producer:  # the cleaner's answer, meanwhile
        producer.publish(topic.name, skipped(request, "nothing to clean"))
    operator = Operator(kube, kafka_broker.bootstrap, topic.name).start()
    try:
        later = eventually(
            lambda: [r for r in topic.requests(EventType.CLEAN_REQUESTED) if r.instant > request.instant],
            60,
            "the next fire time requested",
        )
        assert len({r.instant for r in later}) == len(later)  # one request per fire time
    finally:
        operator.stop()
        operator.close()
