"""Reservation bookkeeping by the rate after filtering (dissertation 3.1 admission, 4.2.1, 4.3, 10.2.2).

What a channel carries for a variable is not one stream per subscription: the
deterministic filter forwards an event on a channel if it passes *any* interval
routed over that channel, and sends one copy per timestamp (requirements 1 and 4
of dissertation 4). So the load of variable v on channel c is a function of the
*set* of subscription intervals routed over c, and a new subscription costs only
the increase of that function. A duplicate subscription, or one at a multiple of
an interval already there, costs nothing (the forwarded rate is that of the union of
the intervals, dissertation 4.2.1). The prototype estimated load from
the smallest interval only (dissertation 10.2.2); we count the union exactly.

The rate itself, and why it is exact, is in :mod:`gridstat.broker.rates`.

Arithmetic is in :class:`~fractions.Fraction` so that releasing everything returns
every load to exactly zero. The path search's usability filter uses float mirrors
with a tolerance that only ever admits more; the exact check decides.

Router load is the events/s a router *sends*: the sum over its outgoing channels,
including the channels to its local subscribers (``sub:<name>``). Sending is the
per-event work of a GridStat router (one enqueue and one send-thread write per
outgoing EC, dissertation 3.2.4) and it counts every event the router handles once
per copy, so it is the quantity ``msgPerSec`` bounds. Subscriber channels have no
bandwidth model of their own: the subscriber supplies its own UDP port.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from gridstat.broker.rates import HYPERPERIOD_LIMIT, forwarded_rate
from gridstat.broker.rejections import CapacityExceeded, Shortfall
from gridstat.broker.topology import Channel, Topology
from gridstat.core.filtering import smallest_non_multiples
from gridstat.errors import DuplicateName, NotFound, ValidationError

SUBSCRIBER_CHANNEL_PREFIX = "sub:"
_ZERO = Fraction(0)


def subscriber_channel(subscriber: str) -> str:
    """The pseudo-channel from a subscriber's edge router to the subscriber (last hop of a route)."""
    return f"{SUBSCRIBER_CHANNEL_PREFIX}{subscriber}"


@dataclass(frozen=True)
class ChannelDelta:
    """What an allocation adds on one channel for its variable.

    ``intervals`` holds one rounded interval per path crossing the channel (the
    subscriber channel is crossed by every redundant path); ``increase_eps`` is the
    forwarded-rate increase computed when the allocation was planned.
    """

    channel: str
    router: str
    variable_id: int
    pub_interval_ms: int
    intervals: tuple[int, ...]
    increase_eps: Fraction


class _Entry:
    """The intervals routed over one (channel, variable), kept as a multiset so removal is exact."""

    __slots__ = ("counts", "non_multiples", "pub", "rate", "router")

    def __init__(self, router: str, pub: int) -> None:
        self.router = router
        self.pub = pub
        self.counts: Counter[int] = Counter()
        self.non_multiples: tuple[int, ...] = ()
        self.rate = _ZERO


class Reservations:
    """Per-channel and per-router reserved events/s of one cloud, updated incrementally."""

    def __init__(self, topology: Topology, *, hyperperiod_limit: int = HYPERPERIOD_LIMIT) -> None:
        self.topology = topology
        self.hyperperiod_limit = hyperperiod_limit
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._channel_load: dict[str, Fraction] = {}
        self._router_load: dict[str, Fraction] = {}
        self._channel_load_f: dict[str, float] = {}
        self._router_load_f: dict[str, float] = {}
        self._held: dict[str, tuple[ChannelDelta, ...]] = {}
        #: Bumped by every commit and release: a plan made at the current version needs no re-check.
        self.version = 0
        #: subscriber channel -> its edge router, and how many (channel, variable) entries use it
        self._attached: dict[str, str] = {}
        self._attached_entries: dict[str, int] = {}

    # -- queries ---------------------------------------------------------------------------------
    def channel_load(self, channel: str) -> Fraction:
        return self._channel_load.get(channel, _ZERO)

    def router_load(self, router: str) -> Fraction:
        return self._router_load.get(router, _ZERO)

    def intervals(self, channel: str, variable_id: int) -> Counter[int]:
        entry = self._entries.get((channel, variable_id))
        return Counter(entry.counts) if entry else Counter()

    def attached_router(self, channel: str) -> str | None:
        """The edge router a subscriber channel hangs off, while anything is reserved on it."""
        return self._attached.get(channel)

    def check_attachment(self, channel: str, router: str) -> None:
        """A subscriber is attached to one edge router; a reservation elsewhere is a caller error."""
        attached = self.attached_router(channel)
        if attached is not None and attached != router:
            raise ValidationError(f"{channel!r} is attached to router {attached!r}, not {router!r}", field="router")

    @property
    def held(self) -> Mapping[str, tuple[ChannelDelta, ...]]:
        return self._held

    def is_empty(self) -> bool:
        return not (self._entries or self._channel_load or self._router_load or self._held or self._attached)

    def rate_increase(self, channel: str, variable_id: int, pub_interval_ms: int, intervals: Iterable[int]
                      ) -> Fraction:
        """Forwarded-rate increase on ``channel`` if ``intervals`` were routed over it too."""
        added = tuple(intervals)
        entry = self._entries.get((channel, variable_id))
        if entry is None:
            return forwarded_rate(pub_interval_ms, added, hyperperiod_limit=self.hyperperiod_limit)
        if entry.pub != pub_interval_ms:
            raise ValidationError(f"variable {variable_id} is reserved at publication interval {entry.pub} ms, "
                                  f"not {pub_interval_ms} ms", field="pub_interval_ms")
        if all(any(s % k == 0 for k in entry.non_multiples) for s in added):
            return _ZERO
        new = forwarded_rate(pub_interval_ms, entry.non_multiples + added, hyperperiod_limit=self.hyperperiod_limit)
        return new - entry.rate

    def usable_filter(self, variable_id: int, pub_interval_ms: int, interval_ms: int) -> Callable[[Channel], bool]:
        """A fast, tolerant channel test to prune the path search: may say yes wrongly, never no wrongly.

        A channel is usable if it and its sending router have room for the increase the
        subscription would cause there (zero where the variable already flows at a
        divisor of the interval). The exact check is :meth:`shortfall`. Adding an interval
        s raises a forwarded rate by at most 1000/s, so only nearly full channels need the
        rate computation; the rest pass on two float comparisons.
        """
        entries = self._entries
        channel_load = self._channel_load_f
        router_load = self._router_load_f
        capacity = self.topology.channel_capacity_float
        routers = self.topology.routers
        lone = 1000.0 / interval_ms  # a lone interval s = m*p forwards exactly 1000/s events/s

        def usable(channel: Channel) -> bool:
            name = channel.name
            # Fast path: any increase is at most 1000/s (a union bound), so room for that is enough.
            room = capacity(name) - channel_load.get(name, 0.0)
            if room >= lone and routers[channel.src].capacity_eps - router_load.get(channel.src, 0.0) >= lone:
                return True
            if (name, variable_id) in entries:
                increase = float(self.rate_increase(name, variable_id, pub_interval_ms, (interval_ms,)))
                if increase <= 0.0:
                    return True
            else:
                increase = lone
            room = capacity(name) - channel_load.get(name, 0.0)
            if increase > room + 1e-9 * (1.0 + room):
                return False
            room = routers[channel.src].capacity_eps - router_load.get(channel.src, 0.0)
            return increase <= room + 1e-9 * (1.0 + room)

        return usable

    def shortfall(self, deltas: Iterable[ChannelDelta]) -> Shortfall | None:
        """The first resource the deltas would overload, recomputed exactly against the current state."""
        need: dict[str, Fraction] = {}
        for delta in self._unique(deltas):
            increase = self.rate_increase(delta.channel, delta.variable_id, delta.pub_interval_ms, delta.intervals)
            if not delta.channel.startswith(SUBSCRIBER_CHANNEL_PREFIX):
                room = self.topology.channel_capacity_eps(delta.channel) - self.channel_load(delta.channel)
                if increase > room:
                    return Shortfall(delta.channel, "channel", room, increase)
            need[delta.router] = need.get(delta.router, _ZERO) + increase
        for router, increase in need.items():
            room = Fraction(self.topology.router(router).capacity_eps) - self.router_load(router)
            if increase > room:
                return Shortfall(router, "router", room, increase)
        return None

    # -- changes ---------------------------------------------------------------------------------
    def commit(self, subscription_id: str, deltas: Iterable[ChannelDelta], *, checked_at: int | None = None
               ) -> tuple[ChannelDelta, ...]:
        """Reserve atomically: check everything exactly, then apply; returns the deltas actually applied.

        ``checked_at`` is the :attr:`version` at which the caller ran :meth:`shortfall` on
        these deltas; if nothing changed since, the exact capacity check is not repeated.
        """
        if subscription_id in self._held:
            raise DuplicateName(f"subscription {subscription_id!r} already holds a reservation",
                                field="subscription_id")
        unique = self._unique(deltas)
        for delta in unique:
            self.topology.router(delta.router)
            if not delta.channel.startswith(SUBSCRIBER_CHANNEL_PREFIX) and \
                    self.topology.channel(delta.channel).src != delta.router:
                raise ValidationError(f"channel {delta.channel!r} is not sent by router {delta.router!r}",
                                      field="router")
            if delta.channel.startswith(SUBSCRIBER_CHANNEL_PREFIX):
                self.check_attachment(delta.channel, delta.router)
        short = None if checked_at == self.version else self.shortfall(unique)
        if short is not None:
            raise CapacityExceeded(f"cannot reserve {subscription_id!r}: {short.describe()}", shortfall=short)
        applied = tuple(self._apply(delta, +1) for delta in unique)
        self._held[subscription_id] = applied
        self.version += 1
        return applied

    def release(self, subscription_id: str) -> tuple[ChannelDelta, ...]:
        """Undo a commit exactly: the state is as if the subscription had never been admitted."""
        try:
            deltas = self._held.pop(subscription_id)
        except KeyError:
            raise NotFound(f"subscription {subscription_id!r} holds no reservation", field="subscription_id") from None
        for delta in deltas:
            self._apply(delta, -1)
        self.version += 1
        return deltas

    @staticmethod
    def _unique(deltas: Iterable[ChannelDelta]) -> tuple[ChannelDelta, ...]:
        out = tuple(deltas)
        if len({(d.channel, d.variable_id) for d in out}) != len(out):
            raise ValidationError("an allocation must have one delta per (channel, variable)", field="deltas")
        return out

    def _apply(self, delta: ChannelDelta, sign: int) -> ChannelDelta:
        key = (delta.channel, delta.variable_id)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(delta.router, delta.pub_interval_ms)
            if delta.channel.startswith(SUBSCRIBER_CHANNEL_PREFIX):
                self._attached.setdefault(delta.channel, delta.router)
                self._attached_entries[delta.channel] = self._attached_entries.get(delta.channel, 0) + 1
        before = entry.rate
        if sign > 0:
            entry.counts.update(delta.intervals)
        else:
            entry.counts.subtract(delta.intervals)
            for s in delta.intervals:
                if entry.counts[s] <= 0:
                    del entry.counts[s]
        entry.non_multiples = smallest_non_multiples(entry.counts)
        entry.rate = forwarded_rate(entry.pub, entry.non_multiples, hyperperiod_limit=self.hyperperiod_limit)
        change = entry.rate - before
        if not entry.counts:
            del self._entries[key]
            if delta.channel in self._attached:
                self._attached_entries[delta.channel] -= 1
                if not self._attached_entries[delta.channel]:
                    del self._attached[delta.channel], self._attached_entries[delta.channel]
        self._add(self._channel_load, self._channel_load_f, delta.channel, change)
        self._add(self._router_load, self._router_load_f, delta.router, change)
        return ChannelDelta(delta.channel, delta.router, delta.variable_id, delta.pub_interval_ms, delta.intervals,
                            change if sign > 0 else delta.increase_eps)

    @staticmethod
    def _add(exact: dict[str, Fraction], approx: dict[str, float], name: str, change: Fraction) -> None:
        if not change:
            return
        value = exact.get(name, _ZERO) + change
        if value:
            exact[name] = value
            approx[name] = float(value)
        else:
            exact.pop(name, None)
            approx.pop(name, None)
