"""A randomized model-based test of several writers on one Merge-On-Read table, interleaved in one
process: optimistic concurrency at commit, early conflict detection from markers (RFC-56), and
heartbeats that let a later writer roll back a dead one but never a live one.

The table has two partitions and a few file groups made up front. Each step is one of:

- ``start``: a new writer (:func:`begin_write`), with early detection on or off (and, when on,
  the check against commits on or off), drawn per writer;
- ``write``: a started writer writes one or two files, each an update of some keys of a committed
  file group (a new log file) or an insert of a new file group (a base file). After each file's
  marker and before its first byte, the writer's early check runs when it has early detection
  on, as the library's Spark task does; a conflict there makes the writer abort (it lost early);
- ``commit``: a started writer commits; a :class:`WriteConflictError` means it lost (and the
  commit rolled it back);
- ``heartbeat``: a writer misses a beat (its last one 1.5 intervals old: late, within the
  tolerable misses), or, when it had missed one, beats again;
- ``crash``: a writer's driver dies: its heartbeat stops with the file left behind and made old
  enough to count as expired;
- ``recover``: what a later writer does first, :func:`rollback_pending_writes`.

The model predicts every outcome exactly, from the rules the library documents:

- a commit conflicts when a write that committed after this one started touched one of its file
  groups (the first to commit wins, whatever the instant times);
- an early check of a file group conflicts when an earlier writer (by instant time) that is still
  live has a marker in it, or, with the commit check on, when a write that committed after this
  one started touched it; an insert of a new file group never conflicts;
- ``recover`` rolls back exactly the crashed writers not rolled back yet, never a live one (a
  late heartbeat within the tolerable misses is live).

After every step:

- the timeline holds exactly the model's committed writes completed and its live and crashed
  writers pending;
- the committed history is conflict-free: of two committed writes that overlapped in time (the
  later one started before the earlier one committed), no file group is touched by both, as their
  commit metadata says;
- tidemark's snapshot reader reads exactly the model's rows (each write's rows applied when it
  committed, in commit order);
- a writer that lost (early or at commit) or was rolled back by ``recover`` left nothing behind:
  no instant on the timeline, no data file it wrote, no file in a partition named with its
  instant, no marker and no heartbeat.

At the end of each example Apache's reader (hudi-rs) reads the model's rows too, with the writers
still running and the crashed ones not recovered yet left pending on the table: it is slower, so
it runs once per example.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.support.model import apache_snapshot
from tests.support.table_builder import _table, partition_value, write_beat_at
from tidemark.errors import InstantStateError, WriteConflictError
from tidemark.storage import LocalStorage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.conflict import EarlyConflictDetector, file_group, file_group_of_data_file, touched_by_commit
from tidemark.table.heartbeat import beat, heartbeat_path, now_ms
from tidemark.table.markers import list_markers
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import (
    PendingWrite,
    begin_write,
    commit_write,
    create_table,
    rollback_pending_writes,
    start_write,
)
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import DELTA_COMMIT, CommitMetadata, WriteStat, load_timeline, read_instant

PARTITIONS = ("p=1", "p=2")
#: the keys of each file group made up front (the same keys in both partitions)
GROUP_KEYS = (("a", "b", "c"), ("d", "e", "f"))
#: at most this many writers running at once
MAX_LIVE = 4
#: a heartbeat that stays fresh for the length of any example (it expires after 2 x 60 s)
LIVE = ConcurrencyConfig(heartbeat_interval_ms=60_000)
#: what a crashed writer's heartbeat file says: its last beat at 1970-01-01T00:00:01Z
LONG_AGO = b"1000"

HUNT = bool(os.environ.get("TIDEMARK_MODEL_HUNT"))

Rows = dict[tuple[str, str], int]  # (partition, key) → value (the ``ts`` and ``v`` columns)

#: a position among choices not known yet (live writers, file groups, keys): drawn the same way
#: whatever their number, so a test case's draws never depend on the table's state
positions = st.integers(0, 63)
#: one file a writer writes: an update of a committed file group (``contend``: of one that another
#: running writer has written too, or that a write committed since this one started has, when
#: there is one), or an insert of a new file group; with its position among the file groups or
#: partitions, and the keys' positions among the group's keys
write_ops = st.tuples(
    st.sampled_from(("contend", "update", "contend", "insert")), positions, st.lists(positions, max_size=3)
)
#: what a step does, each as often as it is named here (shrinking goes towards the first)
ACTIONS = ("write",) * 4 + ("commit",) * 3 + ("start",) * 2 + ("heartbeat", "crash", "recover", "zombie")


@dataclass(frozen=True)
class Group:
    """A committed file group: where it is, the slice new log files go on, the keys it holds."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None
    keys: tuple[str, ...]

    @property
    def name(self) -> str:
        return file_group(self.partition, self.file_id)


@dataclass
class Writer:
    """One writer as the model sees it."""

    name: str
    number: int  # its order of start: instant times follow it
    write: PendingWrite
    config: ConcurrencyConfig
    #: how many writes had committed when it started: later commits are concurrent with it
    started_after: int
    stats: list[WriteStat] = field(default_factory=list)
    #: file groups it has files in (so markers), by name
    groups: set[str] = field(default_factory=set)
    #: every data file it made a marker for, written or not (relative to the table)
    files: list[str] = field(default_factory=list)
    updates: Rows = field(default_factory=dict)
    inserted: list[Group] = field(default_factory=list)
    #: whether its last beat is late (it missed one, within the tolerable misses)
    late: bool = False

    @property
    def instant(self) -> str:
        return self.write.instant

    def describe(self) -> str:
        early = "off"
        if self.config.early_detection:
            early = "on+commits" if self.config.early_check_commit_conflict else "on"
        return f"{self.name} ({self.instant}, early {early})"


@dataclass(frozen=True)
class Committed:
    name: str
    instant: str
    started_after: int  # commits before it started
    seq: int  # its position among the commits


def _rows(table: pa.Table) -> list[tuple[str, str, int, int]]:
    if not table.num_rows:
        return []
    columns = [table.column(c).to_pylist() for c in ("p", "id", "ts", "v")]
    return sorted(zip(*columns, strict=True))


class WritersMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="tidemark-writers-"))
        self.storage = LocalStorage(self.root)
        create_table(self.storage, "t", ["id"], "ts", ["p"], True)
        self.schema = avro_schema_json(_table(["x"], 0).schema, "t")
        self.value = 1
        self.counter = 0  # file ids and new keys
        self.rows: Rows = {}
        self.groups: dict[str, Group] = {}
        self._setup()
        self.live: list[Writer] = []  # in order of start
        self.crashed: list[Writer] = []  # not rolled back yet
        self.dead: list[Writer] = []  # every writer that crashed, rolled back since or not
        self.finished: list[Writer] = []  # lost, or rolled back after a crash: must leave nothing
        self.commits: list[Committed] = []
        self.started = 0
        self.steps: list[str] = []
        self.touched: dict[str, frozenset[str]] = {}  # the file groups of each committed write, by instant
        #: what the example did, for --hypothesis-show-statistics
        self.counts = dict.fromkeys(
            ("commits", "contested writes", "early", "at commit", "crashes", "rolled back", "zombies"), 0
        )
        #: False from the start of a step until the checks after it passed: the last check at
        #: teardown runs only after an example that went through
        self.consistent = True

    def _setup(self) -> None:
        """Two file groups in each partition, in one write before any writer starts."""
        inflight = start_write(self.storage, DELTA_COMMIT, "insert")
        stats: list[WriteStat] = []
        made: list[Group] = []
        for partition in PARTITIONS:
            for keys in GROUP_KEYS:
                file_id = self._file_id()
                rows = _table(list(keys), self.value, partition)
                ctx = TaskContext(inflight.timestamp, len(stats), 0, 0)
                stat = create_base_file(self.storage, ctx, partition, file_id, rows, rows["id"], self.schema)
                stats.append(stat)
                made.append(Group(partition, file_id, inflight.timestamp, stat.path, keys))
                self.rows.update({(partition, k): self.value for k in keys})
        commit_write(self.storage, inflight, stats, "insert", self.schema)
        self.setup = inflight.timestamp
        self.groups = {g.name: g for g in made}

    def _file_id(self) -> str:
        self.counter += 1
        return f"fg-{self.counter:03d}"

    def _next_value(self) -> int:
        self.value += 1
        return self.value

    def _step(self, text: str) -> None:
        self.consistent = False
        self.steps.append(text)

    def _where(self) -> str:
        return "\n".join(self.steps[-25:])

    def teardown(self) -> None:
        try:
            if self.consistent:
                # readers skip the pending writes' files, crashed or running
                theirs = _rows(apache_snapshot(str(self.root)))
                assert theirs == self._expected_rows(), f"Apache's reader\n{self._where()}"
        finally:
            for w in self.live:
                w.write.heartbeat.stop()
            shutil.rmtree(self.root, ignore_errors=True)
            for name, n in self.counts.items():
                event(f"{name}: {n if n < 3 else '3+'}")

    # --- the rules -------------------------------------------------------------------------------

    @initialize(writers=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=2, max_size=3))
    def first_writers(self, writers: list[tuple[bool, bool]]) -> None:
        """Two or three writers running from the start, so that writes overlap from the start."""
        self.consistent = False
        for early, check_commits in writers:
            self._start(early, check_commits)

    @rule(
        action=st.sampled_from(ACTIONS),
        writer=positions,
        ops=st.lists(write_ops, min_size=1, max_size=2),
        early=st.booleans(),
        check_commits=st.booleans(),
    )
    def step(
        self, action: str, writer: int, ops: list[tuple[str, int, list[int]]], early: bool, check_commits: bool
    ) -> None:
        """One step; every choice is drawn whatever the step turns out to need. With no writer
        running, a writer's step starts one first (a commit or crash then stops there)."""
        self.consistent = False
        if action == "recover":
            self._recover()
            return
        if action == "zombie":
            self._zombie(writer)
            return
        if action == "start" or not self.live:
            if len(self.live) < MAX_LIVE:
                self._start(early, check_commits)
            else:
                self.steps.append(f"start: {MAX_LIVE} writers running already")
            if action != "write":
                return
        w = self.live[writer % len(self.live)]
        if action == "write":
            self._write(w, ops)
        elif action == "commit":
            self._commit(w)
        elif action == "heartbeat":
            self._heartbeat(w)
        else:
            self._crash(w)

    def _start(self, early: bool, check_commits: bool) -> None:
        config = ConcurrencyConfig(
            heartbeat_interval_ms=LIVE.heartbeat_interval_ms,
            early_detection=early,
            early_check_commit_conflict=early and check_commits,
        )
        self.started += 1
        self._step(f"start w{self.started}")
        write = begin_write(self.storage, DELTA_COMMIT, "upsert", config)
        w = Writer(f"w{self.started}", self.started, write, config, len(self.commits))
        self.live.append(w)
        self.steps[-1] = f"start {w.describe()}"

    def _early_rivals(self, w: Writer, group: str) -> set[str]:
        """The writes an early check of ``group`` by ``w`` must report (by instant)."""
        if not w.config.early_detection:
            return set()
        found = {r.instant for r in self.live if r.number < w.number and group in r.groups}
        if w.config.early_check_commit_conflict:
            found.update(c.instant for c in self.commits[w.started_after :] if group in self.touched[c.instant])
        return found

    def _contested(self, w: Writer, group: str) -> bool:
        """Whether another running writer has written ``group``, or a write committed since ``w``
        started did: a write of it by ``w`` makes a conflict for one of them, early or at commit."""
        others = any(group in r.groups for r in self.live if r is not w)
        return others or any(group in self.touched[c.instant] for c in self.commits[w.started_after :])

    def _after_marker(self, w: Writer) -> Callable[[str], None]:
        """What runs after each marker of ``w`` and before the file's first byte: the early
        check, as the library's Spark task runs it (see ``tidemark.spark.write_job``)."""

        def check(path: str) -> None:
            w.files.append(path)
            if not w.config.early_detection:
                return
            group = file_group_of_data_file(path)
            assert group is not None, path
            # a new detector for each check, as each task makes its own: its cache of other
            # writers' liveness must not outlive a crash the model has just made
            EarlyConflictDetector(self.storage, w.config, w.write.start).check([group])

        return check

    def _check_conflict(self, w: Writer, error: WriteConflictError, expected: set[str], stage: str) -> None:
        """``w`` lost to ``error``: one of the ``expected`` writes, at ``stage``."""
        self.steps.append(f"  lost ({error.stage}) to {error.other}: {error.file_groups}")
        where = self._where()
        assert expected, f"{w.describe()}: a conflict no other write explains: {error}\n{where}"
        assert error.stage == stage, f"{error}\n{where}"
        assert error.instant == w.instant, f"{error}\n{where}"
        assert error.other in expected, f"{error}: expected one of {sorted(expected)}\n{where}"

    def _write(self, w: Writer, ops: list[tuple[str, int, list[int]]]) -> None:
        self._step(f"write {w.describe()}")
        for kind, where, picks in ops:
            value = self._next_value()
            ctx = TaskContext(w.instant, w.number, 1, 0)  # a write token of its own per writer
            if kind == "insert":
                partition = PARTITIONS[where % len(PARTITIONS)]
                keys = [f"k{self.counter + 1}-{i}" for i in range(1 + len(picks) % 2)]
                file_id = self._file_id()
                self.steps.append(f"  insert {partition}/{file_id} {keys} v={value}")
                rows = _table(keys, value, partition)
                # a new file group: nobody else has a marker in it nor committed to it
                stat = create_base_file(
                    self.storage,
                    ctx,
                    partition,
                    file_id,
                    rows,
                    rows["id"],
                    self.schema,
                    after_marker=self._after_marker(w),
                )
                w.stats.append(stat)
                w.groups.add(file_group(partition, file_id))
                w.inserted.append(Group(partition, file_id, w.instant, stat.path, tuple(keys)))
                w.updates.update({(partition, k): value for k in keys})
                continue
            options = sorted(g for g in self.groups if g not in w.groups)  # one log file per group
            if kind == "contend":
                options = [g for g in options if self._contested(w, g)] or options
            if not options:
                self.steps.append("  (every file group written already)")
                continue
            group = self.groups[options[where % len(options)]]
            keys = sorted({group.keys[i % len(group.keys)] for i in picks or [where]})
            expected = self._early_rivals(w, group.name)
            if self._contested(w, group.name):
                self.counts["contested writes"] += 1
            self.steps.append(f"  update {group.name} {keys} v={value} (early rivals: {sorted(expected)})")
            rows = _table(keys, value, group.partition)
            lost = None
            try:
                stat = append_log_blocks(
                    self.storage,
                    ctx,
                    group.partition,
                    group.file_id,
                    group.base_instant,
                    group.base_file,
                    rows,
                    rows["id"],
                    [],
                    self.schema,
                    after_marker=self._after_marker(w),
                )
            except WriteConflictError as e:
                lost = e
            if lost is not None:
                self._check_conflict(w, lost, expected, "early")
                # what the driver does when a task fails on a conflict; its own log files are
                # deleted whole, so no rollback block is needed
                undone = w.write.abort()
                assert not undone.rollback_log_files, f"{undone}\n{self._where()}"
                self.live.remove(w)
                self.finished.append(w)
                self.counts["early"] += 1
                return
            assert not expected, f"{w.describe()} missed an early conflict with {sorted(expected)}\n{self._where()}"
            w.stats.append(stat)
            w.groups.add(group.name)
            w.updates.update({(group.partition, k): value for k in keys})

    def _commit(self, w: Writer) -> None:
        concurrent = self.commits[w.started_after :]
        expected = {c.instant for c in concurrent if w.groups & self.touched[c.instant]}
        self._step(f"commit {w.describe()} groups {sorted(w.groups)} (conflicts: {sorted(expected)})")
        self.live.remove(w)
        lost = None
        try:
            result = w.write.commit(w.stats, "upsert", self.schema)
        except WriteConflictError as e:
            lost = e
        if lost is not None:
            self.finished.append(w)  # the commit rolled it back
            self.counts["at commit"] += 1
            self._check_conflict(w, lost, expected, "commit")
            return
        assert not expected, f"{w.describe()} committed over {sorted(expected)}\n{self._where()}"
        assert result.instant.timestamp == w.instant
        self.commits.append(Committed(w.name, w.instant, w.started_after, len(self.commits)))
        self.touched[w.instant] = frozenset(w.groups)
        self.rows.update(w.updates)
        self.groups.update({g.name: g for g in w.inserted})
        self.counts["commits"] += 1

    def _heartbeat(self, w: Writer) -> None:
        if w.late:
            self._step(f"heartbeat {w.describe()} beats again")
            w.write.heartbeat.last_ok_ms = beat(self.storage, w.instant)
        else:
            self._step(f"heartbeat {w.describe()} misses a beat")
            # as if its thread's last beat landed one and a half intervals ago, the next one late
            at = now_ms() - w.config.heartbeat_interval_ms * 3 // 2
            write_beat_at(self.storage, w.instant, at)
            w.write.heartbeat.last_ok_ms = at
        w.late = not w.late

    def _crash(self, w: Writer) -> None:
        self._step(f"crash {w.describe()}")
        w.write.heartbeat.stop(delete=False)
        write_beat_at(self.storage, w.instant, int(LONG_AGO))
        # as a driver that stalled would know: its last beat landed long ago
        w.write.heartbeat.last_ok_ms = int(LONG_AGO)
        self.live.remove(w)
        self.crashed.append(w)
        self.dead.append(w)
        self.counts["crashes"] += 1

    def _zombie(self, writer: int) -> None:
        """A crashed writer's driver was only stalled and now tries to commit: refused, whether
        it was rolled back meanwhile or not, and the table is left as it was."""
        if not self.dead:
            self._step("zombie: no writer crashed")
            return
        w = self.dead[writer % len(self.dead)]
        self._step(f"zombie commit of {w.describe()} ({'pending' if w in self.crashed else 'rolled back'})")
        refused: InstantStateError | WriteConflictError | None = None
        try:
            w.write.commit(w.stats, "upsert", self.schema)
        except (InstantStateError, WriteConflictError) as e:
            refused = e
        assert refused is not None, f"{w.describe()} committed after it crashed\n{self._where()}"
        # rolled back, it lost as to a conflict (write it again); pending, its beat is too old
        lost = WriteConflictError if w not in self.crashed else InstantStateError
        assert isinstance(refused, lost), f"{w.describe()}: {refused!r}\n{self._where()}"
        self.counts["zombies"] += 1

    def _recover(self) -> None:
        expected = sorted(w.instant for w in self.crashed)
        self._step(f"recover (crashed: {expected})")
        done = rollback_pending_writes(self.storage, LIVE)
        rolled_back = sorted(r.rolled_back.timestamp for r in done)
        live = sorted(set(rolled_back) & {w.instant for w in self.live})
        assert not live, f"recover rolled back live writers {live}\n{self._where()}"
        assert rolled_back == expected, f"recover rolled back {rolled_back}, not {expected}\n{self._where()}"
        blocks = [path for r in done for path in r.rollback_log_files]
        assert not blocks, f"rollback blocks for logs a crashed writer wrote alone: {blocks}\n{self._where()}"
        self.finished.extend(self.crashed)
        self.counts["rolled back"] += len(self.crashed)
        self.crashed = []

    # --- the checks ------------------------------------------------------------------------------

    def _expected_rows(self) -> list[tuple[str, str, int, int]]:
        return sorted((partition_value(p), k, v, v) for (p, k), v in self.rows.items())

    @invariant()
    def check(self) -> None:
        where = self._where()
        timeline = load_timeline(self.storage)
        writes = timeline.write_instants()
        completed = sorted(i.timestamp for i in writes.completed() if i.timestamp != self.setup)
        assert completed == sorted(c.instant for c in self.commits), f"completed writes\n{where}"
        pending = sorted(i.timestamp for i in writes.pending())
        assert pending == sorted(w.instant for w in self.live + self.crashed), f"pending writes\n{where}"

        # the committed history is conflict-free, by what the commits themselves recorded
        recorded = {
            i.timestamp: touched_by_commit(CommitMetadata.from_bytes(read_instant(self.storage, i)))
            for i in writes.completed()
        }
        for later in self.commits:
            mine = recorded[later.instant]
            assert mine == self.touched[later.instant], f"{later.name} recorded other file groups\n{where}"
            for earlier in self.commits[later.started_after : later.seq]:
                shared = sorted(mine & recorded[earlier.instant])
                assert not shared, f"{earlier.name} and {later.name} overlapped and both wrote {shared}\n{where}"

        ours = _rows(read_snapshot(self.storage))
        assert ours == self._expected_rows(), f"tidemark's reader\n{where}"

        # writers that lost or died left nothing behind
        in_partitions = [
            str(p.relative_to(self.root)) for part in PARTITIONS for p in (self.root / part).rglob("*") if p.is_file()
        ]
        for w in self.finished:
            assert timeline.find(w.instant) is None, f"{w.describe()} is still on the timeline\n{where}"
            left = [f for f in w.files if self.storage.exists(f)]
            left += [f for f in in_partitions if w.instant in f.rsplit("/", 1)[-1]]
            assert not left, f"{w.describe()} left data files {left}\n{where}"
            assert not list_markers(self.storage, w.instant), f"{w.describe()} left markers\n{where}"
            assert not self.storage.exists(heartbeat_path(w.instant)), f"{w.describe()} left its heartbeat\n{where}"
        self.consistent = True


WritersMachine.TestCase.settings = settings(
    # the same examples on every run; `make hunt`-style runs (TIDEMARK_MODEL_HUNT=1) draw new ones,
    # as many as TIDEMARK_MODEL_EXAMPLES
    derandomize=not HUNT,
    max_examples=int(os.environ.get("TIDEMARK_MODEL_EXAMPLES", "500" if HUNT else "100")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class TestWritersModel(WritersMachine.TestCase):  # type: ignore[misc,valid-type]
    pass
