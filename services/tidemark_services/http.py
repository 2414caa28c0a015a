"""``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz`` on one small HTTP server per
service. ``/readyz`` is the service's own readiness check (the cleaner's and archiver's: unready
while no broker is in reach; the writer-coordinator's marker API works without Kafka, so a Kafka
failure must not take it out of its Kubernetes Service), else ``/healthz``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class MonitoringServer:
    """Serves the registry's metrics, a health check and a readiness check (``ready``, by default
    the health check) until :meth:`stop`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        healthy: Callable[[], tuple[bool, str]],
        port: int = 0,
        host: str = "127.0.0.1",
        ready: Callable[[], tuple[bool, str]] | None = None,
    ) -> None:
        registry_ref, checks = registry, {"/healthz": healthy, "/readyz": ready or healthy}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    body, status, kind = generate_latest(registry_ref), 200, CONTENT_TYPE_LATEST
                elif self.path in checks:
                    ok, detail = checks[self.path]()
                    body, status, kind = detail.encode(), 200 if ok else 503, "text/plain; charset=utf-8"
                else:
                    body, status, kind = b"not found\n", 404, "text/plain; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="monitoring", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
