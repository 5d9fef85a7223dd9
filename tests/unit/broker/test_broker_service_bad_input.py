"""The leaf broker's gRPC service refuses bad requests with specific reasons and installs nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from gridstat.broker.leaf import LeafBroker
from gridstat.broker.service import QoSBrokerServicer
from gridstat.broker.store import BrokerStore
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc


@pytest.fixture
async def stub() -> AsyncIterator[pb_grpc.QoSBrokerStub]:
    broker = LeafBroker("A", BrokerStore(":memory:"), supervise_interval_s=60)
    await broker.start()
    server = grpc.aio.server()
    pb_grpc.add_QoSBrokerServicer_to_server(QoSBrokerServicer(broker), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
    await server.stop(0)
    await broker.stop()


async def error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    return err.value


def reason(e: grpc.aio.AioRpcError) -> tuple[str, str]:
    md = {k: v for k, v in (e.trailing_metadata() or ())}
    return str(md.get("gridstat-reason")), str(md.get("gridstat-field"))


async def test_subscribe_without_qos_names_the_field(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.Subscribe(pb.SubscribeRequest(subscription=pb.Subscription(
        subscriber="s", variable="p/v", edge_router="e"))))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason(e) == ("InvalidArgument", "subscription.qos")


@pytest.mark.parametrize(("qos", "field"), [
    (pb.ModeQoS(mode=0, interval_ms=0, latency_ms=10), "qos.interval_ms"),
    (pb.ModeQoS(mode=0, interval_ms=10, latency_ms=0), "qos.latency_ms"),
    (pb.ModeQoS(mode=16, interval_ms=10, latency_ms=10), "qos.mode"),
    (pb.ModeQoS(mode=0, interval_ms=10, latency_ms=10, redundancy=9), "qos.redundancy"),
    (pb.ModeQoS(mode=0, interval_ms=10, latency_ms=10, priority=7), "qos.priority"),
])
async def test_impossible_qos_is_refused(stub: pb_grpc.QoSBrokerStub, qos: pb.ModeQoS, field: str) -> None:
    e = await error(stub.Subscribe(pb.SubscribeRequest(subscription=pb.Subscription(
        subscriber="s", variable="p/v", edge_router="e", qos=[qos]))))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and reason(e)[1] == field


async def test_malformed_variable_name(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.Subscribe(pb.SubscribeRequest(subscription=pb.Subscription(
        subscriber="s", variable="no-slash", edge_router="e", qos=[pb.ModeQoS(interval_ms=10, latency_ms=5)]))))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and reason(e)[1] == "variable"


async def test_unknown_variable_is_a_rejection_not_an_error(stub: pb_grpc.QoSBrokerStub) -> None:
    r = await stub.Subscribe(pb.SubscribeRequest(subscription=pb.Subscription(
        subscriber="s", variable="p/v", edge_router="e", qos=[pb.ModeQoS(interval_ms=10, latency_ms=5)])))
    assert not r.admitted and r.rejection.reason == "UnknownVariable"


async def test_router_registration_needs_addresses_and_a_role(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.AddRouter(pb.AddRouterRequest(router=pb.RouterInfo(name="r1", role="edge", router_id=1))))
    assert reason(e) == ("InvalidArgument", "router.event_address")
    e = await error(stub.AddRouter(pb.AddRouterRequest(router=pb.RouterInfo(
        name="r1", role="core", router_id=1, event_address="127.0.0.1:1", control_address="127.0.0.1:2"))))
    assert reason(e) == ("InvalidArgument", "router.role")
    e = await error(stub.AddRouter(pb.AddRouterRequest(router=pb.RouterInfo(
        name="sub:x", role="edge", router_id=1, event_address="127.0.0.1:1", control_address="127.0.0.1:2"))))
    assert reason(e) == ("InvalidArgument", "router.name")


async def test_channels_between_unknown_routers_and_bad_numbers(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.AddChannel(pb.AddTopologyChannelRequest(channel=pb.TopologyChannel(
        a="x", b="y", bandwidth_bps=1000, latency_ms=1))))
    assert e.code() == grpc.StatusCode.NOT_FOUND and reason(e)[1] == "channel.a"


async def test_clients_need_a_kind_and_an_edge_router(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.RegisterClient(pb.RegisterClientRequest(name="c", edge_router="e")))
    assert reason(e) == ("InvalidArgument", "kind")
    e = await error(stub.RegisterClient(pb.RegisterClientRequest(name="c", kind=pb.CLIENT_KIND_PUBLISHER,
                                                                 edge_router="nowhere")))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and reason(e) == ("Unauthorized", "edge_router")


async def test_publication_needs_a_registered_publisher_and_a_type(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.RegisterPublication(pb.RegisterPublicationRequest(publication=pb.Publication(
        publisher="p", variable="v", interval_ms=10))))
    assert reason(e) == ("InvalidArgument", "publication.type.kind")
    e = await error(stub.RegisterPublication(pb.RegisterPublicationRequest(publication=pb.Publication(
        publisher="p", variable="v", interval_ms=10, type=pb.ValueType(kind=pb.VALUE_KIND_INT)))))
    assert reason(e) == ("Unauthorized", "publisher")


async def test_unsubscribe_unknown(stub: pb_grpc.QoSBrokerStub) -> None:
    e = await error(stub.Unsubscribe(pb.UnsubscribeRequest(subscription_id="nope")))
    assert e.code() == grpc.StatusCode.NOT_FOUND and reason(e) == ("NotFound", "subscription_id")
    health = await stub.Health(pb.BrokerHealthRequest())
    assert health.subscriptions == 0
