"""The registry's run-time home: a compacted Kafka topic, as Connect and schema
registries keep theirs -- one per deployment, ``<topic prefix>._registry`` (beside its
``<prefix>._refresh``), so two registries applied under two ``MCQ_TOPIC_PREFIX`` values
never replace each other.

One record per definition, keyed ``<kind>/<id>`` (``table/PERSON/Telephone``,
``listener/LDAP``, ``interest/LDAP|PERSON|*``), value the definition as JSON; a removed
definition is a tombstone. Compaction keeps the last state of each, so a process that
reads the topic from the beginning has the whole registry, and one that keeps reading
sees changes as they are applied — no redeploy.

What is read back is validated again, as a registry file is: a record the topic holds is
input, whoever wrote it. A record that is not a definition, or definitions that together
break the registry's rules, are refused (:class:`RegistryStoreInvalid`, naming the topic,
key and offset); a running process keeps the registry it had.

``provenance/<TNAME>[/<subtype>]`` records the first-seen origin of each table/subtype
(the paper's call-stack column) in a topic of its own, ``<prefix>._provenance``: the
normaliser writes it, and may only read the registry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pydantic import ValidationError

from mcq.config import Settings
from mcq.registry.exceptions import RegistryStoreError, RegistryStoreInvalid
from mcq.registry.model import ALL_SUBTYPES, Interest, Listener, LogicalTable, Registry, Source
from mcq.topics.exceptions import TopicReadError
from mcq.topics.follow import TopicFollower
from mcq.topics.plan import provenance_topic, registry_topic

_KINDS: dict[str, type[Source] | type[LogicalTable] | type[Listener] | type[Interest]] = {
    "source": Source,
    "table": LogicalTable,
    "listener": Listener,
    "interest": Interest,
}


def definition_key(item: Source | LogicalTable | Listener | Interest) -> str:
    if isinstance(item, Source):
        return f"source/{item.name}"
    if isinstance(item, LogicalTable):
        return f"table/{item.ref}"
    if isinstance(item, Listener):
        return f"listener/{item.name}"
    return f"interest/{item.listener}|{item.tname}|{item.subtype if item.subtype is not None else ''}"


def definitions(registry: Registry) -> dict[str, dict[str, Any]]:
    """Every definition of a registry by its store key, as JSON-ready dicts."""
    items: list[Source | LogicalTable | Listener | Interest] = [
        *registry.sources,
        *registry.tables,
        *registry.listeners,
        *registry.interests,
    ]
    return {definition_key(i): i.model_dump(mode="json") for i in items}


@dataclass(frozen=True)
class Provenance:
    """Where a table/subtype was first seen: which source table or explicit-log caller, when."""

    ref: str
    origin: str
    first_seen: str


@dataclass(frozen=True)
class RegistryDiff:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    views_changed: list[str] = field(default_factory=list)
    """Interests (of ``changed``) whose rule or columns changed: their listener's view."""
    captures_changed: dict[str, list[str]] = field(default_factory=dict)
    """Source -> what its feeds capture that differs (``schema.table + column``, ...): its connector."""

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)

    def lines(self) -> list[str]:
        return [f"+ {k}" for k in self.added] + [f"~ {k}" for k in self.changed] + [f"- {k}" for k in self.removed]

    def notes(self) -> list[str]:
        """Everything a change means beyond the store: connectors to update, then targets."""
        return self.capture_notes() + self.view_notes()

    def capture_notes(self) -> list[str]:
        """A feed's captured columns or tables changed: its source's connector captures only
        what the registry named when ``mcq connect apply`` last ran, so until it runs again a
        new column or table reaches no listener (an update of only that column is not even
        seen)."""
        return [
            f"note: the capture of source {source} changed ({'; '.join(parts)}): run `mcq connect apply` "
            "to update its connector; rows already in the source carry the change to a listener as each "
            "changes, or now with `mcq refresh LISTENER --from source`"
            for source, parts in self.captures_changed.items()
        ]

    def view_notes(self) -> list[str]:
        """What an interest changed or removed means for its listener's target, which mirrors
        the listener's view: rows already in the topics enter or leave it only as each one
        changes, unless the listener is refreshed. (An interest added reads its topic from
        the beginning: nothing to say.)"""
        out = []
        for key in self.views_changed + [k for k in self.removed if k.startswith("interest/")]:
            listener, tname, subtype = key.removeprefix("interest/").split("|")
            one = subtype not in ("", ALL_SUBTYPES)
            what = f"{tname}/{subtype}" if one else tname
            if key in self.removed:
                out.append(f"note: {listener} no longer takes {what}: its target keeps the rows it has of it")
                continue
            chosen = f" --subtype {subtype}" if one else " --no-subtype" if subtype == "" else ""
            refresh = f"mcq refresh {listener} --tname {tname}{chosen}"
            out.append(
                f"note: {listener} sees {what} through another rule or columns: its target takes the new view's "
                f"rows (and drops the old one's) as each row changes; `{refresh}` or `mcq reconcile {listener} "
                "--repair` brings it to the new view now"
            )
        return out


def _captured(defs: dict[str, dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(source, schema.table) -> the columns the registry's feeds capture from it."""
    out: dict[tuple[str, str], set[str]] = {}
    for key, value in defs.items():
        if key.startswith("table/"):
            for feed in value.get("feeds") or ():
                out.setdefault((feed["source"], feed["table"]), set()).update(feed.get("columns") or ())
    return out


def _captures_changed(current: dict[str, dict[str, Any]], wanted: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    before, after = _captured(current), _captured(wanted)
    out: dict[str, list[str]] = {}
    for source, table in sorted(before.keys() | after.keys()):
        old, new = before.get((source, table)), after.get((source, table))
        if old is None:
            part = f"{table}: a new table"
        elif new is None:
            part = f"{table}: no longer fed"
        elif old != new:
            part = f"{table}: " + ", ".join(
                [*(f"+ {c}" for c in sorted(new - old)), *(f"- {c}" for c in sorted(old - new))]
            )
        else:
            continue
        out.setdefault(source, []).append(part)
    return out


def diff_definitions(current: dict[str, dict[str, Any]], wanted: dict[str, dict[str, Any]]) -> RegistryDiff:
    return RegistryDiff(
        captures_changed=_captures_changed(current, wanted),
        added=sorted(k for k in wanted if k not in current),
        changed=sorted(k for k in wanted if k in current and current[k] != wanted[k]),
        removed=sorted(k for k in current if k not in wanted),
        views_changed=sorted(
            k
            for k in wanted
            if k.startswith("interest/")
            and k in current
            and any(current[k].get(f) != wanted[k].get(f) for f in ("rule", "columns"))
        ),
    )


def assemble(
    records: dict[str, Any], topic: str = "the registry store", offsets: dict[str, int] | None = None
) -> Registry:
    """A Registry from store records (definitions only), in a stable order, validated as a
    registry file is; :class:`RegistryStoreInvalid` lists every problem with its key."""
    offsets = offsets or {}

    def where(key: str) -> str:
        return f"{topic}: record {key!r}" + (f" (offset {offsets[key]})" if key in offsets else "")

    parts: dict[str, list[Any]] = {kind: [] for kind in _KINDS}
    problems: list[str] = []
    for key in sorted(records):
        kind = key.split("/", 1)[0]
        if kind not in _KINDS:
            continue
        value = records[key]
        if not isinstance(value, dict):
            problems.append(f"{where(key)}: not a JSON object")
            continue
        try:
            item = _KINDS[kind].model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(str(x) for x in first["loc"])
            problems.append(f"{where(key)}: {at + ': ' if at else ''}{first['msg']}")
            continue
        if definition_key(item) != key:
            problems.append(f"{where(key)}: holds the definition of {definition_key(item)!r}")
            continue
        parts[kind].append(item)
    if problems:
        raise RegistryStoreInvalid(problems)
    registry = Registry(
        sources=tuple(parts["source"]),
        tables=tuple(parts["table"]),
        listeners=tuple(parts["listener"]),
        interests=tuple(parts["interest"]),
    )
    sections: dict[str, tuple[Any, ...]] = {
        "sources": registry.sources,
        "tables": registry.tables,
        "listeners": registry.listeners,
        "interests": registry.interests,
    }
    for path, message in registry.problems():
        section, index = path[0], path[1] if len(path) > 1 else None
        items = sections.get(str(section), ())
        key = definition_key(items[index]) if isinstance(index, int) and index < len(items) else str(section)
        problems.append(f"{where(key)}: {message}")
    if problems:
        raise RegistryStoreInvalid(problems)
    return registry


class RegistryStore:
    """Read and write the registry topic."""

    def __init__(self, settings: Settings, topic: str | None = None) -> None:
        self.settings = settings
        self.topic = topic or registry_topic(settings.topic_prefix)
        self.provenance_topic = provenance_topic(settings.topic_prefix)
        self._conf = settings.kafka.client_config()

    def ensure_topic(self, topic: str | None = None) -> None:
        topic = topic or self.topic
        admin = AdminClient(self._conf)
        if topic in admin.list_topics(timeout=10).topics:
            return
        spec = NewTopic(
            topic,
            num_partitions=1,  # one partition: a reader sees definitions in the order applied
            replication_factor=self.settings.topics.replication_factor,  # -1: the cluster's default
            config={
                "cleanup.policy": "compact",
                "min.compaction.lag.ms": "0",
                "retention.ms": "-1",
                **self.settings.topics.config(),
            },
        )
        try:
            admin.create_topics([spec], operation_timeout=30)[topic].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RegistryStoreError(f"cannot create topic {topic}: {exc}") from None

    # ---------------------------------------------------------------- reading

    def _reader(self, topic: str) -> RegistryReader:
        self.ensure_topic(topic)
        reader = RegistryReader(self.settings, topic)
        try:
            reader.catch_up()
        except BaseException:
            reader.close()
            raise
        return reader

    def records(self) -> dict[str, Any]:
        """The current record of every key (tombstones applied), read from the beginning."""
        reader = self._reader(self.topic)
        try:
            return dict(reader.records)
        finally:
            reader.close()

    def read(self) -> Registry:
        reader = self._reader(self.topic)
        try:
            return reader.registry()
        finally:
            reader.close()

    def _provenance_records(self) -> dict[str, Any]:
        """Provenance records: those of the registry topic an earlier version wrote there,
        then the provenance topic's (which win)."""
        out = {k: v for k, v in self.records().items() if k.startswith("provenance/")}
        reader = self._reader(self.provenance_topic)
        try:
            out.update(reader.records)
        finally:
            reader.close()
        return out

    def provenance(self) -> list[Provenance]:
        out = []
        for k, v in sorted(self._provenance_records().items()):
            if k.startswith("provenance/") and isinstance(v, dict) and {"origin", "first_seen"} <= v.keys():
                out.append(Provenance(ref=k.split("/", 1)[1], origin=str(v["origin"]), first_seen=str(v["first_seen"])))
        return out

    # ---------------------------------------------------------------- writing

    def _produce(self, items: dict[str, dict[str, Any] | None], topic: str | None = None) -> None:
        topic = topic or self.topic
        producer = Producer({**self._conf, "enable.idempotence": True, "acks": "all"})
        failures: list[str] = []

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.key()!r}: {err}")

        for key, value in items.items():
            payload = None if value is None else json.dumps(value, sort_keys=True).encode()
            producer.produce(topic, key=key.encode(), value=payload, on_delivery=report)
        remaining = producer.flush(30)
        if failures or remaining:
            raise RegistryStoreError(f"writing {topic}: {failures or f'{remaining} records undelivered'}")

    def diff(self, registry: Registry) -> RegistryDiff:
        current = {k: v for k, v in self.records().items() if k.split("/", 1)[0] in _KINDS}
        return diff_definitions(current, definitions(registry))

    def apply(self, registry: Registry) -> RegistryDiff:
        """Make the store hold exactly this registry; return what changed."""
        wanted = definitions(registry)
        change = self.diff(registry)
        updates: dict[str, dict[str, Any] | None] = {k: wanted[k] for k in change.added + change.changed}
        updates.update({k: None for k in change.removed})
        if updates:
            self._produce(updates)
        return change

    def record_first_seen(self, ref: str, origin: str, at: datetime | None = None) -> Provenance:
        """Record where a table/subtype was first seen, unless it already has a record."""
        return self.record_first_seen_all({ref: origin}, at)[ref]

    def record_first_seen_all(self, origins: dict[str, str], at: datetime | None = None) -> dict[str, Provenance]:
        """:meth:`record_first_seen` for several refs at once: one read of the store, one
        write (a normaliser's first batch meets every table at once)."""
        records = self._provenance_records()
        stamp = (at or datetime.now(UTC)).isoformat()
        out: dict[str, Provenance] = {}
        new: dict[str, dict[str, Any] | None] = {}
        for ref, origin in origins.items():
            existing = records.get(f"provenance/{ref}")
            if existing:
                out[ref] = Provenance(ref, existing["origin"], existing["first_seen"])
            else:
                new[f"provenance/{ref}"] = {"origin": origin, "first_seen": stamp}
                out[ref] = Provenance(ref, origin, stamp)
        if new:
            self._produce(new, self.provenance_topic)
        return out


_NOT_JSON = "<not JSON>"


class RegistryReader:
    """A long-lived reader: catches up once, then :meth:`poll` applies new records, so a
    running listener sees an interest added later without restarting."""

    def __init__(self, settings: Settings, topic: str | None = None) -> None:
        self.topic = topic = topic or registry_topic(settings.topic_prefix)
        self.records: dict[str, Any] = {}
        self.stamps: dict[str, int] = {}
        """When each record was written (Kafka timestamp, ms)."""
        self.offsets: dict[str, int] = {}
        self._assembled: Registry | None = None
        self._follower = TopicFollower(settings, [topic], self._fold, "registry-reader")
        self._follower.start()

    def _fold(self, msg: Message) -> None:
        key = (msg.key() or b"").decode("utf-8", "replace")
        value = msg.value()
        self._assembled = None
        if value is None:
            self.records.pop(key, None)
            self.stamps.pop(key, None)
            self.offsets.pop(key, None)
            return
        try:
            self.records[key] = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            self.records[key] = _NOT_JSON  # refused when the registry is assembled
        self.stamps[key] = msg.timestamp()[1]
        self.offsets[key] = msg.offset() or 0

    def catch_up(self, timeout_s: float = 30.0) -> None:
        """Read up to the end of the topic as it is now."""
        try:
            self._follower.catch_up(timeout_s)
        except TopicReadError as exc:
            raise RegistryStoreError(str(exc)) from None

    def poll(self, timeout_s: float = 1.0) -> bool:
        """Apply whatever arrived; True when something changed."""
        changed = False
        try:
            while self._follower.take(timeout_s):
                changed = True
                timeout_s = 0
        except TopicReadError as exc:
            raise RegistryStoreError(str(exc)) from None
        return changed

    def registry(self) -> Registry:
        """The registry the records make, validated (:func:`assemble`); kept until a record
        arrives, so asking again costs nothing."""
        if self._assembled is None:
            self._assembled = assemble(self.records, self.topic, self.offsets)
        return self._assembled

    def close(self) -> None:
        self._follower.close()
