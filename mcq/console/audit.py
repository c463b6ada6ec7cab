"""The console's audit log: every action, and every read of record contents, as one JSON
line (who, what, on what, when, outcome), appended to a file the operator keeps
(``console.audit_log``), rotated by size (``audit.log.1`` the newest of the older files).
What a client sent (a user name) is cut to a bounded length first."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIELD_MAX = 200
"""The longest value of an entry's field (longer ones are cut, marked with ``…``)."""


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > FIELD_MAX:
        return value[:FIELD_MAX] + "…"
    return value


class AuditLog:
    def __init__(
        self,
        path: Path,
        counted: Callable[[str, str], None] | None = None,
        max_bytes: int = 10 * 1024 * 1024,
        keep: int = 5,
    ) -> None:
        self.path = path
        self._counted = counted  # (action, outcome) of each entry, for the metrics
        self._max_bytes = max_bytes
        self._keep = keep
        self._lock = threading.Lock()

    def record(self, who: str, role: str, action: str, target: str, outcome: str, **detail: Any) -> None:
        entry = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "who": _cut(who),
            "role": role,
            "action": action,
            "target": _cut(target),
            "outcome": outcome,
            **({"detail": {k: _cut(v) for k, v in detail.items()}} if detail else {}),
        }
        line = json.dumps(entry, default=str, sort_keys=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._rotate(len(line) + 1)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        if self._counted is not None:
            self._counted(action, outcome)

    def _rotate(self, adding: int) -> None:
        """When the file would grow past its size: ``.1`` .. ``.<keep>`` move up one, the
        oldest goes, the file becomes ``.1``."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size + adding <= self._max_bytes:
            return
        older = [self.path.with_name(f"{self.path.name}.{i}") for i in range(1, self._keep + 1)]
        older[-1].unlink(missing_ok=True)
        for newer, elder in zip(reversed(older[:-1]), reversed(older[1:]), strict=True):
            if newer.exists():
                newer.replace(elder)
        self.path.replace(older[0])

    def recent(self, n: int = 50) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()[-n:]
        return [json.loads(line) for line in reversed(lines) if line.strip()]
