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
