"""Hop-by-hop admission against CPU, bandwidth and memory with both criteria (RacsCBPS 4.2, checklist 5-6)."""

from __future__ import annotations

import pytest

from gridstat.admission.admitting import (
    AdmissionController,
    Bound,
    Hop,
    LinkCapacity,
    Policy,
    RouterCapacity,
)
from gridstat.admission.filters import Filter
from gridstat.errors import ValidationError

PMU = Filter.for_variable("pmu1/freq")
PATH = [Hop("e1", "e1>i1"), Hop("i1", "i1>e2"), Hop("e2", "sub:ems")]


def controller(policy: Policy = Policy.FULL, *, i1_cpu: float = 1000, min_fraction: float = 0.0,
               bound: Bound = Bound.UPPER) -> AdmissionController:
    c = AdmissionController(policy=policy, bound=bound, min_fraction=min_fraction, event_bytes=40, entry_bytes=0,
                            buffer_s=1.0)
    c.declare([RouterCapacity("e1", 1000, 1e9), RouterCapacity("i1", i1_cpu, 1e9), RouterCapacity("e2", 1000, 1e9)],
              [LinkCapacity("e1>i1", 1e6), LinkCapacity("i1>e2", 1e6)])
    c.advertise("pmu1/freq", PMU, 60)
    return c


def used(c: AdmissionController) -> dict[tuple[int, str, str], float]:
    return {k: round(v, 6) for k, v in c.used.items()}


def test_admitted_reserves_cpu_bandwidth_and_memory_at_every_hop() -> None:
    c = controller()
    d = c.admit("s1", PMU, PATH)
    assert d.admitted and d.reason == "Admitted" and d.fraction == 1.0 and d.reserved_eps == 60
    assert used(c)[(0, "cpu", "i1")] == 60
    assert used(c)[(0, "bandwidth", "e1>i1")] == 60 * 40 * 8
    assert used(c)[(0, "memory", "e2")] == 60 * 40
    assert (0, "bandwidth", "sub:ems") not in c.used  # subscriber links have no bandwidth model
    assert c.admit("s1", PMU, PATH) is d  # idempotent: a retried request reserves nothing twice
    assert c.release("s1") and not c.used and not c.release("s1")


def test_full_policy_rejects_at_the_first_full_hop_and_reserves_nothing() -> None:
    c = controller(i1_cpu=100)
    assert c.admit("s1", PMU, PATH).admitted
    before = dict(c.used)
    d = c.admit("s2", Filter.for_variable("pmu1/freq"), PATH)
    assert not d.admitted and d.reason == "CapacityExceeded"
    assert [v.hop.router for v in d.limiting] == ["i1"] and d.limiting[0].resource == "cpu"
    assert {v.hop.router for v in d.hops} == {"e1", "i1"}  # it stopped at i1: e2 was never examined
    assert "router 'i1' cpu: needs 60 events/s, 40 left" in d.message
    assert c.used == before


def test_percentage_policy_walks_every_hop_and_reports_the_guaranteed_fraction() -> None:
    c = controller(Policy.PERCENTAGE, i1_cpu=100)
    assert c.admit("s1", PMU, PATH).admitted
    d = c.admit("s2", PMU, PATH)
    assert d.admitted and d.reason == "PartiallyGuaranteed"
    assert d.fraction == pytest.approx(40 / 60)
    assert {v.hop.router for v in d.hops} == {"e1", "i1", "e2"}  # every hop was examined
    assert d.reserved_eps == pytest.approx(40)
    assert c.used[(0, "cpu", "i1")] == pytest.approx(100)  # full, never beyond
    third = c.admit("s3", PMU, PATH)
    assert not third.admitted and third.fraction == 0.0


def test_percentage_policy_below_the_minimum_fraction_is_rejected() -> None:
    c = controller(Policy.PERCENTAGE, i1_cpu=100, min_fraction=0.8)
    c.admit("s1", PMU, PATH)
    d = c.admit("s2", PMU, PATH)
    assert not d.admitted and "at least 80 %" in d.message and d.fraction == pytest.approx(40 / 60)


def test_bandwidth_and_memory_limits() -> None:
    c = AdmissionController(event_bytes=40, entry_bytes=1000, buffer_s=1.0)
    c.declare([RouterCapacity("e1", 1e6, 4000)], [LinkCapacity("e1>i1", 60 * 40 * 8 * 1.5)])
    c.advertise("a", PMU, 60)
    assert c.admit("s1", PMU, [Hop("e1", "e1>i1")]).admitted
    d = c.admit("s2", PMU, [Hop("e1", "e1>i1")])
    assert {v.resource for v in d.limiting} == {"bandwidth", "memory"}


def test_modes_have_their_own_pools() -> None:
    c = controller(i1_cpu=60)
    assert c.admit("s1", PMU, PATH).admitted
    assert not c.admit("s2", PMU, PATH).admitted
    assert c.admit("s3", PMU, [Hop(h.router, h.link, 1) for h in PATH]).admitted


def test_lower_bound_reserves_the_optimistic_end() -> None:
    c = controller(bound=Bound.LOWER)
    c.advertise("pmu2/freq", Filter.for_variable("pmu2/freq"), 30)
    d = c.admit("s1", Filter.parse("variable=freq"), PATH)
    assert d.admitted and d.reserved_eps == 60  # it covers both: at least the larger one
    assert d.requirement is not None and d.requirement.max_rate == 90
    d2 = c.admit("s2", Filter.parse("variable=freq"), [Hop(h.router, h.link, 1) for h in PATH], bound=Bound.UPPER)
    assert d2.reserved_eps == 90


def test_subscription_covering_nothing_and_undeclared_routers() -> None:
    c = controller()
    d = c.admit("s1", Filter.for_variable("pmu9/freq"), PATH)
    assert not d.admitted and d.reason == "NoMatchingAdvertisement" and not c.used
    d = c.admit("s2", PMU, [Hop("x9", "x9>e1")])
    assert not d.admitted and d.limiting[0].resource == "undeclared"
    with pytest.raises(ValidationError):
        c.admit("s3", PMU, [])


def test_nothing_is_admitted_beyond_capacity_under_a_random_load() -> None:
    import random

    rnd = random.Random(7)
    for policy in Policy:
        c = controller(policy, i1_cpu=500)
        for i in range(40):
            c.advertise(f"p{i}", Filter.for_variable(f"p{i}/v"), rnd.uniform(1, 80))
        for i in range(200):
            sid = f"s{i}"
            if rnd.random() < 0.3 and c.admitted():
                c.release(rnd.choice(c.admitted()).subscription_id)
            c.admit(sid, Filter.for_variable(f"p{rnd.randrange(40)}/v"), PATH)
            for key, amount in c.used.items():
                assert amount <= c._capacity(key) * (1 + 1e-9)


def test_declared_resources_and_sync_are_validated() -> None:
    c = AdmissionController()
    with pytest.raises(ValidationError):
        c.declare([RouterCapacity("r", -5)])
    with pytest.raises(ValidationError):
        c.declare([], [LinkCapacity("l", float("nan"))])
    c.sync("A", [("A:p/v", PMU, 10.0), ("A:p/w", Filter.for_variable("p/w"), 5.0)])
    assert c.graph.total_rate == 15
    assert c.sync("A", [("A:p/v", PMU, 20.0)]) == (1, 2)
    assert c.graph.total_rate == 20
    with pytest.raises(ValidationError):
        c.sync("B", [("A:p/v", PMU, 1.0)])  # another source's id
    from gridstat.admission.covering import InvalidAdvertisement

    with pytest.raises(InvalidAdvertisement):
        c.sync("A", [("A:p/v", PMU, -1.0)])
    assert c.graph.total_rate == 20  # validated whole before anything changed
