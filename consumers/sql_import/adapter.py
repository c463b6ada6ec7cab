"""Push records into a vendor's import table through a declared mapping
(mcq.registry.mappings.ImportMapping): each change's row -- an entity with its related
rows -- becomes one import row, with no Python.

The import table needs the mapped columns and ``mcq_key``, ``mcq_position`` (what pushed
each row). A change pushes its key's whole current record, so a repeated delivery is
harmless; the vendor's trigger inserts or updates its own table, or raises, and then the
change fails with the database's message (retried, then dead-lettered) while the rest of
the batch goes in. A row that is gone pushes the last record pushed for its key with the
``on_delete`` columns set anew (a vendor keeps a former person), or nothing when the
mapping has no ``on_delete``. A key mcq never pushed that the vendor holds (a row made by
hand, found through the read-back query) is pushed the same way, so that a repair marks
it as gone; one the vendor does not hold pushes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from psycopg import sql

from consumers.adapter import Adapter, KeyedBatch, ReadBack, states_in_view
from consumers.exceptions import AdapterError, ChangeRejected, TargetUnavailable
from consumers.postgres import Connection, PgTarget
from consumers.sql_import.settings import SqlImportSettings
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry.expressions import parse_expression
from mcq.registry.expressions import text as as_text
from mcq.registry.mappings import Each, ImportMapping, attribute_values
from mcq.registry.model import Listener

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView

Record = dict[str, str | None]


class SqlImportAdapter(Adapter, ReadBack):
    """The ``sql_import`` adapter: a listener's ``rows`` (mcq.registry.mappings) pushed into
    a vendor's import table."""

    kind = "sql_import"
    settings_model = SqlImportSettings
    settings: SqlImportSettings

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        s = self.settings
        self.rows: dict[str, ImportMapping] = dict(s.rows)
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
        conn.execute(script.read_text().replace("{schema}", s.vendor_schema))  # type: ignore[arg-type]

    def open(self) -> None:
        self.target.connection()

    def close(self) -> None:
        self.target.close()

    def ready(self) -> bool:
        return self.target.ready()

    # ------------------------------------------------------------------ records

    def record_of(self, change: Change) -> tuple[ImportMapping | None, Record | None]:
        """The mapping of a change's table and the record its row makes (None: the row is
        gone); ChangeRejected with the reason when the mapping fails for it."""
        mapping = self.rows.get(change.key.ref)
        if mapping is None or change.state is None:
            return mapping, None
        values: dict[str, Any] = {k: v for k, v in change.key.as_dict().items() if v is not None}
        values.update(change.state)
        try:
            return mapping, {name: _one(m, values) for name, m in mapping.columns.items()}
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ChangeRejected(f"{change.where} {change.key}: mapping: {exc}") from None

    def _gone_record(self, conn: Connection, mapping: ImportMapping, change: Change) -> Record | None:
        """What a row that is gone pushes: its last record, with ``on_delete`` set anew."""
        if mapping.on_delete is None:
            return None
        names = list(mapping.columns)
        found = conn.execute(
            sql.SQL("SELECT {}, mcq_position FROM {} WHERE mcq_key = %s").format(
                sql.SQL(", ").join(map(sql.Identifier, names)), self.table
            ),
            (change.key.text(),),
        ).fetchall()
        keys = {k: v for k, v in change.key.as_dict().items() if v is not None}
        record: Record | None
        if found:
            last = max(found, key=lambda r: _position(r[-1]))
            record = {n: None if v is None else str(v) for n, v in zip(names, last[:-1], strict=True)}
        else:  # never pushed by mcq: what the vendor holds of it, if anything (a row made by hand)
            record = self._vendor_record(conn, mapping, keys)
            if record is None:
                return None
        for name, text_ in mapping.on_delete.items():
            record[name] = as_text(parse_expression(text_).value(keys))
        return record

    def _vendor_record(self, conn: Connection, mapping: ImportMapping, keys: dict[str, Any]) -> Record | None:
        """The vendor's row of a key, through the read-back query, as the mapped columns
        (None: no read-back query, no key column, or no such row)."""
        query = self._read_back_query()
        field = mapping.columns.get(mapping.key_column or "")
        if query is None or mapping.key_column is None or not isinstance(field, str) or field.strip() not in keys:
            return None
        names = list(mapping.columns)
        found = conn.execute(
            # the query's own % (LIKE patterns) are literal, not placeholders
            sql.SQL("SELECT {} FROM ({}) AS r WHERE {}::text = %s").format(
                sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(query.replace("%", "%%")),  # type: ignore[arg-type]
                sql.Identifier(mapping.key_column),
            ),
            (str(keys[field.strip()]),),
        ).fetchone()
        return None if found is None else {n: None if v is None else str(v) for n, v in zip(names, found, strict=True)}

    def _insert_record(self, conn: Connection, record: Record, change: Change) -> None:
        names = list(record)
        conn.execute(
            sql.SQL("INSERT INTO {} ({}, mcq_key, mcq_position) VALUES ({}, %s, %s)").format(
                self.table,
                sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(", ").join(sql.Placeholder() * len(names)),
            ),
            (*record.values(), change.key.text(), str(change.position)),
        )

    # ------------------------------------------------------------------ writes

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        """Each key's record pushed once, as the batch's last change of it says, in one
        transaction; a record the vendor refuses, or the mapping cannot make, fails its
        key's changes alone."""
        batch = KeyedBatch(changes)
        failed = batch.failed
        pushes: list[Change] = []
        self._records: dict[int, tuple[ImportMapping, Record | None]] = {}
        for key, change in batch.last():
            try:
                mapping, record = self.record_of(change)
            except ChangeRejected as exc:
                failed[key] = exc
                continue
            if mapping is not None:
                self._records[id(change)] = (mapping, record)
                pushes.append(change)
        for change, result in zip(pushes, self.target.apply_batch(pushes, self._push), strict=True):
            if result is not None:
                failed[change.key.text()] = result
        return batch.outcomes()

    def _push(self, conn: Connection, change: Change) -> None:
        mapping, record = self._records[id(change)]
        if record is None:
            record = self._gone_record(conn, mapping, change)
            if record is None:
                return
        self._insert_record(conn, record, change)

    # ------------------------------------------------------------------ read back (mcq reconcile)
    # objects: the key column's value; content: the mapped columns as the vendor holds them

    def unreadable(self) -> str | None:
        if any(m.key_column is None for m in self.rows.values()):
            return "set key_column in each of adapter.settings.rows (the import column that names the row)"
        path = self.settings.read_back_path()
        if path is None:
            return "set adapter.settings.read_back to a query of what the vendor holds (examples/insite_read_back.sql)"
        if not path.is_file():
            return f"adapter.settings.read_back: {path} does not exist"
        return None

    def _read_back_query(self) -> str | None:
        path = self.settings.read_back_path()
        if path is None:
            return None
        text = path.read_text(encoding="utf-8").replace("{schema}", self.settings.vendor_schema)
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
        return "\n".join(lines).strip().rstrip(";")

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

    def state_refs(self) -> tuple[str, ...] | None:
        return None  # an object per key

    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for seen in states_in_view(view, states):
            try:
                mapping, record = self.record_of(seen)
            except ChangeRejected:
                continue  # dead-lettered: nothing the vendor can hold
            if mapping is None or record is None or mapping.key_column is None:
                continue
            obj = record.get(mapping.key_column)
            if obj is not None:
                out[f"{seen.key.ref} {obj}"] = {c: record.get(c) for c in mapping.columns if c != mapping.key_column}
        return out

    def read_back(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self._retired: set[str] = set()
        for row in self.vendor_rows():
            for ref, mapping in self.rows.items():
                if mapping.key_column is None or row.get(mapping.key_column) is None:
                    continue
                obj = f"{ref} {row[mapping.key_column]}"
                if row.get("retired"):
                    self._retired.add(obj)
                out[obj] = {c: None if row.get(c) is None else str(row[c]) for c in mapping.columns
                            if c != mapping.key_column}  # fmt: skip
        return out

    def settled(self, obj: str) -> bool:
        return obj in getattr(self, "_retired", set())

    def keys_of(self, obj: str) -> list[ChangeKey]:
        ref, _, value = obj.partition(" ")
        mapping = self.rows.get(ref)
        if mapping is None or mapping.key_column is None:
            return []
        field = str(mapping.columns[mapping.key_column]).strip()
        tname, _, subtype = ref.partition("/")
        key: Any = int(value) if field in ("person_id", "pkey_number") and value.lstrip("-").isdigit() else value
        return [ChangeKey(tname, subtype or None, **{field: key})]

    def preview(self, change: Change) -> str:
        import json

        mapping, record = self.record_of(change)
        if mapping is None:
            return f"(no row mapping for {change.key.ref})"
        if record is None:
            return json.dumps({"delete": "the last record pushed for this key, with on_delete", "on_delete":
                               mapping.on_delete}, indent=2)  # fmt: skip
        return json.dumps({"insert into": f"{self.settings.vendor_schema}.{self.settings.table}", "row": record},
                          indent=2, ensure_ascii=False)  # fmt: skip


def _one(mapped: str | Each, values: dict[str, Any]) -> str | None:
    """A column's value: an expression's, or an ``each``'s first."""
    found = attribute_values(mapped, values, {})
    return found[0] if found else None


def _position(text_: object) -> Position:
    try:
        return Position.parse(str(text_))
    except (ValueError, IndexError):
        return Position(-1, -1)
