"""What the normaliser reads and writes, derived from the registry (pure, no Spark).

Each *feed* (a source table feeding a logical table/subtype) becomes one projection of
its raw Debezium topic; the outbox ``mcq.change_log`` of each source is read too, keeping
the entries that name that source or none (``mcq/capture/outbox.sql``: one database may
serve several deployments, and every source's connector captures the one outbox).
Explicit log entries for a logical table that has no source feed *are* its changes and
go to its logical topic; for a table fed by source tables they are refresh requests and
go to the refresh topic (a compacted logical topic must only ever hold real state).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcq.capture.connector import OUTBOX_TABLE, raw_topic
from mcq.refs import KEY_FIELDS, table_ref
from mcq.registry.model import Registry
from mcq.topics.plan import refresh_topic, withheld_topic


@dataclass(frozen=True)
class FeedPlan:
    raw_topic: str
    source_table: str
    tname: str
    subtype: str | None
    topic: str
    keys: tuple[tuple[str, str], ...]
    """(key field, source column) pairs."""
    watch: tuple[str, ...]
    columns: tuple[str, ...] = ()
    """The captured columns: a row image of an insert or update lacking one is withheld."""

    @property
    def ref(self) -> str:
        return table_ref(self.tname, self.subtype)

    def key_column(self, field: str) -> str | None:
        return dict(self.keys).get(field)


@dataclass(frozen=True)
class NormalizePlan:
    feeds: tuple[FeedPlan, ...]
    outbox_topics: tuple[str, ...]
    outbox_sources: tuple[tuple[str, str], ...]
    """(raw outbox topic, the source it was captured for): an entry scoped to another
    source is not this deployment's."""
    explicit_topics: tuple[tuple[str, str | None, str], ...]
    """(tname, subtype, logical topic) of tables whose changes come only from the explicit log."""
    refresh_topic: str
    withheld_topic: str
    """Where a change goes that cannot be delivered whole (streams/normalize.py: UNAVAILABLE)."""

    @property
    def raw_topics(self) -> list[str]:
        return sorted({f.raw_topic for f in self.feeds} | set(self.outbox_topics))

    @property
    def logical_topics(self) -> list[str]:
        return sorted({f.topic for f in self.feeds} | {t for _, _, t in self.explicit_topics})

    @property
    def shared_topics(self) -> frozenset[str]:
        """Logical topics fed by two or more raw topics: one key's changes come from
        several raw partitions, so their order needs a sort by source position. Every other
        logical topic's keys keep it from their one raw partition (Debezium writes a
        table's changes to one partition in commit order)."""
        raws: dict[str, set[str]] = {}
        for feed in self.feeds:
            raws.setdefault(feed.topic, set()).add(feed.raw_topic)
        return frozenset(topic for topic, topics in raws.items() if len(topics) > 1)


def plan_normalize(registry: Registry, prefix: str = "mcq") -> NormalizePlan:
    """The normaliser's plan for a registry and a logical topic prefix."""
    sources = {s.name: s for s in registry.sources}
    feeds = tuple(
        FeedPlan(
            raw_topic=raw_topic(sources[feed.source], feed.table),
            source_table=feed.table,
            tname=table.tname,
            subtype=table.subtype,
            topic=table.topic(prefix),
            keys=tuple((k, feed.keys[k]) for k in KEY_FIELDS if k in feed.keys),  # type: ignore[index]
            watch=feed.watched,
            columns=feed.columns,
        )
        for table in registry.tables
        for feed in table.feeds
    )
    return NormalizePlan(
        feeds=feeds,
        outbox_topics=tuple(raw_topic(s, OUTBOX_TABLE) for s in registry.sources),
        outbox_sources=tuple((raw_topic(s, OUTBOX_TABLE), s.name) for s in registry.sources),
        explicit_topics=tuple(
            (t.tname, t.subtype, t.topic(prefix)) for t in registry.tables if not t.feeds and t.entity is None
        ),
        refresh_topic=refresh_topic(prefix),
        withheld_topic=withheld_topic(prefix),
    )
