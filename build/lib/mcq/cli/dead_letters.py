"""``mcq dlq …`` (a listener's dead letters: AQ's exception queue) and ``mcq withheld …``
(changes the normaliser withheld)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from rich.table import Table

from mcq.cli.app import _say, _settings, console, main
from mcq.output import cell

if TYPE_CHECKING:
    from consumers.runtime.dlq import DeadLetter, DeadLetters


@main.group()
def withheld() -> None:
    """Changes the normaliser withheld, as they could not be delivered whole (a large value
    left out of the WAL, a TRUNCATE, a row lacking a captured column): list them with each
    one's reason and repair, acknowledge them once repaired."""


@withheld.command("list")
@click.option("--all", "show_all", is_flag=True, help="Acknowledged ones too.")
def withheld_list(show_all: bool) -> None:
    """Each withheld change: its key, when, its raw record and why (exit 0)."""
    from streams.withheld import Withheld

    entries = [e for e in Withheld(_settings()).entries() if show_all or not e.acknowledged]
    if not entries:
        _say("no withheld changes" + ("" if show_all else " to acknowledge"))
        return
    for e in entries:  # a line each, not a table: the key and the reason are long
        _say(f"{e.partition}:{e.offset}  {e.entry_time}  {e.key}" + ("  (acknowledged)" if e.acknowledged else ""))
        _say(f"    {e.reason}")


@withheld.command("ack")
def withheld_ack() -> None:
    """Acknowledge every withheld change so far (after repairing the targets): `mcq status`
    alerts only on changes withheld after this."""
    from streams.withheld import Withheld

    count = Withheld(_settings()).acknowledge()
    _say(f"withheld: {count} change(s) acknowledged")


@main.group()
def dlq() -> None:
    """Dead letters of a listener: list, show, requeue, discard (AQ's exception queue)."""


def _dead_letters(name: str) -> DeadLetters:
    from consumers.runtime.dlq import DeadLetters

    return DeadLetters(_settings(), name)


@dlq.command("list")
@click.argument("name")
@click.option("--all", "include_resolved", is_flag=True, help="Also requeued and discarded entries.")
def dlq_list(name: str, include_resolved: bool) -> None:
    """Dead letters of listener NAME (unresolved ones unless --all)."""
    entries = _dead_letters(name).entries(include_resolved)
    table = Table("id", "failed at", "attempts", "from", "error", "resolution")
    for e in entries:
        table.add_row(
            e.id,
            e.failed_at,
            str(e.attempts),
            cell(e.origin),
            cell(e.error[:120]),
            e.resolution["action"] if e.resolution else "",
        )
    console.print(table)
    _say(f"{len(entries)} dead letter(s)")


@dlq.command("show")
@click.argument("name")
@click.argument("entry_id")
def dlq_show(name: str, entry_id: str) -> None:
    """One dead letter: its headers and the change it holds."""
    letters = _dead_letters(name)
    entry = letters.get(entry_id)
    console.print_json(
        json.dumps(
            {
                "id": entry.id,
                "headers": entry.headers,
                "resolution": entry.resolution,
                "change": letters.decoded(entry),
            },
            default=str,
        )
    )


def _pick(name: str, ids: tuple[str, ...], everything: bool) -> tuple[DeadLetters, list[DeadLetter]]:

    letters = _dead_letters(name)
    if not ids and not everything:
        raise click.UsageError("name entry ids, or --all")
    entries = letters.entries() if everything else [letters.get(i) for i in ids]
    return letters, entries


@dlq.command("requeue")
@click.argument("name")
@click.argument("ids", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every unresolved dead letter.")
@click.option("--reason", default="", help="Why (kept with the resolution).")
def dlq_requeue(name: str, ids: tuple[str, ...], everything: bool, reason: str) -> None:
    """Put dead letters back in NAME's retry lane, due now, with a fresh attempt count."""
    letters, entries = _pick(name, ids, everything)
    _say(f"requeued {letters.requeue(entries, reason)} dead letter(s) to {letters.topics.retry}")


@dlq.command("discard")
@click.argument("name")
@click.argument("ids", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every unresolved dead letter.")
@click.option("--reason", required=True, help="Why (kept with the resolution).")
def dlq_discard(name: str, ids: tuple[str, ...], everything: bool, reason: str) -> None:
    """Mark dead letters as dealt with; they stay in the topic for the record."""
    letters, entries = _pick(name, ids, everything)
    _say(f"discarded {letters.discard(entries, reason)} dead letter(s)")
