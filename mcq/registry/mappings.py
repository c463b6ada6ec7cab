"""Target mappings: what a directory entry or an import row is, declared over an entity
(or any table) with value expressions (mcq.registry.expressions), so that a team maps its
own schema to its own target with no Python (midPoint's and LSC's attribute mappings).

A listener of the ``ldap`` adapter maps each table it is interested in to entries::

    adapter:
      type: ldap
      settings:
        entries:
          PERSON_ENTRY:
            dn: "uid={lower(login)},ou=staff,dc=example,dc=org"
            object_classes: [inetOrgPerson]
            attributes:
              cn: "first_name || ' ' || last_name"
              sn: last_name
              telephoneNumber: {each: phones, value: number, when: "kind = 'office'"}
            lookups: {}

A DN template's first RDN holds ``{expression}`` placeholders (their text RDN-escaped);
the container after it is fixed. Attributes are an expression, a list of them, or
``{each: <to-many join>, value: <expression over an item>, when: <condition>}`` for
multi-valued attributes. mcq REPLACEs only the attributes it maps (and any more listed
under ``owned``); it changes and deletes only entries that carry its marker
(mcq.registry.mappings.marker_value), which it sets when it adds one.

Everything here is checked when the registry is validated, each problem at its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from mcq.refs import KEY_FIELDS, parse_ref
from mcq.registry.exceptions import RuleSyntaxError
from mcq.registry.expressions import (
    Call,
    Case,
    Concat,
    Const,
    Expr,
    Expression,
    expression_problems,
    parse_expression,
    truth,
)
from mcq.registry.expressions import Field as FieldNode
from mcq.registry.expressions import text as as_text

if TYPE_CHECKING:
    from mcq.registry.model import Listener, LogicalTable, Registry

Problem = tuple[tuple[str | int, ...], str]
AttributeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9-]*$")]
PASSWORDS = frozenset(
    {"unicodepwd", "userpassword", "ntpwdhistory", "lmpwdhistory", "dbcspwd", "supplementalcredentials"}
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Each(_Model):
    """A multi-valued attribute from a to-many join's rows: one value per row."""

    each: str
    """The to-many join as the entity names it (``phones``, ``owner.phones`` under a to-one
    join; ``members`` of a many-to-many)."""
    value: str
    """An expression over one row (its fields by name, its to-one joins as ``person.login``)."""
    when: str | None = None
    """Only the rows for which this condition holds."""
    order_by: str | None = None
    """An expression over one row that orders the values (numbers as numbers)."""
    first: bool = False
    """Only the first row (after ``when`` and ``order_by``): a single value from a to-many,
    such as the first account's uidNumber."""


AttributeMap = str | list[str] | Each


class ObjectClass(_Model):
    """An object class an entry has only when it has values for an attribute (an
    auxiliary class comes with its attributes: ``{name: posixAccount, with: uidNumber}``)."""

    name: AttributeName
    with_: AttributeName = Field(alias="with")


class EntryMapping(_Model):
    """How one table's rows become directory entries."""

    dn: str = Field(min_length=3)
    """``rdn_attribute={expression},<container>``: the container is fixed (``{base}`` in it
    is the directory's base DN)."""
    object_classes: tuple[AttributeName | ObjectClass, ...] = Field(min_length=1)
    attributes: dict[AttributeName, AttributeMap] = Field(min_length=1)
    owned: tuple[AttributeName, ...] = ()
    """Attributes mcq also owns without mapping them (it keeps them empty)."""
    lookups: dict[str, dict[str, str]] = {}
    """Lookup tables of ``lookup('name', value[, default])``."""

    def with_base(self, base: str) -> EntryMapping:
        """The mapping with ``{base}`` in its attributes' expressions (inside a string
        literal: ``dn('CN', login, 'OU=staff,{base}')``) replaced by the directory's base DN."""
        quoted = base.replace("'", "''")

        def sub(mapped: AttributeMap) -> AttributeMap:
            if isinstance(mapped, Each):
                return mapped.model_copy(update={"value": mapped.value.replace("{base}", quoted)})
            if isinstance(mapped, list):
                return [m.replace("{base}", quoted) for m in mapped]
            return mapped.replace("{base}", quoted)

        return self.model_copy(update={"attributes": {n: sub(m) for n, m in self.attributes.items()}})


class LdapMapping(_Model):
    """The ``entries`` of an ``ldap`` listener, by table (``TNAME`` or ``TNAME/Subtype``)."""

    directory: str = "openldap"
    """``active-directory`` checks the mapping for what AD needs; anything else is a label."""
    marker: AttributeName | None = None
    """The attribute that marks an entry as this listener's (``mcq:<listener> <key>``);
    default ``description``, or ``adminDescription`` in Active Directory."""
    entries: dict[str, EntryMapping] = Field(min_length=1)
    owns_containers: bool = False
    """Every entry in the entries' containers is mcq's (no marker: the containers are the
    listener's alone, and what else is in them is drift that a repair deletes). Needs DN
    templates whose RDN is the row's key fields, so that an entry names its key."""

    @property
    def marker_attribute(self) -> str:
        return self.marker or ("adminDescription" if self.directory == "active-directory" else "description")


Column = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$", max_length=63)]


class ImportMapping(_Model):
    """How one table's rows become rows of a vendor's import table (``sql_import``): each
    change of a row pushes its whole current record; the vendor's trigger does the rest."""

    columns: dict[Column, str | Each] = Field(min_length=1)
    """Import column -> an expression over the row (an ``each`` gives its first value)."""
    on_delete: dict[Column, str] | None = None
    """When the row is gone: the last record pushed for it, with these columns set anew
    (expressions over the key fields: ``{status: "NULL"}``). Unset: a delete pushes nothing."""
    key_column: Column | None = None
    """The import column that names the row (its expression a key field alone): what
    ``mcq reconcile`` matches the vendor's read-back rows by."""


class ImportMappings(_Model):
    """The ``rows`` of an ``sql_import`` listener, by table."""

    rows: dict[str, ImportMapping] = Field(min_length=1)


def marker_value(listener: str, key_text: str) -> str:
    """What an entry mcq made carries in its marker attribute: the listener and the key of
    the row it is made from (found again by it after a rename or a delete)."""
    return f"mcq:{listener} {key_text}"


# ---------------------------------------------------------------------------- DN templates

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class RdnPart:
    attribute: str
    pieces: tuple[str | Expression, ...]
    """Literal text and expressions, in order."""


@dataclass(frozen=True)
class DnTemplate:
    text: str
    rdn: tuple[RdnPart, ...]
    container: str

    def with_base(self, base: str) -> DnTemplate:
        """The template with ``{base}`` in its container replaced by the directory's base DN."""
        return DnTemplate(self.text, self.rdn, self.container.replace("{base}", base))

    def key_fields(self) -> list[tuple[str, str]] | None:
        """(RDN attribute, key field) of an RDN made of key fields alone (an entry names its
        key); None for any other RDN."""
        out = []
        for part in self.rdn:
            if len(part.pieces) != 1 or not isinstance(part.pieces[0], Expression):
                return None
            tree = part.pieces[0].tree
            if not isinstance(tree, FieldNode) or tree.name not in KEY_FIELDS:
                return None
            out.append((part.attribute, tree.name))
        return out

    def render(self, values: Mapping[str, Any], lookups: Mapping[str, Mapping[str, str]]) -> str:
        """The DN for ``values``; ValueError when an RDN value is empty."""
        from ldap3.utils.dn import escape_rdn

        parts = []
        for part in self.rdn:
            value = "".join(p if isinstance(p, str) else as_text(p.value(values, lookups)) or "" for p in part.pieces)
            if not value.strip():
                raise ValueError(f"dn {self.text!r}: the {part.attribute} of this entry is empty")
            parts.append(f"{part.attribute}={escape_rdn(value)}")
        return f"{'+'.join(parts)},{self.container}"


def _split_outside(text: str, sep: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c == "{"
        depth -= c == "}"
        if c == sep and depth == 0 and (i == 0 or text[i - 1] != "\\"):
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def parse_dn_template(text: str) -> DnTemplate:
    """A DN template; ValueError naming what is wrong with it."""
    from ldap3.core.exceptions import LDAPInvalidDnError
    from ldap3.utils.dn import parse_dn

    rdn_text, *rest = _split_outside(text, ",")
    container = ",".join(rest).strip()
    if not container:
        raise ValueError(f"dn {text!r}: needs a container after the RDN (uid={{login}},ou=people,dc=example,dc=org)")
    if "{" in container.replace("{base}", ""):
        raise ValueError(f"dn {text!r}: only the first RDN may hold {{expressions}}; the container is fixed")
    try:
        parse_dn(container.replace("{base}", "dc=base"))
    except LDAPInvalidDnError as exc:
        raise ValueError(f"dn {text!r}: the container is not a DN: {exc}") from None
    parts: list[RdnPart] = []
    for component in _split_outside(rdn_text, "+"):
        attribute, eq, value = component.partition("=")
        attribute = attribute.strip()
        if not eq or not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", attribute):
            raise ValueError(f"dn {text!r}: {component.strip()!r} is not attribute={{expression}}")
        pieces: list[str | Expression] = []
        at = 0
        for m in _PLACEHOLDER.finditer(value):
            if m.start() > at:
                pieces.append(value[at : m.start()])
            try:
                pieces.append(parse_expression(m.group(1)))
            except RuleSyntaxError as exc:
                raise ValueError(f"dn {text!r}: {str(exc).replace('rule', 'expression', 1)}") from None
            at = m.end()
        if at < len(value):
            pieces.append(value[at:])
        parts.append(RdnPart(attribute, tuple(pieces)))
    names = [p.attribute.lower() for p in parts]
    if len(set(names)) < len(names):
        raise ValueError(f"dn {text!r}: a duplicate RDN attribute ({', '.join(sorted(names))})")
    if not any(isinstance(p, Expression) for part in parts for p in part.pieces):
        raise ValueError(f"dn {text!r}: the RDN has no {{expression}}, so every entry would have the same name")
    return DnTemplate(text, tuple(parts), container)


# ---------------------------------------------------------------------------- nullability


def can_be_empty(node: Expr, required: frozenset[str]) -> bool:
    """Whether an expression may yield NULL or '' for some row, when only ``required``
    fields are known never to be (keys)."""
    match node:
        case FieldNode(name):
            return name not in required
        case Const(value):
            return value in (None, "")
        case Concat(parts):
            return any(can_be_empty(p, required) for p in parts)
        case Case(whens, otherwise):
            return otherwise is None or any(can_be_empty(x, required) for x in [otherwise, *(r for _, r in whens)])
        case Call("default" | "concat", args):
            return all(can_be_empty(a, required) for a in args)
        case Call("if", args):
            return len(args) < 3 or any(can_be_empty(a, required) for a in args[1:])
        case Call("lookup", args):
            return len(args) < 3 or can_be_empty(args[2], required)
        case Call("lower" | "upper" | "ascii" | "dn" | "format_date", args):
            return not args or can_be_empty(args[0], required)
        case Call():
            return True
    return False  # a predicate: true or false, never empty


def required_fields(registry: Registry, table: LogicalTable) -> frozenset[str]:
    """The fields of a table's rows that are never NULL: its key fields and the columns
    its feeds read them from (an entity's: its root's)."""
    root = table
    if table.entity is not None:
        found = registry.table(*parse_ref(table.entity.root))
        root = found if found is not None else table
    out = {k for k in KEY_FIELDS if any(k in f.keys for f in root.feeds)}
    for feed in root.feeds:
        out.update(feed.keys.values())
    return frozenset(out)


# ---------------------------------------------------------------------------- run time


def item_values(item: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A to-many join's row as flat names (its to-one joins as ``person.login``)."""
    out: dict[str, Any] = {}
    for name, value in item.items():
        if isinstance(value, dict):
            out.update(item_values(value, f"{prefix}{name}."))
        elif not isinstance(value, list):
            out[f"{prefix}{name}"] = value
    return out


def attribute_values(
    mapped: AttributeMap, values: Mapping[str, Any], lookups: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """The values of one mapped attribute (no empty value, no duplicate, in order)."""
    if isinstance(mapped, Each):
        raw = values.get(mapped.each)
        rows = json.loads(raw) if isinstance(raw, str) else raw or []
        value, when = parse_expression(mapped.value), parse_expression(mapped.when) if mapped.when else None
        items = [item_values(row) for row in rows]
        items = [item for item in items if when is None or truth(when.value(item, lookups))]
        if mapped.order_by is not None:
            order = parse_expression(mapped.order_by)
            items.sort(key=lambda item: _order(order.value(item, lookups)))
        found = [as_text(value.value(item, lookups)) for item in items[: 1 if mapped.first else None]]
    else:
        texts = [mapped] if isinstance(mapped, str) else mapped
        found = [as_text(parse_expression(t).value(values, lookups)) for t in texts]
    return list(dict.fromkeys(v for v in found if v not in (None, "")))  # type: ignore[misc]


def _order(value: Any) -> tuple[int, float, str]:
    """A sort key: NULLs last, numbers (also as text) by value, then text."""
    if value is None:
        return (2, 0.0, "")
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def object_classes(mapping: EntryMapping, attributes: Mapping[str, list[str]]) -> tuple[str, ...]:
    """The entry's object classes: a conditional one when its attribute has values."""
    out = []
    for c in mapping.object_classes:
        if isinstance(c, str):
            out.append(c)
        elif attributes.get(c.with_):
            out.append(c.name)
    return tuple(out)


def class_names(mapping: EntryMapping) -> list[str]:
    """Every object class an entry of the mapping may have."""
    return [c if isinstance(c, str) else c.name for c in mapping.object_classes]


# ---------------------------------------------------------------------------- validation


def _item_fields(registry: Registry, table: LogicalTable, join_name: str) -> set[str] | None:
    """The names an ``each`` over ``join_name`` may read; None when it is not a to-many join."""
    entity = table.entity
    if entity is None:
        return None
    join_name = join_name.rsplit(".", 1)[-1]  # a to-many under a to-one: owner.phones
    join = next((j for j in entity.joins if j.name == join_name), None)
    if join is None or join.to_one:
        return None
    joined = registry.table(*parse_ref(join.table))
    out = set(join.columns if join.columns is not None else (joined.columns() if joined else ()))
    out.update(k for k in KEY_FIELDS if joined is not None and any(k in f.keys for f in joined.feeds))

    def walk(parent: str, prefix: str) -> None:
        for child in entity.children(parent):
            if not child.to_one:
                continue
            t = registry.table(*parse_ref(child.table))
            columns = child.columns if child.columns is not None else (t.columns() if t else ())
            out.update(f"{prefix}{child.name}.{c}" for c in columns)
            walk(child.name, f"{prefix}{child.name}.")

    walk(join.name, "")
    return out


def _mapped_problems(
    registry: Registry,
    table: LogicalTable,
    mapped: AttributeMap,
    fields: set[str],
    lookups: Mapping[str, Any],
    where: tuple[str | int, ...],
) -> list[Problem]:
    """An attribute's or a column's expressions against the fields they may read: the
    row's, or an ``each``'s item's."""
    if isinstance(mapped, Each):
        item = _item_fields(registry, table, mapped.each)
        if item is None:
            return [((*where, "each"), f"{mapped.each} is not a to-many join of {table.ref}")]
        texts, fields = [mapped.value, *(t for t in (mapped.when, mapped.order_by) if t)], item
    else:
        texts = [mapped] if isinstance(mapped, str) else mapped
    return [(where, p) for text_ in texts for p in expression_problems(text_, fields, lookups)]


def ldap_mapping_problems(registry: Registry, li: int, listener: Listener) -> list[Problem]:
    """An ``ldap`` listener's ``entries`` against its interests and the tables' fields."""
    settings = listener.adapter.settings
    here: tuple[str | int, ...] = ("listeners", li, "adapter", "settings")
    if listener.adapter.type != "ldap":
        return []
    if "entries" not in settings:
        return [(here, "an ldap listener declares its entries: what each table it is interested in becomes "
                       "(docs/mappings.md)")]  # fmt: skip
    model_fields = {"directory", "marker", "entries", "owns_containers"}
    try:
        mapping = LdapMapping.model_validate({k: v for k, v in settings.items() if k in model_fields})
    except ValidationError as exc:
        return [((*here, *e["loc"]), e["msg"]) for e in exc.errors()]
    out: list[Problem] = []
    interested = {t.ref: t for t in registry.tables_of(listener.name)}
    out += _unmapped(listener, interested, mapping.entries, (*here, "entries"))
    for ref, entry in mapping.entries.items():
        at = (*here, "entries", ref)
        table = interested.get(ref)
        if table is None:
            out.append((at, f"listener {listener.name} has no interest in table {ref} (interested in: "
                            f"{', '.join(sorted(interested)) or 'nothing'})"))  # fmt: skip
            continue
        fields = set(registry.columns_of(table)) | {k for k in KEY_FIELDS}
        required = required_fields(registry, table)
        try:
            dn = parse_dn_template(entry.dn)
        except ValueError as exc:
            out.append(((*at, "dn"), str(exc)))
        else:
            if mapping.owns_containers and dn.key_fields() is None:
                why = "with owns_containers, the RDN must be the row's key fields alone (employeeNumber={person_id})"
                out.append(((*at, "dn"), f"dn {entry.dn!r}: {why}, so that an entry names its row"))
            for part in dn.rdn:
                exprs = [p for p in part.pieces if isinstance(p, Expression)]
                for expr in exprs:
                    out += [((*at, "dn"), p) for p in expression_problems(expr.text, fields, entry.lookups)]
                literal = "".join(p for p in part.pieces if isinstance(p, str)).strip()
                if not literal and all(can_be_empty(e.tree, required) for e in exprs):
                    used = ", ".join(sorted({f for e in exprs for f in e.fields()})) or "it"
                    out.append(((*at, "dn"), f"dn {entry.dn!r}: the {part.attribute} can be empty ({used} may be "
                                             f"NULL): use a key field or default(...)"))  # fmt: skip
        names = {a.lower() for a in entry.attributes}
        for ci, c in enumerate(entry.object_classes):
            if not isinstance(c, str) and c.with_.lower() not in names | {o.lower() for o in entry.owned}:
                out.append(((*at, "object_classes", ci), f"{c.name} comes with {c.with_}, which is not mapped"))
        if not mapping.owns_containers and mapping.marker_attribute.lower() in names:
            why = f"{mapping.marker_attribute} is the marker of mcq's entries (set marker: to another attribute)"
            out.append(((*at, "attributes", mapping.marker_attribute), why))
        for name, mapped in entry.attributes.items():
            where = (*at, "attributes", name)
            if mapping.directory == "active-directory" and name.lower() in PASSWORDS:
                out.append((where, f"{name}: mcq never writes passwords"))
            out += _mapped_problems(registry, table, mapped, fields, entry.lookups, where)
        if mapping.directory == "active-directory":
            classes = {c.lower() for c in class_names(entry)}
            if "samaccountname" not in names and classes & {"user", "group", "computer"}:
                out.append(((*at, "attributes"), "an Active Directory user or group needs sAMAccountName"))
            if not classes & {"user", "group", "contact", "organizationalunit", "computer"}:
                out.append(((*at, "object_classes"), "an Active Directory entry is a user, group or contact"))
    return out


def import_mapping_problems(registry: Registry, li: int, listener: Listener) -> list[Problem]:
    """An ``sql_import`` listener's ``rows`` against its interests and the tables' fields."""
    settings = listener.adapter.settings
    here: tuple[str | int, ...] = ("listeners", li, "adapter", "settings")
    if listener.adapter.type != "sql_import":
        return []
    if "rows" not in settings:
        return [(here, "an sql_import listener declares its rows: the import row each table it is interested "
                       "in pushes (docs/mappings.md)")]  # fmt: skip
    try:
        mapping = ImportMappings.model_validate({"rows": settings["rows"]})
    except ValidationError as exc:
        return [((*here, *e["loc"]), e["msg"]) for e in exc.errors()]
    out: list[Problem] = []
    interested = {t.ref: t for t in registry.tables_of(listener.name)}
    out += _unmapped(listener, interested, mapping.rows, (*here, "rows"))
    for ref, rows in mapping.rows.items():
        at = (*here, "rows", ref)
        table = interested.get(ref)
        if table is None:
            out.append((at, f"listener {listener.name} has no interest in table {ref}"))
            continue
        fields = set(registry.columns_of(table)) | set(KEY_FIELDS)
        for name, mapped in rows.columns.items():
            where = (*at, "columns", name)
            out += _mapped_problems(registry, table, mapped, fields, {}, where)
        for name, text_ in (rows.on_delete or {}).items():
            where = (*at, "on_delete", name)
            if name not in rows.columns:
                out.append((where, f"{name} is not one of the columns"))
            out += [(where, p) for p in expression_problems(text_, set(KEY_FIELDS), {})]
        if rows.key_column is not None:
            keyed = rows.columns.get(rows.key_column)
            if not isinstance(keyed, str) or keyed.strip() not in KEY_FIELDS:
                out.append(((*at, "key_column"), f"{rows.key_column} must be mapped from a key field alone "
                                                 f"({', '.join(KEY_FIELDS)})"))  # fmt: skip
    return out


def _unmapped(
    listener: Listener, interested: Mapping[str, object], mapped: Mapping[str, object], at: tuple[str | int, ...]
) -> list[Problem]:
    """A table the listener is interested in that its mapping says nothing of: its changes
    would reach the listener and change nothing at the target."""
    missing = sorted(set(interested) - set(mapped))
    if not missing:
        return []
    return [(at, f"listener {listener.name} is interested in {', '.join(missing)} but maps nothing of it "
                 f"(map it, or drop the interest)")]  # fmt: skip


def mapping_problems(registry: Registry) -> list[Problem]:
    out: list[Problem] = []
    for li, listener in enumerate(registry.listeners):
        out += ldap_mapping_problems(registry, li, listener)
        out += import_mapping_problems(registry, li, listener)
    return out
