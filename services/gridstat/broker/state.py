"""The leaf QoS broker's state of its cloud, and its decisions, without I/O (dissertation 3.3.1).

The leaf broker "has complete knowledge of its cloud" and is the only writer of
its routers' tables. ``CloudState`` holds that knowledge: the topology and the
routers' addresses, the registered clients and publications, the admitted
subscriptions with their paths per mode, the reservations per mode, and for
every (mode, variable) the directed edges its routes use.

That last index enforces the rule that keeps the data plane loop-free: a router
forwards a variable on its routes whatever channel the event came in on, so the
union of a variable's routes must be a tree rooted at the publisher's edge router
(a DAG where redundant paths meet at a subscriber's edge router). A new path may
enter a router that already carries the variable only over the channel it already
uses, except at the subscriber's edge router of a redundant subscription.

Everything the routers should hold (channels, routes) is *derived* from this
state (``desired_channels``, ``desired_routes``), so rebuilding a restarted router
and reconciling after a broker restart are the same operation.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gridstat import condensation
from gridstat.broker import allocation as alloc
from gridstat.broker.paths import Path, Usable, disjoint_paths, within_bound
from gridstat.broker.rejections import NoFeasiblePath
from gridstat.broker.resources import SUBSCRIBER_CHANNEL_PREFIX, Reservations
from gridstat.broker.topology import Channel, Topology
from gridstat.core import filtering
from gridstat.core.model import MAX_MODES, StatusVariable, VariableRegistry
from gridstat.errors import DuplicateName, GridStatError, NotFound, Unauthorized, ValidationError

PUBLISHER_CHANNEL_PREFIX = "pub:"
#: The largest price a subscription may declare (the routers' bound, router.tables.MAX_PRICE).
MAX_PRICE = 1e9
#: Client ids start here so that they never collide with router ids (sender ids share one space).
FIRST_CLIENT_ID = 1_000_000


@dataclass(frozen=True)
class RouterEndpoint:
    name: str
    router_id: int
    control_address: str
    event_host: str
    event_port: int


#: Edge routers one client may be attached at (its first and the ones it added, docs/redundancy.md).
MAX_EDGE_ROUTERS = 4


@dataclass(frozen=True)
class Attachment:
    """One more edge router a multi-homed client is attached at, and (subscribers) where it sends."""

    edge_router: str
    host: str = ""
    port: int = 0


@dataclass(frozen=True)
class Client:
    name: str
    kind: str  # "publisher" | "subscriber"
    client_id: int
    edge_router: str
    host: str = ""
    port: int = 0
    #: The edge routers it is attached at besides ``edge_router`` (a multi-homed client: its paths
    #: start or end at different edge routers, docs/redundancy.md "Multi-homed clients").
    also: tuple[Attachment, ...] = ()

    @property
    def channel(self) -> str:
        prefix = PUBLISHER_CHANNEL_PREFIX if self.kind == "publisher" else SUBSCRIBER_CHANNEL_PREFIX
        return prefix + self.name

    @property
    def edge_routers(self) -> tuple[str, ...]:
        """Every edge router it is attached at, its first one first."""
        return (self.edge_router, *(a.edge_router for a in self.also))

    def address_at(self, router: str) -> tuple[str, int]:
        """Where its events go from ``router`` (subscribers; publishers have no address)."""
        for a in self.also:
            if a.edge_router == router:
                return a.host, a.port
        return self.host, self.port

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Client:
        """A stored client (``dataclasses.asdict`` of one)."""
        also = tuple(Attachment(**a) for a in d.get("also", ()))
        return cls(d["name"], d["kind"], d["client_id"], d["edge_router"], d.get("host", ""), d.get("port", 0), also)


@dataclass(frozen=True)
class ModeQoS:
    mode: int
    interval_ms: int
    latency_ms: float
    redundancy: int = 1
    priority: int = 1
    #: What one delivered event is worth (HAPS maxprice): routers under overload shed low values first.
    price: float = 1.0
    #: No guarantee wanted: the routes are shed before every guaranteed stream.
    best_effort: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.mode < MAX_MODES:
            raise ValidationError(f"mode {self.mode} is outside 0..{MAX_MODES - 1}", field="qos.mode")
        if self.interval_ms <= 0:
            raise ValidationError(f"interval_ms must be positive, got {self.interval_ms}", field="qos.interval_ms")
        if not self.latency_ms > 0:
            raise ValidationError(f"latency_ms must be positive, got {self.latency_ms}", field="qos.latency_ms")
        if not 1 <= self.redundancy <= 8:
            raise ValidationError(f"redundancy must be 1..8, got {self.redundancy}", field="qos.redundancy")
        if not 0 <= self.priority <= 6:
            raise ValidationError(f"priority must be 0..6, got {self.priority}", field="qos.priority")
        if not math.isfinite(self.price) or not 0 <= self.price <= MAX_PRICE:
            raise ValidationError(f"price must be within 0..{MAX_PRICE:g}, got {self.price}", field="qos.price")


@dataclass(frozen=True)
class SubscriptionRecord:
    subscription_id: str
    subscriber: str
    variable: str
    variable_id: int
    pub_interval_ms: int
    alert: bool
    edge_router: str
    publisher_router: str
    qos: tuple[ModeQoS, ...]
    #: (mode, paths) for every mode of ``qos``, in the same order.
    paths: tuple[tuple[int, tuple[Path, ...]], ...]
    version: int
    #: Inter-cloud segments (3.1): the last hop leaves on this router channel to a foreign border
    #: router instead of a subscriber channel ("" = deliver to ``subscriber``).
    exit_channel: str = ""
    segment: bool = False
    #: Admitted by the admission controller with only part of its rate guaranteed (percentage policy):
    #: its routes are best effort, shed before guaranteed ones (docs/admission.md).
    best_effort: bool = False
    #: Every edge router of a multi-homed publisher or subscriber when admitted, the one above first
    #: (docs/redundancy.md, "Multi-homed clients"); empty for a single one.
    publisher_routers: tuple[str, ...] = ()
    subscriber_routers: tuple[str, ...] = ()
    #: The variable's frame rate (0 = a period of ``pub_interval_ms``): intervals are whole frames
    #: (docs/frame-rates.md).
    frames_per_s: int = 0

    def reserved_last_channel(self, router: str) -> str:
        """The last hop's resource at ``router`` as reservations name it (``SubscriptionRequest.last_channel``)."""
        if self.exit_channel:
            return self.exit_channel
        base = SUBSCRIBER_CHANNEL_PREFIX + self.subscriber
        return base if router == self.edge_router else f"{base}@{router}"


def _avoiding(usable: Usable, routers: frozenset[str]) -> Usable:
    """``usable`` without the channels touching ``routers``."""

    def ok(ch: Channel) -> bool:
        return ch.src not in routers and ch.dst not in routers and usable(ch)

    return ok


_SEGMENT_ID = re.compile(r"(.*\.m\d+)\.r\d+(?:\.p\d+)?")


def _sibling_key(segment_id: str) -> str:
    """What the segments of one inter-cloud subscription and mode share in their ids
    (``segments.segment_id``: "<subscription>.m<mode>.r<generation>[.p<path>]")."""
    m = _SEGMENT_ID.fullmatch(segment_id)
    return m.group(1) if m else segment_id


def _along(usable: Usable, routers: tuple[str, ...]) -> Usable:
    """``usable`` narrowed to the channels of one path."""
    hops = frozenset(itertools.pairwise(routers))

    def ok(ch: Channel) -> bool:
        return (ch.src, ch.dst) in hops and usable(ch)

    return ok


@dataclass(frozen=True)
class ForeignChannel:
    """An inter-cloud event channel at one of this cloud's border routers."""

    border_router: str
    foreign_router: str
    foreign_cloud: str
    foreign_id: int
    host: str
    port: int
    bandwidth_bps: float
    latency_ms: float
    #: Hierarchy level for limited flooding: the height of the broker that registered the channel.
    level: int = 2
    #: The channel's datagram authentication key (hex), chosen by the broker that registered it
    #: (``--channel-auth``); "" = unkeyed (docs/security.md).
    key_hex: str = ""


@dataclass(frozen=True)
class DesiredChannel:
    name: str
    peer_id: int
    kind: str  # "router" | "subscriber" | "publisher"
    host: str = ""
    port: int = 0
    level: int = 1
    flood_all: bool = False


@dataclass(frozen=True)
class DesiredRoute:
    route_id: str
    variable_id: int
    mode: int
    channel: str
    sub_interval_ms: int
    priority: int
    pub_interval_ms: int
    alert: bool
    version: int
    price: float = 1.0
    best_effort: bool = False
    frames_per_s: int = 0


@dataclass
class CloudState:
    name: str
    topology: Topology = field(default_factory=Topology)
    endpoints: dict[str, RouterEndpoint] = field(default_factory=dict)
    #: What each router is (``RouterInfo.attributes``: description, coordinates, owner, site), by name.
    router_attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    registry: VariableRegistry = field(default_factory=VariableRegistry)
    clients: dict[tuple[str, str], Client] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionRecord] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    #: Router-to-router channels declared down (src, dst) while both routers answer (a failed link).
    down_channels: set[tuple[str, str]] = field(default_factory=set)
    foreign: dict[tuple[str, str], ForeignChannel] = field(default_factory=dict)
    forwarding_ms: float = 1.0
    next_client_id: int = FIRST_CLIENT_ID
    next_subscription: int = 1
    version: int = 0
    _reservations: dict[int, Reservations] = field(default_factory=dict)
    _parents: dict[tuple[int, int], dict[str, Counter[str]]] = field(default_factory=dict)
    _by_router: dict[str, set[str]] = field(default_factory=dict)
    #: (subscriber, variable) -> subscription id, for the duplicate check (segments excluded).
    _by_subscriber: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Subscribers with a flood-all subscription (``broker.flooding``): their channel has flood_all set.
    flood_all: set[str] = field(default_factory=set)

    # -- clients and publications ------------------------------------------------------------
    def client(self, kind: str, name: str) -> Client:
        try:
            return self.clients[(kind, name)]
        except KeyError:
            raise Unauthorized(f"{kind} {name!r} is not registered with cloud {self.name!r}",
                               field=kind) from None

    def register_client(self, name: str, kind: str, edge_router: str, host: str, port: int, *,
                        also: bool = False) -> Client:
        """Register a client at its (first) edge router, or with ``also`` attach a registered one at
        one more (a multi-homed client, docs/redundancy.md). A client registered again at its first
        edge router keeps its other attachments; at another, that one becomes its first."""
        if edge_router not in self.endpoints or not self.topology.router(edge_router).role.hosts_clients:
            raise Unauthorized(f"{edge_router!r} is not an edge router of cloud {self.name!r}", field="edge_router")
        if kind == "subscriber" and not (host and 0 < port < 65536):
            raise ValidationError(f"subscriber {name!r} needs a host and port for its events", field="port")
        old = self.clients.get((kind, name))
        if also:
            if old is None:
                raise Unauthorized(f"{kind} {name!r} must register at its first edge router before it attaches "
                                   f"at {edge_router!r}", field="also")
            if edge_router == old.edge_router:
                client = replace(old, host=host, port=port)
            else:
                others = [a for a in old.also if a.edge_router != edge_router]
                if len(others) + 2 > MAX_EDGE_ROUTERS:
                    raise ValidationError(f"{kind} {name!r} is attached at {len(old.edge_routers)} edge routers "
                                          f"({', '.join(old.edge_routers)}); at most {MAX_EDGE_ROUTERS}",
                                          field="edge_router")
                client = replace(old, also=(*others, Attachment(edge_router, host, port)))
            self.clients[(kind, name)] = client
            return client
        client_id = old.client_id if old is not None else self.next_client_id
        if old is None:
            self.next_client_id += 1
        kept = tuple(a for a in old.also if a.edge_router != edge_router) if old is not None else ()
        client = Client(name, kind, client_id, edge_router, host, port, kept)
        self.clients[(kind, name)] = client
        return client

    def reservations(self, mode: int) -> Reservations:
        res = self._reservations.get(mode)
        if res is None:
            res = self._reservations[mode] = Reservations(self.topology)
        return res

    # -- admission (dissertation 3.1: RoutingAlgo per mode and per redundant path) ----------
    def allowed(self, mode: int, variable_id: int, publisher_routers: str | tuple[str, ...],
                subscriber_routers: str | tuple[str, ...], redundancy: int) -> Usable:
        """Channels a new path of the variable may use: none into its publisher's edge routers, none
        touching a router that is down, and the per-variable tree rule (one parent per router), which
        a redundant subscription's own edge routers are exempt from."""
        parents = self._parents.get((mode, variable_id), {})
        down = self.down
        pubs = frozenset((publisher_routers,) if isinstance(publisher_routers, str) else publisher_routers)
        subs = frozenset((subscriber_routers,) if isinstance(subscriber_routers, str) else subscriber_routers)

        down_channels = self.down_channels

        def ok(ch: Channel) -> bool:
            if ch.src in down or ch.dst in down or ch.dst in pubs or (ch.src, ch.dst) in down_channels:
                return False
            ps = parents.get(ch.dst)
            return not ps or ch.src in ps or (redundancy > 1 and ch.dst in subs)

        return ok

    def new_subscription_id(self) -> str:
        sid = f"{self.name}-s{self.next_subscription}"
        self.next_subscription += 1
        return sid

    def admit(self, subscription_id: str, subscriber: str, var: StatusVariable, qos: Iterable[ModeQoS],
              edge_router: str) -> SubscriptionRecord:
        """Plan every mode, then reserve all of them; a rejection in any mode reserves nothing."""
        existing = self._by_subscriber.get((subscriber, var.full_name))
        if existing is not None:
            raise DuplicateName(f"{subscriber!r} already subscribes to {var.full_name!r} "
                                f"({existing}); change it instead", field="variable")
        publisher = self.client("publisher", var.publisher)
        sinks = self.subscriber_edges(subscriber, edge_router)
        return self.admit_path(subscription_id, subscriber, var.full_name, var.variable_id,
                               var.effective_interval_ms, var.alert, qos, publisher.edge_router, sinks[0],
                               from_routers=publisher.edge_routers, to_routers=sinks, frames_per_s=var.frames_per_s)

    def subscriber_edges(self, subscriber: str, edge_router: str) -> tuple[str, ...]:
        """Where a subscription of ``subscriber`` made at ``edge_router`` ends: every edge router of a
        multi-homed subscriber attached there (its first one first), else ``edge_router``."""
        client = self.clients.get(("subscriber", subscriber))
        if client is not None and client.also and edge_router in client.edge_routers:
            return client.edge_routers
        return (edge_router,)

    def admit_path(self, subscription_id: str, subscriber: str, variable: str, variable_id: int,
                   pub_interval_ms: int, alert: bool, qos: Iterable[ModeQoS], from_router: str, to_router: str,
                   *, exit_channel: str = "", segment: bool = False, from_routers: tuple[str, ...] = (),
                   to_routers: tuple[str, ...] = (), frames_per_s: int = 0, avoid: frozenset[str] = frozenset(),
                   shared_sink: bool = False, later: tuple[tuple[str, str], ...] = ()) -> SubscriptionRecord:
        """Admit paths from ``from_router`` to ``to_router`` (a subscription, or an inter-cloud segment);
        ``from_routers``/``to_routers``: every edge router of a multi-homed end, that one first.
        At a frame rate (``frames_per_s``) the intervals are rounded to whole frames first.
        A segment of one of several disjoint inter-cloud paths (docs/redundancy.md, "Across clouds")
        avoids the routers of its siblings (``avoid``); an END one (``shared_sink``) may join them at
        the subscriber's edge router, as a redundant subscription's paths do. ``later``: the (from, to)
        routers of the siblings to be reserved after it here; it takes its path of a joint disjoint
        search for all of them (:meth:`_sibling_path`), so it does not block theirs."""
        from_routers = from_routers if len(from_routers) > 1 else ()
        to_routers = to_routers if len(to_routers) > 1 else ()
        qos = tuple(qos)
        if frames_per_s:
            qos = tuple(replace(q, interval_ms=filtering.round_down_interval(
                q.interval_ms, pub_interval_ms, frames_per_s)) if q.interval_ms > 0 else q for q in qos)
        if not qos:
            raise ValidationError("a subscription needs QoS for at least one mode", field="qos")
        if len({q.mode for q in qos}) != len(qos):
            raise ValidationError("a mode appears twice in the subscription's QoS", field="qos.mode")
        if subscription_id in self.subscriptions:
            raise DuplicateName(f"subscription {subscription_id!r} exists", field="subscription_id")
        # A condensation function's input ends at its slot, the pseudo channel "cf:<id>" (7.3).
        if exit_channel and not exit_channel.startswith(condensation.CHANNEL_PREFIX) \
                and (to_router, exit_channel) not in self.foreign:
            raise NotFound(f"border router {to_router!r} has no inter-cloud channel to {exit_channel!r}",
                           field="next_channel")
        label = f"{to_router}.{exit_channel}" if exit_channel else subscriber
        planned: list[tuple[ModeQoS, alloc.Allocation]] = []
        for q in qos:
            request = self._request(subscription_id, label, variable_id, pub_interval_ms, q, from_router, to_router,
                                    from_routers, to_routers)
            allowed = self.allowed(q.mode, variable_id, request.sources, request.sinks,
                                   max(q.redundancy, 2) if shared_sink else q.redundancy)
            if avoid:
                allowed = _avoiding(allowed, avoid)
            if later:
                mine = self._sibling_path(((from_router, to_router), *later), allowed, q.latency_ms)
                if mine is not None:
                    allowed = _along(allowed, mine)
            planned.append((q, alloc.plan_subscription(self.topology, self.reservations(q.mode), request,
                                                       forwarding_ms=self.forwarding_ms, allowed=allowed)))
        self.version += 1
        record = SubscriptionRecord(
            subscription_id, subscriber, variable, variable_id, pub_interval_ms, alert, to_router, from_router, qos,
            tuple((q.mode, a.paths) for q, a in planned), self.version, exit_channel, segment,
            publisher_routers=from_routers, subscriber_routers=to_routers, frames_per_s=frames_per_s)
        committed: list[int] = []
        try:
            for q, a in planned:
                alloc.commit(self.reservations(q.mode), a)
                committed.append(q.mode)
        except GridStatError:
            for mode in committed:
                alloc.release(self.reservations(mode), subscription_id)
            raise
        self._index(record, +1)
        return record

    def _sibling_path(self, ends: tuple[tuple[str, str], ...], usable: Usable,
                      bound_ms: float) -> tuple[str, ...] | None:
        """The path for ``ends[0]`` among node-disjoint paths for all of ``ends`` (docs/redundancy.md,
        "Across clouds"): paths.disjoint_paths with the distinct entries and exits as multi-router
        ends, each carrying one path. None when that search cannot answer (fewer paths, entries and
        exits paired otherwise than asked, or this one beyond the bound): the segment is then planned
        alone, avoiding only the routers of the siblings before it."""
        srcs = tuple(dict.fromkeys(a for a, _ in ends))
        dsts = tuple(dict.fromkeys(b for _, b in ends))
        if (len(srcs) > 1 and len(dsts) > 1 and len(srcs) != len(ends)) or set(srcs) & set(dsts):
            return None
        ok = within_bound(self.topology, srcs, dsts, bound_ms, usable=usable, forwarding_ms=self.forwarding_ms)
        found = disjoint_paths(self.topology, srcs, dsts, len(ends), usable=ok, forwarding_ms=self.forwarding_ms)
        if len(found) < len(ends) or {(p.routers[0], p.routers[-1]) for p in found} != set(ends):
            return None
        mine = next(p for p in found if (p.routers[0], p.routers[-1]) == ends[0])
        return mine.routers if mine.latency_ms <= bound_ms + 1e-9 else None

    # -- healing (docs/redundancy.md, "Healing") ---------------------------------------------------
    def broken_paths(self, record: SubscriptionRecord) -> dict[int, tuple[int, ...]]:
        """Per mode, the indexes of the record's paths through a router or channel that is down."""
        down, down_channels = self.down, self.down_channels
        out: dict[int, tuple[int, ...]] = {}
        for mode, paths in record.paths:
            broken = tuple(i for i, p in enumerate(paths)
                           if any(r in down for r in p.routers)
                           or (down_channels and any(h in down_channels for h in itertools.pairwise(p.routers))))
            if broken:
                out[mode] = broken
        return out

    def broken(self) -> list[str]:
        """The subscriptions with a path through a router or channel that is down."""
        return [sid for sid, r in self.subscriptions.items() if self.broken_paths(r)]

    def repair(self, subscription_id: str) -> SubscriptionRecord | None:
        """Re-plan the paths of a subscription that go through a router or channel that is down, in
        place, keeping every other path as it is (its routes stay untouched, so what it delivers is not
        disturbed): each new path avoids what is down, shares no interior router with the kept ones,
        meets the latency bound and fits the reservations, all modes or none. The new record, or None
        when nothing is broken or no replacement exists (the record stays as it was)."""
        old = self.subscriptions[subscription_id]
        broken = self.broken_paths(old)
        if not broken:
            return None
        label = f"{old.edge_router}.{old.exit_channel}" if old.exit_channel else old.subscriber
        siblings = self._segment_siblings(old)
        self.remove(subscription_id)
        committed: list[int] = []
        try:
            repaired: list[tuple[int, tuple[Path, ...]]] = []
            for q, (mode, paths) in zip(old.qos, old.paths, strict=True):
                indexes = broken.get(mode, ())
                if indexes:
                    request = self._request(subscription_id, label, old.variable_id, old.pub_interval_ms, q,
                                            old.publisher_router, old.edge_router, old.publisher_routers,
                                            old.subscriber_routers)
                    paths = self._replace_paths(request, mode, q, paths, indexes, avoid=siblings,
                                                shared_sink=bool(siblings) and not old.exit_channel)
                repaired.append((mode, paths))
            for q, (mode, paths) in zip(old.qos, repaired, strict=True):
                request = self._request(subscription_id, label, old.variable_id, old.pub_interval_ms, q,
                                        old.publisher_router, old.edge_router, old.publisher_routers,
                                        old.subscriber_routers)
                alloc.commit(self.reservations(mode),
                             alloc.allocation_for_paths(self.topology, self.reservations(mode), request, paths))
                committed.append(mode)
        except GridStatError:
            for mode in committed:
                alloc.release(self.reservations(mode), subscription_id)
            self.restore(old)
            return None
        self.version += 1
        record = replace(old, paths=tuple(repaired), version=self.version)
        self._index(record, +1)
        return record

    def _replace_paths(self, request: alloc.SubscriptionRequest, mode: int, q: ModeQoS,
                       paths: tuple[Path, ...], indexes: tuple[int, ...], *, avoid: frozenset[str] = frozenset(),
                       shared_sink: bool = False) -> tuple[Path, ...]:
        """``paths`` with those at ``indexes`` replaced by new ones disjoint from the rest (raises a
        GridStatError when there are none); a multi-homed end's edge routers kept paths hold are not
        offered again (one path per edge router, docs/redundancy.md). ``avoid`` and ``shared_sink``
        as for :meth:`admit_path` (a segment's siblings)."""
        kept = [p for i, p in enumerate(paths) if i not in indexes]
        interiors = {r for p in kept for r in p.routers[1:-1]} | avoid
        sources = tuple(r for r in request.sources
                        if len(request.sources) == 1 or r not in {p.routers[0] for p in kept})
        sinks = tuple(r for r in request.sinks if len(request.sinks) == 1 or r not in {p.routers[-1] for p in kept})
        if not sources or not sinks:
            raise NoFeasiblePath("every edge router of the multi-homed end carries a kept path",
                                       field="redundancy")
        partial = replace(request, redundancy=len(indexes), publisher_router=sources[0],
                          subscriber_router=sinks[0], publisher_routers=sources if len(sources) > 1 else (),
                          subscriber_routers=sinks if len(sinks) > 1 else ())
        base = self.allowed(mode, request.variable_id, request.sources, request.sinks,
                            max(q.redundancy, 2) if shared_sink else q.redundancy)

        def usable(ch: Channel) -> bool:
            return base(ch) and ch.src not in interiors and ch.dst not in interiors

        fresh = iter(alloc.plan_subscription(self.topology, self.reservations(mode), partial,
                                             forwarding_ms=self.forwarding_ms, allowed=usable).paths)
        return tuple(next(fresh) if i in indexes else p for i, p in enumerate(paths))

    def _segment_siblings(self, record: SubscriptionRecord) -> frozenset[str]:
        """The routers of the other segments here of the same inter-cloud subscription and mode (its
        other disjoint paths, docs/redundancy.md "Across clouds"), but this segment's own ends."""
        if not record.segment:
            return frozenset()
        key = _sibling_key(record.subscription_id)
        out = {r for rid, other in self.subscriptions.items()
               if rid != record.subscription_id and other.segment and _sibling_key(rid) == key
               for _, paths in other.paths for p in paths for r in p.routers}
        return frozenset(out - {record.publisher_router, record.edge_router})

    def restore(self, record: SubscriptionRecord) -> None:
        """Re-reserve a stored subscription on its stored paths (broker restart)."""
        label = f"{record.edge_router}.{record.exit_channel}" if record.exit_channel else record.subscriber
        for q, (mode, paths) in zip(record.qos, record.paths, strict=True):
            request = self._request(record.subscription_id, label, record.variable_id, record.pub_interval_ms, q,
                                    record.publisher_router, record.edge_router, record.publisher_routers,
                                    record.subscriber_routers)
            a = alloc.allocation_for_paths(self.topology, self.reservations(mode), request, paths)
            alloc.commit(self.reservations(mode), a)
        self._index(record, +1)
        self.version = max(self.version, record.version)

    def remove(self, subscription_id: str) -> SubscriptionRecord:
        record = self.subscriptions.get(subscription_id)
        if record is None:
            raise NotFound(f"no subscription {subscription_id!r} in cloud {self.name!r}", field="subscription_id")
        for mode, _ in record.paths:
            alloc.release(self.reservations(mode), subscription_id)
        self._index(record, -1)
        return record

    def _request(self, sid: str, subscriber: str, variable_id: int, pub_interval_ms: int, q: ModeQoS,
                 pub_router: str, sub_router: str, pub_routers: tuple[str, ...] = (),
                 sub_routers: tuple[str, ...] = ()) -> alloc.SubscriptionRequest:
        return alloc.SubscriptionRequest(sid, variable_id, pub_router, sub_router, subscriber, pub_interval_ms,
                                         q.interval_ms, q.latency_ms, q.redundancy, q.priority,
                                         publisher_routers=pub_routers, subscriber_routers=sub_routers)

    def _index(self, record: SubscriptionRecord, sign: int) -> None:
        for mode, paths in record.paths:
            parents = self._parents.setdefault((mode, record.variable_id), {})
            for path in paths:
                hops = path.routers
                for u, w in itertools.pairwise(hops):
                    counter = parents.setdefault(w, Counter())
                    counter[u] += sign
                    if counter[u] <= 0:
                        del counter[u]
                        if not counter:
                            del parents[w]
                for r in hops:
                    if sign > 0:
                        self._by_router.setdefault(r, set()).add(record.subscription_id)
                    else:
                        self._by_router.get(r, set()).discard(record.subscription_id)
            if not parents:
                self._parents.pop((mode, record.variable_id), None)
        key = (record.subscriber, record.variable)
        if sign > 0:
            self.subscriptions[record.subscription_id] = record
            if not record.segment:
                self._by_subscriber[key] = record.subscription_id
        else:
            self.subscriptions.pop(record.subscription_id, None)
            if self._by_subscriber.get(key) == record.subscription_id:
                del self._by_subscriber[key]

    # -- what the routers should hold ----------------------------------------------------------
    def desired_channels(self, router: str) -> list[DesiredChannel]:
        out: dict[str, DesiredChannel] = {}
        for neighbour in {*self.topology.out_channels(router), *self.topology.in_channels(router)}:
            ep = self.endpoints.get(neighbour)
            if ep is not None:
                out[neighbour] = DesiredChannel(neighbour, ep.router_id, "router", ep.event_host, ep.event_port)
        for c in self.clients_at(router):
            out[c.channel] = self._client_channel(c, router)
        for f in self.foreign.values():
            if f.border_router == router:
                out[f.foreign_router] = DesiredChannel(f.foreign_router, f.foreign_id, "router", f.host, f.port,
                                                       level=f.level)
        return sorted(out.values(), key=lambda d: d.name)

    def clients_at(self, router: str) -> list[Client]:
        """The clients attached at ``router``, as their first edge router or one more."""
        return [c for c in self.clients.values() if c.edge_router == router or (c.also and router in c.edge_routers)]

    def desired_channel(self, router: str, name: str) -> DesiredChannel:
        """The desired channel of one client (cheap: no scan of the router's neighbours)."""
        for c in self.clients.values():
            if c.channel == name and router in c.edge_routers:
                return self._client_channel(c, router)
        raise NotFound(f"router {router!r} should have no channel {name!r}", field="channel")

    def _client_channel(self, c: Client, router: str) -> DesiredChannel:
        flood_all = c.kind == "subscriber" and c.name in self.flood_all
        host, port = c.address_at(router)
        return DesiredChannel(c.channel, c.client_id, c.kind, host, port, flood_all=flood_all)

    def desired_routes(self, router: str) -> list[DesiredRoute]:
        out: list[DesiredRoute] = []
        for sid in sorted(self._by_router.get(router, ())):
            out.extend(d for r, d in self.routes_of(self.subscriptions[sid]) if r == router)
        return out

    def routes_of(self, record: SubscriptionRecord) -> list[tuple[str, DesiredRoute]]:
        """(router, route) pairs of a subscription: one per router per path per mode."""
        out: list[tuple[str, DesiredRoute]] = []
        last = record.exit_channel or SUBSCRIBER_CHANNEL_PREFIX + record.subscriber
        for q, (mode, paths) in zip(record.qos, record.paths, strict=True):
            if record.frames_per_s:  # whole frames (docs/frame-rates.md)
                interval = filtering.round_down_interval(max(1, q.interval_ms), record.pub_interval_ms,
                                                         record.frames_per_s)
            else:
                interval = max(record.pub_interval_ms,
                               q.interval_ms // record.pub_interval_ms * record.pub_interval_ms)
            for index, path in enumerate(paths):
                hops = path.routers
                for i, router in enumerate(hops):
                    channel = hops[i + 1] if i + 1 < len(hops) else last
                    out.append((router, DesiredRoute(f"{record.subscription_id}/{index}", record.variable_id, mode,
                                                     channel, interval, q.priority, record.pub_interval_ms,
                                                     record.alert, record.version, q.price,
                                                     q.best_effort or record.best_effort, record.frames_per_s)))
        return out
