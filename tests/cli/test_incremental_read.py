"""``tidemark table read --begin/--end``: an incremental query from the command line."""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

from tests.support.cli import tidemark
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.table.write_client import start_write
from tidemark.timeline import DELTA_COMMIT


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
    assert table.stdout.splitlines()[-1] == "(1 row)"
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
        (("--begin", "000", "--end", "soon"), "--end='soon': expected an instant time"),
        (
            ("--begin", "000", "--conf", "hoodie.read.timeline.holes.resolution.policy=sometimes"),
            "hoodie.read.timeline.holes.resolution.policy='sometimes': expected FAIL or BLOCK",
        ),
    ]:
        result = tidemark("table", "read", str(tmp_path), *args)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr


def test_time_travel_takes_a_time_as_the_spark_source_does(tmp_path: Path) -> None:
    """``--as-of`` took only an exact completed instant; as Hudi's ``as.of.instant`` (and the
    Spark source), a time or a day reads the table as its latest write then left it."""
    builder = TableBuilder(LocalStorage(tmp_path))
    first = builder.insert(["a"], 1)
    second = builder.upsert(["a"], 2)

    def value(as_of: str) -> int:
        result = tidemark("table", "read", str(tmp_path), "--format", "jsonl", "--as-of", as_of)
        assert result.returncode == 0, result.stderr
        (row,) = [json.loads(line) for line in result.stdout.splitlines()]
        return int(row["v"])

    day = f"{first[:4]}-{first[4:6]}-{first[6:8]}"
    assert value(first) == 1
    assert value(f"{day} {first[8:10]}:{first[10:12]}:{first[12:14]}.{first[14:17]}") == 1
    assert value("2999-01-01") == 2
    # a day is its start, as Hudi's formatQueryInstant reads it (it was read as the day's end); the
    # day after the second write's (the two may fall on either side of midnight)
    on = datetime.date(int(second[:4]), int(second[4:6]), int(second[6:8]))
    next_day = (on + datetime.timedelta(days=1)).isoformat()
    assert value(next_day) == 2
    for as_of, message in [
        ("2000-01-01", "--as-of=2000-01-01: no completed write at or before it"),
        (day, f"--as-of={day}: no completed write at or before it"),
        ("yesterday", "--as-of='yesterday': expected an instant time"),
        ("2026-13-45", "--as-of='2026-13-45': not a date and time"),
        ("2026-11-25 99:99:99", "--as-of='2026-11-25 99:99:99': not a date and time"),
    ]:
        result = tidemark("table", "read", str(tmp_path), "--as-of", as_of)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr


def test_time_travel_past_a_pending_write_is_refused(tmp_path: Path) -> None:
    """``--as-of`` after a write still inflight answered without it, and with it once it
    completed; refused as Hudi refuses it, naming the write and what to do."""
    builder = TableBuilder(LocalStorage(tmp_path))
    first = builder.insert(["a"], 1)
    pending = start_write(builder.storage, DELTA_COMMIT, "upsert").timestamp
    refused = tidemark("table", "read", str(tmp_path), "--as-of", "2999-01-01")
    assert refused.returncode != 0
    assert f"--as-of=2999-01-01: the deltacommit {pending}, at or before it, is still inflight" in refused.stderr
    assert f"`tidemark rollback {tmp_path} {pending}`" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    before = tidemark("table", "read", str(tmp_path), "--format", "jsonl", "--as-of", first)
    assert ids(before) == ["a"]
