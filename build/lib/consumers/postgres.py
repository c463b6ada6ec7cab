"""What the PostgreSQL adapters share: one connection, a batch as one transaction with a
savepoint per change, and errors mapped to what the runtime should do. A broken
connection, or an error no change escapes (``TARGET_WIDE``: the table dropped or altered
underneath), makes the target unavailable; an error the database answered for one change
(constraint, trigger, lock timeout) fails that change, with the database's message."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import psycopg
from pydantic import SecretStr

from consumers.exceptions import AdapterError, ChangeFailed, TargetUnavailable
from mcq.change import Change
from mcq.config import Settings

Connection = psycopg.Connection[tuple[object, ...]]


TARGET_WIDE = frozenset({"42P01", "42703", "42501"})
"""SQLSTATEs that no change of a batch escapes (undefined table, undefined column, no
privilege): the target is unusable as it is, not the change, so the listener waits for
it (nothing parked or dead-lettered) and sets it up again on its next connection."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PgTarget:
    """A PostgreSQL target: ``setup`` runs once per new connection (DDL, installs)."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        database: str,
        dsn: SecretStr | None,
        statement_timeout_ms: int,
        setup: Callable[[Connection], None],
    ) -> None:
        self.name = name
        self._dsn = dsn.get_secret_value() if dsn is not None else settings.database(database).dsn()
        self._timeout = statement_timeout_ms
        self._setup = setup
        self._conn: Connection | None = None

    def connection(self) -> Connection:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.close()
        try:
            conn = psycopg.connect(
                self._dsn,
                connect_timeout=5,
                options=f"-c statement_timeout={self._timeout}",
                application_name=f"mcq {self.name}"[:63],  # who it is, in pg_stat_activity
            )
            try:
                self._setup(conn)
                conn.commit()
            except TargetUnavailable:  # the setup found the target unusable as it is
                conn.close()
                raise
        except psycopg.OperationalError as exc:
            raise TargetUnavailable(f"{self.name}: cannot connect: {first_line(exc)}") from None
        except psycopg.Error as exc:  # e.g. no privilege: the listener waits until someone fixes it
            raise TargetUnavailable(f"{self.name}: cannot set up: {first_line(exc)}") from None
        self._conn = conn
        return conn

    def ready(self) -> bool:
        try:
            conn = self.connection()
            conn.execute("SELECT 1")
            conn.rollback()
            return True
        except (TargetUnavailable, psycopg.Error):
            return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def apply_batch(
        self, changes: Sequence[Change], apply_one: Callable[[Connection, Change], None]
    ) -> list[AdapterError | None]:
        """One transaction for the batch, a savepoint per change: a bad change rolls back alone."""
        try:
            conn = self.connection()
        except TargetUnavailable as exc:  # still down after a wait: the runtime waits again, nothing is lost
            return [exc] * len(changes)
        outcomes: list[AdapterError | None] = []
        try:
            with conn.transaction():
                for change in changes:
                    try:
                        with conn.transaction():
                            apply_one(conn, change)
                        outcomes.append(None)
                    except psycopg.Error as exc:
                        if conn.broken or exc.sqlstate in TARGET_WIDE:
                            raise
                        outcomes.append(ChangeFailed(f"{change.where} {change.key}: {first_line(exc)}"))
        except psycopg.Error as exc:  # the connection went away: nothing of the batch is known to be applied
            self.close()  # (a target-wide error: the next connection sets the target up again)
            return [TargetUnavailable(f"{self.name}: {first_line(exc)}")] * len(changes)
        return outcomes
