"""Listener workloads and target rules that several listener tests use: a random stream of
phone changes, a target table that refuses one value."""

from __future__ import annotations

import random

import psycopg

from mcq.config import Settings
from mcq.testing.listeners import (
    change,
)


def random_stream(n: int, keys: int, seed: int) -> list:  # type: ignore[type-arg]
    """n changes over `keys` people: inserts, many updates, some deletes and re-inserts."""
    rnd = random.Random(seed)
    live: set[int] = set()
    out = []
    for i in range(n):
        pid = rnd.randrange(keys)
        if pid in live and rnd.random() < 0.08:
            out.append(change("PHONE", pid, None, "DELETE"))
            live.discard(pid)
        else:
            out.append(change("PHONE", pid, f"+1-518-{i:07d}", "UPDATE" if pid in live else "INSERT"))
            live.add(pid)
    return out


def _reject(settings: Settings, table: str, value: str) -> None:
    """The target refuses one phone number (a business rule), until the test drops the rule."""
    schema = table.split(".")[0]
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(
            f"""CREATE TABLE {table} (change_key text PRIMARY KEY, tname text NOT NULL, subtype text,
                person_id bigint, pkey_string text, pkey_number bigint, aux_string text, state jsonb,
                last_commit_lsn bigint NOT NULL, lsn bigint NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT no_rejects CHECK (state->>'phone' IS DISTINCT FROM '{value}'))"""
        )
