"""TLS for every client that has settings for it (the Kafka clients, writers of an ``https://``
writer-coordinator): a CA file checked before anything connects with it, so both refuse the same
files the same way, and what a failed connection says about its cause, each client wording the
hint for its own settings."""

from __future__ import annotations

import enum
import ssl


class TlsFailure(enum.Enum):
    #: the certificate verified, but names another host than the one connected to
    NAME = "name"
    #: the certificate has expired (or is not valid yet: this machine's clock may be off)
    EXPIRED = "expired"
    #: the certificate is not signed by a trusted CA
    UNTRUSTED = "untrusted"
    #: the other end does not speak TLS (a plain listener answered the handshake)
    NOT_TLS = "not-tls"


def openssl_reason(e: ssl.SSLError) -> str:
    """OpenSSL's words without the source line of Python's ``_ssl.c``."""
    return str(e).split(" (_ssl.c:")[0]


def tls_failure(failure: BaseException | None) -> TlsFailure | None:
    """The cause of ``failure``, None when it is none of :class:`TlsFailure`'s."""
    if isinstance(failure, ssl.SSLCertVerificationError):
        why = (failure.verify_message or str(failure)).lower()
        if "hostname mismatch" in why or "ip address mismatch" in why:
            return TlsFailure.NAME
        if "expired" in why or "not yet valid" in why:
            return TlsFailure.EXPIRED
        return TlsFailure.UNTRUSTED
    if isinstance(failure, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(failure).upper():
        return TlsFailure.NOT_TLS
    return None


def check_ca_file(key: str, path: str) -> None:
    """Load the CA certificates in ``path`` (named by setting ``key``) as a TLS client will, now; a
    ValueError naming both when there is none. An empty file counts: given as text it loads nothing,
    and the client would silently verify against the system's CAs instead."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError as e:
        raise ValueError(
            f"{key}: file {path} holds no PEM CA certificate OpenSSL can load: {openssl_reason(e)}"
        ) from None
    except OSError as e:
        raise ValueError(f"{key}: file {path} cannot be read: {e.strerror or e}") from None
    if not context.cert_store_stats()["x509"]:  # certificate revocation lists only
        raise ValueError(f"{key}: file {path} holds no PEM CA certificate, only revocation lists")
