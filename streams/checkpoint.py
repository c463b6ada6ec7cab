"""Spark checkpoints that a killed normaliser left half-written.

Spark writes each checkpoint file (an offset log entry, a commit) to a hidden temporary
file, ``.<name>.<uuid>.tmp`` (and its ``..<name>.<uuid>.tmp.crc``), then renames it. A
process killed between the two leaves the temporary file behind. The entry it was
meant to become was never written, so the file holds nothing Spark needs. But Spark
4.1 counts it as content: a query killed while committing its first batch then refuses
to start again, for ever ("STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY ... commits should
be empty on batch 0"). Those files are removed before a query starts.
"""

from __future__ import annotations

import re
from pathlib import Path

TORN = re.compile(r"^\.\.?[^/]+\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp(\.crc)?$")


def clear_torn_writes(location: Path) -> list[Path]:
    """Remove the temporary files of interrupted checkpoint writes under ``location``;
    returns what was removed. Only for a checkpoint no running query uses."""
    if not location.is_dir():
        return []
    removed = []
    for path in sorted(location.rglob("*")):
        if path.is_file() and TORN.match(path.name):
            path.unlink()
            removed.append(path)
    return removed
