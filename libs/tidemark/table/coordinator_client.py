"""The writer-coordinator as a writer sees it: an HTTP client (stdlib ``http.client``, JSON bodies) and
the marker writers a task uses, direct or through the coordinator.

Safety never depends on the coordinator: it makes markers cheap and finds conflicts early, and
the commit-time check under the table lock stays the final word. A writer that cannot reach it
falls back to direct markers (``.hoodie/.temp/<instant>/...marker.<IOType>``, with the direct early
check) and says so once in a warning; the write's markers are then in both layouts, which
:func:`tidemark.table.markers.list_markers` reads together.

The API (every body JSON; every request names the table by its location):

==========================  ==========================================================================
``POST /v1/writes/register``  a write starts: ``{table, instant, start, heartbeat_interval_ms,
                              tolerable_misses, check_commit_conflict}``; the coordinator beats for it
``POST /v1/writes/renew``     the same body: a heartbeat (registers the write again after a restart)
``POST /v1/writes/end``       ``{table, instant, outcome: committed|aborted|conflicted, conflict?}``
``POST /v1/markers/create``   ``{table, instant, marker, early_detection}`` → ``{created}``, or
                              ``markers: [...]`` (all accepted or none) → ``{created: [...]}``; 409
                              ``{conflict}``. ``early_detection`` (optional) is the write's own
                              setting, for a coordinator that has not seen it register (restarted
                              since, or another replica)
``GET /v1/markers``           ``?table=&instant=`` → ``{markers}``
``GET /v1/markers/exists``    ``?table=&instant=`` → ``{exists}``
``POST /v1/markers/delete``   ``{table, instant}`` → ``{deleted}``; 409 while the write is pending
``POST /v1/conflicts/check``  ``{table, instant, file_groups}`` → ``{conflict}`` (null for none)
==========================  ==========================================================================

Errors are ``{"error": reason}`` with a 4xx (the request was wrong: nothing changed) or 5xx; a
marker for a write that is no longer pending is answered 410 and stops the task (it is a zombie:
its write completed or was rolled back), where any other failure sends it to direct markers.

Every request carries ``Authorization: Bearer <token>``, the token read from the file that
``tidemark.writer.coordinator.token.file`` names (the same key on the coordinator). The file is read
once, on the driver, and the token travels to the tasks inside their plan: executors need not have
the file mounted, and a missing file fails the write at its start rather than in every task. A
refused token (401) is a misconfiguration, not an outage, but it is handled like one: the write
goes on with direct markers (always safe: the commit-time check decides) and says so in an error
log line naming the setting to check. An ``https://`` URL is verified against the CA certificates
in ``tidemark.writer.coordinator.tls.ca.location`` (read on the driver too), else the system's.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.config import refuse_unknown_keys
from tidemark.errors import (
    CoordinatorError,
    CoordinatorUnavailableError,
    InstantStateError,
    TableError,
    WriteConflictError,
)
from tidemark.storage.base import Storage, canonical_location
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.conflict import EarlyConflictDetector, WriteStart, file_group_of_data_file
from tidemark.table.markers import IOType, Marker, create_marker
from tidemark.timeline import Instant, State, still_pending
from tidemark.tls import TlsFailure, check_ca_file, openssl_reason, tls_failure

_log = logging.getLogger("tidemark.coordinator")

#: the writes whose refused token this process has logged: the driver and every task of a write
#: meet the same refusal, which is said once (an error, among many warnings, is meant to stand out)
_refusals_told: set[str] = set()
_refusals_mutex = threading.Lock()


def _tell_refusal(instant: str, message: str) -> None:
    with _refusals_mutex:
        if instant in _refusals_told:
            return
        _refusals_told.add(instant)
    _log.error("write %s: %s", instant, message)


#: the Hudi setting that sends markers to the coordinator, and tidemark's for where it is
MARKERS_TYPE_KEY = "hoodie.write.markers.type"
COORDINATOR_URL_KEY = "tidemark.writer.coordinator.url"
#: how long a writer waits for one answer (a marker request waits for its batch to be written)
TIMEOUT_KEY = "tidemark.writer.coordinator.timeout.ms"
DEFAULT_TIMEOUT_MS = 10_000
#: the file holding the API token (writers and the coordinator alike); the token itself is never a
#: setting, so that it shows in no command line, no printed conf and no Spark UI
TOKEN_FILE_KEY = "tidemark.writer.coordinator.token.file"
TOKEN_KEY = "tidemark.writer.coordinator.token"
#: CA certificates (PEM) an ``https://`` coordinator is verified against (else the system's)
TLS_CA_KEY = "tidemark.writer.coordinator.tls.ca.location"
#: the coordinator's own settings: who may call it ("token", the default, or "none"), the marker
#: API over TLS (its certificate chain and private key, PEM files), and the largest body it takes
AUTH_KEY = "tidemark.writer.coordinator.auth"
TLS_CERT_KEY = "tidemark.writer.coordinator.tls.cert.file"
TLS_KEY_KEY = "tidemark.writer.coordinator.tls.key.file"
MAX_BODY_KEY = "tidemark.writer.coordinator.max.body.bytes"
#: every ``tidemark.writer.coordinator.*`` key. Writers and the coordinator refuse any other: a
#: misspelt key would leave its setting at the default (a writer without the coordinator, with no
#: token; a coordinator serving its token-protected API over plain HTTP). One conf may serve both,
#: so each takes the other's keys (and does not read them)
COORDINATOR_PREFIX = "tidemark.writer.coordinator."
COORDINATOR_KEYS = (
    AUTH_KEY,
    TOKEN_FILE_KEY,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    MAX_BODY_KEY,
    COORDINATOR_URL_KEY,
    TIMEOUT_KEY,
    TLS_CA_KEY,
)


class CoordinatorAuthError(CoordinatorError):
    """The writer-coordinator refused the request's token (HTTP 401), its TLS certificate did not
    verify, or the URL's scheme is not what its port speaks: a misconfiguration on one side, which
    waiting does not cure."""


#: the longest API token taken (the chart generates 48 characters)
MAX_TOKEN_BYTES = 4096


def read_token_file(path: str) -> str:
    """The API token in the file ``path`` (surrounding whitespace stripped). The error names the
    setting and the file, never what the file holds."""
    where = f"{TOKEN_FILE_KEY}={path}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as e:
        raise TableError(f"{where}: cannot read the API token: {e.strerror or e}") from None
    if len(raw.strip()) > MAX_TOKEN_BYTES:
        # it goes into every request's header line, which HTTP servers limit (Python's to 64 KiB)
        raise TableError(f"{where}: the token is longer than {MAX_TOKEN_BYTES} bytes")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = None
    if token is None or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        # it goes into an HTTP header as it is: printable ASCII without spaces inside
        raise TableError(f"{where}: the token must be printable ASCII with no spaces inside (the file holds more)")
    if not token:
        raise TableError(f"{where}: the file is empty; it must hold the API token")
    return token


def refuse_inline_token(conf: Mapping[str, str]) -> None:
    """A token given as a setting would show in command lines and printed confs: refused."""
    if TOKEN_KEY in conf:
        raise TableError(
            f"{TOKEN_KEY} is not a setting: put the token in a file and set {TOKEN_FILE_KEY}=PATH "
            "(a value on a command line is visible to every user of the machine)"
        )


def coordinator_url(conf: Mapping[str, str]) -> str | None:
    """The coordinator a write should use: only with ``hoodie.write.markers.type`` set to
    TIMELINE_SERVER_BASED and a URL (an error names what is missing). A URL with DIRECT markers
    (Hudi's default) is refused, as Hudi needs the type set for its timeline server's markers: the
    write would otherwise use direct markers while its settings name a coordinator."""
    kind = conf.get(MARKERS_TYPE_KEY, "DIRECT").strip().upper()
    url = conf.get(COORDINATOR_URL_KEY, "").strip()
    if kind == "DIRECT":
        if url:
            set_as = f"is {conf[MARKERS_TYPE_KEY]!r}" if MARKERS_TYPE_KEY in conf else "is not set (DIRECT)"
            raise TableError(
                f"{COORDINATOR_URL_KEY}={url} is only used with {MARKERS_TYPE_KEY}=TIMELINE_SERVER_BASED, "
                f"and {MARKERS_TYPE_KEY} {set_as}: set it, or drop the URL for direct markers"
            )
        return None
    if kind != "TIMELINE_SERVER_BASED":
        raise TableError(f"{MARKERS_TYPE_KEY} must be DIRECT or TIMELINE_SERVER_BASED, not {kind!r}")
    if not url:
        raise TableError(f"{MARKERS_TYPE_KEY}=TIMELINE_SERVER_BASED needs {COORDINATOR_URL_KEY}=http://HOST:PORT")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise TableError(f"{COORDINATOR_URL_KEY} must be an http(s) URL, not {url!r}")
    return url.rstrip("/")


def coordinator_timeout_s(conf: Mapping[str, str]) -> float:
    text = conf.get(TIMEOUT_KEY, str(DEFAULT_TIMEOUT_MS)).strip()
    if not text.isdigit() or int(text) < 1:
        raise TableError(f"{TIMEOUT_KEY} must be a positive number of milliseconds, not {text!r}")
    return int(text) / 1000


@dataclass(frozen=True)
class CoordinatorEndpoint:
    """How a write reaches its coordinator, read from the write's conf once, on the driver, and
    carried to the tasks in their plan (pickled): executors need neither the token file nor the
    CA file mounted. The token is never in a repr, so a logged plan does not show it."""

    url: str
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000
    token: str | None = field(default=None, repr=False)
    #: the CA certificates (PEM text) an https URL is verified against; None: the system's
    ca_pem: str | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> CoordinatorEndpoint | None:
        """The write's coordinator, or None for direct markers (:func:`coordinator_url`); a token
        or CA file that cannot be read is an error here, before the write starts."""
        refuse_inline_token(conf)
        try:
            refuse_unknown_keys(conf, COORDINATOR_PREFIX, COORDINATOR_KEYS, "writer-coordinator")
        except ValueError as e:
            raise TableError(str(e)) from None
        url = coordinator_url(conf)
        if url is None:
            return None
        token_file = conf.get(TOKEN_FILE_KEY, "").strip()
        ca_file = conf.get(TLS_CA_KEY, "").strip()
        ca_pem = None
        if ca_file:
            if urllib.parse.urlsplit(url).scheme != "https":  # the scheme in any case, as the client reads it
                raise TableError(f"{TLS_CA_KEY} is set but {COORDINATOR_URL_KEY}={url} is not an https:// URL")
            try:
                check_ca_file(TLS_CA_KEY, ca_file)
            except ValueError as e:
                raise TableError(str(e)) from None
            try:  # the tasks get the text, not the file
                with open(ca_file, "rb") as f:
                    ca_pem = _pem_certificates(f.read())
                ssl.create_default_context(cadata=ca_pem)
            except (OSError, ssl.SSLError) as e:
                raise TableError(f"{TLS_CA_KEY}: file {ca_file} is not PEM text the tasks can load: {e}") from None
        return cls(url, coordinator_timeout_s(conf), read_token_file(token_file) if token_file else None, ca_pem)

    def client(self, table: str) -> CoordinatorClient:
        # a relative path would be taken relative to the coordinator's own working directory
        location = canonical_location(table)
        return CoordinatorClient(self.url, location, self.timeout_s, token=self.token, ca_pem=self.ca_pem)


def _pem_certificates(data: bytes) -> str:
    """The PEM certificate blocks of a CA bundle, as the ASCII text ``cadata`` takes: OpenSSL skips
    the text around them when it reads the file (bundles carry comments, some not ASCII)."""
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]*?-----END CERTIFICATE-----", data)
    return "\n".join(b.decode("ascii") for b in blocks) + "\n"


def conflict_from_json(detail: Mapping[str, Any]) -> WriteConflictError:
    return WriteConflictError(
        str(detail.get("message") or "write conflict"),
        instant=str(detail.get("instant", "")),
        other=str(detail.get("other", "")),
        file_groups=tuple(str(g) for g in detail.get("file_groups") or ()),
        stage=str(detail.get("stage", "early")),
    )


def conflict_to_json(error: WriteConflictError) -> dict[str, Any]:
    return {
        "message": str(error).splitlines()[0],
        "instant": error.instant,
        "other": error.other,
        "file_groups": list(error.file_groups),
        "stage": error.stage,
    }


@dataclass(frozen=True)
class CoordinatorClient:
    """Requests to one coordinator for one table, over one kept-alive connection per thread (a
    task sends a request per file: a new TCP connection each time would cost a handshake and fill
    the server's accept queue)."""

    url: str
    table: str
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000
    #: the API token sent as ``Authorization: Bearer``; never in a repr
    token: str | None = field(default=None, repr=False)
    #: CA certificates (PEM text) an https URL is verified against; None: the system's
    ca_pem: str | None = field(default=None, repr=False)
    _local: threading.local = field(default_factory=threading.local, compare=False, repr=False)
    _tls: list[ssl.SSLContext] = field(default_factory=list, compare=False, repr=False)
    #: set once the coordinator has answered a request: its scheme is right
    _answered: list[bool] = field(default_factory=list, compare=False, repr=False)

    def _tls_context(self) -> ssl.SSLContext:
        # one context for all of the client's threads (loading CAs costs milliseconds)
        if not self._tls:
            self._tls.append(
                ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else ssl.create_default_context()
            )
        return self._tls[0]

    def _connection(self, fresh: bool) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and not fresh:
            return conn
        if conn is not None:
            conn.close()
        parts = urllib.parse.urlsplit(self.url)
        host = parts.hostname or "127.0.0.1"
        if parts.scheme == "https":
            # kept alive like a plain one: the TLS handshake is paid once per thread, not per marker
            conn = http.client.HTTPSConnection(host, parts.port, timeout=self.timeout_s, context=self._tls_context())
        else:
            conn = http.client.HTTPConnection(host, parts.port, timeout=self.timeout_s)
        conn.connect()
        if conn.sock is not None:  # small requests on a kept-alive connection: no Nagle delay
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._local.conn = conn
        return conn

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        target = f"{self.url}{path}"
        data = None if body is None else json.dumps({"table": self.table, **body}).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        prefix = urllib.parse.urlsplit(self.url).path.rstrip("/")
        # every request is idempotent (a marker made twice is made once), so a connection the
        # server closed while idle (or a coordinator restarted since: over TLS, an EOF) is simply
        # tried again on a new one
        for attempt in range(2):
            conn: http.client.HTTPConnection | None = None
            try:
                conn = self._connection(fresh=attempt > 0)
                conn.request(method, prefix + path, body=data, headers=headers)
                response = conn.getresponse()
                status, raw = response.status, response.read()
                if not self._answered:
                    self._answered.append(True)
            except (
                http.client.RemoteDisconnected,
                ConnectionResetError,
                BrokenPipeError,
                ssl.SSLEOFError,
                ssl.SSLZeroReturnError,
            ) as e:
                if attempt == 0:
                    continue
                if conn is not None:
                    conn.close()
                self._local.conn = None
                hint = ""
                if (
                    not isinstance(e, ssl.SSLError)
                    and urllib.parse.urlsplit(self.url).scheme == "http"
                    and not self._answered
                ):
                    # a TLS listener drops plain HTTP at once, on a new connection too; so does
                    # a coordinator that died with the request in hand
                    hint = (
                        f" (the coordinator stopped, or the scheme of {COORDINATOR_URL_KEY} is wrong for that port:"
                        " a TLS port wants https://)"
                    )
                raise CoordinatorUnavailableError(f"{method} {target}: {e}{hint}") from None
            except ssl.SSLError as e:
                if conn is not None:
                    conn.close()
                self._local.conn = None
                raise self._tls_refusal(e) or CoordinatorUnavailableError(f"{method} {target}: {e}") from None
            except (OSError, http.client.HTTPException) as e:
                if conn is not None:
                    conn.close()
                self._local.conn = None
                raise CoordinatorUnavailableError(f"{method} {target}: {e}") from None
            if status == 401:
                sent = "" if self.token is not None else f" (none was sent: the write's conf has no {TOKEN_FILE_KEY})"
                raise CoordinatorAuthError(
                    f"the writer-coordinator at {self.url} refused the token{sent}: check {TOKEN_FILE_KEY}"
                )
            answer = _json(raw, target)
            if status >= 500:
                raise CoordinatorUnavailableError(f"{method} {target}: {status} {answer.get('error', '')}")
            return status, answer
        raise AssertionError("unreachable")

    def _tls_refusal(self, e: ssl.SSLError) -> CoordinatorAuthError | None:
        """The misconfiguration a failed TLS handshake shows, with the setting (or file) to fix;
        None for a failure that says nothing about one (it is then the coordinator being away)."""
        where = f"the writer-coordinator at {self.url}"
        kind = tls_failure(e)
        why = e.verify_message if isinstance(e, ssl.SSLCertVerificationError) else openssl_reason(e)
        if kind is TlsFailure.NAME:
            host = urllib.parse.urlsplit(self.url).hostname
            return CoordinatorAuthError(
                f"{where} presented a certificate that does not name {host} ({why}): "
                f"set {COORDINATOR_URL_KEY} to a host the certificate names, or add {host} to the certificate"
            )
        if kind is TlsFailure.EXPIRED:
            return CoordinatorAuthError(
                f"{where} presented a certificate that does not verify ({why}): "
                "renew the writer-coordinator's certificate (or check this machine's clock)"
            )
        if kind is TlsFailure.UNTRUSTED:
            return CoordinatorAuthError(
                f"{where} presented a certificate that does not verify ({why}): check {TLS_CA_KEY}"
            )
        if kind is TlsFailure.NOT_TLS:
            return CoordinatorAuthError(
                f"{where} does not speak TLS on that port ({why}): "
                f"is the scheme of {COORDINATOR_URL_KEY} right for that port? a plain port wants http://"
            )
        return None

    def _ok(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        status, answer = self._call(method, path, body)
        if status >= 400:
            raise CoordinatorError(f"{method} {self.url}{path}: {status} {answer.get('error', answer)}")
        return answer

    def _query(self, path: str, instant: str) -> str:
        return f"{path}?{urllib.parse.urlencode({'table': self.table, 'instant': instant})}"

    def register(
        self, start: WriteStart, config: ConcurrencyConfig, renew: bool = False, action: str = "deltacommit"
    ) -> None:
        """Register ``start`` (or renew it). Raises :class:`InstantStateError` for a renewal of a
        write that is no longer pending (committed, or rolled back by another process), and
        :class:`CoordinatorError` for a first registration the coordinator refuses (the write then
        uses direct markers, and its commit-time check decides)."""
        path = "/v1/writes/renew" if renew else "/v1/writes/register"
        body = {
            "instant": start.instant,
            "start": start.to_json(),
            "heartbeat_interval_ms": config.heartbeat_interval_ms,
            "tolerable_misses": config.heartbeat_tolerable_misses,
            "check_commit_conflict": config.early_detection and config.early_check_commit_conflict,
            "early_detection": config.early_detection,
            "action": action,
        }
        status, answer = self._call("POST", path, body)
        if status == 410 and renew:  # a first registration refused falls back to direct markers
            raise InstantStateError(f"the writer-coordinator at {self.url}: {answer.get('error', 'write is over')}")
        if status >= 400:
            raise CoordinatorError(f"POST {self.url}{path}: {status} {answer.get('error', answer)}")

    def end(self, instant: str, outcome: str, conflict: WriteConflictError | None = None) -> None:
        body: dict[str, Any] = {"instant": instant, "outcome": outcome}
        if conflict is not None:
            body["conflict"] = conflict_to_json(conflict)
        self._ok("POST", "/v1/writes/end", body)

    def create_marker(self, marker: Marker, early_detection: bool | None = None) -> bool:
        """Record ``marker`` (once its batch is on storage); whether it was new. Raises
        :class:`WriteConflictError` when the coordinator found a conflict for its file group.
        ``early_detection``: the write's setting, which a coordinator that has not seen the write
        register applies (None: it applies its own until the write's next renewal)."""
        return self.create_markers(marker.instant, [marker], early_detection)[0]

    def create_markers(
        self, instant: str, markers: Sequence[Marker], early_detection: bool | None = None
    ) -> list[bool]:
        """:meth:`create_marker` for several markers of ``instant`` in one request: all recorded,
        or none when one of their file groups is contested (:class:`WriteConflictError`)."""
        body: dict[str, Any] = {"instant": instant, "markers": [m.name for m in markers]}
        if early_detection is not None:
            body["early_detection"] = early_detection
        status, answer = self._call("POST", "/v1/markers/create", body)
        if status == 409 and isinstance(answer.get("conflict"), dict):
            raise conflict_from_json(answer["conflict"])
        if status == 410:  # the write completed or was rolled back: this task is a zombie
            raise InstantStateError(f"the writer-coordinator at {self.url}: {answer.get('error', 'write is over')}")
        if status >= 400:
            raise CoordinatorError(f"POST {self.url}/v1/markers/create: {status} {answer.get('error', answer)}")
        return [bool(c) for c in answer.get("created") or []]

    def markers(self, instant: str) -> list[str]:
        return [str(m) for m in self._ok("GET", self._query("/v1/markers", instant)).get("markers", [])]

    def markers_exist(self, instant: str) -> bool:
        return bool(self._ok("GET", self._query("/v1/markers/exists", instant)).get("exists"))

    def delete_markers(self, instant: str) -> None:
        self._ok("POST", "/v1/markers/delete", {"instant": instant})

    def check(self, instant: str, file_groups: Iterable[str]) -> WriteConflictError | None:
        answer = self._ok("POST", "/v1/conflicts/check", {"instant": instant, "file_groups": sorted(file_groups)})
        found = answer.get("conflict")
        return conflict_from_json(found) if isinstance(found, dict) else None


def _json(raw: bytes, where: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        raise CoordinatorUnavailableError(f"{where} answered with something that is not JSON: {raw[:200]!r}") from None
    return value if isinstance(value, dict) else {"value": value}


# --- marker writers ------------------------------------------------------------------------------


@dataclass
class DirectMarkerWriter:
    """Hudi's direct markers, one file each, with the direct early check when it is on.

    ``action``, when given (a write's task), makes each marker only while the write is still
    pending, as the coordinator's 410 does: a task attempt that goes on after its write completed
    (a speculative copy that lost, a cancelled job) or was rolled back (its driver stalled past its
    heartbeat) is a zombie, stopped before it marks or writes anything more."""

    storage: Storage
    instant: str
    detector: EarlyConflictDetector | None = None
    action: str | None = None

    def prepare(self, files: Sequence[tuple[str, IOType]]) -> None:
        """Nothing: a direct marker costs one request whenever it is made."""

    def create(self, data_path: str, io_type: IOType) -> None:
        if self.action is not None:
            self._check_pending(self.action)
        create_marker(self.storage, self.instant, data_path, io_type)
        if self.detector is not None:
            group = file_group_of_data_file(data_path)
            if group is not None:
                self.detector.check([group])

    def _check_pending(self, action: str) -> None:
        # two HEADs per data file; a write that ends between them and the marker still gets a
        # zombie's file (its task takes it away at its end: check_write_pending)
        check_write_pending(self.storage, self.instant, action)


def check_write_pending(storage: Storage, instant: str, action: str) -> None:
    """Raise :class:`InstantStateError` when the write ``instant`` is no longer pending (completed,
    or rolled back): a task attempt still at work for it is a zombie."""
    if not still_pending(storage, Instant(instant, action, State.INFLIGHT)):
        raise InstantStateError(
            f"write {instant} on {storage.uri} is no longer pending (completed, or rolled back): "
            "this task attempt is a zombie and writes nothing more"
        )


class CoordinatorMarkerWriter:
    """Markers through the coordinator (timeline-server-based), checked there against what it
    holds in memory; direct markers once it cannot be reached, for the rest of this task.

    Each request says whether the write detects conflicts early: it does when its direct fallback
    checks (has a detector). A coordinator that has not seen the write register (restarted since
    the driver registered it, or another replica) then checks it as the write asked, not by its
    own default."""

    def __init__(self, client: CoordinatorClient, instant: str, fallback: DirectMarkerWriter) -> None:
        self.client = client
        self.instant = instant
        self.fallback = fallback
        self.early_detection = fallback.detector is not None
        self._direct = False
        self._mutex = threading.Lock()
        self._prepared: set[str] = set()  # data files the coordinator holds markers of already

    @property
    def fell_back(self) -> bool:
        return self._direct

    def prepare(self, files: Sequence[tuple[str, IOType]]) -> None:
        """All of ``files``' markers in one request, checked together (a conflict stops the task
        before its first byte); nothing on failure: each file's marker is then made on its own."""
        if self._direct or not files:
            return
        try:
            self.client.create_markers(
                self.instant, [Marker(self.instant, path, io) for path, io in files], self.early_detection
            )
        except CoordinatorError as e:
            self._fall_back(e)
            return
        self._prepared.update(path for path, _ in files)

    def create(self, data_path: str, io_type: IOType) -> None:
        if data_path in self._prepared:
            return
        if not self._direct:
            try:
                self.client.create_marker(Marker(self.instant, data_path, io_type), self.early_detection)
                return
            except CoordinatorError as e:
                self._fall_back(e)
        self.fallback.create(data_path, io_type)

    def _fall_back(self, error: CoordinatorError) -> None:
        with self._mutex:
            if not self._direct:
                self._direct = True
                COUNTERS.add("coordinator_fallbacks")
                if isinstance(error, CoordinatorAuthError):
                    _tell_refusal(self.instant, f"{error}; using direct markers instead")
                    return
                _log.warning(
                    "write %s: the writer-coordinator at %s failed (%s); using direct markers instead",
                    self.instant,
                    self.client.url,
                    error,
                )


class CoordinatorSession:
    """A write's driver and the coordinator: the write registered, renewed every heartbeat
    interval (the coordinator writes the heartbeat file too; the driver's own heartbeat keeps
    beating, so the write stays live if the coordinator goes away) and ended with its outcome.
    Nothing here raises: a coordinator that fails is logged, and the write goes on without it."""

    def __init__(
        self, client: CoordinatorClient, start: WriteStart, config: ConcurrencyConfig, action: str = "deltacommit"
    ) -> None:
        self.client = client
        self.start = start
        self.config = config
        self.action = action
        self.registered = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def instant(self) -> str:
        return self.start.instant

    def open(self) -> bool:
        """Register the write; whether the coordinator took it (else: direct markers)."""
        try:
            self.client.register(self.start, self.config, action=self.action)
        except CoordinatorAuthError as e:
            # safe (direct markers, and the commit-time check decides), but a misconfiguration a
            # warning would hide among others: said as an error, once per write
            COUNTERS.add("coordinator_fallbacks")
            _tell_refusal(self.instant, f"{e}; this write uses direct markers instead")
            return False
        except CoordinatorError as e:
            COUNTERS.add("coordinator_fallbacks")
            _log.warning(
                "write %s: the writer-coordinator at %s cannot be used (%s); using direct markers",
                self.instant,
                self.client.url,
                e,
            )
            return False
        self.registered = True
        if self.config.heartbeat_interval_ms > 0:
            self._thread = threading.Thread(target=self._renew, name=f"coordinator-{self.instant}", daemon=True)
            self._thread.start()
        return True

    def _renew(self) -> None:
        while not self._stop.wait(self.config.heartbeat_interval_ms / 1000):
            try:
                self.client.register(self.start, self.config, renew=True, action=self.action)
            except InstantStateError as e:
                # over for good (rolled back by another process): renewing again changes nothing,
                # and a warning every interval until the driver notices buried the one that matters
                _log.warning(
                    "write %s: no longer pending (%s); no more renewals through the writer-coordinator, "
                    "and its commit will be refused",
                    self.instant,
                    e,
                )
                return
            except CoordinatorError as e:
                _log.warning("write %s: renewing through the writer-coordinator failed: %s", self.instant, e)

    def check(self) -> WriteConflictError | None:
        """A conflict the coordinator holds for this write (found at another task's marker, or by
        its own periodic check); :class:`CoordinatorError` when it cannot answer."""
        return self.client.check(self.instant, ())

    def stop_renewing(self) -> None:
        """No more heartbeats through the coordinator: before the commit or the rollback deletes
        the heartbeat file, which a late renewal would otherwise write again."""
        self._stop.set()
        if self._thread is not None:
            # a renewal under way finishes (at most one request's timeout) before the heartbeat
            # file is deleted; the coordinator refuses one that comes after the write is over
            self._thread.join(timeout=self.client.timeout_s + 1)

    def close(self, outcome: str, conflict: WriteConflictError | None = None) -> None:
        self.stop_renewing()
        if not self.registered:
            return
        try:
            self.client.end(self.instant, outcome, conflict)
        except CoordinatorError as e:
            _log.warning("write %s: telling the writer-coordinator it %s failed: %s", self.instant, outcome, e)
