"""CloudState: duplicates, all-or-nothing admission across modes, the loop-free tree rule."""

from __future__ import annotations

import pytest

from gridstat.broker.rejections import LatencyUnattainable
from gridstat.broker.state import CloudState, ModeQoS, RouterEndpoint
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT
from gridstat.errors import DuplicateName, Unauthorized


def cloud() -> CloudState:
    #   e1 - a - e2     and a slower e1 - b - e2
    st = CloudState("A")
    for i, (name, role) in enumerate([("e1", RouterRole.EDGE), ("a", RouterRole.INTERNAL),
                                      ("b", RouterRole.INTERNAL), ("e2", RouterRole.EDGE),
                                      ("e3", RouterRole.EDGE)]):
        st.topology.add_router(name, role, 10_000)
        st.endpoints[name] = RouterEndpoint(name, i + 1, "-", "127.0.0.1", 1)
    for x, y, lat in [("e1", "a", 1.0), ("a", "e2", 1.0), ("e1", "b", 3.0), ("b", "e2", 3.0), ("e2", "e3", 1.0),
                      ("b", "e3", 1.0)]:
        st.topology.add_link(x, y, bandwidth_bps=1e9, latency_ms=lat)
    st.register_client("pmu", "publisher", "e1", "", 0)
    st.register_client("ems", "subscriber", "e2", "127.0.0.1", 9)
    st.register_client("ops", "subscriber", "e3", "127.0.0.1", 9)
    st.registry.register("pmu", "f", FLOAT, interval_ms=10)
    return st


def test_duplicate_subscription_is_refused_and_reserves_nothing() -> None:
    st = cloud()
    var = st.registry.lookup("pmu/f")
    st.admit("s1", "ems", var, (ModeQoS(0, 20, 50),), "e2")
    load = st.reservations(0).router_load("e1")
    with pytest.raises(DuplicateName) as err:
        st.admit("s2", "ems", var, (ModeQoS(0, 40, 50),), "e2")
    assert err.value.field == "variable"
    assert st.reservations(0).router_load("e1") == load and set(st.subscriptions) == {"s1"}
    st.remove("s1")
    st.admit("s3", "ems", var, (ModeQoS(0, 40, 50),), "e2")  # allowed again once removed


def test_a_rejection_in_one_mode_reserves_nothing_in_the_others() -> None:
    st = cloud()
    var = st.registry.lookup("pmu/f")
    with pytest.raises(LatencyUnattainable):
        st.admit("s1", "ems", var, (ModeQoS(0, 20, 50), ModeQoS(1, 20, 1)), "e2")
    assert st.reservations(0).is_empty() and st.reservations(1).is_empty() and not st.subscriptions


def test_unregistered_subscriber_is_unauthorized() -> None:
    st = cloud()
    with pytest.raises(Unauthorized):
        st.client("subscriber", "nobody")


def test_routes_of_a_variable_stay_a_tree() -> None:
    st = cloud()
    var = st.registry.lookup("pmu/f")
    st.admit("s1", "ems", var, (ModeQoS(0, 20, 50),), "e2")  # e1 > a > e2
    # ops at e3: the shortest way in is e1 > b > e3 (5 ms) but e2 already carries the variable,
    # so either path is loop-free; what must never happen is a second parent for a router.
    st.admit("s2", "ops", var, (ModeQoS(0, 20, 50),), "e3")
    parents: dict[str, set[str]] = {}
    for rec in st.subscriptions.values():
        for _, paths in rec.paths:
            for p in paths:
                for u, w in zip(p.routers, p.routers[1:], strict=False):
                    parents.setdefault(w, set()).add(u)
    assert all(len(ps) == 1 for ps in parents.values()), parents
    # The routes each router holds are exactly what the records derive.
    assert {r.channel for r in st.desired_routes("e1")} <= {"a", "b"}
