"""plan_subscription: admission with machine-readable reasons and offers (dissertation 3.1)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gridstat.broker.allocation import Route, SubscriptionRequest, commit, plan_subscription, release
from gridstat.broker.generate import bench_admission
from gridstat.broker.rejections import CapacityExceeded, LatencyUnattainable, NoFeasiblePath, Offer
from gridstat.broker.resources import Reservations
from gridstat.broker.topology import RouterRole, Topology
from gridstat.errors import GridStatError, NotFound, ValidationError


def ring(n: int = 6, *, latency: float = 1.0, bandwidth_bps: float = 1e9, router_eps: float = 1e6) -> Topology:
    topo = Topology()
    for i in range(n):
        topo.add_router(f"r{i}", RouterRole.EDGE if i % 3 == 0 else RouterRole.INTERNAL, router_eps)
    for i in range(n):
        topo.add_link(f"r{i}", f"r{(i + 1) % n}", bandwidth_bps=bandwidth_bps, latency_ms=latency)
    return topo


def req(sub_id: str = "s1", *, variable_id: int = 1, src: str = "r0", dst: str = "r3", subscriber: str = "bob",
        pub: int = 1000, interval: int = 1000, bound: float = 100.0, k: int = 1) -> SubscriptionRequest:
    return SubscriptionRequest(sub_id, variable_id, src, dst, subscriber, pub, interval, bound, k)


def test_two_disjoint_paths_and_their_routes() -> None:
    topo = ring()
    res = Reservations(topo)
    plan = plan_subscription(topo, res, req(k=2))
    assert {p.routers for p in plan.paths} == {("r0", "r1", "r2", "r3"), ("r0", "r5", "r4", "r3")}
    assert all(p.latency_ms == 3 + 4 for p in plan.paths)  # 3 channels + 4 routers at 1 ms
    by_path: dict[str, list[Route]] = {}
    for route in plan.routes:
        by_path.setdefault(route.route_id, []).append(route)
    assert set(by_path) == {"s1/0", "s1/1"}
    for index, path in enumerate(plan.paths):
        routes = by_path[f"s1/{index}"]
        assert [r.router for r in routes] == list(path.routers)
        assert [r.channel for r in routes[:-1]] == [f"{u}->{v}" for u, v in zip(path.routers, path.routers[1:],
                                                                                   strict=False)]
        assert routes[-1].channel == "sub:bob"
    # The subscriber channel is crossed by both paths but carries one copy per timestamp.
    assert {d.channel: d.intervals for d in plan.deltas}["sub:bob"] == (1000, 1000)
    commit(res, plan)
    assert res.router_load("r3") == 1 and res.router_load("r0") == 2
    release(res, "s1")
    assert res.is_empty()


def test_too_few_disjoint_paths_offers_the_redundancy_available() -> None:
    topo = ring()
    with pytest.raises(NoFeasiblePath) as info:
        plan_subscription(topo, Reservations(topo), req(k=3))
    assert info.value.reason == "NoFeasiblePath" and info.value.offer == Offer(max_redundancy=2)
    topo.add_router("island")
    with pytest.raises(NoFeasiblePath) as info:
        plan_subscription(topo, Reservations(topo), req(dst="island"))
    assert info.value.offer.max_redundancy == 0
    with pytest.raises(NotFound):
        plan_subscription(topo, Reservations(topo), req(dst="nowhere"))


def test_latency_unattainable_reports_the_best_latency() -> None:
    topo = ring()
    res = Reservations(topo)
    with pytest.raises(LatencyUnattainable) as info:
        plan_subscription(topo, res, req(bound=6.9))
    assert info.value.reason == "LatencyUnattainable"
    # no path meets the bound although two disjoint ones exist: the offer says nothing about redundancy
    assert info.value.offer.best_latency_ms == 7.0 and info.value.offer.max_redundancy is None
    assert plan_subscription(topo, res, req(bound=7.0)).paths[0].latency_ms == 7.0
    # Make one side of the ring slow: two paths exist, only one within the bound.
    topo.remove_channel("r5->r4")
    topo.add_channel("r5", "r4", bandwidth_bps=1e9, latency_ms=50)
    with pytest.raises(LatencyUnattainable) as info:
        plan_subscription(topo, res, req(bound=20, k=2))
    assert info.value.offer == Offer(best_latency_ms=56.0, max_redundancy=1)
    assert res.is_empty()


def fill(topo: Topology, res: Reservations, n: int) -> None:
    for i in range(n):
        commit(res, plan_subscription(topo, res, req(f"s{i}", variable_id=i + 1, src="A", dst="B",
                                                     subscriber=f"c{i}")))


def pair(bandwidth_bps: float, router_eps: float = 1e6) -> Topology:
    topo = Topology()
    topo.add_router("A", RouterRole.EDGE, router_eps)
    topo.add_router("B", RouterRole.EDGE, router_eps)
    topo.add_link("A", "B", bandwidth_bps=bandwidth_bps, latency_ms=1)
    return topo


def test_identical_subscriptions_fill_a_channel_then_exactly_the_next_is_refused() -> None:
    topo = pair(bandwidth_bps=496 * 10)  # 10 events/s; each subscription is 1 event/s of its own variable
    res = Reservations(topo)
    fill(topo, res, 10)
    assert res.channel_load("A->B") == 10
    with pytest.raises(CapacityExceeded) as info:
        plan_subscription(topo, res, req("s10", variable_id=11, src="A", dst="B", subscriber="c10"))
    err = info.value
    assert err.reason == "CapacityExceeded" and err.resource == "A->B" and err.field == "channel"
    assert err.remaining_eps == 0 and err.required_eps == 1
    assert err.offer.min_interval_ms is None  # nothing fits a full channel
    # A subscription sharing a variable already on the channel still fits: it costs 0 there.
    commit(res, plan_subscription(topo, res, req("dup", variable_id=3, src="A", dst="B", subscriber="c3",
                                                 interval=5000)))
    # Freeing one makes room for exactly one more.
    release(res, "s0")
    commit(res, plan_subscription(topo, res, req("s10", variable_id=11, src="A", dst="B", subscriber="c10")))


def test_capacity_offer_is_the_smallest_interval_that_fits() -> None:
    topo = pair(bandwidth_bps=496 * 10.5)
    res = Reservations(topo)
    fill(topo, res, 10)
    with pytest.raises(CapacityExceeded) as info:
        plan_subscription(topo, res, req("x", variable_id=99, src="A", dst="B", subscriber="x"))
    assert info.value.remaining_eps == Fraction(1, 2)
    assert info.value.offer.min_interval_ms == 2000
    commit(res, plan_subscription(topo, res, req("x", variable_id=99, src="A", dst="B", subscriber="x",
                                                 interval=2000)))


def test_router_capacity_is_named() -> None:
    topo = pair(bandwidth_bps=1e9, router_eps=4)
    res = Reservations(topo)
    fill(topo, res, 2)  # A sends 2 events/s, B sends 2 to its subscribers
    with pytest.raises(CapacityExceeded) as info:
        plan_subscription(topo, res, req("s2", variable_id=3, src="A", dst="B", subscriber="c2", pub=100,
                                                   interval=400))
    assert info.value.field == "router" and info.value.resource in {"A", "B"}
    assert info.value.required_eps == Fraction(1000, 400) and info.value.remaining_eps == 2
    assert info.value.offer.min_interval_ms == 500


def test_a_full_channel_is_routed_around_when_the_bound_allows() -> None:
    topo = ring(bandwidth_bps=496 * 1)
    res = Reservations(topo)
    first = plan_subscription(topo, res, req("a", dst="r2", bound=50))
    commit(res, first)
    second = plan_subscription(topo, res, req("b", variable_id=2, dst="r2", subscriber="carol", bound=50))
    assert first.paths[0].routers == ("r0", "r1", "r2")
    assert second.paths[0].routers == ("r0", "r5", "r4", "r3", "r2")
    with pytest.raises(CapacityExceeded) as info:  # the detour is too slow for 6 ms: capacity is the cause
        plan_subscription(topo, res, req("c", variable_id=3, dst="r2", subscriber="dave", bound=6))
    assert info.value.resource == "r0->r1"
    # What could be granted instead: the asked interval over the 9 ms detour (4 channels + 5 routers).
    assert info.value.offer == Offer(best_latency_ms=9.0, max_redundancy=None, min_interval_ms=None)


def test_interval_is_rounded_down_to_a_multiple_of_the_publication_interval() -> None:
    topo = ring()
    plan = plan_subscription(topo, Reservations(topo), req(pub=100, interval=250))
    assert plan.interval_ms == 200 and {d.intervals for d in plan.deltas} == {(200,)}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"sub_id": ""}, "subscription_id"),
        ({"sub_id": "a/b"}, "subscription_id"),
        ({"k": 0}, "redundancy"),
        ({"bound": 0}, "latency_bound_ms"),
        ({"interval": 0}, "sub_interval_ms"),
        ({"pub": -1}, "pub_interval_ms"),
        ({"subscriber": "no spaces"}, "subscriber"),
        ({"variable_id": -1}, "variable_id"),
    ],
)
def test_bad_requests(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        req(**changes)  # type: ignore[arg-type]
    assert info.value.field == field


def test_rejections_are_gridstat_errors_and_not_retriable() -> None:
    topo = ring()
    with pytest.raises(GridStatError) as info:
        plan_subscription(topo, Reservations(topo), req(k=3))
    assert not info.value.retriable and str(info.value).startswith("NoFeasiblePath: ")


def test_bench_admission_runs_on_a_small_cloud() -> None:
    result = bench_admission(n_routers=24, n_subs=200, seed=3, n_variables=50)
    assert result.admitted + result.rejected == 200 and result.admitted > 150
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms and result.total_s > 0


def min_sum_trap() -> Topology:
    """The fastest path s-x-y-t meets both medium paths, so min total latency pairs it with the 10 ms one."""
    topo = Topology()
    for name in "sxyt" "bcd":
        topo.add_router(name, RouterRole.EDGE if name in "st" else RouterRole.INTERNAL)
    for u, v, latency in [("s", "x", 0.5), ("x", "y", 0), ("y", "t", 0.5), ("x", "c", 2.5), ("c", "t", 3),
                          ("s", "d", 3), ("d", "y", 2.5), ("s", "b", 5), ("b", "t", 5)]:
        topo.add_channel(u, v, bandwidth_bps=1e9, latency_ms=latency)
    return topo


def test_each_path_within_the_bound_even_where_min_total_latency_is_not() -> None:
    topo = min_sum_trap()
    res = Reservations(topo)
    plan = plan_subscription(topo, res, req(src="s", dst="t", bound=7, k=2), forwarding_ms=0)
    assert {p.routers for p in plan.paths} == {("s", "x", "c", "t"), ("s", "d", "y", "t")}
    assert max(p.latency_ms for p in plan.paths) == 6
    with pytest.raises(LatencyUnattainable) as info:
        plan_subscription(topo, res, req(src="s", dst="t", bound=5, k=2), forwarding_ms=0)
    assert info.value.offer == Offer(best_latency_ms=10, max_redundancy=1)


def test_capacity_offer_on_a_full_channel_is_an_interval_the_channel_already_carries() -> None:
    topo = pair(bandwidth_bps=496 * 10)
    res = Reservations(topo)
    fill(topo, res, 9)
    commit(res, plan_subscription(topo, res, req("v", variable_id=50, src="A", dst="B", subscriber="c9", pub=500)))
    assert res.channel_load("A->B") == 10
    with pytest.raises(CapacityExceeded) as info:  # 500 ms would add the odd phases: 1 event/s more
        plan_subscription(topo, res, req("w", variable_id=50, src="A", dst="B", subscriber="z", pub=500,
                                         interval=500))
    assert info.value.remaining_eps == 0 and info.value.required_eps == 1
    assert info.value.offer.min_interval_ms == 1000  # shares the 1000 ms stream: free on the channel
    commit(res, plan_subscription(topo, res, req("w", variable_id=50, src="A", dst="B", subscriber="z", pub=500,
                                                 interval=1000)))
