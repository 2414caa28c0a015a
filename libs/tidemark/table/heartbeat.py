"""Heartbeats: a writer keeps ``.hoodie/.heartbeat/<instant>`` fresh while its write runs (Hudi's
layout), so other writers can tell a live write from one whose driver died.

Hudi judges a heartbeat by the file's modification time on storage. tidemark writes the beat's
time (epoch milliseconds, by the writer's clock; the first beat, which claims the file, adds a
token of its writer's after it) into the file as well, since an object store's modification time
is coarse (whole seconds on S3), and takes the later of the two: a writer whose clock lags is
still judged by when storage got its beat, so it is never judged dead sooner than Hudi would. An
empty file (Hudi's) has only the modification time. A write is dead when its last beat is older
than interval times tolerable misses, by this machine's clock (as Hudi's reader uses its own).

The heartbeat file is created before the write's requested instant, so a pending instant with no
heartbeat is either a writer that died (or finished) long ago or one made before heartbeats
existed: it counts as expired once its own instant time is older than the expiry. Hudi's special
instant times (``00000000000001``: no dates) are older than every other. A beat or instant time
ahead of this machine's clock (a writer's clock ahead, or a LOCAL table's instant stamped east of
UTC) is live until the clock has passed it: never judged dead sooner than Hudi would.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
import uuid
from dataclasses import dataclass

from tidemark.errors import (
    InvalidInstantError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    OutcomeUnknownError,
    StorageError,
)
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.timeline.instant import HUDI_INIT_TIMES, instant_epoch_ms

HEARTBEAT_FOLDER = ".hoodie/.heartbeat"

_log = logging.getLogger("tidemark.heartbeat")


def heartbeat_path(instant: str) -> str:
    return f"{HEARTBEAT_FOLDER}/{instant}"


def now_ms() -> int:
    return int(time.time() * 1000)


def beat(storage: Storage, instant: str) -> int:
    """Write one heartbeat for ``instant`` now; the time written."""
    at = now_ms()
    storage.write(heartbeat_path(instant), str(at).encode())
    return at


def last_beat_ms(storage: Storage, instant: str) -> int | None:
    """When ``instant``'s writer last beat (epoch ms), or None when it has no heartbeat file."""
    path = heartbeat_path(instant)
    try:
        content = storage.read(path)
    except ObjectNotFoundError:
        return None
    # the beat's time, then (in a file a claim created) the claiming writer's token
    text = content.decode("ascii", "replace").split(maxsplit=1)[0] if content.strip() else ""
    written = int(text) if text.isdigit() else None
    try:  # when storage says the file was last written, as Hudi judges it
        modified = storage.modified_ms(path)
    except ObjectNotFoundError:
        return written  # deleted since it was read: its writer just ended
    return modified if written is None else max(written, modified)


@dataclass(frozen=True)
class HeartbeatStatus:
    """What a reader can say about a pending write's writer."""

    instant: str
    last_beat_ms: int | None  # None: no heartbeat file
    age_ms: int  # since the last beat (or since the instant time, without one)
    expired: bool
    #: a compaction's plan that no process runs (it has no heartbeat file): the next
    #: ``tidemark compact`` takes it up at once
    unclaimed: bool = False
    #: how far the last beat (or the instant time, without one) is ahead of this machine's clock
    ahead_ms: int = 0
    #: the file(s) dated ahead: the heartbeat file, or the instant's files without one
    dated_by: str = ""

    def describe(self, compact_refused_while: str | None = None) -> str:
        """``compact_refused_while``: what makes ``tidemark compact`` refuse for now (an unfinished
        restore), said of a plan no process runs instead of that the next compact takes it up."""
        seconds = self.age_ms / 1000
        if self.unclaimed:
            if compact_refused_while:
                refused = f"tidemark compact is refused while {compact_refused_while}"
                return f"no heartbeat (no process runs it, and {refused})"
            return "no heartbeat (no process runs it: the next tidemark compact takes it up)"
        if self.ahead_ms:
            what = "its heartbeat" if self.last_beat_ms is not None else "no heartbeat, and its instant time"
            return f"{what} ({self.dated_by}) is dated {self._ahead()} (h:mm:ss) ahead of this machine's clock"
        if self.last_beat_ms is None and self.instant in HUDI_INIT_TIMES:
            return "no heartbeat (expired: Hudi's special instant time, older than any other)"
        if self.last_beat_ms is None:
            return f"no heartbeat ({'expired' if self.expired else 'starting'}, instant {seconds:.1f} s old)"
        return f"heartbeat {seconds:.1f} s ago ({'expired' if self.expired else 'live'})"

    def rollback_advice(self, config: ConcurrencyConfig, or_else: str) -> str:
        """When a refused rollback of this pending instant can be done, then ``or_else`` (what
        else to do)."""
        expiry_ms = config.heartbeat_expiry_ms
        if not self.ahead_ms:
            return f"it can be rolled back once no heartbeat has come for {expiry_ms} ms, or {or_else}"
        # a clock ahead, or a LOCAL table's instant stamped east of UTC: no expiry can pass before
        # this clock reaches that time
        return (
            f"it can be rolled back only once this machine's clock has passed that time, in {self._ahead()}, "
            f"and no heartbeat has come for {expiry_ms} ms since; {or_else}, or, if that writer is surely dead, "
            f"remove {self.dated_by} by hand"
        )

    def _ahead(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=-(-self.ahead_ms // 1000))


def heartbeat_status(
    storage: Storage, instant: str, config: ConcurrencyConfig, now: int | None = None
) -> HeartbeatStatus:
    return _judged(storage, instant, config, last_beat_ms(storage, instant), now)


def _judged(
    storage: Storage, instant: str, config: ConcurrencyConfig, last: int | None, now: int | None
) -> HeartbeatStatus:
    reference = last if last is not None else _instant_ms(instant)
    if reference is None:
        files = _instant_files(storage, instant)
        raise InvalidInstantError(
            f"{storage.uri}: the pending instant {files} has no heartbeat, and its instant time is not a date: "
            "whether its writer is alive cannot be told, so it is not rolled back; if that writer is surely dead, "
            f"remove {files} by hand"
        )
    now = now_ms() if now is None else now
    age = max(0, now - reference)
    # at or past the expiry: a zero expiry (a process that knows every other writer is gone) means all
    status = HeartbeatStatus(instant, last, age, age >= config.heartbeat_expiry_ms)
    if reference <= now:
        return status
    dated_by = heartbeat_path(instant) if last is not None else _instant_files(storage, instant)
    return dataclasses.replace(status, ahead_ms=reference - now, dated_by=dated_by)


def _instant_ms(instant: str) -> int | None:
    """The time a pending instant stands for (epoch ms), None when it is no date."""
    if instant in HUDI_INIT_TIMES:
        return 0  # Hudi orders them before every instant: as old as can be
    try:
        return instant_epoch_ms(instant)
    except ValueError:
        return None


def _instant_files(storage: Storage, instant: str) -> str:
    """The files of ``instant`` under ``.hoodie/``, as a message names them."""
    names = sorted(name for name in storage.list_dir(".hoodie").files if name.startswith(f"{instant}."))
    return ", ".join(f".hoodie/{name}" for name in names) or f".hoodie/{instant}.*"


def compaction_status(storage: Storage, instant: str, config: ConcurrencyConfig) -> HeartbeatStatus:
    """The heartbeat of the pending compaction ``instant``'s runner. Unlike a write's, a
    compaction's plan without a heartbeat file is nobody's, and free to take up at once (expired):
    a plan waits for its runner (Apache Hudi plans compactions that another job runs later), and
    tidemark's runner creates the file before it plans or takes up a pending one."""
    last = last_beat_ms(storage, instant)
    if last is not None:
        return _judged(storage, instant, config, last, None)
    planned = _instant_ms(instant)  # no date: judged all the same
    age = max(0, now_ms() - planned) if planned is not None else 0
    return HeartbeatStatus(instant, None, age, expired=True, unclaimed=True)


def runner_status(storage: Storage, instant: str, config: ConcurrencyConfig) -> HeartbeatStatus | None:
    """The live heartbeat of the process running the pending compaction ``instant``, None when
    no process runs it (:func:`compaction_status`)."""
    status = compaction_status(storage, instant, config)
    return None if status.expired else status


def delete_heartbeat(storage: Storage, instant: str) -> None:
    storage.delete(heartbeat_path(instant))


class Heartbeat:
    """Beats for one write from :meth:`start` until :meth:`stop`, on a daemon thread.

    A beat that fails (the storage is briefly unreachable) is logged and tried again at the next
    interval; :attr:`last_ok_ms` says when one last landed, so the committer can refuse to
    complete a write whose heartbeat others may already have seen expire.
    """

    def __init__(self, storage: Storage, instant: str, config: ConcurrencyConfig) -> None:
        self.storage = storage
        self.instant = instant
        self.config = config
        self.last_ok_ms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        self.last_ok_ms = beat(self.storage, self.instant)  # the first beat must land: fail the write otherwise
        return self._run_in_background()

    def claim(self) -> bool:
        """Start with a first beat that creates the heartbeat file only if no other writer's is
        there: two writers that picked the same instant time must not share a heartbeat (the
        loser would delete the winner's on its way out). False, with nothing written, when the
        instant is taken; the caller picks another."""
        at = now_ms()
        # a token of this claim's own after the time: two writers claiming in one millisecond must
        # not write the same bytes, which S3 would take for ours after a create whose answer was lost
        content = f"{at} {uuid.uuid4().hex}".encode()
        try:
            self.storage.create_if_absent(heartbeat_path(self.instant), content)
        except (ObjectAlreadyExistsError, OutcomeUnknownError):  # unknown: given up, as a taken one
            return False
        self.last_ok_ms = at
        self._run_in_background()
        return True

    def _run_in_background(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name=f"tidemark-heartbeat-{self.instant}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        while not self._stop.wait(interval):
            try:
                self.last_ok_ms = beat(self.storage, self.instant)
            except StorageError as e:
                _log.warning("heartbeat of write %s failed (retried at the next interval): %s", self.instant, e)

    def expired_for_others(self) -> bool:
        """Whether other writers may by now have judged this write dead (no beat landed within the
        expiry): it must then not complete."""
        return now_ms() - self.last_ok_ms > self.config.heartbeat_expiry_ms

    def stop(self, delete: bool = True) -> None:
        """Stop beating; ``delete`` removes the heartbeat file (the write is over, either way)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if delete:
            try:
                delete_heartbeat(self.storage, self.instant)
            except StorageError as e:  # an expired leftover heartbeat harms nobody
                _log.warning("could not delete the heartbeat of instant %s: %s", self.instant, e)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
