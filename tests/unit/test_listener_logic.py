"""Pure logic of the listener runtime: interests and rules, back-off, names, adapters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consumers.adapter import adapter_class, make_adapter
from consumers.exceptions import ChangeFailed, ListenerConfigError, TargetUnavailable
from consumers.projection import IndexedState
from consumers.runtime.parking import backoff_s
from consumers.runtime.refresh import RefreshResolver
from consumers.runtime.view import ListenerView
from consumers.table.adapter import TableAdapter
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.topics.listener import ListenerTopics

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
  - {listener: Unity, tname: PERSON, subtype: Status, rule: "status = 'Active'", columns: [person_id, status]}
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


def see(registry, listener: str, change: Change, present: bool) -> Change | None:  # type: ignore[no-untyped-def]
    return ListenerView(registry, listener).see(change, present)[0]


def test_an_all_subtypes_interest_takes_every_subtype_and_nothing_else(registry) -> None:  # type: ignore[no-untyped-def]
    view = ListenerView(registry, "LDAP")
    assert view.covers(ChangeKey("PERSON", "Status", 42)) and view.covers(ChangeKey("PERSON", "Telephone", 42))
    assert not view.covers(ChangeKey("ROOM", None, None, "R1"))


@pytest.mark.parametrize(
    ("kind", "after", "before", "present", "expected", "cause"),
    [
        ("INSERT", "Active", None, False, "INSERT", "source"),
        ("INSERT", "Former-Active", None, False, None, None),
        ("UPDATE", "Active", "Active", True, "UPDATE", "source"),
        # entering the view: an insert with the full state, whatever the source called it
        ("UPDATE", "Active", "Retired", False, "INSERT", "entered-view"),
        # leaving the view: a delete for this listener
        ("UPDATE", "Former-Active", "Active", True, "DELETE", "left-view"),
        ("UPDATE", "Former-Active", "Retired", False, None, None),
        # compaction removed the update that took it out: the target still has it, so it goes
        ("UPDATE", "Former-Active", "Retired", True, "DELETE", "left-view"),
        ("DELETE", None, "Active", True, "DELETE", "source"),
        ("DELETE", None, "Former-Active", False, None, None),
        # a delete of a row the rule never let in, but at the target (before-image lost): still a delete
        ("DELETE", None, None, True, "DELETE", "source"),
    ],
)
def test_a_listener_gets_what_the_change_means_to_a_target_mirroring_its_view(  # type: ignore[no-untyped-def]
    registry, kind: str, after: str | None, before: str | None, present: bool, expected: str | None, cause: str | None
) -> None:
    seen = see(registry, "Unity", status_change(kind, after, before), present)
    assert (seen.change_type if seen else None) == expected
    assert (seen.cause if seen else None) == cause
    if seen is not None and seen.change_type != "DELETE":
        assert seen.after == {"person_id": "42", "status": after}


@pytest.mark.parametrize(
    ("kind", "after", "before", "present", "expected", "cause"),
    [
        ("INSERT", "Retired", None, False, "INSERT", "source"),
        ("INSERT", "Retired", None, True, "INSERT", "source"),
        ("UPDATE", "Retired", "Active", True, "UPDATE", "source"),
        ("UPDATE", "Retired", "Active", False, "INSERT", "entered-view"),  # the target lacks it: the full state
        ("DELETE", None, "Active", True, "DELETE", "source"),
        ("DELETE", None, "Active", False, None, None),
    ],
)
def test_a_listener_without_rules_or_allow_lists_gets_every_state(  # type: ignore[no-untyped-def]
    registry, kind: str, after: str | None, before: str | None, present: bool, expected: str | None, cause: str | None
) -> None:
    view = ListenerView(registry, "LDAP")
    for _ in range(2):  # the second time from the view's remembered verdict on the table
        change = status_change(kind, after, before)
        seen = view.see(change, present)[0]
        assert (seen.change_type if seen else None) == expected
        assert (seen.cause if seen else None) == cause
        if seen is not None and seen.change_type == change.change_type:
            assert seen == change  # as it came
        if seen is not None and seen.change_type == "INSERT":
            assert seen.after == {"person_id": "42", "status": after} and seen.before is None


def test_an_allow_list_keeps_every_other_column_from_the_listener(registry) -> None:  # type: ignore[no-untyped-def]
    change = status_change("INSERT", "Active", None)
    change = Change(change.key, "INSERT", change.position, change.entry_time, "x",
                    {"person_id": "42", "status": "Active", "id_number": "secret"})  # fmt: skip
    seen = see(registry, "Unity", change, False)
    assert seen is not None and seen.after == {"person_id": "42", "status": "Active"}
    assert "id_number" in (see(registry, "LDAP", change, False).after or {})  # no allow-list: every column


def test_a_refresh_resolves_to_the_current_state_or_a_delete(registry) -> None:  # type: ignore[no-untyped-def]
    state = IndexedState()
    state.put("PERSON/Status", ChangeKey("PERSON", "Status", 1), {"person_id": "1", "status": "Active"}, Position(5, 6))
    resolver = RefreshResolver(registry, ListenerView(registry, "LDAP"), lambda refs: state)
    request = Change(ChangeKey("PERSON", None, 1), "UPDATE", Position(90, 91), datetime.now(UTC), "x",
                     origin="explicit mcq_log_update")  # fmt: skip
    resolver.prepare([request])
    gone = ChangeKey("PERSON", "Telephone", 1, aux_string="home")
    other = ChangeKey("PERSON", "Telephone", 2, aux_string="home")
    out = resolver.resolve(request, present=[gone, other])
    assert [(c.key, c.change_type, c.position, c.cause) for c in out] == [
        (ChangeKey("PERSON", "Status", 1), "UPDATE", Position(5, 6), "refresh"),
        (gone, "DELETE", Position(90, 91), "refresh"),
    ]
    assert out[0].after == {"person_id": "1", "status": "Active"}


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


def test_adsi_entries_carry_no_home_numbers_while_ldap_entries_do() -> None:
    import json

    from mcq.registry import load_registry
    from mcq.registry.mappings import EntryMapping, attribute_values
    from tests import PROJECT_ROOT

    campus = load_registry(PROJECT_ROOT / "examples" / "campus.yaml")

    def mapping(listener: str, entity: str) -> EntryMapping:
        found = campus.listener(listener)
        assert found is not None
        return EntryMapping.model_validate(found.adapter.settings["entries"][entity])

    phones = json.dumps([{"person_id": "7", "tele_type": tele, "phone_number": number}
                         for tele, number in (("campus", "+1-518-276-0001"), ("home", "+1-518-555-0199"))])  # fmt: skip
    person = {"person_id": "7", "first_name": "Ada", "last_name": "L", "phones": phones}
    account = {"pkey_string": "ada", "person_id": "7", "username": "ada", "person.first_name": "Ada",
               "person.phones": phones}  # fmt: skip
    ldap, adsi = mapping("LDAP", "PERSON_ENTRY"), mapping("ADSI", "ACCOUNT_ENTRY")
    assert attribute_values(ldap.attributes["homePhone"], person, {}) == ["+1-518-555-0199"]
    assert attribute_values(ldap.attributes["telephoneNumber"], person, {}) == ["+1-518-276-0001"]
    assert "homePhone" not in adsi.attributes
    assert attribute_values(adsi.attributes["telephoneNumber"], account, {}) == ["+1-518-276-0001"]


def test_a_refresh_of_a_key_named_whole_that_is_gone_is_a_delete(registry) -> None:  # type: ignore[no-untyped-def]
    resolver = RefreshResolver(registry, ListenerView(registry, "LDAP"), lambda refs: IndexedState())
    request = Change(ChangeKey("PERSON", "Status", 3), "UPDATE", Position(90, 91), datetime.now(UTC), "x")
    resolver.prepare([request])
    out = resolver.resolve(request, present=[])
    assert [(c.key, c.change_type, c.cause) for c in out] == [(ChangeKey("PERSON", "Status", 3), "DELETE", "refresh")]
    # and the listener says it even though it never applied the key
    assert see(registry, "Unity", out[0], present=True) is not None
