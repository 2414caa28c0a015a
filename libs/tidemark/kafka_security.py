"""Kafka client security: TLS and SASL settings, and a probe that reports their failures quickly.

:class:`KafkaSecurity` is read from ``tidemark.kafka.*`` settings (librdkafka's names) and the
environment, checked, and turned into kafka-python settings by :meth:`KafkaSecurity.kafka_config`:

=============================================  =========================================================
``tidemark.kafka.security.protocol``           ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``
``tidemark.kafka.ssl.ca.location``             CA file (PEM) the brokers' certificates are checked against
                                               (default: the system's CAs)
``tidemark.kafka.ssl.certificate.location``    client certificate (PEM), for mutual TLS, with the key below
``tidemark.kafka.ssl.key.location``            client key (PEM, not encrypted)
``tidemark.kafka.ssl.endpoint.identification.algorithm``  ``https`` (default: check the broker's name) or ``none``
``tidemark.kafka.sasl.mechanism``              ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER``
``tidemark.kafka.sasl.username``               user of PLAIN and SCRAM
``tidemark.kafka.sasl.password.file``          file holding the password (a mounted Secret)
``tidemark.kafka.sasl.oauthbearer.method``     ``aws_msk_iam``: OAUTHBEARER tokens of Amazon MSK IAM
``tidemark.kafka.aws.region``                  region of the MSK cluster (default: ``$AWS_REGION``)
=============================================  =========================================================

Every key may come from the environment too, as ``TIDEMARK_KAFKA_`` and the rest of the key upper-cased
with dots as underscores (``TIDEMARK_KAFKA_SECURITY_PROTOCOL``); a ``--conf`` setting wins. The SASL
password comes only from ``$TIDEMARK_KAFKA_SASL_PASSWORD`` or the password file: a password in
``--conf`` would show in the process list and in logs, so it is refused.

kafka-python reports a failed TLS handshake or SASL exchange slowly or not at all (a producer waits
for metadata until ``max_block_ms``, a consumer's ``poll()`` returns nothing), so the clients of
:mod:`tidemark.kafka_adapter` call :func:`probe` first: one connection to a bootstrap broker, made
with the same settings, whose failure becomes a :class:`~tidemark.errors.KafkaSecurityError` that
names the broker, the protocol, the mechanism and what went wrong.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kafka.conn import BrokerConnection, ConnectionStates
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, RequestTimedOutError
from kafka.protocol.metadata import MetadataRequest
from kafka.sasl.oauth import AbstractTokenProvider

from tidemark.config import kafka_brokers, refuse_unknown_keys
from tidemark.errors import KafkaSecurityError
from tidemark.kafka_keys import (
    CA_KEY,
    CERT_KEY,
    HOSTNAME_KEY,
    KEY_KEY,
    KEYS,
    MECHANISM_KEY,
    OAUTH_METHOD_KEY,
    PASSWORD_FILE_KEY,
    PASSWORD_KEY,
    PREFIX,
    PROTOCOL_KEY,
    REGION_KEY,
    USERNAME_KEY,
)
from tidemark.tls import TlsFailure, check_ca_file, openssl_reason, tls_failure

log = logging.getLogger(__name__)

#: The only place, besides the password file, a SASL password is read from.
PASSWORD_ENV: Final = "TIDEMARK_KAFKA_SASL_PASSWORD"

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTH_METHODS: Final = ("aws_msk_iam",)
#: Settings that are not ``tidemark.kafka.*`` security keys but share the prefix's environment
#: namespace (the services' ``--bootstrap`` default); never reported as unknown.
_OTHER_ENV: Final = frozenset({"TIDEMARK_KAFKA_BOOTSTRAP"})


def env_name(key: str) -> str:
    """The environment variable of a ``tidemark.kafka.*`` key."""
    return "TIDEMARK_KAFKA_" + key.removeprefix(PREFIX).upper().replace(".", "_").replace("-", "_")


def _readable(key: str, path: str) -> str:
    """``path`` if it is a file this process can read; else a ValueError naming the key."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{key}: file {path} does not exist")
    if not p.is_file():
        raise ValueError(f"{key}: {path} is not a file")
    try:
        with p.open("rb"):
            pass
    except OSError as e:
        raise ValueError(f"{key}: file {path} cannot be read: {e.strerror or e}") from None
    return path


def read_password_file(path: str) -> str:
    """The SASL password in the file at ``path`` (one trailing newline ignored); a ValueError
    naming :data:`PASSWORD_FILE_KEY` when it cannot be read or is empty."""
    _readable(PASSWORD_FILE_KEY, path)
    try:
        password = Path(path).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{PASSWORD_FILE_KEY}: file {path} cannot be read: {e}") from None
    if not password:
        raise ValueError(f"{PASSWORD_FILE_KEY}: file {path} is empty")
    return password


def refuse_encrypted_key(key: str, path: str) -> None:
    """A ValueError naming ``key`` when the PEM key at ``path`` is encrypted: OpenSSL would ask
    for its passphrase on the terminal (a process with one waits for ever), and without one fail
    with an error naming no file."""
    text = Path(path).read_bytes()
    if b"ENCRYPTED" in text:
        raise ValueError(f"{key}: {path} is an encrypted private key; give it unencrypted (openssl pkey -in {path})")


def check_tls_files(ca: str | None, cert: str | None, key: str | None) -> None:
    """Load the CA, certificate and key as the clients will, now: a file OpenSSL cannot use would
    otherwise fail every handshake, retried for ever, with an error naming no setting."""
    if ca:
        check_ca_file(CA_KEY, ca)
    if cert and key:
        try:  # a certificate file loads as CA certificates too: which of the two is at fault
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
        except ssl.SSLError as e:
            raise ValueError(f"{CERT_KEY}: file {cert} holds no PEM certificate: {openssl_reason(e)}") from None
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
        except ssl.SSLError as e:
            if e.reason == "KEY_VALUES_MISMATCH":
                raise ValueError(
                    f"{KEY_KEY}: the key in {key} does not belong to the certificate in {CERT_KEY}={cert}"
                ) from None
            raise ValueError(
                f"{KEY_KEY}: file {key} holds no PEM private key OpenSSL can load "
                f"(for the certificate in {CERT_KEY}={cert}): {openssl_reason(e)}"
            ) from None


@dataclass(frozen=True)
class KafkaSecurity:
    """How the Kafka clients connect: protocol, TLS files, SASL mechanism and credentials.

    ``repr``/``str`` never show the password (only whether there is one)."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    oauthbearer_method: str | None = None
    aws_region: str | None = None
    #: where ``password`` was read from, read again by :meth:`current`
    password_file: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_conf(cls, conf: Mapping[str, str], env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """The settings of ``conf`` (``--conf``), else of ``env`` (default: ``os.environ``),
        checked; a ValueError says which key is wrong and why."""
        env = os.environ if env is None else env
        if conf.get(PASSWORD_KEY) is not None:
            raise ValueError(
                f"{PASSWORD_KEY} must not be given as a setting (it would show in the process list and "
                f"in logs): put the password in ${PASSWORD_ENV} or in a file named by {PASSWORD_FILE_KEY}"
            )
        refuse_unknown_keys(conf, PREFIX, KEYS, "Kafka")
        # a misspelt variable would silently leave its setting at the default (PLAINTEXT, say)
        known_env = {env_name(k) for k in KEYS} | {PASSWORD_ENV} | _OTHER_ENV
        unknown = sorted(n for n in env if n.startswith("TIDEMARK_KAFKA_") and n not in known_env)
        if unknown:
            raise ValueError(
                f"unknown Kafka environment variable(s) {', '.join(unknown)}; known: {', '.join(sorted(known_env))}"
            )

        def get(key: str) -> str | None:
            value = (conf.get(key) or "").strip() or (env.get(env_name(key)) or "").strip()
            return value or None

        protocol = (get(PROTOCOL_KEY) or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ValueError(
                f"{PROTOCOL_KEY}: unknown protocol {get(PROTOCOL_KEY)!r}; use one of {', '.join(PROTOCOLS)}"
            )
        tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")

        ca, cert, key = get(CA_KEY), get(CERT_KEY), get(KEY_KEY)
        algorithm = (get(HOSTNAME_KEY) or "https").lower()
        if algorithm not in ("https", "none"):
            raise ValueError(f"{HOSTNAME_KEY}: {get(HOSTNAME_KEY)!r} is neither 'https' nor 'none'")
        tls_given = [k for k, v in ((CA_KEY, ca), (CERT_KEY, cert), (KEY_KEY, key)) if v]
        if tls_given and not tls:
            raise ValueError(
                f"{', '.join(tls_given)} given but {PROTOCOL_KEY} is {protocol}, which does not use TLS "
                "(use SSL or SASL_SSL)"
            )
        if bool(cert) != bool(key):
            raise ValueError(f"a client certificate needs both {CERT_KEY} and {KEY_KEY}; only one is given")
        for k, v in ((CA_KEY, ca), (CERT_KEY, cert), (KEY_KEY, key)):
            if v:
                _readable(k, v)
        if key:
            refuse_encrypted_key(KEY_KEY, key)
        check_tls_files(ca, cert, key)

        mechanism, username = get(MECHANISM_KEY), get(USERNAME_KEY)
        password_file, method, region = get(PASSWORD_FILE_KEY), get(OAUTH_METHOD_KEY), get(REGION_KEY)
        password_env = env.get(PASSWORD_ENV) or None
        sasl_given = [k for k, v in ((MECHANISM_KEY, mechanism), (USERNAME_KEY, username)) if v]
        sasl_given += [k for k, v in ((PASSWORD_FILE_KEY, password_file), (OAUTH_METHOD_KEY, method)) if v]
        if not sasl:
            if sasl_given:
                raise ValueError(
                    f"{', '.join(sasl_given)} given but {PROTOCOL_KEY} is {protocol}, which does not use SASL "
                    "(use SASL_PLAINTEXT or SASL_SSL)"
                )
            return cls(protocol, ca, cert, key, algorithm == "https")

        if mechanism is None:
            raise ValueError(f"{PROTOCOL_KEY}={protocol} needs {MECHANISM_KEY} (one of {', '.join(MECHANISMS)})")
        mechanism = mechanism.upper()
        if mechanism not in MECHANISMS:
            raise ValueError(
                f"{MECHANISM_KEY}: unknown mechanism {get(MECHANISM_KEY)!r}; use one of {', '.join(MECHANISMS)}"
            )
        if mechanism == "OAUTHBEARER":
            if method is None or method.lower() not in OAUTH_METHODS:
                raise ValueError(
                    f"{MECHANISM_KEY}=OAUTHBEARER needs {OAUTH_METHOD_KEY}={OAUTH_METHODS[0]} "
                    f"(the only token source tidemark has), got {method!r}"
                )
            if username or password_file:
                raise ValueError(f"{MECHANISM_KEY}=OAUTHBEARER takes no {USERNAME_KEY} or {PASSWORD_FILE_KEY}")
            region = region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
            if not region:
                raise ValueError(f"{OAUTH_METHOD_KEY}=aws_msk_iam needs {REGION_KEY} (or $AWS_REGION)")
            try:
                import aws_msk_iam_sasl_signer  # type: ignore[import-untyped]  # noqa: F401
            except ImportError:
                raise ValueError(
                    f"{OAUTH_METHOD_KEY}=aws_msk_iam needs the aws-msk-iam-sasl-signer-python package: "
                    "install tidemark[msk]"
                ) from None
            return cls(protocol, ca, cert, key, algorithm == "https", mechanism, None, None, "aws_msk_iam", region)

        if method:
            raise ValueError(f"{OAUTH_METHOD_KEY} is only for {MECHANISM_KEY}=OAUTHBEARER, not {mechanism}")
        if not username:
            raise ValueError(f"{MECHANISM_KEY}={mechanism} needs {USERNAME_KEY}")
        if password_file and password_env:
            raise ValueError(f"the SASL password is given twice: in ${PASSWORD_ENV} and in {PASSWORD_FILE_KEY}")
        if password_file:
            password = read_password_file(password_file)
        elif password_env:
            password = password_env
        else:
            raise ValueError(
                f"{MECHANISM_KEY}={mechanism} needs a password: set ${PASSWORD_ENV} or {PASSWORD_FILE_KEY}"
            )
        return cls(
            protocol, ca, cert, key, algorithm == "https", mechanism, username, password, password_file=password_file
        )

    def current(self) -> KafkaSecurity:
        """These settings with the password as the password file holds it now: a mounted Secret
        is rewritten in place when it is rotated or fixed, and a client made after that must log
        in with the new password, without a restart. Without a file, ``self``. A file that cannot
        be read now (removed while it is rewritten) keeps the password read last, said in the log."""
        if self.password_file is None:
            return self
        try:
            password = read_password_file(self.password_file)
        except ValueError as e:
            log.warning("%s; the password read from it before is used meanwhile", e)
            return self
        return self if password == self.password else dataclasses.replace(self, password=password)

    def describe(self) -> str:
        """What the clients use, for messages and logs (never the password)."""
        parts = [f"security.protocol={self.protocol}"]
        if self.mechanism:
            parts.append(f"sasl.mechanism={self.mechanism}")
        if self.username:
            parts.append(f"user {self.username!r}")
        if self.oauthbearer_method:
            parts.append(f"{self.oauthbearer_method} in {self.aws_region}")
        if self.tls:
            parts.append(f"CA {self.ca_location or 'of the system'}")
            if self.certificate_location:
                parts.append(f"client certificate {self.certificate_location}")
        return ", ".join(parts)

    def __str__(self) -> str:
        return self.describe()

    def kafka_config(self) -> dict[str, Any]:
        """The kafka-python settings of a producer, consumer or admin client."""
        config: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            config["ssl_check_hostname"] = self.check_hostname
            if self.ca_location:
                config["ssl_cafile"] = self.ca_location
            if self.certificate_location:
                config["ssl_certfile"] = self.certificate_location
                config["ssl_keyfile"] = self.key_location
        if self.sasl:
            config["sasl_mechanism"] = self.mechanism
            if self.oauthbearer_method == "aws_msk_iam":
                assert self.aws_region is not None
                config["sasl_oauth_token_provider"] = MskIamTokenProvider(self.aws_region)
            else:
                config["sasl_plain_username"] = self.username
                config["sasl_plain_password"] = self.password
        return config


PLAINTEXT: Final = KafkaSecurity()


class MskIamTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """OAUTHBEARER tokens for Amazon MSK IAM, signed with the process's AWS credentials (the pod's
    role, ``AWS_*`` variables, a profile: botocore's usual chain). A token is reused until a minute
    before it expires (tokens live 15 minutes)."""

    def __init__(self, region: str) -> None:
        super().__init__()
        self.region = region
        self._token: str | None = None
        self._expires_ms = 0.0
        self._mutex = threading.Lock()

    def token(self) -> str:
        with self._mutex:
            if self._token is None or time.time() * 1000 > self._expires_ms - 60_000:
                try:
                    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
                except ImportError as e:
                    raise RuntimeError(
                        "MSK IAM authentication needs aws-msk-iam-sasl-signer-python: install tidemark[msk]"
                    ) from e
                try:
                    token, expires_ms = MSKAuthTokenProvider.generate_auth_token(self.region)
                except Exception as e:  # botocore's errors, or None credentials deep in the signer
                    raise RuntimeError(
                        f"could not sign an MSK IAM token for {self.region} (are AWS credentials available "
                        f"to this process?): {type(e).__name__}: {e}"
                    ) from e
                self._token, self._expires_ms = str(token), float(expires_ms)
            return self._token

    def __repr__(self) -> str:
        return f"MskIamTokenProvider(region={self.region!r})"


# --- the probe ------------------------------------------------------------------------------------


class _ProbeConnection(BrokerConnection):  # type: ignore[misc]
    """A BrokerConnection that remembers why it was closed and in which state: kafka-python only
    logs that (a failed SCRAM exchange ends in ``close(error)`` and a reconnect)."""

    def __init__(self, host: str, port: int, **config: Any) -> None:
        super().__init__(host, port, socket.AF_UNSPEC, **config)
        self.failure: BaseException | None = None
        self.failed_in: Any = None
        self.last_sasl_reply: bytes | None = None

    def close(self, error: BaseException | None = None) -> None:
        if error is not None and self.failure is None and self.state is not ConnectionStates.DISCONNECTED:
            self.failure, self.failed_in = error, self.state
        super().close(error)

    def _recv_sasl_authenticate(self) -> Any:
        # keep the broker's last SASL message: a SCRAM server-final "e=..." is the broker's reason
        reply = super()._recv_sasl_authenticate()
        if isinstance(reply, bytes):
            self.last_sasl_reply = reply
        return reply


def probe(bootstrap: str, security: KafkaSecurity, timeout_s: float = 5.0) -> None:
    """Connect to the first bootstrap broker that accepts a TCP connection, with ``security``,
    through the TLS handshake, the API versions and the SASL exchange.

    Raises :class:`KafkaSecurityError` when TLS or SASL fails; returns when it all succeeds, and
    also when no broker accepts a connection (that is the brokers being down, which the clients
    already retry and report)."""
    deadline = time.monotonic() + timeout_s
    config = {
        **security.kafka_config(),
        "client_id": "tidemark-security-probe",
        # below the probe's own bound, so that a handshake nobody answers ends in a reported timeout
        "request_timeout_ms": max(100, int(timeout_s * 800)),
        "api_version_auto_timeout_ms": max(100, int(timeout_s * 1000)),
        "reconnect_backoff_ms": 0,
    }
    for host, port in kafka_brokers(bootstrap):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        broker = f"{host}:{port}"
        conn = _ProbeConnection(host, port, **config)
        try:
            if conn.connect_blocking(remaining):
                failure = None if security.mechanism else _metadata_refused(conn, deadline)
                if failure is None:
                    return
                state = ConnectionStates.API_VERSIONS_RECV  # a broker wanting SASL answers those only
            else:
                failure, state = conn.failure, conn.failed_in
        except ssl.SSLError as e:
            failure, state = e, ConnectionStates.HANDSHAKE
        except (KafkaError, ValueError, RuntimeError) as e:
            failure, state = e, ConnectionStates.AUTHENTICATING
        finally:
            conn.close()
        if state is ConnectionStates.HANDSHAKE:
            raise _tls_error(broker, security, failure)
        if state is ConnectionStates.AUTHENTICATING:
            raise _sasl_error(broker, security, failure, conn.last_sasl_reply)
        # the broker took the connection and dropped it at the first requests: what brokers do
        # when the client's TLS or SASL is missing (TLS 1.3 refuses a missing client certificate
        # only after the handshake); only the likely causes can be named
        # A first answer that did not come in time is a slow or silent broker, not a refusal: a
        # listener that wants TLS or SASL closes the connection at once
        dropped = state in (ConnectionStates.API_VERSIONS_SEND, ConnectionStates.API_VERSIONS_RECV) and not isinstance(
            failure, RequestTimedOutError | KafkaTimeoutError
        )
        if dropped and (mismatch := _first_request_dropped(broker, security, failure)) is not None:
            raise mismatch
        # refused, timed out before TLS, or lost for a reason security does not explain: not security


def _reason(failure: BaseException | None) -> str:
    if failure is None:
        return "the connection was closed"
    if isinstance(failure, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {failure.verify_message}"
    text = str(failure).strip() or type(failure).__name__
    return text if isinstance(failure, KafkaError | ssl.SSLError) else f"{type(failure).__name__}: {text}"


def _tls_error(broker: str, security: KafkaSecurity, failure: BaseException | None) -> KafkaSecurityError:
    reason = _reason(failure)
    hint = ""
    kind = tls_failure(failure)
    if kind is TlsFailure.NAME:
        hint = f"; the certificate does not name {broker.rpartition(':')[0]}"
    elif kind is TlsFailure.EXPIRED:
        hint = "; renew the broker's certificate (or check this machine's clock)"
    elif kind is TlsFailure.UNTRUSTED:
        hint = (
            f"; the broker's certificate is not signed by the CA in {CA_KEY}={security.ca_location}"
            if security.ca_location
            else f"; the broker's certificate is not signed by a CA of the system (set {CA_KEY})"
        )
    elif kind is TlsFailure.NOT_TLS or "timeout" in reason:
        # a PLAINTEXT listener waits for a request, so a handshake to it can also just time out
        hint = "; the listener does not speak TLS (is it a PLAINTEXT listener?)"
    return KafkaSecurityError(
        f"TLS handshake with Kafka broker {broker} failed ({security.describe()}): {reason}{hint}",
        broker=broker,
        stage="tls",
        protocol=security.protocol,
        mechanism=security.mechanism or "",
    )


def _metadata_refused(conn: _ProbeConnection, deadline: float) -> BaseException | None:
    """Why the broker dropped a metadata request, or None when it answered (or took too long):
    a broker whose listener wants SASL answers the API versions before the login, and then
    closes the connection of a client that asks anything else without one."""
    future = conn.send(MetadataRequest[0]([]))
    while not future.is_done and time.monotonic() < deadline:
        for response, answered in conn.recv():  # the caller completes the futures
            answered.success(response)
        time.sleep(0.01)
    return future.exception if future.failed() and isinstance(future.exception, KafkaConnectionError) else None


def _first_request_dropped(
    broker: str, security: KafkaSecurity, failure: BaseException | None
) -> KafkaSecurityError | None:
    """The error for a broker that closed the connection during the API versions request, naming
    what its listener may expect that this client does not do; None when the client does it all."""
    expected: list[tuple[str, str]] = []  # (stage, what the listener may expect)
    if not security.tls:
        expected.append(("tls", "TLS"))
    elif not security.certificate_location:
        expected.append(("tls", f"a client certificate (mutual TLS; none is set in {CERT_KEY})"))
    if not security.mechanism:
        expected.append(("sasl", "SASL"))
    if not expected:
        return None
    return KafkaSecurityError(
        f"Kafka broker {broker} closed the connection during the first requests ({security.describe()}): "
        f"{_reason(failure)}; does its listener expect {' or '.join(what for _, what in expected)}?",
        broker=broker,
        stage=expected[0][0],
        protocol=security.protocol,
        mechanism=security.mechanism or "",
    )


def _sasl_error(
    broker: str, security: KafkaSecurity, failure: BaseException | None, reply: bytes | None
) -> KafkaSecurityError:
    if reply is not None and reply.startswith(b"e="):
        reason = f"the broker rejected the credentials: {reply.decode(errors='replace')}"
    else:
        reason = _reason(failure)
        if isinstance(failure, KafkaError) and "disconnected" in reason:
            reason += f" during the SASL exchange (does the broker offer {security.mechanism}?)"
    return KafkaSecurityError(
        f"SASL authentication with Kafka broker {broker} failed ({security.describe()}): {reason}",
        broker=broker,
        stage="sasl",
        protocol=security.protocol,
        mechanism=security.mechanism or "",
    )


def security_error(bootstrap: str, security: KafkaSecurity, failure: ssl.SSLError) -> KafkaSecurityError:
    """A TLS failure a kafka-python client raised itself (creating a client can run a handshake)."""
    servers = kafka_brokers(bootstrap)
    broker = f"{servers[0][0]}:{servers[0][1]}" if servers else bootstrap
    return _tls_error(broker, security, failure)
