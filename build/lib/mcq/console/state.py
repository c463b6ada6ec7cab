"""What the console's pages read: the registry as running processes see it (followed, so an
interest edited elsewhere shows at once), each listener's status (the figures of
``mcq status``) and the services mcq depends on.

Kafka clients are not thread-safe and the web server answers from a thread pool: the
registry reader is used under one lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from consumers.runtime.status import ListenerStatus, status_report
from mcq.config import Settings
from mcq.connect_rest import ConnectClient, ConnectError
from mcq.registry import Registry
from mcq.registry.store import Provenance, RegistryReader, RegistryStore

LAGGING_AFTER_S = 30.0
"""An OK listener whose oldest pending change is older than this is shown LAGGING."""


@dataclass(frozen=True)
class Service:
    name: str
    address: str
    up: bool
    detail: str


def verdict(status: ListenerStatus) -> str:
    """OK, LAGGING, STUCK, DEAD, WAITING or IDLE: ``mcq status``'s verdict, with an OK
    listener that is falling behind shown as LAGGING."""
    age = status.oldest_pending_age_s
    if status.verdict == "OK" and age is not None and age > LAGGING_AFTER_S:
        return "LAGGING"
    return status.verdict


class ConsoleState:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = RegistryStore(settings)
        self._lock = threading.Lock()
        self._reader: RegistryReader | None = None

    def registry(self) -> Registry:
        """The registry store's current content (new records applied on every call)."""
        with self._lock:
            if self._reader is None:
                reader = RegistryReader(self.settings)
                reader.catch_up()
                self._reader = reader
            else:
                self._reader.poll(0.05)
            return self._reader.registry()

    def provenance(self) -> dict[str, Provenance]:
        return {p.ref: p for p in self.store.provenance()}

    def statuses(self, names: list[str] | None = None) -> list[ListenerStatus]:
        return status_report(self.settings, self.registry(), names)

    def services(self) -> list[Service]:
        s = self.settings
        out = [self._kafka()]
        started = time.monotonic()
        try:
            resp = httpx.get(f"{s.registry.url}/subjects", auth=s.registry.auth(), timeout=5)
            out.append(
                Service(
                    "schema registry",
                    s.registry.url,
                    resp.status_code == 200,
                    f"{subject_count(s.registry.url, s.registry.auth(), len(resp.json()))} subjects, "
                    f"answered in {time.monotonic() - started:.2f} s"
                    if resp.status_code == 200
                    else f"HTTP {resp.status_code}",
                )
            )
        except (httpx.HTTPError, ValueError) as exc:
            out.append(Service("schema registry", s.registry.url, False, str(exc)))
        try:
            with ConnectClient(s.connect, timeout_s=5) as connect:
                names = connect.connectors()
                states = {n: (connect.status(n) or {}).get("connector", {}).get("state", "?") for n in names}
            bad = {n: st for n, st in states.items() if st != "RUNNING"}
            detail = f"{len(states)} connector(s)" + (f"; not running: {bad}" if bad else ", all RUNNING")
            out.append(Service("kafka connect", s.connect.url, not bad, detail))
        except (ConnectError, httpx.HTTPError) as exc:
            out.append(Service("kafka connect", s.connect.url, False, str(exc)))
        return out

    def _kafka(self) -> Service:
        address = self.settings.kafka.bootstrap_servers
        started = time.monotonic()
        try:
            meta = AdminClient({**self.settings.kafka.client_config()}).list_topics(timeout=5)
        except KafkaException as exc:
            return Service("kafka", address, False, str(exc.args[0]))
        took = time.monotonic() - started
        return Service("kafka", address, True, f"{len(meta.brokers)} broker(s), answered in {took:.2f} s")


APICURIO_CCOMPAT = "/apis/ccompat/v7"
LISTED_AT_MOST = 1000


def subject_count(url: str, auth: Any, listed: int) -> str:
    """How many subjects the registry at ``url`` holds, ``listed`` being how many its
    ``GET /subjects`` gave: Apicurio's Confluent-compatible API lists at most 1,000, so
    there its own search API counts them (a subject is an artifact); elsewhere the list is whole."""
    if listed >= LISTED_AT_MOST and url.rstrip("/").endswith(APICURIO_CCOMPAT):
        search = url.rstrip("/").removesuffix(APICURIO_CCOMPAT) + "/apis/registry/v3/search/artifacts"
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            resp = httpx.get(search, params={"limit": 1}, auth=auth, timeout=5)
            if resp.status_code == 200:
                return f"{int(resp.json()['count']):,}"
        return f"{listed:,}+"
    return f"{listed:,}"
