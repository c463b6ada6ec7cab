"""``mcq registry …``: validate, apply, diff and show the registry (tables/subtypes, listeners,
interests)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from mcq.cli.app import REGISTRY_FILE, _err, _load_registry_file, _say, _settings, _stop, _store, console, main
from mcq.output import cell
from mcq.refs import table_ref
from mcq.registry.model import Interest


@main.group()
def registry() -> None:
    """The registry: tables/subtypes, listeners and interests (see examples/campus.yaml)."""


@registry.command()
@REGISTRY_FILE
@click.option(
    "--online",
    is_flag=True,
    help="Also check what needs the targets: each mapped ldap listener's object classes and "
    "attributes against its directory's own schema.",
)
def validate(file: Path, online: bool) -> None:
    """Check a registry file; every problem is one line with file:line (exit 1)."""
    reg = _load_registry_file(file)
    if online:
        from consumers.ldap.schema_check import schema_problems
        from mcq.registry.loader import locate

        problems = schema_problems(reg, _settings())
        if problems:
            _stop("\n".join(locate(file.read_text(), str(file), problems)))
    _say(
        f"{file}: valid: {len(reg.sources)} sources, {len(reg.tables)} tables/subtypes, "
        f"{len(reg.listeners)} listeners, {len(reg.interests)} interests"
    )


@registry.command("apply")
@REGISTRY_FILE
def registry_apply(file: Path) -> None:
    """Publish a registry file to this prefix's store (<MCQ_TOPIC_PREFIX>._registry); running
    processes of the same prefix pick it up."""
    reg = _load_registry_file(file)
    change = _store().apply(reg)
    for line in change.lines() or ["no change"]:
        _say(line)
    for line in change.notes():
        _say(line)


@registry.command("diff")
@REGISTRY_FILE
def registry_diff(file: Path) -> None:
    """Show what `apply FILE` would change (exit 0 either way)."""
    change = _store().diff(_load_registry_file(file))
    for line in change.lines() or ["no change"]:
        _say(line)
    for line in change.notes():
        _say(line)


@registry.command("show")
def registry_show() -> None:
    """Show the registry as running processes see it, with first-seen provenance."""
    store = _store()
    reg = store.read()
    if not (reg.sources or reg.tables or reg.listeners):
        _err(
            f"mcq registry show: the store {store.topic} is empty; each topic prefix has its own: "
            f"apply a registry file under MCQ_TOPIC_PREFIX={_settings().topic_prefix}"
        )
    provenance = {p.ref: p for p in store.provenance()}
    tables = Table(title="tables / subtypes")
    for col in ("table/subtype", "topic", "fed by", "first seen"):
        tables.add_column(col)
    for t in reg.tables:
        p = provenance.get(t.ref)
        tables.add_row(
            t.ref,
            t.topic(_settings().topic_prefix),
            ", ".join(f.table for f in t.feeds) or "(explicit log)",
            cell(f"{p.origin} at {p.first_seen}" if p else "-"),
        )
    console.print(tables)
    listeners = Table(title="listeners")
    for col in ("listener", "schedule", "adapter", "owner", "interests"):
        listeners.add_column(col)
    for lst in reg.listeners:
        interests = [_interest_line(i) for i in reg.interests_of(lst.name)]
        listeners.add_row(lst.name, lst.schedule, lst.adapter.type, cell(lst.owner), cell("\n".join(interests)))
    console.print(listeners)


def _interest_line(i: Interest) -> str:
    """One interest as ``registry show`` prints it: table/subtype, rule, allow-list, delay, expiry."""
    parts = [table_ref(i.tname, i.subtype)]
    if i.rule:
        parts.append(f"[{i.rule}]")
    if i.columns is not None:
        parts.append(f"columns: {', '.join(i.columns)}")
    if i.delay_s:
        parts.append(f"delay {i.delay_s:g} s")
    if i.expire_after_s:
        parts.append(f"expires after {i.expire_after_s:g} s")
    return " ".join(parts)
