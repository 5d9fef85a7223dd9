"""A router with ``busy_poll_us`` forwards exactly what a sleeping one does, polls between datagrams, and keeps
polling time out of the load estimate the overload handling reads (router.process, ``_on_readable``)."""

from __future__ import annotations

import asyncio

import pytest

from gridstat.client import Publisher, Subscriber
from gridstat.core import clock
from gridstat.core.model import FLOAT, VariableRegistry
from gridstat.errors import ValidationError
from gridstat.router.channels import ChannelKind
from gridstat.router.process import Role, RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route

pytestmark = pytest.mark.integration


async def _stream(busy_poll_us: int, n: int = 60) -> tuple[list[int], StatusRouter]:
    var = VariableRegistry().register("pmu1", "freq", FLOAT, interval_ms=10)
    config = RouterConfig(name="edge1", router_id=1, role=Role.EDGE, busy_poll_us=busy_poll_us)
    got: list[int] = []
    async with StatusRouter(config) as edge, Subscriber("ems", 200) as sub:
        edge.add_channel("pub", peer_id=100, kind=ChannelKind.PUBLISHER)
        edge.add_channel("ems", peer_id=200, kind=ChannelKind.SUBSCRIBER, address=sub.address)
        edge.install_routes([RouteInstall(Route("r", var.variable_id, 0, "ems", 20, 1), 10)])
        sub.subscribe(var, interval_ms=20, latency_ms=5000, on_event=lambda s, h: got.append(h.timestamp_ms))
        async with Publisher("pmu1", 100, edge.address) as pub:
            handle = pub.variable(var)
            base = int(clock.next_aligned_ms(clock.now_ms(), 600)) + 600
            for i in range(n):
                handle.publish(float(i), base + 10 * i)
                await asyncio.sleep(0.0005)
            for _ in range(400):
                if len(got) == n // 2:
                    break
                await asyncio.sleep(0.005)
        return [t - base for t in got], edge


async def test_busy_polling_router_forwards_the_same_events_as_a_sleeping_one() -> None:
    sleeping, r0 = await _stream(0)
    polling, r1 = await _stream(200)
    assert sleeping == polling == [20 * i for i in range(30)]  # the 20-ms filter: every other event, in order
    assert r0._spun_ns == 0
    assert r1._spun_ns > 0  # it did poll between datagrams
    # The load estimate (router.shedding's input) counts forwarding, not polling: 60 datagrams cannot keep a
    # core busy for anywhere near the time spent polling.
    assert r1._busy_ns < r1._spun_ns


def test_negative_busy_poll_is_refused_with_its_field() -> None:
    with pytest.raises(ValidationError) as e:
        RouterConfig(name="r", router_id=1, busy_poll_us=-1)
    assert e.value.field == "busy_poll_us"
