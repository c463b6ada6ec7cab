"""The checks of target mappings (mcq.registry.mappings) made when the registry is
validated, each problem at its line: every table a listener is interested in is mapped,
every expression reads only fields its rows have (an ``each`` only its item's), a DN's
placeholders can never be empty, Active Directory's own needs (sAMAccountName, no
passwords)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from mcq.refs import KEY_FIELDS, parse_ref
from mcq.registry.expressions import (
    Call,
    Case,
    Concat,
    Const,
    Expr,
    Expression,
    expression_problems,
)
from mcq.registry.expressions import Field as FieldNode
from mcq.registry.mappings import (
    PASSWORDS,
    AttributeMap,
    Each,
    ImportMappings,
    LdapMapping,
    Problem,
    class_names,
    parse_dn_template,
)

if TYPE_CHECKING:
    from mcq.registry.model import Listener, LogicalTable, Registry


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
