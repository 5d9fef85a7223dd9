"""The status router's forwarding path: datagram in, rate-filtered multicast out.

``Forwarder.process`` is the hot path. It is I/O-free so that tests drive it
with bytes; ``router.process`` feeds it from the socket and flushes the
channels. Per datagram it validates the header once, then per event reads the
16-byte head, looks the variable up in the current mode's compiled table and
walks the close or sparse structure (``router.tables``), appending a bytes slice
of the datagram to each chosen channel's priority queue. The slice is shared by
every channel it goes to: multicast costs one reference per extra channel, no
copy (dissertation 3.3's buffer-wrapper cost does not arise).

A flooded variable (``router.flooding``) costs the other variables one attribute
test per event: its compiled entry carries a flood plan, which floods the first copy
of each event within the flooding scope before the entry's remaining routes (the
channels above the scope) are walked as usual.

No logging, no exceptions escaping, no blocking: malformed input is counted in
``drops`` by reason and the rest of the datagram is skipped; events before the
fault in the same datagram have already been forwarded (they were well formed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gridstat.core import wire
from gridstat.core.wire import DropReason
from gridstat.router.channels import EventChannel
from gridstat.router.tables import RoutingTable, Variant

_HEADER_UNPACK = wire.HEADER.unpack_from
_EVENT_UNPACK = wire.EVENT_HEAD.unpack_from
_HEADER_SIZE = wire.HEADER_SIZE
_EVENT_HEAD_SIZE = wire.EVENT_HEAD_SIZE
_OPTION_SIZE = wire.OPTION_SIZE
_MAGIC = wire.MAGIC
_VERSION = wire.WIRE_VERSION
_KIND_EVENTS = wire.KIND_EVENTS
_MAX_VALUE_LEN = wire.MAX_VALUE_LEN
_MAX_TAG_LEN = wire.MAX_TAG_LEN
_MAX_DATAGRAM = wire.MAX_DATAGRAM

_R_TRUNCATED = DropReason.TRUNCATED.value
_R_OVERSIZED = DropReason.OVERSIZED.value
_R_MAGIC = DropReason.BAD_MAGIC.value
_R_VERSION = DropReason.BAD_VERSION.value
_R_KIND = DropReason.BAD_KIND.value
_R_MALFORMED = DropReason.MALFORMED.value
_R_SENDER = DropReason.UNKNOWN_SENDER.value
_R_PENDING = DropReason.SENDER_PENDING.value
#: How long after a start or a channel change an unknown sender counts as ``sender_pending``.
SETTLE_MS = 2_000
_R_VARIABLE = DropReason.UNKNOWN_VARIABLE.value
_R_FUTURE = DropReason.FUTURE_TIMESTAMP.value
_R_AUTH = DropReason.AUTH_FAILED.value
_R_REPLAYED = DropReason.REPLAYED.value
_VERIFY = wire.verify_datagram

#: Control datagrams (ping, pong, shed notices) are handed to this callback: (kind, channel, data).
ControlHandler = Callable[[int, EventChannel, bytes], None]


class Forwarder:
    """Counts and forwards the events of one router; shared by all its channels."""

    def __init__(self, table: RoutingTable, *, future_tolerance_ms: int = 5_000) -> None:
        self.table = table
        #: Inbound channels by the sender id in the datagram header.
        self.by_sender: dict[int, EventChannel] = {}
        self.future_tolerance_ms = future_tolerance_ms
        self.drops: Counter[str] = Counter()
        self.datagrams_in = 0
        self.events_in = 0
        self.events_forwarded = 0
        self.events_filtered = 0
        self.on_control: ControlHandler | None = None
        #: Until this wall-clock time (ms) a datagram from an unknown sender is counted ``sender_pending``,
        #: not ``unknown_sender``: the router started or its channels changed a moment ago, and a neighbour's
        #: channel may be on its way (docs/wire-format.md, "Drop reasons"). See :meth:`settling`.
        self.settling_until_ms = 0

    def settling(self, now_ms: int) -> None:
        """The router's channels change now (it started, or one was added or removed)."""
        self.settling_until_ms = now_ms + SETTLE_MS

    def process(self, data: bytes, now_ms: int) -> None:
        """Forward one datagram's events into the channels' queues. Never raises on bad input."""
        nbytes = len(data)
        self.datagrams_in += 1
        if nbytes < _HEADER_SIZE:
            self.drops[_R_TRUNCATED] += 1
            return
        if nbytes > _MAX_DATAGRAM:
            self.drops[_R_OVERSIZED] += 1
            return
        magic, version, kind, sender, _seq, count, tag_len, _res = _HEADER_UNPACK(data, 0)
        if magic != _MAGIC:
            self.drops[_R_MAGIC] += 1
            return
        if version != _VERSION:
            self.drops[_R_VERSION] += 1
            return
        channel = self.by_sender.get(sender)
        if channel is None:
            self.drops[_R_SENDER if now_ms >= self.settling_until_ms else _R_PENDING] += 1
            return
        key = channel.key
        if key is not None:
            # Authenticated channel: the tag first (nothing of the body is read before it verifies),
            # then the sequence number against the replay window (only a verified one moves it).
            # Control datagrams too (pings, pongs, shed notices): a forged ping must not keep a dead
            # link alive, nor a replayed one; an unkeyed channel pays nothing more for this.
            if not _VERIFY(key, data):
                self.drops[_R_AUTH] += 1
                return
            if not channel.replay.accept(_seq):
                self.drops[_R_REPLAYED] += 1
                return
        channel.last_heard_ms = now_ms
        if kind != _KIND_EVENTS:
            if kind in (wire.KIND_PING, wire.KIND_PONG) and wire.is_ping(nbytes, count, tag_len):
                if self.on_control is not None:
                    self.on_control(kind, channel, data)
            elif kind in (wire.KIND_PING, wire.KIND_PONG):
                self.drops[_R_MALFORMED] += 1
            elif kind == wire.KIND_MODE and not wire.is_mode_notice(data, nbytes, count, tag_len):
                self.drops[_R_MALFORMED] += 1  # the reason the decoder gives a subscriber
            elif kind == wire.KIND_SHED:  # relayed downstream to the affected subscribers (router.shedding)
                if not wire.is_shed_notice(data, nbytes, count, tag_len):
                    self.drops[_R_MALFORMED] += 1
                elif self.on_control is not None:
                    self.on_control(kind, channel, data)
            else:
                self.drops[_R_KIND] += 1  # mode notices are for subscribers; a router takes none
            return
        if tag_len > _MAX_TAG_LEN or count == 0:
            self.drops[_R_MALFORMED] += 1
            return
        body_end = nbytes - tag_len
        cstats = channel.stats
        cstats.datagrams_in += 1
        active = self.table.active
        get = active.get
        close = self.table.variant is Variant.CLOSE
        horizon = now_ms + self.future_tolerance_ms
        off = _HEADER_SIZE
        forwarded = filtered = unknown = future = seen = 0
        for _ in range(count):
            if off + _EVENT_HEAD_SIZE > body_end:
                self.drops[_R_TRUNCATED] += 1
                break
            ts, vid, _flags, nopt, vlen = _EVENT_UNPACK(data, off)
            end = off + _EVENT_HEAD_SIZE + vlen + nopt * _OPTION_SIZE
            if vlen > _MAX_VALUE_LEN or end > body_end:
                # Same reason as wire.decode_datagram: an oversized value_len is malformed
                # whether or not the datagram also ends early.
                self.drops[_R_MALFORMED if vlen > _MAX_VALUE_LEN else _R_TRUNCATED] += 1
                break
            seen += 1
            entry = get(vid)
            if entry is None:
                unknown += 1
                off = end
                continue
            if ts > horizon:
                future += 1
                off = end
                continue
            ev = data[off:end]
            off = end
            if entry.plain:
                sent = False
                shifted = ts + entry.half
            else:
                flood = entry.flood
                if flood is not None:
                    # Limited flooding (router.flooding): the first copy goes to every channel in scope
                    # but the one it came from; later copies stop here, counted by the plan.
                    n = flood.forward(ev, ts, channel, now_ms)
                    if n < 0:
                        continue
                    sent = n > 0
                else:
                    sent = False
                # A device frame rate: the rule in units of 1/R ms (core/filtering.py).
                shifted = ts * entry.scale + entry.half
            pub = entry.pub
            if close:
                for target, elements in entry.close:
                    for s in elements:
                        if shifted % s < pub:
                            target.push(ev)
                            sent = True
                            break
                    else:
                        target.filtered += 1
            else:
                mask = 0
                for s, bits in entry.sparse_holders:
                    if shifted % s < pub:
                        mask |= bits
                if mask == entry.full_mask:
                    sent = True
                    for target in entry.sparse_targets:
                        target.push(ev)
                else:
                    for target in entry.sparse_targets:
                        if mask & 1:
                            target.push(ev)
                            sent = True
                        else:
                            target.filtered += 1
                        mask >>= 1
            if sent:
                forwarded += 1
            else:
                filtered += 1
        else:
            if off != body_end:
                self.drops[_R_MALFORMED] += 1
        cstats.events_in += seen
        self.events_in += seen
        self.events_forwarded += forwarded
        self.events_filtered += filtered
        if unknown:
            self.drops[_R_VARIABLE] += unknown
        if future:
            self.drops[_R_FUTURE] += future
