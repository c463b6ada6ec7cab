"""Keep each logical key's last state as one row: ``INSERT .. ON CONFLICT .. DO UPDATE`` for
inserts and updates, ``DELETE`` for deletes, both only when the row is not newer than the
change (the source position is stored with the row), so a replay or a late retry never
overwrites a newer state. A batch is one transaction: each key's last change, the upserts
COPYed and merged at once; if the database refuses it, the batch is applied again with a
savepoint per change, so only the bad change fails."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from consumers.adapter import Adapter, ReadBack, rows_in_view
from consumers.exceptions import AdapterError, TargetUnavailable
from consumers.postgres import Connection, PgTarget, first_line
from consumers.table.settings import TableSettings
from mcq import jsontext
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.pgcatalog import table_columns
from mcq.registry.model import Listener
from mcq.targets import jdbc_options_from_dsn

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView


class TableAdapter(Adapter, ReadBack):
    kind = "table"
    settings_model = TableSettings
    settings: TableSettings

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        schema, name = self.settings.table.split(".")
        self.schema = schema
        self.table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))
        self.target = PgTarget(
            f"table {self.settings.table}", settings, self.settings.database, self.settings.dsn,
            self.settings.statement_timeout_ms, self._setup,
        )  # fmt: skip
        self._staged_on: Connection | None = None  # the connection whose session has the staging table

    def _setup(self, conn: Connection) -> None:
        found = conn.execute("SELECT to_regnamespace(%s)", (self.schema,)).fetchone()
        if found is None or found[0] is None:  # asked only when missing: needs CREATE on the database
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
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
        self._refuse_other_shapes(conn)

    def _refuse_other_shapes(self, conn: Connection) -> None:
        """A table of that name made by someone else: every change would fail alike, so the
        listener waits for it (unavailable, one line saying why) instead of parking them all."""
        have = table_columns(conn, self.settings.table)
        missing = [c for c in self.COPY_COLUMNS if c not in have]
        unique = conn.execute(
            "SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indnatts = 1 AND a.attname = 'change_key'",
            (self.settings.table,),
        ).fetchone()
        if missing or unique is None:
            lacks = f"column(s) {', '.join(missing)}" if missing else "a unique index on change_key"
            raise TargetUnavailable(
                f"{self.target.name}: the table exists but is not one mcq keeps: it lacks {lacks} (it has "
                f"{', '.join(sorted(have))}); name another table in listener {self.listener.name}'s "
                "adapter.settings.table, or drop this one (mcq creates it)"
            )

    def open(self) -> None:
        self.target.connection()

    def close(self) -> None:
        self.target.close()

    def ready(self) -> bool:
        return self.target.ready()

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        if len(changes) > 1:
            try:
                self._apply_last_states(changes)
                return [None] * len(changes)
            except TargetUnavailable as exc:  # not reached: connecting again below would only wait twice
                return [exc] * len(changes)
            except psycopg.Error:
                pass  # applied again one by one below: its own error is said for the bad change only
        return self.target.apply_batch(changes, self._apply_one)

    def _apply_last_states(self, changes: Sequence[Change]) -> None:
        """Each key's last change of the batch in one transaction: the upserts COPYed into a
        session-local staging table and merged with one statement (a pipelined INSERT per
        row cost the database twice as much), the deletes as one statement."""
        last: dict[str, Change] = {}
        for change in changes:  # a key's changes come in source order
            last[change.key.text()] = change
        upserts = [self._upsert_row(c) for c in last.values() if c.change_type != "DELETE"]
        deletes = [
            (k, c.position.last_commit_lsn, c.position.lsn) for k, c in last.items() if c.change_type == "DELETE"
        ]
        conn = self.target.connection()
        try:
            copy_them = len(upserts) >= self.COPY_FROM
            if copy_them:
                self._staging(conn)
            with conn.transaction(), conn.cursor() as cur:
                if copy_them:
                    with cur.copy(self._copy_staging) as copy:
                        for row in upserts:
                            copy.write_row(row)
                    cur.execute(self._merge_staging)
                elif upserts:
                    cur.executemany(self._upsert, upserts)
                if deletes:
                    cur.execute(self._delete_many, [list(column) for column in zip(*deletes, strict=True)])
        except psycopg.Error:
            if conn.broken:
                self.target.close()
            raise

    COPY_FROM = 20
    """Upserts in a batch from which COPY and one merge beat a pipelined INSERT per row."""

    STAGING = sql.Identifier("mcq_table_batch")

    def _staging(self, conn: Connection) -> None:
        """The session's staging table (emptied at every commit), made once per connection
        in a transaction of its own (a batch rolled back must not take it along)."""
        if self._staged_on is conn:
            return
        with conn.transaction():
            conn.execute(
                sql.SQL(
                    """CREATE TEMP TABLE IF NOT EXISTS {} (change_key text, tname text, subtype text, person_id bigint,
                   pkey_string text, pkey_number bigint, aux_string text, state jsonb, last_commit_lsn bigint,
                   lsn bigint) ON COMMIT DELETE ROWS"""
                ).format(self.STAGING)
            )
        self._staged_on = conn

    @property
    def _copy_staging(self) -> sql.Composed:
        return sql.SQL("COPY {} FROM STDIN").format(self.STAGING)

    @property
    def _merge_staging(self) -> sql.Composed:
        return self._upsert_from(sql.SQL("SELECT * FROM {}").format(self.STAGING))

    @property
    def _delete_many(self) -> sql.Composed:
        """The deletes of a batch as one statement: arrays of keys, commit LSNs and LSNs."""
        return sql.SQL(
            """DELETE FROM {} AS t USING unnest(%s::text[], %s::bigint[], %s::bigint[]) AS d(k, c, l)
               WHERE t.change_key = d.k AND (t.last_commit_lsn, t.lsn) <= (d.c, d.l)"""
        ).format(self.table)

    @property
    def _delete(self) -> sql.Composed:
        return sql.SQL("DELETE FROM {} WHERE change_key = %s AND (last_commit_lsn, lsn) <= (%s, %s)").format(self.table)

    @property
    def _upsert(self) -> sql.Composed:
        return self._upsert_from(sql.SQL("VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"))

    def _upsert_from(self, rows: sql.Composable) -> sql.Composed:
        """Insert ``rows`` (VALUES or a SELECT of the columns in order); a key's row is
        replaced only by a change not older than the one it holds."""
        return sql.SQL(
            """INSERT INTO {t} AS t (change_key, tname, subtype, person_id, pkey_string, pkey_number,
                   aux_string, state, last_commit_lsn, lsn)
               {rows}
               ON CONFLICT (change_key) DO UPDATE SET state = EXCLUDED.state,
                   last_commit_lsn = EXCLUDED.last_commit_lsn, lsn = EXCLUDED.lsn, applied_at = now()
               WHERE (t.last_commit_lsn, t.lsn) <= (EXCLUDED.last_commit_lsn, EXCLUDED.lsn)"""
        ).format(t=self.table, rows=rows)

    @staticmethod
    def _upsert_row(change: Change) -> tuple[object, ...]:
        k = change.key
        return (
            k.text(), k.tname, k.subtype, k.person_id, k.pkey_string, k.pkey_number, k.aux_string,
            jsontext.dumps(change.after).decode() if change.after is not None else None,
            change.position.last_commit_lsn, change.position.lsn,
        )  # fmt: skip

    def _apply_one(self, conn: Connection, change: Change) -> None:
        if change.change_type == "DELETE":
            conn.execute(self._delete, (change.key.text(), change.position.last_commit_lsn, change.position.lsn))
        else:
            conn.execute(self._upsert, self._upsert_row(change))

    # ------------------------------------------------------------------ read back (mcq reconcile)

    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        """A row per key in the listener's view, holding the columns it may see."""
        return rows_in_view(view, states)

    def read_back(self) -> dict[str, Any]:
        conn = self.target.connection()
        out: dict[str, Any] = {}
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = 0")  # a whole table, not one change
            out.update(self._rows(conn))
        return out

    def _rows(self, conn: Connection) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with conn.cursor(name="mcq_read_back") as cur:
            cur.itersize = 10_000
            cur.execute(sql.SQL("SELECT change_key, state FROM {}").format(self.table))
            for key, state in cur:
                out[str(key)] = state
        return out

    def keys_of(self, obj: str) -> list[ChangeKey]:
        return [ChangeKey.from_text(obj)]

    # ------------------------------------------------------------------ read back by Spark (mcq reconcile)

    def jdbc_options(self) -> dict[str, str] | None:
        """The target's database for Spark's JDBC reader (URL, user, password, driver);
        None when its ``dsn`` names what the JDBC driver cannot reach the same way."""
        if self.settings.dsn is not None:
            return jdbc_options_from_dsn(self.settings.dsn.get_secret_value())
        return self.mcq_settings.database(self.settings.database).jdbc_options()

    def read_back_query(self) -> str:
        """Each row's key (``change_key``), its state as JSON text (``state``) and whether
        that state is an object of strings and nulls (``plain``), as a change's state is:
        anything else (a number, a nested object, SQL NULL) cannot equal one."""
        return (
            sql.SQL(
                "SELECT change_key, state::text AS state, jsonb_typeof(state) = 'object' AND NOT EXISTS "
                "(SELECT 1 FROM jsonb_each(state) AS e WHERE jsonb_typeof(e.value) NOT IN ('string', 'null')) AS plain "
                "FROM {}"
            )
            .format(self.table)
            .as_string()
        )

    def blocks(self) -> int:
        """The table's size in blocks (how many ranges a parallel read takes)."""
        conn = self.target.connection()
        with conn.transaction():
            found = conn.execute(
                "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int", (self.settings.table,)
            ).fetchone()
        return int(str(found[0])) if found else 0

    # ------------------------------------------------------------------ bulk load (mcq rebuild)

    COPY_COLUMNS = (
        "change_key", "tname", "subtype", "person_id", "pkey_string", "pkey_number", "aux_string", "state",
        "last_commit_lsn", "lsn",
    )  # fmt: skip
    """The columns of the CSV a rebuild loads, in this order (``state``: the row as JSON)."""

    def load_csv(self, chunks: Iterable[bytes], truncate: bool) -> int:
        """Make the table hold exactly the rows of ``chunks`` (CSV of :attr:`COPY_COLUMNS`),
        in one transaction: TRUNCATE and COPY (readers wait until it commits), or COPY into
        a staging table and merge (readers see the old rows until it commits). The number
        of rows loaded."""
        conn = self.target.connection()
        columns = sql.SQL(", ").join(map(sql.Identifier, self.COPY_COLUMNS))
        staging = sql.Identifier("mcq_rebuild")
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET LOCAL statement_timeout = 0")  # a whole table, not one change
                if truncate:
                    cur.execute(sql.SQL("TRUNCATE {}").format(self.table))
                else:
                    cur.execute(sql.SQL("CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP").format(
                        staging, self.table))  # fmt: skip
                into = self.table if truncate else staging
                with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(into, columns)) as copy:
                    for chunk in chunks:
                        copy.write(chunk)
                loaded = cur.rowcount
                if not truncate:
                    cur.execute(sql.SQL(
                        "DELETE FROM {t} t WHERE NOT EXISTS (SELECT 1 FROM {s} s WHERE s.change_key = t.change_key)"
                    ).format(t=self.table, s=staging))  # fmt: skip
                    updates = sql.SQL(", ").join(
                        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in self.COPY_COLUMNS[1:]
                    )
                    cur.execute(sql.SQL(
                        "INSERT INTO {t} ({cols}) SELECT {cols} FROM {s} "
                        "ON CONFLICT (change_key) DO UPDATE SET {updates}, applied_at = now()"
                    ).format(t=self.table, cols=columns, s=staging, updates=updates))  # fmt: skip
        except psycopg.OperationalError as exc:
            self.target.close()
            raise TargetUnavailable(f"table {self.settings.table}: {first_line(exc)}") from None
        return loaded
