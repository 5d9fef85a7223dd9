"""Redundancy comes back by itself (docs/redundancy.md, "Healing"), with real router and broker
processes and the client SDK: a k=2 subscription loses a router to SIGKILL, keeps delivering on its
other path meanwhile, and the leaf broker re-plans the broken path around the dead router; a restarted
router announces itself and has its tables back at once, however long it was down."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from pathlib import Path

import pytest

from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

from .brokerprocs import BrokerProc, add_link, add_router, start_broker
from .routerprocs import RouterProc, start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

INTERVAL_MS = 10
#: e1 - i1 - e2, e1 - i2 - e2 (the two fast paths), e1 - i3 - e2 (the spare), and e3 behind i1 only.
LINKS = (("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1", "i2", 2.0), ("i2", "e2", 2.0), ("e1", "i3", 3.0),
         ("i3", "e2", 3.0), ("i1", "e3", 1.0))
ROUTERS = (("e1", "edge"), ("e2", "edge"), ("e3", "edge"), ("i1", "internal"), ("i2", "internal"),
           ("i3", "internal"))


class Grid:
    """A leaf broker (health checks every 200 ms) and six routers; every router announces itself."""

    def __init__(self, tmp: Path) -> None:
        self.broker: BrokerProc = start_broker("A", str(tmp / "A.sqlite"))
        self.ids = {name: n for n, (name, _) in enumerate(ROUTERS, start=1)}
        self.roles = dict(ROUTERS)
        self.routers: dict[str, RouterProc] = {}
        for name, role in ROUTERS:
            self.routers[name] = self.start(name)
            add_router(self.broker, self.routers[name], role)
        for a, b, ms in LINKS:
            add_link(self.broker, a, b, latency_ms=ms)

    def start(self, name: str, *, port: int = 0, control_port: int = 0) -> RouterProc:
        return start_router(name, self.ids[name], role=self.roles[name], port=port, control_port=control_port,
                            extra=("--broker", self.broker.address))

    def control(self, name: str) -> str:
        return f"127.0.0.1:{self.routers[name].control_port}"

    def health(self) -> bpb.BrokerHealthReply:
        reply: bpb.BrokerHealthReply = self.broker.stub.Health(bpb.BrokerHealthRequest(), timeout=5)
        return reply

    def paths(self, subscriber: str) -> list[tuple[str, ...]]:
        listed = self.broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber=subscriber), timeout=5)
        return [tuple(p.routers) for r in listed.subscriptions for a in r.allocations for p in a.paths]

    def stop(self) -> None:
        self.broker.stop()
        for r in self.routers.values():
            r.stop()


def wait_until(what: str, predicate: object, timeout_s: float) -> float:
    """Poll ``predicate`` every 10 ms; the seconds it took (AssertionError naming ``what`` on timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.01)
    raise AssertionError(f"{what}: not within {timeout_s} s")


async def test_a_killed_router_is_routed_around_and_redundancy_comes_back(tmp_path: Path) -> None:
    grid = Grid(tmp_path)
    pub = await Publisher.connect("pmu1", grid.control("e1"))
    sub = await Subscriber.connect("ems", grid.control("e2"))
    try:
        handle = await pub.register("freq", FLOAT, INTERVAL_MS)
        got: set[int] = set()
        copies: list[tuple[float, int]] = []  # (arrival, ts) of every copy after the first
        s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=INTERVAL_MS, latency_ms=50, redundancy=2,
                                       on_event=lambda _, holder: got.add(holder.timestamp_ms))
        assert sorted(grid.paths("ems")) == [("e1", "i1", "e2"), ("e1", "i2", "e2")]
        sent: list[int] = []
        publishing = asyncio.ensure_future(pub.run_periodic(handle, lambda ts: sent.append(ts) or 60.0, count=500))
        await asyncio.sleep(1.0)
        duplicates_before = s.stats.duplicates
        killed = time.monotonic()
        grid.routers["i1"].stop(signal.SIGKILL)
        took = await asyncio.to_thread(wait_until, "the broker re-planned the path through i1",
                                       lambda: grid.health().repaired >= 1, 10.0)
        health = grid.health()
        # Restored: the broken path now goes through the spare, the surviving one is unchanged.
        assert sorted(grid.paths("ems")) == [("e1", "i2", "e2"), ("e1", "i3", "e2")]
        # Whichever saw it first: the health checks (router down) or a neighbour's liveness (channel down).
        causes = ("router i1 down", *(f"channel {a}-{b} down" for a, b in (("i1", "e1"), ("e1", "i1"), ("i1", "e2"),
                                                                          ("e2", "i1"))))
        assert health.unrepaired == 0 and health.last_repair_cause in causes, health
        assert health.last_repair_s <= 2.0, health
        duplicates_at_repair = s.stats.duplicates
        await asyncio.sleep(1.0)
        copies.append((time.monotonic() - killed, s.stats.duplicates - duplicates_at_repair))
        await publishing
        await asyncio.sleep(0.3)
        missing = [ts for ts in sent if ts not in got]
        print(f"\ni1 killed: re-planned {took:.3f} s after the kill (detection included; planning and the "
              f"routers' transaction {health.last_repair_s * 1000:.1f} ms); duplicates before the kill "
              f"{duplicates_before}, in the 1 s after the repair {copies[-1][1]}")
        # Nothing lost meanwhile: the surviving path delivered every instant.
        assert missing == [], f"{len(missing)} events lost while i1 was down"
        # Redundancy is back: both paths deliver again, so every instant comes twice.
        assert copies[-1][1] >= 50, copies
    finally:
        await pub.stop()
        await sub.stop()
        grid.stop()


async def test_a_restarted_router_has_its_tables_back_at_once_however_long_it_was_down(tmp_path: Path) -> None:
    """i1 is the only way to e3: its subscription cannot be re-planned, so i1's routes come back when it
    returns. Down 6 s (the broker's checks back off to seconds apart), it announces itself when it is
    ready and is rebuilt within a second; e3, an edge router, restarted the same way, has its
    subscriber's channel back as fast."""
    grid = Grid(tmp_path)
    pub = await Publisher.connect("pmu1", grid.control("e1"))
    sub = await Subscriber.connect("ops", grid.control("e3"))
    try:
        handle = await pub.register("freq", FLOAT, INTERVAL_MS)
        s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=INTERVAL_MS, latency_ms=50)
        assert grid.paths("ops") == [("e1", "i1", "e3")]
        publishing = asyncio.ensure_future(pub.run_periodic(handle, lambda ts: 60.0, count=1500))
        for name in ("i1", "e3"):
            old = grid.routers[name]
            routes = len(old.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=5).routes)
            channels = {c.name for c in old.stub.ListChannels(rpb.ListChannelsRequest(), timeout=5).channels}
            old.stop(signal.SIGKILL)
            await asyncio.sleep(6.0)
            announced = grid.health().announced
            new = grid.routers[name] = await asyncio.to_thread(grid.start, name, port=old.port,
                                                                control_port=old.control_port)

            def whole(r: RouterProc = new, want: set[str] = channels, n: int = routes) -> bool:
                have = {c.name for c in r.stub.ListChannels(rpb.ListChannelsRequest(), timeout=5).channels}
                return have == want and len(r.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=5).routes) == n

            took = await asyncio.to_thread(wait_until, f"{name}'s tables back after its restart", whole, 5.0)
            print(f"\n{name} restarted after 6 s down: tables back {took * 1000:.0f} ms after READY "
                  f"({len(channels)} channels, {routes} routes)")
            assert grid.health().announced == announced + 1
            assert took <= 1.0, f"{name}: tables back {took:.3f} s after READY"
            delivered = s.stats.delivered
            await asyncio.sleep(0.5)
            assert s.stats.delivered >= delivered + 30, "the stream through the restarted router did not resume"
        publishing.cancel()
    finally:
        await pub.stop()
        await sub.stop()
        grid.stop()


async def test_a_failed_channel_is_routed_around_while_both_routers_answer(tmp_path: Path) -> None:
    """i1 stops sending to e2 (its channel removed: the one-way loss of a link); e2 stops hearing i1's
    liveness pings and reports the channel down; the broker re-plans the k=1 path through i1 onto i2
    although both routers still answer its health checks, and the stream resumes."""
    grid = Grid(tmp_path)
    pub = await Publisher.connect("pmu1", grid.control("e1"))
    sub = await Subscriber.connect("ems", grid.control("e2"))
    try:
        handle = await pub.register("freq", FLOAT, INTERVAL_MS)
        got: list[tuple[float, int]] = []
        await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=INTERVAL_MS, latency_ms=50,
                                   on_event=lambda _, holder: got.append((time.monotonic(), holder.timestamp_ms)))
        assert grid.paths("ems") == [("e1", "i1", "e2")]
        publishing = asyncio.ensure_future(pub.run_periodic(handle, lambda ts: 60.0, count=400))
        await asyncio.sleep(1.0)
        cut = time.monotonic()
        grid.routers["i1"].stub.RemoveChannel(rpb.RemoveChannelRequest(name="e2"), timeout=5)
        took = await asyncio.to_thread(wait_until, "the broker re-planned the path over i1-e2",
                                       lambda: grid.health().repaired >= 1, 10.0)
        health = grid.health()
        assert health.last_repair_cause in ("channel i1-e2 down", "channel e2-i1 down"), health
        assert grid.paths("ems") == [("e1", "i2", "e2")]
        assert grid.health().routers_down == 0  # both routers answered all along
        await publishing
        await asyncio.sleep(0.3)
        after = [ts for t, ts in got if t > cut + took + 0.2]
        silent = max((b - a for (a, _), (b, _) in itertools.pairwise(got)), default=0.0)
        print(f"\nchannel i1-e2 cut: re-planned {took:.3f} s after the cut; the stream was silent {silent:.3f} s")
        assert len(after) >= 50, "the stream did not resume over i2"
    finally:
        await pub.stop()
        await sub.stop()
        grid.stop()
