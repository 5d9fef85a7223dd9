"""Latency-shortest and node-disjoint paths through one cloud (dissertation 2.1, 3.1 "RoutingAlgo").

The dissertation leaves the search itself unspecified ("RoutingAlgo"; the
disjoint-path algorithm was "under investigation", dissertation 3.1), so we use proven
textbook algorithms:

* one path: Dijkstra with a binary heap, stopping at the destination;
* k paths whose interior routers are pairwise disjoint (the publisher's and the
  subscriber's edge routers are necessarily shared): Suurballe (1974) in the
  generalisation of Suurballe & Tarjan (1984) / Bhandari (1999), i.e. successive
  shortest paths on the residual graph of a unit-capacity min-cost flow with
  every interior router split into ``v_in -> v_out`` of capacity 1. After j
  augmentations the flow is a min-cost flow of value j (Ahuja, Magnanti & Orlin,
  *Network Flows*, 1993, Thm 9.12), so its j paths minimise the total latency;
  when no augmenting path is left, j is the maximum number of disjoint paths
  (Menger). Johnson potentials keep reduced costs >= 0 so each round is a Dijkstra.

Either end may be a set of routers: a multi-homed client (docs/redundancy.md, "Multi-homed
clients") is attached at several edge routers. Then a virtual source feeds every source router
(and every sink router feeds a virtual sink) over zero-latency arcs, and those routers are split
like interior ones: each carries at most one path, so the paths share no router at all, and a
path neither passes through another source router nor leaves a sink router. A single router at
an end stays shared by every path, as before.

A path's latency is the sum of its channel latencies plus ``forwarding_ms`` for
every router on it, source and destination included (each forwards the event
once). The 1 ms default is conservative: the prototype added 0.36-0.53 ms per hop
(dissertation 10.1, 8.2). GridStat guarantees the latency bound on *each* of the
redundant paths (dissertation 2.1), which callers check with :func:`max_latency`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from gridstat.broker.topology import Channel, Topology

#: Default per-router forwarding latency in ms (see the module docstring).
DEFAULT_FORWARDING_MS = 1.0

Usable = Callable[[Channel], bool]

_IN, _OUT = 0, 1
_EPS = 1e-9
#: The virtual source is (_VIRTUAL, _OUT), the virtual sink (_VIRTUAL, _IN): no router has this name.
_VIRTUAL = ""

Ends = str | Sequence[str]


def ends(routers: Ends) -> tuple[str, ...]:
    """One router or several (a multi-homed end) as a tuple of distinct names, in order."""
    out = (routers,) if isinstance(routers, str) else tuple(dict.fromkeys(routers))
    if not out:
        raise ValueError("a path end needs at least one router")
    return out


@dataclass(frozen=True)
class Path:
    """A path as router names from a publisher's edge router to a subscriber's, and its latency."""

    routers: tuple[str, ...]
    latency_ms: float


def path_latency(
    topology: Topology, routers: tuple[str, ...], *, forwarding_ms: float = DEFAULT_FORWARDING_MS
) -> float:
    total = forwarding_ms * len(routers)
    for u, v in itertools.pairwise(routers):
        total += topology.channel_between(u, v).latency_ms
    return total


def max_latency(paths: tuple[Path, ...]) -> float:
    return max(p.latency_ms for p in paths)


def _always(_channel: Channel) -> bool:
    return True


def shortest_path(
    topology: Topology,
    src: Ends,
    dst: Ends,
    *,
    usable: Usable | None = None,
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
) -> Path | None:
    """The minimum-latency path over channels accepted by ``usable``, or None if there is none."""
    if not isinstance(src, str) or not isinstance(dst, str):  # a multi-homed end: the flow search, k = 1
        found = disjoint_paths(topology, src, dst, 1, usable=usable, forwarding_ms=forwarding_ms)
        return found[0] if found else None
    topology.router(src)
    topology.router(dst)
    if src == dst:
        return Path((src,), forwarding_ms)
    ok = _always if usable is None else usable
    dist: dict[str, float] = {src: 0.0}
    pred: dict[str, str] = {}
    done: set[str] = set()
    heap: list[tuple[float, str]] = [(0.0, src)]
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        if u == dst:
            break
        done.add(u)
        for v, channel in topology.out_channels(u).items():
            if v in done:
                continue
            nd = d + channel.latency_ms + forwarding_ms
            if nd < dist.get(v, float("inf")) and ok(channel):
                dist[v] = nd
                pred[v] = u
                heapq.heappush(heap, (nd, v))
    if dst not in pred:
        return None
    routers = [dst]
    while routers[-1] != src:
        routers.append(pred[routers[-1]])
    routers.reverse()
    return Path(tuple(routers), dist[dst] + forwarding_ms)


def disjoint_path_sets(
    topology: Topology,
    src: Ends,
    dst: Ends,
    k: int,
    *,
    usable: Usable | None = None,
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
) -> Iterator[tuple[Path, ...]]:
    """Yield, for j = 1, 2, ... up to k, a set of j interior-disjoint paths of minimum total latency.

    Stops early when the graph holds no more disjoint paths. Each set is sorted by
    latency. The sets are successive, not independent: set j+1 may reroute paths of
    set j, which is exactly what lets it beat "shortest path, then remove it".
    ``src`` and ``dst`` may each be several routers (module docstring).
    """
    srcs, dsts = ends(src), ends(dst)
    for r in (*srcs, *dsts):
        topology.router(r)
    if k < 1:
        return
    common = [r for r in srcs if r in dsts]
    if common:
        # Both ends at one router: no interior routers and no channels, one (trivial) path.
        yield (Path((common[0],), forwarding_ms),)
        return
    ok = _always if usable is None else usable
    multi_src, multi_dst = len(srcs) > 1, len(dsts) > 1
    src_set, dst_set = frozenset(srcs), frozenset(dsts)
    # Residual state of the unit-capacity flow on the split graph. Nodes are (router, side). The
    # source is (src, OUT) for one source router, else the virtual (_VIRTUAL, OUT) with an arc to
    # each (s, IN); the sink (dst, IN) for one sink router, else (_VIRTUAL, IN) fed by each (t, OUT).
    # No arc enters a source router but the virtual source's; none leaves a sink router but to the sink.
    used_out: dict[str, set[str]] = {}
    used_in: dict[str, set[str]] = {}
    busy: set[str] = set()  # split routers whose v_in -> v_out arc carries flow
    from_source: set[str] = set()  # source routers the virtual source's arc feeds
    to_sink: set[str] = set()  # sink routers whose arc to the virtual sink carries flow
    pot: dict[tuple[str, int], float] = {}
    inf = float("inf")
    source = (_VIRTUAL, _OUT) if multi_src else (srcs[0], _OUT)
    sink = (_VIRTUAL, _IN) if multi_dst else (dsts[0], _IN)
    for _ in range(k):
        dist: dict[tuple[str, int], float] = {source: 0.0}
        pred: dict[tuple[str, int], tuple[str, int]] = {}
        final: dict[tuple[str, int], float] = {}
        heap: list[tuple[float, str, int]] = [(0.0, source[0], source[1])]
        while heap:
            d, name, side = heapq.heappop(heap)
            node = (name, side)
            if node in final:
                continue
            final[node] = d
            if node == sink:
                break
            # Relax with reduced costs c + pot[u] - pot[v]; nd = d + max(0, reduced) clamps float noise
            # (in exact arithmetic reduced costs of residual arcs are >= 0, which Dijkstra needs).
            base = d + pot.get(node, 0.0)
            if node == source and multi_src:
                for s in srcs:
                    if s not in from_source:
                        _relax(heap, dist, pred, final, node, (s, _IN), base - pot.get((s, _IN), 0.0), d)
            elif side == _OUT:
                if multi_dst and name in dst_set:  # a sink router's only way on: the virtual sink
                    if name not in to_sink:
                        _relax(heap, dist, pred, final, node, sink, base - pot.get(sink, 0.0), d)
                else:
                    outs = used_out.get(name, ())
                    for v, channel in topology.out_channels(name).items():
                        if v in src_set or v in outs:
                            continue
                        head = (v, _IN)
                        if head in final:
                            continue
                        nd = base + channel.latency_ms + forwarding_ms - pot.get(head, 0.0)
                        nd = nd if nd > d else d
                        if nd < dist.get(head, inf) and ok(channel):
                            dist[head] = nd
                            pred[head] = node
                            heapq.heappush(heap, (nd, v, _IN))
                if name in busy:  # reverse of the saturated split arc name_in -> name_out
                    _relax(heap, dist, pred, final, node, (name, _IN), base - pot.get((name, _IN), 0.0), d)
            else:
                if name not in busy:  # split arc name_in -> name_out
                    _relax(heap, dist, pred, final, node, (name, _OUT), base - pot.get((name, _OUT), 0.0), d)
                for x in used_in.get(name, ()):  # cancel flow on channel x -> name
                    back = topology.channel_between(x, name).latency_ms + forwarding_ms
                    _relax(heap, dist, pred, final, node, (x, _OUT), base - back - pot.get((x, _OUT), 0.0), d)
        if sink not in final:
            return
        # Potentials for the next round: p += min(d, d_sink). Adding the constant d_sink to every
        # node cancels in reduced costs, so only finalised nodes change (by d - d_sink <= 0).
        d_sink = final[sink]
        for node, d in final.items():
            pot[node] = pot.get(node, 0.0) + d - d_sink
        node = sink
        while node != source:
            prev = pred[node]
            (a, a_side), (b, b_side) = prev, node
            if prev == source and multi_src:  # the virtual source's arc to source router b
                from_source.add(b)
            elif node == sink and multi_dst:  # sink router a's arc to the virtual sink
                to_sink.add(a)
            elif a_side == _OUT and b_side == _IN and a != b:  # channel a -> b gains flow
                used_out.setdefault(a, set()).add(b)
                used_in.setdefault(b, set()).add(a)
            elif a_side == _IN and b_side == _OUT and a != b:  # channel b -> a is cancelled
                used_out[b].discard(a)
                used_in[a].discard(b)
            elif a_side == _IN:  # split arc a_in -> a_out gains flow
                busy.add(a)
            else:  # split arc cancelled: a_out -> a_in
                busy.discard(a)
            node = prev
        yield _decompose(topology, srcs, dst_set, used_out, forwarding_ms)


def _relax(
    heap: list[tuple[float, str, int]],
    dist: dict[tuple[str, int], float],
    pred: dict[tuple[str, int], tuple[str, int]],
    final: dict[tuple[str, int], float],
    node: tuple[str, int],
    head: tuple[str, int],
    nd: float,
    d: float,
) -> None:
    if head in final:
        return
    nd = nd if nd > d else d
    if nd < dist.get(head, float("inf")):
        dist[head] = nd
        pred[head] = node
        heapq.heappush(heap, (nd, head[0], head[1]))


def _decompose(
    topology: Topology, srcs: tuple[str, ...], dsts: frozenset[str], used_out: dict[str, set[str]],
    forwarding_ms: float,
) -> tuple[Path, ...]:
    """Split the unit flow into its paths: every interior router has exactly one used out-channel.
    A source router of several starts at most one path; the one source router of a single end, all."""
    paths = []
    for s in srcs:
        for first in used_out.get(s, ()):
            routers = [s, first]
            while routers[-1] not in dsts:
                (nxt,) = used_out[routers[-1]]
                routers.append(nxt)
            route = tuple(routers)
            paths.append(Path(route, path_latency(topology, route, forwarding_ms=forwarding_ms)))
    paths.sort(key=lambda p: (p.latency_ms, p.routers))
    return tuple(paths)


def latencies_from(
    topology: Topology,
    origin: Ends,
    *,
    reverse: bool = False,
    usable: Usable | None = None,
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
) -> dict[str, float]:
    """Least latency from ``origin`` (the nearest of several) to every reachable router (to ``origin``
    if ``reverse``), both ends counted."""
    ok = _always if usable is None else usable
    origins = ends(origin)
    dist: dict[str, float] = {o: forwarding_ms for o in origins}
    done: set[str] = set()
    heap: list[tuple[float, str]] = [(forwarding_ms, o) for o in origins]
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for v, channel in (topology.in_channels(u) if reverse else topology.out_channels(u)).items():
            nd = d + channel.latency_ms + forwarding_ms
            if v not in done and nd < dist.get(v, float("inf")) and ok(channel):
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


def within_bound(
    topology: Topology,
    src: Ends,
    dst: Ends,
    bound_ms: float,
    *,
    usable: Usable | None = None,
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
) -> Usable:
    """Narrow ``usable`` to channels on at least one src -> dst path within ``bound_ms``.

    Any path through channel u -> v takes at least ``d(src, u) + latency + d(v, dst)``,
    so dropping the channels where that exceeds the bound loses no path within it
    (sound pruning). It matters for k > 1: minimising the total latency may pair a
    very fast path with one beyond the bound while another in-bound set exists;
    without the out-of-bound channels the min-total set often is that set.
    """
    ok = _always if usable is None else usable
    head = latencies_from(topology, src, usable=ok, forwarding_ms=forwarding_ms)
    tail = latencies_from(topology, dst, reverse=True, usable=ok, forwarding_ms=forwarding_ms)
    inf = float("inf")
    slack = bound_ms + 1e-9 * (1.0 + abs(bound_ms))  # float sums differ by order: keep, never drop, on a tie

    def usable_in_bound(channel: Channel) -> bool:
        through = head.get(channel.src, inf) + channel.latency_ms + tail.get(channel.dst, inf)
        return through <= slack and ok(channel)

    return usable_in_bound


def disjoint_paths(
    topology: Topology,
    src: Ends,
    dst: Ends,
    k: int,
    *,
    usable: Usable | None = None,
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
) -> tuple[Path, ...]:
    """Up to k interior-disjoint paths of minimum total latency (fewer if fewer exist)."""
    best: tuple[Path, ...] = ()
    for paths in disjoint_path_sets(topology, src, dst, k, usable=usable, forwarding_ms=forwarding_ms):
        best = paths
    return best
