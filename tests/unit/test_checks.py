"""Pure logic of the demo's oracle (mcq/demo/checks/): what a listener sees of source rows,
what the directory, the vendor table and a file target must then hold, and how the
targets are compared with that."""

from __future__ import annotations

from datetime import UTC, datetime

from consumers.file.adapter import to_jsonl, to_xml
from mcq.change import Change, ChangeKey, Position
from mcq.demo.checks import (
    InsitePerson,
    View,
    WantedEntry,
    changes_in_jsonl,
    changes_in_xml,
    compare_entries,
    compare_files,
    compare_insite,
    insite_people,
    ldap_groups,
    ldap_people,
    postal_address,
    replay,
    visible,
)
from mcq.registry import parse_registry
from mcq.registry.model import Registry

REGISTRY = """
sources:
  - {name: campus, schemas: [w], publication: p, slot: s}
tables:
  - tname: PERSON
    subtype: PEOPLE
    feeds:
      - source: campus
        table: w.people
        keys: {person_id: person_id}
        columns: [person_id, first_name, last_name, updated_at]
        watch: [first_name, last_name]
  - tname: PERSON
    subtype: Telephone
    feeds:
      - source: campus
        table: w.directory_telephone
        keys: {person_id: person_id, aux_string: tele_type}
        columns: [person_id, tele_type, phone_number]
  - tname: PERSON
    subtype: Status
    feeds:
      - source: campus
        table: w.person_status
        keys: {person_id: person_id}
        columns: [person_id, status]
listeners:
  - {name: LDAP, owner: a@b, adapter: {type: file, settings: {directory: out/ldap}}}
  - {name: AD, owner: a@b, adapter: {type: file, settings: {directory: out/ad}}}
  - {name: Calls, owner: a@b, adapter: {type: file, settings: {directory: out}}}
interests:
  - {listener: LDAP, tname: PERSON, subtype: "*"}
  - {listener: AD, tname: PERSON, subtype: Telephone, rule: "aux_string IN ('campus', 'mobile')"}
  - {listener: Calls, tname: PERSON, subtype: PEOPLE, columns: [person_id, last_name]}
  - {listener: Calls, tname: PERSON, subtype: Status, rule: "status = 'Staff' OR change_type = 'DELETE'"}
"""


def registry() -> Registry:
    return parse_registry(REGISTRY, "test.yaml")


PHONES = [
    {"person_id": "1", "tele_type": "campus", "phone_number": "+1 518 276 0001"},
    {"person_id": "1", "tele_type": "home", "phone_number": "+1 518 555 0000"},
    {"person_id": "2", "tele_type": "fax", "phone_number": "+1 518 276 0009"},
]


def seen(ref: str, listener: str, rows: list[dict[str, str | None]]) -> list[tuple[ChangeKey, dict[str, str | None]]]:
    reg = registry()
    tname, _, subtype = ref.partition("/")
    table = reg.table(tname, subtype)
    assert table is not None
    return visible(table, table.feeds[0], reg.interests_of(listener), rows)


def test_a_listener_sees_the_rows_its_rules_admit_keyed_by_the_feed() -> None:
    everything = seen("PERSON/Telephone", "LDAP", PHONES)
    assert [k for k, _ in everything] == [
        ChangeKey("PERSON", "Telephone", 1, aux_string="campus"),
        ChangeKey("PERSON", "Telephone", 1, aux_string="home"),
        ChangeKey("PERSON", "Telephone", 2, aux_string="fax"),
    ]
    work = seen("PERSON/Telephone", "AD", PHONES)  # the rule reads a key field
    assert [row["tele_type"] for _, row in work] == ["campus"]
    assert seen("PERSON/Telephone", "Calls", PHONES) == []  # no interest: nothing


def test_an_allow_list_cuts_the_columns_and_a_row_at_rest_is_not_a_delete() -> None:
    people = seen("PERSON/PEOPLE", "Calls", [{"person_id": "1", "first_name": "Ada", "last_name": "King"}])
    assert people == [(ChangeKey("PERSON", "PEOPLE", 1), {"person_id": "1", "last_name": "King"})]
    statuses = [{"person_id": "1", "status": "Staff"}, {"person_id": "2", "status": "Alumni"}]
    assert [k.person_id for k, _ in seen("PERSON/Status", "Calls", statuses)] == [1]


def person_key(ref: str, pid: int, **k: str | int) -> ChangeKey:
    tname, _, subtype = ref.partition("/")
    return ChangeKey(tname, subtype or None, pid, **k)  # type: ignore[arg-type]


def ldap_view() -> View:
    return {
        "PERSON/PEOPLE": [
            (person_key("PERSON/PEOPLE", 1), {"first_name": "Ada", "last_name": "King"}),
            (person_key("PERSON/PEOPLE", 2), {"first_name": "", "last_name": ""}),
        ],
        "PERSON/Telephone": [
            (person_key("PERSON/Telephone", 1, aux_string=r["tele_type"] or ""), r)
            for r in PHONES
            if r["person_id"] == "1"
        ],
        "PERSON/Address": [
            (
                person_key("PERSON/Address", 1, aux_string="home"),
                {
                    "addr_type": "home",
                    "street": "1 Main St",
                    "city": "Troy",
                    "state": "NY",
                    "postal_code": "12180",
                    "country": "US",
                },
            ),
            (
                person_key("PERSON/Address", 1, aux_string="mailing"),
                {"addr_type": "mailing", "street": "Box 9", "city": "Troy", "state": "NY", "postal_code": "12180"},
            ),
        ],
        "PERSON/Status": [(person_key("PERSON/Status", 1), {"status": "Staff"})],
        "PERSON/UDI": [(person_key("PERSON/UDI", 1), {"email": "kinga@campus.example"})],
        "PERSON/Dir_Orgn": [
            (person_key("PERSON/Dir_Orgn", 1, pkey_number=20), {"dept_id": "20", "title": "Analyst"}),
            (person_key("PERSON/Dir_Orgn", 1, pkey_number=10), {"dept_id": "10", "title": "Fellow"}),
        ],
        "DEPARTMENT": [(ChangeKey("DEPARTMENT", pkey_number=10), {"dept_id": "10", "name": "Mathematics"})],
        "LOGINS": [
            (person_key("LOGINS", 1, pkey_string="zking"), {"username": "zking", "unixuid": None}),
            (person_key("LOGINS", 1, pkey_string="aking"), {"username": "aking", "unixuid": "60001", "shell": None}),
        ],
        "GROUPS": [(ChangeKey("GROUPS", pkey_string="staff"), {"group_name": "staff", "gid": "1001"})],
        "GROUP_MEM": [
            (ChangeKey("GROUP_MEM", pkey_string="staff", aux_string=u), {"group_name": "staff", "username": u})
            for u in ("zking", "aking")
        ],
    }


def test_a_person_entry_says_what_the_source_rows_say() -> None:
    entries = ldap_people(ldap_view(), "ou=people,dc=x", 100)
    ada = entries["employeenumber=1,ou=people,dc=x"]
    assert ada.object_classes == {"top", "person", "organizationalPerson", "inetOrgPerson", "posixAccount"}
    assert ada.attributes == {
        "employeeNumber": ["1"],
        "cn": ["Ada King"],
        "displayName": ["Ada King"],
        "sn": ["King"],
        "givenName": ["Ada"],
        "telephoneNumber": ["+1 518 276 0001"],
        "homePhone": ["+1 518 555 0000"],
        "homePostalAddress": ["1 Main St$Troy, NY 12180$US"],
        "employeeType": ["Staff"],
        "mail": ["kinga@campus.example"],
        "departmentNumber": ["10", "20"],
        "title": ["Analyst", "Fellow"],
        "ou": ["Mathematics"],
        "uid": ["aking", "zking"],
        "uidNumber": ["60001"],
        "gidNumber": ["100"],
        "homeDirectory": ["/home/aking"],
        "loginShell": ["/bin/bash"],
    }
    nameless = entries["employeenumber=2,ou=people,dc=x"]
    assert nameless.object_classes == {"top", "person", "organizationalPerson", "inetOrgPerson"}
    assert nameless.attributes == {"employeeNumber": ["2"], "cn": ["2"], "displayName": ["2"], "sn": ["2"]}


def test_a_group_entry_lists_its_members() -> None:
    [(dn, staff)] = ldap_groups(ldap_view(), "ou=groups,dc=x").items()
    assert dn == "cn=staff,ou=groups,dc=x"
    assert staff.attributes == {"cn": ["staff"], "gidNumber": ["1001"], "memberUid": ["aking", "zking"]}


def test_a_postal_address_leaves_out_empty_lines() -> None:
    assert postal_address({"street": "1 $ Main", "city": "", "state": None, "country": "US"}) == "1   Main$US"


def test_the_directory_is_compared_attribute_by_attribute_and_entry_by_entry() -> None:
    wanted = {"cn=a,o=x": WantedEntry("cn=a,o=x", frozenset({"top", "posixGroup"}), {"cn": ["a"], "gidNumber": ["5"]})}
    same = {"cn=a,o=x": {"objectClass": ["posixGroup", "top"], "cn": ["a"], "gidNumber": ["5"]}}
    assert compare_entries(wanted, same) == []
    other = {
        "cn=a,o=x": {"objectClass": ["top"], "cn": ["a"], "gidnumber": ["6"], "description": ["x"]},
        "cn=b,o=x": {"cn": ["b"]},
    }
    assert compare_entries(wanted, other) == [
        "cn=a,o=x: objectClass is ['top'], should be ['posixGroup', 'top']",
        "cn=a,o=x: description is ['x'], the source says []",
        "cn=a,o=x: gidNumber is ['6'], the source says ['5']",
        "cn=b,o=x: in the directory, not in the source",
    ]
    assert compare_entries(wanted, {}) == ["cn=a,o=x: missing"]


def test_sa_person_follows_the_vendor_trigger() -> None:
    v = ldap_view()
    v["PERSON/Status"] = [(person_key("PERSON/Status", 1), {"status": "A status longer than twenty-four"})]
    wanted = insite_people(v)
    assert wanted == {
        "1": InsitePerson("King", "Ada", "A status longer than twenty-four", "Mathematics", "Fellow"),
        "2": InsitePerson("", "", None, None, None),
    }
    have = {
        "1": InsitePerson("King", "Ada", "A status longer than twen", "Mathematics", "Fellow"),
        "2": InsitePerson("Old", "", "Staff", None, None),
        "3": InsitePerson("Gone", "", "Former-Staff", None, None),
        "4": InsitePerson("Gone", "", "Student", None, None),
    }
    assert compare_insite(wanted, have, rejected={"2"}) == [
        "person 1: " + str(have["1"]) + ", the source says " + str(wanted["1"]),
        "person 4: gone from the source, yet SA_PERSON says 'Student'",
    ]
    have["1"] = InsitePerson("King", "Ada", "A status longer than twen"[:24], "Mathematics", "Fellow")
    have["2"] = InsitePerson("", "", "No Status", None, None)
    del have["4"]
    assert compare_insite(wanted, have) == []


def change(key: ChangeKey, kind: str, after: dict[str, str | None] | None) -> Change:
    return Change(key, kind, Position(1, 2), datetime(2026, 1, 1, tzinfo=UTC), "w.t", after)  # type: ignore[arg-type]


ADA, BOB = ChangeKey("PERSON", "PEOPLE", 1), ChangeKey("PERSON", "PEOPLE", 2)
ADA_STATUS = ChangeKey("PERSON", "Status", 1)


def test_files_replay_to_each_keys_last_state_in_both_formats() -> None:
    batch1 = [
        change(ADA, "INSERT", {"person_id": "1", "last_name": "Byron"}),
        change(BOB, "INSERT", {"person_id": "2", "last_name": "Smith"}),
    ]
    batch2 = [
        change(ADA, "UPDATE", {"person_id": "1", "last_name": "King"}),
        change(BOB, "DELETE", None),
        change(ADA_STATUS, "UPDATE", None),  # says nothing of the row
    ]
    want = {ADA: {"person_id": "1", "last_name": "King"}}
    as_json = changes_in_jsonl(to_jsonl(batch1).decode()) + changes_in_jsonl(to_jsonl(batch2).decode())
    assert replay(as_json) == want
    as_xml = changes_in_xml(to_xml("Calls", batch1).decode()) + changes_in_xml(to_xml("Calls", batch2).decode())
    assert replay(as_xml) == want


def test_files_are_compared_on_watched_and_allowed_columns() -> None:
    reg = registry()
    source: View = {
        "PERSON/PEOPLE": [(ADA, {"person_id": "1", "last_name": "King"}), (BOB, {"person_id": "2", "last_name": "X"})],
        "PERSON/Status": [(ADA_STATUS, {"person_id": "1", "status": "Staff"})],
    }
    have = {
        ADA: {"person_id": "1", "last_name": "King"},
        BOB: {"person_id": "2", "last_name": "Y", "first_name": "Bob"},
        ChangeKey("PERSON", "Status", 2): {"person_id": "2", "status": "Alumni"},
    }
    checked, problems = compare_files(reg, source, have)
    assert checked == 3
    assert problems == [
        f"{BOB.text()}: carries first_name, which the listener may not see",
        f"{BOB.text()}: last_name is 'Y', the source says 'X'",
        f"{ADA_STATUS.text()}: missing",
        f"{ChangeKey('PERSON', 'Status', 2).text()}: in the files, not in the source",
    ]
