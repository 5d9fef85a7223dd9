"""The leaf QoS broker's cloud model: specific errors for every bad change (docs/topology.md)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gridstat.broker.generate import edge_routers, random_cloud
from gridstat.broker.paths import disjoint_paths
from gridstat.broker.topology import RouterRole, Topology, WireCost
from gridstat.errors import DuplicateName, NotFound, ValidationError


def two_routers() -> Topology:
    topo = Topology()
    topo.add_router("a", RouterRole.EDGE, 1000)
    topo.add_router("b", RouterRole.INTERNAL, 1000)
    return topo


def test_wire_cost_default_is_a_whole_62_byte_packet_per_event() -> None:
    assert WireCost().bits_per_event == 496
    assert WireCost(events_per_packet=4).bits_per_event == 8 * Fraction(67, 2)


def test_channel_capacity_is_bandwidth_over_event_bits_capped_by_event_capacity() -> None:
    topo = two_routers()
    topo.add_channel("a", "b", bandwidth_bps=4960, latency_ms=1)
    topo.add_channel("b", "a", bandwidth_bps=1e9, latency_ms=1, event_capacity_eps=7)
    assert topo.channel_capacity_eps("a->b") == 10
    assert topo.channel_capacity_eps("b->a") == 7


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"src": "a", "dst": "zz"}, NotFound, "dst"),
        ({"src": "zz", "dst": "b"}, NotFound, "src"),
        ({"src": "a", "dst": "a"}, ValidationError, "dst"),
        ({"src": "a", "dst": "b", "bandwidth_bps": 0}, ValidationError, "bandwidth_bps"),
        ({"src": "a", "dst": "b", "bandwidth_bps": -5}, ValidationError, "bandwidth_bps"),
        ({"src": "a", "dst": "b", "bandwidth_bps": float("nan")}, ValidationError, "bandwidth_bps"),
        ({"src": "a", "dst": "b", "latency_ms": -0.1}, ValidationError, "latency_ms"),
        ({"src": "a", "dst": "b", "event_capacity_eps": 0}, ValidationError, "event_capacity_eps"),
        ({"src": "a", "dst": "b", "name": "sub:x"}, ValidationError, "name"),
    ],
)
def test_bad_channels_are_rejected_with_the_field(kwargs: dict[str, object], error: type[Exception],
                                                   field: str) -> None:
    topo = two_routers()
    args: dict[str, object] = {"bandwidth_bps": 1e6, "latency_ms": 1.0, **kwargs}
    with pytest.raises(error) as info:
        topo.add_channel(**args)  # type: ignore[arg-type]
    assert getattr(info.value, "field", None) == field
    assert not topo.channels


def test_duplicates_are_rejected() -> None:
    topo = two_routers()
    with pytest.raises(DuplicateName):
        topo.add_router("a")
    topo.add_channel("a", "b", bandwidth_bps=1e6, latency_ms=1)
    with pytest.raises(DuplicateName):
        topo.add_channel("a", "b", bandwidth_bps=1e6, latency_ms=2, name="other")
    with pytest.raises(DuplicateName):
        topo.add_channel("b", "a", bandwidth_bps=1e6, latency_ms=2, name="a->b")
    topo.add_channel("b", "a", bandwidth_bps=1e6, latency_ms=2)  # the other direction is a separate EC


@pytest.mark.parametrize("capacity", [0, -1, float("inf")])
def test_router_capacity_must_be_positive(capacity: float) -> None:
    with pytest.raises(ValidationError) as info:
        Topology().add_router("a", RouterRole.EDGE, capacity)
    assert info.value.field == "capacity_eps"


def test_bad_router_name() -> None:
    with pytest.raises(ValidationError):
        Topology().add_router("no spaces")


def test_remove_router_takes_its_channels_and_remove_unknown_is_not_found() -> None:
    topo = two_routers()
    topo.add_router("c")
    topo.add_link("a", "b", bandwidth_bps=1e6, latency_ms=1)
    topo.add_link("b", "c", bandwidth_bps=1e6, latency_ms=1)
    gone = topo.remove_router("b")
    assert {c.name for c in gone} == {"a->b", "b->a", "b->c", "c->b"}
    assert not topo.channels and not topo.out_channels("a") and not topo.out_channels("c")
    with pytest.raises(NotFound):
        topo.remove_router("b")
    with pytest.raises(NotFound):
        topo.remove_channel("a->b")
    with pytest.raises(NotFound):
        topo.channel_between("a", "c")


def test_add_link_is_all_or_nothing() -> None:
    topo = two_routers()
    topo.add_channel("b", "a", bandwidth_bps=1e6, latency_ms=1)
    with pytest.raises(DuplicateName):
        topo.add_link("a", "b", bandwidth_bps=1e6, latency_ms=1)
    assert set(topo.channels) == {"b->a"}


def test_generated_cloud_is_deterministic_and_two_connected() -> None:
    first, second = random_cloud(24, seed=7), random_cloud(24, seed=7)
    assert [(c.name, c.latency_ms) for c in first.channels.values()] == \
        [(c.name, c.latency_ms) for c in second.channels.values()]
    assert [c.latency_ms for c in random_cloud(24, seed=8).channels.values()] != \
        [c.latency_ms for c in first.channels.values()]
    edges = edge_routers(first)
    assert len(edges) == 6
    for src in edges:
        for dst in edges:
            if src != dst:
                assert len(disjoint_paths(first, src, dst, 2)) == 2
