"""Reservations by the rate after filtering (dissertation 4.2.1, 4.3)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.broker.allocation import SubscriptionRequest, commit, plan_subscription, release
from gridstat.broker.generate import edge_routers, random_cloud
from gridstat.broker.rates import forwarded_rate
from gridstat.broker.rejections import AdmissionRejected
from gridstat.broker.resources import ChannelDelta, Reservations, subscriber_channel
from gridstat.broker.topology import RouterRole, Topology
from gridstat.core.filtering import passes_any, round_down_interval
from gridstat.errors import DuplicateName, NotFound, ValidationError


def brute_force_rate(pub: int, intervals: list[int], phase: int) -> Fraction:
    rounded = [round_down_interval(s, pub) for s in intervals]
    period = math.lcm(*rounded)
    count = sum(passes_any(ts, pub, rounded) for ts in range(phase, phase + period, pub))
    return Fraction(1000 * count, period)


def test_dissertation_figure_2_4_rate() -> None:
    # Publication 10 ms, subscriptions 20 and 30 ms: sent at 0, 20, 30, 40 of every 60 ms.
    assert forwarded_rate(10, [20, 30]) == Fraction(4000, 60)
    # Worked example 4.3: 90, 180, 630 over one channel forward exactly what 90 alone does.
    assert forwarded_rate(30, [90, 180, 630]) == forwarded_rate(30, [90]) == Fraction(1000, 90)
    assert forwarded_rate(30, []) == 0
    assert forwarded_rate(30, [10]) == Fraction(1000, 30)  # shorter than the publication: every event


@settings(max_examples=300, deadline=None)
@given(
    pub=st.integers(1, 60),
    multiples=st.lists(st.integers(1, 14), min_size=1, max_size=4),
    extra=st.integers(0, 59),
    phase=st.integers(-1000, 1000),
)
def test_rate_after_filtering_matches_brute_force_over_a_hyperperiod(pub: int, multiples: list[int], extra: int,
                                                                     phase: int) -> None:
    # ``extra`` makes some intervals non-multiples of pub: they are rounded down as GridStat does.
    intervals = [m * pub + (extra % pub) for m in multiples]
    assert forwarded_rate(pub, intervals) == brute_force_rate(pub, intervals, phase)


@given(pub=st.integers(1, 50), multiples=st.lists(st.integers(2, 40), min_size=2, max_size=5))
def test_beyond_the_hyperperiod_limit_the_rate_is_a_safe_upper_bound(pub: int, multiples: list[int]) -> None:
    exact = forwarded_rate(pub, [m * pub for m in multiples])
    bound = forwarded_rate(pub, [m * pub for m in multiples], hyperperiod_limit=1)
    assert exact <= bound <= Fraction(1000, pub)


def line(bandwidth_bps: float = 1e9, router_eps: float = 1e6) -> Topology:
    topo = Topology()
    topo.add_router("A", RouterRole.EDGE, router_eps)
    topo.add_router("B", RouterRole.INTERNAL, router_eps)
    topo.add_router("C", RouterRole.EDGE, router_eps)
    topo.add_link("A", "B", bandwidth_bps=bandwidth_bps, latency_ms=1)
    topo.add_link("B", "C", bandwidth_bps=bandwidth_bps, latency_ms=1)
    return topo


def request(sub_id: str, interval: int, *, subscriber: str = "bob", variable_id: int = 1, pub: int = 10,
            src: str = "A", dst: str = "C", k: int = 1, bound: float = 100.0) -> SubscriptionRequest:
    return SubscriptionRequest(sub_id, variable_id, src, dst, subscriber, pub, interval, bound, k)


def test_multicast_sharing_at_a_multiple_interval_costs_nothing_on_channels() -> None:
    topo = line()
    res = Reservations(topo)
    commit(res, plan_subscription(topo, res, request("s1", 100)))
    assert res.channel_load("A->B") == res.channel_load("B->C") == 10
    shared = plan_subscription(topo, res, request("s2", 300, subscriber="carol"))
    by_channel = {d.channel: d.increase_eps for d in shared.deltas}
    assert by_channel == {"A->B": 0, "B->C": 0, "sub:carol": Fraction(1000, 300)}
    duplicate = plan_subscription(topo, res, request("s3", 200))
    assert all(d.increase_eps == 0 for d in duplicate.deltas)  # same subscriber too: free everywhere
    commit(res, shared)
    commit(res, duplicate)
    assert res.channel_load("A->B") == 10 and res.router_load("A") == 10
    assert res.router_load("C") == 10 + Fraction(1000, 300)  # C sends to bob and to carol
    # A non-multiple interval adds only the timestamps the existing ones do not pass.
    mixed = plan_subscription(topo, res, request("s4", 150, subscriber="dave"))
    assert {d.channel: d.increase_eps for d in mixed.deltas}["A->B"] == \
        forwarded_rate(10, [100, 150]) - forwarded_rate(10, [100])
    # Releasing the first subscription leaves the 200/300 ms ones: the channel now carries them only.
    release(res, "s1")
    assert res.channel_load("A->B") == forwarded_rate(10, [200, 300])
    assert res.intervals("A->B", 1) == {300: 1, 200: 1}


def test_commit_and_release_errors() -> None:
    topo = line()
    res = Reservations(topo)
    plan = plan_subscription(topo, res, request("s1", 100))
    commit(res, plan)
    with pytest.raises(DuplicateName):
        commit(res, plan)
    with pytest.raises(NotFound):
        release(res, "nope")
    with pytest.raises(ValidationError):  # same variable with another publication interval
        plan_subscription(topo, res, request("s2", 100, pub=20))
    with pytest.raises(ValidationError):  # bob hangs off C, not A
        plan_subscription(topo, res, request("s3", 100, dst="A", src="C"))
    delta = ChannelDelta("A->B", "B", 1, 10, (100,), Fraction(0))
    with pytest.raises(ValidationError):  # A->B is sent by A
        res.commit("bad", [delta])
    release(res, "s1")
    assert res.is_empty()


def test_commit_rechecks_a_stale_plan() -> None:
    topo = line(bandwidth_bps=496 * 15)  # 15 events/s per channel
    res = Reservations(topo)
    first = plan_subscription(topo, res, request("s1", 100, variable_id=1))
    second = plan_subscription(topo, res, request("s2", 100, variable_id=2))
    commit(res, first)
    with pytest.raises(AdmissionRejected) as info:
        commit(res, second)
    assert info.value.reason == "CapacityExceeded"
    assert res.held.keys() == {"s1"}


def snapshot(res: Reservations, topo: Topology) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    names = [*topo.channels, *(subscriber_channel(f"{e}-c{i}") for e in topo.routers for i in range(3))]
    channels = {n: res.channel_load(n) for n in names if res.channel_load(n)}
    routers = {n: res.router_load(n) for n in topo.routers if res.router_load(n)}
    return channels, routers


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), ops=st.lists(st.tuples(st.integers(0, 10**6), st.booleans()), max_size=40))
def test_random_admit_release_sequences_are_exact_and_return_to_zero(seed: int, ops: list[tuple[int, bool]]) -> None:
    # Tight capacities so that some admissions are refused: refusals must leave no trace.
    topo = random_cloud(8, seed=seed, edge_every=2, bandwidth_bps=496 * 120, router_capacity_eps=300)
    edges = edge_routers(topo)
    res = Reservations(topo)
    held: list[SubscriptionRequest] = []
    for n, (draw, remove) in enumerate(ops):
        if remove and held:
            req = held.pop(draw % len(held))
            release(res, req.subscription_id)
        else:
            dst = edges[draw % len(edges)]
            pub = (10, 20, 30)[draw % 3]
            variable_id = 1 + (draw // 5) % 4 * 3 + pub // 10  # each variable has one pub interval and publisher
            req = request(f"s{n}", pub * (1 + draw % 7), subscriber=f"{dst}-c{draw % 3}", variable_id=variable_id,
                          pub=pub, src=edges[variable_id % len(edges)], dst=dst, k=1 + draw % 2, bound=1000)
            try:
                commit(res, plan_subscription(topo, res, req))
                held.append(req)
            except AdmissionRejected:
                pass
        # The incremental state equals a rebuild from scratch of what is held now.
        fresh = Reservations(topo)
        for req in held:
            fresh.commit(req.subscription_id, res.held[req.subscription_id])
        assert snapshot(res, topo) == snapshot(fresh, topo)
        for name in topo.channels:
            assert res.channel_load(name) <= topo.channel_capacity_eps(name)
        for name, router in topo.routers.items():
            assert res.router_load(name) <= router.capacity_eps
    for req in held:
        release(res, req.subscription_id)
    assert res.is_empty()
    assert snapshot(res, topo) == ({}, {})
