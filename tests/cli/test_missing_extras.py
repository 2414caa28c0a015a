"""tidemark installed with some of its extras only (``pip install 'tidemark[spark]'``, say): what
needs no missing package works, and what does names the package and the extra to install.

Each command runs in a child process whose imports of the hidden packages fail as they do where
the package is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage
from tidemark.timeline import load_timeline

# the child's imports of these top-level packages fail, and Python's probes of them find nothing,
# as for a package not installed
_HIDE = """
import sys
for name in sys.argv.pop(1).split(","):
    sys.modules[name] = None
from tidemark.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _tidemark(hidden: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", _HIDE, hidden, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _table(tmp_path: Path) -> tuple[Path, list[str]]:
    table = tmp_path / "t"
    builder = TableBuilder(LocalStorage(table))
    builder.insert(["a", "b"], 1)
    builder.update(["a"], 2)
    return table, [i.file_name for i in load_timeline(LocalStorage(table)).instants]


def test_without_kafka_a_compaction_runs_and_one_asked_to_announce_says_what_to_install(tmp_path: Path) -> None:
    table, before = _table(tmp_path)
    asked = _tidemark("kafka", "compact", str(table), "--engine", "local", "--conf", "tidemark.events.bootstrap=b:9092")
    assert asked.returncode == 1
    assert asked.stderr.strip() == (
        "tidemark: error: announcing commits on Kafka (tidemark.events.bootstrap) needs the Python package "
        "kafka, which is not installed: pip install 'tidemark[services]'"
    )
    assert [i.file_name for i in load_timeline(LocalStorage(table)).instants] == before
    # the settings given are the ones named
    secured = _tidemark(
        "kafka", "compact", str(table), "--engine", "local", "--conf", "tidemark.kafka.security.protocol=SSL"
    )
    assert (
        "announcing commits on Kafka (tidemark.kafka.security.protocol) needs the Python package kafka"
        in secured.stderr
    )
    done = _tidemark("kafka", "compact", str(table), "--engine", "local")
    assert done.returncode == 0, done.stderr
    assert "compaction committed" in done.stdout


@pytest.mark.spark
def test_without_kafka_a_write_needs_none(tmp_path: Path) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "ts": 1}) + "\n" for i in range(3)))
    done = _tidemark(
        "kafka", "write", str(tmp_path / "t"), "--input", str(rows), "--operation", "upsert", "--record-key", "id"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = _tidemark("kafka", "table", "read", str(tmp_path / "t"), "--format", "jsonl")
    assert sorted(json.loads(line)["id"] for line in read.stdout.splitlines()) == [0, 1, 2]


def test_without_pyspark_write_and_a_spark_compaction_say_what_to_install(tmp_path: Path) -> None:
    table, before = _table(tmp_path)
    rows = tmp_path / "in.jsonl"
    rows.write_text(json.dumps({"id": "a", "ts": 3}) + "\n")
    write = _tidemark("pyspark", "write", str(table), "--input", str(rows), "--operation", "upsert")
    assert (write.returncode, write.stderr.strip()) == (
        1,
        "tidemark: error: tidemark write (a Spark job) needs the Python package pyspark, which is not installed: "
        "pip install 'tidemark[spark]'",
    )
    compact = _tidemark("pyspark", "compact", str(table))
    assert compact.returncode == 1
    assert "tidemark compact --engine spark (the default) needs the Python package pyspark" in compact.stderr
    assert [i.file_name for i in load_timeline(LocalStorage(table)).instants] == before
    assert _tidemark("pyspark", "compact", str(table), "--engine", "local").returncode == 0


def test_without_boto3_an_s3_location_says_what_to_install() -> None:
    done = _tidemark("boto3,botocore", "table", "read", "s3://bucket/lake/t")
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "tidemark: error: an s3:// location (s3://bucket/lake/t) needs the Python package boto3, which is not "
        "installed: pip install 'tidemark[s3]'",
    )


def _command(hidden: str, entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    """An installed command (pyproject's scripts) whose imports of ``hidden`` fail."""
    code = f"import sys\nfor n in {hidden.split(',')!r}: sys.modules[n] = None\n{entry}"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("prog", "entry", "hidden", "extra"),
    [
        ("tidemark-cleaner", "import tidemark_services; tidemark_services.run_cleaner()", "kafka", "services"),
        ("tidemark-archiver", "import tidemark_services; tidemark_services.run_archiver()", "kafka", "services"),
        (
            "tidemark-writer-coordinator",
            "import tidemark_services; tidemark_services.run_writer_coordinator()",
            "prometheus_client",
            "services",
        ),
        ("tidemark-operator", "import tidemark_operator; tidemark_operator.run()", "kopf", "operator"),
    ],
)
def test_a_service_without_its_extra_says_which_to_install(prog: str, entry: str, hidden: str, extra: str) -> None:
    done = _command(hidden, entry, "--help")
    assert (done.returncode, done.stderr.strip()) == (
        1,
        f"{prog}: error: {prog} needs the Python package {hidden}, which is not installed: "
        f"pip install 'tidemark[{extra}]'",
    )


@pytest.mark.parametrize(
    ("prog", "entry"),
    [
        ("tidemark-cleaner", "import tidemark_services; tidemark_services.run_cleaner()"),
        ("tidemark-writer-coordinator", "import tidemark_services; tidemark_services.run_writer_coordinator()"),
        ("tidemark-operator", "import tidemark_operator; tidemark_operator.run()"),
    ],
)
def test_a_service_given_an_s3_endpoint_without_boto3_stops_at_start(prog: str, entry: str) -> None:
    # else every event for an s3:// table would fail alike, later, one by one
    args = ["--bootstrap", "127.0.0.1:9", "--s3-endpoint", "http://127.0.0.1:9", "--metrics-port", "0"]
    if prog == "tidemark-writer-coordinator":
        args += ["--conf", "tidemark.writer.coordinator.auth=none"]
    if prog == "tidemark-operator":
        args = ["--bootstrap", "127.0.0.1:9", "--s3-endpoint", "http://127.0.0.1:9", "--all-namespaces"]
    done = _command("boto3,botocore", entry, *args)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().endswith(
        f"{prog}: error: --s3-endpoint needs the Python package boto3, which is not installed: "
        "pip install 'tidemark[s3]'"
    )
