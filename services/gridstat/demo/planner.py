"""A static route planner for the embedded runner: a pure function from a topology to routes.

This is a stand-in: the QoS brokers of the next issue replace it with admission,
bandwidth allocation and recovery. What it does:

* per publisher edge router, one shortest-path tree by link latency (Dijkstra;
  ties go to fewer hops, then to the smaller router name), and every
  subscription's first path is its branch of that tree. Paths of one variable
  therefore form a tree and never loop;
* for ``redundancy: 2`` a second path: remove the first path's interior nodes
  (and, for a one-hop path, its link), then shortest path again. Routers that
  already carry the variable cost an extra ``SHARED_NODE_PENALTY_MS`` so the
  second path keeps off other subscriptions' branches where it can (a router
  receiving a variable on two channels forwards both copies). Routers forward
  per variable, whatever channel an event came in on, so the union of a
  variable's links must stay acyclic: a second path that would close a loop is
  an error;
* per hop a route ``(route_id "<subscription>/<path index>", variable_id, mode 0,
  outgoing channel, sub_interval, priority)``; the last hop's channel is the
  subscriber's (``sub:<subscription>``);
* channels: one per link end (named after the neighbour), one per publisher at
  its edge router (``pub:<publisher>``, inbound only) and one per subscription at
  its edge router.

Bandwidth is not allocated here (the brokers' job); ``bandwidth_kbps`` is
carried for them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gridstat.core import filtering
from gridstat.demo.topology import Path_, Subscription, Topology, TopologyError

#: Extra cost of a second-path router that already carries the variable.
SHARED_NODE_PENALTY_MS = 1000.0
MODE = 0


class PlanError(TopologyError):
    """No acceptable path for a subscription; names the subscription's line in the file."""


@dataclass(frozen=True)
class PlannedChannel:
    router: str
    name: str
    kind: str        # "router", "publisher" or "subscriber"
    peer: str        # neighbour router, publisher or subscription name
    peer_id: int
    level: int = 1   # 1 inside a cloud, 2 across a border link


@dataclass(frozen=True)
class PlannedRoute:
    router: str
    route_id: str
    variable_id: int
    mode: int
    channel: str
    sub_interval_ms: int
    priority: int
    pub_interval_ms: int


@dataclass(frozen=True)
class Plan:
    channels: tuple[PlannedChannel, ...]
    routes: tuple[PlannedRoute, ...]
    #: subscription name -> its paths (router names from the publisher's edge to the subscriber's)
    paths: Mapping[str, tuple[tuple[str, ...], ...]]

    def channels_of(self, router: str) -> list[PlannedChannel]:
        return [c for c in self.channels if c.router == router]

    def routes_of(self, router: str) -> list[PlannedRoute]:
        return [r for r in self.routes if r.router == router]


Graph = Mapping[str, Mapping[str, float]]


def subscriber_channel(subscription: str) -> str:
    return f"sub:{subscription}"


def publisher_channel(publisher: str) -> str:
    return f"pub:{publisher}"


def effective_interval_ms(sub_interval_ms: int, pub_interval_ms: int) -> int:
    """The interval a subscription actually gets (rounded down to a multiple of pubInt)."""
    return filtering.round_down_interval(sub_interval_ms, pub_interval_ms)


def build_graph(topology: Topology) -> dict[str, dict[str, float]]:
    graph: dict[str, dict[str, float]] = {r.name: {} for r in topology.routers}
    for link in topology.links:
        graph[link.a][link.b] = link.latency_ms
        graph[link.b][link.a] = link.latency_ms
    return graph


def shortest_tree(graph: Graph, source: str, *, removed: Iterable[str] = (),
                  removed_links: Iterable[frozenset[str]] = (),
                  penalty: Mapping[str, float] | None = None) -> dict[str, str | None]:
    """Dijkstra from ``source``: predecessor of every reachable node (None for the source)."""
    gone = set(removed)
    cut = set(removed_links)
    pen = penalty or {}
    best: dict[str, tuple[float, int]] = {source: (0.0, 0)}
    pred: dict[str, str | None] = {source: None}
    heap: list[tuple[float, int, str]] = [(0.0, 0, source)]
    done: set[str] = set()
    while heap:
        dist, hops, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for nxt in sorted(graph[node]):
            if nxt in gone or nxt in done or frozenset((node, nxt)) in cut:
                continue
            key = (dist + graph[node][nxt] + pen.get(nxt, 0.0), hops + 1)
            if nxt not in best or key < best[nxt]:
                best[nxt] = key
                pred[nxt] = node
                heapq.heappush(heap, (key[0], key[1], nxt))
    return pred


def tree_path(pred: Mapping[str, str | None], target: str) -> tuple[str, ...] | None:
    if target not in pred:
        return None
    path = [target]
    node = pred[target]
    while node is not None:
        path.append(node)
        node = pred[node]
    return tuple(reversed(path))


def disjoint_path(graph: Graph, first: Sequence[str], *,
                  penalty: Mapping[str, float] | None = None) -> tuple[str, ...] | None:
    """A second path between the ends of ``first`` sharing none of its interior nodes or links."""
    src, dst = first[0], first[-1]
    if src == dst:
        return None
    links = {frozenset(pair) for pair in itertools.pairwise(first)}
    pen = {k: v for k, v in (penalty or {}).items() if k != dst}
    pred = shortest_tree(graph, src, removed=first[1:-1], removed_links=links, penalty=pen)
    return tree_path(pred, dst)


def _has_cycle(edges: set[tuple[str, str]]) -> bool:
    out: dict[str, list[str]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(n: str) -> bool:
        state[n] = 1
        for m in out.get(n, ()):
            s = state.get(m, 0)
            if s == 1 or (s == 0 and visit(m)):
                return True
        state[n] = 2
        return False

    return any(state.get(n, 0) == 0 and visit(n) for n in list(out))


def plan(topology: Topology) -> Plan:
    """Plan channels and mode-0 routes for every subscription of ``topology``."""
    graph = build_graph(topology)
    routers = {r.name: r for r in topology.routers}
    trees: dict[str, dict[str, str | None]] = {}
    paths: dict[str, list[tuple[str, ...]]] = {}
    edges: dict[str, set[tuple[str, str]]] = {}   # variable -> directed links it uses
    carriers: dict[str, set[str]] = {}             # variable -> routers that receive it

    def where(index: int, fld: str) -> Path_:
        return ("subscriptions", index, fld)

    indexed = list(enumerate(topology.subscriptions))
    for i, sub in indexed:
        src = topology.publisher_of(sub.variable).edge
        if src not in trees:
            trees[src] = shortest_tree(graph, src)
        first = tree_path(trees[src], sub.edge)
        if first is None:
            raise _plan_error(topology, where(i, "edge"), f"no path from {src!r} (publisher "
                              f"{sub.variable.split('/')[0]!r}) to {sub.edge!r}")
        paths[sub.name] = [first]
        edges.setdefault(sub.variable, set()).update(itertools.pairwise(first))
        carriers.setdefault(sub.variable, set()).update(first)

    for i, sub in indexed:
        if sub.redundancy < 2:
            continue
        first = paths[sub.name][0]
        penalty = {n: SHARED_NODE_PENALTY_MS for n in carriers[sub.variable]}
        second = disjoint_path(graph, first, penalty=penalty)
        if second is None:
            raise _plan_error(topology, where(i, "redundancy"),
                              f"no second path from {first[0]!r} to {first[-1]!r} that avoids "
                              f"{', '.join(first[1:-1]) or 'the direct link'}"
                              if first[0] != first[-1] else
                              f"publisher and subscriber share edge router {first[0]!r}; "
                              "there is no second disjoint path")
        trial = edges[sub.variable] | set(itertools.pairwise(second))
        if _has_cycle(trial):
            raise _plan_error(topology, where(i, "redundancy"),
                              f"the second path {' -> '.join(second)} would make {sub.variable!r} loop "
                              "with the routes of other subscriptions")
        edges[sub.variable] = trial
        carriers[sub.variable].update(second)
        paths[sub.name].append(second)

    routes: list[PlannedRoute] = []
    for sub in topology.subscriptions:
        var = topology.variable(sub.variable)
        for index, path in enumerate(paths[sub.name], start=1):
            route_id = f"{sub.name}/{index}"
            for hop, router in enumerate(path):
                channel = path[hop + 1] if hop + 1 < len(path) else subscriber_channel(sub.name)
                routes.append(PlannedRoute(router, route_id, var.variable_id, MODE, channel, sub.interval_ms,
                                           var.priority, var.interval_ms))

    channels: list[PlannedChannel] = []
    for link in topology.links:
        level = 1 if routers[link.a].cloud == routers[link.b].cloud else 2
        channels.append(PlannedChannel(link.a, link.b, "router", link.b, routers[link.b].router_id, level))
        channels.append(PlannedChannel(link.b, link.a, "router", link.a, routers[link.a].router_id, level))
    for pub in topology.publishers:
        channels.append(PlannedChannel(pub.edge, publisher_channel(pub.name), "publisher", pub.name,
                                       pub.publisher_id))
    for sub in topology.subscriptions:
        channels.append(PlannedChannel(sub.edge, subscriber_channel(sub.name), "subscriber", sub.name,
                                       sub.subscriber_id))
    return Plan(tuple(channels), tuple(routes), {k: tuple(v) for k, v in paths.items()})


def _plan_error(topology: Topology, path: Path_, message: str) -> PlanError:
    err = topology.error(path, message)
    return PlanError(err.args[0], field=err.field)


def expected_rate(sub: Subscription, topology: Topology) -> float:
    """Events per second a subscription should receive (per path; duplicates not counted)."""
    var = topology.variable(sub.variable)
    return 1000.0 / effective_interval_ms(sub.interval_ms, var.interval_ms)
