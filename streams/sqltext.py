"""Column expressions written as Spark SQL text, with the shape of pyspark's ``Column`` API.

Why: every pyspark ``Column`` operation is a py4j round trip to the JVM. The normaliser's
projections (every feed's records, the withheld reasons, the outbox) are thousands of
them: 6 s of every normaliser start for the campus registry, before any query is built.
Written with these instead and handed to Spark as one ``F.expr`` per raw topic, the same
expressions cost one call each; Spark's SQL parser builds the same expression tree the
``Column`` calls would have (``CASE WHEN`` for ``when``, ``named_struct`` for ``struct``,
``<=>`` for ``eqNullSafe``...).

Only what the normaliser uses is here, and nothing touches Spark: ``to_column`` is the
one place a ``pyspark`` ``Column`` is made. Literals are quoted and escaped, names
back-quoted, so a registry's table and column names cannot change an expression's meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


class Sql:
    """One SQL expression (``text``), with the name ``alias`` gave it (a struct field)."""

    __slots__ = ("name", "text")

    def __init__(self, text: str, name: str | None = None) -> None:
        self.text = text
        self.name = name

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Sql({self.text!r})"

    # pyspark's operators: & | ~ == != >=
    def __and__(self, other: Sql) -> Sql:
        return Sql(f"({self} AND {other})")

    def __or__(self, other: Sql) -> Sql:
        return Sql(f"({self} OR {other})")

    def __invert__(self) -> Sql:
        return Sql(f"(NOT {self})")

    def __eq__(self, other: object) -> Sql:  # type: ignore[override]  # an expression, as pyspark's
        return Sql(f"({self} = {_sql(other)})")

    def __ne__(self, other: object) -> Sql:  # type: ignore[override]
        return Sql(f"({self} != {_sql(other)})")

    def __ge__(self, other: object) -> Sql:
        return Sql(f"({self} >= {_sql(other)})")

    __hash__ = None  # type: ignore[assignment]  # == builds an expression: not a dict key

    def eqNullSafe(self, other: object) -> Sql:  # pyspark's names, as the normaliser calls them
        return Sql(f"({self} <=> {_sql(other)})")

    def isNull(self) -> Sql:
        return Sql(f"({self} IS NULL)")

    def isNotNull(self) -> Sql:
        return Sql(f"({self} IS NOT NULL)")

    def isin(self, *values: object) -> Sql:
        return Sql(f"({self} IN ({', '.join(_sql(v) for v in values)}))")

    def contains(self, other: object) -> Sql:
        return Sql(f"contains({self}, {_sql(other)})")

    def startswith(self, other: object) -> Sql:
        return Sql(f"startswith({self}, {_sql(other)})")

    def getItem(self, key: str | int) -> Sql:
        return Sql(f"{self}[{_sql(key)}]")

    def cast(self, type_: str) -> Sql:
        return Sql(f"CAST({self} AS {type_})")

    def try_cast(self, type_: str) -> Sql:
        """``TRY_CAST``: NULL where the value cannot be read as ``type_`` (``CAST`` fails the query)."""
        return Sql(f"TRY_CAST({self} AS {type_})")

    def alias(self, name: str) -> Sql:
        return Sql(self.text, name)


class When(Sql):
    """``CASE WHEN ... END`` being built: ``when`` adds a branch, ``otherwise`` ends it."""

    __slots__ = ("branches",)

    def __init__(self, branches: list[tuple[Sql, Sql]]) -> None:
        self.branches = branches
        super().__init__(self._case(""))

    def _case(self, tail: str) -> str:
        return "CASE " + " ".join(f"WHEN {c} THEN {v}" for c, v in self.branches) + tail + " END"

    def when(self, condition: Sql, value: object) -> When:
        return When([*self.branches, (condition, lit_or(value))])

    def otherwise(self, value: object) -> Sql:
        return Sql(self._case(f" ELSE {_sql(value)}"))


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _sql(value: object) -> str:
    if isinstance(value, Sql):
        return value.text
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)
    if isinstance(value, str):
        return _quote(value)
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def lit_or(value: object) -> Sql:
    return value if isinstance(value, Sql) else Sql(_sql(value))


def lit(value: str | int | bool | None) -> Sql:
    return Sql(_sql(value))


def col(path: str) -> Sql:
    """A column, or a struct's field (``e.before``): every part back-quoted."""
    return Sql(".".join("`" + part.replace("`", "``") + "`" for part in path.split(".")))


def when(condition: Sql, value: object) -> When:
    return When([(condition, lit_or(value))])


def _call(name: str, *args: object) -> Sql:
    return Sql(f"{name}({', '.join(_sql(a) for a in args)})")


def struct(*fields: Sql) -> Sql:
    """``named_struct``: every field named with ``alias``."""
    if any(f.name is None for f in fields):
        raise ValueError("struct: every field needs a name (alias)")
    pairs = (f"{_quote(f.name or '')}, {f}" for f in fields)
    return Sql(f"named_struct({', '.join(pairs)})")


def array(*items: Sql) -> Sql:
    return _call("array", *items)


def concat(*items: Sql) -> Sql:
    return _call("concat", *items)


def concat_ws(separator: str, *items: Sql) -> Sql:
    return _call("concat_ws", separator, *items)


def upper(value: Sql) -> Sql:
    return _call("upper", value)


def coalesce(*items: Sql) -> Sql:
    return _call("coalesce", *items)


def from_json(value: Sql, schema: str) -> Sql:
    """``from_json(value, schema)``: NULL when the text is not JSON of that shape."""
    return _call("from_json", value, lit(schema))


def map_contains_key(column: Sql, key: str) -> Sql:
    return _call("map_contains_key", column, key)


def map_keys(column: Sql) -> Sql:
    return _call("map_keys", column)


def array_join(column: Sql, separator: str) -> Sql:
    return _call("array_join", column, separator)


def map_filter(column: Sql, keep: Callable[[Sql, Sql], Sql]) -> Sql:
    """``map_filter(m, (k, v) -> ...)``; the lambda's names cannot clash with a column's."""
    k, v = Sql("mcq_lambda_k"), Sql("mcq_lambda_v")
    return Sql(f"map_filter({column}, ({k}, {v}) -> {keep(k, v)})")


def to_column(expression: Sql) -> Column:
    """The pyspark ``Column`` of an expression: one call to Spark's SQL parser."""
    from pyspark.sql import functions as F

    return F.expr(expression.text)
