"""Dashboards served through relay peers over UDP on 127.0.0.1, arranged by Algorithm 1 (seed 004)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from gridstat.core import wire
from gridstat.granularity import accuracy, relays, serving
from gridstat.granularity.space import Attribute, AttributeSpace

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
