"""A service given bad settings, a bad environment or a taken port ends with one line naming what
was wrong (no traceback); a ``--conf`` key nothing reads is warned about, as by the CLI; what a
service just started exposes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import free_port
from tests.support.services import ServiceProcess, metric_value, unique_topics
from tidemark_services.runtime import RUN_OUTCOMES


def _service(name: str) -> str:
    return str(Path(sys.executable).with_name(f"tidemark-{name}"))


def _fails(name: str, *argv: str, env: dict[str, str] | None = None, bootstrap: str | None = "127.0.0.1:1") -> str:
    done = subprocess.run(
        [_service(name), *(["--bootstrap", bootstrap] if bootstrap else []), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("name", "conf", "message"),
    [
        ("cleaner", "hoodie.cleaner.commits.retained=abc", "hoodie.cleaner.commits.retained"),
        ("cleaner", "hoodie.cleaner.policy=KEEP_ALL", "KEEP_ALL"),
        ("archiver", "hoodie.keep.min.commits=40", "hoodie.keep.min.commits"),
        # a switch none of them reads is refused too, and the coordinator's own was a traceback
        ("cleaner", "hoodie.parquet.dictionary.enabled=1", "hoodie.parquet.dictionary.enabled='1': expected true"),
        ("archiver", "hoodie.cleaner.incremental.mode=yes", "hoodie.cleaner.incremental.mode='yes': expected true"),
        (
            "writer-coordinator",
            "hoodie.write.concurrency.early.conflict.detection.enable=yes",
            "early.conflict.detection.enable='yes': expected true or false",
        ),
    ],
)
def test_a_bad_hudi_setting_ends_the_service_with_one_line(name: str, conf: str, message: str) -> None:
    last = _fails(name, "--metrics-port", "0", "--conf", conf)
    assert last.startswith(f"tidemark-{name}: error: "), last
    assert message in last


def test_a_bad_port_variable_or_a_taken_port_is_one_line() -> None:
    last = _fails("cleaner", env={"TIDEMARK_METRICS_PORT": "abc"})
    assert "--metrics-port" in last
    assert "'abc' is not a port number" in last
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        last = _fails("cleaner", "--metrics-port", str(port))
        assert last.startswith(f"tidemark-cleaner: error: --metrics-port {port} on 127.0.0.1: cannot listen there"), (
            last
        )
        last = _fails(
            "writer-coordinator", "--metrics-port", "0", "--http-port", str(port), "--conf",
            "tidemark.writer.coordinator.auth=none",
        )  # fmt: skip
        assert f"--http-port {port} on 127.0.0.1: cannot listen there" in last


@pytest.mark.parametrize(
    ("name", "bootstrap", "message"),
    [
        # kafka-python ended the first in a ValueError traceback and took 99999 as port 34463
        ("cleaner", "nohost:xx", "'nohost:xx': 'xx' is not a port number"),
        ("archiver", "127.0.0.1:99999", "'127.0.0.1:99999': '99999' is not a port number"),
        ("writer-coordinator", "a:9092,b", "'b' in 'a:9092,b' is not HOST:PORT"),
        ("operator", "::1:9092", "'::1:9092' is not HOST:PORT (an IPv6 address in brackets: [::1]:9092)"),
    ],
)
def test_a_bad_bootstrap_ends_the_service_with_one_line(name: str, bootstrap: str, message: str) -> None:
    last = _fails(name, "--metrics-port", "0", bootstrap=bootstrap)
    assert last.startswith(f"tidemark-{name}: error: argument --bootstrap: "), last
    assert message in last
    last = _fails(name, "--metrics-port", "0", env={"TIDEMARK_KAFKA_BOOTSTRAP": bootstrap}, bootstrap=None)
    assert message in last


def test_a_conf_key_nothing_reads_is_warned_about() -> None:
    proc = subprocess.Popen(
        [
            _service("cleaner"),
            "--bootstrap",
            "127.0.0.1:1",
            "--metrics-port",
            "0",
            "--conf",
            "hoodie.clena.max.commits=3",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        seen = []
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            if "hoodie.clena.max.commits" in line and "WARNING" in line:
                assert "tidemark reads no such key; ignored" in line
                break
        else:
            pytest.fail("no warning:\n" + "".join(seen))
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("name", ["cleaner", "archiver"])
def test_a_started_service_counts_its_runs_from_0_and_has_no_last_success(name: str) -> None:
    """What Prometheus scrapes from a process before its first run (a pod its liveness probe
    restarted): every outcome at 0, so that increase() counts its first failure, and no time of a
    last success it has not had."""
    topic, dead = unique_topics("startup")
    with ServiceProcess(name, f"127.0.0.1:{free_port()}", topic, dead) as proc:  # nobody listens there
        proc.start()
        proc.wait_ready()
        exposition = proc.metrics()
    for outcome in RUN_OUTCOMES:
        assert metric_value(exposition, "tidemark_service_runs_total", service=name, outcome=outcome) == 0, outcome
    assert metric_value(exposition, "tidemark_last_success_timestamp_seconds", service=name) is None
    since = metric_value(exposition, "tidemark_seconds_since_last_success", service=name)
    assert since is not None
    assert since < 60  # since the process started
