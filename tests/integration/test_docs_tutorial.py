"""The tutorial "Your own table to your own target" (docs/tutorials/your-own-table.md), run
as a reader runs it: its shell blocks in order, in one shell, its registry block saved as
the file it names, on the real stack. Its names are made unique (``shop`` and ``mirror``
get this test's token) so it never meets another test or a reader's own try.

What the targets must hold is worked out here from the source table, read with SQL, never
from the listeners' code: the mirror table holds every customer's row, the Gold listener's
files end with exactly the gold customers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mcq.config import Settings
from mcq.stack import Stack
from tests import PROJECT_ROOT
from tests.support.shell import Shell, blocks
from tests.support.waiting import until

TUTORIAL = PROJECT_ROOT / "docs" / "tutorials" / "your-own-table.md"

pytestmark = pytest.mark.long  # a normaliser of its own: minutes on two cores


def customers(settings: Settings, schema: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(settings.source.dsn()) as conn:
        rows = conn.execute(f"SELECT id, name, email, tier FROM {schema}.customers").fetchall()
    return {r[0]: {"id": str(r[0]), "name": r[1], "email": r[2], "tier": r[3]} for r in rows}


def mirrored(settings: Settings, table: str) -> dict[int, dict[str, Any]]:
    try:
        with psycopg.connect(settings.vendor.dsn()) as conn:
            rows = conn.execute(f"SELECT pkey_number, state FROM {table}").fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    return {r[0]: r[1] for r in rows if r[1] is not None}


def gold_files(directory: Path) -> dict[int, dict[str, Any]]:
    """The last state per key the Gold listener's JSON Lines files say, in file order."""
    state: dict[int, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.jsonl")) if directory.exists() else []:
        for line in path.read_text().splitlines():
            change = json.loads(line)
            key = int(change["pkey_number"])
            if change["change_type"] == "DELETE":
                state.pop(key, None)
            else:
                state[key] = change["after"]
    return state


@pytest.mark.timeout(900)
def test_the_tutorial_runs_as_written_and_its_targets_end_as_the_source(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    shop, mirror = f"shop{token}", f"mirror{token}"
    text = TUTORIAL.read_text().replace("shop", shop).replace("mirror", mirror)
    text = text.replace("export PATH=$PWD/.venv/bin:$PATH", f"export PATH={PROJECT_ROOT}/.venv/bin:$PATH")
    steps = blocks(text)
    registry = [body for lang, body in steps if lang == "yaml"]
    assert len(registry) == 1
    (tmp_path / f"{shop}.yaml").write_text(registry[0])
    scripts = [body for lang, body in steps if lang == "sh"]
    assert len(scripts) == 8, [s.splitlines()[0] for s in scripts]
    exports, setup, starts = scripts[0], scripts[1:3], scripts[3]  # the table, the registry's commands
    assert "mcq streams normalize" in starts and "&" in starts
    status, change, trace, cleanup = scripts[4:8]
    assert "UPDATE" in change and "kill" in cleanup

    shell = Shell(tmp_path)
    try:
        shell.start(exports)  # in the shell itself, as are the background jobs: they outlive a block
        for script in setup:
            shell.run(script)
        shell.start(starts)

        def target_is_the_source() -> None:
            source = customers(settings, shop)
            assert mirrored(settings, f"{mirror}.customers") == source
            gold = {k: v for k, v in source.items() if v["tier"] == "gold"}
            assert gold_files(tmp_path / "out" / "gold") == gold

        until(time.monotonic() + 300, target_is_the_source)
        out = shell.run(status)
        assert "Ada Lovelace" in out and "Grace Hopper" in out

        shell.run(change)
        until(time.monotonic() + 120, target_is_the_source)
        assert set(mirrored(settings, f"{mirror}.customers")) == {2}
        out = shell.run(trace)
        assert "Mirror" in out and "Gold" in out

        stop, rest = cleanup.split("\n", 1)
        shell.start(stop)  # `kill %1 ...` names the shell's own jobs
        shell.run(rest)
        assert "no such job" not in shell.log.read_text()
    finally:
        shell.close()
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {shop} CASCADE")
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {mirror} CASCADE")
