"""What applying a registry changes, and what that means for a listener's target: a rule
or an allow-list changed (or an interest removed) leaves rows of the old view in the target
until they change, and ``registry apply`` says so with the command that brings it to the
new view now; a delay changed, or an interest added (its topic read from the beginning),
needs no word."""

from __future__ import annotations

from mcq.registry import parse_registry
from mcq.registry.store import definitions, diff_definitions

BEFORE = """
sources:
  - {name: campus, schemas: [campus]}
tables:
  - tname: PERSON
    feeds:
      - {source: campus, table: campus.person, keys: {person_id: id}, columns: [id, status]}
  - {tname: PERSON, subtype: Telephone}
  - {tname: ROOM}
  - {tname: GROUP}
  - {tname: BUILDING}
listeners:
  - {name: LDAP, owner: idm@example, adapter: {type: table}}
interests:
  - {listener: LDAP, tname: PERSON, rule: "status = 'active'"}
  - {listener: LDAP, tname: PERSON, subtype: Telephone, columns: [person_id, phone]}
  - {listener: LDAP, tname: ROOM}
  - {listener: LDAP, tname: BUILDING, subtype: null, rule: "pkey_string = 'main'"}
"""


def _notes(after: str) -> list[str]:
    diff = diff_definitions(definitions(parse_registry(BEFORE, "a.yaml")), definitions(parse_registry(after, "b.yaml")))
    return diff.view_notes()


def test_a_rule_or_columns_changed_names_the_refresh_that_brings_the_target_to_the_new_view() -> None:
    after = BEFORE.replace("status = 'active'", "status IN ('active', 'pending')").replace(
        "[person_id, phone]", "[person_id, phone, kind]"
    )
    assert _notes(after) == [
        "note: LDAP sees PERSON through another rule or columns: its target takes the new view's rows (and drops "
        "the old one's) as each row changes; `mcq refresh LDAP --tname PERSON` or `mcq reconcile LDAP --repair` "
        "brings it to the new view now",
        "note: LDAP sees PERSON/Telephone through another rule or columns: its target takes the new view's rows "
        "(and drops the old one's) as each row changes; `mcq refresh LDAP --tname PERSON --subtype Telephone` or "
        "`mcq reconcile LDAP --repair` brings it to the new view now",
    ]


def test_a_rule_changed_on_a_table_without_subtype_names_the_refresh_of_that_table_alone() -> None:
    after = BEFORE.replace("pkey_string = 'main'", "pkey_string IN ('main', 'north')")
    assert _notes(after) == [
        "note: LDAP sees BUILDING through another rule or columns: its target takes the new view's rows (and drops "
        "the old one's) as each row changes; `mcq refresh LDAP --tname BUILDING --no-subtype` or `mcq reconcile "
        "LDAP --repair` brings it to the new view now",
    ]


def test_an_interest_removed_is_said_and_one_added_or_delayed_is_not() -> None:
    after = BEFORE.replace("  - {listener: LDAP, tname: ROOM}\n", "  - {listener: LDAP, tname: GROUP}\n").replace(
        "'active'\"}", "'active'\", delay_s: 60}"
    )
    assert "delay_s: 60" in after
    assert _notes(after) == ["note: LDAP no longer takes ROOM: its target keeps the rows it has of it"]


def _capture_notes(after: str, before: str = BEFORE) -> list[str]:
    diff = diff_definitions(definitions(parse_registry(before, "a.yaml")), definitions(parse_registry(after, "b.yaml")))
    return diff.capture_notes()


def test_a_column_added_to_a_feed_names_the_connector_update_it_needs() -> None:
    """The connector captures only the columns named when `mcq connect apply` last ran: until
    it runs again, the new column reaches no listener."""
    after = BEFORE.replace("columns: [id, status]}", "columns: [id, status, title]}")
    (note,) = _capture_notes(after)
    assert note.startswith(
        "note: the capture of source campus changed (campus.person: + title): run `mcq connect apply`"
    )
    assert "`mcq refresh LISTENER --from source`" in note


def test_a_table_fed_anew_or_no_longer_and_a_column_dropped_are_each_named_once_per_source() -> None:
    before = BEFORE.replace("columns: [id, status]}", "columns: [id, status, title]}")
    after = BEFORE.replace(
        "  - {tname: ROOM}\n",
        "  - tname: ROOM\n    feeds:\n"
        "      - {source: campus, table: campus.room, keys: {pkey_string: id}, columns: [id]}\n",
    )
    assert _capture_notes(after, before) == [
        "note: the capture of source campus changed (campus.person: - title; campus.room: a new table): run "
        "`mcq connect apply` to update its connector; rows already in the source carry the change to a listener "
        "as each changes, or now with `mcq refresh LISTENER --from source`"
    ]
    assert _capture_notes(after.replace("campus.person", "campus.people"), before) == [
        "note: the capture of source campus changed (campus.people: a new table; campus.person: no longer fed; "
        "campus.room: a new table): run `mcq connect apply` to update its connector; rows already in the source "
        "carry the change to a listener as each changes, or now with `mcq refresh LISTENER --from source`"
    ]


def test_a_rule_or_watch_change_needs_no_connector_update() -> None:
    after = BEFORE.replace("status = 'active'", "status = 'gone'").replace(
        "columns: [id, status]}", "columns: [id, status], watch: [status]}"
    )
    assert _capture_notes(after) == []
