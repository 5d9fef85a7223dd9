"""The extended advertisement covering graph and Theorem 1: the worked examples of RacsCBPS (docs/admission.md)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.admission.covering import (
    AdvertisementGraph,
    InvalidAdvertisement,
    NoMatchingAdvertisement,
)
from gridstat.admission.filters import Filter
from gridstat.errors import DuplicateName, NotFound


def f(text: str) -> Filter:
    return Filter.parse(text)


def rc(g: AdvertisementGraph, text: str) -> tuple[float, int]:
    n = g.node(f(text))
    return n.rate, n.count


def scenario_a() -> AdvertisementGraph:
    g = AdvertisementGraph()
    g.advertise("a-root", f("price>0"), 4)
    g.advertise("a-5", f("price>5"), 9)
    g.advertise("a-deu", f("price>3, name=DEU"), 4)
    return g


def scenario_b_before() -> AdvertisementGraph:
    """Fig. 4(b) before the new root: price>5 20/3 and price>3 ∧ DEU 15/2 share price>8 ∧ DEU."""
    g = AdvertisementGraph()
    g.advertise("b-5", f("price>5"), 5)
    g.advertise("b-deu", f("price>3, name=DEU"), 4)
    g.advertise("b-9", f("price>9"), 4)
    g.advertise("b-8deu", f("price>8, name=DEU"), 11)
    return g


def test_fig3_tree() -> None:
    g = scenario_a()
    assert rc(g, "price>0") == (17, 3)
    assert rc(g, "price>5") == (9, 1)
    assert rc(g, "price>3, name=DEU") == (4, 1)
    assert g.node(f("price>0")).children == {"price>5", "name=DEU, price>3"}
    g.check()


def test_fig4a_identical_filter_adds_to_the_node_and_its_ancestors() -> None:
    g = scenario_a()
    ins = g.advertise("a-5b", f("price>5"), 3)
    assert not ins.created
    assert rc(g, "price>5") == (12, 2)
    assert rc(g, "price>0") == (20, 4)
    assert rc(g, "price>3, name=DEU") == (4, 1)
    g.check()


def test_fig4b_new_root_with_the_shared_descendant_correction() -> None:
    g = scenario_b_before()
    assert rc(g, "price>5") == (20, 3)
    assert rc(g, "price>3, name=DEU") == (15, 2)
    ins = g.advertise("b-0", f("price>0"), 4)
    assert ins.created
    assert (ins.d_rate, ins.d_count) == (11, 1)  # price>8 ∧ DEU is under both successors
    assert rc(g, "price>0") == (28, 5)
    g.check()


def test_fig4c_node_under_two_parents_updates_each_ancestor_once() -> None:
    g = scenario_b_before()
    g.advertise("b-0", f("price>0"), 4)
    g.advertise("b-7deu", f("price>7, name=DEU"), 3)
    assert rc(g, "price>7, name=DEU") == (14, 2)
    assert rc(g, "price>5") == (23, 4)
    assert rc(g, "price>3, name=DEU") == (18, 3)
    assert rc(g, "price>0") == (31, 6)  # reachable twice, updated once
    assert rc(g, "price>9") == (4, 1)
    assert rc(g, "price>8, name=DEU") == (11, 1)
    assert g.node(f("price>7, name=DEU")).parents == {"price>5", "name=DEU, price>3"}
    # The old direct edges to price>8 ∧ DEU now go through the new node.
    assert g.node(f("price>8, name=DEU")).parents == {"name=DEU, price>7"}
    g.check()


def final_tree() -> AdvertisementGraph:
    g = scenario_b_before()
    g.advertise("b-0", f("price>0"), 4)
    g.advertise("b-7deu", f("price>7, name=DEU"), 3)
    return g


def test_fig5_requirement_interval() -> None:
    req = final_tree().requirement(f("price>2, name=DEU"))
    assert (req.min_rate, req.max_rate, req.min_count, req.max_count) == (18, 31, 3, 6)
    assert not req.exact
    assert req.predecessors == ("price>0",)
    assert req.successors == ("name=DEU, price>3",)


def test_identical_filter_requirement_is_exact() -> None:
    req = final_tree().requirement(f("price>5"))
    assert (req.min_rate, req.max_rate, req.min_count, req.max_count, req.exact) == (23, 23, 4, 4, True)


def test_the_rate_filter_caps_the_requirement() -> None:
    g = AdvertisementGraph()
    g.advertise("pmu1/freq", Filter.for_variable("pmu1/freq"), 60)
    g.advertise("pmu1/volt", Filter.for_variable("pmu1/volt"), 30)
    exact = g.requirement(Filter.for_variable("pmu1/freq"), interval_ms=100)
    assert (exact.min_rate, exact.max_rate) == (10, 10)
    both = g.requirement(Filter.for_variable("pmu1/*"), interval_ms=50)
    assert both.max_rate == 40 and both.min_rate == 20  # two publishers at most 20/s each; at least 20
    assert g.requirement(Filter.for_variable("pmu1/*")).max_rate == 90


def test_theorem_1_upper_bound_as_stated_and_the_overlap_bound_as_an_option() -> None:
    # S = {price>0} (4/s of its own, and price>5 ∧ DEU's 10/s under it); price<3 is not under it.
    g = AdvertisementGraph()
    g.advertise("root", f("price>0"), 4)
    g.advertise("x", f("price>5, name=DEU"), 10)
    g.advertise("y", f("price<3"), 7)
    theorem = g.requirement(f("price>4"))
    assert g.node(f("price>0")).rate == 14
    assert (theorem.min_rate, theorem.max_rate, theorem.max_count) == (10, 14, 2)
    assert theorem.predecessors == ("price>0",)
    assert (theorem.overlap_rate, theorem.overlap_count) == (14, 2)
    # An advertisement under price>0 but disjoint from price>4: Theorem 1's bound (price>0's rate)
    # takes it, the overlap total does not.
    g.advertise("z", f("price>1, price<2"), 6)
    theorem = g.requirement(f("price>4"))
    assert theorem.max_rate == 20 and theorem.overlap_rate == 14
    tight = g.requirement(f("price>4"), overlap_bound=True)
    assert (tight.min_rate, tight.max_rate, tight.max_count) == (10, 14, 2)


def test_the_interval_cap_applies_to_the_lower_bound_as_to_the_upper() -> None:
    # Three publishers of 20/s each under pmu*/freq's successor; a subscription at 100 ms takes at most
    # 10/s from each: at least 30/s (the successor's three publishers), not min(60, 10) = 10.
    g = AdvertisementGraph()
    for i in (1, 2, 3):
        g.advertise(f"p{i}", f(f"publisher=pmu{i}, variable=freq, zone=1"), 20)
    g.advertise("zone", f("zone=1"), 20)
    g.advertise("freq", f("variable=freq, zone=1"), 5)
    req = g.requirement(f("variable=freq"), interval_ms=100)
    assert req.successors == ("variable=freq, zone=1",)
    assert req.min_rate == 5 + 3 * 10 and req.min_count == 4
    # S empty: the overlapping advertisements (zone=1 may publish freq too), each capped at 10/s.
    assert req.max_rate == 5 + 3 * 10 + 10 and req.max_count == 5
    uncapped = g.requirement(f("variable=freq"))
    assert (uncapped.min_rate, uncapped.max_rate) == (65, 85)
    assert req.min_rate <= req.max_rate


def test_a_subscription_covering_nothing_is_refused() -> None:
    g = final_tree()
    with pytest.raises(NoMatchingAdvertisement):
        g.requirement(f("price<0"))
    with pytest.raises(NoMatchingAdvertisement):
        AdvertisementGraph().requirement(f("price>1"))


def test_no_covering_node_bounds_by_the_overlapping_advertisements() -> None:
    g = AdvertisementGraph()
    g.advertise("x", f("price>5, name=DEU"), 10)
    g.advertise("y", f("price<3"), 7)
    req = g.requirement(f("price>4"))
    assert (req.min_rate, req.max_rate) == (10, 10)  # only x overlaps; x is covered, so at least 10


@pytest.mark.parametrize("rate", [-1.0, 0.0, float("nan"), float("inf"), 1e7, "fast"])
def test_negative_zero_or_absurd_rates_are_refused(rate: object) -> None:
    g = AdvertisementGraph()
    with pytest.raises(InvalidAdvertisement):
        g.advertise("x", f("price>1"), rate)  # type: ignore[arg-type]
    assert len(g) == 0 and g.version == 0


def test_duplicate_and_unknown_ids() -> None:
    g = scenario_a()
    with pytest.raises(DuplicateName):
        g.advertise("a-root", f("price>1"), 1)
    with pytest.raises(NotFound):
        g.unadvertise("nope")


def test_unadvertise_inverts_the_worked_examples() -> None:
    g = final_tree()
    g.unadvertise("b-7deu")
    assert rc(g, "price>0") == (28, 5)
    assert g.node(f("price>8, name=DEU")).parents == {"price>5", "name=DEU, price>3"}
    g.check()
    g.unadvertise("b-0")
    assert rc(g, "price>5") == (20, 3)
    g.check()
    for ad in ("b-5", "b-deu", "b-9", "b-8deu"):
        g.unadvertise(ad)
        g.check()
    assert len(g) == 0


_FILTERS = [f"price>{p}" for p in (0, 3, 5, 7, 9)] \
    + [f"price>{p}, name={n}" for p in (2, 5, 8) for n in ("DEU", "FRA")] \
    + ["name=DEU", "price<4", "price>1, price<6", "*"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_FILTERS), st.integers(1, 20), st.booleans()), min_size=1, max_size=25),
       st.randoms(use_true_random=False))
def test_random_sequences_keep_the_invariant_and_return_to_empty(ops: list[tuple[str, int, bool]],
                                                                  rnd: random.Random) -> None:
    g = AdvertisementGraph()
    live: list[str] = []
    for i, (text, rate, remove) in enumerate(ops):
        if remove and live:
            g.unadvertise(live.pop(rnd.randrange(len(live))))
        else:
            g.advertise(f"a{i}", f(text), rate)
            live.append(f"a{i}")
        g.check()
        # Theorem 1 holds for every filter against the brute-force truth.
        for text2 in _FILTERS[:6]:
            sub = f(text2)
            try:
                req = g.requirement(sub)
            except NoMatchingAdvertisement:
                continue
            truth_hi = sum(r for _, (k, r) in g.advertisements().items() if sub.intersects(g.node(k).filter))
            truth_lo = sum(r for _, (k, r) in g.advertisements().items() if sub.covers(g.node(k).filter))
            assert req.min_rate <= truth_lo + 1e-9 and req.max_rate + 1e-9 >= truth_lo
            assert req.exact or math.isclose(req.overlap_rate, truth_hi)
            # Theorem 1's upper bound need not be below the overlap total; the overlap option is.
            tight = g.requirement(sub, overlap_bound=True)
            assert tight.max_rate <= truth_hi + 1e-9 and tight.max_rate <= req.max_rate + 1e-9
            assert tight.min_rate == req.min_rate
            # The graph's edge-following look-ups find what a scan of every node finds.
            around = g._search(sub)
            scan_cover = [n for n in g.nodes() if n.key != sub.key and n.filter.covers(sub)]
            assert {n.key for n in around.covering} == {n.key for n in scan_cover}
            assert {n.key for n in around.predecessors()} == {
                n.key for n in scan_cover if not any(m is not n and n.filter.covers(m.filter) for m in scan_cover)}
            scan_succ = [n for n in g.nodes() if n.key != sub.key and sub.covers(n.filter)]
            assert {n.key for n in around.successors()} == {
                n.key for n in scan_succ if not any(m is not n and m.filter.covers(n.filter) for m in scan_succ)}
            assert {n.key for n in around.overlapping} == {n.key for n in g.nodes() if n.filter.intersects(sub)}
            assert {r.key for r in g.roots()} == {n.key for n in g.nodes() if not n.parents}
    for ad in live:
        g.unadvertise(ad)
    g.check()
    assert len(g) == 0 and g.total_rate == 0
