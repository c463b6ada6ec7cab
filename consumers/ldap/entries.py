"""The directory entries of people and groups, assembled from a :class:`StateStore`.

A person is ``employeeNumber=<person_id>`` under the people container: an RDN that never
changes, so a new name or login only changes attributes (no rename of the entry is
ever needed, and references to it stay valid). A person with a login is also a
``posixAccount``. A Unix group is ``cn=<group>`` under the groups container, a
``posixGroup`` whose ``memberUid`` values are its members' usernames; a renamed group
reaches us as the old key's delete and the new key's insert.
"""

from __future__ import annotations

from consumers.ldap.entry import Entry
from consumers.projection import Row, State

PEOPLE, PHONES, ADDRESSES, STATUS, ORGN, UDI = (
    "PERSON/PEOPLE", "PERSON/Telephone", "PERSON/Address", "PERSON/Status", "PERSON/Dir_Orgn", "PERSON/UDI",
)  # fmt: skip
DEPARTMENT, LOGINS, GROUPS, GROUP_MEM = "DEPARTMENT", "LOGINS", "GROUPS", "GROUP_MEM"
STATE = (PEOPLE, PHONES, ADDRESSES, STATUS, ORGN, UDI, DEPARTMENT, LOGINS, GROUPS, GROUP_MEM)

PHONE_ATTRS = {"campus": "telephoneNumber", "office": "telephoneNumber", "mobile": "mobile", "home": "homePhone",
               "fax": "facsimileTelephoneNumber"}  # fmt: skip
ADDRESS_ATTRS = {"campus": "postalAddress", "home": "homePostalAddress"}
PERSON_ATTRS = (
    "cn", "sn", "givenName", "displayName", "mail", "telephoneNumber", "mobile", "homePhone",
    "facsimileTelephoneNumber", "postalAddress", "homePostalAddress", "title", "ou", "departmentNumber",
    "employeeType", "uid", "uidNumber", "gidNumber", "homeDirectory", "loginShell",
)  # fmt: skip
GROUP_ATTRS = ("gidNumber", "description", "memberUid")


def _address(row: Row) -> str:
    # postalAddress lines are separated by '$' (RFC 4517)
    lines = [row.get("street"), f"{row.get('city') or ''}, {row.get('state') or ''} {row.get('postal_code') or ''}",
             row.get("country")]  # fmt: skip
    return "$".join(x.strip().replace("$", " ") for x in lines if x and x.strip(" ,"))


def person_dn(person_id: int, people_dn: str) -> str:
    return f"employeeNumber={person_id},{people_dn}"


def group_dn(name: str, groups_dn: str) -> str:
    from ldap3.utils.dn import escape_rdn

    return f"cn={escape_rdn(name)},{groups_dn}"


def person_entry(store: State, person_id: int, people_dn: str, default_gid: int) -> Entry | None:
    """The entry of a person now; None when the person is gone (the entry must go too)."""
    person = store.row(PEOPLE, person_id)
    if person is None:
        return None
    first, last = person.get("first_name") or "", person.get("last_name") or ""
    attrs: dict[str, list[str]] = {a: [] for a in PERSON_ATTRS}
    attrs["cn"] = [f"{first} {last}".strip() or str(person_id)]
    attrs["sn"] = [last or str(person_id)]
    attrs["givenName"] = [first] if first else []
    attrs["displayName"] = attrs["cn"]
    for phone in store.rows(PHONES, person_id):
        attr = PHONE_ATTRS.get(phone.get("tele_type") or "")
        if attr and phone.get("phone_number"):
            attrs[attr].append(phone["phone_number"] or "")
    for address in store.rows(ADDRESSES, person_id):
        attr = ADDRESS_ATTRS.get(address.get("addr_type") or "")
        if attr:
            attrs[attr].append(_address(address))
    if (status := store.row(STATUS, person_id)) and status.get("status"):
        attrs["employeeType"] = [status["status"] or ""]
    if (udi := store.row(UDI, person_id)) and udi.get("email"):
        attrs["mail"] = [udi["email"] or ""]
    for orgn in sorted(store.rows(ORGN, person_id), key=lambda r: int(r.get("dept_id") or 0)):
        dept_id = orgn.get("dept_id") or ""
        attrs["departmentNumber"].append(dept_id)
        if orgn.get("title"):
            attrs["title"].append(orgn["title"] or "")
        for dept in store.keyed(DEPARTMENT, pkey_number=dept_id):
            if dept.get("name"):
                attrs["ou"].append(dept["name"] or "")
    classes = ["top", "person", "organizationalPerson", "inetOrgPerson"]
    logins = sorted(store.rows(LOGINS, person_id), key=lambda r: r.get("username") or "")
    if logins:  # the first account is the person's uid; a posixAccount needs a uidNumber
        login = logins[0]
        username = login.get("username") or ""
        attrs["uid"] = [x.get("username") or "" for x in logins]
        if login.get("unixuid"):
            classes.append("posixAccount")
            attrs["uidNumber"] = [login["unixuid"] or ""]
            attrs["gidNumber"] = [str(default_gid)]
            attrs["homeDirectory"] = [f"/home/{username}"]
            attrs["loginShell"] = [login.get("shell") or "/bin/bash"]
    for name, values in attrs.items():  # multi-valued attributes: no duplicates, stable order
        attrs[name] = list(dict.fromkeys(v for v in values if v))
    return Entry(person_dn(person_id, people_dn), tuple(classes), attrs)


def group_entry(store: State, name: str, groups_dn: str) -> Entry | None:
    found = store.keyed(GROUPS, pkey_string=name)
    if not found:
        return None
    group = found[0]
    members = sorted({m.get("username") or "" for m in store.keyed(GROUP_MEM, pkey_string=name)} - {""})
    attrs: dict[str, list[str]] = {
        "gidNumber": [group.get("gid") or "0"],
        "description": [group.get("description") or ""] if group.get("description") else [],
        "memberUid": members,
    }
    return Entry(group_dn(name, groups_dn), ("top", "posixGroup"), attrs)
