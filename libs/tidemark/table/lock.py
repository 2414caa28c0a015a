"""The table lock: a lease on storage that serializes what must not interleave on one table (a
commit's conflict check and completion, a table service's planning), with no lock service.

The lease lives in ``.hoodie/.locks/table_lock.json`` (where Hudi 1.x's storage-based lock provider
keeps its own), a JSON object: ``owner``, ``fence``, ``expiration_ms`` (epoch ms), ``released``,
and for people reading it ``host``, ``pid`` and ``acquired_ms``. It only ever changes by
conditional writes (:meth:`Storage.write_if_match`):

- **take**: create-if-absent when the table never had a lock file; over a lease that is released,
  or whose expiration has passed, a compare-and-swap on the version read. Of several takers one
  wins; the others wait as they would for a holder. Each take writes the fencing number one above
  the last, so fencing numbers rise over the table's life; the file is never deleted for that
  reason (a new file would start again at 1).
- **renew**: while held, a daemon thread swaps in a later expiration every third of the lease, on
  the version this holder last wrote. A swap refused means someone took the lock over: the lease
  is lost for good.
- **check** (:meth:`TableLock.check_held`), right before the write that completes the guarded work:
  a renewal done at once, so it proves that nobody took the lock over; a holder that stalled past
  its lease (a long GC pause, a stopped VM) learns here that it lost, and must not complete.
- **release**: a swap to ``released: true``; refused means the lock had been lost already.

A taker judges a lease expired by its own clock against the expiration the holder wrote by the
holder's clock. Assumed, not enforced: the clocks of the machines sharing a table differ by much
less than the lease, and a holder does not stall between :meth:`TableLock.check_held` and its
completing write for longer than the lease (then the lock may have passed on, and the write lands
anyway: storage has no way to refuse it). Owners must be unique (the default is
``host:pid:uuid``): a holder recognizes its own writes by its owner, host and pid, and so finds
out that a write whose answer was lost did land, or that its failed release left its own lease.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tidemark.errors import (
    LockError,
    LockLostError,
    LockTimeoutError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    StorageError,
    VersionMismatchError,
)
from tidemark.storage.base import Storage
from tidemark.table.concurrency import COUNTERS, LOCK_RETRIES_KEY, LOCK_RETRY_WAIT_KEY, LOCK_WAIT_KEY, ConcurrencyConfig

LOCK_FOLDER = ".hoodie/.locks"
LOCK_PATH = f"{LOCK_FOLDER}/table_lock.json"

#: how long a waiter first pauses between looks at a held lock, and at most (it doubles)
FIRST_POLL_S = 0.05
LONGEST_POLL_S = 1.0
#: the least pause, so that a lease expiring now does not make a busy loop
_SHORTEST_POLL_S = 0.005
#: how long a waiter waits before it says whom it waits for: a live holder's commit takes less,
#: a stopped holder's lease a minute by default, which would otherwise pass in silence
SAY_WAITING_AFTER_S = 2.0

_log = logging.getLogger("tidemark.lock")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _utc(epoch_ms: int) -> str:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Lease:
    """One holder's claim on the table lock, as the lock file says it."""

    owner: str
    fence: int
    expiration_ms: int
    released: bool = False
    host: str = ""
    pid: int = 0
    acquired_ms: int = 0

    def expired(self, now_ms: int) -> bool:
        """Whether anyone may take the lock over at ``now_ms`` (the taker's clock)."""
        return self.released or self.expiration_ms <= now_ms

    def to_bytes(self) -> bytes:
        record = dataclasses.asdict(self)
        # new in every write: on S3 a version is the MD5 of the bytes, and no two writes of the
        # lock file may look alike, or a stale compare-and-swap could pass
        record["write"] = uuid.uuid4().hex
        return json.dumps(record, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Lease:
        """The lease in a lock file's bytes; :class:`LockError` naming ``where`` when they are not
        one (the file is never half written, so that is someone else's file, or damage)."""
        try:
            record = json.loads(data)
            return cls(
                owner=str(record["owner"]),
                fence=int(record["fence"]),
                expiration_ms=int(record["expiration_ms"]),
                released=bool(record.get("released", False)),
                host=str(record.get("host", "")),
                pid=int(record.get("pid", 0)),
                acquired_ms=int(record.get("acquired_ms", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # taking it over would restart the fencing numbers: a person has to look
            raise LockError(
                f"{where} is not a tidemark table lock ({type(e).__name__}: {e}; it starts "
                f"{data[:80]!r}): no writer can take the lock until it is repaired"
            ) from e

    def describe(self, now_ms: int | None = None) -> str:
        """Who holds it and until when, for messages."""
        now = _now_ms() if now_ms is None else now_ms
        who = f"{self.owner} (host {self.host or '?'}, pid {self.pid or '?'}, fence {self.fence})"
        if self.released:
            return f"{who}, released"
        left_s = (self.expiration_ms - now) / 1000
        when = f"in {left_s:.1f} s" if left_s >= 0 else f"{-left_s:.1f} s ago"
        return f"{who}, whose lease expires at {_utc(self.expiration_ms)} ({when})"


class TableLock:
    """The lock of the table rooted at ``storage``; ``with TableLock(storage, config) as lock:``
    holds it for the block (``lock.check_held()`` before the completing write). Settings:
    :class:`ConcurrencyConfig` (``lock_wait_ms``, ``lock_num_retries``, ``lock_retry_wait_ms``,
    ``lock_lease_ms``). One holder at a time per object; it may be acquired again after release."""

    def __init__(self, storage: Storage, config: ConcurrencyConfig, owner: str | None = None) -> None:
        self.storage = storage
        self.config = config
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = owner or f"{self.host}:{self.pid}:{uuid.uuid4().hex}"
        # guards the fields below: the renewing thread and the caller both swap
        self._mutex = threading.Lock()
        self._lease: Lease | None = None
        self._version: str | None = None  # of the lock file as this holder last wrote it
        self._lost: str | None = None  # why the lease was lost, once it was
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def table(self) -> str:
        return self.storage.uri

    @property
    def where(self) -> str:
        return self.storage.full_uri(LOCK_PATH)

    @property
    def lease(self) -> Lease | None:
        """The lease as last written by this holder (None when not holding)."""
        # no mutex: the renewer holds it through a storage call, and this is only a glance
        lease = self._lease
        return None if self._lost is not None else lease

    @property
    def held(self) -> bool:
        """Whether this object holds the lock: taken, not lost, and its lease still running by this
        machine's clock."""
        lease = self.lease
        return lease is not None and lease.expiration_ms > _now_ms()

    # --- taking -----------------------------------------------------------------------------------

    def acquire(self) -> Lease:
        """Take the lock, waiting while another holder's lease is valid: looked at again and again
        (about 50 ms apart at first, doubling up to 1 s, never past the lease's end) for
        ``lock_wait_ms``, then, as Hudi's LockManager does, after ``lock_retry_wait_ms`` for as long
        again, up to ``lock_num_retries`` times. Then :class:`LockTimeoutError`, naming the holder.
        A storage failure is raised as it is (a :class:`StorageError`)."""
        with self._mutex:
            if self._lease is not None and self._lost is None:
                raise LockError(f"{self.where}: {self.owner} holds the table lock already; release it first")
            self._stop.set()  # the renewer of a lease lost before, should it still be waiting
            self._lease, self._version, self._lost = None, None, None
        try:
            return self._wait_and_take()
        except KeyboardInterrupt:
            # a Ctrl-C (or SIGTERM) that came once the lock file's write had landed, before the
            # lease was recorded (on S3, while the PUT's answer was read): the caller's release
            # never comes (``with`` calls no __exit__ when __enter__ raised) and the lease kept
            # every other writer out until it expired, a minute by default
            self._release_interrupted_take()
            raise

    def _wait_and_take(self) -> Lease:
        waited = False
        holder: Lease | None = None
        started = time.monotonic()
        said: tuple[str, int] | None = None  # the holder told of, by owner and fence
        for attempt in range(self.config.lock_num_retries + 1):
            if attempt:
                time.sleep(self.config.lock_retry_wait_ms / 1000)
            deadline = time.monotonic() + self.config.lock_wait_ms / 1000
            pause = FIRST_POLL_S
            while True:
                taken, blocking = self._try_take()
                if taken is not None:
                    self._start_renewing()
                    return taken
                holder = blocking or holder
                if not waited:
                    waited = True
                    COUNTERS.add("lock_waits")
                if (
                    blocking is not None
                    and said != (blocking.owner, blocking.fence)
                    and time.monotonic() - started >= SAY_WAITING_AFTER_S
                ):
                    said = (blocking.owner, blocking.fence)
                    _log.warning("waiting for the table lock of %s, held by %s", self.table, blocking.describe())
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    break
                # jittered, so that waiters drift apart instead of all looking (and racing) at once
                nap = min(random.uniform(pause / 2, pause), left_s)
                if blocking is not None:  # look again as soon as that lease runs out
                    nap = min(nap, (blocking.expiration_ms - _now_ms()) / 1000 + _SHORTEST_POLL_S)
                time.sleep(max(nap, _SHORTEST_POLL_S))
                pause = min(pause * 2, LONGEST_POLL_S)
        raise LockTimeoutError(self._timeout_message(holder))

    def _release_interrupted_take(self) -> None:
        """Release the lease an interrupted :meth:`acquire` may have written: the one recorded,
        else this owner's lease in the lock file, if it is there unreleased."""
        if self._lease is not None:
            self.release()
        else:
            self._release_left_lease("taken")

    def _release_left_lease(self, when: str) -> None:
        """Release this owner's lease if the lock file holds it unreleased: what an interrupted
        take or release (``when``) left there, whether or not its write landed."""
        self._stop.set()
        # a 2nd Ctrl-C (a SIGTERM after a kill, a double Ctrl-C) would cut this short too, and
        # leave the lease held: held off for its one read and write, the stop is under way anyway
        with _interrupts_held(), self._mutex:  # a renewal under way ends first, and none starts after
            self._lease, self._version = None, None
            try:
                found = self._read()
                if found is None or not self._mine(found[0]) or found[0].released:
                    return  # not (or no longer) this owner's
                lease, version = found
                self.storage.write_if_match(
                    LOCK_PATH, dataclasses.replace(lease, released=True, expiration_ms=_now_ms()).to_bytes(), version
                )
            except (StorageError, LockError) as e:
                _log.warning(
                    "could not release the table lock of %s, %s as the command was interrupted; others may "
                    "wait until its lease ends: %s",
                    self.table,
                    when,
                    e,
                )

    def _timeout_message(self, holder: Lease | None) -> str:
        who = f"held by {holder.describe()}" if holder else "other writers took it each time it came free"
        return (
            f"timed out waiting for the table lock of {self.table} ({self.where}): {who}; waited "
            f"{self.config.lock_wait_ms} ms {self.config.lock_num_retries + 1} times, "
            f"{self.config.lock_retry_wait_ms} ms apart ({LOCK_WAIT_KEY}, {LOCK_RETRIES_KEY}, {LOCK_RETRY_WAIT_KEY})"
        )

    def _read(self) -> tuple[Lease, str] | None:
        """The lease in the lock file and the file's version; None when there is no lock file."""
        try:
            data, version = self.storage.read_versioned(LOCK_PATH)
        except ObjectNotFoundError:
            return None
        return Lease.from_bytes(data, self.where), version

    def _try_take(self) -> tuple[Lease | None, Lease | None]:
        """One attempt: (the lease taken, None), or (None, the valid lease in the way), or
        (None, None) when another taker won the race for a free lock."""
        found = self._read()
        now = _now_ms()
        if found is not None and not found[0].expired(now) and not self._mine(found[0]):
            return None, found[0]
        previous, version = found if found is not None else (None, None)
        lease = Lease(
            owner=self.owner,
            fence=previous.fence + 1 if previous is not None else 1,
            expiration_ms=now + self.config.lock_lease_ms,
            host=self.host,
            pid=self.pid,
            acquired_ms=now,
        )
        try:
            new_version = self.storage.write_if_match(LOCK_PATH, lease.to_bytes(), version)
        except (ObjectAlreadyExistsError, VersionMismatchError):
            return None, None
        if previous is not None and not previous.released and not self._mine(previous):
            COUNTERS.add("lock_takeovers")
            _log.warning(
                "took over the table lock of %s from %s: its holder stopped renewing",
                self.table,
                previous.describe(now),
            )
        with self._mutex:
            self._lease, self._version, self._lost = lease, new_version, None
        return lease, None

    def _mine(self, lease: Lease) -> bool:
        """Whether ``lease`` was written by this object: then a valid one is a lease its release
        failed to end, which it may take again at once (nobody else can hold it)."""
        return (lease.owner, lease.host, lease.pid) == (self.owner, self.host, self.pid)

    def _start_renewing(self) -> None:
        self._stop = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew_until, args=(self._stop,), name=f"table-lock-renewer {self.table}", daemon=True
        )
        self._renewer.start()

    # --- holding ----------------------------------------------------------------------------------

    def _renew_until(self, stop: threading.Event) -> None:
        period_s = self.config.lock_lease_ms / 3 / 1000
        while not stop.wait(period_s):
            with self._mutex:
                if stop.is_set() or self._lease is None or self._lost is not None:
                    return
                try:
                    self._renew_locked()
                except LockLostError as e:
                    # not an error of its own: the work under the lock is refused at its next
                    # check (check_held), and that error says so
                    _log.info("%s", e)
                    return
                except StorageError as e:  # a blink of the storage: the lease outlasts a few ticks
                    _log.warning(
                        "could not renew the table lock of %s (trying again in %.1f s; %s): %s",
                        self.table,
                        period_s,
                        self._lease.describe(),
                        e,
                    )

    def _renew_locked(self) -> Lease:
        """Swap in a later expiration (the caller holds ``_mutex``)."""
        assert self._lease is not None
        renewed = dataclasses.replace(self._lease, expiration_ms=_now_ms() + self.config.lock_lease_ms)
        self._swap_locked(renewed, self._lease)
        self._lease = renewed
        return renewed

    def _swap_locked(self, lease: Lease, mine: Lease) -> None:
        """Write ``lease`` over the version this holder last wrote, which held ``mine`` (the
        caller holds ``_mutex``); :class:`LockLostError` when the file is no longer this
        holder's."""
        try:
            self._version = self.storage.write_if_match(LOCK_PATH, lease.to_bytes(), self._version)
            return
        except VersionMismatchError as e:
            refused: VersionMismatchError = e
        try:
            found = self._read()
        except (StorageError, LockError) as e:
            found = None
            now_held = f"the lock file could not be read to tell by whom ({e})"
        else:
            now_held = (
                f"the lock file now holds the lease of {found[0].describe()}" if found else "the lock file was deleted"
            )
        if found is not None:
            current, version = found
            if current.owner == self.owner and current.fence == mine.fence and not current.released:
                # a write of ours landed though its answer was lost: the lease is still ours
                try:
                    self._version = self.storage.write_if_match(LOCK_PATH, lease.to_bytes(), version)
                    return
                except VersionMismatchError as e:
                    refused = e
        self._lost = (
            f"lost the table lock of {self.table} ({self.where}): the lease of {self.owner} (fence "
            f"{mine.fence}, to {_utc(mine.expiration_ms)}) was taken over; {now_held}"
        )
        raise LockLostError(self._lost) from refused

    def check_held(self) -> Lease:
        """The fencing point, called right before the write that completes the guarded work:
        renews the lease, which proves that nobody took it over, and returns it. Raises
        :class:`LockLostError` when the lock was lost (the work must not complete),
        :class:`LockError` when it was never taken or is released, and a :class:`StorageError`
        when storage failed (then nothing is proven: do not complete either)."""
        with self._mutex:
            if self._lost is not None:
                raise LockLostError(self._lost)
            if self._lease is None:
                raise LockError(f"{self.where}: {self.owner} does not hold the table lock (acquire it first)")
            return self._renew_locked()

    # --- releasing --------------------------------------------------------------------------------

    def release(self) -> None:
        """Give the lock up, keeping the file (and so the fencing number). Nothing is raised: a
        lock lost already, or a storage failure (the lease then runs out by itself), is logged.
        A Ctrl-C (or SIGTERM) that lands in it is raised once the lease is released."""
        try:
            self._release()
        except KeyboardInterrupt:
            # landed in the renewer's join or in the lock file's write (on S3, during its PUT):
            # the lease stayed held, and every other writer waited for it to expire, a minute by
            # default, though the command said it had released it
            self._release_left_lease("released")
            raise

    def _release(self) -> None:
        self._stop.set()
        renewer, self._renewer = self._renewer, None
        # not alive: one whose start an interrupt cut short, which ends by itself on _stop (a
        # join raised, and the lease was left held)
        if renewer is not None and renewer.is_alive():
            renewer.join()
        with self._mutex:
            lease, self._lease = self._lease, None
            if lease is None:
                return  # never taken, or released already
            if self._lost is not None:
                _log.info("nothing to release: %s", self._lost)
                return
            try:
                self._swap_locked(dataclasses.replace(lease, released=True, expiration_ms=_now_ms()), lease)
            except LockLostError as e:
                _log.warning("%s (found at release)", e)
            except StorageError as e:
                _log.warning(
                    "could not release the table lock of %s; others wait until its lease ends at %s: %s",
                    self.table,
                    _utc(lease.expiration_ms),
                    e,
                )
            self._version = None

    def __enter__(self) -> TableLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored for the block, in the main thread (where Python runs signal
    handlers); elsewhere, or where a handler cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for s in held:
            signal.signal(s, signal.SIG_IGN)
    except (ValueError, OSError):  # not settable here: as before
        pass
    try:
        yield
    finally:
        for s, handler in held.items():
            if handler is not None:
                signal.signal(s, handler)


def check_still_held(lock: TableLock | None, what: str, undo: Callable[[], None] | None = None) -> None:
    """:meth:`TableLock.check_held` for ``what`` (a table service) right before its plan or its
    first change: stalled past its lease, it planned from a timeline others may have changed since
    (a savepoint made or deleted, files cleaned), so it stops there, and says so. Called again
    right after the plan is written, with ``undo`` to remove it: a renewal that succeeds proves
    that nobody held the lock in between, which closes the gap between the check and the write."""
    if lock is None:
        return
    try:
        lock.check_held()
    except (LockLostError, StorageError) as e:
        if undo is not None:  # nothing proven either way on a storage error: taken back too
            try:
                undo()
            except StorageError as failed:  # the plan stays; what finishes it checks it again
                _log.warning("%s could not take its plan back: %s", what, failed)
        if isinstance(e, LockLostError):
            raise LockLostError(f"{e}; {what} stopped before making its changes: run it again") from e
        raise


@contextmanager
def table_lock(storage: Storage, config: ConcurrencyConfig) -> Iterator[TableLock | None]:
    """The table lock with optimistic concurrency (None in single-writer mode, which takes none):
    for work that must not interleave with a commit, a rollback or a restore."""
    if not config.optimistic:
        yield None
        return
    with TableLock(storage, config) as lock:
        yield lock
