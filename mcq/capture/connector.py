"""Debezium connector configuration generated from the registry, one per source.

What a connector captures follows the registry: the source tables of every feed with
exactly their captured columns, plus the outbox ``mcq.change_log`` and the heartbeat
table ``mcq.heartbeat`` (``HEARTBEAT_TABLE``). Tables need
``REPLICA IDENTITY FULL`` because the normaliser needs the before-image to tell a
housekeeping-only update from one that touches a column of interest, and content rules
are evaluated on it: ``mcq connect apply`` sets it (``mcq.capture.apply``), Debezium's
``replica.identity.autoset.values`` asks for it again at every start.

Dates, timestamps and times reach the raw topics as natural text: mcq's ``NaturalText``
transform (``jvm/connect-transforms``) turns Debezium's encodings (``io.debezium.time.Date``:
days since the epoch, ...) into text inside the worker, where each field's Connect schema
is at hand, and values are written as compact JSON *without* their schema. Where the
worker cannot have the plugin (``connect.natural_text: false``), values are written *with*
their Connect schema (``value.converter.schemas.enable``), about 6x larger, and the
normaliser decodes them by its semantic names. Either way the converter settings are set
on the connector, never left to the worker's defaults.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

from mcq.capture.exceptions import CaptureError
from mcq.config import OutboxSettings, Settings
from mcq.connect_rest import ConnectClient, debezium_postgres_source, load_connector_json
from mcq.registry.model import Registry, Source

OUTBOX_TABLE = "mcq.change_log"
HEARTBEAT_TABLE = "mcq.heartbeat"
"""One row per source, written by its connector every ``heartbeat.interval.ms``
(``heartbeat.action.query``): a change in the captured database even when every captured
table is idle, so the slot's confirmed position follows the WAL other databases of the
cluster write instead of holding it all on the source's disk."""
OUTBOX_COLUMNS = (
    "log_id", "tname", "subtype", "change_type", "person_id", "pkey_string", "pkey_number", "aux_string",
    "call_stack", "logged_at", "txid", "source", "state",
)  # fmt: skip


def connector_name(source: Source) -> str:
    return f"mcq-source-{source.name}"


OWNER = "mcq.topic.prefix"
"""A key of mcq's connector configs (Connect passes keys it does not know to the
connector, which ignores them): the topic prefix of the deployment that applied it.
Connector and raw topics are named after the source alone, so two deployments of one
cluster that name a source alike would otherwise replace (or remove) each other's capture."""


def refuse_other_owners(client: ConnectClient, sources: Iterable[Source], prefix: str, doing: str) -> None:
    """Raise :class:`CaptureError` before ``doing`` (``connect apply``, ``connect remove``)
    touches anything, when a connector of ``sources`` was applied by another deployment
    (topic prefix). One with no owner recorded (applied before owners were) is this one's."""
    for source in sources:
        existing = client.config(connector_name(source)) or {}
        owner = existing.get(OWNER)
        if owner is None or owner == prefix:
            continue
        raise CaptureError(
            f"connector {connector_name(source)} belongs to the deployment of topic prefix {owner!r}, not {prefix!r} "
            f"(it captures database {existing.get('database.dbname', '?')} into {raw_topic_prefix(source)}.*): "
            f"`mcq {doing}` under {prefix!r} would change that deployment's capture. Give this registry's source "
            f"another name than {source.name!r}"
            + (f", or run `mcq connect apply --prepare-only` if {prefix!r} shares that capture on purpose"
               if doing == "connect apply" else "")
        )  # fmt: skip


RAW_TOPIC_ROOT = "mcq.raw"
"""Every raw CDC topic starts with this (what the Connect worker's ACLs allow it to write)."""


def raw_topic_prefix(source: Source) -> str:
    """Raw CDC topics are ``<prefix>.<schema>.<table>``."""
    return f"{RAW_TOPIC_ROOT}.{source.name}"


def raw_topic(source: Source, table: str) -> str:
    return f"{raw_topic_prefix(source)}.{table}"


def raw_topic_partitions(registry: Registry) -> dict[str, int]:
    """Raw topic -> its partitions, for the tables whose feeds ask for more than one."""
    return {
        raw_topic(source, table): n
        for source in registry.sources
        for table, n in registry.raw_partitions(source.name).items()
    }


def captured_columns(registry: Registry, source: Source) -> dict[str, list[str]]:
    """schema.table -> captured columns (the union over every feed of that table)."""
    out: dict[str, list[str]] = {}
    for _, feed in registry.feeds_of(source.name):
        cols = out.setdefault(feed.table, [])
        cols.extend(c for c in feed.columns if c not in cols)
    out[OUTBOX_TABLE] = list(OUTBOX_COLUMNS)
    out[HEARTBEAT_TABLE] = ["source", "beat_at"]
    return dict(sorted(out.items()))


NATURAL_TEXT = "mcq.connect.NaturalText"


def value_encoding(settings: Settings) -> dict[str, str]:
    """How values are written: compact JSON with dates and times as text (the NaturalText
    transform), or JSON with its Connect schema for the normaliser to decode."""
    if settings.connect.natural_text:
        return {
            "transforms": "naturaltext",
            "transforms.naturaltext.type": NATURAL_TEXT,
            "value.converter.schemas.enable": "false",
        }
    # the normaliser decodes dates, timestamps and times by the schema's semantic names
    return {"value.converter.schemas.enable": "true"}


def raw_topic_durability(settings: Settings) -> dict[str, str]:
    """Connect creates the raw CDC topics: with mcq's topic settings (-1: the cluster's default)."""
    out = {"topic.creation.default.replication.factor": str(settings.topics.replication_factor)}
    if settings.topics.min_insync_replicas is not None:
        out["topic.creation.default.min.insync.replicas"] = str(settings.topics.min_insync_replicas)
    return out


def raw_partition_groups(registry: Registry, source: Source, settings: Settings) -> dict[str, str]:
    """Connect's topic creation groups for the raw topics of tables with more than one
    partition (``Feed.raw_partitions``): one group per count, naming its topics exactly, with
    the default group's other settings (durability, deletion by retention)."""
    counts: dict[int, list[str]] = {}
    for table, partitions in sorted(registry.raw_partitions(source.name).items()):
        counts.setdefault(partitions, []).append(raw_topic(source, table))
    if not counts:
        return {}
    shared = {**load_connector_json("source-postgres"), **raw_topic_durability(settings)}
    default = {
        key.removeprefix("topic.creation.default."): value
        for key, value in shared.items()
        if key.startswith("topic.creation.default.") and not key.endswith(".partitions")
    }
    out = {"topic.creation.groups": ",".join(f"partitions{n}" for n in sorted(counts))}
    for n, topics in sorted(counts.items()):
        out[f"topic.creation.partitions{n}.include"] = ",".join(re.escape(t) for t in topics)
        out[f"topic.creation.partitions{n}.partitions"] = str(n)
        out.update({f"topic.creation.partitions{n}.{key}": value for key, value in default.items()})
    return out


def render_source(registry: Registry, source: Source, settings: Settings) -> dict[str, str]:
    """The connector config of one source."""
    tables = captured_columns(registry, source)
    feeds = [t for t in tables if t not in (OUTBOX_TABLE, HEARTBEAT_TABLE)]
    return debezium_postgres_source(
        settings.source,
        topic_prefix=raw_topic_prefix(source),
        slot_name=source.slot_name,
        publication_name=source.publication_name,
        # Debezium reads these lists as regular expressions: escape the dots
        tables=[t.replace(".", "\\.") for t in tables],
        **{
            "column.include.list": ",".join(
                f"{table}.{col}".replace(".", "\\.") for table, cols in tables.items() for col in cols
            ),
            "replica.identity.autoset.values": ",".join(f"{t}:FULL" for t in feeds),
            "heartbeat.action.query": (
                f"INSERT INTO {HEARTBEAT_TABLE} (source, beat_at) VALUES ('{source.name}', now()) "
                "ON CONFLICT (source) DO UPDATE SET beat_at = EXCLUDED.beat_at"
            ),
            "snapshot.mode": "initial",
            **raw_topic_durability(settings),
            **raw_partition_groups(registry, source, settings),
            **settings.source.debezium_config(),
            **value_encoding(settings),
            OWNER: settings.topic_prefix,
        },
    )


def render(registry: Registry, settings: Settings) -> dict[str, dict[str, str]]:
    """Connector name -> config, for every source of the registry."""
    return {connector_name(s): render_source(registry, s, settings) for s in registry.sources}


def outbox_sql() -> str:
    return resources.files("mcq.capture").joinpath("outbox.sql").read_text()


LOG_INNER = "mcq._log(text, text, text, bigint, text, numeric, text, text, jsonb)"
LOG_FUNCTIONS = tuple(
    f"public.mcq_log_{kind}(text, text, bigint, text, numeric, text, text, jsonb)"
    for kind in ("insert", "update", "delete")
)


def install_outbox(conn: Any, outbox: OutboxSettings | None = None) -> None:
    """Create (or update) the outbox table and the mcq_log_* functions; grant EXECUTE on
    them to exactly the roles ``outbox.roles`` names (revoking any other grant), and set
    how often a whole-table request may come."""
    outbox = outbox or OutboxSettings()
    conn.execute(outbox_sql())
    conn.execute(
        "INSERT INTO mcq.outbox_settings (key, value) VALUES ('whole_table_every_s', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(outbox.whole_table_every_s),),
    )
    wanted = {"PUBLIC" if r.upper() == "PUBLIC" else r for r in outbox.roles}
    for fn in LOG_FUNCTIONS:
        granted = {
            row[0]
            for row in conn.execute(
                "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END"
                " FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
                " WHERE p.oid = %s::regprocedure AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner",
                (fn,),
            ).fetchall()
        }
        for role in sorted(granted - wanted):
            conn.execute(f"REVOKE EXECUTE ON FUNCTION {fn} FROM {_role(role)}")
        for role in sorted(wanted - granted):
            conn.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {_role(role)}")
    conn.execute(
        "REVOKE EXECUTE ON FUNCTION mcq._log(text, text, text, bigint, text, numeric, text, text, jsonb) FROM PUBLIC"
    )


def _role(name: str) -> str:
    """A role as SQL: PUBLIC, or the name quoted."""
    if name == "PUBLIC":
        return name
    quoted = name.replace(chr(34), chr(34) * 2)
    return chr(34) + quoted + chr(34)
