"""The services as real processes on a real Kafka-protocol broker (tansu), SIGKILLed in the middle
of their work (see :mod:`tests.support.crash`): the event they were handling is not committed, so
a restarted process in the same consumer group receives it again and finishes the work exactly
once, and announces it. Each service takes a few seconds to join its group, and the restarted
one waits for the broker to drop the killed member (the 6 s session)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import crash
from tests.support.crash import KillAt
from tests.support.table_builder import TableBuilder
from tidemark.cli import EXIT_TERMINATED
from tidemark.errors import EventDecodeError
from tidemark.events import EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics
from tidemark.storage import LocalStorage, S3Options
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.lock import TableLock
from tidemark.table_services.archive import ArchiveConfig, archive, plan_archive
from tidemark.table_services.clean import CleanConfig, clean, plan_clean
from tidemark.timeline import CLEAN, State, load_timeline, next_instant_time, read_instant
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.archived import archived_entries, latest_archival_block, read_archived, write_archived
from tidemark_services import archiver, cleaner
from tidemark_services.runtime import ServiceMetrics

CONF = {
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.clean.max.commits": "3",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    # a process killed while it holds the table lock leaves its lease behind; the restarted one
    # takes it over once it expires (a 1 s lease keeps that wait short)
    "hoodie.write.lock.storage.validity.timeout.secs": "1",
}


def _table(path: Path) -> tuple[TableBuilder, str, dict[str, int]]:
    """Updates, an insert_overwrite (replaced file groups for the cleaner), more updates; the last
    instant and what a snapshot holds."""
    t = TableBuilder(LocalStorage(path))
    t.insert(["a", "b"], 1)
    t.insert(["c"], 1)
    for v in range(2, 5):
        t.update(["a", "c"], v)
    t.insert_overwrite(["d", "e"], 5)
    last = ""
    for v in range(6, 9):
        last = t.update(["d"], v)
    return t, last, {"d": 8, "e": 5}


@pytest.fixture
def topic(kafka_broker: Any) -> str:
    name = f"timeline-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, [name])
    return name


class Service:
    """``tidemark-cleaner`` or ``tidemark-archiver`` in a child process (see :func:`crash.start`)."""

    def __init__(self, entry: str, broker: Any, topic: str, group: str, log: Path, kill: KillAt | None = None):
        argv = ["--bootstrap", broker.bootstrap, "--topic", topic, "--group", group, "--metrics-port", "0"]
        argv += [arg for key, value in CONF.items() for arg in ("--conf", f"{key}={value}")]
        self.log = log
        self.proc = crash.start(entry, argv, log, kill)

    def wait_killed(self, timeout_s: float = 40) -> None:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the service was not killed in {timeout_s}s: {self.stderr()}") from None
        assert code == -9, f"the service exited with {code}, not by SIGKILL: {self.stderr()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the service stops after its poll, or stops its run
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def stderr(self) -> str:
        return self.log.with_suffix(".out").read_text(errors="replace")[-2000:]


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for s in started:
        s.stop()


def _events_until(
    broker: Any, topic: str, done: Callable[[list[TimelineEvent]], bool], timeout_s: float = 40
) -> list[TimelineEvent]:
    """Every decodable event on ``topic`` from the start, read until ``done`` says enough."""
    reader = EventConsumer(broker.bootstrap, [topic], f"reader-{uuid.uuid4().hex[:6]}")
    seen: list[TimelineEvent] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done(seen):
            for m in reader.poll(0.5):
                try:
                    seen.append(decode(m.key, m.value, m.headers))
                except EventDecodeError:
                    continue
    finally:
        reader.close()
    return seen


def _data_files(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts}


@pytest.mark.kafka
def test_cleaner_killed_mid_clean_is_finished_once_by_the_restarted_service(
    kafka_broker: Any, topic: str, tmp_path: Path, services: list[Service]
) -> None:
    path = tmp_path / "t"
    t, last, model = _table(path)
    plan = plan_clean(t.storage, CleanConfig.from_conf(CONF))
    planned = {f for files in plan.files_to_delete.values() for f in files}
    assert len(planned) >= 5, "the clean must have several files to delete"
    before = _data_files(path)
    group = f"cleaner-{uuid.uuid4().hex[:6]}"
    with EventProducer(kafka_broker.bootstrap) as producer:
        producer.publish(topic, TimelineEvent(EventType.INSTANT_COMPLETED, str(path), last, "deltacommit", "COMPLETED"))

    # killed right after the third of its deletes of data files (not the release of its instant time's claim)
    third_delete = KillAt(3, "after", r"^delete (?!\.hoodie/)")
    first = Service("tidemark-cleaner", kafka_broker, topic, group, tmp_path / "first.log", third_delete)
    services.append(first)
    first.wait_killed()
    timeline = load_timeline(t.storage)
    (pending,) = timeline.pending().of_actions(CLEAN).instants
    assert not timeline.completed().of_actions(CLEAN).instants
    assert len(before - _data_files(path)) == 3

    # the same group: the uncommitted event comes back to the restarted service
    second = Service("tidemark-cleaner", kafka_broker, topic, group, tmp_path / "second.log")
    services.append(second)
    seen = _events_until(kafka_broker, topic, lambda seen: any(e.type is EventType.CLEAN_COMPLETED for e in seen))
    second.stop()
    announced = [e for e in seen if e.type is EventType.CLEAN_COMPLETED]
    assert len(announced) == 1, seen
    assert announced[0].instant == pending.timestamp
    assert announced[0].extra["filesDeleted"] == str(len(planned))
    timeline = load_timeline(t.storage)
    assert not timeline.pending().instants
    (done,) = timeline.completed().of_actions(CLEAN).instants
    assert done.timestamp == pending.timestamp, "the interrupted clean was finished, no second one made"
    metadata = avro.deserialize(read_instant(t.storage, done), "HoodieCleanMetadata", str(done))
    recorded = [f"{p}/{f}" for p, m in metadata["partitionMetadata"].items() for f in m["successDeleteFiles"]]
    assert sorted(recorded) == sorted(planned), "every planned file recorded as deleted, once"
    assert _data_files(path) == before - planned
    assert t.snapshot() == model


@pytest.mark.kafka
def test_a_cleaner_waiting_for_the_table_lock_stops_on_sigterm_and_the_next_process_cleans(
    kafka_broker: Any, topic: str, tmp_path: Path, services: list[Service]
) -> None:
    """A SIGTERM (a pod stopped) to a cleaner whose run waited for the table lock stopped nothing:
    the run waited on (50 s seen), cleaned, and the process exited only then, past the pod's 30 s
    grace period to a SIGKILL; nothing in its log said a SIGTERM had come."""
    path = tmp_path / "t"
    t, last, model = _table(path)
    planned = {
        f for files in plan_clean(t.storage, CleanConfig.from_conf(CONF)).files_to_delete.values() for f in files
    }
    before = _data_files(path)
    group = f"cleaner-{uuid.uuid4().hex[:6]}"
    with TableLock(t.storage, ConcurrencyConfig(lock_lease_ms=60_000)):  # another process's work on the table
        with EventProducer(kafka_broker.bootstrap) as producer:
            producer.publish(
                topic, TimelineEvent(EventType.INSTANT_COMPLETED, str(path), last, "deltacommit", "COMPLETED")
            )
        first = Service("tidemark-cleaner", kafka_broker, topic, group, tmp_path / "first.log")
        services.append(first)
        deadline = time.monotonic() + 60
        while "waiting for the table lock" not in first.stderr():
            assert first.proc.poll() is None, first.stderr()
            assert time.monotonic() < deadline, first.stderr()
            time.sleep(0.2)
        first.proc.terminate()
        started = time.monotonic()
        code = first.proc.wait(20)
        assert time.monotonic() - started < 10, first.stderr()
        assert code == EXIT_TERMINATED, first.stderr()
        said = (tmp_path / "first.out").read_text()
        assert f"SIGTERM: stopping the run for {EventType.INSTANT_COMPLETED} on {path};" in said
        assert _data_files(path) == before
        assert not load_timeline(t.storage).of_actions(CLEAN).instants  # nothing planned
    # the event was not committed: the next process in the group gets it again and cleans
    second = Service("tidemark-cleaner", kafka_broker, topic, group, tmp_path / "second.log")
    services.append(second)
    seen = _events_until(kafka_broker, topic, lambda seen: any(e.type is EventType.CLEAN_COMPLETED for e in seen))
    second.stop()
    assert [e.type for e in seen].count(EventType.CLEAN_COMPLETED) == 1, seen
    assert _data_files(path) == before - planned
    assert t.snapshot() == model


@pytest.mark.kafka
def test_archiver_killed_after_writing_the_archive_is_finished_once_by_the_restarted_service(
    kafka_broker: Any, topic: str, tmp_path: Path, services: list[Service]
) -> None:
    path = tmp_path / "t"
    t, _, model = _table(path)
    cleaned = clean(t.storage, CleanConfig.from_conf(CONF))
    assert cleaned is not None
    active = {(i.timestamp, i.action) for i in load_timeline(t.storage)}
    group = f"archiver-{uuid.uuid4().hex[:6]}"
    with EventProducer(kafka_broker.bootstrap) as producer:
        producer.publish(
            topic, TimelineEvent(EventType.CLEAN_COMPLETED, str(path), cleaned.instant.timestamp, "clean", "COMPLETED")
        )

    # killed after the archive file is written, before any active instant file is removed
    first = Service(
        "tidemark-archiver", kafka_broker, topic, group, tmp_path / "first.log", KillAt(1, "after", "archived/")
    )
    services.append(first)
    first.wait_killed()
    archived = [(a.timestamp, a.action) for a in read_archived(t.storage) if a.state is State.COMPLETED]
    assert len(archived) >= 5
    assert {(i.timestamp, i.action) for i in load_timeline(t.storage)} == active, "no active file removed yet"

    second = Service("tidemark-archiver", kafka_broker, topic, group, tmp_path / "second.log")
    services.append(second)
    seen = _events_until(kafka_broker, topic, lambda seen: any(e.type is EventType.ARCHIVE_COMPLETED for e in seen))
    second.stop()
    announced = [e for e in seen if e.type is EventType.ARCHIVE_COMPLETED]
    assert len(announced) == 1, seen
    assert announced[0].instant == max(ts for ts, _ in archived)
    assert announced[0].extra["instantsArchived"] == str(len(archived))
    # the restarted run only removed the active files: no second archive block
    assert [m.op for m in crash.read_log(tmp_path / "second.log")] == ["delete"] * (3 * len(archived))
    entries = [(a.timestamp, a.action, a.state) for a in read_archived(t.storage)]
    assert len(entries) == len(set(entries)), "each archived state once"
    now_active = {(i.timestamp, i.action) for i in load_timeline(t.storage)}
    assert not now_active & set(archived), "nothing both active and archived"
    assert now_active | set(archived) == active, "nothing lost"
    assert t.snapshot() == model


def test_the_archiver_announces_an_archival_a_killed_run_wrote_but_did_not_finish(tmp_path: Path) -> None:
    """Regression: after a kill between writing the archive file and removing the active files,
    the next run finished the removal but published no ``archive.completed``: nobody ever did."""
    path = tmp_path / "t"
    t, _, model = _table(path)
    cleaned = clean(t.storage, CleanConfig.from_conf(CONF))
    assert cleaned is not None
    plan = plan_archive(t.storage, ArchiveConfig.from_conf(CONF))
    assert len(plan.instants) >= 5
    # what the killed run left: the archive file written, every active instant file still there
    entries = [e for i in plan.instants for e in archived_entries(t.storage, i)]
    write_archived(t.storage, entries, next_instant_time(load_timeline(t.storage)))
    handle = archiver.make_handler(CONF, S3Options(), ServiceMetrics("archiver"))
    event = TimelineEvent(EventType.CLEAN_COMPLETED, str(path), cleaned.instant.timestamp, "clean", "COMPLETED")
    (announced,) = handle(event)
    assert announced.type is EventType.ARCHIVE_COMPLETED
    assert announced.instant == plan.instants[-1].timestamp
    assert announced.extra["instantsArchived"] == str(len(plan.instants))
    assert "stoppedBy" not in announced.extra, "the killed run's guard is not recorded; this run's plan is not it"
    assert not {i.timestamp for i in load_timeline(t.storage)} & {i.timestamp for i in plan.instants}
    assert handle(event) == [], "redelivered once more: nothing left to do or announce"
    assert t.snapshot() == model


def test_a_clean_announced_by_nobody_is_announced_by_the_next_process(tmp_path: Path) -> None:
    """A cleaner killed after its clean completed but before publishing ``clean.completed``: the
    event comes back to a new process with nothing left to do, which announces that clean, once,
    under the id the lost announcement had."""
    path = tmp_path / "t"
    t, last, model = _table(path)
    done = clean(t.storage, CleanConfig.from_conf(CONF))  # what the killed process finished
    assert done is not None
    event = TimelineEvent(EventType.INSTANT_COMPLETED, str(path), last, "deltacommit", "COMPLETED")
    handle = cleaner.make_handler(CONF, S3Options(), ServiceMetrics("cleaner"))
    (announced,) = handle(event)
    assert announced.type is EventType.CLEAN_COMPLETED
    assert announced.instant == done.instant.timestamp
    assert (
        announced.id
        == TimelineEvent(EventType.CLEAN_COMPLETED, str(path), done.instant.timestamp, "clean", "COMPLETED").id
    )
    assert announced.extra["filesDeleted"] == str(len(done.deleted))
    assert announced.earliest_commit_to_not_archive == done.plan.earliest_commit_to_not_archive
    assert handle(event) == [], "the same process announces it once"
    later = t.update(["d"], 9)
    fresh = cleaner.make_handler(CONF, S3Options(), ServiceMetrics("cleaner"))
    after = TimelineEvent(EventType.INSTANT_COMPLETED, str(path), later, "deltacommit", "COMPLETED")
    assert fresh(after) == [], "a clean older than the event is not what the event led to"
    assert len(load_timeline(t.storage).completed().of_actions(CLEAN)) == 1
    assert t.snapshot() == {**model, "d": 9}


def test_an_archival_announced_by_nobody_is_announced_by_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t, _, model = _table(path)
    cleaned = clean(t.storage, CleanConfig.from_conf(CONF))
    assert cleaned is not None
    finished = archive(t.storage, ArchiveConfig.from_conf(CONF))  # the killed process's work
    assert finished.plan.instants
    event = TimelineEvent(EventType.CLEAN_COMPLETED, str(path), cleaned.instant.timestamp, "clean", "COMPLETED")
    handle = archiver.make_handler(CONF, S3Options(), ServiceMetrics("archiver"))
    (announced,) = handle(event)
    assert announced.type is EventType.ARCHIVE_COMPLETED
    assert announced.instant == finished.plan.instants[-1].timestamp
    assert announced.extra["instantsArchived"] == str(len({i.timestamp for i in finished.plan.instants}))
    assert handle(event) == []
    assert t.snapshot() == model


def _archive_request(path: Path, instant: str) -> TimelineEvent:
    return TimelineEvent(EventType.ARCHIVE_REQUESTED, str(path), instant, "archive", "REQUESTED")


def test_a_request_after_the_latest_archival_with_nothing_to_archive_is_skipped_after_a_restart(tmp_path: Path) -> None:
    """Regression: a restarted archiver answered any first event of a table with the latest
    archival, so a request made after it, which archived nothing, got ``archive.completed`` (the
    operator took it as done) with a ``stoppedBy`` from the new run's plan."""
    path = tmp_path / "t"
    t, _, model = _table(path)
    assert clean(t.storage, CleanConfig.from_conf(CONF)) is not None
    before = _archive_request(path, next_instant_time(load_timeline(t.storage)))
    done = archive(t.storage, ArchiveConfig.from_conf(CONF))  # announced by the process that ran it
    assert done.plan.instants
    archival = latest_archival_block(t.storage)
    assert archival is not None
    assert archival.instant_time is not None
    after = _archive_request(path, next_instant_time(load_timeline(t.storage), after=archival.instant_time))

    (answer,) = archiver.make_handler(CONF, S3Options(), ServiceMetrics("archiver"))(after)
    assert answer.type is EventType.ARCHIVE_SKIPPED
    assert answer.instant == after.instant
    assert answer.extra["reason"].startswith("nothing to archive")

    # a request made before the archival may be the one it served (its answer lost): announced again,
    # without a stoppedBy, which the archive log does not record and the new run's plan cannot tell
    (again,) = archiver.make_handler(CONF, S3Options(), ServiceMetrics("archiver"))(before)
    assert again.type is EventType.ARCHIVE_COMPLETED
    assert again.instant == done.plan.instants[-1].timestamp
    assert again.extra == {"instantsArchived": str(len({i.timestamp for i in done.plan.instants}))}
    assert t.snapshot() == model


def test_a_clean_after_the_latest_archival_is_not_answered_with_it_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t, _, model = _table(path)
    assert clean(t.storage, CleanConfig.from_conf(CONF)) is not None
    assert archive(t.storage, ArchiveConfig.from_conf(CONF)).plan.instants
    later = t.update(["d"], 9)
    cleaned = clean(t.storage, CleanConfig.from_conf(CONF))
    assert cleaned is not None
    assert not plan_archive(t.storage, ArchiveConfig.from_conf(CONF)).instants, "nothing due after this clean"
    event = TimelineEvent(EventType.CLEAN_COMPLETED, str(path), cleaned.instant.timestamp, "clean", "COMPLETED")
    assert later < cleaned.instant.timestamp
    handle = archiver.make_handler(CONF, S3Options(), ServiceMetrics("archiver"))
    assert handle(event) == [], "an archival older than the clean is not what the clean led to"
    assert t.snapshot() == {**model, "d": 9}
