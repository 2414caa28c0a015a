"""The writer-coordinator: markers over HTTP (Hudi's timeline-server-based markers, batched into
``MARKERS<N>`` files), early conflict detection against what it holds in memory, heartbeats for
the writes it serves, and write events on Kafka.

Safety never depends on it: the commit-time check under the table lock decides, and writers that
cannot reach it use direct markers. See :mod:`tidemark.table.coordinator_client` for the API and
:mod:`tidemark_services.coordinator_state` for what it holds per table.

HTTP is the standard library's ``ThreadingHTTPServer``: one thread per connection, JSON bodies,
no framework to keep up to date; a marker request waits for its batch to be written, which is
what a thread per request suits.

Access: every request needs ``Authorization: Bearer <token>``, the token read at start from the
file ``tidemark.writer.coordinator.token.file`` names (401 otherwise, nothing changed). Without
that file the coordinator does not start, unless ``tidemark.writer.coordinator.auth=none`` says
the API is for anyone who can connect (a laptop, a demo). TLS is on with
``tidemark.writer.coordinator.tls.cert.file`` and ``...tls.key.file``.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from tidemark.cli.options import port_number
from tidemark.config import check_switches, conf_value, refuse_unknown_keys
from tidemark.errors import (
    InvalidLocationError,
    MarkerError,
    StorageError,
    TableNotFoundError,
    TidemarkError,
    WriteConflictError,
)
from tidemark.events import EventType, TimelineEvent
from tidemark.kafka_adapter import quiet_kafka_client_logs
from tidemark.kafka_security import KafkaSecurity, refuse_encrypted_key
from tidemark.storage import S3Options, canonical_location, s3_storage_class
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.conflict import WriteStart
from tidemark.table.coordinator_client import (
    AUTH_KEY,
    COORDINATOR_KEYS,
    COORDINATOR_PREFIX,
    MAX_BODY_KEY,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    TOKEN_FILE_KEY,
    conflict_from_json,
    conflict_to_json,
    read_token_file,
    refuse_inline_token,
)
from tidemark.table.markers import delete_markers, list_markers, markers_folder
from tidemark.table.properties import read_properties
from tidemark.timeline.instant import WRITE_ACTIONS
from tidemark_services.coordinator_state import (
    BATCH_INTERVAL_KEY,
    BATCH_THREADS_KEY,
    TableState,
    Write,
    parse_marker,
)
from tidemark_services.http import MonitoringServer
from tidemark_services.main import build_parser as service_parser
from tidemark_services.main import listening, log_settings
from tidemark_services.runtime import EventService, ServiceMetrics, open_table

log = logging.getLogger("tidemark.coordinator")

NAME = "writer-coordinator"
HANDLES = frozenset({EventType.INSTANT_COMPLETED})
OUTCOMES = ("committed", "aborted", "conflicted")
#: markers one request may declare (a task's new files; a 1 MiB body holds about 10,000 names)
MAX_MARKERS_PER_REQUEST = 10_000
#: an oversized body is read and dropped up to this much before the answer (beyond: cut off)
_DRAIN_LIMIT = 64 << 20
#: the TLS certificate's files are looked at for a renewal at most this often
_CERT_CHECK_INTERVAL_S = 5.0
#: a TLS handshake that takes longer is given up (a client that connects and says nothing)
_HANDSHAKE_TIMEOUT_S = 30
#: refused requests are logged at most this often (each is counted): a misconfigured writer, or
#: someone trying tokens, must not flood the log
_REFUSAL_LOG_INTERVAL_S = 60.0
#: an error answer (and its log line) says at most this many characters: a request's table path
#: may be kilobytes long, and is echoed in the reason
_MAX_REASON_CHARS = 1000


def _shortened(text: str) -> str:
    """``text`` cut in its middle to :data:`_MAX_REASON_CHARS`: its start and its end (the why) stay."""
    if len(text) <= _MAX_REASON_CHARS:
        return text
    half = _MAX_REASON_CHARS // 2
    return f"{text[:half]} ... ({len(text) - 2 * half} characters cut) ... {text[-half:]}"


@dataclass(frozen=True)
class CoordinatorSettings:
    batch_interval_ms: int = 50
    batch_threads: int = 20
    max_body_bytes: int = 1 << 20
    concurrency: ConcurrencyConfig = field(default_factory=ConcurrencyConfig)

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> CoordinatorSettings:
        def number(key: str, default: int, least: int) -> int:
            text = conf_value(conf, key, default=str(default))
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {text!r}") from None
            if value < least:
                raise ValueError(f"{key} must be at least {least}, got {value}")
            return value

        return cls(
            batch_interval_ms=number(BATCH_INTERVAL_KEY, cls.batch_interval_ms, 1),
            batch_threads=number(BATCH_THREADS_KEY, cls.batch_threads, 1),
            max_body_bytes=number(MAX_BODY_KEY, cls.max_body_bytes, 256),
            concurrency=ConcurrencyConfig.from_conf(conf),
        )


def certificate_dates(path: str) -> tuple[float | None, float | None]:
    """When the first certificate in the PEM file ``path`` becomes valid and when it expires
    (seconds since the epoch), each None when it cannot be read. The standard library parses
    certificates only in this private function; ``cryptography`` is not a dependency of the services."""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError, ssl.SSLError):
        return None, None
    return _cert_time(decoded, "notBefore"), _cert_time(decoded, "notAfter")


def _cert_time(decoded: Mapping[str, Any], field: str) -> float | None:
    try:
        return float(ssl.cert_time_to_seconds(decoded[field]))
    except (KeyError, ValueError):
        return None


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def _out_of_date(not_before: float | None, not_after: float | None) -> str | None:
    """Why a certificate with these dates is not valid now (``expired ...``), or None (dates that
    cannot be read count as valid: the handshake judges them)."""
    now = time.time()
    if not_after is not None and now >= not_after:
        return f"expired {_utc(not_after)}"
    if not_before is not None and now < not_before:
        after = "unreadable" if not_after is None else _utc(not_after)
        return f"is not valid before {_utc(not_before)} (notAfter {after})"
    return None


class ServedCertificate:
    """The marker API's TLS certificate and key, loaded again when their files change: cert-manager
    renews a mounted Secret in place and nothing restarts the pod, so the renewed certificate must
    be served without a restart. The files are looked at every :data:`_CERT_CHECK_INTERVAL_S` at
    most; a pair that does not load (half written: the certificate new, its key not yet) keeps the
    one served, and is said once. So does a pair that has expired, or is not valid yet, while the
    one served is valid (writers would refuse it): it is served once the previous one expires, or
    once it becomes valid."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert = cert
        self.key = key
        self._mutex = threading.Lock()
        self._stamp = self._stamps()
        self._refused: tuple[Any, ...] | None = None  # the stamp of a pair that did not load
        # the stamp and dates of a pair that loads but is out of date, kept from the served one
        self._held: tuple[tuple[Any, ...], float | None, float | None] | None = None
        self._checked = time.monotonic()
        self.context, self.not_before, self.not_after = self._load()

    def _stamps(self) -> tuple[Any, ...]:
        # a Secret volume swaps a symlink: the inode changes, the mtime need not
        stamps: list[Any] = []
        for path in (self.cert, self.key):
            try:
                st = os.stat(path)
            except OSError:
                stamps.append(None)
            else:
                stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _load(self) -> tuple[ssl.SSLContext, float | None, float | None]:
        """A new context with the files' certificate and key (a ValueError naming both files when
        they do not load), and the certificate's dates: handshakes under way keep the context they
        started with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            refuse_encrypted_key(TLS_KEY_KEY, self.key)  # OpenSSL would ask for its passphrase on the terminal
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ValueError(f"{TLS_CERT_KEY}={self.cert}, {TLS_KEY_KEY}={self.key}: cannot load them: {e}") from None
        return (context, *certificate_dates(self.cert))

    def current(self) -> ssl.SSLContext:
        """The context to serve with: the files loaded again first if they changed."""
        if time.monotonic() - self._checked < _CERT_CHECK_INTERVAL_S:
            return self.context
        with self._mutex:
            if time.monotonic() - self._checked < _CERT_CHECK_INTERVAL_S:
                return self.context
            self._checked = time.monotonic()
            stamp = self._stamps()
            if stamp == self._stamp or stamp == self._refused:
                return self.context
            if self._held is not None and self._held[0] == stamp and self._keeps_served(*self._held[1:]):
                return self.context
            try:
                context, not_before, not_after = self._load()
            except ValueError as e:
                self._refused = stamp
                log.warning("TLS certificate not loaded again, the previous one is still served: %s", e)
                return self.context
            stale = _out_of_date(not_before, not_after)
            if stale is not None and self._keeps_served(not_before, not_after):
                if self._held is None or self._held[0] != stamp:  # said once per pair
                    log.warning(
                        "TLS certificate in %s=%s not loaded again: it %s; the previous certificate (%s) is "
                        "still served",
                        TLS_CERT_KEY,
                        self.cert,
                        stale,
                        self.validity(),
                    )
                self._held = (stamp, not_before, not_after)
                return self.context
            previous = self.validity()
            self.context, self.not_before, self.not_after = context, not_before, not_after
            self._stamp, self._refused, self._held = stamp, None, None
            if stale is None:
                log.info("TLS certificate loaded again from %s (%s)", self.cert, self.validity())
            else:
                log.warning(
                    "TLS certificate loaded again from %s=%s although it %s: the previous one (%s) was no "
                    "better; writers refuse it and use direct markers until it is renewed",
                    TLS_CERT_KEY,
                    self.cert,
                    stale,
                    previous,
                )
            return self.context

    def _keeps_served(self, not_before: float | None, not_after: float | None) -> bool:
        """Whether a new pair with these dates is held back: it is out of date and the served one is not."""
        return _out_of_date(not_before, not_after) is not None and _out_of_date(self.not_before, self.not_after) is None

    def validity(self) -> str:
        if self.not_after is None:
            return "its expiry date could not be read"
        stale = _out_of_date(self.not_before, self.not_after)
        return stale or f"valid until {_utc(self.not_after)}"

    def out_of_date(self) -> bool:
        return _out_of_date(self.not_before, self.not_after) is not None

    def problem(self) -> str | None:
        """What is wrong with the certificate served, for ``/healthz``; None when it is valid."""
        self.current()
        if not self.out_of_date():
            return None
        return (
            f"the TLS certificate in {TLS_CERT_KEY}={self.cert} {self.validity()}: writers refuse it and use "
            "direct markers; renew it (the renewed files are served without a restart)"
        )


@dataclass(frozen=True)
class ApiSecurity:
    """Who may use the marker API, and how it is reached: the token every request must carry
    (None: anyone, ``auth=none``) and the TLS certificate (None: plain HTTP)."""

    token: bytes | None = field(default=None, repr=False)
    tls: ServedCertificate | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> ApiSecurity:
        """Read at start; a ValueError says which setting is wrong (never what a token is)."""
        try:
            refuse_inline_token(conf)
        except TidemarkError as e:
            raise ValueError(str(e)) from None
        refuse_unknown_keys(conf, COORDINATOR_PREFIX, COORDINATOR_KEYS, "writer-coordinator")
        auth = conf.get(AUTH_KEY, "token").strip().lower()
        token_file = conf.get(TOKEN_FILE_KEY, "").strip()
        if auth not in ("token", "none"):
            raise ValueError(f"{AUTH_KEY} must be token or none, not {auth!r}")
        token = None
        if auth == "none":
            if token_file:
                raise ValueError(f"{AUTH_KEY}=none and {TOKEN_FILE_KEY} contradict each other: give one of them")
        elif not token_file:
            raise ValueError(
                f"the marker API needs a token: set {TOKEN_FILE_KEY}=PATH (a file holding it; writers set the "
                f"same key), or {AUTH_KEY}=none to let anyone who can connect use it (local use only)"
            )
        else:
            try:
                token = read_token_file(token_file).encode("ascii")
            except TidemarkError as e:
                raise ValueError(str(e)) from None
        cert = conf.get(TLS_CERT_KEY, "").strip()
        key = conf.get(TLS_KEY_KEY, "").strip()
        if bool(cert) != bool(key):
            raise ValueError(f"TLS needs both {TLS_CERT_KEY} and {TLS_KEY_KEY}, or neither")
        return cls(token, ServedCertificate(cert, key) if cert else None)


class CoordinatorMetrics(ServiceMetrics):
    def __post_init__(self) -> None:
        super().__post_init__()
        r = self.registry
        self.markers_created = Counter(
            "tidemark_coordinator_markers_created", "Markers accepted and written", ["table"], registry=r
        )
        self.conflicts = Counter(
            "tidemark_coordinator_conflicts", "Write conflicts, by where found", ["table", "stage"], registry=r
        )
        self.batch_size = Histogram(
            "tidemark_coordinator_batch_markers",
            "Markers per written batch",
            buckets=(1, 5, 10, 50, 100, 500, 1000, 5000),
            registry=r,
        )
        self.batch_latency = Histogram(
            "tidemark_coordinator_batch_seconds",
            "Time to write one batch of MARKERS files",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.request_latency = Histogram(
            "tidemark_coordinator_marker_request_seconds",
            "Marker requests, from arrival to answer (batch wait included)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=r,
        )
        self.live_writes = Gauge("tidemark_coordinator_live_writes", "Live writes", ["table"], registry=r)
        self.index_size = Gauge(
            "tidemark_coordinator_index_markers", "Markers held in memory for conflict checks", ["table"], registry=r
        )
        self.fallbacks = Counter(
            "tidemark_coordinator_fallbacks",
            "Requests answered with an error the writer falls back to direct markers on",
            ["table"],
            registry=r,
        )
        self.bad_requests = Counter(
            "tidemark_coordinator_bad_requests", "Requests refused as malformed", ["reason"], registry=r
        )
        self.unauthorized = Counter(
            "tidemark_coordinator_unauthorized",
            "Requests refused for want of a valid API token (401), by what was wrong: missing, malformed, wrong",
            ["reason"],
            registry=r,
        )
        self.tls_failures = Counter(
            "tidemark_coordinator_tls_handshake_failures", "Connections whose TLS handshake failed", registry=r
        )
        self.tls_expiry = Gauge(
            "tidemark_coordinator_tls_certificate_expiry_timestamp_seconds",
            "When the TLS certificate the marker API serves expires (Unix time)",
            registry=r,
        )


class RequestError(Exception):
    """A request that is answered with ``status`` and a reason; nothing was changed."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


def _field(body: Mapping[str, Any], name: str, kind: type = str) -> Any:
    value = body.get(name)
    if not isinstance(value, kind) or (kind is str and not value):
        raise RequestError(400, f"{name!r} must be a non-empty {kind.__name__}")
    return value


def _instant(body: Mapping[str, Any], name: str = "instant") -> str:
    instant: str = _field(body, name)
    if not instant.isdigit() or not 14 <= len(instant) <= 17:
        raise RequestError(400, f"{name} {instant!r} is not an instant time (yyyyMMddHHmmss[SSS])")
    return instant


class Coordinator:
    """The coordinator's state for every table it serves, and what each endpoint does."""

    def __init__(self, settings: CoordinatorSettings, s3: S3Options, metrics: CoordinatorMetrics) -> None:
        self.settings = settings
        self.s3 = s3
        self.metrics = metrics
        self.tables: dict[str, TableState] = {}
        self._tables_mutex = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        #: per table, the unreadable-markers error last logged (said once, not at every request)
        self._unreadable: dict[str, str] = {}
        # the files of one batch (several writes, several tables) are written at once; batches are
        # written one after another (group commit: the next gathers what came in meanwhile),
        # which measured faster than batches in parallel, each small, when storage slows down
        # under concurrent requests (see benchmarks/README.md)
        self.pool = ThreadPoolExecutor(settings.batch_threads, thread_name_prefix="markers")
        self.events: EventService | None = None  # set when the Kafka side runs
        self._stop = threading.Event()
        self._work = threading.Event()  # set when a marker was accepted: a batch is due
        self._flusher = threading.Thread(target=self._flush_forever, name="marker-batches", daemon=True)
        self._checker = threading.Thread(target=self._check_forever, name="async-checks", daemon=True)

    def start(self) -> None:
        self._flusher.start()
        self._checker.start()

    def stop(self) -> None:
        self._stop.set()
        self._work.set()
        self._flusher.join(timeout=5)
        self.flush_all()  # what was accepted last is written before the process goes
        self.pool.shutdown(wait=True)

    # --- tables -----------------------------------------------------------------------------------

    def table(self, location: str) -> TableState:
        """The state of ``location``, rebuilt from storage on first use (400/404 for a location
        that is not a table). Keyed by the location's one spelling: writers of one table that
        spell it differently (``/x/t/``, ``file:///x/t``) must meet in one index."""
        given = location
        try:
            location = canonical_location(given)
        except ValueError as e:  # urlparse's, for a malformed host
            raise RequestError(400, f"table {given!r}: {e}") from None
        with self._tables_mutex:
            state = self.tables.get(location)
            if state is not None:
                return state
            loading = self._loading.setdefault(location, threading.Lock())
        with loading:  # one rebuild per table, other tables not held up
            with self._tables_mutex:
                state = self.tables.get(location)
            if state is not None:
                return state
            try:
                storage = open_table(given, self.s3)
                started = time.monotonic()
                state = TableState.load(location, storage, self.settings.concurrency)
            except InvalidLocationError as e:
                raise RequestError(400, f"table {given!r}: {e}") from None
            except TableNotFoundError as e:
                raise RequestError(404, str(e)) from None
            log.info(
                "%s: state rebuilt from storage in %.3f s: %d pending writes, %d markers",
                location,
                time.monotonic() - started,
                len(state.writes),
                state.marker_count(),
            )
            with self._tables_mutex:
                self.tables[location] = state
                self._unreadable.pop(location, None)
            self._gauges(state)
            return state

    def unreadable_markers(self, table: object, error: MarkerError) -> None:
        """A request for ``table`` that stopped on a ``MARKERS<N>`` file on storage that cannot be
        read (damage, not the request): every writer of the table falls back to direct markers
        until that write is rolled back, which the operator learns from the log (once per table
        and error) and the fallback counter (at every such answer)."""
        location = self.fell_back(table)
        with self._tables_mutex:
            if self._unreadable.get(location) == str(error):
                return
            self._unreadable[location] = str(error)
        log.warning(
            "%s: its markers on storage cannot be read (%s); its writers use direct markers until that write is "
            "rolled back (by the next write or tidemark rollback, once its heartbeat has expired)",
            location,
            error,
        )

    def fell_back(self, table: object) -> str:
        """Count an error answer for ``table`` that its writer falls back to direct markers on;
        the table's location, as the metric names it."""
        location = str(table)
        with contextlib.suppress(ValueError):  # answered as it came
            location = canonical_location(location)
        self.metrics.fallbacks.labels(location).inc()
        return location

    def _gauges(self, state: TableState) -> None:
        self.metrics.live_writes.labels(state.location).set(state.live_writes())
        self.metrics.index_size.labels(state.location).set(state.marker_count())

    # --- writes -----------------------------------------------------------------------------------

    def register(self, body: Mapping[str, Any], renew: bool) -> dict[str, Any]:
        state = self.table(_field(body, "table"))
        instant = _instant(body)
        try:
            start = WriteStart.from_json(_field(body, "start"))
        except (ValueError, KeyError, TypeError) as e:
            raise RequestError(400, f"'start' is not a write start: {e}") from None
        if start.instant != instant:
            raise RequestError(400, f"'start' is of write {start.instant}, not {instant}")
        action = body.get("action")
        if action is not None and action not in WRITE_ACTIONS:
            # it names the write's instant file: the batches check the write on storage by it
            raise RequestError(400, f"action must be one of {', '.join(WRITE_ACTIONS)}, not {action!r}")
        self._pending(state, instant)  # no heartbeat file for a write that is not there
        if renew and not state.still_pending(instant):
            # a late renewal of a write that is over (rolled back by another process, or
            # committed): no heartbeat file written again, and no longer a conflict for others
            state.end(instant)
            self._gauges(state)
            raise RequestError(410, f"{instant} is not a pending write on {state.location}")
        interval = body.get("heartbeat_interval_ms", 60_000)
        misses = body.get("tolerable_misses", 2)
        if not isinstance(interval, int) or interval < 0 or not isinstance(misses, int) or misses < 1:
            raise RequestError(400, "heartbeat_interval_ms must be an integer >= 0 and tolerable_misses >= 1")
        write = Write(
            instant,
            start=start,
            heartbeat_interval_ms=interval,
            tolerable_misses=misses,
            early_detection=bool(body.get("early_detection", True)),
            check_commit_conflict=bool(body.get("check_commit_conflict", False)),
            action=action if action is not None else state.action_of(instant),
        )
        new = state.register(write)
        if new:  # what the coordinator holds of the table is checked against storage once per write
            self.refresh(state)
        if new and not renew:
            self._announce(TimelineEvent(EventType.WRITE_STARTED, state.location, instant, write.action, "INFLIGHT"))
        self._gauges(state)
        return {"registered": new}

    def end(self, body: Mapping[str, Any]) -> dict[str, Any]:
        state = self.table(_field(body, "table"))
        instant = _instant(body)
        outcome = _field(body, "outcome")
        if outcome not in OUTCOMES:
            raise RequestError(400, f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        conflict = None
        if outcome == "conflicted":
            detail = body.get("conflict")
            if not isinstance(detail, dict):
                raise RequestError(400, "a conflicted write needs its 'conflict'")
            try:
                if _instant(detail) != instant:
                    raise RequestError(400, f"it is of write {detail['instant']}, not {instant}")
                _instant(detail, "other")
            except RequestError as e:
                raise RequestError(400, f"'conflict': {e.reason}") from None
            try:
                conflict = conflict_from_json(detail)
            except (TypeError, ValueError) as e:
                raise RequestError(400, f"'conflict' is not a write conflict: {e}") from None
        with state.mutex:
            known = state.writes.get(instant)
            announced = known is not None and known.conflict is not None
        write = state.end(instant)
        # one this process never saw (it restarted since): named as on the timeline, not guessed
        action = write.action if write else state.action_of(instant)
        if conflict is not None and not announced:
            self._conflicted(state.location, action, conflict)
        if outcome in ("aborted", "conflicted"):
            self._announce(TimelineEvent(EventType.WRITE_ABORTED, state.location, instant, action, "ABORTED"))
        self._gauges(state)
        return {"ended": write is not None}

    def _conflicted(self, table: str, action: str, conflict: WriteConflictError) -> None:
        self.metrics.conflicts.labels(table, conflict.stage or "early").inc()
        self._announce(
            TimelineEvent(
                EventType.WRITE_CONFLICTED,
                table,
                conflict.instant,
                action,
                "CONFLICTED",
                extra={
                    "other": conflict.other,
                    "fileGroups": ",".join(conflict.file_groups),
                    "stage": conflict.stage,
                    "message": str(conflict).splitlines()[0],
                },
            )
        )

    def _announce(self, event: TimelineEvent) -> None:
        if self.events is not None:
            self.events.announce([event])

    # --- markers ----------------------------------------------------------------------------------

    def create_marker(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """One marker (``marker``) or several of one write (``markers``: a task declaring the
        files it is about to write, in one request); all accepted or, on a conflict, none."""
        started = time.monotonic()
        state = self.table(_field(body, "table"))
        instant = _instant(body)
        many = "markers" in body
        names = body.get("markers") if many else [body.get("marker")]
        if not isinstance(names, list) or not names or len(names) > MAX_MARKERS_PER_REQUEST:
            raise RequestError(400, f"'markers' must be a list of 1 to {MAX_MARKERS_PER_REQUEST} marker names")
        try:
            markers = [parse_marker(instant, name) for name in names]
        except MarkerError as e:
            raise RequestError(400, str(e)) from None
        early = body.get("early_detection")  # the writer's own setting (older writers do not send it)
        if early is not None and not isinstance(early, bool):
            raise RequestError(400, f"'early_detection' must be true or false, not {early!r}")
        self._pending(state, instant)
        results, conflict, new = state.create_markers(instant, markers, early)
        if any(r.batch is not None for r in results):
            self._work.set()
        if conflict is not None:
            if new:
                self._conflicted(state.location, state.action_of(instant), conflict)
            return 409, {"error": "conflict", "conflict": conflict_to_json(conflict)}
        # answered once the batches holding them are on storage: a marker is never acknowledged
        # before it is durable (a marker left to a later batch waits for that one too)
        deadline = time.monotonic() + max(5.0, 100 * self.settings.batch_interval_ms / 1000)
        for marker, result in zip(markers, results, strict=True):
            batch = result.batch
            while batch is not None:
                if not batch.done.wait(timeout=max(0.0, deadline - time.monotonic())):
                    self.metrics.fallbacks.labels(state.location).inc()
                    raise RequestError(503, "the marker batch was not written in time; use a direct marker")
                later = state.unflushed(instant, marker.name)
                if later is not None and batch.error is not None:
                    self.metrics.fallbacks.labels(state.location).inc()
                    raise RequestError(503, f"the marker batch was not written ({batch.error}); use direct markers")
                batch = later
        # the write may have ended while its batch was written (rolled back by another process):
        # the flush then wrote nothing for it, and its task must stop
        self._pending(state, instant)
        created = [r.created for r in results]
        self.metrics.markers_created.labels(state.location).inc(sum(created))
        self.metrics.request_latency.observe(time.monotonic() - started)
        return 200, {"created": created if many else created[0]}

    @staticmethod
    def _pending(state: TableState, instant: str) -> None:
        if not state.is_pending(instant):
            # 410, not 404: the write is over, and its task must stop rather than fall back
            raise RequestError(410, f"{instant} is not a pending write on {state.location}")

    def markers(self, query: Mapping[str, str]) -> dict[str, Any]:
        state = self.table(_field(query, "table"))
        instant = _instant(query)
        return {"markers": [m.name for m in list_markers(state.storage, instant)]}

    def markers_exist(self, query: Mapping[str, str]) -> dict[str, Any]:
        state = self.table(_field(query, "table"))
        instant = _instant(query)
        folder = markers_folder(instant).rstrip("/")
        listing = state.storage.list_dir(folder)
        return {"exists": bool(listing.files or listing.folders)}

    def delete_markers(self, body: Mapping[str, Any]) -> dict[str, Any]:
        state = self.table(_field(body, "table"))
        instant = _instant(body)
        if state.still_pending(instant):
            # its markers are how its commit removes its unaccepted attempts' files, and how a
            # rollback finds what it wrote: they go when it ends, never while it runs
            raise RequestError(
                409, f"{instant} is a pending write on {state.location}: its markers are deleted when it ends"
            )
        with state.mutex:
            state.folders.pop(instant, None)
        delete_markers(state.storage, instant)
        state.end(instant)
        self._gauges(state)
        return {"deleted": True}

    def check(self, body: Mapping[str, Any]) -> dict[str, Any]:
        state = self.table(_field(body, "table"))
        instant = _instant(body)
        groups = body.get("file_groups")
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise RequestError(400, "'file_groups' must be a list of partition/fileId strings")
        self._pending(state, instant)
        if not groups:  # the write's own: those of the markers it has made so far
            with state.mutex:
                known = state.writes.get(instant)
                groups = sorted(known.groups) if known else []
        conflict, new = state.check(instant, groups)
        if conflict is not None and new:
            self._conflicted(state.location, state.action_of(instant), conflict)
        return {"conflict": conflict_to_json(conflict) if conflict is not None else None}

    # --- background -------------------------------------------------------------------------------

    def flush_all(self) -> None:
        with self._tables_mutex:
            states = list(self.tables.values())
        for state in states:
            started = time.monotonic()
            _, count = state.flush(self.pool)
            if count:
                self.metrics.batch_size.observe(count)
                self.metrics.batch_latency.observe(time.monotonic() - started)
                self._gauges(state)

    def _flush_forever(self) -> None:
        """Group commit: an idle coordinator writes a marker's batch at once; while one batch is
        being written, the requests that arrive make up the next, written as soon as it is done.
        A batch thus gathers as many markers as storage's latency lets through, and no request
        waits a fixed interval on top; ``batch.interval_ms`` is only the longest time between
        looks (a batch whose write failed is tried again then)."""
        interval = self.settings.batch_interval_ms / 1000
        while not self._stop.is_set():
            self._work.wait(interval)
            self._work.clear()
            try:
                self.flush_all()
            except Exception:  # a flusher that dies would leave every request waiting
                log.exception("marker batch failed; trying again with the next one")

    def _check_forever(self) -> None:
        """Hudi's asynchronous detector, for writes whose tasks are all between markers: the
        timeline read again, and each live write that asked for it checked against what
        completed since it started; a conflict found is refused at its next marker."""
        config = self.settings.concurrency
        if self._stop.wait(config.async_detector_initial_delay_ms / 1000):
            return
        while True:
            with self._tables_mutex:
                states = list(self.tables.values())
            for state in states:
                try:
                    self.refresh(state)
                except (TidemarkError, OSError) as e:
                    log.warning(
                        "%s: asynchronous conflict check failed, tried again next period: %s", state.location, e
                    )
            if self._stop.wait(config.async_detector_period_ms / 1000):
                return

    def refresh(self, state: TableState) -> None:
        try:
            read_properties(state.storage)
        except TableNotFoundError:
            # the table was deleted (perhaps to be made again at the location): nothing it held
            # stands, and a new table there is rebuilt from its own storage on its next request
            log.warning("%s: the table is gone from storage; its writes and markers are forgotten", state.location)
            with self._tables_mutex:
                if self.tables.get(state.location) is state:
                    del self.tables[state.location]
            return
        state.forget_finished(state.refresh_timeline())
        with state.mutex:
            writes = [w for w in state.writes.values() if w.check_commit_conflict and w.conflict is None]
        for write in writes:
            conflict, new = state.check(write.instant, sorted(write.groups))
            if conflict is not None and new:
                self._conflicted(state.location, write.action, conflict)
        self._gauges(state)

    def on_event(self, event: TimelineEvent) -> Sequence[TimelineEvent]:
        """``instant.completed``: read the table's timeline again (the event is confirmed there,
        not taken on trust) and forget a write of ours that completed."""
        try:
            table = canonical_location(event.table)
        except ValueError:
            return []
        with self._tables_mutex:
            state = self.tables.get(table)
        if state is None:
            return []  # a table this coordinator has not served: nothing held for it
        timeline = state.refresh_timeline()
        found = timeline.find(event.instant)
        if found is not None and found.is_completed:
            state.end(event.instant)
        self.refresh(state)
        return []


# --- HTTP ------------------------------------------------------------------------------------------


def make_server(
    coordinator: Coordinator, host: str, port: int, security: ApiSecurity | None = None
) -> ThreadingHTTPServer:
    """The marker API on ``host:port``; without ``security`` open to anyone over plain HTTP (the
    process itself always passes what its settings say: :func:`main`)."""
    metrics = coordinator.metrics
    max_body = coordinator.settings.max_body_bytes
    security = security or ApiSecurity()
    token = security.token
    refusals = _RefusalLog()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a task sends many marker requests
        timeout = 300  # an idle kept-alive connection gives its thread back after this

        def setup(self) -> None:
            super().setup()
            # headers and body go out as two writes: without this, Nagle holds the body back
            # until the client's delayed ACK, 40 ms per request on a kept-alive connection
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def handle(self) -> None:
            try:
                super().handle()
            except ConnectionError as e:
                # a writer that gave up waiting (its timeout, then direct markers) or was stopped:
                # nothing is wrong here, and socketserver would print a traceback for each
                log.warning(
                    "%s closed the connection before the answer to %s (%s)",
                    self.client_address[0],
                    self.requestline or "its request",
                    type(e).__name__,
                )

        def handle_one_request(self) -> None:
            self.requestline = ""  # not the kept-alive connection's previous request
            super().handle_one_request()

        def _answer(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _drop_body(self, length: int) -> None:
            """Read a body not taken and drop it: a client still sending would otherwise see the
            connection reset instead of the answer. A large one closes the connection after."""
            if length > max_body:
                self.close_connection = True
            left = min(length, _DRAIN_LIMIT)
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)

        def _authorized(self) -> bool:
            """Whether the request carries the API token; if not, it is answered 401 here (the
            comparison takes as long whatever the token presented, and nothing of it is echoed)."""
            if token is None:
                return True
            header = self.headers.get("Authorization")
            scheme, _, presented = (header or "").strip().partition(" ")
            presented = presented.strip()
            if header is None:
                reason = "missing"
            elif scheme.lower() != "bearer" or not presented:
                reason = "malformed"
            elif hmac.compare_digest(presented.encode("utf-8", "replace"), token):
                return True
            else:
                reason = "wrong"
            metrics.unauthorized.labels(reason).inc()
            refusals.note(self.client_address[0], reason)
            length_text = self.headers.get("Content-Length")
            if length_text is not None and length_text.isdigit():
                self._drop_body(int(length_text))
            elif self.command == "POST":
                self.close_connection = True  # a body of unknown length is not read
            challenge = 'Bearer realm="tidemark-writer-coordinator"'
            if reason == "wrong":
                challenge += ', error="invalid_token"'
            self._answer(
                401,
                {"error": f"a valid API token is required (Authorization: Bearer; writers: {TOKEN_FILE_KEY})"},
                {"WWW-Authenticate": challenge},
            )
            return False

        def _body(self) -> dict[str, Any]:
            length_text = self.headers.get("Content-Length")
            if length_text is None or not length_text.isdigit():
                raise RequestError(411, "a body with a Content-Length is required")
            length = int(length_text)
            if length > max_body:
                self._drop_body(length)
                raise RequestError(413, f"the body is {length} bytes; at most {max_body} are taken")
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError as e:
                raise RequestError(400, f"the body is not JSON: {e}") from None
            except RecursionError:  # arrays or objects nested thousands deep
                raise RequestError(400, "the body is not JSON this API takes: it is nested too deeply") from None
            if not isinstance(body, dict):
                raise RequestError(400, "the body must be a JSON object")
            return body

        def _route(self, method: str) -> None:
            served = method in ("GET", "POST")
            if not served:
                self.close_connection = True  # its body, if any, is not read (nor a HEAD's answer's)
            if not self._authorized():  # before anything is looked at: no endpoint, no table
                return
            url = urllib.parse.urlsplit(self.path)
            table: object = None
            try:
                if not served:
                    raise RequestError(
                        405, f"{method} is not served: the API takes GET and POST", {"Allow": "GET, POST"}
                    )
                if method == "GET":
                    query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
                    table = query.get("table")
                    if url.path == "/v1/markers":
                        self._answer(200, coordinator.markers(query))
                    elif url.path == "/v1/markers/exists":
                        self._answer(200, coordinator.markers_exist(query))
                    else:
                        raise RequestError(404, f"no endpoint GET {url.path}")
                    return
                body = self._body()
                table = body.get("table")
                if url.path == "/v1/markers/create":
                    self._answer(*coordinator.create_marker(body))
                elif url.path == "/v1/writes/register":
                    self._answer(200, coordinator.register(body, renew=False))
                elif url.path == "/v1/writes/renew":
                    self._answer(200, coordinator.register(body, renew=True))
                elif url.path == "/v1/writes/end":
                    self._answer(200, coordinator.end(body))
                elif url.path == "/v1/markers/delete":
                    self._answer(200, coordinator.delete_markers(body))
                elif url.path == "/v1/conflicts/check":
                    self._answer(200, coordinator.check(body))
                else:
                    raise RequestError(404, f"no endpoint POST {url.path}")
            except RequestError as e:
                if e.status < 500:  # a 503 is no malformed request: counted with the fallbacks
                    metrics.bad_requests.labels(str(e.status)).inc()
                self._answer(e.status, {"error": _shortened(e.reason)}, e.headers)
            except StorageError as e:
                # the writer falls back to direct markers on it: counted, for the fallback alert
                coordinator.fell_back(table)
                log.warning("%s %s: storage failed: %s", method, url.path, _shortened(str(e)))
                self._answer(503, {"error": _shortened(f"storage failed: {e}")})
            except MarkerError as e:
                # a MARKERS file on storage that cannot be read (a request's own marker names are
                # refused as RequestError): a server-side problem, which writers fall back on
                coordinator.unreadable_markers(table, e)
                self._answer(503, {"error": _shortened(f"the table's markers on storage cannot be read: {e}")})
            except TidemarkError as e:
                self._answer(400, {"error": _shortened(str(e))})

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def __getattr__(self, name: str) -> Any:
            # any other method (PUT, DELETE, HEAD, ...) is answered as a request: the token
            # first (401 without it, as for every request), then 405; the standard library
            # would answer 501 to anyone
            if name.startswith("do_"):
                return lambda: self._route(self.command)
            raise AttributeError(name)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = _Server((host, port), Handler)
    server.tls = security.tls
    server.metrics = metrics
    return server


class _RefusalLog:
    """Refused requests in the log: the first at once, then at most one line a period with how
    many were refused meanwhile (never what token they carried)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._last = -_REFUSAL_LOG_INTERVAL_S
        self._since = 0

    def note(self, client: str, reason: str) -> None:
        with self._mutex:
            self._since += 1
            now = time.monotonic()
            if now - self._last < _REFUSAL_LOG_INTERVAL_S:
                return
            count, self._since, self._last = self._since, 0, now
        log.warning(
            "refused a request from %s: API token %s (%d refused since the last such line)", client, reason, count
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # the standard library's 5 drops connections when many tasks open theirs at once (each lost
    # SYN costs the client a second); clients keep their connection, so this is a burst allowance
    request_queue_size = 1024
    tls: ServedCertificate | None = None
    metrics: CoordinatorMetrics | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        """With TLS, the handshake is done here, on the connection's own thread: wrapping the
        listening socket would do it on the accepting thread, where one slow client holds up
        every other's connection."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(_HANDSHAKE_TIMEOUT_S)
        try:
            secured = self.tls.current().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            if self.metrics is not None:
                self.metrics.tls_failures.inc()
            log.info("TLS handshake with %s failed: %s", client_address[0], e)
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            self.shutdown_request(secured)


# --- the process -----------------------------------------------------------------------------------


HTTP_PORT_ENV = "TIDEMARK_COORDINATOR_PORT"
DEFAULT_HTTP_PORT = "9500"
HTTP_HOST_ENV = "TIDEMARK_COORDINATOR_HOST"
DEFAULT_HTTP_HOST = "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    """The services' common command line (:func:`tidemark_services.main.build_parser`) and the
    marker API's address."""
    parser = service_parser(NAME)
    parser.description = "tidemark writer-coordinator: timeline-server-based markers and early conflict detection"
    parser.add_argument(
        "--http-port",
        type=port_number,
        default=os.environ.get(HTTP_PORT_ENV, DEFAULT_HTTP_PORT),
        help=f"port of the marker API (default: ${HTTP_PORT_ENV}, else {DEFAULT_HTTP_PORT})",
    )
    parser.add_argument(
        "--http-host",
        default=os.environ.get(HTTP_HOST_ENV, DEFAULT_HTTP_HOST),
        help=f"address the marker API listens on (default: ${HTTP_HOST_ENV}, else {DEFAULT_HTTP_HOST}; "
        "0.0.0.0 in a container)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {NAME} %(levelname)s %(message)s")
    quiet_kafka_client_logs()
    try:
        check_switches(dict(args.conf))
        settings = CoordinatorSettings.from_conf(dict(args.conf))
        security = ApiSecurity.from_conf(dict(args.conf))
        kafka = KafkaSecurity.from_conf(dict(args.conf))
        if args.s3_endpoint:  # told now, not at the first marker of an s3:// table
            s3_storage_class("--s3-endpoint")
    except (TidemarkError, ValueError) as e:  # a bad --conf value is one line, not a traceback
        raise SystemExit(f"tidemark-writer-coordinator: error: {e}") from None
    if security.token is None:
        logging.warning("%s=none: the marker API serves anyone who can connect to it", AUTH_KEY)
    certificate = security.tls
    if certificate is not None and (problem := certificate.problem()) is not None:
        logging.warning("%s", problem)
    metrics = CoordinatorMetrics(NAME)
    if certificate is not None:
        served = certificate

        def expiry() -> float:
            served.current()  # at each scrape: a renewal is seen when no writer connects too
            return served.not_after or 0.0

        metrics.tls_expiry.set_function(expiry)
    coordinator = Coordinator(settings, S3Options(endpoint_url=args.s3_endpoint), metrics)
    events = EventService(
        NAME,
        args.bootstrap,
        coordinator.on_event,
        HANDLES,
        metrics,
        topic=args.topic,
        group=args.group,
        dead_letter_topic=args.dead_letter_topic,
        security=kafka,
    )
    coordinator.events = events
    prog = "tidemark-writer-coordinator"
    server = listening(
        prog,
        f"--http-port {args.http_port} on {args.http_host}",
        lambda: make_server(coordinator, args.http_host, args.http_port, security),
    )
    api = threading.Thread(target=server.serve_forever, name="http", daemon=True)

    def healthy() -> tuple[bool, str]:
        # an expired certificate is said, not failed: a restart serves the same files (a renewed
        # one is loaded without it)
        ok, detail = events.healthy()
        problem = certificate.problem() if certificate is not None else None
        return ok, f"{detail.rstrip()} ({problem})\n" if ok and problem else detail

    def ready() -> tuple[bool, str]:
        # the marker API needs no broker: events held back while Kafka fails are published later
        if not api.is_alive():
            return False, f"{NAME}: the marker API has stopped\n"
        problem = certificate.problem() if certificate is not None else None
        return True, f"{NAME}: marker API serving{f' ({problem})' if problem else ''}\n"

    monitoring = listening(
        prog,
        f"--metrics-port {args.metrics_port} on {args.metrics_host}",
        lambda: MonitoringServer(
            metrics.registry, healthy, port=args.metrics_port, host=args.metrics_host, ready=ready
        ),
    )
    log_settings(dict(args.conf))
    coordinator.start()
    api.start()
    logging.info(
        "markers on %s://%s:%d (%s); consuming %s on %s; metrics on %s:%d",
        "https" if security.tls is not None else "http",
        args.http_host,
        server.server_address[1],
        "API token required" if security.token is not None else "no API token",
        args.topic,
        args.bootstrap,
        args.metrics_host,
        monitoring.port,
    )
    try:
        code = events.run_until_stopped()
    finally:
        server.shutdown()
        coordinator.stop()
        events.close()
        monitoring.stop()
    logging.info("stopped")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
