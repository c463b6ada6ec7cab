"""A small client for Kafka Connect's REST API (httpx), and the Debezium source config.

Connect is driven over REST, as in production: ``PUT /connectors/<name>/config`` is
idempotent, so applying the same connector twice changes nothing.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from mcq.config import HttpServiceSettings
from mcq.errors import McqError
from mcq.resources import read_text
from mcq.targets import DatabaseSettings


class ConnectError(McqError):
    """Connect refused a request or a connector did not reach RUNNING; the message says which."""


def load_connector_json(role: str) -> dict[str, str]:
    """The connector configuration of a role (``connect/<role>.json``, shipped with the package)."""
    try:
        data = json.loads(read_text("connect", f"{role}.json"))
    except json.JSONDecodeError as exc:
        raise ConnectError(f"connect/{role}.json:{exc.lineno}: {exc.msg}") from None
    return {str(k): str(v) for k, v in data.items()}


def debezium_postgres_source(
    db: DatabaseSettings,
    *,
    topic_prefix: str,
    slot_name: str,
    publication_name: str,
    tables: list[str],
    **overrides: str,
) -> dict[str, str]:
    """A Debezium PostgreSQL source config: the shared role file plus this source's parts."""
    config = load_connector_json("source-postgres")
    config.update(
        {
            "database.hostname": db.host,
            "database.port": str(db.port),
            "database.user": db.user,
            "database.dbname": db.dbname,
            "topic.prefix": topic_prefix,
            "slot.name": slot_name,
            "publication.name": publication_name,
            "table.include.list": ",".join(tables),
        }
    )
    config.update(overrides)
    return config


class ConnectClient:
    """Kafka Connect's REST API."""

    def __init__(self, settings: HttpServiceSettings, timeout_s: float = 30.0) -> None:
        self.base = settings.url.rstrip("/")
        self._http = httpx.Client(base_url=self.base, auth=settings.auth(), timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ConnectClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ConnectError(f"{method} {self.base}{path}: {exc}") from None
        if resp.status_code >= 400 and resp.status_code != 404:
            raise ConnectError(f"{method} {self.base}{path}: {resp.status_code} {resp.text[:500]}")
        return resp

    def plugins(self) -> list[str]:
        return [p["class"] for p in self._request("GET", "/connector-plugins").json()]

    def connectors(self) -> list[str]:
        return list(self._request("GET", "/connectors").json())

    def put(self, name: str, config: dict[str, str]) -> dict[str, Any]:
        """Create or update a connector (idempotent)."""
        return dict(self._request("PUT", f"/connectors/{name}/config", json=config).json())

    def config(self, name: str) -> dict[str, str] | None:
        """A connector's config; None when there is no such connector."""
        resp = self._request("GET", f"/connectors/{name}/config")
        return None if resp.status_code == 404 else dict(resp.json())

    def status(self, name: str) -> dict[str, Any] | None:
        resp = self._request("GET", f"/connectors/{name}/status")
        return None if resp.status_code == 404 else dict(resp.json())

    def restart(self, name: str, *, only_failed: bool = False) -> None:
        """Restart the connector and all its tasks; ``only_failed``: its FAILED instances
        only (KIP-745), a running task left alone, so that a restart asked twice at once
        stops nothing that runs."""
        params = {"includeTasks": "true"} | ({"onlyFailed": "true"} if only_failed else {})
        self._request("POST", f"/connectors/{name}/restart", params=params)

    def delete(self, name: str) -> bool:
        return self._request("DELETE", f"/connectors/{name}").status_code != 404

    def stop(self, name: str, timeout_s: float = 60.0) -> bool:
        """Stop a connector (tasks shut down, config kept) and wait until it is STOPPED;
        False when there is no such connector."""
        if self._request("PUT", f"/connectors/{name}/stop").status_code == 404:
            return False
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = self.status(name)
            if last is None:
                return False
            if last["connector"].get("state") == "STOPPED" and not last.get("tasks"):
                return True
            time.sleep(0.5)
        raise ConnectError(f"connector {name} not STOPPED after {timeout_s:.0f} s: {last}")

    def pause(self, name: str) -> None:
        """Pause a connector: its tasks stay assigned but stop polling (their source
        connections stay open)."""
        self._request("PUT", f"/connectors/{name}/pause")

    def resume(self, name: str) -> None:
        """Resume a paused or STOPPED connector."""
        self._request("PUT", f"/connectors/{name}/resume")

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's committed source offsets (KIP-875): ``[{"partition": ..., "offset": ...}]``;
        empty when it has none yet or does not exist."""
        resp = self._request("GET", f"/connectors/{name}/offsets")
        if resp.status_code == 404:
            return []
        return list(resp.json().get("offsets") or [])

    def reset_offsets(self, name: str) -> bool:
        """Forget a STOPPED connector's source offsets (KIP-875), so that a connector made
        again under this name starts afresh; False when there is no such connector."""
        return self._request("DELETE", f"/connectors/{name}/offsets").status_code != 404

    def wait_running(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait until the connector and all its tasks are RUNNING; fail with the task's trace."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = self.status(name)
            if last:
                tasks = last.get("tasks", [])
                failed = [t for t in tasks if t.get("state") == "FAILED"]
                if failed or last["connector"].get("state") == "FAILED":
                    trace = (failed[0] if failed else last["connector"]).get("trace", "")
                    raise ConnectError(f"connector {name} FAILED: {trace.splitlines()[0] if trace else '?'}")
                if (
                    last["connector"].get("state") == "RUNNING"
                    and tasks
                    and all(t.get("state") == "RUNNING" for t in tasks)
                ):
                    return last
            time.sleep(0.5)
        raise ConnectError(f"connector {name} not RUNNING after {timeout_s:.0f} s: {last}")
