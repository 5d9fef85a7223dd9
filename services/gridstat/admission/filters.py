"""The filter language of advertisements and subscriptions, and the covering test (RacsCBPS Defs. 1-6).

An event is a set of named attributes; a *constraint* is ``(attribute, op, value)`` with op one of
``= < <= > >=``; a *filter* is a conjunction of constraints and matches an event iff every
constraint is satisfied by the event's attribute of that name (RacsCBPS Def. 4: an event that
lacks a constrained attribute does not match). Advertisements and subscriptions share this language.

Per attribute, a filter's constraints reduce to one interval of values (``=`` is a closed interval
of one point), numbers and texts never mixed on one attribute. That makes the two tests the
admission controller needs exact and cheap:

* ``a.covers(b)`` (Def. 5, E_a ⊇ E_b) iff every attribute ``a`` constrains is constrained by ``b``
  to a sub-interval of ``a``'s;
* ``a.intersects(b)`` (some event may match both) iff the intervals of every attribute both
  constrain overlap.

GridStat status variables map onto it as attribute sets: an advertisement of ``pmu1/freq`` is the
filter ``publisher=pmu1, variable=freq``; a subscription to ``pmu1/freq`` is the same filter, to
``pmu1/*`` the filter ``publisher=pmu1``, to ``*/freq`` the filter ``variable=freq``
(:meth:`Filter.for_variable`). A filter that can match nothing (``price>5, price<3``) is refused:
it covers nothing and would make every bound meaningless.

Query subscriptions and variable listings write the same constraints as where-expressions
(``gridstat.core.expressions``, docs/queries.md): :meth:`Filter.from_expression` takes the
conjunction of comparisons an expression is (or, with ``exact=False``, a superset of it) and
:meth:`Filter.to_expression` gives it back, the variable's name being the attribute ``variable``
here and the field ``name`` there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gridstat.core import expressions
from gridstat.errors import ValidationError

OPS = ("=", "<", "<=", ">", ">=")
#: Longest attribute name and text value accepted (a peer cannot make keys arbitrarily large).
MAX_NAME = 128
MAX_CONSTRAINTS = 64
#: A variable's attribute names (``core.model.NAME_PATTERN``) may start with a digit.
_ATTR_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")
_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.:-]*)\s*(<=|>=|=|<|>)\s*(.+?)\s*$")

Value = float | str


@dataclass(frozen=True)
class Constraint:
    """One elementary constraint ``attribute op value`` (RacsCBPS Def. 2)."""

    attribute: str
    op: str
    value: Value

    def __post_init__(self) -> None:
        if not _ATTR_RE.fullmatch(self.attribute):
            raise ValidationError(f"attribute name {self.attribute!r} is not a name of 1..{MAX_NAME} characters",
                                  field="filter.attribute")
        if self.op not in OPS:
            raise ValidationError(f"operator {self.op!r} is not one of {', '.join(OPS)}", field="filter.op")
        if isinstance(self.value, bool) or not isinstance(self.value, float | int | str):
            raise ValidationError(f"constraint value {self.value!r} is not a number or a text", field="filter.value")
        if isinstance(self.value, float | int) and not math.isfinite(self.value):
            raise ValidationError(f"constraint value {self.value!r} is not finite", field="filter.value")
        if isinstance(self.value, str) and not 0 < len(self.value) <= MAX_NAME:
            raise ValidationError(f"text value must be 1..{MAX_NAME} characters", field="filter.value")


def parse_value(text: str) -> Value:
    """A number if the text reads as a finite one, else the text (quotes force text: ``name="5"``)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def parse_constraint(text: str) -> Constraint:
    m = _CONSTRAINT_RE.match(text)
    if m is None:
        raise ValidationError(f"constraint {text!r} is not 'attribute op value' with op in {', '.join(OPS)}",
                              field="filter")
    return Constraint(m.group(1), m.group(2), parse_value(m.group(3)))


@dataclass(frozen=True)
class Interval:
    """The values one attribute may take: numbers or texts, each end open, closed or absent."""

    numeric: bool
    lo: Value | None = None
    lo_closed: bool = False
    hi: Value | None = None
    hi_closed: bool = False

    def is_empty(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        if self.lo > self.hi:  # type: ignore[operator]
            return True
        return self.lo == self.hi and not (self.lo_closed and self.hi_closed)

    def narrow(self, op: str, value: Value) -> Interval:
        lo, lo_c, hi, hi_c = self.lo, self.lo_closed, self.hi, self.hi_closed
        if op in ("=", ">", ">="):
            closed = op != ">"
            if lo is None or value > lo or (value == lo and not closed):  # type: ignore[operator]
                lo, lo_c = value, closed
        if op in ("=", "<", "<="):
            closed = op != "<"
            if hi is None or value < hi or (value == hi and not closed):  # type: ignore[operator]
                hi, hi_c = value, closed
        return Interval(self.numeric, lo, lo_c, hi, hi_c)

    def contains(self, other: Interval) -> bool:
        """Every value of ``other`` is a value of this interval."""
        if self.numeric != other.numeric:
            return False
        if self.lo is not None:
            if other.lo is None or other.lo < self.lo:  # type: ignore[operator]
                return False
            if other.lo == self.lo and other.lo_closed and not self.lo_closed:
                return False
        if self.hi is not None:
            if other.hi is None or other.hi > self.hi:  # type: ignore[operator]
                return False
            if other.hi == self.hi and other.hi_closed and not self.hi_closed:
                return False
        return True

    def overlaps(self, other: Interval) -> bool:
        """Some value lies in both: the larger lower end is below the smaller upper end (or equals it
        with both ends closed). Compared in place, without building the intersection: the covering
        graph's descent calls this once per node it looks at."""
        if self.numeric != other.numeric:
            return False
        # the intersection's lower end: the larger of the two (at a tie, closed only if both are)
        if self.lo is None:
            lo, lo_c = other.lo, other.lo_closed
        elif other.lo is None or self.lo > other.lo:  # type: ignore[operator]
            lo, lo_c = self.lo, self.lo_closed
        elif other.lo > self.lo:  # type: ignore[operator]
            lo, lo_c = other.lo, other.lo_closed
        else:
            lo, lo_c = self.lo, self.lo_closed and other.lo_closed
        if self.hi is None:
            hi, hi_c = other.hi, other.hi_closed
        elif other.hi is None or self.hi < other.hi:  # type: ignore[operator]
            hi, hi_c = self.hi, self.hi_closed
        elif other.hi < self.hi:  # type: ignore[operator]
            hi, hi_c = other.hi, other.hi_closed
        else:
            hi, hi_c = self.hi, self.hi_closed and other.hi_closed
        if lo is None or hi is None:
            return True
        return lo < hi or (lo == hi and lo_c and hi_c)  # type: ignore[operator]

    def includes(self, value: Value) -> bool:
        """``value`` lies in the interval (a number in a numeric one, a text in a text one)."""
        if isinstance(value, str) == self.numeric:
            return False
        if self.lo is not None and (value < self.lo or (value == self.lo and not self.lo_closed)):  # type: ignore[operator]
            return False
        return not (self.hi is not None and (value > self.hi or (value == self.hi and not self.hi_closed)))  # type: ignore[operator]

    def comparisons(self, attribute: str) -> list[tuple[str, str, Value]]:
        if self.lo is not None and self.lo == self.hi:
            return [(attribute, "=", self.lo)]
        out: list[tuple[str, str, Value]] = []
        if self.lo is not None:
            out.append((attribute, ">=" if self.lo_closed else ">", self.lo))
        if self.hi is not None:
            out.append((attribute, "<=" if self.hi_closed else "<", self.hi))
        return out

    def render(self, attribute: str) -> list[str]:
        if self.lo is not None and self.lo == self.hi:
            return [f"{attribute}={_fmt(self.lo)}"]
        out = []
        if self.lo is not None:
            out.append(f"{attribute}{'>=' if self.lo_closed else '>'}{_fmt(self.lo)}")
        if self.hi is not None:
            out.append(f"{attribute}{'<=' if self.hi_closed else '<'}{_fmt(self.hi)}")
        return out


def _fmt(v: Value) -> str:
    if isinstance(v, str):
        return f'"{v}"' if _looks_numeric(v) or "," in v else v
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class Filter:
    """A conjunction of constraints, normalised to one interval per attribute; hashable by ``key``."""

    __slots__ = ("intervals", "key")

    def __init__(self, intervals: Mapping[str, Interval]) -> None:
        self.intervals: dict[str, Interval] = dict(sorted(intervals.items()))
        for attribute, iv in self.intervals.items():
            if iv.is_empty():
                raise ValidationError(f"the constraints on {attribute!r} admit no value: the filter covers "
                                      "nothing", field="filter")
        #: Canonical text: equal filters (as event sets) have equal keys.
        self.key = ", ".join(part for a, iv in self.intervals.items() for part in iv.render(a)) or "*"

    @classmethod
    def of(cls, constraints: Iterable[Constraint]) -> Filter:
        intervals: dict[str, Interval] = {}
        for n, c in enumerate(constraints, 1):
            if n > MAX_CONSTRAINTS:
                raise ValidationError(f"a filter has at most {MAX_CONSTRAINTS} constraints", field="filter")
            numeric = not isinstance(c.value, str)
            value: Value = float(c.value) if numeric else c.value
            iv = intervals.get(c.attribute)
            if iv is None:
                iv = Interval(numeric)
            elif iv.numeric != numeric:
                raise ValidationError(f"attribute {c.attribute!r} is compared with both a number and a text: "
                                      "the filter covers nothing", field="filter")
            intervals[c.attribute] = iv.narrow(c.op, value)
        return cls(intervals)

    @classmethod
    def parse(cls, text: str) -> Filter:
        """``"price>3, name=DEU"`` (also ``&``, ``∧`` or ``and`` between constraints); ``"*"`` is everything."""
        text = text.strip()
        if text in ("", "*"):
            return cls({})
        parts = re.split(r"\s*(?:,|&|∧|\band\b)\s*", text)
        return cls.of(parse_constraint(p) for p in parts if p)

    @classmethod
    def for_variable(cls, name: str) -> Filter:
        """A GridStat variable name as a filter: ``pub/var``, ``pub/*`` or ``*/var``."""
        publisher, sep, variable = name.partition("/")
        if not sep or not publisher or not variable or (publisher == "*" and variable == "*"):
            raise ValidationError(f"{name!r} is not 'publisher/variable', 'publisher/*' or '*/variable'",
                                  field="filter.variable")
        constraints = []
        if publisher != "*":
            constraints.append(Constraint("publisher", "=", publisher))
        if variable != "*":
            constraints.append(Constraint("variable", "=", variable))
        return cls.of(constraints)

    @classmethod
    def from_expression(cls, expr: expressions.Expression, *, exact: bool = True, field: str = "where") -> Filter:
        """The filter of a where-expression: exactly its conjunction of comparisons (else ExpressionError
        naming the column of the part it cannot represent), or with ``exact=False`` the smallest superset
        ``expressions.conjunction`` finds. ``name`` becomes the attribute ``variable``."""
        return cls.of(Constraint(_ATTRIBUTE_OF.get(c.name, c.name), c.op, c.value)
                      for c in expressions.conjunction(expr, exact=exact, field=field))

    def to_expression(self) -> expressions.Expression | None:
        """This filter as a where-expression (None for ``*``, which matches every variable)."""
        return expressions.of_comparisons([
            expressions.Comparison(_FIELD_OF.get(name, name), op, value)
            for attribute, iv in self.intervals.items() for name, op, value in iv.comparisons(attribute)])

    def matches(self, event: Mapping[str, Value]) -> bool:
        """Whether an event (its attributes; texts read as numbers where an interval is numeric) matches
        (Def. 4: an attribute the event lacks does not)."""
        for attribute, iv in self.intervals.items():
            value = event.get(attribute)
            if value is None:
                return False
            if iv.numeric and isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    return False
                if not math.isfinite(value):
                    return False
            if not iv.includes(value):
                return False
        return True

    def covers(self, other: Filter) -> bool:
        """E_self ⊇ E_other (Def. 5); reflexive."""
        for attribute, iv in self.intervals.items():
            theirs = other.intervals.get(attribute)
            if theirs is None or not iv.contains(theirs):
                return False
        return True

    def intersects(self, other: Filter) -> bool:
        """Some event can match both filters."""
        for attribute, iv in self.intervals.items():
            theirs = other.intervals.get(attribute)
            if theirs is not None and not iv.overlaps(theirs):
                return False
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return self.key

    def __repr__(self) -> str:
        return f"Filter({self.key!r})"


#: The variable's name is the field ``name`` of a where-expression and the attribute ``variable`` here.
_ATTRIBUTE_OF = {"name": "variable"}
_FIELD_OF = {"variable": "name"}


__all__ = ["OPS", "Constraint", "Filter", "Interval", "parse_constraint", "parse_value"]
