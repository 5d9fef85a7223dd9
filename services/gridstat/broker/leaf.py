"""The leaf QoS broker of one cloud: its commands and its durable state (dissertation 3.3.1).

A command decides on ``CloudState`` under one lock (pure: path search, reservations,
the loop-free tree rule), writes the change to the routers in two phases through the
group commit (``groupcommit``, outside the lock so that installs overlap), and writes
it through to SQLite (``store``) before answering. If the routers cannot take a
change, the state change is undone, so nothing is ever half-installed.

Around it: ``supervisor`` watches the routers and rebuilds restarted ones from the
state; ``segments`` holds the leaf's side of inter-cloud paths; ``consulting`` asks
the admission controller, when one is configured, before a reservation is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gridstat.broker import installer
from gridstat.broker.authz import IdentityBinding, PolicyFile
from gridstat.broker.channelkeys import ChannelKeys
from gridstat.broker.condensing import CondensationMixin
from gridstat.broker.consulting import AdmissionLink, advertised_rate
from gridstat.broker.flooding import FloodingMixin
from gridstat.broker.gate import AdmissionGate
from gridstat.broker.groupcommit import GroupCommit
from gridstat.broker.installer import RouterChange, RouterLink
from gridstat.broker.modes import ModesMixin
from gridstat.broker.paths import Path
from gridstat.broker.segments import SegmentsMixin
from gridstat.broker.state import (
    Client,
    CloudState,
    DesiredChannel,
    DesiredRoute,
    ForeignChannel,
    ModeQoS,
    RouterEndpoint,
    SubscriptionRecord,
)
from gridstat.broker.store import BrokerStore, record_from_json, var_from_json, var_to_json
from gridstat.broker.supervisor import RouterSupervisor
from gridstat.broker.topology import RouterRole
from gridstat.core.access import Grants
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable, TypeSpec, VariableRegistry, split_variable_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, NotFound, TypeMismatch, Unauthorized, ValidationError
from gridstat.v1 import router_pb2 as rpb

if TYPE_CHECKING:
    from gridstat.broker.delegation import UpLink
    from gridstat.v1.broker_pb2 import AdmissionNote

log = logging.getLogger(__name__)



class LeafBroker(SegmentsMixin, ModesMixin, FloodingMixin, CondensationMixin):
    def __init__(self, name: str, store: BrokerStore, *, tls: TlsFiles | None = None,
                 supervise_interval_s: float = 0.5, forwarding_ms: float = 1.0, variable_id_base: int = 1) -> None:
        self.name = name
        self.store = store
        self.tls = tls
        # Variable ids travel on the wire across clouds, so each cloud assigns from its own block.
        self.state = CloudState(name, forwarding_ms=forwarding_ms, registry=VariableRegistry(first_id=variable_id_base))
        self.links: dict[str, RouterLink] = {}
        self.supervise_interval_s = supervise_interval_s
        self.lock = asyncio.Lock()
        self.current_mode = 0
        #: Defined modes (id -> name) and the change in progress, if any (``modes``).
        self.modes: dict[int, str] = {0: "normal"}
        self.mode_changing = False
        self.mode_change_id = 0
        self.supervisor = RouterSupervisor(self.state, self.links, self.lock, interval_s=supervise_interval_s,
                                           before_pass=self._expire_before_pass, mode=lambda: self.current_mode,
                                           prepare=self._prepare_condensations)
        self.writer = GroupCommit(self.links, persist=self._persist, taken=self.supervisor.postpone)
        self._init_flooding()
        self.supervisor.on_reconciled.append(self._rekey_neighbours)
        self.supervisor.on_moved = self._router_moved
        #: Reserved, not yet committed inter-cloud segments and their deadlines.
        self._pending: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._started = self._closed = False
        #: The parent broker inter-cloud subscriptions are delegated to (``--parent``), if any.
        self.uplink: UpLink | None = None
        #: The admission controller consulted before a reservation is kept (``--admission``), if any.
        self.admission: AdmissionLink | None = None
        #: Advertised maximum rates (events/s) by variable name, where a publisher declared one.
        self.max_rates: dict[str, float] = {}
        #: Bumped when publications or the topology change: the admission link re-declares them.
        self.adverts_version = 0
        self.resources_version = 0
        #: The controller's note for each subscription admitted lately, until the reply takes it.
        self.admission_notes: OrderedDict[str, AdmissionNote] = OrderedDict()
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

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._load()
        self._task = create_guarded_task(self.supervisor.run(), name=f"broker-{self.name}-supervise")

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for link in self.links.values():
            await link.close()
        if self.uplink is not None:
            await self.uplink.close()
        if self.admission is not None:
            await self.admission.close()
        self.store.close()

    def _load(self) -> None:
        """Rebuild the state from the durable store (a restarted broker)."""
        st, store = self.state, self.store
        for d in store.all("routers"):
            st.topology.add_router(d["name"], RouterRole(d["role"]), d["capacity_eps"])
            ep = RouterEndpoint(d["name"], d["router_id"], d["control_address"], d["event_host"], d["event_port"])
            st.endpoints[ep.name] = ep
            self.links[ep.name] = self._new_link(ep)
        for d in store.all("channels"):
            st.topology.add_channel(d["src"], d["dst"], bandwidth_bps=d["bandwidth_bps"], latency_ms=d["latency_ms"],
                                    event_capacity_eps=d.get("event_capacity_eps"), name=d["name"])
        for d in store.all("clients"):
            st.clients[(d["kind"], d["name"])] = Client.from_dict(d)
        for d in store.all("foreign_channels"):
            f = ForeignChannel(**d)
            st.foreign[(f.border_router, f.foreign_router)] = f
        for d in store.all("publications"):
            var = st.registry.restore(var_from_json(d))
            if d.get("max_rate_eps"):
                self.max_rates[var.full_name] = float(d["max_rate_eps"])
        for d in store.all("subscriptions"):
            st.restore(record_from_json(d))
        self._load_condensations()
        st.next_client_id = int(store.get_meta("next_client_id") or st.next_client_id)
        st.next_subscription = int(store.get_meta("next_subscription") or st.next_subscription)
        self.current_mode = int(store.get_meta("current_mode") or 0)
        self._load_modes()
        self._load_flooding()
        if st.subscriptions or st.endpoints:
            log.info("broker %s restored %d routers, %d publications, %d subscriptions", self.name,
                     len(st.endpoints), len(st.registry), len(st.subscriptions))

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
        for name, other in list(self.links.items()):
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

    def _save_counters(self) -> None:
        self.store.set_meta("next_client_id", self.state.next_client_id)
        self.store.set_meta("next_subscription", self.state.next_subscription)

    # -- topology ----------------------------------------------------------------------------
    async def add_router(self, ep: RouterEndpoint, role: RouterRole, capacity_eps: float) -> None:
        if ":" in ep.name or "/" in ep.name:
            raise ValidationError(f"router name {ep.name!r} must not contain ':' or '/'", field="router.name")
        if not 1 <= ep.router_id < 1_000_000:
            raise ValidationError(f"router id {ep.router_id} must be 1..999999 (client ids start at 1000000)",
                                  field="router.router_id")
        held = self.state.endpoints.get(ep.name)
        if held is not None:
            await self._readdress_router(held, ep, role)
            return
        if any(e.router_id == ep.router_id for e in self.state.endpoints.values()):
            raise ValidationError(f"router id {ep.router_id} is taken", field="router.router_id")
        async with self.lock:
            self.state.topology.add_router(ep.name, role, capacity_eps)
            self.state.endpoints[ep.name] = ep
            self.links[ep.name] = self._new_link(ep)
            # Not used for paths until the supervisor has reached it and opened its channels.
            self.state.down.add(ep.name)
            self.resources_version += 1
            with self.store.transaction():
                self.store.put_router(ep, role.value, capacity_eps)
        await self.supervisor.check(ep.name)

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
        async with self.lock:
            self.state.endpoints[ep.name] = ep
            old = self.links.get(ep.name)
            self.links[ep.name] = self._new_link(ep)
            self.state.down.add(ep.name)
            self.resources_version += 1
            with self.store.transaction():
                self.store.put_router(ep, role.value, router.capacity_eps)
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
        async with self.lock:
            held = self.state.endpoints.get(name)
            if held is None or (held.event_host, held.event_port) == (event_host, event_port):
                return
            ep = dataclasses.replace(held, event_host=event_host, event_port=event_port)
            self.state.endpoints[name] = ep
            self.resources_version += 1
            router = self.state.topology.routers[name]
            with self.store.transaction():
                self.store.put_router(ep, router.role.value, router.capacity_eps)
        log.info("broker %s: router %s reports its events at %s:%d; moved", self.name, name, event_host, event_port)
        topo = self.state.topology
        for neighbour in sorted({*topo.out_channels(name), *topo.in_channels(name)}):
            await self.supervisor.reconcile_now(neighbour)

    async def remove_router(self, name: str) -> None:
        async with self.lock:
            used = [r.subscription_id for r in self.state.subscriptions.values()
                    if any(name in p.routers for _, paths in r.paths for p in paths)]
            if used:
                raise ValidationError(f"router {name!r} carries subscriptions {used[:5]}; remove them first",
                                      field="name")
            removed = self.state.topology.remove_router(name)
            self.state.endpoints.pop(name, None)
            self.resources_version += 1
            link = self.links.pop(name, None)
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
        async with self.lock:
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
            self.resources_version += 1
            with self.store.transaction():
                for ch in added:
                    self.store.put("channels", ch.name, {"name": ch.name, "src": ch.src, "dst": ch.dst,
                                                         "bandwidth_bps": ch.bandwidth_bps, "latency_ms": ch.latency_ms,
                                                         "event_capacity_eps": ch.event_capacity_eps})
        # Open the router-side channels now, so that a subscription right after can use them.
        await self.supervisor.reconcile_now(a)
        await self.supervisor.reconcile_now(b)

    async def remove_channel(self, a: str, b: str, *, both: bool = True) -> None:
        async with self.lock:
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
            self.resources_version += 1
        await self.supervisor.reconcile_now(a)
        await self.supervisor.reconcile_now(b)

    # -- clients and publications --------------------------------------------------------------
    async def register_client(self, name: str, kind: str, edge_router: str, host: str = "", port: int = 0,
                              *, first_time: bool = True, also: bool = False) -> tuple[int, bool]:
        """Register a client at its first edge router; with ``also``, attach a registered one at one more
        (a multi-homed client, docs/redundancy.md "Multi-homed clients": nothing it holds is dropped)."""
        async with self.lock:
            self.refuse_condensation_publisher(name, kind)
            st = self.state
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
            with self.store.transaction():
                self.store.put_client(client)
                self._save_counters()
            if old is not None and not also and old.edge_router != edge_router:
                self.supervisor.mark_dirty(old.edge_router)
        link = self.links.get(edge_router)
        same = known and not restarted
        if link is not None and edge_router not in self.state.down and not same:
            try:
                if await installer.ensure_channel(link, self.state.desired_channel(edge_router, client.channel)):
                    self.supervisor.mark_dirty(edge_router)  # the channel was replaced: put its routes back
            except Exception as exc:  # the supervisor's reconciliation opens it later
                log.warning("opening %s on %s: %s", client.channel, edge_router, exc)
                self.supervisor.mark_dirty(edge_router)
        return client.client_id, restarted

    async def _drop_client_state(self, name: str, kind: str) -> None:
        st = self.state
        if kind == "subscriber":
            for sid in [r.subscription_id for r in st.subscriptions.values() if r.subscriber == name]:
                await self._unsubscribe_locked(sid)
            self.forget_flood_all(name)
        else:
            for var in [v for v in st.registry if v.publisher == name]:
                await self._unregister_publication_locked(var.full_name)

    async def unregister_client(self, name: str, kind: str) -> int:
        async with self.lock:
            client = self.state.client(kind, name)
            before = len(self.state.subscriptions)
            await self._drop_client_state(name, kind)
            del self.state.clients[(kind, name)]
            with self.store.transaction():
                self.store.delete("clients", f"{kind}/{name}")
            removed = before - len(self.state.subscriptions)
        for router in client.edge_routers:
            await self.supervisor.reconcile_now(router)
        return removed

    async def register_publication(self, publisher: str, variable: str, type_spec: TypeSpec, *, interval_ms: int,
                                   priority: int, alert: bool = False, min_interval_ms: int = 0,
                                   edge_router: str, max_rate_eps: float | None = None) -> StatusVariable:
        """Register a publication; ``max_rate_eps`` is its advertised maximum rate (default: its interval's)."""
        async with self.lock:
            client = self.state.client("publisher", publisher)
            if edge_router not in client.edge_routers:
                raise Unauthorized(f"publisher {publisher!r} is registered at {', '.join(client.edge_routers)}, not "
                                   f"{edge_router!r}", field="edge_router")
            if max_rate_eps is not None:  # a negative or absurd rate is refused before anything changes
                advertised_rate(StatusVariable(publisher, variable, type_spec, interval_ms, priority, alert,
                                               min_interval_ms), max_rate_eps)
            var = self.state.registry.register(publisher, variable, type_spec, interval_ms=interval_ms,
                                               priority=priority, alert=alert, min_interval_ms=min_interval_ms)
            doc = var_to_json(var)
            if max_rate_eps is not None:
                self.max_rates[var.full_name] = doc["max_rate_eps"] = advertised_rate(var, max_rate_eps)
            else:
                self.max_rates.pop(var.full_name, None)
            with self.store.transaction():
                self.store.put("publications", var.full_name, doc)
            self.adverts_version += 1
        self._sync_admission()
        return var

    def _sync_admission(self) -> None:
        """Tell the admission controller of a publication change now (it is also told before each request)."""
        link = self.admission
        if link is None:
            return

        async def sync() -> None:
            try:
                await link.sync(self)
            except Exception as exc:  # told again before the next request
                log.info("admission controller %s not updated now: %s", link.address, exc)

        create_guarded_task(sync(), name=f"broker-{self.name}-advertise")

    async def unregister_publication(self, full_name: str) -> int:
        async with self.lock:
            return await self._unregister_publication_locked(full_name)

    async def _unregister_publication_locked(self, full_name: str) -> int:
        var = self.state.registry.lookup(full_name)
        sids = [r.subscription_id for r in self.state.subscriptions.values() if r.variable_id == var.variable_id]
        for sid in sids:
            await self._unsubscribe_locked(sid)
        self.state.registry.unregister(full_name)
        self.max_rates.pop(full_name, None)
        with self.store.transaction():
            self.store.delete("publications", full_name)
        self.adverts_version += 1
        self._sync_admission()
        return len(sids)

    # -- subscriptions -----------------------------------------------------------------------
    async def subscribe(self, subscriber: str, variable: str, type_spec: TypeSpec | None, qos: Iterable[ModeQoS],
                        *, edge_router: str, subscription_id: str = "") -> SubscriptionRecord:
        split_variable_name(variable)
        qos = tuple(qos)
        self.check_modes_defined(q.mode for q in qos)
        async with self.lock:
            st = self.state
            var = st.registry.lookup(variable)
            if type_spec is not None and var.type != type_spec:
                raise TypeMismatch(f"subscription to {variable!r} expects type {type_spec.name!r} but it is "
                                   f"published as {var.type.name!r}", field="type")
            client = st.client("subscriber", subscriber)
            if edge_router not in client.edge_routers:
                raise Unauthorized(f"subscriber {subscriber!r} is registered at {', '.join(client.edge_routers)}, "
                                   f"not {edge_router!r}", field="edge_router")
            sid = subscription_id or st.new_subscription_id()
            record = st.admit(sid, subscriber, var, qos, edge_router)
        # With an admission controller the reservation is tentative until it agrees (``consulting``):
        # refused, it is undone here and the refusal carries the controller's reasons.
        if self.admission is not None:
            try:
                consulted = await self.admission.consult(self, record)
            except GridStatError:
                async with self.lock:
                    st.remove(sid)
                raise
            if consulted.partial:  # only part of the rate is guaranteed: best-effort routes
                async with self.lock:
                    record = dataclasses.replace(record, best_effort=True)
                    st.subscriptions[sid] = record
            self.admission_notes[sid] = consulted.note
            while len(self.admission_notes) > 1024:
                self.admission_notes.popitem(last=False)
        # The decision and its reservation are made under the lock; the routers are written
        # outside it, so that many installs can be in flight at once (a failure undoes the
        # reservation, and the supervisor's reconciliation never adds what the state lacks).
        try:
            await self._apply(self._changes(record, install=True), persist=record)
        except GridStatError:
            async with self.lock:
                st.remove(sid)
            self.admission_notes.pop(sid, None)
            if self.admission is not None:
                await self.admission.release(self.name, sid)
            raise
        return record

    async def _apply(self, changes: dict[str, RouterChange], *, persist: SubscriptionRecord | None = None) -> None:
        """Write a change to the routers through the group commit (``broker.groupcommit``)."""
        await self.writer.apply(changes, record=persist)

    def _persist(self, records: list[SubscriptionRecord | None]) -> None:
        with self.store.transaction():
            for record in records:
                if record is not None:
                    self.store.put_subscription(record)
            self._save_counters()

    async def unsubscribe(self, subscription_id: str) -> int:
        async with self.lock:
            return await self._unsubscribe_locked(subscription_id)

    async def _unsubscribe_locked(self, subscription_id: str) -> int:
        record = self.state.remove(subscription_id)
        if self.admission is not None and not record.segment:
            await self.admission.release(self.name, subscription_id)
        changes = self._changes(record, install=False)
        up = {n: c for n, c in changes.items() if n not in self.state.down}
        try:
            await self._apply(up)
        except GridStatError as exc:
            # The subscription is gone from the state either way; a router that missed the
            # removal is put right by reconciliation when it answers again.
            log.warning("removing %s: %s; the routers will be reconciled", subscription_id, exc)
            for name in up:
                self.supervisor.mark_dirty(name)
        with self.store.transaction():
            self.store.delete("subscriptions", subscription_id)
        return sum(len(c.remove) for c in changes.values())

    async def change_subscription(self, subscription_id: str, qos: ModeQoS) -> SubscriptionRecord:
        """Change one mode's QoS in place: re-admitted, and the old QoS stays if it is rejected."""
        self.check_modes_defined((qos.mode,))
        async with self.lock:
            old = self.state.subscriptions.get(subscription_id)
            if old is None:
                raise NotFound(f"no subscription {subscription_id!r}", field="subscription_id")
            var = self.state.registry.by_id(old.variable_id)
            new_qos = (*(q for q in old.qos if q.mode != qos.mode), qos)
            self.state.remove(subscription_id)
            try:
                record = self.state.admit(subscription_id, old.subscriber, var, new_qos, old.edge_router)
            except GridStatError:
                self.state.restore(old)
                raise
            changes: dict[str, RouterChange] = {}
            before = self._changes(old, install=False)
            after = self._changes(record, install=True)
            new_keys = {installer.route_key(r) for c in after.values() for r in c.install}
            for name in {*before, *after}:
                gone = tuple(k for k in before.get(name, RouterChange()).remove if k not in new_keys)
                changes[name] = RouterChange(after.get(name, RouterChange()).install, gone)
            try:
                await installer.apply_transaction(self.links, changes)
            except GridStatError:
                self.state.remove(subscription_id)
                self.state.restore(old)
                raise
            with self.store.transaction():
                self.store.put_subscription(record)
            return record

    def _changes(self, record: SubscriptionRecord, *, install: bool) -> dict[str, RouterChange]:
        per: dict[str, list[DesiredRoute]] = {}
        for router, route in self.state.routes_of(record):
            per.setdefault(router, []).append(route)
        if install:
            return {n: RouterChange(install=tuple(rs)) for n, rs in per.items()}
        return {n: RouterChange(remove=tuple(installer.route_key(r) for r in rs)) for n, rs in per.items()}

    def paths_of(self, record: SubscriptionRecord) -> dict[int, tuple[Path, ...]]:
        return dict(record.paths)

    async def _expire_before_pass(self) -> None:
        if self._pending:
            async with self.lock:
                self._expire_pending()

    @property
    def rebuilds(self) -> int:
        return self.supervisor.rebuilds

