"""Pure planning of a parent QoS broker: inter-cloud paths through the hierarchy (dissertation 2.1.1, 3.1, 3.3.2).

A parent broker sees its subtree as a graph of *leaf clouds* joined by inter-cloud
event channels between border routers. For an inter-cloud subscription the lowest
common ancestor (LCA) of the publisher's and the subscriber's clouds:

1. chooses the cloud path: Dijkstra over clouds, cost = inter-cloud channel latency
   plus each entered cloud's minimum crossing latency, using only channels with room
   for the subscription's rate after filtering (:func:`cloud_path`);
2. splits the latency bound into per-cloud budgets (:func:`split_budgets`): the bound
   minus the inter-cloud latencies is shared among the clouds *proportionally to
   their minimum crossing latency* (every cloud gets its minimum plus the same
   fraction of slack). When the crossing latencies are unknown they default to one
   router's forwarding time, which makes the split even;
3. produces the segment plan (:func:`plan_segments`): START in the publisher's cloud
   (publisher's edge router -> exit border router, next channel = foreign border
   router), MID in transit clouds (entry border -> exit border), END in the
   subscriber's cloud (entry border -> subscriber's edge router, next "sub:<name>").

Capacity of an inter-cloud channel belongs to the broker where it is registered, the
LCA of its two clouds (:func:`channel_owner`); :class:`InterCloudBooks` keeps those
reservations by the rate after filtering (``resources.Reservations`` over a topology
of border routers).

Redundancy across clouds (docs/redundancy.md, "Across clouds"): k paths that share no
border router and no inter-cloud channel are k units of a min-cost flow over the border
routers (:func:`disjoint_cloud_paths`): every border router is split into ``in -> out`` of
capacity 1, an inter-cloud hop is an arc ``a.out -> b.in`` costing its latency plus the
entered cloud's crossing, and inside a transit cloud any border router may reach any
other (through a hub node of that cloud), because the leaf finds the path between them.
Successive shortest paths (Bellman-Ford on the residual graph) give, after j rounds, j
paths of least total latency, and stop at the maximum (Menger), which is the offer of a
refusal. Every path then gets its own budgets and segments (:func:`plan_segments`).

No I/O here; ``parent_service`` and ``delegation`` do the talking.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gridstat.broker.rejections import LatencyUnattainable, NoFeasiblePath, Offer
from gridstat.broker.resources import ChannelDelta, Reservations
from gridstat.broker.topology import RouterRole, Topology
from gridstat.core.filtering import round_down_interval
from gridstat.errors import DuplicateName, NotFound, ValidationError

#: Forwarding time of one router, the default minimum crossing latency of a cloud (ms).
DEFAULT_CROSSING_MS = 1.0
#: Border routers are not a parent's resource (their leaf counts them): effectively unbounded here.
_ROUTER_CAPACITY = 1e15

START, MID, END = "start", "mid", "end"


@dataclass(frozen=True)
class InterChannel:
    """An inter-cloud event channel between two border routers (both directions)."""

    cloud_a: str
    router_a: str
    cloud_b: str
    router_b: str
    bandwidth_bps: float
    latency_ms: float

    def hops(self) -> tuple[Hop, Hop]:
        return (Hop(self.cloud_a, self.router_a, self.cloud_b, self.router_b, self.latency_ms),
                Hop(self.cloud_b, self.router_b, self.cloud_a, self.router_a, self.latency_ms))


@dataclass(frozen=True)
class Hop:
    """One direction of an inter-cloud channel."""

    src_cloud: str
    src_router: str
    dst_cloud: str
    dst_router: str
    latency_ms: float

    @property
    def name(self) -> str:
        return f"{self.src_router}->{self.dst_router}"


@dataclass(frozen=True)
class SegmentPlan:
    cloud: str
    kind: str  # START | MID | END
    from_router: str
    to_router: str
    next_channel: str
    budget_ms: float
    #: Which of the subscription's disjoint paths it belongs to, and its key there (``SegmentKey.path``):
    #: the path's index, plus k for each earlier visit of the same cloud by that path.
    path: int = 0
    lane: int = 0


# -- the hierarchy --------------------------------------------------------------------------------
def child_for(cloud: str, children: Mapping[str, frozenset[str]]) -> str | None:
    """The child whose subtree holds ``cloud`` (children maps child name -> its leaf clouds)."""
    for child, clouds in children.items():
        if cloud in clouds:
            return child
    return None


def channel_owner(cloud_a: str, cloud_b: str, children: Mapping[str, frozenset[str]]) -> str | None:
    """Where a channel between two clouds of this subtree is registered: a child, or None for here (the LCA)."""
    a, b = child_for(cloud_a, children), child_for(cloud_b, children)
    if a is None or b is None:
        raise ValidationError(f"clouds {cloud_a!r} and {cloud_b!r} are not both in this broker's subtree",
                              field="channel")
    return a if a == b else None


def decide(publisher_cloud: str | None, subscriber_cloud: str, subtree: frozenset[str], *,
           has_parent: bool) -> str:
    """What a parent does with an inter-cloud subscription: "plan" (it is the LCA), "up", or "unknown"."""
    if publisher_cloud is not None and publisher_cloud in subtree and subscriber_cloud in subtree:
        return "plan"
    return "up" if has_parent else "unknown"


# -- paths and budgets ---------------------------------------------------------------------------
def cloud_path(channels: Iterable[InterChannel], src: str, dst: str, *,
               usable: Callable[[Hop], bool] | None = None,
               crossing: Mapping[str, float] | None = None) -> tuple[Hop, ...] | None:
    """The min-latency sequence of inter-cloud hops from cloud ``src`` to ``dst``, or None."""
    if src == dst:
        return ()
    out: dict[str, list[Hop]] = {}
    for ch in channels:
        for h in ch.hops():
            out.setdefault(h.src_cloud, []).append(h)
    cross = crossing or {}
    dist: dict[str, float] = {src: cross.get(src, DEFAULT_CROSSING_MS)}
    pred: dict[str, Hop] = {}
    done: set[str] = set()
    heap: list[tuple[float, str]] = [(dist[src], src)]
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if u == dst:
            break
        for h in sorted(out.get(u, ()), key=lambda h: h.name):
            if h.dst_cloud in done or (usable is not None and not usable(h)):
                continue
            nd = d + h.latency_ms + cross.get(h.dst_cloud, DEFAULT_CROSSING_MS)
            if nd < dist.get(h.dst_cloud, float("inf")):
                dist[h.dst_cloud] = nd
                pred[h.dst_cloud] = h
                heapq.heappush(heap, (nd, h.dst_cloud))
    if dst not in pred:
        return None
    hops = [pred[dst]]
    while hops[-1].src_cloud != src:
        hops.append(pred[hops[-1].src_cloud])
    return tuple(reversed(hops))


def clouds_of(src: str, hops: tuple[Hop, ...]) -> tuple[str, ...]:
    return (src, *(h.dst_cloud for h in hops))


def split_budgets(bound_ms: float, src: str, hops: tuple[Hop, ...],
                  minimum: Mapping[str, float] | None = None) -> dict[str, float]:
    """Per-cloud latency budgets: each cloud's minimum crossing plus a share of slack proportional to it."""
    clouds = clouds_of(src, hops)
    mins = {c: max((minimum or {}).get(c, DEFAULT_CROSSING_MS), 1e-9) for c in clouds}
    fixed = sum(h.latency_ms for h in hops)
    least = fixed + sum(mins.values())
    if least > bound_ms:
        raise LatencyUnattainable(
            f"clouds {' -> '.join(clouds)} need at least {least:.6g} ms ({fixed:.6g} ms between clouds) > bound "
            f"{bound_ms:.6g} ms", offer=Offer(best_latency_ms=least, max_redundancy=1), field="latency_ms")
    scale = (bound_ms - fixed) / sum(mins.values())
    return {c: mins[c] * scale for c in clouds}


def path_budgets(bound_ms: float, src: str, hops: tuple[Hop, ...],
                 minimum: Mapping[str, float] | None = None) -> tuple[float, ...]:
    """:func:`split_budgets` by position along the path: one budget per segment, so that a path crossing
    a cloud twice (possible among disjoint paths) has its bound shared over both crossings."""
    clouds = clouds_of(src, hops)
    mins = [max((minimum or {}).get(c, DEFAULT_CROSSING_MS), 1e-9) for c in clouds]
    fixed = sum(h.latency_ms for h in hops)
    least = fixed + sum(mins)
    if least > bound_ms:
        raise LatencyUnattainable(
            f"clouds {' -> '.join(clouds)} need at least {least:.6g} ms ({fixed:.6g} ms between clouds) > bound "
            f"{bound_ms:.6g} ms", offer=Offer(best_latency_ms=least), field="latency_ms")
    scale = (bound_ms - fixed) / sum(mins)
    return tuple(m * scale for m in mins)


def plan_segments(src: str, hops: tuple[Hop, ...], budgets: Mapping[str, float] | Sequence[float], *,
                  publisher_edge: str, subscriber_edge: str, subscriber: str, path: int = 0,
                  paths: int = 1) -> tuple[SegmentPlan, ...]:
    """START / MID / END segments along the cloud path, in path order. ``budgets`` per cloud, or per
    position (:func:`path_budgets`); ``path`` is the path's index among ``paths`` disjoint ones."""
    if not hops:
        raise ValidationError("publisher and subscriber are in the same cloud: that is the leaf's job",
                              field="subscription.cloud")

    def budget(i: int, cloud: str) -> float:
        return budgets[cloud] if isinstance(budgets, Mapping) else budgets[i]

    out: list[SegmentPlan] = []
    seen: dict[str, int] = {}
    entry = publisher_edge
    cloud = src
    for i, h in enumerate(hops):
        lane = path + paths * seen.get(cloud, 0)
        seen[cloud] = seen.get(cloud, 0) + 1
        out.append(SegmentPlan(cloud, START if i == 0 else MID, entry, h.src_router, h.dst_router, budget(i, cloud),
                               path, lane))
        entry, cloud = h.dst_router, h.dst_cloud
    lane = path + paths * seen.get(cloud, 0)
    out.append(SegmentPlan(cloud, END, entry, subscriber_edge, f"sub:{subscriber}", budget(len(hops), cloud),
                           path, lane))
    return tuple(out)


def check_redundancy(redundancy: int, found: int) -> None:
    """Refuse ``redundancy`` disjoint paths across clouds when only ``found`` exist, offering ``found``."""
    if found < redundancy:
        raise NoFeasiblePath(
            f"redundancy {redundancy} asked; the inter-cloud channels allow {found} path(s) with no border router "
            "and no channel in common", offer=Offer(max_redundancy=found), field="redundancy")


# -- k disjoint paths across clouds (module docstring; docs/redundancy.md, "Across clouds") -------
_Node = tuple[str, str]  # ("r", router) split as ("in"/"out"), or ("hub", cloud), ("S", ""), ("T", "")
#: Costs a step through a transit cloud's hub, so no zero-cost cycle (hub -> router -> hub) enters a flow.
_HUB_EPS = 1e-6


def disjoint_cloud_paths(channels: Iterable[InterChannel], src: str, dst: str, k: int, *,
                         usable: Callable[[Hop], bool] | None = None,
                         crossing: Mapping[str, float] | None = None) -> tuple[tuple[Hop, ...], ...]:
    """Up to ``k`` sequences of inter-cloud hops from cloud ``src`` to ``dst`` that share no border
    router and no channel, of least total latency (fewer when fewer exist: then as many as exist).

    A path never re-enters ``src`` nor leaves ``dst``; it may cross a transit cloud twice (through
    other border routers), which only more paths than the cloud graph's simple ones can need."""
    if src == dst:
        raise ValidationError("publisher and subscriber are in the same cloud: that is the leaf's job",
                              field="subscription.cloud")
    if k < 1:
        return ()
    cross = crossing or {}
    hops = [h for ch in channels for h in ch.hops()
            if h.dst_cloud != src and h.src_cloud != dst and (usable is None or usable(h))]
    cloud_of = {r: c for h in hops for r, c in ((h.src_router, h.src_cloud), (h.dst_router, h.dst_cloud))}
    graph: dict[_Node, list[_Arc]] = {}
    hop_of: dict[tuple[_Node, _Node], Hop] = {}

    def arc(u: _Node, v: _Node, cost: float) -> None:
        fwd = _Arc(v, 1, cost, len(graph.setdefault(v, [])), True)
        graph.setdefault(u, []).append(fwd)
        graph[v].append(_Arc(u, 0, -cost, len(graph[u]) - 1, False))

    source, sink = ("S", ""), ("T", "")
    for r, c in sorted(cloud_of.items()):
        arc(("in", r), ("out", r), 0.0)  # a border router carries one path
        if c == src:
            arc(source, ("in", r), cross.get(src, DEFAULT_CROSSING_MS))
        elif c == dst:
            arc(("out", r), sink, 0.0)
        else:  # inside a transit cloud, from the router a path entered at to the one it leaves at
            arc(("out", r), ("hub", c), _HUB_EPS)
            arc(("hub", c), ("in", r), _HUB_EPS)
    for h in sorted(hops, key=lambda h: h.name):
        u, v = ("out", h.src_router), ("in", h.dst_router)
        arc(u, v, h.latency_ms + cross.get(h.dst_cloud, DEFAULT_CROSSING_MS))
        hop_of[(u, v)] = h
    found = 0
    for _ in range(k):
        if not _augment(graph, source, sink):
            break
        found += 1
    return tuple(sorted((_walk(graph, source, sink, hop_of) for _ in range(found)),
                        key=lambda p: (sum(h.latency_ms for h in p), [h.name for h in p])))


@dataclass(slots=True)
class _Arc:
    """An arc of the residual graph; ``rev`` indexes its reverse among the head's arcs."""

    head: _Node
    cap: int
    cost: float
    rev: int
    original: bool


def _augment(graph: dict[_Node, list[_Arc]], source: _Node, sink: _Node) -> bool:
    """One unit along a least-cost source -> sink path of the residual graph (Bellman-Ford as SPFA:
    reverse arcs cost less than zero). False when the sink cannot be reached."""
    dist: dict[_Node, float] = {source: 0.0}
    pred: dict[_Node, tuple[_Node, _Arc]] = {}
    queue, queued = deque([source]), {source}
    while queue:
        u = queue.popleft()
        queued.discard(u)
        for a in graph.get(u, ()):
            if a.cap > 0 and dist[u] + a.cost < dist.get(a.head, float("inf")) - 1e-12:
                dist[a.head] = dist[u] + a.cost
                pred[a.head] = (u, a)
                if a.head not in queued:
                    queue.append(a.head)
                    queued.add(a.head)
    if sink not in pred:
        return False
    v = sink
    while v != source:
        u, a = pred[v]
        a.cap -= 1
        graph[v][a.rev].cap += 1
        v = u
    return True


def _walk(graph: dict[_Node, list[_Arc]], source: _Node, sink: _Node,
          hop_of: Mapping[tuple[_Node, _Node], Hop]) -> tuple[Hop, ...]:
    """Take one path out of the flow: from the source, follow arcs carrying flow (their reverse has
    capacity), taking the flow off each."""
    path: list[Hop] = []
    u = source
    while u != sink:
        for a in graph[u]:
            back = graph[a.head][a.rev]
            if a.original and back.cap > 0:
                back.cap -= 1
                if (u, a.head) in hop_of:
                    path.append(hop_of[(u, a.head)])
                u = a.head
                break
        else:  # pragma: no cover - flow conservation makes this unreachable
            raise AssertionError(f"the flow is broken at {u}")
    return tuple(path)


# -- capacity of the channels registered here ------------------------------------------------------
class InterCloudBooks:
    """Reservations on the inter-cloud channels this broker registered, per mode, by the filtered rate."""

    def __init__(self) -> None:
        self.topology = Topology()
        self.channels: dict[tuple[str, str], InterChannel] = {}
        self._res: dict[int, Reservations] = {}

    def reservations(self, mode: int) -> Reservations:
        res = self._res.get(mode)
        if res is None:
            res = self._res[mode] = Reservations(self.topology)
        return res

    def add(self, ch: InterChannel) -> None:
        key = tuple(sorted((ch.router_a, ch.router_b)))
        if (key[0], key[1]) in self.channels:
            raise DuplicateName(f"inter-cloud channel {ch.router_a} - {ch.router_b} exists", field="channel")
        for r in (ch.router_a, ch.router_b):
            if r not in self.topology.routers:
                self.topology.add_router(r, RouterRole.BORDER, _ROUTER_CAPACITY)
        self.topology.add_link(ch.router_a, ch.router_b, bandwidth_bps=ch.bandwidth_bps, latency_ms=ch.latency_ms)
        self.channels[(key[0], key[1])] = ch

    def remove(self, router_a: str, router_b: str) -> InterChannel:
        key = tuple(sorted((router_a, router_b)))
        ch = self.channels.get((key[0], key[1]))
        if ch is None:
            raise NotFound(f"no inter-cloud channel {router_a} - {router_b} here", field="channel")
        names = {f"{router_a}->{router_b}", f"{router_b}->{router_a}"}
        if any(d.channel in names for res in self._res.values() for ds in res.held.values() for d in ds):
            raise ValidationError(f"inter-cloud channel {router_a} - {router_b} carries subscriptions",
                                  field="channel")
        for n in names:
            self.topology.remove_channel(n)
        del self.channels[(key[0], key[1])]
        return ch

    def owns(self, hop: Hop) -> bool:
        return hop.name in self.topology.channels

    def delta(self, mode: int, hop: Hop, variable_id: int, pub_interval_ms: int, interval_ms: int) -> ChannelDelta:
        interval = round_down_interval(interval_ms, pub_interval_ms)
        res = self.reservations(mode)
        return ChannelDelta(hop.name, hop.src_router, variable_id, pub_interval_ms, (interval,),
                            res.rate_increase(hop.name, variable_id, pub_interval_ms, (interval,)))

    def usable(self, mode: int, variable_id: int, pub_interval_ms: int, interval_ms: int) -> Callable[[Hop], bool]:
        """Hops registered here need room for the increase; others are checked by their owner."""
        res = self.reservations(mode)

        def ok(hop: Hop) -> bool:
            if not self.owns(hop):
                return True
            return res.shortfall((self.delta(mode, hop, variable_id, pub_interval_ms, interval_ms),)) is None

        return ok

    def reserve(self, key: str, mode: int, hop: Hop, variable_id: int, pub_interval_ms: int,
                interval_ms: int) -> None:
        """Reserve one hop for ``key``; raises CapacityExceeded (nothing reserved) when it is full."""
        self.reservations(mode).commit(key, (self.delta(mode, hop, variable_id, pub_interval_ms, interval_ms),))

    def release(self, key: str, mode: int) -> bool:
        res = self.reservations(mode)
        if key not in res.held:
            return False
        res.release(key)
        return True

    def load(self, mode: int, hop_name: str) -> Fraction:
        return self.reservations(mode).channel_load(hop_name)
