"""Broker trees: the overlay the capacity model of seed 001 works on.

Hierarchical routing (seed 001, section 2) needs a tree with one root: subscriptions
travel only upwards, notifications always up to the root and down wherever a routing
entry points. A ``BrokerTree`` is that tree, validated once (one root, every parent
known, no cycle, everything connected), with the orders the equations need: a
post-order for the bottom-up recursions (3) and (8), depths for the path sums of (7)
and (14), and the set ``P(B)`` of brokers from ``B`` up to, but excluding, the root.

``paper_tree`` builds the running example's topologies ``T_k`` (seed 001, section 3.2;
docs/analysis.md): 127 brokers in a binary tree whose levels hold at most ``k`` brokers. Each
parent receives up to two children before the next parent does (leftmost first); only
that rule gives the level counts 127, 64, 33, 18, 11, 8, 7 for ``T_1`` .. ``T_64`` and the
paper's anchors (the extra local maximum of ``T_2``/``T_4``, the ``omega = 32`` crossovers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gridstat.errors import ValidationError

#: The running example's tree shapes (seed 001, section 3.2).
PAPER_SHAPES = (1, 2, 4, 8, 16, 32, 64)
PAPER_BROKERS = 127


class TreeError(ValidationError):
    """A broker graph is not a rooted tree (cycle, two roots, unknown parent, ...)."""

    reason = "InvalidTopology"


@dataclass(frozen=True)
class BrokerTree:
    """A rooted tree of brokers, indexed 0..n-1 in the order they were given.

    ``parents[i]`` is the index of broker ``i``'s parent, ``-1`` for the root. Build it
    with ``from_parents`` or ``paper_tree``; the constructor checks the shape.
    """

    names: tuple[str, ...]
    parents: tuple[int, ...]
    children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    root: int = field(init=False, repr=False, compare=False)
    #: Children before parents: the order of the bottom-up recursions (3) and (8).
    post_order: tuple[int, ...] = field(init=False, repr=False, compare=False)
    #: Hops to the root (root 0) = |P(B)|.
    depths: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        if n == 0:
            raise TreeError("a broker tree needs at least one broker", field="brokers")
        if len(self.parents) != n:
            raise TreeError("names and parents differ in length", field="parents")
        if len(set(self.names)) != n:
            dup = next(x for x in self.names if self.names.count(x) > 1)
            raise TreeError(f"duplicate broker {dup!r}", field="brokers")
        roots = [i for i, p in enumerate(self.parents) if p == -1]
        if not roots:
            raise TreeError("no root: every broker has a parent, so the brokers form a cycle", field="parent",
                            reason="CyclicTopology")
        if len(roots) > 1:
            names = ", ".join(repr(self.names[i]) for i in roots)
            raise TreeError(f"more than one root ({names}); hierarchical routing needs exactly one",
                            field="parent")
        for i, p in enumerate(self.parents):
            if p != -1 and not 0 <= p < n:
                raise TreeError(f"broker {self.names[i]!r} has parent index {p} out of range", field="parent")
            if p == i:
                raise TreeError(f"broker {self.names[i]!r} is its own parent", field="parent",
                                reason="CyclicTopology")
        kids: list[list[int]] = [[] for _ in range(n)]
        for i, p in enumerate(self.parents):
            if p != -1:
                kids[p].append(i)
        root = roots[0]
        # Depth-first from the root; whatever is not reached hangs in a cycle.
        depths = [-1] * n
        pre: list[int] = []
        stack = [root]
        depths[root] = 0
        while stack:
            b = stack.pop()
            pre.append(b)
            for c in reversed(kids[b]):
                depths[c] = depths[b] + 1
                stack.append(c)
        if len(pre) != n:
            lost = next(i for i in range(n) if depths[i] < 0)
            raise TreeError(f"the brokers form a cycle: {' -> '.join(self._cycle_from(lost))}", field="parent",
                            reason="CyclicTopology")
        object.__setattr__(self, "children", tuple(tuple(k) for k in kids))
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "post_order", tuple(reversed(pre)))
        object.__setattr__(self, "depths", tuple(depths))

    def _cycle_from(self, start: int) -> list[str]:
        seen: dict[int, int] = {}
        b = start
        while b not in seen:
            seen[b] = len(seen)
            b = self.parents[b]
        order = sorted((k for k, v in seen.items() if v >= seen[b]), key=seen.__getitem__)
        return [self.names[i] for i in order] + [self.names[b]]

    @classmethod
    def from_parents(cls, parents: Mapping[str, str | None]) -> BrokerTree:
        """A tree from ``{broker: parent name or None}`` (insertion order is the index order)."""
        names = tuple(parents)
        index = {n: i for i, n in enumerate(names)}
        out: list[int] = []
        for name, parent in parents.items():
            if parent is None:
                out.append(-1)
            elif parent not in index:
                raise TreeError(f"broker {name!r} has unknown parent {parent!r}", field="parent")
            else:
                out.append(index[parent])
        return cls(names, tuple(out))

    def __len__(self) -> int:
        return len(self.names)

    @property
    def links(self) -> int:
        """Overlay links, ``sum_B |C(B)|`` = n - 1 (the factor of equation 11)."""
        return len(self.names) - 1

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise TreeError(f"unknown broker {name!r}", field="broker", reason="NotFound") from None

    def path_to_root(self, b: int) -> tuple[int, ...]:
        """``P(B)``: the brokers from ``b`` up to the root, including ``b``, excluding the root (section 4.2)."""
        out = []
        while self.parents[b] != -1:
            out.append(b)
            b = self.parents[b]
        return tuple(out)

    def subtree(self, b: int) -> tuple[int, ...]:
        """``b`` and all its descendants."""
        out = [b]
        i = 0
        while i < len(out):
            out.extend(self.children[out[i]])
            i += 1
        return tuple(out)

    def level_sizes(self) -> tuple[int, ...]:
        """Brokers per level, root level first."""
        counts = [0] * (max(self.depths) + 1)
        for d in self.depths:
            counts[d] += 1
        return tuple(counts)

    def mean_depth(self) -> float:
        """Average hops from a broker to the root (the root counts with 0)."""
        return sum(self.depths) / len(self.depths)


def paper_tree(max_per_level: int, brokers: int = PAPER_BROKERS, *, arity: int = 2) -> BrokerTree:
    """The running example's ``T_k``: a ``arity``-ary tree of ``brokers`` with at most ``k`` per level.

    Levels are filled breadth first; each parent receives up to ``arity`` children before the next
    parent of its level receives any (leftmost first), and a level stops at ``max_per_level``
    brokers (seed 001, section 3.2; the fill rule is ours, docs/analysis.md).
    """
    if max_per_level < 1:
        raise ValidationError(f"max_per_level must be >= 1, got {max_per_level}", field="max_per_level")
    if brokers < 1:
        raise ValidationError(f"brokers must be >= 1, got {brokers}", field="brokers")
    if arity < 1:
        raise ValidationError(f"arity must be >= 1, got {arity}", field="arity")
    parents = [-1]
    level = [0]
    while len(parents) < brokers:
        nxt: list[int] = []
        for p in level:
            for _ in range(arity):
                if len(nxt) >= max_per_level or len(parents) >= brokers:
                    break
                nxt.append(len(parents))
                parents.append(p)
        level = nxt
    names = tuple(f"B{i}" for i in range(brokers))
    return BrokerTree(names, tuple(parents))


def paper_trees(brokers: int = PAPER_BROKERS, shapes: Sequence[int] = PAPER_SHAPES) -> dict[str, BrokerTree]:
    """``{"T1": ..., "T64": ...}``: the seven topologies of the running example."""
    return {f"T{k}": paper_tree(k, brokers) for k in shapes}
