"""Checks of targets against the source: the oracle of ``mcq demo`` and of the integration
tests that run the whole pipeline.

A check derives what a target must hold straight from the source database — plain SQL
over the tables the registry's feeds name — and from what the target is documented to
hold, written out here on its own. It never goes through a listener's code (the
adapters' entry builders, Push_Person, the projections and views of ``consumers/``):
an oracle that computed the expected state with the code under test would repeat that
code's bugs instead of finding them.

What a listener may see comes from the registry, read as the README documents it: the
logical tables its interests cover, the rows that pass their content rules and only the
columns their allow-lists name (every captured column when none does). A row at rest is
not a change: a rule reading ``change_type`` or ``before.<column>`` finds NULL.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from ldap3 import LEVEL, Connection
from ldap3.utils.dn import escape_rdn
from psycopg import sql

from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.registry.model import Feed, Interest, LogicalTable, Registry

Row = dict[str, str | None]
Seen = tuple[ChangeKey, Row]
"""A source row as a listener sees it: its logical key and the columns it may see."""
View = dict[str, list[Seen]]
"""Rows a listener sees, by ``TNAME`` or ``TNAME/Subtype``."""


@dataclass
class Check:
    """The result of comparing a target with the source."""

    target: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        verdict = "equal to the source" if self.ok else f"{len(self.problems)} difference(s)"
        return f"check {self.target}: {self.checked} keys, {verdict}"


# ------------------------------------------------------------------ the source, as a listener sees it


def feed_key(table: LogicalTable, feed: Feed, row: Row) -> ChangeKey:
    """The logical key of a source row: each key field from the column the feed maps it to."""

    def number(column: str | None) -> int | None:
        value = row.get(column) if column else None
        return int(value) if value is not None else None

    def text(column: str | None) -> str | None:
        return row.get(column) if column else None

    k = feed.keys
    return ChangeKey(
        table.tname, table.subtype, number(k.get("person_id")), text(k.get("pkey_string")),
        number(k.get("pkey_number")), text(k.get("aux_string")),
    )  # fmt: skip


def visible(table: LogicalTable, feed: Feed, interests: Iterable[Interest], rows: Iterable[Row]) -> list[Seen]:
    """The rows of one feed that a listener with these interests sees, keyed, each cut to
    the columns the admitting interests allow (their union; every column if one has no
    allow-list). A row no interest admits is not seen at all."""
    covering = [i for i in interests if i.covers(table)]
    out: list[Seen] = []
    for row in rows:
        key = feed_key(table, feed, row)
        values: dict[str, Any] = {**row, **{f"after.{c}": v for c, v in row.items()}}
        values.update(key.as_dict())  # the change fields win over a column of the same name
        admitting = [i for i in covering if (rule := i.parsed_rule()) is None or rule.matches(values)]
        if not admitting:
            continue
        if any(i.columns is None for i in admitting):
            out.append((key, dict(row)))
        else:
            allowed = {c for i in admitting for c in i.columns or ()}
            out.append((key, {c: v for c, v in row.items() if c in allowed}))
    return out


def _select(conn: psycopg.Connection[Any], feed: Feed) -> list[Row]:
    """Every row of a feed's source table, its captured columns as text."""
    columns = sql.SQL(", ").join(sql.SQL("{0}::text AS {0}").format(sql.Identifier(c)) for c in feed.columns)
    query = sql.SQL("SELECT {} FROM {}.{}").format(
        columns, sql.Identifier(feed.schema_name), sql.Identifier(feed.table_name)
    )
    cur = conn.execute(query)
    names = [d.name for d in cur.description or ()]
    return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]


def read_view(settings: Settings, registry: Registry, listener: str, refs: Iterable[str]) -> View:
    """What a listener sees of the given logical tables now, read from the source tables
    their feeds name (nothing for a table the registry lacks or the listener is not
    interested in)."""
    interests = registry.interests_of(listener)
    view: View = {}
    with psycopg.connect(settings.source.dsn()) as conn:
        for ref in refs:
            tname, _, subtype = ref.partition("/")
            table = registry.table(tname, subtype or None)
            view[ref] = []
            if table is None or not any(i.covers(table) for i in interests):
                continue
            for feed in table.feeds:
                view[ref] += visible(table, feed, interests, _select(conn, feed))
    return view


def _by_person(seen: Iterable[Seen]) -> dict[int, list[Row]]:
    out: dict[int, list[Row]] = defaultdict(list)
    for key, row in seen:
        if key.person_id is not None:
            out[key.person_id].append(row)
    return out


def _values(values: Iterable[str | None]) -> list[str]:
    """A multi-valued attribute: no empty values, no duplicates, in a stable order."""
    return sorted({v for v in values if v})


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
    default_gid: int | None = None,
    listener: str = "LDAP",
) -> Check:
    """Every person and group of the source has exactly its entry, and no other entry
    exists under the two containers. ``default_gid``: the listener's (``adapter.settings``),
    else 100."""
    if default_gid is None:
        found = registry.listener(listener)
        default_gid = int((found.adapter.settings if found else {}).get("default_gid", 100))
    view = read_view(settings, registry, listener, LDAP_TABLES)
    wanted = {**ldap_people(view, people_dn, default_gid), **ldap_groups(view, groups_dn)}
    conn = _ldap(settings)
    try:
        have = {**_entries(conn, people_dn), **_entries(conn, groups_dn)}
    finally:
        conn.unbind()
    return Check("LDAP", len(wanted), compare_entries(wanted, have))


# ------------------------------------------------------------------ Insite (the vendor's SA_PERSON)

INSITE_TABLES = (PEOPLE, STATUS, ORGN, DEPARTMENT)
LOCATION_WIDTH = 24
"""person_location is varchar(24): the trigger keeps the first 24 characters of a status."""


@dataclass(frozen=True)
class InsitePerson:
    """What SA_PERSON must say of a person: names, status (None: the source has none),
    the department's name and the title of the person's first affiliation (lowest dept_id)."""

    last_name: str | None
    first_name: str | None
    status: str | None
    orgn: str | None
    title: str | None


def insite_people(view: View) -> dict[str, InsitePerson]:
    """Every person of the source, by person_number (the person_id as text)."""
    statuses, orgns = _by_person(view.get(STATUS, [])), _by_person(view.get(ORGN, []))
    names: dict[str, str | None] = {}
    for key, dept in view.get(DEPARTMENT, []):
        if key.pkey_number is not None:
            names.setdefault(str(key.pkey_number), dept.get("name"))
    out: dict[str, InsitePerson] = {}
    for key, person in view.get(PEOPLE, []):
        pid = key.person_id
        if pid is None:
            continue
        status = next((s.get("status") for s in statuses[pid]), None)
        first = min(orgns[pid], key=lambda r: int(r.get("dept_id") or 0), default=None)
        orgn = names.get(first.get("dept_id") or "") if first else None
        out[str(pid)] = InsitePerson(
            person.get("last_name"), person.get("first_name"), status, orgn, first.get("title") if first else None
        )
    return out


def compare_insite(
    wanted: Mapping[str, InsitePerson], have: Mapping[str, InsitePerson], rejected: Iterable[str] = ()
) -> list[str]:
    """Differences between the people the source has and SA_PERSON (by person_number; its
    ``status`` is person_location), by the vendor trigger's rules: the status cut to 24
    characters; a person without one is ``No Status`` (never had one) or
    ``Former-<status>``; a person the source no longer has stays, but holds no current
    status. People whose change the trigger refused (``rejected``) are not compared."""
    skip = set(rejected)
    problems: list[str] = []
    for number, want in wanted.items():
        if number in skip:
            continue
        got = have.get(number)
        if got is None:
            problems.append(f"person {number}: missing")
            continue
        if want.status is None:
            status_ok = _no_current_status(got.status)
        else:
            status_ok = got.status == want.status[:LOCATION_WIDTH]
        if not status_ok or (got.last_name, got.first_name, got.orgn, got.title) != (
            want.last_name, want.first_name, want.orgn, want.title,
        ):  # fmt: skip
            problems.append(f"person {number}: {got}, the source says {want}")
    for number in sorted(have.keys() - wanted.keys() - skip):
        if not _no_current_status(have[number].status):
            problems.append(f"person {number}: gone from the source, yet SA_PERSON says {have[number].status!r}")
    return problems


def _no_current_status(location: str | None) -> bool:
    return location == "No Status" or (location or "").startswith("Former-")


def check_insite(
    settings: Settings, registry: Registry, vendor_schema: str, rejected: set[int], listener: str = "Insite"
) -> Check:
    """SA_PERSON holds every person of the source as the vendor's trigger makes it from
    what Push_Person sends, except the ones whose change the trigger rejected (those are
    in the dead-letter topic)."""
    wanted = insite_people(read_view(settings, registry, listener, INSITE_TABLES))
    query = sql.SQL(
        "SELECT person_number, person_last_name, person_first_name, person_location, person_text1, person_memo "
        "FROM {}.sa_person"
    ).format(sql.Identifier(vendor_schema))
    with psycopg.connect(settings.vendor.dsn()) as conn:
        have = {r[0]: InsitePerson(r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(query).fetchall()}
    checked = len(wanted.keys() - {str(p) for p in rejected})
    return Check("Insite SA_PERSON", checked, compare_insite(wanted, have, {str(p) for p in rejected}))


# ------------------------------------------------------------------ a file listener's batch files


def changes_in_jsonl(text: str) -> list[dict[str, Any]]:
    """The changes of a JSON Lines batch file, in order."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def changes_in_xml(text: str) -> list[dict[str, Any]]:
    """The changes of an XML batch file, in order, shaped like a JSON Lines change."""
    out: list[dict[str, Any]] = []
    for el in ET.fromstring(text).iter("change"):
        change: dict[str, Any] = {"tname": el.get("tname"), "subtype": el.get("subtype") or None}
        change["change_type"] = el.get("type")
        for k in el.findall("key/*"):
            change[k.tag] = int(k.text or 0) if k.tag in ("person_id", "pkey_number") else k.text
        for part in ("after", "before"):
            block = el.find(part)
            change[part] = (
                None
                if block is None
                else {c.get("name") or "": None if c.get("null") == "true" else (c.text or "") for c in block}
            )
        out.append(change)
    return out


def replay(changes: Iterable[Mapping[str, Any]]) -> dict[ChangeKey, Row]:
    """What an importer that applies changes in order holds at the end: each key's last
    after-state, or nothing when its last change is a delete (a change without an
    after-state says nothing of the row)."""
    state: dict[ChangeKey, Row] = {}
    for c in changes:
        key = ChangeKey(c["tname"], c.get("subtype"), c.get("person_id"), c.get("pkey_string"),
                        c.get("pkey_number"), c.get("aux_string"))  # fmt: skip
        if c.get("change_type") == "DELETE":
            state.pop(key, None)
        elif c.get("after") is not None:
            state[key] = dict(c["after"])
    return state


READERS: dict[str, Callable[[str], list[dict[str, Any]]]] = {"jsonl": changes_in_jsonl, "xml": changes_in_xml}


def read_files(directory: Path, fmt: str) -> tuple[int, dict[ChangeKey, Row]]:
    """How many batch files a directory holds, and their final content: the files applied
    in name order (the order they were written), the changes of each in file order."""
    files = sorted(directory.glob(f"*.{fmt}")) if directory.is_dir() else []
    read = READERS[fmt]
    return len(files), replay(c for f in files for c in read(f.read_text(encoding="utf-8")))


def compare_files(registry: Registry, view: View, have: Mapping[ChangeKey, Row]) -> tuple[int, list[str]]:
    """Differences between what a listener sees of the source and a file target's final
    content: a key missing or extra, a watched column (the feed's ``watch``, or every
    captured column) whose value differs, a column the listener may not see. Columns
    outside ``watch`` are housekeeping: their updates reach no listener, so the files may
    hold an older value."""
    wanted: dict[ChangeKey, tuple[Row, frozenset[str]]] = {}
    for ref, seen in view.items():
        tname, _, subtype = ref.partition("/")
        table = registry.table(tname, subtype or None)
        watched = frozenset(c for f in table.feeds for c in f.watched) if table else frozenset()
        for key, row in seen:
            wanted[key] = (row, watched)
    problems: list[str] = []
    for key, (row, watched) in wanted.items():
        got = have.get(key)
        if got is None:
            problems.append(f"{key.text()}: missing")
            continue
        for column in sorted(got.keys() - row.keys()):
            problems.append(f"{key.text()}: carries {column}, which the listener may not see")
        for column in sorted(watched & row.keys()):
            if got.get(column) != row[column]:
                problems.append(f"{key.text()}: {column} is {got.get(column)!r}, the source says {row[column]!r}")
    problems += [f"{k.text()}: in the files, not in the source" for k in sorted(have.keys() - wanted.keys(), key=str)]
    return len(wanted), problems


def check_files(settings: Settings, registry: Registry, listener: str) -> Check:
    """A file listener's batch files, applied in order, end with what the listener sees of
    the source: every row of its view, key by key, and nothing else."""
    found = registry.listener(listener)
    options = found.adapter.settings if found else {}
    directory, fmt = Path(str(options.get("directory", ""))), str(options.get("format", "jsonl"))
    check = Check(f"{listener} files ({directory})")
    if found is None or not options.get("directory") or fmt not in READERS:
        check.problems.append(f"{listener} is not a file listener with a directory and jsonl/xml format")
        return check
    count, have = read_files(directory, fmt)
    view = read_view(settings, registry, listener, [t.ref for t in registry.tables_of(listener)])
    check.checked, check.problems = compare_files(registry, view, have)
    check.target = f"{listener} files ({count} in {directory})"
    return check
