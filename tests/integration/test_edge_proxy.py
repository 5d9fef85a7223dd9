"""A real ``gridstat router --role edge --broker ...`` proxying clients' commands to a fake leaf broker.

The clients talk only to the router's control port; the fake broker (in this process) sees every
command with ``edge_router`` set to the router's name and, like a real leaf broker, opens the
clients' event channels and installs the route on the router, so the events then flow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from gridstat.client import EdgeSession, Holder, Publisher, Subscriber, Subscription, SubscriptionRejected
from gridstat.core.model import FLOAT
from gridstat.errors import GridStatError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import edge_pb2_grpc
from gridstat.v1 import router_pb2 as rpb
from gridstat.v1 import router_pb2_grpc as rpb_grpc

from .fixtures import eventually
from .routerprocs import RouterProc, start_router

pytestmark = pytest.mark.integration


@dataclass
class FakeLeafBroker(bpb_grpc.QoSBrokerServicer):  # type: ignore[misc]
    seen: list[tuple[str, Any]] = field(default_factory=list)
    router: RouterProc | None = None
    ids: dict[str, int] = field(default_factory=dict)
    pub_interval: dict[str, int] = field(default_factory=dict)
    channel: grpc.aio.Channel | None = None
    #: Refuse RegisterClient as a real broker refuses a router it has not registered.
    unknown_edge: bool = False

    def control(self) -> Any:
        """The router's control API, as a real leaf broker drives it."""
        assert self.router is not None
        if self.channel is None:
            self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.router.control_port}")
        return rpb_grpc.RouterControlStub(self.channel)

    async def RegisterClient(self, request: bpb.RegisterClientRequest, context: Any) -> bpb.RegisterClientReply:
        self.seen.append(("RegisterClient", request))
        assert self.router is not None
        if self.unknown_edge:
            context.set_trailing_metadata((("gridstat-reason", "Unauthorized"), ("gridstat-field", "edge_router")))
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"Unauthorized: {request.edge_router!r} is not an edge router of cloud 'A'")
        publisher = request.kind == bpb.CLIENT_KIND_PUBLISHER
        cid = 100 + len(self.seen)
        ch = rpb.Channel(name=f"{'pub' if publisher else 'sub'}-{request.name}", peer_id=cid,
                         kind=rpb.CHANNEL_KIND_PUBLISHER if publisher else rpb.CHANNEL_KIND_SUBSCRIBER,
                         host="" if publisher else request.host, port=0 if publisher else request.port)
        await self.control().AddChannel(rpb.AddChannelRequest(channel=ch), timeout=5)
        return bpb.RegisterClientReply(client_id=cid, event_host="127.0.0.1", event_port=self.router.port)

    async def RegisterPublication(self, request: bpb.RegisterPublicationRequest,
                                  context: Any) -> bpb.RegisterPublicationReply:
        self.seen.append(("RegisterPublication", request))
        pub = bpb.Publication()
        pub.CopyFrom(request.publication)
        full = f"{pub.publisher}/{pub.variable}"
        pub.variable_id = self.ids.setdefault(full, len(self.ids) + 1)
        self.pub_interval[full] = pub.interval_ms
        return bpb.RegisterPublicationReply(publication=pub)

    async def Subscribe(self, request: bpb.SubscribeRequest, context: Any) -> bpb.SubscribeReply:
        self.seen.append(("Subscribe", request))
        s = request.subscription
        if s.variable not in self.ids:
            context.set_trailing_metadata((("gridstat-reason", "UnknownVariable"),
                                           ("gridstat-field", "subscription.variable")))
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UnknownVariable: {s.variable!r} is not published")
        vid, pub_ms = self.ids[s.variable], self.pub_interval[s.variable]
        q = s.qos[0]
        await self.control().InstallRoutes(rpb.InstallRoutesRequest(routes=[rpb.Route(
            route_id="s1", variable_id=vid, mode=q.mode, channel=f"sub-{s.subscriber}",
            sub_interval_ms=q.interval_ms, priority=q.priority, pub_interval_ms=pub_ms)]), timeout=5)
        sub = bpb.Subscription()
        sub.CopyFrom(s)
        sub.subscription_id = "s1"
        return bpb.SubscribeReply(admitted=True, subscription=sub, variable_id=vid, pub_interval_ms=pub_ms,
                                  allocations=[bpb.Allocation(mode=q.mode, paths=[bpb.Path(routers=[s.edge_router])])])


@dataclass
class Rig:
    broker: FakeLeafBroker
    router: RouterProc

    @property
    def edge_control(self) -> str:
        return f"127.0.0.1:{self.router.control_port}"


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    broker = FakeLeafBroker()
    server = grpc.aio.server()
    bpb_grpc.add_QoSBrokerServicer_to_server(broker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    router = await asyncio.to_thread(start_router, "edge1", 1, role="edge",
                                     extra=("--broker", f"127.0.0.1:{port}"))
    broker.router = router
    try:
        yield Rig(broker, router)
    finally:
        await asyncio.to_thread(router.stop)
        await server.stop(None)
        if broker.channel is not None:
            await broker.channel.close()


async def test_commands_go_through_the_edge_router_with_its_name(rig: Rig) -> None:
    async with EdgeSession(rig.edge_control) as s:
        cid, event = await s.register_publisher("pmu1")
        assert cid > 0
        assert event == ("127.0.0.1", rig.router.port)
        assert await s.register_subscriber("sub1", ("127.0.0.1", 6000)) > 0
        var = await s.register_publication("pmu1", "freq", FLOAT, 10)
        assert var.variable_id == 1
        r = await s.subscribe("sub1", "pmu1/freq", FLOAT, [(0, 20, 50, 1, 1)])
        assert r.admitted and r.variable_id == 1 and r.pub_interval_ms == 10
        with pytest.raises(SubscriptionRejected) as info:
            await s.subscribe("sub1", "pmu1/nope", FLOAT, [(0, 20, 50, 1, 1)])
        assert info.value.reason == "UnknownVariable" and info.value.field == "subscription.variable"
    edges: dict[str, list[str]] = {m: [] for m, _ in rig.broker.seen}
    for m, req in rig.broker.seen:
        edges[m].append(req.edge_router if m == "RegisterClient" else
                        req.publication.edge_router if m == "RegisterPublication" else req.subscription.edge_router)
    assert edges == {"RegisterClient": ["edge1", "edge1"], "RegisterPublication": ["edge1"],
                     "Subscribe": ["edge1", "edge1"]}


async def test_sdk_connect_publish_and_receive_through_the_proxy(rig: Rig) -> None:
    got: list[int] = []

    def on_event(sub: Subscription, h: Holder) -> None:
        got.append(h.timestamp_ms)

    pub = await Publisher.connect("pmu1", rig.edge_control)
    sub = await Subscriber.connect("sub1", rig.edge_control)
    try:
        handle = await pub.register("freq", FLOAT, 10)
        s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=10, latency_ms=500, on_event=on_event)
        assert s.variable.variable_id == handle.variable.variable_id
        # The route is installed by the broker's reply; publish until the events arrive.
        for _ in range(100):
            handle.publish(50.0)
            if await eventually(lambda: bool(got), timeout_s=0.02):
                break
        assert got
    finally:
        await pub.stop()
        await sub.stop()
    reg = [req for m, req in rig.broker.seen if m == "RegisterClient"]
    assert [(r.name, r.edge_router, r.first_time) for r in reg] == [("pmu1", "edge1", True), ("sub1", "edge1", True)]


async def test_broker_down_gives_broker_unavailable_and_the_router_keeps_running() -> None:
    dead = await asyncio.to_thread(start_router, "edge2", 2, role="edge", extra=("--broker", "127.0.0.1:1"))
    try:
        async with EdgeSession(f"127.0.0.1:{dead.control_port}") as d:
            with pytest.raises(GridStatError) as info:
                await d.register_publisher("pmu1")
        assert info.value.reason == "BrokerUnavailable" and info.value.retriable
        health = await asyncio.to_thread(dead.stub.Health, rpb.HealthRequest(), timeout=5)
        assert health.serving and health.router == "edge2"
    finally:
        await asyncio.to_thread(dead.stop)


async def test_only_an_edge_router_relays_for_clients() -> None:
    """Every router may name its broker (it announces its start there: docs/redundancy.md, "Healing"),
    but only an edge router serves the EdgeProxy: an internal one answers its calls UNIMPLEMENTED."""
    r = await asyncio.to_thread(start_router, "r9", 9, role="internal", extra=("--broker", "127.0.0.1:1"),
                                timeout_s=10)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{r.control_port}") as channel:
            stub = edge_pb2_grpc.EdgeProxyStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.RegisterClient(bpb.RegisterClientRequest(name="x", kind=bpb.CLIENT_KIND_PUBLISHER),
                                          timeout=5)
            assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        await asyncio.to_thread(r.stop)


async def test_an_edge_router_its_broker_does_not_know_yet_answers_retry_not_refused(rig: Rig) -> None:
    """A router pod started before the topology registered it at its broker (docs/kubernetes.md): the
    broker's "not an edge router" refusal is then transient, so the proxy answers UNAVAILABLE
    (EdgeRouterNotReady), which clients retry; once the broker has built the router, the broker's own
    refusal comes back as it is."""
    rig.broker.unknown_edge = True
    async with EdgeSession(rig.edge_control, attempts=1) as s:
        with pytest.raises(GridStatError) as info:
            await s.register_publisher("pmu1")
        assert info.value.retriable and info.value.reason == "EdgeRouterNotReady", info.value
        assert "edge router edge1 is not ready" in str(info.value) and "not an edge router" in str(info.value)
        # The broker builds the router (every rebuild ends with the current mode): now it is ready.
        await rig.broker.control().SetMode(rpb.SetModeRequest(mode=0), timeout=5)
        with pytest.raises(GridStatError) as info:
            await s.register_publisher("pmu1")
        assert not info.value.retriable and info.value.reason == "Unauthorized", info.value
        rig.broker.unknown_edge = False
        cid, _ = await s.register_publisher("pmu1")
        assert cid > 0
