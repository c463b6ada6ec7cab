"""The console's audit log: every action as one JSON line (who, what, on what, when, outcome),
appended to a file the operator keeps (``console.audit_log``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class AuditLog:
    def __init__(self, path: Path, counted: Callable[[str, str], None] | None = None) -> None:
        self.path = path
        self._counted = counted  # (action, outcome) of each entry, for the metrics
        self._lock = threading.Lock()

    def record(self, who: str, role: str, action: str, target: str, outcome: str, **detail: Any) -> None:
        entry = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "who": who,
            "role": role,
            "action": action,
            "target": target,
            "outcome": outcome,
            **({"detail": detail} if detail else {}),
        }
        line = json.dumps(entry, default=str, sort_keys=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        if self._counted is not None:
            self._counted(action, outcome)

    def recent(self, n: int = 50) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()[-n:]
        return [json.loads(line) for line in reversed(lines) if line.strip()]
