"""Pure logic of the listener runtime: interests and rules, back-off, names, adapters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consumers.adapter import adapter_class, make_adapter
from consumers.exceptions import ChangeFailed, ListenerConfigError, TargetUnavailable
from consumers.runtime.interests import interested
from consumers.runtime.parking import backoff_s
from consumers.runtime.topics import ListenerTopics
from consumers.table.adapter import TableAdapter
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry import parse_registry

REGISTRY = """
sources:
  - {name: campus, schemas: [campus]}
tables:
  - tname: PERSON
    subtype: Status
    feeds:
      - {source: campus, table: campus.person_status, keys: {person_id: person_id}, columns: [person_id, status]}
  - {tname: PERSON, subtype: Telephone}
  - {tname: ROOM}
listeners:
  - name: LDAP
    owner: idm@example
    adapter: {type: table}
    delivery: {max_attempts: 7}
  - name: Unity
    owner: voice@example
    schedule: "*/3 * * * *"
    adapter: {type: table}
interests:
  - {listener: LDAP, tname: PERSON, subtype: "*"}
  - {listener: Unity, tname: PERSON, subtype: Status, rule: "status = 'Active'"}
"""


def status_change(kind: str, after: str | None, before: str | None) -> Change:
    return Change(
        key=ChangeKey("PERSON", "Status", 42),
        change_type=kind,  # type: ignore[arg-type]
        position=Position(10, 11),
        entry_time=datetime.now(UTC),
        source_table="campus.person_status",
        after={"person_id": "42", "status": after} if after else None,
        before={"person_id": "42", "status": before} if before else None,
    )


@pytest.fixture
def registry():  # type: ignore[no-untyped-def]
    return parse_registry(REGISTRY, "listeners.yaml")


def test_an_all_subtypes_interest_takes_every_subtype_and_nothing_else(registry) -> None:  # type: ignore[no-untyped-def]
    assert interested(registry, "LDAP", status_change("UPDATE", "Active", "Active"))
    room = Change(ChangeKey("ROOM", None, None, "R1"), "INSERT", Position(1, 1), datetime.now(UTC), "x", {"r": "1"})
    assert not interested(registry, "LDAP", room)


@pytest.mark.parametrize(
    ("kind", "after", "before", "expected"),
    [
        ("INSERT", "Active", None, True),
        ("INSERT", "Former-Active", None, False),
        ("UPDATE", "Former-Active", "Active", True),  # leaving the selection is news to the listener
        ("UPDATE", "Former-Active", "Retired", False),
        ("DELETE", None, "Active", True),  # a delete is judged by the row that went away
        ("DELETE", None, "Former-Active", False),
    ],
)
def test_a_content_rule_sees_the_row_after_and_before_the_change(  # type: ignore[no-untyped-def]
    registry, kind: str, after: str | None, before: str | None, expected: bool
) -> None:
    assert interested(registry, "Unity", status_change(kind, after, before)) is expected


def test_backoff_grows_exponentially_with_jitter_and_stays_under_the_cap() -> None:
    for attempt in range(12):
        values = [backoff_s(attempt, 0.2, 5.0) for _ in range(200)]
        assert all(0.1 <= v <= min(5.0, 0.2 * 2**attempt) for v in values)
    assert len({round(backoff_s(3, 0.2, 5.0), 6) for _ in range(50)}) > 1  # jittered


def test_listener_names_follow_the_topic_prefix() -> None:
    t = ListenerTopics("mcq", "LDAP")
    assert t.group == "mcq.LDAP" and t.bulk_group == "mcq.LDAP.bulk"
    assert t.retry == "mcq.listener.LDAP.retry" and t.dlq == "mcq.listener.LDAP.dlq"
    assert t.bulk_lane() == ["mcq.listener.LDAP.bulk", "mcq._refresh"]
    assert {s.config["cleanup.policy"] for s in t.specs() if s.name == t.applied} == {"compact"}


def test_delivery_settings_come_from_the_registry_with_defaults(registry) -> None:  # type: ignore[no-untyped-def]
    assert registry.listener("LDAP").delivery.max_attempts == 7
    assert registry.listener("Unity").delivery.max_attempts == 5
    assert not registry.listener("Unity").realtime


def test_an_unknown_adapter_kind_names_the_ones_registered() -> None:
    with pytest.raises(ListenerConfigError, match=r"no adapter named 'nope' \(registered: .*table"):
        adapter_class("nope")
    assert adapter_class("table") is TableAdapter


def test_bad_adapter_settings_name_the_listener_and_the_setting() -> None:
    registry = parse_registry(
        REGISTRY.replace(
            "adapter: {type: table}\n    delivery", "adapter: {type: table, settings: {tabel: x}}\n    delivery"
        ),
        "x.yaml",
    )
    with pytest.raises(ListenerConfigError, match=r"listener LDAP: adapter table: bad settings: tabel: Extra inputs"):
        make_adapter(registry.listener("LDAP"), Settings())  # type: ignore[arg-type]


def test_the_default_batch_stops_at_an_unavailable_target() -> None:
    class Flaky(TableAdapter):
        def __init__(self) -> None:
            self.calls: list[int] = []

        def apply(self, change: Change) -> None:
            self.calls.append(change.key.person_id or 0)
            if change.key.person_id == 2:
                raise ChangeFailed("constraint")
            if change.key.person_id == 3:
                raise TargetUnavailable("gone")

    changes = [status_change("INSERT", "A", None) for _ in range(5)]
    changes = [
        Change(ChangeKey("PERSON", "Status", i), "INSERT", Position(i, i), c.entry_time, "x")
        for i, c in enumerate(changes, start=1)
    ]
    adapter = Flaky()
    outcomes = super(TableAdapter, adapter).apply_batch(changes)  # the base class's loop
    assert [type(o).__name__ if o else None for o in outcomes] == [
        None,
        "ChangeFailed",
        "TargetUnavailable",
        "TargetUnavailable",
        "TargetUnavailable",
    ]
    assert adapter.calls == [1, 2, 3]


def test_an_adapter_must_implement_apply_or_apply_batch() -> None:
    from consumers.adapter import Adapter

    with pytest.raises(TypeError, match="must implement apply"):

        class Nothing(Adapter):  # defining it is the test
            kind = "nothing"
