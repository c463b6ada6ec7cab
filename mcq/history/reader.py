"""Reading one key's history back: the partition that holds it, its events in order."""

from __future__ import annotations

import logging
from collections import defaultdict

from mcq.config import Settings
from mcq.history.events import BadHistoryEvent, Event
from mcq.history.topic import history_topic, partition_of
from mcq.topics.listener import ListenerTopics
from mcq.topics.named import topic_partitions
from mcq.topics.read import read_to_end

log = logging.getLogger(__name__)


def _order(event: Event) -> tuple[tuple[int, ...], int, float]:
    try:
        position = tuple(int(p) for p in event.position.split("/"))
    except ValueError:
        position = (0,)
    return (position, 0 if event.step == "captured" else 1, event.at)


def trace(
    settings: Settings, tname: str, keys: list[str], listeners: list[str], timeout_s: float = 60.0
) -> dict[str, list[Event]]:
    """Each key's events: the capture's (``<prefix>._history``) and those of each of
    ``listeners`` (its own history topic), by change (source position), the capture first,
    then the listeners' steps as they happened. A record that is not an event, or an event
    of another listener in a listener's topic, is skipped with a warning naming where."""
    prefix = settings.topic_prefix
    sources: list[tuple[str, str | None]] = [(history_topic(prefix), None)]
    sources += [(ListenerTopics(prefix, name).history, name) for name in listeners]
    wanted_keys = {f"{tname}:{k}".encode() for k in keys}
    found: dict[str, list[Event]] = defaultdict(list)
    for topic, listener in sources:
        partitions = topic_partitions(settings, topic)
        if not partitions:
            continue
        wanted = sorted({partition_of(tname, k, partitions) for k in keys})
        for msg in read_to_end(settings, topic, timeout_s, wanted):
            if msg.key() not in wanted_keys:
                continue
            where = f"{topic}[{msg.partition()}]@{msg.offset()}"
            try:
                event = Event.from_json(msg.value(), where)
            except BadHistoryEvent as exc:
                log.warning("trace: skipped %s", exc)
                continue
            if event.listener != listener or (listener is None and event.step != "captured"):
                log.warning("trace: skipped %s: an event of %s", where, event.listener or "the normaliser")
                continue
            if event.tname == tname and event.key in keys:
                found[event.key].append(event)
    for key, events in found.items():  # a follower or listener restarted mid-batch wrote some twice
        seen: set[tuple[object, ...]] = set()
        kept = []
        for e in events:
            same = (e.step, e.listener, e.position, e.logical, e.raw, e.answer)
            if same not in seen:
                seen.add(same)
                kept.append(e)
        found[key] = kept
    return {k: sorted(found.get(k, []), key=_order) for k in keys}
