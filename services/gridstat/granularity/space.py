"""The attribute space of status variables, and user-level subscriptions as hyper-rectangles.

Seed 004 (section 2) puts events, subscriptions and advertisements into one geometric space:
an ordered set of ``d`` attributes with ordered domains; an event is a point, a subscription a
hyper-rectangle, a match a point inside a rectangle. In GridStat the points are status
variables, described by attributes such as region, variable type and voltage level; a
dashboard subscribes to "every voltage magnitude in the west above 230 kV" rather than to
variable names, and a coarser subscription simply takes in more variables.

Every attribute is normalised to the unit interval ``[0, 1)`` so that spatial indexing
(``dz``) is the same binary halving for every kind:

* ``int`` ``[low, high]``: the integers ``low..high``, each value ``v`` the slice ``[v, v+1)``
  (the paper's evaluation: Integer domains ``[1, 128]``, seven halvings each);
* ``float`` ``[low, high]``: ranges are half-open ``[a, b)``, except that ``b == high``
  includes ``high`` (our reading of the paper, docs/granularity.md; it makes Fig. 2's ``humidity = [0, 25]`` the
  two cells ``000`` and ``010``);
* ``category`` (``region``, ``type``): the listed names in order, the ``i``-th the slice
  ``[i, i+1)``; a constraint may list several names (a union of slices).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gridstat.errors import ValidationError

KINDS = ("int", "float", "category")

#: A normalised interval ``[a, b)`` of one dimension, ``0 <= a < b <= 1``.
Interval = tuple[float, float]


@dataclass(frozen=True)
class Attribute:
    """One dimension: a name, a kind and its domain (``categories`` for kind ``category``)."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    categories: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValidationError(f"attribute {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}",
                                  field="kind")
        if self.kind == "category":
            if not self.categories or len(set(self.categories)) != len(self.categories):
                raise ValidationError(f"attribute {self.name!r}: needs distinct categories", field="categories")
        elif not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValidationError(f"attribute {self.name!r}: domain [{self.low}, {self.high}] is empty",
                                  field="domain")

    @property
    def _span(self) -> tuple[float, float]:
        if self.kind == "int":
            return self.low, self.high + 1
        if self.kind == "category":
            return 0.0, float(len(self.categories))
        return self.low, self.high

    def normalise(self, value: object) -> float:
        """A value's coordinate in ``[0, 1)``; ``ValidationError`` if outside the domain."""
        lo, hi = self._span
        if self.kind == "category":
            if value not in self.categories:
                raise ValidationError(f"attribute {self.name!r}: unknown category {value!r}", field=self.name)
            x = float(self.categories.index(str(value)))
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValidationError(f"attribute {self.name!r}: expected a number, got {value!r}", field=self.name)
            x = float(value)
            if not self.low <= x <= self.high:
                raise ValidationError(f"attribute {self.name!r}: {value} is outside [{self.low}, {self.high}]",
                                      field=self.name)
        u = (x - lo) / (hi - lo)
        return min(u, math.nextafter(1.0, 0.0))

    def interval(self, constraint: object) -> tuple[Interval, ...]:
        """A constraint (``(low, high)``, a category name or a list of names) as normalised intervals."""
        lo, hi = self._span
        if self.kind == "category":
            names = [constraint] if isinstance(constraint, str) else list(_iterable(constraint, self.name))
            if not names:
                raise ValidationError(f"attribute {self.name!r}: empty category list", field=self.name)
            idx = sorted({self.categories.index(n) if n in self.categories else -1 for n in names})
            if idx[0] < 0:
                bad = next(n for n in names if n not in self.categories)
                raise ValidationError(f"attribute {self.name!r}: unknown category {bad!r}", field=self.name)
            return merge_intervals([(i / len(self.categories), (i + 1) / len(self.categories)) for i in idx])
        pair = [v for v in _iterable(constraint, self.name) if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(pair) != 2 or len(list(_iterable(constraint, self.name))) != 2:
            raise ValidationError(f"attribute {self.name!r}: expected [low, high], got {constraint!r}",
                                  field=self.name)
        a, b = float(pair[0]), float(pair[1])
        if not (self.low <= a <= b <= self.high):
            raise ValidationError(f"attribute {self.name!r}: [{a}, {b}] is not inside [{self.low}, {self.high}]",
                                  field=self.name)
        if self.kind == "int":
            if a != int(a) or b != int(b):
                raise ValidationError(f"attribute {self.name!r}: integer bounds expected, got [{a}, {b}]",
                                      field=self.name)
            b += 1
        elif a == b:
            raise ValidationError(f"attribute {self.name!r}: [{a}, {b}] is empty (ranges are half-open)",
                                  field=self.name)
        return (((a - lo) / (hi - lo), (b - lo) / (hi - lo)),)


def _iterable(value: object, name: str) -> Iterable[object]:
    if isinstance(value, list | tuple):
        return value
    raise ValidationError(f"attribute {name!r}: expected a list, got {value!r}", field=name)


def merge_intervals(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sorted, disjoint, touching ones joined."""
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


@dataclass(frozen=True)
class AttributeSpace:
    """``Omega``: the ordered attributes; ``dz`` halves them round robin in this order (seed 004, section 3)."""

    attributes: tuple[Attribute, ...]

    def __post_init__(self) -> None:
        if not self.attributes:
            raise ValidationError("an attribute space needs at least one attribute", field="attributes")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValidationError("attribute names must be unique", field="attributes")

    @property
    def d(self) -> int:
        return len(self.attributes)

    def point(self, values: Mapping[str, object]) -> tuple[float, ...]:
        """An event (a status variable's attributes) as a point in ``[0, 1)^d``; every attribute needed."""
        missing = [a.name for a in self.attributes if a.name not in values]
        if missing:
            raise ValidationError(f"missing attribute(s) {', '.join(missing)}", field=missing[0])
        unknown = sorted(set(values) - {a.name for a in self.attributes})
        if unknown:
            raise ValidationError(f"unknown attribute(s) {', '.join(unknown)}", field=unknown[0])
        return tuple(a.normalise(values[a.name]) for a in self.attributes)

    def rectangle(self, constraints: Mapping[str, object]) -> Rectangle:
        """A user-level subscription; attributes not constrained span their whole domain."""
        unknown = sorted(set(constraints) - {a.name for a in self.attributes})
        if unknown:
            raise ValidationError(f"unknown attribute(s) {', '.join(unknown)}", field=unknown[0])
        return Rectangle(tuple(a.interval(constraints[a.name]) if a.name in constraints else ((0.0, 1.0),)
                               for a in self.attributes))


@dataclass(frozen=True)
class Rectangle:
    """A user-level subscription: per dimension a union of normalised half-open intervals."""

    dims: tuple[tuple[Interval, ...], ...]

    @classmethod
    def full(cls, d: int) -> Rectangle:
        return cls(tuple(((0.0, 1.0),) for _ in range(d)))

    @classmethod
    def box(cls, bounds: Sequence[Interval]) -> Rectangle:
        return cls(tuple((b,) for b in bounds))

    def contains(self, point: Sequence[float]) -> bool:
        return all(any(a <= x < b for a, b in iv) for x, iv in zip(point, self.dims, strict=True))

    def volume(self) -> float:
        """Fraction of the space covered (the share of uniformly spread events it matches)."""
        v = 1.0
        for iv in self.dims:
            v *= sum(b - a for a, b in iv)
        return v
