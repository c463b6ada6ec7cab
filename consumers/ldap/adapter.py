"""Apply changes to an LDAP directory (ldap3): every change recomputes the entries it
touches from the listener's state store and makes the directory say exactly that.

Which entries a change touches: a person's for any PERSON aspect or LOGINS row (by
person_id), every member's for a DEPARTMENT, a group's for GROUPS and GROUP_MEM (by
group name). An entry that should exist is added or modified with REPLACE of every
managed attribute (an empty value list removes it), so applying the same state twice
leaves the directory as it was; an entry that should not exist is deleted. Only the
attributes listed in :mod:`consumers.ldap.entries` are touched: others set by hand stay.

A batch's entries are written on a connection of their own with every write of a round
in flight at once (consumers/ldap/pipeline.py); reads (reconcile, the readiness probe)
take a round trip each on another.

A server that cannot be reached makes the target unavailable (the listener waits, and the
batch is written again: every write is idempotent); a result the server refuses (schema or
constraint violation) fails the changes that touched that entry, with the server's message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ldap3 import BASE, LEVEL, Connection
from ldap3.core.exceptions import (
    LDAPCommunicationError,
    LDAPException,
    LDAPResponseTimeoutError,
    LDAPSocketOpenError,
)

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
    group_dn,
    group_entry,
    person_dn,
    person_entry,
)
from consumers.ldap.entry import Entry
from consumers.ldap.pipeline import Pipeline
from consumers.ldap.settings import LdapAdapterSettings
from consumers.projected import ProjectedAdapter
from consumers.projection import IndexedState
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.registry.model import Listener

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView


class LdapAdapter(ProjectedAdapter, ReadBack):
    kind = "ldap"
    settings_model = LdapAdapterSettings
    settings: LdapAdapterSettings
    needs_state: ClassVar[tuple[str, ...]] = STATE
    _conn: Connection | None = None  # reads: a round trip each
    _writer: Pipeline | None = None  # writes: pipelined
    _adding = False  # the last batch found most entries missing (see Pipeline)

    def __new__(cls, listener: Listener, settings: Settings) -> LdapAdapter:
        """A listener that declares its ``entries`` gets the mapped adapter (consumers/ldap/mapped.py)."""
        if cls is LdapAdapter and listener.adapter.settings.get("entries") is not None:
            from consumers.ldap.mapped import MappedLdapAdapter

            return super().__new__(MappedLdapAdapter)
        return super().__new__(cls)

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

    def _pipeline(self) -> Pipeline:
        """The connection writes go through (its own: pipelined, results collected by id)."""
        if self._writer is not None and self._writer.conn.bound and not self._writer.conn.closed:
            return self._writer
        self._drop_writer()
        try:
            conn = connect(self.directory, connect_timeout=5, receive_timeout=15, pipelined=True)
        except LdapConnectError as exc:
            raise TargetUnavailable(str(exc)) from None
        self._writer = Pipeline(conn, timeout=15, adding=self._adding)
        return self._writer

    def _drop_writer(self) -> None:
        """Close the write connection (the next write opens another); what it learnt of
        which write to try first is kept."""
        if self._writer is not None:
            self._adding = self._writer.adding
            self._writer.close()
            self._writer = None

    def open(self) -> None:
        self.open_store()
        self._connection()
        self._pipeline()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(LDAPException):  # closing anyway
                self._conn.unbind()
            self._conn = None
        self._drop_writer()
        self.close_store()

    def ready(self) -> bool:
        try:
            return bool(self._connection().search(self.people_dn, "(objectClass=*)", BASE, attributes=["1.1"]))
        except (TargetUnavailable, LDAPException):
            self._conn = None
            return False

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        """Each entry the batch touches written once, as the store says it is now, all in
        flight at once (consumers/ldap/pipeline.py); a change fails when an entry it
        touched was refused."""
        self.open()
        assert self.store is not None
        self.store.catch_up(changes)  # at least as new as every change of the batch
        positions = self.store.positions()
        entries: dict[str, Entry | None] = {}
        touching: dict[str, list[int]] = {}  # dn -> the changes that touch it
        for i, change in enumerate(changes):
            for dn, entry in self.touched(change):
                if dn in entries:
                    touching[dn].append(i)
                elif self.written.reflected(dn, change):
                    self.skipped += 1
                else:
                    entries[dn] = entry()
                    touching[dn] = [i]
        try:
            failed = self._pipeline().make_all(entries)
        except (LDAPCommunicationError, LDAPResponseTimeoutError, LDAPSocketOpenError) as exc:
            # which writes landed is unknown: the batch is written again, idempotently
            self._drop_writer()
            return [TargetUnavailable(f"ldap: {exc}")] * len(changes)
        outcomes: list[AdapterError | None] = [None] * len(changes)
        for dn, indexes in touching.items():
            if dn in failed:
                for i in indexes:
                    if outcomes[i] is None:
                        outcomes[i] = ChangeFailed(f"{changes[i].where} {changes[i].key}: ldap: {dn}: {failed[dn][1]}")
            else:
                self.written.wrote(dn, positions)
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

    # ------------------------------------------------------------------ read back (mcq reconcile)
    # objects: "person <person_id>" (employeeNumber=... under people_dn) and "group <name>"
    # (cn=... under groups_dn); content: object classes and the managed attributes that
    # have values, names lower-cased and values sorted (the directory keeps no order)

    def state_refs(self) -> tuple[str, ...] | None:
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
