"""The where-expressions of query subscriptions and variable listings, parsed, printed and evaluated
(docs/queries.md).

A small SQL-like boolean language over a status variable: its own fields (``publisher``, ``name``,
``type``, ``interval_ms``, ``frames_per_s``) and its attributes (station, kind, units ... as the
publisher or the C37.118 gateway describe it)::

    kind = 'freq' and (station like 'WEST%' or region in ('west', 'north')) and interval_ms <= 20

The grammar (``_GRAMMAR``) is parsed by lark's LALR parser; every fault becomes an
:class:`ExpressionError`, a ``ValidationError`` naming the field (``where`` by default), the line
and column and what the parser expected there. Input is bounded (``MAX_TEXT``, ``MAX_DEPTH``,
``MAX_VALUES``), so no expression makes the printer or the evaluator recurse without end.

The tree is plain frozen data (:data:`Expression`); ``render`` prints it so that
``parse(render(e)) == e``; ``matches`` evaluates it against a variable's fields and attributes
(two-valued: a comparison on an attribute the variable lacks is false, as an event lacking a
constrained attribute matches no filter in RacsCBPS Def. 4, and ``not`` of false is true).

``conjunction`` turns an expression into the comparisons ``= < <= > >=`` whose conjunction the
admission controller's covering graph represents (``gridstat.admission.filters.Filter``): exact
for conjunctions of such comparisons, one-value ``in`` lists and wildcard-free ``like``; otherwise
either refused with the column of the first part it cannot represent, or widened to a superset
(``exact=False``): ``!=``, ``not``, ``or`` dropped, an ``in`` list to the interval between its
least and greatest value, ``like 'V%'`` to the texts from ``V`` up to the next prefix.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lark

from gridstat.core import model
from gridstat.errors import ValidationError

#: Longest expression text accepted, nesting depth (parentheses and ``not``) and values in one ``in`` list.
MAX_TEXT = 4096
MAX_DEPTH = 32
MAX_VALUES = 256

#: The variable's own fields and their kinds; every other name is an attribute (text).
FIELDS: Mapping[str, type] = {"publisher": str, "name": str, "type": str, "interval_ms": float,
                              "frames_per_s": float}
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
KEYWORDS = frozenset({"and", "or", "not", "in", "like"})

Value = str | float

_GRAMMAR = r"""
?start: disjunction
?disjunction: conjunction (_OR conjunction)*
?conjunction: negation (_AND negation)*
?negation: NOT negation -> negated
         | predicate
?predicate: name OP literal -> comparison
          | name NOT? IN LPAR literal (COMMA literal)* RPAR -> membership
          | name NOT? LIKE STRING -> like
          | LPAR disjunction RPAR -> group
name: IDENT | QUOTED_NAME
literal: STRING | NUMBER

_OR: "or"i
_AND: "and"i
NOT: "not"i
IN: "in"i
LIKE: "like"i
OP: "!=" | "<>" | "<=" | ">=" | "=" | "<" | ">"
LPAR: "("
RPAR: ")"
COMMA: ","
IDENT: /[A-Za-z][A-Za-z0-9_.:-]*/
QUOTED_NAME: /"(?:[^"]|"")*"/
STRING: /'(?:[^']|'')*'/
NUMBER: /[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?/
%ignore /[ \t\r\n]+/
"""

#: What the parser's terminals are called in an error message.
_EXPECTED = {
    "_OR": "'or'", "_AND": "'and'", "NOT": "'not'", "IN": "'in'", "LIKE": "'like'",
    "OP": "a comparison (= != < <= > >=)", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
    "IDENT": "a name", "QUOTED_NAME": "a name", "STRING": "a 'text'", "NUMBER": "a number",
    "$END": "the end",
}
_BARE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")


# -- the tree ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Comparison:
    """``name op value``; ``op`` one of :data:`COMPARISONS`."""

    name: str
    op: str
    value: Value
    column: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Membership:
    """``name in (v1, v2, ...)``, or ``not in``."""

    name: str
    values: tuple[Value, ...]
    negated: bool = False
    column: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Like:
    """``name like 'pattern'`` (``%`` any run of characters, ``_`` one; case-sensitive), or ``not like``."""

    name: str
    pattern: str
    negated: bool = False
    column: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expression
    column: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class And:
    """Two or more operands, all true."""

    operands: tuple[Expression, ...]
    column: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Or:
    """Two or more operands, one true."""

    operands: tuple[Expression, ...]
    column: int = field(default=0, compare=False)


Expression = Comparison | Membership | Like | Not | And | Or


class ExpressionError(ValidationError):
    """A where-expression that does not parse or cannot be used: ``line`` and ``column`` (1-based) of the
    fault in the text (0 when it is the text as a whole)."""

    def __init__(self, message: str, *, field: str, line: int = 0, column: int = 0) -> None:
        where = f" at column {column}" if column else ""
        if line > 1:
            where = f" at line {line}, column {column}"
        super().__init__(f"{field}{where}: {message}", field=field)
        self.line = line
        self.column = column


# -- parsing -------------------------------------------------------------------------------------


class _Fault(Exception):
    """A semantic fault found while the parser reduces (carried out of lark to ``parse``)."""

    def __init__(self, message: str, token: lark.Token | None) -> None:
        super().__init__(message)
        self.line = token.line or 0 if token is not None else 0
        self.column = token.column or 0 if token is not None else 0


def _unquote(text: str, quote: str) -> str:
    return text[1:-1].replace(quote * 2, quote)


class _Build(lark.Transformer[lark.Token, Any]):
    """Builds the tree as the LALR parser reduces (no recursion over the parse tree); tracks depth."""

    def name(self, children: list[lark.Token]) -> tuple[str, lark.Token]:
        token = children[0]
        text = _unquote(token, '"') if token.type == "QUOTED_NAME" else str(token)
        if text not in FIELDS and not re.fullmatch(model.NAME_PATTERN, text):
            raise _Fault(f"{text!r} is not a field ({', '.join(FIELDS)}) or an attribute name "
                         "(1-128 letters, digits, '_', '.', ':' or '-', first a letter or digit)", token)
        return text, token

    def literal(self, children: list[lark.Token]) -> tuple[Value, lark.Token]:
        token = children[0]
        if token.type == "STRING":
            return _unquote(token, "'"), token
        number = float(token)
        if not math.isfinite(number):
            raise _Fault(f"number {str(token)!r} is out of range", token)
        return number, token

    def comparison(self, children: list[Any]) -> tuple[Expression, int]:
        (name, token), op, (value, vtoken) = children
        _check_kind(name, value, vtoken)
        return Comparison(name, "!=" if op == "<>" else str(op), value, column=token.column or 0), 1

    def membership(self, children: list[Any]) -> tuple[Expression, int]:
        name, token = children[0]
        negated = isinstance(children[1], lark.Token) and children[1].type == "NOT"
        values = [c for c in children if isinstance(c, tuple)][1:]
        if len(values) > MAX_VALUES:
            raise _Fault(f"an 'in' list has at most {MAX_VALUES} values", token)
        for value, vtoken in values:
            _check_kind(name, value, vtoken)
        return Membership(name, tuple(v for v, _ in values), negated, column=token.column or 0), 1

    def like(self, children: list[Any]) -> tuple[Expression, int]:
        name, token = children[0]
        negated = len(children) == 4
        pattern = children[-1]
        if FIELDS.get(name) is float:
            raise _Fault(f"{name} is a number: 'like' compares texts", token)
        return Like(name, _unquote(pattern, "'"), negated, column=token.column or 0), 1

    def negated(self, children: list[Any]) -> tuple[Expression, int]:
        token, (operand, depth) = children
        return Not(operand, column=token.column or 0), _deeper(depth, token)

    def group(self, children: list[Any]) -> tuple[Expression, int]:
        token, (inner, depth), _ = children
        return inner, _deeper(depth, token)

    def conjunction(self, children: list[Any]) -> tuple[Expression, int]:
        return And(tuple(e for e, _ in children), column=_column_of(children[0][0])), \
            max(d for _, d in children)

    def disjunction(self, children: list[Any]) -> tuple[Expression, int]:
        return Or(tuple(e for e, _ in children), column=_column_of(children[0][0])), \
            max(d for _, d in children)


def _column_of(expr: Expression) -> int:
    return expr.column


def _deeper(depth: int, token: lark.Token) -> int:
    if depth + 1 > MAX_DEPTH:
        raise _Fault(f"the expression nests deeper than {MAX_DEPTH} levels", token)
    return depth + 1


def _check_kind(name: str, value: Value, token: lark.Token) -> None:
    kind = FIELDS.get(name)
    if kind is float and isinstance(value, str):
        raise _Fault(f"{name} is a number: compare it with a number, not {_literal(value)}", token)
    if kind is str and not isinstance(value, str):
        raise _Fault(f"{name} is a text: compare it with a quoted text such as {_literal(_number(value))}", token)


@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark(_GRAMMAR, parser="lalr", transformer=_Build(), maybe_placeholders=False)


def parse(text: str, *, field: str = "where") -> Expression:
    """The expression of ``text``; :class:`ExpressionError` (a ``ValidationError`` naming ``field``,
    the column and what was expected) for anything else."""
    if not isinstance(text, str):
        raise ExpressionError(f"must be a text, got {type(text).__name__}", field=field)
    if not text.strip():
        raise ExpressionError("is empty: give a condition such as kind = 'freq'", field=field)
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"is {len(text)} characters long, at most {MAX_TEXT}", field=field)
    try:
        # the inline transformer makes the parse's result the start rule's (expression, depth)
        result: tuple[Expression, int] = _parser().parse(text)  # type: ignore[assignment]
    except lark.exceptions.VisitError as exc:
        fault = exc.orig_exc
        if isinstance(fault, _Fault):
            raise ExpressionError(str(fault), field=field, line=fault.line, column=fault.column) from None
        raise
    except _Fault as fault:
        raise ExpressionError(str(fault), field=field, line=fault.line, column=fault.column) from None
    except lark.exceptions.UnexpectedInput as exc:
        line, column = exc.line, exc.column
        if isinstance(exc, lark.exceptions.UnexpectedEOF) \
                or (isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "$END"):
            lines = text.split("\n")  # the fault is where the text ends
            line, column = len(lines), len(lines[-1]) + 1
        raise ExpressionError(_explain(exc, text), field=field, line=line, column=column) from None
    expr, _depth = result
    if not isinstance(expr, Comparison | Membership | Like | Not | And | Or):
        raise ExpressionError("is not a condition", field=field)
    return expr


def _explain(exc: lark.exceptions.UnexpectedInput, text: str) -> str:
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        pos = exc.pos_in_stream or 0
        char = text[pos] if 0 <= pos < len(text) else ""
        if char == "'":
            return "this text is never closed (a quote inside a text is written '')"
        if char == '"':
            return "this quoted name is never closed"
        expected = _expected(exc.allowed or set())
        return f"unexpected character {char!r}" + (f"; expected {expected}" if expected else "")
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        token = exc.token
        found = "the text ends" if token.type == "$END" else f"found {str(token)!r}"
        return f"{found}; expected {_expected(exc.expected)}"
    if isinstance(exc, lark.exceptions.UnexpectedEOF):
        return f"the text ends; expected {_expected(set(exc.expected))}"
    return str(exc).splitlines()[0]


def _expected(terminals: set[str]) -> str:
    names = sorted({_EXPECTED.get(t, t) for t in terminals})
    return " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + names[-1]


# -- printing ------------------------------------------------------------------------------------


def render(expr: Expression) -> str:
    """The text of ``expr``, with the fewest parentheses that keep its tree: ``parse(render(e)) == e``."""
    if isinstance(expr, Comparison):
        return f"{_name(expr.name)} {expr.op} {_literal(expr.value)}"
    if isinstance(expr, Membership):
        values = ", ".join(_literal(v) for v in expr.values)
        return f"{_name(expr.name)} {'not in' if expr.negated else 'in'} ({values})"
    if isinstance(expr, Like):
        return f"{_name(expr.name)} {'not like' if expr.negated else 'like'} {_literal(expr.pattern)}"
    if isinstance(expr, Not):
        inner = render(expr.operand)
        return f"not ({inner})" if isinstance(expr.operand, And | Or) else f"not {inner}"
    word = " and " if isinstance(expr, And) else " or "
    # an operand of the same kind, or an 'or' inside an 'and', keeps its parentheses
    return word.join(f"({render(e)})" if isinstance(e, And | Or) else render(e) for e in expr.operands)


def _name(name: str) -> str:
    if _BARE_NAME.fullmatch(name) and name.lower() not in KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Value) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return _number(value)


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


# -- evaluation ----------------------------------------------------------------------------------


def subject_of(variable: model.StatusVariable) -> dict[str, Value]:
    """What an expression sees of a variable: its attributes, then its own fields over them."""
    out: dict[str, Value] = dict(variable.attributes)
    out.update(publisher=variable.publisher, name=variable.name, type=variable.type.name,
               interval_ms=float(variable.interval_ms), frames_per_s=float(variable.frames_per_s))
    return out


def matches(expr: Expression, subject: Mapping[str, Value] | model.StatusVariable) -> bool:
    """Whether ``subject`` (a variable, or the mapping ``subject_of`` gives) satisfies ``expr``."""
    if isinstance(subject, model.StatusVariable):
        subject = subject_of(subject)
    if isinstance(expr, And):
        return all(matches(e, subject) for e in expr.operands)
    if isinstance(expr, Or):
        return any(matches(e, subject) for e in expr.operands)
    if isinstance(expr, Not):
        return not matches(expr.operand, subject)
    have = subject.get(expr.name)
    if have is None:
        return False
    if isinstance(expr, Comparison):
        return _compare(have, expr.op, expr.value)
    if isinstance(expr, Membership):
        return any(_compare(have, "=", v) for v in expr.values) != expr.negated
    if not isinstance(have, str):
        return False
    return (_like_re(expr.pattern).fullmatch(have) is not None) != expr.negated


def _compare(have: Value, op: str, want: Value) -> bool:
    """Text with text; a number with a number, an attribute's text read as one (else no match)."""
    if isinstance(want, str):
        if not isinstance(have, str):
            return False
        return _apply(have, op, want)
    if isinstance(have, str):
        try:
            number = float(have)
        except ValueError:
            return False
        if not math.isfinite(number):
            return False
        return _apply(number, op, want)
    return _apply(have, op, want)


def _apply(a: Any, op: str, b: Any) -> bool:
    if op == "=":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


@functools.lru_cache(maxsize=256)
def _like_re(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern),
                      re.DOTALL)


# -- the admission controller's filters ----------------------------------------------------------


def conjunction(expr: Expression, *, exact: bool = True, field: str = "where") -> tuple[Comparison, ...]:
    """Comparisons (``= < <= > >=``) whose conjunction is ``expr`` (``exact``: else ExpressionError at
    the first part that is not one) or contains it (``exact=False``: what cannot be represented is
    widened or dropped, so every variable ``expr`` matches still matches; possibly none is left, which
    matches everything)."""
    out: list[Comparison] = []
    for part in expr.operands if isinstance(expr, And) else (expr,):
        widened = _represent(part)
        if widened is None or (widened[1] and exact):
            if exact:
                raise ExpressionError(
                    f"the admission controller's filters are conjunctions of = < <= > >= comparisons; "
                    f"{render(part)!r} is not one", field=field, column=part.column)
            continue
        out.extend(widened[0])
    return tuple(out)


def _represent(part: Expression) -> tuple[list[Comparison], bool] | None:
    """The comparisons for one conjunct and whether they widen it; None if nothing useful represents it."""
    if isinstance(part, Comparison):
        return ([part], False) if part.op != "!=" else None
    if isinstance(part, Membership) and not part.negated:
        if len(set(part.values)) == 1:
            return [Comparison(part.name, "=", part.values[0], part.column)], False
        kinds = {isinstance(v, str) for v in part.values}
        if len(kinds) != 1:
            return None
        lo, hi = min(part.values), max(part.values)
        return [Comparison(part.name, ">=", lo, part.column), Comparison(part.name, "<=", hi, part.column)], True
    if isinstance(part, Like) and not part.negated:
        prefix = re.split(r"[%_]", part.pattern, maxsplit=1)[0]
        if prefix == part.pattern:
            return [Comparison(part.name, "=", part.pattern, part.column)], False
        if not prefix:
            return None
        upper = _next_prefix(prefix)
        lower = Comparison(part.name, ">=", prefix, part.column)
        return ([lower, Comparison(part.name, "<", upper, part.column)] if upper else [lower]), True
    if isinstance(part, And):
        inner = [_represent(e) for e in part.operands]
        kept = [r for r in inner if r is not None]
        widened = len(kept) < len(inner) or any(w for _, w in kept)
        return [c for cs, _ in kept for c in cs], widened
    return None


def _next_prefix(prefix: str) -> str:
    """The least text greater than every text starting with ``prefix`` ('' if there is none)."""
    chars = list(prefix)
    while chars and chars[-1] == chr(0x10FFFF):
        chars.pop()
    if not chars:
        return ""
    chars[-1] = chr(ord(chars[-1]) + 1)
    return "".join(chars)


def of_comparisons(comparisons: list[Comparison] | tuple[Comparison, ...]) -> Expression | None:
    """The conjunction of ``comparisons`` (one alone as itself; None for none: everything)."""
    if not comparisons:
        return None
    if len(comparisons) == 1:
        return comparisons[0]
    return And(tuple(comparisons))


__all__ = [
    "COMPARISONS", "FIELDS", "MAX_DEPTH", "MAX_TEXT", "MAX_VALUES", "And", "Comparison", "Expression",
    "ExpressionError", "Like", "Membership", "Not", "Or", "Value", "conjunction", "matches", "of_comparisons",
    "parse", "render", "subject_of",
]
