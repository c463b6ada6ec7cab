"""Value expressions of target mappings: the rule language (mcq.registry.rules) extended
with values, so that a mapping computes an attribute or a column from an entity::

    lower(first_name) || '.' || lower(last_name)
    default(nickname, first_name)
    CASE WHEN status.code = 'active' THEN 512 ELSE 514 END
    lookup('titles', kind, 'Staff')
    format_date(born, '%Y%m%d')
    dn('uid', login, 'ou=people,dc=example,dc=org')
    postal(street, concat(city, ', ', state, ' ', postal_code), country)

Names are the entity's fields (``customer.country``; inside an ``each`` over a to-many
join, the item's fields). ``a || b`` is SQL's concatenation (NULL when either side is);
``concat(a, b, ...)`` reads NULL as the empty string. Every predicate of the rule
language is an expression too (a boolean). Functions are a fixed set (:data:`FUNCTIONS`):
no ``eval``, no attribute access, nothing but the data. A parse error, an unknown
function, a wrong number of arguments or an unknown lookup table is found when the
registry is validated, at the mapping's line.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from lark import Lark, Token, v_args

from mcq.registry.exceptions import RuleSyntaxError
from mcq.registry.rules import (
    _OPS,
    TERMINALS,
    And,
    Compare,
    Const,
    Field,
    In,
    IsNull,
    Like,
    Node,
    Not,
    Or,
    _comparable,
    _like,
    _ToTree,
    parse_tree,
)

GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*      -> or_
?and_expr: not_expr (_AND not_expr)*    -> and_
?not_expr: _NOT not_expr                -> not_
         | predicate
?predicate: sum COMP_OP sum                           -> compare
          | sum _IS _NULL                             -> is_null
          | sum _IS _NOT _NULL                        -> is_not_null
          | sum _IN "(" sum ("," sum)* ")"            -> in_
          | sum _NOT _IN "(" sum ("," sum)* ")"       -> not_in
          | sum _LIKE sum                             -> like
          | sum _NOT _LIKE sum                        -> not_like
          | sum
?sum: atom ("||" atom)+                 -> concat
    | atom
?atom: FUNC "(" [or_expr ("," or_expr)*] ")"  -> call
     | _CASE (_WHEN or_expr _THEN or_expr)+ [_ELSE or_expr] _END -> case
     | NAME      -> field
     | STRING    -> string
     | NUMBER    -> number
     | _TRUE     -> true
     | _FALSE    -> false
     | _NULL     -> null
     | "(" or_expr ")"

_CASE.2: /case\b/i
_WHEN.2: /when\b/i
_THEN.2: /then\b/i
_ELSE.2: /else\b/i
_END.2: /end\b/i
FUNC.3: /[a-z_][a-z0-9_]*(?=\s*\()/
"""


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Concat:
    parts: tuple[Expr, ...]


@dataclass(frozen=True)
class Case:
    whens: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr | None


Expr = Node | Call | Concat | Case


@v_args(inline=True)
class _ToExpr(_ToTree):
    def call(self, name: Token, *args: Expr | None) -> Expr:
        return Call(str(name), tuple(a for a in args if a is not None))

    def concat(self, *parts: Expr) -> Expr:
        return Concat(parts)

    def case(self, *parts: Expr | None) -> Expr:
        items = list(parts)
        otherwise = items.pop() if len(items) % 2 else None
        return Case(tuple(zip(items[0::2], items[1::2], strict=True)), otherwise)  # type: ignore[arg-type]


@lru_cache(maxsize=1)
def _parser() -> Lark:
    """The grammar's LALR parser, built on the first parse (about 40 ms: a command that
    parses none, ``mcq listen`` of a registry without any, does not wait for it)."""
    return Lark(GRAMMAR + TERMINALS, parser="lalr", maybe_placeholders=True)


@dataclass(frozen=True)
class Expression:
    """A parsed value expression."""

    text: str
    tree: Expr

    def fields(self) -> frozenset[str]:
        return frozenset(f.name for f in _walk(self.tree, Field))

    def calls(self) -> list[Call]:
        return list(_walk(self.tree, Call))

    def value(self, values: Mapping[str, Any], lookups: Mapping[str, Mapping[str, str]] | None = None) -> Any:
        """The expression's value over ``values`` (a flat mapping of names); ValueError with
        the reason when a function cannot compute it (a date that is not one)."""
        return _value(self.tree, values, lookups or {})


@lru_cache(maxsize=1024)
def parse_expression(text: str) -> Expression:
    """Parse an expression; a syntax error names the column and what was expected."""
    return Expression(text, _ToExpr().transform(parse_tree(_parser(), text)))


def _walk(node: Expr, kind: type) -> list[Any]:
    found: list[Any] = [node] if isinstance(node, kind) else []
    match node:
        case Compare(_, left, right):
            children: list[Expr] = [left, right]
        case IsNull(operand) | Not(operand):
            children = [operand]
        case In(operand, options):
            children = [operand, *options]
        case Like(operand, pattern):
            children = [operand, pattern]
        case And(parts) | Or(parts) | Concat(parts):
            children = list(parts)
        case Call(_, args):
            children = list(args)
        case Case(whens, otherwise):
            children = [x for pair in whens for x in pair] + ([otherwise] if otherwise is not None else [])
        case _:
            children = []
    for child in children:
        found += _walk(child, kind)
    return found


# ---------------------------------------------------------------------------- evaluation


def text(value: Any) -> str | None:
    """A value as the text a target stores: NULL stays None, a boolean is LDAP's TRUE/FALSE,
    a whole float has no decimals."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _value(node: Expr, values: Mapping[str, Any], lookups: Mapping[str, Mapping[str, str]]) -> Any:
    match node:
        case Field(name):
            return values.get(name)
        case Const(value):
            return value
        case Concat(parts):
            items = [text(_value(p, values, lookups)) for p in parts]
            return None if any(i is None for i in items) else "".join(items)  # type: ignore[arg-type]
        case Case(whens, otherwise):
            for condition, result in whens:
                if truth(_value(condition, values, lookups)):
                    return _value(result, values, lookups)
            return None if otherwise is None else _value(otherwise, values, lookups)
        case Call(name, args):
            if name == "lookup":  # the table by name, not a value
                return _lookup(lookups, *(_value(a, values, lookups) for a in args))
            if name == "if":
                cond, then, *other = args
                chosen = then if truth(_value(cond, values, lookups)) else (other[0] if other else None)
                return None if chosen is None else _value(chosen, values, lookups)
            return FUNCTIONS[name][2](*(_value(a, values, lookups) for a in args))
        case Compare(op, left, right):
            a, b = _value(left, values, lookups), _value(right, values, lookups)
            if a is None or b is None:
                return False
            a, b = _comparable(a, b)
            try:
                return bool(_OPS[op](a, b))
            except TypeError:
                return False
        case IsNull(operand):
            return _value(operand, values, lookups) in (None, "")
        case In(operand, options):
            v = _value(operand, values, lookups)
            return v is not None and any(_OPS["="](*_comparable(v, _value(o, values, lookups))) for o in options)
        case Like(operand, pattern):
            v, p = _value(operand, values, lookups), _value(pattern, values, lookups)
            return isinstance(v, str) and isinstance(p, str) and _like(v, p)
        case Not(operand):
            return not truth(_value(operand, values, lookups))
        case And(parts):
            return all(truth(_value(p, values, lookups)) for p in parts)
        case Or(parts):
            return any(truth(_value(p, values, lookups)) for p in parts)
    raise TypeError(node)  # pragma: no cover


def truth(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "f", "no", "n")
    return bool(value)


def _str(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A string function: NULL in, NULL out."""

    def wrapped(value: Any, *args: Any) -> Any:
        return None if value is None else fn(text(value), *args)

    return wrapped


def _lookup(lookups: Mapping[str, Mapping[str, str]], table: Any, key: Any, fallback: Any = None) -> Any:
    found = lookups.get(str(table))
    if found is None:
        raise ValueError(f"lookup: no table {table!r}")
    k = text(key)
    return found.get(k, fallback) if k is not None else fallback


def _date(value: Any) -> datetime:
    """A date or timestamp as captured: ISO text, or Debezium's numbers (days since the
    epoch for a date, milliseconds or microseconds for a timestamp)."""
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.lstrip("-").isdigit()):
        n = int(value)
        if abs(n) < 1_000_000:
            return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=n)
        return datetime.fromtimestamp(n / (1000 if abs(n) < 10**14 else 1_000_000), UTC)
    s = str(value).strip().replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"format_date: {value!r} is not a date") from None
    if isinstance(parsed, datetime):
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.combine(parsed, datetime.min.time(), UTC)  # pragma: no cover


def _format_date(value: Any, fmt: Any) -> str | None:
    if value in (None, ""):
        return None
    moment = _date(value)
    if fmt == "ad":  # Active Directory's FILETIME: 100 ns intervals since 1601-01-01
        return str(int((moment - datetime(1601, 1, 1, tzinfo=UTC)).total_seconds()) * 10_000_000)
    if fmt == "generalized":  # LDAP's GeneralizedTime
        return moment.astimezone(UTC).strftime("%Y%m%d%H%M%SZ")
    return moment.strftime(str(fmt))


def _substr(value: str, start: Any, length: Any = None) -> str:
    begin = max(int(start) - 1, 0)
    return value[begin:] if length is None else value[begin : begin + int(length)]


def _split_part(value: str, sep: Any, n: Any) -> str | None:
    parts = value.split(str(sep))
    return parts[int(n) - 1] if 0 < int(n) <= len(parts) else None


def _ascii(value: str) -> str:
    return unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode()


def _dn(attribute: Any, value: Any, container: Any) -> str | None:
    from ldap3.utils.dn import escape_rdn  # the core loads no LDAP client until a DN is made

    if value in (None, ""):
        return None
    return f"{attribute}={escape_rdn(str(text(value)))},{container}"


def _postal(*lines: Any) -> str:
    """An RFC 4517 postalAddress: the lines joined by ``$`` (a ``$`` inside a line becomes a
    space), each trimmed, a line of nothing but blanks and commas left out."""
    texts = [text(line) or "" for line in lines]
    return "$".join(t.strip().replace("$", " ") for t in texts if t.strip(" ,"))


def _default(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "")), None)


def _concat(*values: Any) -> str:
    return "".join(text(v) or "" for v in values)


FUNCTIONS: dict[str, tuple[int, int, Callable[..., Any]]] = {
    # name: (fewest arguments, most arguments (-1: any), the function)
    "lower": (1, 1, _str(str.lower)),
    "upper": (1, 1, _str(str.upper)),
    "trim": (1, 1, _str(str.strip)),
    "ascii": (1, 1, _str(_ascii)),
    "length": (1, 1, _str(len)),
    "substr": (2, 3, _str(_substr)),
    "left": (2, 2, _str(lambda s, n: s[: int(n)])),
    "right": (2, 2, _str(lambda s, n: s[-int(n) :] if int(n) else "")),
    "replace": (3, 3, _str(lambda s, a, b: s.replace(str(a), "" if b is None else str(b)))),
    "split_part": (3, 3, _str(_split_part)),
    "concat": (1, -1, _concat),
    "default": (2, -1, _default),
    "format_date": (2, 2, _format_date),
    "dn": (3, 3, _dn),
    "postal": (1, -1, _postal),
    "lookup": (2, 3, _lookup),  # evaluated with the mapping's lookup tables
    "if": (2, 3, _default),  # evaluated lazily (see _value)
}


def expression_problems(text_: str, fields: set[str] | None, lookups: Mapping[str, Any]) -> list[str]:
    """What is wrong with an expression against the fields it may read (None: any) and the
    mapping's lookup tables; empty when nothing is."""
    try:
        expr = parse_expression(text_)
    except RuleSyntaxError as exc:
        return [str(exc)]
    out: list[str] = []
    for call in expr.calls():
        spec = FUNCTIONS.get(call.name)
        if spec is None:
            out.append(f"{text_!r}: no function {call.name}() (there are: {', '.join(sorted(FUNCTIONS))})")
            continue
        low, high, _ = spec
        if len(call.args) < low or (high >= 0 and len(call.args) > high):
            want = f"{low}" if low == high else f"{low} or more" if high < 0 else f"{low} to {high}"
            out.append(f"{text_!r}: {call.name}() takes {want} arguments, not {len(call.args)}")
        first = call.args[0] if call.args else None
        if call.name == "lookup" and isinstance(first, Const) and str(first.value) not in lookups:
            out.append(f"{text_!r}: lookup table {first.value!r} is not in the mapping's lookups")
    if fields is not None:
        for name in sorted(expr.fields() - fields):
            out.append(f"{text_!r}: the entity has no field {name}")
    return out


__all__ = [
    "FUNCTIONS", "Call", "Case", "Concat", "Const", "Expr", "Expression", "Field", "expression_problems",
    "parse_expression", "text", "truth",
]  # fmt: skip
