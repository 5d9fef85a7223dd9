"""The extended advertisement covering graph and a subscription's resource requirement (RacsCBPS 3.2-3.4).

Each publisher declares in its advertisement its maximum publishing rate ``V_pmax`` (events/s). The
controller keeps the advertisements' filters in a covering graph (a DAG: a node may sit under two
parents) whose nodes carry two extra fields:

* ``count``: how many advertisements the node's filter covers, its own included;
* ``rate``:  the sum of their ``V_pmax``, the most events/s that can match the node's filter.

Reference semantics (the invariant the tests check after every operation): ``rate(N)`` is the sum of
``V_pmax`` over the *distinct* advertisements whose filter ``N`` covers, each counted once however
many paths lead to it; ``count(N)`` is their number.

advertise (3.2): (a) an identical filter exists: that node and each of its ancestors, once each,
gain ``V_pmax`` and 1. (b) Otherwise a node M is created under its direct predecessors and above its
direct successors T. Summing the successors' rates double counts descendants shared by several of
them (a node under two parents); the paper's correction ``d_rate`` removes exactly that excess:

    M.rate  = V_pmax + sum_{t in T} t.rate  - d_rate
    d_rate  = sum_{t in T} t.rate - sum_{n in D} own(n),   D = the distinct nodes under T (T included)

(and the same for ``count``), then every ancestor of M gains ``V_pmax`` and 1, once each.

unadvertise (3.3): the inverse; a node whose own advertisements are all gone is removed and its
children are re-linked under its parents where no other path joins them (ours: the paper removes
only a node that carried the advertisement alone; keeping a multiset of own advertisements per
node is the safer form, docs/admission.md).

Requirement (3.4, Eq. 2, Theorem 1): a subscription whose filter is a node needs exactly that
node's rate. Otherwise, with S its direct predecessors (the tightest nodes covering it) and T its
direct successors (the widest nodes it covers), it needs at least the events of any t and at most
those of any s:

    minRate = max_{t in T} t.rate      maxRate = min_{s in S} s.rate            (and the counts)

Where S is empty (nothing covers the filter) we bound by the advertisements the filter overlaps at
all (ours; the paper leaves S = {} open). That overlap total is also a valid upper bound when S is
not empty, sometimes tighter than Theorem 1's: ``Requirement.overlap_rate`` shows it beside
``max_rate``, and ``requirement(..., overlap_bound=True)`` takes the smaller (the admission
controller's ``--upper-bound overlap``). A filter that overlaps no advertisement covers nothing:
:class:`NoMatchingAdvertisement`. GridStat's rate filter adds one more bound (ours): a subscription
at interval ``s`` receives at most one event per interval from each advertisement, so every rate
above -- the node's, each predecessor's and successor's, the overlap total -- sums
``min(V_pmax, 1000/s)`` over its advertisements instead of ``V_pmax``: the lower bound and the upper
are capped the same way.

Look-ups follow the graph's edges: ancestors by parent edges; covering, covered and overlapping
nodes by a descent from the roots that prunes what cannot match (docs/admission.md, measured at
10,000 advertisements in docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from gridstat.admission.filters import Filter
from gridstat.errors import DuplicateName, GridStatError, NotFound, ValidationError

#: The largest V_pmax one advertisement may declare (events/s): a PMU sends at most 240/s; a bound
#: far above any real publisher, so a mistyped or hostile value is refused, not summed.
MAX_RATE_EPS = 1_000_000.0
class InvalidAdvertisement(ValidationError):
    """An advertisement with a rate that is negative, zero, not finite or absurdly large."""

    reason = "InvalidAdvertisement"


class NoMatchingAdvertisement(GridStatError):
    """A subscription filter that no advertisement can feed: it covers nothing."""

    reason = "NoMatchingAdvertisement"


def check_rate(rate_eps: float, *, what: str = "advertisement") -> float:
    try:
        rate = float(rate_eps)
    except (TypeError, ValueError):
        raise InvalidAdvertisement(f"{what} rate {rate_eps!r} is not a number", field="max_rate_eps") from None
    if not math.isfinite(rate) or rate <= 0:
        raise InvalidAdvertisement(f"{what} rate {rate_eps!r} must be a finite number of events/s above 0",
                                   field="max_rate_eps")
    if rate > MAX_RATE_EPS:
        raise InvalidAdvertisement(f"{what} rate {rate:g} events/s is absurd (more than {MAX_RATE_EPS:g})",
                                   field="max_rate_eps")
    return rate


@dataclass
class Node:
    """One filter of the graph with the advertisements declared with exactly that filter."""

    filter: Filter
    #: Advertisement id -> its V_pmax, for the advertisements whose filter is this node's.
    own: dict[str, float] = field(default_factory=dict)
    rate: float = 0.0
    count: int = 0
    parents: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)

    @property
    def key(self) -> str:
        return self.filter.key

    @property
    def own_rate(self) -> float:
        return sum(self.own.values())


@dataclass(frozen=True)
class Insertion:
    """What ``advertise`` did: the node, whether it was new, and the successor correction applied."""

    node: str
    created: bool
    d_rate: float = 0.0
    d_count: int = 0


@dataclass(frozen=True)
class Requirement:
    """Theorem 1: the events/s (and publishers) a subscription filter needs lie in these intervals."""

    min_rate: float
    max_rate: float
    min_count: int
    max_count: int
    #: True when the filter is a node of the graph (the declared-rate bounds coincide).
    exact: bool
    predecessors: tuple[str, ...] = ()
    successors: tuple[str, ...] = ()
    #: The advertisements the filter overlaps at all: their total rate and number (an upper bound too).
    overlap_rate: float = 0.0
    overlap_count: int = 0

    def bound(self, upper: bool) -> float:
        return self.max_rate if upper else self.min_rate


@dataclass
class Around:
    """The nodes of the graph around a filter: those covering it strictly, those it covers strictly,
    and every node it overlaps (these included)."""

    covering: list[Node]
    covered: list[Node]
    overlapping: list[Node]

    def predecessors(self) -> list[Node]:
        """S: the tightest covering nodes. The graph's edges are its covering relation reduced, so a
        covering node is not the tightest exactly when one of its children also covers the filter."""
        keys = {n.key for n in self.covering}
        return [n for n in self.covering if keys.isdisjoint(n.children)]

    def successors(self) -> list[Node]:
        """T: the widest covered nodes, those with no covered parent (the same argument)."""
        keys = {n.key for n in self.covered}
        return [n for n in self.covered if keys.isdisjoint(n.parents)]


class AdvertisementGraph:
    """The covering DAG of advertisement filters with ``rate`` and ``count`` per node."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        #: Advertisement id -> (node key, V_pmax).
        self._ads: dict[str, tuple[str, float]] = {}
        #: Keys of the nodes without parents: every look-up starts there and follows the edges.
        self._roots: set[str] = set()
        #: Bumped by every change.
        self.version = 0

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def node(self, key: str | Filter) -> Node:
        k = key.key if isinstance(key, Filter) else key
        try:
            return self._nodes[k]
        except KeyError:
            raise NotFound(f"no advertisement node {k!r}", field="filter") from None

    def nodes(self) -> Iterator[Node]:
        return iter(list(self._nodes.values()))

    def advertisements(self) -> dict[str, tuple[str, float]]:
        return dict(self._ads)

    @property
    def total_rate(self) -> float:
        return sum(rate for _, rate in self._ads.values())

    def roots(self) -> list[Node]:
        return [self._nodes[k] for k in self._roots]

    # -- advertise / unadvertise -----------------------------------------------------------------
    def advertise(self, advertisement_id: str, filt: Filter, rate_eps: float) -> Insertion:
        """Add one advertisement (3.2)."""
        if not advertisement_id:
            raise ValidationError("advertisement id must not be empty", field="advertisement_id")
        rate = check_rate(rate_eps)
        if advertisement_id in self._ads:
            raise DuplicateName(f"advertisement {advertisement_id!r} exists; unadvertise it first",
                                field="advertisement_id")
        existing = self._nodes.get(filt.key)
        if existing is not None:  # (a) identical filter: it and its ancestors gain the rate
            existing.own[advertisement_id] = rate
            for n in (existing, *self._ancestors_of(existing)):
                n.rate += rate
                n.count += 1
            self._ads[advertisement_id] = (existing.key, rate)
            self.version += 1
            return Insertion(existing.key, False)
        around = self._search(filt)
        covering = around.covering
        preds, succs = around.predecessors(), around.successors()
        # Successor-related computation with the shared-descendant correction.
        below: dict[str, Node] = {}
        for t in succs:
            for n in (t, *self._descendants(t)):
                below[n.key] = n
        sum_rate = sum(t.rate for t in succs)
        sum_count = sum(t.count for t in succs)
        distinct_rate = sum(n.own_rate for n in below.values())
        distinct_count = sum(len(n.own) for n in below.values())
        d_rate, d_count = sum_rate - distinct_rate, sum_count - distinct_count
        m = Node(filt, {advertisement_id: rate}, rate + sum_rate - d_rate, 1 + sum_count - d_count)
        self._nodes[m.key] = m
        for p in preds:
            for t in succs:
                if t.key in p.children:  # p -> t is now p -> M -> t
                    p.children.discard(t.key)
                    t.parents.discard(p.key)
            p.children.add(m.key)
            m.parents.add(p.key)
        for t in succs:
            t.parents.add(m.key)
            m.children.add(t.key)
            self._roots.discard(t.key)
        if not preds:
            self._roots.add(m.key)
        # Predecessor-related computation: every ancestor once, however many paths reach it.
        for a in covering:
            a.rate += rate
            a.count += 1
        self._ads[advertisement_id] = (m.key, rate)
        self.version += 1
        return Insertion(m.key, True, d_rate, d_count)

    def unadvertise(self, advertisement_id: str) -> float:
        """Remove one advertisement (3.3); returns its V_pmax."""
        try:
            key, rate = self._ads.pop(advertisement_id)
        except KeyError:
            raise NotFound(f"no advertisement {advertisement_id!r}", field="advertisement_id") from None
        node = self._nodes[key]
        del node.own[advertisement_id]
        for n in (node, *self._ancestors_of(node)):
            n.rate -= rate
            n.count -= 1
            if n.count == 0:
                n.rate = 0.0  # no float residue on an emptied node
        if not node.own:
            self._remove_node(node)
        self.version += 1
        return rate

    def _remove_node(self, node: Node) -> None:
        del self._nodes[node.key]
        self._roots.discard(node.key)
        parents = [self._nodes[p] for p in node.parents]
        children = [self._nodes[c] for c in node.children]
        for p in parents:
            p.children.discard(node.key)
        for c in children:
            c.parents.discard(node.key)
        for p in parents:
            candidates = [self._nodes[k] for k in p.children] + children
            keep = {n.key for n in _maximal(candidates)}
            for c in candidates:
                if c.key in keep and c.key not in p.children:
                    p.children.add(c.key)
                    c.parents.add(p.key)
        for c in children:
            if not c.parents:
                self._roots.add(c.key)

    # -- Theorem 1 -------------------------------------------------------------------------------
    def requirement(self, filt: Filter, *, interval_ms: int = 0, overlap_bound: bool = False) -> Requirement:
        """The resource requirement of a subscription with filter ``filt`` (3.4, Eq. 2, Theorem 1).

        ``max_rate`` is Theorem 1's ``min_{s in S} s.rate`` (the overlapping advertisements' total when
        S is empty); ``overlap_rate`` is that total in any case, a valid and sometimes tighter upper
        bound, which ``overlap_bound=True`` uses instead when it is smaller (ours, the admission
        controller's ``--upper-bound overlap``). With the rate filter's interval both bounds cap each
        advertisement at one event per interval, the lower as the upper (module docstring).
        """
        if interval_ms < 0:
            raise ValidationError(f"interval_ms must not be negative, got {interval_ms}", field="interval_ms")
        cap = 1000.0 / interval_ms if interval_ms else math.inf
        node = self._nodes.get(filt.key)
        if node is not None:  # exact: the bounds coincide, and the overlap figures are the node's
            rate = self._rate_under(node, cap)
            return Requirement(rate, rate, node.count, node.count, True, overlap_rate=rate, overlap_count=node.count)
        around = self._search(filt)
        over_rate = sum(min(r, cap) for n in around.overlapping for r in n.own.values())
        over_count = sum(len(n.own) for n in around.overlapping)
        if over_count == 0:
            raise NoMatchingAdvertisement(
                f"no advertisement can match {filt.key!r}: the subscription covers nothing", field="filter")
        preds, succs = around.predecessors(), around.successors()
        if preds:
            max_rate = min(self._rate_under(s, cap) for s in preds)
            max_count = min(s.count for s in preds)
        else:
            max_rate, max_count = over_rate, over_count
        if overlap_bound:
            max_rate, max_count = min(max_rate, over_rate), min(max_count, over_count)
        min_rate = max((self._rate_under(t, cap) for t in succs), default=0.0)
        min_count = max((t.count for t in succs), default=0)
        return Requirement(min_rate, max_rate, min_count, max_count, False,
                           tuple(sorted(s.key for s in preds)), tuple(sorted(t.key for t in succs)),
                           overlap_rate=over_rate, overlap_count=over_count)

    # -- invariant -------------------------------------------------------------------------------
    def check(self) -> None:
        """Recompute every node from scratch and compare (the tests' reference semantics)."""
        for n in self._nodes.values():
            covered = [(k, r) for k, (key, r) in self._ads.items() if n.filter.covers(self._nodes[key].filter)]
            rate = sum(r for _, r in covered)
            if len(covered) != n.count or not math.isclose(rate, n.rate, rel_tol=1e-9, abs_tol=1e-9):
                raise AssertionError(f"node {n.key!r}: rate/count {n.rate}/{n.count}, expected {rate}/{len(covered)}")
            want_children = {m.key for m in _maximal([m for m in self._nodes.values()
                                                      if m is not n and n.filter.covers(m.filter)])}
            if want_children != n.children:
                raise AssertionError(f"node {n.key!r}: children {sorted(n.children)}, expected {sorted(want_children)}")
            for c in n.children:
                if n.key not in self._nodes[c].parents:
                    raise AssertionError(f"edge {n.key!r} -> {c!r} has no back edge")

    # -- helpers: every look-up follows the graph's edges from the roots or from a node ------------
    def _ancestors_of(self, node: Node) -> list[Node]:
        """A node's ancestors, each once, by its parent edges."""
        seen: dict[str, Node] = {}
        stack = list(node.parents)
        while stack:
            k = stack.pop()
            if k not in seen:
                seen[k] = self._nodes[k]
                stack.extend(seen[k].parents)
        return list(seen.values())

    def _search(self, filt: Filter) -> Around:
        """The nodes around ``filt`` in one descent from the roots. A node disjoint from ``filt`` has
        only disjoint descendants, so the descent follows children of intersecting nodes only, and
        visits each intersecting node once."""
        nodes = self._nodes
        around = Around([], [], [])
        stack = [n for k in self._roots if (n := nodes[k]).filter.intersects(filt)]
        seen = {n.key for n in stack}
        while stack:
            n = stack.pop()
            around.overlapping.append(n)
            if n.key != filt.key:
                if n.filter.covers(filt):
                    around.covering.append(n)
                elif filt.covers(n.filter):
                    around.covered.append(n)
            for c in n.children:
                if c not in seen:
                    seen.add(c)
                    child = nodes[c]
                    if child.filter.intersects(filt):
                        stack.append(child)
        return around

    def _rate_under(self, node: Node, cap: float) -> float:
        """The events/s a node's filter can match, each advertisement capped at ``cap`` events/s
        (the rate filter's one event per interval); ``node.rate`` without a cap."""
        if math.isinf(cap):
            return node.rate
        return sum(min(r, cap) for n in (node, *self._descendants(node)) for r in n.own.values())

    def _descendants(self, node: Node) -> list[Node]:
        seen: dict[str, Node] = {}
        stack = list(node.children)
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen[k] = self._nodes[k]
            stack.extend(seen[k].children)
        return list(seen.values())


def _maximal(nodes: list[Node]) -> list[Node]:
    """The widest: nodes covered by no other node of the list (direct successors)."""
    return [n for n in nodes if not any(m is not n and m.filter.covers(n.filter) for m in nodes)]


__all__ = ["MAX_RATE_EPS", "AdvertisementGraph", "Insertion", "InvalidAdvertisement", "NoMatchingAdvertisement",
           "Node", "Requirement", "check_rate"]
