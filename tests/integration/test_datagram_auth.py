"""Datagram authentication end to end: SDK publisher -> keyed edge router -> SDK subscriber, and a
router's control API taking, hiding and rotating a channel key."""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest

from gridstat.client import Publisher, Subscriber
from gridstat.core import clock, wire
from gridstat.core.model import FLOAT, VariableRegistry
from gridstat.router.channels import ChannelKind
from gridstat.router.control import serve
from gridstat.router.process import Role, RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

from .fixtures import eventually

pytestmark = pytest.mark.integration

PUB_KEY, SUB_KEY = b"p" * 32, b"s" * 32


async def test_signed_stream_is_delivered_and_forgeries_and_replays_are_counted() -> None:
    var = VariableRegistry().register("pmu1", "freq", FLOAT, interval_ms=10)
    async with StatusRouter(RouterConfig(name="edge1", router_id=1, role=Role.EDGE)) as edge, \
            Subscriber("ems", 200, key=SUB_KEY) as sub:
        edge.add_channel("pub", peer_id=100, kind=ChannelKind.PUBLISHER, key=PUB_KEY)
        edge.add_channel("ems", peer_id=200, kind=ChannelKind.SUBSCRIBER, address=sub.address, key=SUB_KEY)
        edge.install_routes([RouteInstall(Route("r", var.variable_id, 0, "ems", 10, 1), 10)])
        got: list[int] = []
        sub.subscribe(var, interval_ms=10, latency_ms=5000, on_event=lambda s, h: got.append(h.timestamp_ms))
        async with Publisher("pmu1", 100, edge.address, key=PUB_KEY) as pub:
            handle = pub.variable(var)
            base = int(clock.next_aligned_ms(clock.now_ms(), 600)) + 600
            for i in range(20):
                handle.publish(float(i), base + 10 * i)
                await asyncio.sleep(0.001)
            await eventually(lambda: len(got) == 20, what="20 signed events at the subscriber")
        # An attacker who knows the sender id but not the key, and one who replays a captured datagram.
        raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        ev = wire.encode_event(wire.Event(base + 500, var.variable_id, wire.encode_value(FLOAT, 1.0)))
        raw.sendto(wire.encode_datagram(100, 999, [ev]), edge.address)
        raw.sendto(wire.sign_datagram(b"x" * 32, wire.encode_datagram(100, 1000, [ev])), edge.address)
        captured = wire.sign_datagram(PUB_KEY, wire.encode_datagram(100, 5, [ev]))  # an old sequence number
        raw.sendto(captured, edge.address)
        # And at the subscriber: a datagram "from the edge router" signed with the wrong key.
        raw.sendto(wire.sign_datagram(b"y" * 32, wire.encode_datagram(1, 77, [ev])), sub.address)
        raw.close()
        await eventually(lambda: edge.forwarder.drops["auth_failed"] == 2 and edge.forwarder.drops["replayed"] == 1
                         and sub.stats.drops["auth_failed"] == 1, what="2 forgeries and 1 replay counted")
        assert len(got) == 20 and got == sorted(got)


async def test_control_api_takes_hides_validates_and_rotates_keys() -> None:
    async with StatusRouter(RouterConfig(name="r1", router_id=1)) as r:
        server, port = await serve(r, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.RouterControlStub(channel)  # type: ignore[no-untyped-call]
                with pytest.raises(grpc.aio.AioRpcError) as bad:
                    await stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
                        name="n", peer_id=2, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1", port=9, key=b"short")))
                assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert (await stub.ListChannels(pb.ListChannelsRequest())).channels == []  # nothing half-added
                await stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
                    name="n", peer_id=2, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1", port=9, key=b"a" * 32)))
                listed = (await stub.ListChannels(pb.ListChannelsRequest())).channels[0]
                assert listed.authenticated and listed.key == b""  # write only
                assert r.channels["n"].key == b"a" * 32
                await stub.UpdateChannel(pb.UpdateChannelRequest(name="n", level=1, key=b"b" * 32))
                assert r.channels["n"].key == b"b" * 32
                await stub.UpdateChannel(pb.UpdateChannelRequest(name="n", level=1, key=b""))
                assert r.channels["n"].key is None
        finally:
            await server.stop(None)
