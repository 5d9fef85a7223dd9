"""Every unary gRPC handler of the router, the leaf broker and the admission controller with generated
messages (hypothesis over the proto descriptors): a handler answers or ends the call with a gRPC
status naming the problem, never with an unhandled exception (UNKNOWN), and the role keeps serving.

Handlers are called in-process with a stand-in context. Requests that would make the role dial an
address from the message (adding routers, child brokers, inter-cloud channels) are left out: no
generated host name may reach a resolver or a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as d
from google.protobuf import message_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridstat.admission.admitting import AdmissionController
from gridstat.admission.service import AdmissionServicer
from gridstat.broker.leaf import LeafBroker
from gridstat.broker.service import QoSBrokerServicer
from gridstat.broker.store import BrokerStore
from gridstat.router.control import RouterControlServicer
from gridstat.router.process import Role, RouterConfig, StatusRouter
from gridstat.v1 import admission_pb2, broker_pb2, router_pb2

EXAMPLES = 100
#: Leaf-broker calls that dial an address taken from the request, or wait on peers by design.
DIALS = {"AddRouter", "AddChildBroker", "AddInterCloudChannel", "ReserveSegment", "CommitSegment", "AbortSegment",
         "ResolveVariable", "CreateCondensation", "ChangeMode"}

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


def _field(f: d.FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if f.type == d.FieldDescriptor.TYPE_MESSAGE:
        return messages(f.message_type, depth + 1)
    if f.type == d.FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in f.enum_type.values]), st.integers(-5, 99))
    return _SCALARS[f.type]


def messages(desc: d.Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """Messages of ``desc`` with any subset of their fields set (repeated: up to 3; maps skipped)."""
    cls = message_factory.GetMessageClass(desc)
    if depth > 3:
        return st.just(cls())
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            continue
        s = _field(f, depth)
        fields[f.name] = st.lists(s, max_size=3) if f.is_repeated else s

    def build(values: dict[str, Any]) -> Any:
        m = cls()
        for name, v in values.items():
            f = desc.fields_by_name[name]
            if f.is_repeated:
                getattr(m, name).extend(v)
            elif f.type == d.FieldDescriptor.TYPE_MESSAGE:
                getattr(m, name).CopyFrom(v)
            else:
                setattr(m, name, v)
        return m

    return st.fixed_dictionaries({}, optional=fields).map(build)


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code


class Context:
    """The parts of grpc.aio.ServicerContext the handlers use."""

    def set_trailing_metadata(self, md: Any) -> None:
        pass

    def invocation_metadata(self) -> tuple[Any, ...]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        raise Aborted(code, details)

    def set_code(self, code: Any) -> None:
        pass

    def set_details(self, details: str) -> None:
        pass

    def done(self) -> bool:
        return False


def _unary(service: d.ServiceDescriptor, skip: set[str] = frozenset()) -> list[tuple[str, d.Descriptor]]:  # type: ignore[assignment]
    return [(m.name, m.input_type) for m in service.methods
            if not m.client_streaming and not m.server_streaming and m.name not in skip]


def _check(loop: asyncio.AbstractEventLoop, servicer: Any, method: str, request: Any) -> None:
    handler: Callable[..., Any] = getattr(servicer, method)
    try:
        reply = loop.run_until_complete(asyncio.wait_for(handler(request, Context()), 10))
    except Aborted as exc:
        assert exc.code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), f"{method}: {exc}"
        return
    assert reply is not None, f"{method} returned None for {request!r}"


@contextlib.contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


ROUTER_METHODS = _unary(router_pb2.DESCRIPTOR.services_by_name["RouterControl"])
#: The leaf broker's own handlers; the parent-only calls (AddChildBroker, ...) keep the generated
#: base's UNIMPLEMENTED answer at a leaf and are not fuzzed here.
BROKER_METHODS = [(m, t) for m, t in _unary(broker_pb2.DESCRIPTOR.services_by_name["QoSBroker"], DIALS)
                  if not getattr(QoSBrokerServicer, m).__module__.startswith("gridstat.v1")]
ADMISSION_METHODS = _unary(admission_pb2.DESCRIPTOR.services_by_name["AdmissionControl"])
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize(("method", "request_type"), ROUTER_METHODS, ids=[m for m, _ in ROUTER_METHODS])
def test_router_control_handlers_never_crash(method: str, request_type: d.Descriptor) -> None:
    with event_loop() as loop:
        router = StatusRouter(RouterConfig(name="fz", router_id=1, role=Role.EDGE))
        loop.run_until_complete(router.start())
        servicer = RouterControlServicer(router)
        try:
            @FUZZ
            @given(messages(request_type))
            def run(request: Any) -> None:
                _check(loop, servicer, method, request)

            run()
            _check(loop, servicer, "Health", router_pb2.HealthRequest())  # still serving
        finally:
            loop.run_until_complete(router.stop())


@pytest.mark.parametrize(("method", "request_type"), BROKER_METHODS, ids=[m for m, _ in BROKER_METHODS])
def test_leaf_broker_handlers_never_crash(method: str, request_type: d.Descriptor) -> None:
    with event_loop() as loop:
        broker = LeafBroker("fz", BrokerStore(":memory:"), supervise_interval_s=3600)
        loop.run_until_complete(broker.start())
        servicer = QoSBrokerServicer(broker)
        try:
            @FUZZ
            @given(messages(request_type))
            def run(request: Any) -> None:
                _check(loop, servicer, method, request)

            run()
            _check(loop, servicer, "Health", broker_pb2.BrokerHealthRequest())
        finally:
            loop.run_until_complete(broker.stop())


@pytest.mark.parametrize(("method", "request_type"), ADMISSION_METHODS, ids=[m for m, _ in ADMISSION_METHODS])
def test_admission_handlers_never_crash(method: str, request_type: d.Descriptor) -> None:
    with event_loop() as loop:
        servicer = AdmissionServicer(AdmissionController())

        @FUZZ
        @given(messages(request_type))
        def run(request: Any) -> None:
            _check(loop, servicer, method, request)

        run()
