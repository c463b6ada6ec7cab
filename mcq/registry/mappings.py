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

Everything here is checked when the registry is validated, each problem at its line
(mcq.registry.mapping_checks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from mcq.refs import KEY_FIELDS
from mcq.registry.exceptions import RuleSyntaxError
from mcq.registry.expressions import (
    Expression,
    parse_expression,
    truth,
)
from mcq.registry.expressions import Field as FieldNode
from mcq.registry.expressions import text as as_text

if TYPE_CHECKING:
    pass

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
