"""Every gRPC handler of every role with generated messages (hypothesis over the proto descriptors): a
handler answers with its reply message or ends the call with a gRPC status naming the problem, never
with an unhandled exception, UNKNOWN or INTERNAL, and never hangs; the role keeps serving.

The table ``ROWS`` names, for each RPC of each service in ``protos/gridstat/v1`` (read from the generated
descriptors), the role that serves it; the first two tests fail when an RPC has no row or a servicer
has a handler without one. Handlers are called in process with a stand-in context, each role with the
real state its handlers act on (docs/management-plane.md): a leaf broker over two real routers with
clients, a subscription, a second mode and a condensation function; a parent over two such leaves
joined by an inter-cloud channel; an edge proxy in front of a leaf. Generated names are drawn partly
from that state, so that calls get past "not found" to the checks behind it. Address fields are only
loopback literals (servers of the rig, a closed port) or malformed: no generated host name may reach
a resolver or a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import pkgutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as d
from google.protobuf import message_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gridstat.v1
from gridstat.admission.admitting import AdmissionController
from gridstat.admission.service import AdmissionServicer
from gridstat.broker.leaf import LeafBroker
from gridstat.broker.parent_service import ParentBroker, ParentSegmentsServicer, ParentServicer
from gridstat.broker.parent_store import ParentStore
from gridstat.broker.service import QoSBrokerServicer, SegmentsServicer
from gridstat.broker.state import ModeQoS, RouterEndpoint
from gridstat.broker.store import BrokerStore
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT
from gridstat.history.service import HistoryServicer
from gridstat.router.channels import ChannelKind
from gridstat.router.control import RouterControlServicer, serve
from gridstat.router.process import Role, RouteInstall, RouterConfig, StatusRouter
from gridstat.router.proxy import EdgeProxyServicer
from gridstat.router.tables import Route
from gridstat.telemetry.archive_reading import ArchivedBatch, ArchiveParams, ArchiveReader, ReadStats
from gridstat.v1 import (
    admission_pb2,
    admission_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    edge_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    router_pb2,
    router_pb2_grpc,
)
from gridstat.v1 import condensation_pb2 as cpb

#: Generated requests per handler; fewer where a request may make the role dial a peer (each such
#: call can wait for a connection to be refused).
EXAMPLES = 60
DIALING = 15
#: Longest a handler may take to answer one request (a refused dial included); longer is a hang.
CALL_TIMEOUT_S = 20.0
#: A server-streaming handler is read this long after its last message (a watch waits by design).
STREAM_IDLE_S = 0.2


# -- generated messages ------------------------------------------------------------------------------
_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    d.FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
    d.FieldDescriptor.TYPE_SINT32: st.integers(-(2**31), 2**31 - 1),
    d.FieldDescriptor.TYPE_SFIXED32: st.integers(-(2**31), 2**31 - 1),
    d.FieldDescriptor.TYPE_UINT32: st.one_of(st.integers(0, 70_000), st.integers(0, 2**32 - 1)),
    d.FieldDescriptor.TYPE_FIXED32: st.integers(0, 2**32 - 1),
    d.FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    d.FieldDescriptor.TYPE_SINT64: st.integers(-(2**63), 2**63 - 1),
    d.FieldDescriptor.TYPE_SFIXED64: st.integers(-(2**63), 2**63 - 1),
    d.FieldDescriptor.TYPE_UINT64: st.integers(0, 2**64 - 1),
    d.FieldDescriptor.TYPE_FIXED64: st.integers(0, 2**64 - 1),
    d.FieldDescriptor.TYPE_BOOL: st.booleans(),
    d.FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
    d.FieldDescriptor.TYPE_FLOAT: st.floats(width=32, allow_nan=True, allow_infinity=True),
    d.FieldDescriptor.TYPE_STRING: st.one_of(st.sampled_from(["", "e1", "pmu1/freq", "a/b/c", "x" * 300]),
                                             st.text(max_size=12)),
    d.FieldDescriptor.TYPE_BYTES: st.binary(max_size=48),
}
#: Plausible durations and rates for fields named ``*_ms``, ``*_bps``, ``*_eps`` besides any number.
_PLAUSIBLE = st.sampled_from([0, 1, 10, 20, 40, 50, 100, 1000, 100_000_000])
#: Fields holding where a role connects or sends to: never free text (module docstring).
ADDRESS_FIELDS = frozenset({"host", "control_address", "event_address", "router_b_event_address", "address"})
BAD_ADDRESSES = ("", "127.0.0.1:1", "[::1]:1", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", ":40000",
                 "127.0.0.1:70000")
SAFE_HOSTS = ("", "127.0.0.1", "::1")

Hints = dict[str, tuple[Any, ...]]
_UNSET = object()
#: A name or number the role does not know yet, beside the ones it does.
_NEW: dict[type[Any], st.SearchStrategy[Any]] = {str: st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True),
                                                 int: st.integers(0, 8)}


def _pytype(f: d.FieldDescriptor) -> type[Any]:
    """The Python type of one value of a scalar field (of one element, for a repeated one)."""
    if f.type == d.FieldDescriptor.TYPE_BYTES:
        return bytes
    return {d.FieldDescriptor.CPPTYPE_STRING: str, d.FieldDescriptor.CPPTYPE_BOOL: bool,
            d.FieldDescriptor.CPPTYPE_DOUBLE: float, d.FieldDescriptor.CPPTYPE_FLOAT: float}.get(f.cpp_type, int)


def _field(f: d.FieldDescriptor, hints: Hints, depth: int, plausible: bool) -> st.SearchStrategy[Any]:
    """Any value of the field's type; ``plausible``: only values the role may take (its names, valid enum
    values, small numbers), so that a request gets past the first check more often."""
    if f.type == d.FieldDescriptor.TYPE_MESSAGE:
        return _messages(f.message_type, hints, depth + 1, plausible)
    if f.name in ADDRESS_FIELDS:
        real = hints.get(f.name, ())
        return st.sampled_from(SAFE_HOSTS if f.name == "host" else real if plausible and real else
                               (*real, *BAD_ADDRESSES))
    kind = _pytype(f)
    known = [v for v in hints.get(f.name, ()) if type(v) is kind]
    if f.type == d.FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in f.enum_type.values]
        if plausible:
            return st.sampled_from([v for v in values if v] or values)
        return st.one_of(st.sampled_from(values), st.integers(-5, 99))
    numeric = f.type not in (d.FieldDescriptor.TYPE_STRING, d.FieldDescriptor.TYPE_BYTES, d.FieldDescriptor.TYPE_BOOL)
    timing = numeric and f.name.endswith(("_ms", "_bps", "_eps"))
    if plausible:
        if known:  # or a new one
            return st.one_of(st.sampled_from(known), _NEW[kind]) if kind in _NEW else st.sampled_from(known)
        if timing:
            return _PLAUSIBLE.map(kind)
        if numeric:
            return st.integers(0, 8).map(kind)
        return _SCALARS[f.type]
    s = _SCALARS[f.type]
    if timing:
        s = st.one_of(_PLAUSIBLE.map(kind), s)
    if known:
        s = st.one_of(st.sampled_from(known), s)
    return s


def _map(f: d.FieldDescriptor, hints: Hints, depth: int, plausible: bool) -> st.SearchStrategy[Any]:
    key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
    return st.dictionaries(_field(key, hints, depth, plausible), _field(value, hints, depth, plausible), max_size=3)


def _messages(desc: d.Descriptor, hints: Hints, depth: int, plausible: bool) -> st.SearchStrategy[Any]:
    cls = message_factory.GetMessageClass(desc)
    if depth > 3:
        return st.just(cls())
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            s = _map(f, hints, depth, plausible)
        else:
            s = _field(f, hints, depth, plausible)
            if f.is_repeated:
                s = st.lists(s, min_size=int(plausible), max_size=3)
        # Plausible: a field is set three times in four; otherwise any subset of the fields is.
        fields[f.name] = st.integers(0, 3).flatmap(lambda i, s=s: s if i else st.just(_UNSET)) if plausible else s

    def build(values: dict[str, Any]) -> Any:
        m = cls()
        for name, v in values.items():
            if v is _UNSET:
                continue
            f = desc.fields_by_name[name]
            target = getattr(m, name)
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                if f.message_type.fields_by_name["value"].message_type is None:
                    target.update(v)
                else:
                    for k, item in v.items():
                        target[k].CopyFrom(item)
            elif f.is_repeated:
                target.extend(v)
            elif f.type == d.FieldDescriptor.TYPE_MESSAGE:
                target.CopyFrom(v)
            else:
                setattr(m, name, v)
        return m

    if plausible:
        return st.fixed_dictionaries(fields).map(build)
    return st.fixed_dictionaries({}, optional=fields).map(build)


def messages(desc: d.Descriptor, hints: Hints | None = None) -> st.SearchStrategy[Any]:
    """Messages of ``desc``: half with any subset of their fields set to any value (repeated fields and
    maps: up to 3 entries), half plausible (``_field``); a field named in ``hints`` takes those values too."""
    return st.one_of(_messages(desc, hints or {}, 0, True), _messages(desc, hints or {}, 0, False))


# -- the call ------------------------------------------------------------------------------------------
class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


@dataclass
class Context:
    """The parts of grpc.aio.ServicerContext the handlers use (a plaintext call from 127.0.0.1)."""

    trailing: tuple[tuple[str, str], ...] = ()

    def set_trailing_metadata(self, md: Any) -> None:
        self.trailing = tuple(md)

    def invocation_metadata(self) -> tuple[Any, ...]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def time_remaining(self) -> float | None:
        return None

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        raise Aborted(code, details)

    def set_code(self, code: Any) -> None:
        pass

    def set_details(self, details: str) -> None:
        pass

    def done(self) -> bool:
        return False


#: Refusals of the request itself: they say which field (``gridstat-field``, docs/management-plane.md).
NAMES_A_FIELD = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED,
                           grpc.StatusCode.OUT_OF_RANGE})


def _refused(method: str, exc: Aborted, ctx: Context) -> None:
    """A refusal must be a status the caller can act on, saying what is wrong."""
    assert exc.code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), f"{method}: {exc}"
    assert exc.details.strip(), f"{method}: {exc.code.name} without details"
    if exc.code in NAMES_A_FIELD:
        md = dict(ctx.trailing)
        assert md.get("gridstat-field"), f"{method}: {exc} names no field (trailing metadata {md})"


async def _call(handler: Callable[..., Any], method: str, request: Any, reply_type: type[Any]) -> None:
    ctx = Context()
    try:
        reply = await asyncio.wait_for(handler(request, ctx), CALL_TIMEOUT_S)
    except Aborted as exc:
        _refused(method, exc, ctx)
        return
    except TimeoutError:
        raise AssertionError(f"{method} did not answer within {CALL_TIMEOUT_S} s: {request!r}") from None
    assert isinstance(reply, reply_type), f"{method} answered {reply!r} for {request!r}"


async def _stream(handler: Callable[..., Any], method: str, request: Any, reply_type: type[Any]) -> None:
    """Read a server stream until it ends or stays idle STREAM_IDLE_S, then close it."""
    ctx = Context()
    stream = handler(request, ctx)
    try:
        for _ in range(100):
            try:
                item = await asyncio.wait_for(anext(stream), STREAM_IDLE_S)
            except (StopAsyncIteration, TimeoutError):
                return
            assert isinstance(item, reply_type), f"{method} streamed {item!r} for {request!r}"
    except Aborted as exc:
        _refused(method, exc, ctx)
    finally:
        await asyncio.wait_for(stream.aclose(), CALL_TIMEOUT_S)


@contextlib.contextmanager
def event_loop(unhandled: list[dict[str, Any]]) -> Iterator[asyncio.AbstractEventLoop]:
    """A new loop that records what would reach its exception handler (a task a handler started and
    nobody awaited that failed, ...) in ``unhandled``."""
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        yield loop
    finally:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


# -- the roles, with real state --------------------------------------------------------------------------
FLOAT_PB = broker_pb2.ValueType(kind=broker_pb2.VALUE_KIND_FLOAT)


@dataclass
class Rig:
    """Servicers by service name over real roles, the names their state holds, and a liveness check."""

    servicers: dict[str, Any]
    hints: Hints
    alive: Callable[[], Awaitable[Any]]
    #: What must hold again after the run (listeners released ...): name -> value now.
    invariants: dict[str, Callable[[], Any]] = field(default_factory=dict)


async def _router(stack: contextlib.AsyncExitStack, name: str, router_id: int,
                  role: Role) -> tuple[StatusRouter, str]:
    """A started router and the address of its RouterControl service."""
    r = StatusRouter(RouterConfig(name=name, router_id=router_id, role=role))
    await r.start()
    stack.push_async_callback(r.stop)
    server, port = await serve(r, "127.0.0.1", 0)
    stack.push_async_callback(server.stop, None)
    return r, f"127.0.0.1:{port}"


async def _grpc(stack: contextlib.AsyncExitStack, add: Callable[[grpc.aio.Server], None]) -> str:
    server = grpc.aio.server()
    add(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stack.push_async_callback(server.stop, None)
    return f"127.0.0.1:{port}"


@dataclass
class Cloud:
    broker: LeafBroker
    address: str
    routers: dict[str, tuple[StatusRouter, str]]


async def _leaf(stack: contextlib.AsyncExitStack, name: str, edge: str, border: str, ids: tuple[int, int],
                publisher: str, subscriber: str) -> Cloud:
    """A leaf broker served on 127.0.0.1 over a real edge and border router joined both ways, a publisher
    of ``<publisher>/freq`` and ``/volt`` and a subscriber at the edge, and mode 1 defined."""
    broker = LeafBroker(name, BrokerStore(":memory:"), supervise_interval_s=3600, variable_id_base=ids[0] * 1000)
    await broker.start()
    stack.push_async_callback(broker.stop)
    routers = {}
    for rname, rid, role in ((edge, ids[0], Role.EDGE), (border, ids[1], Role.BORDER)):
        r, control = routers[rname] = await _router(stack, rname, rid, role)
        await broker.add_router(RouterEndpoint(rname, rid, control, "127.0.0.1", r.address[1]),
                                RouterRole(role.value), 50_000)
    await broker.add_channel(edge, border, bandwidth_bps=100e6, latency_ms=1, capacity_eps=None, both=True)
    await broker.register_client(publisher, "publisher", edge)
    await broker.register_client(subscriber, "subscriber", edge, "127.0.0.1", 9)
    for var in ("freq", "volt"):
        await broker.register_publication(publisher, var, FLOAT, interval_ms=20, priority=1, edge_router=edge)
    broker.modes.define(1, "contingency")
    assert not broker.state.down, f"{name}: routers not up: {broker.state.down}"

    def add(server: grpc.aio.Server) -> None:
        broker_pb2_grpc.add_QoSBrokerServicer_to_server(QoSBrokerServicer(broker), server)  # type: ignore[no-untyped-call]
        broker_pb2_grpc.add_SegmentsServicer_to_server(SegmentsServicer(broker), server)  # type: ignore[no-untyped-call]

    return Cloud(broker, await _grpc(stack, add), routers)


def _leaf_hints(c: Cloud) -> Hints:
    st_ = c.broker.state
    routers = tuple(st_.endpoints)
    return {
        "variable": tuple(v.full_name for v in st_.registry) + tuple(v.name for v in st_.registry),
        "variable_id": tuple(v.variable_id for v in st_.registry),
        "subscription_id": tuple(st_.subscriptions),
        "function_id": tuple(c.broker.condensation.functions),
        **{k: tuple(sorted({n for _, n in st_.clients} | {"ops"})) for k in ("publisher", "subscriber", "creator")},
        "name": (*sorted({n for _, n in st_.clients}), *routers, *c.broker.modes.names.values()),
        **{k: routers for k in ("edge_router", "router", "a", "b", "from_router", "to_router", "placement_router",
                                "router_a", "router_b")},
        "next_channel": (*routers, *(f"sub:{n}" for k, n in st_.clients if k == "subscriber")),
        "mode": (0, 1, 2, 15, 16),
        "modes": (0, 1, 2, 16),
        "cloud": (c.broker.name,),
        "cloud_a": (c.broker.name,),
        "control_address": tuple(a for _, a in c.routers.values()),
        "event_address": tuple(f"127.0.0.1:{r.address[1]}" for r, _ in c.routers.values()),
        "router_b_event_address": ("127.0.0.1:40000",),
        "calculator": ("average", "min", "max", "threshold_alert", "nope"),
        "key": ("high", "low"),
    }


async def _populate(c: Cloud, subscriber: str, variable: str) -> None:
    """A subscription in modes 0 and 1 and a condensation function over the publisher's variables."""
    edge = c.broker.state.client("subscriber", subscriber).edge_router
    await c.broker.subscribe(subscriber, variable, None, [ModeQoS(0, 20, 50.0), ModeQoS(1, 40, 50.0)],
                             edge_router=edge)
    publisher = variable.split("/")[0]
    await c.broker.condensation.create(broker_pb2.CreateCondensationRequest(
        creator="ops", function_id="cf1",
        output=broker_pb2.Publication(publisher="cf", variable="avg", type=FLOAT_PB, interval_ms=100),
        inputs=[broker_pb2.CondensationInputRequest(variable=f"{publisher}/{v}", latency_ms=50)
                for v in ("freq", "volt")],
        spec=cpb.CondensationSpec(calculator="average",
                                  trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_TIME, interval_ms=100))))


@contextlib.asynccontextmanager
async def router_rig() -> AsyncIterator[Rig]:
    """An edge router with a neighbour, a subscriber and a publisher channel, a route, a prepared
    transaction, a mode being prepared and a condensation function in a slot."""
    async with contextlib.AsyncExitStack() as stack:
        r, _ = await _router(stack, "fz", 1, Role.EDGE)
        r.add_channel("to-r2", peer_id=2, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9))
        r.add_channel("sub", peer_id=1_000_001, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9))
        r.add_channel("pub", peer_id=1_000_002, kind=ChannelKind.PUBLISHER)
        r.install_routes([RouteInstall(Route("r1", 5, 0, "sub", 20, 1), 20)])
        r.prepare_routes("tx1", [RouteInstall(Route("r2", 6, 0, "to-r2", 40, 1), 20)], [], ttl_ms=600_000)
        r.prepare_mode(1)
        servicer = RouterControlServicer(r)
        await servicer.SetupCondensation(cpb.CondensationSetup(
            function_id="cf1", creator="ops", output_variable_id=7, output_pub_interval_ms=100,
            output_sender_id=1_000_002,
            inputs=[cpb.CondensationInput(variable_id=5, variable="pmu1/freq", value_type="float", pub_interval_ms=20)],
            spec=cpb.CondensationSpec(calculator="average",
                                      trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_TIME, interval_ms=100))), Context())
        listeners = len(r.link_listeners)
        hints: Hints = {"name": ("to-r2", "sub", "pub"), "channel": ("to-r2", "sub", "pub"),
                        "route_id": ("r1", "r2"), "variable_id": (5, 6), "transaction_id": ("tx1",),
                        "mode": (0, 1, 15, 16), "modes": (0, 1, 16), "function_id": ("cf1",),
                        "calculator": ("average", "threshold_alert", "nope"), "value_type": ("float", "int", "bool")}
        yield Rig({"RouterControl": servicer}, hints,
                  lambda: servicer.Health(router_pb2.HealthRequest(), Context()),
                  {"watch listeners": lambda: len(r.link_listeners) - listeners})


@contextlib.asynccontextmanager
async def leaf_rig() -> AsyncIterator[Rig]:
    async with contextlib.AsyncExitStack() as stack:
        c = await _leaf(stack, "A", "e1", "b1", (1, 2), "pmu1", "ems")
        await _populate(c, "ems", "pmu1/freq")
        servicer = QoSBrokerServicer(c.broker)
        yield Rig({"QoSBroker": servicer, "Segments": SegmentsServicer(c.broker)}, _leaf_hints(c),
                  lambda: servicer.Health(broker_pb2.BrokerHealthRequest(), Context()))


@contextlib.asynccontextmanager
async def edge_rig() -> AsyncIterator[Rig]:
    """The EdgeProxy of edge router e1 relaying to its leaf broker over 127.0.0.1."""
    async with contextlib.AsyncExitStack() as stack:
        c = await _leaf(stack, "A", "e1", "b1", (1, 2), "pmu1", "ems")
        await _populate(c, "ems", "pmu1/freq")
        proxy = EdgeProxyServicer("e1", c.address, deadline_s=CALL_TIMEOUT_S / 2)
        stack.push_async_callback(proxy.close)
        yield Rig({"EdgeProxy": proxy}, _leaf_hints(c),
                  lambda: proxy.ListSubscriptions(broker_pb2.ListSubscriptionsRequest(), Context()))


@contextlib.asynccontextmanager
async def parent_rig() -> AsyncIterator[Rig]:
    """A parent over leaves A and B (each an edge and a border router), the channel b1-b2 between them,
    mode 1 defined throughout and an inter-cloud subscription of B's subscriber to A's publisher."""
    async with contextlib.AsyncExitStack() as stack:
        a = await _leaf(stack, "A", "e1", "b1", (1, 2), "pmu1", "ems")
        b = await _leaf(stack, "B", "e2", "b2", (3, 4), "pmu2", "ems2")
        await _populate(a, "ems", "pmu1/freq")
        parent = ParentBroker("P", ParentStore(":memory:"))
        stack.push_async_callback(parent.stop)
        for c in (a, b):
            await parent.add_child(broker_pb2.ChildBroker(name=c.broker.name, address=c.address))
        await parent.add_channel(broker_pb2.InterCloudChannel(cloud_a="A", router_a="b1", cloud_b="B", router_b="b2",
                                                              bandwidth_bps=100_000_000, latency_ms=2))
        await parent.modes.define(1, "contingency")
        reply = await parent.subscribe(broker_pb2.Subscription(
            subscription_id="ic1", subscriber="ems2", variable="pmu1/freq", cloud="B", edge_router="e2",
            qos=[broker_pb2.ModeQoS(mode=0, interval_ms=20, latency_ms=100)]))
        assert reply.admitted, reply
        servicer = ParentServicer(parent)
        ha, hb = _leaf_hints(a), _leaf_hints(b)
        hints = {k: tuple(dict.fromkeys(ha.get(k, ()) + hb.get(k, ()))) for k in {*ha, *hb}}
        hints |= {"subscription_id": (*hints["subscription_id"], "ic1"), "cloud": ("A", "B", "A>B", "B>A"),
                  "cloud_a": ("A", "B"), "cloud_b": ("A", "B"), "address": (a.address, b.address),
                  "name": (*hints["name"], "A", "B")}
        yield Rig({"QoSBroker": servicer, "Segments": ParentSegmentsServicer(parent)}, hints,
                  lambda: servicer.Health(broker_pb2.BrokerHealthRequest(), Context()))


@contextlib.asynccontextmanager
async def admission_rig() -> AsyncIterator[Rig]:
    """An admission controller with an advertised rate, declared resources and one admitted request."""
    servicer = AdmissionServicer(AdmissionController())
    seed = [("DeclareResources", admission_pb2.DeclareResourcesRequest(
                source="A", routers=[admission_pb2.RouterResources(router="e1", cpu_eps=10_000)],
                links=[admission_pb2.LinkResources(link="e1>b1", router="e1", bandwidth_bps=1_000_000)])),
            ("Advertise", admission_pb2.AdvertiseRequest(advertisement=admission_pb2.Advertisement(
                advertisement_id="A:pmu1/freq", filter=admission_pb2.Filter(variable="pmu1/freq"), max_rate_eps=50,
                source="A"))),
            ("Admit", admission_pb2.AdmitRequest(
                subscription_id="s1", filter=admission_pb2.Filter(variable="pmu1/freq"), interval_ms=20,
                hops=[admission_pb2.Hop(router="e1", link="e1>b1")]))]
    for method, request in seed:
        await getattr(servicer, method)(request, Context())
    hints: Hints = {"advertisement_id": ("A:pmu1/freq",), "subscription_id": ("s1",), "router": ("e1",),
                    "link": ("e1>b1",), "source": ("A",), "variable": ("pmu1/freq", "pmu1/*", "*/freq"),
                    "expression": ("price>3, name=DEU", "publisher=pmu1"), "attribute": ("publisher", "variable"),
                    "op": ("=", "<", "<=", ">", ">=")}
    yield Rig({"AdmissionControl": servicer}, hints,
              lambda: servicer.GetState(admission_pb2.GetAdmissionStateRequest(), Context()))


class _MemoryArchive(ArchiveReader):
    """An archive in memory (an hour of pmu1/freq at 60 frames/s, archived at full rate), read like Kafka's:
    the range, one record per timestamp, the caller's filter chosen from the archive's parameters."""

    T0 = 1_795_000_000_000

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1")
        self.stamps = [self.T0 + (2000 * f + 60) // 120 for f in range(60 * 3600)]

    async def reachable(self) -> bool:
        return True

    async def read(self, variable: str, *, from_ms: int, to_ms: int, choose: Any, batch_events: int = 10_000,
                   stats: ReadStats | None = None) -> AsyncIterator[ArchivedBatch]:
        if variable != "pmu1/freq":
            return
        params = ArchiveParams("float", 16, 16, 60)
        keep = None
        out = ArchivedBatch(params)
        for ts in self.stamps:
            if ts < from_ms or ts > to_ms:
                continue
            if not out.timestamps_ms and keep is None:
                keep = choose(params) or (lambda _ts: True)
            if keep(ts):
                out.timestamps_ms.append(ts)
                out.values.append(60.0)
                out.extrapolated.append(False)
            if len(out) >= batch_events:
                yield out
                out = ArchivedBatch(params)
        if len(out):
            yield out


@contextlib.asynccontextmanager
async def history_rig() -> AsyncIterator[Rig]:
    """The history service over an archive in memory (its Kafka reader is tested against a real Kafka)."""
    servicer = HistoryServicer(_MemoryArchive())
    t0 = _MemoryArchive.T0
    hints: Hints = {"variable": ("pmu1/freq", "nobody/nothing", "pmu1"),
                    "from_ms": (t0, t0 + 1000, t0 + 3_599_000, 0, -1), "to_ms": (t0 + 1000, t0 + 60_000, t0, 2**62),
                    "interval_ms": (0, 16, 17, 100, 1000, -5), "max_events": (0, 10, 10**9, -1)}
    yield Rig({"History": servicer}, hints,
              lambda: servicer.Health(history_pb2.HistoryHealthRequest(), Context()))


RIGS: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[Rig]]] = {
    "router": router_rig, "edge": edge_rig, "leaf": leaf_rig, "parent": parent_rig, "admission": admission_rig,
    "history": history_rig}
#: The servicer classes each rig serves, by service name, and the generated base each extends.
SERVICERS: dict[str, dict[str, tuple[type[Any], type[Any]]]] = {
    "router": {"RouterControl": (RouterControlServicer, router_pb2_grpc.RouterControlServicer)},
    "edge": {"EdgeProxy": (EdgeProxyServicer, edge_pb2_grpc.EdgeProxyServicer)},
    "leaf": {"QoSBroker": (QoSBrokerServicer, broker_pb2_grpc.QoSBrokerServicer),
             "Segments": (SegmentsServicer, broker_pb2_grpc.SegmentsServicer)},
    "parent": {"QoSBroker": (ParentServicer, broker_pb2_grpc.QoSBrokerServicer),
               "Segments": (ParentSegmentsServicer, broker_pb2_grpc.SegmentsServicer)},
    "admission": {"AdmissionControl": (AdmissionServicer, admission_pb2_grpc.AdmissionControlServicer)},
    "history": {"History": (HistoryServicer, history_pb2_grpc.HistoryServicer)},
}


# -- the table -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    service: str
    method: str
    rig: str
    examples: int = EXAMPLES

    @property
    def id(self) -> str:
        return f"{self.rig}-{self.service}.{self.method}"


def rows(service: str, rig: str, methods: str, examples: int = EXAMPLES) -> list[Row]:
    return [Row(service, m, rig, examples) for m in methods.split()]


_LEAF_CLIENT = "RegisterClient UnregisterClient RegisterPublication UnregisterPublication Subscribe Unsubscribe " \
               "ChangeSubscription ListSubscriptions ListPublications SetFloodAll ListModes"
ROWS: list[Row] = [
    *rows("RouterControl", "router", "AddChannel RemoveChannel UpdateChannel SetChannelShaping InstallRoutes "
          "RemoveRoutes PrepareRoutes CommitRoutes AbortRoutes SetPubInterval SetMode PrepareMode NotifyMode "
          "ListRoutes ListChannels GetStats Health SetFlooding RemoveFlooding SetupCondensation "
          "TerminateCondensation"),
    *rows("RouterControl", "router", "WatchLinks", 10),
    # Each call is relayed to the leaf broker over a real channel.
    *rows("EdgeProxy", "edge", "RegisterClient UnregisterClient RegisterPublication UnregisterPublication Subscribe "
          "Unsubscribe ChangeSubscription ListSubscriptions SetFloodAll ListModes SubscribeQuery UnsubscribeQuery "
          "ListQueries", 25),
    *rows("QoSBroker", "leaf", "SubscribeQuery UnsubscribeQuery ListQueries"),
    *rows("QoSBroker", "parent", "SubscribeQuery UnsubscribeQuery ListQueries", 25),
    *rows("QoSBroker", "leaf", f"{_LEAF_CLIENT} RemoveRouter AddChannel RemoveChannel RemoveInterCloudChannel "
          "GetTopology Health AnnounceRouter DefineMode SetFlooding RemoveFlooding ListFlooding "
          "RemoveCondensation ListCondensations"),
    # A mode change runs five phases over the routers; a condensation function is set up at one.
    *rows("QoSBroker", "leaf", "ChangeMode CreateCondensation", 30),
    # These dial the router or channel address in the request.
    *rows("QoSBroker", "leaf", "AddRouter AddInterCloudChannel", DIALING),
    *rows("Segments", "leaf", "ReserveSegment CommitSegment AbortSegment ResolveVariable ListVariables"),
    # A parent asks its children for most answers.
    *rows("QoSBroker", "parent", f"{_LEAF_CLIENT} AddRouter RemoveRouter AddChannel RemoveChannel "
          "AddInterCloudChannel RemoveInterCloudChannel RemoveChildBroker GetTopology Health DefineMode ChangeMode "
          "SetFlooding RemoveFlooding ListFlooding", 25),
    *rows("QoSBroker", "parent", "AddChildBroker", DIALING),
    *rows("Segments", "parent", "ReserveSegment CommitSegment AbortSegment ResolveVariable ReportBroken "
          "ListVariables", 25),
    *rows("AdmissionControl", "admission", "Advertise Unadvertise SyncAdvertisements DeclareResources "
          "GetRequirement Admit Release GetState"),
    *rows("History", "history", "Query Health"),
]


def all_rpcs() -> dict[tuple[str, str], d.MethodDescriptor]:
    """Every RPC of every service of every generated module of gridstat.v1."""
    out = {}
    for mod in pkgutil.iter_modules(gridstat.v1.__path__):
        if mod.name.endswith("_pb2"):
            module = importlib.import_module(f"gridstat.v1.{mod.name}")
            for svc in module.DESCRIPTOR.services_by_name.values():
                out |= {(svc.name, m.name): m for m in svc.methods}
    return out


RPCS = all_rpcs()


def implements(rig: str, service: str, method: str) -> bool:
    cls, base = SERVICERS[rig][service]
    return getattr(cls, method) is not getattr(base, method)


def test_every_rpc_of_every_service_has_a_row() -> None:
    have = {(r.service, r.method) for r in ROWS}
    assert {"RouterControl", "EdgeProxy", "QoSBroker", "Segments", "AdmissionControl"} <= {s for s, _ in RPCS}
    assert not set(RPCS) - have, f"RPCs not fuzzed: add rows to ROWS for {sorted(set(RPCS) - have)}"
    assert not have - set(RPCS), f"rows for no RPC: {sorted(have - set(RPCS))}"
    assert len({r.id for r in ROWS}) == len(ROWS), "a row is listed twice"


def test_every_handler_of_every_servicer_has_a_row() -> None:
    listed = {(r.rig, r.service, r.method) for r in ROWS}
    missing = sorted((rig, service, m) for rig, services in SERVICERS.items() for service in services
                     for (svc, m) in RPCS if svc == service and implements(rig, service, m)
                     and (rig, service, m) not in listed)
    assert not missing, f"handlers not fuzzed against their role: {missing}"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_handler_answers_with_its_reply_or_a_status(row: Row) -> None:
    method = RPCS[(row.service, row.method)]
    cls, _ = SERVICERS[row.rig][row.service]
    assert implements(row.rig, row.service, row.method), \
        f"{row.service}.{row.method} is in the proto but {cls.__name__} does not implement it " \
        "(the generated base answers UNIMPLEMENTED)"
    assert not method.client_streaming, f"{row.method}: a client stream of generated messages is not written yet"
    reply_type = message_factory.GetMessageClass(method.output_type)
    call = _stream if method.server_streaming else _call
    unhandled: list[dict[str, Any]] = []
    with event_loop(unhandled) as loop:
        rig_cm = RIGS[row.rig]()
        rig = loop.run_until_complete(rig_cm.__aenter__())
        try:
            servicer = rig.servicers[row.service]
            assert isinstance(servicer, cls)
            before = {k: f() for k, f in rig.invariants.items()}
            handler = getattr(servicer, row.method)

            @settings(max_examples=row.examples, deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
            @given(messages(method.input_type, rig.hints))
            def run(request: Any) -> None:
                loop.run_until_complete(call(handler, row.method, request, reply_type))

            run()
            loop.run_until_complete(asyncio.wait_for(rig.alive(), CALL_TIMEOUT_S))  # still serving
            assert {k: f() for k, f in rig.invariants.items()} == before
            assert not unhandled, [c.get("exception") or c.get("message") for c in unhandled]
        finally:
            loop.run_until_complete(rig_cm.__aexit__(None, None, None))
