"""A client's management-plane session: commands to its edge router's ``EdgeProxy`` (docs/management-plane.md).

Publishers and subscribers talk only to their edge router, which proxies each command to the
cloud's leaf QoS broker (dissertation 1, 3.2.4): ``registerPublisher`` / ``registerSubscriber``,
publications, subscriptions. ``first_time=True`` after a crash tells the broker to drop what the
client held before (3.7). gRPC errors become :class:`~gridstat.errors.GridStatError` with the
``gridstat-reason`` of the trailing metadata; a refused subscription raises
:class:`SubscriptionRejected` with the broker's :class:`Offer`. Where the broker consults an
admission controller, its decision (or the broker's fallback when the controller is unreachable)
comes back as an :class:`AdmissionNote` on the result and on the rejection alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import grpc

from gridstat.core import expressions, protoconv, rpc
from gridstat.core.model import (
    PRIORITY_HIGH,
    StatusVariable,
    TypeSpec,
    check_name,
    split_variable_name,
)
from gridstat.core.protoconv import type_to_pb
from gridstat.core.tls import ClientChannel, TlsFiles
from gridstat.errors import (
    ChannelUnavailable,
    DuplicateName,
    GridStatError,
    NotFound,
    TypeMismatch,
    UnknownVariable,
    ValidationError,
    strip_reason,
)
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import edge_pb2_grpc as epb_grpc

REASON_KEY = "gridstat-reason"
FIELD_KEY = "gridstat-field"

#: Reasons of a refused subscription (broker admission control and its checks before it).
REJECTION_REASONS = frozenset({
    "AdmissionRejected", "NoFeasiblePath", "LatencyUnattainable", "CapacityExceeded", "UnknownVariable",
    "TypeMismatch", "Unauthorized", "PermissionDenied", "NoMatchingAdvertisement",
})


_ERRORS_BY_REASON: dict[str, type[GridStatError]] = {
    "UnknownVariable": UnknownVariable,
    "TypeMismatch": TypeMismatch,
    "AlreadyExists": DuplicateName,
    "NotFound": NotFound,
    "InvalidArgument": ValidationError,
}

_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 30_000),
    # An edge router named by DNS (a StatefulSet pod) comes back at a new address after a restart:
    # look the name up again within a second, not gRPC's default 30 s (docs/kubernetes.md#upgrades).
    ("grpc.dns_min_time_between_resolutions_ms", 1000),
)


# -- values ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Offer:
    """What the broker could grant instead of a refused subscription; None where it does not apply."""

    best_latency_ms: float | None = None
    max_redundancy: int | None = None
    min_interval_ms: int | None = None


@dataclass(frozen=True)
class HopVerdict:
    """One resource at one hop as the admission controller saw it (events/s, bit/s or bytes)."""

    router: str
    link: str
    mode: int
    resource: str
    required: float
    available: float
    ok: bool


@dataclass(frozen=True)
class AdmissionNote:
    """The admission controller's part in a subscription (docs/admission.md).

    ``fallback`` is True when the controller could not be reached and the broker's own reservation
    check decided alone (``decided_by`` "broker"); otherwise ``reason`` is the controller's
    (Admitted, PartiallyGuaranteed, CapacityExceeded, NoMatchingAdvertisement) with its verdict per hop.
    """

    consulted: bool
    fallback: bool
    decided_by: str
    controller: str
    note: str
    reason: str = ""
    guaranteed_fraction: float = 1.0
    required_min_eps: float = 0.0
    required_max_eps: float = 0.0
    reserved_eps: float = 0.0
    hops: tuple[HopVerdict, ...] = ()


class SubscriptionRejected(GridStatError):
    """The leaf broker refused a subscription; ``reason`` says why and ``offer`` what it could do;
    ``admission`` is the admission controller's decision when it was the one that refused."""

    reason = "AdmissionRejected"

    def __init__(self, message: str, *, reason: str | None = None, field: str | None = None,
                 offer: Offer | None = None, admission: AdmissionNote | None = None) -> None:
        super().__init__(message, reason=reason or None, field=field or None)
        self.offer = offer if offer is not None else Offer()
        self.admission = admission


class ModeQoS(NamedTuple):
    """A subscription's QoS in one mode; a plain ``(mode, interval, latency, redundancy, priority)`` tuple works."""

    mode: int
    interval_ms: int
    latency_ms: int
    redundancy: int = 1
    priority: int = PRIORITY_HIGH
    #: What one delivered event is worth (HAPS maxprice): overloaded routers shed low values first.
    price: float = 1.0
    #: No guarantee wanted: shed before every guaranteed stream.
    best_effort: bool = False


@dataclass(frozen=True)
class PathInfo:
    routers: tuple[str, ...]  # the publisher's edge router first
    latency_ms: float
    redundant_index: int


@dataclass(frozen=True)
class SubscribeResult:
    """An admitted subscription as the broker holds it."""

    admitted: bool
    subscription_id: str
    subscriber: str
    variable: str
    variable_id: int
    pub_interval_ms: int
    qos: tuple[ModeQoS, ...] = ()
    #: Paths per mode.
    paths: dict[int, tuple[PathInfo, ...]] = field(default_factory=dict)
    edge_router: str = ""
    cloud: str = ""
    #: The admission controller's decision, when the broker consults one.
    admission: AdmissionNote | None = None
    #: The interval granted per mode (the asked one rounded down to a multiple of the publication
    #: interval, and at least that: dissertation 4.2), as the broker states it.
    granted_interval_ms: dict[int, int] = field(default_factory=dict)
    #: The publication's frame rate (0 = a period of ``pub_interval_ms``) and attributes.
    frames_per_s: int = 0
    attributes: dict[str, str] = field(default_factory=dict)


# -- conversions ------------------------------------------------------------------------------------
def type_from_pb(m: bpb.ValueType) -> TypeSpec:
    """The TypeSpec of a reply's type; a reply always names one."""
    t = protoconv.type_from_pb(m)
    if t is None:
        raise ValidationError("the broker's reply names no value type", field="type.kind")
    return t


def variable_from_pb(p: bpb.Publication) -> StatusVariable:
    return StatusVariable(p.publisher, p.variable, type_from_pb(p.type), p.interval_ms, p.priority, p.alert,
                          p.min_interval_ms, variable_id=p.variable_id, frames_per_s=p.frames_per_s,
                          attributes=dict(p.attributes))


def as_qos(q: ModeQoS | Sequence[Any]) -> ModeQoS:
    """A ModeQoS from itself or a plain ``(mode, interval, latency[, redundancy, priority, price, best_effort])``."""
    return q if isinstance(q, ModeQoS) else ModeQoS(*q)


def qos_to_pb(q: ModeQoS) -> bpb.ModeQoS:
    return bpb.ModeQoS(mode=q.mode, interval_ms=q.interval_ms, latency_ms=q.latency_ms, redundancy=q.redundancy,
                       priority=q.priority, price=q.price, best_effort=q.best_effort)


def admission_from_pb(reply: bpb.SubscribeReply) -> AdmissionNote | None:
    if not reply.HasField("admission"):
        return None
    a = reply.admission
    d = a.decision
    req = d.requirement
    return AdmissionNote(
        consulted=a.consulted, fallback=a.fallback, decided_by=a.decided_by, controller=a.controller, note=a.note,
        reason=d.reason, guaranteed_fraction=d.guaranteed_fraction if d.reason else 1.0,
        required_min_eps=req.min_rate_eps, required_max_eps=req.max_rate_eps, reserved_eps=d.reserved_eps,
        hops=tuple(HopVerdict(h.router, h.link, h.mode, h.resource, h.required, h.available, h.ok) for h in d.hops))


def offer_from_pb(o: bpb.Offer) -> Offer:
    return Offer(best_latency_ms=o.best_latency_ms if o.HasField("best_latency_ms") else None,
                 max_redundancy=o.max_redundancy if o.HasField("max_redundancy") else None,
                 min_interval_ms=o.min_interval_ms if o.HasField("min_interval_ms") else None)


def rejection_error(r: bpb.Rejection, variable: str = "", admission: AdmissionNote | None = None
                    ) -> SubscriptionRejected:
    what = f"subscription to {variable!r} refused" if variable else "subscription refused"
    return SubscriptionRejected(f"{what}: {strip_reason(r.message, r.reason) or r.reason or 'no reason given'}",
                                reason=r.reason or None, field=r.field or None, offer=offer_from_pb(r.offer),
                                admission=admission)


def result_from_pb(reply: bpb.SubscribeReply) -> SubscribeResult:
    """An admitted reply as a :class:`SubscribeResult`; a refusal raises :class:`SubscriptionRejected`."""
    sub = reply.subscription
    if not reply.admitted:
        raise rejection_error(reply.rejection, sub.variable, admission_from_pb(reply))
    return SubscribeResult(
        admitted=True, subscription_id=sub.subscription_id, subscriber=sub.subscriber, variable=sub.variable,
        variable_id=reply.variable_id, pub_interval_ms=reply.pub_interval_ms,
        qos=tuple(ModeQoS(q.mode, q.interval_ms, q.latency_ms, q.redundancy, q.priority,
                          q.price if q.HasField("price") else 1.0, q.best_effort) for q in sub.qos),
        paths={a.mode: tuple(PathInfo(tuple(p.routers), p.latency_ms, p.redundant_index) for p in a.paths)
               for a in reply.allocations},
        edge_router=sub.edge_router, cloud=sub.cloud, admission=admission_from_pb(reply),
        granted_interval_ms={a.mode: a.interval_ms for a in reply.allocations if a.interval_ms},
        frames_per_s=reply.frames_per_s, attributes=dict(reply.attributes))


def flooded_variables(reply: bpb.BrokerFloodingReply) -> list[StatusVariable]:
    """The flooded variables of a flooding reply, once each (a reply lists one entry per mode)."""
    out: dict[int, StatusVariable] = {}
    for e in reply.flooding:
        if e.variable_id not in out and e.publication.type.kind:
            out[e.variable_id] = variable_from_pb(e.publication)
    return list(out.values())


def _metadata(exc: grpc.aio.AioRpcError) -> dict[str, str]:
    md = exc.trailing_metadata() or ()
    return {str(k): v for k, v in md if isinstance(v, str)}


def _strip_reason(details: str, reason: str) -> str:
    """``GridStatError.__str__`` prefixes the reason; do not repeat it."""
    return strip_reason(details, reason)


def error_from_rpc(exc: grpc.aio.AioRpcError, *, subscribing: bool = False) -> GridStatError:
    """A gRPC error as a GridStatError: the reason from ``gridstat-reason``, retriable for UNAVAILABLE."""
    md = _metadata(exc)
    code = exc.code()
    reason = md.get(REASON_KEY, "")
    fld = md.get(FIELD_KEY) or None
    details = _strip_reason(exc.details() or "", reason)
    if code is grpc.StatusCode.UNAVAILABLE:
        err: GridStatError = ChannelUnavailable(details or "edge router unavailable", reason=reason or None,
                                                field=fld)
        return err
    if subscribing and reason in REJECTION_REASONS:
        return SubscriptionRejected(details, reason=reason, field=fld)
    if code is grpc.StatusCode.PERMISSION_DENIED or code is grpc.StatusCode.UNAUTHENTICATED:
        return GridStatError(details, reason=reason or "Unauthorized", field=fld)
    cls = _ERRORS_BY_REASON.get(reason)
    if cls is not None:
        return cls(details, field=fld)
    if not reason:
        reason = "".join(w.capitalize() for w in code.name.split("_"))
    return GridStatError(details, reason=reason, field=fld)


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"address {address!r} must be HOST:PORT", field="edge_control")
    return host.strip("[]"), int(port)


# -- the session ------------------------------------------------------------------------------------
class EdgeSession:
    """The client side of an edge router's ``EdgeProxy``: one gRPC channel, reconnecting with backoff.

    Create it inside a running event loop; ``close()`` (or ``async with``) releases the channel.
    A call that cannot reach the edge router (UNAVAILABLE) is retried by gRPC's retry policy
    (``core.rpc.retry_options``): ``attempts`` in all, exponential backoff from ``backoff_base_s``,
    within the call's deadline ``timeout_s``. The edge router's own answers, errors included, are not
    retried (they carry ``core.rpc.NO_RETRY``): every other error is raised at once.
    """

    def __init__(self, edge_control: str, *, tls: TlsFiles | None = None, timeout_s: float = 20.0,
                 attempts: int = 3, backoff_base_s: float = 0.1) -> None:
        self.edge_control = edge_control
        self.edge_host, self.edge_port = parse_address(edge_control)
        self.timeout_s = timeout_s
        self.attempts = max(1, attempts)
        #: The cloud's operating mode as of the last subscriber registration (6.3).
        self.current_mode = 0
        #: Event channel keys the broker handed out (``--channel-auth all``), by (kind, client name).
        self.channel_keys: dict[tuple[str, str], bytes] = {}
        #: The router id of this edge router: the sender id of its datagrams to a subscriber.
        self.edge_router_id = 0
        self.backoff_base_s = backoff_base_s
        #: Follows its certificate files: a renewed client certificate is used without a restart.
        self._client = ClientChannel(edge_control, tls,
                                     (*_CHANNEL_OPTIONS, *rpc.retry_options(self.attempts, backoff_base_s)))

    def sibling(self, edge_control: str, *, tls: TlsFiles | None = None) -> EdgeSession:
        """A session with another edge router, with this one's deadline and retries (a multi-homed
        client's other edge routers, docs/redundancy.md)."""
        return EdgeSession(edge_control, tls=tls, timeout_s=self.timeout_s, attempts=self.attempts,
                           backoff_base_s=self.backoff_base_s)

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> EdgeSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, request: Any, *, subscribing: bool = False) -> Any:
        call: Callable[..., Awaitable[Any]] = getattr(self._client.stub(epb_grpc.EdgeProxyStub), method)
        try:
            return await call(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, subscribing=subscribing) from None

    # -- clients ----------------------------------------------------------------------------------
    async def register_publisher(self, name: str, first_time: bool = True, *,
                                 also: bool = False) -> tuple[int, tuple[str, int]]:
        """Register a publisher; returns its client id (the sender id of its datagrams) and the
        edge router's event address it must send to. ``also``: a registered publisher attaches at
        this edge router too (multi-homed, docs/redundancy.md); nothing it holds is dropped."""
        check_name(name, what="publisher")
        reply: bpb.RegisterClientReply = await self._call("RegisterClient", bpb.RegisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_PUBLISHER, first_time=first_time and not also, also=also))
        self.channel_keys[("publisher", name)] = reply.channel_key
        self.edge_router_id = reply.edge_router_id
        return reply.client_id, (reply.event_host or self.edge_host, reply.event_port)

    async def register_subscriber(self, name: str, address: tuple[str, int], first_time: bool = True, *,
                                  also: bool = False) -> int:
        """Register a subscriber whose events go to ``address`` (its UDP socket); returns its client id.
        ``also``: a registered subscriber attaches at this edge router too (multi-homed)."""
        check_name(name, what="subscriber")
        host, port = address
        reply: bpb.RegisterClientReply = await self._call("RegisterClient", bpb.RegisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, host=host, port=port, first_time=first_time and not also,
            also=also))
        self.current_mode = reply.current_mode
        self.channel_keys[("subscriber", name)] = reply.channel_key
        self.edge_router_id = reply.edge_router_id
        return reply.client_id

    async def unregister_publisher(self, name: str) -> int:
        reply: bpb.UnregisterClientReply = await self._call("UnregisterClient", bpb.UnregisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_PUBLISHER))
        return reply.removed

    async def unregister_subscriber(self, name: str) -> int:
        reply: bpb.UnregisterClientReply = await self._call("UnregisterClient", bpb.UnregisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER))
        return reply.removed

    # -- publications -------------------------------------------------------------------------------
    async def register_publication(self, publisher: str, variable: str, type: TypeSpec, interval_ms: int,
                                   priority: int = PRIORITY_HIGH, alert: bool = False, min_interval_ms: int = 0,
                                   *, first_time: bool = True, frames_per_s: int = 0,
                                   attributes: Mapping[str, str] | None = None) -> StatusVariable:
        """Register a status variable; returns it with the variable id the leaf broker assigned."""
        # Validate locally first: the broker would refuse the same, one round trip later.
        local = StatusVariable(publisher, variable, type, interval_ms, priority, alert, min_interval_ms,
                               frames_per_s=frames_per_s, attributes=dict(attributes or {}))
        reply: bpb.RegisterPublicationReply = await self._call("RegisterPublication", bpb.RegisterPublicationRequest(
            publication=bpb.Publication(publisher=publisher, variable=variable, type=type_to_pb(type),
                                        interval_ms=interval_ms, priority=priority, alert=alert,
                                        min_interval_ms=min_interval_ms, frames_per_s=frames_per_s,
                                        attributes=local.attributes),
            first_time=first_time))
        p = reply.publication
        if not p.variable:  # a broker that echoes only the id
            return dataclasses.replace(local, variable_id=p.variable_id)
        return variable_from_pb(p)

    async def unregister_publication(self, publisher: str, variable: str) -> int:
        reply: bpb.UnregisterPublicationReply = await self._call(
            "UnregisterPublication", bpb.UnregisterPublicationRequest(publisher=publisher, variable=variable))
        return reply.subscriptions_removed

    # -- subscriptions ------------------------------------------------------------------------------
    async def subscribe(self, subscriber: str, variable_full_name: str, type: TypeSpec,
                        qos: Iterable[ModeQoS | Sequence[int]]) -> SubscribeResult:
        """Subscribe; raises :class:`SubscriptionRejected` (with ``reason`` and ``offer``) when refused."""
        check_name(subscriber, what="subscriber")
        split_variable_name(variable_full_name)
        modes = [as_qos(q) for q in qos]
        if not modes:
            raise ValidationError("a subscription needs the QoS of at least one mode", field="qos")
        reply: bpb.SubscribeReply = await self._call("Subscribe", bpb.SubscribeRequest(
            subscription=bpb.Subscription(subscriber=subscriber, variable=variable_full_name,
                                          type=type_to_pb(type), qos=[qos_to_pb(q) for q in modes])),
            subscribing=True)
        return result_from_pb(reply)

    async def change_subscription(self, subscription_id: str, qos: ModeQoS | Sequence[int]) -> SubscribeResult:
        """Change one mode's QoS in place; the old QoS stays when the broker refuses."""
        q = as_qos(qos)
        reply: bpb.SubscribeReply = await self._call("ChangeSubscription", bpb.ChangeSubscriptionRequest(
            subscription_id=subscription_id, qos=qos_to_pb(q)), subscribing=True)
        return result_from_pb(reply)

    async def unsubscribe(self, subscription_id: str) -> int:
        reply: bpb.UnsubscribeReply = await self._call("Unsubscribe", bpb.UnsubscribeRequest(
            subscription_id=subscription_id))
        return reply.routes_removed

    async def list_subscriptions(self, subscriber: str = "") -> list[SubscribeResult]:
        reply: bpb.ListSubscriptionsReply = await self._call("ListSubscriptions", bpb.ListSubscriptionsRequest(
            subscriber=subscriber))
        return [result_from_pb(s) for s in reply.subscriptions if s.admitted]

    # -- query subscriptions (docs/queries.md) -----------------------------------------------------------
    async def subscribe_query(self, subscriber: str, where: str,
                              qos: Iterable[ModeQoS | Sequence[int]]) -> bpb.QueryReply:
        """A standing query subscription: the broker admits every variable ``where`` matches, now and
        later; the reply names each matching variable's outcome. ValidationError (with the column) for a
        bad expression, before the broker is asked."""
        check_name(subscriber, what="subscriber")
        where = expressions.render(expressions.parse(where))
        modes = [as_qos(q) for q in qos]
        if not modes:
            raise ValidationError("a query subscription needs the QoS of at least one mode", field="qos")
        query = bpb.QuerySubscription(subscriber=subscriber, where=where, qos=[qos_to_pb(q) for q in modes])
        reply: bpb.QueryReply = await self._call("SubscribeQuery", bpb.SubscribeQueryRequest(query=query),
                                                 subscribing=True)
        return reply

    async def list_queries(self, subscriber: str = "") -> list[bpb.QueryReply]:
        reply: bpb.ListQueriesReply = await self._call("ListQueries", bpb.ListQueriesRequest(subscriber=subscriber))
        return list(reply.queries)

    async def unsubscribe_query(self, query_id: str) -> int:
        """Remove a query subscription and its variables' subscriptions; how many went."""
        reply: bpb.UnsubscribeQueryReply = await self._call("UnsubscribeQuery", bpb.UnsubscribeQueryRequest(
            query_id=query_id))
        return reply.subscriptions_removed

    # -- flooding -----------------------------------------------------------------------------------
    async def set_flood_all(self, subscriber: str, enabled: bool = True) -> list[StatusVariable]:
        """Turn the subscriber's flood-all subscription on or off (dissertation 5.1); returns the
        variables flooded in its cloud now, with the ids and types that decode their events."""
        check_name(subscriber, what="subscriber")
        reply: bpb.BrokerFloodingReply = await self._call("SetFloodAll", bpb.SetFloodAllRequest(
            subscriber=subscriber, enabled=enabled))
        return flooded_variables(reply)
