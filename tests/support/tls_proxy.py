"""TLS in front of the test broker, and the certificates for it.

tansu speaks plain TCP only (``--cert``/``--key`` do not make it serve TLS, see DESIGN.md), so a
TLS listener is a proxy: tansu listens on port A and advertises port B, :class:`TlsProxy` accepts
TLS on B and forwards the decrypted bytes to A. Clients that follow the advertised address (every
Kafka client, after the first metadata request) therefore stay on TLS.

The certificates are made with ``cryptography``: :func:`make_ca` a self-signed CA, :func:`issue`
a server (or client) certificate signed by it for ``127.0.0.1``/``localhost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.kafka import TansuBroker, broker_lifetime
from tests.support.processes import free_port
from tidemark.kafka_security import KafkaSecurity


@dataclass(frozen=True)
class Issued:
    """A certificate and its key as PEM files, with the CA that signed it (or itself, for a CA)."""

    cert: Path
    key: Path
    ca: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def make_ca(directory: Path, name: str) -> Issued:
    """A self-signed CA ``name`` valid for a day, as ``name.crt``/``name.key`` in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = _write(directory, name, cert, key)
    return Issued(cert_path, key_path, cert_path)


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(
    ca: Issued,
    directory: Path,
    name: str,
    *,
    client: bool = False,
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
    valid: tuple[datetime.timedelta, datetime.timedelta] = (-datetime.timedelta(minutes=5), datetime.timedelta(days=1)),
) -> Issued:
    """A leaf certificate signed by ``ca`` for ``hosts`` (names or IP addresses; server auth, or
    client auth with ``client``), valid from now plus ``valid[0]`` to now plus ``valid[1]``, as
    ``name.crt``/``name.key`` in ``directory``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + valid[0])
        .not_valid_after(now + valid[1])
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_host_name(h) for h in hosts]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = _write(directory, name, cert, key)
    return Issued(cert_path, key_path, ca.cert)


class TlsProxy:
    """Accepts TLS on ``127.0.0.1:port`` and forwards each connection, decrypted, to
    ``127.0.0.1:target_port``; runs its own event loop in a daemon thread until :meth:`close`.
    Without a ``server`` certificate it forwards plain TCP.

    With ``client_ca`` the proxy asks for a client certificate signed by that CA (mutual TLS)."""

    def __init__(
        self, target_port: int, server: Issued | None, *, port: int | None = None, client_ca: Path | None = None
    ):
        self.target_port = target_port
        self.port = port if port is not None else free_port()
        self.context: ssl.SSLContext | None = None
        self.connections = 0  # connections accepted (their TLS handshake completed)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"tls-proxy-{self.port}", daemon=True)
        if server is None:
            return  # plain TCP forwarding: the benchmark's anchor, the same hop without TLS
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(server.cert, server.key)
        # No TLS 1.3 session tickets: asyncio sends them after the handshake, and kafka-python
        # closes a connection that turns readable while no request is in flight ("Socket
        # EVENT_READ without in-flight-requests"), so a late ticket would break idle connections
        # at random. A real broker must be checked for the same (see the README).
        self.context.num_tickets = 0
        if client_ca is not None:
            self.context.load_verify_locations(client_ca)
            self.context.verify_mode = ssl.CERT_REQUIRED

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TlsProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self.context), self._loop
        )
        self._server = started.result(10)
        return self

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        with contextlib.suppress(asyncio.CancelledError):  # cancelled by close()
            await asyncio.gather(_pipe(client_reader, broker_writer), _pipe(broker_reader, client_writer))

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()  # the connections still piped

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> TlsProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream or an error, then close the writing side."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
            writer.close()


# --- a TLS broker for tests -------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    ca: Issued
    other_ca: Issued  # a CA that signed nothing the broker has
    server: Issued


@dataclass(frozen=True)
class TlsBroker:
    """tansu behind a :class:`TlsProxy`: clients reach it with TLS only, verified with ``certs.ca``."""

    broker: TansuBroker
    proxy: TlsProxy
    certs: Certs

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    def conf(self, ca: Path | None = None) -> dict[str, str]:
        """The ``tidemark.kafka.*`` settings of a client of this broker (``ca`` instead of the right CA)."""
        return {
            "tidemark.kafka.security.protocol": "SSL",
            "tidemark.kafka.ssl.ca.location": str(ca or self.certs.ca.cert),
        }

    def security(self, ca: Path | None = None) -> KafkaSecurity:
        return KafkaSecurity.from_conf(self.conf(ca), {})


def tls_broker_lifetime(directory: Path) -> Iterator[TlsBroker]:
    """tansu on port A advertising port B, where a TLS proxy (a server certificate of a CA made in
    ``directory``) listens; for a fixture to ``yield from``."""
    ca = make_ca(directory, "tidemark-test-ca")
    certs = Certs(ca, make_ca(directory, "unrelated-ca"), issue(ca, directory, "broker"))
    proxy_port = free_port()
    for broker in broker_lifetime(advertised_port=proxy_port):
        with TlsProxy(broker.port, certs.server, port=proxy_port) as proxy:
            yield TlsBroker(broker, proxy, certs)
