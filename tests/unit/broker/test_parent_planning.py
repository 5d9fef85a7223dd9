"""Pure planning of parent QoS brokers: cloud paths, budgets, inter-cloud capacity, the LCA decision."""

from __future__ import annotations

import pytest

from gridstat.broker import parent as plan
from gridstat.broker.rejections import CapacityExceeded, LatencyUnattainable
from gridstat.errors import ValidationError

AB = plan.InterChannel("A", "bA", "B", "bB1", 100_000_000, 2.0)
BC = plan.InterChannel("B", "bB2", "C", "bC", 100_000_000, 2.0)
AC = plan.InterChannel("A", "bA2", "C", "bC2", 100_000_000, 10.0)


def test_cloud_path_minimises_latency_and_respects_usable() -> None:
    hops = plan.cloud_path([AB, BC, AC], "A", "C")
    assert hops is not None and [h.name for h in hops] == ["bA->bB1", "bB2->bC"]
    direct = plan.cloud_path([AB, BC, AC], "A", "C", usable=lambda h: h.name != "bB2->bC")
    assert direct is not None and [h.name for h in direct] == ["bA2->bC2"]
    # A slow transit cloud makes the direct channel the better choice.
    slow = plan.cloud_path([AB, BC, AC], "A", "C", crossing={"B": 20.0})
    assert slow is not None and [h.name for h in slow] == ["bA2->bC2"]
    assert plan.cloud_path([AB], "A", "C") is None
    reverse = plan.cloud_path([AB, BC], "C", "A")
    assert reverse is not None and [h.name for h in reverse] == ["bC->bB2", "bB1->bA"]


def test_budgets_split_evenly_then_proportionally() -> None:
    hops = plan.cloud_path([AB, BC], "A", "C")
    assert hops is not None
    even = plan.split_budgets(34.0, "A", hops)
    assert even == pytest.approx({"A": 10.0, "B": 10.0, "C": 10.0})
    prop = plan.split_budgets(34.0, "A", hops, {"A": 3.0, "B": 1.0, "C": 3.0})
    assert prop == pytest.approx({"A": 30 * 3 / 7, "B": 30 / 7, "C": 30 * 3 / 7})
    assert sum(prop.values()) + 4.0 == pytest.approx(34.0)
    with pytest.raises(LatencyUnattainable) as info:
        plan.split_budgets(10.0, "A", hops, {"A": 3.0, "B": 1.0, "C": 3.0})
    assert info.value.offer.best_latency_ms == pytest.approx(11.0)


def test_segment_plan_start_mid_end() -> None:
    hops = plan.cloud_path([AB, BC], "A", "C")
    assert hops is not None
    budgets = plan.split_budgets(34.0, "A", hops)
    segs = plan.plan_segments("A", hops, budgets, publisher_edge="eA", subscriber_edge="eC", subscriber="ems")
    assert [(s.cloud, s.kind, s.from_router, s.to_router, s.next_channel) for s in segs] == [
        ("A", plan.START, "eA", "bA", "bB1"),
        ("B", plan.MID, "bB1", "bB2", "bC"),
        ("C", plan.END, "bC", "eC", "sub:ems"),
    ]
    with pytest.raises(ValidationError):
        plan.plan_segments("A", (), {"A": 5.0}, publisher_edge="eA", subscriber_edge="eA2", subscriber="x")



def test_capacity_rejects_exactly_when_full() -> None:
    # 62 B per event -> 496 bits: 4960 bps carry exactly 10 events/s, i.e. one 100 ms subscription.
    books = plan.InterCloudBooks()
    books.add(plan.InterChannel("A", "bA", "B", "bB", 4960, 2.0))
    hop, back = plan.InterChannel("A", "bA", "B", "bB", 4960, 2.0).hops()
    assert books.usable(0, 7, 10, 100)(hop)
    books.reserve("s1", 0, hop, 7, 10, 100)
    assert books.load(0, hop.name) == 10
    # The same variable at a multiple of a routed interval costs nothing (rate after filtering).
    books.reserve("s2", 0, hop, 7, 10, 200)
    assert not books.usable(0, 8, 10, 100)(hop)
    with pytest.raises(CapacityExceeded):
        books.reserve("s3", 0, hop, 8, 10, 100)
    books.reserve("s3", 1, hop, 8, 10, 100)  # another mode has its own reservations
    books.reserve("s4", 0, back, 8, 10, 100)  # and the other direction its own capacity
    with pytest.raises(ValidationError):
        books.remove("bA", "bB")  # carries subscriptions
    for key, mode in (("s1", 0), ("s2", 0), ("s3", 1), ("s4", 0)):
        assert books.release(key, mode)
    assert books.load(0, hop.name) == 0
    books.remove("bB", "bA")
    assert books.channels == {}


def test_three_level_delegation_decides_the_lca() -> None:
    # R -> P1 (A, B), P2 (C); P1 -> A, B.
    r_children = {"P1": frozenset({"A", "B"}), "P2": frozenset({"C"})}
    p1, p2, root = frozenset({"A", "B"}), frozenset({"C"}), frozenset({"A", "B", "C"})
    # A subscriber in C to a variable of A: P2 does not hold A and goes up; R is the LCA.
    assert plan.decide(None, "C", p2, has_parent=True) == "up"
    assert plan.decide("A", "C", root, has_parent=False) == "plan"
    # A subscriber in B to a variable of A: P1 is the LCA.
    assert plan.decide("A", "B", p1, has_parent=True) == "plan"
    # No cloud publishes it: the root says so.
    assert plan.decide(None, "C", root, has_parent=False) == "unknown"
    # Channels are registered at the LCA of their clouds.
    assert plan.channel_owner("A", "B", r_children) == "P1"
    assert plan.channel_owner("B", "C", r_children) is None
    assert plan.child_for("C", r_children) == "P2"
    with pytest.raises(ValidationError):
        plan.channel_owner("A", "Z", r_children)
