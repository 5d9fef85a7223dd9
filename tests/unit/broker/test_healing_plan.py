"""CloudState.repair: the paths through what is down are re-planned in place, the others kept
(docs/redundancy.md, "Healing")."""

from __future__ import annotations

import random

from gridstat.broker.state import CloudState, ModeQoS, RouterEndpoint
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT


def diamond(interiors: int = 3, latency_ms: tuple[float, ...] = (1.0, 2.0, 3.0)) -> CloudState:
    """e1 - i1..iN - e2, i_k's links taking latency_ms[k-1] each."""
    st = CloudState("A")
    routers = [("e1", RouterRole.EDGE), ("e2", RouterRole.EDGE)] + \
        [(f"i{k}", RouterRole.INTERNAL) for k in range(1, interiors + 1)]
    for n, (name, role) in enumerate(routers):
        st.topology.add_router(name, role, 100_000)
        st.endpoints[name] = RouterEndpoint(name, n + 1, "-", "127.0.0.1", 1)
    for k in range(1, interiors + 1):
        for edge in ("e1", "e2"):
            st.topology.add_link(edge, f"i{k}", bandwidth_bps=1e9, latency_ms=latency_ms[k - 1])
    st.register_client("pmu", "publisher", "e1", "", 0)
    st.register_client("ems", "subscriber", "e2", "127.0.0.1", 9)
    st.registry.register("pmu", "f", FLOAT, interval_ms=10)
    return st


def interiors_of(st: CloudState, sid: str, mode: int = 0) -> list[str]:
    paths = dict(st.subscriptions[sid].paths)[mode]
    return [p.routers[1] for p in paths]


def test_the_broken_path_is_replaced_in_place_and_the_other_kept() -> None:
    st = diamond()
    st.admit("s1", "ems", st.registry.lookup("pmu/f"), (ModeQoS(0, 20, 50, redundancy=2),), "e2")
    assert interiors_of(st, "s1") == ["i1", "i2"]
    kept = dict(st.subscriptions["s1"].paths)[0][1]
    st.down.add("i1")
    assert st.broken() == ["s1"]
    record = st.repair("s1")
    assert record is not None and interiors_of(st, "s1") == ["i3", "i2"]
    assert dict(record.paths)[0][1] is kept  # the surviving path is the same object: its routes stay
    assert st.broken() == []
    # Reservations follow: nothing at the failed router, the new interior carries it.
    res = st.reservations(0)
    assert res.router_load("i1") == 0 and res.router_load("i3") > 0 and res.router_load("i2") > 0
    # Its routes: none at i1 any more; the index of routers follows.
    assert not st.desired_routes("i1") and st.desired_routes("i3")


def test_without_a_replacement_the_record_stays_whole() -> None:
    st = diamond(interiors=2, latency_ms=(1.0, 2.0))
    st.admit("s1", "ems", st.registry.lookup("pmu/f"), (ModeQoS(0, 20, 50, redundancy=2),), "e2")
    before = st.subscriptions["s1"]
    load = st.reservations(0).router_load("i1")
    st.down.add("i1")
    assert st.repair("s1") is None
    assert st.subscriptions["s1"] == before and st.reservations(0).router_load("i1") == load
    assert st.desired_routes("i1")  # rebuilt as it was when it returns


def test_a_replacement_beyond_the_latency_bound_is_not_taken() -> None:
    st = diamond(latency_ms=(1.0, 2.0, 40.0))  # i3's path takes 80 ms
    st.admit("s1", "ems", st.registry.lookup("pmu/f"), (ModeQoS(0, 20, 50, redundancy=2),), "e2")
    st.down.add("i1")
    assert st.repair("s1") is None and interiors_of(st, "s1") == ["i1", "i2"]


def test_a_failed_channel_is_avoided_like_a_failed_router() -> None:
    st = diamond()
    st.admit("s1", "ems", st.registry.lookup("pmu/f"), (ModeQoS(0, 20, 50),), "e2")
    assert interiors_of(st, "s1") == ["i1"]
    st.down_channels.add(("i1", "e2"))
    assert st.repair("s1") is not None and interiors_of(st, "s1") == ["i2"]


def test_every_mode_is_repaired_or_none() -> None:
    st = diamond()
    st.admit("s1", "ems", st.registry.lookup("pmu/f"),
             (ModeQoS(0, 20, 50, redundancy=2), ModeQoS(1, 100, 50)), "e2")
    st.down.add("i1")
    assert st.repair("s1") is not None
    assert interiors_of(st, "s1", 0) == ["i3", "i2"] and interiors_of(st, "s1", 1) == ["i2"]


def test_repairing_many_subscriptions_matches_admitting_them_fresh() -> None:
    """After a failure, the repaired state reserves exactly what admitting the same paths anew would."""
    rng = random.Random(3)
    st = diamond(interiors=4, latency_ms=(1.0, 2.0, 3.0, 4.0))
    for n in range(40):
        st.register_client(f"s{n}", "subscriber", "e2", "127.0.0.1", 9)
        st.admit(f"sub{n}", f"s{n}", st.registry.lookup("pmu/f"),
                 (ModeQoS(0, 10 * rng.randint(1, 6), 50, redundancy=rng.choice([1, 2])),), "e2")
    st.down.add("i1")
    for sid in st.broken():
        assert st.repair(sid) is not None
    assert st.broken() == []
    fresh = CloudState("A", topology=st.topology, endpoints=st.endpoints, registry=st.registry, clients=st.clients)
    for record in st.subscriptions.values():
        fresh.restore(record)
    for router in ("e1", "e2", "i1", "i2", "i3", "i4"):
        assert fresh.reservations(0).router_load(router) == st.reservations(0).router_load(router), router
