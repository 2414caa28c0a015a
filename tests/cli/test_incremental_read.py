"""``tidemark table read --begin/--end``: an incremental query from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.write_client import start_write
from tidemark.timeline import DELTA_COMMIT


def tidemark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *args], capture_output=True, text=True, timeout=120, env=os.environ
    )


def ids(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return sorted(json.loads(line)["id"] for line in result.stdout.splitlines())


def test_incremental_read_from_the_command_line(tmp_path: Path) -> None:
    builder = TableBuilder(LocalStorage(tmp_path))
    first = builder.insert(["a", "b", "c"], 1)
    second = builder.upsert(["a", "d"], 2)
    builder.upsert(["c"], 3)
    path = str(tmp_path)
    assert ids(tidemark("table", "read", path, "--format", "jsonl", "--begin", "000")) == ["a", "b", "c", "d"]
    assert ids(tidemark("table", "read", path, "--format", "jsonl", "--begin", first)) == ["a", "c", "d"]
    assert ids(tidemark("table", "read", path, "--format", "jsonl", "--begin", first, "--end", second)) == ["a", "d"]
    table = tidemark("table", "read", path, "--begin", second)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[-1] == "(1 rows)"
    # a writer still at work: refused with what to do, or the range stopped before it (BLOCK)
    start_write(builder.storage, DELTA_COMMIT, "upsert")
    builder.upsert(["e"], 4)
    refused = tidemark("table", "read", path, "--begin", first)
    assert refused.returncode != 0
    assert "is still requested" in refused.stderr or "is still inflight" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    blocked = ("--conf", "hoodie.read.timeline.holes.resolution.policy=BLOCK")
    assert ids(tidemark("table", "read", path, "--format", "jsonl", "--begin", first, *blocked)) == ["a", "c", "d"]


def test_incremental_read_arguments_are_checked(tmp_path: Path) -> None:
    builder = TableBuilder(LocalStorage(tmp_path))
    first = builder.insert(["a"], 1)
    for args, message in [
        (("--end", first), "--end ends an incremental query: give --begin too"),
        (("--begin", "000", "--as-of", first), "--as-of is a snapshot's"),
        (("--begin", "last week"), "--begin='last week': expected an instant time"),
    ]:
        result = tidemark("table", "read", str(tmp_path), *args)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
