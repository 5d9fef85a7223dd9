"""EdgeSession: TypeSpec <-> proto, rejections with offers, error mapping, and the SDK's connect helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from gridstat.client import (
    EdgeSession,
    ModeQoS,
    Offer,
    Publisher,
    Subscriber,
    SubscriptionRejected,
)
from gridstat.client.session import error_from_rpc, parse_address, result_from_pb, type_from_pb, type_to_pb
from gridstat.core import rpc
from gridstat.core.model import BOOL, FLOAT, INT, StructType, TypeSpec, ValueType
from gridstat.errors import ChannelUnavailable, GridStatError, NotFound, UnknownVariable, ValidationError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import edge_pb2_grpc as epb_grpc

PHASOR = TypeSpec(ValueType.STRUCT, StructType("phasor", (("mag", "float64"), ("angle", "float32"))))


# -- conversions --------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [INT, FLOAT, BOOL, PHASOR])
def test_type_round_trips(t: TypeSpec) -> None:
    assert type_from_pb(type_to_pb(t)) == t


def test_struct_type_to_pb() -> None:
    m = type_to_pb(PHASOR)
    assert m.kind == bpb.VALUE_KIND_STRUCT and m.struct_name == "phasor"
    assert [(f.name, f.type) for f in m.fields] == [("mag", "float64"), ("angle", "float32")]
    assert type_to_pb(FLOAT).kind == bpb.VALUE_KIND_FLOAT and not type_to_pb(FLOAT).fields


def test_unspecified_or_bad_struct_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        type_from_pb(bpb.ValueType())
    with pytest.raises(ValidationError):
        type_from_pb(bpb.ValueType(kind=bpb.VALUE_KIND_STRUCT, struct_name="s",
                                   fields=[bpb.StructField(name="x", type="complex")]))


def test_admitted_reply_to_result() -> None:
    reply = bpb.SubscribeReply(
        admitted=True, variable_id=9, pub_interval_ms=10,
        subscription=bpb.Subscription(subscription_id="s1", subscriber="sub1", variable="pmu1/freq",
                                      qos=[bpb.ModeQoS(mode=0, interval_ms=20, latency_ms=50, redundancy=2,
                                                       priority=1)], edge_router="e2", cloud="c1"),
        allocations=[bpb.Allocation(mode=0, paths=[
            bpb.Path(routers=["e1", "r1", "e2"], latency_ms=3.5, redundant_index=0),
            bpb.Path(routers=["e1", "r2", "e2"], latency_ms=4.0, redundant_index=1)])])
    r = result_from_pb(reply)
    assert r.admitted and r.subscription_id == "s1" and r.variable_id == 9 and r.pub_interval_ms == 10
    assert r.qos == (ModeQoS(0, 20, 50, 2, 1),)
    assert [p.routers for p in r.paths[0]] == [("e1", "r1", "e2"), ("e1", "r2", "e2")]
    assert r.paths[0][1].latency_ms == 4.0 and r.edge_router == "e2" and r.cloud == "c1"


def test_refused_reply_raises_with_reason_and_offer() -> None:
    reply = bpb.SubscribeReply(admitted=False, subscription=bpb.Subscription(variable="pmu1/freq"),
                               rejection=bpb.Rejection(reason="LatencyUnattainable", message="best is 12.5 ms",
                                                       field="qos.latency_ms",
                                                       offer=bpb.Offer(best_latency_ms=12.5, max_redundancy=1)))
    with pytest.raises(SubscriptionRejected) as info:
        result_from_pb(reply)
    e = info.value
    assert isinstance(e, GridStatError) and not e.retriable
    assert e.reason == "LatencyUnattainable" and e.field == "qos.latency_ms"
    assert e.offer == Offer(best_latency_ms=12.5, max_redundancy=1, min_interval_ms=None)
    assert "best is 12.5 ms" in str(e)


def test_refusal_without_offer_has_an_empty_offer() -> None:
    with pytest.raises(SubscriptionRejected) as info:
        result_from_pb(bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(reason="CapacityExceeded")))
    assert info.value.reason == "CapacityExceeded" and info.value.offer == Offer()


def _rpc_error(code: grpc.StatusCode, details: str, reason: str = "", fld: str = "") -> grpc.aio.AioRpcError:
    md = grpc.aio.Metadata(("gridstat-reason", reason), ("gridstat-field", fld)) if reason else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), md, details)


def test_error_mapping() -> None:
    e = error_from_rpc(_rpc_error(grpc.StatusCode.UNAVAILABLE, "BrokerUnavailable: down", "BrokerUnavailable"))
    assert isinstance(e, ChannelUnavailable) and e.retriable and e.reason == "BrokerUnavailable"
    assert str(e) == "BrokerUnavailable: down"
    e = error_from_rpc(_rpc_error(grpc.StatusCode.UNAVAILABLE, "connect failed"))
    assert e.retriable and e.reason == "Unavailable"
    e = error_from_rpc(_rpc_error(grpc.StatusCode.NOT_FOUND, "UnknownVariable: x", "UnknownVariable", "variable"))
    assert isinstance(e, UnknownVariable) and e.field == "variable" and not e.retriable
    e = error_from_rpc(_rpc_error(grpc.StatusCode.NOT_FOUND, "no s9", "NotFound"))
    assert isinstance(e, NotFound)
    e = error_from_rpc(_rpc_error(grpc.StatusCode.INTERNAL, "boom"))
    assert e.reason == "Internal" and not e.retriable
    e = error_from_rpc(_rpc_error(grpc.StatusCode.PERMISSION_DENIED, "who are you"))
    assert e.reason == "Unauthorized"


def test_subscribe_errors_with_admission_reasons_are_rejections() -> None:
    exc = _rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "NoFeasiblePath: none", "NoFeasiblePath")
    e = error_from_rpc(exc, subscribing=True)
    assert isinstance(e, SubscriptionRejected) and e.reason == "NoFeasiblePath" and e.offer == Offer()
    e = error_from_rpc(_rpc_error(grpc.StatusCode.NOT_FOUND, "x", "UnknownVariable"), subscribing=True)
    assert isinstance(e, SubscriptionRejected) and e.reason == "UnknownVariable"
    e = error_from_rpc(_rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "x", "InvalidArgument"), subscribing=True)
    assert isinstance(e, ValidationError)


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:5000") == ("127.0.0.1", 5000)
    assert parse_address("[::1]:5000") == ("::1", 5000)
    for bad in ("nohost", ":5", "h:0", "h:x"):
        with pytest.raises(ValidationError):
            parse_address(bad)


# -- against a fake EdgeProxy ---------------------------------------------------------------------------
@dataclass
class FakeEdge(epb_grpc.EdgeProxyServicer):  # type: ignore[misc]
    seen: list[Any] = field(default_factory=list)
    unavailable: int = 0
    #: Answer UNAVAILABLE as an edge proxy relaying its broker's refusal does: with a reason and the
    #: pushback that stops the client's retries (core.rpc.NO_RETRY).
    answered: bool = False

    async def RegisterClient(self, request: bpb.RegisterClientRequest, context: Any) -> bpb.RegisterClientReply:
        self.seen.append(request)
        if self.unavailable > 0:
            self.unavailable -= 1
            if self.answered:
                context.set_trailing_metadata((("gridstat-reason", "BrokerUnavailable"), rpc.NO_RETRY))
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not yet")
        cid = 11 if request.kind == bpb.CLIENT_KIND_PUBLISHER else 21
        return bpb.RegisterClientReply(client_id=cid, event_host="127.0.0.1", event_port=4999)

    async def RegisterPublication(self, request: bpb.RegisterPublicationRequest,
                                  context: Any) -> bpb.RegisterPublicationReply:
        self.seen.append(request)
        pub = bpb.Publication()
        pub.CopyFrom(request.publication)
        pub.variable_id = 77
        return bpb.RegisterPublicationReply(publication=pub)

    async def Subscribe(self, request: bpb.SubscribeRequest, context: Any) -> bpb.SubscribeReply:
        self.seen.append(request)
        sub = bpb.Subscription()
        sub.CopyFrom(request.subscription)
        if sub.variable == "pmu1/far":
            return bpb.SubscribeReply(admitted=False, subscription=sub, rejection=bpb.Rejection(
                reason="NoFeasiblePath", message="one disjoint path only", offer=bpb.Offer(max_redundancy=1)))
        sub.subscription_id = "s-1"
        return bpb.SubscribeReply(admitted=True, subscription=sub, variable_id=77, pub_interval_ms=10,
                                  allocations=[bpb.Allocation(mode=0, paths=[bpb.Path(routers=["e1"])])])

    async def Unsubscribe(self, request: bpb.UnsubscribeRequest, context: Any) -> bpb.UnsubscribeReply:
        self.seen.append(request)
        if request.subscription_id != "s-1":
            context.set_trailing_metadata((("gridstat-reason", "NotFound"), ("gridstat-field", "subscription_id")))
            await context.abort(grpc.StatusCode.NOT_FOUND, f"NotFound: {request.subscription_id}")
        return bpb.UnsubscribeReply(routes_removed=2)

    async def ListSubscriptions(self, request: bpb.ListSubscriptionsRequest,
                                context: Any) -> bpb.ListSubscriptionsReply:
        return bpb.ListSubscriptionsReply(subscriptions=[bpb.SubscribeReply(
            admitted=True, subscription=bpb.Subscription(subscription_id="s-1", subscriber=request.subscriber),
            variable_id=77, pub_interval_ms=10)])


@pytest.fixture
async def edge() -> AsyncIterator[tuple[FakeEdge, str]]:
    fake = FakeEdge()
    server = grpc.aio.server()
    epb_grpc.add_EdgeProxyServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_session_calls(edge: tuple[FakeEdge, str]) -> None:
    fake, address = edge
    async with EdgeSession(address, backoff_base_s=0.01) as s:
        fake.unavailable = 1  # a transport-level UNAVAILABLE is retried
        cid, event = await s.register_publisher("pmu1", first_time=False)
        assert (cid, event) == (11, ("127.0.0.1", 4999))
        assert not fake.seen[-1].first_time and fake.seen[-1].kind == bpb.CLIENT_KIND_PUBLISHER
        assert await s.register_subscriber("sub1", ("127.0.0.1", 6000)) == 21
        assert (fake.seen[-1].host, fake.seen[-1].port, fake.seen[-1].first_time) == ("127.0.0.1", 6000, True)
        var = await s.register_publication("pmu1", "ph", PHASOR, 10, priority=2)
        assert var.variable_id == 77 and var.type == PHASOR and var.priority == 2 and var.full_name == "pmu1/ph"
        r = await s.subscribe("sub1", "pmu1/ph", PHASOR, [(0, 20, 50, 1, 2)])
        assert r.subscription_id == "s-1" and r.variable_id == 77 and r.paths[0][0].routers == ("e1",)
        assert fake.seen[-1].subscription.qos[0].priority == 2
        assert fake.seen[-1].subscription.type.struct_name == "phasor"
        with pytest.raises(SubscriptionRejected) as info:
            await s.subscribe("sub1", "pmu1/far", FLOAT, [ModeQoS(0, 20, 50, redundancy=2)])
        assert info.value.reason == "NoFeasiblePath" and info.value.offer.max_redundancy == 1
        assert [x.subscription_id for x in await s.list_subscriptions("sub1")] == ["s-1"]
        assert await s.unsubscribe("s-1") == 2
        with pytest.raises(NotFound) as nf:
            await s.unsubscribe("s-9")
        assert nf.value.field == "subscription_id" and str(nf.value) == "NotFound: s-9"


async def test_an_edge_routers_own_answer_is_not_retried_but_raised(edge: tuple[FakeEdge, str]) -> None:
    fake, address = edge
    fake.unavailable, fake.answered = 3, True
    async with EdgeSession(address, attempts=3, backoff_base_s=0.01) as s:
        with pytest.raises(GridStatError) as info:
            await s.register_publisher("pmu1")
    assert info.value.retriable and info.value.reason == "BrokerUnavailable"
    assert len(fake.seen) == 1  # once: the answer said not to retry it


async def test_unreachable_edge_is_retriable() -> None:
    async with EdgeSession("127.0.0.1:1", attempts=2, backoff_base_s=0.01, timeout_s=2) as s:
        with pytest.raises(GridStatError) as info:
            await s.register_publisher("pmu1")
    assert info.value.retriable


async def test_publisher_and_subscriber_connect(edge: tuple[FakeEdge, str]) -> None:
    fake, address = edge
    pub = await Publisher.connect("pmu1", address)
    try:
        assert pub.publisher_id == 11 and pub.edge == ("127.0.0.1", 4999)
        handle = await pub.register("freq", FLOAT, 10)
        assert handle.variable.variable_id == 77 and handle.variable.full_name == "pmu1/freq"
    finally:
        await pub.stop()
    sub = await Subscriber.connect("sub1", address)
    try:
        assert sub.subscriber_id == 21
        assert fake.seen[-1].port == sub.address[1]
        s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=20, latency_ms=50)
        assert s.variable.variable_id == 77 and s.pub_interval_ms == 10 and s.interval_ms == 20
        assert sub.subscriptions() == [s]
        with pytest.raises(SubscriptionRejected):
            await sub.subscribe_remote("pmu1/far", FLOAT, interval_ms=20, latency_ms=50)
        await sub.unsubscribe_remote(s)
        assert sub.subscriptions() == []
    finally:
        await sub.stop()


async def test_register_needs_a_session() -> None:
    async with Publisher("pmu1", 1, ("127.0.0.1", 9)) as pub:
        with pytest.raises(ValidationError):
            await pub.register("freq", FLOAT, 10)
