"""The registry as data: sources, logical tables, listeners and interests.

This is the Meta Change Queue's Meta_Change_Tables (Table 3), Meta_Change_Listeners
(Table 4) and Meta_Change_Interests (Table 6), plus what capture needs to know about
the source databases. Models are frozen and validated on construction; cross-references
(an interest naming an unknown table, a key mapped to a column that is not captured)
are checked by :meth:`Registry.problems` so that the loader can point at file:line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from mcq.refs import KEY_FIELDS, table_ref
from mcq.registry.entities import Entity, entity_columns, entity_problems, unwatched_entity_fields
from mcq.registry.exceptions import RuleSyntaxError
from mcq.registry.mapping_checks import mapping_problems
from mcq.registry.rules import Rule, parse_rule
from mcq.registry.schedules import schedule_gap_s
from mcq.registry.templates import template_problems
from mcq.secrets import literal_secrets

"""The key fields of a change record (the paper's Table 1)."""

CHANGE_FIELDS = ("tname", "subtype", "change_type", *KEY_FIELDS)
"""The change fields a content rule can read besides the row's columns."""

ALL_SUBTYPES = "*"

Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=63)]
FieldName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]
KeyField = Literal["person_id", "pkey_string", "pkey_number", "aux_string"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Model):
    """A database whose changes are captured (one Debezium connector each)."""

    name: Identifier
    database: Literal["source"] = "source"
    """Which configured database (``MCQ_SOURCE__*``) this is."""
    schemas: tuple[Identifier, ...] = ("public",)
    publication: Identifier | None = None
    slot: Identifier | None = None
    comment: str = ""

    @property
    def publication_name(self) -> str:
        return self.publication or f"mcq_{self.name}"

    @property
    def slot_name(self) -> str:
        return self.slot or f"mcq_{self.name}"


class Feed(_Model):
    """One source table feeding a logical table: where each key field comes from,
    which columns are captured, and which of them are of interest."""

    source: Identifier
    table: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")]
    """``schema.table`` in the source database."""
    keys: dict[KeyField, Identifier]
    columns: tuple[Identifier, ...]
    """The captured columns (key columns included)."""
    watch: tuple[Identifier, ...] | None = None
    """Columns of interest; an update that changes none of them is housekeeping. Default: all captured."""
    raw_partitions: int | None = Field(default=None, ge=1, le=64)
    """Partitions of the table's raw CDC topic, for a big table whose bursts one real-time task
    cannot keep up with: Debezium's producer spreads its rows by primary key, and the normaliser
    reads each partition in a task of its own. Its key fields must hold every primary key column
    (``mcq connect apply`` checks), so that one logical key's changes stay in one partition, in
    commit order. Unset: one partition. Fixed once the topic exists (more would move keys)."""

    @property
    def watched(self) -> tuple[str, ...]:
        return self.watch if self.watch is not None else self.columns

    def touches_interest(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
        """False for an update whose changed columns are all outside the watched ones
        (housekeeping); inserts and deletes always matter."""
        if before is None or after is None:
            return True
        return any(before.get(c) != after.get(c) for c in self.watched)

    @property
    def schema_name(self) -> str:
        return self.table.split(".", 1)[0]

    @property
    def table_name(self) -> str:
        return self.table.split(".", 1)[1]


class LogicalTable(_Model):
    """A TNAME and optional subtype: TNAME is where the key comes from, the subtype says
    which aspect changed (PERSON/Telephone is fed by ``directory_telephone``)."""

    tname: Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]*$", max_length=32)]
    subtype: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", max_length=32)] | None = None
    comment: str = ""
    feeds: tuple[Feed, ...] = ()
    """Source tables feeding it; empty for a table only logged explicitly (mcq_log_*) or an entity."""
    entity: Entity | None = None
    """Computed, not captured: a root table's rows with their related rows (mcq.registry.entities),
    written to its topic by ``mcq entities run``."""
    partitions: int = Field(default=3, ge=1, le=1024)
    delete_retention_s: float | None = Field(default=None, gt=0)
    """How long its topic keeps a delete (``delete.retention.ms``); unset: twice the longest
    gap between two runs of any scheduled listener reading it, and at least a day
    (:meth:`Registry.delete_retention_s`). A listener away longer may miss deletes."""

    @property
    def ref(self) -> str:
        """``TNAME`` or ``TNAME/Subtype``."""
        return table_ref(self.tname, self.subtype)

    def topic(self, prefix: str = "mcq") -> str:
        """The compacted logical topic of this table/subtype (``<prefix>.person.telephone``)."""
        return f"{prefix}.{self.tname.lower()}" + (f".{self.subtype.lower()}" if self.subtype else "")

    def columns(self) -> frozenset[str]:
        return frozenset(c for f in self.feeds for c in f.columns)


class Adapter(_Model):
    type: Identifier
    settings: dict[str, Any] = {}


class Delivery(_Model):
    """How a listener retries, parks and dead-letters (AQ's retry_delay and max_retries,
    the paper's Hold_Until and put-back count), batches and reports liveness."""

    retries_in_place: int = Field(default=3, ge=0, le=20)
    """Immediate retries of a failed change before it is parked."""
    backoff_initial_s: float = Field(default=0.2, gt=0)
    backoff_max_s: float = Field(default=5.0, gt=0)
    park_initial_s: float = Field(default=5.0, ge=0)
    """Hold-until of a change parked the first time; doubles with every attempt."""
    park_max_s: float = Field(default=3600.0, ge=0)
    max_attempts: int = Field(default=5, ge=1, le=1000)
    """Delivery rounds (each with its in-place retries) before the dead-letter topic."""
    batch_size: int = Field(default=2000, ge=1, le=100_000)
    """Most records of one real-time batch (fewer when fewer are waiting). A batch costs a
    target commit, a flush of the applied positions and an offset commit whatever its size:
    a backlog of 85,000 changes into a ``table`` target took 9.0-9.3 s in batches of 2,000
    against 10.0-12.4 s in batches of 500 (bench/listener_apply.py's world)."""
    bulk_batch_size: int = Field(default=100, ge=1, le=100_000)
    """Most records of one bulk-lane batch. A real-time change does not wait for the batch
    in flight: it is handled inside it, between its chunks (consumers/runtime/turns.py);
    the batch's size sets how often the lane flushes and commits."""
    max_poll_interval_s: float = Field(default=1800.0, ge=10, le=86_400)
    """How long one batch (its target calls, and its waits for an unavailable target) may
    keep an instance from Kafka before the group gives its partitions to another instance
    (the consumers' ``max.poll.interval.ms``). An instance that overran it finds its commit
    refused, reads again from the group's commit (the applied positions skip what it
    applied) and halves that lane's batch while its batches' work overruns half of it."""
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    heartbeat_timeout_s: float = Field(default=30.0, gt=0)
    stuck_after_s: float = Field(default=600.0, gt=0)
    """A live listener whose oldest pending change is older than this is stuck."""
    history: bool = True
    """Record what it does with each change, and the target's answer, in its history topic
    (``mcq trace``): a record per change, written with the batch."""
    on_exposure: Literal["alert", "refresh"] = "alert"
    """When changes waited longer than their topic keeps deletes (deletes may be missed):
    ``alert`` marks it for ``mcq status`` to report until a whole-table refresh is applied;
    ``refresh`` also requests that refresh itself, of only the exposed tables, through its
    own bulk lane (said in its log), so the target repairs itself."""
    alert_after_dead_letters: int | None = Field(default=1, ge=1)
    """``mcq status`` exits 1 once this many dead letters are unresolved (neither requeued
    nor discarded): each one is a change its target does not hold, so the default alerts
    on the first. ``null`` never alerts (the depth is still shown)."""
    dead_letter_retention_days: float | None = Field(default=None, gt=0)
    """``mcq purge`` removes resolved dead letters older than this (written to a file
    first); unresolved ones are kept whatever their age. ``null``: kept for ever."""


class Listener(_Model):
    """A downstream system: its consumer group, owner and schedule (the paper's Table 4)."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", max_length=64)]
    comment: str = ""
    owner: str
    role: str | None = None
    schedule: str = "realtime"
    """``realtime``, or a cron expression for a batch catch-up run."""
    adapter: Adapter
    delivery: Delivery = Delivery()

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        if value != "realtime" and not croniter.is_valid(value):
            raise ValueError(f"schedule must be 'realtime' or a cron expression, not {value!r}")
        return value

    @property
    def realtime(self) -> bool:
        return self.schedule == "realtime"

    def longest_gap_s(self) -> float:
        """The longest time between two runs of its schedule (0 in real time): see
        :func:`schedule_gap_s`."""
        return schedule_gap_s(self.schedule)


MIN_DELETE_RETENTION_S = 24 * 3600.0
"""The least a logical topic keeps its deletes: a real-time listener down for a day."""


class Interest(_Model):
    """A listener's interest in a table/subtype (or all its subtypes), with an optional rule."""

    listener: str
    tname: str
    subtype: str | None = ALL_SUBTYPES
    """A subtype, ``*`` for all subtypes of TNAME, or null for the table without subtype."""
    rule: str | None = None
    columns: tuple[FieldName, ...] | None = None
    """The columns this listener may see of the covered tables (an allow-list; an entity's
    related fields by their path, ``customer.country``); default all captured. A target never
    receives another column, not even through a projection."""
    delay_s: float | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    """AQ's delay: a change is not applied before this many seconds after its source commit;
    a newer change of the key arriving meanwhile supersedes it."""
    expire_after_s: float | None = Field(default=None, gt=0)
    """AQ's expiration: a change not applied within this many seconds of its source commit
    goes to the dead-letter topic as ``expired``."""
    comment: str = ""

    @field_validator("rule")
    @classmethod
    def _rule_parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_rule(value)
            except RuleSyntaxError as exc:
                raise ValueError(str(exc)) from None
        return value

    def parsed_rule(self) -> Rule | None:
        return parse_rule(self.rule) if self.rule else None

    @property
    def label(self) -> str:
        """``LISTENER in TNAME/Subtype``: what makes an interest one (the store's key)."""
        covered = f"{self.tname}/*" if self.subtype == ALL_SUBTYPES else table_ref(self.tname, self.subtype)
        return f"{self.listener} in {covered}"

    def covers(self, table: LogicalTable) -> bool:
        if table.tname != self.tname:
            return False
        return self.subtype == ALL_SUBTYPES or self.subtype == table.subtype


class Registry(_Model):
    """The whole registry."""

    sources: tuple[Source, ...] = ()
    tables: tuple[LogicalTable, ...] = ()
    listeners: tuple[Listener, ...] = ()
    interests: tuple[Interest, ...] = ()

    def table(self, tname: str, subtype: str | None) -> LogicalTable | None:
        return next((t for t in self.tables if t.tname == tname and t.subtype == subtype), None)

    def listener(self, name: str) -> Listener | None:
        return next((listener for listener in self.listeners if listener.name == name), None)

    def key_fields(self, table: LogicalTable) -> frozenset[str]:
        """The key fields a table's keys carry: what its feeds map, or an entity's root's."""
        if table.entity is not None:
            tname, _, subtype = table.entity.root.partition("/")
            root = self.table(tname, subtype or None)
            return self.key_fields(root) if root is not None and root.entity is None else frozenset()
        return frozenset(f for feed in table.feeds for f in feed.keys)

    def interests_of(self, listener: str) -> list[Interest]:
        return [i for i in self.interests if i.listener == listener]

    def delete_retention_s(self, table: LogicalTable) -> float:
        """How long ``table``'s topic must keep a delete: as the table says, else twice the
        longest gap between two runs of any scheduled listener reading it (a nightly run
        that starts late still finds every delete), at least a day."""
        if table.delete_retention_s is not None:
            return table.delete_retention_s
        gaps = [x.longest_gap_s() for x in self.listeners if table in self.tables_of(x.name)]
        return max([MIN_DELETE_RETENTION_S, *(2 * g for g in gaps)])

    def tables_of(self, listener: str) -> list[LogicalTable]:
        """The logical tables a listener is interested in (the topics it subscribes to)."""
        interests = self.interests_of(listener)
        return [t for t in self.tables if any(i.covers(t) for i in interests)]

    def columns_of(self, table: LogicalTable) -> frozenset[str]:
        """What a listener may see of a table's rows: its captured columns, or an entity's
        flattened fields (``customer.country``)."""
        return entity_columns(self, table) if table.entity is not None else table.columns()

    def entity_tables(self) -> list[LogicalTable]:
        return [t for t in self.tables if t.entity is not None]

    def feeds_of(self, source: str) -> list[tuple[LogicalTable, Feed]]:
        return [(t, f) for t in self.tables for f in t.feeds if f.source == source]

    def raw_partitions(self, source: str) -> dict[str, int]:
        """``schema.table`` -> its raw topic's partitions, for the tables of ``source`` whose
        feeds ask for more than one."""
        out: dict[str, int] = {}
        for _, feed in self.feeds_of(source):
            if feed.raw_partitions and feed.raw_partitions > 1:
                out[feed.table] = max(out.get(feed.table, 1), feed.raw_partitions)
        return out

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Cross-reference problems, each with the path of the definition at fault."""
        out: list[tuple[tuple[str | int, ...], str]] = []
        out += _duplicates("sources", [s.name for s in self.sources], "source")
        out += _duplicates("tables", [t.ref for t in self.tables], "table/subtype")
        out += _duplicates("listeners", [x.name for x in self.listeners], "listener")
        out += _duplicates("interests", [i.label for i in self.interests], "interest")
        for li, listener in enumerate(self.listeners):
            out += literal_secrets(listener.adapter.settings, ("listeners", li, "adapter", "settings"))
            out += template_problems(listener.adapter.settings, ("listeners", li, "adapter", "settings"))
        out += mapping_problems(self)
        sources = {s.name: s for s in self.sources}
        for ti, table in enumerate(self.tables):
            for fi, feed in enumerate(table.feeds):
                here: tuple[str | int, ...] = ("tables", ti, "feeds", fi)
                source = sources.get(feed.source)
                if source is None:
                    out.append(((*here, "source"), f"unknown source {feed.source!r}; define it under sources:"))
                elif feed.schema_name not in source.schemas:
                    out.append(
                        ((*here, "table"), f"schema {feed.schema_name!r} is not among source {source.name!r}'s schemas")
                    )
                for key, column in feed.keys.items():
                    if column not in feed.columns:
                        out.append(
                            (
                                (*here, "keys", key),
                                f"key field {key} is mapped to {column!r}, which is not a captured column of "
                                f"{feed.table} (columns: {', '.join(feed.columns)})",
                            )
                        )
                for column in feed.watch or ():
                    if column not in feed.columns:
                        out.append(((*here, "watch"), f"watched column {column!r} is not captured from {feed.table}"))
                if not feed.keys:
                    out.append(((*here, "keys"), f"{feed.table} maps no key field; map at least one of {KEY_FIELDS}"))
        out += _raw_partition_problems(self)
        out += entity_problems(self)
        for ti, table in enumerate(self.tables):
            if table.delete_retention_s is None:
                continue
            for x in self.listeners:
                gap = x.longest_gap_s()
                if gap and gap >= table.delete_retention_s and table in self.tables_of(x.name):
                    out.append(
                        (
                            ("tables", ti, "delete_retention_s"),
                            f"listener {x.name} runs {x.schedule!r}, up to {gap:.0f} s apart, no shorter than "
                            f"the {table.delete_retention_s:.0f} s its topic keeps deletes: it would miss deletes "
                            "(leave delete_retention_s unset to have twice the gap)",
                        )
                    )
        names = {x.name for x in self.listeners}
        for ii, interest in enumerate(self.interests):
            here = ("interests", ii)
            if interest.listener not in names:
                out.append(((*here, "listener"), f"unknown listener {interest.listener!r}"))
            covered = [t for t in self.tables if interest.covers(t)]
            if not covered:
                what = table_ref(interest.tname, None if interest.subtype == ALL_SUBTYPES else interest.subtype)
                out.append(((*here, "tname"), f"unknown table {what}; define it under tables:"))
            rule = interest.parsed_rule()
            if rule and covered:
                known = set(CHANGE_FIELDS) | {c for t in covered for c in self.columns_of(t)}
                known |= {f"{side}.{c}" for side in ("before", "after") for c in known}
                unknown = sorted(rule.fields() - known)
                if unknown:
                    out.append(((*here, "rule"), f"rule reads {', '.join(unknown)}, which no covered table has"))
                out += _unwatched_rule_columns(here, interest.listener, rule.fields(), covered)
                out += _unwatched_entity_rule_fields(self, here, interest.listener, rule.fields(), covered)
            if interest.columns is not None and covered:
                captured = {c for t in covered for c in self.columns_of(t)}
                unknown = sorted(set(interest.columns) - captured) if captured else []
                if unknown:
                    problem = f"columns {', '.join(unknown)} are not captured by any covered table"
                    out.append(((*here, "columns"), problem))
            if interest.delay_s and interest.expire_after_s and interest.expire_after_s <= interest.delay_s:
                out.append(((*here, "expire_after_s"), "expire_after_s must be longer than delay_s"))
        return out


def _unwatched_rule_columns(
    here: tuple[str | int, ...], listener: str, fields: frozenset[str], covered: list[LogicalTable]
) -> list[tuple[tuple[str | int, ...], str]]:
    """A rule over a column its feed does not watch: an update of that column alone is
    housekeeping, dropped by the normaliser for every listener, so a row whose change of it
    moves it into or out of the rule would never enter or leave the listener's view."""
    columns = {f.split(".", 1)[1] if f.startswith(("before.", "after.")) else f for f in fields}
    out: list[tuple[tuple[str | int, ...], str]] = []
    for table in covered:
        for feed in table.feeds:
            if not set(feed.keys.values()) <= set(feed.columns):
                continue  # its key mapping is the problem reported
            unwatched = sorted(
                c for c in columns if c in feed.columns and c not in feed.watched and c not in feed.keys.values()
            )
            if unwatched:
                names = ", ".join(unwatched)
                out.append(((*here, "rule"), (
                    f"rule reads {names}, which {feed.table} ({table.ref}) does not watch: an update of only "
                    f"{names} is housekeeping and never reaches {listener}, so its rows would not enter or leave "
                    f"the view; add {names} to that feed's watch"
                )))  # fmt: skip
    return out


def _unwatched_entity_rule_fields(
    registry: Registry, here: tuple[str | int, ...], listener: str, fields: frozenset[str], covered: list[LogicalTable]
) -> list[tuple[tuple[str | int, ...], str]]:
    """The same for an entity rule's related fields: ``customer.country`` read from a feed
    that does not watch ``country`` would never move an order into or out of the view."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    for table in covered:
        for field, source, column in unwatched_entity_fields(registry, table, fields):
            out.append(((*here, "rule"), (
                f"rule reads {field}, which {source} does not watch: an update of only {column} is housekeeping "
                f"and never re-evaluates {table.tname}, so its entities would not enter or leave {listener}'s "
                f"view; add {column} to that feed's watch"
            )))  # fmt: skip
    return out


def _duplicates(section: str, names: list[str], what: str) -> list[tuple[tuple[str | int, ...], str]]:
    seen: dict[str, int] = {}
    out: list[tuple[tuple[str | int, ...], str]] = []
    for i, name in enumerate(names):
        if name in seen:
            out.append(((section, i), f"duplicate {what} {name!r} (first defined as item {seen[name] + 1})"))
        else:
            seen[name] = i
    return out


def _raw_partition_problems(registry: Registry) -> list[tuple[tuple[str | int, ...], str]]:
    """Two feeds of one source table asking for different raw partitions (one topic has one count)."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    asked: dict[tuple[str, str], tuple[int, str]] = {}
    for ti, table in enumerate(registry.tables):
        for fi, feed in enumerate(table.feeds):
            if feed.raw_partitions is None:
                continue
            first = asked.setdefault((feed.source, feed.table), (feed.raw_partitions, table.ref))
            if first[0] != feed.raw_partitions:
                out.append(
                    (
                        ("tables", ti, "feeds", fi, "raw_partitions"),
                        f"{feed.table} has one raw topic: table {first[1]}'s feed asks for {first[0]} partitions, "
                        f"this one for {feed.raw_partitions}; give both feeds the same raw_partitions",
                    )
                )
    return out
