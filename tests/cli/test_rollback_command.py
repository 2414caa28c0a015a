"""``tidemark rollback`` as a user runs it, on tables the builder makes (no Spark): what it says
when it resumes a rollback a killed process left, and what it says of instants it does not take
back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import crash
from tests.support.crash import KillAt
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import ROLLBACK, load_timeline


def tidemark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


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
    said = f"rolled back {written}.deltacommit[COMPLETED] at {{}}: 1 files deleted, 0 rollback blocks written"
    assert uninterrupted.stdout.splitlines() == [said.format(_rollback_instant(fresh))]

    for name, kill, state in [
        ("planned", KillAt(1, "after", r"\.rollback\.requested$"), "[COMPLETED]"),
        ("begun", KillAt(1, "after", rf"^delete \S+/{written}\.deltacommit$"), ""),
    ]:
        table = tmp_path / name
        shutil.copytree(tmp_path / "t", table)
        killed = crash.run("tidemark", ["rollback", str(table), written], tmp_path / "log", kill)
        assert killed.killed, killed.stderr
        resumed = tidemark("rollback", str(table), written)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.splitlines() == [
            f"rolled back {written}.deltacommit{state} at {_rollback_instant(table)}: "
            "1 files deleted, 0 rollback blocks written"
        ]
        assert _values(table) == _values(fresh) == {"a": 1, "b": 1}
