"""How a logical table and a change's key are named everywhere in mcq.

A logical table is ``TNAME`` or ``TNAME/Subtype`` (its *ref*): in messages, the registry
store, state snapshots, key files and the console. A change's logical key is the table
plus these four fields (the MCQ paper's key columns), in this order.
"""

from __future__ import annotations

KEY_FIELDS = ("person_id", "pkey_string", "pkey_number", "aux_string")


def table_ref(tname: str, subtype: str | None) -> str:
    """``TNAME`` or ``TNAME/Subtype``."""
    return f"{tname}/{subtype}" if subtype else tname


def parse_ref(ref: str) -> tuple[str, str | None]:
    """(TNAME, subtype or None) of a ref."""
    tname, _, subtype = ref.partition("/")
    return tname, subtype or None
