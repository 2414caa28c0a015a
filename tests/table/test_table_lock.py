"""The table lock: a lease on storage taken with conditional writes. Waiting, timing out, fencing
numbers, and, with real processes, a holder SIGKILLed (its lease taken over after it expires, not
before), a holder stopped past its lease (fenced: it cannot complete), and 8 processes contending
(no update lost, none done twice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.processes import die_with_parent
from tests.support.s3 import s3_child_env
from tidemark.errors import LockTimeoutError
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.lock import LOCK_PATH, Lease, TableLock

ROOT = Path(__file__).parents[2]
#: a short lease and short waits, so expiry and timeouts happen within a test
SHORT = ConcurrencyConfig(lock_lease_ms=1_000, lock_wait_ms=300, lock_num_retries=1, lock_retry_wait_ms=50)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, S3Options | None]:
    if request.param == "local":
        return str(tmp_path / "t"), None
    location, options = request.getfixturevalue("s3_location")
    return location, options


def _storage(place: tuple[str, S3Options | None]) -> Storage:
    return open_storage(place[0], place[1])


def _lease(storage: Storage) -> Lease:
    return Lease.from_bytes(storage.read(LOCK_PATH), LOCK_PATH)


def test_taken_released_and_taken_again_with_a_higher_fence(place: tuple[str, S3Options | None]) -> None:
    storage = _storage(place)
    with TableLock(storage, SHORT) as first:
        assert first.held
        fence = _lease(storage).fence
        assert _lease(storage).owner == first.owner
    assert not first.held
    assert _lease(storage).released
    with TableLock(storage, SHORT) as second:
        assert _lease(storage).fence == fence + 1
        assert second.check_held().fence == fence + 1


def test_a_held_lock_makes_others_wait_and_then_time_out_naming_the_holder(
    place: tuple[str, S3Options | None],
) -> None:
    storage = _storage(place)
    waits = COUNTERS.snapshot()["lock_waits"]
    with TableLock(storage, ConcurrencyConfig(lock_lease_ms=10_000)) as holder:
        started = time.monotonic()
        with pytest.raises(LockTimeoutError, match=holder.owner):
            TableLock(storage, SHORT).acquire()
        assert time.monotonic() - started >= 0.6  # two attempts of 300 ms
    assert COUNTERS.snapshot()["lock_waits"] == waits + 1
    # once released, the next one takes it at once
    with TableLock(storage, SHORT):
        pass


def test_a_lease_is_renewed_while_held(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    with TableLock(storage, SHORT):
        first = _lease(storage).expiration_ms
        time.sleep(0.8)  # renewed every third of the lease
        assert _lease(storage).expiration_ms > first
        with pytest.raises(LockTimeoutError):  # past the first lease's end, still held
            TableLock(storage, SHORT).acquire()


# --- processes ------------------------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tidemark.storage import S3Options, open_storage
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table.lock import TableLock
    from tidemark.errors import LockLostError

    location, endpoint, lease_ms, mode, out = sys.argv[1:6]
    storage = open_storage(location, S3Options(endpoint_url=endpoint) if endpoint else None)
    lock = TableLock(storage, ConcurrencyConfig(lock_lease_ms=int(lease_ms), lock_wait_ms=60_000))
    if mode == "count":  # K critical sections: read the counter, pause, write it + 1
        fences = []
        for _ in range(int(sys.argv[6])):
            with lock:
                fences.append(lock.check_held().fence)
                n = int(storage.read("counter")) if storage.exists("counter") else 0
                time.sleep(0.01)
                lock.check_held()
                storage.write("counter", str(n + 1).encode())
        Path(out).write_text(",".join(map(str, fences)))
        sys.exit(0)
    lock.acquire()
    print("held", flush=True)
    if mode == "hold":
        time.sleep(600)
    # mode "commit": wait for the go, then complete only while still holding the lock
    sys.stdin.readline()
    try:
        lock.check_held()
    except LockLostError as e:
        print(f"fenced: {e}", flush=True)
        sys.exit(4)
    storage.write("committed", b"yes")
    lock.release()
    """
)


def _start(place: tuple[str, S3Options | None], lease_ms: int, mode: str, out: str = "", *extra: str):
    endpoint = place[1].endpoint_url if place[1] else ""
    return subprocess.Popen(
        [sys.executable, "-c", _HOLDER, place[0], endpoint or "", str(lease_ms), mode, out, *extra],
        cwd=ROOT,
        env=s3_child_env() if place[1] else {**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )


def _wait_held(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "held", (line, proc.stderr.read() if proc.stderr else "")


def test_a_holder_killed_leaves_a_lease_taken_over_only_once_it_expired(place: tuple[str, S3Options | None]) -> None:
    storage = _storage(place)
    holder = _start(place, 2_000, "hold")
    try:
        _wait_held(holder)
        dead = _lease(storage)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        holder.kill()
    takeovers = COUNTERS.snapshot()["lock_takeovers"]
    with TableLock(storage, ConcurrencyConfig(lock_wait_ms=10_000)) as taker:
        taken_at = int(time.time() * 1000)
        assert taker.held
    assert taken_at >= dead.expiration_ms
    assert _lease(storage).fence == dead.fence + 1
    assert COUNTERS.snapshot()["lock_takeovers"] == takeovers + 1


def test_a_holder_stopped_past_its_lease_is_fenced_and_cannot_commit(place: tuple[str, S3Options | None]) -> None:
    storage = _storage(place)
    holder = _start(place, 1_000, "commit")
    try:
        _wait_held(holder)
        os.kill(holder.pid, signal.SIGSTOP)  # a stalled process: a long GC pause, a frozen VM
        with TableLock(storage, ConcurrencyConfig(lock_wait_ms=10_000)):  # taken over after expiry
            os.kill(holder.pid, signal.SIGCONT)
            out, err = holder.communicate("go\n", timeout=60)
        assert holder.returncode == 4, err
        assert "fenced: " in out
        assert "taken over" in out
    finally:
        holder.kill()
    assert not storage.exists("committed")


def test_eight_processes_contending_lose_no_update(tmp_path: Path) -> None:
    place: tuple[str, S3Options | None] = (str(tmp_path / "t"), None)
    storage = _storage(place)
    rounds = 5
    procs = [_start(place, 5_000, "count", str(tmp_path / f"fences-{i}"), str(rounds)) for i in range(8)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            p.kill()
    assert int(storage.read("counter")) == 8 * rounds
    fences = [int(f) for i in range(8) for f in (tmp_path / f"fences-{i}").read_text().split(",")]
    assert len(fences) == len(set(fences)) == 8 * rounds
    assert json.loads(storage.read(LOCK_PATH))["released"] is True
