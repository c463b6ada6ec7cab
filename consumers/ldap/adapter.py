"""Apply changes to an LDAP directory (ldap3): every change recomputes the entries it
touches from the listener's state store and makes the directory say exactly that.

Which entries a change touches: a person's for any PERSON aspect or LOGINS row (by
person_id), every member's for a DEPARTMENT, a group's for GROUPS and GROUP_MEM (by
group name). An entry that should exist is added or modified with REPLACE of every
managed attribute (an empty value list removes it), so applying the same state twice
leaves the directory as it was; an entry that should not exist is deleted. Only the
attributes listed in :mod:`consumers.ldap.entries` are touched: others set by hand stay.

A server that cannot be reached makes the target unavailable (the listener waits); a
result the server refuses (schema or constraint violation) fails the change with the
server's message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ldap3 import BASE, LEVEL, MODIFY_REPLACE, Connection
from ldap3.core.exceptions import LDAPCommunicationError, LDAPException, LDAPOperationResult, LDAPSocketOpenError

from consumers.adapter import ReadBack
from consumers.exceptions import AdapterError, ChangeFailed, TargetUnavailable
from consumers.ldap.connection import LdapConnectError, connect
from consumers.ldap.entries import (
    DEPARTMENT,
    GROUP_ATTRS,
    GROUP_MEM,
    GROUPS,
    ORGN,
    PEOPLE,
    PERSON_ATTRS,
    STATE,
    Entry,
    group_dn,
    group_entry,
    person_dn,
    person_entry,
)
from consumers.ldap.settings import LdapAdapterSettings
from consumers.projected import ProjectedAdapter
from consumers.projection import IndexedState
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.registry.model import Listener

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView

NO_SUCH_OBJECT = 32
ALREADY_EXISTS = 68


class LdapAdapter(ProjectedAdapter, ReadBack):
    kind = "ldap"
    settings_model = LdapAdapterSettings
    settings: LdapAdapterSettings
    needs_state = STATE
    _conn: Connection | None = None
    _adding = False  # the last entry written was missing: try an add first (see make)

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        self.directory = settings.ldap_target(self.settings.target)  # a TargetError: make_adapter says it

    @property
    def people_dn(self) -> str:
        return self.settings.people_dn or self.directory.people_dn

    @property
    def groups_dn(self) -> str:
        return self.settings.groups_dn or self.directory.groups_dn

    def _connection(self) -> Connection:
        if self._conn is not None and self._conn.bound and not self._conn.closed:
            return self._conn
        try:
            # no schema read: the server validates what it is sent (and refuses with its reason).
            # An untrusted certificate or a refused bind: the listener waits until someone fixes it.
            conn = connect(self.directory, connect_timeout=5, receive_timeout=15)
        except LdapConnectError as exc:
            raise TargetUnavailable(str(exc)) from None
        self._conn = conn
        return conn

    def open(self) -> None:
        self.open_store()
        self._connection()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(LDAPException):  # closing anyway
                self._conn.unbind()
            self._conn = None
        self.close_store()

    def ready(self) -> bool:
        try:
            return bool(self._connection().search(self.people_dn, "(objectClass=*)", BASE, attributes=["1.1"]))
        except (TargetUnavailable, LDAPException):
            self._conn = None
            return False

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        self.open()
        assert self.store is not None
        self.store.catch_up(changes)  # at least as new as every change of the batch
        positions = self.store.positions()
        outcomes: list[AdapterError | None] = []
        made: set[str] = set()  # entries hold the current state: one write per entry and batch is enough
        for i, change in enumerate(changes):
            try:
                for dn, entry in self.touched(change):
                    if dn in made:
                        continue
                    if self.written.reflected(dn, change):
                        self.skipped += 1
                        continue
                    self.make(dn, entry())
                    made.add(dn)
                    self.written.wrote(dn, positions)
                outcomes.append(None)
            except (LDAPSocketOpenError, LDAPCommunicationError) as exc:
                self._conn = None
                outcomes.extend([TargetUnavailable(f"ldap: {exc}")] * (len(changes) - i))
                break
            except LDAPOperationResult as exc:
                outcomes.append(ChangeFailed(f"{change.where} {change.key}: ldap: {exc.description}: {exc.message}"))
            except TargetUnavailable as exc:
                outcomes.extend([exc] * (len(changes) - i))
                break
        return outcomes

    def touched(self, change: Change) -> list[tuple[str, Callable[[], Entry | None]]]:
        """Every entry a change touches: (dn, what the entry must be now, or None: gone),
        the entry computed only when asked (a write already made may make it unneeded)."""
        store, key, gid = self.store, change.key, self.settings.default_gid
        assert store is not None

        def person(p: int) -> tuple[str, Callable[[], Entry | None]]:
            return person_dn(p, self.people_dn), lambda: person_entry(store, p, self.people_dn, gid)

        if key.tname == "PERSON" or (key.tname == "LOGINS" and key.person_id is not None):
            return [] if key.person_id is None else [person(key.person_id)]
        if key.tname == DEPARTMENT and key.pkey_number is not None:
            people = {int(r.get("person_id") or 0) for r in store.keyed(ORGN, pkey_number=key.pkey_number)}
            return [person(p) for p in sorted(people)]
        if key.tname in (GROUPS, GROUP_MEM) and key.pkey_string is not None:
            name = key.pkey_string
            return [(group_dn(name, self.groups_dn), lambda: group_entry(store, name, self.groups_dn))]
        return []

    def make(self, dn: str, entry: Entry | None) -> None:
        """Make the directory hold exactly ``entry`` at ``dn`` (or nothing), with no read
        before the write: a modify of a missing entry becomes an add, an add of one that
        exists (another instance made it meanwhile) a modify, a delete of one already gone
        nothing. Which write goes first follows the last entry written: a modify while the
        entries written are there already (the steady state: one round trip), an add once
        one was missing (an initial load or a new OU: one round trip instead of a refused
        modify and an add)."""
        conn = self._connection()
        if entry is None:
            try:
                conn.delete(dn)
            except LDAPOperationResult as exc:
                if exc.result != NO_SUCH_OBJECT:
                    raise
            return
        changes = {k: [(MODIFY_REPLACE, v)] for k, v in entry.attributes.items()}
        changes["objectClass"] = [(MODIFY_REPLACE, list(entry.object_classes))]
        if not self._adding:
            if self._written(conn.modify, dn, changes, missing=NO_SUCH_OBJECT):
                return
            self._adding = True
        if self._written(conn.add, dn, list(entry.object_classes), {k: v for k, v in entry.attributes.items() if v},
                         missing=ALREADY_EXISTS):  # fmt: skip
            return
        self._adding = False
        conn.modify(dn, changes)

    @staticmethod
    def _written(write: Callable[..., object], *args: object, missing: int) -> bool:
        """Whether ``write`` succeeded; False when the server refused it with ``missing``
        (the other write is the one to make), any other refusal raised."""
        try:
            write(*args)
        except LDAPOperationResult as exc:
            if exc.result != missing:
                raise
            return False
        return True

    # ------------------------------------------------------------------ read back (mcq reconcile)
    # objects: "person <person_id>" (employeeNumber=... under people_dn) and "group <name>"
    # (cn=... under groups_dn); content: object classes and the managed attributes that
    # have values, names lower-cased and values sorted (the directory keeps no order)

    def state_refs(self) -> tuple[str, ...]:
        return STATE

    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        from consumers.runtime.view import ViewState

        inner = IndexedState()
        for change in states:
            inner.put(change.key.ref, change.key, change.after, change.position)
        store = ViewState(inner, view)  # type: ignore[arg-type]  # an IndexedState reads as a store does
        out: dict[str, Any] = {}
        for key, _, _ in inner.entries(PEOPLE):
            if key.person_id is not None:
                person = person_entry(store, key.person_id, self.people_dn, self.settings.default_gid)
                if person is not None:
                    out[f"person {key.person_id}"] = _content(person.object_classes, person.attributes)
        for key, _, _ in inner.entries(GROUPS):
            if key.pkey_string is not None:
                group = group_entry(store, key.pkey_string, self.groups_dn)
                if group is not None:
                    out[f"group {key.pkey_string}"] = _content(group.object_classes, group.attributes)
        return out

    def read_back(self) -> dict[str, Any]:
        from ldap3.utils.dn import parse_dn

        conn = self._connection()
        out: dict[str, Any] = {}
        for base, rdn, kind, managed in (
            (self.people_dn, "employeenumber", "person", PERSON_ATTRS),
            (self.groups_dn, "cn", "group", GROUP_ATTRS),
        ):
            found = conn.extend.standard.paged_search(
                base, "(objectClass=*)", LEVEL, attributes=["objectClass", *managed], paged_size=1000, generator=True
            )
            for entry in found:
                if entry.get("type") != "searchResEntry":
                    continue
                name, value, _ = parse_dn(entry["dn"])[0]
                if name.lower() != rdn or (kind == "person" and not value.isdigit()):
                    continue  # not an entry this adapter makes
                attrs = entry["attributes"]
                classes = [str(c) for c in attrs.get("objectClass", [])]
                values = {k: _values(v) for k, v in attrs.items() if k.lower() != "objectclass"}
                out[f"{kind} {int(value) if kind == 'person' else value}"] = _content(classes, values)
        return out

    def keys_of(self, obj: str) -> list[ChangeKey]:
        """A person's entry is written again by a refresh of its PERSON/PEOPLE key (deleted
        when that has no state), a group's by its GROUPS key."""
        kind, _, name = obj.partition(" ")
        if kind == "person":
            return [ChangeKey("PERSON", "PEOPLE", int(name))]
        return [ChangeKey(GROUPS, None, None, name)]


def _values(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [v.decode() if isinstance(v, bytes) else str(v) for v in items]


def _content(classes: Iterable[str], attributes: dict[str, list[str]]) -> dict[str, list[str]]:
    out = {"objectclass": sorted(c.lower() for c in classes)}
    out.update({k.lower(): sorted(v) for k, v in attributes.items() if v})
    return out
