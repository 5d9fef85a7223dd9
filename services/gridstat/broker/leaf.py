"""The leaf QoS broker of one cloud: a front object over its parts (dissertation 3.3.1).

``LeafBroker`` owns one :class:`~gridstat.broker.cloud.Cloud` (what it knows of its cloud, the
store, the router links, the supervisor and the lock) and the parts that act on it, each owning
its own piece of state:

* ``subscriptions`` (``admitting.SubscriptionCoordinator``): what happens when a subscription
  arrives, changes or goes; the group commit and the admission controller's link;
* ``modes`` (``modes.ModeCoordinator``): the mode registry, the current mode, the five-phase change;
* ``flooding`` (``flooding.FloodingCoordinator``): the flooded variables and flood-all subscribers;
* ``condensation`` (``condensing.CondensationCoordinator``): the placed condensation functions;
* ``segments`` (``segments.SegmentCoordinator``): inter-cloud channels and reserved segments;
* ``queries`` (``querying.QueryCoordinator``): standing query subscriptions (docs/queries.md).

The front itself keeps the lifecycle, the restore from the store, the topology (routers and
channels), the clients and publications, the channel keys and the authorization checks, and
wires the parts into the supervisor's hooks. The gRPC servicers (``service``) call the parts
directly, except for the commands telemetry records (``subscribe``, ``change_subscription``,
``change_mode``): those are the front's own, so that ``telemetry.recording.BrokerRecorder`` can
wrap them on the instance (docs/telemetry.md).

A command decides on ``CloudState`` under one lock (pure: path search, reservations, the
loop-free tree rule), writes the change to the routers (in two phases, through the group commit
for subscriptions) and writes it through to SQLite (``store``) before answering. If the routers
cannot take a change, the state change is undone, so nothing is ever half-installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gridstat.broker import installer
from gridstat.broker.admitting import SubscriptionCoordinator
from gridstat.broker.authz import IdentityBinding, PolicyFile
from gridstat.broker.channelkeys import ChannelKeys
from gridstat.broker.cloud import Cloud
from gridstat.broker.condensing import CondensationCoordinator
from gridstat.broker.consulting import advertised_rate
from gridstat.broker.flooding import FloodingCoordinator
from gridstat.broker.gate import AdmissionGate
from gridstat.broker.healing import LinkWatch, PathRepair
from gridstat.broker.installer import RouterLink
from gridstat.broker.modes import ModeChange, ModeCoordinator
from gridstat.broker.querying import QueryCoordinator
from gridstat.broker.segments import SegmentCoordinator
from gridstat.broker.state import (
    Client,
    CloudState,
    DesiredChannel,
    ModeQoS,
    RouterEndpoint,
    SubscriptionRecord,
)
from gridstat.broker.store import BrokerStore, record_from_json, var_from_json, var_to_json
from gridstat.broker.supervisor import RouterSupervisor
from gridstat.broker.topology import RouterRole
from gridstat.core.access import Grants
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable, TypeSpec, VariableRegistry
from gridstat.core.tls import TlsFiles
from gridstat.errors import NotFound, Unauthorized, ValidationError
from gridstat.v1 import router_pb2 as rpb

if TYPE_CHECKING:
    from gridstat.broker.delegation import UpLink

log = logging.getLogger(__name__)


#: At most this many attributes per router, keys 1-64 and values 0-256 characters (broker.proto RouterInfo).
MAX_ROUTER_ATTRIBUTES = 16


def check_router_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """A router's attributes as a plain dict, or a ValidationError naming the entry at fault."""
    if len(attributes) > MAX_ROUTER_ATTRIBUTES:
        raise ValidationError(f"a router has at most {MAX_ROUTER_ATTRIBUTES} attributes, not {len(attributes)}",
                              field="router.attributes")
    for key, value in attributes.items():
        if not 1 <= len(key) <= 64 or not key.isprintable():
            raise ValidationError(f"router attribute name {key!r:.80} must be 1-64 printable characters",
                                  field="router.attributes")
        if len(value) > 256 or not value.isprintable():
            raise ValidationError(f"router attribute {key!r} must be at most 256 printable characters",
                                  field=f"router.attributes.{key}")
    return dict(sorted(attributes.items()))


class LeafBroker:
    """One cloud's leaf QoS broker: the front over its ``cloud`` and its parts (module docstring)."""

    def __init__(self, name: str, store: BrokerStore, *, tls: TlsFiles | None = None,
                 supervise_interval_s: float = 0.5, forwarding_ms: float = 1.0, variable_id_base: int = 1) -> None:
        self.name = name
        self.tls = tls
        self.supervise_interval_s = supervise_interval_s
        # Variable ids travel on the wire across clouds, so each cloud assigns from its own block.
        state = CloudState(name, forwarding_ms=forwarding_ms, registry=VariableRegistry(first_id=variable_id_base))
        links: dict[str, RouterLink] = {}
        lock = asyncio.Lock()
        #: The broker's state, handed to every part.
        self.cloud = Cloud(state, store, links, lock,
                           RouterSupervisor(state, links, lock, interval_s=supervise_interval_s))
        #: The parts, each owning its piece of state (module docstring).
        self.modes = ModeCoordinator(self.cloud)
        self.subscriptions = SubscriptionCoordinator(self.cloud, self.modes)
        self.flooding = FloodingCoordinator(self.cloud, self.modes)
        self.condensation = CondensationCoordinator(self.cloud, self.subscriptions, self.modes)
        self.segments = SegmentCoordinator(self.cloud, self.subscriptions)
        self.healing = PathRepair(self.cloud, self.subscriptions)
        self.queries = QueryCoordinator(self.cloud, self.subscriptions, authorize=lambda subscriber, variable:
                                        self.authorize("subscribe", subscriber, variable, field="query.where"))
        self.subscriptions.on_unregistered.append(self.queries.publication_gone)
        self.link_watch = LinkWatch(self.cloud, self.healing)
        # The supervisor's hooks: expired segments go before each pass; a rebuilt router is put in
        # the current mode, gets its condensation slots before its routes, then its flooding
        # settings and its neighbours' keys; a router that moved is followed.
        supervisor = self.cloud.supervisor
        supervisor.before_pass = self.segments.expire
        supervisor.mode = lambda: self.modes.current
        supervisor.prepare = self.condensation.prepare_router
        supervisor.on_reconciled.append(self.flooding.reconcile_router)
        supervisor.on_reconciled.append(self._rekey_neighbours)
        supervisor.on_moved = self._router_moved
        # A router that stops answering has its paths re-planned around it (docs/redundancy.md, "Healing").
        supervisor.on_down.append(self.healing.router_down)
        supervisor.on_up.append(self.healing.router_up)
        #: Routers that announced their start (``announce_router``) since this broker started.
        self.announced = 0
        self._task: asyncio.Task[None] | None = None
        self._started = self._closed = False
        #: The parent broker inter-cloud subscriptions are delegated to (``--parent``), if any.
        self.uplink: UpLink | None = None
        #: Event channel keys (``--channel-auth``; broker.channelkeys), None = unauthenticated channels.
        self.channel_keys: ChannelKeys | None = None
        #: Who may publish and subscribe to what (``--policy``; broker.authz), None = everyone everything.
        self.policy: PolicyFile | None = None
        #: The roles of certificate identities (core.access), set by the gRPC server that checks them.
        self.grants: Callable[[], Grants] = Grants
        #: Client names bound to mTLS certificate identities (broker.authz); None = names as declared.
        self.identity: IdentityBinding | None = None
        #: The bound on concurrent admissions, per caller and in all (broker.gate; ``--admission-limit``).
        self.gate = AdmissionGate()

    # -- views of the cloud's state ------------------------------------------------------------
    @property
    def state(self) -> CloudState:
        """What the broker knows of its cloud (``cloud.state``)."""
        return self.cloud.state

    @property
    def store(self) -> BrokerStore:
        return self.cloud.store

    @property
    def supervisor(self) -> RouterSupervisor:
        return self.cloud.supervisor

    @property
    def current_mode(self) -> int:
        return self.modes.current

    @property
    def mode_changing(self) -> bool:
        return self.modes.changing

    @property
    def rebuilds(self) -> int:
        """Routers rebuilt after a restart since this broker started."""
        return self.supervisor.rebuilds

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._load()
        uplink = self.uplink
        if uplink is not None:  # segments with no way around a failure here are planned again above
            async def report(sids: list[str], down: list[str]) -> None:
                await uplink.report_broken(self.cloud, sids, down)

            self.healing.report = report
            self.queries.uplink = uplink  # queries match the other clouds' variables too (docs/queries.md)
        self._task = create_guarded_task(self.supervisor.run(), name=f"broker-{self.name}-supervise")
        self.queries.replan_all()
        self.queries.start()
        for name in self.cloud.links:
            self.link_watch.follow(name)

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.link_watch.stop()
        await self.queries.close()
        for link in self.cloud.links.values():
            await link.close()
        if self.uplink is not None:
            await self.uplink.close()
        if self.subscriptions.admission is not None:
            await self.subscriptions.admission.close()
        self.store.close()

    def _load(self) -> None:
        """Rebuild the state from the durable store (a restarted broker); each part restores its own."""
        cloud, st, store = self.cloud, self.cloud.state, self.cloud.store
        for d in store.all("routers"):
            st.topology.add_router(d["name"], RouterRole(d["role"]), d["capacity_eps"])
            ep = RouterEndpoint(d["name"], d["router_id"], d["control_address"], d["event_host"], d["event_port"])
            st.endpoints[ep.name] = ep
            st.router_attributes[ep.name] = dict(d.get("attributes") or {})
            cloud.links[ep.name] = self._new_link(ep)
        for d in store.all("channels"):
            st.topology.add_channel(d["src"], d["dst"], bandwidth_bps=d["bandwidth_bps"], latency_ms=d["latency_ms"],
                                    event_capacity_eps=d.get("event_capacity_eps"), name=d["name"])
        for d in store.all("clients"):
            st.clients[(d["kind"], d["name"])] = Client.from_dict(d)
        self.segments.load()
        for d in store.all("publications"):
            var = st.registry.restore(var_from_json(d))
            if d.get("max_rate_eps"):
                cloud.max_rates[var.full_name] = float(d["max_rate_eps"])
        for d in store.all("subscriptions"):
            st.restore(record_from_json(d))
        self.condensation.load()
        self.queries.load()
        st.next_client_id = int(store.get_meta("next_client_id") or st.next_client_id)
        st.next_subscription = int(store.get_meta("next_subscription") or st.next_subscription)
        self.modes.load()
        self.flooding.load()
        if st.subscriptions or st.endpoints:
            log.info("broker %s restored %d routers, %d publications, %d subscriptions", self.name,
                     len(st.endpoints), len(st.registry), len(st.subscriptions))

    # -- router links and channel keys -----------------------------------------------------------
    def _new_link(self, ep: RouterEndpoint) -> RouterLink:
        link = RouterLink(ep, self.tls)
        link.keys = lambda d: self._channel_key(ep.router_id, d, ep.name)
        return link

    def _channel_key(self, router_id: int, d: DesiredChannel, router: str = "") -> bytes:
        if d.kind == "router" and d.level > 1:
            # An inter-cloud channel: its key is the one the registering (parent) broker chose, the
            # same at both border routers; it does not derive from this cloud's master secret.
            f = self.state.foreign.get((router, d.name))
            return bytes.fromhex(f.key_hex) if f is not None and f.key_hex else b""
        keys = self.channel_keys
        if keys is None:
            return b""
        # Every client channel, the output channel of a condensation function in a router slot too:
        # the slot signs its output with that channel's key (router.condensation).
        return keys.for_channel(router_id, d)

    async def _rekey_neighbours(self, link: RouterLink) -> int:
        """After a router is rebuilt (it may have restarted, its sequence numbers from 1 again), its
        neighbours' channels to it get their key again, which restarts their replay windows."""
        if self.channel_keys is None:
            return 0
        n = 0
        for name, other in list(self.cloud.links.items()):
            if name == link.name or name in self.state.down:
                continue
            for d in self.state.desired_channels(name):
                if d.kind == "router" and d.name == link.name and other.key_for(d):
                    try:
                        await other.stub.UpdateChannel(rpb.UpdateChannelRequest(
                            name=d.name, level=d.level, flood_all=d.flood_all, key=other.key_for(d)),
                            timeout=installer.RPC_TIMEOUT_S)
                        n += 1
                    except Exception as exc:  # the neighbour is reconciled by its own check
                        log.warning("re-keying %s on %s: %s", d.name, name, exc)
        return n

    def bind_identity(self, context: Any, client: str, *, field: str) -> None:
        """Raise Unauthorized if the request's client name is not its certificate's identity (mTLS)."""
        if self.identity is not None:
            self.identity.check(context, client, field=field)

    def listing_scope(self, context: Any) -> tuple[str, ...] | None:
        """The client identities whose subscriptions the caller may see; None = all (docs/security.md,
        "Control by role"; everyone's in insecure mode)."""
        if self.identity is None:
            return None
        return self.identity.listing_scope(context, lambda ids: self.grants().roles_of(ids))

    def authorize(self, action: str, client: str, variable: str, *, field: str) -> None:
        """Raise Unauthorized if the policy refuses ``client`` to ``action`` the variable."""
        if self.policy is not None:
            self.policy.check(action, client, variable, field=field)

    def client_key(self, edge_router: str, client_id: int) -> bytes:
        """The key of a client's event channel at its edge router (b'' when clients are not keyed)."""
        ep = self.state.endpoints.get(edge_router)
        if self.channel_keys is None or not self.channel_keys.clients or ep is None:
            return b""
        return self.channel_keys.client(ep.router_id, client_id)

    # -- topology ----------------------------------------------------------------------------
    async def add_router(self, ep: RouterEndpoint, role: RouterRole, capacity_eps: float,
                         attributes: Mapping[str, str] | None = None) -> None:
        """Add a router (or, registered already, follow its new address; ``attributes``, when given,
        replace what is held: docs/topology.md, "Routers")."""
        if ":" in ep.name or "/" in ep.name:
            raise ValidationError(f"router name {ep.name!r} must not contain ':' or '/'", field="router.name")
        if not 1 <= ep.router_id < 1_000_000:
            raise ValidationError(f"router id {ep.router_id} must be 1..999999 (client ids start at 1000000)",
                                  field="router.router_id")
        attrs = check_router_attributes(attributes or {})
        held = self.state.endpoints.get(ep.name)
        if held is not None:
            if attributes is not None and attrs != self.state.router_attributes.get(ep.name, {}):
                router = self.state.topology.routers[ep.name]
                async with self.cloud.lock:
                    self.state.router_attributes[ep.name] = attrs
                    with self.store.transaction():
                        self.store.put_router(held, router.role.value, router.capacity_eps, attrs)
            await self._readdress_router(held, ep, role)
            return
        if any(e.router_id == ep.router_id for e in self.state.endpoints.values()):
            raise ValidationError(f"router id {ep.router_id} is taken", field="router.router_id")
        async with self.cloud.lock:
            self.state.topology.add_router(ep.name, role, capacity_eps)
            self.state.endpoints[ep.name] = ep
            self.state.router_attributes[ep.name] = attrs
            self.cloud.links[ep.name] = self._new_link(ep)
            # Not used for paths until the supervisor has reached it and opened its channels.
            self.state.down.add(ep.name)
            self.cloud.resources_version += 1
            with self.store.transaction():
                self.store.put_router(ep, role.value, capacity_eps, attrs)
        await self.supervisor.check(ep.name)
        if self._started:
            self.link_watch.follow(ep.name)

    async def _readdress_router(self, held: RouterEndpoint, ep: RouterEndpoint, role: RouterRole) -> None:
        """A registered router announced again, maybe at a new address (a rescheduled pod,
        docs/kubernetes.md#what-gets-installed): its paths stay; its link and its neighbours'
        channels move to the new address, and the supervisor rebuilds it there."""
        router = self.state.topology.routers[ep.name]
        if held.router_id != ep.router_id:
            raise ValidationError(f"router {ep.name!r} is registered with id {held.router_id}, not {ep.router_id}",
                                  field="router.router_id")
        if router.role is not role:
            raise ValidationError(f"router {ep.name!r} is registered as {router.role.value}, not {role.value}",
                                  field="router.role")
        if (held.control_address, held.event_host, held.event_port) == \
                (ep.control_address, ep.event_host, ep.event_port):
            return
        async with self.cloud.lock:
            self.state.endpoints[ep.name] = ep
            old = self.cloud.links.get(ep.name)
            self.cloud.links[ep.name] = self._new_link(ep)
            self.state.down.add(ep.name)
            self.cloud.resources_version += 1
            with self.store.transaction():
                self.store.put_router(ep, role.value, router.capacity_eps,
                                      self.state.router_attributes.get(ep.name))
        log.info("broker %s: router %s moved to %s:%d", self.name, ep.name, ep.event_host, ep.event_port)
        if old is not None:
            await old.close()
        # Its neighbours' channels point at the new address before it is rebuilt: its rebuild makes it
        # Ready, and a rollout restarts the next router then (docs/kubernetes.md#upgrades), which must
        # find the paths through this one whole again, not waiting for the supervisor's next pass.
        topo = self.state.topology
        for neighbour in sorted({*topo.out_channels(ep.name), *topo.in_channels(ep.name)}):
            await self.supervisor.reconcile_now(neighbour)
        await self.supervisor.check(ep.name)

    async def _router_moved(self, name: str, event_host: str, event_port: int) -> None:
        """A router reports its events now go to another address (``--advertise-host``, the restarted
        pod's IP) before anyone registered it there: move it, and point its neighbours at it, before
        the supervisor rebuilds it (which makes it Ready; docs/kubernetes.md#upgrades)."""
        async with self.cloud.lock:
            held = self.state.endpoints.get(name)
            if held is None or (held.event_host, held.event_port) == (event_host, event_port):
                return
            ep = dataclasses.replace(held, event_host=event_host, event_port=event_port)
            self.state.endpoints[name] = ep
            self.cloud.resources_version += 1
            router = self.state.topology.routers[name]
            with self.store.transaction():
                self.store.put_router(ep, router.role.value, router.capacity_eps,
                                      self.state.router_attributes.get(name))
        log.info("broker %s: router %s reports its events at %s:%d; moved", self.name, name, event_host, event_port)
        topo = self.state.topology
        for neighbour in sorted({*topo.out_channels(name), *topo.in_channels(name)}):
            await self.supervisor.reconcile_now(neighbour)

    async def announce_router(self, name: str) -> tuple[bool, bool]:
        """A router says it has started: check it now, and rebuild it if it restarted, instead of at
        its next health check (docs/redundancy.md, "Healing"). (known, rebuilt)."""
        link = self.cloud.links.get(name)
        if link is None:
            return False, False
        self.announced += 1
        boot_id = link.boot_id
        if not link.up:  # it was seen down: its channel may be waiting out a reconnect back-off
            await link.reconnect()
        await self.supervisor.check(name)
        return True, link.boot_id != boot_id and link.up

    async def remove_router(self, name: str) -> None:
        async with self.cloud.lock:
            used = [r.subscription_id for r in self.state.subscriptions.values()
                    if any(name in p.routers for _, paths in r.paths for p in paths)]
            if used:
                raise ValidationError(f"router {name!r} carries subscriptions {used[:5]}; remove them first",
                                      field="name")
            removed = self.state.topology.remove_router(name)
            self.state.endpoints.pop(name, None)
            self.state.router_attributes.pop(name, None)
            self.cloud.resources_version += 1
            link = self.cloud.links.pop(name, None)
            with self.store.transaction():
                self.store.delete("routers", name)
                for ch in removed:
                    self.store.delete("channels", ch.name)
        if link is not None:
            await link.close()
        for ch in removed:
            self.supervisor.mark_dirty(ch.src if ch.src != name else ch.dst)

    async def add_channel(self, a: str, b: str, *, bandwidth_bps: float, latency_ms: float,
                          capacity_eps: float | None = None, both: bool = True) -> None:
        async with self.cloud.lock:
            topo = self.state.topology
            for end, what in ((a, "a"), (b, "b")):
                if end not in topo.routers:
                    raise NotFound(f"channel end {what}={end!r} is not a router of cloud {self.name!r}",
                                   field=f"channel.{what}")
            pairs = [(a, b), (b, a)] if both else [(a, b)]
            for src, dst in pairs:
                if dst in topo.out_channels(src):
                    raise ValidationError(f"routers {src!r} -> {dst!r} are already joined", field="channel")
            added = [topo.add_channel(src, dst, bandwidth_bps=bandwidth_bps, latency_ms=latency_ms,
                                      event_capacity_eps=capacity_eps) for src, dst in pairs]
            self.cloud.resources_version += 1
            with self.store.transaction():
                for ch in added:
                    self.store.put("channels", ch.name, {"name": ch.name, "src": ch.src, "dst": ch.dst,
                                                         "bandwidth_bps": ch.bandwidth_bps, "latency_ms": ch.latency_ms,
                                                         "event_capacity_eps": ch.event_capacity_eps})
        # Open the router-side channels now, so that a subscription right after can use them.
        await self.supervisor.reconcile_now(a)
        await self.supervisor.reconcile_now(b)

    async def remove_channel(self, a: str, b: str, *, both: bool = True) -> None:
        async with self.cloud.lock:
            topo = self.state.topology
            names = [topo.channel_between(src, dst).name for src, dst in ([(a, b), (b, a)] if both else [(a, b)])]
            for r in self.state.subscriptions.values():
                for _, paths in r.paths:
                    for p in paths:
                        for u, w in zip(p.routers, p.routers[1:], strict=False):
                            if topo.channel_between(u, w).name in names:
                                raise ValidationError(f"channel {u}->{w} carries subscription {r.subscription_id}",
                                                      field="channel")
            with self.store.transaction():
                for n in names:
                    topo.remove_channel(n)
                    self.store.delete("channels", n)
            self.cloud.resources_version += 1
        await self.supervisor.reconcile_now(a)
        await self.supervisor.reconcile_now(b)

    # -- clients and publications --------------------------------------------------------------
    async def register_client(self, name: str, kind: str, edge_router: str, host: str = "", port: int = 0,
                              *, first_time: bool = True, also: bool = False) -> tuple[int, bool]:
        """Register a client at its first edge router; with ``also``, attach a registered one at one more
        (a multi-homed client, docs/redundancy.md "Multi-homed clients": nothing it holds is dropped)."""
        st, store = self.state, self.store
        async with self.cloud.lock:
            self.condensation.refuse_publisher(name, kind)
            old = st.clients.get((kind, name))
            known = old is not None and edge_router in old.edge_routers and \
                old.address_at(edge_router) == (host, port)
            if old is not None and known and (also or not first_time) and (also or old.edge_router == edge_router):
                return old.client_id, False  # asked again (a client following its edge): nothing changes
            restarted = False
            if old is not None and first_time and not also:
                # A first-time registration of a known client means it crashed (dissertation 3.7):
                # what it held before is removed, its other edge routers too (it attaches again).
                restarted = True
                await self._drop_client_state(old.name, kind)
                for gone in old.edge_routers[1:]:
                    self.supervisor.mark_dirty(gone)
                st.clients[(kind, name)] = dataclasses.replace(old, also=())
            client = st.register_client(name, kind, edge_router, host, port, also=also)
            with store.transaction():
                store.put_client(client)
                self.cloud.save_counters()
            if old is not None and not also and old.edge_router != edge_router:
                self.supervisor.mark_dirty(old.edge_router)
        link = self.cloud.links.get(edge_router)
        same = known and not restarted
        if link is not None and edge_router not in st.down and not same:
            try:
                if await installer.ensure_channel(link, st.desired_channel(edge_router, client.channel)):
                    self.supervisor.mark_dirty(edge_router)  # the channel was replaced: put its routes back
            except Exception as exc:  # the supervisor's reconciliation opens it later
                log.warning("opening %s on %s: %s", client.channel, edge_router, exc)
                self.supervisor.mark_dirty(edge_router)
        return client.client_id, restarted

    async def _drop_client_state(self, name: str, kind: str) -> None:
        """What a client held goes with it (under the lock): a subscriber's subscriptions and flood-all
        subscription, a publisher's publications and their subscriptions."""
        st = self.state
        if kind == "subscriber":
            for sid in [r.subscription_id for r in st.subscriptions.values() if r.subscriber == name]:
                await self.subscriptions.unsubscribe_locked(sid)
            self.flooding.forget_flood_all(name)
            self.queries.subscriber_gone(name)
        else:
            for var in [v for v in st.registry if v.publisher == name]:
                await self.subscriptions.unregister_publication_locked(var.full_name)

    async def unregister_client(self, name: str, kind: str) -> int:
        st = self.state
        async with self.cloud.lock:
            client = st.client(kind, name)
            before = len(st.subscriptions)
            await self._drop_client_state(name, kind)
            del st.clients[(kind, name)]
            with self.store.transaction():
                self.store.delete("clients", f"{kind}/{name}")
            removed = before - len(st.subscriptions)
        for router in client.edge_routers:
            await self.supervisor.reconcile_now(router)
        return removed

    async def register_publication(self, publisher: str, variable: str, type_spec: TypeSpec, *, interval_ms: int,
                                   priority: int, alert: bool = False, min_interval_ms: int = 0,
                                   edge_router: str, max_rate_eps: float | None = None, frames_per_s: int = 0,
                                   attributes: Mapping[str, str] | None = None) -> StatusVariable:
        """Register a publication; ``max_rate_eps`` is its advertised maximum rate (default: its interval's)."""
        st = self.state
        async with self.cloud.lock:
            client = st.client("publisher", publisher)
            if edge_router not in client.edge_routers:
                raise Unauthorized(f"publisher {publisher!r} is registered at {', '.join(client.edge_routers)}, not "
                                   f"{edge_router!r}", field="edge_router")
            if max_rate_eps is not None:  # a negative or absurd rate is refused before anything changes
                advertised_rate(StatusVariable(publisher, variable, type_spec, interval_ms, priority, alert,
                                               min_interval_ms, frames_per_s=frames_per_s), max_rate_eps)
            var = st.registry.register(publisher, variable, type_spec, interval_ms=interval_ms,
                                       priority=priority, alert=alert, min_interval_ms=min_interval_ms,
                                       frames_per_s=frames_per_s, attributes=attributes)
            doc = var_to_json(var)
            if max_rate_eps is not None:
                self.cloud.max_rates[var.full_name] = doc["max_rate_eps"] = advertised_rate(var, max_rate_eps)
            else:
                self.cloud.max_rates.pop(var.full_name, None)
            with self.store.transaction():
                self.store.put("publications", var.full_name, doc)
            self.cloud.adverts_version += 1
        self.subscriptions.sync_admission()
        self.queries.publication_added(var)
        return var

    async def unregister_publication(self, full_name: str) -> int:
        """Withdraw a publication and its subscriptions; returns how many subscriptions went."""
        async with self.cloud.lock:
            return await self.subscriptions.unregister_publication_locked(full_name)

    # -- subscriptions (admitting.SubscriptionCoordinator) and mode changes (modes.ModeCoordinator) ----
    async def subscribe(self, subscriber: str, variable: str, type_spec: TypeSpec | None, qos: Iterable[ModeQoS],
                        *, edge_router: str, subscription_id: str = "") -> SubscriptionRecord:
        return await self.subscriptions.subscribe(subscriber, variable, type_spec, qos, edge_router=edge_router,
                                                  subscription_id=subscription_id)

    async def change_subscription(self, subscription_id: str, qos: ModeQoS) -> SubscriptionRecord:
        return await self.subscriptions.change(subscription_id, qos)

    async def unsubscribe(self, subscription_id: str) -> int:
        return await self.subscriptions.unsubscribe(subscription_id)

    async def change_mode(self, target: int) -> ModeChange:
        return await self.modes.change(target)
