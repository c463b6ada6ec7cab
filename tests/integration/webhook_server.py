"""A real HTTP server on 127.0.0.1 standing in for a webhook target: it records every
body it is sent and answers 200, and the target's state is replayed from what it got."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Received(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]]
    bearer: str | None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.bearer is not None and self.headers.get("Authorization") != f"Bearer {self.bearer}":
            self.send_response(401)  # the target's own check: a wrong or missing token is refused
        else:
            self.bodies.append(json.loads(body))
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def receiving_webhook(bearer: str | None = None) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The URL to post to and the list of bodies received, in arrival order; with BEARER, a
    request without ``Authorization: Bearer <BEARER>`` is answered 401 and not received."""
    bodies: list[dict[str, Any]] = []
    handler = type("Received", (_Received,), {"bodies": bodies, "bearer": bearer})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/changes", bodies
    finally:
        server.shutdown()


def replay(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A target's state from the changes it received (webhook bodies or JSON Lines), in order,
    keyed by the change key's text."""
    state: dict[str, dict[str, Any]] = {}
    for e in events:
        key = e["idempotency_key"].split("@")[0]
        if e["change_type"] == "DELETE":
            state.pop(key, None)
        else:
            state[key] = e["after"]
    return state
