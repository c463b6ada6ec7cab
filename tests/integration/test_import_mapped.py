"""The ``sql_import`` adapter with a declared mapping, against the stack's real
PostgreSQL: a new user's accounts (tests/unit/people_registry.py) pushed into a vendor's
own import table, whose trigger keeps the vendor's table or refuses. A refused record
(no name, or a value too long for the vendor's column) fails its key alone; a row that
is gone pushes its last record with ``on_delete``; what is read back is what the rows say."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import psycopg
import pytest

from consumers.adapter import make_adapter
from consumers.exceptions import ChangeFailed
from consumers.runtime.view import ListenerView
from consumers.sql_import.adapter import SqlImportAdapter
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from tests.unit.people_registry import IMPORT_LISTENER, PEOPLE, VENDOR, VENDOR_READ_BACK

_lsn = count(100, 10)


@pytest.fixture
def vendor(stack: Stack, settings: Settings, token: str) -> Iterator[str]:
    schema = f"v{token}"
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(VENDOR.format(v=schema))  # type: ignore[arg-type]
    yield schema
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]


def registry_of(vendor: str, read_back: Path) -> Registry:
    listeners = "listeners:" + IMPORT_LISTENER.format(name="Vendor", vendor=vendor, read_back=read_back)
    listeners += "interests:\n  - {listener: Vendor, tname: ACCOUNT_ENTRY}\n"
    return parse_registry(PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=listeners), "people.yaml")


def account(login: str, given: str | None, family: str | None, status: str = "A", phones: tuple[str, ...] = ()
            ) -> Change:  # fmt: skip
    numbers = [{"id": i, "kind": "office", "number": n, "person_id": "1"} for i, n in enumerate(phones)]
    row = {"login": login, "person_id": "1", "uid_number": "1", "owner.id": "1", "owner.given": given,
           "owner.family": family, "owner.status": status, "owner.phones": json.dumps(numbers)}  # fmt: skip
    return _change(ChangeKey("ACCOUNT_ENTRY", pkey_string=login), row)


def _change(key: ChangeKey, row: dict[str, str | None] | None) -> Change:
    lsn = next(_lsn)
    return Change(key, "DELETE" if row is None else "UPDATE", Position(lsn, lsn), datetime.now(UTC), "hr.x", row)


def vendor_people(settings: Settings, schema: str) -> dict[str, tuple[str | None, ...]]:
    with psycopg.connect(settings.vendor.dsn()) as conn:
        rows = conn.execute(f"SELECT login, full_name, status, phone FROM {schema}.people").fetchall()  # type: ignore[arg-type]
    return {r[0]: tuple(r[1:]) for r in rows}


def test_a_mapped_import_table_gets_each_record_and_the_vendor_refuses_only_its_own(
    vendor: str, settings: Settings, tmp_path: Path
) -> None:
    read_back = tmp_path / "read_back.sql"
    read_back.write_text(VENDOR_READ_BACK.format(v=vendor))
    registry = registry_of(vendor, read_back)
    listener = registry.listener("Vendor")
    assert listener is not None
    adapter = make_adapter(listener, settings)
    assert isinstance(adapter, SqlImportAdapter)
    adapter.bind(registry)
    try:
        batch = [account("ana", "Ana", "Ruiz", phones=("+1 555 0100", "+1 555 0101")), account("bob", None, None),
                 account("cyd", "Cyd", "Poe", status="R"), account("dee", "Dee", "Lu", status="S"),
                 account("ana", "Ana", "Ruiz-Gil", phones=("+1 555 0100",))]  # fmt: skip
        outcomes = adapter.apply_batch(batch)
        assert outcomes[0] is None and outcomes[3] is None and outcomes[4] is None
        assert isinstance(outcomes[1], ChangeFailed) and "VENDOR: account bob has no name" in str(outcomes[1])
        assert isinstance(outcomes[2], ChangeFailed) and "value too long" in str(outcomes[2])
        assert vendor_people(settings, vendor) == {
            "ana": ("Ana Ruiz-Gil", "active", "+1 555 0100"),
            "dee": ("Dee Lu", "suspended", None),
        }
        # gone: the last record pushed, with on_delete; a key never pushed pushes nothing
        gone = [_change(ChangeKey("ACCOUNT_ENTRY", pkey_string="dee"), None),
                _change(ChangeKey("ACCOUNT_ENTRY", pkey_string="bob"), None)]  # fmt: skip
        assert adapter.apply_batch(gone) == [None, None]
        assert vendor_people(settings, vendor)["dee"] == ("Dee Lu", "gone", None)
        assert "bob" not in vendor_people(settings, vendor)
        # read back: equal to the rows; a record changed at the vendor is found
        states = [account("ana", "Ana", "Ruiz-Gil", phones=("+1 555 0100",))]
        view = ListenerView(registry, "Vendor")
        assert adapter.unreadable() is None
        back = adapter.read_back()
        assert adapter.settled("ACCOUNT_ENTRY dee") and not adapter.settled("ACCOUNT_ENTRY ana")
        assert {k: v for k, v in back.items() if k != "ACCOUNT_ENTRY dee"} == adapter.expected(view, states)
        with psycopg.connect(settings.vendor.dsn()) as conn:
            conn.execute(f"UPDATE {vendor}.people SET phone = NULL WHERE login = 'ana'")  # type: ignore[arg-type]
        assert adapter.read_back()["ACCOUNT_ENTRY ana"]["phone"] is None
        assert adapter.keys_of("ACCOUNT_ENTRY ana") == [ChangeKey("ACCOUNT_ENTRY", pkey_string="ana")]
    finally:
        adapter.close()
