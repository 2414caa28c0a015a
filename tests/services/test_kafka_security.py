"""Kafka security against a real broker: TLS through a TLS-terminating proxy in front of tansu
(tansu speaks plain TCP only, see DESIGN.md) with real certificates, and SASL against tansu run
with ``--authentication``.

What a user checks: the services as real processes work through TLS with CA verification on; a
wrong CA is reported within seconds, naming the broker and what failed, on ``/readyz`` (503), in
the log and in a metric, without failing ``/healthz`` (the chart's liveness probe: a restart fixes no
CA), and the service recovers once the CA is fixed; SCRAM and MSK IAM
handshakes run and their refusal is reported just as fast; bad settings end the CLI with one line.

tansu cannot store SCRAM users (every SCRAM exchange ends in ``e=unknown-user``) nor check an IAM
token, so a successful SASL login cannot be shown here: that is for a real cluster to confirm."""

from __future__ import annotations

import functools
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import TansuBroker, broker_lifetime
from tests.support.services import (
    SERVICE_CONF,
    CoordinatorProcess,
    ServiceProcess,
    events_of,
    logs,
    metric_value,
    of_type,
    publish_completed,
    read_topics,
    service_processes,
    unique_topics,
    wait_until,
)
from tests.support.table_builder import TableBuilder
from tests.support.tls_proxy import TlsBroker, TlsProxy, tls_broker_lifetime
from tidemark.errors import KafkaSecurityError
from tidemark.events import EventType
from tidemark.kafka_adapter import EventConsumer, EventProducer, RawMessage, ensure_topics
from tidemark.kafka_security import PASSWORD_ENV, KafkaSecurity, probe
from tidemark.storage import LocalStorage, S3Options
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.markers import IOType, Marker, list_markers
from tidemark.table.write_client import begin_write
from tidemark_services import cleaner
from tidemark_services.runtime import EventService, ServiceMetrics

pytestmark = pytest.mark.kafka

#: "within seconds": kafka-python alone would wait for the whole publish or poll timeout (60 s here)
FAST_S = 10.0
SLOW_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    yield from tls_broker_lifetime(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[TansuBroker]:
    yield from broker_lifetime(authentication=True)


def _read(bootstrap: str, security: KafkaSecurity, topic: str, until: Callable[[list[RawMessage]], bool]) -> list[Any]:
    """The events of ``topic`` from the start, read until ``until`` holds or 40 s pass."""
    return events_of(read_topics(bootstrap, [topic], until, 40, security=security), topic)


def _fails_fast(action: Callable[[], object]) -> KafkaSecurityError:
    start = time.monotonic()
    with pytest.raises(KafkaSecurityError) as caught:
        action()
    elapsed = time.monotonic() - start
    assert elapsed < FAST_S, f"reported after {elapsed:.1f}s: {caught.value}"
    return caught.value


# --- TLS ------------------------------------------------------------------------------------------


def test_events_flow_through_tls_with_the_ca_verified(tls: TlsBroker, tmp_path: Path) -> None:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    security = tls.security()
    before = tls.proxy.connections
    ensure_topics(tls.bootstrap, [topic], security=security)
    t = TableBuilder(LocalStorage(tmp_path / "t"))
    instants = [t.insert(["a"], 1), t.update(["a"], 2)]
    with EventProducer(tls.bootstrap, security=security) as producer:
        publish_completed(producer, topic, str(tmp_path / "t"), instants)
    events = _read(tls.bootstrap, security, topic, lambda ms: len(ms) >= 2)
    assert [e.instant for e in events] == instants
    assert tls.proxy.connections > before, "the clients went through the TLS proxy"


def test_a_wrong_ca_fails_within_seconds_naming_broker_and_cause(tls: TlsBroker) -> None:
    wrong = tls.security(tls.certs.other_ca.cert)
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    failures = [
        _fails_fast(lambda: ensure_topics(tls.bootstrap, [topic], timeout_s=SLOW_TIMEOUT_S, security=wrong)),
        _fails_fast(
            lambda: EventProducer(tls.bootstrap, publish_timeout_s=SLOW_TIMEOUT_S, security=wrong).publish_raw(
                topic, None, b"x", []
            )
        ),
        _fails_fast(lambda: EventConsumer(tls.bootstrap, [topic], "g", security=wrong).poll(SLOW_TIMEOUT_S)),
    ]
    for e in failures:
        assert e.stage == "tls"
        assert e.broker == tls.bootstrap
        text = str(e)
        assert f"TLS handshake with Kafka broker {tls.bootstrap} failed" in text
        assert "security.protocol=SSL" in text
        assert "certificate verify failed: unable to get local issuer certificate" in text
        assert f"tidemark.kafka.ssl.ca.location={tls.certs.other_ca.cert}" in text


def test_tls_towards_a_plaintext_listener_is_reported(tls: TlsBroker) -> None:
    e = _fails_fast(
        lambda: ensure_topics(tls.broker.bootstrap, ["x"], timeout_s=SLOW_TIMEOUT_S, security=tls.security())
    )
    assert e.stage == "tls"
    assert "does not speak TLS" in str(e)


def test_a_client_without_the_listeners_tls_or_sasl_is_told_what_it_may_lack(
    tls: TlsBroker, sasl_broker: TansuBroker
) -> None:
    """A PLAINTEXT client on a TLS or SASL listener, or one with no certificate on a mutual-TLS
    listener: the broker just drops the connection, which was taken for "no broker in reach" (after
    30 s, with kafka-python logging 20 lines a second)."""
    plaintext = KafkaSecurity()
    for bootstrap in (tls.bootstrap, sasl_broker.bootstrap):
        e = _fails_fast(
            functools.partial(ensure_topics, bootstrap, ["x"], timeout_s=SLOW_TIMEOUT_S, security=plaintext)
        )
        assert (e.stage, e.broker) == ("tls", bootstrap)
        assert str(e).startswith(
            f"Kafka broker {bootstrap} closed the connection during the first requests (security.protocol=PLAINTEXT)"
        )
        assert str(e).endswith("; does its listener expect TLS or SASL?")
    with TlsProxy(tls.broker.port, tls.certs.server, client_ca=tls.certs.ca.cert) as mutual:
        e = _fails_fast(
            lambda: EventConsumer(mutual.bootstrap, ["x"], "g", security=tls.security()).poll(SLOW_TIMEOUT_S)
        )
        assert e.stage == "tls"
        assert "does its listener expect a client certificate (mutual TLS; none is set in " in str(e)
        assert "tidemark.kafka.ssl.certificate.location)" in str(e)


def test_a_broker_that_does_not_answer_in_time_is_no_security_failure() -> None:
    """A listener that accepts the connection and answers nothing (a broker hung or overloaded)
    was reported as one that closed the connection, asking whether it wants TLS or SASL: the
    probe's time ran out, nothing was refused."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        bootstrap = f"127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        probe(bootstrap, KafkaSecurity(), timeout_s=1.0)  # returns: the clients wait for the broker as for one down
        assert time.monotonic() - started < 5


def _table_history(path: Path) -> list[str]:
    """Commits after which the cleaner cleans and the archiver archives (with SERVICE_CONF)."""
    t = TableBuilder(LocalStorage(path))
    return [t.insert(["a", "b"], 1)] + [t.update(["a"], v) for v in range(2, 9)]


def test_service_processes_work_through_tls(tls: TlsBroker, tmp_path: Path) -> None:
    topic, dlq = unique_topics("tls")
    security = tls.security()
    ensure_topics(tls.bootstrap, [topic, dlq], security=security)
    table = str(tmp_path / "t")
    instants = _table_history(tmp_path / "t")
    conf = {**SERVICE_CONF, **tls.conf()}
    with service_processes(["cleaner", "archiver"], tls.bootstrap, topic, dlq, conf=conf) as procs:
        with EventProducer(tls.bootstrap, security=security) as producer:
            publish_completed(producer, topic, table, instants)

        def announced(messages: list[RawMessage]) -> bool:
            events = events_of(messages, topic)
            return bool(of_type(events, EventType.CLEAN_COMPLETED) and of_type(events, EventType.ARCHIVE_COMPLETED))

        events = _read(tls.bootstrap, security, topic, announced)
        assert of_type(events, EventType.CLEAN_COMPLETED), logs(*procs)
        assert of_type(events, EventType.ARCHIVE_COMPLETED), logs(*procs)
        for proc in procs:
            assert proc.health() == (200, f"{proc.name}: ok\n")
            assert proc.metric("tidemark_kafka_security_failures_total") == 0
            assert "security.protocol=SSL" in proc.log_path.read_text()  # said at start


def test_service_process_with_a_wrong_ca_is_unready_not_unhealthy_then_recovers(tls: TlsBroker, tmp_path: Path) -> None:
    topic, dlq = unique_topics("tls")
    ensure_topics(tls.bootstrap, [topic, dlq], security=tls.security())
    ca_file = tmp_path / "ca.crt"  # as a mounted Secret: fixed in place later
    shutil.copy(tls.certs.other_ca.cert, ca_file)
    conf = {**SERVICE_CONF, **tls.conf(ca_file)}
    with ServiceProcess("cleaner", tls.bootstrap, topic, dlq, conf=conf) as proc:
        started = time.monotonic()
        proc.start()
        proc.wait_ready()
        wait_until(lambda: proc.readiness()[0] == 503, FAST_S, "/readyz answers 503", detail=proc.log_tail)
        assert time.monotonic() - started < 2 * FAST_S  # process start and imports included
        _, body = proc.readiness()
        assert f"TLS handshake with Kafka broker {tls.bootstrap} failed" in body
        assert "certificate verify failed" in body
        # alive for the liveness probe (a restart would not fix the CA), saying why after ok
        status, body = proc.health()
        assert status == 200
        assert body.startswith("cleaner: ok (TLS handshake with Kafka broker")
        assert proc.metric("tidemark_kafka_security_failures_total", service="cleaner", stage="tls") >= 1
        assert f"TLS handshake with Kafka broker {tls.bootstrap} failed" in proc.log_tail()
        assert "Traceback" not in proc.log_tail()
        assert proc.alive, "it retries rather than exiting (no crash loop)"

        shutil.copy(tls.certs.ca.cert, ca_file)  # the Secret is fixed
        wait_until(lambda: proc.readiness() == (200, "cleaner: ok\n"), 45, "/readyz back to 200", detail=proc.log_tail)
        assert proc.health() == (200, "cleaner: ok\n")
        assert proc.stop() == 0


def test_the_writer_coordinator_stays_ready_for_markers_while_kafka_refuses_its_ca(
    tls: TlsBroker, tmp_path: Path, table: LocalStorage
) -> None:
    # neither unhealthy (the chart's liveness probe would restart it, cutting off the marker API,
    # and a restart fixes no CA) nor unready: its marker API needs no broker, and an unready
    # coordinator would leave every writer without one
    topic, dlq = unique_topics("tls")
    ensure_topics(tls.bootstrap, [topic, dlq], security=tls.security())
    conf = tls.conf(tls.certs.other_ca.cert)
    with CoordinatorProcess(tls.bootstrap, topic, dlq, conf=conf) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        wait_until(
            lambda: "certificate verify failed" in coordinator.health()[1],
            FAST_S,
            "/healthz says the CA is refused",
            detail=coordinator.log_tail,
        )
        status, body = coordinator.health()
        assert status == 200
        assert body.startswith("writer-coordinator: ok (TLS handshake with Kafka broker")
        assert coordinator.readiness() == (200, "writer-coordinator: marker API serving\n")
        write = begin_write(table, "deltacommit", "upsert", ConcurrencyConfig(early_detection=True))
        client = coordinator.client(str(table.root))
        client.register(write.start, ConcurrencyConfig(early_detection=True))
        base = f"p=1/fg-1_0-1-0_{write.instant}.parquet"
        assert client.create_marker(Marker(write.instant, base, IOType.CREATE)) is True
        wait_until(lambda: len(list_markers(table, write.instant)) == 1, 20, "the marker written to the table")


# --- SASL -----------------------------------------------------------------------------------------


def _scram(broker: TansuBroker, mechanism: str) -> KafkaSecurity:
    conf = {
        "tidemark.kafka.security.protocol": "SASL_PLAINTEXT",
        "tidemark.kafka.sasl.mechanism": mechanism,
        "tidemark.kafka.sasl.username": "alice",
    }
    return KafkaSecurity.from_conf(conf, {PASSWORD_ENV: "alice-secret"})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_scram_handshake_runs_and_its_refusal_is_reported_within_seconds(
    sasl_broker: TansuBroker, mechanism: str
) -> None:
    security = _scram(sasl_broker, mechanism)
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    failures = [
        _fails_fast(lambda: ensure_topics(sasl_broker.bootstrap, [topic], timeout_s=SLOW_TIMEOUT_S, security=security)),
        _fails_fast(
            lambda: EventProducer(
                sasl_broker.bootstrap, publish_timeout_s=SLOW_TIMEOUT_S, security=security
            ).publish_raw(topic, None, b"x", [])
        ),
        _fails_fast(lambda: EventConsumer(sasl_broker.bootstrap, [topic], "g", security=security).poll(SLOW_TIMEOUT_S)),
    ]
    for e in failures:
        assert (e.stage, e.broker, e.protocol, e.mechanism) == (
            "sasl",
            sasl_broker.bootstrap,
            "SASL_PLAINTEXT",
            mechanism,
        )
        # the broker's server-final SCRAM message: the exchange ran to its last step
        assert str(e) == (
            f"SASL authentication with Kafka broker {sasl_broker.bootstrap} failed (security.protocol=SASL_PLAINTEXT, "
            f"sasl.mechanism={mechanism}, user 'alice'): the broker rejected the credentials: e=unknown-user"
        )
        assert "alice-secret" not in str(e)


def test_a_refused_login_makes_the_service_unready_and_is_counted(sasl_broker: TansuBroker) -> None:
    metrics = ServiceMetrics("cleaner")
    service = EventService(
        "cleaner",
        sasl_broker.bootstrap,
        cleaner.make_handler(SERVICE_CONF, S3Options(), metrics),
        cleaner.HANDLES,
        metrics,
        topic=f"sasl-{uuid.uuid4().hex[:8]}",
        security=_scram(sasl_broker, "SCRAM-SHA-256"),
    )
    try:
        assert service.healthy()[0]
        start = time.monotonic()
        service.run_once(SLOW_TIMEOUT_S)
        assert time.monotonic() - start < FAST_S
        ok, detail = service.ready()
        assert not ok
        assert "SASL authentication with Kafka broker" in detail
        assert service.healthy() == (True, f"cleaner: ok ({detail.removeprefix('cleaner: ').rstrip()})\n")
        assert "e=unknown-user" in detail
        from prometheus_client import generate_latest

        exposition = generate_latest(metrics.registry).decode()
        assert metric_value(exposition, "tidemark_kafka_security_failures_total", stage="sasl") == 1
    finally:
        service.close()


def test_a_rotated_password_file_is_used_by_the_clients_made_after_a_refused_login(
    sasl_broker: TansuBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # what kubelet does to a mounted Secret that is fixed or rotated: the file is rewritten in place
    password_file = tmp_path / "password"
    password_file.write_text("old-secret\n")
    conf = {
        "tidemark.kafka.security.protocol": "SASL_PLAINTEXT",
        "tidemark.kafka.sasl.mechanism": "SCRAM-SHA-256",
        "tidemark.kafka.sasl.username": "alice",
        "tidemark.kafka.sasl.password.file": str(password_file),
    }
    security = KafkaSecurity.from_conf(conf, {})
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    metrics = ServiceMetrics("cleaner")
    service = EventService(
        "cleaner", sasl_broker.bootstrap, lambda _: [], cleaner.HANDLES, metrics, topic=topic, security=security
    )
    producer = EventProducer(sasl_broker.bootstrap, publish_timeout_s=SLOW_TIMEOUT_S, security=security)
    try:
        service.run_once(SLOW_TIMEOUT_S)
        assert not service.ready()[0]
        _fails_fast(lambda: producer.publish_raw(topic, None, b"x", []))
        password_file.write_text("new-secret\n")
        service.run_once(SLOW_TIMEOUT_S)  # tansu refuses every SCRAM user: still unready, but ...
        assert not service.ready()[0]
        _fails_fast(lambda: producer.publish_raw(topic, None, b"x", []))
        # ... the consumer made again and the producer log in (probe and kafka-python) with the new password
        for client in (service.consumer, producer):
            assert client.security.kafka_config()["sasl_plain_password"] == "new-secret"
            assert client._config["sasl_plain_password"] == "new-secret"
            assert "secret" not in repr(client.security)
        assert "secret" not in caplog.text
    finally:
        producer.close()
        service.close()


def test_msk_iam_tokens_are_sent_in_the_oauthbearer_handshake(
    sasl_broker: TansuBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    conf = {
        "tidemark.kafka.security.protocol": "SASL_PLAINTEXT",
        "tidemark.kafka.sasl.mechanism": "OAUTHBEARER",
        "tidemark.kafka.sasl.oauthbearer.method": "aws_msk_iam",
        "tidemark.kafka.aws.region": "us-east-1",
    }
    security = KafkaSecurity.from_conf(conf, {})
    e = _fails_fast(
        lambda: EventProducer(sasl_broker.bootstrap, publish_timeout_s=SLOW_TIMEOUT_S, security=security).publish_raw(
            "t", None, b"x", []
        )
    )
    # the token was signed and sent; tansu cannot check IAM and refuses it (a real MSK would not)
    assert e.stage == "sasl"
    assert "sasl.mechanism=OAUTHBEARER, aws_msk_iam in us-east-1" in str(e)
    assert "SaslAuthenticationFailedError" in str(e)


# --- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("service", "conf", "message"),
    [
        ("cleaner", "tidemark.kafka.sasl.password=hunter2", "tidemark.kafka.sasl.password must not be given"),
        ("archiver", "tidemark.kafka.security.protocol=TLS", "tidemark.kafka.security.protocol: unknown protocol"),
        ("writer-coordinator", "tidemark.kafka.security.protocol=SASL_SSL", "=SASL_SSL needs tidemark.kafka.sasl.mech"),
    ],
)
def test_bad_settings_end_the_service_with_a_one_line_error(service: str, conf: str, message: str) -> None:
    script = Path(sys.executable).with_name(f"tidemark-{service}")
    # the coordinator's own settings are valid (an open marker API), so that Kafka's are what fails
    extra = ["--conf", "tidemark.writer.coordinator.auth=none"] if service == "writer-coordinator" else []
    done = subprocess.run(
        [str(script), "--bootstrap", "127.0.0.1:1", "--metrics-port", "0", *extra, "--conf", conf],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]  # after the log lines of what started before
    assert last.startswith(f"tidemark-{service}: error: "), done.stderr
    assert message in last, done.stderr
    assert "hunter2" not in done.stderr
