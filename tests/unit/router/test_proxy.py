"""The edge router's EdgeProxy against a fake QoSBroker: edge_router filled in, errors unchanged, retries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from gridstat.core.ports import free_port
from gridstat.router.proxy import BROKER_UNAVAILABLE, EdgeProxyServicer, add_to_server
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import edge_pb2_grpc as epb_grpc


@dataclass
class FakeBroker(bpb_grpc.QoSBrokerServicer):  # type: ignore[misc]
    """Implements a few QoSBroker methods; records every request it sees."""

    seen: list[tuple[str, Any]] = field(default_factory=list)
    #: Calls to fail with UNAVAILABLE (no metadata, as a transport would) before answering.
    flaky: int = 0
    delay_s: float = 0.0

    async def RegisterClient(self, request: bpb.RegisterClientRequest, context: Any) -> bpb.RegisterClientReply:
        self.seen.append(("RegisterClient", request))
        if self.flaky > 0:
            self.flaky -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return bpb.RegisterClientReply(client_id=7, event_host="127.0.0.1", event_port=4000)

    async def RegisterPublication(self, request: bpb.RegisterPublicationRequest,
                                  context: Any) -> bpb.RegisterPublicationReply:
        self.seen.append(("RegisterPublication", request))
        pub = bpb.Publication()
        pub.CopyFrom(request.publication)
        pub.variable_id = 42
        return bpb.RegisterPublicationReply(publication=pub)

    async def Subscribe(self, request: bpb.SubscribeRequest, context: Any) -> bpb.SubscribeReply:
        self.seen.append(("Subscribe", request))
        if request.subscription.variable == "pmu1/missing":
            context.set_trailing_metadata((("gridstat-reason", "UnknownVariable"),
                                           ("gridstat-field", "subscription.variable")))
            await context.abort(grpc.StatusCode.NOT_FOUND, "UnknownVariable: no pmu1/missing")
        if request.subscription.variable == "pmu1/busy":
            context.set_trailing_metadata((("gridstat-reason", "RouterUnreachable"), ("gridstat-field", "")))
            await context.abort(grpc.StatusCode.UNAVAILABLE, "RouterUnreachable: r3 is down")
        sub = bpb.Subscription()
        sub.CopyFrom(request.subscription)
        sub.subscription_id = "s1"
        return bpb.SubscribeReply(admitted=True, subscription=sub, variable_id=42, pub_interval_ms=10)


async def _server(add: Any) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    add(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@dataclass
class Rig:
    broker: FakeBroker
    proxy: EdgeProxyServicer
    stub: Any


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    broker = FakeBroker()
    bserver, bport = await _server(lambda s: bpb_grpc.add_QoSBrokerServicer_to_server(broker, s))
    proxy = EdgeProxyServicer("edge1", f"127.0.0.1:{bport}", deadline_s=1.0, backoff_base_s=0.01)
    pserver, pport = await _server(lambda s: add_to_server(proxy, s))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{pport}")
    try:
        yield Rig(broker, proxy, epb_grpc.EdgeProxyStub(channel))
    finally:
        await channel.close()
        await pserver.stop(None)
        await proxy.close()
        await bserver.stop(None)


def _md(exc: grpc.aio.AioRpcError) -> dict[str, str]:
    return {k: v for k, v in (exc.trailing_metadata() or ())}


async def test_edge_router_is_filled_in_on_every_relayed_command(rig: Rig) -> None:
    reply = await rig.stub.RegisterClient(bpb.RegisterClientRequest(
        name="sub1", kind=bpb.CLIENT_KIND_SUBSCRIBER, port=5000, edge_router="forged", first_time=True),
        timeout=5)
    assert reply.client_id == 7
    pub = await rig.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
        publisher="pmu1", variable="freq", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT), interval_ms=10)),
        timeout=5)
    assert pub.publication.variable_id == 42
    sub = await rig.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber="sub1", variable="pmu1/freq", qos=[bpb.ModeQoS(interval_ms=20, latency_ms=50, redundancy=1)])),
        timeout=5)
    assert sub.admitted and sub.subscription.edge_router == "edge1"
    by_method = {m: r for m, r in rig.broker.seen}
    reg = by_method["RegisterClient"]
    assert reg.edge_router == "edge1" and reg.first_time
    assert reg.host == "127.0.0.1"  # a subscriber without a host: the peer's address
    assert by_method["RegisterPublication"].publication.edge_router == "edge1"
    assert by_method["Subscribe"].subscription.edge_router == "edge1"
    assert rig.proxy.relayed == 3


async def test_broker_error_passes_through_unchanged(rig: Rig) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await rig.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber="sub1", variable="pmu1/missing")), timeout=5)
    exc = info.value
    assert exc.code() is grpc.StatusCode.NOT_FOUND
    assert exc.details() == "UnknownVariable: no pmu1/missing"
    md = _md(exc)
    assert md["gridstat-reason"] == "UnknownVariable"
    assert md["gridstat-field"] == "subscription.variable"
    assert len(rig.broker.seen) == 1  # not retried


async def test_broker_unavailable_with_a_reason_is_retried_then_passed_unchanged(rig: Rig) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await rig.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber="sub1", variable="pmu1/busy")), timeout=5)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == "RouterUnreachable: r3 is down"
    assert _md(info.value)["gridstat-reason"] == "RouterUnreachable"
    assert len(rig.broker.seen) == 3  # gRPC's retry policy: three attempts in all
    assert _md(info.value).get("grpc-retry-pushback-ms") == "-1"  # and the client does not retry it again


async def test_transient_unavailable_is_retried_to_success(rig: Rig) -> None:
    rig.broker.flaky = 2
    reply = await rig.stub.RegisterClient(bpb.RegisterClientRequest(name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER),
                                          timeout=5)
    assert reply.client_id == 7
    assert len(rig.broker.seen) == 3  # gRPC's retry policy: three attempts in all


async def test_slow_broker_gives_deadline_exceeded(rig: Rig) -> None:
    rig.broker.delay_s = 1.0
    rig.proxy.deadline_s = 0.1
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await rig.stub.RegisterClient(bpb.RegisterClientRequest(name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER),
                                      timeout=5)
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert _md(info.value)["gridstat-reason"] == "BrokerTimeout"


async def test_broker_down_gives_unavailable_broker_unavailable_after_the_retries() -> None:
    proxy = EdgeProxyServicer("edge1", f"127.0.0.1:{free_port()}", deadline_s=1.0, backoff_base_s=0.01)
    pserver, pport = await _server(lambda s: add_to_server(proxy, s))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{pport}")
    try:
        stub = epb_grpc.EdgeProxyStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.RegisterClient(bpb.RegisterClientRequest(name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER),
                                      timeout=5)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert _md(info.value)["gridstat-reason"] == BROKER_UNAVAILABLE
        assert BROKER_UNAVAILABLE in (info.value.details() or "")
        assert proxy.failed == 1
    finally:
        await channel.close()
        await pserver.stop(None)
        await proxy.close()


def test_the_proxys_answers_stop_the_clients_own_retries() -> None:
    """An answer relayed from the broker is not retried again by the client: the proxy's error carries
    gRPC's pushback that says so (core.rpc.NO_RETRY), and its channel retries as configured."""
    from gridstat.core import rpc

    assert rpc.NO_RETRY == ("grpc-retry-pushback-ms", "-1")
    assert rpc.retry_options(1, 0.1) == [("grpc.enable_retries", 0)]
    config = dict(rpc.retry_options(3, 0.05))["grpc.service_config"]
    assert '"maxAttempts": 3' in config and '"initialBackoff": "0.05s"' in config


def test_bad_broker_address_is_refused() -> None:
    from gridstat.errors import ValidationError

    with pytest.raises(ValidationError):
        EdgeProxyServicer("edge1", "nohostport")


def test_broker_tls_files_are_checked_before_connecting() -> None:
    from gridstat.core.tls import TlsFiles
    from gridstat.errors import ValidationError

    with pytest.raises(ValidationError) as info:
        EdgeProxyServicer("edge1", "127.0.0.1:1", tls=TlsFiles("", "", "/nonexistent/ca.pem"))
    assert info.value.field == "broker_tls_ca"
    with pytest.raises(ValidationError):
        EdgeProxyServicer("edge1", "127.0.0.1:1", tls=TlsFiles("/x/cert.pem", "", ""))
