"""``mcq trace TNAME KEY...``: one key's history, change by change (``mcq.history``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mcq.cli.app import FROM_FILE, _current_registry, _say, _settings, _stop, main
from mcq.errors import EXIT_CONFIG


@main.command("trace")
@click.argument("tname")
@click.argument("keys", nargs=-1, required=True)
@FROM_FILE
@click.option("--json", "as_json", is_flag=True, help="Each key's events as JSON.")
def trace(tname: str, keys: tuple[str, ...], registry_file: Path | None, as_json: bool) -> None:
    """What became of each change of a key: when it was committed in the source (and its
    transaction), where Debezium and the normaliser wrote it, and per listener when it was
    applied, filtered, delayed, parked, dead-lettered or superseded, with the target's
    answer. TNAME is TNAME or TNAME/Subtype; each KEY its key fields, e.g.
    ``person_id=42,pkey_string=office``. Kept for ``topics.history_retention_days`` (30)."""
    from mcq.history import trace as read_trace
    from mcq.history.show import lines, listeners_of, parse_key

    try:
        wanted = [parse_key(tname, k) for k in keys]
    except (ValueError, TypeError) as exc:
        _stop(f"mcq trace: {exc}", EXIT_CONFIG)
    registry = _current_registry(registry_file)
    listeners = sorted({name for k in wanted for name in listeners_of(registry, k)})
    found = read_trace(_settings(), wanted[0].tname, [k.text() for k in wanted], listeners)
    if as_json:
        _say(json.dumps({str(k): [vars(e) for e in found[k.text()]] for k in wanted}, indent=2, default=str))
        return
    for key in wanted:
        for line in lines(key, found[key.text()], listeners_of(registry, key)):
            _say(line)
