"""The table lock (a lease on storage): taking, waiting, timing out, fencing numbers and renewal,
on local files and on S3 (moto over HTTP); then with real processes (``tests/support/lock_worker``):
a holder SIGKILLed (its lease taken over once expired, not before), a holder SIGSTOPped past its
lease (fenced off at its commit), and 8 processes contending (no update lost; then 8 writers
committing through the write client: no commit lost, none completed twice).

The 8-process test runs on local files only: moto's threaded server does not decide racing
``If-Match`` PUTs atomically (see ``tests/storage/test_conditional_writes.py``), so several takers of
a released lock could all win there, which real S3 does not allow.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import FaultyStorage
from tests.support.lock_worker import FENCED
from tests.support.processes import die_with_parent
from tests.support.s3 import s3_child_env
from tidemark.errors import LockError, LockLostError, LockTimeoutError
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.lock import LOCK_PATH, Lease, TableLock
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import create_table
from tidemark.timeline import load_timeline

ROOT = Path(__file__).parents[2]
LEASE_MS = 1_000


def config(
    lease_ms: int = LEASE_MS, wait_ms: int = 10_000, retries: int = 0, retry_wait_ms: int = 0
) -> ConcurrencyConfig:
    return ConcurrencyConfig(
        lock_lease_ms=lease_ms, lock_wait_ms=wait_ms, lock_num_retries=retries, lock_retry_wait_ms=retry_wait_ms
    )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def lock_file(storage: Storage) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(storage.read(LOCK_PATH))
    return record


def lease_in(storage: Storage) -> Lease:
    return Lease.from_bytes(storage.read(LOCK_PATH), storage.full_uri(LOCK_PATH))


def counter(name: str) -> int:
    return COUNTERS.snapshot()[name]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.01)


@dataclass(frozen=True)
class Place:
    """Where a table is: its location, and the moto endpoint when on S3."""

    location: str
    options: S3Options | None

    def storage(self) -> Storage:
        return open_storage(self.location, self.options)

    def worker_args(self) -> list[str]:
        endpoint = self.options.endpoint_url if self.options else None
        return [self.location, *(["--endpoint", endpoint] if endpoint else [])]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "local":
        return Place(str(tmp_path / "table"), None)
    location, options = request.getfixturevalue("s3_location")
    return Place(location, options)


# --- one process ----------------------------------------------------------------------------------


def test_uncontended_acquire_and_release(place: Place) -> None:
    storage = place.storage()
    lock = TableLock(storage, config())
    before = now_ms()
    lease = lock.acquire()
    try:
        assert lock.held
        assert lease.owner == lock.owner
        assert lease.fence == 1
        assert before + LEASE_MS <= lease.expiration_ms <= now_ms() + LEASE_MS
        record = lock_file(storage)
        assert {k: record[k] for k in ("owner", "fence", "expiration_ms", "released", "pid")} == {
            "owner": lock.owner,
            "fence": 1,
            "expiration_ms": lease.expiration_ms,
            "released": False,
            "pid": os.getpid(),
        }
        assert record["host"]
        assert record["acquired_ms"] >= before
        assert lock.check_held().fence == 1
    finally:
        lock.release()
    assert lock.lease is None
    assert lock_file(storage)["released"] is True  # released, never deleted
    with pytest.raises(LockError, match="does not hold"):
        lock.check_held()
    lock.release()  # twice is harmless


def test_each_acquisition_gets_a_higher_fence(place: Place) -> None:
    storage = place.storage()
    again = TableLock(storage, config())
    fences = []
    for lock in (TableLock(storage, config()), again, TableLock(storage, config(), owner="named"), again):
        with lock:
            fences.append(lock.check_held().fence)
            assert lease_in(storage).owner == lock.owner
    assert fences == [1, 2, 3, 4]


def test_a_second_acquire_waits_until_release(place: Place) -> None:
    storage = place.storage()
    holder = TableLock(storage, config(lease_ms=2_000))
    waiter = TableLock(storage, config(lease_ms=2_000, wait_ms=10_000))
    waits = counter("lock_waits")
    got: list[Lease] = []
    holder.acquire()
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()))
    try:
        thread.start()
        time.sleep(0.6)
        assert not got, "took a lock another holder had"
        released_at = time.monotonic()
        holder.release()
        thread.join(timeout=5)
        assert got, "the waiter did not take the released lock"
        assert time.monotonic() - released_at < 2.5  # polled at most 1 s apart
        assert got[0].fence == 2
        assert counter("lock_waits") == waits + 1
    finally:
        thread.join(timeout=10)
        waiter.release()
        holder.release()


def test_a_long_wait_says_whom_it_waits_for_once_a_short_one_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a holder that stopped renewing (killed in its commit) keeps the next writer waiting for its
    # lease, a minute by default: that wait is told, naming the holder; a live holder's short one is not
    caplog.set_level(logging.WARNING, logger="tidemark.lock")
    storage = LocalStorage(str(tmp_path / "table"))
    holder = TableLock(storage, config(lease_ms=60_000))
    holder.acquire()
    holder.release()
    stopped = Lease("stopped-writer", 7, now_ms() + 3_500, host="vm", pid=4242, acquired_ms=now_ms())
    storage.write(LOCK_PATH, stopped.to_bytes())
    taker = TableLock(storage, config())
    taker.acquire()
    taker.release()
    said = [r.getMessage() for r in caplog.records if "waiting for the table lock" in r.getMessage()]
    assert len(said) == 1, said
    assert "held by stopped-writer (host vm, pid 4242, fence 7), whose lease expires at" in said[0]

    caplog.clear()
    live = TableLock(storage, config(lease_ms=60_000))
    live.acquire()
    threading.Timer(0.5, live.release).start()
    second = TableLock(storage, config())
    second.acquire()
    second.release()
    assert not [r for r in caplog.records if "waiting for the table lock" in r.getMessage()]


def test_a_lock_never_freed_times_out_naming_its_holder(place: Place) -> None:
    storage = place.storage()
    takeovers = counter("lock_takeovers")
    with TableLock(storage, config(lease_ms=20_000), owner="the-holder") as holder:
        assert holder.lease is not None
        waiter = TableLock(storage, config(wait_ms=300, retries=2, retry_wait_ms=100))
        started = time.monotonic()
        with pytest.raises(LockTimeoutError) as excinfo:
            waiter.acquire()
        elapsed = time.monotonic() - started
    message = str(excinfo.value)
    assert 3 * 0.3 + 2 * 0.1 <= elapsed < 5
    assert storage.uri in message
    assert "the-holder (host " in message
    assert f"pid {os.getpid()}" in message
    assert "expires at" in message
    assert "hoodie.write.lock.wait_time_ms" in message
    assert counter("lock_takeovers") == takeovers
    assert not waiter.held


def test_the_holder_renews_its_lease(place: Place) -> None:
    storage = place.storage()
    with TableLock(storage, config(lease_ms=LEASE_MS)) as lock:
        first = lock_file(storage)["expiration_ms"]
        time.sleep(LEASE_MS * 1.6 / 1000)  # past the first lease's end
        assert lock.held
        assert lock_file(storage)["expiration_ms"] > first
        with pytest.raises(LockTimeoutError):
            TableLock(storage, config(wait_ms=200)).acquire()
        assert lock.check_held().fence == 1


def test_a_transient_storage_failure_while_renewing_is_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = FaultyStorage(LocalStorage(tmp_path))
    caplog.set_level(logging.WARNING, logger="tidemark.lock")
    with TableLock(storage, config(lease_ms=900)) as lock:
        first = lock_file(storage)["expiration_ms"]
        storage.arm(1, sticky=False)  # the next renewal fails once
        wait_until(lambda: storage.fired is not None, "the renewal to fail")
        assert lock_file(storage)["expiration_ms"] == first
        # the tick after the failed one renews
        wait_until(lambda: lock_file(storage)["expiration_ms"] > first, "a renewal after the failed one")
        assert storage.fired is not None
        assert storage.fired.call == "write_if_match"
        assert lock.held
        assert lock.check_held().fence == 1
    assert any("could not renew the table lock" in r.getMessage() for r in caplog.records)
    assert lock_file(storage)["released"] is True


def test_a_failed_release_does_not_keep_its_owner_waiting(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    storage = FaultyStorage(LocalStorage(tmp_path))
    caplog.set_level(logging.WARNING, logger="tidemark.lock")
    lock = TableLock(storage, config(lease_ms=5_000))
    first = lock.acquire()
    storage.arm(1, sticky=False)  # the release's write fails
    lock.release()
    assert any("could not release the table lock" in r.getMessage() for r in caplog.records)
    assert not lease_in(storage).released  # still this owner's lease, for 5 s
    # others wait for it to run out, its owner takes it again at once (and takes nothing over)
    with pytest.raises(LockTimeoutError):
        TableLock(storage, config(wait_ms=100)).acquire()
    takeovers = counter("lock_takeovers")
    started = time.monotonic()
    with lock:
        assert time.monotonic() - started < 0.5
        assert lock.check_held().fence == first.fence + 1
    assert counter("lock_takeovers") == takeovers


class _InterruptedAfterLockFileWrite(FaultyStorage):
    """A Ctrl-C (or SIGTERM) that lands right after the lock file's write landed, before the
    taker recorded its lease (on S3, while the PUT's answer is read)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.interrupt = True

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        version = super().write_if_match(path, data, expected_version)
        if self.interrupt and path == LOCK_PATH:
            self.interrupt = False
            raise KeyboardInterrupt
        return version


@pytest.mark.parametrize("before", ["no lock file", "a released lease"])
def test_an_interrupt_right_after_the_lease_was_written_releases_it(tmp_path: Path, before: str) -> None:
    """The lease was left held: the next `savepoint create` waited a minute for it to expire."""
    if before == "a released lease":
        with TableLock(LocalStorage(tmp_path), config()):
            pass
    storage = _InterruptedAfterLockFileWrite(LocalStorage(tmp_path))
    _interrupted_take_is_released(tmp_path, storage)


def test_an_interrupt_while_the_renewer_starts_releases_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen with a SIGTERM sent as the lock file named its holder: it landed in the renewing
    thread's start, and the lease was left held (its release could not join a thread not started)."""
    start = threading.Thread.start
    renewers: list[threading.Thread] = []

    def interrupted(thread: threading.Thread) -> None:
        if renewers or not thread.name.startswith("table-lock-renewer"):
            start(thread)
            return
        renewers.append(thread)
        raise KeyboardInterrupt  # as one lands while start() waits for the thread to run

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    _interrupted_take_is_released(tmp_path, LocalStorage(tmp_path))


def _interrupted_take_is_released(tmp_path: Path, storage: Storage) -> None:
    with pytest.raises(KeyboardInterrupt), TableLock(storage, config(lease_ms=60_000)):
        raise AssertionError("the lock was not to be taken")
    _next_taker_waits_for_nothing(tmp_path, storage)


def test_a_lock_lost_while_held_is_said_once_by_the_work_it_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean stalled past its lease printed the loss twice: a bare line from the renewing
    thread, then the command's error, which said the lock was 'held now by X ..., released'."""
    caplog.set_level(logging.INFO, logger="tidemark.lock")
    storage = LocalStorage(tmp_path)
    holder = TableLock(storage, config(lease_ms=300))
    mine = holder.acquire()
    # another process took the lock over and released it (a stall of this one, as the renewer sees it)
    storage.write(
        LOCK_PATH,
        Lease(
            owner="other", fence=mine.fence + 1, expiration_ms=now_ms(), released=True, host="elsewhere", pid=7
        ).to_bytes(),
    )
    wait_until(lambda: not holder.held, "the renewer to find the lock lost")
    with pytest.raises(LockLostError) as lost:
        holder.check_held()
    holder.release()
    said = str(lost.value)
    assert "was taken over; the lock file now holds the lease of other (host elsewhere, pid 7, fence" in said
    assert said.endswith("), released")
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]  # the error says it


class _InterruptedAtRelease(FaultyStorage):
    """A Ctrl-C (or SIGTERM) that lands during the release's write of the lock file (on S3, during
    its PUT): before the write landed, or after, while its answer is read."""

    def __init__(self, inner: Storage, landed: bool) -> None:
        super().__init__(inner)
        self.landed = landed
        self.interrupt = True

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        releasing = self.interrupt and path == LOCK_PATH and json.loads(data)["released"]
        if releasing and not self.landed:
            self.interrupt = False
            raise KeyboardInterrupt
        version = super().write_if_match(path, data, expected_version)
        if releasing:
            self.interrupt = False
            raise KeyboardInterrupt
        return version


@pytest.mark.parametrize("landed", [False, True], ids=["before-the-write-landed", "after-it-landed"])
def test_an_interrupt_in_the_release_still_releases_the_lease(tmp_path: Path, landed: bool) -> None:
    """Seen with a SIGTERM to a restore on S3: it exited 143 saying the lock was released, and the
    next command waited a minute for the lease."""
    storage = _InterruptedAtRelease(LocalStorage(tmp_path), landed)
    with pytest.raises(KeyboardInterrupt), TableLock(storage, config(lease_ms=60_000)):
        pass
    _next_taker_waits_for_nothing(tmp_path, storage)


class _InterruptedTwiceAtRelease(_InterruptedAtRelease):
    """Then a second Ctrl-C (a double Ctrl-C, a SIGTERM after a ``kill``) as the interrupted
    release reads the lock file again to release the lease it left."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner, landed=False)
        self.second = True

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        if not self.interrupt and self.second and path == LOCK_PATH:
            self.second = False
            os.kill(os.getpid(), signal.SIGINT)
        return super().read_versioned(path)


def test_a_second_interrupt_in_the_release_still_releases_the_lease(tmp_path: Path) -> None:
    """Seen with two SIGTERMs to a cleaner on a slow S3: it exited 143 and left the lease held."""
    storage = _InterruptedTwiceAtRelease(LocalStorage(tmp_path))
    with pytest.raises(KeyboardInterrupt), TableLock(storage, config(lease_ms=60_000)):
        pass
    assert not storage.second  # the second interrupt came
    _next_taker_waits_for_nothing(tmp_path, storage)


def test_an_interrupt_while_the_release_waits_for_the_renewer_still_releases_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    join = threading.Thread.join

    def interrupted(thread: threading.Thread, timeout: float | None = None) -> None:
        if thread.name.startswith("table-lock-renewer"):
            monkeypatch.setattr(threading.Thread, "join", join)
            raise KeyboardInterrupt  # as one lands while join() waits for the thread to end
        join(thread, timeout)

    monkeypatch.setattr(threading.Thread, "join", interrupted)
    storage = LocalStorage(tmp_path)
    with pytest.raises(KeyboardInterrupt), TableLock(storage, config(lease_ms=60_000)):
        pass
    _next_taker_waits_for_nothing(tmp_path, storage)


def _next_taker_waits_for_nothing(tmp_path: Path, storage: Storage) -> None:
    assert lease_in(storage).released
    started = time.monotonic()
    with TableLock(LocalStorage(tmp_path), config(wait_ms=30_000)):
        assert time.monotonic() - started < 1  # no wait for the lease's minute


def test_a_lock_file_that_is_not_a_lease_stops_takers(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write(LOCK_PATH, b'{"expired": false, "validUntil": 1}')  # not ours: never taken over
    with pytest.raises(LockError, match="is not a tidemark table lock") as excinfo:
        TableLock(storage, config()).acquire()
    assert storage.full_uri(LOCK_PATH) in str(excinfo.value)


def test_acquiring_twice_without_release_is_an_error(tmp_path: Path) -> None:
    with TableLock(LocalStorage(tmp_path), config()) as lock, pytest.raises(LockError, match="already"):
        lock.acquire()


# --- processes ------------------------------------------------------------------------------------


class Worker:
    """A ``tests/support/lock_worker`` child; its stdout events are read by a thread, so waiting
    for one is bounded."""

    def __init__(self, place: Place, mode: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.lock_worker", mode, *place.worker_args(), *args],
            cwd=ROOT,
            env=s3_child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
        )
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read_events, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._events.put(json.loads(line))
        self._events.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self._stderr.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def expect(self, event: str, timeout_s: float = 30) -> dict[str, Any]:
        try:
            got = self._events.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no {event!r} from the worker in {timeout_s} s\n{self.stderr}") from None
        if got is None or got["event"] != event:
            self.proc.wait(timeout=10)
            raise AssertionError(f"expected {event!r}, got {got} (exit {self.proc.returncode})\n{self.stderr}")
        return got

    def send(self, line: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{line}\n")
        self.proc.stdin.flush()

    def wait(self, timeout_s: float = 30) -> int:
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # a stopped process dies of SIGKILL too
            self.proc.wait(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_killed_holders_lease_is_taken_over_only_once_it_expired(place: Place) -> None:
    storage = place.storage()
    holder = Worker(place, "hold", "--lease-ms", "1500")
    try:
        held = holder.expect("held")
        holder.proc.send_signal(signal.SIGKILL)
        assert holder.wait() == -signal.SIGKILL
    finally:
        holder.kill()
    dead = lease_in(storage)  # as its last renewal left it
    assert (dead.owner, dead.fence, dead.released) == (held["owner"], held["fence"], False)
    assert dead.expiration_ms > now_ms(), "the lease ran out before the test looked: nothing to wait for"
    takeovers, waits = counter("lock_takeovers"), counter("lock_waits")
    taker = TableLock(storage, config(wait_ms=10_000))
    lease = taker.acquire()
    taken_ms = now_ms()
    try:
        assert lease_in(storage).acquired_ms >= dead.expiration_ms
        assert taken_ms >= dead.expiration_ms
        assert taken_ms - dead.expiration_ms < 1_500  # it looked again as the lease ran out
        assert lease.fence == dead.fence + 1
        assert counter("lock_takeovers") == takeovers + 1
        assert counter("lock_waits") == waits + 1
    finally:
        taker.release()


def test_a_holder_stopped_past_its_lease_is_fenced_at_commit(place: Place) -> None:
    storage = place.storage()
    holder = Worker(place, "commit", "--lease-ms", str(LEASE_MS))
    taker = TableLock(storage, config(wait_ms=10_000))
    try:
        held = holder.expect("held")
        os.kill(holder.proc.pid, signal.SIGSTOP)  # a long GC pause, a frozen VM
        lease = taker.acquire()  # once the stopped holder's lease expired
        assert lease.fence == held["fence"] + 1
        os.kill(holder.proc.pid, signal.SIGCONT)
        holder.send()  # "commit now"
        fenced = holder.expect("fenced")
        assert holder.wait() == FENCED
        assert taker.owner in fenced["error"]
        assert "taken over" in fenced["error"]
        # the fenced holder's release left the new holder's lease alone
        assert lease_in(storage).owner == taker.owner
        assert taker.check_held().fence == lease.fence
    finally:
        taker.release()
        holder.kill()
    assert not storage.exists("commit")


def test_a_holder_that_kept_its_lease_commits(place: Place) -> None:
    """The counterpart of the test above: without the stop, the same worker commits."""
    storage = place.storage()
    holder = Worker(place, "commit", "--lease-ms", str(LEASE_MS))
    try:
        held = holder.expect("held")
        time.sleep(LEASE_MS * 1.5 / 1000)  # renewed meanwhile
        holder.send()
        holder.expect("committed")
        assert holder.wait() == 0
    finally:
        holder.kill()
    assert storage.read("commit") == held["owner"].encode()
    assert lease_in(storage).released


def test_eight_processes_contending_lose_no_update(tmp_path: Path) -> None:
    place = Place(str(tmp_path / "table"), None)
    storage = place.storage()
    processes, rounds = 8, 5
    workers = [Worker(place, "count", "--rounds", str(rounds), "--lease-ms", "5000") for _ in range(processes)]
    try:
        for w in workers:
            w.expect("ready")
        for w in workers:
            w.send()
        done = [w.expect("done", timeout_s=60) for w in workers]
        assert [w.wait() for w in workers] == [0] * processes
    finally:
        for w in workers:
            w.kill()
    assert int(storage.read("counter")) == processes * rounds
    fences = [f for d in done for f in d["fences"]]
    assert sorted(fences) == list(range(1, processes * rounds + 1))  # distinct, none skipped
    assert all(d["fences"] == sorted(d["fences"]) for d in done)
    assert sum(d["counters"]["lock_waits"] for d in done) > 0, "nobody waited: the test proved nothing"
    assert sum(d["counters"]["lock_takeovers"] for d in done) == 0  # every lease was released in time
    final = lease_in(storage)
    assert final.released
    assert final.fence == processes * rounds


def test_eight_writers_committing_lose_no_commit_and_complete_none_twice(tmp_path: Path) -> None:
    place = Place(str(tmp_path / "table"), None)
    storage = place.storage()
    create_table(storage, "t", ["id"], "ts", ["p"], True)
    processes, rounds = 8, 4
    workers = [Worker(place, "write", "--rounds", str(rounds), "--lease-ms", "5000") for _ in range(processes)]
    try:
        for w in workers:
            w.expect("ready")
        for w in workers:  # all at once: instant times collide, commits queue for the lock
            w.send()
        done = [w.expect("done", timeout_s=120) for w in workers]
        assert [w.wait() for w in workers] == [0] * processes, "\n".join(w.stderr for w in workers)
    finally:
        for w in workers:
            w.kill()
    committed = [i for d in done for i in d["instants"]]
    assert len(set(committed)) == processes * rounds, "two writers shared an instant time"
    timeline = load_timeline(storage)
    assert sorted(i.timestamp for i in timeline.write_instants().completed()) == sorted(committed)
    assert not timeline.write_instants().pending()
    completed_files = [n for n in storage.list_dir(".hoodie").files if n.endswith(".deltacommit")]
    assert len(completed_files) == processes * rounds  # each completed exactly once
    keys = sorted(read_snapshot(storage).column("id").to_pylist())
    assert keys == sorted(f"{w.proc.pid}-{n}" for w in workers for n in range(rounds))
    assert sum(d["counters"]["lock_waits"] for d in done) > 0, "no commit waited: the test proved nothing"
    assert sum(d["counters"]["lock_takeovers"] for d in done) == 0
    assert not storage.list_dir(".hoodie/.heartbeat").files  # every writer's heartbeat went with its write
