"""``mcq reconcile``: drift injected into a target by hand (an object deleted, one changed,
a stray one added) is reported exactly; ``--repair`` sends exactly those objects' keys
through the listener's bulk lane; once the listener has applied them a second reconcile
finds nothing, and the target holds what the source says (derived from the changes sent,
not from the code under test)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from ldap3 import Connection

from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import World, caught_up, change, expected_state, make_world, mcq, produce, target_state
from tests.support.ldap_world import entry, ldap, send_people, world  # noqa: F401 - the LDAP world fixture


def _reconcile(w: World, *args: str) -> Result:
    return mcq(w, "reconcile", *args)


def test_drift_in_a_table_target_is_reported_exactly_and_repaired(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(40)]
    history += [change("PHONE", pid, f"+1-519-{pid:07d}") for pid in range(0, 40, 4)]
    history += [change("PHONE", pid, None, "DELETE") for pid in (5, 6)]
    produce(w.settings, w.phone_topic, history)
    caught_up(w)
    expected = expected_state(history)

    clean = _reconcile(w)
    assert clean.exit_code == 0, clean.output
    assert "38 object(s) expected, 38 at the target: 0 missing, 0 extra, 0 different" in clean.output

    lost, changed = change("PHONE", 1, None).key.text(), change("PHONE", 2, None).key.text()
    stray = ChangeKey("PHONE", None, 777, None, None, "office").text()
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table} WHERE change_key = %s", (lost,))
        conn.execute(f"UPDATE {w.table} SET state = state || '{{\"phone\": \"+1-000\"}}' WHERE change_key = %s",
                     (changed,))  # fmt: skip
        conn.execute(
            f"INSERT INTO {w.table} (change_key, tname, person_id, aux_string, state, last_commit_lsn, lsn)"
            " VALUES (%s, 'PHONE', 777, 'office', '{\"phone\": \"x\"}', 7, 8)",
            (stray,),
        )
    report = tmp_path / "drift.json"
    found = _reconcile(w, "--report", str(report))
    assert found.exit_code == 1, found.output
    assert "38 object(s) expected, 38 at the target: 1 missing, 1 extra, 1 different" in found.output
    assert f"different: {changed}: phone: expected '+1-518-0000002', found '+1-000'" in found.output
    drift = json.loads(report.read_text())
    assert [d["object"] for d in drift["missing"]] == [lost]
    assert [d["object"] for d in drift["extra"]] == [stray]
    assert [(d["object"], d["actual"]["phone"]) for d in drift["different"]] == [(changed, "+1-000")]

    repaired = _reconcile(w, "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "repair: 3 record(s) for 3 drifted object(s)" in repaired.output
    run = caught_up(w)
    assert run.counters.bulk_applied == 3
    assert target_state(w.settings, w.table) == expected
    again = _reconcile(w)
    assert again.exit_code == 0 and "0 missing, 0 extra, 0 different" in again.output, again.output


def test_a_row_no_key_can_be_read_from_is_named_for_removal_by_hand_and_the_rest_repaired(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """A row someone else put in the target under a name mcq never writes cannot be reached
    by any refresh: `--repair` repairs the drift it can, names that row, and exits 1."""
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(10)]
    produce(w.settings, w.phone_topic, history)
    caught_up(w)
    lost = change("PHONE", 3, None).key.text()
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table} WHERE change_key = %s", (lost,))
        conn.execute(
            f"INSERT INTO {w.table} (change_key, tname, state, last_commit_lsn, lsn)"
            " VALUES ('added by hand', 'PHONE', '{}', 1, 1)"
        )
    repaired = _reconcile(w, "--repair")
    assert repaired.exit_code == 1, repaired.output
    assert "repair: 1 record(s) for 1 drifted object(s)" in repaired.output
    assert (
        "not repaired: added by hand is not an object mcq writes (no key can be read from it): "
        "remove it at the target by hand"
    ) in repaired.output
    caught_up(w)
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table} WHERE change_key = 'added by hand'")
    assert target_state(w.settings, w.table) == expected_state(history)


def test_a_table_target_is_compared_in_spark_exactly_as_through_the_view_in_python(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """The Spark comparison (no state crosses to Python) and the view in Python find the
    same drift, written by hand into the target: a row gone, a value changed, a column
    with a null value dropped, a value that is a number, a SQL NULL state, a column the
    allow-list hides, a stray row, a row the content rule keeps out; a key with a
    non-ASCII character that did not drift."""
    from streams.jobs.reconcile import Reconcile
    from streams.session import spark_session

    ruled = '  - {listener: T, tname: ROOM, columns: [phone], rule: "person_id <> 101"}'
    w = make_world(settings, token, tmp_path, extra=ruled)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(12)]
    history += [change("PHONE", pid, None) for pid in (3, 9)]  # 9: a null value that does not drift
    history += [change("PHONE", 7, "+33 1", tele="bureau-\u00e9t\u00e9")]
    rooms = [change("ROOM", pid, f"R-{pid}", "INSERT") for pid in (100, 101, 102)]  # 101: out of the view
    produce(w.settings, w.phone_topic, history)
    produce(w.settings, w.room_topic, rooms)
    caught_up(w)
    key = {pid: change("PHONE", pid, None).key.text() for pid in range(12)}
    room, out = change("ROOM", 100, None).key.text(), change("ROOM", 101, None).key.text()
    stray = ChangeKey("PHONE", None, 777, None, None, "office").text()
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table} WHERE change_key = %s", (key[1],))
        conn.execute(f"UPDATE {w.table} SET state = state || '{{\"phone\": \"+1-000\"}}' WHERE change_key = %s",
                     (key[2],))  # fmt: skip
        conn.execute(f"UPDATE {w.table} SET state = state - 'phone' WHERE change_key = %s", (key[3],))
        conn.execute(f"UPDATE {w.table} SET state = jsonb_set(state, '{{person_id}}', '4') WHERE change_key = %s",
                     (key[4],))  # fmt: skip
        conn.execute(f"UPDATE {w.table} SET state = NULL WHERE change_key = %s", (key[5],))
        conn.execute(f"UPDATE {w.table} SET state = state || '{{\"tele_type\": \"office\"}}' WHERE change_key = %s",
                     (room,))  # fmt: skip
        conn.execute(
            f"INSERT INTO {w.table} (change_key, tname, person_id, aux_string, state, last_commit_lsn, lsn)"
            " VALUES (%s, 'PHONE', 777, 'office', '{\"phone\": \"x\"}', 7, 8)",
            (stray,),
        )
        conn.execute(
            f"INSERT INTO {w.table} (change_key, tname, person_id, aux_string, state, last_commit_lsn, lsn)"
            " VALUES (%s, 'ROOM', 101, 'office', '{\"phone\": \"R-101\"}', 7, 8)",
            (out,),
        )

    spark = spark_session(w.settings, "test-reconcile")
    in_spark = Reconcile(w.settings, w.registry, w.name)
    assert in_spark.jdbc is not None, "a table target without rules is compared in Spark"
    in_python = Reconcile(w.settings, w.registry, w.name)
    in_python.jdbc = None
    drifts = [in_spark.run(spark), in_python.run(spark)]

    for drift in drifts:
        assert (drift.expected, drift.actual) == (15, 16)
        assert sorted(drift.missing) == [key[1]]
        assert sorted(drift.extra) == sorted([stray, out])
        assert sorted(drift.different) == sorted([key[2], key[3], key[4], key[5], room])
        assert drift.different[room] == ({"phone": "R-100"}, {"phone": "R-100", "tele_type": "office"})
        assert drift.different[key[3]] == ({"person_id": "3", "tele_type": "office", "phone": None},
                                           {"person_id": "3", "tele_type": "office"})  # fmt: skip
        assert drift.different[key[4]][1]["person_id"] == 4
        assert drift.different[key[5]][1] is None
    assert drifts[0].as_json() == drifts[1].as_json()


# a minute and more on 2 cores: in make long (make test reconciles a table target, test_adapters)
@pytest.mark.long
def test_drift_in_an_ldap_directory_is_reported_exactly_and_repaired(world: World) -> None:
    w = world
    send_people(w, 6)
    caught_up(w)
    people = f"ou=people,{w.table}"
    assert entry(w.settings, f"employeeNumber=6,{people}") is not None
    clean = _reconcile(w)
    assert clean.exit_code == 0 and "7 object(s) expected, 7 at the target: 0 missing" in clean.output, clean.output

    conn: Connection = ldap(w.settings)
    conn.delete(f"employeeNumber=2,{people}")
    conn.modify(f"employeeNumber=3,{people}", {"telephoneNumber": [("MODIFY_REPLACE", ["+1 000 000 0000"])]})
    conn.modify(f"employeeNumber=4,{people}", {"description": [("MODIFY_REPLACE", ["set by hand: not ours"])]})
    conn.add(f"employeeNumber=999,{people}", ["inetOrgPerson"], {"cn": "Stray", "sn": "Stray"})
    conn.unbind()

    found = _reconcile(w)
    assert found.exit_code == 1, found.output
    assert "7 object(s) expected, 7 at the target: 1 missing, 1 extra, 1 different" in found.output
    assert "missing: PERSON_ENTRY[person_id=2]" in found.output
    assert "extra: PERSON_ENTRY[person_id=999]" in found.output  # in ou=people, which the listener owns
    assert (
        "different: PERSON_ENTRY[person_id=3]: telephonenumber: expected ['+1 518 276 0003'], "
        "found ['+1 000 000 0000']" in found.output
    )

    repaired = _reconcile(w, "--repair")
    assert repaired.exit_code == 0, repaired.output
    caught_up(w)
    assert entry(w.settings, f"employeeNumber=999,{people}") is None
    two = entry(w.settings, f"employeeNumber=2,{people}")
    assert two is not None and two["telephoneNumber"] == ["+1 518 276 0002"] and two["cn"] == ["P2 L2"]
    three = entry(w.settings, f"employeeNumber=3,{people}")
    assert three is not None and three["telephoneNumber"] == ["+1 518 276 0003"]
    four = entry(w.settings, f"employeeNumber=4,{people}")
    assert four is not None and four["description"] == ["set by hand: not ours"]  # not managed: left alone
    again = _reconcile(w)
    assert again.exit_code == 0 and "0 missing, 0 extra, 0 different" in again.output, again.output


def test_an_unknown_listener_or_a_target_that_cannot_be_read_back_is_one_line_and_exit_2(
    world: World,
) -> None:
    env = {"MCQ_TOPIC_PREFIX": world.settings.topic_prefix}
    for name, message in {
        "NOPE": "mcq reconcile: NOPE: no listener named NOPE in the registry (known: ADSI, Applix, BEST, CMMS, Insite,",
        "Unity": "mcq reconcile: Unity: its webhook target cannot be read back to compare",
    }.items():
        out = CliRunner().invoke(main, ["reconcile", name, "--registry", str(world.registry_file)], env=env)
        assert out.exit_code == 2, out.output
        assert len(out.output.strip().splitlines()) == 1 and out.output.startswith(message), out.output
