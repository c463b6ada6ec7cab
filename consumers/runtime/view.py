"""A listener's view: the rows of its interests that pass their content rules, restricted
to the columns it may see — and what a change means to a target that mirrors it.

A target mirrors its listener's view, so a change is judged by the row's state after
it and by whether the key is at the target now (``present``, from the applied
positions), never by the change type alone:

=====================  ===================  ======================================
state after the change  key at the target    the listener gets
=====================  ===================  ======================================
in the view             no                   INSERT with the full state (entered)
in the view             yes                  the change (UPDATE, or INSERT)
gone or out of view     yes                  DELETE for this listener (left-view)
gone or out of view     no                   nothing (filtered)
=====================  ===================  ======================================

This holds whatever compaction removed in between: a lagging listener that sees only
the last record of a key (an UPDATE out of its rule, a tombstone) still ends with the
key's last state. Rules read the change's fields as well (``change_type``), so a rule
like BEST's ``… OR change_type = 'DELETE'`` keeps meaning what it says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from consumers.projection import Row
from mcq.change import Change, ChangeKey
from mcq.registry.model import Interest, Registry


@dataclass(frozen=True)
class Verdict:
    """The interests that admit a row, and what of it they show."""

    interests: tuple[Interest, ...]

    @property
    def admitted(self) -> bool:
        return bool(self.interests)

    @cached_property
    def columns(self) -> frozenset[str] | None:
        """The union of the admitting interests' allow-lists; None: every column."""
        if any(i.columns is None for i in self.interests):
            return None
        return frozenset(c for i in self.interests for c in i.columns or ())

    @property
    def delay_s(self) -> float | None:
        delays = [i.delay_s for i in self.interests if i.delay_s]
        return min(delays) if delays else None

    @property
    def expire_after_s(self) -> float | None:
        limits = [i.expire_after_s for i in self.interests if i.expire_after_s]
        return min(limits) if limits else None


_NONE = Verdict(())
_UNKNOWN = Verdict(())  # not judged yet (a sentinel: compared by identity)


def project(row: Row | None, columns: frozenset[str] | None) -> Row | None:
    if row is None or columns is None:
        return row
    return {k: v for k, v in row.items() if k in columns}


class ListenerView:
    """One listener's interests, asked change by change."""

    def __init__(self, registry: Registry, listener: str) -> None:
        self.registry = registry
        self.listener = listener
        self._interests = registry.interests_of(listener)
        self._for: dict[tuple[str, str | None], list[Interest]] = {}
        self._unruled: dict[tuple[str, str | None], Verdict | None] = {}
        """Per table: the verdict on every row when no interest in it has a rule, else None."""

    def interests_for(self, tname: str, subtype: str | None) -> list[Interest]:
        found = self._for.get((tname, subtype))
        if found is None:
            table = self.registry.table(tname, subtype)
            if table is None:  # an explicit-only name the registry does not list as a table
                found = [i for i in self._interests if i.tname == tname]
            else:
                found = [i for i in self._interests if i.covers(table)]
            self._for[(tname, subtype)] = found
        return found

    def covers(self, key: ChangeKey) -> bool:
        return bool(self.interests_for(key.tname, key.subtype))

    def unruled(self, tname: str, subtype: str | None) -> Verdict | None:
        """The verdict on every row of a table no interest in it has a content rule on
        (its columns are what the listener sees of each row); None when a rule chooses rows."""
        table = (tname, subtype)
        found = self._unruled.get(table, _UNKNOWN)
        if found is _UNKNOWN:
            interests = self.interests_for(tname, subtype)
            found = self._unruled[table] = (
                None if any(i.parsed_rule() is not None for i in interests) else Verdict(tuple(interests))
            )
        return found

    def verdict(self, change: Change, row: Row | None) -> Verdict:
        """Which interests admit ``row`` as the state of the change's key (none for no row)."""
        if row is None:
            return _NONE
        unruled = self.unruled(change.key.tname, change.key.subtype)
        if unruled is not None:
            return unruled
        values: dict[str, Any] | None = None
        admitting = []
        for interest in self.interests_for(change.key.tname, change.key.subtype):
            rule = interest.parsed_rule()
            if rule is not None:
                values = values if values is not None else change.rule_values(row=row)
                if not rule.matches(values):
                    continue
            admitting.append(interest)
        return Verdict(tuple(admitting))

    def see(self, change: Change, present: bool) -> tuple[Change | None, Verdict]:
        """What the change is to this listener (None: nothing), and the verdict on its state."""
        state = change.state
        verdict = self.verdict(change, state)
        if verdict.admitted:
            columns = verdict.columns
            before = project(change.before, columns) if present else None
            if columns is None and (present or (change.change_type == "INSERT" and change.before is None)):
                seen = change  # every column, as it came (state is its after: it is not a delete)
            elif present:
                seen = dataclasses.replace(change, after=project(state, columns), before=before)
            else:
                cause = change.cause if change.cause != "source" or change.change_type == "INSERT" else "entered-view"
                seen = dataclasses.replace(
                    change, change_type="INSERT", after=project(state, columns), before=None, cause=cause
                )
            return seen, verdict
        if not present:
            return None, verdict
        # gone, or out of the view: the target must drop it; show the row as the listener knew it
        before_verdict = self.verdict(change, change.before)
        cause = change.cause
        if cause == "source" and state is not None:
            cause = "left-view"
        seen = dataclasses.replace(
            change,
            change_type="DELETE",
            after=None,
            before=project(change.before, before_verdict.columns) if before_verdict.admitted else None,
            cause=cause,
        )
        return seen, before_verdict
