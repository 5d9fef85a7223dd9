"""Admission and path allocation for one subscription in one cloud (dissertation 2.1.1, 3.1, 3.3.1).

``plan_subscription`` is the leaf QoS broker's decision: given the topology and
what is already reserved, find ``redundancy`` interior-disjoint paths from the
publisher's edge router to the subscriber's, each within the latency bound
(dissertation 2.1: timeliness holds on *each* path), on channels and routers that
can absorb the subscription's rate after filtering. It returns the routes the
broker would install with ``setupPath`` (one per router per path, route id
``"<subscription>/<path index>"`` as the prototype's ``redundantId``) and the
reservation deltas; :func:`commit` applies them and :func:`release` undoes them
(``commitSub``/``removeSub`` of the IDL: plan, then commit).

Search order, cheapest first: (1) the capacity-filtered search; if its paths meet
the bound and pass the exact capacity check, admit. (2) Otherwise the unfiltered
search decides the reason: too few disjoint paths -> NoFeasiblePath; no path set
found within the bound -> LatencyUnattainable; else capacity is what blocks ->
CapacityExceeded, unless the in-bound paths fit after all (the filtered
min-total-latency set can exceed the bound where another set does not), in which
case they are admitted. Offers are grantable alternatives: LatencyUnattainable
offers the worst latency of a capacity-feasible set (else the topology's best);
CapacityExceeded offers that latency at the asked interval and the smallest
interval that fits on the in-bound paths.

Minimising total latency is exact for one path and optimal in sum for k paths;
minimising the *worst* of k disjoint paths is NP-hard in general (it contains
2-partition). For k > 1 a set beyond the bound is retried once without the channels
that no in-bound path can use (sound pruning); a LatencyUnattainable offer is then
achievable but not necessarily the least possible, and the refusal can in rare
cases be a false negative.
Priority orders queues in the data plane and is carried along, not used here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from gridstat.broker.paths import (
    DEFAULT_FORWARDING_MS,
    Path,
    Usable,
    disjoint_path_sets,
    max_latency,
    shortest_path,
    within_bound,
)
from gridstat.broker.rejections import CapacityExceeded, LatencyUnattainable, NoFeasiblePath, Offer
from gridstat.broker.resources import SUBSCRIBER_CHANNEL_PREFIX, ChannelDelta, Reservations, subscriber_channel
from gridstat.broker.topology import Topology
from gridstat.core.filtering import round_down_interval
from gridstat.core.model import MAX_VARIABLE_ID, PRIORITIES, PRIORITY_HIGH, check_name
from gridstat.errors import ValidationError

#: How many shared-interval candidates the CapacityExceeded offer verifies before the union bound.
OFFER_CANDIDATES = 8


@dataclass(frozen=True)
class SubscriptionRequest:
    """One subscription as the edge router relays it to the leaf QoS broker (one mode)."""

    subscription_id: str
    variable_id: int
    publisher_router: str
    subscriber_router: str
    subscriber: str
    pub_interval_ms: int
    sub_interval_ms: int
    latency_bound_ms: float
    redundancy: int = 1
    priority: int = PRIORITY_HIGH
    #: Every edge router of a multi-homed publisher or subscriber (docs/redundancy.md, "Multi-homed
    #: clients"), ``publisher_router``/``subscriber_router`` first; empty for a single one.
    publisher_routers: tuple[str, ...] = ()
    subscriber_routers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.subscription_id or "/" in self.subscription_id:
            raise ValidationError(f"subscription id {self.subscription_id!r} must be non-empty without '/'",
                                  field="subscription_id")
        check_name(self.subscriber, what="subscriber")
        if not 0 <= self.variable_id <= MAX_VARIABLE_ID:
            raise ValidationError(f"variable id {self.variable_id} out of range", field="variable_id")
        round_down_interval(self.sub_interval_ms, self.pub_interval_ms)  # validates both intervals
        if not self.latency_bound_ms > 0:
            raise ValidationError(f"latency bound must be > 0 ms, got {self.latency_bound_ms}",
                                  field="latency_bound_ms")
        if self.redundancy < 1:
            raise ValidationError(f"redundancy must be >= 1, got {self.redundancy}", field="redundancy")
        if self.priority not in PRIORITIES:
            raise ValidationError(f"priority must be 0..6, got {self.priority}", field="priority")
        for first, every, name in ((self.publisher_router, self.publisher_routers, "publisher_routers"),
                                   (self.subscriber_router, self.subscriber_routers, "subscriber_routers")):
            if every and (every[0] != first or len(set(every)) != len(every)):
                raise ValidationError(f"{name} {every!r} must list distinct routers, {first!r} first", field=name)

    @property
    def interval_ms(self) -> int:
        """The interval the filters use: rounded down to a multiple of the publication interval (4.2)."""
        return round_down_interval(self.sub_interval_ms, self.pub_interval_ms)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.publisher_routers or (self.publisher_router,)

    @property
    def sinks(self) -> tuple[str, ...]:
        return self.subscriber_routers or (self.subscriber_router,)

    def ends(self) -> tuple[str | tuple[str, ...], str | tuple[str, ...]]:
        """The path search's ends: one router, or several for a multi-homed client."""
        src, dst = self.sources, self.sinks
        return (src if len(src) > 1 else src[0]), (dst if len(dst) > 1 else dst[0])

    def last_channel(self, router: str) -> str:
        """The subscriber's pseudo channel at ``router``: ``sub:<name>`` at its first edge router,
        ``sub:<name>@<router>`` at the others (a resource of its own; ``@`` is in no name)."""
        base = subscriber_channel(self.subscriber)
        return base if router == self.subscriber_router else f"{base}@{router}"


@dataclass(frozen=True)
class Route:
    """One routing-table entry to install: at ``router``, send on ``channel`` for path ``route_id``."""

    router: str
    channel: str
    route_id: str


@dataclass(frozen=True)
class Allocation:
    """An admitted plan: the paths, the routes to install on each router, and the reservation deltas."""

    request: SubscriptionRequest
    interval_ms: int
    paths: tuple[Path, ...]
    routes: tuple[Route, ...]
    deltas: tuple[ChannelDelta, ...]
    #: ``Reservations.version`` when the deltas were checked exactly; commit skips the re-check if unchanged.
    checked_at: int = -1


def _routes_and_deltas(
    topology: Topology, reservations: Reservations, request: SubscriptionRequest, paths: tuple[Path, ...],
    interval: int,
) -> tuple[tuple[Route, ...], tuple[ChannelDelta, ...]]:
    routes: list[Route] = []
    crossing: dict[str, tuple[str, list[int]]] = {}
    for index, path in enumerate(paths):
        route_id = f"{request.subscription_id}/{index}"
        hops = path.routers
        for i, router in enumerate(hops):
            channel = topology.channel_between(router, hops[i + 1]).name if i + 1 < len(hops) else \
                request.last_channel(router)
            routes.append(Route(router, channel, route_id))
            crossing.setdefault(channel, (router, []))[1].append(interval)
    deltas = tuple(
        ChannelDelta(channel, router, request.variable_id, request.pub_interval_ms, tuple(intervals),
                     reservations.rate_increase(channel, request.variable_id, request.pub_interval_ms, intervals))
        for channel, (router, intervals) in crossing.items()
    )
    return tuple(routes), deltas


def _search(
    topology: Topology, request: SubscriptionRequest, check: Usable | None, forwarding_ms: float
) -> tuple[tuple[Path, ...], int]:
    """The min-total-latency set of up to k paths, and the largest j whose optimal j-set meets the bound."""
    (src, dst), k = request.ends(), request.redundancy
    if k == 1:
        path = shortest_path(topology, src, dst, usable=check, forwarding_ms=forwarding_ms)
        if path is None:
            return (), 0
        return (path,), int(path.latency_ms <= request.latency_bound_ms)
    best: tuple[Path, ...] = ()
    within = 0
    for paths in disjoint_path_sets(topology, src, dst, k, usable=check, forwarding_ms=forwarding_ms):
        best = paths
        if max_latency(paths) <= request.latency_bound_ms:
            within = len(paths)
    if within < k and best:
        # Min total latency may pair a fast path with one beyond the bound; retry without
        # the channels no in-bound path can use (sound pruning, paths.within_bound).
        pruned = within_bound(topology, src, dst, request.latency_bound_ms, usable=check,
                              forwarding_ms=forwarding_ms)
        for paths in disjoint_path_sets(topology, src, dst, k, usable=pruned, forwarding_ms=forwarding_ms):
            if max_latency(paths) <= request.latency_bound_ms:
                within = max(within, len(paths))
                if len(paths) == k:
                    return paths, within
    return best, within


def _both(a: Usable, b: Usable | None) -> Usable:
    if b is None:
        return a
    return lambda channel: a(channel) and b(channel)


def plan_subscription(
    topology: Topology,
    reservations: Reservations,
    request: SubscriptionRequest,
    *,
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
    allowed: Usable | None = None,
) -> Allocation:
    """Decide one subscription; raises NoFeasiblePath, LatencyUnattainable or CapacityExceeded.

    ``allowed`` narrows the channels every search may use whatever the capacity: the
    leaf broker passes routers that are down and the per-variable tree rule there.
    """
    for router in (*request.sources, *request.sinks):
        topology.router(router)
    interval = request.interval_ms
    k = request.redundancy
    for router in request.sinks:
        reservations.check_attachment(request.last_channel(router), router)

    bound = request.latency_bound_ms
    usable = _both(reservations.usable_filter(request.variable_id, request.pub_interval_ms, interval), allowed)
    paths, _ = _search(topology, request, usable, forwarding_ms)
    #: Worst latency of a path set that capacity can take at the asked interval (an offer), if any.
    feasible_latency: float | None = None
    if len(paths) == k:
        routes, deltas = _routes_and_deltas(topology, reservations, request, paths, interval)
        if reservations.shortfall(deltas) is None:
            if max_latency(paths) <= bound:
                return Allocation(request, interval, paths, routes, deltas, reservations.version)
            feasible_latency = max_latency(paths)
    free, within = _search(topology, request, allowed, forwarding_ms)
    if len(free) < k:
        raise NoFeasiblePath(
            f"{_end(request.sources)} -> {_end(request.sinks)} has {len(free)} interior-disjoint "
            f"path(s); {k} asked{_per_edge(request)}", offer=Offer(max_redundancy=len(free)), field="redundancy")
    if max_latency(free) <= bound:
        fast = free
    elif len(paths) == k and max_latency(paths) <= bound:
        fast = paths  # min total latency is not min worst latency: the filtered set may be the one in bound
    else:
        best = max_latency(free) if feasible_latency is None else feasible_latency
        raise LatencyUnattainable(
            f"the best {k} path(s) {_end(request.sources)} -> {_end(request.sinks)} found take "
            f"{best:.6g} ms > bound {bound:.6g} ms",
            # max_redundancy: how many paths meet the bound, when some do; nothing to say when none does
            # (the paths exist: the latency is what cannot be had)
            offer=Offer(best_latency_ms=best, max_redundancy=within or None), field="latency_bound_ms")
    routes, deltas = _routes_and_deltas(topology, reservations, request, fast, interval)
    blocked = reservations.shortfall(deltas)
    if blocked is None:
        return Allocation(request, interval, fast, routes, deltas, reservations.version)
    # Two alternatives: the asked interval on slower paths, or the asked latency at a longer interval.
    offer = Offer(best_latency_ms=feasible_latency,
                  min_interval_ms=_min_interval(topology, reservations, request, fast))
    raise CapacityExceeded(f"subscription {request.subscription_id!r}: {blocked.describe()}", shortfall=blocked,
                           offer=offer)


def _end(routers: tuple[str, ...]) -> str:
    return repr(routers[0]) if len(routers) == 1 else "{" + ", ".join(map(repr, routers)) + "}"


def _per_edge(request: SubscriptionRequest) -> str:
    multi = [len(r) for r in (request.sources, request.sinks) if len(r) > 1]
    return f" (a multi-homed end carries one path per edge router: at most {min(multi)})" if multi else ""


def _min_interval(
    topology: Topology, reservations: Reservations, request: SubscriptionRequest, paths: tuple[Path, ...]
) -> int | None:
    """A longer interval (a multiple of the publication interval) that fits on ``paths``, if one is found.

    Adding interval s raises a channel's rate by at most 1000/s, exactly 1000/s where the
    variable is new, so s >= n*1000/room fits a resource with ``room`` left that n deltas
    charge: its rounding up to a multiple of p is the answer for a variable new on the
    path. Where the variable already flows, a multiple of an interval there costs
    nothing on that hop, so those few smaller candidates are tried first. Every
    candidate is verified exactly; at most OFFER_CANDIDATES + 1 are, to keep a
    refusal as cheap as an admission. None if a full resource leaves no candidate.
    """
    pub = request.pub_interval_ms
    start = request.interval_ms
    _, deltas = _routes_and_deltas(topology, reservations, request, paths, start)
    least: int | None = start
    charged: dict[str, int] = {}
    shared: set[int] = set()
    for delta in deltas:
        charged[delta.router] = charged.get(delta.router, 0) + 1
        for x in reservations.intervals(delta.channel, delta.variable_id):
            shared.add(x if x > start else x * (start // x + 1))
        if not delta.channel.startswith(SUBSCRIBER_CHANNEL_PREFIX):
            room = topology.channel_capacity_eps(delta.channel) - reservations.channel_load(delta.channel)
            least = None if least is None or room <= 0 else max(least, -(-1000 // room))
    for router, n in charged.items():
        room = Fraction(topology.router(router).capacity_eps) - reservations.router_load(router)
        least = None if least is None or room <= 0 else max(least, -(-n * 1000 // room))
    upper = None if least is None else -(-least // pub) * pub
    candidates = sorted(c for c in shared if upper is None or c < upper)[:OFFER_CANDIDATES]
    for candidate in [*candidates, *([] if upper is None else [upper])]:
        _, deltas = _routes_and_deltas(topology, reservations, request, paths, candidate)
        if reservations.shortfall(deltas) is None:
            return candidate
    return None


def allocation_for_paths(
    topology: Topology, reservations: Reservations, request: SubscriptionRequest, paths: tuple[Path, ...]
) -> Allocation:
    """The allocation of known paths (a broker restoring its state): routes and deltas, no search."""
    routes, deltas = _routes_and_deltas(topology, reservations, request, paths, request.interval_ms)
    return Allocation(request, request.interval_ms, paths, routes, deltas, -1)


def commit(reservations: Reservations, allocation: Allocation) -> None:
    """Reserve a planned allocation (re-checked exactly; the state may have moved since planning)."""
    reservations.commit(allocation.request.subscription_id, allocation.deltas, checked_at=allocation.checked_at)


def release(reservations: Reservations, subscription_id: str) -> tuple[ChannelDelta, ...]:
    """Free everything a subscription reserved."""
    return reservations.release(subscription_id)
