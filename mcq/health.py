"""``/livez``, ``/readyz`` and Prometheus ``/metrics`` of a long-running mcq process (a
listener instance, the normaliser), in a daemon thread.

The address is bound when the server is made, so a port another process holds is
refused at once, as a :class:`HealthAddressTaken` that names the address (not a raw
``OSError`` from inside the process).
"""

from __future__ import annotations

import errno
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mcq.errors import EXIT_CONFIG, McqError


class HealthAddressTaken(McqError):
    """The health endpoint's address cannot be bound (in use, not local, not allowed)."""

    exit_code = EXIT_CONFIG

    def __init__(self, host: str, port: int, why: str) -> None:
        super().__init__(f"health endpoint {host}:{port}: {why}")
        self.host = host
        self.port = port


class HealthServer:
    """A small HTTP server in a daemon thread; ``port=0`` picks a free port."""

    def __init__(
        self,
        host: str,
        port: int,
        live: Callable[[], bool],
        ready: Callable[[], bool],
        metrics: CollectorRegistry,
        documents: dict[str, Callable[[], object]] | None = None,
    ) -> None:
        """``documents``: further paths, each answered with its function's value as JSON."""
        outer = self
        served = dict(documents or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/livez":
                    outer._answer(self, live())
                elif self.path == "/readyz":
                    outer._answer(self, ready())
                elif self.path == "/metrics":
                    body = generate_latest(metrics)
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif self.path in served:
                    body = (json.dumps(served[self.path](), indent=1, default=str) + "\n").encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_error(404)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: not logged
                pass

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                why = f"port {port} is already in use by another process"
            raise HealthAddressTaken(host, port, why) from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="mcq-health", daemon=True)

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, ok: bool) -> None:
        body = b"ok\n" if ok else b"not ok\n"
        handler.send_response(200 if ok else 503)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
