"""What the vendor's import table (Insite's SA_PERSON) must hold, against what it holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql

from mcq.config import Settings
from mcq.demo.checks.ldap import DEPARTMENT, ORGN, PEOPLE, STATUS
from mcq.demo.checks.view import Check, View, _by_person, read_tables
from mcq.registry.model import Registry

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


def check_insite(settings: Settings, registry: Registry, vendor_schema: str, rejected: set[int]) -> Check:
    """SA_PERSON holds every person of the source as the vendor's trigger makes it from
    what Push_Person sends, except the ones whose change the trigger rejected (those are
    in the dead-letter topic)."""
    wanted = insite_people(read_tables(settings, registry, INSITE_TABLES))
    query = sql.SQL(
        "SELECT person_number, person_last_name, person_first_name, person_location, person_text1, person_memo "
        "FROM {}.sa_person"
    ).format(sql.Identifier(vendor_schema))
    with psycopg.connect(settings.vendor.dsn()) as conn:
        have = {r[0]: InsitePerson(r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(query).fetchall()}
    checked = len(wanted.keys() - {str(p) for p in rejected})
    return Check("Insite SA_PERSON", checked, compare_insite(wanted, have, {str(p) for p in rejected}))
