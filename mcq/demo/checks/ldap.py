"""What the LDAP directory must hold (people, accounts, groups, memberships) by the README's
mapping, against what it holds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ldap3 import LEVEL, Connection
from ldap3.utils.dn import escape_rdn

from mcq.config import Settings
from mcq.demo.checks.view import Check, Row, View, _by_person, _values, read_tables
from mcq.registry.model import Registry

# ------------------------------------------------------------------ LDAP

PEOPLE, PHONES, ADDRESSES, STATUS, ORGN, UDI = (
    "PERSON/PEOPLE", "PERSON/Telephone", "PERSON/Address", "PERSON/Status", "PERSON/Dir_Orgn", "PERSON/UDI",
)  # fmt: skip
DEPARTMENT, LOGINS, GROUPS, GROUP_MEM = "DEPARTMENT", "LOGINS", "GROUPS", "GROUP_MEM"
LDAP_TABLES = (PEOPLE, PHONES, ADDRESSES, STATUS, ORGN, UDI, DEPARTMENT, LOGINS, GROUPS, GROUP_MEM)

PERSON_CLASSES = frozenset({"top", "person", "organizationalPerson", "inetOrgPerson"})
ACCOUNT_CLASS = "posixAccount"
GROUP_CLASSES = frozenset({"top", "posixGroup"})
PHONE_TYPES = {
    "telephoneNumber": ("campus", "office"),
    "mobile": ("mobile",),
    "homePhone": ("home",),
    "facsimileTelephoneNumber": ("fax",),
}
"""Which ``tele_type`` values each telephone attribute holds (other types have none)."""
ADDRESS_TYPES = {"postalAddress": ("campus",), "homePostalAddress": ("home",)}
"""Which ``addr_type`` values each address attribute holds (a mailing address has none)."""


@dataclass(frozen=True)
class WantedEntry:
    """What one directory entry must hold: its object classes and every user attribute
    (the naming attribute included); an attribute it must not have is left out."""

    dn: str
    object_classes: frozenset[str]
    attributes: dict[str, list[str]]


def postal_address(row: Row) -> str:
    """An RFC 4517 postalAddress: the street, ``City, ST ZIP`` and the country as lines
    joined by ``$`` (a ``$`` inside a line becomes a space); a line with nothing but
    blanks and commas is left out."""
    city = f"{row.get('city') or ''}, {row.get('state') or ''} {row.get('postal_code') or ''}"
    lines = [row.get("street") or "", city, row.get("country") or ""]
    return "$".join(line.strip().replace("$", " ") for line in lines if line.strip(" ,"))


def ldap_people(view: View, people_dn: str, default_gid: int) -> dict[str, WantedEntry]:
    """The person entries: ``employeeNumber=<person_id>`` under the people container for
    every person, an inetOrgPerson (names, telephones by type, addresses, status, e-mail,
    departments with their titles and names) and, when the first of the person's logins
    by username has a Unix uid, a posixAccount of that login."""
    phones, addresses, statuses, udis, orgns, logins = (
        _by_person(view.get(ref, [])) for ref in (PHONES, ADDRESSES, STATUS, UDI, ORGN, LOGINS)
    )
    departments: dict[int, list[str | None]] = defaultdict(list)
    for key, dept in view.get(DEPARTMENT, []):
        if key.pkey_number is not None:
            departments[key.pkey_number].append(dept.get("name"))
    out: dict[str, WantedEntry] = {}
    for key, person in view.get(PEOPLE, []):
        pid = key.person_id
        if pid is None:
            continue
        first, last = person.get("first_name") or "", person.get("last_name") or ""
        cn = f"{first} {last}".strip() or str(pid)
        attrs: dict[str, list[str | None]] = {
            "employeeNumber": [str(pid)],
            "cn": [cn],
            "displayName": [cn],
            "sn": [last or str(pid)],
            "givenName": [first],
            "employeeType": [s.get("status") for s in statuses[pid]],
            "mail": [u.get("email") for u in udis[pid]],
        }
        for attr, types in PHONE_TYPES.items():
            attrs[attr] = [p.get("phone_number") for p in phones[pid] if p.get("tele_type") in types]
        for attr, types in ADDRESS_TYPES.items():
            attrs[attr] = [postal_address(a) for a in addresses[pid] if a.get("addr_type") in types]
        dept_ids = [o.get("dept_id") for o in orgns[pid]]
        attrs["departmentNumber"] = list(dept_ids)
        attrs["title"] = [o.get("title") for o in orgns[pid]]
        attrs["ou"] = [name for d in dept_ids if d for name in departments.get(int(d), [])]
        classes = set(PERSON_CLASSES)
        accounts = sorted(logins[pid], key=lambda r: r.get("username") or "")
        attrs["uid"] = [a.get("username") for a in accounts]
        if accounts and accounts[0].get("unixuid"):
            account = accounts[0]
            classes.add(ACCOUNT_CLASS)
            attrs["uidNumber"] = [account.get("unixuid")]
            attrs["gidNumber"] = [str(default_gid)]
            attrs["homeDirectory"] = [f"/home/{account.get('username') or ''}"]
            attrs["loginShell"] = [account.get("shell") or "/bin/bash"]
        dn = f"employeeNumber={pid},{people_dn}"
        out[dn.lower()] = WantedEntry(dn, frozenset(classes), _attributes(attrs))
    return out


def ldap_groups(view: View, groups_dn: str) -> dict[str, WantedEntry]:
    """The group entries: ``cn=<group name>`` under the groups container for every Unix
    group, a posixGroup with its gid (0 when the source has none), its description and
    its members' usernames as memberUid."""
    members: dict[str, list[str | None]] = defaultdict(list)
    for key, member in view.get(GROUP_MEM, []):
        if key.pkey_string is not None:
            members[key.pkey_string].append(member.get("username"))
    out: dict[str, WantedEntry] = {}
    for key, group in view.get(GROUPS, []):
        name = key.pkey_string
        if name is None:
            continue
        attrs: dict[str, list[str | None]] = {
            "cn": [name],
            "gidNumber": [group.get("gid") or "0"],
            "description": [group.get("description")],
            "memberUid": members[name],
        }
        dn = f"cn={escape_rdn(name)},{groups_dn}"
        out[dn.lower()] = WantedEntry(dn, GROUP_CLASSES, _attributes(attrs))
    return out


def _attributes(attrs: Mapping[str, Iterable[str | None]]) -> dict[str, list[str]]:
    return {name: values for name, raw in attrs.items() if (values := _values(raw))}


def compare_entries(wanted: Mapping[str, WantedEntry], have: Mapping[str, Mapping[str, list[str]]]) -> list[str]:
    """Differences between the wanted entries and the directory's (both by lower-case DN;
    the directory's as attribute name -> values): a missing entry, an entry nobody wants,
    other object classes, and any user attribute whose values differ or that only one
    side has."""
    problems: list[str] = []
    for dn, entry in wanted.items():
        got = have.get(dn)
        if got is None:
            problems.append(f"{entry.dn}: missing")
            continue
        got_attrs = {name.lower(): sorted(values) for name, values in got.items() if name.lower() != "objectclass"}
        got_classes = {c.lower() for name, values in got.items() if name.lower() == "objectclass" for c in values}
        if got_classes != {c.lower() for c in entry.object_classes}:
            problems.append(
                f"{entry.dn}: objectClass is {sorted(got_classes)}, should be {sorted(entry.object_classes)}"
            )
        want_attrs = {name.lower(): (name, values) for name, values in entry.attributes.items()}
        for name in sorted(want_attrs.keys() | got_attrs.keys()):
            label, values = want_attrs.get(name, (name, []))
            if got_attrs.get(name, []) != values:
                problems.append(f"{entry.dn}: {label} is {got_attrs.get(name, [])}, the source says {values}")
    problems += [f"{dn}: in the directory, not in the source" for dn in sorted(have.keys() - wanted.keys())]
    return problems


def _ldap(settings: Settings) -> Connection:
    from consumers.ldap.connection import connect

    return connect(settings.ldap, receive_timeout=60)


def _entries(conn: Connection, container: str) -> dict[str, dict[str, list[str]]]:
    """Every entry right under a container: lower-case DN -> attribute -> values as text."""
    out: dict[str, dict[str, list[str]]] = {}
    cookie: bytes | None = None
    while True:
        conn.search(container, "(objectClass=*)", LEVEL, attributes=["*"], paged_size=1000, paged_cookie=cookie)
        for e in conn.entries:
            out[e.entry_dn.lower()] = {k: sorted(map(str, v)) for k, v in e.entry_attributes_as_dict.items()}
        cookie = conn.result.get("controls", {}).get("1.2.840.113556.1.4.319", {}).get("value", {}).get("cookie")
        if not cookie:
            return out


def check_ldap(
    settings: Settings,
    registry: Registry,
    people_dn: str,
    groups_dn: str,
    default_gid: int = 100,
) -> Check:
    """Every person and group of the source has exactly its entry, and no other entry
    exists under the two containers. ``default_gid``: the primary group of every account."""
    view = read_tables(settings, registry, LDAP_TABLES)
    wanted = {**ldap_people(view, people_dn, default_gid), **ldap_groups(view, groups_dn)}
    conn = _ldap(settings)
    try:
        have = {**_entries(conn, people_dn), **_entries(conn, groups_dn)}
    finally:
        conn.unbind()
    return Check("LDAP", len(wanted), compare_entries(wanted, have))
