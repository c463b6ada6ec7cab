"""What a directory entry must be: its DN, object classes and every attribute mcq manages
(an empty list: must not be there). What the ldap adapters compute and the pipeline writes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    dn: str
    object_classes: tuple[str, ...]
    attributes: dict[str, list[str]]
    """Every managed attribute: an empty list means "must not be there"."""
