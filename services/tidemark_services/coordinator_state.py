"""What the writer-coordinator holds per table, with no HTTP and no Kafka: the live writes, which
file groups each has markers in (the early-conflict index), and the markers it accepted, written in
batches into Hudi's ``MARKERS<N>`` files.

Each process claims the ``MARKERS<N>`` files it writes with create-if-absent and rewrites only
those, so two coordinators (replicas, or one restarted while the old one still flushes) never
overwrite each other's markers. On first use of a table the state is rebuilt from storage: the
markers of every pending write (``MARKERS<N>`` files and direct markers) and their heartbeats.

Conflict rules are the library's (:mod:`tidemark.table.conflict`): a file group is contested when
an earlier live write has a marker in it, or, for a write that asked for it, when a write completed
since it started touched it. The later write loses; the commit-time check stays the final word.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from tidemark.errors import MarkerError, ObjectAlreadyExistsError, StorageError, WriteConflictError
from tidemark.storage.base import Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.conflict import (
    ConcurrentOperations,
    WriteStart,
    conflict_error,
    file_group_of_data_file,
    other_named,
)
from tidemark.table.heartbeat import beat, heartbeat_status, last_beat_ms
from tidemark.table.markers import (
    MARKER_TYPE_FILE,
    TEMP_FOLDER,
    Marker,
    format_marker_file,
    list_direct_markers,
    marker_file_name,
    markers_folder,
    read_marker_files,
    write_marker_type,
)
from tidemark.table.properties import read_properties
from tidemark.timeline import Instant, State, Timeline, load_timeline, still_pending
from tidemark.timeline.instant import COMMIT, DELTA_COMMIT, WRITE_ACTIONS

log = logging.getLogger("tidemark.coordinator")

BATCH_INTERVAL_KEY = "hoodie.markers.timeline_server_based.batch.interval_ms"
BATCH_THREADS_KEY = "hoodie.markers.timeline_server_based.batch.num_threads"
#: a MARKERS file is rewritten whole on each batch: past this many lines a new one is started, so a
#: batch never rewrites more than about 100 KB
MARKERS_PER_FILE = 1_000
#: how many MARKERS file indices a flush tries before it gives up on a batch
_CLAIM_TRIES = 100


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Write:
    """A write the coordinator knows: registered by its driver, or found pending on storage."""

    instant: str
    start: WriteStart | None = None
    heartbeat_interval_ms: int = 60_000
    tolerable_misses: int = 2
    early_detection: bool = True
    check_commit_conflict: bool = False
    action: str = "deltacommit"
    last_renew_ms: int = 0  # 0: never renewed through this coordinator
    groups: set[str] = field(default_factory=set)
    conflict: WriteConflictError | None = None  # lost early: every later marker is refused too
    operations: ConcurrentOperations | None = None

    @property
    def expiry_ms(self) -> int:
        return self.heartbeat_interval_ms * max(1, self.tolerable_misses)


class Batch:
    """The markers accepted since the last flush; requests wait on :attr:`done`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: str | None = None
        self.markers = 0  # accepted into it


@dataclass
class MarkerFolder:
    """One write's markers: every name known (storage and accepted), and the files this process
    writes, the last one growing."""

    instant: str
    names: set[str] = field(default_factory=set)
    own: dict[int, list[str]] = field(default_factory=dict)
    current: int | None = None
    taken: set[int] = field(default_factory=set)  # indices on storage (anyone's)
    dirty: set[int] = field(default_factory=set)
    claimed: set[int] = field(default_factory=set)  # files this process created (and may rewrite)
    busy: set[int] = field(default_factory=set)  # files being written right now
    #: accepted names not yet known to be on storage, by the batch that is to write them: a
    #: request for one of them again waits for that batch too
    unflushed: dict[str, Batch] = field(default_factory=dict)
    typed: bool = False


@dataclass(frozen=True)
class CreateResult:
    created: bool
    batch: Batch | None  # None: known and on storage already


class TableState:
    """One table's writes, index and markers. Thread-safe: one mutex per table, never held while
    storage is written (flushes copy what to write first)."""

    def __init__(self, location: str, storage: Storage, config: ConcurrencyConfig) -> None:
        self.location = location
        self.storage = storage
        self.config = config
        self.mutex = threading.Lock()
        self.writes: dict[str, Write] = {}
        self.index: dict[str, set[str]] = {}  # file group -> instants with a marker in it
        self.folders: dict[str, MarkerFolder] = {}
        self.batch = Batch()
        self.timeline: Timeline = load_timeline(storage)
        #: the action of a write of this table found on no timeline (rolled back): a copy-on-write
        #: table's writes are commits, a merge-on-read table's deltacommits
        self.table_action = DELTA_COMMIT if read_properties(storage).is_merge_on_read else COMMIT
        self._liveness: dict[str, tuple[float, bool]] = {}

    # --- rebuilding -------------------------------------------------------------------------------

    @classmethod
    def load(cls, location: str, storage: Storage, config: ConcurrencyConfig) -> TableState:
        """The table's state from storage: each pending write's markers, in both layouts."""
        state = cls(location, storage, config)
        pending = {i.timestamp: i for i in state.timeline.write_instants().pending()}
        for instant in storage.list_dir(TEMP_FOLDER).folders:
            if instant not in pending:
                continue
            folder = state._folder(instant)
            files = read_marker_files(storage, instant)
            folder.taken.update(files)
            markers = list_direct_markers(storage, instant).union(*files.values())
            write = state.writes.setdefault(instant, Write(instant, action=pending[instant].action))
            for marker in markers:
                folder.names.add(marker.name)
                group = file_group_of_data_file(marker.data_path)
                if group is not None:
                    write.groups.add(group)
                    state.index.setdefault(group, set()).add(instant)
        return state

    def is_pending(self, instant: str) -> bool:
        """Whether ``instant`` is a write this coordinator serves or one pending on the timeline
        (read again when the cached one does not have it: a write that has just begun). A marker
        for anything else (a write completed or rolled back: a zombie task) is refused."""
        with self.mutex:
            if instant in self.writes:
                return True
            found = self.timeline.find(instant)
        if found is None:
            found = self.refresh_timeline().find(instant)
        return found is not None and not found.is_completed and found.action in WRITE_ACTIONS

    def still_pending(self, instant: str) -> bool:
        """Whether the write ``instant`` is still pending on storage, read there (not rolled back by
        another process, nor completed): its action as registered, else as on the timeline."""
        with self.mutex:
            write = self.writes.get(instant)
            action = write.action if write is not None and write.last_renew_ms else None
            found = self.timeline.find(instant) if action is None else None
        if action is None:
            if found is None:
                found = self.refresh_timeline().find(instant)
            if found is None:
                return False
            action = found.action
        return still_pending(self.storage, Instant(instant, action, State.INFLIGHT))

    def _take_back(self, instant: str, index: int, rewrite: bool) -> None:
        """The ``MARKERS<index>`` file just written for ``instant``, a write that ended meanwhile,
        deleted when this flush created it: it holds only markers whose requests are answered 410,
        so no task writes a file under them. A file rewritten also holds markers acknowledged
        before, whose files the rollback's last step finds through it: deleted before that step
        reads it, those files would be left behind; it is left to that step (or to the next
        write's clean-up of the marker folders of instants that are over)."""
        if rewrite:
            return
        folder = markers_folder(instant)
        self.storage.delete(f"{folder}{marker_file_name(index)}")
        left = {f.path.rpartition("/")[2] for f in self.storage.list(folder)}
        if left <= {MARKER_TYPE_FILE}:  # nobody else's markers: the folder goes, as a rollback takes it
            if left:
                self.storage.delete(f"{folder}{MARKER_TYPE_FILE}")
            self.storage.remove_empty_folders(folder)

    def marker_count(self) -> int:
        with self.mutex:
            return sum(len(f.names) for f in self.folders.values())

    def _folder(self, instant: str) -> MarkerFolder:
        folder = self.folders.get(instant)
        if folder is None:
            folder = self.folders[instant] = MarkerFolder(instant)
        return folder

    # --- writes -----------------------------------------------------------------------------------

    def register(self, write: Write) -> bool:
        """Register or renew ``write`` and beat for it; whether it was new to this coordinator."""
        with self.mutex:
            known = self.writes.get(write.instant)
            new = known is None or known.last_renew_ms == 0
            if known is None:
                known = self.writes[write.instant] = write
            else:
                known.start = write.start or known.start
                known.heartbeat_interval_ms = write.heartbeat_interval_ms
                known.tolerable_misses = write.tolerable_misses
                known.early_detection = write.early_detection
                known.check_commit_conflict = write.check_commit_conflict
                known.action = write.action
            if known.start is not None and known.operations is None:
                known.operations = ConcurrentOperations(self.storage, known.start)
        at = beat(self.storage, write.instant)  # outside the mutex: a storage write
        with self.mutex:
            known.last_renew_ms = at
            self._liveness.pop(write.instant, None)
        return new

    def _write(self, instant: str, early_detection: bool | None = None) -> Write:
        """Called with the mutex held: the write ``instant``, known from now on. One this process
        has not seen register (it restarted since, or the registration went to another replica)
        takes the early-detection setting its writer's request carries, else the coordinator's,
        until its next renewal brings its whole registration."""
        write = self.writes.get(instant)
        if write is None:
            # its action as on the timeline (which is_pending read), for the events about it
            found = self.timeline.find(instant)
            action = found.action if found is not None else self.table_action
            write = Write(instant, early_detection=self.config.early_detection, action=action)
            self.writes[instant] = write
        if early_detection is not None and not write.last_renew_ms:
            write.early_detection = early_detection
        return write

    def end(self, instant: str) -> Write | None:
        """Forget ``instant``: it committed, aborted or was rolled back. Its markers stay on
        storage (the commit or the rollback deletes them)."""
        with self.mutex:
            write = self.writes.pop(instant, None)
            self.folders.pop(instant, None)
            for group in write.groups if write else ():
                holders = self.index.get(group)
                if holders is not None:
                    holders.discard(instant)
                    if not holders:
                        del self.index[group]
            self._liveness.pop(instant, None)
            return write

    def forget_finished(self, timeline: Timeline) -> None:
        """Forget the writes whose end nobody reported (a driver that died, an end request lost):
        completed on ``timeline``, or gone from it and no longer live or with no heartbeat file
        left (rolled back, or the table deleted under them: a renewal through this coordinator
        does not keep those). A write that began after ``timeline`` was read is not on it but is
        live and has its heartbeat, and stays."""
        done: list[str] = []
        missing: list[str] = []
        with self.mutex:
            for instant in self.writes:
                found = timeline.find(instant)
                if found is not None and found.is_completed:
                    done.append(instant)
                elif found is None:
                    (missing if self._is_live(instant) else done).append(instant)
        done += [i for i in missing if last_beat_ms(self.storage, i) is None]  # storage, not under the mutex
        for instant in done:
            self.end(instant)

    def action_of(self, instant: str) -> str:
        """The timeline action of ``instant``: as registered, else as on the timeline (read again
        when the cached one does not have it), else the table's (a write already rolled back). A
        restarted coordinator must name a write as the old process did: the action is part of
        its events' ``ce_id``."""
        with self.mutex:
            write = self.writes.get(instant)
            if write is not None:
                return write.action
            found = self.timeline.find(instant)
        if found is None:
            found = self.refresh_timeline().find(instant)
        return found.action if found is not None else self.table_action

    def live_writes(self) -> int:
        with self.mutex:
            return sum(1 for i in self.writes if self._is_live(i))

    def _known_live(self, instant: str) -> bool | None:
        """Called with the mutex held: whether ``instant`` is live as far as this coordinator knows
        without storage, None when its heartbeat file must be read. A write renewed through this
        coordinator is judged by that; any other (a direct writer, or one not heard from since a
        restart) by its heartbeat file, read no more than twice an interval."""
        write = self.writes.get(instant)
        if write is not None and write.last_renew_ms and _now_ms() - write.last_renew_ms < write.expiry_ms:
            return True
        cached = self._liveness.get(instant)
        if cached is not None and time.monotonic() - cached[0] < self.config.heartbeat_interval_ms / 2000:
            return cached[1]
        return None

    def _read_liveness(self, instant: str) -> bool:
        try:
            return not heartbeat_status(self.storage, instant, self.config).expired
        except StorageError as e:
            log.warning("%s: cannot read the heartbeat of %s, taking it as live: %s", self.location, instant, e)
            return True  # a wrong "live" costs a needless early abort at worst, never a bad commit

    def _is_live(self, instant: str) -> bool:
        """Called with the mutex held (see :meth:`look_at_rivals`, which reads heartbeats before)."""
        known = self._known_live(instant)
        if known is None:
            known = self._read_liveness(instant)
            self._liveness[instant] = (time.monotonic(), known)
        return known

    def look_at_rivals(self, instant: str, groups: Iterable[str]) -> None:
        """Read the heartbeats a check of ``groups`` by ``instant`` will need, without the mutex,
        so that requests of other writes of the table do not wait on storage meanwhile."""
        with self.mutex:
            unknown = {
                rival
                for group in groups
                for rival in self.index.get(group, ())
                if rival < instant and self._known_live(rival) is None
            }
        found = {rival: (time.monotonic(), self._read_liveness(rival)) for rival in sorted(unknown)}
        with self.mutex:
            self._liveness.update(found)

    # --- conflicts --------------------------------------------------------------------------------

    def refresh_timeline(self) -> Timeline:
        timeline = load_timeline(self.storage)
        with self.mutex:
            self.timeline = timeline
        return timeline

    def _conflict(self, write: Write, groups: Iterable[str]) -> WriteConflictError | None:
        """Called with the mutex held."""
        mine = set(groups)
        by_rival: dict[str, list[str]] = {}
        for group in mine:
            for rival in self.index.get(group, ()):
                if rival < write.instant:
                    by_rival.setdefault(rival, []).append(group)
        for rival in sorted(by_rival):
            if self._is_live(rival):
                return conflict_error(write.instant, rival, "running write", sorted(by_rival[rival]), "early")
        if write.check_commit_conflict and write.operations is not None:
            found = write.operations.first_conflict(self.timeline, mine)
            if found is not None:
                other, shared = found
                return conflict_error(
                    write.instant, other.timestamp, other_named(other), shared, "early", storage=self.storage
                )
        return None

    def check(self, instant: str, groups: Iterable[str]) -> tuple[WriteConflictError | None, bool]:
        """A conflict for ``instant``'s ``groups``, and whether it is new (to be announced)."""
        groups = list(groups)
        self.look_at_rivals(instant, groups)
        with self.mutex:
            write = self._write(instant)
            if write.conflict is not None:
                return write.conflict, False
            found = self._conflict(write, groups)
            if found is not None:
                write.conflict = found
            return found, found is not None

    # --- markers ----------------------------------------------------------------------------------

    def create_marker(
        self, marker: Marker, early_detection: bool | None = None
    ) -> tuple[CreateResult | None, WriteConflictError | None, bool]:
        """Accept ``marker`` (it goes out with the next batch) or refuse it with a conflict:
        ``(result, conflict, new_conflict)``. A marker known already is no conflict (a retried
        task re-creating its own marker)."""
        results, conflict, new = self.create_markers(marker.instant, [marker], early_detection)
        return (results[0] if results else None), conflict, new

    def create_markers(
        self, instant: str, markers: list[Marker], early_detection: bool | None = None
    ) -> tuple[list[CreateResult], WriteConflictError | None, bool]:
        """:meth:`create_marker` for several markers of one write at once: all accepted, or, when
        one of their file groups is contested, none (``(results, conflict, new_conflict)``).
        ``early_detection`` is the writer's setting as its request carries it (see :meth:`_write`)."""
        self.look_at_rivals(instant, {g for m in markers if (g := file_group_of_data_file(m.data_path)) is not None})
        with self.mutex:
            write = self._write(instant, early_detection)
            folder = self._folder(instant)
            fresh = list(dict.fromkeys(m.name for m in markers if m.name not in folder.names))
            groups = {name: file_group_of_data_file(m.data_path) for m in markers if (name := m.name) in fresh}
            if fresh and write.conflict is not None:
                return [], write.conflict, False
            contested = {g for g in groups.values() if g is not None}
            if contested and write.early_detection:
                found = self._conflict(write, contested)
                if found is not None:
                    write.conflict = found
                    return [], found, True
            for name in fresh:
                self._accept(folder, name)
                group = groups[name]
                if group is not None:
                    write.groups.add(group)
                    self.index.setdefault(group, set()).add(instant)
            self.batch.markers += len(fresh)
            first = set(fresh)
            results = []
            for m in markers:
                created = m.name in first
                first.discard(m.name)
                results.append(CreateResult(created, folder.unflushed.get(m.name)))
            return results, None, False

    def _accept(self, folder: MarkerFolder, name: str) -> None:
        """Called with the mutex held: ``name`` goes into a file no flush is writing right now, so
        the next batch can take it at once."""
        folder.names.add(name)
        folder.unflushed[name] = self.batch
        current = folder.current
        if current is None or current in folder.busy or len(folder.own[current]) >= MARKERS_PER_FILE:
            free = [i for i in folder.own if i not in folder.busy and len(folder.own[i]) < MARKERS_PER_FILE]
            current = folder.current = min(free) if free else self._next_index(folder)
            folder.own.setdefault(current, [])
        folder.own[current].append(name)
        folder.dirty.add(current)

    def unflushed(self, instant: str, name: str) -> Batch | None:
        """The batch that is to write marker ``name`` of ``instant``; None once it is on storage."""
        with self.mutex:
            folder = self.folders.get(instant)
            return folder.unflushed.get(name) if folder is not None else None

    @staticmethod
    def _next_index(folder: MarkerFolder) -> int:
        index = max(folder.taken | set(folder.own), default=-1) + 1
        folder.taken.add(index)
        return index

    def flush(self, pool: Executor, on_file: Callable[[], None] | None = None) -> tuple[Batch, int]:
        """Write every ``MARKERS<N>`` file that changed since the last flush and is not being
        written by another flush right now (each file once, several files at once on ``pool``), then
        release the requests waiting on that batch, with an error when a write failed: those
        markers are not known to be on storage, so their writers fall back to direct ones. A
        marker whose file was left to a later flush waits for that one (see :meth:`unflushed`).
        Returns the batch and how many markers it held."""
        with self.mutex:
            batch, self.batch = self.batch, Batch()
            work: list[tuple[MarkerFolder, int, list[str], bool]] = []
            for folder in self.folders.values():
                for index in sorted(folder.dirty - folder.busy):
                    work.append((folder, index, list(folder.own[index]), not folder.typed))
                    folder.typed = True
                    folder.busy.add(index)
                    folder.dirty.discard(index)
                # markers in files another flush is writing go with the next batch
                for index in folder.dirty:
                    for name in folder.own[index]:
                        if folder.unflushed.get(name) is batch:
                            folder.unflushed[name] = self.batch
        if not work:
            batch.done.set()
            return batch, 0

        def write_one(folder: MarkerFolder, index: int, names: list[str], first: bool) -> int:
            """Write one file; the index it went to (another, if someone had taken this one)."""
            try:
                # a write over (rolled back by another process, or completed) gets no marker file:
                # its folder is gone or going, and one written now would list files that are not there
                if not self.still_pending(folder.instant):
                    raise _WriteOverError(index)
                rewrite = index in folder.claimed
                index = write_to(folder, index, names, first)
                if not self.still_pending(folder.instant):  # it ended while the file was written
                    self._take_back(folder.instant, index, rewrite)
                    raise _WriteOverError(index)
                return index
            except (StorageError, OSError) as e:
                raise _UnwrittenError(getattr(e, "index", index), str(e)) from e

        def write_to(folder: MarkerFolder, index: int, names: list[str], first: bool) -> int:
            if first:
                write_marker_type(self.storage, folder.instant)
            content = format_marker_file(names)
            if index in folder.claimed:
                self.storage.write(f"{markers_folder(folder.instant)}{marker_file_name(index)}", content)
                return index
            # a new file: claimed with create-if-absent, as another coordinator (a replica, or
            # this one before a restart) may have taken the index; then the next free one
            for _ in range(_CLAIM_TRIES):
                try:
                    self.storage.create_if_absent(f"{markers_folder(folder.instant)}{marker_file_name(index)}", content)
                except ObjectAlreadyExistsError:
                    with self.mutex:
                        folder.taken.add(index)
                        folder.busy.discard(index)
                        moved = folder.own.pop(index, [])
                        index = self._next_index(folder)
                        folder.own[index] = moved
                        folder.busy.add(index)
                        if folder.current is not None and folder.current not in folder.own:
                            folder.current = index
                    continue
                except (StorageError, OSError) as e:
                    raise _UnwrittenError(index, str(e)) from e
                with self.mutex:
                    folder.claimed.add(index)
                return index
            raise _UnwrittenError(index, f"no free MARKERS file for {folder.instant} after {_CLAIM_TRIES} tries")

        errors: list[str] = []
        over: set[str] = set()
        futures = [pool.submit(write_one, *item) for item in work]
        for (folder, index, names, first), future in zip(work, futures, strict=True):
            written: int | None = None
            try:
                written = future.result()
            except _WriteOverError:
                over.add(folder.instant)  # its requests are answered 410 (see below)
                if on_file is not None:
                    on_file()
                continue
            except _UnwrittenError as e:
                index = e.index  # the one it was moved to, if it was
                errors.append(f"markers of {folder.instant}: {e}")
            except Exception as e:
                # not storage: a fault of this write's file alone. It is tried again with the next
                # batch like an unwritten one, and the batch's other files are still accounted for
                # (raised from here, their requests would wait for the deadline and fall back)
                log.exception("%s: the markers of %s were not written", self.location, folder.instant)
                errors.append(f"markers of {folder.instant}: {type(e).__name__}: {e}")
            with self.mutex:
                final = written if written is not None else index
                folder.busy.discard(final)
                if written is None:  # written again with the next batch
                    folder.dirty.add(final)
                    folder.typed = folder.typed and not first
                for name in names:
                    if folder.unflushed.get(name) is batch:
                        if written is None:
                            folder.unflushed[name] = self.batch
                        else:
                            del folder.unflushed[name]
            if on_file is not None:
                on_file()
        if over:
            # its state goes, and the timeline is read again, so that the requests waiting on this
            # batch, and any later one, find it over: their tasks stop (410) instead of writing
            for instant in sorted(over):
                log.info("%s: %s is no longer pending; its markers are not written", self.location, instant)
                self.end(instant)
            self.refresh_timeline()
        if errors:
            batch.error = "; ".join(errors)
            log.warning("%s: a marker batch was not written: %s", self.location, batch.error)
        batch.done.set()
        return batch, batch.markers


class _WriteOverError(Exception):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class _UnwrittenError(StorageError):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def parse_marker(instant: str, name: object) -> Marker:
    if not isinstance(name, str) or not name:
        raise MarkerError(f"marker must be a non-empty string, not {name!r}")
    return Marker.parse(instant, name)
