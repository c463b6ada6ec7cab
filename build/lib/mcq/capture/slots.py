"""The replication slots of the registry's sources, as ``mcq connect status`` and
``mcq status`` report them.

A slot keeps every WAL segment from its ``restart_lsn`` on, on the source's disk, until
its connector confirms it: a connector that is down, paused or failing makes it grow
without bound, and PostgreSQL invalidates a slot whose WAL passed
``max_slot_wal_keep_size`` (``wal_status = lost``): the changes in the gap are gone, and
the only way back is a new slot with a new snapshot. A slot missing altogether means its
connector will make a new one, and whatever was committed while there was none was never
captured; once it has (or someone has) made it again, the slot starts at a WAL position
past the one its connector last captured (its offsets in Connect): the gap stays, silent,
unless said. Each of these is one line naming the slot and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from mcq.capture.exceptions import CaptureError
from mcq.config import Settings
from mcq.registry.model import Registry

MB = 1 << 20


@dataclass(frozen=True)
class SlotState:
    source: str
    slot: str
    exists: bool
    active: bool = False
    wal_status: str | None = None
    """reserved / extended / unreserved / lost (PostgreSQL 13+)."""
    retained_bytes: int = 0
    """WAL kept for the slot: the current WAL position minus its restart_lsn."""
    behind_bytes: int = 0
    """WAL not yet confirmed by its connector."""
    restart_lsn: int | None = None
    captured_lsn: int | None = None
    """The last WAL position its connector captured (its offsets in Connect), when known."""


class SlotReadError(CaptureError):
    """The source database could not be asked about its slots."""


def slot_states(settings: Settings, registry: Registry) -> list[SlotState]:
    """The slot of every source of the registry, as the source database sees it now, with
    the position its connector last captured (when Connect answers)."""
    try:
        with psycopg.connect(settings.source.dsn(), connect_timeout=10) as conn:
            rows = {
                r[0]: r[1:]
                for r in conn.execute(
                    "SELECT slot_name, active, wal_status, "
                    "coalesce(pg_current_wal_lsn() - restart_lsn, 0)::bigint, "
                    "coalesce(pg_current_wal_lsn() - confirmed_flush_lsn, 0)::bigint, "
                    "(restart_lsn - '0/0'::pg_lsn)::bigint "
                    "FROM pg_replication_slots WHERE slot_name = ANY(%s)",
                    ([s.slot_name for s in registry.sources],),
                )
            }
    except psycopg.OperationalError as exc:
        raise SlotReadError(f"source database {settings.source}: {str(exc).strip()}") from None
    captured = captured_positions(settings, registry)
    out = []
    for source in registry.sources:
        row = rows.get(source.slot_name)
        if row is None:
            out.append(SlotState(source.name, source.slot_name, exists=False))
        else:
            active, wal_status, retained, behind, restart = row
            out.append(
                SlotState(source.name, source.slot_name, True, bool(active), wal_status, retained, behind,
                          restart, captured.get(source.name))
            )  # fmt: skip
    return out


def captured_positions(settings: Settings, registry: Registry) -> dict[str, int]:
    """Source name -> the highest WAL position in its connector's committed offsets; a
    source whose connector has none (new, or Connect not answering) is left out."""
    import httpx

    from mcq.capture.connector import connector_name
    from mcq.connect_rest import ConnectClient, ConnectError

    out: dict[str, int] = {}
    try:
        with ConnectClient(settings.connect, timeout_s=10) as client:
            for source in registry.sources:
                lsns = [
                    int(value)
                    for entry in client.offsets(connector_name(source))
                    for name, value in (entry.get("offset") or {}).items()
                    if name in ("lsn", "lsn_commit", "lsn_proc") and value is not None
                ]
                if lsns:
                    out[source.name] = max(lsns)
    except (ConnectError, httpx.HTTPError):
        return out  # the WAL check needs Connect; the rest of the slot checks do not
    return out


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def slot_alerts(states: list[SlotState], warn_mb: int) -> list[str]:
    """One line per slot that needs an operator: missing, lost, or holding more WAL than ``warn_mb``."""
    out = []
    for s in states:
        name = f"source {s.source}: replication slot {s.slot}"
        if not s.exists:
            out.append(
                f"{name} does not exist: its connector makes a new one and snapshots again when it starts, and "
                "what was committed while there was none was never captured; after `mcq connect apply`, run "
                "`mcq refresh LISTENER --from source` for every listener of its tables"
            )
        elif s.wal_status == "lost":
            out.append(
                f"{name} lost WAL it still needed (max_slot_wal_keep_size): the changes in the gap are gone and "
                "its connector cannot resume; run `mcq connect remove` then `mcq connect apply` (a new slot and "
                "snapshot), then `mcq refresh LISTENER --from source` for every listener of its tables"
            )
        elif s.restart_lsn is not None and s.captured_lsn is not None and s.restart_lsn > s.captured_lsn:
            out.append(
                f"{name} starts at WAL {lsn_text(s.restart_lsn)}, past {lsn_text(s.captured_lsn)} where its "
                "connector last captured: the slot was made again after its connector stopped, and the changes "
                "committed in between were never captured; run `mcq connect remove` then `mcq connect apply` (a "
                "new slot and snapshot), then `mcq refresh LISTENER --from source` for every listener of its tables"
            )
        elif s.retained_bytes > warn_mb * MB:
            state = "active" if s.active else "INACTIVE (is its connector running? `mcq connect status`)"
            out.append(
                f"{name} holds {s.retained_bytes / MB:,.0f} MB of WAL on the source's disk (warning above "
                f"{warn_mb:,} MB; wal_status {s.wal_status}; {state}); "
                f"{s.behind_bytes / MB:,.0f} MB not yet confirmed by its connector"
            )
    return out
