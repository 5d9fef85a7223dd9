"""k disjoint paths across clouds (docs/redundancy.md, "Across clouds"): the parent's pure planning of
hop sequences that share no border router and no inter-cloud channel, checked against brute force."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.broker import parent as plan
from gridstat.broker.rejections import NoFeasiblePath
from gridstat.errors import ValidationError

# Two clouds joined by two parallel channels between distinct border routers.
AB1 = plan.InterChannel("A", "bA1", "B", "bB1", 100_000_000, 2.0)
AB2 = plan.InterChannel("A", "bA2", "B", "bB2", 100_000_000, 4.0)


def names(paths: tuple[tuple[plan.Hop, ...], ...]) -> list[list[str]]:
    return [[h.name for h in p] for p in paths]


def test_two_parallel_channels_give_two_paths_and_no_third() -> None:
    assert names(plan.disjoint_cloud_paths([AB1, AB2], "A", "B", 2)) == [["bA1->bB1"], ["bA2->bB2"]]
    assert names(plan.disjoint_cloud_paths([AB1, AB2], "A", "B", 3)) == [["bA1->bB1"], ["bA2->bB2"]]
    assert names(plan.disjoint_cloud_paths([AB1, AB2], "A", "B", 1)) == [["bA1->bB1"]]
    # A channel that is not usable (full, or at a router reported down) leaves one path.
    assert names(plan.disjoint_cloud_paths([AB1, AB2], "A", "B", 2, usable=lambda h: h.src_router != "bA1")) == [
        ["bA2->bB2"]]


def test_a_shared_border_router_allows_one_path_only() -> None:
    shared = plan.InterChannel("A", "bA1", "B", "bB2", 100_000_000, 1.0)  # bA1 again
    assert names(plan.disjoint_cloud_paths([AB1, shared], "A", "B", 2)) == [["bA1->bB2"]]


def test_the_shortest_path_is_given_up_when_two_disjoint_paths_need_it() -> None:
    """The trap of "shortest path, then the next one without its routers": A -> B -> C -> D is the
    shortest, but it takes the only router of B and C that each of the two disjoint paths needs."""
    channels = [
        plan.InterChannel("A", "a1", "B", "b1", 1e8, 1.0),
        plan.InterChannel("B", "b2", "D", "d1", 1e8, 10.0),
        plan.InterChannel("A", "a2", "C", "c1", 1e8, 10.0),
        plan.InterChannel("C", "c2", "D", "d2", 1e8, 1.0),
        plan.InterChannel("B", "b2", "C", "c1", 1e8, 1.0),  # the shortcut: b2 and c1 are needed apart
    ]
    one = plan.disjoint_cloud_paths(channels, "A", "D", 1)
    assert names(one) == [["a1->b1", "b2->c1", "c2->d2"]]
    two = plan.disjoint_cloud_paths(channels, "A", "D", 2)
    assert sorted(names(two)) == [["a1->b1", "b2->d1"], ["a2->c1", "c2->d2"]]


def test_segments_of_each_path_have_their_own_lane() -> None:
    paths = plan.disjoint_cloud_paths([AB1, AB2], "A", "B", 2)
    plans = [plan.plan_segments("A", hops, plan.path_budgets(40.0, "A", hops), publisher_edge="eA",
                                subscriber_edge="eB", subscriber="ems", path=i, paths=2)
             for i, hops in enumerate(paths)]
    assert [[(s.cloud, s.kind, s.from_router, s.to_router, s.next_channel, s.lane) for s in p] for p in plans] == [
        [("A", plan.START, "eA", "bA1", "bB1", 0), ("B", plan.END, "bB1", "eB", "sub:ems", 0)],
        [("A", plan.START, "eA", "bA2", "bB2", 1), ("B", plan.END, "bB2", "eB", "sub:ems", 1)],
    ]
    for p, hops in zip(plans, paths, strict=True):  # each path's budgets fill its own bound
        assert sum(s.budget_ms for s in p) + sum(h.latency_ms for h in hops) == pytest.approx(40.0)


def test_a_path_crossing_a_cloud_twice_keys_its_segments_apart() -> None:
    hops = (plan.Hop("A", "a1", "B", "b1", 1.0), plan.Hop("B", "b2", "C", "c1", 1.0),
            plan.Hop("C", "c2", "B", "b3", 1.0), plan.Hop("B", "b4", "D", "d1", 1.0))
    segs = plan.plan_segments("A", hops, plan.path_budgets(50.0, "A", hops), publisher_edge="eA",
                              subscriber_edge="eD", subscriber="ems", path=1, paths=2)
    assert [(s.cloud, s.lane) for s in segs] == [("A", 1), ("B", 1), ("C", 1), ("B", 3), ("D", 1)]


def test_too_few_disjoint_paths_are_refused_with_the_real_maximum() -> None:
    plan.check_redundancy(2, 2)
    with pytest.raises(NoFeasiblePath) as info:
        plan.check_redundancy(3, 2)
    assert info.value.offer.max_redundancy == 2
    assert info.value.field == "redundancy" and "redundancy 3" in str(info.value)
    with pytest.raises(ValidationError):
        plan.disjoint_cloud_paths([AB1], "A", "A", 2)


# -- against brute force ---------------------------------------------------------------------------
def simple_paths(channels: list[plan.InterChannel], src: str, dst: str) -> Iterator[tuple[plan.Hop, ...]]:
    """Every hop sequence src -> dst using no border router twice (a path entering and leaving a cloud
    at one router uses it once), never back into src, never out of dst."""
    hops = [h for ch in channels for h in ch.hops()]

    def extend(path: tuple[plan.Hop, ...], used: frozenset[str]) -> Iterator[tuple[plan.Hop, ...]]:
        cloud = path[-1].dst_cloud if path else src
        if cloud == dst:
            yield path
            return
        entry = path[-1].dst_router if path else None
        for h in hops:
            if h.src_cloud != cloud or h.dst_cloud == src or h.dst_router in used:
                continue
            if h.src_router in used and h.src_router != entry:
                continue
            yield from extend((*path, h), used | {h.src_router, h.dst_router})

    yield from extend((), frozenset())


def routers(path: tuple[plan.Hop, ...]) -> set[str]:
    return {r for h in path for r in (h.src_router, h.dst_router)}


def cost(path: tuple[plan.Hop, ...], crossing: dict[str, float]) -> float:
    total = crossing.get(path[0].src_cloud, 1.0) + sum(h.latency_ms + crossing.get(h.dst_cloud, 1.0) for h in path)
    return float(total)


def best_disjoint(candidates: list[tuple[plan.Hop, ...]], k: int,
                  crossing: dict[str, float]) -> tuple[int, float]:
    """The most pairwise router-disjoint paths (up to k) and the least total cost of that many."""
    for j in range(min(k, len(candidates)), 0, -1):
        costs = [sum(cost(p, crossing) for p in combo) for combo in itertools.combinations(candidates, j)
                 if all(not routers(p) & routers(q) for p, q in itertools.combinations(combo, 2))]
        if costs:
            return j, min(costs)
    return 0, 0.0


@st.composite
def hierarchies(draw: st.DrawFn) -> tuple[list[plan.InterChannel], dict[str, float], str, str]:
    """A few clouds, few border routers each (so paths compete for them), channels between them."""
    clouds = ["A", "B", "C", "D"][:draw(st.integers(2, 4))]
    per_cloud = {c: [f"{c.lower()}{i}" for i in range(draw(st.integers(1, 3)))] for c in clouds}
    pairs = [(ca, ra, cb, rb) for ca, cb in itertools.combinations(clouds, 2)
             for ra in per_cloud[ca] for rb in per_cloud[cb]]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=9, unique_by=lambda p: (p[1], p[3])))
    channels = [plan.InterChannel(ca, ra, cb, rb, 1e8, draw(st.sampled_from([0.5, 1.0, 2.0, 5.0])))
                for ca, ra, cb, rb in chosen]
    crossing = {c: draw(st.sampled_from([0.5, 1.0, 3.0])) for c in clouds}
    src = draw(st.sampled_from(clouds))
    dst = draw(st.sampled_from([c for c in clouds if c != src]))
    return channels, crossing, src, dst


@settings(max_examples=600, deadline=None)
@given(hierarchies(), st.integers(1, 4))
def test_disjoint_paths_are_valid_disjoint_as_many_as_exist_and_least_latency(
        h: tuple[list[plan.InterChannel], dict[str, float], str, str], k: int) -> None:
    channels, crossing, src, dst = h
    found = plan.disjoint_cloud_paths(channels, src, dst, k, crossing=crossing)
    for p in found:  # valid: from src to dst along channels that exist, never back into src
        assert p and p[0].src_cloud == src and p[-1].dst_cloud == dst
        assert all(a.dst_cloud == b.src_cloud for a, b in itertools.pairwise(p))
        assert all(h.dst_cloud != src and h.src_cloud != dst for h in p)
        assert all(h in {x for ch in channels for x in ch.hops()} for h in p)
    for p, q in itertools.combinations(found, 2):  # disjoint: no border router, hence no channel, shared
        assert not routers(p) & routers(q)
    candidates = list(simple_paths(channels, src, dst))
    most, least = best_disjoint(candidates, k, crossing)
    assert len(found) == most  # as many as exist (Menger), up to k
    if found:  # and of least total latency (the hub steps cost 1e-6 each)
        assert sum(cost(p, crossing) for p in found) == pytest.approx(least, abs=1e-4)
    if k == 1 and found:  # one path: the same latency as the cloud-level Dijkstra
        single = plan.cloud_path(channels, src, dst, crossing=crossing)
        assert single is not None and cost(single, crossing) == pytest.approx(cost(found[0], crossing), abs=1e-4)
