"""A parent QoS broker (dissertation 3.3.2) and its gRPC services, any depth of hierarchy.

It serves the hierarchy part of QoSBroker (children, inter-cloud channels, inter-cloud
subscriptions, topology, health) and Segments, which it forwards down to the child
whose subtree holds ``key.cloud`` (or keeps, for ``SEGMENT_KIND_CHANNEL`` on a channel
registered here). Its view of the subtree (leaf clouds per child, channels registered
below) is read from the children's ``GetTopology`` when needed; what it decided is in
``ParentStore`` and survives a restart.

``ParentBroker`` is a front object over its parts, each owning its piece of state: ``tree``
(``subtree.Subtree``: the children and the clouds below them), ``modes``
(``parent_modes.ParentModes``: the mode registry and the change down the tree) and ``flooding``
(``parent_flooding.ParentFlooding``: the flooded variables); it keeps the inter-cloud channels
registered here and the inter-cloud subscriptions itself. ``ParentServicer`` and
``ParentSegmentsServicer`` delegate to them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import grpc

from gridstat.broker import modes
from gridstat.broker import parent as plan
from gridstat.broker.delegation import (
    RPC_TIMEOUT_S,
    Held,
    InterSub,
    Peers,
    channel_key,
    commit_pieces,
    release_pieces,
    reserve_pieces,
)
from gridstat.broker.flooding_service import entries_pb
from gridstat.broker.parent_flooding import ParentFlooding
from gridstat.broker.parent_modes import ParentModes
from gridstat.broker.parent_store import ParentStore
from gridstat.broker.rejections import NoFeasiblePath, Offer
from gridstat.broker.service import ADMISSION_ERRORS, qos_from_pb, rejection
from gridstat.broker.state import ModeQoS
from gridstat.broker.subtree import Subtree
from gridstat.core import expressions, rpc
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, NotFound, TypeMismatch, UnknownVariable, ValidationError
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_LEAF_ONLY = "is a leaf broker call; a parent broker does not own routers or clients"


class ParentBroker:
    """One parent QoS broker: the front over its subtree view, its modes and its flooding (module docstring)."""

    def __init__(self, name: str, store: ParentStore, *, parent: str = "", tls: TlsFiles | None = None) -> None:
        self.name, self.store, self.parent = name, store, parent
        self.peers = Peers(tls)
        #: The children and the clouds below them (``subtree``).
        self.tree = Subtree(name, self.peers)
        self.books = plan.InterCloudBooks()
        self.subs: dict[str, InterSub] = {}
        self.forwarded: dict[str, dict[str, Any]] = {}
        #: channel reservations asked by an ancestor, not yet committed: key -> (deadline, stored document)
        self.pending: dict[str, tuple[float, dict[str, Any]]] = {}
        self.version = 0
        self.lock = asyncio.Lock()
        #: The routers each cloud below reports down (``report_broken``): inter-cloud plans avoid them.
        self.down: dict[str, set[str]] = {}
        #: Inter-cloud subscriptions planned again around a failure, and those that could not be.
        self.rerouted = 0
        self.unrerouted: set[str] = set()
        #: Key the inter-cloud channels this broker registers (``--channel-auth routers|all``): a random
        #: 32-byte key per channel, sent to both leaves with AddInterCloudChannel (docs/security.md).
        self.channel_auth = False
        #: The parts, each owning its piece of state: the modes and the flooded variables.
        self.modes = ParentModes(name, store, self.peers, self.tree.children)
        self.flooding = ParentFlooding(name, store, self.tree, self.modes)
        for d in store.all("child"):
            self.tree.children[d["name"]] = pb.ChildBroker(**d)
        for d in store.all("channel"):
            self.books.add(plan.InterChannel(**d))
        for d in store.all("sub"):
            s = InterSub.from_json(d)
            self.subs[s.subscription_id] = s
            for h in s.held:
                if h.kind == "channel" and not h.via:
                    self._reserve_local(h.local_key(s.subscription_id), h, s)
        for d in store.all("forwarded"):
            self.forwarded[d["subscription_id"]] = d
        for d in store.all("chanres"):
            self.books.reserve(d["key"], d["mode"], plan.Hop(**d["hop"]), d["variable_id"], d["pub_interval_ms"],
                               d["interval_ms"])

    @property
    def children(self) -> dict[str, pb.ChildBroker]:
        """The child brokers by name (``tree.children``)."""
        return self.tree.children

    def _reserve_local(self, key: str, h: Held, s: InterSub) -> None:
        ca, cb = h.key_cloud.split(">")
        hop = next(x for ch in self.books.channels.values() for x in ch.hops()
                   if x.src_cloud == ca and x.dst_cloud == cb and (not h.hop or x.name == h.hop))
        q = next(q for q in s.qos if q["mode"] == h.mode)
        self.books.reserve(key, h.mode, hop, s.variable_id, s.pub_interval_ms, q["interval_ms"])

    async def stop(self) -> None:
        await self.peers.close()
        self.store.close()

    # -- children and channels -----------------------------------------------------------------
    async def add_child(self, c: pb.ChildBroker) -> None:
        if not c.name or not c.address:
            raise ValidationError("a child needs a name and an address", field="child")
        health = await self.peers(c.address).broker.Health(pb.BrokerHealthRequest(), timeout=RPC_TIMEOUT_S)
        child = pb.ChildBroker(name=c.name, address=c.address, leaf=health.leaf)
        self.tree.children[c.name] = child
        self.store.put("child", c.name, {"name": c.name, "address": c.address, "leaf": health.leaf})
        self.version += 1
        await self.tree.refresh()

    async def remove_child(self, name: str) -> None:
        if name not in self.tree.children:
            raise NotFound(f"no child broker {name!r}", field="name")
        if any(h.via == name for s in self.subs.values() for h in s.held):
            raise ValidationError(f"child {name!r} carries inter-cloud subscriptions", field="name")
        del self.tree.children[name]
        self.tree.child_clouds.pop(name, None)
        self.store.delete("child", name)
        self.version += 1

    async def add_channel(self, c: pb.InterCloudChannel) -> None:
        await self.tree.refresh()
        owner = plan.channel_owner(c.cloud_a, c.cloud_b, self.tree.child_clouds)
        if c.cloud_a == c.cloud_b:
            raise ValidationError("an inter-cloud channel joins two different clouds", field="channel.cloud_b")
        if owner is not None:  # both clouds below one child: the LCA is further down
            await self.peers(self.tree.children[owner].address).broker.AddInterCloudChannel(
                pb.AddInterCloudChannelRequest(channel=c), timeout=RPC_TIMEOUT_S * 2)
            return
        ch = plan.InterChannel(c.cloud_a, c.router_a, c.cloud_b, c.router_b, float(c.bandwidth_bps), c.latency_ms)
        addr_a, addr_b = await self.tree.leaf_address(c.cloud_a), await self.tree.leaf_address(c.cloud_b)
        info: dict[str, pb.RouterInfo] = {}
        for addr, router in ((addr_a, c.router_a), (addr_b, c.router_b)):
            v = await self.peers(addr).broker.GetTopology(pb.GetTopologyRequest(), timeout=RPC_TIMEOUT_S)
            found = [r for r in v.routers if r.name == router]
            if not found:
                raise NotFound(f"cloud {v.broker!r} has no router {router!r}", field="channel")
            info[router] = found[0]
        level = await self.tree.height()  # this broker is the channel's LCA: its height is the level
        key = os.urandom(32) if self.channel_auth else b""
        self.books.add(ch)  # validates (duplicates, bandwidth) before the leaves are touched
        told: list[tuple[str, str, str]] = []
        try:
            for addr, (ca, ra, cb, rb) in ((addr_a, (c.cloud_a, c.router_a, c.cloud_b, c.router_b)),
                                           (addr_b, (c.cloud_b, c.router_b, c.cloud_a, c.router_a))):
                await self.peers(addr).broker.AddInterCloudChannel(pb.AddInterCloudChannelRequest(
                    channel=pb.InterCloudChannel(cloud_a=ca, router_a=ra, cloud_b=cb, router_b=rb,
                                                 bandwidth_bps=c.bandwidth_bps, latency_ms=c.latency_ms,
                                                 router_b_event_address=info[rb].event_address,
                                                 router_b_id=info[rb].router_id, level=level, key=key)),
                    timeout=RPC_TIMEOUT_S)
                told.append((addr, ra, rb))
        except BaseException:
            self.books.remove(c.router_a, c.router_b)
            for addr, ra, rb in told:
                await self.peers(addr).broker.RemoveInterCloudChannel(
                    pb.RemoveInterCloudChannelRequest(router_a=ra, router_b=rb), timeout=RPC_TIMEOUT_S)
            raise
        self.store.put("channel", f"{c.router_a}|{c.router_b}", asdict(ch))
        self.version += 1

    async def remove_channel(self, router_a: str, router_b: str) -> None:
        key = tuple(sorted((router_a, router_b)))
        ch = self.books.channels.get((key[0], key[1]))
        if ch is None:
            for child in self.tree.children.values():
                if any({x.router_a, x.router_b} == {router_a, router_b} for x in self.tree.below) and not child.leaf:
                    await self.peers(child.address).broker.RemoveInterCloudChannel(
                        pb.RemoveInterCloudChannelRequest(router_a=router_a, router_b=router_b),
                        timeout=RPC_TIMEOUT_S)
                    return
            raise NotFound(f"no inter-cloud channel {router_a} - {router_b}", field="channel")
        self.books.remove(ch.router_a, ch.router_b)
        for cloud, ra, rb in ((ch.cloud_a, ch.router_a, ch.router_b), (ch.cloud_b, ch.router_b, ch.router_a)):
            addr = await self.tree.leaf_address(cloud)
            await self.peers(addr).broker.RemoveInterCloudChannel(
                pb.RemoveInterCloudChannelRequest(router_a=ra, router_b=rb), timeout=RPC_TIMEOUT_S)
        self.store.delete("channel", f"{ch.router_a}|{ch.router_b}")
        self.version += 1

    # -- inter-cloud subscriptions ---------------------------------------------------------------
    async def subscribe(self, s: pb.Subscription) -> pb.SubscribeReply:
        if not s.subscription_id or not s.cloud or not s.qos:
            raise ValidationError("a delegated subscription needs its id, cloud and qos", field="subscription")
        qos = [qos_from_pb(q) for q in s.qos]
        if s.subscription_id in self.subs:
            return self.subs[s.subscription_id].reply()
        await self.tree.refresh()
        pub = await self.tree.resolve(s.variable)
        action = plan.decide(pub.cloud if pub else None, s.cloud, self.tree.clouds(), has_parent=bool(self.parent))
        if action == "unknown":
            raise UnknownVariable(f"no cloud under {self.name!r} publishes {s.variable!r}", field="variable")
        if action == "up":
            reply: pb.SubscribeReply = await self.peers(self.parent).broker.Subscribe(
                pb.SubscribeRequest(subscription=s), timeout=RPC_TIMEOUT_S * 3)
            if reply.admitted:
                doc = {"subscription_id": s.subscription_id, "subscriber": s.subscriber, "cloud": s.cloud}
                self.forwarded[s.subscription_id] = doc
                self.store.put("forwarded", s.subscription_id, doc)
            return reply
        assert pub is not None
        if s.type.kind and s.type != pub.type:
            raise TypeMismatch(f"{s.variable!r} is published with another type", field="type")
        sub = InterSub(s.subscription_id, s.subscriber, s.variable, s.cloud, s.edge_router,
                       [asdict(q) for q in qos], pub.variable_id, pub.interval_ms, pub.cloud,
                       pub.type.SerializeToString(), frames_per_s=pub.frames_per_s, attributes=dict(pub.attributes))
        async with self.lock:
            try:
                for q in qos:
                    sub.held += await self._admit_mode(sub, q, pub.edge_router)
                await commit_pieces(self.peers, self.tree.addresses(), sub.subscription_id, sub.held)
            except BaseException:
                await release_pieces(self.peers, self.tree.addresses(), self.books, sub.subscription_id, sub.held)
                raise
            self.subs[sub.subscription_id] = sub
            self.store.put("sub", sub.subscription_id, sub.to_json())
        return sub.reply()

    async def _admit_mode(self, sub: InterSub, q: Any, publisher_edge: str, generation: int = 0,
                          kept: Sequence[Held] = ()) -> list[Held]:
        """Plan and reserve the paths of one mode that ``kept`` (its pieces still in place) lacks: all
        ``q.redundancy`` of them for a new subscription, sharing no border router, no inter-cloud
        channel and no router inside a cloud but the clients' edge routers (docs/redundancy.md,
        "Across clouds"). Raises the refusal when they do not all fit."""
        k = max(1, q.redundancy)
        missing = [i for i in range(k) if i not in {h.path for h in kept}]
        if not missing:
            return []
        minimum: dict[str, float] = {}
        avoid = {r for routers in self.down.values() for r in routers}
        avoid.update(r for h in kept for r in h.border_routers())
        taken: dict[str, set[str]] = {}
        for h in kept:
            if h.kind != "channel":
                taken.setdefault(h.key_cloud, set()).update(h.routers)
        channels = [ch for ch in (*self.books.channels.values(), *self.tree.below)
                    if ch.router_a not in avoid and ch.router_b not in avoid]
        for attempt in (0, 1):
            usable = self.books.usable(q.mode, sub.variable_id, sub.pub_interval_ms, q.interval_ms)
            found = self._cloud_paths(channels, sub, len(missing), usable, minimum)
            if len(found) < len(missing):  # reserving unfiltered paths names the full channel (CapacityExceeded)
                found = self._cloud_paths(channels, sub, len(missing), None, minimum)
            if not found:
                raise NoFeasiblePath(f"no inter-cloud channels join {sub.pub_cloud!r} to {sub.cloud!r}"
                                     + (" beside the paths kept" if kept else ""), field="cloud",
                                     offer=Offer(max_redundancy=k - len(missing)) if kept else None)
            plan.check_redundancy(k, k - len(missing) + len(found))
            paths = []
            for i, hops in zip(missing, found, strict=False):
                budgets = plan.path_budgets(q.latency_ms, sub.pub_cloud, hops, minimum)
                paths.append((hops, plan.plan_segments(sub.pub_cloud, hops, budgets, publisher_edge=publisher_edge,
                                                       subscriber_edge=sub.edge_router, subscriber=sub.subscriber,
                                                       path=i, paths=k)))
            held, errors = await reserve_pieces(self.peers, self.tree.addresses(), self.tree.child_clouds, self.books,
                                                sub, q, paths, generation=generation, taken=taken)
            if not errors:
                return held
            await release_pieces(self.peers, self.tree.addresses(), self.books, sub.subscription_id, held)
            latency = [e for e in errors if e.reason == "LatencyUnattainable"]
            if attempt == 1 or len(latency) != len(errors):
                raise errors[0]
            for h in held:  # each cloud's minimum: the slowest of its reserved segments, or a refusal's offer
                if h.kind != "channel":
                    minimum[h.key_cloud] = max(minimum.get(h.key_cloud, 0.0), h.latency_ms)
            for e in latency:
                best = getattr(e, "offer", None)
                cloud = getattr(e, "cloud", "")
                if cloud and best is not None and best.best_latency_ms is not None:
                    minimum[cloud] = max(minimum.get(cloud, 0.0), best.best_latency_ms)
        raise AssertionError("unreachable")

    def _cloud_paths(self, channels: list[plan.InterChannel], sub: InterSub, n: int,
                     usable: Callable[[plan.Hop], bool] | None,
                     minimum: dict[str, float]) -> tuple[tuple[plan.Hop, ...], ...]:
        """``n`` disjoint cloud paths (fewer when fewer exist); one is the cloud-level Dijkstra."""
        if n == 1:
            hops = plan.cloud_path(channels, sub.pub_cloud, sub.cloud, usable=usable, crossing=minimum)
            return () if hops is None else (hops,)
        return plan.disjoint_cloud_paths(channels, sub.pub_cloud, sub.cloud, n, usable=usable, crossing=minimum)

    # -- healing (docs/redundancy.md, "Healing") ---------------------------------------------------
    async def list_variables(self, where: str, *, whole_hierarchy: bool) -> pb.ListVariablesReply:
        """The publications ``where`` matches below this broker, or, asked for the whole hierarchy, below
        the root (asked of this broker's parent; this subtree's alone, its parent named unreachable, when
        the parent does not answer). docs/queries.md, "Across clouds"."""
        if where.strip():  # a bad expression is the caller's fault, answered here, not by every child
            expressions.parse(where, field="where")
        if whole_hierarchy and self.parent:
            try:
                reply: pb.ListVariablesReply = await self.peers(self.parent).segments.ListVariables(
                    pb.ListVariablesRequest(where=where, whole_hierarchy=True), timeout=RPC_TIMEOUT_S * 2)
                return reply
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                    raise
                log.warning("parent broker %s: its parent %s did not list variables: %s", self.name, self.parent,
                            exc.details())
                publications, unreachable = await self.tree.list_variables(where)
                return pb.ListVariablesReply(publications=publications, unreachable=[*unreachable, self.parent])
        publications, unreachable = await self.tree.list_variables(where)
        return pb.ListVariablesReply(publications=publications, unreachable=unreachable)

    async def report_broken(self, cloud: str, sids: list[str], down: list[str]) -> tuple[int, int]:
        """A cloud below could not re-plan these inter-cloud subscriptions' segments inside itself, and
        these of its routers are down: plan the ones this broker holds again around every router known
        to be down, and pass the others on to the broker that planned them. (rerouted, unrerouted)."""
        self.down[cloud] = set(down)
        mine = [sid for sid in dict.fromkeys(sids) if sid in self.subs]
        up = [sid for sid in dict.fromkeys(sids) if sid in self.forwarded]
        if self.parent and (up or sids == []):
            try:
                reply = await self.peers(self.parent).segments.ReportBroken(pb.ReportBrokenRequest(
                    cloud=cloud, subscription_ids=up, down_routers=down), timeout=RPC_TIMEOUT_S * 3)
                self.rerouted += reply.rerouted
            except grpc.aio.AioRpcError as exc:
                log.warning("parent %s: could not pass broken subscriptions %s up: %s", self.name, up, exc.details())
        if not sids:  # routers came back: what could not be re-planned is tried again
            mine = [sid for sid in self.unrerouted if sid in self.subs]
        done = 0
        for sid in mine:
            if await self.reroute(sid):
                done += 1
                self.unrerouted.discard(sid)
            else:
                self.unrerouted.add(sid)
        return done, len(mine) - done

    async def reroute(self, sid: str) -> bool:
        """Plan an inter-cloud subscription again around the routers that are down. Its broken paths
        go first, whole: they are broken (a leaf could not re-plan one inside its cloud), and a new
        segment could not enter a router the old one still feeds (the loop-free tree rule). Its other
        paths stay as they are, untouched, and the new ones share nothing with them (docs/redundancy.md,
        "Across clouds"). The new pieces take a new generation of keys. What cannot be planned is tried
        again on a report that routers came back (``report_broken`` with no subscriptions); meanwhile
        the subscription keeps the paths that work. True when it has all its paths again."""
        async with self.lock:
            sub = self.subs.get(sid)
            if sub is None:
                return False
            pub = await self.tree.resolve(sub.variable)
            if pub is None:
                return False
            generation = 1 + max((h.generation for h in sub.held), default=0)
            down = {r for rs in self.down.values() for r in rs}
            broken = {(h.mode, h.path) for h in sub.held if down & ({*h.routers} | h.border_routers())}
            if not broken and all(q["redundancy"] <= 1 for q in sub.qos):
                # A leaf could not re-plan a segment for a reason other than a router down (a channel cut):
                # the one path goes. Of several paths, only those through a router down are known broken;
                # the others stay, and the missing ones are planned.
                broken = {(h.mode, h.path) for h in sub.held}
            old = [h for h in sub.held if (h.mode, h.path) in broken]
            sub.held = [h for h in sub.held if (h.mode, h.path) not in broken]
            await release_pieces(self.peers, self.tree.addresses(), self.books, sid, old)
            new: list[Held] = []
            try:
                for q in sub.qos:
                    kept = [h for h in sub.held if h.mode == q["mode"]]
                    new += await self._admit_mode(sub, ModeQoS(**q), pub.edge_router, generation, kept)
                await commit_pieces(self.peers, self.tree.addresses(), sid, new)
            except (GridStatError, grpc.aio.AioRpcError) as exc:
                await release_pieces(self.peers, self.tree.addresses(), self.books, sid, new)
                self.store.put("sub", sid, sub.to_json())
                log.warning("parent %s: %s could not be planned again around %s (%d of its paths kept): %s",
                            self.name, sid, sorted(down), len({(h.mode, h.path) for h in sub.held}), exc)
                return False
            sub.held = sorted([*sub.held, *new], key=lambda h: (h.mode, h.path))
            self.store.put("sub", sid, sub.to_json())
            self.rerouted += 1
            log.warning("parent %s: %s planned again around %s: %s", self.name, sid, sorted(down),
                        " ".join(r for h in new for r in h.routers))
            return True

    async def unsubscribe(self, sid: str) -> int:
        if sid in self.subs:
            async with self.lock:
                sub = self.subs.pop(sid)
                n = await release_pieces(self.peers, self.tree.addresses(), self.books, sid, sub.held)
                self.store.delete("sub", sid)
            return n
        if sid in self.forwarded:
            reply = await self.peers(self.parent).broker.Unsubscribe(pb.UnsubscribeRequest(subscription_id=sid),
                                                                     timeout=RPC_TIMEOUT_S * 3)
            del self.forwarded[sid]
            self.store.delete("forwarded", sid)
            return int(reply.routes_removed)
        raise NotFound(f"no inter-cloud subscription {sid!r} at {self.name!r}", field="subscription_id")

    # -- segments asked by an ancestor -------------------------------------------------------------
    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, (d, _) in self.pending.items() if d <= now]:
            del self.pending[key]
            mode = int(key.split(".m")[-1].split(".")[0])
            self.books.release(key, mode)

    def route(self, key: pb.SegmentKey) -> tuple[str | None, str]:
        """The child a segment key goes to (None: a channel registered here) and the local reservation key."""
        local = channel_key(key.subscription_id, key.mode, key.redundant_index, key.cloud, key.path)
        if ">" in key.cloud:
            ca, cb = key.cloud.split(">", 1)
            return plan.channel_owner(ca, cb, self.tree.child_clouds), local
        child = plan.child_for(key.cloud, self.tree.child_clouds)
        if child is None:
            raise NotFound(f"cloud {key.cloud!r} is not under {self.name!r}", field="key.cloud")
        return child, local

    def reserve_channel(self, r: pb.ReserveSegmentRequest, local: str) -> pb.ReserveSegmentReply:
        self._expire()
        ca, cb = r.key.cloud.split(">", 1)
        hop = next((x for ch in self.books.channels.values() for x in ch.hops()
                    if (x.src_cloud, x.src_router, x.dst_cloud, x.dst_router) == (ca, r.from_router, cb,
                                                                                  r.to_router)), None)
        if hop is None:
            raise NotFound(f"no inter-cloud channel {r.from_router}->{r.to_router} at {self.name!r}", field="key")
        try:
            self.books.reserve(local, r.key.mode, hop, r.variable_id, r.pub_interval_ms, r.qos.interval_ms)
        except ADMISSION_ERRORS as exc:
            return pb.ReserveSegmentReply(reserved=False, rejection=rejection(exc))
        self.pending[local] = (time.monotonic() + (r.ttl_ms or 10_000) / 1000,
                               {"key": local, "mode": r.key.mode, "hop": asdict(hop), "variable_id": r.variable_id,
                                "pub_interval_ms": r.pub_interval_ms, "interval_ms": r.qos.interval_ms})
        return pb.ReserveSegmentReply(reserved=True, path=pb.Path(latency_ms=hop.latency_ms))

    def finish_channel(self, key: pb.SegmentKey, local: str, *, commit: bool) -> bool:
        self._expire()
        pending = self.pending.pop(local, None)
        if commit:
            if pending is None and local not in self.books.reservations(key.mode).held:
                raise NotFound(f"no reserved channel {local!r} (aborted or expired)", field="key")
            if pending is not None:
                self.store.put("chanres", local, pending[1])
            return True
        self.store.delete("chanres", local)
        return self.books.release(local, key.mode)

    def view(self) -> pb.TopologyView:
        own = [pb.InterCloudChannel(cloud_a=c.cloud_a, router_a=c.router_a, cloud_b=c.cloud_b, router_b=c.router_b,
                                    bandwidth_bps=int(c.bandwidth_bps), latency_ms=c.latency_ms)
               for c in self.books.channels.values()]
        below = [pb.InterCloudChannel(cloud_a=c.cloud_a, router_a=c.router_a, cloud_b=c.cloud_b, router_b=c.router_b,
                                      bandwidth_bps=int(c.bandwidth_bps), latency_ms=c.latency_ms)
                 for c in self.tree.below]
        return pb.TopologyView(broker=self.name, parent=self.parent, children=list(self.tree.children.values()),
                               inter_cloud_channels=own + below, topology_version=self.version,
                               clouds=sorted(self.tree.clouds()))


class ParentServicer(pb_grpc.QoSBrokerServicer):
    """The QoSBroker service of a parent broker: the hierarchy's calls, over ``ParentBroker`` and its
    ``modes`` and ``flooding`` parts; a leaf's own calls are answered UNIMPLEMENTED."""

    def __init__(self, broker: ParentBroker) -> None:
        self.broker = broker

    async def _leaf_only(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{type(request).__name__[:-7]} {_LEAF_ONLY}")

    RegisterClient = UnregisterClient = RegisterPublication = UnregisterPublication = _leaf_only
    ChangeSubscription = ListPublications = AddRouter = RemoveRouter = AddChannel = RemoveChannel = _leaf_only
    SubscribeQuery = UnsubscribeQuery = ListQueries = _leaf_only

    def _topology_reply(self) -> pb.TopologyReply:
        return pb.TopologyReply(topology_version=self.broker.version)

    async def Subscribe(self, request: pb.SubscribeRequest, context: Any) -> pb.SubscribeReply:
        async def call() -> pb.SubscribeReply:
            try:
                return await self.broker.subscribe(request.subscription)
            except ADMISSION_ERRORS as exc:
                return pb.SubscribeReply(admitted=False, subscription=request.subscription, rejection=rejection(exc))
            except GridStatError as exc:
                if exc.reason in ("NoFeasiblePath", "LatencyUnattainable", "CapacityExceeded"):
                    return pb.SubscribeReply(admitted=False, subscription=request.subscription,
                                             rejection=rejection(exc))
                raise
        return await rpc.guarded(context, call)

    async def Unsubscribe(self, request: pb.UnsubscribeRequest, context: Any) -> pb.UnsubscribeReply:
        async def call() -> pb.UnsubscribeReply:
            return pb.UnsubscribeReply(routes_removed=await self.broker.unsubscribe(request.subscription_id))
        return await rpc.guarded(context, call)

    async def ListSubscriptions(self, request: pb.ListSubscriptionsRequest,
                                context: Any) -> pb.ListSubscriptionsReply:
        who = request.subscriber
        return pb.ListSubscriptionsReply(subscriptions=[s.reply() for s in self.broker.subs.values()
                                                        if not who or s.subscriber == who])

    async def AddChildBroker(self, request: pb.AddChildBrokerRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.add_child(request.child)
            return self._topology_reply()
        return await rpc.guarded(context, call)

    async def RemoveChildBroker(self, request: pb.RemoveChildBrokerRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.remove_child(request.name)
            return self._topology_reply()
        return await rpc.guarded(context, call)

    async def AddInterCloudChannel(self, request: pb.AddInterCloudChannelRequest, context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.add_channel(request.channel)
            return self._topology_reply()
        return await rpc.guarded(context, call)

    async def RemoveInterCloudChannel(self, request: pb.RemoveInterCloudChannelRequest,
                                      context: Any) -> pb.TopologyReply:
        async def call() -> pb.TopologyReply:
            await self.broker.remove_channel(request.router_a, request.router_b)
            return self._topology_reply()
        return await rpc.guarded(context, call)

    async def GetTopology(self, request: pb.GetTopologyRequest, context: Any) -> pb.TopologyView:
        await self.broker.tree.refresh()
        return self.broker.view()

    async def Health(self, request: pb.BrokerHealthRequest, context: Any) -> pb.BrokerHealthReply:
        return pb.BrokerHealthReply(serving=True, broker=self.broker.name, leaf=False,
                                    subscriptions=len(self.broker.subs))

    # -- operating modes (parent_modes.ParentModes) ------------------------------------------------
    async def DefineMode(self, request: pb.DefineModeRequest, context: Any) -> pb.ModeInfo:
        async def call() -> pb.ModeInfo:
            pm = self.broker.modes
            mode, name = await pm.define(request.mode, request.name)
            return pb.ModeInfo(mode=mode, name=name, current=mode == pm.current_mode)
        return await rpc.guarded(context, call)

    async def ListModes(self, request: pb.ListModesRequest, context: Any) -> pb.ListModesReply:
        async def call() -> pb.ListModesReply:
            return self.broker.modes.list()
        return await rpc.guarded(context, call)

    async def ChangeMode(self, request: pb.ChangeModeRequest, context: Any) -> pb.ChangeModeReply:
        async def call() -> pb.ChangeModeReply:
            pm = self.broker.modes
            return await pm.change(modes.resolve(pm.modes, mode=request.mode, name=request.name))
        return await rpc.guarded(context, call)

    # -- limited flooding (parent_flooding.ParentFlooding) -------------------------------------------
    async def SetFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            holder = await self.broker.flooding.set(request)
            return pb.BrokerFloodingReply(flooding=entries_pb([holder]))
        return await rpc.guarded(context, call)

    async def RemoveFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            holder = await self.broker.flooding.remove(request)
            return pb.BrokerFloodingReply(flooding=entries_pb([] if holder is None else [holder]))
        return await rpc.guarded(context, call)

    async def ListFlooding(self, request: pb.ListFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        return pb.BrokerFloodingReply(flooding=entries_pb(self.broker.flooding.list()))

    async def SetFloodAll(self, request: pb.SetFloodAllRequest, context: Any) -> pb.BrokerFloodingReply:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "SetFloodAll is a leaf broker call: a flood-all "
                            "subscription is set at the subscriber's own cloud (through its edge router)")
        raise AssertionError("unreachable: abort raises")


class ParentSegmentsServicer(pb_grpc.SegmentsServicer):
    """Segments from an ancestor: forwarded to the child holding ``key.cloud``, or a channel registered here."""

    def __init__(self, broker: ParentBroker) -> None:
        self.broker = broker

    async def _route(self, key: pb.SegmentKey) -> tuple[str | None, str]:
        try:
            return self.broker.route(key)
        except GridStatError:
            await self.broker.tree.refresh()
            return self.broker.route(key)

    async def ReserveSegment(self, request: pb.ReserveSegmentRequest, context: Any) -> pb.ReserveSegmentReply:
        async def call() -> pb.ReserveSegmentReply:
            child, local = await self._route(request.key)
            if child is None:
                return self.broker.reserve_channel(request, local)
            reply: pb.ReserveSegmentReply = await self.broker.peers(self.broker.children[child].address) \
                .segments.ReserveSegment(request, timeout=RPC_TIMEOUT_S)
            return reply
        return await rpc.guarded(context, call)

    async def _finish(self, request: pb.SegmentKey, context: Any, *, commit: bool) -> pb.SegmentReply:
        async def call() -> pb.SegmentReply:
            child, local = await self._route(request)
            if child is None:
                return pb.SegmentReply(ok=self.broker.finish_channel(request, local, commit=commit))
            seg = self.broker.peers(self.broker.children[child].address).segments
            reply: pb.SegmentReply = await (seg.CommitSegment if commit else seg.AbortSegment)(
                request, timeout=RPC_TIMEOUT_S)
            return reply
        return await rpc.guarded(context, call)

    async def CommitSegment(self, request: pb.SegmentKey, context: Any) -> pb.SegmentReply:
        return await self._finish(request, context, commit=True)

    async def AbortSegment(self, request: pb.SegmentKey, context: Any) -> pb.SegmentReply:
        return await self._finish(request, context, commit=False)

    async def ReportBroken(self, request: pb.ReportBrokenRequest, context: Any) -> pb.ReportBrokenReply:
        async def call() -> pb.ReportBrokenReply:
            done, left = await self.broker.report_broken(request.cloud, list(request.subscription_ids),
                                                         list(request.down_routers))
            return pb.ReportBrokenReply(rerouted=done, unrepaired=left)

        return await rpc.guarded(context, call)

    async def ListVariables(self, request: pb.ListVariablesRequest, context: Any) -> pb.ListVariablesReply:
        async def call() -> pb.ListVariablesReply:
            return await self.broker.list_variables(request.where, whole_hierarchy=request.whole_hierarchy)
        return await rpc.guarded(context, call)

    async def ResolveVariable(self, request: pb.ResolveVariableRequest, context: Any) -> pb.RegisterPublicationReply:
        async def call() -> pb.RegisterPublicationReply:
            pub = await self.broker.tree.resolve(request.variable)
            if pub is None:
                raise UnknownVariable(f"no cloud under {self.broker.name!r} publishes {request.variable!r}",
                                      field="variable")
            return pb.RegisterPublicationReply(publication=pub)
        return await rpc.guarded(context, call)
