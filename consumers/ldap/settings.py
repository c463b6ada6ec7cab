"""Settings of the ``ldap`` adapter (a listener's ``adapter.settings``). The server, bind
DN and password are the deployment's: its ``ldap`` directory (``MCQ_LDAP__*``), or the
named connection ``target`` names (``targets.<name>``, ``type: ldap``); ``entries`` say
what goes there (mcq.registry.mappings, docs/mappings.md)."""

from __future__ import annotations

from pydantic import Field

from consumers.adapter import AdapterSettings
from mcq.registry.mappings import EntryMapping


class LdapAdapterSettings(AdapterSettings):
    target: str | None = None
    """A named LDAP connection of the configuration (``targets.<name>``): two listeners
    write to two directories. Default: the deployment's ``ldap``."""
    directory: str = "openldap"
    """A label for logs and metrics; ``active-directory`` also checks a mapping for what AD
    needs (mcq.registry.mappings) and keeps an entry's object classes as they were added."""
    entries: dict[str, EntryMapping] = Field(min_length=1)
    """What each table the listener is interested in becomes in the directory, declared
    (mcq.registry.mappings): a DN template, object classes, attributes."""
    owns_containers: bool = False
    """Every entry in the containers of ``entries`` is mcq's (mcq.registry.mappings.LdapMapping)."""
    marker: str | None = None
    """The attribute that marks the entries mcq made (default ``description``, in Active
    Directory ``adminDescription``): only those are changed or deleted."""
