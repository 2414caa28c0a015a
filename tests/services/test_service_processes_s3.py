"""``tidemark-cleaner`` and ``tidemark-archiver`` as real processes, as deployed: a real
Kafka-protocol broker (tansu), a table on S3 (the moto server over HTTP), metrics and health
scraped over HTTP. Events in, work done in the bucket, events out; duplicates and a poison event;
the broker restarted under running services; the S3 endpoint gone while an event is handled."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.model import apache_snapshot, data_rows, hudi_s3_options
from tests.support.s3 import create_bucket, s3_options, start_moto_server
from tests.support.services import (
    POISON_VALUE,
    ServiceProcess,
    create_topics,
    events_of,
    logs,
    of_type,
    publish_completed,
    publish_poison,
    read_topics,
    service_processes,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType
from tidemark.kafka_adapter import EventProducer, RawMessage
from tidemark.storage import Storage, open_storage
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import read_archived
from tidemark_services.runtime import DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SERVICE_HEADER

pytestmark = [pytest.mark.kafka, pytest.mark.s3]


@dataclass
class S3Table:
    """A table at ``s3://bucket/t`` written through :class:`TableBuilder`, with the snapshot it
    must read (key → value) kept alongside."""

    location: str
    endpoint: str
    storage: Storage
    builder: TableBuilder
    expected: dict[str, int] = field(default_factory=dict)
    replaced_groups: set[str] = field(default_factory=set)

    @classmethod
    def create(cls, endpoint: str) -> S3Table:
        location = f"s3://{create_bucket(endpoint)}/t"
        storage = open_storage(location, s3_options(endpoint))
        return cls(location, endpoint, storage, TableBuilder(storage))

    def insert(self, keys: list[str], value: int) -> str:
        self.expected.update(dict.fromkeys(keys, value))
        return self.builder.insert(keys, value)

    def update(self, keys: list[str], value: int) -> str:
        self.expected.update(dict.fromkeys(keys, value))
        return self.builder.update(keys, value)

    def overwrite(self, keys: list[str], value: int) -> str:
        self.replaced_groups |= set(self.builder.groups)
        self.expected = dict.fromkeys(keys, value)
        return self.builder.insert_overwrite(keys, value)

    def data_files(self) -> dict[str, int]:
        """Every file outside ``.hoodie/`` in the bucket, with its size."""
        return {i.path: i.size for i in self.storage.list() if not i.path.startswith(".hoodie/")}

    def cleans(self) -> tuple[list[str], list[str]]:
        """(completed, pending) clean instants on the active timeline."""
        cleans = load_timeline(self.storage).of_actions("clean")
        return [i.timestamp for i in cleans.completed()], [i.timestamp for i in cleans.pending()]

    def read_by_tidemark(self) -> dict[str, int]:
        rows = data_rows(read_snapshot(self.storage), "id")
        return {r["id"]: r["v"] for r in rows}

    def read_by_apache(self) -> dict[str, int]:
        rows = data_rows(apache_snapshot(self.location, hudi_s3_options(self.endpoint)), "id")
        return {r["id"]: r["v"] for r in rows}


def _write_history(t: S3Table, first_value: int = 1) -> list[str]:
    """Commits after which one clean deletes files (the file group an insert_overwrite replaced)
    and archival has instants to move."""
    v = first_value
    instants = [t.insert(["a", "b"], v), t.update(["a"], v + 1), t.overwrite(["a", "b"], v + 2)]
    instants.append(t.insert(["c"], v + 3))
    instants += [t.update(["a", "c"], v + i) for i in range(4, 8)]
    return instants


def _replaced_files(t: S3Table, files: dict[str, int]) -> set[str]:
    return {path for path in files if any(group in path.rsplit("/", 1)[-1] for group in t.replaced_groups)}


def _out(bootstrap: str, topics: list[str], *kinds: EventType, dead: int = 0) -> list[RawMessage]:
    """The topics' messages, read until each of ``kinds`` was published and ``dead`` messages are
    in the dead-letter topic (the second of ``topics``)."""

    def there(messages: list[RawMessage]) -> bool:
        events = events_of(messages, topics[0])
        dead_letters = sum(m.topic != topics[0] for m in messages)
        return all(of_type(events, kind) for kind in kinds) and dead_letters >= dead

    return read_topics(bootstrap, topics, there)


def test_service_processes_clean_and_archive_a_table_on_s3(kafka_broker: Any, moto_server: str) -> None:
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = S3Table.create(moto_server)
    instants = _write_history(t)
    before = t.data_files()
    doomed = _replaced_files(t, before)
    assert doomed, "the replaced file group has files in the bucket"
    with service_processes(["cleaner", "archiver"], kafka_broker.bootstrap, topic, dlq, s3_endpoint=moto_server) as (
        cleaner,
        archiver,
    ):
        with EventProducer(kafka_broker.bootstrap) as producer:
            publish_completed(producer, topic, t.location, instants, times=2)  # every event twice
            publish_poison(producer, topic, t.location)

        def done() -> bool:
            return (
                archiver.metric("tidemark_archive_instants_total") > 0
                and cleaner.metric("tidemark_service_runs_total") >= 2 * len(instants)
                and cleaner.metric("tidemark_events_dead_lettered_total") >= 1
                and archiver.metric("tidemark_events_dead_lettered_total") >= 1
            )

        wait_until(done, 60, "cleaned, archived, poison dead-lettered", detail=lambda: logs(cleaner, archiver))

        # work done on S3: one clean, which deleted exactly the files of the replaced file group
        completed, pending = t.cleans()
        assert len(completed) == 1, "sixteen events, one clean: duplicates and the trigger do nothing twice"
        assert not pending
        after = t.data_files()
        deleted = set(before) - set(after)
        assert deleted == doomed
        assert set(after) <= set(before)
        # archived: Hudi v6 archive log files under .hoodie/archived/, every instant exactly once
        assert [i.path for i in t.storage.list(".hoodie/archived/") if i.path.startswith(".hoodie/archived/.commits_")]
        archived = {a.timestamp for a in read_archived(t.storage)}
        active = {i.timestamp for i in load_timeline(t.storage)}
        assert archived
        assert not archived & active
        assert set(instants) | set(completed) <= archived | active

        # events out; the poison event in the dead-letter topic once per service, with the reason
        messages = _out(
            kafka_broker.bootstrap, [topic, dlq], EventType.CLEAN_COMPLETED, EventType.ARCHIVE_COMPLETED, dead=2
        )
        events = events_of(messages, topic)
        cleaned = of_type(events, EventType.CLEAN_COMPLETED)
        assert [e.instant for e in cleaned] == completed
        assert cleaned[0].earliest_commit_to_not_archive
        assert cleaned[0].extra["filesDeleted"] == str(len(deleted))
        announced = of_type(events, EventType.ARCHIVE_COMPLETED)
        assert len(announced) == 1
        assert announced[0].extra["instantsArchived"] == str(len(archived))
        assert announced[0].instant == max(archived)
        dead = [m for m in messages if m.topic == dlq]
        assert len(dead) == 2  # one copy by each service (each consumes with its own group)
        copied_by = sorted(v for m in dead for k, v in m.headers if k == DEAD_LETTER_SERVICE_HEADER)
        assert copied_by == [b"archiver", b"cleaner"]
        for m in dead:
            assert m.value == POISON_VALUE
            assert m.key == t.location.encode()
            reasons = [v for k, v in m.headers if k == DEAD_LETTER_REASON_HEADER]
            assert len(reasons) == 1, m.headers
            assert reasons[0], m.headers

        # metrics over HTTP agree with what happened in the bucket
        table = {"table": t.location}
        assert cleaner.metric("tidemark_clean_files_deleted_total", **table) == len(deleted)
        assert cleaner.metric("tidemark_clean_bytes_reclaimed_total", **table) == sum(before[p] for p in deleted)
        assert cleaner.metric("tidemark_service_runs_total", outcome="ok") == 1
        assert cleaner.metric("tidemark_service_runs_total", outcome="nothing-to-do") == 2 * len(instants) - 1
        assert archiver.metric("tidemark_archive_instants_total", **table) == len(archived)
        assert archiver.metric("tidemark_active_timeline_instants", **table) == len(active)
        for proc in (cleaner, archiver):
            assert proc.metric("tidemark_events_dead_lettered_total", service=proc.name) == 1
            assert proc.metric("tidemark_service_runs_total", outcome="error") == 0
            assert proc.metric("tidemark_seconds_since_last_success", service=proc.name) < 60
            assert time.time() - proc.metric("tidemark_last_success_timestamp_seconds", service=proc.name) < 60
            assert proc.health() == (200, f"{proc.name}: ok\n")
        assert cleaner.stop() == 0, cleaner.log_tail()
        assert archiver.stop() == 0, archiver.log_tail()

    # both readers read, from S3, the snapshot the writes made
    assert t.read_by_tidemark() == t.expected
    assert t.read_by_apache() == t.expected


def test_broker_restarted_under_running_service_processes(fresh_broker: Any, moto_server: str) -> None:
    topic, dlq = unique_topics()
    create_topics(fresh_broker.bootstrap, [topic, dlq])
    t = S3Table.create(moto_server)
    first = [t.insert(["a", "b"], 1), t.update(["a"], 2)]  # fewer commits than the clean trigger
    with service_processes(["cleaner", "archiver"], fresh_broker.bootstrap, topic, dlq, s3_endpoint=moto_server) as (
        cleaner,
        archiver,
    ):
        with EventProducer(fresh_broker.bootstrap) as producer:
            publish_completed(producer, topic, t.location, first)
        # the cleaner joined its group, handled and committed the first events; the archiver
        # consumed them too (not its type) and commits them while the broker goes away
        wait_until(
            lambda: cleaner.metric("tidemark_service_runs_total", outcome="nothing-to-do") == len(first),
            30,
            "the cleaner handled the first events",
            detail=cleaner.log_tail,
        )

        fresh_broker.stop()
        time.sleep(3)  # the clients notice: connections refused, heartbeats and fetches fail
        for proc in (cleaner, archiver):
            assert proc.alive, proc.log_tail()
            assert proc.health()[0] == 200

        fresh_broker.restart()  # memory storage: topics, messages, groups and offsets are gone
        create_topics(fresh_broker.bootstrap, [topic, dlq])
        more = [t.overwrite(["a", "b"], 3), t.insert(["c"], 4)] + [t.update(["a", "c"], v) for v in range(5, 8)]
        with EventProducer(fresh_broker.bootstrap) as producer:
            publish_completed(producer, topic, t.location, more)

        wait_until(
            lambda: archiver.metric("tidemark_archive_instants_total") > 0,
            60,
            "cleaned and archived after the restart",
            detail=lambda: logs(cleaner, archiver),
        )
        completed, pending = t.cleans()
        assert len(completed) == 1
        assert not pending
        assert not _replaced_files(t, t.data_files())
        assert read_archived(t.storage)
        events = events_of(_out(fresh_broker.bootstrap, [topic], EventType.ARCHIVE_COMPLETED), topic)
        assert [e.instant for e in of_type(events, EventType.CLEAN_COMPLETED)] == completed
        assert len(of_type(events, EventType.ARCHIVE_COMPLETED)) == 1
        for proc in (cleaner, archiver):
            assert proc.alive, proc.log_tail()
            assert proc.health()[0] == 200
            assert proc.stop() == 0, proc.log_tail()
    assert t.read_by_tidemark() == t.expected
    assert t.read_by_apache() == t.expected


class _MotoServer:
    """A moto server of one test, which the test may stop and start again on the same port. moto
    keeps buckets in this process's memory, not in the server: a restarted server has them all."""

    def __init__(self) -> None:
        self.server: Any
        self.server, self.endpoint = start_moto_server()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        port = urllib.parse.urlsplit(self.endpoint).port
        assert port is not None
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()


@pytest.fixture
def restartable_moto(fake_aws_env: None) -> Iterator[_MotoServer]:
    moto = _MotoServer()
    try:
        yield moto
    finally:
        moto.stop()


def test_s3_endpoint_gone_while_an_event_is_handled(kafka_broker: Any, restartable_moto: _MotoServer) -> None:
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = S3Table.create(restartable_moto.endpoint)
    instants = _write_history(t)
    doomed = _replaced_files(t, t.data_files())
    assert doomed
    with service_processes(["cleaner"], kafka_broker.bootstrap, topic, dlq, s3_endpoint=restartable_moto.endpoint) as (
        svc,
    ):
        assert svc.health()[0] == 200
        restartable_moto.stop()
        with EventProducer(kafka_broker.bootstrap) as producer:
            publish_completed(producer, topic, t.location, instants[-1:])  # one event, once

        # it fails, is not committed, so it comes back and fails again; the process stays up
        _failed_twice(svc)
        status, body = svc.health()
        assert status == 503, body
        assert t.location in body  # says which table failed
        assert svc.alive
        assert svc.metric("tidemark_service_runs_total", outcome="ok") == 0

        restartable_moto.start()
        wait_until(
            lambda: svc.metric("tidemark_service_runs_total", outcome="ok") == 1,
            60,
            "the event handled once S3 is back",
            detail=svc.log_tail,
        )
        assert svc.health() == (200, "cleaner: ok\n")
        completed, pending = t.cleans()
        assert len(completed) == 1
        assert not pending
        assert not _replaced_files(t, t.data_files())
        assert svc.metric("tidemark_clean_files_deleted_total", table=t.location) == len(doomed)
        events = events_of(_out(kafka_broker.bootstrap, [topic], EventType.CLEAN_COMPLETED), topic)
        assert [e.instant for e in of_type(events, EventType.CLEAN_COMPLETED)] == completed
        assert svc.stop() == 0, svc.log_tail()
    assert t.read_by_tidemark() == t.expected


def test_an_event_for_a_bucket_the_endpoint_does_not_have_is_dead_lettered(kafka_broker: Any, moto_server: str) -> None:
    """An event naming a bucket the S3 endpoint does not have (a mistyped location, a deleted
    bucket) was retried for ever, and every later event of its partition, for every table,
    waited behind it. It holds no table, as a folder without one does: dead-lettered with why,
    and other tables' events are served."""
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = S3Table.create(moto_server)
    instants = _write_history(t)
    with service_processes(["cleaner"], kafka_broker.bootstrap, topic, dlq, s3_endpoint=moto_server) as (svc,):
        with EventProducer(kafka_broker.bootstrap) as producer:
            publish_completed(producer, topic, "s3://no-such-bucket/t", instants[-1:])
            publish_completed(producer, topic, t.location, instants[-1:])
        # (the two tables' events may land on different partitions: both are waited for)
        wait_until(
            lambda: (
                svc.metric("tidemark_service_runs_total", outcome="ok") == 1
                and svc.metric("tidemark_service_runs_total", outcome="rejected") == 1
            ),
            60,
            "the event dead-lettered and the other served",
            detail=svc.log_tail,
        )
        assert svc.metric("tidemark_service_runs_total", outcome="error") == 0
        assert svc.health() == (200, "cleaner: ok\n")
        assert svc.stop() == 0, svc.log_tail()
    dead = read_topics(kafka_broker.bootstrap, [dlq], bool, 30)
    reasons = [dict(d.headers)[DEAD_LETTER_REASON_HEADER].decode() for d in dead]
    assert reasons == [
        f"cannot read s3://no-such-bucket/t/.hoodie/hoodie.properties: bucket 'no-such-bucket' does not exist at "
        f"the S3 endpoint {moto_server}"
    ]
    completed, _ = t.cleans()
    assert len(completed) == 1


def _failed_twice(svc: ServiceProcess) -> None:
    """The event failed, was not committed, came back and failed again; the process stays up."""
    wait_until(
        lambda: svc.metric("tidemark_service_runs_total", outcome="error") >= 2,
        60,
        "the event failed twice (delivered again after the first failure)",
        detail=svc.log_tail,
    )


def test_an_endpoint_that_is_not_s3_is_retried_not_dead_lettered(
    kafka_broker: Any, moto_server: str, not_s3_endpoint: str
) -> None:
    """A cleaner whose --s3-endpoint reached a web app or proxy (404, empty body, to everything)
    dead-lettered each event as "not a Hudi table" and said ok on /healthz: the events were lost
    though the endpoint was at fault. It is retried as an unreachable endpoint is, and a cleaner
    given the right endpoint then gets the event."""
    topic, dlq = unique_topics()
    create_topics(kafka_broker.bootstrap, [topic, dlq])
    t = S3Table.create(moto_server)
    instants = _write_history(t)
    doomed = _replaced_files(t, t.data_files())
    assert doomed
    with service_processes(["cleaner"], kafka_broker.bootstrap, topic, dlq, s3_endpoint=not_s3_endpoint) as (svc,):
        with EventProducer(kafka_broker.bootstrap) as producer:
            publish_completed(producer, topic, t.location, instants[-1:])
        _failed_twice(svc)
        status, body = svc.health()
        assert status == 503, body
        assert f"S3 endpoint {not_s3_endpoint} answered 404 without an S3 error: is it an S3 endpoint?" in body
        assert "not a Hudi table" not in body
        assert svc.readiness()[0] == 503
        assert svc.metric("tidemark_events_dead_lettered_total") == 0
        assert svc.metric("tidemark_service_runs_total", outcome="rejected") == 0
        assert svc.stop() == 0, svc.log_tail()
    assert t.cleans() == ([], [])

    # the event was not committed: the cleaner given the right endpoint cleans the table
    with service_processes(["cleaner"], kafka_broker.bootstrap, topic, dlq, s3_endpoint=moto_server) as (svc,):
        wait_until(
            lambda: svc.metric("tidemark_service_runs_total", outcome="ok") == 1,
            60,
            "the event handled with the right endpoint",
            detail=svc.log_tail,
        )
        assert svc.stop() == 0, svc.log_tail()
    completed, pending = t.cleans()
    assert len(completed) == 1
    assert not pending
    assert not _replaced_files(t, t.data_files())
    assert t.read_by_tidemark() == t.expected
