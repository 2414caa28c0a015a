"""Pytest plugin: an in-process moto S3 server reached over real HTTP, and fresh buckets on it.

Registered from ``tests/conftest.py``. boto3 and moto are imported inside the fixtures, so tests
that never ask for S3 run without them.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.processes import ChildProcess, accepts, free_port
from tidemark.storage import S3Options, Storage, open_storage

#: The region moto buckets are created in and clients are pointed at.
REGION = "us-east-1"

#: Environment for the whole S3 session: dummy credentials, and no path to a real profile.
_FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
_REMOVED_AWS_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "TIDEMARK_S3_ENDPOINT")


def start_moto_server() -> tuple[Any, str]:
    """A started ``ThreadedMotoServer`` on a free port, and its endpoint URL. Call ``.stop()``."""
    server_mod = pytest.importorskip("moto.server")
    port = free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


def s3_options(endpoint: str) -> S3Options:
    return S3Options(endpoint_url=endpoint, region=REGION, access_key_id="testing", secret_access_key="testing")


def s3_child_env() -> dict[str, str]:
    """This process's environment with the moto credentials and no real AWS profile, for a child
    that reaches the moto server (S3Options leaves credentials to boto3's environment lookup)."""
    env = {k: v for k, v in os.environ.items() if k not in _REMOVED_AWS_ENV}
    env.update(_FAKE_AWS_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@functools.cache
def _client(endpoint: str) -> Any:
    """A boto3 S3 client of the moto server at ``endpoint`` (thread-safe, so one is shared)."""
    boto3 = pytest.importorskip("boto3")
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def create_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket (a fresh uniquely named one unless ``name`` is given) and return its name."""
    bucket = name or f"tidemark-test-{uuid.uuid4().hex[:16]}"
    _client(endpoint).create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture(scope="session")
def fake_aws_env() -> Iterator[None]:
    """Dummy AWS credentials for the rest of the session; a real profile is never read."""
    with pytest.MonkeyPatch.context() as mp:
        for name in _REMOVED_AWS_ENV:
            mp.delenv(name, raising=False)
        for name, value in _FAKE_AWS_ENV.items():
            mp.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def moto_server(fake_aws_env: None) -> Iterator[str]:
    """The endpoint URL (``http://127.0.0.1:PORT``) of a moto S3 server shared by the session."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request in the output
    server, endpoint = start_moto_server()
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def serial_moto(fake_aws_env: None) -> Iterator[str]:
    """The endpoint of a moto S3 server that handles one request at a time, sharing moto's
    in-memory buckets with :func:`moto_server`. moto 5.2's threaded server checks ``If-Match`` and
    then stores in two steps, so two racing conditional PUTs can both pass; real S3 decides each
    atomically, and so does a server that serves one request at a time. Tests whose processes race
    on the table lock use this one."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = make_server(
        "127.0.0.1",
        port,
        DomainDispatcherApplication(create_backend_app),
        threaded=False,
        request_handler=MotoRequestHandler,
    )
    thread = threading.Thread(target=server.serve_forever, name="serial-moto", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def moto_process(fake_aws_env: None) -> Iterator[tuple[str, ChildProcess]]:
    """A moto S3 server of its own in a child process, and its endpoint: a test may freeze it
    (SIGSTOP) to play an endpoint that accepts connections and never answers."""
    pytest.importorskip("moto.server")
    port = free_port()
    server = ChildProcess("moto")
    server.launch([sys.executable, "-m", "moto.server", "-p", str(port)], env=s3_child_env())
    try:
        deadline = time.monotonic() + 30
        while not accepts(port):
            assert server.alive, server.log_tail()
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.close()


@pytest.fixture
def not_s3_endpoint(fake_aws_env: None) -> Iterator[str]:
    """The endpoint of an HTTP server that is not S3: it answers 404 with an empty body to every
    request, as a web app, an ingress or a proxy on a mistyped endpoint port does."""
    import http.server

    class NotFound(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = answer  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, name="not-s3", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def s3_location(moto_server: str) -> tuple[str, S3Options]:
    """``(s3://BUCKET/some-prefix, options)`` in a bucket created for this test alone."""
    bucket = create_bucket(moto_server)
    return f"s3://{bucket}/some-prefix", s3_options(moto_server)


@pytest.fixture
def s3_storage(s3_location: tuple[str, S3Options]) -> Storage:
    location, options = s3_location
    return open_storage(location, options)


def copy_prefix(endpoint: str, bucket: str, source: str, target: str) -> int:
    """Copy every object under ``source/`` to the same key under ``target/`` (server-side, object by
    object), after deleting whatever ``target/`` held; the number of objects copied. S3 has no
    directories: this is what copying a table's folder is there."""
    client = _client(endpoint)
    source, target = f"{source.strip('/')}/", f"{target.strip('/')}/"
    paginator = client.get_paginator("list_objects_v2")

    def keys(prefix: str) -> list[str]:
        return [
            obj["Key"] for page in paginator.paginate(Bucket=bucket, Prefix=prefix) for obj in page.get("Contents", [])
        ]

    for key in keys(target):
        client.delete_object(Bucket=bucket, Key=key)
    copied = keys(source)
    for key in copied:
        client.copy_object(Bucket=bucket, Key=target + key[len(source) :], CopySource={"Bucket": bucket, "Key": key})
    return len(copied)


#: what a :class:`FaultProxy` hook returns to hang up without an answer (a lost answer)
DROP = "drop"

#: an answer a :class:`FaultProxy` sends: status, headers, body
Answer = tuple[int, list[tuple[str, str]], bytes]
#: ``forward(method, path, body, headers)``: the request passed on to the server, and its answer
Forward = Callable[[str, str, bytes, dict[str, str]], Answer]
#: ``hook(method, path, headers, body, forward)``: None to pass the request on, an :data:`Answer`
#: to answer it instead, or :data:`DROP`; it may call ``forward`` itself (to let a request land)
ProxyHook = Callable[[str, str, dict[str, str], bytes, Forward], "Answer | str | None"]


def s3_error(status: int, code: str, message: str) -> Answer:
    """An S3 error answer, as S3 sends one (its XML body names the code)."""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
        "<RequestId>proxy</RequestId></Error>"
    ).encode()
    return status, [("Content-Type", "application/xml")], body


def is_conditional_put(method: str, headers: dict[str, str]) -> bool:
    return method == "PUT" and ("If-Match" in headers or "If-None-Match" in headers)


class FaultProxy:
    """An HTTP proxy in front of an S3 endpoint (moto) that passes every request on, except those
    its ``hook`` answers itself, hangs up on (:data:`DROP`: the answer is lost) or lands and then
    drops: the network failures and S3 answers a test cannot get from moto. Point a storage at
    :attr:`endpoint`; use as a context manager."""

    def __init__(self, upstream: str, hook: ProxyHook) -> None:
        import http.client
        import http.server

        host, port = upstream.removeprefix("http://").split(":")

        def forward(method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.getheaders(), response.read()
            finally:
                conn.close()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                answer = hook(self.command, self.path, headers, body, forward)
                if answer == DROP:
                    self.close_connection = True
                    return
                status, reply_headers, reply = (
                    forward(self.command, self.path, body, headers) if answer is None else answer
                )
                self.send_response(status)
                for name, value in reply_headers:
                    if name.lower() not in ("connection", "transfer-encoding", "content-length", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle  # noqa: N815

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
