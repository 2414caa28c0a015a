"""The writer-coordinator's API token and TLS, against the real process: requests without the token
or with a wrong one are answered 401 and change nothing (no table loaded, no write registered, no
marker on storage), writers that carry it go through, writers refused fall back to direct markers
with an error that names the setting to check, the API over TLS with a test CA (a wrong CA refused
with a clear error), startup refused without a token, and the token printed nowhere."""

from __future__ import annotations

import datetime
import http.client
import json
import logging
import pickle
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.support.kafka import TansuBroker
from tests.support.services import CoordinatorProcess, wait_until
from tests.support.tls_proxy import Issued, issue, make_ca
from tidemark.errors import CoordinatorUnavailableError, TableError
from tidemark.storage import LocalStorage
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.coordinator_client import (
    AUTH_KEY,
    COORDINATOR_KEYS,
    COORDINATOR_URL_KEY,
    TLS_CA_KEY,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    TOKEN_FILE_KEY,
    TOKEN_KEY,
    CoordinatorAuthError,
    CoordinatorClient,
    CoordinatorEndpoint,
    CoordinatorMarkerWriter,
    CoordinatorSession,
    DirectMarkerWriter,
)
from tidemark.table.markers import MARKER_TYPE_FILE, IOType, Marker, list_markers, markers_folder
from tidemark.table.write_client import begin_write
from tidemark_services.writer_coordinator import ApiSecurity

pytestmark = pytest.mark.kafka

LIVE = ConcurrencyConfig(heartbeat_interval_ms=60_000, early_detection=True)
WRONG = "not-the-token-0123456789abcdef"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Issued, Issued]:
    """The coordinator's certificate for 127.0.0.1 signed by a test CA, and another CA."""
    folder = tmp_path_factory.mktemp("certs")
    ca = make_ca(folder, "coordinator-ca")
    return issue(ca, folder, "coordinator"), make_ca(folder, "other-ca")


def _token_file(folder: Path, token: str) -> str:
    path = folder / f"token-{len(list(folder.glob('token-*')))}"
    path.write_text(token)
    return str(path)


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, body: dict[str, Any] | None, authorization: str | None
) -> tuple[int, dict[str, str], str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if authorization is not None:
        headers["Authorization"] = authorization
    conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read().decode()


def _files(storage: LocalStorage, folder: str) -> list[str]:
    root = storage.root / folder
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_requests_without_a_valid_token_get_401_and_change_nothing(
    coordinator: CoordinatorProcess, table: LocalStorage
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    assert coordinator.token is not None
    marker = f"p=1/fg-1_0-1-0_{a.instant}.parquet.marker.CREATE"
    requests: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/writes/register", {"table": location, "instant": a.instant, "start": a.start.to_json()}),
        ("POST", "/v1/markers/create", {"table": location, "instant": a.instant, "marker": marker}),
        ("POST", "/v1/markers/create", {"table": location, "instant": a.instant, "markers": [marker] * 3}),
        ("POST", "/v1/markers/delete", {"table": location, "instant": a.instant}),
        ("POST", "/v1/writes/end", {"table": location, "instant": a.instant, "outcome": "aborted"}),
        ("GET", f"/v1/markers?table={location}&instant={a.instant}", None),
        ("GET", "/v1/no-such-endpoint", None),  # no hint of which endpoints there are either
    ]
    # missing; wrong (twice: the right one with a character more is wrong too); malformed (the
    # right token with the wrong scheme, and no token)
    cases = [None, f"Bearer {WRONG}", f"bearer {coordinator.token}x", f"Basic {coordinator.token}", "Bearer "]
    before = _files(table, ".hoodie")
    conn = http.client.HTTPConnection("127.0.0.1", coordinator.http_port, timeout=10)
    for authorization in cases:
        for method, path, body in requests:
            # one kept-alive connection throughout: a refused request's body is read, not left
            # in the stream to be taken for the next request
            status, headers, text = _request(conn, method, path, body, authorization)
            assert status == 401, (authorization, path, status, text)
            assert headers["WWW-Authenticate"].startswith("Bearer "), headers
            assert "API token" in json.loads(text)["error"]
            assert WRONG not in text
            assert coordinator.token not in text

    # nothing changed: no marker, no heartbeat, no MARKERS file; the table was not even loaded
    assert _files(table, ".hoodie") == before
    assert not _files(table, markers_folder(a.instant))
    metrics = coordinator.metrics()
    assert "tidemark_coordinator_live_writes{" not in metrics
    assert coordinator.metric("tidemark_coordinator_unauthorized_total", reason="missing") == len(requests)
    assert coordinator.metric("tidemark_coordinator_unauthorized_total", reason="wrong") == 2 * len(requests)
    assert coordinator.metric("tidemark_coordinator_unauthorized_total", reason="malformed") == 2 * len(requests)
    assert coordinator.metric("tidemark_coordinator_markers_created_total", table=location) == 0

    # asked with the token, on the same connection: no write registered, no marker
    bearer = f"Bearer {coordinator.token}"
    status, _, text = _request(conn, "GET", f"/v1/markers?table={location}&instant={a.instant}", None, bearer)
    assert (status, json.loads(text)) == (200, {"markers": []})
    assert coordinator.metric("tidemark_coordinator_live_writes", table=location) == 0
    conn.close()

    # and a writer with the token goes through it: a marker in a MARKERS file
    client = coordinator.client(location)
    client.register(a.start, LIVE)
    assert client.create_marker(Marker(a.instant, marker.removesuffix(".marker.CREATE"), IOType.CREATE))
    files = _files(table, markers_folder(a.instant))
    assert MARKER_TYPE_FILE in files
    assert any(f.startswith("MARKERS") and f[7:].isdigit() for f in files), files
    assert [m.name for m in list_markers(table, a.instant)] == [marker]

    log = coordinator.log_path.read_text()
    assert "refused a request from 127.0.0.1: API token missing" in log  # the first refusal, once
    assert log.count("refused a request") == 1  # the rest counted, not each logged
    assert coordinator.token not in log
    assert WRONG not in log


def test_a_writer_with_a_wrong_token_is_told_and_falls_back_to_direct_markers(
    coordinator: CoordinatorProcess, table: LocalStorage, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    wrong = coordinator.client(location, **{TOKEN_FILE_KEY: _token_file(tmp_path, f"  {WRONG}\n")})
    with pytest.raises(CoordinatorAuthError) as refused:
        wrong.register(a.start, LIVE)
    assert str(refused.value) == (
        f"the writer-coordinator at {coordinator.url} refused the token: check {TOKEN_FILE_KEY}"
    )
    # no token at all: the message says none was sent
    endpoint = CoordinatorEndpoint(coordinator.url)
    with pytest.raises(CoordinatorAuthError, match=f"none was sent: the write's conf has no {TOKEN_FILE_KEY}"):
        endpoint.client(location).markers(a.instant)

    before = COUNTERS.snapshot()["coordinator_fallbacks"]
    with caplog.at_level(logging.WARNING, logger="tidemark.coordinator"):
        session = CoordinatorSession(wrong, a.start, LIVE)
        assert session.open() is False  # the driver: the write goes on with direct markers
        tasks = [CoordinatorMarkerWriter(wrong, a.instant, DirectMarkerWriter(table, a.instant)) for _ in range(3)]
        for task, writer in enumerate(tasks):
            writer.prepare([(f"p=1/fg-{task}{i}_0-1-0_{a.instant}.parquet", IOType.CREATE) for i in range(2)])
            writer.create(f"p=1/fg-{task}_0-1-0_{a.instant}.parquet", IOType.CREATE)
    assert all(writer.fell_back for writer in tasks)
    assert COUNTERS.snapshot()["coordinator_fallbacks"] == before + 4  # the driver once, each task once
    # said once for the write, not by every task that meets it (the write's tasks in this process)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert all("refused the token: check tidemark.writer.coordinator.token.file" in e for e in errors), errors
    assert all(a.instant in e and "direct markers" in e for e in errors), errors
    assert len(list_markers(table, a.instant)) == 3  # direct ones
    assert not any(f.startswith("MARKERS") for f in _files(table, markers_folder(a.instant)))
    assert WRONG not in caplog.text
    assert str(coordinator.token) not in caplog.text
    assert coordinator.metric("tidemark_coordinator_unauthorized_total", reason="wrong") == 5
    assert coordinator.metric("tidemark_coordinator_unauthorized_total", reason="missing") == 1
    assert WRONG not in coordinator.log_path.read_text()


def test_the_api_over_tls_verified_with_the_ca_and_refused_with_another(
    kafka_broker: TansuBroker, topics: tuple[str, str], table: LocalStorage, certs: tuple[Issued, Issued]
) -> None:
    server, other_ca = certs
    location = str(table.root)
    a = begin_write(table, "deltacommit", "upsert", LIVE)
    with CoordinatorProcess(kafka_broker.bootstrap, *topics, tls=server) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        assert coordinator.url.startswith("https://127.0.0.1:")
        client = coordinator.client(location)
        client.register(a.start, LIVE)
        names = [f"p=1/fg-{i}_0-1-0_{a.instant}.parquet" for i in range(5)]
        assert client.create_marker(Marker(a.instant, names[0], IOType.CREATE))
        conn = client._local.conn
        assert isinstance(conn.sock, ssl.SSLSocket)
        for n in names[1:]:
            assert client.create_marker(Marker(a.instant, n, IOType.CREATE))
        assert client._local.conn is conn  # kept alive: one TLS handshake for all of them
        assert {m.data_path for m in list_markers(table, a.instant)} == set(names)

        # verified against another CA, or the system's: refused, naming the setting to check
        for conf in ({TLS_CA_KEY: str(other_ca.cert)}, {TLS_CA_KEY: ""}):
            with pytest.raises(CoordinatorAuthError) as refused:
                coordinator.client(location, **conf).markers(a.instant)
            message = str(refused.value)
            assert message.startswith(f"the writer-coordinator at {coordinator.url} presented a certificate"), message
            assert "certificate verify failed" in message or "unable to get local issuer" in message, message
            assert message.endswith(f"check {TLS_CA_KEY}"), message
        # a CA bundle with a comment that is not ASCII (as distributions' bundles carry), and the
        # URL's scheme in capitals: both were refused before the write, though OpenSSL takes them
        bundle = table.root.parent / "bundle.pem"
        bundle.write_bytes("# Issuer: CN=Főtanúsítvány Root\n".encode() + server.ca.read_bytes())
        shouting = coordinator.url.replace("https://", "HTTPS://")
        endpoint = CoordinatorEndpoint.from_conf(
            {
                "hoodie.write.markers.type": "TIMELINE_SERVER_BASED",
                COORDINATOR_URL_KEY: shouting,
                TOKEN_FILE_KEY: _token_file(table.root.parent, str(coordinator.token)),
                TLS_CA_KEY: str(bundle),
            }
        )
        assert endpoint is not None
        assert endpoint.client(location).markers(a.instant) == sorted(f"{n}.marker.CREATE" for n in names)
        # plain HTTP to the TLS port: no answer, the writer falls back as if it were down, and
        # is asked whether the URL's scheme is right
        plain = CoordinatorClient(f"http://127.0.0.1:{coordinator.http_port}", location, timeout_s=5)
        with pytest.raises(CoordinatorUnavailableError) as reset:
            plain.markers(a.instant)
        assert str(reset.value).endswith(
            f"(the coordinator stopped, or the scheme of {COORDINATOR_URL_KEY} is wrong for that port: "
            "a TLS port wants https://)"
        ), str(reset.value)
        # over TLS, a wrong token is still refused
        wrong = coordinator.client(location, **{TOKEN_FILE_KEY: _token_file(table.root.parent, WRONG)})
        with pytest.raises(CoordinatorAuthError, match="refused the token"):
            wrong.markers(a.instant)
        assert coordinator.metric("tidemark_coordinator_tls_handshake_failures_total") >= 3
        assert coordinator.alive
        assert client.markers(a.instant) == sorted(f"{n}.marker.CREATE" for n in names)  # still serving
        log = coordinator.log_path.read_text()
        assert "markers on https://" in log
        assert str(coordinator.token) not in log
        assert WRONG not in log

        # restarted: the kept-alive TLS connection to the old process ends in an EOF, and the
        # request is tried again on a new one (it failed with "EOF occurred in violation of protocol")
        coordinator.stop()
        coordinator.restart()
        client.register(a.start, LIVE, renew=True)
        assert client._local.conn is not conn


def test_tls_refusals_name_what_to_fix_host_renewal_or_scheme(
    kafka_broker: TansuBroker,
    topics: tuple[str, str],
    table: LocalStorage,
    coordinator: CoordinatorProcess,
    certs: tuple[Issued, Issued],
    tmp_path: Path,
) -> None:
    """The CA is right in each case: the hint is not to check it, but what is wrong."""
    server, _ = certs
    ca = Issued(server.ca, server.ca.with_suffix(".key"), server.ca)
    day = datetime.timedelta(days=1)
    other_host = issue(ca, tmp_path, "other-host", hosts=("coord.example.com",))
    expired = issue(ca, tmp_path, "expired", valid=(-2 * day, -day))
    location = str(table.root)
    instant = begin_write(table, "deltacommit", "upsert", LIVE).instant
    for cert, expected in (
        (
            other_host,
            "presented a certificate that does not name 127.0.0.1 (IP address mismatch, certificate is not valid "
            f"for '127.0.0.1'.): set {COORDINATOR_URL_KEY} to a host the certificate names, "
            "or add 127.0.0.1 to the certificate",
        ),
        (
            expired,
            "presented a certificate that does not verify (certificate has expired): "
            "renew the writer-coordinator's certificate (or check this machine's clock)",
        ),
    ):
        with CoordinatorProcess(kafka_broker.bootstrap, *topics, tls=cert) as served:
            served.start()
            served.wait_ready()
            with pytest.raises(CoordinatorAuthError) as refused:
                served.client(location, **{TLS_CA_KEY: str(server.ca)}).markers(instant)
            assert str(refused.value) == f"the writer-coordinator at {served.url} {expected}"
            assert TLS_CA_KEY not in str(refused.value)

    # https:// to the plain port of a coordinator without TLS
    url = f"https://127.0.0.1:{coordinator.http_port}"
    with pytest.raises(CoordinatorAuthError) as refused:
        coordinator.client(location, **{COORDINATOR_URL_KEY: url, TLS_CA_KEY: str(server.ca)}).markers(instant)
    assert str(refused.value) == (
        f"the writer-coordinator at {url} does not speak TLS on that port ([SSL: WRONG_VERSION_NUMBER] wrong "
        f"version number): is the scheme of {COORDINATOR_URL_KEY} right for that port? a plain port wants http://"
    )


def test_a_certificate_renewed_in_place_is_served_without_a_restart(
    kafka_broker: TansuBroker,
    topics: tuple[str, str],
    table: LocalStorage,
    certs: tuple[Issued, Issued],
    tmp_path: Path,
) -> None:
    """cert-manager renews a mounted Secret in place and nothing restarts the pod: the coordinator
    served the certificate it started with for ever, and said ok while it had expired."""
    server, _ = certs
    ca = Issued(server.ca, server.ca.with_suffix(".key"), server.ca)
    day = datetime.timedelta(days=1)
    old = issue(ca, tmp_path / "old", "old", valid=(-2 * day, -day))  # expired already
    new = issue(ca, tmp_path / "new", "new")
    mounted = tmp_path / "tls"
    mounted.mkdir()
    crt, key = mounted / "tls.crt", mounted / "tls.key"
    crt.write_bytes(old.cert.read_bytes())
    key.write_bytes(old.key.read_bytes())
    served = Issued(crt, key, server.ca)
    location = str(table.root)
    new_expiry = x509.load_pem_x509_certificate(new.cert.read_bytes()).not_valid_after_utc.timestamp()

    def expiry() -> float:
        return coordinator.metric("tidemark_coordinator_tls_certificate_expiry_timestamp_seconds")

    with CoordinatorProcess(kafka_broker.bootstrap, *topics, tls=served) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        assert f"the TLS certificate in {TLS_CERT_KEY}={crt} expired " in coordinator.log_path.read_text()
        status, text = coordinator.health()
        assert status == 200
        assert f"the TLS certificate in {TLS_CERT_KEY}={crt} expired " in text, text
        assert "renew it (the renewed files are served without a restart)" in text, text
        assert 0 < expiry() < time.time()
        with pytest.raises(CoordinatorAuthError, match="certificate has expired"):
            coordinator.client(location).markers("20261127000000000")

        # half renewed: the new certificate with the old key does not load; the old pair is served
        crt.write_bytes(new.cert.read_bytes())
        wait_until(
            lambda: "the previous one is still served" in coordinator.log_path.read_text(),
            20,
            "the half-written pair refused",
            tick=expiry,  # a scrape looks at the files too
        )
        with pytest.raises(CoordinatorAuthError, match="certificate has expired"):
            coordinator.client(location).markers("20261127000000000")

        key.write_bytes(new.key.read_bytes())
        wait_until(lambda: expiry() == new_expiry, 20, "the renewed certificate loaded")
        assert coordinator.client(location).markers("20261127000000000") == []  # verified, no restart
        status, text = coordinator.health()
        assert (status, text) == (200, "writer-coordinator: ok\n")
        assert f"TLS certificate loaded again from {crt} (valid until " in coordinator.log_path.read_text()


def test_a_renewed_certificate_out_of_date_does_not_replace_a_valid_one(
    kafka_broker: TansuBroker,
    topics: tuple[str, str],
    table: LocalStorage,
    certs: tuple[Issued, Issued],
    tmp_path: Path,
) -> None:
    """A renewal with an expired certificate replaced the valid one, said at INFO only: writers
    then refused the coordinator and used direct markers. The valid one is kept, with a warning
    naming the file and its date; one not valid yet is kept back too; an expired one over an
    expired one is loaded, with a warning."""
    server, _ = certs
    ca = Issued(server.ca, server.ca.with_suffix(".key"), server.ca)
    day = datetime.timedelta(days=1)
    valid = issue(ca, tmp_path / "valid", "valid", valid=(-day, 30 * day))
    expired = issue(ca, tmp_path / "expired", "expired", valid=(-10 * day, -day))
    early = issue(ca, tmp_path / "early", "early", valid=(day, 30 * day))
    expired_too = issue(ca, tmp_path / "expired_too", "expired_too", valid=(-10 * day, -2 * day))
    mounted = tmp_path / "tls"
    mounted.mkdir()
    crt, key = mounted / "tls.crt", mounted / "tls.key"

    def mount(pair: Issued) -> None:
        crt.write_bytes(pair.cert.read_bytes())
        key.write_bytes(pair.key.read_bytes())

    def utc(pair: Issued, which: str = "after") -> str:
        cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        return f"{cert.not_valid_after_utc if which == 'after' else cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC"

    def expiry_of(pair: Issued) -> float:
        return x509.load_pem_x509_certificate(pair.cert.read_bytes()).not_valid_after_utc.timestamp()

    mount(valid)
    location = str(table.root)
    with CoordinatorProcess(kafka_broker.bootstrap, *topics, tls=Issued(crt, key, server.ca)) as coordinator:

        def expiry() -> float:
            return coordinator.metric("tidemark_coordinator_tls_certificate_expiry_timestamp_seconds")

        def logged(text: str) -> list[str]:
            return [line for line in coordinator.log_path.read_text().splitlines() if text in line]

        coordinator.start()
        coordinator.wait_ready()
        for pair, why in (
            (expired, f"it expired {utc(expired)}"),
            (early, f"it is not valid before {utc(early, 'before')} (notAfter {utc(early)})"),
        ):
            mount(pair)
            held = f"TLS certificate in {TLS_CERT_KEY}={crt} not loaded again: {why}; "
            wait_until(lambda: logged(held), 20, "the pair held back", tick=expiry)  # noqa: B023
            (line,) = logged(held)
            assert " WARNING " in line, line
            assert line.endswith(f"the previous certificate (valid until {utc(valid)}) is still served"), line
            assert expiry() == expiry_of(valid)
            assert coordinator.client(location).markers("20261127000000000") == []  # still verified
            assert coordinator.health() == (200, "writer-coordinator: ok\n")
        assert not logged("loaded again from")

    # the served certificate expired already: a renewal no better is loaded, said at WARNING
    mount(expired)
    with CoordinatorProcess(kafka_broker.bootstrap, *topics, tls=Issued(crt, key, server.ca)) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        mount(expired_too)
        wait_until(
            lambda: (
                coordinator.metric("tidemark_coordinator_tls_certificate_expiry_timestamp_seconds")
                == expiry_of(expired_too)
            ),
            20,
            "the expired renewal loaded",
        )
        (line,) = [
            line
            for line in coordinator.log_path.read_text().splitlines()
            if f"TLS certificate loaded again from {TLS_CERT_KEY}={crt} although it expired " in line
        ]
        assert " WARNING " in line, line
        assert f"the previous one (expired {utc(expired)}) was no better" in line, line


def _start_failure(*conf: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("tidemark-writer-coordinator")
    command = [str(script), "--bootstrap", "127.0.0.1:1", "--http-port", "0", "--metrics-port", "0"]
    command += [arg for c in conf for arg in ("--conf", c)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_coordinator_refuses_to_start_without_a_usable_token(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    for conf, expected in (
        (
            (),
            f"needs a token: set {TOKEN_FILE_KEY}=PATH (a file holding it; writers set the same key), "
            f"or {AUTH_KEY}=none",
        ),
        ((f"{TOKEN_FILE_KEY}={missing}",), f"{TOKEN_FILE_KEY}={missing}: cannot read the API token"),
        ((f"{TOKEN_KEY}={WRONG}",), f"{TOKEN_KEY} is not a setting: put the token in a file"),
    ):
        done = _start_failure(*conf)
        assert done.returncode != 0
        (line,) = done.stderr.strip().splitlines()  # one line, no traceback
        assert line.startswith("tidemark-writer-coordinator: error: "), line
        assert expected in line, line
        assert WRONG not in done.stderr + done.stdout


def test_a_misspelt_coordinator_key_stops_start_up_and_the_writers_keys_are_taken(
    kafka_broker: TansuBroker, topics: tuple[str, str], table: LocalStorage, certs: tuple[Issued, Issued]
) -> None:
    """A TLS key without its ``.file`` left the token-protected API on plain HTTP, without a word."""
    server, _ = certs
    prefix = "tidemark.writer.coordinator."
    token = _token_file(table.root.parent, WRONG)
    for typo, meant in (("tls.cert", TLS_CERT_KEY), ("tls.key", TLS_KEY_KEY), ("tokenfile", TOKEN_FILE_KEY)):
        done = _start_failure(f"{TOKEN_FILE_KEY}={token}", f"{prefix}{typo}={server.cert}")
        assert done.returncode != 0
        (line,) = done.stderr.strip().splitlines()  # one line, no traceback
        assert line.startswith(
            f"tidemark-writer-coordinator: error: unknown writer-coordinator setting(s) {prefix}{typo} "
            f"(did you mean {meant}?); known: "
        ), line
        assert line.endswith(f"known: {', '.join(COORDINATOR_KEYS)}"), line
        assert WRONG not in done.stderr + done.stdout
    # a family misspelt ("cordinator", a dot missed or the family left out) was not looked at: the
    # TLS keys were ignored and the API served over plain HTTP, without a word
    for typo, meant in (
        ("tidemark.writer.cordinator.tls.cert.file", TLS_CERT_KEY),
        ("tidemark.writer.coordinatortls.cert.file", TLS_CERT_KEY),
        ("tidemark.coordinator.tls.key.file", TLS_KEY_KEY),
        ("tidemark.tls.cert.file", TLS_CERT_KEY),
        ("tidemark.writer.cordinator.tls.cert", TLS_CERT_KEY),
    ):
        done = _start_failure(f"{TOKEN_FILE_KEY}={token}", f"{typo}={server.cert}")
        assert done.returncode != 0
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(
            f"tidemark-writer-coordinator: error: unknown writer-coordinator setting(s) {typo} (did you mean {meant}?)"
        ), line

    # a conf shared with the writers (every key the writers read under the prefix) is taken
    shared = {
        COORDINATOR_URL_KEY: "https://127.0.0.1:9500",
        "tidemark.writer.coordinator.timeout.ms": "5000",
        TLS_CA_KEY: str(server.ca),
        "tidemark.writer.coordinator.max.body.bytes": "65536",
        "hoodie.write.markers.type": "TIMELINE_SERVER_BASED",
        # other tidemark keys, far from the family, pass as before
        "tidemark.write.parallelism": "4",
        "tidemark.read.split.bytes": "1048576",
        "tidemark.s3.region": "eu-west-1",
    }
    with CoordinatorProcess(kafka_broker.bootstrap, *topics, tls=server, conf=shared) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        assert coordinator.client(str(table.root)).markers("20261127000000000") == []
        assert "markers on https://" in coordinator.log_path.read_text()


def test_token_and_tls_settings_are_checked_with_errors_naming_them(
    tmp_path: Path, certs: tuple[Issued, Issued]
) -> None:
    server, _ = certs
    empty = _token_file(tmp_path, " \n")
    spaced = _token_file(tmp_path, "two words")
    good = _token_file(tmp_path, f"\n{WRONG}\n")
    # longer than any server takes in a header line: every request failed, answered in HTML
    endless = _token_file(tmp_path, "t" * 70_000)
    bad: list[tuple[dict[str, str], str]] = [
        ({TOKEN_FILE_KEY: empty}, f"{TOKEN_FILE_KEY}={empty}: the file is empty"),
        ({TOKEN_FILE_KEY: endless}, f"{TOKEN_FILE_KEY}={endless}: the token is longer than 4096 bytes"),
        ({TOKEN_FILE_KEY: spaced}, "printable ASCII with no spaces inside"),
        ({TOKEN_FILE_KEY: str(tmp_path)}, f"{TOKEN_FILE_KEY}={tmp_path}: cannot read"),
        ({AUTH_KEY: "none", TOKEN_FILE_KEY: good}, "contradict"),
        ({AUTH_KEY: "maybe"}, f"{AUTH_KEY} must be token or none"),
        ({AUTH_KEY: "none", TLS_CERT_KEY: str(server.cert)}, f"both {TLS_CERT_KEY} and {TLS_KEY_KEY}"),
        ({AUTH_KEY: "none", TLS_CERT_KEY: str(server.cert), TLS_KEY_KEY: str(server.cert)}, "cannot load them"),
    ]
    for conf, expected in bad:
        with pytest.raises(ValueError, match=r".") as e:
            ApiSecurity.from_conf(conf)
        assert expected in str(e.value), (conf, str(e.value))
        assert "two words" not in str(e.value)
    security = ApiSecurity.from_conf(
        {TOKEN_FILE_KEY: good, TLS_CERT_KEY: str(server.cert), TLS_KEY_KEY: str(server.key)}
    )
    assert security.token == WRONG.encode()  # surrounding whitespace stripped
    assert security.tls is not None
    assert WRONG not in repr(security)
    assert ApiSecurity.from_conf({AUTH_KEY: "none"}).token is None

    # a writer's side: the token read on the driver, carried to the tasks pickled, never shown
    writer = {"hoodie.write.markers.type": "TIMELINE_SERVER_BASED", "tidemark.writer.coordinator.url": "https://c:1"}
    endpoint = CoordinatorEndpoint.from_conf({**writer, TOKEN_FILE_KEY: good, TLS_CA_KEY: str(server.ca)})
    assert endpoint is not None
    assert endpoint.token == WRONG
    assert pickle.loads(pickle.dumps(endpoint)) == endpoint
    assert WRONG not in repr(endpoint)
    assert WRONG not in repr(endpoint.client("s3://b/t"))
    for conf, expected in (
        ({TOKEN_FILE_KEY: str(tmp_path / "nope")}, f"{TOKEN_FILE_KEY}={tmp_path / 'nope'}: cannot read the API token"),
        ({TOKEN_KEY: WRONG}, f"{TOKEN_KEY} is not a setting"),
        ({TLS_CA_KEY: good}, f"{TLS_CA_KEY}: file {good} holds no PEM CA certificate OpenSSL can load"),
        ({TLS_CA_KEY: str(server.ca), "tidemark.writer.coordinator.url": "http://c:1"}, "is not an https:// URL"),
    ):
        with pytest.raises(TableError) as failed:
            CoordinatorEndpoint.from_conf({**writer, **conf})
        assert expected in str(failed.value), str(failed.value)
        assert WRONG not in str(failed.value)
