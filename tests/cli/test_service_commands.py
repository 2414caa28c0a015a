"""``tidemark clean``, ``archive``, ``savepoint``, ``restore`` and ``timeline --archived`` as a
user runs them. A dry run prints exactly what the real run then does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.compaction import compact


def tidemark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


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


def test_restore_and_clear_errors(tmp_path: Path) -> None:
    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    sp = t.update(["a"], 2)
    assert tidemark("savepoint", "create", str(tmp_path), sp).returncode == 0
    t.update(["a"], 3)
    restored = tidemark("restore", str(tmp_path), sp)
    assert restored.returncode == 0, restored.stderr
    assert t.snapshot() == {"a": 2}
    bad = tidemark("clean", str(tmp_path), "--conf", "hoodie.cleaner.commits.retained=many")
    assert bad.returncode == 1
    assert "hoodie.cleaner.commits.retained='many': expected a whole number" in bad.stderr
    missing = tidemark("archive", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert "not a Hudi table" in missing.stderr
