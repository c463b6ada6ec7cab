"""One key's history as people read it (``mcq trace``, the console's trace page)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from mcq.change import ChangeKey
from mcq.history.events import Event
from mcq.registry.model import Registry


def parse_key(tname: str, text: str) -> ChangeKey:
    """``person_id=1,pkey_string=office`` (commas, with or without spaces) of TNAME[/Subtype]."""
    fields = re.sub(r"\s*,\s*(?=(?:person_id|pkey_string|pkey_number|aux_string)=)", ", ", text.strip())
    return ChangeKey.from_str(f"{tname}[{fields}]")


def listeners_of(registry: Registry, key: ChangeKey) -> list[str]:
    """The listeners with an interest in the key's table/subtype."""
    table = registry.table(key.tname, key.subtype)
    return sorted({x.name for x in registry.listeners if table is not None and table in registry.tables_of(x.name)})


def lines(key: ChangeKey, events: list[Event], listeners: list[str]) -> list[str]:
    """The key's history as text: per change, its capture, then each listener's steps;
    a listener that has done nothing with a change yet says so."""
    out = [f"{key}: {len(events)} event(s)" if events else f"{key}: no history (none kept, or not yet captured)"]
    by_change: dict[str, list[Event]] = {}
    for e in events:
        by_change.setdefault(e.position, []).append(e)
    for position, steps in by_change.items():
        first = steps[0]
        out.append(
            f"  change {position} {first.change_type or ''} committed {first.commit_time or '?'}"
            + (f" (transaction {first.txid})" if first.txid is not None else "")
        )
        for e in steps:
            where = " ".join(
                x for x in (f"raw {e.raw}" if e.raw else "", f"logical {e.logical}" if e.logical else "") if x
            )
            who = "normaliser" if e.listener is None else f"listener {e.listener}"
            answer = f": {e.answer}" if e.answer else ""
            out.append(f"    {_at(e.at)}  {who} {e.step}{answer}" + (f"  [{where}]" if where else ""))
        done = {e.listener for e in steps if e.listener is not None}
        for name in listeners:
            if name not in done:
                out.append(f"    {'':23}  listener {name}: nothing yet (not read, or offline)")
    return out


def _at(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
