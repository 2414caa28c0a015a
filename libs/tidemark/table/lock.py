"""The table lock: a lease on storage that serializes commits (check for conflicts, then complete)
and table service planning per table, with no lock service.

The lease is ``.hoodie/.locks/table_lock.json`` (where Hudi 1.x's storage-based lock provider
keeps its own), changed only by conditional writes:

- **take** a lock nobody ever held: create-if-absent;
- **take over** a released or expired lease, **renew** and **release** one: compare-and-swap on
  the version read (``If-Match`` with the ETag on S3, a swap under ``flock`` locally);
- every acquisition writes a **fencing number** one above the last, and the holder proves it still
  holds the lease right before its commit (:meth:`TableLock.check_held`, a renewing swap on the
  version it last wrote): a holder whose lease expired and was taken over cannot complete.

Assumed, not enforced: the clocks of the machines agree to well within the lease, and a holder
does not stall between :meth:`TableLock.check_held` and its next write for longer than the lease.
The file is never deleted, so fencing numbers never restart.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from tidemark.errors import (
    LockLostError,
    LockTimeoutError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    StorageError,
    VersionMismatchError,
)
from tidemark.storage.base import Storage
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig

LOCK_PATH = ".hoodie/.locks/table_lock.json"

_log = logging.getLogger("tidemark.lock")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Lease:
    """One holder's claim on the table lock, as written in the lock file."""

    owner: str
    fence: int
    expiration_ms: int
    released: bool = False
    host: str = ""
    pid: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "owner": self.owner,
                "fence": self.fence,
                "expiration_ms": self.expiration_ms,
                "released": self.released,
                "host": self.host,
                "pid": self.pid,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Lease:
        try:
            obj = json.loads(data)
            return cls(
                str(obj["owner"]),
                int(obj["fence"]),
                int(obj["expiration_ms"]),
                bool(obj.get("released", False)),
                str(obj.get("host", "")),
                int(obj.get("pid", 0)),
            )
        except (ValueError, KeyError, TypeError) as e:
            # a lock file nobody can read must not stop the table for ever: treat it as expired
            _log.warning("the table lock %s is unreadable (%s); it counts as expired", where, e)
            return cls("(unreadable)", 0, 0, True)

    def describe(self) -> str:
        left = (self.expiration_ms - _now_ms()) / 1000
        return f"{self.owner} (host {self.host or '?'}, pid {self.pid or '?'}, lease ends in {left:.1f} s)"


class TableLock:
    """The lock of the table at ``storage``'s root; ``with TableLock(storage, config) as lease:``."""

    def __init__(self, storage: Storage, config: ConcurrencyConfig, owner: str | None = None) -> None:
        self.storage = storage
        self.config = config
        self.host = socket.gethostname()
        self.owner = owner or f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._lease: Lease | None = None
        self._version: str | None = None
        self._lost: str | None = None  # why the lease was lost, once it was
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._blocker: Lease | None = None  # the lease that made the last take wait

    @property
    def held(self) -> bool:
        return self._lease is not None and self._lost is None

    @property
    def where(self) -> str:
        return self.storage.full_uri(LOCK_PATH)

    # --- taking -----------------------------------------------------------------------------------

    def _read(self) -> tuple[Lease, str] | None:
        try:
            data, version = self.storage.read_versioned(LOCK_PATH)
        except ObjectNotFoundError:
            return None
        return Lease.from_bytes(data, self.where), version

    def _try_take(self) -> Lease | None:
        """Take the lock if nobody holds a valid lease: the new lease, or None with the current
        holder's lease left in :attr:`_blocker`."""
        current = self._read()
        lease = Lease(self.owner, 1, _now_ms() + self.config.lock_lease_ms, False, self.host, os.getpid())
        try:
            if current is None:
                self._version = self.storage.write_if_match(LOCK_PATH, lease.to_bytes(), None)
                return lease
            held, version = current
            if not held.released and held.expiration_ms > _now_ms():
                self._blocker = held
                return None
            lease = Lease(self.owner, held.fence + 1, lease.expiration_ms, False, self.host, os.getpid())
            self._version = self.storage.write_if_match(LOCK_PATH, lease.to_bytes(), version)
            if not held.released:
                COUNTERS.add("lock_takeovers")
                _log.warning("took over the table lock %s from %s, whose lease had expired", self.where, held.owner)
            return lease
        except (ObjectAlreadyExistsError, VersionMismatchError):
            return None  # another taker won this race: wait like anyone else

    def acquire(self) -> Lease:
        """Take the lock, waiting while another process holds a valid lease: polled until
        ``hoodie.write.lock.wait_time_ms``, then again after ``..._between_retry``, up to
        ``hoodie.write.lock.num_retries`` times; then :class:`LockTimeoutError`."""
        if self.held:
            raise StorageError(f"{self.where}: this process already holds the table lock")
        self._blocker = None
        waited = False
        for attempt in range(self.config.lock_num_retries + 1):
            if attempt:
                time.sleep(self.config.lock_retry_wait_ms / 1000)
            deadline = time.monotonic() + self.config.lock_wait_ms / 1000
            pause = 0.05
            while True:
                lease = self._try_take()
                if lease is not None:
                    self._held(lease)
                    return lease
                if not waited:
                    waited = True
                    COUNTERS.add("lock_waits")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                blocker = self._blocker
                until_expiry = (blocker.expiration_ms - _now_ms()) / 1000 if blocker else pause
                time.sleep(max(0.01, min(pause, left, until_expiry + 0.01)))
                pause = min(pause * 2, 1.0)
        holder = self._blocker.describe() if self._blocker else "another process"
        raise LockTimeoutError(
            f"could not take the table lock {self.where}: held by {holder}; waited "
            f"{self.config.lock_num_retries + 1} times {self.config.lock_wait_ms} ms"
        )

    def _held(self, lease: Lease) -> None:
        self._lease = lease
        self._lost = None
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="tidemark-table-lock", daemon=True)
        self._renewer.start()

    # --- holding ----------------------------------------------------------------------------------

    def _renew(self) -> Lease:
        """Extend the lease by a swap on the version last written; :class:`LockLostError` when
        the file changed under us (taken over)."""
        with self._mutex:
            if self._lease is None or self._lost is not None:
                raise LockLostError(f"{self.where}: not held by this process ({self._lost or 'never taken'})")
            renewed = Lease(
                self.owner, self._lease.fence, _now_ms() + self.config.lock_lease_ms, False, self.host, os.getpid()
            )
            try:
                self._version = self.storage.write_if_match(LOCK_PATH, renewed.to_bytes(), self._version)
            except VersionMismatchError as e:
                current = self._read()
                now_held = current[0].describe() if current else "nobody"
                self._lost = f"the lease expired and was taken over; held now by {now_held}"
                raise LockLostError(f"{self.where}: {self._lost}") from e
            self._lease = renewed
            return renewed

    def _renew_loop(self) -> None:
        period = self.config.lock_lease_ms / 3000
        while not self._stop.wait(period):
            try:
                self._renew()
            except LockLostError as e:
                _log.error("%s", e)
                return
            except StorageError as e:  # a blink of the storage: the next period tries again
                _log.warning("could not renew the table lock %s (tried again in %.1f s): %s", self.where, period, e)

    def check_held(self) -> Lease:
        """The fencing point, right before the write that completes what the lock guards: renews
        the lease, which proves it is still this process's; :class:`LockLostError` otherwise."""
        return self._renew()

    # --- releasing --------------------------------------------------------------------------------

    def release(self) -> None:
        """Give the lock up (nothing happens when it was lost already)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=10)
            self._renewer = None
        with self._mutex:
            lease, self._lease = self._lease, None
            if lease is None or self._lost is not None:
                return
            done = Lease(self.owner, lease.fence, _now_ms(), True, self.host, os.getpid())
            try:
                self.storage.write_if_match(LOCK_PATH, done.to_bytes(), self._version)
            except VersionMismatchError:
                _log.warning("the table lock %s was taken over before this process released it", self.where)
            except StorageError as e:  # the lease runs out by itself
                _log.warning("could not release the table lock %s (its lease will expire): %s", self.where, e)

    def __enter__(self) -> TableLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
