"""Secrets never leak. The CLI, the cleaner, the archiver, the writer-coordinator, the operator and
a Spark write run as real processes with known secret values: the S3 keys in their environment, a
Kafka SASL password in a mounted file, the coordinator's API token. None of those values may appear
in what a user, a log collector, a Prometheus server or another team's consumer gets to see: the
processes' output, ``/metrics`` and ``/healthz``, the events published, the table's files (commit
metadata, ``hoodie.properties``), ``tidemark table show``, the ``HudiTable``'s status and Kubernetes
Events (the operator runs against kmock's API emulator, tests/support/kube.py), and the errors of
runs that failed.

tansu cannot check SASL credentials (see DESIGN.md), so the Kafka password travels in runs that
fail to log in: a service and an operator that stay up unhealthy, a write whose event is refused.
Kafka itself goes through TLS (a proxy in front of tansu) in the runs that work.

The scan can fail: :func:`test_a_secret_planted_in_a_log_line_is_found` makes a service log one."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import TansuBroker, broker_lifetime
from tests.support.kube import TABLES, KubeApi, Operator, kube, resource
from tests.support.s3 import create_bucket, s3_child_env, s3_options
from tests.support.services import (
    SERVICE_CONF,
    CoordinatorProcess,
    ServiceProcess,
    events_of,
    http_get,
    metric_value,
    of_type,
    read_topics,
    service_processes,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import TableBuilder
from tests.support.tls_proxy import TlsBroker, tls_broker_lifetime
from tidemark.events import EventType
from tidemark.kafka_adapter import RawMessage, ensure_topics
from tidemark.storage import open_storage

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.spark]

__all__ = ["kube"]  # the API emulator fixture, for the operator

#: the namespace of the operator's HudiTable (as in tests/operator)
NS = "lake"


@dataclass(frozen=True)
class Secrets:
    """Known secret values, unlike anything a process would print by chance."""

    s3_secret_key: str
    s3_session_token: str
    kafka_password: str

    @classmethod
    def make(cls) -> Secrets:
        return cls(*(f"{name}-{secrets.token_hex(12)}" for name in ("s3secret", "s3session", "kafkapass")))

    def env(self) -> dict[str, str]:
        """A process's S3 credentials (moto accepts any)."""
        return {"AWS_SECRET_ACCESS_KEY": self.s3_secret_key, "AWS_SESSION_TOKEN": self.s3_session_token}

    def named(self, token: str | None) -> dict[str, str]:
        named = {
            "S3 secret key": self.s3_secret_key,
            "S3 session token": self.s3_session_token,
            "Kafka password": self.kafka_password,
        }
        if token:
            named["coordinator token"] = token
        return named


def leaks(named_secrets: Mapping[str, str], seen: Mapping[str, str | bytes]) -> list[str]:
    """``"<secret> in <where>"`` for every secret found in anything seen."""
    found = []
    for where, text in seen.items():
        data = text.encode(errors="replace") if isinstance(text, str) else text
        found += [f"{name} in {where}" for name, value in named_secrets.items() if value.encode() in data]
    return found


def _message_bytes(messages: list[RawMessage]) -> bytes:
    return b"\n".join(
        b"".join([m.key or b"", m.value or b"", *(name.encode() + value for name, value in m.headers)])
        for m in messages
    )


def _tidemark(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "TIDEMARK_SPARK_MASTER": "local[2]"},
    )


def _output(run: subprocess.CompletedProcess[str]) -> str:
    return f"exit {run.returncode}\n--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    yield from tls_broker_lifetime(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[TansuBroker]:
    yield from broker_lifetime(authentication=True)


def _scram_conf(broker: TansuBroker, password_file: Path) -> dict[str, str]:
    return {
        "tidemark.kafka.security.protocol": "SASL_PLAINTEXT",
        "tidemark.kafka.sasl.mechanism": "SCRAM-SHA-256",
        "tidemark.kafka.sasl.username": "tidemark",
        "tidemark.kafka.sasl.password.file": str(password_file),
    }


def _operator(
    kube: KubeApi, bootstrap: str, topic: str, conf: Mapping[str, str], env: Mapping[str, str], *extra: str
) -> Operator:
    """``tidemark-operator`` started with ``env`` (the S3 secrets) and ``conf`` (Kafka's settings)."""
    conf_args = (a for k, v in conf.items() for a in ("--conf", f"{k}={v}"))
    # a slower pace than tests/operator's (the last --tick and --refresh given count): each look
    # at the table is S3 requests to the moto server in this process, beside a Spark write
    op = Operator(kube, bootstrap, topic, "--tick", "1", "--refresh", "30", *extra, *conf_args)
    op.launch(op.command, {**env, "PYTHONPATH": os.pathsep.join(sys.path)})
    return op


def test_no_secret_reaches_outputs_metrics_events_or_the_table(
    tls: TlsBroker, sasl_broker: TansuBroker, moto_server: str, kube: KubeApi, tmp_path: Path
) -> None:
    known = Secrets.make()
    password_file = tmp_path / "kafka-password"
    password_file.write_text(known.kafka_password + "\n")
    env = {**s3_child_env(), **known.env()}
    topic, dlq = unique_topics("secrets")
    ensure_topics(tls.bootstrap, [topic, dlq], security=tls.security())
    location = f"s3://{create_bucket(moto_server)}/t"

    # a history with a replaced file group, so the clean after the next write deletes files
    builder = TableBuilder(open_storage(location, s3_options(moto_server)))
    builder.insert(["a", "b"], 1)
    builder.update(["a"], 2)
    builder.insert_overwrite(["a", "b"], 3)
    builder.insert(["c"], 4)
    builder.update(["a", "c"], 5)

    seen: dict[str, str | bytes] = {}
    tls_conf = tls.conf()
    # a HudiTable whose clean the operator schedules: the S3 keys from its environment, the
    # endpoint from the spec; a second operator's Kafka login is refused (its password in a file)
    table_spec = {
        "location": location,
        "storage": {"endpoint": moto_server, "region": "us-east-1"},
        "clean": {"interval": "3s", "commitsRetained": 2},
        "requestTimeoutSeconds": 3,
    }
    with (
        contextlib.ExitStack() as operators,
        CoordinatorProcess(tls.bootstrap, topic, dlq, s3_endpoint=moto_server, conf=tls_conf, env=known.env()) as coord,
        service_processes(
            ["cleaner", "archiver"],
            tls.bootstrap,
            topic,
            dlq,
            s3_endpoint=moto_server,
            conf={**SERVICE_CONF, **tls_conf},
            env=known.env(),
        ) as (cleaner, archiver),
        ServiceProcess(
            "cleaner",
            sasl_broker.bootstrap,
            topic,
            dlq,
            s3_endpoint=moto_server,
            conf={**SERVICE_CONF, **_scram_conf(sasl_broker, password_file)},
            env=known.env(),
        ) as refused,
    ):
        kube.create(TABLES, resource("orders", table_spec))
        coord.start()
        refused.start()
        coord.wait_ready()
        refused.wait_ready()
        token = coord.token
        assert token, "the coordinator runs with an API token"

        # a Spark write through the coordinator (token) announcing its commit over TLS
        rows = tmp_path / "rows.jsonl"
        rows.write_text('{"id": "a", "ts": 6, "v": 6, "p": "1"}\n{"id": "d", "ts": 6, "v": 6, "p": "1"}\n')
        write_args = ["write", location, "--input", str(rows), "--operation", "upsert", "--s3-endpoint", moto_server]
        write_args += ["--record-key", "id", "--precombine", "ts", "--partition-field", "p", "--hive-style"]
        through = {**coord.writer_conf, **tls_conf, "tidemark.events.bootstrap": tls.bootstrap}
        through["tidemark.events.topic"] = topic
        write = _tidemark(*write_args, *(f"--conf={k}={v}" for k, v in through.items()), env=env)
        assert write.returncode == 0, _output(write)
        seen["tidemark write (through the coordinator, events over TLS)"] = _output(write)

        # the operators start once the write is done (they share this machine's CPU with Spark);
        # the refused one is standalone: no peering with the first, so it schedules too
        scram = _scram_conf(sasl_broker, password_file)
        operator = operators.enter_context(contextlib.closing(_operator(kube, tls.bootstrap, topic, tls_conf, env)))
        refused_operator = operators.enter_context(
            contextlib.closing(_operator(kube, sasl_broker.bootstrap, topic, scram, env, "--standalone"))
        )

        def cleaned_and_archived() -> bool:
            return (
                cleaner.metric("tidemark_clean_files_deleted_total") > 0
                and archiver.metric("tidemark_archive_instants_total") > 0
            )

        wait_until(
            cleaned_and_archived, 90, "the services cleaned and archived after the write", detail=cleaner.log_tail
        )
        assert coord.metric("tidemark_coordinator_markers_created_total") > 0, coord.log_tail()

        # a write that cannot announce: its Kafka login is refused (the password is in a file)
        again = tmp_path / "again.jsonl"
        again.write_text('{"id": "b", "ts": 7, "v": 7, "p": "1"}\n')
        refused_conf = {**coord.writer_conf, **_scram_conf(sasl_broker, password_file)}
        refused_conf["tidemark.events.bootstrap"] = sasl_broker.bootstrap
        write_args[write_args.index(str(rows))] = str(again)
        refused_write = _tidemark(*write_args, *(f"--conf={k}={v}" for k, v in refused_conf.items()), env=env)
        assert refused_write.returncode == 0, _output(refused_write)
        assert "its event was not published" in refused_write.stderr, _output(refused_write)
        seen["tidemark write (event refused by the broker)"] = _output(refused_write)

        # the service whose login is refused stays up, unready, and says why
        wait_until(lambda: refused.readiness()[0] == 503, 30, "the refused service reports unready")
        assert "SASL authentication" in refused.readiness()[1]

        # the operator requested cleans (over TLS) and shows the table's last clean; the one whose
        # login is refused stays up, unready, and says why
        def operator_done() -> bool:
            published = metric_value(operator.metrics(), "tidemark_operator_requests_published_total", service="clean")
            shown = (kube.get(f"{TABLES}/orders") or {}).get("status") or {}
            return (
                bool(published)
                and "lastClean" in shown
                and http_get(refused_operator.metrics_port, "/readyz")[0] == 503
            )

        wait_until(operator_done, 60, "the operators requested cleans / went unready", detail=refused_operator.log_tail)
        assert "SASL authentication" in http_get(refused_operator.metrics_port, "/readyz")[1]
        for label, op in {"operator": operator, "refused operator": refused_operator}.items():
            for path in ("/metrics", "/healthz", "/readyz"):
                seen[f"{label} {path}"] = http_get(op.metrics_port, path)[1]
        seen["HudiTable (as JSON)"] = json.dumps(kube.get(f"{TABLES}/orders"))
        seen["Kubernetes Events (as JSON)"] = json.dumps(kube.items(f"/api/v1/namespaces/{NS}/events"))
        for label, op in {"operator": operator, "refused operator": refused_operator}.items():
            op.stop()
            seen[f"{label} log"] = op.log_path.read_bytes()
        assert b"SASL authentication" in seen["refused operator log"]

        procs = {"coordinator": coord, "cleaner": cleaner, "archiver": archiver, "refused cleaner": refused}
        for label, proc in procs.items():
            for path in ("/metrics", "/healthz", "/readyz"):
                seen[f"{label} {path}"] = http_get(proc.port, path)[1]
        for label, proc in procs.items():
            proc.stop()
            seen[f"{label} log"] = proc.log_path.read_bytes()

    # the events on the topic, as another team's consumer gets them
    messages = read_topics(
        tls.bootstrap,
        [topic, dlq],
        lambda got: bool(of_type(events_of(got, topic), EventType.ARCHIVE_COMPLETED)),
        security=tls.security(),
    )
    kinds = {e.type for e in events_of(messages, topic)}
    assert {EventType.INSTANT_COMPLETED, EventType.CLEAN_COMPLETED, EventType.WRITE_STARTED} <= kinds
    assert EventType.CLEAN_REQUESTED in kinds  # the operator's, over TLS
    seen["events on the topic"] = _message_bytes(messages)

    # the table's own files: commit metadata, hoodie.properties, heartbeats, markers, archive
    storage = open_storage(location, s3_options(moto_server))
    for info in storage.list(".hoodie/"):
        seen[f"table file {info.path}"] = storage.read(info.path)

    # what a user runs next, and runs that fail
    show = _tidemark("table", "show", location, "--s3-endpoint", moto_server, env=env)
    assert show.returncode == 0, _output(show)
    seen["tidemark table show"] = _output(show)
    missing = _tidemark("table", "show", "s3://no-such-bucket-tidemark/t", "--s3-endpoint", moto_server, env=env)
    assert missing.returncode != 0
    seen["tidemark table show of a missing bucket"] = _output(missing)
    on_command_line = subprocess.run(
        [
            str(Path(sys.executable).with_name("tidemark-cleaner")),
            "--conf",
            f"tidemark.kafka.sasl.password={known.kafka_password}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert on_command_line.returncode != 0
    assert "tidemark.kafka.sasl.password" in on_command_line.stderr
    seen["a service given the password on its command line"] = _output(on_command_line)

    assert len(seen) > 20
    assert not leaks(known.named(token), seen)


def test_a_secret_planted_in_a_log_line_is_found(kafka_broker: Any, tmp_path: Path) -> None:
    """The scan above would catch a leak: a service run with a secret under a name that does not
    look secret logs it at start (printed settings are redacted by key name only)."""
    known = Secrets.make()
    topic, dlq = unique_topics("planted")
    with ServiceProcess(
        "cleaner", kafka_broker.bootstrap, topic, dlq, conf={"hoodie.cleaner.note": known.kafka_password}
    ) as proc:
        proc.start()
        proc.wait_ready()
        proc.stop()
        log = proc.log_path.read_bytes()
    assert leaks(known.named(None), {"cleaner log": log}) == ["Kafka password in cleaner log"]


def test_printed_settings_redact_secret_looking_keys(kafka_broker: Any) -> None:
    """A secret given under a secret-looking key (Hadoop's S3A key, say) is logged as ``***``."""
    secret = f"s3a-{secrets.token_hex(8)}"
    topic, dlq = unique_topics("redacted")
    with ServiceProcess(
        "archiver",
        kafka_broker.bootstrap,
        topic,
        dlq,
        conf={"fs.s3a.secret.key": secret, "hoodie.keep.min.commits": "2"},
    ) as proc:
        proc.start()
        proc.wait_ready()
        proc.stop()
        log = proc.log_path.read_text()
    assert "fs.s3a.secret.key=***" in log
    assert "hoodie.keep.min.commits=2" in log
    assert secret not in log
