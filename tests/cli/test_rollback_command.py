"""``tidemark rollback`` as a user runs it, on tables the builder makes (no Spark): what it says
when it resumes a rollback a killed process left, and what it says of instants it does not take
back."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support import crash
from tests.support.cli import tidemark
from tests.support.crash import SHORT_LEASE, KillAt
from tests.support.model import apache_snapshot
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.compaction import compact
from tidemark.table.heartbeat import beat
from tidemark.table.markers import write_marker_type
from tidemark.table.snapshot import read_snapshot
from tidemark.table_services.clean import CleanConfig, plan_clean
from tidemark.timeline import CLEAN, RESTORE, ROLLBACK, load_timeline, request_new_instant
from tidemark.timeline import avro_metadata as avro


def _rollback_instant(table: Path) -> str:
    (done,) = load_timeline(LocalStorage(table)).completed().of_actions(ROLLBACK)
    return done.timestamp


def _values(table: Path) -> dict[str, int]:
    rows = read_snapshot(LocalStorage(table)).to_pylist()
    return {row["id"]: row["v"] for row in rows}


def test_a_resumed_rollback_tells_the_state_its_target_had_when_it_is_known(tmp_path: Path) -> None:
    """A rollback killed just after its plan, of a completed write, and run again said it had
    rolled back ``W.deltacommit[INFLIGHT]``; an uninterrupted one says ``[COMPLETED]``. Once the
    killed rollback had deleted the completed file, the state is no longer known: none is claimed."""
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    written = t.update(["a"], 2)
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "t", fresh)
    uninterrupted = tidemark("rollback", str(fresh), written)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    said = f"rolled back {written}.deltacommit[COMPLETED] at {{}}: 1 file deleted, 0 rollback blocks written"
    assert uninterrupted.stdout.splitlines() == [said.format(_rollback_instant(fresh))]

    for name, kill, state in [
        ("planned", KillAt(1, "after", r"\.rollback\.requested$"), "[COMPLETED]"),
        ("begun", KillAt(1, "after", rf"^delete \S+/{written}\.deltacommit$"), ""),
    ]:
        table = tmp_path / name
        shutil.copytree(tmp_path / "t", table)
        killed = crash.run("tidemark", ["rollback", str(table), written, *SHORT_LEASE], tmp_path / "log", kill)
        assert killed.killed, killed.stderr
        resumed = tidemark("rollback", str(table), written)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.splitlines() == [
            f"rolled back {written}.deltacommit{state} at {_rollback_instant(table)}: "
            "1 file deleted, 0 rollback blocks written"
        ]
        assert _values(table) == _values(fresh) == {"a": 1, "b": 1}


def test_rollback_of_an_instant_that_is_no_write_says_what_it_is_and_what_to_do(tmp_path: Path) -> None:
    """``tidemark rollback`` of a clean (completed, or pending after a killed clean) said ``no write
    instant X to roll back`` though X is on the timeline; so it did of a rollback or a restore."""
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    sp = t.update(["a"], 2)
    for v in range(3, 5):
        t.update(["a"], v)
        compact(t.storage)
    table = str(tmp_path / "t")
    assert tidemark("savepoint", "create", table, sp).returncode == 0
    takes = "not a write: tidemark rollback takes back writes and compactions"

    def refusal(instant: str) -> str:
        refused = tidemark("rollback", table, instant)
        assert refused.returncode == 1, refused.stdout
        return refused.stderr.splitlines()[-1]

    plan = plan_clean(t.storage, CleanConfig(commits_retained=1))  # a killed cleaner's plan
    pending = request_new_instant(
        t.storage, load_timeline(t.storage), CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro(t.storage))
    )
    assert refusal(pending.timestamp) == (
        f"tidemark: error: {table}: {pending.timestamp} is a clean, {takes}; "
        f"a pending clean is finished by `tidemark clean {table}`"
    )
    assert tidemark("clean", table).returncode == 0
    (done,) = load_timeline(t.storage).of_actions(CLEAN)
    assert (done.timestamp, done.is_completed) == (pending.timestamp, True)
    assert refusal(done.timestamp) == (
        f"tidemark: error: {table}: {done.timestamp} is a clean, {takes}; "
        "a completed clean cannot be undone (the files it deleted are gone)"
    )

    written = t.update(["b"], 5)
    killed = crash.run(
        "tidemark",
        ["rollback", table, written, *SHORT_LEASE],
        tmp_path / "log",
        KillAt(1, "after", r"\.rollback\.requested$"),
    )
    assert killed.killed, killed.stderr
    (stopped,) = load_timeline(t.storage).pending().of_actions(ROLLBACK)
    assert refusal(stopped.timestamp) == (
        f"tidemark: error: {table}: {stopped.timestamp} is a rollback, {takes}; "
        f"a pending rollback is finished by `tidemark rollback {table} {written}`"
    )
    assert tidemark("rollback", table, written).returncode == 0
    # the same rollback run again said "no write instant", as of a time that never was one
    assert refusal(written) == (
        f"tidemark: error: {table}: {written} was rolled back already, by the rollback {stopped.timestamp}"
    )
    assert refusal("20200101000000000") == f"tidemark: error: {table}: no write instant 20200101000000000 to roll back"

    killed = crash.run(
        "tidemark", ["restore", table, sp, *SHORT_LEASE], tmp_path / "log", KillAt(1, "after", r"\.restore\.inflight$")
    )
    assert killed.killed, killed.stderr
    (restore,) = load_timeline(t.storage).pending().of_actions(RESTORE)
    assert refusal(restore.timestamp) == (
        f"tidemark: error: {table}: {restore.timestamp} is a restore, {takes}; "
        f"a pending restore is finished by `tidemark restore {table} {sp}`"
    )
    assert tidemark("restore", table, sp).returncode == 0
    assert _values(tmp_path / "t") == {"a": 2, "b": 1}


def test_rollback_of_a_dead_write_whose_markers_are_damaged_lists_its_partitions(tmp_path: Path) -> None:
    """A writer killed mid-write whose ``MARKERS0`` (timeline-server markers) was then overwritten
    with bytes that are not UTF-8: every ``tidemark rollback`` and write of the table exited 1 with
    ``MARKERS0 is not a MARKERS file``, and nothing said what to do. The rollback now finds the
    write's files by listing, as without markers, warns naming the file, and says it listed."""
    table = tmp_path / "t"
    t = TableBuilder(LocalStorage(table))
    t.insert(["a", "b"], 1)
    before = sorted((table / "p=1").iterdir())
    failed = t.update(["a"], 9)
    (table / ".hoodie" / f"{failed}.deltacommit").unlink()  # its writer died before the commit
    write_marker_type(t.storage, failed)
    damaged = table / ".hoodie" / ".temp" / failed / "MARKERS0"
    damaged.write_bytes(b"p\xff\xfe\n")
    assert _values(table) == {"a": 1, "b": 1}

    # the writer's heartbeat interval, so that the write is found dead at once
    done = tidemark("rollback", str(table), failed, "--conf", "hoodie.client.heartbeat.interval_in_ms=1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"rolled back {failed}.deltacommit[INFLIGHT] at {_rollback_instant(table)}: 1 file deleted, "
        "0 rollback blocks written (its markers could not be read: its files were found by listing 1 partition)"
    ]
    assert f"{damaged} is not a MARKERS file (not UTF-8 at byte 1)" in done.stderr
    assert not (table / ".hoodie" / ".temp" / failed).exists()
    assert sorted((table / "p=1").iterdir()) == before  # its log file deleted
    assert _values(table) == {"a": 1, "b": 1}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(table)).to_pylist()} == {"a": 1, "b": 1}


def test_rollback_dry_run_lists_the_files_the_rollback_then_deletes_and_changes_nothing(tmp_path: Path) -> None:
    """``tidemark rollback`` had no dry run; now it shows the files it would delete, judges the
    same refusals as the real run, and changes no byte of the table."""
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    older = t.update(["a"], 2)
    latest = t.update(["a", "b"], 3)
    table = tmp_path / "t"

    def everything() -> dict[Path, bytes]:
        return {p.relative_to(table): p.read_bytes() for p in table.rglob("*") if p.is_file()}

    before = everything()
    refused = tidemark("rollback", str(table), older, "--dry-run")
    assert refused.returncode == 1
    assert f"is not the latest completed write ({latest} is later)" in refused.stderr
    dry = tidemark("rollback", str(table), latest, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert everything() == before
    lines = dry.stdout.splitlines()
    assert lines[0].startswith(f"would roll back {latest}.deltacommit: delete ")
    would_delete = {Path(line.removeprefix("  delete ")) for line in lines[1:] if line.startswith("  delete ")}
    done = tidemark("rollback", str(table), latest)
    assert done.returncode == 0, done.stderr
    assert would_delete == {p for p in before if p.parts[0] != ".hoodie"} - set(everything())
    assert would_delete
    assert _values(table) == {"a": 2, "b": 1}


def test_rollback_of_a_clustering_plan_does_not_say_a_write_is_running(tmp_path: Path) -> None:
    """A clustering plan as Apache's async clustering schedules it has no heartbeat: `tidemark
    rollback` of it refused for two minutes with `write X is still running (no heartbeat
    (starting, …))`. It is rolled back at once, unless a process running it beats."""
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    clustering = t.plan_clustering(sorted(t.groups)[0])
    table = str(tmp_path / "t")
    done = tidemark("rollback", table, clustering)
    assert done.returncode == 0, done.stderr
    assert not load_timeline(t.storage).pending().instants
    assert _values(tmp_path / "t") == {"a": 1, "b": 1}
    running = t.plan_clustering(sorted(t.groups)[0])
    beat(t.storage, running)
    refused = tidemark("rollback", table, running)
    assert refused.returncode == 1
    assert f"clustering {running} is being run by another process (heartbeat " in refused.stderr


def test_the_dry_run_of_a_rollback_a_killed_run_left_names_only_the_files_left(tmp_path: Path) -> None:
    """A rollback killed after deleting one of its write's files: the dry run listed the plan's
    every file, the deleted one too, though running it again deletes only the rest."""
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a"], 1)
    t.insert(["b"], 1)  # a second file group
    written = t.update(["a", "b"], 2)  # a log file on each
    table = tmp_path / "t"
    logs = sorted(p.relative_to(table) for p in table.rglob(".fg-*.log.*") if written in _blocks_of(p))
    assert len(logs) == 2
    killed = crash.run(
        "tidemark", ["rollback", str(table), written, *SHORT_LEASE], tmp_path / "log", KillAt(1, "after", r"\.log\.")
    )
    assert killed.killed, killed.stderr
    left = [path for path in logs if (table / path).exists()]
    assert len(left) == 1
    dry = tidemark("rollback", str(table), written, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    finishing = f"would finish the rollback {_pending_rollback(table)} of {written}.deltacommit"
    assert lines[0].startswith(f"{finishing}: delete 1 file,")
    assert lines[1:] == [f"  delete {left[0]}"]
    done = tidemark("rollback", str(table), written)
    assert done.returncode == 0, done.stderr
    assert not (table / left[0]).exists()
    assert _values(table) == {"a": 1, "b": 1}


def _blocks_of(path: Path) -> set[str | None]:
    from tidemark.logformat import LogFileReader

    return {block.instant_time for block in LogFileReader(path.read_bytes()).blocks()}


def _pending_rollback(table: Path) -> str:
    (pending,) = load_timeline(LocalStorage(table)).pending().of_actions(ROLLBACK)
    return pending.timestamp
