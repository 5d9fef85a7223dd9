"""dz-expressions: spatial indexing of the attribute space, the granularity of peer-level subscriptions.

Seed 004 (section 3) divides ``Omega`` by recursive binary decomposition, one dimension after
the other (round robin), and names each sub-space by the bit string of its halvings: ``""``
(epsilon) is the whole space, ``0``/``1`` the lower/upper half of the first dimension, and so
on. A peer-level subscription is a *set* of dz-expressions that encloses the user-level
rectangle; the difference is what the peer receives as false positives.

Why it works for an overlay: two sub-spaces either nest or are disjoint, so "covers" is a
prefix test and maps straight onto parent/child relations (section 4). Coarsening and
refining move along the same prefix order, which is why the bandwidth a coarser mapping will
cost is predictable (section 5.1).

Wildcards (section 5.2): ``*`` stands for "0 and 1"; the encoder appends ``*`` when the
subscription spans the whole current cell in the dimension being divided, and two
expressions that differ in one place merge into one with ``*`` there. ``b`` covers ``a``
(``a ≺ b``) iff ``len(b) <= len(a)`` and at every position of ``b`` either ``b`` has ``*`` or both
have the same symbol (the paper's covering relation, docs/granularity.md).

Worked examples (tests): Fig. 2's ``humidity = [0,25] ∧ Temp = [0,100]`` encodes to
``{000, 010}`` (``0*0`` with wildcards) and coarsens to ``{0}``; Fig. 4's ``DZ_C = {00, 10}`` has
``DZ_-1 = {ε}`` and ``DZ_+1 = {0000, 0010, 1000, 1010}`` = ``*0*0``, one *step* being one halving of
every dimension (``d`` bits).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Sequence

from gridstat.errors import ValidationError
from gridstat.granularity.space import Interval, Rectangle, merge_intervals

EPSILON = ""
_SYMBOLS = frozenset("01*")

#: Deepest expression the encoder builds (7 halvings of each of up to 10 attributes and then some).
MAX_DEPTH = 96

DzSet = frozenset[str]


def check(dz: str) -> str:
    """``dz`` if it is a string over ``0``, ``1``, ``*``; ``ValidationError`` otherwise."""
    if not isinstance(dz, str) or not set(dz) <= _SYMBOLS or len(dz) > MAX_DEPTH:
        raise ValidationError(f"{dz!r} is not a dz-expression (a string of 0, 1 and *)", field="dz")
    return dz


def covers(b: str, a: str) -> bool:
    """Whether ``b`` covers ``a`` (``a ≺ b``): every event in ``a``'s sub-space lies in ``b``'s."""
    if len(b) > len(a):
        return False
    return all(x == "*" or x == y for x, y in zip(b, a, strict=False))


def covered_by(a: str, dzs: Iterable[str]) -> bool:
    """Whether some element of ``dzs`` covers ``a`` (the paper's covering is element-wise)."""
    return any(covers(b, a) for b in dzs)


def intersects(a: str, b: str) -> bool:
    """Whether the two sub-spaces share any point."""
    return all(x == y or x == "*" or y == "*" for x, y in zip(a, b, strict=False))


def intersection(a: str, b: str) -> str | None:
    """The sub-space ``a`` and ``b`` share, as one expression (None if disjoint).

    Position by position a fixed bit wins over ``*`` and two different bits are disjoint; past
    the shorter expression the longer one's symbols hold (``0`` and ``*1`` share ``01``).
    """
    out = []
    for x, y in itertools.zip_longest(a, b, fillvalue="*"):
        if x == "*" or x == y:
            out.append(y)
        elif y == "*":
            out.append(x)
        else:
            return None
    return "".join(out)


def volume(dz: str) -> float:
    """Fraction of ``Omega`` the sub-space covers: each fixed bit halves it, ``*`` does not."""
    return 0.5 ** sum(1 for c in dz if c != "*")


def expand(dz: str) -> tuple[str, ...]:
    """The plain expressions a wildcard expression stands for (``*0`` -> ``00``, ``10``)."""
    parts = [("0", "1") if c == "*" else (c,) for c in dz]
    return tuple("".join(p) for p in itertools.product(*parts))


def minimal(dzs: Iterable[str]) -> DzSet:
    """The set without elements covered by another element (duplicates removed)."""
    items = sorted(set(dzs), key=lambda s: (len(s), s))
    out: list[str] = []
    for a in items:
        if not any(covers(b, a) for b in out):
            out.append(a)
    return frozenset(out)


def union_volume(dzs: Iterable[str]) -> float:
    """Volume of the union (wildcards expanded, nested ones counted once)."""
    plain = minimal(x for dz in dzs for x in expand(dz))
    return sum(volume(x) for x in plain)


def cell(dz: str, d: int) -> tuple[tuple[Interval, ...], ...]:
    """The sub-space of ``dz`` as, per dimension, the union of its normalised intervals."""
    dims: list[list[Interval]] = [[(0.0, 1.0)] for _ in range(d)]
    for i, c in enumerate(dz):
        k = i % d
        nxt: list[Interval] = []
        for a, b in dims[k]:
            m = (a + b) / 2
            if c in "0*":
                nxt.append((a, m))
            if c in "1*":
                nxt.append((m, b))
        dims[k] = nxt
    return tuple(merge_intervals(x) for x in dims)


def _overlap(xs: Sequence[Interval], ys: Sequence[Interval]) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in xs for c, d in ys)


def overlap_fraction(dz: str, rect: Rectangle) -> float:
    """Share of ``dz``'s sub-space that lies inside ``rect`` (1.0: no false positives under uniform events)."""
    f = 1.0
    for cell_iv, rect_iv in zip(cell(dz, len(rect.dims)), rect.dims, strict=True):
        width = sum(b - a for a, b in cell_iv)
        f *= _overlap(cell_iv, rect_iv) / width
    return f


def point_dz(point: Sequence[float], depth: int) -> str:
    """The dz-expression of depth ``depth`` whose sub-space holds ``point`` (coordinates in ``[0, 1)``)."""
    d = len(point)
    splits = [0] * d
    out = []
    for i in range(depth):
        k = i % d
        splits[k] += 1
        out.append("1" if int(point[k] * (1 << splits[k])) & 1 else "0")
    return "".join(out)


def contains(dz: str, point: Sequence[float]) -> bool:
    """Whether the event at ``point`` falls in ``dz``'s sub-space."""
    return covers(dz, point_dz(point, len(dz)))


def encode(rect: Rectangle, *, max_depth: int, wildcard: bool = False) -> DzSet:
    """The peer-level mapping of a user-level rectangle: the fewest sub-spaces up to ``max_depth`` bits.

    Cells inside the rectangle are taken whole; cells the rectangle cuts are divided further,
    and taken whole at ``max_depth`` (so the mapping always encloses the rectangle: what is lost
    is accuracy, never events). With ``wildcard`` a dimension the rectangle spans across the
    current cell gets ``*`` instead of two branches (section 5.2).
    """
    if not 0 <= max_depth <= MAX_DEPTH:
        raise ValidationError(f"max_depth must be 0..{MAX_DEPTH}, got {max_depth}", field="max_depth")
    d = len(rect.dims)
    out: list[str] = []

    def inside(ivs: Sequence[Interval], rect_iv: Sequence[Interval]) -> bool:
        return _overlap(ivs, rect_iv) >= sum(b - a for a, b in ivs) - 1e-15

    def walk(prefix: str, dims: list[tuple[Interval, ...]]) -> None:
        if any(_overlap(c, r) <= 0 for c, r in zip(dims, rect.dims, strict=True)):
            return
        if all(inside(c, r) for c, r in zip(dims, rect.dims, strict=True)) or len(prefix) >= max_depth:
            out.append(prefix)
            return
        k = len(prefix) % d
        lower = tuple((a, (a + b) / 2) for a, b in dims[k])
        upper = tuple(((a + b) / 2, b) for a, b in dims[k])
        if wildcard and inside(dims[k], rect.dims[k]):
            walk(prefix + "*", [*dims[:k], lower + upper, *dims[k + 1:]])
            return
        walk(prefix + "0", [*dims[:k], lower, *dims[k + 1:]])
        walk(prefix + "1", [*dims[:k], upper, *dims[k + 1:]])

    walk(EPSILON, [((0.0, 1.0),) for _ in range(d)])
    return frozenset(out)


def merge_wildcards(dzs: Iterable[str]) -> DzSet:
    """Join expressions of equal length that differ in one place into one with ``*`` there, to a fixpoint."""
    current = set(minimal(dzs))
    changed = True
    while changed:
        changed = False
        items = sorted(current)
        for a, b in itertools.combinations(items, 2):
            if len(a) != len(b):
                continue
            diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            if len(diff) == 1 and {a[diff[0]], b[diff[0]]} == {"0", "1"}:
                i = diff[0]
                current -= {a, b}
                current.add(a[:i] + "*" + a[i + 1:])
                changed = True
                break
    return frozenset(current)


def coarser(dz: str, step: int) -> str:
    """The sub-space divided ``step`` times less (``ε`` at most)."""
    return dz[:max(0, len(dz) - step)]


def coarser_set(dzs: Collection[str], step: int) -> DzSet:
    """``DZ_-1``: the one-step-coarser sub-spaces of a mapping (Fig. 4: ``{00, 10}`` -> ``{ε}`` for ``d = 2``)."""
    return minimal(coarser(dz, step) for dz in dzs)


def finer(dz: str, rect: Rectangle, step: int) -> DzSet:
    """The one-step-finer sub-spaces of ``dz`` that still meet the user-level rectangle."""
    out = []
    for bits in itertools.product("01", repeat=step):
        child = dz + "".join(bits)
        if overlap_fraction(child, rect) > 0:
            out.append(child)
    return frozenset(out)


def finer_set(dzs: Iterable[str], rect: Rectangle, step: int) -> DzSet:
    """``DZ_+1``: the relevant finer sub-spaces (Fig. 4: ``{0000, 0010, 1000, 1010}``)."""
    return frozenset(x for dz in dzs for x in finer(dz, rect, step))


def covered_volume(dzs: Iterable[str], rect: Rectangle) -> float:
    """Volume of ``rect`` that the mapping holds (plain expansions are disjoint once nested ones go)."""
    return sum(volume(x) * overlap_fraction(x, rect) for x in minimal(y for dz in dzs for y in expand(dz)))


def encloses(dzs: Iterable[str], rect: Rectangle) -> bool:
    """Whether the mapping holds every point of ``rect`` (a peer-level subscription must)."""
    return abs(covered_volume(dzs, rect) - rect.volume()) <= 1e-12
