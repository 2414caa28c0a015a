"""``tidemark clean``, ``archive``, ``savepoint``, ``restore`` and ``timeline --archived`` as a
user runs them. A dry run prints exactly what the real run then does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import listing, tidemark
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.compaction import compact
from tidemark.table.heartbeat import beat
from tidemark.table.snapshot import read_snapshot
from tidemark.table_services.clean import CleanConfig, plan_clean
from tidemark.table_services.savepoint import create_savepoint
from tidemark.timeline import CLEAN, RESTORE, ROLLBACK, SAVEPOINT, load_timeline, read_instant, request_new_instant
from tidemark.timeline import avro_metadata as avro


def _listed(out: str) -> list[str]:
    return sorted(line.strip() for line in out.splitlines() if line.startswith("  ") and "note:" not in line)


def test_clean_and_archive_dry_runs_match_the_real_runs(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a", "b"], 1)
    savepoint = tidemark("savepoint", "create", str(tmp_path), first)
    assert savepoint.returncode == 0, savepoint.stderr
    assert tidemark("savepoint", "list", str(tmp_path)).stdout.split() == [first]
    assert tidemark("savepoint", "delete", str(tmp_path), first).returncode == 0
    none = tidemark("savepoint", "list", str(tmp_path))
    assert (none.returncode, none.stdout) == (0, "")
    assert f"no savepoints on {tmp_path}" in none.stderr
    for v in range(2, 7):
        t.update(["a"], v)
        compact(t.storage)
    conf = ["--conf", "hoodie.cleaner.commits.retained=2"]
    dry = tidemark("clean", str(tmp_path), "--dry-run", *conf)
    assert dry.returncode == 0, dry.stderr
    planned = _listed(dry.stdout)
    assert planned
    assert all((tmp_path / f).exists() for f in planned)
    real = tidemark("clean", str(tmp_path), *conf)
    assert real.returncode == 0, real.stderr
    assert _listed(real.stdout) == planned
    assert not any((tmp_path / f).exists() for f in planned)

    aconf = ["--conf", "hoodie.keep.min.commits=2", "--conf", "hoodie.keep.max.commits=3"]
    dry_archive = tidemark("archive", str(tmp_path), "--dry-run", *aconf)
    assert dry_archive.returncode == 0, dry_archive.stderr
    to_archive = _listed(dry_archive.stdout)
    assert to_archive
    assert "stopped by:" in dry_archive.stdout
    done = tidemark("archive", str(tmp_path), *aconf)
    assert _listed(done.stdout) == to_archive
    archived = tidemark("timeline", str(tmp_path), "--archived").stdout
    assert all(line.split()[0] in archived for line in to_archive)
    assert t.snapshot() == {"a": 6, "b": 1}


def test_a_clean_a_killed_cleaner_left_pending_is_in_the_dry_run_and_in_the_real_runs_output(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    for v in range(2, 7):
        t.update(["a"], v)
        compact(t.storage)
    # the plan a cleaner keeping 3 commits made before it was killed
    pending_plan = plan_clean(t.storage, CleanConfig(commits_retained=3))
    assert pending_plan.file_count
    request_new_instant(
        t.storage, load_timeline(t.storage), CLEAN, avro.serialize("HoodieCleanerPlan", pending_plan.to_avro(t.storage))
    )

    def data_files() -> set[str]:
        return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and ".hoodie" not in p.parts}

    before = data_files()
    conf = ["--conf", "hoodie.cleaner.commits.retained=1"]
    dry = tidemark("clean", str(tmp_path), "--dry-run", *conf)
    assert dry.returncode == 0, dry.stderr
    assert "would first finish the pending clean" in dry.stdout
    planned = _listed(dry.stdout)
    assert len(planned) > pending_plan.file_count  # the pending clean's files, then the new plan's
    real = tidemark("clean", str(tmp_path), *conf)
    assert real.returncode == 0, real.stderr
    assert "finished the pending clean" in real.stdout
    assert sorted(before - data_files()) == planned == _listed(real.stdout)
    assert t.snapshot() == {"a": 6, "b": 1}


def test_savepoint_create_records_who_made_it_and_why_as_hudis_cli_does(tmp_path: Path) -> None:
    """Hudi's `savepoint create --user --comments` record savepointedBy and comments; tidemark's
    command took neither."""
    t = TableBuilder(LocalStorage(tmp_path))
    first = t.insert(["a"], 1)
    made = tidemark("savepoint", "create", str(tmp_path), first, "--user", "alice", "--comment", "before the backfill")
    assert made.returncode == 0, made.stderr
    (savepoint,) = load_timeline(t.storage).of_actions(SAVEPOINT)
    metadata = avro.deserialize(read_instant(t.storage, savepoint), "HoodieSavepointMetadata", str(tmp_path))
    assert (metadata["savepointedBy"], metadata["comments"]) == ("alice", "before the backfill")


def test_restore_and_clear_errors(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    sp = t.update(["a"], 2)
    assert tidemark("savepoint", "create", str(tmp_path), sp).returncode == 0
    later = t.update(["a"], 3)

    def data_files() -> set[Path]:
        return {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and ".hoodie" not in p.parts}

    before = data_files()
    restored = tidemark("restore", str(tmp_path), sp)
    assert restored.returncode == 0, restored.stderr
    assert t.snapshot() == {"a": 2}
    # what it rolled back and deleted, as the operator checks it
    deleted = before - data_files()
    assert deleted
    files = "1 file" if len(deleted) == 1 else f"{len(deleted)} files"
    assert f"rolled back 1 write ({later}), deleted {files}" in restored.stdout
    assert {Path(line.strip()) for line in restored.stdout.splitlines()[1:]} == deleted
    bad = tidemark("clean", str(tmp_path), "--conf", "hoodie.cleaner.commits.retained=many")
    assert bad.returncode == 1
    assert "hoodie.cleaner.commits.retained='many': expected a whole number" in bad.stderr
    missing = tidemark("archive", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert "not a Hudi table" in missing.stderr


def test_clean_removes_the_temporary_files_of_a_killed_write_once_they_are_old(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)

    def data_files() -> list[Path]:
        return sorted(p.relative_to(tmp_path) for p in tmp_path.glob("p*/*") if p.is_file())

    before = data_files()
    # a process killed while it fills a file (the bytes are written, then synced, then linked)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tidemark.storage import LocalStorage; "
            "LocalStorage(sys.argv[1]).create_if_absent('p1/big.parquet', bytes(64 << 20))",
            str(tmp_path),
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "p1").glob("*.tidemark-tmp-*")) and writer.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.002)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    left = list((tmp_path / "p1").glob("*.tidemark-tmp-*"))
    assert len(left) == 1, "the write finished before it was killed"
    fresh = tmp_path / ".hoodie" / ".hoodie.properties.tidemark-tmp-1-a"  # a write still going on
    fresh.write_bytes(b"x")

    # an hour has not passed: a live write's file is not touched
    assert "temporary" not in tidemark("clean", str(tmp_path), "--dry-run").stdout
    hours_ago = time.time() - 2 * 3600
    os.utime(left[0], (hours_ago, hours_ago))
    dry = tidemark("clean", str(tmp_path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would remove 1 temporary files left by interrupted writes" in dry.stdout
    assert f"  {left[0].relative_to(tmp_path)}" in dry.stdout.splitlines()
    assert left[0].exists()
    real = tidemark("clean", str(tmp_path))
    assert real.returncode == 0, real.stderr
    assert "removed 1 temporary files" in real.stdout
    assert not left[0].exists()
    assert fresh.exists()
    assert data_files() == before


def test_clean_removes_the_instant_time_claims_killed_processes_left(tmp_path: Path) -> None:
    import datetime

    from tidemark.timeline import new_instant_time
    from tidemark.timeline.active import claim_path

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    now = datetime.datetime.now(datetime.UTC)
    # a process killed between claiming its time and creating its instant, two hours ago; and a
    # claim being held right now
    stale = claim_path(new_instant_time(now - datetime.timedelta(hours=2)))
    live = claim_path(new_instant_time(now))
    for claim in (stale, live):
        t.storage.create_if_absent(claim, b"")
    dry = tidemark("clean", str(tmp_path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"  {stale}" in dry.stdout.splitlines()
    assert live not in dry.stdout
    assert t.storage.exists(stale)
    real = tidemark("clean", str(tmp_path))
    assert real.returncode == 0, real.stderr
    assert not t.storage.exists(stale)
    assert t.storage.exists(live)
    assert t.snapshot() == {"a": 1}


def test_clean_switched_off_changes_nothing(tmp_path: Path) -> None:
    """With tidemark.clean.archive.enabled=false the command removed the abandoned claims and
    temporaries, then said there was nothing to clean; now it leaves the table as it was."""
    import datetime

    from tidemark.timeline import new_instant_time
    from tidemark.timeline.active import claim_path

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    compact(t.storage)
    t.update(["a"], 3)  # an old slice a clean would delete
    stale = claim_path(new_instant_time(datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)))
    t.storage.create_if_absent(stale, b"")
    temporary = tmp_path / "p1" / "old.parquet.tidemark-tmp-1-a"
    temporary.parent.mkdir(exist_ok=True)
    temporary.write_bytes(b"x")
    hours_ago = time.time() - 2 * 3600
    os.utime(temporary, (hours_ago, hours_ago))
    assert "temporary" in tidemark("clean", str(tmp_path), "--dry-run").stdout
    before = listing(tmp_path)
    for dry in ((), ("--dry-run",)):
        run = tidemark("clean", str(tmp_path), *dry, "--conf", "tidemark.clean.archive.enabled=false")
        assert run.returncode == 0, run.stderr
        assert run.stdout == "nothing to clean: cleaning is off (tidemark.clean.archive.enabled=false)\n"
        assert listing(tmp_path) == before
    assert t.snapshot() == {"a": 3, "b": 1}


def test_a_pending_clean_whose_plan_holds_full_locations_deletes_its_files(tmp_path: Path) -> None:
    # Hudi 0.14's cleaner plans list full locations (of wherever the table was then): taken as
    # paths in the table, every delete missed and the clean completed saying it had deleted them
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    for v in range(2, 5):
        t.update(["a"], v)
        compact(t.storage)
    pending = plan_clean(t.storage, CleanConfig(commits_retained=1))
    doomed = [f for files in pending.files_to_delete.values() for f in files]
    assert doomed
    plan = pending.to_avro(t.storage)
    for partition, infos in plan["filePathsToBeDeletedPerPartition"].items():
        for info in infos:
            info["filePath"] = f"file:/elsewhere/t/{partition}/{info['filePath'].rsplit('/', 1)[-1]}"
    request_new_instant(t.storage, load_timeline(t.storage), CLEAN, avro.serialize("HoodieCleanerPlan", plan))
    real = tidemark("clean", str(tmp_path), "--conf", "hoodie.cleaner.commits.retained=1")
    assert real.returncode == 0, real.stderr
    assert not [f for f in doomed if (tmp_path / f).exists()]
    assert sorted(_listed(real.stdout)) == sorted(doomed)
    assert t.snapshot() == {"a": 4, "b": 1}


def test_timeline_and_show_send_a_compaction_a_killed_restore_left_to_finishing_the_restore(tmp_path: Path) -> None:
    """A restore killed inside its rollback of a compaction (just after deleting its ``.commit``)
    leaves the compaction pending: ``timeline`` and ``table show`` said the next ``tidemark compact``
    takes it up, but ``compact`` is refused until the restore is finished."""
    from tests.support import crash
    from tests.support.crash import SHORT_LEASE, KillAt
    from tidemark.timeline import COMPACTION, RESTORE

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    sp = t.update(["a"], 2)
    table = str(tmp_path / "t")
    assert tidemark("savepoint", "create", table, sp).returncode == 0
    t.update(["b"], 3)
    compaction = compact(t.storage)
    assert compaction is not None
    after_commit_deleted = KillAt(1, "after", r"^delete \S+\.commit$")
    killed = crash.run("tidemark", ["restore", table, sp, *SHORT_LEASE], tmp_path / "log", after_commit_deleted)
    assert killed.killed, killed.stderr
    timeline = load_timeline(t.storage)
    (restore,) = timeline.pending().of_actions(RESTORE)
    assert [i.timestamp for i in timeline.pending().of_actions(COMPACTION)] == [compaction.timestamp]

    finish = f"finish it first with `tidemark restore {table} {sp}`"
    hint = (
        "no heartbeat (no process runs it, and tidemark compact is refused while "
        f"restore {restore.timestamp} to savepoint {sp} is unfinished: {finish})"
    )
    shown = tidemark("timeline", table)
    assert shown.returncode == 0, shown.stderr
    assert f"{compaction.timestamp}  compaction     INFLIGHT  {hint}" in shown.stdout.splitlines()
    show = tidemark("table", "show", table)
    assert show.returncode == 0, show.stderr
    assert f"[compaction {compaction.timestamp} pending, {hint}]" in show.stdout
    refused = tidemark("compact", table, "--engine", "local")
    assert refused.returncode == 1
    assert finish in refused.stderr
    # the command named finishes it
    assert tidemark("restore", table, sp).returncode == 0
    assert "compaction" not in tidemark("timeline", table).stdout
    assert t.snapshot() == {"a": 2, "b": 1}


def test_savepoint_delete_is_refused_while_a_restore_to_it_is_unfinished(tmp_path: Path) -> None:
    """A restore killed at its first data-file delete, then `tidemark savepoint delete` of its
    savepoint: accepted, and every command then named a restore that said there was no savepoint."""
    from tests.support import crash
    from tests.support.crash import SHORT_LEASE, KillAt
    from tidemark.timeline import RESTORE

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    sp = t.update(["a"], 2)
    table = str(tmp_path / "t")
    assert tidemark("savepoint", "create", table, sp).returncode == 0
    t.update(["b"], 3)
    killed = crash.run(
        "tidemark", ["restore", table, sp, *SHORT_LEASE], tmp_path / "log", KillAt(1, "before", r"^delete \S+\.log")
    )
    assert killed.killed, killed.stderr
    (restore,) = load_timeline(t.storage).pending().of_actions(RESTORE)
    refused = tidemark("savepoint", "delete", table, sp)
    assert refused.returncode == 1, refused.stdout
    assert refused.stderr.splitlines()[-1] == (
        f"tidemark: error: {table}: cannot delete the savepoint {sp}: restore {restore.timestamp} to savepoint {sp} "
        f"is unfinished; finish it first with `tidemark restore {table} {sp}`"
    )
    assert tidemark("savepoint", "list", table).stdout.split() == [sp]
    assert tidemark("restore", table, sp).returncode == 0  # the command named
    assert tidemark("savepoint", "delete", table, sp).returncode == 0
    assert t.snapshot() == {"a": 2, "b": 1}


def test_savepoint_create_is_refused_while_a_write_earlier_than_it_is_pending(tmp_path: Path) -> None:
    """Made anyway, the savepoint did not keep that write's files, which reads as of it include
    once the write commits: a clean deleted them and the savepoint could no longer be restored."""
    from tidemark.table.write_client import start_write
    from tidemark.timeline import DELTA_COMMIT

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    w = start_write(t.storage, DELTA_COMMIT, "upsert")
    sp = t.update(["a"], 2)
    refused = tidemark("savepoint", "create", str(tmp_path), sp)
    assert refused.returncode == 1, refused.stdout
    last = refused.stderr.splitlines()[-1]
    uri = t.storage.uri
    assert last.startswith(f"tidemark: error: {uri}: cannot savepoint {sp} while deltacommit {w.timestamp}, earlier ")
    assert last.endswith(f"roll it back (`tidemark rollback {uri} {w.timestamp}`), then savepoint again")
    assert tidemark("savepoint", "list", str(tmp_path)).stdout == ""


def test_restore_dry_run_lists_what_the_restore_then_does_and_changes_nothing(tmp_path: Path) -> None:
    """``tidemark restore`` had no dry run: a user could not see which writes and files a restore
    would take before it took them."""
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a", "b"], 1)
    sp = t.update(["a"], 2)
    assert tidemark("savepoint", "create", str(tmp_path), sp).returncode == 0
    later = [t.update(["a"], 3), t.insert(["c"], 4), t.update(["b", "c"], 5)]
    compacted = compact(t.storage)
    assert compacted is not None
    later += [compacted.timestamp, t.update(["a"], 6)]  # logged on top of the compaction's slice

    def everything() -> dict[Path, bytes]:
        return {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    before = everything()
    dry = tidemark("restore", str(tmp_path), sp, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert everything() == before  # not a byte changed, not even a timeline file
    lines = dry.stdout.splitlines()
    newest_first = ", ".join(reversed(later))
    assert lines[0].startswith(f"would restore to savepoint {sp}: roll back 5 writes ({newest_first}), newest first")
    would_delete = {Path(line.removeprefix("    delete ")) for line in lines if line.startswith("    delete ")}
    restored = tidemark("restore", str(tmp_path), sp)
    assert restored.returncode == 0, restored.stderr
    deleted = {p for p in before if p.parts[0] != ".hoodie"} - set(everything())
    assert would_delete == deleted
    assert f"; delete {len(deleted)} files, " in lines[0]  # each file once, under the rollback that deletes it
    assert len([line for line in lines if line.startswith("    delete ")]) == len(deleted)
    assert t.snapshot() == {"a": 2, "b": 1}
    again = tidemark("restore", str(tmp_path), sp, "--dry-run")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].startswith(f"would restore to savepoint {sp}: roll back 0 writes (-)")
    gone = tidemark("restore", str(tmp_path), "20200101000000000", "--dry-run")
    assert gone.returncode == 1
    assert "no savepoint at 20200101000000000 to restore to" in gone.stderr


def test_a_clustering_planned_after_the_savepoint_is_rolled_back_by_the_restore_at_once(tmp_path: Path) -> None:
    """A clustering plan as Apache's async clustering schedules it (no heartbeat) held a restore
    back for two minutes as `write X is still running (no heartbeat (starting, …))`; Hudi's restore
    rolls pending clusterings back at once. A live heartbeat of a process running it still holds it."""
    t = TableBuilder(LocalStorage(tmp_path))
    sp = t.insert(["a", "b"], 1)
    assert tidemark("savepoint", "create", str(tmp_path), sp).returncode == 0
    later = t.update(["a"], 2)
    clustering = t.plan_clustering(sorted(t.groups)[0])
    dry = tidemark("restore", str(tmp_path), sp, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"would restore to savepoint {sp}: roll back 2 writes ({clustering}, {later})")
    restored = tidemark("restore", str(tmp_path), sp)
    assert restored.returncode == 0, restored.stderr
    assert f"rolled back 2 writes ({clustering}, {later})" in restored.stdout
    assert not load_timeline(t.storage).pending().instants
    assert t.snapshot() == {"a": 1, "b": 1}
    t.update(["a"], 3)
    running = t.plan_clustering(sorted(t.groups)[0])
    beat(t.storage, running)
    refused = tidemark("restore", str(tmp_path), sp)
    assert refused.returncode == 1
    assert f"cannot restore to {sp} while clustering {running} is being run (heartbeat " in refused.stderr


def _restore_together(root: str, savepoint: str, processes: int) -> tuple[int, str]:
    """In a child process: `tidemark restore` of ``root`` at once with the other processes; its
    exit status and what it printed."""
    import contextlib
    import io

    from tests.support.processes import start_line
    from tidemark.cli.main import main

    out = io.StringIO()
    start_line(Path(root).parent / f"{Path(root).name}.ready", processes)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["restore", root, savepoint])
    return code, out.getvalue()


def test_two_restores_to_one_savepoint_at_once_both_end_well(tmp_path: Path) -> None:
    """A retried Job, or a user running again a restore that printed nothing yet: the table ended
    restored, but the run finishing second exited 1 with `<ts>.restore[COMPLETED] already exists
    …: another writer got there first` (or `….rollback[INFLIGHT] already exists`, having replayed
    the other run's rollback beside it). As two cleaners at once do, it ends well, and says so."""
    import multiprocessing

    rounds, processes = 3, 2
    tables: list[tuple[str, str, list[str]]] = []
    for n in range(rounds):
        root = tmp_path / f"t{n}"
        (tmp_path / f"t{n}.ready").mkdir()
        t = TableBuilder(LocalStorage(root))
        sp = t.insert(["a", "b"], 1)
        create_savepoint(t.storage, sp)
        later = [t.update(["a"], v) if v % 2 else t.insert([f"k{v}"], v) for v in range(2, 10)]
        tables.append((str(root), sp, later))
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for root, sp, later in tables:
            runs = pool.starmap(_restore_together, [(root, sp, processes)] * processes, chunksize=1)
            assert [code for code, _ in runs] == [0] * processes, runs
            assert all(out.startswith(f"restored to savepoint {sp} (restore instant ") for _, out in runs), runs
            notes = [out for _, out in runs if "another restore running it at the same time completed it first" in out]
            assert len(notes) == 1, runs
            storage = LocalStorage(root)
            timeline = load_timeline(storage)
            assert not timeline.pending().instants
            assert len(timeline.of_actions(RESTORE).instants) == 1
            assert len(timeline.of_actions(ROLLBACK).instants) == len(later), "each write rolled back once"
            assert {r["id"]: r["v"] for r in read_snapshot(storage).to_pylist()} == {"a": 1, "b": 1}
