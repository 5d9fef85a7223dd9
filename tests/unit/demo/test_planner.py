"""The static route planner: shortest paths by latency, node-disjoint second paths, routes, channels."""

from __future__ import annotations

import itertools
import textwrap

import pytest

from gridstat.demo.planner import (
    PlanError,
    build_graph,
    disjoint_path,
    effective_interval_ms,
    expected_rate,
    plan,
    shortest_tree,
    subscriber_channel,
    tree_path,
)
from gridstat.demo.topology import Topology, load_topology, parse_topology

#      e1 --1-- x --1-- e2
#       \               /
#        2 --- y --- 2       and a slow direct link e1 --10-- e2
RING = textwrap.dedent("""\
    clouds: [{name: A}]
    routers:
      - {name: e1, role: edge, cloud: A}
      - {name: x, role: internal, cloud: A}
      - {name: y, role: internal, cloud: A}
      - {name: e2, role: edge, cloud: A}
    links:
      - {a: e1, b: x, latency_ms: 1}
      - {a: x, b: e2, latency_ms: 1}
      - {a: e1, b: y, latency_ms: 2}
      - {a: y, b: e2, latency_ms: 2}
      - {a: e1, b: e2, latency_ms: 10}
    publishers:
      - name: pmu
        edge: e1
        variables:
          - {name: freq, type: float, interval_ms: 17}
          - {name: vmag, type: float, interval_ms: 34}
    subscriptions:
      - {name: fast, edge: e2, variable: pmu/freq, interval_ms: 17, latency_ms: 20, redundancy: 2}
      - {name: slow, edge: e2, variable: pmu/vmag, interval_ms: 100, latency_ms: 50}
    """)


def ring(text: str = RING) -> Topology:
    return parse_topology(text, "ring.yaml")


def test_shortest_path_by_latency() -> None:
    g = build_graph(ring())
    assert tree_path(shortest_tree(g, "e1"), "e2") == ("e1", "x", "e2")
    assert tree_path(shortest_tree(g, "e1", removed=["x"]), "e2") == ("e1", "y", "e2")
    assert tree_path(shortest_tree(g, "e1", removed=["x", "y"], removed_links=[frozenset(("e1", "e2"))]),
                     "e2") is None


def test_ties_prefer_fewer_hops() -> None:
    g = {"a": {"b": 1.0, "d": 2.0}, "b": {"a": 1.0, "c": 1.0}, "c": {"b": 1.0, "d": 0.0},
         "d": {"a": 2.0, "c": 0.0}}
    assert tree_path(shortest_tree(g, "a"), "d") == ("a", "d")         # 2 ms in 1 hop, not 2 ms in 3 (a-b-c-d)
    assert tree_path(shortest_tree(g, "a"), "c") == ("a", "b", "c")   # full tie with a-d-c: first settled wins


def test_disjoint_path_removes_interior_nodes_or_the_direct_link() -> None:
    g = build_graph(ring())
    assert disjoint_path(g, ("e1", "x", "e2")) == ("e1", "y", "e2")
    assert disjoint_path(g, ("e1", "e2")) == ("e1", "x", "e2")
    assert disjoint_path(g, ("e1",)) is None


def test_plan_of_the_ring() -> None:
    p = plan(ring())
    assert p.paths == {"fast": (("e1", "x", "e2"), ("e1", "y", "e2")), "slow": (("e1", "x", "e2"),)}
    by_router = {r: sorted((x.route_id, x.channel, x.sub_interval_ms, x.pub_interval_ms) for x in p.routes_of(r))
                 for r in ("e1", "x", "y", "e2")}
    assert by_router == {
        "e1": [("fast/1", "x", 17, 17), ("fast/2", "y", 17, 17), ("slow/1", "x", 100, 34)],
        "x": [("fast/1", "e2", 17, 17), ("slow/1", "e2", 100, 34)],
        "y": [("fast/2", "e2", 17, 17)],
        "e2": [("fast/1", "sub:fast", 17, 17), ("fast/2", "sub:fast", 17, 17), ("slow/1", "sub:slow", 100, 34)],
    }
    assert all(r.mode == 0 and r.priority == 1 for r in p.routes)
    assert {r.variable_id for r in p.routes if r.route_id.startswith("fast")} == {1}


def test_channels_cover_every_link_end_publisher_and_subscriber() -> None:
    t = ring()
    p = plan(t)
    router_channels = {(c.router, c.name) for c in p.channels if c.kind == "router"}
    assert len(router_channels) == 2 * len(t.links)
    assert ("e1", "x") in router_channels and ("x", "e1") in router_channels
    ids = {r.name: r.router_id for r in t.routers}
    assert all(c.peer_id == ids[c.peer] for c in p.channels if c.kind == "router")
    pubs = [c for c in p.channels if c.kind == "publisher"]
    assert [(c.router, c.name, c.peer_id) for c in pubs] == [("e1", "pub:pmu", t.publishers[0].publisher_id)]
    subs = sorted((c.router, c.name) for c in p.channels if c.kind == "subscriber")
    assert subs == [("e2", "sub:fast"), ("e2", "sub:slow")]
    # every route's channel exists on its router, and peer ids are unique per router
    for router in ids:
        names = {c.name for c in p.channels_of(router)}
        assert {r.channel for r in p.routes_of(router)} <= names
        peer_ids = [c.peer_id for c in p.channels_of(router)]
        assert len(peer_ids) == len(set(peer_ids))


def test_default_topology_plan() -> None:
    t = load_topology()
    p = plan(t)
    for sub in t.subscriptions:
        paths = p.paths[sub.name]
        assert len(paths) == sub.redundancy
        assert paths[0][0] == t.publisher_of(sub.variable).edge and paths[0][-1] == sub.edge
        for path in paths:  # consecutive routers are linked
            for a, b in itertools.pairwise(path):
                assert b in build_graph(t)[a]
        if sub.redundancy == 2:
            first, second = paths
            assert not set(first[1:-1]) & set(second[1:-1])
            assert (first[0], first[-1]) == (second[0], second[-1])
        last_hops = [r for r in p.routes if r.channel == subscriber_channel(sub.name)]
        assert {r.route_id for r in last_hops} == {f"{sub.name}/{i}" for i in range(1, sub.redundancy + 1)}
    # route ids are unique per (router, variable, mode)
    keys = [(r.router, r.route_id, r.variable_id, r.mode) for r in p.routes]
    assert len(keys) == len(set(keys))
    # a border link is crossed by the inter-cloud subscriptions
    assert any(pair == ("a-border", "b-border") for path in p.paths.values() for pr in path
               for pair in itertools.pairwise(pr))


def test_second_path_keeps_off_routers_that_already_carry_the_variable() -> None:
    # w carries pmu/freq for sub 'other'; the second path of 'fast' should take y (dearer) not w
    text = RING.replace("  - {name: e2, role: edge, cloud: A}\n",
                        "  - {name: e2, role: edge, cloud: A}\n  - {name: w, role: internal, cloud: A}\n"
                        "  - {name: e3, role: edge, cloud: A}\n")
    text = text.replace("    publishers:", "")
    text = text.replace("publishers:\n", "  - {a: e1, b: w, latency_ms: 1}\n  - {a: w, b: e2, latency_ms: 1.5}\n"
                        "  - {a: w, b: e3, latency_ms: 1}\npublishers:\n")
    text += "  - {name: other, edge: e3, variable: pmu/freq, interval_ms: 17, latency_ms: 20}\n"
    p = plan(ring(text))
    assert p.paths["other"] == (("e1", "w", "e3"),)
    assert p.paths["fast"][1] == ("e1", "y", "e2")


def test_redundancy_without_a_second_path_is_an_error() -> None:
    line = RING.replace("  - {a: e1, b: y, latency_ms: 2}\n", "").replace("  - {a: e1, b: e2, latency_ms: 10}\n",
                                                                             "")
    with pytest.raises(PlanError, match=r"ring\.yaml:\d+: subscriptions\[0\]\.redundancy: no second path"):
        plan(ring(line))


def test_shared_edge_router_cannot_be_redundant() -> None:
    text = RING.replace("{name: fast, edge: e2,", "{name: fast, edge: e1,")
    with pytest.raises(PlanError, match=r"subscriptions\[0\]\.redundancy: publisher and subscriber share"):
        plan(ring(text))


def test_unreachable_subscriber_is_an_error() -> None:
    text = RING.replace("  - {name: e2, role: edge, cloud: A}\n",
                        "  - {name: e2, role: edge, cloud: A}\n  - {name: e9, role: edge, cloud: A}\n")
    text = text.replace("{name: slow, edge: e2,", "{name: slow, edge: e9,")
    with pytest.raises(PlanError, match=r"ring\.yaml:\d+: subscriptions\[1\]\.edge: no path from 'e1'"):
        plan(ring(text))


def test_a_second_path_that_would_loop_is_rejected() -> None:
    # 'down' routes pmu/freq e1 -> x -> y -> e2 ... the second path of 'up' from e1 to x must go
    # e1 -> y -> x, the reverse of x -> y: the variable would circle between x and y forever.
    text = textwrap.dedent("""\
        clouds: [{name: A}]
        routers:
          - {name: e1, role: edge, cloud: A}
          - {name: x, role: edge, cloud: A}
          - {name: y, role: internal, cloud: A}
          - {name: e2, role: edge, cloud: A}
        links:
          - {a: e1, b: x, latency_ms: 1}
          - {a: x, b: y, latency_ms: 1}
          - {a: e1, b: y, latency_ms: 5}
          - {a: y, b: e2, latency_ms: 1}
        publishers:
          - {name: pmu, edge: e1, variables: [{name: freq, type: float, interval_ms: 17}]}
        subscriptions:
          - {name: down, edge: e2, variable: pmu/freq, interval_ms: 17, latency_ms: 20}
          - {name: up, edge: x, variable: pmu/freq, interval_ms: 17, latency_ms: 20, redundancy: 2}
        """)
    with pytest.raises(PlanError, match=r"subscriptions\[1\]\.redundancy: the second path e1 -> y -> x would "
                                        r"make 'pmu/freq' loop"):
        plan(ring(text))


def test_effective_interval_and_expected_rate() -> None:
    t = ring()
    assert effective_interval_ms(100, 34) == 68
    assert effective_interval_ms(10, 17) == 17
    assert expected_rate(t.subscriptions[0], t) == pytest.approx(1000 / 17)
    assert expected_rate(t.subscriptions[1], t) == pytest.approx(1000 / 68)
