"""Where a condensation function is placed (dissertation 7.3.2): shared edge, brute-force search, requested."""

from __future__ import annotations

import pytest

from gridstat.broker.allocation import SubscriptionRequest, commit, plan_subscription
from gridstat.broker.placement import REQUESTED, SEARCH, SHARED_EDGE, PlacementInput, plan_placement
from gridstat.broker.rejections import CapacityExceeded, LatencyUnattainable, NoFeasiblePath
from gridstat.broker.resources import Reservations
from gridstat.broker.topology import RouterRole, Topology
from gridstat.errors import ChannelUnavailable, NotFound, ValidationError


def cloud(*, i1_eps: float = 1e6, e1_eps: float = 1e6) -> Topology:
    """e1 - i1 - e2 (5 ms each) and a slow detour e1 - i2 - e2 (20 ms each)."""
    topo = Topology()
    topo.add_router("e1", RouterRole.EDGE, e1_eps)
    topo.add_router("e2", RouterRole.EDGE, 1e6)
    topo.add_router("i1", RouterRole.INTERNAL, i1_eps)
    topo.add_router("i2", RouterRole.INTERNAL, 1e6)
    for a, b, lat in (("e1", "i1", 5.0), ("i1", "e2", 5.0), ("e1", "i2", 20.0), ("i2", "e2", 20.0)):
        topo.add_link(a, b, bandwidth_bps=1e9, latency_ms=lat)
    return topo


def inp(var: int, router: str, *, latency: float = 100.0, pub: int = 10) -> PlacementInput:
    return PlacementInput(var, router, pub, pub, latency)


def loads(topo: Topology, res: Reservations) -> tuple[dict[str, object], dict[str, object]]:
    return ({c: res.channel_load(c) for c in topo.channels}, {r: res.router_load(r) for r in topo.routers})


def test_inputs_sharing_one_edge_router_are_condensed_there() -> None:
    topo = cloud()
    p = plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e1"), inp(3, "e1")])
    assert (p.router, p.reason, p.tried) == ("e1", SHARED_EDGE, 1)
    assert p.worst_latency_ms == 1.0  # a one-router path: its forwarding only


def test_inputs_on_two_edges_take_the_router_with_the_best_worst_input_latency() -> None:
    topo = cloud()
    res = Reservations(topo)
    p = plan_placement(topo, res, [inp(1, "e1"), inp(2, "e1"), inp(3, "e2")])
    # At e1 or e2 the far input crosses 10 ms of channels (13 ms); at i1 every input crosses 5 ms (7 ms).
    assert (p.router, p.reason, p.tried) == ("i1", SEARCH, 4)
    assert p.worst_latency_ms == 7.0 and p.total_latency_ms == 21.0
    assert res.is_empty()  # the trial reservations are all released


def test_search_respects_each_inputs_latency_bound() -> None:
    topo = cloud()
    # Input 3 must arrive within 2 ms: only its own edge router can host the function.
    p = plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e1"), inp(3, "e2", latency=2.0)])
    assert (p.router, p.reason) == ("e2", SEARCH)


def test_search_respects_router_capacity_counting_the_inputs_admitted_before() -> None:
    topo = cloud(i1_eps=150.0)  # i1 can send 150 events/s: one 10 ms input fits, two do not
    p = plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e2")])
    assert p.router != "i1"
    assert plan_placement(topo, Reservations(topo), [inp(1, "e1")], requested="i1").router == "i1"


def test_search_sees_what_the_cloud_already_carries_and_leaves_it_unchanged() -> None:
    topo = cloud(i1_eps=150.0)
    res = Reservations(topo)
    # An admitted subscription already has i1 sending 100 events/s.
    commit(res, plan_subscription(topo, res, SubscriptionRequest("s1", 9, "e1", "e2", "ems", 10, 10, 50.0)))
    before = loads(topo, res)
    p = plan_placement(topo, res, [inp(1, "e1"), inp(2, "e2")])
    # i1 has room for one more stream only; i2 (22 ms worst) beats the edges (43 ms over i2).
    assert (p.router, p.worst_latency_ms) == ("i2", 22.0) and loads(topo, res) == before


def test_no_router_within_the_bounds_is_refused_with_the_input_named() -> None:
    topo = cloud()
    with pytest.raises(LatencyUnattainable) as info:
        plan_placement(topo, Reservations(topo), [inp(1, "e1", latency=2.0), inp(2, "e2", latency=2.0)])
    assert info.value.field == "inputs[1].latency_ms"
    assert "no router keeps every input's QoS (4 tried)" in str(info.value)


def test_no_capacity_anywhere_is_capacity_exceeded() -> None:
    topo = Topology()
    for name in ("e1", "e2"):
        topo.add_router(name, RouterRole.EDGE, 50.0)
    topo.add_link("e1", "e2", bandwidth_bps=1e9, latency_ms=1.0)
    with pytest.raises(CapacityExceeded):
        plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e2")])


def test_disconnected_inputs_have_no_feasible_path() -> None:
    topo = cloud()
    topo.add_router("island", RouterRole.EDGE)
    with pytest.raises(NoFeasiblePath):
        plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "island")])


def test_down_routers_are_neither_hosts_nor_on_input_paths() -> None:
    topo = cloud()
    p = plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e2")], down={"i1"})
    assert (p.router, p.worst_latency_ms, p.tried) == ("i2", 22.0, 3)
    with pytest.raises(NoFeasiblePath):  # both interior routers down: the edges are cut apart
        plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e2")], down={"i1", "i2"})


def test_a_requested_router_is_checked_like_any_candidate() -> None:
    topo = cloud()
    p = plan_placement(topo, Reservations(topo), [inp(1, "e1"), inp(2, "e2")], requested="i2")
    assert (p.router, p.reason, p.worst_latency_ms) == ("i2", REQUESTED, 22.0)
    with pytest.raises(LatencyUnattainable):
        plan_placement(topo, Reservations(topo), [inp(1, "e1", latency=10.0)], requested="i2")
    with pytest.raises(NotFound) as info:
        plan_placement(topo, Reservations(topo), [inp(1, "e1")], requested="nowhere")
    assert info.value.field == "placement_router"
    with pytest.raises(ChannelUnavailable) as down:
        plan_placement(topo, Reservations(topo), [inp(1, "e1")], requested="i2", down={"i2"})
    assert down.value.reason == "RouterUnavailable"


def test_a_function_needs_inputs() -> None:
    topo = cloud()
    with pytest.raises(ValidationError):
        plan_placement(topo, Reservations(topo), [])
