"""One key's history: every step of each of its changes, kept apart from the compacted
topics (which keep only a key's last state) in an append-only topic with its own
retention (``<prefix>._history``, 30 days unless ``topics.history_retention_days``).

The normaliser's side (each change's source commit time and transaction, its raw and
logical positions) is recorded by a follower of the logical topics; each listener records
what it did with each change (applied, filtered, parked, dead-lettered, superseded,
skipped) with the target's answer, in the same batch as its acknowledgement. ``mcq
trace TNAME KEY...`` and the console's trace page read it back, step by step."""

from mcq.history.events import STEPS, BadHistoryEvent, Event, Step
from mcq.history.reader import trace
from mcq.history.topic import HISTORY_PARTITIONS, history_topic, partition_of
from mcq.history.writer import HistoryWriter

__all__ = [
    "HISTORY_PARTITIONS",
    "STEPS",
    "BadHistoryEvent",
    "Event",
    "HistoryWriter",
    "Step",
    "history_topic",
    "partition_of",
    "trace",
]
