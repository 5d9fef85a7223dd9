"""The client SDK against real status routers on 127.0.0.1: filter, redundancy, violations, snapshots,
extrapolation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gridstat.client import Extrapolation, Holder, Publisher, Snapshot, Subscriber, Subscription, Violation
from gridstat.core import clock, filtering
from gridstat.core.model import FLOAT, StatusVariable, VariableRegistry
from gridstat.router.channels import ChannelKind
from gridstat.router.process import Role, RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route

from .fixtures import eventually

pytestmark = pytest.mark.integration

PUB_ID = 100


def route(r: StatusRouter, route_id: str, var: StatusVariable, channel: str, interval: int) -> None:
    r.install_routes([RouteInstall(Route(route_id, var.variable_id, 0, channel, interval, 1), var.interval_ms)])


@pytest.fixture
async def edge() -> AsyncIterator[StatusRouter]:
    r = StatusRouter(RouterConfig(name="edge1", router_id=1, role=Role.EDGE))
    await r.start()
    r.add_channel("pub", peer_id=PUB_ID, kind=ChannelKind.PUBLISHER)
    try:
        yield r
    finally:
        await r.stop()


def first_ts() -> int:
    """An instant aligned to every interval used, a little ahead of now (well inside the routers'
    5 s future tolerance), so explicit timestamps never look late to the monitor during a test."""
    return int(clock.next_aligned_ms(clock.now_ms(), 600)) + 600


async def test_two_subscribers_get_exactly_their_filtered_timestamps(edge: StatusRouter) -> None:
    reg = VariableRegistry()
    var = reg.register("pmu1", "freq", FLOAT, interval_ms=10)
    got: dict[str, list[int]] = {"a": [], "b": []}
    async with Publisher("pmu1", PUB_ID, edge.address) as pub, \
            Subscriber("subA", 201) as sa, Subscriber("subB", 202) as sb:
        edge.add_channel("sa", peer_id=201, kind=ChannelKind.SUBSCRIBER, address=sa.address)
        edge.add_channel("sb", peer_id=202, kind=ChannelKind.SUBSCRIBER, address=sb.address)
        route(edge, "ra", var, "sa", 20)
        route(edge, "rb", var, "sb", 30)
        a = sa.subscribe(var, interval_ms=20, latency_ms=5000,
                         on_event=lambda s, h: got["a"].append(h.timestamp_ms))
        b = sb.subscribe(var, interval_ms=30, latency_ms=5000,
                         on_event=lambda s, h: got["b"].append(h.timestamp_ms))
        handle = pub.variable(var)
        base = first_ts()
        stamps = [base + 10 * i for i in range(60)]
        for i, ts in enumerate(stamps):
            handle.publish(float(i), ts)
            if i % 8 == 7:
                await asyncio.sleep(0.001)  # let the router drain; publishing itself never blocks
        want_a = [t for t in stamps if filtering.should_forward(t, 10, 20)]
        want_b = [t for t in stamps if filtering.should_forward(t, 10, 30)]
        await eventually(lambda: len(got["a"]) >= len(want_a) and len(got["b"]) >= len(want_b),
                         what="both subscribers' filtered events")
        await asyncio.sleep(0.05)  # nothing extra trickles in
        assert got["a"] == want_a and len(want_a) == 30
        assert got["b"] == want_b and len(want_b) == 20
        assert pub.stats.published == 60 and pub.stats.dropped == 0
        assert a.stats.delivered == 30 and a.stats.gaps == 0 and a.stats.duplicates == 0
        assert b.stats.delivered == 20 and b.stats.violations == 0
        assert isinstance(a.holder, Holder) and a.value == float(stamps.index(want_a[-1]))


async def test_redundant_paths_are_deduplicated(edge: StatusRouter) -> None:
    reg = VariableRegistry()
    var = reg.register("pmu1", "freq", FLOAT, interval_ms=10)
    async with StatusRouter(RouterConfig(name="r2", router_id=2)) as r2, \
            Publisher("pmu1", PUB_ID, edge.address) as pub, Subscriber("subR", 300) as sr:
        # Path 1: edge -> sub. Path 2: edge -> r2 -> sub (disjoint after the edge).
        edge.add_channel("to-r2", peer_id=2, kind=ChannelKind.ROUTER, address=r2.address)
        r2.add_channel("from-edge", peer_id=1, kind=ChannelKind.ROUTER, address=edge.address)
        edge.add_channel("s", peer_id=300, kind=ChannelKind.SUBSCRIBER, address=sr.address)
        r2.add_channel("s", peer_id=300, kind=ChannelKind.SUBSCRIBER, address=sr.address)
        route(edge, "p1", var, "s", 10)
        route(edge, "p2", var, "to-r2", 10)
        route(r2, "p2", var, "s", 10)
        sub = sr.subscribe(var, interval_ms=10, latency_ms=5000)
        handle = pub.variable(var)
        base = first_ts()
        for i in range(20):
            handle.publish(float(i), base + 10 * i)
            await asyncio.sleep(0.001)
        await eventually(lambda: sub.stats.delivered + sub.stats.duplicates + sub.stats.stale >= 40,
                         what="40 copies at the subscriber")
        await asyncio.sleep(0.03)
        assert sub.stats.delivered == 20
        assert sub.stats.duplicates + sub.stats.stale == 20
        assert sub.stats.gaps == 0
        assert sub.value == 19.0


async def test_violation_fires_when_the_publisher_stops(edge: StatusRouter) -> None:
    reg = VariableRegistry()
    var = reg.register("pmu1", "freq", FLOAT, interval_ms=10)
    violations: list[Violation] = []
    async with Subscriber("subV", 400) as sv:
        edge.add_channel("sv", peer_id=400, kind=ChannelKind.SUBSCRIBER, address=sv.address)
        route(edge, "rv", var, "sv", 10)
        sub = sv.subscribe(var, interval_ms=10, latency_ms=40,
                           on_violation=lambda s, v: violations.append(v))
        async with Publisher("pmu1", PUB_ID, edge.address) as pub:
            n = await asyncio.wait_for(pub.run_periodic(pub.variable(var), lambda ts: float(ts), count=15), 3)
        assert n == 15
        await eventually(lambda: sub.stats.delivered >= 15, timeout_s=1.0, what="15 events delivered")
        holder = sub.holder
        assert holder is not None
        last = holder.timestamp_ms
        await eventually(lambda: any(v.kind == "late" and v.last_ts_ms == last for v in violations), timeout_s=1.0,
                         what="a late violation after the last event")
        late = next(v for v in violations if v.kind == "late" and v.last_ts_ms == last)
        assert late.expected_ts_ms == last + 10
        assert late.detected_ms > last + 10 + 40
        # One report per missed deadline: never two for the same expected timestamp.
        expected = [v.expected_ts_ms for v in violations if v.kind == "late"]
        assert len(expected) == len(set(expected))


async def test_snapshot_group_delivers_complete_sets(edge: StatusRouter) -> None:
    reg = VariableRegistry()
    names = ("va", "vb", "vc")
    variables = [reg.register("pmu1", n, FLOAT, interval_ms=10) for n in names]
    snaps: list[Snapshot] = []
    async with Publisher("pmu1", PUB_ID, edge.address) as pub, Subscriber("subG", 500) as sg:
        edge.add_channel("sg", peer_id=500, kind=ChannelKind.SUBSCRIBER, address=sg.address)
        subs: list[Subscription] = []
        for v in variables:
            route(edge, f"g-{v.name}", v, "sg", 20)
            subs.append(sg.subscribe(v, interval_ms=20, latency_ms=5000))
        group = sg.snapshot_group("bus7", subs, history=4, on_snapshot=lambda g, s: snaps.append(s))
        handles = [pub.variable(v) for v in variables]
        base = first_ts()
        for i in range(20):
            ts = base + 10 * i
            pub.publish_many([(h, float(ts + k)) for k, h in enumerate(handles)], ts)
            await asyncio.sleep(0.001)
        await eventually(lambda: len(snaps) >= 10, what="10 snapshots")
        await asyncio.sleep(0.03)
        assert [s.ts_ms for s in snaps] == [base + 20 * i for i in range(10)]
        for s in snaps:
            assert dict(s.values) == {f"pmu1/{n}": float(s.ts_ms + k) for k, n in enumerate(names)}
        latest = group.latest()
        assert latest is snaps[-1]
        assert [s.ts_ms for s in group.history(2)] == [snaps[-2].ts_ms, snaps[-1].ts_ms]
        assert group.stats.incomplete == 0 and group.stats.complete == 10
        assert pub.stats.datagrams == 20  # one datagram per instant: the three values travel together


async def test_extrapolation_fills_skipped_events_and_then_reports_the_silence(edge: StatusRouter) -> None:
    reg = VariableRegistry()
    var = reg.register("pmu1", "freq", FLOAT, interval_ms=20)
    got: list[Holder] = []
    violations: list[Violation] = []
    spec = Extrapolation("polynomial", order=1, window=4, max_consecutive=3)
    async with Subscriber("subX", 600) as sx:
        edge.add_channel("sx", peer_id=600, kind=ChannelKind.SUBSCRIBER, address=sx.address)
        route(edge, "rx", var, "sx", 20)
        sub = sx.subscribe(var, interval_ms=20, latency_ms=200, extrapolation=spec,
                           on_event=lambda s, h: got.append(h), on_violation=lambda s, v: violations.append(v))
        base = clock.next_aligned_ms(clock.now_ms(), 20) + 20
        stamps = [base + 20 * k for k in range(12)]
        skipped = {stamps[6], stamps[7]}

        def value(ts: int) -> float:  # a ramp: order 1 extrapolates it exactly
            return 50.0 + 0.001 * (ts - base)

        async with Publisher("pmu1", PUB_ID, edge.address) as pub:
            handle = pub.variable(var)
            for ts in stamps:  # in real time, so the subscriber's monitor sees real deadlines
                await asyncio.sleep(max(0, ts - clock.now_ms()) / 1000)
                if ts not in skipped:
                    handle.publish(value(ts), ts)
        last = stamps[-1]
        # After the publisher stops, max_consecutive instants are filled, then the silence is reported.
        await eventually(lambda: any(v.kind == "late" for v in violations), what="a late violation")
        assert [h.timestamp_ms for h in got if not h.extrapolated] == [t for t in stamps if t not in skipped]
        filled = {h.timestamp_ms: h.value for h in got if h.extrapolated}
        assert set(filled) >= skipped | {last + 20, last + 40, last + 60}
        for ts, v in filled.items():
            assert v == pytest.approx(value(ts), abs=1e-9)
        late = [v for v in violations if v.kind == "late"]
        assert (late[0].expected_ts_ms, late[0].last_ts_ms) == (last + 80, last)
        assert not any(v.kind == "gap" for v in violations)
        holder = sub.holder
        assert holder is not None and holder.extrapolated and holder.timestamp_ms == last + 60
        assert sub.stats.extrapolated >= 5 and sub.stats.gaps >= 2
