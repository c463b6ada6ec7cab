"""Keep each logical key's last state as one row: ``INSERT .. ON CONFLICT .. DO UPDATE`` for
inserts and updates, ``DELETE`` for deletes, both only when the row is not newer than the
change (the source position is stored with the row), so a replay or a late retry never
overwrites a newer state.

A batch is one transaction with a savepoint per change: one bad change rolls back alone.
A broken connection makes the target unavailable; an error the database answered with
(constraint, trigger, lock timeout) fails that change with the database's message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import psycopg
from psycopg import sql

from consumers.adapter import Adapter
from consumers.exceptions import AdapterError, ChangeFailed, TargetUnavailable
from consumers.table.settings import TableSettings
from mcq.change import Change


class TableAdapter(Adapter):
    kind = "table"
    settings_model = TableSettings
    settings: TableSettings

    _conn: psycopg.Connection[tuple[object, ...]] | None = None

    @property
    def dsn(self) -> str:
        if self.settings.dsn is not None:
            return self.settings.dsn.get_secret_value()
        return getattr(self.mcq_settings, self.settings.database).dsn()  # type: ignore[no-any-return]

    @property
    def table(self) -> sql.Composed:
        schema, name = self.settings.table.split(".")
        return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))

    def open(self) -> None:
        self._connection()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def ready(self) -> bool:
        try:
            conn = self._connection()
            conn.execute("SELECT 1")
            conn.rollback()
            return True
        except (TargetUnavailable, psycopg.Error):
            return False

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.close()
        try:
            conn = psycopg.connect(
                self.dsn, connect_timeout=5, options=f"-c statement_timeout={self.settings.statement_timeout_ms}"
            )
            schema = self.settings.table.split(".")[0]
            found = conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()
            if found is None or found[0] is None:  # asked only when missing: needs CREATE on the database
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL(
                    """CREATE TABLE IF NOT EXISTS {} (
                        change_key text PRIMARY KEY,
                        tname text NOT NULL, subtype text,
                        person_id bigint, pkey_string text, pkey_number bigint, aux_string text,
                        state jsonb,
                        last_commit_lsn bigint NOT NULL, lsn bigint NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now())"""
                ).format(self.table)
            )
            conn.commit()
        except psycopg.OperationalError as exc:
            raise TargetUnavailable(f"table {self.settings.table}: cannot connect: {_first_line(exc)}") from None
        except psycopg.Error as exc:  # e.g. no privilege: the listener waits until someone fixes it
            raise TargetUnavailable(f"table {self.settings.table}: cannot set up: {_first_line(exc)}") from None
        self._conn = conn
        return conn

    def apply(self, change: Change) -> None:
        outcome = self.apply_batch([change])[0]
        if outcome is not None:
            raise outcome

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        conn = self._connection()
        outcomes: list[AdapterError | None] = []
        try:
            with conn.transaction():
                for change in changes:
                    try:
                        with conn.transaction():  # a savepoint
                            self._apply_one(conn, change)
                        outcomes.append(None)
                    except psycopg.Error as exc:
                        if conn.broken:
                            raise
                        outcomes.append(ChangeFailed(f"{change.where} {change.key}: {_first_line(exc)}"))
        except psycopg.Error as exc:  # the connection went away: nothing of the batch is known to be applied
            self.close()
            lost = TargetUnavailable(f"table {self.settings.table}: {_first_line(exc)}")
            return [lost] * len(changes)
        return outcomes

    def _apply_one(self, conn: psycopg.Connection[tuple[object, ...]], change: Change) -> None:
        k = change.key
        pos = (change.position.last_commit_lsn, change.position.lsn)
        if change.change_type == "DELETE":
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE change_key = %s AND (last_commit_lsn, lsn) <= (%s, %s)").format(
                    self.table
                ),
                (k.text(), *pos),
            )
            return
        conn.execute(
            sql.SQL(
                """INSERT INTO {t} AS t (change_key, tname, subtype, person_id, pkey_string, pkey_number,
                       aux_string, state, last_commit_lsn, lsn)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (change_key) DO UPDATE SET state = EXCLUDED.state,
                       last_commit_lsn = EXCLUDED.last_commit_lsn, lsn = EXCLUDED.lsn, applied_at = now()
                   WHERE (t.last_commit_lsn, t.lsn) <= (EXCLUDED.last_commit_lsn, EXCLUDED.lsn)"""
            ).format(t=self.table),
            (
                k.text(),
                k.tname,
                k.subtype,
                k.person_id,
                k.pkey_string,
                k.pkey_number,
                k.aux_string,
                json.dumps(change.after) if change.after is not None else None,
                *pos,
            ),
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
