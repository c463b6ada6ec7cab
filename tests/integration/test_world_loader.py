"""The sample world in the real source database: DDL, bulk load, replica identity."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.logs import log_lines
from mcq.world import create_schema, generate, load


def test_a_generated_world_loads_completely_with_full_replica_identity(
    stack: Stack, settings: Settings, token: str
) -> None:
    schema = f"world_{token}"
    world = generate(300)
    lines: list[str] = []
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        try:
            create_schema(conn, schema)
            create_schema(conn, schema)  # idempotent
            with log_lines() as said:
                counts = load(conn, schema, world)
            lines.extend(said)
            assert counts == world.counts()
            assert f"people: {len(world.people)} rows" in lines
            for table, expected in world.counts().items():
                query = sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
                row = conn.execute(query).fetchone()
                assert row is not None and row[0] == expected, table
            row = conn.execute(
                "SELECT c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = 'directory_telephone'",
                (schema,),
            ).fetchone()
            assert row == ("f",)
            # defaults fill the housekeeping columns the generator leaves out
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.people WHERE updated_at IS NULL").format(sql.Identifier(schema))
            ).fetchone()
            assert row == (0,)

            create_schema(conn, schema, replace=True)
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}.people").format(sql.Identifier(schema))).fetchone()
            assert row == (0,)
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_an_unsafe_schema_name_is_refused(stack: Stack, settings: Settings) -> None:
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for bad in ("Campus", "x; DROP TABLE people", "1abc", "", "a" * 64):
            with pytest.raises(ValueError):
                create_schema(conn, bad)
            with pytest.raises(ValueError):
                load(conn, bad, generate(0))
