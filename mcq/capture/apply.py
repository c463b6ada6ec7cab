"""Apply capture for a registry: outbox in the source database, connectors in Connect."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from mcq.capture.connector import connector_name, install_outbox, render_source
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.registry.model import Registry


class CaptureError(Exception):
    """The source database refused the outbox installation; the message says why."""


def apply_capture(registry: Registry, settings: Settings, report: Callable[[str], None] = print) -> list[str]:
    """Install the outbox and put every source connector; wait until each is RUNNING."""
    try:
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            install_outbox(conn)
    except psycopg.Error as exc:
        raise CaptureError(f"installing the outbox in {settings.source}: {exc}".strip()) from None
    report(f"outbox: mcq.change_log and mcq_log_insert/update/delete installed in {settings.source}")
    names = []
    with ConnectClient(settings.connect) as client:
        for source in registry.sources:
            name = connector_name(source)
            config = render_source(registry, source, settings)
            client.put(name, config)
            client.wait_running(name)
            tables = config["table.include.list"].count(",") + 1
            report(f"{name}: RUNNING, {tables} tables, slot {source.slot_name}, publication {source.publication_name}")
            names.append(name)
    return names
