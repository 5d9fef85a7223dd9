"""Event channels of a status router: per-priority send queues, packing, counters, liveness.

One ``EventChannel`` per neighbour (router, subscriber or publisher). Outgoing
events wait in seven lists, one per priority (0 = alert ... 6 = low); the
forwarding loop only appends to them. ``flush`` empties them in priority order,
alerts first, packing as many events per datagram as the MTU allows (GridStat
packs per outgoing link when it can do so without blocking, 2.1.4). The queues
are bounded: what cannot be sent is kept up to ``capacity`` events and the rest
is dropped lowest priority first, each drop counted by reason.

A channel to another router is watched by pings (3.1.4): when nothing has been
heard for ``failure_timeout`` it is marked down, its events are dropped with
reason ``link_down`` (as GridStat does) and the router reports the change.

A channel given a bandwidth (``shape``) sends through ``router.shaping`` instead:
a token bucket, a queue ordered by the value of each event and the modified RED
drop rule (HAPS). Its queues' ``push`` is rebound to that path, so the forwarding
loop is the same for both kinds of channel and an unshaped one pays nothing.
"""

from __future__ import annotations

import enum
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gridstat.core import wire
from gridstat.core.model import PRIORITIES
from gridstat.core.wire import DropReason
from gridstat.errors import ValidationError
from gridstat.router import shaping

_HEADER_PACK = wire.HEADER.pack
_TAG_LEN = wire.AUTH_TAG_LEN
_MAGIC = wire.MAGIC
_VERSION = wire.WIRE_VERSION
_KIND_EVENTS = wire.KIND_EVENTS
_HEADER_SIZE = wire.HEADER_SIZE
_SEQ_PACK = struct.Struct(">I").pack

SendTo = Callable[[bytes, tuple[str, int]], object]


def initial_sequence() -> int:
    """The sequence number a router channel starts after: the wall clock in units of 250 us, mod 2**32."""
    return (time.time_ns() // 250_000) & 0xFFFF_FFFF


class ChannelKind(enum.Enum):
    ROUTER = "router"
    SUBSCRIBER = "subscriber"
    PUBLISHER = "publisher"


class PriorityQueue:
    """One priority level of one channel; ``push`` is the bound ``append`` the hot loop calls."""

    __slots__ = ("channel", "events", "filtered", "priority", "push")

    def __init__(self, channel: EventChannel, priority: int) -> None:
        self.channel = channel
        self.priority = priority
        self.events: list[bytes] = []
        self.push = self.events.append
        self.filtered = 0

    def valued(self, value: float, guaranteed: bool, count: int = 1) -> PriorityQueue | shaping.ValuedTarget:
        """The target a compiled entry pushes to: this queue, or on a shaped channel one that carries
        the entry's value (the price sum of its ``count`` routes here) and class into the shaper."""
        shaper = self.channel.shaper
        if shaper is None:
            return self
        return shaping.ValuedTarget(self, shaper, self.priority, value, guaranteed, count)

    def _push_unvalued(self, event: bytes) -> None:
        """``push`` on a shaped channel for what has no compiled value (flooding): best effort, value 0."""
        shaper = self.channel.shaper
        if shaper is None:  # unshaped meanwhile
            self.events.append(event)
        else:
            shaper.enqueue(event, 0.0, 0.0, self.priority)


@dataclass
class ChannelStats:
    events_in: int = 0
    datagrams_in: int = 0
    events_sent: int = 0
    datagrams_sent: int = 0
    drops: Counter[str] = field(default_factory=Counter)


class EventChannel:
    """One event channel; inbound from ``peer_id``, outbound to ``address`` (if any)."""

    def __init__(
        self,
        *,
        name: str,
        peer_id: int,
        kind: ChannelKind,
        address: tuple[str, int] | None,
        sender_id: int,
        mtu: int = wire.DEFAULT_MTU,
        capacity: int = 4096,
        level: int = 1,
        flood_all: bool = False,
    ) -> None:
        if not name:
            raise ValidationError("channel name must not be empty", field="name")
        if not 0 <= peer_id <= 0xFFFF_FFFF:
            raise ValidationError(f"peer id {peer_id} is outside 0..2**32-1", field="peer_id")
        if not wire.HEADER_SIZE + wire.EVENT_HEAD_SIZE + wire.SCALAR_SIZE <= mtu <= wire.MAX_DATAGRAM:
            raise ValidationError(f"mtu {mtu} is outside {wire.HEADER_SIZE + 24}..{wire.MAX_DATAGRAM}",
                                  field="mtu")
        if capacity < 1:
            raise ValidationError(f"queue capacity must be at least 1, got {capacity}", field="capacity")
        if address is not None and not 0 < address[1] < 65536:
            raise ValidationError(f"port {address[1]} is outside 1..65535", field="port")
        if level < 1:
            raise ValidationError(f"channel level {level} must be at least 1 (1 = same cloud)", field="level")
        self.name = name
        self.peer_id = peer_id
        self.kind = kind
        self.address = address
        self.sender_id = sender_id
        self.mtu = mtu
        self.capacity = capacity
        #: Hierarchy level of the link (1 = same cloud); limited flooding floods levels 1..L.
        self.level = level
        #: Subscriber channels: deliver every flooded variable (a flood-all subscription).
        self.flood_all = flood_all
        self.queues = tuple(PriorityQueue(self, p) for p in PRIORITIES)
        self.stats = ChannelStats()
        # Every channel numbers its datagrams on from the wall clock (4 per ms), so a restarted
        # router's numbers are newer than its previous run's and the peer's replay window takes them
        # without being reset by a broker: an inter-cloud peer is in another cloud, and nobody resets
        # a subscriber's window when its edge router restarts (docs/security.md).
        self.sequence = initial_sequence()
        self.up = True
        self.last_heard_ms = 0
        self.rtt_ms = 0.0
        #: The token bucket and value-ordered queue of a shaped channel (``shape``); None = unshaped.
        self.shaper: shaping.Shaper | None = None
        #: Datagram authentication (docs/security.md): with a key, datagrams from the peer must carry
        #: a valid HMAC tag and a fresh sequence number, and datagrams to it are signed.
        self.key: bytes | None = None
        self.replay = wire.ReplayWindow()

    @property
    def filtered(self) -> int:
        return sum(q.filtered for q in self.queues)

    def queue(self, priority: int) -> PriorityQueue:
        return self.queues[priority]

    def pending(self) -> int:
        n = sum(len(q.events) for q in self.queues)
        return n + self.shaper.live if self.shaper is not None else n

    def drop_pending(self, reason: DropReason) -> int:
        n = 0
        for q in self.queues:
            n += len(q.events)
            q.events.clear()
        if n:
            self.stats.drops[reason.value] += n
        if self.shaper is not None:
            n += self.shaper.clear(reason.value)
        return n

    def shape(self, config: shaping.ShapingConfig) -> shaping.Shaper:
        """Send through a token bucket at ``config.bandwidth_bps`` with value-based shedding.

        Events already queued move into the shaper (value 0, best effort: nothing tells their
        value any more); a reshaped channel's events keep the key they were queued with, even under
        another strategy. The owner recompiles its table so that compiled entries push valued events.
        """
        if self.address is None:
            raise ValidationError(f"channel {self.name!r} sends nothing: only outgoing channels are shaped",
                                  field="name")
        old = self.shaper
        shaper = shaping.Shaper(self, config, self.stats.drops)
        if old is not None:  # a new bandwidth or policy: the counters carry on
            shaper.total_price, shaper.link_gain = old.total_price, old.link_gain
            shaper.revenue, shaper.delivered_value, shaper.delivered = old.revenue, old.delivered_value, old.delivered
            shaper.dropped_vars = old.dropped_vars
        self.shaper = shaper
        for q in self.queues:
            q.push = q._push_unvalued
            for ev in q.events:
                shaper.enqueue(ev, 0.0, 0.0, q.priority)
            q.events.clear()
        if old is not None:
            for dq in old.fifo:
                for item in dq:
                    if item[2] is not None:
                        shaper.enqueue(item[2], item[0], item[4], item[3])
        return shaper

    def unshape(self) -> bool:
        """Back to the plain queues; what the shaper held is queued there in priority order."""
        old = self.shaper
        if old is None:
            return False
        self.shaper = None
        for q in self.queues:
            q.push = q.events.append
        for dq in old.fifo:
            for item in dq:
                if item[2] is not None:
                    self.queues[item[3]].events.append(item[2])
        self._trim()
        return True

    def set_key(self, key: bytes | None) -> None:
        """Set (rotate) or clear the channel key; the replay window starts afresh."""
        self.key = wire.check_key(key) if key is not None else None
        self.replay.reset()

    def sign_control(self, datagram: bytes) -> bytes:
        """A control datagram (ping, pong, mode or shed notice) as sent on this channel: on a keyed
        channel it takes the next sequence number and the HMAC tag, so the receiver authenticates it
        and its replay window covers it (docs/security.md); unchanged on an unkeyed channel."""
        key = self.key
        if key is None:
            return datagram
        seq = self.sequence = (self.sequence + 1) & 0xFFFF_FFFF
        return wire.sign_datagram(key, b"".join((datagram[:8], _SEQ_PACK(seq), datagram[12:])))

    def flush(self, sendto: SendTo) -> bool:
        """Send everything queued, packed up to the MTU, alerts first.

        Returns False if the socket would block; what was not sent stays queued
        (bounded by ``capacity``, lowest priorities dropped first).
        """
        address = self.address
        if address is None or not self.up:
            self.drop_pending(DropReason.LINK_DOWN)
            return True
        if self.shaper is not None:
            return self.shaper.flush(sendto, address)
        mtu = self.mtu
        base = _HEADER_SIZE if self.key is None else _HEADER_SIZE + wire.AUTH_TAG_LEN
        parts: list[bytes] = [b""]
        size = base
        # (queue index, event index): everything before it has been handed to the socket.
        sent_q = sent_i = 0
        for qi, q in enumerate(self.queues):
            events = q.events
            if not events:
                continue
            for i, ev in enumerate(events):
                n = len(ev)
                if size + n > mtu and len(parts) > 1:
                    if not self._send(sendto, parts, address):
                        self._keep_unsent(sent_q, sent_i)
                        return False
                    sent_q, sent_i = qi, i
                    parts = [b""]
                    size = base
                parts.append(ev)
                size += n
        if len(parts) > 1 and not self._send(sendto, parts, address):
            self._keep_unsent(sent_q, sent_i)
            return False
        for q in self.queues:
            if q.events:
                q.events.clear()
        return True

    def _send(self, sendto: SendTo, parts: list[bytes], address: tuple[str, int]) -> bool:
        count = len(parts) - 1
        seq = (self.sequence + 1) & 0xFFFF_FFFF
        key = self.key
        if key is None:
            parts[0] = _HEADER_PACK(_MAGIC, _VERSION, _KIND_EVENTS, self.sender_id, seq, count, 0, 0)
            data = b"".join(parts)
        else:
            parts[0] = _HEADER_PACK(_MAGIC, _VERSION, _KIND_EVENTS, self.sender_id, seq, count, _TAG_LEN, 0)
            data = b"".join(parts)
            data += wire.auth_tag(key, data)
        try:
            sendto(data, address)
        except BlockingIOError:
            return False  # the sequence number is not used up: no false gap at the receiver
        except OSError:
            # Unreachable peer, no buffer space...: count and move on; never stop the loop.
            self.stats.drops[DropReason.SEND_ERROR.value] += count
            self.sequence = seq
            return True
        self.sequence = seq
        self.stats.events_sent += count
        self.stats.datagrams_sent += 1
        return True

    def _keep_unsent(self, sent_q: int, sent_i: int) -> None:
        for q in self.queues[:sent_q]:
            q.events.clear()
        del self.queues[sent_q].events[:sent_i]
        self._trim()

    def _trim(self) -> None:
        excess = self.pending() - self.capacity
        for q in reversed(self.queues):
            if excess <= 0:
                break
            n = min(excess, len(q.events))
            if n:
                del q.events[len(q.events) - n:]
                self.stats.drops[DropReason.QUEUE_FULL.value] += n
                excess -= n
