"""Inter-cloud subscriptions through the hierarchy (dissertation 3.1, 3.3.2): the parent broker and the leaf's uplink.

A leaf that does not publish a variable hands the subscription to its parent
(:class:`UpLink`, with ``subscription.cloud`` = the leaf). A parent that does not
hold the publisher's cloud in its subtree forwards it up again (remembering it,
so that the unsubscribe follows the same way). The lowest common ancestor plans
(:mod:`.parent`) and reserves every piece in two phases: ReserveSegment on each
cloud's segment and on each inter-cloud channel (at the broker that registered it),
then CommitSegment on all of them, subscriber side first, or AbortSegment on all
reserved ones if any piece fails, so nothing stays half-installed.

Budgets: a first attempt splits the bound evenly (minimum crossing unknown); if a
segment is refused for latency, everything is aborted and the split is retried once
with each cloud's minimum learned from the refusal's offer or the reserved path,
which gives the proportional split of :func:`parent.split_budgets`.

Redundancy (docs/redundancy.md, "Across clouds"): each of the k disjoint paths has its own
segments and channels, keyed apart by ``SegmentKey.path``. The segments of one cloud are
reserved one after the other, each told the routers its siblings took there
(``avoid_routers``) and the ends of those still to come (``later_siblings``: the leaf takes
this one's path of a joint disjoint search), so the paths share no router inside a cloud
either but the publisher's and the subscriber's edge routers; different clouds are reserved
concurrently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from gridstat.broker import parent as plan
from gridstat.broker.rejections import AdmissionRejected, Offer
from gridstat.broker.state import ModeQoS
from gridstat.core import rpc
from gridstat.core.filtering import granted_interval_ms
from gridstat.core.tls import ClientChannel, TlsFiles
from gridstat.errors import ChannelUnavailable, GridStatError, NotFound, Unauthorized
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from gridstat.broker.cloud import Cloud

log = logging.getLogger(__name__)
RPC_TIMEOUT_S = 10.0
SEGMENT_TTL_MS = 30_000
_KIND_PB = {plan.START: pb.SEGMENT_KIND_START, plan.MID: pb.SEGMENT_KIND_MID, plan.END: pb.SEGMENT_KIND_END}


class Rejected(AdmissionRejected):
    """A refusal relayed from another broker, keeping its reason and offer."""

    def __init__(self, rej: pb.Rejection, cloud: str = "") -> None:
        o = rej.offer
        offer = Offer(o.best_latency_ms if o.HasField("best_latency_ms") else None,
                      o.max_redundancy if o.HasField("max_redundancy") else None,
                      o.min_interval_ms if o.HasField("min_interval_ms") else None)
        super().__init__(rej.message, offer=offer, field=rej.field or None)
        self.reason = rej.reason or "AdmissionRejected"
        #: The cloud whose segment was refused ("" for a channel): its offer teaches that cloud's minimum.
        self.cloud = cloud


class Peer:
    """gRPC stubs of one broker (QoSBroker and Segments on the same address)."""

    def __init__(self, address: str, tls: TlsFiles | None = None) -> None:
        self.address = address
        #: Follows its certificate files: a renewed certificate is used without a restart.
        self.client = ClientChannel(address, tls, rpc.channel_options())

    @property
    def broker(self) -> pb_grpc.QoSBrokerStub:
        return self.client.stub(pb_grpc.QoSBrokerStub)

    @property
    def segments(self) -> pb_grpc.SegmentsStub:
        return self.client.stub(pb_grpc.SegmentsStub)


class Peers:
    def __init__(self, tls: TlsFiles | None = None) -> None:
        self._peers: dict[str, Peer] = {}
        #: (m)TLS towards other brokers (``--peer-tls-ca``, with this broker's own certificate).
        self.tls = tls

    def __call__(self, address: str) -> Peer:
        p = self._peers.get(address)
        if p is None:
            p = self._peers[address] = Peer(address, self.tls)
        return p

    async def close(self) -> None:
        for p in self._peers.values():
            await p.client.close()
        self._peers.clear()


def qos_pb(q: ModeQoS) -> pb.ModeQoS:
    return pb.ModeQoS(mode=q.mode, interval_ms=q.interval_ms, latency_ms=int(q.latency_ms), redundancy=q.redundancy,
                      priority=q.priority, price=q.price, best_effort=q.best_effort)


@dataclass
class Held:
    """One reserved piece of an inter-cloud subscription: a cloud's segment or an inter-cloud channel."""

    kind: str          # start | mid | end | channel
    key_cloud: str     # the cloud, or "<cloud_a>><cloud_b>" for a channel
    mode: int
    via: str           # the child it was delegated to; "" = a channel registered at this broker
    routers: list[str] = field(default_factory=list)
    latency_ms: float = 0.0
    #: Which plan of the subscription it belongs to: 0 first, then one more each time the subscription
    #: is planned again around a failure (docs/redundancy.md, "Healing"), so that the new pieces are
    #: reserved and committed beside the old ones before those go.
    generation: int = 0
    #: Which of the subscription's disjoint paths it is on, and its key there (``SegmentKey.path``:
    #: the path, plus the redundancy for each earlier crossing of the same cloud; docs/redundancy.md).
    path: int = 0
    lane: int = 0
    #: A channel's hop, "<src_router>-><dst_router>" (its routers are not part of the path's routers).
    hop: str = ""

    def key(self, sid: str) -> pb.SegmentKey:
        return pb.SegmentKey(subscription_id=sid, mode=self.mode, redundant_index=self.generation,
                             cloud=self.key_cloud, path=self.lane)

    def local_key(self, sid: str) -> str:
        """The key of an inter-cloud channel reserved in this broker's own books."""
        return channel_key(sid, self.mode, self.generation, self.key_cloud, self.lane)

    def border_routers(self) -> set[str]:
        """The border routers of a channel piece (none for a segment)."""
        return set(self.hop.split("->")) if self.hop else set()


def channel_key(sid: str, mode: int, generation: int, key_cloud: str, lane: int) -> str:
    """The key of an inter-cloud channel in the books of the broker that registered it."""
    return f"{sid}.m{mode}.r{generation}.{key_cloud}" + (f".p{lane}" if lane else "")


@dataclass
class InterSub:
    subscription_id: str
    subscriber: str
    variable: str
    cloud: str
    edge_router: str
    qos: list[dict[str, Any]]
    variable_id: int
    pub_interval_ms: int
    pub_cloud: str
    type: bytes = b""
    held: list[Held] = field(default_factory=list)
    #: The publication's frame rate (0 = a period of ``pub_interval_ms``; docs/frame-rates.md) and
    #: attributes, as the publishing cloud resolved them.
    frames_per_s: int = 0
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["type"] = self.type.hex()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> InterSub:
        held = [Held(**h) for h in d.pop("held")]
        return cls(**{**d, "type": bytes.fromhex(d["type"]), "held": held})

    def reply(self) -> pb.SubscribeReply:
        t = pb.ValueType()
        t.ParseFromString(self.type)
        sub = pb.Subscription(subscription_id=self.subscription_id, subscriber=self.subscriber,
                              variable=self.variable, type=t, edge_router=self.edge_router, cloud=self.cloud,
                              qos=[qos_pb(ModeQoS(**q)) for q in self.qos])
        allocations = []
        for q in self.qos:
            mine = [h for h in self.held if h.mode == q["mode"]]
            paths = [pb.Path(routers=[r for h in mine if h.path == p for r in h.routers],
                             latency_ms=sum(h.latency_ms for h in mine if h.path == p))
                     for p in sorted({h.path for h in mine})] or [pb.Path()]  # holding nothing: one empty path
            allocations.append(pb.Allocation(mode=q["mode"], paths=paths,
                                             interval_ms=granted_interval_ms(q["interval_ms"], self.pub_interval_ms,
                                                                             self.frames_per_s)))
        return pb.SubscribeReply(admitted=True, subscription=sub, variable_id=self.variable_id,
                                 pub_interval_ms=self.pub_interval_ms, allocations=allocations,
                                 frames_per_s=self.frames_per_s, attributes=self.attributes)


PathPlan = tuple[tuple[plan.Hop, ...], tuple[plan.SegmentPlan, ...]]


async def reserve_pieces(peers: Peers, child_address: dict[str, str], child_clouds: dict[str, frozenset[str]],
                         books: plan.InterCloudBooks, sub: InterSub, q: ModeQoS, paths: Sequence[PathPlan], *,
                         generation: int = 0, taken: Mapping[str, set[str]] | None = None
                         ) -> tuple[list[Held], list[GridStatError]]:
    """Reserve the segments and channels of one mode's paths (module docstring); returns what was
    reserved, in path order, and the refusals. ``taken``: per cloud, routers of paths kept (the
    segments avoid them)."""
    sid = sub.subscription_id

    async def segment(s: plan.SegmentPlan, avoid: set[str], later: Sequence[plan.SegmentPlan]) -> Held:
        child = plan.child_for(s.cloud, child_clouds)
        if child is None:
            raise NotFound(f"cloud {s.cloud!r} is not in this broker's subtree", field="cloud")
        held = Held(s.kind, s.cloud, q.mode, child, generation=generation, path=s.path, lane=s.lane)
        reply = await peers(child_address[child]).segments.ReserveSegment(pb.ReserveSegmentRequest(
            key=held.key(sid), kind=_KIND_PB[s.kind], from_router=s.from_router, to_router=s.to_router,
            next_channel=s.next_channel, variable_id=sub.variable_id, pub_interval_ms=sub.pub_interval_ms,
            qos=qos_pb(q), latency_budget_ms=s.budget_ms, ttl_ms=SEGMENT_TTL_MS, variable=sub.variable,
            frames_per_s=sub.frames_per_s, avoid_routers=sorted(avoid - {s.from_router, s.to_router}),
            later_siblings=[pb.SegmentEnds(from_router=x.from_router, to_router=x.to_router) for x in later]),
            timeout=RPC_TIMEOUT_S)
        if not reply.reserved:
            raise Rejected(reply.rejection, s.cloud)
        held.routers, held.latency_ms = list(reply.path.routers), reply.path.latency_ms
        return held

    async def siblings(cloud: str, segs: list[plan.SegmentPlan]) -> list[Held | BaseException]:
        """The segments of one cloud one after the other, each avoiding the routers of those before."""
        used = set((taken or {}).get(cloud, ()))
        out: list[Held | BaseException] = []
        for i, s in enumerate(segs):
            try:
                held = await segment(s, used, segs[i + 1:])
            except Exception as exc:  # returned like gather's exceptions, sorted below
                out.append(exc)
                break
            used.update(held.routers)
            out.append(held)
        return out

    async def channel(h: plan.Hop, path: int, lane: int) -> Held:
        key_cloud = f"{h.src_cloud}>{h.dst_cloud}"
        if books.owns(h):
            mine = Held("channel", key_cloud, q.mode, "", [], h.latency_ms, generation, path, lane, h.name)
            books.reserve(mine.local_key(sid), q.mode, h, sub.variable_id, sub.pub_interval_ms, q.interval_ms)
            return mine
        owner = plan.channel_owner(h.src_cloud, h.dst_cloud, child_clouds)
        if owner is None:
            raise NotFound(f"inter-cloud channel {h.name} is not registered here", field="channel")
        held = Held("channel", key_cloud, q.mode, owner, [], h.latency_ms, generation, path, lane, h.name)
        reply = await peers(child_address[owner]).segments.ReserveSegment(pb.ReserveSegmentRequest(
            key=held.key(sid), kind=pb.SEGMENT_KIND_CHANNEL, from_router=h.src_router, to_router=h.dst_router,
            variable_id=sub.variable_id, pub_interval_ms=sub.pub_interval_ms, qos=qos_pb(q),
            ttl_ms=SEGMENT_TTL_MS, variable=sub.variable, frames_per_s=sub.frames_per_s), timeout=RPC_TIMEOUT_S)
        if not reply.reserved:
            raise Rejected(reply.rejection)
        return held

    # Path order: segment, channel, segment, ... so that each path's concatenated routers read publisher first.
    order: dict[tuple[int, int, str], int] = {}  # (path, lane, cloud of a segment or hop of a channel) -> position
    per_cloud: dict[str, list[plan.SegmentPlan]] = {}
    coros: list[Awaitable[Any]] = []
    for hops, segments in paths:
        for i, s in enumerate(segments):
            order[(s.path, s.lane, s.cloud)] = len(order)
            per_cloud.setdefault(s.cloud, []).append(s)
            if i < len(hops):
                order[(s.path, s.lane, hops[i].name)] = len(order)
                coros.append(channel(hops[i], s.path, s.lane))
    coros += [siblings(cloud, segs) for cloud, segs in per_cloud.items()]
    results: list[Any] = []
    for r in await asyncio.gather(*coros, return_exceptions=True):
        results += r if isinstance(r, list) else [r]
    held = sorted((r for r in results if isinstance(r, Held)),
                  key=lambda h: order[(h.path, h.lane, h.hop or h.key_cloud)])
    errors: list[GridStatError] = []
    for r in results:
        if isinstance(r, GridStatError):
            errors.append(r)
        elif isinstance(r, grpc.aio.AioRpcError):
            errors.append(ChannelUnavailable(f"a broker did not answer: {r.details()}", field="segment"))
        elif isinstance(r, BaseException):
            raise r
    return held, errors


async def release_pieces(peers: Peers, child_address: dict[str, str], books: plan.InterCloudBooks, sid: str,
                         held: list[Held]) -> int:
    """Abort (reserved) or remove (committed) every piece; errors are logged, leaves expire what they miss."""
    n = 0
    for h in reversed(held):
        if not h.via:
            n += books.release(h.local_key(sid), h.mode)
            continue
        try:
            reply = await peers(child_address[h.via]).segments.AbortSegment(h.key(sid), timeout=RPC_TIMEOUT_S)
            n += int(reply.ok)
        except (grpc.aio.AioRpcError, KeyError) as exc:
            log.warning("aborting %s %s of %s: %s", h.kind, h.key_cloud, sid, exc)
    return n


async def commit_pieces(peers: Peers, child_address: dict[str, str], sid: str, held: list[Held]) -> None:
    """Commit subscriber side first, so downstream routes exist before upstream ones send."""
    for h in reversed(held):
        if h.via:
            try:
                await peers(child_address[h.via]).segments.CommitSegment(h.key(sid), timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                raise ChannelUnavailable(f"committing {h.kind} {h.key_cloud}: {exc.details()}",
                                         field="segment") from exc


class UpLink:
    """A leaf broker's parent: inter-cloud subscriptions go up, and their unsubscribes follow."""

    def __init__(self, address: str, tls: TlsFiles | None = None) -> None:
        self.address = address
        self.peers = Peers(tls)

    async def subscribe(self, cloud: Cloud, s: pb.Subscription) -> pb.SubscribeReply:
        """Check the subscriber, name the subscription in ``cloud`` and remember it durably, then ask the parent."""
        st, store = cloud.state, cloud.store
        client = st.client("subscriber", s.subscriber)
        if s.edge_router not in client.edge_routers:
            raise Unauthorized(f"subscriber {s.subscriber!r} is registered at {', '.join(client.edge_routers)}",
                               field="edge_router")
        s.edge_router = client.edge_router  # inter-cloud segments end at its first edge router (docs/redundancy.md)
        async with cloud.lock:
            sid = s.subscription_id or st.new_subscription_id()
            with store.transaction():
                cloud.save_counters()
        up = pb.Subscription()
        up.CopyFrom(s)
        up.subscription_id, up.cloud = sid, cloud.name
        reply: pb.SubscribeReply = await self.peers(self.address).broker.Subscribe(
            pb.SubscribeRequest(subscription=up), timeout=RPC_TIMEOUT_S * 3)
        if reply.admitted:
            store.set_meta(f"delegated:{sid}", self.address)
            store.set_meta(f"delegated-by:{sid}", s.subscriber)  # its owner (service._bind_owner)
        return reply

    def delegated(self, cloud: Cloud, sid: str) -> bool:
        return bool(cloud.store.get_meta(f"delegated:{sid}"))

    async def unsubscribe(self, cloud: Cloud, sid: str) -> int:
        reply: pb.UnsubscribeReply = await self.peers(self.address).broker.Unsubscribe(
            pb.UnsubscribeRequest(subscription_id=sid), timeout=RPC_TIMEOUT_S * 3)
        cloud.store.set_meta(f"delegated:{sid}", "")
        cloud.store.set_meta(f"delegated-by:{sid}", "")
        return int(reply.routes_removed)

    async def list_variables(self, where: str = "") -> pb.ListVariablesReply:
        """Every publication of the hierarchy that ``where`` matches, each with its cloud, and the brokers
        that did not answer (the parent asks the root; docs/queries.md, "Across clouds")."""
        reply: pb.ListVariablesReply = await self.peers(self.address).segments.ListVariables(
            pb.ListVariablesRequest(where=where, whole_hierarchy=True), timeout=RPC_TIMEOUT_S * 3)
        return reply

    async def report_broken(self, cloud: Cloud, sids: list[str], down: list[str]) -> None:
        """Tell the parent which inter-cloud subscriptions' segments could not be re-planned in ``cloud``
        and which of its routers are down (docs/redundancy.md, "Healing"); logged if it cannot be told."""
        try:
            await self.peers(self.address).segments.ReportBroken(pb.ReportBrokenRequest(
                cloud=cloud.name, subscription_ids=sids, down_routers=down), timeout=RPC_TIMEOUT_S * 3)
        except grpc.aio.AioRpcError as exc:
            log.warning("broker %s: could not tell parent %s about %s: %s", cloud.name, self.address, sids,
                        exc.details())

    async def close(self) -> None:
        await self.peers.close()
