"""The writer-coordinator as a real process on a real broker (tansu): markers batched into Hudi's
``MARKERS<N>`` files, conflicts found in memory and announced once, metrics over HTTP, bad
requests refused, a SIGKILL and a restart (the index rebuilt from storage), the broker away, two
replicas on one table, and a writer that cannot reach it at all. Spark writers through it are in
``tests/spark/test_concurrent_writers.py``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import TansuBroker
from tests.support.processes import free_port
from tests.support.services import (
    CoordinatorProcess,
    create_topics,
    events_of,
    metric_value,
    of_type,
    publish_completed,
    publish_poison,
    read_topics,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import _table as _rows
from tidemark.errors import CoordinatorError, CoordinatorUnavailableError, InstantStateError, WriteConflictError
from tidemark.events import EventType, TimelineEvent
from tidemark.kafka_adapter import EventProducer
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.conflict import EarlyConflictDetector, WriteStart
from tidemark.table.coordinator_client import (
    CoordinatorClient,
    CoordinatorMarkerWriter,
    CoordinatorSession,
    DirectMarkerWriter,
)
from tidemark.table.markers import (
    MARKER_TYPE_FILE,
    TIMELINE_SERVER_BASED,
    IOType,
    Marker,
    delete_markers,
    list_markers,
    markers_folder,
    parse_marker_file,
    write_marker_type,
)
from tidemark.table.write_client import PendingWrite, begin_write, create_table, rollback
from tidemark.table.write_handles import TaskContext, create_base_file
from tidemark_services.runtime import DEAD_LETTER_REASON_HEADER

pytestmark = pytest.mark.kafka

LIVE = ConcurrencyConfig(heartbeat_interval_ms=60_000, early_detection=True)


def _base(write: PendingWrite, partition: str, file_id: str, token: str = "0-1-0") -> str:
    return f"{partition}/{file_id}_{token}_{write.instant}.parquet"


def _post(url: str, path: str, data: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{url}{path}", data=data, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _published(bootstrap: str, topic: str, wanted: dict[EventType, int]) -> list[TimelineEvent]:
    """The events on ``topic`` once it holds at least ``wanted`` of each type (20 s at most)."""
    return events_of(
        read_topics(
            bootstrap,
            [topic],
            lambda ms: all(len(of_type(events_of(ms, topic), t)) >= n for t, n in wanted.items()),
            seconds=20,
        ),
        topic,
    )


def _files_under(storage: LocalStorage, folder: str) -> list[str]:
    root = storage.root / folder
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_markers_are_batched_into_hudi_files_and_a_conflict_is_found_early_and_announced_once(
    coordinator: CoordinatorProcess, table: LocalStorage, kafka_broker: TansuBroker, topics: tuple[str, str]
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(location)
    client.register(a.start, LIVE)
    client.register(b.start, LIVE)
    # 40 markers of a from 8 threads at once: they share batches
    names = [_base(a, f"p={i % 4}", f"fg-{i:03d}") for i in range(40)]
    created: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda chunk: created.extend(
                client.create_marker(Marker.parse(a.instant, n + ".marker.CREATE")) for n in chunk
            ),
            args=(names[i::8],),
        )
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert created == [True] * 40
    # a retried task re-creating its own marker: known already, no conflict
    assert client.create_marker(Marker(a.instant, names[0], IOType.CREATE)) is False

    folder = markers_folder(a.instant)
    files = _files_under(table, folder)
    assert MARKER_TYPE_FILE in files
    assert (table.root / folder / MARKER_TYPE_FILE).read_text() == TIMELINE_SERVER_BASED
    batches = [f for f in files if f != MARKER_TYPE_FILE]
    assert batches, files
    assert all(f.startswith("MARKERS") and f[7:].isdigit() for f in batches), files
    lines = [line for f in batches for line in parse_marker_file((table.root / folder / f).read_bytes(), f)]
    assert sorted(lines) == sorted(f"{n}.marker.CREATE" for n in names)  # one marker path a line
    assert all((table.root / folder / f).read_text().endswith("\n") for f in batches)
    assert {m.data_path for m in list_markers(table, a.instant)} == set(names)

    # b, the later write, meets a's marker in p=1/fg-001 at its own marker: refused, with both named
    with pytest.raises(WriteConflictError) as lost:
        client.create_marker(Marker(b.instant, f"p=1/.fg-001_{a.instant}.log.1_0-1-0", IOType.APPEND))
    assert (lost.value.instant, lost.value.other, lost.value.stage) == (b.instant, a.instant, "early")
    assert lost.value.file_groups == ("p=1/fg-001",)
    assert f"write {b.instant} and running write {a.instant} both touch 1 file group(s)" in str(lost.value)
    # asked again, and by the driver's periodic check: the same conflict, announced only once
    with pytest.raises(WriteConflictError):
        client.create_marker(Marker(b.instant, _base(b, "p=1", "fg-900"), IOType.CREATE))
    conflict = client.check(b.instant, [])
    assert conflict is not None
    assert conflict.other == a.instant
    assert not list_markers(table, b.instant)  # refused markers are not written
    assert client.markers_exist(a.instant)
    assert not client.markers_exist(b.instant)
    client.end(b.instant, "conflicted", conflict)
    client.end(a.instant, "committed")

    topic, _ = topics
    wanted = {EventType.WRITE_STARTED: 2, EventType.WRITE_CONFLICTED: 1, EventType.WRITE_ABORTED: 1}

    def enough(messages: list[Any]) -> bool:
        seen = events_of(messages, topic)
        return all(len(of_type(seen, t)) >= n for t, n in wanted.items())

    events = events_of(read_topics(kafka_broker.bootstrap, [topic], enough, seconds=20), topic)
    assert {e.instant for e in of_type(events, EventType.WRITE_STARTED)} == {a.instant, b.instant}
    (conflicted,) = of_type(events, EventType.WRITE_CONFLICTED)
    assert (conflicted.instant, conflicted.table, conflicted.state) == (b.instant, location, "CONFLICTED")
    assert conflicted.extra["other"] == a.instant
    assert conflicted.extra["stage"] == "early"
    assert conflicted.extra["fileGroups"] == "p=1/fg-001"
    assert [e.instant for e in of_type(events, EventType.WRITE_ABORTED)] == [b.instant]

    metrics = coordinator.metrics()
    assert metric_value(metrics, "tidemark_coordinator_markers_created_total", table=location) == 40
    assert metric_value(metrics, "tidemark_coordinator_conflicts_total", table=location, stage="early") == 1
    assert metric_value(metrics, "tidemark_coordinator_live_writes", table=location) == 0
    batches_written = metric_value(metrics, "tidemark_coordinator_batch_markers_count")
    assert batches_written is not None
    assert 1 <= batches_written <= 40


def test_a_conflict_found_at_commit_is_announced_with_its_stage(
    coordinator: CoordinatorProcess, table: LocalStorage, kafka_broker: TansuBroker, topics: tuple[str, str]
) -> None:
    location = str(table.root)
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(location)
    client.register(b.start, LIVE)
    found = WriteConflictError(
        "write conflict: …", instant=b.instant, other="20200101000000000", file_groups=("p=1/fg-1",), stage="commit"
    )
    client.end(b.instant, "conflicted", found)
    topic, _ = topics
    events = events_of(
        read_topics(
            kafka_broker.bootstrap,
            [topic],
            lambda ms: bool(of_type(events_of(ms, topic), EventType.WRITE_CONFLICTED)),
            seconds=20,
        ),
        topic,
    )
    (conflicted,) = of_type(events, EventType.WRITE_CONFLICTED)
    assert conflicted.extra["stage"] == "commit"
    assert coordinator.metric("tidemark_coordinator_conflicts_total", table=location, stage="commit") == 1


def test_bad_requests_get_a_4xx_with_a_reason_and_change_nothing(
    coordinator: CoordinatorProcess, table: LocalStorage, tmp_path: Path
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    before = _files_under(table, ".hoodie")
    good = {"table": location, "instant": a.instant, "marker": _base(a, "p=1", "fg-1") + ".marker.CREATE"}
    cases: list[tuple[str, bytes, int, str]] = [
        ("/v1/markers/create", b"{not json", 400, "not JSON"),
        ("/v1/markers/create", b"[1, 2]", 400, "JSON object"),
        (
            "/v1/markers/create",
            json.dumps({**good, "table": str(tmp_path / "nowhere")}).encode(),
            404,
            "not a Hudi table",
        ),
        (
            "/v1/markers/create",
            json.dumps({**good, "marker": "../../etc/passwd.marker.CREATE"}).encode(),
            400,
            "inside",
        ),
        ("/v1/markers/create", json.dumps({**good, "marker": "/abs/f.parquet.marker.CREATE"}).encode(), 400, "inside"),
        ("/v1/markers/create", json.dumps({**good, "marker": "p=1/f.parquet.marker.WRITE"}).encode(), 400, "marker"),
        # a MARKERS<N> file holds a name a line: a newline would split one into two, and make
        # the write's markers unreadable to its rollback and to Hudi
        (
            "/v1/markers/create",
            json.dumps({**good, "marker": "p=1/x\nf.parquet.marker.CREATE"}).encode(),
            400,
            "control",
        ),
        (
            "/v1/markers/create",
            json.dumps({**good, "marker": "p=1/\ud800.parquet.marker.CREATE"}).encode(),
            400,
            "surrogate",
        ),
        ("/v1/markers/create", json.dumps({**good, "table": location + "\u0000x"}).encode(), 400, "control"),
        (
            "/v1/markers/create",
            json.dumps({**good, "table": str(table.root / ".hoodie" / "hoodie.properties")}).encode(),
            404,
            "not a Hudi table",
        ),
        ("/v1/markers/create", json.dumps({**good, "instant": "../x"}).encode(), 400, "instant"),
        ("/v1/markers/create", json.dumps({**good, "early_detection": "yes"}).encode(), 400, "early_detection"),
        ("/v1/markers/create", json.dumps({k: v for k, v in good.items() if k != "table"}).encode(), 400, "table"),
        ("/v1/markers/create", b"x" * (2 << 20), 413, "at most"),
        (
            "/v1/writes/end",
            json.dumps({"table": location, "instant": a.instant, "outcome": "maybe"}).encode(),
            400,
            "outcome",
        ),
        (
            "/v1/writes/end",
            json.dumps(
                {"table": location, "instant": a.instant, "outcome": "conflicted", "conflict": {"x": 1}}
            ).encode(),
            400,
            "'conflict'",
        ),
        ("/v1/nothing", b"{}", 404, "no endpoint"),
    ]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {coordinator.token}"}
    for path, data, status, reason in cases:
        got, answer = _post(coordinator.url, path, data, headers)
        assert got == status, (path, data[:80], got, answer)
        assert reason in answer.get("error", ""), (path, answer)
    assert _files_under(table, ".hoodie") == before
    assert not (tmp_path / "nowhere").exists()
    assert coordinator.alive
    # and it still serves a good request after all that
    assert _post(coordinator.url, "/v1/markers/create", json.dumps(good).encode(), headers)[0] == 200


def test_a_sigkilled_coordinator_restarts_with_its_index_rebuilt_from_storage(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(location)
    client.register(a.start, LIVE)
    names = [_base(a, "p=1", f"fg-{i}") for i in range(5)]
    for n in names:
        client.create_marker(Marker(a.instant, n, IOType.CREATE))
    coordinator.signal_and_wait(signal.SIGKILL, 5)
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    coordinator.restart()
    # no marker lost, and a conflict with a marker accepted before the kill is still found; a is
    # live by its heartbeat file although the new process never heard from it
    assert {m.data_path for m in list_markers(table, a.instant)} == set(names)
    assert sorted(client.markers(a.instant)) == sorted(f"{n}.marker.CREATE" for n in names)
    client.register(b.start, LIVE)
    with pytest.raises(WriteConflictError) as lost:
        client.create_marker(Marker(b.instant, _base(b, "p=1", "fg-3"), IOType.CREATE))
    assert lost.value.other == a.instant
    # a goes on through the restarted coordinator, in a new MARKERS file of its own
    assert client.create_marker(Marker(a.instant, _base(a, "p=2", "fg-9"), IOType.CREATE)) is True
    assert len(list_markers(table, a.instant)) == 6
    assert coordinator.metric("tidemark_coordinator_index_markers", table=location) == 6


def test_a_write_registered_before_a_restart_is_still_checked_early_at_its_first_marker_after_it(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    """The restarted process never saw b register and runs with Hudi's default (early detection
    off): b's marker carries b's own setting, so it meets a's marker at once, not at b's commit."""
    location = str(table.root)
    client = coordinator.client(location)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    client.register(a.start, LIVE)
    assert client.create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    client.register(b.start, LIVE)
    coordinator.signal_and_wait(signal.SIGKILL, 5)
    coordinator.restart()
    assert client.check(b.instant, []) is None  # b's driver checks first: nothing of b's yet
    task = CoordinatorMarkerWriter(
        client, b.instant, DirectMarkerWriter(table, b.instant, EarlyConflictDetector(table, LIVE, b.start))
    )
    with pytest.raises(WriteConflictError) as lost:
        task.create(f"p=1/.fg-1_{a.instant}.log.1_0-1-0", IOType.APPEND)
    assert (lost.value.instant, lost.value.other, lost.value.stage) == (b.instant, a.instant, "early")
    assert not task.fell_back  # refused by the coordinator, not found by a direct check
    assert not list_markers(table, b.instant)
    assert coordinator.metric("tidemark_coordinator_conflicts_total", table=location, stage="early") == 1


def test_markers_are_served_while_the_broker_is_down_and_events_follow_when_it_returns(
    fresh_broker: TansuBroker, table: LocalStorage
) -> None:
    topic, dead = unique_topics("coordinator")
    create_topics(fresh_broker.bootstrap, [topic, dead])
    location = str(table.root)
    with CoordinatorProcess(fresh_broker.bootstrap, topic, dead) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        fresh_broker.stop()
        a = begin_write(table, "deltacommit", "upsert", LIVE)
        client = coordinator.client(location)
        client.register(a.start, LIVE)
        for i in range(10):
            assert client.create_marker(Marker(a.instant, _base(a, "p=1", f"fg-{i}"), IOType.CREATE))
        assert len(list_markers(table, a.instant)) == 10
        wait_until(
            lambda: coordinator.metric("tidemark_announcements_unpublished", service="writer-coordinator") >= 1,
            20,
            "the write.started event held back while the broker is away",
        )
        fresh_broker.start()  # a broker with nothing: the topic comes back when first written
        create_topics(fresh_broker.bootstrap, [topic, dead])
        found = read_topics(
            fresh_broker.bootstrap,
            [topic],
            lambda ms: bool(of_type(events_of(ms, topic), EventType.WRITE_STARTED)),
            seconds=60,
        )
        assert [e.instant for e in of_type(events_of(found, topic), EventType.WRITE_STARTED)] == [a.instant]


def test_two_replicas_on_one_table_never_overwrite_each_others_markers(
    kafka_broker: TansuBroker, topics: tuple[str, str], table: LocalStorage
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    with (
        CoordinatorProcess(kafka_broker.bootstrap, *topics) as one,
        CoordinatorProcess(kafka_broker.bootstrap, *topics) as two,
    ):
        for proc in (one, two):
            proc.start()
        for proc in (one, two):
            proc.wait_ready()
        clients = [p.client(location) for p in (one, two)]
        for c in clients:
            c.register(a.start, LIVE)
        # a's tasks spread over both replicas (a load balancer would do this), interleaved
        names = [_base(a, "p=1", f"fg-{i:02d}") for i in range(30)]
        for i, n in enumerate(names):
            clients[i % 2].create_marker(Marker(a.instant, n, IOType.CREATE))
        files = [f for f in _files_under(table, markers_folder(a.instant)) if f != MARKER_TYPE_FILE]
        assert len(files) == 2, files  # one file each, each claimed by one replica
        assert {m.data_path for m in list_markers(table, a.instant)} == set(names)


def test_a_writer_that_cannot_reach_the_coordinator_uses_direct_markers_with_a_warning(
    table: LocalStorage, caplog: pytest.LogCaptureFixture
) -> None:
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    nobody = CoordinatorClient(f"http://127.0.0.1:{free_port()}", str(table.root), timeout_s=2)
    writer = CoordinatorMarkerWriter(nobody, a.instant, DirectMarkerWriter(table, a.instant))
    before = COUNTERS.snapshot()["coordinator_fallbacks"]
    with caplog.at_level(logging.WARNING, logger="tidemark.coordinator"):
        for i in range(3):
            writer.create(_base(a, "p=1", f"fg-{i}"), IOType.CREATE)
    assert writer.fell_back
    assert COUNTERS.snapshot()["coordinator_fallbacks"] == before + 1
    warnings = [r.getMessage() for r in caplog.records if "direct markers" in r.getMessage()]
    assert len(warnings) == 1, warnings  # said once, not per marker
    assert "127.0.0.1" in warnings[0]
    direct = [f for f in _files_under(table, markers_folder(a.instant)) if f.endswith(".marker.CREATE")]
    assert len(direct) == 3
    assert len(list_markers(table, a.instant)) == 3


def test_a_commit_announced_on_kafka_is_a_conflict_for_a_write_that_started_before_it(
    coordinator: CoordinatorProcess, table: LocalStorage, kafka_broker: TansuBroker, topics: tuple[str, str]
) -> None:
    """The coordinator learns of completed writes from ``instant.completed`` (its own timeline
    read comes only every 30 s, Hudi's detector period) and confirms them on storage."""
    location = str(table.root)
    checks_commits = ConcurrencyConfig(
        heartbeat_interval_ms=60_000, early_detection=True, early_check_commit_conflict=True
    )
    a = begin_write(table, "deltacommit", "upsert", checks_commits)
    client = coordinator.client(location)
    client.register(a.start, checks_commits)
    assert client.create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))
    # another writer, not using the coordinator, commits to p=2/fg-2 after a started
    c = begin_write(table, "deltacommit", "upsert", checks_commits)
    rows = _rows(["k"], 1, "p=2")
    schema = avro_schema_json(rows.schema, "t")
    stat = create_base_file(table, TaskContext(c.instant, 0, 0, 0), "p=2", "fg-2", rows, rows["id"], schema)
    c.commit([stat], "upsert", schema)
    assert client.check(a.instant, ["p=2/fg-2"]) is None  # not known yet: its timeline is older
    topic, _ = topics
    with EventProducer(kafka_broker.bootstrap) as producer:
        publish_completed(producer, topic, location, [c.instant])
    wait_until(
        lambda: client.check(a.instant, ["p=2/fg-2"]) is not None,
        15,
        "the commit announced on Kafka found as a conflict",
    )
    found = client.check(a.instant, ["p=2/fg-2"])
    assert found is not None
    assert (found.other, found.file_groups, found.stage) == (c.instant, ("p=2/fg-2",), "early")
    with pytest.raises(WriteConflictError):  # and a's next marker is refused
        client.create_marker(Marker(a.instant, _base(a, "p=3", "fg-3"), IOType.CREATE))


def test_a_poison_event_goes_to_the_dead_letter_topic_and_the_coordinator_goes_on(
    coordinator: CoordinatorProcess, table: LocalStorage, kafka_broker: TansuBroker, topics: tuple[str, str]
) -> None:
    topic, dead = topics
    location = str(table.root)
    with EventProducer(kafka_broker.bootstrap) as producer:
        publish_poison(producer, topic, location)
    found = read_topics(kafka_broker.bootstrap, [dead], lambda ms: bool(ms), seconds=30)
    assert len(found) == 1
    reason = dict(found[0].headers)[DEAD_LETTER_REASON_HEADER].decode()
    assert "missing header" in reason, reason  # a type header and nothing else
    assert coordinator.metric("tidemark_events_dead_lettered_total", service="writer-coordinator") == 1
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    assert coordinator.client(location).create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))


def test_a_marker_for_a_write_that_is_over_stops_the_task_instead_of_falling_back(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(str(table.root))
    a.commit([], "upsert", "{}")
    writer = CoordinatorMarkerWriter(client, a.instant, DirectMarkerWriter(table, a.instant))
    with pytest.raises(InstantStateError, match="not a pending write"):
        writer.create(_base(a, "p=1", "fg-1"), IOType.CREATE)  # a zombie task of the committed write
    assert not writer.fell_back
    assert not list_markers(table, a.instant)


def test_a_late_renewal_of_a_rolled_back_write_writes_no_heartbeat_and_holds_no_conflict(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    # a write rolled back by another process (its driver stalled past its heartbeat) renews once
    # more: the coordinator wrote its heartbeat file again, which nothing removed, and kept it in
    # its conflict index, refusing other writers' markers in its file groups
    from tidemark.table.heartbeat import heartbeat_path
    from tidemark.table.write_client import rollback

    a = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(str(table.root))
    client.register(a.start, LIVE)
    assert client.create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))
    rollback(table, a.instant, ConcurrencyConfig(heartbeat_interval_ms=1))  # from another shell, a found dead
    assert not table.exists(heartbeat_path(a.instant))
    with pytest.raises(InstantStateError, match=f"{a.instant} is not a pending write"):
        client.register(a.start, LIVE, renew=True)
    assert not table.exists(heartbeat_path(a.instant))
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    client.register(b.start, LIVE)
    assert client.create_marker(Marker(b.instant, _base(b, "p=1", "fg-1"), IOType.CREATE))


def test_a_driver_whose_write_was_rolled_back_stops_renewing_and_says_so_once(
    coordinator: CoordinatorProcess, table: LocalStorage, caplog: pytest.LogCaptureFixture
) -> None:
    # its renewals were refused (410) every interval, each logged as a failure to renew, until
    # the driver reached its commit: a warning per heartbeat for a write that was already over
    from tidemark.table.write_client import rollback

    often = ConcurrencyConfig(heartbeat_interval_ms=100, early_detection=True)
    a = begin_write(table, "deltacommit", "upsert", often)
    session = CoordinatorSession(coordinator.client(str(table.root)), a.start, often)
    with caplog.at_level(logging.WARNING, logger="tidemark.coordinator"):
        assert session.open()
        rollback(table, a.instant, ConcurrencyConfig(heartbeat_interval_ms=1))  # from another shell
        assert session._thread is not None
        session._thread.join(timeout=10)  # it ends on its own
        assert not session._thread.is_alive()
        session.stop_renewing()
    said = [r.getMessage() for r in caplog.records if a.instant in r.getMessage()]
    assert len(said) == 1, said
    # a first registration answered so (a write the coordinator does not find pending) falls back
    # to direct markers, as any refusal does, where it raised and failed the write
    never_begun = WriteStart("20990101000000000", frozenset())
    assert not CoordinatorSession(coordinator.client(str(table.root)), never_begun, often).open()
    assert "no longer pending" in said[0], said[0]
    assert "no more renewals" in said[0], said[0]


def test_the_markers_of_a_pending_write_cannot_be_deleted_through_the_api(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    # they are how its commit removes its unaccepted attempts' files and its rollback finds its
    # files: POST /v1/markers/delete took them from a live write without a check
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(str(table.root))
    assert client.create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))
    with pytest.raises(CoordinatorError, match=f"409 {a.instant} is a pending write on .*deleted when it ends"):
        client.delete_markers(a.instant)
    assert client.markers(a.instant)
    a.commit([], "upsert", "{}")
    client.delete_markers(a.instant)  # over: they may go
    assert not list_markers(table, a.instant)


def test_a_task_declares_its_new_files_in_one_request_all_or_none(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(location)
    client.register(a.start, LIVE)
    client.register(b.start, LIVE)
    mine = [Marker(a.instant, _base(a, f"p={i % 3}", f"fg-{i}"), IOType.CREATE) for i in range(6)]
    assert client.create_markers(a.instant, [*mine, mine[0]]) == [True] * 6 + [False]  # a repeat: no conflict
    assert {m.data_path for m in list_markers(table, a.instant)} == {m.data_path for m in mine}  # on storage
    # b declares four files, one of them in a's fg-2: refused whole, nothing of b recorded
    theirs = [Marker(b.instant, _base(b, "p=9", f"fg-b{i}"), IOType.CREATE) for i in range(3)]
    theirs.append(Marker(b.instant, f"p=2/.fg-2_{a.instant}.log.1_0-1-0", IOType.APPEND))
    with pytest.raises(WriteConflictError) as lost:
        client.create_markers(b.instant, theirs)
    assert (lost.value.other, lost.value.file_groups) == (a.instant, ("p=2/fg-2",))
    assert not list_markers(table, b.instant)
    assert coordinator.metric("tidemark_coordinator_markers_created_total", table=location) == 6


def test_writers_that_spell_a_table_differently_meet_in_one_index_and_a_table_made_again_starts_clean(
    coordinator: CoordinatorProcess, table: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    first = coordinator.client(location + "/")
    first.register(a.start, LIVE)
    assert first.create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE)) is True
    b = begin_write(table, "deltacommit", "upsert", LIVE)
    monkeypatch.chdir(table.root.parent)  # a relative path is the writer's, not the coordinator's
    for spelling in (f"file://{location}", "table", f"{location}//"):
        second = coordinator.client(spelling)
        second.register(b.start, LIVE)
        with pytest.raises(WriteConflictError) as lost:
            second.create_marker(Marker(b.instant, _base(b, "p=1", "fg-1"), IOType.CREATE))
        assert lost.value.other == a.instant, spelling
    assert coordinator.metric("tidemark_coordinator_live_writes", table=location) == 2

    # the table deleted and made again at the same location: the old table's write, live as far
    # as the coordinator heard, is no rival of the new table's writes
    shutil.rmtree(table.root)
    again = LocalStorage(table.root)
    create_table(again, "t", ["id"], "ts", ["p"], True)
    c = begin_write(again, "deltacommit", "upsert", LIVE)
    third = coordinator.client(location)
    third.register(c.start, LIVE)
    assert third.create_marker(Marker(c.instant, _base(c, "p=1", "fg-1"), IOType.CREATE)) is True
    assert coordinator.metric("tidemark_coordinator_live_writes", table=location) == 1


def test_a_writer_gone_before_its_answer_is_one_log_line_not_a_traceback(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    """A writer that gave up waiting on a paused coordinator (its timeout, then direct markers)
    had closed its connection by the time the request was answered: the log got socketserver's
    "Exception occurred during processing of request" and a traceback for each such request."""
    write = begin_write(table, "deltacommit", "upsert", LIVE)
    body = json.dumps(
        {"table": str(table.root), "instant": write.instant, "marker": _base(write, "p=1", "fg-1") + ".marker.CREATE"}
    ).encode()
    head = (
        f"POST /v1/markers/create HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {coordinator.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    assert coordinator.pid is not None
    os.kill(coordinator.pid, signal.SIGSTOP)  # a long GC pause, a frozen node
    try:
        with socket.create_connection(("127.0.0.1", coordinator.http_port), timeout=5) as writer:
            writer.sendall(head.encode() + body)
        # ... and the writer gave up before the answer
    finally:
        os.kill(coordinator.pid, signal.SIGCONT)
    gone = "closed the connection before the answer to POST /v1/markers/create"
    wait_until(
        lambda: gone in coordinator.log_tail(100_000), 15, "the writer's leaving logged", detail=coordinator.log_tail
    )
    log = coordinator.log_tail(100_000)
    assert "Traceback" not in log, log
    assert "Exception occurred" not in log, log
    (line,) = [line for line in log.splitlines() if gone in line]
    assert "writer-coordinator WARNING 127.0.0.1 closed the connection" in line
    # it goes on serving
    coordinator.client(str(table.root)).register(write.start, LIVE)


def test_a_table_whose_markers_on_storage_are_damaged_gets_a_503_said_once_and_counted(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    """A dead write's ``MARKERS0`` overwritten with bytes that are not UTF-8: the coordinator
    answered every request for the table 400 (a bad request), logged nothing, counted nothing.
    It is damage on storage: a 503 (writers fall back to direct markers on it), one warning
    naming the table and the file, and each such answer counted with the fallbacks."""
    location = str(table.root)
    dead = begin_write(table, "deltacommit", "upsert", LIVE)
    dead.heartbeat.stop()
    write_marker_type(table, dead.instant)
    damaged = f"{markers_folder(dead.instant)}MARKERS0"
    table.write(damaged, b"p\xff\xfe\n")
    write = begin_write(table, "deltacommit", "upsert", LIVE)
    client = coordinator.client(location)
    for _ in range(3):
        with pytest.raises(CoordinatorUnavailableError, match=r"503 .*MARKERS0 is not a MARKERS file"):
            client.register(write.start, LIVE)
    log = coordinator.log_tail(100_000)
    said = [line for line in log.splitlines() if "markers on storage cannot be read" in line]
    assert len(said) == 1, log
    assert f"writer-coordinator WARNING {location}: its markers on storage cannot be read" in said[0]
    assert table.full_uri(damaged) in said[0]
    assert coordinator.metric("tidemark_coordinator_fallbacks_total", table=location) == 3
    assert coordinator.metric("tidemark_coordinator_bad_requests_total", reason="503") == 0

    # the dead write rolled back (its folder goes with it): the table is served again
    delete_markers(table, dead.instant)
    client.register(write.start, LIVE)
    assert client.create_marker(Marker(write.instant, _base(write, "p=1", "fg-1"), IOType.CREATE)) is True


def test_a_sigterm_publishes_the_queued_write_events_before_the_coordinator_exits(
    coordinator: CoordinatorProcess, table: LocalStorage, kafka_broker: TansuBroker, topics: tuple[str, str]
) -> None:
    """A rollout stops the coordinator right after writes registered: their events, queued by the
    HTTP threads for the service's loop, were only logged as not published, with the broker up."""
    client = coordinator.client(str(table.root))
    writes = [begin_write(table, "deltacommit", "upsert", LIVE) for _ in range(3)]
    for write in writes:
        client.register(write.start, LIVE)
    client.end(writes[0].instant, "aborted")
    assert coordinator.stop() == 0
    assert "not published" not in coordinator.log_tail(100_000)
    topic, _ = topics
    wanted = {EventType.WRITE_STARTED: 3, EventType.WRITE_ABORTED: 1}
    events = _published(kafka_broker.bootstrap, topic, wanted)
    assert sorted(e.instant for e in of_type(events, EventType.WRITE_STARTED)) == sorted(w.instant for w in writes)
    assert [e.instant for e in of_type(events, EventType.WRITE_ABORTED)] == [writes[0].instant]


def test_a_sigterm_with_the_broker_away_waits_a_few_seconds_and_names_the_events_not_published(
    fresh_broker: TansuBroker, table: LocalStorage
) -> None:
    topic, dead = unique_topics("coordinator")
    create_topics(fresh_broker.bootstrap, [topic, dead])
    with CoordinatorProcess(fresh_broker.bootstrap, topic, dead) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        fresh_broker.stop()
        a = begin_write(table, "deltacommit", "upsert", LIVE)
        coordinator.client(str(table.root)).register(a.start, LIVE)
        assert coordinator.stop(timeout_s=25) == 0  # within the chart's 30 s terminationGracePeriodSeconds
        log = coordinator.log_tail(100_000)
    said = [line for line in log.splitlines() if "events not published" in line]
    assert len(said) == 1, log
    assert f"stopping with 1 events not published: tidemark.write.started {a.instant} (deltacommit)" in said[0]


def test_a_registration_with_an_unknown_action_is_refused_naming_the_actions(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    """``"action": "bogus"`` was registered; each later batch with the write's markers then failed
    with a traceback, and the other writes' markers in it waited 5 s for a 503."""
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    a.heartbeat.stop(delete=True)
    body = {"table": str(table.root), "instant": a.instant, "start": a.start.to_json(), "action": "bogus"}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {coordinator.token}"}
    status, answer = _post(coordinator.url, "/v1/writes/register", json.dumps(body).encode(), headers)
    assert status == 400
    assert answer["error"] == "action must be one of commit, deltacommit, replacecommit, compaction, not 'bogus'"
    assert not (table.root / ".hoodie" / ".heartbeat" / a.instant).exists()  # nothing changed
    assert coordinator.metric("tidemark_coordinator_bad_requests_total", reason="400") == 1


def test_storage_failing_under_the_coordinator_is_counted_with_the_fallbacks(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    """The coordinator cannot write a write's heartbeat (an S3 role without write access): its
    writer gets a 503 and falls back to direct markers, which the fallback alert's counter did not
    count."""
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    a.heartbeat.stop(delete=True)
    (table.root / ".hoodie" / ".heartbeat" / a.instant).mkdir()  # where its heartbeat file goes
    client = coordinator.client(location)
    for _ in range(2):
        with pytest.raises(CoordinatorUnavailableError, match=r"503 .*storage failed"):
            client.register(a.start, LIVE)
    assert coordinator.metric("tidemark_coordinator_fallbacks_total", table=location) == 2
    assert coordinator.metric("tidemark_coordinator_bad_requests_total", reason="503") == 0


def test_events_of_a_copy_on_write_write_name_it_a_commit_after_a_restart(
    coordinator: CoordinatorProcess, tmp_path: Path, kafka_broker: TansuBroker, topics: tuple[str, str]
) -> None:
    """The restarted process had not seen the writes register: their events said deltacommit
    (and so had another ``ce_id``) where the timeline says commit."""
    table = LocalStorage(tmp_path / "cow")
    create_table(table, "t", ["id"], "ts", ["p"], True, {"hoodie.table.type": "COPY_ON_WRITE"})
    location = str(table.root)
    client = coordinator.client(location)
    a = begin_write(table, "commit", "upsert", LIVE)
    b = begin_write(table, "commit", "upsert", LIVE)
    client.register(a.start, LIVE, action="commit")
    client.register(b.start, LIVE, action="commit")
    assert client.create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))
    coordinator.signal_and_wait(signal.SIGKILL, 5)
    coordinator.restart()
    conflict = client.check(b.instant, ["p=1/fg-1"])
    assert conflict is not None
    client.end(b.instant, "conflicted", conflict)
    rollback(table, b.instant, own=True)  # before its driver ended it: on no timeline any more
    client.end(b.instant, "aborted")
    client.end(a.instant, "aborted")
    topic, _ = topics
    wanted = {EventType.WRITE_CONFLICTED: 1, EventType.WRITE_ABORTED: 3}
    events = _published(kafka_broker.bootstrap, topic, wanted)
    assert [(e.instant, e.action) for e in of_type(events, EventType.WRITE_CONFLICTED)] == [(b.instant, "commit")]
    assert sorted((e.instant, e.action) for e in of_type(events, EventType.WRITE_ABORTED)) == [
        (a.instant, "commit"),
        (b.instant, "commit"),
        (b.instant, "commit"),
    ]


def test_error_paths_of_the_api_answer_a_short_4xx_and_check_the_token_first(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    """A body nested 50,000 deep got no answer (a RecursionError traceback); PUT, DELETE and HEAD
    got 501 without the token being looked at; a table path too long for the file system got
    503 "storage failed" echoing it twice, 12 KB."""
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {coordinator.token}"}
    status, answer = _post(coordinator.url, "/v1/markers/create", b"[" * 50_000, headers)
    assert (status, answer["error"]) == (400, "the body is not JSON this API takes: it is nested too deeply")

    for method in ("PUT", "DELETE", "HEAD", "PATCH"):
        for given, expected in (({}, 401), (headers, 405)):
            request = urllib.request.Request(f"{coordinator.url}/v1/markers/create", method=method, headers=given)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == expected, (method, given)
            if expected == 405:
                assert refused.value.headers["Allow"] == "GET, POST"

    deep = str(table.root / "/".join(["d" * 250] * 24))  # 6 KB: over the file system's PATH_MAX
    body = {"table": deep, "instant": a.instant, "marker": _base(a, "p=1", "fg-1") + ".marker.CREATE"}
    status, answer = _post(coordinator.url, "/v1/markers/create", json.dumps(body).encode(), headers)
    assert status == 400, answer
    assert "cannot hold a table" in answer["error"]
    assert len(answer["error"]) < 1100
    assert coordinator.metric("tidemark_coordinator_fallbacks_total", table=location) == 0

    log = coordinator.log_tail(100_000)
    assert "Traceback" not in log, log
    assert "storage failed" not in log, log
    assert coordinator.client(location).create_marker(Marker(a.instant, _base(a, "p=1", "fg-1"), IOType.CREATE))
