"""The applied positions as a test checks them: the keys it writes, the oracle of what its
writes say per key, and what an ``AppliedPositions`` holds of them."""

from __future__ import annotations

from consumers.runtime.applied import AppliedPositions
from mcq.change import ChangeKey, Position

Write = tuple[str, ChangeKey, Position, bool]
KEYS = [ChangeKey("PHONE", None, pid, None, None, tele) for pid in range(120) for tele in ("office", "home")]


def oracle(writes: list[Write]) -> dict[str, tuple[Position, bool]]:
    """What the writes say per key, worked out here: the newest position wins; at an equal
    position a change of presence is taken (a tombstone or a refresh of the same state)."""
    out: dict[str, tuple[Position, bool]] = {}
    for kind, key, pos, present in writes:
        if kind != "applied":
            continue
        held = out.get(key.text())
        if held is None or pos > held[0] or (pos == held[0] and present != held[1]):
            out[key.text()] = (pos, present)
    return out


def view_of(a: AppliedPositions) -> dict[str, tuple[Position | None, bool, Position | None, bool]]:
    return {k.text(): (a.get(k), a.present(k), a.parked(k), a.blocked(k)) for k in KEYS}
