"""Helpers for the services' end-to-end tests: publishing timeline events, waiting for an outcome,
reading topics back, scraping ``/metrics`` and ``/healthz``, and running ``tidemark-cleaner`` /
``tidemark-archiver`` as real processes."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import ChildProcess, accepts, free_port
from tests.support.s3 import s3_child_env
from tests.support.tls_proxy import Issued
from tidemark.errors import EventDecodeError
from tidemark.events import EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, EventProducer, RawMessage, ensure_topics
from tidemark.kafka_security import PLAINTEXT, KafkaSecurity
from tidemark.table.coordinator_client import (
    COORDINATOR_URL_KEY,
    MARKERS_TYPE_KEY,
    TLS_CA_KEY,
    TOKEN_FILE_KEY,
    CoordinatorClient,
    CoordinatorEndpoint,
)
from tidemark_services.writer_coordinator import AUTH_KEY, TLS_CERT_KEY, TLS_KEY_KEY

#: Service settings small enough for a table of a few commits to be cleaned and archived.
SERVICE_CONF = {
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.clean.max.commits": "3",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    # a process killed while it holds the table lock leaves its lease behind; the restarted one
    # takes it over once it expires. 5 s keeps that wait short and outlasts a holder's stall on a
    # loaded 2-core machine (one longer than the lease loses the lock and fails its run)
    "hoodie.write.lock.storage.validity.timeout.secs": "5",
}

#: A message with a timeline event's type header whose payload is not Avro: a poison event.
POISON_VALUE = b"\x00garbage"


def unique_topics(prefix: str = "timeline") -> tuple[str, str]:
    """A fresh timeline topic and its dead-letter topic (not created)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return topic, f"{topic}.dlq"


def create_topics(bootstrap: str, topics: Iterable[str]) -> None:
    ensure_topics(bootstrap, list(topics))


def completed(table: str, instant: str) -> TimelineEvent:
    return TimelineEvent(EventType.INSTANT_COMPLETED, table, instant, "deltacommit", "COMPLETED")


def publish_completed(producer: EventProducer, topic: str, table: str, instants: Sequence[str], times: int = 1) -> None:
    """``instant.completed`` for each instant, each published ``times`` times in a row."""
    for instant in instants:
        for _ in range(times):
            producer.publish(topic, completed(table, instant))


def publish_poison(producer: EventProducer, topic: str, table: str) -> None:
    producer.publish_raw(topic, table.encode(), POISON_VALUE, [("ce_type", b"tidemark.instant.completed")])


def wait_until(
    condition: Callable[[], bool],
    seconds: float,
    what: str,
    *,
    tick: Callable[[], object] | None = None,
    interval_s: float = 0.2,
    detail: Callable[[], str] | None = None,
) -> None:
    """Return once ``condition()`` holds, calling ``tick()`` (e.g. running in-process services)
    between checks, or sleeping ``interval_s`` without one; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        if tick is not None:
            tick()
        if condition():
            return
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail else ""
            raise AssertionError(f"not within {seconds:g}s: {what}{extra}")
        if tick is None:
            time.sleep(interval_s)


def read_topics(
    bootstrap: str,
    topics: Sequence[str],
    until: Callable[[list[RawMessage]], bool],
    seconds: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[RawMessage]:
    """Every message of ``topics`` from the start (a new consumer group), read until ``until`` holds
    for what was read so far or ``seconds`` pass."""
    reader = EventConsumer(bootstrap, list(topics), f"reader-{uuid.uuid4().hex[:8]}", security=security)
    seen: list[RawMessage] = []
    deadline = time.monotonic() + seconds
    try:
        while not until(seen) and time.monotonic() < deadline:
            seen.extend(reader.poll(1.0))
    finally:
        reader.close()
    return seen


def events_of(messages: Iterable[RawMessage], topic: str | None = None) -> list[TimelineEvent]:
    """The messages (of ``topic``, if given) that decode as timeline events, in order."""
    events = []
    for m in messages:
        if topic is not None and m.topic != topic:
            continue
        try:
            events.append(decode(m.key, m.value, m.headers))
        except EventDecodeError:
            continue
    return events


def of_type(events: Iterable[TimelineEvent], kind: EventType) -> list[TimelineEvent]:
    return [e for e in events if e.type is kind]


# --- HTTP ------------------------------------------------------------------------------------------


def http_get(port: int, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """(status, body) of ``GET http://127.0.0.1:port/path``; an HTTP error status is returned too."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric_value(exposition: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` (as exposed, e.g. ``..._total``) whose labels include ``labels``,
    summed over the samples that match; ``None`` when no sample matches."""
    values = [
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


# --- service processes -----------------------------------------------------------------------------


def _console_script(name: str) -> Path:
    script = Path(sys.executable).with_name(name)
    if not script.is_file():
        pytest.skip(f"console script {name} is not installed next to {sys.executable}")
    return script


class ServiceProcess(ChildProcess):
    """``tidemark-<name>`` running as a child process, its metrics on a port of its own."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        dead_letter_topic: str,
        *,
        s3_endpoint: str | None = None,
        conf: Mapping[str, str] = SERVICE_CONF,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"tidemark-{name}")
        self.name = name
        self.env = {**s3_child_env(), **(env or {})}
        self.group = f"{name}-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.command = [
            str(_console_script(f"tidemark-{name}")),
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--dead-letter-topic",
            dead_letter_topic,
            "--group",
            self.group,
            "--metrics-port",
            str(self.port),
            *(["--s3-endpoint", s3_endpoint] if s3_endpoint else []),
            *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
        ]

    def start(self) -> None:
        """Start the process (see :meth:`wait_ready`)."""
        self.launch(self.command, self.env)

    def wait_ready(self, seconds: float = 20.0) -> None:
        """Wait until ``/healthz`` answers; fail at once if the process exits."""
        wait_until(self._answers, seconds, f"{self.name} serves /healthz", detail=self.log_tail)

    def _answers(self) -> bool:
        if not self.alive:
            raise AssertionError(f"{self.name} exited with {self.returncode}:\n{self.log_tail()}")
        try:
            self.health()
        except OSError:
            return False
        return True

    def health(self) -> tuple[int, str]:
        return http_get(self.port, "/healthz")

    def readiness(self) -> tuple[int, str]:
        return http_get(self.port, "/readyz")

    def metrics(self) -> str:
        if not self.alive:
            raise AssertionError(f"{self.name} exited with {self.returncode}:\n{self.log_tail()}")
        status, body = http_get(self.port, "/metrics")
        assert status == 200, f"{self.name} /metrics answered {status}"
        return body

    def metric(self, name: str, **labels: str) -> float:
        """A metric's current value over HTTP (0 when the sample is not there yet)."""
        return metric_value(self.metrics(), name, **labels) or 0.0

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, as Kubernetes stops a pod, and the exit status."""
        assert self.alive, f"{self.name} is not running"
        return self.signal_and_wait(signal.SIGTERM, timeout_s)

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextlib.contextmanager
def service_processes(
    names: Sequence[str],
    bootstrap: str,
    topic: str,
    dead_letter_topic: str,
    *,
    s3_endpoint: str | None = None,
    conf: Mapping[str, str] = SERVICE_CONF,
    env: Mapping[str, str] | None = None,
) -> Iterator[list[ServiceProcess]]:
    """The services ``names`` (``cleaner``, ``archiver``) started together, each answering on
    ``/healthz``; killed on exit if still running. ``env`` is added to their environment."""
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(
                ServiceProcess(name, bootstrap, topic, dead_letter_topic, s3_endpoint=s3_endpoint, conf=conf, env=env)
            )
            for name in names
        ]
        for proc in procs:
            proc.start()  # all at once: each takes a while to import and to join its group
        for proc in procs:
            proc.wait_ready()
        yield procs


def logs(*procs: ServiceProcess) -> str:
    return "\n".join(p.log_tail() for p in procs)


class CoordinatorProcess(ServiceProcess):
    """``tidemark-writer-coordinator`` as a child process: the marker API on :attr:`http_port`
    (kept across :meth:`restart`, as a Kubernetes Service would), metrics on :attr:`port`.

    It requires an API token, made up here and put in :attr:`token_file` (unless ``conf`` says
    otherwise: its own token file, or ``auth=none``); with ``tls`` (a certificate for 127.0.0.1)
    it serves https. :meth:`client` and :attr:`writer_conf` reach it as a writer would."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        dead_letter_topic: str,
        *,
        s3_endpoint: str | None = None,
        conf: Mapping[str, str] | None = None,
        tls: Issued | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        conf = dict(conf or {})
        self.token: str | None = None
        self.token_file: Path | None = None
        if TOKEN_FILE_KEY not in conf and AUTH_KEY not in conf:
            self.token = secrets.token_urlsafe(32)
            fd, name = tempfile.mkstemp(prefix="coordinator-token-")
            os.write(fd, f"{self.token}\n".encode())  # a trailing newline, as `kubectl create secret` files have
            os.close(fd)
            self.token_file = Path(name)
            conf[TOKEN_FILE_KEY] = name
        self.tls = tls
        if tls is not None:
            conf.update({TLS_CERT_KEY: str(tls.cert), TLS_KEY_KEY: str(tls.key)})
        super().__init__(
            "writer-coordinator", bootstrap, topic, dead_letter_topic, s3_endpoint=s3_endpoint, conf=conf, env=env
        )
        self.http_port = free_port()
        self.command += ["--http-port", str(self.http_port)]

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.http_port}"

    @property
    def writer_conf(self) -> dict[str, str]:
        """What a write needs to send its markers here."""
        conf = {MARKERS_TYPE_KEY: "TIMELINE_SERVER_BASED", COORDINATOR_URL_KEY: self.url}
        if self.token_file is not None:
            conf[TOKEN_FILE_KEY] = str(self.token_file)
        if self.tls is not None:
            conf[TLS_CA_KEY] = str(self.tls.ca)
        return conf

    def client(self, table: str, **conf: str) -> CoordinatorClient:
        """A writer's client of ``table``, from :attr:`writer_conf` (``conf`` overriding it)."""
        endpoint = CoordinatorEndpoint.from_conf({**self.writer_conf, **conf})
        assert endpoint is not None
        return endpoint.client(table)

    def restart(self) -> None:
        """Start again after a kill, on the same ports, and wait until it answers."""
        self._close_log()
        self.start()
        self.wait_ready()
        wait_until(lambda: accepts(self.http_port), 10, "the marker API accepts connections")

    def __enter__(self) -> CoordinatorProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        if self.token_file is not None:
            self.token_file.unlink(missing_ok=True)
