"""The table commands as a user runs them: ``tidemark write``, ``table read``, ``table show``,
``timeline``, ``compact`` and ``rollback``, in subprocesses."""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import cli
from tests.support.model import apache_snapshot

pytestmark = pytest.mark.spark


def tidemark(*args: str) -> subprocess.CompletedProcess[str]:
    return cli.tidemark(*args, env={"TIDEMARK_SPARK_MASTER": "local[2]"})


def _input(path: Path, rows: list[dict[str, Any]]) -> Path:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.int64()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("price", pa.decimal128(10, 2)),
            ("blob", pa.binary()),
            ("tags", pa.map_(pa.string(), pa.int32())),
            ("region", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _row(i: int, ts: int) -> dict[str, Any]:
    return {
        "id": i,
        "ts": ts,
        "day": datetime.date(2025, 1, 1 + i),
        "at": datetime.datetime(2025, 1, 1, 12, i, tzinfo=datetime.UTC),
        "price": decimal.Decimal(f"{i}.{ts:02d}"),
        "blob": bytes([i, ts]),
        "tags": [("a", i), ("b", ts)],
        "region": ["eu", "us"][i % 2],
    }


def test_write_read_show_compact_rollback(tmp_path: Path) -> None:
    table = tmp_path / "orders"
    first = _input(tmp_path / "one.parquet", [_row(i, 1) for i in range(4)])
    common = ["--record-key", "id", "--precombine", "ts", "--partition-field", "region", "--hive-style"]
    proc = tidemark("write", str(table), "--input", str(first), "--operation", "upsert", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 inserted" in proc.stdout

    updates = tmp_path / "two.jsonl"
    updates.write_text(
        json.dumps(
            {
                "id": 1,
                "ts": 2,
                "day": "2025-01-09",
                "at": "2025-01-01T12:30:00Z",
                "price": "9.99",
                "blob": None,
                "tags": None,
                "region": "us",
            }
        )
        + "\n"
    )
    # JSON input into an existing table is read with the table's types (a decimal from a string, a
    # date and a timestamp from ISO-8601), not with those JSON would infer
    typed = tidemark("write", str(table), "--input", str(updates), "--operation", "upsert", *common)
    assert typed.returncode == 0, typed.stderr[-3000:]
    assert "1 updated" in typed.stdout
    second = _input(tmp_path / "two.parquet", [_row(1, 2) | {"price": decimal.Decimal("9.99")}])
    proc = tidemark("write", str(table), "--input", str(second), "--operation", "upsert", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 updated" in proc.stdout

    read = tidemark("table", "read", str(table), "--format", "jsonl")
    assert read.returncode == 0, read.stderr
    rows = sorted((json.loads(line) for line in read.stdout.splitlines()), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == [0, 1, 2, 3]
    one = rows[1]
    assert one["price"] == "9.99"  # decimals as strings
    assert one["day"] == "2025-01-02"  # dates as ISO-8601
    assert one["at"].startswith("2025-01-01T12:01:00")  # timestamps as ISO-8601
    assert one["blob"] == "0102"  # binary as hex
    assert one["tags"] == {"a": 1, "b": 2}  # maps as objects
    assert sorted(apache_snapshot(str(table)).column("price").to_pylist()) == sorted(
        decimal.Decimal(r["price"]) for r in rows
    )

    show = tidemark("table", "show", str(table))
    assert show.returncode == 0
    assert "hoodie.table.type=MERGE_ON_READ" in show.stdout
    assert "region=us" in show.stdout
    assert ".log." in show.stdout

    timeline = tidemark("timeline", str(table), "--json")
    instants = [json.loads(line) for line in timeline.stdout.splitlines()]
    assert [(i["action"], i["state"]) for i in instants] == [("deltacommit", "COMPLETED")] * 3

    listing = sorted(p.relative_to(table) for p in table.rglob("*"))
    refused = tidemark("compact", str(table), "--conf", "hoodie.parquet.compression.codec=lzo")
    assert refused.returncode == 1
    assert "hoodie.parquet.compression.codec='lzo': tidemark writes snappy, gzip, zstd" in refused.stderr
    assert sorted(p.relative_to(table) for p in table.rglob("*")) == listing
    compacted = tidemark(
        "compact",
        str(table),
        "--conf",
        "hoodie.parquet.compression.codec=zstd",
        "--conf",
        "hoodie.parquet.bloom.filter.enabled=false",
    )
    assert compacted.returncode == 0
    assert "compaction committed" in compacted.stdout
    new_files = set(table.rglob("*.parquet")) - {table / p for p in listing}
    assert new_files
    assert {pq.read_metadata(p).row_group(0).column(0).compression for p in new_files} == {"ZSTD"}
    # the footers say which base files an Apache writer with a BLOOM index would fail on
    footers = tidemark("table", "show", str(table), "--footers")
    assert footers.returncode == 0, footers.stderr
    assert f"base files without Hudi's bloom filter: {len(new_files)} of {len(list(table.rglob('*.parquet')))}" in (
        footers.stdout
    )
    assert "footer: bloom filter DYNAMIC_V0, keys 0 .. 2" in footers.stdout  # the first write's eu file
    assert footers.stdout.count("footer: no bloom filter") == len(new_files)
    assert tidemark("table", "read", str(table), "--format", "jsonl").stdout.splitlines().__len__() == 4

    last = tidemark("write", str(table), "--input", str(second), "--operation", "delete", *common)
    assert last.returncode == 0, last.stderr[-2000:]
    delete_instant = last.stdout.split(" at ")[1].split(":")[0]
    rb = tidemark("rollback", str(table), delete_instant)
    assert rb.returncode == 0, rb.stderr
    assert len(tidemark("table", "read", str(table), "--format", "jsonl").stdout.splitlines()) == 4
    assert apache_snapshot(str(table)).num_rows == 4


def test_clear_errors(tmp_path: Path) -> None:
    missing = tidemark("table", "read", str(tmp_path))
    assert missing.returncode == 1
    assert f"not a Hudi table: {tmp_path}/.hoodie/hoodie.properties does not exist" in missing.stderr
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    # a file given for the table said "garbage.parquet/.hoodie/hoodie.properties does not exist"
    for argv in (["table", "show", str(garbage)], ["clean", str(garbage), "--dry-run"], ["timeline", str(garbage)]):
        a_file = tidemark(*argv)
        assert a_file.returncode == 1
        said = f"tidemark: error: not a Hudi table: {garbage} is a file; a table is the folder holding .hoodie/\n"
        assert a_file.stderr == said
    proc = tidemark(
        "write", str(tmp_path / "t"), "--input", str(garbage), "--operation", "upsert", "--record-key", "id"
    )
    assert proc.returncode == 1
    assert "garbage.parquet cannot be read" in proc.stderr
    assert "Traceback" not in proc.stderr
    nothing = tidemark(
        "write",
        str(tmp_path / "t"),
        "--input",
        str(tmp_path / "nope.json"),
        "--operation",
        "upsert",
        "--record-key",
        "id",
    )
    assert "no such file or folder" in nothing.stderr
    bad_conf = tidemark("table", "read", str(tmp_path), "--conf", "novalue")
    assert bad_conf.returncode == 2
    assert "KEY=VALUE" in bad_conf.stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("tidemark.kafka.sasl.password:hunter2", "got 'tidemark.kafka.sasl.password' and no '='"),
        ("hoodie.cleaner.commits.retained 3hunter2", "got 'hoodie.cleaner.commits.retained' and no '='"),
        ("hunter2", "got no '='"),
        ("=hunter2", "got no key before '='"),
    ],
)
def test_a_malformed_conf_is_refused_without_echoing_its_value(tmp_path: Path, text: str, said: str) -> None:
    """The error reaches the container's log; a ``KEY:VALUE`` typo must not print a password."""
    bad = tidemark("table", "read", str(tmp_path), "--conf", text)
    assert bad.returncode == 2
    assert f"--conf wants KEY=VALUE, {said}" in bad.stderr
    assert "hunter2" not in bad.stderr + bad.stdout


def test_a_conf_key_nothing_reads_is_warned_about(tmp_path: Path) -> None:
    """A misspelt key silently fell back to its default."""
    from tests.support.table_builder import TableBuilder
    from tidemark.storage import LocalStorage

    TableBuilder(LocalStorage(tmp_path)).insert(["a"], 1)
    keys = ("hoodie.clean.commits.retained=1", "hoodie.cleen.commits.retained=1", "foo.bar=1", "tidemark.x=1")
    result = tidemark("clean", str(tmp_path), "--dry-run", *(a for k in keys for a in ("--conf", k)))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"tidemark: warning: --conf {key}: tidemark reads no such key; ignored"
        for key in ("foo.bar", "hoodie.cleen.commits.retained")
    ]


def test_a_bad_switch_is_refused_by_a_command_that_does_not_read_it(tmp_path: Path) -> None:
    """README: a switch given anything but true or false is refused with its key and value. The
    commands that do not read a key took ``yes`` silently; the one that reads it refused it."""
    from tests.support.table_builder import TableBuilder
    from tidemark.storage import LocalStorage

    TableBuilder(LocalStorage(tmp_path)).insert(["a"], 1)
    for command in (("timeline",), ("table", "show"), ("table", "read"), ("clean", "--dry-run")):
        at = [command[0], str(tmp_path), *command[1:]] if command[0] != "table" else [*command, str(tmp_path)]
        result = tidemark(*at, "--conf", "hoodie.cleaner.incremental.mode=yes")
        assert result.returncode == 1, command
        assert result.stderr == "tidemark: error: hoodie.cleaner.incremental.mode='yes': expected true or false\n"
        assert result.stdout == ""


def test_merge_update_from_the_command_line(tmp_path: Path) -> None:
    table = tmp_path / "fares"
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "ts": 1, "fare": 10.0 * i, "n": 1, "zone": "a"}) + "\n" for i in range(4))
    )
    keys = tmp_path / "keys.jsonl"
    keys.write_text("".join(json.dumps({"id": i, "zone": "a"}) + "\n" for i in (1, 3)))
    common = ["--record-key", "id", "--precombine", "ts", "--partition-field", "zone"]
    assert tidemark("write", str(table), "--input", str(data), "--operation", "upsert", *common).returncode == 0
    bad = tidemark(
        "write",
        str(table),
        "--input",
        str(keys),
        "--operation",
        "merge_update",
        "--set",
        "fare=__import__('os')",
        *common,
    )
    assert bad.returncode == 1
    assert "is not allowed" in bad.stderr
    proc = tidemark(
        "write", str(table), "--input", str(keys), "--operation", "merge_update", "--set", "fare=fare * 2", *common
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in tidemark("table", "read", str(table), "--format", "jsonl").stdout.splitlines()]
    assert {r["id"]: r["fare"] for r in rows} == {0: 0.0, 1: 20.0, 2: 20.0, 3: 60.0}
    assert {r["id"]: r["fare"] for r in apache_snapshot(str(table)).to_pylist()} == {0: 0.0, 1: 20.0, 2: 20.0, 3: 60.0}
    # a long overflow: Spark's ANSI mode (on by default) refuses it in one line, not under the
    # JSON record of the query's context PySpark logs; the session takes --conf's spark.* keys
    overflow = ["--operation", "merge_update", "--set", "n=n * 9223372036854775807 * 2", *common]
    refused = tidemark("write", str(table), "--input", str(keys), *overflow)
    assert refused.returncode == 1
    assert "tidemark: error:" in refused.stderr, refused.stderr[-3000:]
    assert "ARITHMETIC_OVERFLOW" in refused.stderr
    assert "QueryContextLogger" not in refused.stderr, refused.stderr[-3000:]
    wrapped = tidemark("write", str(table), "--input", str(keys), *overflow, "--conf", "spark.sql.ansi.enabled=false")
    assert wrapped.returncode == 0, wrapped.stderr[-2000:]
    rows = [json.loads(line) for line in tidemark("table", "read", str(table), "--format", "jsonl").stdout.splitlines()]
    assert {r["id"]: r["n"] for r in rows} == {0: 1, 1: -2, 2: 1, 3: -2}  # wrapped at 64 bits, as Spark computed
    assert {r["id"]: r["n"] for r in apache_snapshot(str(table)).to_pylist()} == {0: 1, 1: -2, 2: 1, 3: -2}


def test_timeline_shows_the_heartbeat_of_pending_writes(tmp_path: Path) -> None:
    from tests.support.table_builder import TableBuilder, write_beat_at
    from tidemark.storage import LocalStorage
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table.write_client import begin_write

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a"], 1)
    live = begin_write(builder.storage, "deltacommit", "upsert", ConcurrencyConfig())
    dead = begin_write(builder.storage, "deltacommit", "upsert", ConcurrencyConfig())
    dead.heartbeat.stop(delete=False)
    write_beat_at(builder.storage, dead.instant, 1000)  # its last beat, long ago
    try:
        shown = tidemark("timeline", str(tmp_path / "t"))
        assert shown.returncode == 0, shown.stderr
        lines = {line.split()[0]: line for line in shown.stdout.splitlines()}
        assert "INFLIGHT  heartbeat " in lines[live.instant]
        assert lines[live.instant].endswith("(live)")
        assert lines[dead.instant].endswith("(expired)")
        assert "heartbeat" not in lines[min(lines)]  # a completed write has none
        as_json = [json.loads(line) for line in tidemark("timeline", str(tmp_path / "t"), "--json").stdout.splitlines()]
        by_instant = {r["instant"]: r for r in as_json}
        assert by_instant[live.instant]["heartbeat"]["expired"] is False
        assert by_instant[dead.instant]["heartbeat"] == {
            "last_beat_ms": 1000,
            "age_ms": by_instant[dead.instant]["heartbeat"]["age_ms"],
            "expired": True,
        }
        refused = tidemark("rollback", str(tmp_path / "t"), live.instant)
        assert refused.returncode == 1
        assert "is still running (heartbeat" in refused.stderr
        done = tidemark("rollback", str(tmp_path / "t"), dead.instant)
        assert done.returncode == 0, done.stderr
    finally:
        live.heartbeat.stop()


def test_rollback_judges_a_heartbeat_by_the_interval_it_is_given(tmp_path: Path) -> None:
    """The writer beats every 3 s (--conf, as the writer's): ``rollback`` judged it by the default
    of 60 s and refused a write that had been dead for 12 s, though ``timeline`` called it expired."""
    from tests.support.table_builder import TableBuilder, write_beat_at
    from tidemark.storage import LocalStorage
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table.write_client import begin_write

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a"], 1)
    fast = (
        "--conf",
        "hoodie.client.heartbeat.interval_in_ms=3000",
        "--conf",
        "hoodie.client.heartbeat.tolerable.misses=2",
    )
    dead = begin_write(builder.storage, "deltacommit", "upsert", ConcurrencyConfig(heartbeat_interval_ms=3000))
    dead.heartbeat.stop(delete=False)
    write_beat_at(builder.storage, dead.instant, int(time.time() * 1000) - 12_000)
    shown = tidemark("timeline", str(tmp_path / "t"), *fast)
    assert "(expired)" in shown.stdout
    done = tidemark("rollback", str(tmp_path / "t"), dead.instant, *fast)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"rolled back {dead.instant}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--conf", "hoodie.parquet.compression.codec=lzo"], "hoodie.parquet.compression.codec='lzo'"),
        (["--conf", "hoodie.parquet.block.size=0"], "hoodie.parquet.block.size"),
        (["--conf", "hoodie.index.type=GLOBAL_BLOOM"], "hoodie.index.type=GLOBAL_BLOOM"),
        (
            [
                "--conf",
                "hoodie.write.markers.type=TIMELINE_SERVER_BASED",
                "--conf",
                "tidemark.writer.coordinator.url=http://127.0.0.1:1",
                "--conf",
                "tidemark.writer.coordinator.token.file=/nonexistent/token",
            ],
            "tidemark.writer.coordinator.token.file=/nonexistent/token: cannot read the API token",
        ),
    ],
)
def test_a_bad_write_setting_is_refused_before_spark_starts(tmp_path: Path, argv: list[str], message: str) -> None:
    # told after a minute or two of Spark before; now before Spark (its banner never shows)
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "ts": 1}\n')
    done = tidemark(
        "write", str(tmp_path / "t"), "--input", str(source), "--record-key", "id", "--operation", "upsert", *argv
    )
    assert done.returncode == 1
    assert message in done.stderr
    assert "Spark" not in done.stderr
    assert not (tmp_path / "t").exists()


def test_a_coordinator_ca_file_without_a_certificate_is_refused_before_spark_starts(tmp_path: Path) -> None:
    # an empty CA file started Spark, then the write fell back to direct markers without naming
    # the file (a missing one was refused at once)
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "ts": 1}\n')
    token = tmp_path / "token"
    token.write_text("secret\n")
    for name, text in (("empty.pem", ""), ("blank.pem", " \n\n"), ("notes.pem", "not a certificate\n")):
        ca = tmp_path / name
        ca.write_text(text)
        done = tidemark(
            "write", str(tmp_path / "t"), "--input", str(source), "--record-key", "id", "--operation", "upsert",
            "--conf", "hoodie.write.markers.type=TIMELINE_SERVER_BASED",
            "--conf", "tidemark.writer.coordinator.url=https://127.0.0.1:1",
            "--conf", f"tidemark.writer.coordinator.token.file={token}",
            "--conf", f"tidemark.writer.coordinator.tls.ca.location={ca}",
        )  # fmt: skip
        assert done.returncode == 1, (name, done.stderr)
        assert done.stderr.strip().splitlines() == [
            f"tidemark: error: tidemark.writer.coordinator.tls.ca.location: file {ca} holds no PEM CA certificate "
            "OpenSSL can load: [X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found"
        ], name
        assert not (tmp_path / "t").exists()


def test_a_table_inside_another_table_is_refused_before_spark_starts(tmp_path: Path) -> None:
    # a write into a partition folder made a second table there, and Apache's readers of the
    # outer table no longer read that partition; into .hoodie, it wrote among the metadata
    from tidemark.storage import LocalStorage
    from tidemark.table.write_client import create_table

    outer = tmp_path / "outer"
    create_table(LocalStorage(outer), "t", ["id"], "ts", ["city"])
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "ts": 1, "city": "x"}\n')
    for inner, where in (("city=x", "partition city=x"), (".hoodie", "its .hoodie metadata folder")):
        done = tidemark(
            "write", str(outer / inner), "--input", str(source), "--record-key", "id", "--operation", "upsert"
        )
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"tidemark: error: {outer / inner} is inside the Hudi table at {outer} ({where}); write to {outer}"
        ]
        read = tidemark("table", "read", str(outer / inner))
        assert read.returncode == 1
        assert read.stderr.strip().endswith(f"; {outer / inner} is inside the Hudi table at {outer} ({where})")
    assert sorted(p.name for p in outer.iterdir()) == [".hoodie"]
    assert sorted(p.name for p in (outer / ".hoodie").iterdir()) == ["hoodie.properties"]


def test_a_table_path_that_is_a_file_is_refused_before_spark_starts(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "ts": 1}\n')
    for path in (source, source / "t"):
        done = tidemark("write", str(path), "--input", str(source), "--record-key", "id", "--operation", "upsert")
        assert done.returncode == 1
        assert f"cannot create a table there: {source} is a file" in done.stderr
        assert "Spark" not in done.stderr


def test_a_spark_setting_spark_refuses_is_named_as_given(tmp_path: Path) -> None:
    # a SQL setting is checked by Spark only when a query reads it: the error named the input
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "ts": 1}\n')
    conf = "spark.sql.shuffle.partitions=abc"
    done = tidemark(
        "write",
        str(tmp_path / "t"),
        "--input",
        str(source),
        "--record-key",
        "id",
        "--operation",
        "upsert",
        "--conf",
        conf,
    )
    assert done.returncode == 1
    assert "tidemark: error: a --conf spark.* setting is refused by Spark:" in done.stderr, done.stderr[-2000:]
    assert '"spark.sql.shuffle.partitions"' in done.stderr
    assert "--input" not in done.stderr
    assert not (tmp_path / "t").exists()


def test_timeline_show_and_compact_tell_a_pending_compactions_runner(tmp_path: Path) -> None:
    """A compaction whose runner was killed showed as a bare `compaction REQUESTED` (no heartbeat),
    `table show` as `[compaction X pending]`, and `compact` said it was left to another process
    without saying when it would be taken over: an operator could not tell a dead runner from a
    live one, nor when the next compact would finish it."""
    from tests.support.table_builder import TableBuilder, write_beat_at
    from tidemark.storage import LocalStorage
    from tidemark.table.compaction import schedule_compaction, start_compaction
    from tidemark.table.heartbeat import beat

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    table = str(tmp_path / "t")
    pending = schedule_compaction(t.storage)  # a plan no process runs (as Apache Hudi plans them)
    assert pending is not None
    ts = pending.timestamp
    waiting = "no heartbeat (no process runs it: the next tidemark compact takes it up)"
    assert tidemark("timeline", table).stdout.splitlines()[-1] == f"{ts}  compaction     REQUESTED  {waiting}"

    start_compaction(t.storage, pending)
    beat(t.storage, ts)  # the last beat of a runner killed just now
    (line,) = [x for x in tidemark("timeline", table).stdout.splitlines() if x.startswith(ts)]
    assert line.startswith(f"{ts}  compaction     INFLIGHT  heartbeat ")
    assert line.endswith(" s ago (live)")
    (record,) = [
        r for r in map(json.loads, tidemark("timeline", table, "--json").stdout.splitlines()) if r["instant"] == ts
    ]
    assert record["heartbeat"]["expired"] is False
    shown = tidemark("table", "show", table).stdout
    assert f"[compaction {ts} pending, heartbeat " in shown
    assert " s ago (live)]" in shown
    left = tidemark("compact", table, "--engine", "local")
    assert left.returncode == 0, left.stderr
    assert f"compaction {ts} on " in left.stderr
    assert "is being run by another process (heartbeat" in left.stderr
    assert "`tidemark compact` takes it over (or `tidemark rollback` takes it back) once no heartbeat" in left.stderr
    assert "has come for 120000 ms: in 1" in left.stderr  # about two minutes from now

    write_beat_at(t.storage, ts, 1000)  # its last beat, long ago
    (line,) = [x for x in tidemark("timeline", table).stdout.splitlines() if x.startswith(ts)]
    assert line.endswith(" s ago (expired)")
    (record,) = [
        r for r in map(json.loads, tidemark("timeline", table, "--json").stdout.splitlines()) if r["instant"] == ts
    ]
    assert record["heartbeat"] == {"last_beat_ms": 1000, "age_ms": record["heartbeat"]["age_ms"], "expired": True}
    assert " s ago (expired)]" in tidemark("table", "show", table).stdout
    taken = tidemark("compact", table, "--engine", "local")
    assert taken.returncode == 0, taken.stderr
    assert "being run by another process" not in taken.stderr
    (line,) = [x for x in tidemark("timeline", table).stdout.splitlines() if x.startswith(ts)]
    assert line == f"{ts}  compaction     COMPLETED"


_RUNNER = """
import sys, time
from tidemark.storage import LocalStorage
from tidemark.table.compaction import start_compaction
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.heartbeat import Heartbeat
from tidemark.timeline import COMPACTION, load_timeline

storage = LocalStorage(sys.argv[1])
(pending,) = load_timeline(storage).pending().of_actions(COMPACTION)
Heartbeat(storage, pending.timestamp, ConcurrencyConfig()).start()
start_compaction(storage, pending)
print("running", flush=True)
time.sleep(300)
"""


def test_compact_says_a_compaction_another_process_runs_is_left_to_it(tmp_path: Path) -> None:
    """`tidemark compact` said "nothing to compact" when it found a pending compaction that another
    process was running and left it to that process; now it says so, and exits 0."""
    from tests.support.table_builder import TableBuilder
    from tidemark.storage import LocalStorage
    from tidemark.table.compaction import schedule_compaction

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    pending = schedule_compaction(t.storage)
    assert pending is not None
    runner = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, str(tmp_path / "t")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert runner.stdout is not None
        assert runner.stdout.readline() == "running\n", runner.stderr.read() if runner.stderr else ""
        left = tidemark("compact", str(tmp_path / "t"), "--engine", "local")
    finally:
        runner.kill()
        runner.wait()
    assert left.returncode == 0, left.stderr
    assert left.stdout.splitlines() == [f"compaction {pending.timestamp} is being run by another process; left to it"]
    assert f"compaction {pending.timestamp} on " in left.stderr


def test_single_writer_compact_says_a_pending_write_holds_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """SINGLE_WRITER: `tidemark compact` planned over a pending write's slices, hiding what it
    committed. Now it plans nothing, exits 0 (an operator's compaction Job has not failed), and
    says which write it waits for; a warning says what to do."""
    from tests.support.table_builder import TableBuilder
    from tidemark.cli.main import main
    from tidemark.storage import LocalStorage

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    pending, _ = t.upsert_pending(["b"], 3)
    args = ["compact", str(tmp_path / "t"), "--engine", "local"]
    assert main([*args, "--conf", "hoodie.write.concurrency.mode=SINGLE_WRITER"]) == 0
    assert capsys.readouterr().out == (
        f"nothing compacted yet: the deltacommit {pending.timestamp} is pending; "
        "run tidemark compact again once it has ended\n"
    )
    assert f"no compaction planned on {t.storage.uri}: the deltacommit {pending.timestamp} is pending" in caplog.text


def test_show_counts_one_file_group_and_lists_no_blocks_of_a_slice_without_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed '1 file groups' and a 'log blocks of the latest slice:' heading over nothing."""
    from tests.support.table_builder import TableBuilder
    from tidemark.cli.main import main
    from tidemark.storage import LocalStorage

    TableBuilder(LocalStorage(tmp_path / "t")).insert(["a"], 1)
    assert main(["table", "show", str(tmp_path / "t"), "--log-blocks"]) == 0
    out = capsys.readouterr().out
    assert ": 1 file group\n" in out, out
    assert "log blocks of the latest slice" not in out, out
