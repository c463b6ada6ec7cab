"""Checks made before a table's raw topic gets more than one partition (``Feed.raw_partitions``).

Debezium's producer spreads a table's rows over the partitions by their primary key (the
record key), and the normaliser reads each partition in a task of its own. Commit order
then holds per partition only, so two rules keep one logical key's changes in order:

- every row of one logical key is in one partition: the feed's key fields hold every
  primary key column (a table without a primary key has no record key at all, and its
  rows would be spread at random);
- a key never moves: the partitions of a raw topic that exists are not raised, since a key's
  later changes would land in another partition than its earlier ones, which another
  task may not have read yet.
"""

from __future__ import annotations

from typing import Any

import psycopg

from mcq.capture.connector import raw_topic_partitions
from mcq.capture.exceptions import CaptureError
from mcq.config import Settings
from mcq.pgcatalog import primary_key_columns
from mcq.registry.model import Registry

RAISE_RUNBOOK = "docs/how-to/partition-a-big-table.md"


def refuse_unkeyed_partitions(conn: psycopg.Connection[Any], registry: Registry) -> None:
    """Refuse ``raw_partitions`` on a feed whose key fields do not hold its table's primary key."""
    problems: list[str] = []
    for table in registry.tables:
        for feed in table.feeds:
            if (feed.raw_partitions or 1) <= 1:
                continue
            primary = primary_key_columns(conn, feed.table)
            held = set(feed.keys.values())
            if not primary:
                problems.append(f"{feed.table} has no primary key, so Debezium writes its changes without a key")
            elif missing := [c for c in primary if c not in held]:
                problems.append(
                    f"table {table.ref}'s key fields ({', '.join(sorted(held))}) do not hold {feed.table}'s primary "
                    f"key column {', '.join(missing)}, so one logical key's rows would be in several partitions"
                )
    if problems:
        raise CaptureError(
            "raw_partitions keeps a key's changes in order only where each logical key's rows share a partition: "
            + "; ".join(problems) + ": map the primary key into the key fields, or leave raw_partitions unset"
        )  # fmt: skip


def refuse_raised_partitions(settings: Settings, registry: Registry) -> None:
    """Refuse a ``raw_partitions`` above the partitions of a raw topic that exists already."""
    from confluent_kafka.admin import AdminClient

    asked = raw_topic_partitions(registry)
    if not asked:
        return
    known = AdminClient(settings.kafka.client_config()).list_topics(timeout=15).topics
    raised = {t: (len(known[t].partitions), n) for t, n in sorted(asked.items()) if t in known}
    raised = {t: (have, n) for t, (have, n) in raised.items() if have < n}
    if raised:
        said = ", ".join(f"{t} has {have}, the registry asks for {n}" for t, (have, n) in raised.items())
        raise CaptureError(
            f"raw topics exist with fewer partitions than raw_partitions ({said}): more partitions would move "
            f"keys whose earlier changes are still in the old one, and two tasks could reorder them. Leave "
            f"raw_partitions at the topic's count; mcq cannot raise it in place yet ({RAISE_RUNBOOK})"
        )
