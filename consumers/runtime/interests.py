"""Which changes a listener gets: its interests (table/subtype) and their content rules."""

from __future__ import annotations

from mcq.change import Change
from mcq.registry.model import Registry


def interested(registry: Registry, listener: str, change: Change) -> bool:
    """An interest covers the change's table/subtype and its rule (if any) matches the row
    after the change, or the row before it: a listener learns that a row left its view."""
    table = registry.table(change.key.tname, change.key.subtype)
    for interest in registry.interests_of(listener):
        if table is not None and not interest.covers(table):
            continue
        if table is None and interest.tname != change.key.tname:
            continue
        rule = interest.parsed_rule()
        if rule is None or rule.matches(change.rule_values()):
            return True
        if change.before is not None and rule.matches(change.rule_values(row=change.before)):
            return True
    return False
