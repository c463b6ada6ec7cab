"""``mcq rebuild``: a stopped listener's target rebuilt from the compacted topics, by either
engine (a Spark job, or a direct read for small topics: the same result): a table by COPY
(with or without emptying it first), an LDAP directory through its adapter; equal key by
key to what the changes sent say (derived here, not by the code under test); what is
committed during the rebuild is applied by the next run. Refused while the listener runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from click.testing import Result
from confluent_kafka.admin import AdminClient

from consumers.runtime.topics import live_members
from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import (
    World,
    caught_up,
    change,
    expected_state,
    make_world,
    mcq,
    produce,
    running,
    target_state,
    wait_for,
)
from mcq.testing.logs import on_lines
from streams.jobs.rebuild import Rebuild, RebuildSummary
from streams.session import spark_session
from tests.support.ldap_world import entry, ldap, send_people, world  # noqa: F401 - the LDAP world fixture

# keys whose text needs escaping (JSON, CSV): they must land on the rows the listener writes
ODD = ["höme", 'q"uote', "back\\slash", "comma,semi;colon", "tab\there"]


def _rebuild(w: World, *args: str) -> Result:
    return mcq(w, "rebuild", *args)


ENGINES = pytest.mark.parametrize("engine", ["spark", "direct"])


def _run(w: World, truncate: bool, engine: str, report: Callable[[str], None] = lambda _: None) -> RebuildSummary:
    job = Rebuild(w.settings, w.registry, w.name, truncate)
    with on_lines(report, "streams"):
        summary = job.run(engine=engine, start_spark=lambda: spark_session(w.settings, "test-rebuild"))
    assert summary.engine == engine
    return summary


@ENGINES
@pytest.mark.parametrize("truncate", [False, True], ids=["merge", "truncate"])
def test_a_table_rebuilt_from_the_topics_equals_the_source_and_changes_made_meanwhile_follow(
    stack: Stack, settings: Settings, token: str, tmp_path: Path, truncate: bool, engine: str
) -> None:
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(60)]
    history += [change("PHONE", pid, f"+1-519-{pid:07d}", "INSERT", tele=t) for pid, t in enumerate(ODD)]
    history += [change("PHONE", pid, f"+1-520-{pid:07d}") for pid in range(0, 60, 5)]
    history += [change("PHONE", pid, None, "DELETE") for pid in (7, 8)]
    produce(w.settings, w.phone_topic, history)
    caught_up(w)
    assert target_state(w.settings, w.table) == expected_state(history)

    # the target is lost (emptied) but for a row the source never had
    stray = ChangeKey("PHONE", None, 4242, None, None, "office").text()
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table}")
        conn.execute(
            f"INSERT INTO {w.table} (change_key, tname, state, last_commit_lsn, lsn)"
            " VALUES (%s, 'PHONE', '{}', 1, 1)",
            (stray,),
        )

    meanwhile = [change("PHONE", 3, "+1-777-0000003"), change("PHONE", 100, "+1-777-0000100", "INSERT")]
    meanwhile += [change("PHONE", 4, None, "DELETE")]

    def report(line: str) -> None:  # once the rebuild has taken the topics' ends: committed during it
        if "to their ends" in line:
            produce(w.settings, w.phone_topic, meanwhile)

    summary = _run(w, truncate, engine, report)
    assert summary.loaded == len(expected_state(history))
    assert target_state(w.settings, w.table) == expected_state(history)  # as of the ends it read

    run = caught_up(w)
    assert run.counters.applied == len(meanwhile)  # only what came after, nothing applied twice
    assert target_state(w.settings, w.table) == expected_state(history + meanwhile)


@ENGINES
def test_a_table_whose_listener_has_a_content_rule_is_rebuilt_to_exactly_its_view(
    stack: Stack, settings: Settings, token: str, tmp_path: Path, engine: str
) -> None:
    """A content rule is judged by the listener's view in Spark's workers, an allow-list in
    the JVM: the rebuilt table holds the rows the rule admits, with the columns allowed."""
    ruled = '  - {listener: T, tname: ROOM, columns: [phone], rule: "person_id <> 101"}'
    w = make_world(settings, token, tmp_path, extra=ruled)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(20)]
    rooms = [change("ROOM", pid, f"R-{pid}", "INSERT") for pid in range(100, 106)]
    rooms += [change("ROOM", 104, "R-104b"), change("ROOM", 105, None, "DELETE")]
    produce(w.settings, w.phone_topic, history)
    produce(w.settings, w.room_topic, rooms)
    wanted = expected_state(history)  # derived from what was sent: PHONE whole, ROOM by the rule, phone only
    wanted |= {k: {"phone": v["phone"]} for k, v in expected_state(rooms).items() if '"person_id":101' not in k}
    assert len(wanted) == 20 + 4
    caught_up(w)
    assert target_state(w.settings, w.table) == wanted  # the listener itself

    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table}")
    summary = _run(w, True, engine)
    assert summary.path == "bulk COPY into the table" and summary.loaded == len(wanted)
    assert target_state(w.settings, w.table) == wanted
    assert caught_up(w).counters.applied == 0


@ENGINES
def test_a_listener_that_never_ran_is_loaded_by_a_rebuild_and_its_first_run_has_nothing_to_do(
    stack: Stack, settings: Settings, token: str, tmp_path: Path, engine: str
) -> None:
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(25)]
    history += [change("PHONE", 3, None, "DELETE")]
    produce(w.settings, w.phone_topic, history)
    dry = _rebuild(w, "--dry-run", "--engine", engine)
    assert dry.exit_code == 0 and "24 live state(s), nothing written" in dry.output, dry.output
    assert target_state(w.settings, w.table) == {}
    done = _rebuild(w, "--engine", engine)
    assert done.exit_code == 0, done.output
    assert target_state(w.settings, w.table) == expected_state(history)
    run = caught_up(w)
    assert run.counters.applied == 0 and run.counters.skipped == 0  # it starts where the rebuild read up to


def test_a_rebuild_is_refused_while_the_listener_runs(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    produce(w.settings, w.phone_topic, [change("PHONE", 1, "+1-518-0000001", "INSERT")])
    with running(w):
        admin = AdminClient(w.settings.kafka.client_config())
        wait_for("the listener in its group", lambda: bool(live_members(admin, w.topics)), 60)
        refused = _rebuild(w)
    assert refused.exit_code == 1, refused.output
    assert refused.output.startswith(f"mcq rebuild {w.name}: the listener is running ("), refused.output
    stopped = _rebuild(w, "--truncate")
    assert stopped.exit_code == 0, stopped.output  # once stopped; a table target may be emptied first
    assert target_state(w.settings, w.table) == expected_state([change("PHONE", 1, "+1-518-0000001", "INSERT")])


# a minute and more on 2 cores: in make long (make test rebuilds table targets)
@pytest.mark.long
@ENGINES
def test_an_ldap_directory_is_rebuilt_through_its_adapter(world: World, engine: str) -> None:
    w = world
    send_people(w, 5)
    caught_up(w)
    people = f"ou=people,{w.table}"
    conn = ldap(w.settings)
    for pid in (1, 2, 3):
        conn.delete(f"employeeNumber={pid},{people}")
    conn.modify(f"employeeNumber=4,{people}", {"cn": [("MODIFY_REPLACE", ["Wrong"])]})
    conn.add(f"employeeNumber=998,{people}", ["inetOrgPerson"], {"cn": "Stray", "sn": "Stray"})
    conn.unbind()
    assert _rebuild(w, "--truncate").exit_code == 2  # not a table

    done = _rebuild(w, "--engine", engine)
    assert done.exit_code == 0, done.output
    assert "through the ldap adapter" in done.output and "1 removed" in done.output
    for pid in range(1, 6):
        person = entry(w.settings, f"employeeNumber={pid},{people}")
        assert person is not None and person["cn"] == [f"P{pid} L{pid}"], person
    assert entry(w.settings, f"employeeNumber=998,{people}") is None
    again = mcq(w, "reconcile")
    assert again.exit_code == 0 and "0 missing, 0 extra, 0 different" in again.output, again.output
