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

import json
import re
from pathlib import Path

Offsets = dict[str, dict[str, int]]
"""Spark's Kafka offsets: topic -> partition (as text) -> the next offset to read."""

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


def batch_offsets(location: Path, batch: int) -> Offsets | None:
    """Where micro-batch ``batch`` of the query checkpointed at ``location`` ends: its offset
    log entry (``v1``, the batch's metadata, then one line per source). None without one."""
    entry = location / "offsets" / str(batch)
    if batch < 0 or not entry.is_file():
        return None
    out: Offsets = {}
    for line in entry.read_text().splitlines()[2:]:
        if line.strip() and line.strip() != "-":
            for topic, partitions in json.loads(line).items():
                out[topic] = {str(p): int(o) for p, o in partitions.items()}
    return out


def topics_read(location: Path, batch: int) -> set[str] | None:
    """The topics micro-batch ``batch`` reads records of: those whose offsets moved since the
    batch before it (a topic or partition new since then reads from its beginning). None when
    that cannot be told (the first batch starts at the source's ``startingOffsets``, which no
    entry holds; an entry missing or unreadable): then every topic may have records."""
    try:
        end, start = batch_offsets(location, batch), batch_offsets(location, batch - 1)
    except (OSError, ValueError, AttributeError):
        return None
    if end is None or start is None:
        return None
    return {t for t, parts in end.items() if any(start.get(t, {}).get(p) != o for p, o in parts.items())}


REALTIME_POINTER = "realtime.current"


def realtime_dir(location: Path) -> Path:
    """Where the real-time queries of the normaliser's checkpoint ``location`` keep theirs:
    ``realtime/``, or the copy a take-over made and named in ``realtime.current``
    (``streams/handover.py``)."""
    try:
        name = (location / REALTIME_POINTER).read_text().strip()
    except OSError:
        return location / "realtime"
    return location / name if name.startswith("realtime") and "/" not in name else location / "realtime"


def started(location: Path, mode: str) -> bool:
    """Whether a query of ``mode`` ever planned a batch under ``location`` (an offset log
    entry exists). A micro-batch run keeps its log at the top (``offsets/``), a real-time
    run below ``realtime/`` and ``ordered/``: each mode starts fresh once."""
    if mode == "microbatch":
        return _has_entry(location / "offsets")
    return planned(realtime_dir(location)) or planned(location / "ordered")


def planned(root: Path) -> bool:
    """Whether any query checkpointed below ``root`` planned a batch (an offset log entry)."""
    return any(_has_entry(log) for log in root.glob("**/offsets"))


def _has_entry(log: Path) -> bool:
    return log.is_dir() and any(p.is_file() and p.name.isdigit() for p in log.iterdir())


# KAFKA_DATA_LOSS's text (the class name itself is not always in the message a failed query carries)
DATA_LOSS = re.compile(
    r"Some data may have been lost because.*?Reason:\s*(.+?)(?:\s+with consumer group|\n|SQLSTATE|$)", re.S
)


def lost_raw_reason(message: str) -> str | None:
    """What Spark's Kafka source said when raw records it had not read yet were gone
    (``KAFKA_DATA_LOSS``: retention passed the checkpoint's offsets, a topic deleted and
    made again), e.g. "Starting offset for t-0 was 3 but consumer reset to 5"; None for
    any other failure."""
    found = DATA_LOSS.search(message)
    if found is None:
        return None
    return " ".join(found.group(1).split()).rstrip(".")
