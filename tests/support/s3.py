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
from collections.abc import Iterator
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
