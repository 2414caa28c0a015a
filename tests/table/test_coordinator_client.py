"""The writer-coordinator's client (timeline-server-based markers) against a server that goes away."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from tidemark.errors import CoordinatorUnavailableError
from tidemark.table.coordinator_client import CoordinatorClient


@pytest.fixture
def dies_after_one_answer() -> Iterator[int]:
    """A plain-HTTP server on a port that answers the first request and then, as a coordinator
    killed with a request in hand, resets every connection once a request arrives."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    answered = threading.Event()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while conn.recv(65536):
                    if not answered.is_set():
                        answered.set()
                        body = b'{"markers": []}'
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                        continue
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break  # closed with SO_LINGER 0: a reset

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()


def test_a_coordinator_that_dies_is_not_reported_as_a_wrong_scheme(dies_after_one_answer: int) -> None:
    """A plain-HTTP coordinator killed with a request in hand (SIGKILL, OOM) resets the connection:
    the writer's warning asked whether the URL should be https://, sending the user to look for a
    TLS set-up that does not exist, although the same coordinator had just answered over http."""
    client = CoordinatorClient(f"http://127.0.0.1:{dies_after_one_answer}", "/tmp/t", timeout_s=5)
    assert client.markers("20260101000000000") == []
    with pytest.raises(CoordinatorUnavailableError) as gone:
        client.markers("20260101000000000")
    assert "reset" in str(gone.value).lower(), str(gone.value)
    assert "https" not in str(gone.value)
