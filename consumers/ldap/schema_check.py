"""A mapped ``ldap`` listener's entries against its directory's own schema (``mcq registry
validate --online``): every object class exists, and every attribute the mapping writes
(its attributes, ``owned`` ones, the marker) is one the entry's classes allow -- what the
server would refuse entry by entry at run time, found before anything is applied."""

from __future__ import annotations

from typing import Any

from ldap3 import SCHEMA, Connection, Server

from consumers.ldap.connection import LdapConnectError, _tls
from mcq.config import Settings
from mcq.registry.mappings import LdapMapping, class_names
from mcq.registry.model import Registry

Problem = tuple[tuple[str | int, ...], str]


def _schema(settings: Settings, target: str | None) -> Any:
    directory = settings.ldap_target(target)
    server = Server(directory.url, get_info=SCHEMA, tls=_tls(directory), connect_timeout=5)
    conn = Connection(server, directory.bind_dn, directory.bind_password().get_secret_value(), receive_timeout=15)
    try:
        if directory.start_tls:
            conn.open()
            conn.start_tls()
        if not conn.bind():
            raise LdapConnectError(f"ldap server {directory.url}: bind as {directory.bind_dn} refused")
    except Exception as exc:
        raise LdapConnectError(f"ldap server {directory.url}: {exc}") from None
    schema = server.schema
    conn.unbind()
    return schema


def _allowed(schema: Any, classes: list[str]) -> tuple[set[str], list[str]]:
    """Every attribute name (lower-cased, aliases too) the classes and their superiors
    allow, and the classes the schema does not have."""
    known = {name.lower(): oc for name, oc in schema.object_classes.items()}
    allowed: set[str] = {"objectclass"}
    unknown: list[str] = []
    todo, seen = list(classes), set()
    while todo:
        name = todo.pop()
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        oc = known.get(name.lower())
        if oc is None:
            if name in classes:
                unknown.append(name)
            continue
        for attribute in [*(oc.must_contain or []), *(oc.may_contain or [])]:
            allowed.add(attribute.lower())
            definition = schema.attribute_types.get(attribute)
            for alias in getattr(definition, "name", None) or []:
                allowed.add(alias.lower())
        todo += list(oc.superior or [])
        # a structural class's content rule (Active Directory publishes one per class): its
        # auxiliary classes (a user's securityPrincipal: sAMAccountName) and attributes
        rule = (schema.dit_content_rules or {}).get(name)
        if rule is not None:
            allowed.update(a.lower() for a in [*(rule.must_contain or []), *(rule.may_contain or [])])
            todo += list(rule.auxiliary_classes or [])
    return allowed, unknown


def schema_problems(registry: Registry, settings: Settings) -> list[Problem]:
    """Each mapped ldap listener's entries against its directory's schema, at their paths."""
    out: list[Problem] = []
    schemas: dict[str | None, Any] = {}
    for li, listener in enumerate(registry.listeners):
        s = listener.adapter.settings
        if listener.adapter.type != "ldap" or not s.get("entries"):
            continue
        here: tuple[str | int, ...] = ("listeners", li, "adapter", "settings")
        mapping = LdapMapping.model_validate({k: v for k, v in s.items() if k in LdapMapping.model_fields})
        target = s.get("target")
        if target not in schemas:
            try:
                schemas[target] = _schema(settings, target)
            except LdapConnectError as exc:
                out.append(((*here, "target") if target else here, f"cannot read the directory's schema: {exc}"))
                schemas[target] = None
        schema = schemas[target]
        if schema is None:
            continue
        for ref, entry in mapping.entries.items():
            at = (*here, "entries", ref)
            allowed, unknown = _allowed(schema, class_names(entry))
            for name in unknown:
                out.append(((*at, "object_classes"), f"the directory has no object class {name}"))
            written = [*entry.attributes, *entry.owned] + (
                [] if mapping.owns_containers else [mapping.marker_attribute]
            )
            for attribute in written:
                if attribute.lower() not in allowed:
                    where = (*at, "attributes", attribute) if attribute in entry.attributes else (*at, "object_classes")
                    classes = ", ".join(class_names(entry))
                    out.append((where, f"{attribute}: no object class of the entry allows it ({classes})"))
    return out
