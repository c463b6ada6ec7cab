"""Content rules on interests: a safe boolean expression over a change's fields.

The language is the SQL-like one of Oracle AQ's rule-based subscribers::

    orderregion = 'EASTERN' OR (ordertype = 'RUSH' AND country = 'USA')
    status IN ('Student', 'Employee') AND NOT tele_type = 'fax'
    change_type = 'delete' OR before.status IS NOT NULL
    email LIKE '%@campus.example'

Names are change fields (``tname``, ``subtype``, ``change_type``, ``person_id``,
``pkey_string``, ``pkey_number``, ``aux_string``), after-state columns by bare name, and
``before.<column>`` / ``after.<column>``; an entity's related fields by their path
(``customer.country``, ``owner.status.code``: mcq.registry.entities). A rule is parsed once (lark) into a small tree
of frozen nodes and evaluated by walking it: no ``eval``, no attribute access, no calls.
Comparisons with a missing or NULL value are false, as in SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, Tree, UnexpectedInput, v_args

from mcq.registry.exceptions import RuleSyntaxError

GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*      -> or_
?and_expr: not_expr (_AND not_expr)*    -> and_
?not_expr: _NOT not_expr                -> not_
         | predicate
?predicate: operand COMP_OP operand                      -> compare
          | operand _IS _NULL                             -> is_null
          | operand _IS _NOT _NULL                        -> is_not_null
          | operand _IN "(" operand ("," operand)* ")"    -> in_
          | operand _NOT _IN "(" operand ("," operand)* ")" -> not_in
          | operand _LIKE operand                         -> like
          | operand _NOT _LIKE operand                    -> not_like
          | "(" or_expr ")"
?operand: NAME      -> field
        | STRING    -> string
        | NUMBER    -> number
        | _TRUE     -> true
        | _FALSE    -> false
        | _NULL     -> null
"""

TERMINALS = r"""
COMP_OP: "<>" | "!=" | "<=" | ">=" | "=" | "<" | ">"
_OR.2: /or\b/i
_AND.2: /and\b/i
_NOT.2: /not\b/i
_IS.2: /is\b/i
_IN.2: /in\b/i
_LIKE.2: /like\b/i
_NULL.2: /null\b/i
_TRUE.2: /true\b/i
_FALSE.2: /false\b/i
NAME: /[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*/
STRING: /'([^']|'')*'/
NUMBER: /-?\d+(\.\d+)?/
%import common.WS
%ignore WS
"""
"""The words and literals of the language (mcq.registry.expressions adds its own)."""


@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Const:
    value: Any


@dataclass(frozen=True)
class Compare:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class IsNull:
    operand: Node


@dataclass(frozen=True)
class In:
    operand: Node
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Like:
    operand: Node
    pattern: Node


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class And:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Node, ...]


Node = Field | Const | Compare | IsNull | In | Like | Not | And | Or


@v_args(inline=True)
class _ToTree(Transformer[Token, Node]):
    def field(self, tok: Token) -> Node:
        return Field(str(tok))

    def string(self, tok: Token) -> Node:
        return Const(str(tok)[1:-1].replace("''", "'"))

    def number(self, tok: Token) -> Node:
        text = str(tok)
        return Const(float(text) if "." in text else int(text))

    def true(self) -> Node:
        return Const(True)

    def false(self) -> Node:
        return Const(False)

    def null(self) -> Node:
        return Const(None)

    def compare(self, left: Node, op: Token, right: Node) -> Node:
        return Compare("!=" if str(op) == "<>" else str(op), left, right)

    def is_null(self, operand: Node) -> Node:
        return IsNull(operand)

    def is_not_null(self, operand: Node) -> Node:
        return Not(IsNull(operand))

    def in_(self, operand: Node, *options: Node) -> Node:
        return In(operand, options)

    def not_in(self, operand: Node, *options: Node) -> Node:
        return Not(In(operand, options))

    def like(self, operand: Node, pattern: Node) -> Node:
        return Like(operand, pattern)

    def not_like(self, operand: Node, pattern: Node) -> Node:
        return Not(Like(operand, pattern))

    def not_(self, operand: Node) -> Node:
        return Not(operand)

    def and_(self, *parts: Node) -> Node:
        return parts[0] if len(parts) == 1 else And(parts)

    def or_(self, *parts: Node) -> Node:
        return parts[0] if len(parts) == 1 else Or(parts)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    """The grammar's LALR parser, built on the first parse (about 40 ms: a command that
    parses none, ``mcq listen`` of a registry without any, does not wait for it)."""
    return Lark(GRAMMAR + TERMINALS, parser="lalr", maybe_placeholders=False)


@dataclass(frozen=True)
class Rule:
    """A parsed content rule."""

    text: str
    tree: Node

    def fields(self) -> frozenset[str]:
        """Every name the rule reads."""
        return frozenset(_fields(self.tree))

    def matches(self, values: Mapping[str, Any]) -> bool:
        """Evaluate against a flat mapping of names (see :func:`change_values`)."""
        return bool(_eval(self.tree, values))


MAX_TEXT = 8192
"""The longest rule or expression accepted, in characters."""
MAX_DEPTH = 100
"""The deepest parse tree accepted, in grammar levels: about 45 nested parentheses, 90
NOTs or 30 nested calls. Far beyond any real rule, far below what would exhaust the
parser's or the evaluator's stack (a RecursionError is not a refusal)."""


def parse_tree(parser: Lark, text: str) -> Tree[Token]:
    """``text`` parsed by ``parser`` (the rule or the expression grammar), refused with a
    :class:`RuleSyntaxError` that names the column when it does not parse, is longer than
    :data:`MAX_TEXT` or nests deeper than :data:`MAX_DEPTH`."""
    if not isinstance(text, str):
        raise RuleSyntaxError(repr(text), 0, f"a rule is text, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise RuleSyntaxError(text[:80] + "...", MAX_TEXT, f"longer than {MAX_TEXT} characters")
    try:
        parsed = parser.parse(text)
    except UnexpectedInput as exc:
        expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ()
        names = sorted(str(e).lstrip("_") for e in expected)
        hint = f"expected one of {', '.join(names[:8])}" if names else "unexpected input"
        raise RuleSyntaxError(text, exc.column if isinstance(exc.column, int) else 0, hint) from None
    depth, column = _depth(parsed)
    if depth > MAX_DEPTH:
        raise RuleSyntaxError(text, column, f"nested too deep ({depth} grammar levels, at most {MAX_DEPTH})")
    return parsed


def _depth(tree: Tree[Token]) -> tuple[int, int]:
    """The deepest nesting of ``tree`` and the column where it is, walked without recursion."""
    deepest, column = 0, 0
    stack: list[tuple[Tree[Token] | Token, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Tree):
            stack.extend((child, depth + 1) for child in node.children if child is not None)
        elif depth > deepest:  # a token (an optional part left out is None: skipped above)
            deepest, column = depth, getattr(node, "column", None) or 0
    return deepest, column


@lru_cache(maxsize=1024)
def parse_rule(text: str) -> Rule:
    """Parse a rule; a syntax error names the column and what was expected."""
    return Rule(text, _ToTree().transform(parse_tree(_parser(), text)))


def change_values(
    fields: Mapping[str, Any], after: Mapping[str, Any] | None, before: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The names a rule sees for one change: change fields, after-state bare and prefixed, before-state prefixed."""
    values: dict[str, Any] = {}
    for k, v in (after or {}).items():
        values[k] = v
        values[f"after.{k}"] = v
    for k, v in (before or {}).items():
        values[f"before.{k}"] = v
    values.update(fields)  # change fields win over a column of the same name
    return values


def _fields(node: Node) -> list[str]:
    match node:
        case Field(name):
            return [name]
        case Const():
            return []
        case Compare(_, left, right):
            return _fields(left) + _fields(right)
        case IsNull(operand) | Not(operand):
            return _fields(operand)
        case In(operand, options):
            return _fields(operand) + [f for o in options for f in _fields(o)]
        case Like(operand, pattern):
            return _fields(operand) + _fields(pattern)
        case And(parts) | Or(parts):
            return [f for p in parts for f in _fields(p)]
    raise TypeError(node)  # pragma: no cover


def _value(node: Node, values: Mapping[str, Any]) -> Any:
    if isinstance(node, Field):
        return values.get(node.name)
    if isinstance(node, Const):
        return node.value
    return _eval(node, values)


def _comparable(a: Any, b: Any) -> tuple[Any, Any]:
    """Numbers compare as numbers even when one side arrived as a string (JSON, Avro)."""
    if isinstance(a, (int, float)) and isinstance(b, str):
        try:
            return a, float(b)
        except ValueError:
            return str(a), b
    if isinstance(a, str) and isinstance(b, (int, float)):
        b2, a2 = _comparable(b, a)
        return a2, b2
    return a, b


_OPS = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _segment_at(value: str, segment: str, at: int) -> bool:
    """``segment`` (``_`` for any one character) matches ``value`` at ``at``."""
    if at + len(segment) > len(value):
        return False
    return all(c == "_" or c == value[at + i] for i, c in enumerate(segment))


def _find_segment(value: str, segment: str, start: int) -> int:
    """The first position at or after ``start`` where ``segment`` matches, or -1."""
    if "_" not in segment:
        return value.find(segment, start)
    for at in range(start, len(value) - len(segment) + 1):
        if _segment_at(value, segment, at):
            return at
    return -1


def _like(value: str, pattern: str) -> bool:
    """SQL ``LIKE`` (``%`` any run, ``_`` any one character) without backtracking.

    The pattern splits at ``%`` into segments; the first must match at the start, the last
    at the end, and each one between at its leftmost place after the one before (taking
    the leftmost place never loses a match). Time is linear in the value for a given
    pattern (at most value x pattern steps), whatever the value holds: a regex of ``.*``
    runs backtracks exponentially on values made to defeat it.
    """
    segments = pattern.split("%")
    if len(segments) == 1:
        return len(value) == len(pattern) and _segment_at(value, pattern, 0)
    first, *middle, last = segments
    if len(first) + len(last) > len(value) or not _segment_at(value, first, 0):
        return False
    end = len(value) - len(last)
    if not _segment_at(value, last, end):
        return False
    at = len(first)
    for segment in middle:
        if not segment:
            continue
        found = _find_segment(value[:end], segment, at)
        if found < 0:
            return False
        at = found + len(segment)
    return True


def _eval(node: Node, values: Mapping[str, Any]) -> bool:
    match node:
        case Compare(op, left, right):
            a, b = _value(left, values), _value(right, values)
            if a is None or b is None:
                return False
            a, b = _comparable(a, b)
            try:
                return bool(_OPS[op](a, b))
            except TypeError:
                return False
        case IsNull(operand):
            return _value(operand, values) is None
        case In(operand, options):
            v = _value(operand, values)
            return v is not None and any(_OPS["="](*_comparable(v, _value(o, values))) for o in options)
        case Like(operand, pattern):
            v, p = _value(operand, values), _value(pattern, values)
            return isinstance(v, str) and isinstance(p, str) and _like(v, p)
        case Not(operand):
            return not _eval(operand, values)
        case And(parts):
            return all(_eval(p, values) for p in parts)
        case Or(parts):
            return any(_eval(p, values) for p in parts)
        case Field() | Const():
            return bool(_value(node, values))
    raise TypeError(node)  # pragma: no cover
