"""Real concurrent writers: `tidemark write` processes, each with its own local Spark, on one table
(local files and the moto S3 server), with early conflict detection off (found at commit) and on
(found at a marker), with direct markers and through the writer-coordinator.

To make the writes overlap for certain, the test takes the table lock itself before it starts the
writers: every writer then writes its files and waits at its commit, so all of them are inflight
at once. The lock is released when they are all waiting, and their commits race as they would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_write_job import CITIES, Harness, trips
from tests.support.kafka import TansuBroker
from tests.support.processes import die_with_parent, free_port
from tests.support.s3 import s3_child_env, s3_options
from tests.support.services import CoordinatorProcess, create_topics, events_of, of_type, read_topics, unique_topics
from tidemark.errors import WriteConflictError
from tidemark.events import EventType, TimelineEvent
from tidemark.spark.write_job import WriteHooks, WriteOptions, write_dataframe
from tidemark.storage import S3Options, Storage
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.conflict import file_group_of_data_file
from tidemark.table.coordinator_client import TOKEN_FILE_KEY
from tidemark.table.lock import TableLock
from tidemark.table.markers import IOType, Marker, list_markers, markers_folder
from tidemark.table.write_client import accepted_paths, begin_write, rollback
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint
from tidemark.timeline import DELTA_COMMIT, ROLLBACK, CommitMetadata, load_timeline, read_instant
from tidemark.timeline import avro_metadata as avro

pytestmark = pytest.mark.spark

ROOT = Path(__file__).parents[2]
SPLIT = "hoodie.copyonwrite.insert.split.size=1000"


def _writer(location: str, rows: list[dict[str, Any]], tmp: Path, name: str, conf: list[str], s3: S3Options | None):
    source = tmp / f"{name}.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = [sys.executable, "-m", "tidemark.cli.main", "write", location, "--input", str(source)]
    command += ["--operation", "upsert", "--record-key", "uuid", "--precombine", "ts", "--partition-field", "city"]
    command += ["--hive-style", "--conf", "tidemark.write.parallelism=1"]
    for c in conf:
        command += ["--conf", c]
    env = None
    if s3 is not None:
        command += ["--s3-endpoint", str(s3.endpoint_url)]
        env = s3_child_env()
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )


def _pending_with_markers(storage: Storage, known: set[str]) -> set[str]:
    """Pending writes (not in ``known``) that have written at least one marker."""
    return {
        i.timestamp
        for i in load_timeline(storage).pending().write_instants()
        if i.timestamp not in known and any(storage.list(markers_folder(i.timestamp)))
    }


def _wait_for(condition: Any, what: str, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _data_files(storage: Storage) -> set[str]:
    return {f.path for f in storage.list("") if not f.path.startswith(".hoodie/")}


def _left_behind(storage: Storage, before: set[str], loser: str) -> list[str]:
    """Files that appeared since ``before`` and no completed write names (a loser's leftovers),
    and the loser's markers and heartbeat."""
    named: set[str] = set()
    for instant in load_timeline(storage).completed().write_instants():
        named |= accepted_paths(CommitMetadata.from_bytes(read_instant(storage, instant)).write_stats())
    strays = sorted(p for p in _data_files(storage) - before if p not in named and "partition_metadata" not in p)
    own = [f.path for f in storage.list(".hoodie/") if loser in f.path and f.path.count("/") > 1]
    return strays + own


def _rolled_back_files(storage: Storage, loser: str) -> int:
    """How many data files the loser had written, from the rollback that removed them."""
    for instant in load_timeline(storage).completed().of_actions(ROLLBACK):
        meta = avro.deserialize(read_instant(storage, instant), "HoodieRollbackMetadata", "rollback")
        if loser in (meta.get("commitsRollback") or []):
            parts = (meta.get("partitionMetadata") or {}).values()
            return sum(len(p.get("successDeleteFiles") or []) + len(p.get("rollbackLogFiles") or {}) for p in parts)
    raise AssertionError(f"no rollback of {loser}")


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, S3Options | None]:
    if request.param == "local":
        return str(tmp_path / "trips"), None
    endpoint: str = request.getfixturevalue("serial_moto")  # conditional PUTs atomic, as on S3
    from tests.support.s3 import create_bucket

    return f"s3://{create_bucket(endpoint)}/trips", s3_options(endpoint)


# each case is three Spark jobs side by side (about 70 s on two cores): the two pairs cover each
# storage and each way of finding the conflict (the conflict check itself is storage-blind)
@pytest.mark.parametrize(
    ("where", "early"),
    [("local", False), ("s3", True)],
    indirect=["where"],
    ids=["local-found-at-commit", "s3-found-early"],
)
def test_overlapping_spark_writers(
    spark: Any, tmp_path: Path, where: tuple[str, S3Options | None], early: bool
) -> None:
    location, s3 = where
    h = Harness(spark, location, "city", True, s3)
    # three partitions, one file group each: keys k with k % 3 == i live in CITIES[i]
    h.write("insert", trips(range(30), ts=1))
    storage = h.storage
    conf = [SPLIT] + (
        [
            "hoodie.write.concurrency.early.conflict.detection.enable=true",
            "hoodie.write.concurrency.early.conflict.check.commit.conflict=true",
        ]
        if early
        else []
    )
    first = trips([0, 3], ts=2, fare_base=100)  # san_francisco
    second = trips([6, 9], ts=2, fare_base=200)  # san_francisco too: the same file group
    third = trips([1, 4], ts=2, fare_base=300)  # sao_paulo: another file group
    before = _data_files(storage)
    lock = TableLock(storage, ConcurrencyConfig())
    lock.acquire()
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["first"] = _writer(location, first, tmp_path, "first", conf, s3)
        seen: set[str] = set()
        a = _wait_for(lambda: _pending_with_markers(storage, seen), "the first writer's markers")
        seen |= a
        # the second writer starts once the first one's markers are on storage: with early detection
        # it must meet them at its own first marker
        procs["second"] = _writer(location, second, tmp_path, "second", conf, s3)
        procs["third"] = _writer(location, third, tmp_path, "third", conf, s3)
        if early:
            code = procs["second"].wait(timeout=300)
            assert code == 3, procs["second"].stderr.read() if procs["second"].stderr else ""
        _wait_for(lambda: len(_pending_with_markers(storage, set())) == (2 if early else 3), "all writers waiting")
    finally:
        lock.release()
    outcomes = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        outcomes[name] = (proc.returncode, out, err)
    assert outcomes["third"][0] == 0, outcomes["third"][2][-3000:]
    codes = sorted((outcomes["first"][0], outcomes["second"][0]))
    assert codes == [0, 3], {n: (c, e[-2000:]) for n, (c, _, e) in outcomes.items()}
    loser = "first" if outcomes["first"][0] == 3 else "second"
    if early:
        assert loser == "second"
    lines = [line for line in outcomes[loser][2].splitlines() if line.startswith("tidemark: error:")]
    assert len(lines) == 1, outcomes[loser][2]
    assert lines[0].startswith("tidemark: error: write conflict: write "), lines[0]
    assert ("found at a marker" if early else "found at commit") in lines[0]
    assert "city=san_francisco/" in lines[0]
    loser_instant = lines[0].split("write conflict: write ")[1].split()[0]
    assert _left_behind(storage, before, loser_instant) == []
    assert _rolled_back_files(storage, loser_instant) >= 1
    for name in ("third", "first" if loser == "second" else "second"):
        h.model.upsert({"first": first, "second": second, "third": third}[name])
    h.check()


def test_early_detection_stops_a_write_before_it_writes_the_rest(spark: Any, tmp_path: Path) -> None:
    """A writer that conflicts on its first file group stops there: it wrote fewer files than the
    same write unopposed."""
    location = str(tmp_path / "trips")
    h = Harness(spark, location, "city", True)
    h.write("insert", trips(range(30), ts=1))
    storage = h.storage
    early = [SPLIT, "hoodie.write.concurrency.early.conflict.detection.enable=true"]
    # touches all three partitions' file groups; its first one in task order is chennai's
    wide = trips(range(9), ts=3, fare_base=500)
    blocker = trips([2], ts=2, fare_base=50)  # chennai only
    lock = TableLock(storage, ConcurrencyConfig())
    lock.acquire()
    try:
        held = _writer(location, blocker, tmp_path, "blocker", early, None)
        a = _wait_for(lambda: _pending_with_markers(storage, set()), "the blocking writer's markers")
        loser = _writer(location, wide, tmp_path, "wide", early, None)
        _, err = loser.communicate(timeout=300)
        assert loser.returncode == 3, err[-3000:]
    finally:
        lock.release()
    held.communicate(timeout=300)
    assert held.returncode == 0
    h.model.upsert(blocker)
    lost = err.split("write conflict: write ")[1].split()[0]
    assert lost not in a
    written_before_stop = _rolled_back_files(storage, lost)
    unopposed = h.write("upsert", wide)
    assert written_before_stop < unopposed.files_written, (written_before_stop, unopposed.files_written)
    h.check()


def test_spark_writers_through_the_writer_coordinator(
    spark: Any, tmp_path: Path, where: tuple[str, S3Options | None], kafka_broker: TansuBroker
) -> None:
    """Three writers through a real coordinator process (timeline-server-based markers): two on the
    same file group (the later one loses at its first marker, answered by the coordinator from
    memory) and one elsewhere (it commits). The coordinator announces the conflict once; its
    metrics agree."""
    location, s3 = where
    h = Harness(spark, location, "city", True, s3)
    h.write("insert", trips(range(30), ts=1))
    storage = h.storage
    topic, dead = unique_topics("writes")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    endpoint = str(s3.endpoint_url) if s3 is not None else None
    with CoordinatorProcess(kafka_broker.bootstrap, topic, dead, s3_endpoint=endpoint) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        early = [
            SPLIT,
            "hoodie.write.concurrency.early.conflict.detection.enable=true",
            "hoodie.write.markers.type=TIMELINE_SERVER_BASED",
        ]
        # the coordinator's URL and the file holding its API token
        through = [*early, *(f"{k}={v}" for k, v in coordinator.writer_conf.items())]
        first = trips([0, 3], ts=2, fare_base=100)  # san_francisco
        second = trips([6, 9], ts=2, fare_base=200)  # san_francisco too: the same file group
        third = trips([1, 4], ts=2, fare_base=300)  # sao_paulo: another file group
        lock = TableLock(storage, ConcurrencyConfig())
        lock.acquire()
        procs: dict[str, subprocess.Popen[str]] = {}
        try:
            procs["first"] = _writer(location, first, tmp_path, "first", through, s3)
            a = _wait_for(lambda: _pending_with_markers(storage, set()), "the first writer's markers")
            (first_instant,) = a
            # timeline-server-based: its markers are in the coordinator's MARKERS files
            names = {f.path.rsplit("/", 1)[-1] for f in storage.list(markers_folder(first_instant))}
            assert "MARKERS.type" in names, names
            assert any(n.startswith("MARKERS") and n[7:].isdigit() for n in names), names
            procs["second"] = _writer(location, second, tmp_path, "second", through, s3)
            procs["third"] = _writer(location, third, tmp_path, "third", through, s3)
            assert procs["second"].wait(timeout=300) == 3
            _wait_for(lambda: len(_pending_with_markers(storage, set())) == 2, "the first and third writers waiting")
        finally:
            lock.release()
        outcomes = {}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            outcomes[name] = (proc.returncode, out, err)
        assert outcomes["first"][0] == 0, outcomes["first"][2][-3000:]
        assert outcomes["third"][0] == 0, outcomes["third"][2][-3000:]
        assert "direct markers" not in outcomes["first"][2] + outcomes["third"][2]  # nobody fell back
        assert coordinator.token is not None
        assert all(coordinator.token not in out + err for _, out, err in outcomes.values())
        lines = [x for x in outcomes["second"][2].splitlines() if x.startswith("tidemark: error:")]
        assert len(lines) == 1, outcomes["second"][2][-3000:]
        assert "found at a marker" in lines[0]
        assert f"running write {first_instant} " in lines[0]
        loser = lines[0].split("write conflict: write ")[1].split()[0]
        assert _rolled_back_files(storage, loser) == 0  # refused at its first marker: it wrote nothing
        assert [f for f in storage.list(".hoodie/") if loser in f.path and f.path.count("/") > 1] == []

        def conflicted(messages: list[Any]) -> list[TimelineEvent]:
            return of_type(events_of(messages, topic), EventType.WRITE_CONFLICTED)

        found = conflicted(read_topics(kafka_broker.bootstrap, [topic], lambda ms: bool(conflicted(ms)), 30))
        assert [(e.instant, e.extra["other"], e.extra["stage"]) for e in found] == [(loser, first_instant, "early")]
        assert coordinator.metric("tidemark_coordinator_conflicts_total", table=location, stage="early") == 1
        # the first and the third writer's markers (one file group each), none of the loser's
        assert coordinator.metric("tidemark_coordinator_markers_created_total", table=location) == 2
    h.model.upsert(first)
    h.model.upsert(third)
    h.check()


def test_a_writer_that_cannot_reach_the_coordinator_commits_with_direct_markers(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    location = str(tmp_path / "trips")
    h = Harness(spark, location, "city", True)
    h.write("insert", trips(range(9), ts=1))
    conf = {
        "hoodie.write.markers.type": "TIMELINE_SERVER_BASED",
        "tidemark.writer.coordinator.url": f"http://127.0.0.1:{free_port()}",  # nobody listens
        "hoodie.write.concurrency.early.conflict.detection.enable": "true",
    }
    rows = trips(range(6), ts=2, fare_base=70)
    before = COUNTERS.snapshot()["coordinator_fallbacks"]
    with caplog.at_level(logging.WARNING, logger="tidemark.coordinator"):
        result = write_dataframe(
            spark.createDataFrame(rows), location, WriteOptions("upsert", ("uuid",), "ts", ("city",), True, conf=conf)
        )
    h.model.upsert(rows)
    assert result.files_written == 3
    warnings = [r.getMessage() for r in caplog.records if "using direct markers" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert COUNTERS.snapshot()["coordinator_fallbacks"] == before + 1
    h.check()


def test_a_writer_whose_token_the_coordinator_refuses_commits_with_direct_markers_and_says_why(
    spark: Any, tmp_path: Path, kafka_broker: TansuBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong token is a misconfiguration, not an outage, but direct markers are as safe: the
    write commits without the coordinator, and an error line names the setting to check."""
    location = str(tmp_path / "trips")
    h = Harness(spark, location, "city", True)
    h.write("insert", trips(range(9), ts=1))
    topic, dead = unique_topics("writes")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    wrong = tmp_path / "wrong-token"
    wrong.write_text("a-token-that-is-not-the-coordinators\n")
    with CoordinatorProcess(kafka_broker.bootstrap, topic, dead) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        conf = {
            **coordinator.writer_conf,
            TOKEN_FILE_KEY: str(wrong),
            "hoodie.write.concurrency.early.conflict.detection.enable": "true",
        }
        rows = trips(range(6), ts=2, fare_base=70)
        with caplog.at_level(logging.WARNING, logger="tidemark.coordinator"):
            result = write_dataframe(
                spark.createDataFrame(rows),
                location,
                WriteOptions("upsert", ("uuid",), "ts", ("city",), True, conf=conf),
            )
        h.model.upsert(rows)
        assert result.files_written == 3
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors  # the driver's, once: its tasks were sent to direct markers
        assert f"the writer-coordinator at {coordinator.url} refused the token: check {TOKEN_FILE_KEY}" in errors[0]
        assert "a-token-that-is-not" not in caplog.text
        assert coordinator.metric("tidemark_coordinator_unauthorized_total", reason="wrong") == 1
        assert coordinator.metric("tidemark_coordinator_markers_created_total", table=location) == 0
    h.check()


class PauseAfterFirstFile(WriteHooks):
    """Holds a task after its first file group until the file ``resume`` exists (``paused`` says
    it got there): the coordinator is killed and restarted meanwhile."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def task_point(self, point: str, attempt: int) -> None:
        paused, resume = Path(self.folder, "paused"), Path(self.folder, "resume")
        if point != "after_file" or paused.exists():
            return
        paused.touch()
        deadline = time.monotonic() + 120
        while not resume.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def test_a_coordinator_killed_mid_write_and_restarted(spark: Any, tmp_path: Path, kafka_broker: TansuBroker) -> None:
    """SIGKILL while a write's task is between two markers: the restarted coordinator rebuilds its
    index from the MARKERS file (a conflict with the marker accepted before the kill is still
    found), and the write goes on through it and commits."""
    location = str(tmp_path / "trips")
    h = Harness(spark, location, "city", True)
    h.write("insert", trips(range(30), ts=1))
    storage = h.storage
    topic, dead = unique_topics("writes")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    signals = tmp_path / "signals"
    signals.mkdir()
    with CoordinatorProcess(kafka_broker.bootstrap, topic, dead) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        conf = {
            **coordinator.writer_conf,
            "hoodie.write.concurrency.early.conflict.detection.enable": "true",
            "tidemark.write.parallelism": "1",  # one task: its file groups one after another
        }
        options = WriteOptions(
            "upsert", ("uuid",), "ts", ("city",), True, conf=conf, hooks=PauseAfterFirstFile(str(signals))
        )
        rows = trips(range(9), ts=2, fare_base=300)  # all three cities
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = write_dataframe(spark.createDataFrame(rows), location, options)
            except BaseException as e:
                outcome["error"] = e

        writer = threading.Thread(target=run)
        writer.start()
        try:
            _wait_for(lambda: (signals / "paused").exists(), "the task to pause after its first file group")
            (instant,) = _pending_with_markers(storage, set())
            before = list_markers(storage, instant)
            assert len(before) == 1
            coordinator.signal_and_wait(signal.SIGKILL, 5)
            coordinator.restart()
            client = coordinator.client(location)
            assert client.markers(instant) == [before[0].name]  # rebuilt from the MARKERS file
            rival = begin_write(storage, DELTA_COMMIT, "upsert", ConcurrencyConfig(early_detection=True))
            client.register(rival.start, rival.config)
            # the rival appends to the file group the paused write has its one marker in
            partition, _, file_id = str(file_group_of_data_file(before[0].data_path)).rpartition("/")
            appended = Marker(rival.instant, f"{partition}/.{file_id}_{instant}.log.1_0-1-0", IOType.APPEND)
            with pytest.raises(WriteConflictError) as lost:
                client.create_marker(appended)
            assert lost.value.other == instant
            rival.abort()
            client.end(rival.instant, "conflicted", lost.value)
        finally:
            (signals / "resume").touch()
            writer.join(timeout=300)
        assert "error" not in outcome, outcome.get("error")
        h.model.upsert(rows)
        # the two file groups after the restart went through the new process
        assert coordinator.metric("tidemark_coordinator_markers_created_total", table=location) == 2
    h.check()


def test_a_task_declares_its_new_base_files_to_the_coordinator_in_one_request(
    spark: Any, tmp_path: Path, kafka_broker: TansuBroker
) -> None:
    location = str(tmp_path / "trips")
    h = Harness(spark, location, "city", True)
    h.write("insert", trips(range(3), ts=1))  # one file group per city
    topic, dead = unique_topics("writes")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    with CoordinatorProcess(kafka_broker.bootstrap, topic, dead) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        conf = {
            **coordinator.writer_conf,
            "hoodie.write.concurrency.early.conflict.detection.enable": "true",
            "tidemark.write.parallelism": "1",
            "hoodie.copyonwrite.insert.auto.split": "false",
            "hoodie.copyonwrite.insert.split.size": "1",  # a new file group per inserted row
        }
        # three updates (a log file each) and three new keys (a base file each), in one task
        rows = trips(range(3), ts=2, fare_base=50) + trips(range(10, 13), ts=1)
        options = WriteOptions("upsert", ("uuid",), "ts", ("city",), True, conf=conf)
        result = write_dataframe(spark.createDataFrame(rows), location, options)
        h.model.upsert(rows)
        assert result.files_written == 6
        assert coordinator.metric("tidemark_coordinator_markers_created_total", table=location) == 6
        # the three base files in one request, each log file on its own: 4 requests
        assert coordinator.metric("tidemark_coordinator_marker_request_seconds_count") == 4
    h.check()


def _until_waiting_for_the_lock(proc: subprocess.Popen[str]) -> str:
    """The writer's stderr up to the line saying it waits for the table lock: it is at its commit."""
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "waiting for the table lock" in line:
            return "".join(lines)
    raise AssertionError(f"the writer ended before its commit: {''.join(lines)[-3000:]}")


def test_writes_rolled_back_for_dead_exit_3_to_be_written_again(spark: Any, tmp_path: Path) -> None:
    """Two `tidemark write` processes stall at their commit (SIGSTOP) past their heartbeat's
    expiry: another process rolls one back, a restore the other. Both exited 1 although each
    said to write it again, which a scheduler retrying lost writes (exit 3) did not."""
    location = str(tmp_path / "trips")
    h = Harness(spark, location, "city", True)
    saved = h.write("insert", trips(range(9), ts=1)).instant
    storage = h.storage
    create_savepoint(storage, saved)
    dead_soon = ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1)
    lock = TableLock(storage, ConcurrencyConfig())
    lock.acquire()
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, key in (("rolled back", 0), ("restored", 1)):
            procs[name] = _writer(location, trips([key], ts=2, fare_base=100), tmp_path, f"w{key}", [], None)
        for proc in procs.values():
            _until_waiting_for_the_lock(proc)
            os.kill(proc.pid, signal.SIGSTOP)  # a long GC pause, a frozen VM
    finally:
        lock.release()
    try:
        # which instant is whose: the partition of its one file group
        city = f"city={CITIES[0]}/"
        (first,) = [
            i
            for i in _pending_with_markers(storage, set())
            if any(city in m.data_path for m in list_markers(storage, i))
        ]
        taken = rollback(storage, first, dead_soon).rollback_instant.timestamp  # as a writer that took it for dead
        os.kill(procs["rolled back"].pid, signal.SIGCONT)
        _, err = procs["rolled back"].communicate(timeout=300)
        assert procs["rolled back"].returncode == 3, err[-3000:]
        (line,) = [line for line in err.splitlines() if line.startswith("tidemark: error:")]
        assert line.startswith(
            f"tidemark: error: write conflict: write {first} on {location} was rolled back by rollback {taken}, "
        )
        assert line.endswith("nothing was completed: write it again"), line
        (second,) = _pending_with_markers(storage, set())
        done = restore(storage, saved, dead_soon).instant
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
    _, err = procs["restored"].communicate(timeout=300)
    assert procs["restored"].returncode == 3, err[-3000:]
    assert (
        f"tidemark: error: write conflict: write {second} on {location} was rolled back by restore {done.timestamp}"
        in err
    )
    assert not load_timeline(storage).pending().instants
    h.check()  # the savepoint's table, in both readers
