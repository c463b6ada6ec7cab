"""Push_Person into a vendor's import table (the MCQ paper's Figures 3 and 4).

A change to any aspect of a person (or to a department people belong to) pushes the
person's whole current record, assembled from the listener's :class:`StateStore`:
name from PERSON/PEOPLE, status from PERSON/Status, department and title from
PERSON/Dir_Orgn and DEPARTMENT. The row goes into the import table; the vendor's
trigger inserts or updates its own table, or raises, and then the change fails with the
database's message (retried, then dead-lettered). Pushing the current state makes a
repeated delivery harmless. A deleted person is pushed once more without a status (the
trigger records ``Former-<status>``), with the names from the delete's before image --
or, when compaction left only the tombstone (a daily listener that catches up late), from
the last row pushed for that person into the import table, which is ours. A person never
pushed (or whose rows were flushed) has nothing at the vendor to mark as former.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

from consumers.adapter import ReadBack
from consumers.exceptions import AdapterError, ChangeFailed, TargetUnavailable
from consumers.postgres import Connection, PgTarget, first_line
from consumers.projected import ProjectedAdapter
from consumers.projection import IndexedState
from consumers.sql_import.settings import SqlImportSettings
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry.model import Listener

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView

PERSON = "PERSON/PEOPLE"
STATUS = "PERSON/Status"
ORGN = "PERSON/Dir_Orgn"
DEPARTMENT = "DEPARTMENT"


class SqlImportAdapter(ProjectedAdapter, ReadBack):
    kind = "sql_import"
    settings_model = SqlImportSettings
    settings: SqlImportSettings
    needs_state: ClassVar[tuple[str, ...]] = (PERSON, STATUS, ORGN, DEPARTMENT)

    def __new__(cls, listener: Listener, settings: Settings) -> SqlImportAdapter:
        """A listener that declares its ``rows`` gets the mapped adapter (consumers/sql_import/mapped.py)."""
        if cls is SqlImportAdapter and listener.adapter.settings.get("rows") is not None:
            from consumers.sql_import.mapped import MappedImportAdapter

            return super().__new__(MappedImportAdapter)
        return super().__new__(cls)

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        s = self.settings
        self.table = sql.SQL("{}.{}").format(sql.Identifier(s.vendor_schema), sql.Identifier(s.table))
        self.target = PgTarget(
            f"import table {s.vendor_schema}.{s.table}", settings, s.database, s.dsn, s.statement_timeout_ms,
            self._setup,
        )  # fmt: skip

    def _setup(self, conn: Connection) -> None:
        s = self.settings
        found = conn.execute("SELECT to_regclass(%s)", (f"{s.vendor_schema}.{s.table}",)).fetchone()
        if found and found[0] is not None:
            return
        script = s.install_path()
        if script is None:
            raise TargetUnavailable(f"import table {s.vendor_schema}.{s.table} does not exist (and no install script)")
        conn.execute(script.read_text().replace("insite.", f"{s.vendor_schema}.").replace(  # type: ignore[arg-type]
            "SCHEMA IF NOT EXISTS insite", f"SCHEMA IF NOT EXISTS {s.vendor_schema}"
        ))  # fmt: skip

    def open(self) -> None:
        self.open_store()
        self.target.connection()

    def close(self) -> None:
        self.target.close()
        self.close_store()

    def ready(self) -> bool:
        return self.target.ready()

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        if self.store is None:
            self.open()
        assert self.store is not None
        self.store.catch_up(changes)  # at least as new as every change of the batch
        positions = self.store.positions()
        outcomes = self._push_all(changes) if len(changes) > 1 else None
        if outcomes is None:  # one by one: a refused person fails only the changes that touch them
            self._pushed: dict[int, int] = {}  # person -> id(change) that pushed them: one push per batch is enough
            self._refused: dict[int, str] = {}  # id(change) -> the first refusal among its people
            outcomes = self.target.apply_batch(changes, self._push)
        for i, change in enumerate(changes):
            if outcomes[i] is None and id(change) in self._refused:
                outcomes[i] = ChangeFailed(f"{change.where} {change.key}: {self._refused[id(change)]}")
        committed = {id(c) for c, outcome in zip(changes, outcomes, strict=True) if outcome is None}
        for person_id, pushed_by in self._pushed.items():
            if pushed_by in committed:  # only a push that is in the database now
                self.written.wrote(str(person_id), positions)
        return outcomes

    def people_of(self, change: Change) -> list[int]:
        """Whose record a change touches."""
        assert self.store is not None
        if change.key.person_id is not None:
            return [change.key.person_id]
        if change.key.tname == DEPARTMENT and change.key.pkey_number is not None:
            dept = str(change.key.pkey_number)
            return sorted({int(r["person_id"] or 0) for r in self.store.keyed(ORGN, pkey_number=dept)})
        return []  # space data (buildings, floors, rooms) has no person record to push

    def record(self, person_id: int, change: Change, conn: Connection | None = None) -> dict[str, str | None] | None:
        """The import row of a person now; None when there is no person to push."""
        assert self.store is not None
        person = self.store.row(PERSON, person_id)
        status_row = self.store.row(STATUS, person_id)
        if person is None:
            if change.key.ref != PERSON or change.change_type != "DELETE":
                return None  # not (or no longer) a person: nothing the vendor could hold
            person = change.before or (self._last_pushed(conn, person_id) if conn is not None else None)
            if person is None and conn is not None:
                person = self._vendor_names(conn, person_id)  # a row we never pushed (a stray one)
            if person is None:
                return None  # never pushed: the vendor holds nothing to mark as former
            status_row = None  # deleted: pushed once more, without a status
        orgns = sorted(self.store.rows(ORGN, person_id), key=lambda r: int(r.get("dept_id") or 0))
        orgn = title = None
        if orgns:
            title = orgns[0].get("title")
            dept = self.store.keyed(DEPARTMENT, pkey_number=orgns[0].get("dept_id") or "")
            orgn = dept[0].get("name") if dept else None
        return {
            "spriden_id": str(person_id),
            "lastname": person.get("last_name"),
            "firstname": person.get("first_name"),
            "status": status_row.get("status") if status_row else None,
            "orgn": orgn,
            "title": title,
        }

    def _last_pushed(self, conn: Connection, person_id: int) -> dict[str, str | None] | None:
        """The names of the last row pushed for a person (a delete that is only a tombstone)."""
        found = conn.execute(
            sql.SQL("SELECT lastname, firstname FROM {} WHERE spriden_id = %s ORDER BY import_id DESC LIMIT 1").format(
                self.table
            ),
            (str(person_id),),
        ).fetchone()
        return {"last_name": str(found[0]) if found[0] is not None else None,
                "first_name": str(found[1]) if found[1] is not None else None} if found else None  # fmt: skip

    @property
    def _insert(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {} (spriden_id, lastname, firstname, status, orgn, title, mcq_key, "
            "mcq_position) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        ).format(self.table)

    def _push_all(self, changes: Sequence[Change]) -> list[AdapterError | None] | None:
        """The whole batch's pushes in one transaction and one pipelined ``executemany``
        (a savepoint and an insert per person cost three round trips each); None when the
        database refused any of them (a vendor rule), so that the batch is pushed again
        one by one and only the changes of the refused people fail."""
        try:
            conn = self.target.connection()
        except TargetUnavailable as exc:
            return [exc] * len(changes)
        pushed: dict[int, int] = {}
        rows: list[tuple[str | None, ...]] = []
        skipped = 0
        try:
            with conn.transaction():  # first: a record may read the import table (a tombstoned person)
                for change in changes:
                    for person_id in self.people_of(change):
                        if person_id in pushed:
                            continue
                        if self.written.reflected(str(person_id), change):
                            skipped += 1
                            continue
                        row = self.record(person_id, change, conn)
                        if row is not None:
                            rows.append((*row.values(), change.key.text(), str(change.position)))
                            pushed[person_id] = id(change)
                if rows:
                    with conn.cursor() as cur:
                        cur.executemany(self._insert, rows)
        except psycopg.Error:
            if conn.broken:
                self.target.close()
            return None
        self._pushed, self._refused = pushed, {}
        self.skipped += skipped
        return [None] * len(changes)

    def _push(self, conn: Connection, change: Change) -> None:
        # one savepoint per person: a department's change reaches its other members even when
        # the vendor refuses one of them (that one fails the change: retried, dead-lettered)
        for person_id in self.people_of(change):
            if person_id in self._pushed:
                continue
            if self.written.reflected(str(person_id), change):
                self.skipped += 1
                continue
            row = self.record(person_id, change, conn)
            if row is None:
                continue
            try:
                with conn.transaction():
                    conn.execute(self._insert, (*row.values(), change.key.text(), str(change.position)))
            except psycopg.Error as exc:
                if conn.broken:
                    raise
                self._refused.setdefault(id(change), first_line(exc))
                continue
            self._pushed[person_id] = id(change)

    def _vendor_names(self, conn: Connection, person_id: int) -> dict[str, str | None] | None:
        """The names the vendor holds for a person we have no push of, through the read-back
        query (a row someone added by hand): enough to mark it as gone."""
        query = self._read_back_query()
        if query is None:
            return None
        found = conn.execute(
            # the query's own % (LIKE patterns) are literal, not placeholders
            sql.SQL("SELECT lastname, firstname FROM ({}) AS r WHERE spriden_id = %s").format(
                sql.SQL(query.replace("%", "%%"))  # type: ignore[arg-type]
            ),
            (str(person_id),),
        ).fetchone()
        if found is None:
            return None
        return {"last_name": None if found[0] is None else str(found[0]),
                "first_name": None if found[1] is None else str(found[1])}  # fmt: skip

    # ------------------------------------------------------------------ read back (mcq reconcile)
    # objects: a person's number; content: the import row's fields as the vendor holds them

    FIELDS = ("lastname", "firstname", "status", "orgn", "title")

    def _read_back_query(self) -> str | None:
        path = self.settings.read_back_path()
        if path is None:
            return None
        text = path.read_text(encoding="utf-8").replace("insite.", f"{self.settings.vendor_schema}.")
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
        return "\n".join(lines).strip().rstrip(";")

    def unreadable(self) -> str | None:
        path = self.settings.read_back_path()
        if path is None:
            return "set adapter.settings.read_back to a query of what the vendor holds (examples/insite_read_back.sql)"
        if not path.is_file():
            return f"adapter.settings.read_back: {path} does not exist"
        return None

    def state_refs(self) -> tuple[str, ...] | None:
        return self.needs_state

    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        from consumers.runtime.view import ViewState

        inner = IndexedState()
        for change in states:
            inner.put(change.key.ref, change.key, change.after, change.position)
        kept, self.store = self.store, ViewState(inner, view)  # type: ignore[arg-type]  # a store, read the same way
        out: dict[str, Any] = {}
        try:
            for key, _, _ in inner.entries(PERSON):
                if key.person_id is None:
                    continue
                probe = Change(key, "UPDATE", Position(0, 0), datetime.now(UTC), key.ref)
                record = self.record(key.person_id, probe)
                if record is not None:
                    status = record.get("status")
                    record["status"] = status[:24] if status else None  # what the vendor's column keeps
                    out[str(record.pop("spriden_id"))] = {f: record.get(f) for f in self.FIELDS}
        finally:
            self.store = kept
        return out

    def vendor_rows(self) -> Iterator[dict[str, Any]]:
        """The rows of the read-back query, as column -> value, with no statement timeout."""
        query = self._read_back_query()
        assert query is not None, "unreadable() first"
        conn = self.target.connection()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute(query)  # type: ignore[arg-type]
            names = [d.name for d in cur.description or []]
            for values in cur:
                yield dict(zip(names, values, strict=True))

    def read_back(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self._retired: set[str] = set()
        for row in self.vendor_rows():
            obj = str(row["spriden_id"])
            if row.get("retired"):
                self._retired.add(obj)
            out[obj] = {f: None if row.get(f) is None else str(row[f]) for f in self.FIELDS}
        return out

    def settled(self, obj: str) -> bool:
        return obj in getattr(self, "_retired", set())

    def keys_of(self, obj: str) -> list[ChangeKey]:
        return [ChangeKey("PERSON", "PEOPLE", int(obj))] if obj.isdigit() else []
