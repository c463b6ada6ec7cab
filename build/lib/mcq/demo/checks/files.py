"""What a file listener's batch files must hold, replayed in order, against the source."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.demo.checks.view import Check, Row, View, read_view
from mcq.refs import parse_ref
from mcq.registry.model import Registry

# ------------------------------------------------------------------ a file listener's batch files


def changes_in_jsonl(text: str) -> list[dict[str, Any]]:
    """The changes of a JSON Lines batch file, in order."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def changes_in_xml(text: str) -> list[dict[str, Any]]:
    """The changes of an XML batch file, in order, shaped like a JSON Lines change."""
    out: list[dict[str, Any]] = []
    for el in ET.fromstring(text).iter("change"):
        change: dict[str, Any] = {"tname": el.get("tname"), "subtype": el.get("subtype") or None}
        change["change_type"] = el.get("type")
        for k in el.findall("key/*"):
            change[k.tag] = int(k.text or 0) if k.tag in ("person_id", "pkey_number") else k.text
        for part in ("after", "before"):
            block = el.find(part)
            change[part] = (
                None
                if block is None
                else {c.get("name") or "": None if c.get("null") == "true" else (c.text or "") for c in block}
            )
        out.append(change)
    return out


def replay(changes: Iterable[Mapping[str, Any]]) -> dict[ChangeKey, Row]:
    """What an importer that applies changes in order holds at the end: each key's last
    after-state, or nothing when its last change is a delete (a change without an
    after-state says nothing of the row)."""
    state: dict[ChangeKey, Row] = {}
    for c in changes:
        key = ChangeKey(c["tname"], c.get("subtype"), c.get("person_id"), c.get("pkey_string"),
                        c.get("pkey_number"), c.get("aux_string"))  # fmt: skip
        if c.get("change_type") == "DELETE":
            state.pop(key, None)
        elif c.get("after") is not None:
            state[key] = dict(c["after"])
    return state


READERS: dict[str, Callable[[str], list[dict[str, Any]]]] = {"jsonl": changes_in_jsonl, "xml": changes_in_xml}


def read_files(directory: Path, fmt: str) -> tuple[int, dict[ChangeKey, Row]]:
    """How many batch files a directory holds, and their final content: the files applied
    in name order (the order they were written), the changes of each in file order."""
    files = sorted(directory.glob(f"*.{fmt}")) if directory.is_dir() else []
    read = READERS[fmt]
    return len(files), replay(c for f in files for c in read(f.read_text(encoding="utf-8")))


def compare_files(registry: Registry, view: View, have: Mapping[ChangeKey, Row]) -> tuple[int, list[str]]:
    """Differences between what a listener sees of the source and a file target's final
    content: a key missing or extra, a watched column (the feed's ``watch``, or every
    captured column) whose value differs, a column the listener may not see. Columns
    outside ``watch`` are housekeeping: their updates reach no listener, so the files may
    hold an older value."""
    wanted: dict[ChangeKey, tuple[Row, frozenset[str]]] = {}
    for ref, seen in view.items():
        table = registry.table(*parse_ref(ref))
        watched = frozenset(c for f in table.feeds for c in f.watched) if table else frozenset()
        for key, row in seen:
            wanted[key] = (row, watched)
    problems: list[str] = []
    for key, (row, watched) in wanted.items():
        got = have.get(key)
        if got is None:
            problems.append(f"{key.text()}: missing")
            continue
        for column in sorted(got.keys() - row.keys()):
            problems.append(f"{key.text()}: carries {column}, which the listener may not see")
        for column in sorted(watched & row.keys()):
            if got.get(column) != row[column]:
                problems.append(f"{key.text()}: {column} is {got.get(column)!r}, the source says {row[column]!r}")
    problems += [f"{k.text()}: in the files, not in the source" for k in sorted(have.keys() - wanted.keys(), key=str)]
    return len(wanted), problems


def check_files(settings: Settings, registry: Registry, listener: str) -> Check:
    """A file listener's batch files, applied in order, end with what the listener sees of
    the source: every row of its view, key by key, and nothing else."""
    found = registry.listener(listener)
    options = found.adapter.settings if found else {}
    directory, fmt = Path(str(options.get("directory", ""))), str(options.get("format", "jsonl"))
    check = Check(f"{listener} files ({directory})")
    if found is None or not options.get("directory") or fmt not in READERS:
        check.problems.append(f"{listener} is not a file listener with a directory and jsonl/xml format")
        return check
    count, have = read_files(directory, fmt)
    view = read_view(settings, registry, listener, [t.ref for t in registry.tables_of(listener)])
    check.checked, check.problems = compare_files(registry, view, have)
    check.target = f"{listener} files ({count} in {directory})"
    return check
