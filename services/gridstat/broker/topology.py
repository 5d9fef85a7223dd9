"""One cloud's data-plane topology as the leaf QoS broker sees it (dissertation 1, 3.1.1, Fig. A.9).

The broker has complete knowledge of its cloud (dissertation 3.3.1): for every
status router its role and ``msgPerSec``, for every event channel (EC) its
bandwidth and latency. ECs are directed - the prototype opens one UDP socket per
direction and the XML ``edge`` element names a source and a destination - so a
physical link is normally added as two channels. At most one channel joins an
ordered pair of routers, as ``EventChannelInfo.linkId(srcSR, dstSR)`` implies;
that is also what lets a path be a plain tuple of router names.

The model is mutable on purpose: ``addStatusRouter``/``addEventChannel`` and the
matching removes change it at run time. Every rejected change raises a specific
:class:`~gridstat.errors.GridStatError` naming the offending field.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from gridstat.core.model import check_name
from gridstat.errors import DuplicateName, NotFound, ValidationError


class RouterRole(enum.Enum):
    """``vertex type`` of the broker configuration: edge (ESR), internal (SR) or border (BSR) router, or
    one router that is both an edge and a border router (a substation's router that hosts its PMUs
    and ends an inter-cloud channel; docs/topology.md, "Router roles")."""

    EDGE = "edge"
    INTERNAL = "internal"
    BORDER = "border"
    EDGE_BORDER = "edge-border"

    @property
    def hosts_clients(self) -> bool:
        """Publishers and subscribers attach here (an edge router's proxy)."""
        return self is RouterRole.EDGE or self is RouterRole.EDGE_BORDER

    @property
    def joins_clouds(self) -> bool:
        """Inter-cloud channels end here."""
        return self is RouterRole.BORDER or self is RouterRole.EDGE_BORDER


@dataclass(frozen=True)
class WireCost:
    """Bytes one status event occupies on an event channel, for bandwidth reservation.

    Dissertation 2.1.5: a base event is 24 bytes and one packet on the wire is 38 B of
    headers + 24 B = 62 B (the 496 bits of the chapter 8 throughput arithmetic).
    Routers pack up to ``events_per_packet`` events per UDP packet, but only when they
    can do so without blocking, so a *guarantee* cannot count on packing: the default
    charges every event a whole packet (62 B). A broker that trusts packing may set
    ``events_per_packet=4`` (24 + 38/4 = 33.5 B per event).
    """

    event_bytes: int = 24
    header_bytes_per_packet: int = 38
    events_per_packet: int = 1

    def __post_init__(self) -> None:
        if self.event_bytes <= 0 or self.header_bytes_per_packet < 0 or self.events_per_packet <= 0:
            raise ValidationError(f"wire cost {self} must have positive sizes", field="wire_cost")

    @property
    def bits_per_event(self) -> Fraction:
        return 8 * (self.event_bytes + Fraction(self.header_bytes_per_packet, self.events_per_packet))


@dataclass(frozen=True)
class Router:
    """A status router: ``capacity_eps`` is its forwarding budget in events/s (``msgPerSec``)."""

    name: str
    role: RouterRole
    capacity_eps: float


@dataclass(frozen=True)
class Channel:
    """A directed event channel ``src -> dst``.

    ``event_capacity_eps`` bounds the events/s independently of bandwidth (for
    example a send thread's measured ceiling); ``None`` means bandwidth alone.
    """

    name: str
    src: str
    dst: str
    bandwidth_bps: float
    latency_ms: float
    event_capacity_eps: float | None = None


def _check_positive(value: float, *, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValidationError(f"{what} must be a positive finite number, got {value!r}", field=what)


class Topology:
    """Routers and channels of one cloud with adjacency dicts for the path searches."""

    def __init__(self, *, wire: WireCost | None = None) -> None:
        self.wire = wire if wire is not None else WireCost()
        self._routers: dict[str, Router] = {}
        self._channels: dict[str, Channel] = {}
        #: out_adj[u][v] is the channel u -> v; in_adj[v][u] the same channel seen from v.
        self._out: dict[str, dict[str, Channel]] = {}
        self._in: dict[str, dict[str, Channel]] = {}
        self._capacity: dict[str, Fraction] = {}
        self._capacity_f: dict[str, float] = {}

    # -- routers -------------------------------------------------------------------------------
    def add_router(self, name: str, role: RouterRole = RouterRole.INTERNAL, capacity_eps: float = 50_000) -> Router:
        """``addStatusRouter``; the 50k events/s default is the dissertation's headline (10.1)."""
        check_name(name, what="router")
        if name in self._routers:
            raise DuplicateName(f"router {name!r} already exists", field="router")
        if not isinstance(role, RouterRole):
            raise ValidationError(f"router role must be a RouterRole, got {role!r}", field="role")
        _check_positive(capacity_eps, what="capacity_eps")
        router = Router(name, role, capacity_eps)
        self._routers[name] = router
        self._out[name] = {}
        self._in[name] = {}
        return router

    def remove_router(self, name: str) -> tuple[Channel, ...]:
        """Remove a router and every channel touching it; returns those channels (to reroute)."""
        self.router(name)
        gone = (*self._out[name].values(), *self._in[name].values())
        for channel in gone:
            self.remove_channel(channel.name)
        del self._routers[name], self._out[name], self._in[name]
        return gone

    def router(self, name: str) -> Router:
        try:
            return self._routers[name]
        except KeyError:
            raise NotFound(f"no router named {name!r} in this cloud", field="router") from None

    @property
    def routers(self) -> Mapping[str, Router]:
        return self._routers

    # -- channels ------------------------------------------------------------------------------
    def add_channel(
        self,
        src: str,
        dst: str,
        *,
        bandwidth_bps: float,
        latency_ms: float,
        event_capacity_eps: float | None = None,
        name: str | None = None,
    ) -> Channel:
        """``addEventChannel`` for one direction; the name defaults to ``"src->dst"``."""
        for end, what in ((src, "src"), (dst, "dst")):
            if end not in self._routers:
                raise NotFound(f"channel endpoint {what}={end!r} is not a router of this cloud", field=what)
        if src == dst:
            raise ValidationError(f"a channel cannot loop from {src!r} to itself", field="dst")
        _check_positive(bandwidth_bps, what="bandwidth_bps")
        if isinstance(latency_ms, bool) or not isinstance(latency_ms, int | float) or not math.isfinite(latency_ms) \
                or latency_ms < 0:
            raise ValidationError(f"latency_ms must be finite and >= 0, got {latency_ms!r}", field="latency_ms")
        if event_capacity_eps is not None:
            _check_positive(event_capacity_eps, what="event_capacity_eps")
        name = f"{src}->{dst}" if name is None else name
        if name.startswith("sub:"):
            raise ValidationError(f"channel name {name!r} is reserved for subscriber channels", field="name")
        if name in self._channels:
            raise DuplicateName(f"channel {name!r} already exists", field="name")
        if dst in self._out[src]:
            raise DuplicateName(f"routers {src!r} -> {dst!r} are already joined by channel "
                                f"{self._out[src][dst].name!r}", field="dst")
        channel = Channel(name, src, dst, bandwidth_bps, latency_ms, event_capacity_eps)
        self._channels[name] = channel
        self._out[src][dst] = channel
        self._in[dst][src] = channel
        capacity = Fraction(bandwidth_bps) / self.wire.bits_per_event
        if event_capacity_eps is not None:
            capacity = min(capacity, Fraction(event_capacity_eps))
        self._capacity[name] = capacity
        self._capacity_f[name] = float(capacity)
        return channel

    def add_link(self, a: str, b: str, *, bandwidth_bps: float, latency_ms: float) -> tuple[Channel, Channel]:
        """Both directions of a physical link, the usual case."""
        first = self.add_channel(a, b, bandwidth_bps=bandwidth_bps, latency_ms=latency_ms)
        try:
            second = self.add_channel(b, a, bandwidth_bps=bandwidth_bps, latency_ms=latency_ms)
        except Exception:
            self.remove_channel(first.name)
            raise
        return first, second

    def remove_channel(self, name: str) -> Channel:
        channel = self.channel(name)
        del self._channels[name], self._capacity[name], self._capacity_f[name]
        del self._out[channel.src][channel.dst], self._in[channel.dst][channel.src]
        return channel

    def channel(self, name: str) -> Channel:
        try:
            return self._channels[name]
        except KeyError:
            raise NotFound(f"no event channel named {name!r} in this cloud", field="channel") from None

    def channel_between(self, src: str, dst: str) -> Channel:
        try:
            return self._out[src][dst]
        except KeyError:
            raise NotFound(f"no event channel {src!r} -> {dst!r}", field="channel") from None

    def channel_capacity_eps(self, name: str) -> Fraction:
        """Events/s the channel can carry: bandwidth / bits per event, capped by ``event_capacity_eps``."""
        try:
            return self._capacity[name]
        except KeyError:
            raise NotFound(f"no event channel named {name!r} in this cloud", field="channel") from None

    def channel_capacity_float(self, name: str) -> float:
        """The same as a float, for the fast (tolerant) usability filter of the path search."""
        return self._capacity_f[name]

    def out_channels(self, router: str) -> Mapping[str, Channel]:
        """Channels leaving ``router`` keyed by their destination router."""
        return self._out[router]

    def in_channels(self, router: str) -> Mapping[str, Channel]:
        """Channels entering ``router`` keyed by their source router."""
        return self._in[router]

    @property
    def channels(self) -> Mapping[str, Channel]:
        return self._channels

    def __iter__(self) -> Iterator[Router]:
        return iter(self._routers.values())

    def __len__(self) -> int:
        return len(self._routers)
