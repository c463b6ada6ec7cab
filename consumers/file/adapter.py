"""Write each batch of changes as one file, JSON Lines or XML (the MCQ paper's "generic
listener that generates XML"), for a system that picks files up.

A file appears whole or not at all: it is written under a temporary name, flushed to
disk and renamed into place. Each change carries its idempotency key (key and source
position), so a reader can ignore a change delivered twice (after a crash between the
write and the commit). Names sort in the order the files were written (names.py).
"""

from __future__ import annotations

import json
import os
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consumers.adapter import Adapter, ReadBack, rows_in_view
from consumers.exceptions import AdapterError, ChangeRejected, TargetUnavailable
from consumers.file.names import FileNamer
from consumers.file.settings import FileSettings
from consumers.payload import Payload
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.refs import KEY_FIELDS
from mcq.registry.model import Listener

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView


def to_xml(listener: str, changes: Sequence[Change]) -> bytes:
    root = ET.Element("changes", listener=listener)
    for change in changes:
        c = change.as_json()
        el = ET.SubElement(
            root, "change", type=change.change_type, tname=change.key.tname, subtype=change.key.subtype or "",
            position=str(change.position), idempotency_key=c["idempotency_key"], entry_time=c["entry_time"],
        )  # fmt: skip
        key = ET.SubElement(el, "key")
        for name in KEY_FIELDS:
            value = getattr(change.key, name)
            if value is not None:
                ET.SubElement(key, name).text = str(value)
        for part in ("after", "before"):
            state = c[part]
            if state is not None:
                block = ET.SubElement(el, part)
                for column, value in sorted(state.items()):
                    col = ET.SubElement(block, "column", name=column)
                    if value is None:
                        col.set("null", "true")
                    else:
                        col.text = value
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"


def to_jsonl(changes: Sequence[Change]) -> bytes:
    return b"".join(json.dumps(c.as_json(), sort_keys=True).encode() + b"\n" for c in changes)


class FileAdapter(Adapter, ReadBack):
    kind = "file"
    settings_model = FileSettings
    settings: FileSettings

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        self.names = FileNamer(listener.name)
        self.payload = Payload(self.settings.template, as_json=True) if self.settings.template else None

    def line(self, change: Change) -> str:
        """One change as its JSON line (ChangeRejected when its template fails for it)."""
        if self.payload is not None:
            return self.payload.render(self.listener.name, self.registry, change)
        return json.dumps(change.as_json(), sort_keys=True)

    def preview(self, change: Change) -> str:
        if self.settings.format == "xml":
            return to_xml(self.listener.name, [change]).decode()
        return json.dumps(json.loads(self.line(change)), indent=2, sort_keys=True, ensure_ascii=False)

    def open(self) -> None:
        try:
            self.settings.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TargetUnavailable(f"file: {self.settings.directory}: {exc.strerror}") from None

    def ready(self) -> bool:
        return self.settings.directory.is_dir() and os.access(self.settings.directory, os.W_OK)

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        if not changes:
            return []
        fmt = self.settings.format
        outcomes: list[AdapterError | None] = [None] * len(changes)
        if fmt == "xml":
            body = to_xml(self.listener.name, changes)
        else:
            lines = []
            for i, change in enumerate(changes):
                try:
                    lines.append(self.line(change).encode() + b"\n")
                except ChangeRejected as exc:  # this change is dead-lettered; the others are written
                    outcomes[i] = exc
            body = b"".join(lines)
            if not lines:
                return outcomes
        name = self.names.next()
        final = self.settings.directory / f"{name}.{fmt}"
        temp = self.settings.directory / f".{name}.{uuid.uuid4().hex}.tmp"
        try:
            self._write(temp, body)
            os.replace(temp, final)  # atomic: readers see the whole file or none
            self._fsync_dir(self.settings.directory)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            return [TargetUnavailable(f"file: writing {final}: {exc.strerror}")] * len(changes)
        return outcomes

    @staticmethod
    def _write(path: Path, body: bytes) -> None:
        with path.open("wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ read back (mcq reconcile)
    # what a reader of the files holds: every file of this listener applied in name order
    # (the order they were written), each change setting its key's state or deleting it

    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        """A row per key in the listener's view, holding the columns it may see."""
        return rows_in_view(view, states)

    def read_back(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        fmt = self.settings.format
        for path in sorted(self.settings.directory.glob(f"{self.listener.name}-*.{fmt}")):
            for key, change_type, after in _jsonl_changes(path) if fmt == "jsonl" else _xml_changes(path):
                if change_type == "DELETE":
                    out.pop(key, None)
                else:
                    out[key] = after
        return out

    def keys_of(self, obj: str) -> list[ChangeKey]:
        return [ChangeKey.from_text(obj)]


def _jsonl_changes(path: Path) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            c = json.loads(line)
            key = ChangeKey(c["tname"], c.get("subtype"), *(c.get(f) for f in KEY_FIELDS))
            yield key.text(), c["change_type"], c.get("after")


def _xml_changes(path: Path) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    for el in ET.parse(path).getroot().iter("change"):
        fields: dict[str, Any] = {f: None for f in KEY_FIELDS}
        found = el.find("key")
        for item in found if found is not None else []:
            fields[item.tag] = int(item.text or 0) if item.tag in ("person_id", "pkey_number") else item.text
        key = ChangeKey(el.get("tname") or "", el.get("subtype") or None, *(fields[f] for f in KEY_FIELDS))
        block = el.find("after")
        after = None
        if block is not None:
            after = {col.get("name") or "": None if col.get("null") == "true" else (col.text or "") for col in block}
        yield key.text(), el.get("type") or "", after
