"""The PySpark normaliser on the real stack: raw Debezium topics of a captured campus
world -> compacted logical topics, checked key by key against the source database."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mcq.config import Settings
from mcq.contract import registry_client
from mcq.refs import KEY_FIELDS
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.testing.logs import log_lines
from mcq.testing.worlds import Captured, captured_world, read_topic_to_end
from mcq.topics.plan import TopicSpec, apply_topics, refresh_topic
from streams.plan import FeedPlan, plan_normalize
from streams.realtime import QUERY_PREFIX
from streams.runner import run_normalize
from tests.integration.pgtext import rows_as_text
from tests.support.logical import KeyT, decode_topic, key_tuple, last_state
from tests.support.waiting import until

# changes the kill test makes at most (about 25/s): it must outlast a few micro-batches
LIMIT = 3_000
PA = 9_100_001  # a person the test inserts: parent of its other rows

# A logical table fed by two source tables with the same key: (person, type) from both
# directory_telephone and addresses ("campus" and "home" exist in both).
CONTACT = """
  - tname: CONTACT
    comment: test only - one key fed by two source tables
    feeds:
      - source: {src}
        table: {schema}.directory_telephone
        keys: {{person_id: person_id, aux_string: tele_type}}
        columns: [person_id, tele_type, phone_number, updated_at]
        watch: [phone_number]
      - source: {src}
        table: {schema}.addresses
        keys: {{person_id: person_id, aux_string: addr_type}}
        columns: [person_id, addr_type, street, city, state, postal_code, country, updated_at]
        watch: [street]
  - tname: VOICEMAIL
    comment: test only - no source table feeds it; its entries carry their state (the Unity pattern)
"""


@pytest.fixture(scope="module")
def world(stack: Stack, settings: Settings) -> Iterator[Captured]:
    with captured_world(settings, people=80) as cap:
        yield cap


@pytest.fixture(scope="module")
def registry(world: Captured) -> Registry:
    text = world.registry_yaml.replace(
        "\nlisteners:", CONTACT.format(src=world.source.name, schema=world.schema) + "\nlisteners:", 1
    )
    return parse_registry(text, "campus-normalize-test.yaml")


@pytest.fixture(scope="module")
def nsettings(settings: Settings) -> Settings:
    """Settings whose logical topics are this module's own."""
    return settings.model_copy(update={"topic_prefix": f"tn{uuid.uuid4().hex[:8]}"})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("normalize-checkpoint")


def normalize_once(nsettings: Settings, registry: Registry, checkpoint: Path) -> list[str]:
    with log_lines() as lines:
        run_normalize(nsettings, registry, once=True, checkpoint=checkpoint)
    return lines


def sql(settings: Settings, *statements: str) -> None:
    """Each statement its own transaction."""
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)


def db_state(settings: Settings, feed: FeedPlan) -> dict[KeyT, dict[str, Any]]:
    """The source rows of a feed by logical key, every value as the change record must carry
    it, rendered by PostgreSQL from the column's type (tests/integration/pgtext.py)."""
    with psycopg.connect(settings.source.dsn()) as conn:
        rows = rows_as_text(conn, feed.source_table)
    state = {}
    for row in rows:
        key = {
            "tname": feed.tname,
            "subtype": feed.subtype,
            **{f: None for f in KEY_FIELDS},
            **{f: row[c] for f, c in feed.keys},
        }
        for f in ("person_id", "pkey_number"):
            key[f] = int(key[f]) if key[f] is not None else None
        state[key_tuple(key)] = row
    return state


def assert_topic_equals_source(nsettings: Settings, feed: FeedPlan) -> None:
    """The last state of every key equals the source row in every watched column, whatever
    its type (dates, timestamps...). Unwatched (housekeeping) columns are as of the last
    change of interest: an update of only those is dropped by design."""
    logical = last_state([r for r in decode_topic(nsettings, feed.topic) if r[0]["tname"] == feed.tname])
    mine = {k: v for k, v in logical.items() if v["source"]["table"] == feed.source_table or feed.tname != "CONTACT"}
    source = db_state(nsettings, feed)
    assert set(mine) == set(source), f"{feed.ref} from {feed.source_table}: keys differ"
    for key, row in source.items():
        after = mine[key]["after"]
        assert after and set(after) <= set(row), (feed.ref, key, after)
        compared = [c for c in after if c in feed.watch or not feed.watch]
        assert {c: after[c] for c in compared} == {c: row[c] for c in compared}, (feed.ref, key)


# Per table: the logical key the test drives, and insert / update / delete statements.
# Each table gets: insert v1, update v2, delete, insert v3, update v4.
def dml(s: str) -> dict[str, tuple[str, str, str]]:
    first_dept = f"(SELECT min(dept_id) FROM {s}.departments)"
    return {
        "people": (
            f"INSERT INTO {s}.people (person_id, first_name, last_name) VALUES (9100002, {{v}}, 'Doe')",
            f"UPDATE {s}.people SET first_name = {{v}} WHERE person_id = 9100002",
            f"DELETE FROM {s}.people WHERE person_id = 9100002",
        ),
        "person_status": (
            f"INSERT INTO {s}.person_status (person_id, status) VALUES ({PA}, {{v}})",
            f"UPDATE {s}.person_status SET status = {{v}} WHERE person_id = {PA}",
            f"DELETE FROM {s}.person_status WHERE person_id = {PA}",
        ),
        "directory_telephone": (
            f"INSERT INTO {s}.directory_telephone (person_id, tele_type, phone_number) VALUES ({PA}, 'fax', {{v}})",
            f"UPDATE {s}.directory_telephone SET phone_number = {{v}} WHERE person_id = {PA} AND tele_type = 'fax'",
            f"DELETE FROM {s}.directory_telephone WHERE person_id = {PA} AND tele_type = 'fax'",
        ),
        "addresses": (
            f"INSERT INTO {s}.addresses (person_id, addr_type, street) VALUES ({PA}, 'mailing', {{v}})",
            f"UPDATE {s}.addresses SET street = {{v}} WHERE person_id = {PA} AND addr_type = 'mailing'",
            f"DELETE FROM {s}.addresses WHERE person_id = {PA} AND addr_type = 'mailing'",
        ),
        "departments": (
            f"INSERT INTO {s}.departments (dept_id, name) VALUES (9001, {{v}})",
            f"UPDATE {s}.departments SET name = {{v}} WHERE dept_id = 9001",
            f"DELETE FROM {s}.departments WHERE dept_id = 9001",
        ),
        "directory_orgn": (
            f"INSERT INTO {s}.directory_orgn (person_id, dept_id, title) VALUES ({PA}, {first_dept}, {{v}})",
            f"UPDATE {s}.directory_orgn SET title = {{v}} WHERE person_id = {PA}",
            f"DELETE FROM {s}.directory_orgn WHERE person_id = {PA}",
        ),
        "udi": (
            f"INSERT INTO {s}.udi (person_id, email) VALUES ({PA}, {{v}})",
            f"UPDATE {s}.udi SET email = {{v}} WHERE person_id = {PA}",
            f"DELETE FROM {s}.udi WHERE person_id = {PA}",
        ),
        "logins": (
            f"INSERT INTO {s}.logins (username, owner, unixuid, shell) VALUES ('zztest', {PA}, 990001, {{v}})",
            f"UPDATE {s}.logins SET shell = {{v}} WHERE username = 'zztest'",
            f"DELETE FROM {s}.logins WHERE username = 'zztest'",
        ),
        "unix_groups": (
            f"INSERT INTO {s}.unix_groups (group_name, gid, description) VALUES ('zzgroup', 990001, {{v}})",
            f"UPDATE {s}.unix_groups SET description = {{v}} WHERE group_name = 'zzgroup'",
            f"DELETE FROM {s}.unix_groups WHERE group_name = 'zzgroup'",
        ),
        "sites": (
            f"INSERT INTO {s}.sites (site_id, name) VALUES (9001, {{v}})",
            f"UPDATE {s}.sites SET name = {{v}} WHERE site_id = 9001",
            f"DELETE FROM {s}.sites WHERE site_id = 9001",
        ),
        "buildings": (
            f"INSERT INTO {s}.buildings (building_id, site_id, name, code) "
            f"VALUES (9001, (SELECT min(site_id) FROM {s}.sites), {{v}}, 'ZZ9')",
            f"UPDATE {s}.buildings SET name = {{v}} WHERE building_id = 9001",
            f"DELETE FROM {s}.buildings WHERE building_id = 9001",
        ),
        "floors": (
            f"INSERT INTO {s}.floors (building_id, floor_code, description) "
            f"VALUES ((SELECT min(building_id) FROM {s}.buildings), 'Z9', {{v}})",
            f"UPDATE {s}.floors SET description = {{v}} WHERE floor_code = 'Z9'",
            f"DELETE FROM {s}.floors WHERE floor_code = 'Z9'",
        ),
        "rooms": (
            f"INSERT INTO {s}.rooms (room_id, building_id, floor_code, room_number) "
            f"SELECT 990001, building_id, floor_code, {{v}} FROM {s}.floors ORDER BY 1, 2 LIMIT 1",
            f"UPDATE {s}.rooms SET room_number = {{v}} WHERE room_id = 990001",
            f"DELETE FROM {s}.rooms WHERE room_id = 990001",
        ),
        "vmail_commands": (
            f"INSERT INTO {s}.vmail_commands (command_id, person_id, mailbox, command) OVERRIDING SYSTEM VALUE "
            f"VALUES (990001, {PA}, '69999', {{v}})",
            f"UPDATE {s}.vmail_commands SET command = {{v}} WHERE command_id = 990001",
            f"DELETE FROM {s}.vmail_commands WHERE command_id = 990001",
        ),
        "person_merges": (
            f"INSERT INTO {s}.person_merges (merge_id, old_person_id, new_person_id, merged_at) "
            f"OVERRIDING SYSTEM VALUE VALUES (990001, 9199999, {PA}, {{v}}::timestamptz)",
            f"UPDATE {s}.person_merges SET merged_at = {{v}}::timestamptz WHERE merge_id = 990001",
            f"DELETE FROM {s}.person_merges WHERE merge_id = 990001",
        ),
    }


@pytest.fixture(scope="module")
def driven(world: Captured, registry: Registry, nsettings: Settings, checkpoint: Path) -> dict[str, Any]:
    """Every source table changed (insert, update, delete, insert, update), plus housekeeping
    updates and the group membership moves; then one normaliser run."""
    s = world.schema
    sql(nsettings, f"INSERT INTO {s}.people (person_id, first_name, last_name) VALUES ({PA}, 'Ada', 'Park')")
    values: dict[str, list[str]] = {}
    for table, (ins, upd, dele) in dml(s).items():
        vs = (
            [f"2001-01-0{i} 00:00:00+00" for i in range(1, 5)]
            if table == "person_merges"
            else [f"{table[:6]}-{i}" for i in range(1, 5)]
        )
        values[table] = vs
        sql(
            nsettings,
            ins.format(v=f"'{vs[0]}'"),
            upd.format(v=f"'{vs[1]}'"),
            dele,
            ins.format(v=f"'{vs[2]}'"),
            upd.format(v=f"'{vs[3]}'"),
        )
    # a membership whose key moves: (g, u1) -> (g, u2), deleted, inserted and moved again
    with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
        u1, u2 = [r[0] for r in conn.execute(f"SELECT username FROM {s}.logins ORDER BY 1 LIMIT 2")]
    g = "zzgroup"  # created (and kept) by the unix_groups steps above
    sql(
        nsettings,
        f"INSERT INTO {s}.group_members VALUES ('{g}', '{u1}')",
        f"UPDATE {s}.group_members SET username = '{u2}' WHERE group_name = '{g}'",
        f"DELETE FROM {s}.group_members WHERE group_name = '{g}'",
        f"INSERT INTO {s}.group_members VALUES ('{g}', '{u1}')",
        f"UPDATE {s}.group_members SET username = '{u2}' WHERE group_name = '{g}'",
    )
    # housekeeping only: nothing of interest changes
    sql(
        nsettings,
        f"UPDATE {s}.people SET updated_at = updated_at + interval '1 hour', updated_by = 'cron' "
        f"WHERE person_id = {PA}",
        f"UPDATE {s}.logins SET last_login = now() WHERE username = 'zztest'",
    )
    # explicit entries scoped to this deployment's source, to another one's, and to none
    marker = f"zz{uuid.uuid4().hex[:6]}"
    own = world.source.name
    with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
        conn.execute("SELECT mcq_log_update('LOGINS', pkey_string => %s, source => %s)", (f"{marker}-own", own))
        conn.execute("SELECT mcq_log_update('LOGINS', pkey_string => %s, source => 'elsewhere')", (f"{marker}-arg",))
        conn.execute("SELECT mcq_log_update('LOGINS', pkey_string => %s)", (f"{marker}-unscoped",))
        # a table no source feeds: the caller gives the state (a JSON object); values of any
        # JSON type reach the topic as their text
        for kind, state in (
            ("insert", {"mailbox": "4711", "owner": "ann", "pin_set": True}),
            ("update", {"mailbox": "4711", "owner": "bob", "pin_set": False, "quota": 25}),
            ("update", None),  # no state given: as before, nothing to say of its content
            ("delete", {"ignored": "a delete has no state"}),
        ):
            conn.execute(
                f"SELECT mcq_log_{kind}('VOICEMAIL', pkey_string => %s, source => %s, state => %s)",
                (marker, own, None if state is None else json.dumps(state)),
            )
        with pytest.raises(psycopg.errors.CheckViolation):  # a state that is no object is refused at the call
            conn.execute("SELECT mcq_log_update('VOICEMAIL', pkey_string => 'x', state => '[1, 2]')")
        conn.execute("SET mcq.source = 'elsewhere'")
        conn.execute("SELECT mcq_log_update('LOGINS', pkey_string => %s)", (f"{marker}-session",))
    time.sleep(3)  # let Debezium deliver the last transactions before the batch is planned
    lines = normalize_once(nsettings, registry, checkpoint)
    return {"values": values, "lines": lines, "members": (g, u1, u2), "explicit": marker}


def _records_of(nsettings: Settings, topic: str, match: dict[str, Any]) -> list[dict[str, Any] | None]:
    return [v for k, v in decode_topic(nsettings, topic) if all(k[f] == x for f, x in match.items())]


def test_each_source_table_yields_insert_update_delete_in_order(
    registry: Registry, nsettings: Settings, driven: dict[str, Any], world: Captured
) -> None:
    plan = plan_normalize(registry, nsettings.topic_prefix)
    feeds = {f.source_table.split(".")[1]: f for f in plan.feeds if f.tname != "CONTACT"}
    expected_types = ["INSERT", "UPDATE", "DELETE", None, "INSERT", "UPDATE"]
    for table, vs in driven["values"].items():
        feed = feeds[table]
        driven_columns = {"first_name", "status", "phone_number", "street", "name", "title", "email", "shell",
                          "description", "room_number", "command", "merged_at"}  # fmt: skip
        watched = next(c for c in feed.watch if c in driven_columns)
        records = decode_topic(nsettings, feed.topic)
        keyed: dict[KeyT, list[dict[str, Any] | None]] = {}
        for k, v in records:
            keyed.setdefault(key_tuple(k), []).append(v)
        driven_keys = [
            k for k, seq in keyed.items()
            if any(v and v["after"] and v["after"].get(watched) and vs[0][:10] in v["after"][watched] for v in seq)
        ]  # fmt: skip
        assert len(driven_keys) == 1, (table, driven_keys)
        seq = keyed[driven_keys[0]]
        tail = seq[-len(expected_types) :]
        assert [v["change_type"] if v else None for v in tail] == expected_types, (table, seq)
        if table != "person_merges":
            assert tail[-1]["after"][watched] == vs[3]  # type: ignore[index]
            assert tail[-1]["before"][watched] == vs[2]  # type: ignore[index]
        assert tail[2]["after"] is None and tail[2]["before"] is not None  # type: ignore[index]
        assert tail[0]["provenance"]["origin"] == f"table {feed.source_table}"  # type: ignore[index]


def test_explicit_entries_scoped_to_another_source_are_not_this_deployments(
    nsettings: Settings, driven: dict[str, Any]
) -> None:
    """One database, several deployments: every source's connector captures the one outbox,
    and an entry naming another source (argument or session setting) is not a refresh here."""
    marker = driven["explicit"]
    topic = refresh_topic(nsettings.topic_prefix)
    seen = {k["pkey_string"] for k, _ in decode_topic(nsettings, topic) if (k["pkey_string"] or "").startswith(marker)}
    assert seen == {f"{marker}-own", f"{marker}-unscoped"}


def test_explicit_entries_of_a_table_no_source_feeds_carry_the_callers_state(
    registry: Registry, nsettings: Settings, driven: dict[str, Any]
) -> None:
    topic = registry.table("VOICEMAIL", None).topic(nsettings.topic_prefix)  # type: ignore[union-attr]
    records = _records_of(nsettings, topic, {"pkey_string": driven["explicit"]})
    assert [(v["change_type"], v["after"]) if v else None for v in records] == [
        ("INSERT", {"mailbox": "4711", "owner": "ann", "pin_set": "true"}),
        ("UPDATE", {"mailbox": "4711", "owner": "bob", "pin_set": "false", "quota": "25"}),
        ("UPDATE", None),
        ("DELETE", None),
        None,  # the delete's tombstone
    ]


def test_a_moved_key_is_a_delete_of_the_old_key_and_an_insert_of_the_new(
    registry: Registry, nsettings: Settings, driven: dict[str, Any]
) -> None:
    g, u1, u2 = driven["members"]
    topic = registry.table("GROUP_MEM", None).topic(nsettings.topic_prefix)  # type: ignore[union-attr]
    old = _records_of(nsettings, topic, {"pkey_string": g, "aux_string": u1})
    new = _records_of(nsettings, topic, {"pkey_string": g, "aux_string": u2})
    assert [v["change_type"] if v else None for v in old] == ["INSERT", "DELETE", None, "INSERT", "DELETE", None]
    assert [v["change_type"] if v else None for v in new] == ["INSERT", "DELETE", None, "INSERT"]


def test_a_housekeeping_only_update_produces_nothing(
    registry: Registry, nsettings: Settings, driven: dict[str, Any]
) -> None:
    people = registry.table("PERSON", "PEOPLE").topic(nsettings.topic_prefix)  # type: ignore[union-attr]
    assert [v["change_type"] for v in _records_of(nsettings, people, {"person_id": PA})] == ["INSERT"]  # type: ignore[index]
    logins = registry.table("LOGINS", None).topic(nsettings.topic_prefix)  # type: ignore[union-attr]
    zz = _records_of(nsettings, logins, {"pkey_string": "zztest"})
    assert len(zz) == 6  # the driven sequence only; the last_login update was dropped
    assert any("dropped as housekeeping 2" in line for line in driven["lines"]), driven["lines"]


def test_every_logical_topic_ends_equal_to_the_source(
    registry: Registry, nsettings: Settings, driven: dict[str, Any]
) -> None:
    for feed in plan_normalize(registry, nsettings.topic_prefix).feeds:
        if feed.tname != "CONTACT":
            assert_topic_equals_source(nsettings, feed)


def test_a_scheduled_run_plans_only_the_projections_of_the_raw_topics_its_batch_read(
    world: Captured, registry: Registry, nsettings: Settings, checkpoint: Path, driven: dict[str, Any]
) -> None:
    """A run with changes in one source table analyses, optimises and compiles that raw
    topic's projection alone, not one per raw topic of the registry (most of a small
    batch's time); its batch line says how many it read, and every logical topic still
    ends equal to the source."""
    normalize_once(nsettings, registry, checkpoint)  # whatever an earlier test left
    sql(nsettings, f"UPDATE {world.schema}.people SET first_name = 'Scheduled' WHERE person_id = {PA}")
    time.sleep(3)  # Debezium's poll interval and the producer's linger
    lines = normalize_once(nsettings, registry, checkpoint)
    plan = plan_normalize(registry, nsettings.topic_prefix)
    groups = len({f.raw_topic for f in plan.feeds}) + (1 if plan.outbox_topics else 0)
    read = [re.search(r"; (\d+) of (\d+) raw topics read$", line) for line in lines if line.startswith("batch ")]
    assert read and all(read), lines
    assert all(int(m.group(2)) == groups and 1 <= int(m.group(1)) < groups for m in read if m), lines
    people = next(f for f in plan.feeds if f.source_table == f"{world.schema}.people")
    assert any(
        v and v["after"]["first_name"] == "Scheduled" for v in _records_of(nsettings, people.topic, {"person_id": PA})
    )
    for feed in plan.feeds:
        if feed.tname != "CONTACT":
            assert_topic_equals_source(nsettings, feed)


def test_one_key_fed_by_two_tables_in_one_transaction_ends_with_the_newest(
    world: Captured, registry: Registry, nsettings: Settings, checkpoint: Path, driven: dict[str, Any]
) -> None:
    """Two updates to one logical key from two source tables committed in one transaction,
    and many interleaved updates across keys: the newest state is last for every key."""
    s = world.schema
    with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
        people = [r[0] for r in conn.execute(
            f"SELECT t.person_id FROM {s}.directory_telephone t JOIN {s}.addresses a "
            "ON a.person_id = t.person_id AND a.addr_type = t.tele_type ORDER BY 1 LIMIT 6"
        )]  # fmt: skip
        types = {p: conn.execute(
            f"SELECT t.tele_type FROM {s}.directory_telephone t JOIN {s}.addresses a "
            "ON a.person_id = t.person_id AND a.addr_type = t.tele_type WHERE t.person_id = %s LIMIT 1", (p,)
        ).fetchone()[0] for p in people}  # type: ignore[index]  # fmt: skip
    assert len(people) >= 3, "the generated world has too few shared (person, type) keys"
    expected: dict[tuple[int, str], tuple[str, str]] = {}
    with psycopg.connect(nsettings.source.dsn()) as conn:
        # one transaction: telephone first, then address, for the same logical key
        p = people[0]
        conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = 'tx-phone' WHERE person_id = %s "
                     "AND tele_type = %s", (p, types[p]))  # fmt: skip
        conn.execute(f"UPDATE {s}.addresses SET street = 'tx-street' WHERE person_id = %s AND addr_type = %s",
                     (p, types[p]))  # fmt: skip
        conn.commit()
        expected[(p, types[p])] = ("addresses", "tx-street")
        # interleaved: many small transactions alternating tables and keys
        for i in range(60):
            p = people[i % len(people)]
            if (i // len(people)) % 2 == 0:
                conn.execute(f"UPDATE {s}.addresses SET street = %s WHERE person_id = %s AND addr_type = %s",
                             (f"street-{i}", p, types[p]))  # fmt: skip
                expected[(p, types[p])] = ("addresses", f"street-{i}")
            else:
                conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE person_id = %s "
                             "AND tele_type = %s", (f"phone-{i}", p, types[p]))  # fmt: skip
                expected[(p, types[p])] = ("directory_telephone", f"phone-{i}")
            conn.commit()
    time.sleep(3)
    normalize_once(nsettings, registry, checkpoint)
    topic = registry.table("CONTACT", None).topic(nsettings.topic_prefix)  # type: ignore[union-attr]
    last: dict[tuple[int, str], dict[str, Any]] = {}
    for k, v in decode_topic(nsettings, topic):
        if v is not None:
            last[(k["person_id"], k["aux_string"])] = v
    for key, (table, value) in expected.items():
        got = last[key]
        assert got["source"]["table"] == f"{s}.{table}", (key, got["source"])
        column = "street" if table == "addresses" else "phone_number"
        assert got["after"][column] == value, (key, got["after"])


def test_a_key_deleted_from_one_table_lives_on_while_another_table_of_its_key_holds_it(
    world: Captured, registry: Registry, nsettings: Settings, checkpoint: Path, driven: dict[str, Any]
) -> None:
    """A row moved between the two source tables of one logical key (inserted into the
    second, then deleted from the first, in one transaction), and a person deleted from one
    table while the other still has them: each key ends with the other table's row, never
    deleted. A key only the first table held ends deleted."""
    s = world.schema
    with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
        both = conn.execute(
            f"SELECT t.person_id, t.tele_type FROM {s}.directory_telephone t JOIN {s}.addresses a "
            "ON a.person_id = t.person_id AND a.addr_type = t.tele_type ORDER BY 1 DESC LIMIT 1"
        ).fetchone()
        alone = conn.execute(
            f"SELECT t.person_id, t.tele_type FROM {s}.directory_telephone t WHERE NOT EXISTS (SELECT 1 FROM "
            f"{s}.addresses a WHERE a.person_id = t.person_id AND a.addr_type = t.tele_type) "
            "AND t.tele_type IN ('home', 'campus', 'mailing') ORDER BY 1 DESC LIMIT 2"
        ).fetchall()
    assert both is not None and len(alone) == 2, "the generated world lacks the keys this test needs"
    moved, gone = alone
    with psycopg.connect(nsettings.source.dsn()) as conn:
        # still held by addresses: the address changes first, then the telephone row goes
        conn.execute(f"UPDATE {s}.addresses SET street = 'kept-street' WHERE person_id = %s AND addr_type = %s", both)
        conn.execute(f"DELETE FROM {s}.directory_telephone WHERE person_id = %s AND tele_type = %s", both)
        # moved: into addresses before it leaves directory_telephone
        conn.execute(
            f"INSERT INTO {s}.addresses (person_id, addr_type, street, city, state, postal_code, country) "
            "VALUES (%s, %s, 'moved-street', 'Troy', 'NY', '12180', 'US')",
            moved,
        )
        conn.execute(f"DELETE FROM {s}.directory_telephone WHERE person_id = %s AND tele_type = %s", moved)
        conn.execute(f"DELETE FROM {s}.directory_telephone WHERE person_id = %s AND tele_type = %s", gone)
        conn.commit()
    time.sleep(3)
    lines = normalize_once(nsettings, registry, checkpoint)
    topic = registry.table("CONTACT", None).topic(nsettings.topic_prefix)  # type: ignore[union-attr]
    last: dict[tuple[int, str], dict[str, Any] | None] = {}
    for k, v in decode_topic(nsettings, topic):
        last[(k["person_id"], k["aux_string"])] = v
    for key, street in ((tuple(both), "kept-street"), (tuple(moved), "moved-street")):
        got = last[key]  # type: ignore[index]
        assert got is not None, f"{key} was deleted although addresses holds it"
        assert got["change_type"] == "UPDATE" and got["source"]["table"] == f"{s}.addresses", (key, got)
        assert got["after"]["street"] == street, (key, got["after"])
    assert last[tuple(gone)] is None, "a key no other table holds ends deleted"  # type: ignore[index]
    assert any("2 delete(s) of keys another source table still holds" in line for line in lines), lines


@pytest.mark.faults  # the normaliser SIGKILLed mid-stream: minutes, in make faults
def test_killing_the_job_mid_stream_loses_nothing_and_reorders_nothing(
    world: Captured, registry: Registry, nsettings: Settings, tmp_path: Path
) -> None:
    s = world.schema
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(world.registry_yaml)
    chk = tmp_path / "checkpoint"
    prefix = f"tk{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "MCQ_TOPIC_PREFIX": prefix}
    ksettings = nsettings.model_copy(update={"topic_prefix": prefix})
    with psycopg.connect(nsettings.source.dsn()) as conn:
        keys = [tuple(r) for r in conn.execute(
            f"SELECT person_id, tele_type FROM {s}.directory_telephone ORDER BY 1, 2 LIMIT 40")]  # fmt: skip
    written: list[str] = []
    stop = threading.Event()

    def change_continuously() -> None:
        with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
            i = 0
            while not stop.is_set() and i < LIMIT:
                p, t = keys[i % len(keys)]
                value = f"kill-{i}"
                conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE person_id = %s "
                             "AND tele_type = %s", (value, p, t))  # fmt: skip
                written.append(value)
                i += 1
                time.sleep(0.02)

    log = (tmp_path / "normalize.log").open("w")
    job = subprocess.Popen(
        [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0", "--registry", str(registry_file),
         "--checkpoint", str(chk), "--mode", "microbatch", "--trigger", "1 second", "--max-offsets-per-trigger", "200"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    writer = threading.Thread(target=change_continuously)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and "batch 1:" not in (tmp_path / "normalize.log").read_text():
            assert job.poll() is None, (tmp_path / "normalize.log").read_text()[-3000:]
            time.sleep(0.5)
        writer.start()
        # a few micro-batches into the stream of changes, while changes keep coming
        batches_before = (tmp_path / "normalize.log").read_text().count("\nbatch ")
        while time.monotonic() < deadline and (
            (tmp_path / "normalize.log").read_text().count("\nbatch ") < batches_before + 2
        ):
            assert job.poll() is None, (tmp_path / "normalize.log").read_text()[-3000:]
            time.sleep(0.3)
        assert writer.is_alive(), "the changes ended before the kill: nothing was mid-stream"
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    finally:
        stop.set()
        if writer.is_alive() or writer.ident is not None:
            writer.join(60)
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        log.close()
    assert len(written) < LIMIT  # killed while the source was still changing
    time.sleep(3)
    normalize_once(ksettings, parse_registry(world.registry_yaml), chk)  # restart from the checkpoint

    topic = registry.table("PERSON", "Telephone").topic(prefix)  # type: ignore[union-attr]
    records = decode_topic(ksettings, topic)
    seen_values = {v["after"]["phone_number"] for _, v in records if v and v["after"]}
    assert set(written) <= seen_values  # every committed change arrived
    feed = next(f for f in plan_normalize(registry, prefix).feeds if f.topic == topic and f.tname != "CONTACT")
    assert_topic_equals_source(ksettings, feed)  # the last record per key is the source's state


# waits for the log cleaner: in make long; CI runs it when its time budget allows
@pytest.mark.long
@pytest.mark.extended(minutes=2)
def test_after_compaction_a_topic_holds_one_record_per_live_key(
    world: Captured, registry: Registry, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"tc{uuid.uuid4().hex[:8]}"
    csettings = settings.model_copy(update={"topic_prefix": prefix})
    topic = registry.table("PERSON", "Telephone").topic(prefix)  # type: ignore[union-attr]
    # compaction within seconds instead of hours: small segments, no lag, tombstones dropped at once
    eager = {
        "cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "0", "max.compaction.lag.ms": "1000",
    }  # fmt: skip
    apply_topics(csettings, [TopicSpec(topic, 1, eager)])
    s = world.schema
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for i in range(5):
            conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE tele_type = 'campus'",
                         (f"compact-{i}",))  # fmt: skip
        conn.execute(f"DELETE FROM {s}.directory_telephone WHERE tele_type = 'mobile'")
    time.sleep(3)
    normalize_once(csettings, registry, tmp_path / "checkpoint")
    feed = next(f for f in plan_normalize(registry, prefix).feeds if f.topic == topic and f.tname != "CONTACT")
    source = db_state(csettings, feed)

    from confluent_kafka import Producer

    producer = Producer(csettings.kafka.client_config())
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        time.sleep(2)
        producer.produce(topic, key=b"roll", value=None)  # a write rolls the expired active segment
        producer.flush(10)
        records = decode_or_skip_roll(csettings, topic)
        live = [k for k, v in records if v is not None]
        if len(live) == len(set(live)) == len(source) and set(live) == set(source) and len(records) == len(live):
            break
    records = decode_or_skip_roll(csettings, topic)
    live = [k for k, v in records if v is not None]
    assert sorted(live) == sorted(source)  # exactly one record per live key
    assert len(records) == len(live)  # and nothing (no delete record, no tombstone) for deleted rows
    state = dict(records)
    for key, row in source.items():
        assert state[key]["after"]["phone_number"] == row["phone_number"]  # type: ignore[index]


def decode_or_skip_roll(settings: Settings, topic: str) -> list[tuple[KeyT, dict[str, Any] | None]]:
    des = AvroDeserializer(registry_client(settings))
    out: list[tuple[KeyT, dict[str, Any] | None]] = []
    for key, value, _, _ in read_topic_to_end(settings, topic):
        if key == b"roll":
            continue
        k = des(key, SerializationContext(topic, MessageField.KEY))
        v = des(value, SerializationContext(topic, MessageField.VALUE)) if value is not None else None
        if v is not None and v["change_type"] == "DELETE":
            out.append((key_tuple(k), None))  # a delete record is not live state
            continue
        out.append((key_tuple(k), v))
    return out


@pytest.mark.faults  # the normaliser SIGKILLed mid-stream: minutes, in make faults
def test_in_real_time_a_kill_mid_stream_loses_nothing_and_two_table_keys_keep_their_order(
    world: Captured, registry: Registry, nsettings: Settings, tmp_path: Path
) -> None:
    """Real-Time Mode: SIGKILL while changes flow, a restart from the checkpoint, and every
    key ends with the source's last state -- a key fed by two tables (ordered in the
    micro-batch part) with the newest of its two tables' changes."""
    s = world.schema
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(
        world.registry_yaml.replace("\nlisteners:", CONTACT.format(src=world.source.name, schema=s) + "\nlisteners:", 1)
    )
    prefix = f"tr{uuid.uuid4().hex[:8]}"
    rsettings = nsettings.model_copy(update={"topic_prefix": prefix})
    env = {**os.environ, "MCQ_TOPIC_PREFIX": prefix}
    command = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
               "--registry", str(registry_file),
               "--checkpoint", str(tmp_path / "checkpoint"), "--checkpoint-interval", "10 seconds"]  # fmt: skip
    with psycopg.connect(nsettings.source.dsn()) as conn:
        shared = [tuple(r) for r in conn.execute(
            f"SELECT t.person_id, t.tele_type FROM {s}.directory_telephone t JOIN {s}.addresses a "
            "ON a.person_id = t.person_id AND a.addr_type = t.tele_type ORDER BY 1, 2 LIMIT 8"
        )]  # fmt: skip
    assert len(shared) >= 3, "the generated world has too few shared (person, type) keys"
    written: list[str] = []
    newest: dict[tuple[Any, ...], tuple[str, str]] = {}
    stop = threading.Event()

    def change_continuously() -> None:
        with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
            i = 0
            while not stop.is_set() and i < LIMIT:
                p, t = shared[i % len(shared)]
                value = f"rt-{i}"
                if i % 3 == 0:
                    conn.execute(f"UPDATE {s}.addresses SET street = %s WHERE person_id = %s AND addr_type = %s",
                                 (value, p, t))  # fmt: skip
                    newest[(p, t)] = ("addresses", value)
                else:
                    conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE person_id = %s "
                                 "AND tele_type = %s", (value, p, t))  # fmt: skip
                    newest[(p, t)] = ("directory_telephone", value)
                    written.append(value)
                i += 1
                time.sleep(0.02)

    log_path = tmp_path / "normalize.log"
    writer = threading.Thread(target=change_continuously)
    with log_path.open("w") as log:
        job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while "batch 1 of " not in log_path.read_text():
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.5)
            writer.start()
            time.sleep(4)  # changes flowing, a checkpoint likely in between
            assert writer.is_alive(), "the changes ended before the kill: nothing was mid-stream"
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
            time.sleep(2)  # changes while the normaliser is down
        finally:
            stop.set()
            if writer.ident is not None:
                writer.join(60)
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        log.write("--- restarted ---\n")
        log.flush()
        job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            plan = plan_normalize(registry, prefix)
            phones = next(f for f in plan.feeds if f.tname == "PERSON" and f.source_table.endswith("telephone"))
            contact = registry.table("CONTACT", None).topic(prefix)  # type: ignore[union-attr]

            def converged() -> None:
                assert job.poll() is None, log_path.read_text()[-3000:]
                seen = {
                    v["after"]["phone_number"] for _, v in decode_topic(rsettings, phones.topic) if v and v["after"]
                }
                assert set(written) <= seen, "a committed change is missing"
                assert_topic_equals_source(rsettings, phones)
                last: dict[tuple[Any, ...], dict[str, Any]] = {}
                for k, v in decode_topic(rsettings, contact):
                    if v is not None:
                        last[(k["person_id"], k["aux_string"])] = v
                for key, (table, value) in newest.items():
                    column = "street" if table == "addresses" else "phone_number"
                    assert last[key]["source"]["table"] == f"{s}.{table}", (key, last[key]["source"])
                    assert last[key]["after"][column] == value, (key, last[key]["after"])

            until(time.monotonic() + 240, converged)
            job.send_signal(signal.SIGTERM)  # to the process, as Kubernetes stops a pod
            assert job.wait(60) == 0, log_path.read_text()[-3000:]
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
    assert "fed by two or more raw topics" in log_path.read_text()


@pytest.mark.long  # a normaliser's catch-up then its real-time start: minutes, in make long
def test_a_first_real_time_start_catches_up_in_micro_batches_then_hands_over_exactly(
    world: Captured, nsettings: Settings, tmp_path: Path
) -> None:
    """With a backlog above --catch-up-above, the real-time queries start where a
    micro-batch catch-up ended: every raw record reaches its logical topic once (a
    real-time start from the beginning would write the backlog a second time), every topic
    equals the source, and a change committed afterwards flows in real time."""
    s = world.schema
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(world.registry_yaml)
    registry = parse_registry(world.registry_yaml, str(registry_file))
    prefix = f"tc{uuid.uuid4().hex[:8]}"
    csettings = nsettings.model_copy(update={"topic_prefix": prefix})
    log_path = tmp_path / "normalize.log"
    command = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
               "--registry", str(registry_file), "--catch-up-above", "0",
               "--checkpoint", str(tmp_path / "checkpoint"), "--checkpoint-interval", "10 seconds"]  # fmt: skip
    plan = plan_normalize(registry, prefix)
    with log_path.open("w") as log:
        job = subprocess.Popen(command, env={**os.environ, "MCQ_TOPIC_PREFIX": prefix}, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while "batch 0 of " not in log_path.read_text():  # a real-time query's first batch
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.5)
            text = log_path.read_text()
            assert "catching up in micro-batches first" in text and "real time starts where it ended" in text, text
            for feed in plan.feeds:
                assert_topic_equals_source(csettings, feed)
            for topic in sorted({f.topic for f in plan.feeds}):
                written = [(key_tuple(k), v["source"]["last_commit_lsn"], v["source"]["lsn"])
                           for k, v in decode_topic(csettings, topic) if v is not None]  # fmt: skip
                assert len(written) == len(set(written)), f"{topic}: a raw record was written twice"
            phones = next(f for f in plan.feeds if f.source_table.endswith("directory_telephone"))
            with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
                person, tele = conn.execute(
                    f"SELECT person_id, tele_type FROM {s}.directory_telephone ORDER BY 1, 2 LIMIT 1"
                ).fetchone()  # type: ignore[misc]
                conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = 'after-catch-up' "
                             "WHERE person_id = %s AND tele_type = %s", (person, tele))  # fmt: skip

            def arrived() -> None:
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert_topic_equals_source(csettings, phones)

            until(time.monotonic() + 60, arrived)
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(60)
    # the driver JVM's start-up notice of Spark's incubator module is not passed on to the terminal
    assert "incubator" not in log_path.read_text(), log_path.read_text()[:2000]


def _queries(log_path: Path) -> dict[str, dict[str, str]]:
    """The running normaliser's queries by name (its health endpoint's ``/queries``)."""
    found = re.search(r"normalize: health (http://\S+)", log_path.read_text())
    assert found, log_path.read_text()[-3000:]
    return {q["name"]: q for q in httpx.get(found.group(1) + "/queries", timeout=10).json()}


@pytest.mark.long  # a real-time normaliser followed through two registry changes: minutes, in make long
@pytest.mark.timeout(1500)  # its own deadlines add up to 1,260 s
def test_a_running_normaliser_restarts_only_the_queries_a_registry_change_touches(
    world: Captured, nsettings: Settings, tmp_path: Path
) -> None:
    """`mcq registry apply` reaches the running normaliser, which restarts only the queries of
    the raw topics whose feeds changed: every other query keeps its run (id and start time).

    1. A column added to a feed's watch: that raw topic's query restarts, and an update of
       only that column, which was housekeeping before, now reaches the logical topic -- even
       one committed the moment the apply returned, which the old query saw before it
       stopped: the change's window is normalised again.
    2. A table removed and two added (CONTACT, fed by two raw topics and so ordered in
       micro-batches; VOICEMAIL, fed by the outbox): the removed table's query stops, the
       outbox's restarts, the ordered query starts and CONTACT's topic equals the source."""
    from mcq.registry.store import RegistryStore

    s = world.schema
    prefix = f"tw{uuid.uuid4().hex[:8]}"
    wsettings = nsettings.model_copy(update={"topic_prefix": prefix})
    before = parse_registry(world.registry_yaml, "before.yaml")
    watched = world.registry_yaml.replace("watch: [phone_number]", "watch: [phone_number, updated_at]", 1)
    after = parse_registry(watched, "after.yaml")
    cut = slice(watched.index("  - tname: BUILDINGS"), watched.index("  - tname: DEPARTMENT"))
    reshaped = (watched[: cut.start] + watched[cut.stop :]).replace(
        "  - {listener: CMMS, tname: BUILDINGS, subtype: null}\n", ""
    )
    reshaped = reshaped.replace("\nlisteners:", CONTACT.format(src=world.source.name, schema=s) + "\nlisteners:", 1)
    last = parse_registry(reshaped, "reshaped.yaml")
    store = RegistryStore(wsettings)
    store.apply(before)
    log_path = tmp_path / "normalize.log"
    command = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
               "--checkpoint", str(tmp_path / "checkpoint"), "--checkpoint-interval", "10 seconds"]  # fmt: skip
    raw = {f.ref: f.raw_topic for f in plan_normalize(before, prefix).feeds}
    phones_query = QUERY_PREFIX + raw["PERSON/Telephone"]
    with log_path.open("w") as log:
        job = subprocess.Popen(command, env={**os.environ, "MCQ_TOPIC_PREFIX": prefix}, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:

            def logged(text: str, times: int = 1) -> Callable[[], None]:
                def check() -> None:
                    assert job.poll() is None, log_path.read_text()[-3000:]
                    assert log_path.read_text().count(text) >= times, log_path.read_text()[-3000:]

                return check

            until(time.monotonic() + 300, logged("batch 0 of "))  # a real-time query's first batch
            first = _queries(log_path)
            assert phones_query in first and len(first) == len(set(raw.values())) + 1, first  # + the outbox's

            # 1. a watch changed: one query restarts
            assert "PERSON/Telephone" in str(store.apply(after).changed)
            with psycopg.connect(nsettings.source.dsn(), autocommit=True) as conn:
                conn.execute(
                    f"UPDATE {s}.directory_telephone SET updated_at = '2031-02-03 04:05:06' "
                    f"WHERE (person_id, tele_type) = (SELECT person_id, tele_type FROM {s}.directory_telephone "
                    "ORDER BY 1, 2 LIMIT 1)"
                )
            until(time.monotonic() + 60, logged("the registry changed what it normalises (table/PERSON/Telephone)"))
            until(time.monotonic() + 180, logged("normalised again in "))
            phones = next(f for f in plan_normalize(after, prefix).feeds if f.ref == "PERSON/Telephone")
            assert "updated_at" in phones.watch

            def arrived() -> None:
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert_topic_equals_source(wsettings, phones)  # updated_at compared too: it is watched

            until(time.monotonic() + 120, arrived)  # the replayed window may arrive before the query starts
            until(time.monotonic() + 120, logged("normalize: the new plan runs: "))
            second = _queries(log_path)
            assert second.keys() == first.keys(), second
            assert second[phones_query]["run_id"] != first[phones_query]["run_id"]
            assert second[phones_query]["id"] == first[phones_query]["id"]  # the same query, from its checkpoint
            untouched = [name for name in first if name != phones_query]
            assert all(second[n] == first[n] for n in untouched), (first, second)

            # 2. a table removed, two added: the removed one's query stops, the outbox's restarts
            store.apply(last)
            until(time.monotonic() + 60, logged("restarting the queries of ", 2))
            contact = [f for f in plan_normalize(last, prefix).feeds if f.tname == "CONTACT"]

            def contact_arrived() -> None:  # every key of either table, each with its newest table's row
                assert job.poll() is None, log_path.read_text()[-3000:]
                logical = last_state(
                    [r for r in decode_topic(wsettings, contact[0].topic) if r[0]["tname"] == "CONTACT"]
                )
                rows = {f.source_table: (f, db_state(wsettings, f)) for f in contact}
                assert set(logical) == {k for _, held in rows.values() for k in held}, "CONTACT: keys differ"
                for key, value in logical.items():
                    feed, held = rows[value["source"]["table"]]
                    assert {c: value["after"][c] for c in feed.watch} == {c: held[key][c] for c in feed.watch}, key

            until(time.monotonic() + 240, contact_arrived)
            until(time.monotonic() + 120, logged("normalize: the new plan runs: ", 2))
            third = _queries(log_path)
            buildings = QUERY_PREFIX + raw["BUILDINGS"]
            (outbox,) = {n for n in first if n.removeprefix(QUERY_PREFIX) not in raw.values()}  # no feeds: the outbox
            assert buildings not in third and "mcq-normalize" in third, third  # the ordered micro-batch query
            assert third[outbox]["run_id"] != second[outbox]["run_id"]
            kept = [n for n in second if n not in (outbox, buildings)]
            assert len(kept) == len(second) - 2 and all(third[n] == second[n] for n in kept), (second, third)
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(60)
