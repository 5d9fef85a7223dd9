"""gRPC servicers of the leaf QoS broker (protos/gridstat/v1/broker.proto), thin over ``LeafBroker``.

One servicer per proto service: ``QoSBrokerServicer`` and ``SegmentsServicer``. QoSBroker's
clients, publications, subscriptions and topology are handled here; its mode, flooding and
condensation RPCs by plain handler objects the servicer holds and delegates to
(``modes_service.ModeHandlers``, ``flooding_service.FloodingHandlers``,
``condensing_service.CondensationHandlers``), each over the broker part of the same name. The
servicer runs every handler guarded (``core.rpc.guarded``: errors become statuses) and the
ones that plan paths or reserve under the admission bound (``gate``).

Admission outcomes (NoFeasiblePath, LatencyUnattainable, CapacityExceeded,
UnknownVariable, TypeMismatch, Unauthorized, RouterUnavailable) come back as a
reply with ``admitted=false`` and a ``Rejection`` carrying the reason and the
offer; malformed requests and other failures are gRPC errors with the
``gridstat-reason`` and ``gridstat-field`` trailing metadata.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from gridstat.broker.condensing_service import CondensationHandlers
from gridstat.broker.consulting import ControllerRejected
from gridstat.broker.flooding_service import FloodingHandlers
from gridstat.broker.gate import caller_of
from gridstat.broker.leaf import LeafBroker
from gridstat.broker.modes_service import ModeHandlers
from gridstat.broker.querying import Query
from gridstat.broker.rejections import CapacityExceeded, LatencyUnattainable, NoFeasiblePath
from gridstat.broker.segments import SegmentKind, segment_id
from gridstat.broker.state import ForeignChannel, ModeQoS, RouterEndpoint, SubscriptionRecord
from gridstat.broker.topology import RouterRole
from gridstat.core import expressions, rpc, wire
from gridstat.core.filtering import granted_interval_ms
from gridstat.core.protoconv import priority_of, publication_to_pb, type_from_pb, type_to_pb
from gridstat.errors import (
    ChannelUnavailable,
    GridStatError,
    TypeMismatch,
    Unauthorized,
    UnknownVariable,
    ValidationError,
)
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc

T = TypeVar("T")
ADMISSION_ERRORS = (NoFeasiblePath, LatencyUnattainable, CapacityExceeded, UnknownVariable, TypeMismatch,
                    Unauthorized, ChannelUnavailable, ControllerRejected)
_KIND = {pb.CLIENT_KIND_PUBLISHER: "publisher", pb.CLIENT_KIND_SUBSCRIBER: "subscriber"}


def rejection(exc: GridStatError) -> pb.Rejection:
    msg = pb.Rejection(reason=exc.reason, message=exc.message, field=exc.field or "")
    offer = getattr(exc, "offer", None)
    if offer is not None:
        if offer.best_latency_ms is not None:
            msg.offer.best_latency_ms = float(offer.best_latency_ms)
        if offer.max_redundancy is not None:
            msg.offer.max_redundancy = int(offer.max_redundancy)
        if offer.min_interval_ms is not None:
            msg.offer.min_interval_ms = int(offer.min_interval_ms)
    return msg


def qos_from_pb(m: pb.ModeQoS) -> ModeQoS:
    return ModeQoS(m.mode, m.interval_ms, float(m.latency_ms), m.redundancy or 1, priority_of(m),
                   m.price if m.HasField("price") else 1.0, m.best_effort)


def record_to_reply(broker: LeafBroker, r: SubscriptionRecord) -> pb.SubscribeReply:
    try:
        vtype = type_to_pb(broker.state.registry.by_id(r.variable_id).type)
    except UnknownVariable:  # an inter-cloud segment of a variable published in another cloud
        vtype = pb.ValueType()
    sub = pb.Subscription(subscription_id=r.subscription_id, subscriber=r.subscriber, variable=r.variable,
                          type=vtype, edge_router=r.edge_router, cloud=broker.name,
                          qos=[pb.ModeQoS(mode=q.mode, interval_ms=q.interval_ms, latency_ms=int(q.latency_ms),
                                          redundancy=q.redundancy, priority=q.priority, price=q.price,
                                          best_effort=q.best_effort or r.best_effort) for q in r.qos])
    granted = {q.mode: granted_interval_ms(q.interval_ms, r.pub_interval_ms, r.frames_per_s) for q in r.qos}
    allocations = [pb.Allocation(mode=mode, paths=[pb.Path(routers=list(p.routers), latency_ms=p.latency_ms,
                                                           redundant_index=i) for i, p in enumerate(paths)],
                                 interval_ms=granted.get(mode, 0))
                   for mode, paths in r.paths]
    try:
        attributes = dict(broker.state.registry.by_id(r.variable_id).attributes)
    except UnknownVariable:
        attributes = {}
    return pb.SubscribeReply(admitted=True, subscription=sub, variable_id=r.variable_id,
                             pub_interval_ms=r.pub_interval_ms, allocations=allocations,
                             frames_per_s=r.frames_per_s, attributes=attributes)


def query_to_reply(broker: LeafBroker, q: Query) -> pb.QueryReply:
    """A query subscription and each member's outcome; an admitted member whose subscription was removed
    since (``gridstat sub rm``) is reported as removed."""
    query = pb.QuerySubscription(
        query_id=q.query_id, subscriber=q.subscriber, where=q.where, edge_router=q.edge_router,
        qos=[pb.ModeQoS(mode=m.mode, interval_ms=m.interval_ms, latency_ms=int(m.latency_ms),
                        redundancy=m.redundancy, priority=m.priority, price=m.price, best_effort=m.best_effort)
             for m in q.qos])
    members = []
    for m in q.members.values():
        record = broker.state.subscriptions.get(m.subscription_id) if m.admitted else None
        if record is not None:
            members.append(pb.QueryMember(variable=m.variable, admitted=True, subscription_id=m.subscription_id,
                                          subscription=record_to_reply(broker, record)))
        elif m.admitted and m.reply and broker.uplink is not None and \
                broker.uplink.delegated(broker.cloud, m.subscription_id):  # another cloud's, held above
            members.append(pb.QueryMember(variable=m.variable, admitted=True, subscription_id=m.subscription_id,
                                          subscription=pb.SubscribeReply.FromString(m.reply)))
        elif m.admitted:
            members.append(pb.QueryMember(variable=m.variable, subscription_id=m.subscription_id,
                                          rejection=pb.Rejection(reason="NotFound", message=(
                                              f"subscription {m.subscription_id} of {m.variable} was removed"),
                                              field="subscription_id")))
        else:
            members.append(pb.QueryMember(variable=m.variable, rejection=pb.Rejection(
                reason=m.reason, message=m.message, field=m.field)))
    return pb.QueryReply(query=query, members=members)


async def bounded(broker: LeafBroker, context: Any, declared: str, call: Callable[[], Awaitable[T]]) -> T:
    """A call that plans paths or reserves: bounded per caller and in all (broker.gate), then run guarded."""
    caller = caller_of(context, declared, broker.identity.is_proxy if broker.identity is not None else None)
    return await broker.gate.run(context, caller, lambda: rpc.guarded(context, call))


class QoSBrokerServicer(pb_grpc.QoSBrokerServicer):
    """The QoSBroker service of a leaf broker; the mode, flooding and condensation RPCs are delegated to
    the handler objects it holds (module docstring)."""

    def __init__(self, broker: LeafBroker) -> None:
        self.broker = broker
        self.modes = ModeHandlers(broker)
        self.flooding = FloodingHandlers(broker)
        self.condensation = CondensationHandlers(broker)

    async def RegisterClient(self, request: pb.RegisterClientRequest, context: Any) -> pb.RegisterClientReply:
        async def call() -> pb.RegisterClientReply:
            kind = _KIND.get(request.kind)
            if kind is None:
                raise ValidationError("kind must be publisher or subscriber", field="kind")
            self.broker.bind_identity(context, request.name, field="name")
            cid, restarted = await self.broker.register_client(request.name, kind, request.edge_router,
                                                               request.host, request.port,
                                                               first_time=request.first_time, also=request.also)
            ep = self.broker.state.endpoints[request.edge_router]
            return pb.RegisterClientReply(client_id=cid, event_host=ep.event_host, event_port=ep.event_port,
                                          current_mode=self.broker.current_mode, restarted=restarted,
                                          channel_key=self.broker.client_key(request.edge_router, cid),
                                          edge_router_id=ep.router_id)
        return await rpc.guarded(context, call)

    async def UnregisterClient(self, request: pb.UnregisterClientRequest, context: Any) -> pb.UnregisterClientReply:
        async def call() -> pb.UnregisterClientReply:
            kind = _KIND.get(request.kind)
            if kind is None:
                raise ValidationError("kind must be publisher or subscriber", field="kind")
            self.broker.bind_identity(context, request.name, field="name")
            return pb.UnregisterClientReply(removed=await self.broker.unregister_client(request.name, kind))
        return await rpc.guarded(context, call)

    async def RegisterPublication(self, request: pb.RegisterPublicationRequest,
                                  context: Any) -> pb.RegisterPublicationReply:
        async def call() -> pb.RegisterPublicationReply:
            p = request.publication
            t = type_from_pb(p.type, field="publication.type")
            if t is None:
                raise ValidationError("a publication needs a value type", field="publication.type.kind")
            self.broker.bind_identity(context, p.publisher, field="publication.publisher")
            self.broker.authorize("publish", p.publisher, f"{p.publisher}/{p.variable}", field="publication.variable")
            var = await self.broker.register_publication(
                p.publisher, p.variable, t, interval_ms=p.interval_ms, priority=priority_of(p), alert=p.alert,
                min_interval_ms=p.min_interval_ms, edge_router=p.edge_router,
                max_rate_eps=p.max_rate_eps if p.HasField("max_rate_eps") else None,
                frames_per_s=p.frames_per_s, attributes=dict(p.attributes))
            return pb.RegisterPublicationReply(publication=self._publication(var.full_name))
        return await rpc.guarded(context, call)

    def _published_here(self, full_name: str) -> bool:
        try:
            self.broker.state.registry.lookup(full_name)
        except UnknownVariable:
            return False
        return True

    def _publication(self, full_name: str) -> pb.Publication:
        v = self.broker.state.registry.lookup(full_name)
        edge = self.broker.state.clients.get(("publisher", v.publisher))
        out = publication_to_pb(v, edge_router=edge.edge_router if edge else "")
        rate = self.broker.cloud.max_rates.get(full_name)
        if rate is not None:
            out.max_rate_eps = rate
        return out

    async def UnregisterPublication(self, request: pb.UnregisterPublicationRequest,
                                    context: Any) -> pb.UnregisterPublicationReply:
        async def call() -> pb.UnregisterPublicationReply:
            self.broker.bind_identity(context, request.publisher, field="publisher")
            n = await self.broker.unregister_publication(f"{request.publisher}/{request.variable}")
            return pb.UnregisterPublicationReply(subscriptions_removed=n)
        return await rpc.guarded(context, call)

    async def Subscribe(self, request: pb.SubscribeRequest, context: Any) -> pb.SubscribeReply:
        async def call() -> pb.SubscribeReply:
            s = request.subscription
            if not s.qos:
                raise ValidationError("a subscription needs QoS for at least one mode", field="subscription.qos")
            qos = [qos_from_pb(q) for q in s.qos]
            t = type_from_pb(s.type, field="subscription.type")
            for attempt in (1, 2):
                try:
                    self.broker.bind_identity(context, s.subscriber, field="subscription.subscriber")
                    self.broker.authorize("subscribe", s.subscriber, s.variable, field="subscription.variable")
                    record = await self.broker.subscribe(s.subscriber, s.variable, t, qos,
                                                         edge_router=s.edge_router, subscription_id=s.subscription_id)
                except UnknownVariable as exc:
                    if self.broker.uplink is None:  # not published here and no parent to ask
                        return pb.SubscribeReply(admitted=False, subscription=s, rejection=rejection(exc))
                    # Registered here while the parent was asked (it then finds the variable in this very
                    # cloud and refuses): admitted here after all, on the second attempt.
                    try:  # inter-cloud: delegated up to the lowest common ancestor (delegation.UpLink)
                        up = await self.broker.uplink.subscribe(self.broker.cloud, s)
                    except (GridStatError, grpc.aio.AioRpcError) as up_exc:
                        if attempt == 1 and self._published_here(s.variable):
                            continue
                        if isinstance(up_exc, ADMISSION_ERRORS):
                            return pb.SubscribeReply(admitted=False, subscription=s, rejection=rejection(up_exc))
                        raise
                    if not up.admitted and attempt == 1 and self._published_here(s.variable):
                        continue
                    return up
                except ControllerRejected as exc:
                    return pb.SubscribeReply(admitted=False, subscription=s, rejection=rejection(exc),
                                             admission=exc.note)
                except ADMISSION_ERRORS as exc:
                    return pb.SubscribeReply(admitted=False, subscription=s, rejection=rejection(exc))
                break
            reply = record_to_reply(self.broker, record)
            note = self.broker.subscriptions.notes.pop(record.subscription_id, None)
            if note is not None:
                reply.admission.CopyFrom(note)
            return reply
        return await bounded(self.broker, context, request.subscription.subscriber, call)

    async def Unsubscribe(self, request: pb.UnsubscribeRequest, context: Any) -> pb.UnsubscribeReply:
        async def call() -> pb.UnsubscribeReply:
            sid, up = request.subscription_id, self.broker.uplink
            self._bind_owner(context, sid)
            if up is not None and sid not in self.broker.state.subscriptions and up.delegated(self.broker.cloud, sid):
                return pb.UnsubscribeReply(routes_removed=await up.unsubscribe(self.broker.cloud, sid))
            return pb.UnsubscribeReply(routes_removed=await self.broker.unsubscribe(sid))
        return await rpc.guarded(context, call)

    async def ChangeSubscription(self, request: pb.ChangeSubscriptionRequest, context: Any) -> pb.SubscribeReply:
        async def call() -> pb.SubscribeReply:
            self._bind_owner(context, request.subscription_id)
            try:
                record = await self.broker.change_subscription(request.subscription_id, qos_from_pb(request.qos))
            except ADMISSION_ERRORS as exc:
                return pb.SubscribeReply(admitted=False, rejection=rejection(exc))
            return record_to_reply(self.broker, record)
        rec = self.broker.state.subscriptions.get(request.subscription_id)
        return await bounded(self.broker, context, rec.subscriber if rec is not None else "", call)

    def _bind_owner(self, context: Any, sid: str) -> None:
        """With mTLS, only the subscriber (or a platform component) may change or remove a subscription."""
        rec = self.broker.state.subscriptions.get(sid)
        owner = rec.subscriber if rec is not None else self.broker.store.get_meta(f"delegated-by:{sid}")
        if owner:
            self.broker.bind_identity(context, owner, field="subscription_id")

    async def ListSubscriptions(self, request: pb.ListSubscriptionsRequest,
                                context: Any) -> pb.ListSubscriptionsReply:
        scope = self.broker.listing_scope(context)  # a client sees only its own (docs/security.md)
        recs = [r for r in self.broker.state.subscriptions.values()
                if (not request.subscriber or r.subscriber == request.subscriber)
                and (scope is None or r.subscriber in scope)]
        return pb.ListSubscriptionsReply(subscriptions=[record_to_reply(self.broker, r) for r in recs])

    async def ListPublications(self, request: pb.ListPublicationsRequest, context: Any) -> pb.ListPublicationsReply:
        async def call() -> pb.ListPublicationsReply:
            where = expressions.parse(request.where) if request.where.strip() else None
            if request.all_clouds and self.broker.uplink is not None:
                try:
                    every = await self.broker.uplink.list_variables(request.where)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                        raise ValidationError(exc.details() or "bad where-expression", field="where") from None
                    raise ChannelUnavailable(f"parent broker {self.broker.uplink.address} did not list the other "
                                             f"clouds' variables: {exc.details()}") from None
                return pb.ListPublicationsReply(publications=every.publications, unreachable=every.unreachable)
            return pb.ListPublicationsReply(publications=[
                self._publication(v.full_name) for v in self.broker.state.registry
                if where is None or expressions.matches(where, v)])
        return await rpc.guarded(context, call)

    async def SubscribeQuery(self, request: pb.SubscribeQueryRequest, context: Any) -> pb.QueryReply:
        async def call() -> pb.QueryReply:
            q = request.query
            self.broker.bind_identity(context, q.subscriber, field="query.subscriber")
            query = await self.broker.queries.add(q.subscriber, q.where, [qos_from_pb(m) for m in q.qos],
                                                  edge_router=q.edge_router, query_id=q.query_id)
            return query_to_reply(self.broker, query)
        return await bounded(self.broker, context, request.query.subscriber, call)

    async def UnsubscribeQuery(self, request: pb.UnsubscribeQueryRequest, context: Any) -> pb.UnsubscribeQueryReply:
        async def call() -> pb.UnsubscribeQueryReply:
            query = self.broker.queries.queries.get(request.query_id)
            if query is not None:
                self.broker.bind_identity(context, query.subscriber, field="query_id")
            return pb.UnsubscribeQueryReply(subscriptions_removed=await self.broker.queries.remove(request.query_id))
        return await rpc.guarded(context, call)

    async def ListQueries(self, request: pb.ListQueriesRequest, context: Any) -> pb.ListQueriesReply:
        scope = self.broker.listing_scope(context)  # a client sees only its own (docs/security.md)
        return pb.ListQueriesReply(queries=[query_to_reply(self.broker, q)
                                            for q in self.broker.queries.listed(request.subscriber, scope)])

    async def AddRouter(self, request: pb.AddRouterRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            r = request.router
            try:
                role = RouterRole(r.role or "internal")
            except ValueError:
                raise ValidationError(f"router role {r.role!r} is not edge, internal, border or edge-border",
                                      field="router.role") from None
            host, _, port = r.event_address.rpartition(":")
            if not host or not port.isdigit() or not r.control_address:
                raise ValidationError("a router needs event_address HOST:PORT and control_address",
                                      field="router.event_address")
            # Attributes replace what is held only when some are given: a topology sidecar that announces
            # a moved pod without them keeps the topology file's (docs/topology.md, "Routers").
            await self.broker.add_router(RouterEndpoint(r.name, r.router_id, r.control_address, host, int(port)),
                                         role, float(r.capacity_eps or 50_000), dict(r.attributes) or None)
            return pb.TopologyReply(topology_version=self.broker.state.version)
        return await rpc.guarded(context, call)

    async def RemoveRouter(self, request: pb.RemoveRouterRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.remove_router(request.name)
            return pb.TopologyReply(topology_version=self.broker.state.version)
        return await rpc.guarded(context, call)

    async def AddChannel(self, request: pb.AddTopologyChannelRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            c = request.channel
            await self.broker.add_channel(c.a, c.b, bandwidth_bps=float(c.bandwidth_bps), latency_ms=c.latency_ms,
                                          capacity_eps=float(c.capacity_eps) or None, both=c.both_directions)
            return pb.TopologyReply(topology_version=self.broker.state.version)
        return await rpc.guarded(context, call)

    async def RemoveChannel(self, request: pb.RemoveTopologyChannelRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.remove_channel(request.a, request.b, both=request.both_directions)
            return pb.TopologyReply(topology_version=self.broker.state.version)
        return await rpc.guarded(context, call)

    async def AddInterCloudChannel(self, request: pb.AddInterCloudChannelRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            c = request.channel
            if c.cloud_a != self.broker.name:
                raise ValidationError(f"cloud_a {c.cloud_a!r} is not this broker's cloud {self.broker.name!r}",
                                      field="channel.cloud_a")
            host, _, port = c.router_b_event_address.rpartition(":")
            if not host or not port.isdigit() or not c.router_b_id:
                raise ValidationError("a leaf needs router_b_event_address HOST:PORT and router_b_id",
                                      field="channel.router_b_event_address")
            await self.broker.segments.add_foreign_channel(ForeignChannel(
                c.router_a, c.router_b, c.cloud_b, c.router_b_id, host, int(port), float(c.bandwidth_bps),
                c.latency_ms, level=c.level or 2, key_hex=wire.check_key(c.key).hex() if c.key else ""))
            return pb.TopologyReply(topology_version=self.broker.state.version)
        return await rpc.guarded(context, call)

    async def RemoveInterCloudChannel(self, request: pb.RemoveInterCloudChannelRequest,
                                      context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.segments.remove_foreign_channel(request.router_a, request.router_b)
            return pb.TopologyReply(topology_version=self.broker.state.version)
        return await rpc.guarded(context, call)

    async def GetTopology(self, request: pb.GetTopologyRequest, context: Any) -> pb.TopologyView:
        st = self.broker.state
        routers = [pb.RouterInfo(name=r.name, role=r.role.value, capacity_eps=int(r.capacity_eps),
                                 control_address=st.endpoints[r.name].control_address,
                                 event_address=f"{st.endpoints[r.name].event_host}:{st.endpoints[r.name].event_port}",
                                 router_id=st.endpoints[r.name].router_id, up=r.name not in st.down,
                                 attributes=st.router_attributes.get(r.name, {}))
                   for r in st.topology if r.name in st.endpoints]
        channels = [pb.TopologyChannel(a=c.src, b=c.dst, bandwidth_bps=int(c.bandwidth_bps), latency_ms=c.latency_ms,
                                       capacity_eps=int(c.event_capacity_eps or 0))
                    for c in st.topology.channels.values()]
        foreign = [pb.InterCloudChannel(cloud_a=self.broker.name, router_a=f.border_router, cloud_b=f.foreign_cloud,
                                        router_b=f.foreign_router, bandwidth_bps=int(f.bandwidth_bps),
                                        latency_ms=f.latency_ms, router_b_event_address=f"{f.host}:{f.port}",
                                        router_b_id=f.foreign_id, level=f.level) for f in st.foreign.values()]
        return pb.TopologyView(broker=self.broker.name, routers=routers, channels=channels,
                               inter_cloud_channels=foreign, topology_version=st.version)

    async def Health(self, request: pb.BrokerHealthRequest, context: Any) -> pb.BrokerHealthReply:
        st = self.broker.state
        healing = self.broker.healing
        last = healing.last
        return pb.BrokerHealthReply(serving=True, broker=self.broker.name, leaf=True,
                                    routers_up=len(st.endpoints) - len(st.down & set(st.endpoints)),
                                    routers_down=len(st.down & set(st.endpoints)),
                                    subscriptions=len(st.subscriptions), repaired=healing.repaired,
                                    unrepaired=len(healing.unrepaired),
                                    last_repair_cause=last.cause if last is not None else "",
                                    last_repair_s=last.took_s if last is not None else 0.0,
                                    announced=self.broker.announced)

    async def AnnounceRouter(self, request: pb.AnnounceRouterRequest, context: Any) -> pb.AnnounceRouterReply:
        async def announce() -> pb.AnnounceRouterReply:
            known, rebuilt = await self.broker.announce_router(request.name)
            return pb.AnnounceRouterReply(known=known, rebuilt=rebuilt)

        return await rpc.guarded(context, announce)

    # -- operating modes (modes_service.ModeHandlers over broker.modes) ----------------------------
    async def DefineMode(self, request: pb.DefineModeRequest, context: Any) -> pb.ModeInfo:
        return await rpc.guarded(context, lambda: self.modes.define_mode(request))

    async def ListModes(self, request: pb.ListModesRequest, context: Any) -> pb.ListModesReply:
        return await rpc.guarded(context, self.modes.list_modes)

    async def ChangeMode(self, request: pb.ChangeModeRequest, context: Any) -> pb.ChangeModeReply:
        return await rpc.guarded(context, lambda: self.modes.change_mode(request))

    # -- limited flooding (flooding_service.FloodingHandlers over broker.flooding) ---------------
    async def SetFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        return await rpc.guarded(context, lambda: self.flooding.set_flooding(request))

    async def RemoveFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        return await rpc.guarded(context, lambda: self.flooding.remove_flooding(request))

    async def ListFlooding(self, request: pb.ListFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        return self.flooding.list_flooding()

    async def SetFloodAll(self, request: pb.SetFloodAllRequest, context: Any) -> pb.BrokerFloodingReply:
        return await rpc.guarded(context, lambda: self.flooding.set_flood_all(request, context))

    # -- condensation functions (condensing_service.CondensationHandlers over broker.condensation) -
    async def CreateCondensation(self, request: pb.CreateCondensationRequest, context: Any) -> pb.CondensationInfo:
        # Placement plans paths: under the admission bound (broker.gate).
        return await bounded(self.broker, context, request.creator,
                             lambda: self.condensation.create_condensation(request, context))

    async def RemoveCondensation(self, request: pb.RemoveCondensationRequest,
                                 context: Any) -> pb.RemoveCondensationReply:
        return await rpc.guarded(context, lambda: self.condensation.remove_condensation(request, context))

    async def ListCondensations(self, request: pb.ListCondensationsRequest,
                                context: Any) -> pb.ListCondensationsReply:
        return await rpc.guarded(context, self.condensation.list_condensations)


_SEGMENT_KINDS = {pb.SEGMENT_KIND_START: SegmentKind.START, pb.SEGMENT_KIND_MID: SegmentKind.MID,
                  pb.SEGMENT_KIND_END: SegmentKind.END}


class SegmentsServicer(pb_grpc.SegmentsServicer):
    """The leaf's side of inter-cloud paths: the parent reserves, then commits or aborts, segments."""

    def __init__(self, broker: LeafBroker) -> None:
        self.broker = broker

    async def ReserveSegment(self, request: pb.ReserveSegmentRequest, context: Any) -> pb.ReserveSegmentReply:
        async def call() -> pb.ReserveSegmentReply:
            kind = _SEGMENT_KINDS.get(request.kind)
            if kind is None:
                raise ValidationError("segment kind must be start, mid or end", field="kind")
            k = request.key
            q = request.qos
            budget = request.latency_budget_ms or q.latency_ms
            qos = ModeQoS(k.mode, q.interval_ms, float(budget), 1, priority_of(q),
                          q.price if q.HasField("price") else 1.0, q.best_effort)
            try:
                record = await self.broker.segments.reserve(
                    segment_id(k.subscription_id, k.mode, k.redundant_index, k.path), kind,
                    from_router=request.from_router, to_router=request.to_router,
                    next_channel=request.next_channel, variable=request.variable,
                    variable_id=request.variable_id, pub_interval_ms=request.pub_interval_ms, qos=qos,
                    ttl_ms=request.ttl_ms or 10_000, frames_per_s=request.frames_per_s,
                    avoid=frozenset(request.avoid_routers), siblings=q.redundancy > 1,
                    later=tuple((e.from_router, e.to_router) for e in request.later_siblings))
            except ADMISSION_ERRORS as exc:
                return pb.ReserveSegmentReply(reserved=False, rejection=rejection(exc))
            (_, paths), = record.paths
            return pb.ReserveSegmentReply(reserved=True, path=pb.Path(routers=list(paths[0].routers),
                                                                      latency_ms=paths[0].latency_ms))
        return await bounded(self.broker, context, "", call)  # the caller: the parent broker

    async def CommitSegment(self, request: pb.SegmentKey, context: Any) -> pb.SegmentReply:
        async def call() -> pb.SegmentReply:
            await self.broker.segments.commit(segment_id(request.subscription_id, request.mode,
                                                         request.redundant_index, request.path))
            return pb.SegmentReply(ok=True)
        return await rpc.guarded(context, call)

    async def AbortSegment(self, request: pb.SegmentKey, context: Any) -> pb.SegmentReply:
        ok = await self.broker.segments.abort(segment_id(request.subscription_id, request.mode,
                                                         request.redundant_index, request.path))
        return pb.SegmentReply(ok=ok)

    async def ResolveVariable(self, request: pb.ResolveVariableRequest, context: Any) -> pb.RegisterPublicationReply:
        async def call() -> pb.RegisterPublicationReply:
            var, edge = self.broker.segments.resolve_variable(request.variable)
            return pb.RegisterPublicationReply(publication=publication_to_pb(var, edge_router=edge))
        return await rpc.guarded(context, call)

    async def ListVariables(self, request: pb.ListVariablesRequest, context: Any) -> pb.ListVariablesReply:
        """This cloud's publications ``where`` matches, each with the cloud's name (docs/queries.md)."""
        async def call() -> pb.ListVariablesReply:
            where = expressions.parse(request.where, field="where") if request.where.strip() else None
            st = self.broker.state
            out = []
            for v in st.registry:
                if where is None or expressions.matches(where, v):
                    edge = st.clients.get(("publisher", v.publisher))
                    out.append(publication_to_pb(v, edge_router=edge.edge_router if edge else "",
                                                 cloud=self.broker.name))
            return pb.ListVariablesReply(publications=out)
        return await rpc.guarded(context, call)
