"""Crash safety with real processes: ``tidemark clean`` and ``tidemark archive`` are SIGKILLed at a
storage mutation (see :mod:`tests.support.crash`), then the same command runs again. The restarted
run must finish the work with nothing lost and nothing done twice: the table ends exactly as after
one run nobody killed (the same data files, every instant once across the active and archived
timelines, one clean with the same deletes, each archived instant once in the archive) and reads
as before.

An unkilled run on a copy first counts the operation's mutating calls (M) and gives the end state
to expect; a second unkilled run there must change nothing. The ``every_mutation`` tests then kill
after the k-th call: every k = 1..M for the clean (M = 16: claim its instant time, create
requested, release the claim, create inflight, 11 deletes, create completed), and twelve k spread
evenly over 2..M for the archival (M = 34: the archive file, then three state files per archived
instant; k = 1 is a named step). The ``named_step`` tests kill at the steps the issue names (after
planning, in the middle of the deletes, after the archive file is written and before the active
files go), before the call or after it.

Every test runs twice: on local tables, and on S3 (``s3://BUCKET/...`` on the moto server over
HTTP, the CLI child given ``--s3-endpoint`` and the moto credentials). A table is copied between
kill points object by object into a fresh prefix. On S3, where each kill point costs seconds, the
``every_mutation`` tests take three k spread evenly over 2..M (clean: 2, 9, 16; archival: 2, 18,
34), the named steps all of theirs.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest

from tests.support import crash
from tests.support.crash import KillAt, Mutation
from tests.support.s3 import copy_prefix, create_bucket, s3_child_env, s3_options
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage, Storage, open_storage
from tidemark.table.compaction import compact
from tidemark.table.snapshot import read_snapshot
from tidemark.table_services.clean import CleanConfig, clean, plan_clean
from tidemark.timeline import CLEAN, State, create_requested, load_timeline, next_instant_time, read_instant
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.active import CLAIM_FOLDER
from tidemark.timeline.archived import read_archived

CONF = {
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    # a process killed while it holds the table lock leaves its lease behind; the restarted one
    # takes it over once it expires (a 1 s lease keeps that wait short)
    "hoodie.write.lock.storage.validity.timeout.secs": "1",
}
CONF_ARGS = [arg for key, value in CONF.items() for arg in ("--conf", f"{key}={value}")]


@dataclass(frozen=True)
class Backend:
    """Where the tables of one run of this module live: a local folder, or a bucket on the moto
    server (``endpoint``)."""

    #: a folder, or ``s3://BUCKET``
    root: str
    endpoint: str | None = None
    #: kill points an every-mutation test takes at most (S3 requests make each point slower)
    max_kill_points: int = 1_000
    env: Mapping[str, str] | None = field(default=None, compare=False)

    def place(self, work: Path, name: str) -> str:
        """A location for a table of a test working in ``work`` (its tmp_path)."""
        if self.endpoint is None:
            return str(work / name)
        return f"{self.root}/{work.name}/{name}"

    def storage(self, location: str) -> Storage:
        return open_storage(location, None if self.endpoint is None else s3_options(self.endpoint))

    def copy(self, location: str, to: str) -> str:
        """``to``, a fresh copy of the table at ``location`` (what ``to`` held is gone)."""
        if self.endpoint is None:
            shutil.rmtree(to, ignore_errors=True)
            shutil.copytree(location, to)
        else:
            bucket = self.root.removeprefix("s3://")
            copy_prefix(self.endpoint, bucket, location.removeprefix(self.root), to.removeprefix(self.root))
        return to

    def argv(self, command: str, location: str) -> list[str]:
        """The ``tidemark`` command line that runs ``command`` on the table at ``location``."""
        s3 = [] if self.endpoint is None else ["--s3-endpoint", self.endpoint]
        return [command, location, *CONF_ARGS, *s3]

    def run(self, command: str, location: str, log: Path, kill: KillAt | None = None) -> crash.Run:
        return crash.run("tidemark", self.argv(command, location), log, kill, env=self.env)


@dataclass(frozen=True)
class Table:
    backend: Backend
    location: str
    #: what a snapshot holds: id → v, kept by the test alongside the writes
    model: dict[str, int]

    @property
    def storage(self) -> Storage:
        return self.backend.storage(self.location)

    @cached_property
    def times(self) -> frozenset[str]:
        """The instant times on the timelines before the operation (read once: on S3 that is many
        requests, and every kill point needs them)."""
        return _times(self.storage)


def _write(t: TableBuilder, model: dict[str, int]) -> None:
    """Updates on two file groups, a compaction (old slices to clean), an insert_overwrite (replaced
    file groups to clean), more updates and another compaction."""

    def update(keys: list[str], v: int) -> None:
        t.update(keys, v)
        model.update(dict.fromkeys(keys, v))

    t.insert(["a", "b"], 1)
    t.insert(["c"], 1)
    model.update({"a": 1, "b": 1, "c": 1})
    for v in range(2, 5):
        update(["a", "c"], v)
    compact(t.storage)
    update(["b"], 5)
    t.insert_overwrite(["d", "e"], 6)
    model.clear()
    model.update({"d": 6, "e": 6})
    for v in range(7, 10):
        update(["d"], v)
    compact(t.storage)
    update(["e"], 10)


def _snapshot(storage: Storage) -> dict[str, int]:
    table = read_snapshot(storage)
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    if request.param == "local":
        return Backend(str(tmp_path_factory.mktemp("tables")))
    endpoint: str = request.getfixturevalue("moto_server")
    return Backend(f"s3://{create_bucket(endpoint)}", endpoint, max_kill_points=3, env=s3_child_env())


@pytest.fixture(scope="module")
def clean_table(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Table:
    """A table with an earlier clean (so the killed one plans incrementally) and files to clean."""
    table = Table(backend, backend.place(tmp_path_factory.mktemp("clean"), "t"), {})
    t = TableBuilder(table.storage)
    t.insert(["x"], 1)
    t.update(["x"], 2)
    t.update(["x"], 3)
    assert clean(t.storage, CleanConfig.from_conf(CONF)) is not None
    table.model["x"] = 3
    _write(t, table.model)
    assert _snapshot(t.storage) == table.model
    return table


@pytest.fixture(scope="module")
def archive_table(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Table:
    """A cleaned table with many instants beyond ``hoodie.keep.max.commits``."""
    table = Table(backend, backend.place(tmp_path_factory.mktemp("archive"), "t"), {})
    t = TableBuilder(table.storage)
    _write(t, table.model)
    assert clean(t.storage, CleanConfig.from_conf(CONF)) is not None
    assert _snapshot(t.storage) == table.model
    return table


# --- the end state --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndState:
    """What a run leaves, with the times of instants the run itself created replaced by ``new``
    (they differ from run to run)."""

    data_files: frozenset[str]
    #: completed instants, active and archived together, with how often each occurs
    completed: tuple[tuple[tuple[str, str], int], ...]
    pending: tuple[tuple[str, str], ...]
    #: per completed clean: its time, retained commit, extraMetadata and the files it deleted
    cleans: tuple[tuple[str, str, tuple[tuple[str, str], ...], tuple[str, ...]], ...]
    #: archived entries (time, action, state) with how often each occurs
    archived: tuple[tuple[tuple[str, str, str], int], ...]


def _end_state(storage: Storage, before: frozenset[str]) -> EndState:
    def ts(timestamp: str) -> str:
        return timestamp if timestamp in before else "new"

    data = frozenset(f.path for f in storage.list() if ".hoodie" not in f.path.split("/"))
    timeline = load_timeline(storage)
    archived = read_archived(storage)
    completed = Counter((ts(i.timestamp), i.action) for i in timeline.completed())
    completed.update((ts(a.timestamp), a.action) for a in archived if a.state is State.COMPLETED)
    cleans = []
    for instant in timeline.completed().of_actions(CLEAN):
        metadata = avro.deserialize(read_instant(storage, instant), "HoodieCleanMetadata", str(instant))
        deleted = sorted(
            f"{p}/{name}" for p, m in metadata["partitionMetadata"].items() for name in m["successDeleteFiles"]
        )
        extra = tuple(sorted((metadata.get("extraMetadata") or {}).items()))
        cleans.append((ts(instant.timestamp), metadata["earliestCommitToRetain"], extra, tuple(deleted)))
    return EndState(
        data_files=data,
        completed=tuple(sorted(completed.items())),
        pending=tuple((ts(i.timestamp), i.action) for i in timeline.pending()),
        cleans=tuple(sorted(cleans)),
        archived=tuple(sorted(Counter((ts(a.timestamp), a.action, a.state.name) for a in archived).items())),
    )


def _times(storage: Storage) -> frozenset[str]:
    return frozenset(i.timestamp for i in load_timeline(storage)) | {a.timestamp for a in read_archived(storage)}


@dataclass(frozen=True)
class Reference:
    mutations: tuple[Mutation, ...]
    state: EndState


def _reference(table: Table, command: str, work: Path) -> Reference:
    """The operation run once on a copy, nobody killing it; a second run must change nothing."""
    backend = table.backend
    copy = backend.copy(table.location, backend.place(work, "reference"))
    before = table.times
    first = backend.run(command, copy, work / "reference.log")
    assert first.returncode == 0, first.stderr
    state = _end_state(backend.storage(copy), before)
    again = backend.run(command, copy, work / "again.log")
    assert again.returncode == 0, again.stderr
    assert _end_state(backend.storage(copy), before) == state, f"a second {command} is not a no-op"
    return Reference(first.mutations, state)


def _killed_then_restarted(table: Table, command: str, kill: KillAt, work: Path, reference: Reference) -> list[str]:
    """Kill the command at ``kill``, run it again; what differs from the reference (empty: none)."""
    backend = table.backend
    copy = backend.copy(table.location, backend.place(work, "run"))
    killed = backend.run(command, copy, work / "killed.log", kill)
    if not killed.killed:
        return [f"{kill}: not killed (exit {killed.returncode}): {killed.stderr[-500:]}"]
    restarted = backend.run(command, copy, work / "restarted.log")
    if restarted.returncode != 0:
        return [f"{kill}: the restarted {command} failed: {restarted.stderr[-1000:]}"]
    problems = []
    storage = backend.storage(copy)
    state = _end_state(storage, table.times)
    doubled = [c for c, n in state.completed if n > 1] + [a for a, n in state.archived if n > 1]
    if doubled:
        problems.append(f"{kill}: instants more than once across active and archived timelines: {doubled}")
    for name in EndState.__dataclass_fields__:
        if getattr(state, name) != getattr(reference.state, name):
            problems.append(
                f"{kill}: {name} differs from the unkilled run:\n  got      {getattr(state, name)}\n"
                f"  expected {getattr(reference.state, name)}"
            )
    if (snapshot := _snapshot(storage)) != table.model:
        problems.append(f"{kill}: the snapshot changed: {snapshot} != {table.model}")
    return problems


def _step(mutations: tuple[Mutation, ...], k: int) -> str:
    return f"k={k} ({mutations[k - 1]})"


def _kill_points(m: int, at_most: int) -> list[int]:
    """1..m, or ``at_most`` of 2..m spread evenly, the last included: k = 1 (the first record
    written, the clean's plan or the archive file) is a named step of both operations."""
    if m <= at_most:
        return list(range(1, m + 1))
    return sorted({2 + round(i * (m - 2) / (at_most - 1)) for i in range(at_most)})


@pytest.fixture(scope="module")
def clean_reference(clean_table: Table, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return _reference(clean_table, "clean", tmp_path_factory.mktemp("clean-reference"))


@pytest.fixture(scope="module")
def archive_reference(archive_table: Table, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return _reference(archive_table, "archive", tmp_path_factory.mktemp("archive-reference"))


# --- the cleaner ----------------------------------------------------------------------------------


def test_clean_killed_after_every_mutation(clean_table: Table, clean_reference: Reference, tmp_path: Path) -> None:
    reference = clean_reference
    mutations = reference.mutations
    deletes = [m for m in mutations if m.op == "delete" and not m.path.startswith(CLAIM_FOLDER)]
    assert len(deletes) >= 5, "the clean must have several files to delete"
    # its instant time claimed, its plan requested, the claim released, then inflight
    claim_and_plan = ["create_if_absent", "create_if_absent", "delete", "create_if_absent"]
    assert [m.op for m in mutations] == [*claim_and_plan, *["delete"] * len(deletes), "create_if_absent"]
    assert mutations[0].path.startswith(CLAIM_FOLDER)
    assert mutations[2] == Mutation("delete", mutations[0].path)
    (made,) = [c for c in reference.state.cleans if c[0] == "new"]
    assert sorted(made[3]) == sorted(m.path for m in deletes), "the clean records every file it deleted"
    problems = []
    for k in _kill_points(len(mutations), at_most=min(16, clean_table.backend.max_kill_points)):
        found = _killed_then_restarted(clean_table, "clean", KillAt(k), tmp_path, reference)
        problems += [f"{_step(mutations, k)}: {p}" for p in found]
    assert not problems, "\n".join(problems)


CLEAN_STEPS = {
    # the plan is on the timeline (clean.requested), nothing deleted yet
    "after-planning": KillAt(1, "after", r"\.clean\.requested$"),
    "before-inflight": KillAt(1, "before", r"\.clean\.inflight$"),
    # three of the files deleted, the others not
    "mid-deletes": KillAt(3, "after", "^delete "),
    "before-a-delete": KillAt(4, "before", "^delete "),
    # every file deleted, the clean not completed
    "before-completing": KillAt(1, "before", r"\.clean$"),
}


@pytest.mark.parametrize("kill", CLEAN_STEPS.values(), ids=CLEAN_STEPS.keys())
def test_clean_killed_at_a_named_step(
    clean_table: Table, clean_reference: Reference, tmp_path: Path, kill: KillAt
) -> None:
    problems = _killed_then_restarted(clean_table, "clean", kill, tmp_path, clean_reference)
    assert not problems, "\n".join(problems)


# --- the archiver ---------------------------------------------------------------------------------


def test_archive_killed_after_every_mutation(
    archive_table: Table, archive_reference: Reference, tmp_path: Path
) -> None:
    reference = archive_reference
    mutations = reference.mutations
    assert mutations[0].path.startswith(".hoodie/archived/"), "the archive file is written first"
    assert all(m.op == "delete" and m.path.startswith(".hoodie/") for m in mutations[1:])
    archived = [a for a, _ in reference.state.archived if a[2] == "COMPLETED"]
    assert len(archived) >= 5, "the archival must move several instants"
    problems = []
    # three deletes per archived instant, all alike: a dozen kill points spread over them (the
    # named steps below add the ones around the first instant)
    for k in _kill_points(len(mutations), at_most=min(12, archive_table.backend.max_kill_points)):
        found = _killed_then_restarted(archive_table, "archive", KillAt(k), tmp_path, reference)
        problems += [f"{_step(mutations, k)}: {p}" for p in found]
    assert not problems, "\n".join(problems)


ARCHIVE_STEPS = {
    "after-archive-written": KillAt(1, "after", r"\.hoodie/archived/"),
    "before-removing-active-files": KillAt(1, "before", r"^delete \.hoodie/"),
    # the first instant's three state files gone, the others' not
    "after-an-instant-removed": KillAt(3, "after", r"^delete \.hoodie/"),
    # the second instant's requested file gone, its inflight and completed files still there
    "mid-removal-of-an-instant": KillAt(4, "after", r"^delete \.hoodie/"),
}


@pytest.mark.parametrize("kill", ARCHIVE_STEPS.values(), ids=ARCHIVE_STEPS.keys())
def test_archive_killed_at_a_named_step(
    archive_table: Table, archive_reference: Reference, tmp_path: Path, kill: KillAt
) -> None:
    problems = _killed_then_restarted(archive_table, "archive", kill, tmp_path, archive_reference)
    assert not problems, "\n".join(problems)


def test_a_clean_run_again_finishes_the_pending_one_and_makes_no_second(tmp_path: Path) -> None:
    """Regression: ``clean`` finished a pending clean, then made a second, empty clean for the same
    commits, so every restart after a crash (and every redelivered event) added a clean."""
    t = TableBuilder(LocalStorage(tmp_path))
    _write(t, {})
    config = CleanConfig.from_conf(CONF)
    plan = plan_clean(t.storage, config)
    # what a process killed right after planning leaves: the requested clean alone
    ts = next_instant_time(load_timeline(t.storage))
    create_requested(t.storage, ts, CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(t.storage)))
    result = clean(t.storage, config)
    assert result is not None
    assert result.instant.timestamp == ts, "the pending clean is the work done"
    assert sorted(result.deleted) == sorted(f for files in plan.files_to_delete.values() for f in files)
    assert clean(t.storage, config) is None, "nothing new to delete or record"
    assert [i.timestamp for i in load_timeline(t.storage).of_actions(CLEAN)] == [ts]
    # a new commit moves the retained commit: a clean records that, even with nothing to delete
    t.update(["d"], 11)
    again = clean(t.storage, config)
    assert again is not None
    assert again.instant.timestamp > ts
