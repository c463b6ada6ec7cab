"""Remove capture for a source: ``mcq connect remove [SOURCE]``, the inverse of
``mcq connect apply``.

Per source, in this order: its Debezium connector is stopped, its stored source offsets
are forgotten (so that a connector made again under the same name snapshots afresh
instead of resuming from a position its new slot never had) and it is deleted; then the
replication slot is dropped once no process streams from it (a slot left behind keeps
the source database's WAL for ever), and the publication is dropped.

Each step is skipped when there is nothing to remove, so removing twice is harmless and
says so. The raw topics, the shared outbox ``mcq.change_log`` and the logical topics
are left alone: they hold data other sources or listeners may still read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from mcq.capture.connector import connector_name, refuse_other_owners
from mcq.capture.exceptions import CaptureError
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.registry.model import Source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Removed:
    """What removing one source's capture found and removed."""

    source: str
    connector: str
    slot: str
    publication: str
    removed_connector: bool
    removed_slot: bool
    removed_publication: bool

    @property
    def anything(self) -> bool:
        return self.removed_connector or self.removed_slot or self.removed_publication

    def line(self) -> str:
        if not self.anything:
            return (
                f"{self.source}: nothing to remove: no connector {self.connector}, "
                f"no slot {self.slot}, no publication {self.publication}"
            )
        parts = [
            f"connector {self.connector} {'deleted' if self.removed_connector else 'was not there'}",
            f"slot {self.slot} {'dropped' if self.removed_slot else 'was not there'}",
            f"publication {self.publication} {'dropped' if self.removed_publication else 'was not there'}",
        ]
        return f"{self.source}: " + ", ".join(parts)


def _remove_connector(client: ConnectClient, name: str) -> bool:
    if client.status(name) is None:
        return False
    if client.stop(name):
        client.reset_offsets(name)
    client.delete(name)
    return True


def _drop_slot(conn: psycopg.Connection[Any], slot: str, timeout_s: float) -> bool:
    """Drop the slot once it is inactive (the connector's walsender ends shortly after
    the connector stops); False when there is no such slot."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        if row is None:
            return False
        if row[0] is None:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return True
        if time.monotonic() > deadline:
            raise CaptureError(
                f"replication slot {slot} is still streamed by process {row[0]} {timeout_s:.0f} s after its "
                f"connector stopped; stop that client (SELECT pg_terminate_backend({row[0]})), then run this again"
            )
        time.sleep(0.5)


def _drop_publication(conn: psycopg.Connection[Any], publication: str) -> bool:
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone() is None:
        return False
    conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
    return True


def remove_capture(sources: list[Source], settings: Settings, slot_timeout_s: float = 60.0) -> list[Removed]:
    """Remove the connector, slot and publication of each source; one report line each."""
    out = []
    with ConnectClient(settings.connect) as client:
        refuse_other_owners(client, sources, settings.topic_prefix, "connect remove")
        for source in sources:
            name = connector_name(source)
            connector = _remove_connector(client, name)
            try:
                with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
                    slot = _drop_slot(conn, source.slot_name, slot_timeout_s)
                    publication = _drop_publication(conn, source.publication_name)
            except psycopg.Error as exc:
                raise CaptureError(
                    f"{source.name}: dropping slot {source.slot_name} / publication {source.publication_name} "
                    f"in {settings.source}: {exc}".strip()
                ) from None
            removed = Removed(
                source.name, name, source.slot_name, source.publication_name, connector, slot, publication
            )
            log.info(removed.line())
            out.append(removed)
    return out
