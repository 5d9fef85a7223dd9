"""Link overload on one outgoing channel: a token bucket, a value-ordered queue and modified RED (HAPS IV-B).

Only channels given a bandwidth (``EventChannel.shape``) go through here; every other channel keeps
the plain per-priority lists of ``router.channels`` and pays nothing for this module.

* **Token bucket**: the channel may send ``bandwidth_bps / 8`` bytes per second, counting each
  datagram's 16-byte header and ``overhead_bytes`` (28: UDP over IPv4) of headers below it; the
  bucket holds at most one ``window`` of bytes (the largest datagram it builds, at least one event).
  What the bucket cannot pass waits; a timer sends it when the tokens are there.
* **Value**: every queued event carries the sum of the prices of the routes (subscriptions) it
  serves on this channel, how many they are, and whether any of them is guaranteed, precomputed per
  compiled table entry (``ValuedTarget``), so nothing is computed per event. Guaranteed events sort
  above every best-effort one (``GUARANTEED`` is added to their key): they are never shed while a
  best-effort event is queued, whatever the strategy.
* **Modified RED**: the queue's expected transmission delay ``d`` (queued bytes with their headers
  over the drain rate) decides. Past ``drop_start`` an arriving event triggers a drop with
  probability ``(d - drop_start) / (drop_all - drop_start)``, 1 at ``drop_all``, and the victim is the
  queued event of lowest value: HAPS "always sheds the message which has the lowest value in the
  queue". ``d`` never stays above ``drop_all``, so no delivered event waited in this queue much
  longer than ``drop_all``.

**Victim strategies** (``MessageStrategy``, HAPS Fig. 7), chosen once per channel when it is shaped:
``cheapest`` (default) ranks by the price sum (the oldest among equals goes first); ``count`` by the
number of routes the event serves (the paper's COUNT: matching subscriptions); ``lowest`` by the gain
``G`` the event carries now, the newest among equals (the paper's LOWEST reads the gain piggybacked on
the publication; GridStat has no room for it on the wire, so here it is this router's own Eqs. 5-7 for
the event: ``G_l1`` and the ``G_l2`` updates of the drops it survived; ``_GainVictims``); ``random`` a
random best-effort event.

The paper also chooses between shedding a publication and a subscription, with a probability
linear in their counts (``choose_kind``); a GridStat event queue holds publications only
(subscriptions, shed notices and pings are control traffic outside the bucket), so the choice
always falls on a publication here and is exercised by the simulation of ``gridstat bench overload``.

Policies, for the benchmark's comparison: ``red`` (the above), ``value`` (lowest value first, only
once ``d`` reaches ``drop_all``), ``tail`` (FIFO tail drop at ``drop_all``: the arriving event goes),
``none`` (no shedding: the queue grows, bounded only by ``max_events``; the paper's NODROP). No
policy drops the only queued event: a link slower than one event per ``drop_all`` still carries one.
``tail`` and ``none`` choose no victim, so they take no strategy but the default.

Gain and charging (HAPS Eqs. 6-8, 10): each drop is one more Eq. 6 update for every event that
survives it, ``G_l2 = value / total_price / Q_size`` with ``Q_size`` the channel's capacity in events;
an event that survived ``k`` drops and left while link shedding had gain ``G_l1`` (Eq. 5) carries
``G = 1 - (1 - G_l1)(1 - G_l2)^k`` (Eq. 7 applied in the paper's order, ``event_gain``) and is charged
``G * value`` (Eq. 10) when it is sent. GridStat events have no room for ``G`` on the wire, so each
router bills the gain of its own shedding on its own links (docs/overload.md).
"""

from __future__ import annotations

import enum
import functools
import heapq
import itertools
import math
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from gridstat.core import wire
from gridstat.core.wire import DropReason
from gridstat.errors import ValidationError

#: Added to the key of an event that serves a guaranteed route: above every best-effort value.
GUARANTEED = 1e12
#: The largest price one route may carry (keeps a value sum far below ``GUARANTEED``).
MAX_PRICE = 1e9
_R_LINK = DropReason.LINK_OVERLOAD.value
_R_FULL = DropReason.QUEUE_FULL.value
_DGRAM_HEADER = wire.HEADER_SIZE

SendTo = Callable[[bytes, tuple[str, int]], object]


class DropPolicy(enum.Enum):
    RED = "red"
    VALUE = "value"
    TAIL = "tail"
    NONE = "none"

    @classmethod
    def parse(cls, text: str) -> DropPolicy:
        try:
            return cls(text or "red")
        except ValueError:
            raise ValidationError(f"drop policy {text!r} is not red, value, tail or none",
                                  field="drop_policy") from None


class MessageStrategy(enum.Enum):
    """By what a queued message's value is judged when one must be shed (HAPS Fig. 7)."""

    CHEAPEST = "cheapest"  # the sum of the prices of the matching subscriptions on the link
    LOWEST = "lowest"  # the gain G the publication carries
    COUNT = "count"  # the number of matching subscriptions on the link
    RANDOM = "random"  # none: a random message

    @classmethod
    def parse(cls, text: str) -> MessageStrategy:
        try:
            return cls(text or "cheapest")
        except ValueError:
            raise ValidationError(f"message-shedding strategy {text!r} is not cheapest, lowest, count or random",
                                  field="strategy") from None


class MessageKind(enum.Enum):
    PUBLICATION = "publication"
    SUBSCRIPTION = "subscription"


def choose_kind(publications: int, subscriptions: int, u: float) -> MessageKind | None:
    """HAPS's "fair" choice of what to shed: a publication with probability ``n_pub / (n_pub + n_sub)``
    (linear in the counts queued), else a subscription; ``u`` uniform in [0, 1). None when both are 0."""
    total = publications + subscriptions
    if total <= 0:
        return None
    return MessageKind.PUBLICATION if u * total < publications else MessageKind.SUBSCRIPTION


def subscription_value(price: float, covered_prices: Iterable[float]) -> float:
    """The value of a queued subscription: its maximum price plus those of the subscriptions it covers
    (HAPS's experiments, section V)."""
    return price + sum(covered_prices)


def event_gain(value: float, survived: int, *, link_gain: float, total_price: float, queue_size: int) -> float:
    """The gain of an event that survived ``survived`` drops on a link (Eqs. 5-7): ``G_l1`` once, then one
    Eq. 6 update ``G_l2 = value / total_price / Q_size`` per drop, at most ``Q_size`` of them."""
    q_size = max(1, queue_size)
    g_l2 = value / total_price / q_size if total_price > 0 else 0.0
    return 1.0 - (1.0 - link_gain) * (1.0 - min(1.0, g_l2)) ** min(survived, q_size)


@dataclass(frozen=True)
class ShapingConfig:
    """How one channel is shaped; ``bandwidth_bps`` is the token rate in bits per second."""

    bandwidth_bps: float
    policy: DropPolicy = DropPolicy.RED
    drop_start_ms: float = 500.0
    drop_all_ms: float = 1000.0
    #: The largest datagram the bucket builds, as seconds of bandwidth (at least one event, at most the MTU).
    window_ms: float = 1000.0
    overhead_bytes: int = 28
    #: Policy ``none`` only: the most events queued before the excess is dropped as ``queue_full``.
    max_events: int = 1_000_000
    #: Policies ``red`` and ``value``: how the victim is chosen.
    strategy: MessageStrategy = MessageStrategy.CHEAPEST

    def __post_init__(self) -> None:
        if not math.isfinite(self.bandwidth_bps) or not 0 < self.bandwidth_bps <= 1e12:
            raise ValidationError(f"bandwidth {self.bandwidth_bps!r} bit/s must be within (0, 1e12]",
                                  field="bandwidth_bps")
        if not (math.isfinite(self.drop_start_ms) and math.isfinite(self.drop_all_ms)) \
                or not 0 <= self.drop_start_ms <= self.drop_all_ms or self.drop_all_ms <= 0:
            raise ValidationError(f"need 0 <= drop_start_ms ({self.drop_start_ms}) <= drop_all_ms "
                                  f"({self.drop_all_ms}) and drop_all_ms > 0", field="drop_start_ms")
        if not math.isfinite(self.window_ms) or self.window_ms <= 0:
            raise ValidationError("window_ms must be positive", field="window_ms")
        if not 0 <= self.overhead_bytes <= 1024:
            raise ValidationError("overhead_bytes must be within 0..1024", field="overhead_bytes")
        if self.max_events < 1:
            raise ValidationError("max_events must be at least 1", field="max_events")
        if self.strategy is not MessageStrategy.CHEAPEST and self.policy not in (DropPolicy.RED, DropPolicy.VALUE):
            raise ValidationError(f"drop policy {self.policy.value} chooses no victim: strategy "
                                  f"{self.strategy.value} needs red or value", field="strategy")


def red_probability(delay_s: float, start_s: float, all_s: float) -> float:
    """The modified RED curve: 0 up to ``start``, rising linearly to 1 at ``all`` (docs/overload.md)."""
    if delay_s <= start_s:
        return 0.0
    if delay_s >= all_s or all_s <= start_s:
        return 1.0
    return (delay_s - start_s) / (all_s - start_s)


def event_key(value: float, guaranteed: bool) -> float:
    return value + GUARANTEED if guaranteed else value


# -- victims -------------------------------------------------------------------------------------
# A queued item is ``[key, seq, event or None once gone, priority, value, drops_total at enqueue]``.
# Each strategy keeps its own index of the queued items, fed by ``add`` (one call per queued event)
# and asked for a victim by ``pop``; items sent or dropped meanwhile are skipped there (their event is
# None) and swept out by ``rebuild`` when they outnumber the live ones.
class _HeapVictims:
    """cheapest, count: the lowest key first (the price sum or the count), the oldest among equals."""

    __slots__ = ("add", "heap")

    def __init__(self) -> None:
        self.heap: list[list[Any]] = []
        self.add = functools.partial(heapq.heappush, self.heap)

    def pop(self, shaper: Shaper) -> list[Any] | None:
        heap = self.heap
        while heap:
            item = heapq.heappop(heap)
            if item[2] is not None:
                return item
        return None

    def size(self) -> int:
        return len(self.heap)

    def rebuild(self, items: list[list[Any]]) -> None:
        self.heap[:] = items
        heapq.heapify(self.heap)


class _RandomVictims:
    """random: a random best-effort event; a random guaranteed one only when no best-effort one is left."""

    __slots__ = ("best_effort", "guaranteed")

    def __init__(self) -> None:
        self.best_effort: list[list[Any]] = []
        self.guaranteed: list[list[Any]] = []

    def add(self, item: list[Any]) -> None:
        (self.guaranteed if item[0] >= GUARANTEED else self.best_effort).append(item)

    def pop(self, shaper: Shaper) -> list[Any] | None:
        rng = shaper.rng
        for pool in (self.best_effort, self.guaranteed):
            while pool:
                i = min(int(rng() * len(pool)), len(pool) - 1)
                item = pool[i]
                pool[i] = pool[-1]
                pool.pop()
                if item[2] is not None:
                    return item
        return None

    def size(self) -> int:
        return len(self.best_effort) + len(self.guaranteed)

    def rebuild(self, items: list[list[Any]]) -> None:
        self.best_effort.clear()
        self.guaranteed.clear()
        for item in items:
            self.add(item)


class _GainVictims:
    """lowest: the event of lowest gain ``G`` now (``event_gain``), the newest among equals (it has waited
    least). Within one key (value and class) the newest event has survived the fewest drops, hence the
    lowest gain: the candidates are the newest event of each key, so a drop costs one gain per distinct
    key queued, not one per event."""

    __slots__ = ("by_key", "count")

    def __init__(self) -> None:
        self.by_key: dict[float, deque[list[Any]]] = {}
        self.count = 0

    def add(self, item: list[Any]) -> None:
        d = self.by_key.get(item[0])
        if d is None:
            d = self.by_key[item[0]] = deque()
        d.append(item)
        self.count += 1

    def pop(self, shaper: Shaper) -> list[Any] | None:
        best: list[Any] | None = None
        best_rank = (True, math.inf, math.inf)
        drops = shaper.drops_total
        q_size = shaper.channel.capacity
        link_gain, total = shaper.link_gain, shaper.total_price
        for key in list(self.by_key):
            d = self.by_key[key]
            while d and d[-1][2] is None:
                d.pop()
                self.count -= 1
            if not d:
                del self.by_key[key]
                continue
            item = d[-1]
            gain = event_gain(item[4], drops - item[5], link_gain=link_gain, total_price=total, queue_size=q_size)
            rank = (key >= GUARANTEED, gain, -item[1])
            if rank < best_rank:
                best, best_rank = item, rank
        if best is not None:
            self.by_key[best[0]].pop()
            self.count -= 1
        return best

    def size(self) -> int:
        return self.count

    def rebuild(self, items: list[list[Any]]) -> None:
        self.by_key.clear()
        self.count = 0
        for item in items:
            self.add(item)


def _victims(strategy: MessageStrategy) -> _HeapVictims | _RandomVictims | _GainVictims:
    if strategy is MessageStrategy.RANDOM:
        return _RandomVictims()
    if strategy is MessageStrategy.LOWEST:
        return _GainVictims()
    return _HeapVictims()


class _Channel(Protocol):
    """What the shaper needs of its ``EventChannel``."""

    capacity: int
    mtu: int

    def _send(self, sendto: SendTo, parts: list[bytes], address: tuple[str, int]) -> bool: ...


class _Counted(Protocol):
    filtered: int


class Shaper:
    """The shaped send path of one channel (see the module docstring)."""

    def __init__(self, channel: _Channel, config: ShapingConfig, drops: Counter[str], *,
                 clock: Callable[[], float] = time.monotonic, rng: Callable[[], float] = random.random) -> None:
        self.channel = channel
        self.config = config
        self.drops = drops
        self.clock = clock
        self.rng = rng
        self.rate_bps = config.bandwidth_bps / 8  # bytes per second
        window = config.window_ms / 1000 * self.rate_bps
        self.limit = int(max(_DGRAM_HEADER + wire.EVENT_HEAD_SIZE + wire.SCALAR_SIZE, min(channel.mtu, window)))
        self.burst = float(self.limit + config.overhead_bytes)
        self.tokens = self.burst
        self.refilled = clock()
        self.start_s = config.drop_start_ms / 1000
        self.all_s = config.drop_all_ms / 1000
        self.fifo: tuple[deque[list[Any]], ...] = tuple(deque() for _ in range(7))
        #: The victim index of the strategy (None for ``tail`` and ``none``, which choose no victim).
        self.victims = _victims(config.strategy) if config.policy in (DropPolicy.RED, DropPolicy.VALUE) else None
        self._track: Callable[[list[Any]], object] | None = self.victims.add if self.victims is not None else None
        self.seq = itertools.count()
        self.live = 0
        self.bytes = 0
        #: Events dropped so far (each one is an Eq. 6 update for the survivors).
        self.drops_total = 0
        #: Variable id -> events dropped since the last shed notice (router.process reports them).
        self.dropped_vars: Counter[int] = Counter()
        #: Eq. 5's G_l1 of the router now (set by the link shedder), and the channel's price total (Eq. 6's N).
        self.link_gain = 0.0
        self.total_price = 0.0
        #: Eq. 10's charges and the value delivered through this channel.
        self.revenue = 0.0
        self.delivered_value = 0.0
        self.delivered = 0
        #: Seconds until the bucket can pass the head of the queue; None when nothing waits.
        self.wake_s: float | None = None

    # -- enqueue --------------------------------------------------------------------------------
    def enqueue(self, ev: bytes, key: float, value: float, priority: int) -> None:
        item = [key, next(self.seq), ev, priority, value, self.drops_total]
        self.fifo[priority].append(item)
        policy = self.config.policy
        track = self._track
        if track is not None:  # only the policies that choose a victim index the queue
            track(item)
        self.live += 1
        self.bytes += len(ev)
        if policy is DropPolicy.NONE:
            if self.live > self.config.max_events:
                self._drop(item, _R_FULL)
            return
        delay = self.delay_s()
        if delay <= self.start_s or self.live == 1:  # the link can always take its next event
            return
        if policy is DropPolicy.TAIL:
            if delay > self.all_s:
                self._drop(item, _R_LINK)
            return
        if policy is DropPolicy.RED and delay < self.all_s:
            if self.rng() < red_probability(delay, self.start_s, self.all_s):
                self.shed_one()
            return
        while self.live > 1 and self.delay_s() > self.all_s:
            self.shed_one()

    def delay_s(self) -> float:
        """Expected transmission delay of what is queued: bytes with their datagrams' headers over the rate."""
        live = self.live
        if not live:
            return 0.0
        per_datagram = max(1, (self.limit - _DGRAM_HEADER) * live // max(1, self.bytes))  # events of average size
        datagrams = -(-live // per_datagram)
        return (self.bytes + datagrams * (_DGRAM_HEADER + self.config.overhead_bytes)) / self.rate_bps

    def shed_one(self) -> None:
        """Shed the strategy's victim now (modified RED calls it): the lowest key for cheapest and count."""
        victims = self.victims
        if victims is None:
            return
        item = victims.pop(self)
        if item is not None:
            self._drop(item, _R_LINK)

    def _drop(self, item: list[Any], reason: str) -> None:
        ev = item[2]
        if ev is None:
            return
        item[2] = None
        self.live -= 1
        self.bytes -= len(ev)
        self.drops_total += 1
        self.drops[reason] += 1
        self.dropped_vars[int.from_bytes(ev[8:12], "big")] += 1

    # -- send -----------------------------------------------------------------------------------
    def flush(self, sendto: SendTo, address: tuple[str, int]) -> bool:
        """Send what the bucket allows, packed up to ``limit``; False if the socket would block."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.refilled) * self.rate_bps)
        self.refilled = now
        overhead = self.config.overhead_bytes
        self.wake_s = None
        while self.live:
            gathered: list[list[Any]] = []
            size = _DGRAM_HEADER
            full = False
            for q in self.fifo:
                while q and q[0][2] is None:
                    q.popleft()
                for item in q:
                    ev = item[2]
                    if ev is None:
                        continue
                    if gathered and size + len(ev) > self.limit:
                        full = True
                        break
                    gathered.append(item)
                    size += len(ev)
                if full:
                    break
            cost = size + overhead
            if self.tokens < cost:
                self.wake_s = (cost - self.tokens) / self.rate_bps
                return True
            if not self.channel._send(sendto, [b"", *(it[2] for it in gathered)], address):
                return False
            self.tokens -= cost
            self._sent(gathered)
        victims = self.victims
        if victims is not None and victims.size() > 2 * self.live + 64:
            victims.rebuild([it for q in self.fifo for it in q if it[2] is not None])
        return True

    def _sent(self, gathered: list[list[Any]]) -> None:
        q_size = max(1, self.channel.capacity)
        total = self.total_price
        g_l1 = self.link_gain
        drops = self.drops_total
        revenue = delivered_value = 0.0
        for item in gathered:
            value = item[4]
            k = min(drops - item[5], q_size)
            g_l2 = value / total / q_size if total > 0 else 0.0
            gain = 1.0 - (1.0 - g_l1) * (1.0 - min(1.0, g_l2)) ** k
            revenue += gain * value
            delivered_value += value
            self.bytes -= len(item[2])
            item[2] = None
            # Gathered items are the first live ones of their priority: only dropped ones precede them.
            q = self.fifo[item[3]]
            while q[0] is not item:
                q.popleft()
            q.popleft()
        self.live -= len(gathered)
        self.delivered += len(gathered)
        self.revenue += revenue
        self.delivered_value += delivered_value

    # -- other ----------------------------------------------------------------------------------
    def clear(self, reason: str) -> int:
        """Drop everything queued (the link is down); returns how many."""
        n = self.live
        for q in self.fifo:
            q.clear()
        if self.victims is not None:
            self.victims.rebuild([])
        self.live = self.bytes = 0
        if n:
            self.drops[reason] += n
        return n

    def take_dropped(self) -> list[tuple[int, int]]:
        """(variable id, events dropped) since the last call, for a shed notice."""
        out = sorted(self.dropped_vars.items())
        self.dropped_vars.clear()
        return out


def victim_key(strategy: MessageStrategy, *, value: float, count: int, guaranteed: bool) -> float:
    """The key a compiled entry's events are queued with: what the strategy ranks by (the price sum, or
    the count of routes for ``count``), above every best-effort key if guaranteed."""
    return event_key(float(count) if strategy is MessageStrategy.COUNT else value, guaranteed)


class ValuedTarget:
    """A compiled entry's target on a shaped channel: the queue's priority plus a precomputed value and key."""

    __slots__ = ("key", "priority", "queue", "shaper", "value")

    def __init__(self, queue: _Counted, shaper: Shaper, priority: int, value: float, guaranteed: bool,
                 count: int = 1) -> None:
        self.queue = queue
        self.shaper = shaper
        self.priority = priority
        self.value = value
        self.key = victim_key(shaper.config.strategy, value=value, count=count, guaranteed=guaranteed)

    @property
    def filtered(self) -> int:
        return self.queue.filtered

    @filtered.setter
    def filtered(self, n: int) -> None:
        self.queue.filtered = n

    @property
    def channel(self) -> Any:
        return getattr(self.queue, "channel", None)

    def push(self, event: bytes) -> None:
        self.shaper.enqueue(event, self.key, self.value, self.priority)


__all__ = ["GUARANTEED", "MAX_PRICE", "DropPolicy", "MessageKind", "MessageStrategy", "Shaper", "ShapingConfig",
           "ValuedTarget", "choose_kind", "event_gain", "event_key", "red_probability", "subscription_value",
           "victim_key"]
