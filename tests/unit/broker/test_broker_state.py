"""CloudState: duplicates, all-or-nothing admission across modes, the loop-free tree rule."""

from __future__ import annotations

import pytest

from gridstat.broker.rejections import LatencyUnattainable
from gridstat.broker.state import CloudState, ModeQoS, RouterEndpoint
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT
from gridstat.errors import DuplicateName, Unauthorized, ValidationError


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


def multi_homed_cloud() -> CloudState:
    """Two edge routers at each end and two interior routers: e1-i1-e2 and e1b-i2-e2b, plus e1-i2."""
    st = CloudState("A")
    routers = [("e1", RouterRole.EDGE), ("e1b", RouterRole.EDGE), ("i1", RouterRole.INTERNAL),
               ("i2", RouterRole.INTERNAL), ("e2", RouterRole.EDGE), ("e2b", RouterRole.EDGE)]
    for i, (name, role) in enumerate(routers):
        st.topology.add_router(name, role, 10_000)
        st.endpoints[name] = RouterEndpoint(name, i + 1, "-", "127.0.0.1", 1)
    for x, y, lat in [("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1b", "i2", 2.0), ("i2", "e2b", 2.0),
                      ("e1", "i2", 1.0)]:
        st.topology.add_link(x, y, bandwidth_bps=1e9, latency_ms=lat)
    st.registry.register("pmu", "f", FLOAT, interval_ms=10)
    return st


def test_a_multi_homed_publisher_and_subscriber_get_paths_that_share_no_router() -> None:
    from gridstat.broker.store import record_from_json, record_to_json

    st = multi_homed_cloud()
    st.register_client("pmu", "publisher", "e1", "", 0)
    with pytest.raises(Unauthorized) as err:  # one more edge router for a client not registered yet
        st.register_client("ems", "subscriber", "e2b", "10.0.0.9", 7, also=True)
    assert err.value.field == "also"
    st.register_client("pmu", "publisher", "e1b", "", 0, also=True)
    st.register_client("ems", "subscriber", "e2", "127.0.0.1", 9)
    ems = st.register_client("ems", "subscriber", "e2b", "127.0.0.2", 8, also=True)
    assert ems.edge_routers == ("e2", "e2b") and ems.address_at("e2b") == ("127.0.0.2", 8)
    var = st.registry.lookup("pmu/f")
    record = st.admit("s1", "ems", var, (ModeQoS(0, 20, 50, redundancy=2),), "e2b")
    (_, paths), = record.paths
    assert {p.routers for p in paths} == {("e1", "i1", "e2"), ("e1b", "i2", "e2b")}
    assert (record.publisher_routers, record.subscriber_routers) == (("e1", "e1b"), ("e2", "e2b"))
    # each edge router of the subscriber has its channel, to the address given there, and the last hop
    assert [(d.host, d.port) for d in st.desired_channels("e2b") if d.name == "sub:ems"] == [("127.0.0.2", 8)]
    assert [(d.host, d.port) for d in st.desired_channels("e2") if d.name == "sub:ems"] == [("127.0.0.1", 9)]
    assert [d.channel for d in st.desired_routes("e2b")] == ["sub:ems"]
    assert any(d.name == "pub:pmu" for d in st.desired_channels("e1b"))
    # both subscriber channels are reserved, each at its own router
    res = st.reservations(0)
    assert res.attached_router("sub:ems") == "e2" and res.attached_router("sub:ems@e2b") == "e2b"
    # a restarted broker restores the same reservation from the stored record
    stored = record_from_json(record_to_json(record))
    assert stored == record
    st.remove("s1")
    assert res.is_empty()
    st.restore(stored)
    assert res.attached_router("sub:ems@e2b") == "e2b"
    # a third path would need a third edge router at each end: refused, saying so
    from gridstat.broker.rejections import NoFeasiblePath

    st.remove("s1")
    with pytest.raises(NoFeasiblePath) as refused:
        st.admit("s2", "ems", var, (ModeQoS(0, 20, 50, redundancy=3),), "e2")
    assert "one path per edge router" in str(refused.value)


def test_re_registration_keeps_or_drops_the_other_edge_routers() -> None:
    st = multi_homed_cloud()
    st.register_client("ems", "subscriber", "e2", "127.0.0.1", 9)
    st.register_client("ems", "subscriber", "e2b", "127.0.0.1", 9, also=True)
    # again at its first edge router: the other stays
    assert st.register_client("ems", "subscriber", "e2", "127.0.0.1", 10).edge_routers == ("e2", "e2b")
    # at the other one as its first: that one becomes the first, no duplicate
    assert st.register_client("ems", "subscriber", "e2b", "127.0.0.1", 9).edge_routers == ("e2b",)
    # at most four edge routers
    for e in ("e2", "e1", "e1b"):
        st.register_client("ems", "subscriber", e, "127.0.0.1", 9, also=True)
    with pytest.raises(Unauthorized):
        st.register_client("ems", "subscriber", "i1", "127.0.0.1", 9, also=True)  # not an edge router
    st.topology.add_router("e9", RouterRole.EDGE, 1)
    st.endpoints["e9"] = RouterEndpoint("e9", 99, "-", "127.0.0.1", 1)
    with pytest.raises(ValidationError) as err:
        st.register_client("ems", "subscriber", "e9", "127.0.0.1", 9, also=True)
    assert "at most 4" in str(err.value)
