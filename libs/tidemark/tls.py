"""What a failed TLS connection says about its cause, read once for every client that reports one
(the Kafka clients, the writer-coordinator's): each words the hint for its own settings."""

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
