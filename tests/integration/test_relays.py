"""Dashboards served through relay peers over UDP on 127.0.0.1, arranged by Algorithm 1 (seed 004)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from gridstat.core import wire
from gridstat.granularity import accuracy, dz, relays, serving
from gridstat.granularity.overlay import Edge, PeerState
from gridstat.granularity.space import Attribute, AttributeSpace

from .fixtures import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

SPACE = AttributeSpace((
    Attribute("region", "category", categories=("north", "south", "east", "west")),
    Attribute("type", "category", categories=("voltage", "current", "frequency", "breaker")),
))
VARIABLES = {i + 1: {"region": r, "type": t} for i, (r, t) in enumerate(
    (r, t) for r in SPACE.attributes[0].categories for t in SPACE.attributes[1].categories)}
POINTS = {vid: SPACE.point(attrs) for vid, attrs in VARIABLES.items()}
DASHBOARDS = (("archive", {}, 3.0), ("west", {"region": "west"}, 6.0),
              ("west-v", {"region": "west", "type": "voltage"}, 9.0), ("east", {"region": "east"}, 7.0),
              ("east-f", {"region": "east", "type": "frequency"}, 11.0),
              ("north-c", {"region": "north", "type": "current"}, 12.0))


async def test_dashboards_receive_exactly_their_events_through_relays() -> None:
    catalogue = accuracy.CatalogueRates(tuple((POINTS[v], 30.0) for v in VARIABLES))
    subs = [serving.declare(SPACE, name=n, constraints=c, delay_tolerance_ms=t, bandwidth_eps=2000, out_degree=2)
            for n, c, t in DASHBOARDS]
    plan = serving.plan_relays(SPACE, subs, catalogue, feeds={"feed": frozenset({""})}, feed_out_degree=2,
                               max_depth=4)
    assert plan.unserved() == ()
    got: dict[str, list[tuple[int, int]]] = {n: [] for n, _, _ in DASHBOARDS}
    peers: dict[str, relays.RelayPeer] = {"feed": relays.RelayPeer("feed", sender_id=1, catalogue=POINTS)}
    for i, d in enumerate(subs):
        peers[d.name] = relays.RelayPeer(d.name, sender_id=10 + i, catalogue=POINTS, rect=d.rect,
                                         on_event=lambda ev, n=d.name: got[n].append((ev.variable_id, ev.timestamp_ms)))
    for p in peers.values():
        await p.start()
    try:
        relays.wire_children(peers, {n: [(e.peer, e.dz) for e in s.children] for n, s in plan.peers.items()})
        # Somebody relays for somebody else: the feed has only two places.
        assert any(peers[n].children for n in got)
        events = [wire.Event(1_000 + k, vid, struct.pack(">d", float(k))) for k in range(5) for vid in VARIABLES]
        peers["feed"].publish(events)
        expected = {n: sorted((ev.variable_id, ev.timestamp_ms) for ev in events
                              if peers[n].rect is not None and peers[n].rect.contains(POINTS[ev.variable_id]))
                    for n in got}
        for _ in range(200):
            if all(len(got[n]) >= len(expected[n]) for n in got):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)   # duplicates, if any, would arrive now
        for n in got:
            assert sorted(got[n]) == expected[n], n      # every matching event, once
        # coarser peer-level subscriptions pay in false positives, counted, never delivered
        assert all(p.drops == {} for p in peers.values())
        peers["feed"].publish([wire.Event(9, 999, b"\0" * 8)])
        assert peers["feed"].drops["unknown-variable"] == 1
    finally:
        for p in peers.values():
            await p.stop()


async def test_bad_datagrams_are_counted_not_raised() -> None:
    peer = relays.RelayPeer("dash", sender_id=2, catalogue=POINTS, rect=SPACE.rectangle({}))
    await peer.start()
    try:
        peer.datagram_received(b"garbage", ("127.0.0.1", 1))
        assert sum(peer.drops.values()) == 1
    finally:
        await peer.stop()
        await peer.stop()


def violated_overlay(peers: dict[str, relays.RelayPeer]) -> relays.RelayOverlay:
    """feed -> wide (subscribes to the west, receives everything: ``{ε}``) -> west-v ("1010") and north ("000").

    ``wide`` may receive 60 events/s (``B/(m+1)`` with ``B`` = 180, ``m`` = 2); ``west-v`` 1000.
    """
    states = {
        "feed": PeerState("feed", frozenset({""}), 0.0, 2, publisher=True, children=(Edge("wide", "", 2.0),)),
        "wide": PeerState("wide", frozenset({""}), 2.0, 2, parents=(Edge("feed", "", 0.0, publisher=True),),
                          children=(Edge("west-v", "1010", 4.0), Edge("north", "000", 5.0))),
        "west-v": PeerState("west-v", frozenset({"1010"}), 4.0, 2, parents=(Edge("wide", "1010", 2.0),)),
        "north": PeerState("north", frozenset({"000"}), 5.0, 2, parents=(Edge("wide", "000", 2.0),)),
    }
    return relays.RelayOverlay(peers, states, rects={n: r for n, p in peers.items() if (r := p.rect) is not None},
                               budgets={"wide": accuracy.Budget(60.0 * 3, 2), "west-v": accuracy.Budget(1000.0 * 3, 2)},
                               max_depth=4)


async def relay_peers() -> dict[str, relays.RelayPeer]:
    rects = {"wide": {"region": "west"}, "west-v": {"region": "west", "type": "voltage"}, "north": {"region": "north"}}
    peers = {"feed": relays.RelayPeer("feed", sender_id=1, catalogue=POINTS)}
    for i, (name, c) in enumerate(rects.items()):
        peers[name] = relays.RelayPeer(name, sender_id=20 + i, catalogue=POINTS, rect=SPACE.rectangle(c))
    for p in peers.values():
        await p.start()
    return peers


def burst(k: int = 0) -> list[wire.Event]:
    """Five events of each of the 16 variables (80)."""
    return [wire.Event(1_000 + 10 * k + j, vid, struct.pack(">d", float(j))) for j in range(5) for vid in VARIABLES]


async def test_a_relay_over_its_budget_refines_and_its_neighbours_follow() -> None:
    peers = await relay_peers()
    try:
        ov = violated_overlay(peers)
        ov.wire()
        assert ov.tick(0.0) == ()                                   # opens the window
        peers["feed"].publish(burst())
        await eventually(lambda: peers["wide"].received == 80 and peers["north"].received == 10,
                         what="80 events at wide, 10 at north")
        assert peers["west-v"].received == 5
        # 80 events/s arrived at wide, above its 60: BandwidthViolated. Counted: "1" (east and west) brings 40.
        assert ov.tick(1.0) == ("wide",)
        assert ov.rate_eps["wide"] == pytest.approx(80.0) and ov.rate_eps["west-v"] == pytest.approx(5.0)
        assert ov.states["wide"].mapping == {"1"}
        assert [e.dz for e in ov.states["feed"].children] == ["1"]                    # NARROW reached the feed
        assert ov.states["wide"].child_peers == {"west-v"}                            # north: DISCONNECT
        assert ov.states["north"].parents == ()
        assert [(c.name, c.dzs) for c in peers["feed"].children] == [("wide", ("1",))]   # and the sockets follow
        assert [c.name for c in peers["wide"].children] == ["west-v"]
        peers["feed"].publish(burst(1))
        await eventually(lambda: peers["wide"].received == 80 + 40 and peers["west-v"].received == 10,
                         what="40 more at wide, 10 at west-v")
        await asyncio.sleep(0.05)
        assert peers["north"].received == 10                                          # nothing more for north
        assert ov.tick(2.0) == ()                                   # 40 events/s: within the budget, no change
        assert ov.rate_eps["wide"] == pytest.approx(40.0)
        assert (ov.bandwidth_violations, ov.refinements) == (1, 1)
        assert ov.states["wide"].mapping == {"1"}
    finally:
        for p in peers.values():
            await p.stop()


async def test_the_timer_samples_the_relays_and_refines_under_load() -> None:
    peers = await relay_peers()
    ov = violated_overlay(peers)
    ov.wire()
    exact = dz.encode(SPACE.rectangle({"region": "west"}), max_depth=4)
    try:
        ov.start(interval_ms=50)
        ov.start(interval_ms=50)                                    # idempotent
        k = 0
        while ov.states["wide"].mapping != exact and k < 200:      # about 4000 events/s
            peers["feed"].publish(burst(k))
            k += 1
            await asyncio.sleep(0.02)
        assert ov.states["wide"].mapping == exact == {"101", "111"}
        assert ov.refinements >= 1 and ov.bandwidth_violations >= ov.refinements
        assert sorted(e.dz for e in ov.states["feed"].children) == ["101", "111"]
        await ov.stop()
        await ov.stop()
        await asyncio.sleep(0.05)
        before = peers["wide"].received
        peers["feed"].publish(burst())
        await eventually(lambda: peers["wide"].received >= before + 20, what="20 more at wide")
        await asyncio.sleep(0.05)
        assert peers["wide"].received == before + 20                # only the four west variables now
    finally:
        await ov.stop()
        for p in peers.values():
            await p.stop()
