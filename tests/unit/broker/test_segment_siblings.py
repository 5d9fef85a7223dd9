"""Segments of disjoint inter-cloud paths in one cloud (docs/redundancy.md, "Across clouds"): a sibling
avoids the routers the others took, and END siblings may meet at the subscriber's edge router."""

from __future__ import annotations

import pytest

from gridstat.broker.rejections import NoFeasiblePath
from gridstat.broker.segments import segment_id
from gridstat.broker.state import CloudState, ModeQoS, RouterEndpoint
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT


def cloud() -> CloudState:
    """e1 - a - e2 and a slower e1 - b - e2; pmu/f published at e1, ems at e2."""
    st = CloudState("A")
    for i, (name, role) in enumerate([("e1", RouterRole.EDGE), ("a", RouterRole.INTERNAL),
                                      ("b", RouterRole.INTERNAL), ("e2", RouterRole.EDGE)]):
        st.topology.add_router(name, role, 10_000)
        st.endpoints[name] = RouterEndpoint(name, i + 1, "-", "127.0.0.1", 1)
    for x, y, lat in [("e1", "a", 1.0), ("a", "e2", 1.0), ("e1", "b", 3.0), ("b", "e2", 3.0)]:
        st.topology.add_link(x, y, bandwidth_bps=1e9, latency_ms=lat)
    st.register_client("pmu", "publisher", "e1", "", 0)
    st.register_client("ems", "subscriber", "e2", "127.0.0.1", 9)
    st.registry.register("pmu", "f", FLOAT, interval_ms=10)
    return st


def end_segment(st: CloudState, sid: str, *, avoid: frozenset[str] = frozenset(), shared_sink: bool = False
                ) -> tuple[str, ...]:
    """An END segment of pmu/f entering at e1 (as if a border router) for ems at e2: its one path."""
    var = st.registry.lookup("pmu/f")
    record = st.admit_path(sid, "ems", var.full_name, var.variable_id, 10, False, (ModeQoS(0, 20, 50),), "e1", "e2",
                           segment=True, avoid=avoid, shared_sink=shared_sink)
    ((_, (path,)),) = record.paths
    return tuple(path.routers)


def test_a_sibling_segment_avoids_the_others_and_may_join_them_at_the_subscriber() -> None:
    st = cloud()
    assert end_segment(st, segment_id("s", 0, 0)) == ("e1", "a", "e2")
    # Told to avoid a, the only other way ends b -> e2, into a router fed by a: the tree rule refuses
    # it for a lone path ...
    with pytest.raises(NoFeasiblePath):
        end_segment(st, segment_id("s", 0, 0, 1), avoid=frozenset({"a"}))
    # ... and allows it for a sibling of a redundant subscription, at the subscriber's edge router.
    assert end_segment(st, segment_id("s", 0, 0, 1), avoid=frozenset({"a"}), shared_sink=True) == ("e1", "b", "e2")


def test_segment_ids_of_the_first_path_are_unchanged() -> None:
    assert segment_id("A-s1", 2, 3) == "A-s1.m2.r3" == segment_id("A-s1", 2, 3, 0)
    assert segment_id("A-s1", 2, 3, 1) == "A-s1.m2.r3.p1"
    assert segment_id("A-s1", 2, 3, 1).rsplit(".m", 1)[0] == "A-s1"  # what a leaf reports to its parent


def fork() -> CloudState:
    """e - a (1 ms), a - x1 (1), a - x2 (1), e - b (5), b - x1 (5): pmu/f published at e; x2 is
    reached only through a, which the shortest way to x1 takes."""
    st = CloudState("A")
    for i, name in enumerate(("e", "a", "b", "x1", "x2")):
        st.topology.add_router(name, RouterRole.EDGE if name == "e" else RouterRole.INTERNAL, 10_000)
        st.endpoints[name] = RouterEndpoint(name, i + 1, "-", "127.0.0.1", 1)
    for x, y, lat in [("e", "a", 1.0), ("a", "x1", 1.0), ("a", "x2", 1.0), ("e", "b", 5.0), ("b", "x1", 5.0)]:
        st.topology.add_link(x, y, bandwidth_bps=1e9, latency_ms=lat)
    st.register_client("pmu", "publisher", "e", "", 0)
    st.registry.register("pmu", "f", FLOAT, interval_ms=10)
    return st


def start_segment(st: CloudState, path: int, to: str, *, avoid: frozenset[str] = frozenset(),
                  later: tuple[tuple[str, str], ...] = ()) -> tuple[str, ...]:
    var = st.registry.lookup("pmu/f")
    record = st.admit_path(segment_id("s", 0, 0, path), f"segment.s.p{path}", var.full_name, var.variable_id, 10,
                           False, (ModeQoS(0, 20, 50),), "e", to, segment=True, avoid=avoid, later=later)
    ((_, (p,)),) = record.paths
    return tuple(p.routers)


def test_alone_the_first_segment_takes_the_way_the_second_needs() -> None:
    st = fork()
    assert start_segment(st, 0, "x1") == ("e", "a", "x1")
    with pytest.raises(NoFeasiblePath):
        start_segment(st, 1, "x2", avoid=frozenset({"a", "x1"}))


def test_told_of_its_later_siblings_the_first_segment_leaves_them_room() -> None:
    st = fork()
    assert start_segment(st, 0, "x1", later=(("e", "x2"),)) == ("e", "b", "x1")
    assert start_segment(st, 1, "x2", avoid=frozenset({"b", "x1"})) == ("e", "a", "x2")


def test_a_segment_repaired_inside_its_cloud_keeps_away_from_its_siblings() -> None:
    st = cloud()
    st.topology.add_router("c", RouterRole.INTERNAL, 10_000)
    st.endpoints["c"] = RouterEndpoint("c", 9, "-", "127.0.0.1", 1)
    st.topology.add_link("e1", "c", bandwidth_bps=1e9, latency_ms=4.0)
    st.topology.add_link("c", "e2", bandwidth_bps=1e9, latency_ms=4.0)
    first, second = segment_id("s", 0, 0), segment_id("s", 0, 1, 1)  # siblings of two generations
    assert end_segment(st, first) == ("e1", "a", "e2")
    assert end_segment(st, second, avoid=frozenset({"a"}), shared_sink=True) == ("e1", "b", "e2")
    # Another subscription's segment on c is no sibling: c stays open to the repair.
    assert end_segment(st, segment_id("t", 0, 0), avoid=frozenset({"a", "b"}), shared_sink=True) == ("e1", "c", "e2")
    st.down.add("a")
    repaired = st.repair(first)
    # b (3 ms) is quicker than c (4 ms), but its sibling holds it: c, into e2 beside b.
    assert repaired is not None and repaired.paths[0][1][0].routers == ("e1", "c", "e2")
