"""Settings of the ``ldap`` adapter (a listener's ``adapter.settings``). The server, bind
DN and password are the deployment's: its ``ldap`` directory (``MCQ_LDAP__*``), or the
named connection ``target`` names (``targets.<name>``, ``type: ldap``); these say where
entries go."""

from __future__ import annotations

from typing import Literal

from consumers.adapter import AdapterSettings
from mcq.registry.mappings import EntryMapping


class LdapAdapterSettings(AdapterSettings):
    target: str | None = None
    """A named LDAP connection of the configuration (``targets.<name>``): two listeners
    write to two directories. Default: the deployment's ``ldap``."""
    directory: str = "openldap"
    """A label for logs and metrics (the campus registry has ``openldap`` and ``active-directory``);
    ``active-directory`` also checks a mapping for what AD needs (mcq.registry.mappings)."""
    entries: dict[str, EntryMapping] | None = None
    """What each table the listener is interested in becomes in the directory, declared
    (mcq.registry.mappings): a DN template, object classes, attributes. Unset: the sample
    campus's people and groups (consumers/ldap/entries.py)."""
    owns_containers: bool = False
    """Every entry in the containers of ``entries`` is mcq's (mcq.registry.mappings.LdapMapping)."""
    marker: str | None = None
    """The attribute that marks the entries mcq made (default ``description``, in Active
    Directory ``adminDescription``): only those are changed or deleted."""
    people_dn: str | None = None
    """Container of person entries (default ``ou=people,<base>``)."""
    groups_dn: str | None = None
    """Container of group entries (default ``ou=groups,<base>``)."""
    default_gid: int = 100
    """gidNumber of an account whose primary group the source does not say."""
    state: Literal["topics", "source"] = "topics"
    """Where records are assembled from: a store kept from the compacted topics (no access
    to the source needed; a replay rebuilds it), or read through to the source database."""
