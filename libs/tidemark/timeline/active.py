"""The active timeline: the instant state files directly under ``.hoodie/``.

A :class:`Timeline` is an immutable snapshot; reading one lists ``.hoodie/`` once. Moving an
instant forward creates its next state file with create-if-absent, so of two writers racing on
one instant exactly one succeeds and the other gets :class:`InstantStateError`.

A new instant's time is claimed before its first state file is created (:func:`claim_instant_time`):
a write and a compaction that start in the same millisecond would otherwise both take that
time, under different file names that create-if-absent cannot tell apart.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from tidemark.bulk import collector_paused
from tidemark.errors import (
    ConcurrencyError,
    InstantStateError,
    InstantTimeAheadError,
    InvalidInstantError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    OutcomeUnknownError,
    StorageError,
)
from tidemark.storage.base import Storage, require_storage
from tidemark.timeline.instant import (
    COMMIT,
    COMPACTION,
    SAVEPOINT,
    WRITE_ACTIONS,
    Instant,
    State,
    instant_epoch_ms,
    new_instant_time,
)

METAFOLDER = ".hoodie"
#: ``<instant time>``: held, created if absent, by a process between picking a new instant time and
#: creating that instant's first state file
CLAIM_FOLDER = f"{METAFOLDER}/.claims"
#: how many new instant times one process tries before it gives up (each taken one is another
#: process that started in the same millisecond)
CLAIM_TRIES = 20
#: how far the latest instant may be ahead of this machine's clock before a new instant time is
#: refused rather than waited for. Clocks kept by NTP differ by milliseconds (Hudi's own time
#: generator assumes at most 200 ms), so waiting this long absorbs any ordinary skew; an instant
#: stamped in local time is at least 30 minutes off, and a clock seconds behind is worth fixing
#: rather than waiting out before every write.
MAX_AHEAD_MS = 10_000

_log = logging.getLogger("tidemark.timeline")


@dataclass(frozen=True)
class Timeline:
    """Instants at their latest state, one per (time, action), in time order."""

    instants: tuple[Instant, ...]

    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.instants)

    def completed(self) -> Timeline:
        return Timeline(tuple(i for i in self.instants if i.is_completed))

    def pending(self) -> Timeline:
        return Timeline(tuple(i for i in self.instants if not i.is_completed))

    def of_actions(self, *actions: str) -> Timeline:
        return Timeline(tuple(i for i in self.instants if i.action in actions))

    def write_instants(self) -> Timeline:
        """Instants that write data: commit, deltacommit, replacecommit, compaction."""
        return self.of_actions(*WRITE_ACTIONS)

    def first_non_savepoint_write(self) -> str | None:
        """Where the active timeline starts for data (Hudi's ``firstNonSavepointCommit``): the time
        of the first write instant, in any state, that is not savepointed. Archival beyond
        savepoints (``hoodie.archive.beyond.savepoint``) keeps the savepointed commits and archives
        the writes between them, so a write missing before this time was archived, not rolled
        back. When every write is savepointed, the last one (None: no write)."""
        writes = self.write_instants().instants
        savepointed = {i.timestamp for i in self.completed().of_actions(SAVEPOINT)}
        first = next((i.timestamp for i in writes if i.timestamp not in savepointed), None)
        return first if first is not None or not writes else writes[-1].timestamp

    def as_of(self, timestamp: str) -> Timeline:
        """Instants at or before ``timestamp`` (time travel within the active timeline)."""
        return Timeline(tuple(i for i in self.instants if i.timestamp <= timestamp))

    def last(self) -> Instant | None:
        return self.instants[-1] if self.instants else None

    def find(self, timestamp: str, action: str | None = None) -> Instant | None:
        """The instant at ``timestamp`` (of ``action``, when given: a savepoint shares its commit's
        time, and tables written before instant times were claimed may hold two instants at one)."""
        for instant in self._by_timestamp.get(timestamp, ()):
            if action is None or instant.action == action:
                return instant
        return None

    @functools.cached_property
    def _by_timestamp(self) -> dict[str, list[Instant]]:
        # a reader looks up each of a slice's instants: a scan of every instant each time made
        # reads of a table with thousands of instants quadratic
        index: dict[str, list[Instant]] = {}
        for instant in self.instants:
            index.setdefault(instant.timestamp, []).append(instant)
        return index

    def is_completed(self, timestamp: str) -> bool:
        found = self.find(timestamp)
        return found is not None and found.is_completed

    def timestamps(self) -> frozenset[str]:
        return frozenset(i.timestamp for i in self.instants)


@functools.lru_cache(maxsize=1 << 18)
def _parse(name: str) -> Instant | None:
    # services re-read the same timelines on every event: a state file's name always means the
    # same instant, so each is parsed once per process
    try:
        return Instant.parse(name)
    except InvalidInstantError:
        return None  # hoodie.properties, folders' files, anything not an instant


def _latest_states(files: Iterable[str]) -> list[Instant]:
    by_key: dict[str, Instant] = {}
    compaction_times: set[str] = set()
    for name in files:
        instant = _parse(name)
        if instant is None:
            continue
        if instant.action == COMPACTION:
            compaction_times.add(instant.timestamp)
        key = f"{instant.timestamp}.{instant.action}"
        current = by_key.get(key)
        if current is None or instant.state > current.state:
            by_key[key] = instant
    result = []
    for instant in by_key.values():
        # a compaction completes as "<ts>.commit": fold it into the compaction's own instant
        if instant.action == COMMIT and instant.timestamp in compaction_times:
            continue
        if instant.action == COMPACTION and f"{instant.timestamp}.{COMMIT}" in by_key:
            instant = instant.with_state(State.COMPLETED)
        result.append(instant)
    # a plain key: the dataclass's generated ordering costs a tuple per comparison
    result.sort(key=lambda i: (i.timestamp, i.action, i.state))
    return result


def next_instant_time(timeline: Timeline, after: str | None = None, table: str = "the table") -> str:
    """A new instant time later than every instant on ``timeline`` (and than ``after``): instant
    times order the timeline, so a new one must never sort before an existing one. Waits for the
    clock to pass the latest instant, unless that is more than :data:`MAX_AHEAD_MS` away
    (:class:`InstantTimeAheadError`, naming ``table``). Not yet claimed: see :func:`claim_instant_time`."""
    last = timeline.last()
    floor = max(last.timestamp if last else "", after or "")
    ts = new_instant_time()
    if ts <= floor:
        _check_not_far_ahead(floor, ts, table)
    while ts <= floor:
        time.sleep(0.002)
        ts = new_instant_time()
    return ts


def _check_not_far_ahead(latest: str, now: str, table: str) -> None:
    try:
        ahead_ms = instant_epoch_ms(latest) - instant_epoch_ms(now)
    except ValueError:  # no date at all: no clock ever reaches it
        raise InstantTimeAheadError(
            f"{table}: its latest instant {latest} is not a date (a damaged name), yet sorts after this machine's "
            f"clock (now {now} in UTC), and a new instant must be later than it: no clock ever will be. No new "
            f"instant was made; remove or rename the files .hoodie/{latest}.* by hand"
        ) from None
    if ahead_ms <= MAX_AHEAD_MS:
        return
    ahead = datetime.timedelta(seconds=ahead_ms // 1000)
    raise InstantTimeAheadError(
        f"{table}: its latest instant {latest} is {ahead} (h:mm:ss) ahead of this machine's clock (now {now} in "
        "UTC), and a new instant must be later than it. tidemark stamps instant times in UTC; an instant that far "
        "ahead was most likely stamped in local time by a writer east of UTC (Apache Hudi's "
        "hoodie.table.timeline.timezone defaults to LOCAL: give that writer hoodie.table.timeline.timezone=UTC), "
        "or this machine's clock is behind. No new instant was made; one can be once the clock has passed it"
    )


def claim_path(timestamp: str) -> str:
    return f"{CLAIM_FOLDER}/{timestamp}"


#: a claim is released within moments (once its instant's first state file exists): one of a
#: time this far past is a killed process's
ABANDONED_CLAIM_AGE_S: Final = 3600.0


def abandoned_claims(storage: Storage, older_than_s: float = ABANDONED_CLAIM_AGE_S) -> tuple[str, ...]:
    """The claims of instant times more than ``older_than_s`` seconds past (a claim is its time's
    name, in UTC): a claim is released within moments, so such a one is a killed process's, and
    only keeps a past time from being taken again."""
    cutoff = _claim_cutoff(older_than_s)
    names = sorted(storage.list_dir(CLAIM_FOLDER).files)
    return tuple(claim_path(name) for name in names if name.isdigit() and name < cutoff)


def live_claims(storage: Storage) -> tuple[str, ...]:
    """The instant times claimed now, oldest first, an abandoned claim's aside (see
    :func:`abandoned_claims`): instants that are being opened."""
    cutoff = _claim_cutoff(ABANDONED_CLAIM_AGE_S)
    return tuple(sorted(n for n in storage.list_dir(CLAIM_FOLDER).files if n.isdigit() and n >= cutoff))


def _claim_cutoff(older_than_s: float) -> str:
    return new_instant_time(datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=older_than_s))


@dataclass(frozen=True)
class InstantClaim:
    """A new instant time this process holds until its instant's first state file exists."""

    storage: Storage
    timestamp: str

    def release(self) -> None:
        """Give the claim up: once the instant's state file exists, that file keeps the time taken."""
        try:
            self.storage.delete(claim_path(self.timestamp))
        except StorageError as e:  # a leftover claim only keeps a past time from being taken again
            _log.warning("could not remove the claim of instant time %s: %s", self.timestamp, e)

    def __enter__(self) -> str:
        return self.timestamp

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_instant_time(
    storage: Storage, timeline: Timeline, after: str | None = None, take: Callable[[str], bool] | None = None
) -> InstantClaim:
    """Claim a new instant time (see :func:`next_instant_time`) that no other instant has, whatever
    its action: every process that opens an instant claims its time here first, and releases the
    claim once the instant's first state file is created.

    The claim is ``.hoodie/.claims/<time>`` created if absent, then a listing of ``.hoodie/`` that
    must hold no instant at that time or later. Only create-if-absent and a listing are needed (S3
    lists what was written), and of two processes wanting one time exactly one holds the claim at
    any moment; the other either finds the claim there (and takes a later time) or claims after it
    was released, by when the first one's state file exists and the listing shows it. No later
    instant either: a process paused between reading its clock and claiming would otherwise open
    an instant earlier than one completed meanwhile, which a savepoint made in between, listed
    before it, would not keep (a savepoint checks the claims and pending instants before its time,
    so whatever it did not see claims a time after its instant's). ``take``, when given, must
    accept the time too (a write creates its heartbeat there); a time it refuses is given up like
    a taken one."""
    ts = next_instant_time(timeline, after, storage.uri)
    for _ in range(CLAIM_TRIES):
        try:
            # a token of this claim's own: on S3 a create whose answer was lost is taken for ours when
            # the object holds our bytes, so two claims must never hold the same ones
            storage.create_if_absent(claim_path(ts), uuid.uuid4().hex.encode())
        except (ObjectAlreadyExistsError, OutcomeUnknownError):
            # a create whose outcome is unknown is a time given up: another one is always safe
            ts = next_instant_time(timeline, ts, storage.uri)
            continue
        claim = InstantClaim(storage, ts)
        later = max((i.timestamp for i in _latest_states(storage.list_dir(METAFOLDER).files)), default="")
        if later < ts and (take is None or take(ts)):
            return claim
        claim.release()
        ts = next_instant_time(timeline, max(ts, later), storage.uri)
    raise ConcurrencyError(
        f"could not claim a new instant time on {storage.full_uri(CLAIM_FOLDER)}: {CLAIM_TRIES} in a row were "
        "taken, or passed by newer instants, by other writers and table services"
    )


def request_new_instant(
    storage: Storage,
    timeline: Timeline,
    action: str,
    content: bytes = b"",
    after: str | None = None,
    take: Callable[[str], bool] | None = None,
) -> Instant:
    """Put a new instant of ``action`` on the timeline, REQUESTED, at a newly claimed time
    (``take`` as :func:`claim_instant_time`'s)."""
    with claim_instant_time(storage, timeline, after, take) as ts:
        return create_requested(storage, ts, action, content)


def load_timeline(storage: Storage) -> Timeline:
    """The active timeline of the table rooted at ``storage``."""
    require_storage(storage)
    # only direct children: not archived/, .temp/, .aux/
    names = storage.list_dir(METAFOLDER).files
    with collector_paused():
        return Timeline(tuple(_latest_states(names)))


def instant_path(instant: Instant) -> str:
    return f"{METAFOLDER}/{instant.file_name}"


def read_instant(storage: Storage, instant: Instant) -> bytes:
    """The content of an instant's state file (metadata or plan)."""
    try:
        return storage.read(instant_path(instant))
    except ObjectNotFoundError as e:
        raise InstantStateError(f"instant {instant} has no state file {instant_path(instant)}") from e


def _create(storage: Storage, instant: Instant, content: bytes) -> Instant:
    try:
        storage.create_if_absent(instant_path(instant), content)
    except ObjectAlreadyExistsError as e:
        raise InstantStateError(
            f"{instant} already exists at {storage.full_uri(instant_path(instant))}: another writer got there first"
        ) from e
    return instant


def create_requested(storage: Storage, timestamp: str, action: str, content: bytes = b"") -> Instant:
    """Put a new instant on the timeline in the REQUESTED state."""
    return _create(storage, Instant(timestamp, action, State.REQUESTED), content)


def create_inflight(storage: Storage, timestamp: str, action: str, content: bytes = b"") -> Instant:
    """Put a new instant on the timeline directly INFLIGHT (savepoints have no requested state)."""
    return _create(storage, Instant(timestamp, action, State.INFLIGHT), content)


def transition_to_inflight(storage: Storage, requested: Instant, content: bytes = b"") -> Instant:
    if requested.state is not State.REQUESTED:
        raise InstantStateError(f"{requested} is not requested")
    if not storage.exists(instant_path(requested)):
        raise InstantStateError(f"{requested} is not on the timeline")
    return _create(storage, requested.with_state(State.INFLIGHT), content)


def transition_to_completed(storage: Storage, inflight: Instant, content: bytes, *, finished_by: str | None) -> Instant:
    """Complete an instant: the moment its data becomes visible to readers. ``finished_by`` is the
    command that finishes the instant if it stays pending (see :func:`finished_when`)."""
    if inflight.state is not State.INFLIGHT:
        raise InstantStateError(f"{inflight} is not inflight")
    if not storage.exists(instant_path(inflight)):
        # its runner stalled past its heartbeat's expiry (and its table lock's lease) just here
        raise InstantStateError(
            f"{inflight} on {storage.uri} is no longer inflight: another process rolled it back meanwhile, "
            "taking its runner for dead (its heartbeat had expired); nothing was completed"
        )
    completed = inflight.with_state(State.COMPLETED)
    try:
        return _create(storage, completed, content)
    except StorageError as e:
        # the request may have landed with its answer lost (an endpoint gone mid-request): ask
        return _landed_after_all(storage, completed, content, e, finished_by)


def still_pending(storage: Storage, inflight: Instant) -> bool:
    """Whether ``inflight`` is still its runner's to write: not completed, and still inflight (not
    rolled back, by a process that took its runner for dead). Two existence checks (HEADs on S3),
    no listing of ``.hoodie/``; the completed state first, as a commit leaves the inflight file."""
    return not storage.exists(instant_path(inflight.with_state(State.COMPLETED))) and storage.exists(
        instant_path(inflight)
    )


def rollback_command(storage: Storage, timestamp: str) -> str:
    """The command that rolls back the instant at ``timestamp`` (or finishes its stopped rollback):
    one wording for every error that names it."""
    return f"tidemark rollback {storage.uri} {timestamp}"


def finished_when(storage: Storage, instant: Instant, finished_by: str | None) -> str:
    """What finishes ``instant`` left pending: ``finished_by`` run again, the command that made it
    (or the command it is a step of: a restore's rollbacks are finished by the restore); a write's
    (None) is rolled back by the next write, as by `tidemark rollback`. A write's or compaction's
    only once its heartbeat has expired: before, its runner may still be at work, and both leave it."""
    if finished_by is None:
        return (
            "the next write rolls it back once its heartbeat has expired, as does "
            f"`{rollback_command(storage, instant.timestamp)}`"
        )
    expired = " once its heartbeat has expired" if instant.action == COMPACTION else ""
    return f"`{finished_by}` run again finishes it{expired}"


def _landed_after_all(
    storage: Storage, completed: Instant, content: bytes, error: StorageError, finished_by: str | None
) -> Instant:
    """``completed`` when its file is there with ``content`` after ``error`` (the answer was
    lost, not the create); ``error`` again when it is not there; :class:`OutcomeUnknownError` when
    storage cannot tell."""
    path = instant_path(completed)
    try:
        there = storage.read(path)
    except ObjectNotFoundError:
        raise error from None
    except StorageError as e:
        raise OutcomeUnknownError(
            f"completing {completed.timestamp} ({completed.action}) on {storage.uri} may or may not have landed: "
            f"{error}; and asking failed too: {e}. Run `tidemark timeline {storage.uri}` once storage answers: "
            f"{completed.timestamp} COMPLETED means it is done (do not run it again), otherwise "
            f"{finished_when(storage, completed, finished_by)}",
            completed.file_name,
        ) from error
    if there != content:
        raise error
    return completed


@contextlib.contextmanager
def left_pending(storage: Storage, what: str, instant: Instant, finished_by: str | None) -> Iterator[None]:
    """A storage error in the block leaves ``what`` (``instant``) pending: the error says so, and
    what finishes it. An unknown outcome of completing ``instant`` itself passes as it is (it says
    what to do); of a step inside (a restore's rollback) it is the step's lost request, since
    ``what`` stays pending whichever way the step went."""
    try:
        yield
    except StorageError as e:
        if isinstance(e, OutcomeUnknownError) and e.instant == instant.with_state(State.COMPLETED).file_name:
            raise
        lost = e.__cause__ if isinstance(e, OutcomeUnknownError) and isinstance(e.__cause__, StorageError) else e
        raise type(lost)(
            f"{lost}: {what} stays pending; once the cause is removed, {finished_when(storage, instant, finished_by)}"
        ) from e


def delete_instant_files(storage: Storage, instant: Instant) -> None:
    """Remove every state file of an instant (a rolled-back write), completed state first so a
    reader never sees a completed instant whose earlier states are gone half-way."""
    for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
        storage.delete(instant_path(instant.with_state(state)))
