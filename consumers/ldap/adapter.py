"""Apply changes to a directory through a declared mapping (mcq.registry.mappings): each
change's row -- an entity with its related rows -- becomes one entry, with no Python.

**Ownership.** mcq changes and deletes only entries that carry its marker
(``<marker attribute>: mcq:<listener> <key>``), which it sets when it adds an entry. The
entries it holds are read by their marker when the adapter opens; a name it holds
nothing at is only added (an entry already there is a collision: the change is
dead-lettered with it named, the entry stays as it is), and where the server has LDAP's
assertion control (RFC 4528; OpenLDAP, not Samba's AD) every modify, rename and delete
also asserts the marker is still there. Reading back (``mcq reconcile``) sees only
marked entries, so a repair never deletes a hand-made one. ``owns_containers``: every
entry of the containers is the listener's instead (no marker).

**Renames.** The marker names the row's key, so the entry of a key is found wherever it
is: the entries mcq holds are read once when the adapter opens (key -> DN), and a row
whose DN template now yields another name is renamed (modify DN, with the assertion)
before it is written.

Only the mapped attributes (and ``owned`` ones) are REPLACEd; object classes are set
when an entry is added. Writes go pipelined (consumers/ldap/pipeline.py).

A server that cannot be reached makes the target unavailable (the listener waits, and the
batch is written again: every write is idempotent); a result the server refuses (schema or
constraint violation) fails the changes of that key, with the server's message.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ldap3 import BASE, LEVEL, Connection
from ldap3.core.exceptions import (
    LDAPCommunicationError,
    LDAPException,
    LDAPInvalidDnError,
    LDAPOperationResult,
    LDAPResponseTimeoutError,
    LDAPSocketOpenError,
)
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import parse_dn

from consumers.adapter import Adapter, KeyedBatch, ReadBack, states_in_view
from consumers.exceptions import AdapterError, ChangeFailed, ChangeRejected, TargetUnavailable
from consumers.ldap.connection import LdapConnectError, connect
from consumers.ldap.entry import Entry
from consumers.ldap.ownership import (
    ALREADY_EXISTS,
    ASSERTION_FAILED,
    ASSERTION_OID,
    NO_SUCH_OBJECT,
    Held,
    assertion,
    normal,
    unescape_rdn,
)
from consumers.ldap.pipeline import Pipeline
from consumers.ldap.settings import LdapAdapterSettings
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.registry.mappings import (
    DnTemplate,
    EntryMapping,
    LdapMapping,
    attribute_values,
    class_names,
    marker_value,
    object_classes,
    parse_dn_template,
)
from mcq.registry.model import Listener

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView


class LdapAdapter(Adapter, ReadBack):
    """The ``ldap`` adapter: a listener's ``entries`` (mcq.registry.mappings) written to its directory."""

    kind = "ldap"
    settings_model = LdapAdapterSettings
    settings: LdapAdapterSettings
    _conn: Connection | None = None  # reads: a round trip each
    _writer: Pipeline | None = None  # writes: pipelined
    _adding = False  # the last batch found most entries missing (see Pipeline)

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        self.directory = settings.ldap_target(self.settings.target)  # a TargetError: make_adapter says it
        s = self.settings
        base = self.directory.base_dn
        self.mapping = LdapMapping(
            directory=s.directory, marker=s.marker, owns_containers=s.owns_containers,
            entries={ref: m.with_base(base) for ref, m in (s.entries or {}).items()},
        )  # fmt: skip
        self.templates: dict[str, DnTemplate] = {
            ref: parse_dn_template(m.dn).with_base(base) for ref, m in self.mapping.entries.items()
        }
        self.owns_containers = self.mapping.owns_containers
        self.marker = self.mapping.marker_attribute
        self._held_dns: Held | None = None
        """The entries this listener holds (read when opened, kept as it writes)."""
        self._asserts = False
        """The server has the assertion control (read when opened)."""

    # ------------------------------------------------------------------ entries

    def entry_of(self, change: Change) -> tuple[EntryMapping | None, Entry | None]:
        """The mapping of a change's table, and the entry its row makes (None: no row, the
        entry must go); ChangeRejected with the reason when the mapping fails for it."""
        mapping = self.mapping.entries.get(change.key.ref)
        if mapping is None:
            return None, None
        row = change.state
        if row is None:
            return mapping, None
        values: dict[str, Any] = {k: v for k, v in change.key.as_dict().items() if v is not None}
        values.update(row)
        try:
            dn = self.templates[change.key.ref].render(values, mapping.lookups)
            attrs = {name: attribute_values(m, values, mapping.lookups) for name, m in mapping.attributes.items()}
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ChangeRejected(f"{change.where} {change.key}: mapping: {exc}") from None
        for name in mapping.owned:
            attrs.setdefault(name, [])
        if not self.owns_containers:
            attrs[self.marker] = [marker_value(self.listener.name, change.key.text())]
        return mapping, Entry(dn, object_classes(mapping, attrs), attrs)

    def _guard(self, key_text: str) -> list[Any] | None:
        """The control sent with a modify, a delete or a rename of the entry of a key: that
        it still carries this listener's marker (None: the listener owns the containers, or
        the server has no assertion control, as Samba's AD: then what the listener holds is
        what it found marked when it opened, and kept as it wrote)."""
        if self.owns_containers or not self._asserts:
            return None
        return [assertion(self.marker, marker_value(self.listener.name, key_text))]

    def _collision(self, dn: str) -> str:
        mark = f"{self.marker}: mcq:{self.listener.name} ..."
        return f"collision: {dn} exists and is not this listener's (no {mark}); left as it is"

    # ------------------------------------------------------------------ connections

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

    # ------------------------------------------------------------------ writes

    def open(self) -> None:
        self._connection()
        if self._writer is None:  # Active Directory refuses a change of an entry's classes
            self._pipeline().replace_classes = self.mapping.directory != "active-directory"
        if self._held_dns is None:
            root = self._connection()
            root.search("", "(objectClass=*)", BASE, attributes=["supportedControl"])
            supported = root.entries[0].entry_attributes_as_dict.get("supportedControl", []) if root.entries else []
            self._asserts = ASSERTION_OID in {str(c) for c in supported}
            self._held_dns = Held({key: dn for key, (dn, _) in self._held(names_only=True).items()})

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(LDAPException):  # closing anyway
                self._conn.unbind()
            self._conn = None
        self._drop_writer()
        self._held_dns = None

    def ready(self) -> bool:
        try:
            return bool(self._connection().search("", "(objectClass=*)", BASE, attributes=["1.1"]))
        except (TargetUnavailable, LDAPException):
            self._conn = None
            return False

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        """Each key's entry written once, as the batch's last change of it says: the entries
        that go first (their names free for others of the batch), then the renames, then
        every write in flight at once. A key whose entry the server refused, or that
        collides with an entry not ours, fails its changes (the others flow on)."""
        self.open()
        held = self._held_dns
        assert held is not None
        batch = KeyedBatch(changes)
        failed = batch.failed
        plans: list[tuple[str, Change, Entry]] = []
        gone: dict[str, str] = {}  # DN -> key: entries of keys whose row is gone
        for key, change in batch.last():
            try:
                mapping, entry = self.entry_of(change)
            except ChangeRejected as exc:
                failed[key] = exc
                continue
            if mapping is None:
                continue
            now = held.dn_of(key)
            if entry is not None:
                plans.append((key, change, entry))
            elif now is not None:  # ours: delete it (a delete of what is not there is done)
                gone[now] = key
        try:
            if gone:
                self._write({dn: None for dn in gone}, gone, set(), batch)
            writes: dict[str, Entry | None] = {}
            dn_key: dict[str, str] = {}
            new: set[str] = set()
            for key, change, entry in plans:
                lower, now = normal(entry.dn), held.dn_of(key)
                other = dn_key.get(lower) or held.key_at(entry.dn)
                if other is not None and other != key:  # another row of ours has that name: for now?
                    reason = f"{self._collision(entry.dn)} (the row {other} of this listener has that name)"
                    failed[key] = ChangeFailed(f"{change.where} {change.key}: {reason}")
                    continue
                if now is not None and normal(now) != lower:
                    rdn = entry.dn[: len(entry.dn) - len(self.templates[change.key.ref].container) - 1]
                    renamed = self._rename(key, now, entry.dn, rdn)
                    if renamed is not None:
                        failed[key] = renamed
                        continue
                writes[entry.dn], dn_key[entry.dn] = entry, key
                if held.dn_of(key) is None and not self.owns_containers:
                    new.add(entry.dn)  # a name this listener holds nothing at: added, never taken over
            self._write(writes, dn_key, new, batch)
        except (LDAPCommunicationError, LDAPResponseTimeoutError, LDAPSocketOpenError) as exc:
            # which writes landed is unknown: the batch is written again (the holdings read anew)
            self._drop_writer()
            self._held_dns = None
            return [TargetUnavailable(f"ldap: {exc}")] * len(changes)
        return batch.outcomes()

    def _write(
        self,
        entries: dict[str, Entry | None],
        dn_key: dict[str, str],
        new: set[str],
        batch: KeyedBatch,
    ) -> None:
        """Make the entries (None: delete), pipelined; what the listener holds follows, and
        each key the server refused gets its reason in the batch's ``failed``."""
        failed = batch.failed
        held = self._held_dns
        assert held is not None
        controls = {dn: guard for dn, key in dn_key.items() if (guard := self._guard(key)) is not None}
        there = {dn for dn, key in dn_key.items() if held.dn_of(key) is not None}  # renamed already: held at dn
        refused = self._pipeline().make_all(entries, controls, new, there)
        for dn, entry in entries.items():
            key = dn_key[dn]
            change = batch.changes[batch.indexes[key][-1]]
            if dn not in refused:
                if entry is None:
                    held.forget(key)
                else:
                    held.hold(key, dn)
                continue
            code, reason = refused[dn]
            found = self._found(dn, key) if code == ALREADY_EXISTS and dn in new else None
            if found == "ours":
                held.hold(key, dn)  # ours after all (another instance made it): written next time
                failed[key] = ChangeFailed(f"{change.where} {change.key}: ldap: {dn} was made meanwhile")
            elif found == "absent":  # a value the directory keeps unique (sAMAccountName) is taken
                failed[key] = ChangeFailed(f"{change.where} {change.key}: collision: {dn}: {reason}")
            elif code in (ASSERTION_FAILED, ALREADY_EXISTS):  # there, and not ours: never taken over
                failed[key] = ChangeRejected(f"{change.where} {change.key}: {self._collision(dn)}")
            else:  # the server's refusal (schema, a value too long): retried, then dead-lettered
                failed[key] = ChangeFailed(f"{change.where} {change.key}: ldap: {dn}: {reason}")

    def _rename(self, key: str, old: str, new: str, rdn: str) -> AdapterError | None:
        """Move the entry of ``key`` from ``old`` to ``new`` (its new RDN in the same
        container); None when done, or when ``old`` is gone or no longer ours (the entry is
        then added anew)."""
        assert self._held_dns is not None
        try:
            self._connection().modify_dn(old, rdn, delete_old_dn=True, controls=self._guard(key))
        except LDAPOperationResult as exc:
            code = int(exc.result or 0)
            if code == ALREADY_EXISTS:
                other = self._held_dns.key_at(new)
                if other is not None:  # a row of this listener has it (for now?): retried
                    return ChangeFailed(f"{key}: rename of {old}: {new} is the row {other}'s")
                return ChangeRejected(f"{key}: rename of {old}: {self._collision(new)}")
            if code not in (NO_SUCH_OBJECT, ASSERTION_FAILED):
                return ChangeFailed(f"{key}: ldap: rename {old} -> {new}: {exc}")
            self._held_dns.forget(key)
            return None
        except LDAPException as exc:
            self._conn = None
            return TargetUnavailable(f"ldap: rename {old}: {exc}")
        self._held_dns.hold(key, new)
        return None

    def _found(self, dn: str, key: str) -> str:
        """What is at ``dn``: ``ours`` (this listener's marker for ``key``), ``other`` (an
        entry that is not), or ``absent``."""
        try:
            conn = self._connection()
            if not conn.search(dn, "(objectClass=*)", BASE, attributes=[self.marker]):
                return "absent"
            marks = _values(conn.entries[0].entry_attributes_as_dict.get(self.marker, []))
        except LDAPOperationResult as exc:
            return "absent" if int(exc.result or 0) == NO_SUCH_OBJECT else "other"
        except (TargetUnavailable, LDAPException):
            return "other"
        return "ours" if marker_value(self.listener.name, key) in marks else "other"

    # ------------------------------------------------------------------ read back

    def _held(self, names_only: bool = False) -> dict[str, tuple[str, dict[str, Any]]]:
        """Key text -> (DN, attributes) of every entry this listener holds: those with its
        marker, or (``owns_containers``) every entry of its containers that names a key.
        ``names_only``: no attribute but the marker is read (the holdings, not the contents)."""
        conn = self._connection()
        prefix = f"mcq:{self.listener.name} "
        wanted = sorted({"objectClass", self.marker, *(a for m in self.mapping.entries.values() for a in _owned(m))})
        if names_only:
            wanted = ["1.1"] if self.owns_containers else [self.marker]  # 1.1: no attribute (RFC 4511)
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for container in sorted({t.container for t in self.templates.values()}):
            search = "(objectClass=*)" if self.owns_containers else f"({self.marker}={escape_filter_chars(prefix)}*)"
            try:
                found = conn.extend.standard.paged_search(
                    container, search, LEVEL, attributes=wanted, paged_size=1000, generator=True
                )
                for entry in found:
                    if entry.get("type") != "searchResEntry":
                        continue
                    attrs = entry["attributes"]
                    if self.owns_containers:
                        key = self._key_named(container, entry["dn"])
                        if key is not None:
                            out[key] = (entry["dn"], attrs)
                        continue
                    for mark in _values(attrs.get(self.marker, [])):
                        if mark.startswith(prefix):
                            out[mark[len(prefix) :]] = (entry["dn"], attrs)
            except LDAPOperationResult as exc:
                if int(exc.result or 0) != NO_SUCH_OBJECT:  # a container not made yet holds nothing
                    raise
        return out

    def _key_named(self, container: str, dn: str) -> str | None:
        """The key text an entry of an owned container names by its RDN (None: it names
        no row of the table mapped there)."""
        names: dict[str, str] = {}
        try:
            parts = parse_dn(dn)
        except LDAPInvalidDnError:
            return None
        for name, value, separator in parts:  # the first RDN: its parts joined by '+'
            names[name.lower()] = unescape_rdn(value)
            if separator != "+":
                break
        for ref, template in self.templates.items():
            fields = template.key_fields()
            if fields is None or template.container.lower() != container.lower():
                continue
            if {a.lower() for a, _ in fields} != set(names):
                continue
            tname, _, subtype = ref.partition("/")
            key: dict[str, Any] = {}
            for attribute, field in fields:
                value = names[attribute.lower()]
                if field in ("person_id", "pkey_number"):
                    if not value.lstrip("-").isdigit():
                        return None
                    key[field] = int(value)
                else:
                    key[field] = value
            return ChangeKey(tname, subtype or None, **key).text()
        return None

    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for seen in states_in_view(view, states):
            try:
                mapping, entry = self.entry_of(seen)
            except ChangeRejected:
                continue  # the mapping fails for it: dead-lettered, nothing the target can hold
            if mapping is not None and entry is not None:
                out[str(seen.key)] = self._compare(mapping, entry.dn, entry.object_classes, entry.attributes)
        return out

    def read_back(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, (dn, attrs) in self._held().items():
            mapping = self.mapping.entries.get(ChangeKey.from_text(key).ref)
            if mapping is None:
                continue
            values = {k: _values(v) for k, v in attrs.items() if k.lower() != "objectclass"}
            out[str(ChangeKey.from_text(key))] = self._compare(
                mapping, dn, [str(c) for c in attrs.get("objectClass", [])], values
            )
        return out

    def objects_held(self) -> set[str] | None:
        if self._held_dns is None:  # not open, or its connection was lost: read back
            return None
        keys = (ChangeKey.from_text(key) for key in self._held_dns.held_keys())
        return {str(k) for k in keys if k.ref in self.mapping.entries}

    def _compare(
        self, mapping: EntryMapping, dn: str, classes: Iterable[str], attributes: dict[str, list[str]]
    ) -> dict[str, Any]:
        """What reconcile compares: the DN, the mapped classes present, the owned attributes."""
        owned = {a.lower() for a in _owned(mapping)}
        mapped = {c.lower() for c in class_names(mapping)}
        content = _content([c for c in classes if c.lower() in mapped], {
            k: v for k, v in attributes.items() if k.lower() in owned
        })  # fmt: skip
        content["dn"] = [normal(dn)]
        return content

    def keys_of(self, obj: str) -> list[ChangeKey]:
        """An object is named by its key as written: ``PERSON_ENTRY[person_id=2]``."""
        return [ChangeKey.from_str(obj)]

    def state_refs(self) -> tuple[str, ...] | None:  # type: ignore[override]  # an object per key
        return None

    def preview(self, change: Change) -> str:
        mapping, entry = self.entry_of(change)
        if mapping is None:
            return f"(no entry mapping for {change.key.ref})"
        if entry is None:
            return json.dumps({"delete": "the entry of this key, if this listener holds one"}, indent=2)
        body = {"dn": entry.dn, "objectClass": list(entry.object_classes),
                "attributes": {k: v for k, v in entry.attributes.items() if v}}  # fmt: skip
        return json.dumps(body, indent=2, ensure_ascii=False)


def _values(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [v.decode() if isinstance(v, bytes) else str(v) for v in items]


def _content(classes: Iterable[str], attributes: dict[str, list[str]]) -> dict[str, list[str]]:
    out = {"objectclass": sorted(c.lower() for c in classes)}
    out.update({k.lower(): sorted(v) for k, v in attributes.items() if v})
    return out


def _owned(mapping: EntryMapping) -> list[str]:
    return [*mapping.attributes, *mapping.owned]
