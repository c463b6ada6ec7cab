"""A projection state store's (or a listener's applied positions') snapshot on local disk:
a scheduled run restores it and reads only what its topics gained since, instead of every
record of every topic (as Kafka Streams restores a store from a local checkpoint plus the
changelog's tail).

A snapshot is used only while it still describes those topics; otherwise the store reads
them from the beginning, as without one, and :func:`unusable` says why:

* the same topics for the same tables, with the same topic ids (a topic deleted and
  created again under its name is another topic);
* every saved offset within its partition's log as it is now;
* younger than the topics' ``delete.retention.ms``: compaction may remove a tombstone
  that long after it was written, so an older snapshot could keep a key deleted since;
* written by this user and writable by no one else (``marshal`` is not made to read
  hostile bytes: only a file the process itself wrote is read).

The file is Python's ``marshal`` of plain values (dicts, tuples, sets, strings, numbers):
three times faster to read back than a pickle of the store's objects (1.9 s for the
10,000-people campus); written by another Python version, it is simply not used.

Saved atomically (a temporary file renamed into place), so a run killed while saving
leaves the previous snapshot, which is still a valid starting point.
"""

from __future__ import annotations

import marshal
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # .admin re-exports it without __all__

from mcq.config import Settings
from mcq.topics.exceptions import TopicReadError
from mcq.topics.read import all_watermarks

FORMAT = 1
SAVE_AFTER_RECORDS = 5_000
"""A store that restored a snapshot writes a new one at close only after reading this many
records since (or when the old one nears its age limit): writing the campus's 85k keys
takes 0.4 s, reading 5,000 records of a tail about 0.1 s."""

TP = tuple[str, int]


@dataclass
class Snapshot:
    """What a store held, read up to ``next`` (the next offset per partition)."""

    topics: dict[str, str]
    """topic -> the table/subtype it holds"""
    ids: dict[str, str]
    """topic -> its topic id"""
    next: dict[TP, int]
    state: dict[str, Any]
    """plain values only (what ``marshal`` writes)"""
    saved_at: float = field(default_factory=time.time)


def path_of(settings: Settings, listener: str, kind: str) -> Path | None:
    """Where a listener's ``kind`` of snapshot (``store``, ``applied``) is kept between runs
    (``state_dir``), one file per prefix and listener; None when snapshots are off."""
    home = settings.state_dir
    return None if home is None else home / f"{settings.topic_prefix}.{listener}.{kind}"


def topic_ids(admin: AdminClient, topics: list[str]) -> dict[str, str] | None:
    """Each topic's id, in one request; None if the cluster does not answer."""
    if not topics:
        return {}
    try:
        futures = admin.describe_topics(TopicCollection(topics), request_timeout=15)
        return {name: str(f.result().topic_id) for name, f in futures.items()}
    except KafkaException:
        return None


def delete_retention_ms(admin: AdminClient, topics: list[str]) -> int | None:
    """The shortest ``delete.retention.ms`` of the topics; None if it cannot be read."""
    if not topics:
        return None
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
        return min(int(f.result()["delete.retention.ms"].value) for f in futures.values())
    except (KafkaException, KeyError, ValueError):
        return None


def save(path: Path, snapshot: Snapshot) -> None:
    """Write ``snapshot`` to ``path`` atomically, readable by this user only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            values = {f.name: getattr(snapshot, f.name) for f in fields(snapshot)}
            out.write(marshal.dumps({"format": FORMAT, **values}))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path) -> Snapshot | str:
    """The snapshot at ``path``, or why there is none to use."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "no snapshot yet"
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return f"{path} is not this user's own file (owner uid {st.st_uid}, mode {st.st_mode & 0o777:o}): not read"
    try:
        saved = marshal.loads(path.read_bytes())  # a file this user wrote and only it may change
    except (OSError, EOFError, TypeError, ValueError) as exc:
        return f"{path} cannot be read ({type(exc).__name__})"
    if not isinstance(saved, dict) or saved.pop("format", None) != FORMAT:
        return f"{path} is of another format"
    try:
        return Snapshot(**saved)
    except TypeError:
        return f"{path} is of another format"


def unusable(
    snapshot: Snapshot, admin: AdminClient, topics: dict[str, str], ids: dict[str, str] | None, now: float
) -> str | None:
    """Why ``snapshot`` does not describe ``topics`` (topic -> table) as they are now; None if it does."""
    if snapshot.topics != topics:
        return "the store's topics changed"
    if ids is None or snapshot.ids != ids:
        return "a topic was created again since (another topic id)"
    retention = delete_retention_ms(admin, sorted(topics))
    if retention is None:
        return "the topics' delete.retention.ms cannot be read"
    age_s = now - snapshot.saved_at
    if age_s * 1000 >= retention:
        return f"it is {age_s:.0f} s old, older than delete.retention.ms ({retention} ms): deletes may be gone"
    try:
        marks = all_watermarks(admin, [TopicPartition(t, p) for t, p in snapshot.next])
    except TopicReadError as exc:
        return str(exc)
    for tp, offset in snapshot.next.items():
        low, high = marks.get(tp, (0, -1))
        if not low <= offset <= high:
            return f"{tp[0]}[{tp[1]}]: saved offset {offset} is outside the log ({low}..{high})"
    return None


def due(saved_at: float | None, read_since: int, retention_ms: Callable[[], int | None], now: float) -> bool:
    """Whether a store closing ``now`` should write a new snapshot: always when it restored
    none (``saved_at`` None) or read ``SAVE_AFTER_RECORDS`` records since; otherwise only
    when the one it restored is past half of its topics' ``delete.retention.ms`` (asked
    only then), as the next run could not use it much longer. Keeping the old one costs
    the next run a short tail, this run's own records included."""
    if saved_at is None or read_since >= SAVE_AFTER_RECORDS:
        return True
    retention = retention_ms()
    return retention is None or (now - saved_at) * 1000 >= retention / 2


def restorable(path: Path, admin: AdminClient, topics: dict[str, str], ids: dict[str, str] | None) -> Snapshot | str:
    """The snapshot at ``path`` if it still describes ``topics`` as they are now, else
    ``"read whole: <why>"`` (the line a store reports when it reads its topics whole)."""
    snap = load(path)
    if isinstance(snap, str):
        return f"read whole: {snap}"
    why = unusable(snap, admin, topics, ids, time.time())
    return snap if why is None else f"read whole: {why}"
