"""The status router process: one UDP socket, a drain loop, liveness pings, a control API.

Why one socket: every event channel of a router shares it and is told apart by
the sender id in the datagram header, so one non-blocking drain loop serves all
links (``add_reader`` + ``recv`` until EAGAIN, the cheapest Python datagram path
on these machines; see docs/benchmarks.md). After each drain the channels are
flushed, which packs the events that arrived in that batch, alerts first.

Routers hold hard state: the table lives here and keeps forwarding whatever the
management plane does (dissertation 2.2.1). The control API below is what the
gRPC servicer (``router.control``) and the tests call.

Overload handling (HAPS, docs/overload.md) hangs off the same loop without touching
the per-event path: shaped channels (``shape_channel``) are flushed through their
token bucket after the plain ones, with a timer for what the bucket holds back; a
tick every ``overload.tick_s`` feeds the load estimate (the drain loop's busy time,
two clock reads per wake-up), sheds or reintegrates a link, and sends the shed
notices that tell the affected subscribers.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gridstat.core import wire
from gridstat.core.aio import create_guarded_task
from gridstat.core.wire import DropReason
from gridstat.errors import DuplicateName, NotFound, ValidationError
from gridstat.router import flooding, shedding
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.condensation import CondensationSlots
from gridstat.router.forwarding import Forwarder
from gridstat.router.shaping import ShapingConfig
from gridstat.router.tables import MODE_SLOTS, Route, RoutingTable, Target, Variant

log = logging.getLogger(__name__)

#: Longest a drained event waits for the batch to end before its channel is flushed.
FLUSH_BUDGET_NS = 100_000


class Role(enum.Enum):
    EDGE = "edge"
    INTERNAL = "internal"
    BORDER = "border"
    #: both: clients attach here and inter-cloud channels end here (docs/topology.md, "Router roles")
    EDGE_BORDER = "edge-border"

    @property
    def hosts_clients(self) -> bool:
        return self is Role.EDGE or self is Role.EDGE_BORDER

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls(text)
        except ValueError:
            raise ValidationError(f"router role {text!r} is not edge, internal, border or edge-border",
                                  field="role") from None


@dataclass(frozen=True)
class RouterConfig:
    name: str
    router_id: int
    role: Role = Role.INTERNAL
    variant: Variant = Variant.CLOSE
    host: str = "127.0.0.1"
    port: int = 0
    #: The address other routers reach its event port at, when it knows (a pod's IP): reported in
    #: Health so that its broker points its neighbours there before rebuilding it ("": not known).
    advertise_host: str = ""
    mtu: int = wire.DEFAULT_MTU
    queue_capacity: int = 4096
    ping_interval_ms: int = 100
    failure_timeout_ms: int = 500
    future_tolerance_ms: int = 5_000
    #: Limited flooding: a flooded event may be stamped at most this far ahead of the router's clock,
    #: and every flood_reset_ms the last-flooded timestamps are brought back to the clock.
    flood_tolerance_ms: int = flooding.DEFAULT_TOLERANCE_MS
    flood_reset_ms: int = flooding.DEFAULT_RESET_INTERVAL_MS
    socket_buffer_bytes: int = 4 * 1024 * 1024
    drain_batch: int = 256
    #: After the socket runs dry, poll it this long before sleeping (0: sleep at once).
    busy_poll_us: int = 0
    #: Router CPU overload handling (HAPS link shedding); disabled by default, the load is estimated anyway.
    overload: shedding.OverloadConfig = field(default_factory=shedding.OverloadConfig)
    #: Channels shaped as soon as they are added (``--shape NAME=BPS``), by channel name.
    shaping: tuple[tuple[str, ShapingConfig], ...] = ()
    #: How often a shaped channel reports the events it shed to the subscribers downstream.
    notice_interval_ms: int = 1000

    def __post_init__(self) -> None:
        if not 1 <= self.router_id <= 0xFFFF_FFFF:
            raise ValidationError(f"router id {self.router_id} is outside 1..2**32-1", field="router_id")
        if self.ping_interval_ms <= 0 or self.failure_timeout_ms <= self.ping_interval_ms:
            raise ValidationError("need 0 < ping_interval_ms < failure_timeout_ms", field="failure_timeout_ms")
        if self.future_tolerance_ms < 0:
            raise ValidationError("future_tolerance_ms must not be negative", field="future_tolerance_ms")
        if self.notice_interval_ms <= 0:
            raise ValidationError("notice_interval_ms must be positive", field="notice_interval_ms")
        if not 0 <= self.busy_poll_us <= 10_000:
            raise ValidationError(f"busy_poll_us {self.busy_poll_us} is outside 0..10000", field="busy_poll_us")


@dataclass(frozen=True)
class RouteInstall:
    """A route plus what the table needs to know about its variable."""

    route: Route
    pub_interval_ms: int
    alert: bool = False
    #: The variable's frame rate (0 = a period of ``pub_interval_ms``; docs/frame-rates.md).
    frames_per_s: int = 0


@dataclass
class _Staged:
    installs: list[RouteInstall]
    removals: list[tuple[str, int, int]]
    deadline: float


#: Called as (channel, up) when a router channel fails or comes back.
LinkListener = Callable[[EventChannel, bool], None]


@dataclass
class _Clock:
    started_monotonic: float = field(default_factory=time.monotonic)


class StatusRouter:
    """One status router (edge, internal or border)."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.channels: dict[str, EventChannel] = {}
        self.table = RoutingTable(config.variant, self._resolve)
        self.forwarder = Forwarder(self.table, future_tolerance_ms=config.future_tolerance_ms)
        self.forwarder.on_control = self._on_control
        #: Condensation functions in slots of this router, routed to as channels "cf:<id>".
        self.condensations = CondensationSlots(config.name, self.forwarder, self.flush, self.table)
        self.flooding = flooding.FloodTable(self.table, self.channels, drops=self.forwarder.drops,
                                            tolerance_ms=config.flood_tolerance_ms,
                                            reset_interval_ms=config.flood_reset_ms)
        self.table.flooding = self.flooding
        self.link_listeners: list[LinkListener] = []
        self.drops: Counter[str] = self.forwarder.drops
        self._out: list[EventChannel] = []
        self._blocked: set[EventChannel] = set()
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._clock = _Clock()
        #: New at every start, so the leaf broker can tell a restarted router and rebuild it.
        self.boot_id = uuid.uuid4().hex
        self._staged: dict[str, _Staged] = {}
        self._closed = False
        self._started = False
        # Overload handling (HAPS): shaped channels, their timers, the load estimate and link shedding.
        self._shaped: list[EventChannel] = []
        self._shaper_timers: dict[str, asyncio.TimerHandle] = {}
        self._busy_ns = 0
        self._spun_ns = 0
        self._busy_poll_ns = config.busy_poll_us * 1000
        self.shedder = shedding.LinkShedder(self.table, config.overload,
                                            channels=lambda: self.channels.keys())
        self._tick_at = time.monotonic()
        self._tick_events = 0
        self._tick_sent = 0
        self._prices_version = -1
        self._notice_at = 0.0
        #: Shed notices sent, by reason and action ("cpu_overload/shed", "link_overload/dropped", ...).
        self.notices: Counter[str] = Counter()
        #: time.monotonic() of the liveness task's last round: /healthz's measure of the loop's progress.
        self.heartbeat = time.monotonic()
        #: Whether its broker has rebuilt it since it started (set_mode ends every rebuild).
        self.configured = False

    # -- lifecycle ------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        if self._sock is None:
            raise ValidationError("router is not started", field="state")
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        self.forwarder.settling(time.time_ns() // 1_000_000)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, self.config.socket_buffer_bytes)
            except OSError:  # pragma: no cover - capped by the kernel, not fatal
                pass
        sock.bind((self.config.host, self.config.port))
        sock.setblocking(False)
        self._sock = sock
        self._sendto = sock.sendto
        self._loop.add_reader(sock.fileno(), self._on_readable)
        self.heartbeat = time.monotonic()
        self._tasks.append(create_guarded_task(self._liveness(), name=f"{self.config.name}-liveness"))
        self._tasks.append(create_guarded_task(self._overload(), name=f"{self.config.name}-overload"))
        log.info("router %s (%s, %s) listening on %s:%d", self.config.name, self.config.role.value,
                 self.config.variant.value, *self.address)

    async def stop(self) -> None:
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        self.condensations.close()
        for timer in self._shaper_timers.values():
            timer.cancel()
        self._shaper_timers.clear()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            if self._blocked:
                self._loop.remove_writer(self._sock.fileno())
            self._sock.close()

    async def __aenter__(self) -> StatusRouter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- data path ------------------------------------------------------------
    def _on_readable(self) -> None:
        sock = self._sock
        assert sock is not None
        recv = sock.recv
        process = self.forwarder.process
        clock = time.perf_counter_ns
        now_ms = time.time_ns() // 1_000_000
        # Flush at least every FLUSH_BUDGET_NS inside a long drain, so a burst does not hold the
        # first events back until the whole batch is read (measured: -25..30 % p50 under bursts).
        start = clock()
        due = start + FLUSH_BUDGET_NS
        spin_ns = self._busy_poll_ns
        spun = 0
        for _ in range(self.config.drain_batch):
            try:
                data = recv(65536)
            except BlockingIOError:
                if not spin_ns:
                    break
                # Busy poll (docs/benchmarks.md, "busy polling"): the socket is empty, so send what
                # is queued, then poll the socket for up to busy_poll_us before sleeping: in a VM a
                # sleep and wake-up costs more CPU than the poll, and adds its latency to the next event.
                self.flush()
                t0 = t = clock()
                idle_until = t0 + spin_ns
                polled: bytes | None = None
                while t < idle_until:
                    try:
                        polled = recv(65536)
                        break
                    except BlockingIOError:
                        t = clock()
                spun += clock() - t0
                if polled is None:
                    break
                data = polled
                now_ms = time.time_ns() // 1_000_000
                due = clock() + FLUSH_BUDGET_NS
            except OSError:
                # ICMP errors surface here on Linux (ECONNREFUSED from an earlier send); keep draining.
                self.drops[DropReason.SEND_ERROR.value] += 1
                continue
            process(data, now_ms)
            t = clock()
            if t >= due:
                self.flush()
                due = t + FLUSH_BUDGET_NS
        self.flush()
        self._spun_ns += spun
        self._busy_ns += clock() - start - spun  # the load estimate's input (router.shedding)

    def flush(self) -> None:
        sendto = self._sendto
        for ch in self._out:
            for q in ch.queues:
                if q.events:
                    if not ch.flush(sendto):
                        self._block(ch)
                    break
        if self._shaped:
            self._flush_shaped()

    def _block(self, ch: EventChannel) -> None:
        if not self._blocked and self._loop is not None and self._sock is not None:
            self._loop.add_writer(self._sock.fileno(), self._on_writable)
        self._blocked.add(ch)

    def _on_writable(self) -> None:
        for ch in list(self._blocked):
            if ch.flush(self._sendto):
                self._blocked.discard(ch)
        if not self._blocked and self._loop is not None and self._sock is not None:
            self._loop.remove_writer(self._sock.fileno())
        if self._shaped:  # a shaped channel unblocked with tokens short: its timer
            self._flush_shaped()

    # -- overload handling (HAPS; docs/overload.md) -------------------------------------------
    def _flush_shaped(self) -> None:
        sendto = self._sendto
        for ch in self._shaped:
            shaper = ch.shaper
            if shaper is None or not shaper.live or ch.name in self._shaper_timers or ch in self._blocked:
                continue
            if not ch.flush(sendto):
                self._block(ch)
            elif shaper.wake_s is not None and self._loop is not None:
                self._shaper_timers[ch.name] = self._loop.call_later(shaper.wake_s, self._on_shaper_timer, ch)

    def _on_shaper_timer(self, ch: EventChannel) -> None:
        self._shaper_timers.pop(ch.name, None)
        if ch.shaper is not None and self.channels.get(ch.name) is ch:
            self._flush_shaped()

    def shape_channel(self, name: str, config: ShapingConfig | None) -> EventChannel:
        """Shape an outgoing channel to ``config.bandwidth_bps`` with value-based shedding, or (None) stop."""
        ch = self.channels.get(name)
        if ch is None:
            raise NotFound(f"router {self.config.name} has no channel {name!r}", field="name")
        timer = self._shaper_timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        if config is None:
            if ch.unshape():
                self._shaped.remove(ch)
        else:
            ch.shape(config)
            if ch not in self._shaped:
                self._shaped.append(ch)
        self._prices_version = -1
        self.table.recompile_all()  # compiled entries now push valued events (or plain ones again)
        self._refresh_prices()
        if self._sock is not None:
            self.flush()
        return ch

    def _refresh_prices(self) -> None:
        """Eq. 6's N per shaped channel: the price sum of the current mode's routes on it."""
        if self._prices_version == self.table.table_version:
            return
        self._prices_version = self.table.table_version
        totals: dict[str, float] = {}
        for (channel, _be), routes in self.table.units().items():
            totals[channel] = totals.get(channel, 0.0) + sum(r.price for r in routes)
        for ch in self._shaped:
            if ch.shaper is not None:
                ch.shaper.total_price = float(totals.get(ch.name, 0.0))
                ch.shaper.link_gain = self.shedder.gain

    async def _overload(self) -> None:
        while True:
            await asyncio.sleep(self.config.overload.tick_s)
            self.overload_tick(time.monotonic())

    def overload_tick(self, now: float) -> shedding.ShedAction | None:
        """One tick of overload handling: load estimate, link shedding, shed notices."""
        fw = self.forwarder
        sent = sum(ch.stats.events_sent for ch in self.channels.values())
        elapsed = now - self._tick_at
        busy_ns, self._busy_ns = self._busy_ns, 0
        action = self.shedder.tick(now, busy_s=busy_ns / 1e9, events=fw.events_in - self._tick_events,
                                   copies=sent - self._tick_sent, elapsed_s=elapsed)
        self._tick_at, self._tick_events, self._tick_sent = now, fw.events_in, sent
        if action is not None:
            log.warning("router %s: load %.2f: %s %s routes of channel %s (value %.6g)", self.config.name,
                        action.load, "shed" if action.shed else "reintegrated",
                        "best-effort" if action.unit[1] else "guaranteed", action.unit[0], action.value)
            self._notify(action.unit[0], wire.SHED_CPU_OVERLOAD,
                         wire.SHED_ACTION_SHED if action.shed else wire.SHED_ACTION_RESTORED,
                         [(v, 0) for v in action.variables])
            self._prices_version = -1
        if self._shaped:
            self._refresh_prices()
            if now - self._notice_at >= self.config.notice_interval_ms / 1000:
                self._notice_at = now
                for ch in self._shaped:
                    if ch.shaper is not None and ch.shaper.dropped_vars:
                        self._notify(ch.name, wire.SHED_LINK_OVERLOAD, wire.SHED_ACTION_DROPPED,
                                     ch.shaper.take_dropped())
        return action

    def _notify(self, channel: str, reason: int, action: int, entries: list[tuple[int, int]], hops: int = 0) -> int:
        """Send shed notices on ``channel`` (to its subscriber, or the next router that relays them)."""
        ch = self.channels.get(channel)
        if ch is None or ch.address is None or not entries or ch.kind is ChannelKind.PUBLISHER:
            return 0
        notices = wire.encode_shed_notices(self.config.router_id, 0, reason=reason, action=action, entries=entries,
                                           hops=hops)
        for data in notices:  # control traffic, like liveness pings: outside a shaped channel's token bucket
            try:
                self._sendto(ch.sign_control(data), ch.address)
            except OSError:
                ch.stats.drops[DropReason.SEND_ERROR.value] += 1
        self.notices[f"{wire.SHED_REASONS[reason]}/{wire.SHED_ACTIONS[action]}"] += len(notices)
        return len(notices)

    def _relay_notice(self, inbound: EventChannel, data: bytes) -> None:
        """A shed notice from upstream: pass each variable's part on the channels that route it here."""
        notice = wire.decode_datagram(data).shed_notice
        if notice is None or notice.hops >= wire.MAX_SHED_HOPS:
            return
        per: dict[str, list[tuple[int, int]]] = {}
        active = self.table.active
        for vid, n in notice.entries:
            entry = active.get(vid)
            if entry is None:
                continue
            for target in entry.sparse_targets:
                ch = getattr(target, "channel", None)
                if isinstance(ch, EventChannel) and ch is not inbound:
                    per.setdefault(ch.name, []).append((vid, n))
        for name, entries in per.items():
            self._notify(name, notice.reason, notice.action, entries, notice.hops + 1)

    # -- liveness (dissertation 3.1.4) ------------------------------------------
    def _on_control(self, kind: int, channel: EventChannel, data: bytes) -> None:
        if channel.kind is ChannelKind.ROUTER and not channel.up:
            self._set_link(channel, True)
        if kind == wire.KIND_PING and channel.address is not None:
            body = data[wire.HEADER_SIZE:wire.HEADER_SIZE + wire.PING_BODY.size]
            pong = channel.sign_control(wire.encode_header(wire.KIND_PONG, self.config.router_id, 0, 0) + body)
            try:
                self._sendto(pong, channel.address)
            except OSError:
                channel.stats.drops[DropReason.SEND_ERROR.value] += 1
        elif kind == wire.KIND_PONG:
            (sent_ns,) = wire.PING_BODY.unpack_from(data, wire.HEADER_SIZE)
            channel.rtt_ms = max(0.0, (time.monotonic_ns() - sent_ns) / 1e6)
        elif kind == wire.KIND_SHED:
            self._relay_notice(channel, data)

    async def _liveness(self) -> None:
        interval = self.config.ping_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            # One clock read per round, off the event path: the loop ran within `interval` of it.
            self.heartbeat = time.monotonic()
            now_ms = time.time_ns() // 1_000_000
            if self._staged:
                self.expire_staged()
            self.flooding.tick(now_ms)
            for ch in list(self.channels.values()):
                if ch.kind is not ChannelKind.ROUTER or ch.address is None:
                    continue
                ping = ch.sign_control(wire.encode_ping(wire.KIND_PING, self.config.router_id, 0, time.monotonic_ns()))
                try:
                    self._sendto(ping, ch.address)
                except OSError:
                    ch.stats.drops[DropReason.SEND_ERROR.value] += 1
                silent = now_ms - ch.last_heard_ms
                if ch.up and silent > self.config.failure_timeout_ms:
                    self._set_link(ch, False)
                elif not ch.up and silent <= self.config.failure_timeout_ms:
                    self._set_link(ch, True)

    def _set_link(self, ch: EventChannel, up: bool) -> None:
        ch.up = up
        log.warning("router %s: channel %s is %s", self.config.name, ch.name, "up" if up else "DOWN")
        for listener in self.link_listeners:
            try:
                listener(ch, up)
            except Exception:  # a listener must never stop the router
                log.exception("link listener failed")

    # -- control API ----------------------------------------------------------
    def _resolve(self, channel: str, priority: int) -> Target:
        ch = self.channels.get(channel)
        if ch is None:
            slot = self.condensations.get(channel)
            if slot is not None:
                return slot
            raise NotFound(f"router {self.config.name} has no channel {channel!r}", field="channel")
        return ch.queue(priority)

    def add_channel(
        self,
        name: str,
        *,
        peer_id: int,
        kind: ChannelKind,
        address: tuple[str, int] | None = None,
        mtu: int = 0,
        capacity: int = 0,
        level: int = 1,
        flood_all: bool = False,
        key: bytes | None = None,
    ) -> EventChannel:
        if key is not None:
            key = wire.check_key(key)  # before anything changes: a bad key leaves nothing behind
        if name in self.channels:
            raise DuplicateName(f"router {self.config.name} already has channel {name!r}", field="name")
        if peer_id in self.forwarder.by_sender:
            raise DuplicateName(f"peer id {peer_id} is already used by channel "
                                f"{self.forwarder.by_sender[peer_id].name!r}", field="peer_id")
        if kind is not ChannelKind.PUBLISHER and address is None:
            raise ValidationError(f"a {kind.value} channel needs a host and port", field="host")
        ch = EventChannel(name=name, peer_id=peer_id, kind=kind, address=address,
                          sender_id=self.config.router_id, mtu=mtu or self.config.mtu,
                          capacity=capacity or self.config.queue_capacity, level=level, flood_all=flood_all)
        ch.last_heard_ms = time.time_ns() // 1_000_000  # a grace period before the first ping is due
        if key is not None:
            ch.set_key(key)
        self.channels[name] = ch
        self.forwarder.by_sender[peer_id] = ch
        self.forwarder.settling(time.time_ns() // 1_000_000)
        if address is not None:
            self._out.append(ch)
        self.flooding.channels_changed()
        for shaped, config in self.config.shaping:
            if shaped == name and address is not None:
                self.shape_channel(name, config)
        return ch

    def update_channel(self, name: str, *, level: int, flood_all: bool, key: bytes | None = None,
                       set_key: bool = False) -> EventChannel:
        """Change a channel's flooding attributes in place; its routes and queued events stay.
        With ``set_key`` the channel key is rotated to ``key`` (None or empty: cleared)."""
        ch = self.channels.get(name)
        if ch is None:
            raise NotFound(f"router {self.config.name} has no channel {name!r}", field="name")
        if level < 1:
            raise ValidationError(f"channel level {level} must be at least 1 (1 = same cloud)", field="level")
        if set_key:
            ch.set_key(wire.check_key(key) if key else None)
        ch.level, ch.flood_all = level, flood_all
        self.flooding.channels_changed()
        return ch

    def remove_channel(self, name: str) -> list[Route]:
        ch = self.channels.get(name)
        if ch is None:
            raise NotFound(f"router {self.config.name} has no channel {name!r}", field="name")
        removed = self.table.remove_channel_routes(name)
        del self.channels[name]
        self.forwarder.by_sender.pop(ch.peer_id, None)
        self.forwarder.settling(time.time_ns() // 1_000_000)
        if ch in self._out:
            self._out.remove(ch)
        if ch in self._shaped:
            self._shaped.remove(ch)
        timer = self._shaper_timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        self._blocked.discard(ch)
        self.flooding.channels_changed()
        return removed

    def install_routes(self, installs: Iterable[RouteInstall]) -> list[Route]:
        """Install a batch whole or not at all: everything is validated before anything changes."""
        batch = list(installs)
        self._validate_installs(batch)
        return [self.table.install(i.route, pub_interval_ms=i.pub_interval_ms, alert=i.alert,
                                   frames_per_s=i.frames_per_s) for i in batch]

    def _validate_installs(self, batch: list[RouteInstall]) -> None:
        seen: dict[int, int] = {}
        for inst in batch:
            r = inst.route
            if r.channel not in self.channels and r.channel not in self.condensations:
                raise NotFound(f"route {r.route_id!r}: router {self.config.name} has no channel {r.channel!r}",
                               field="channel")
            if inst.pub_interval_ms <= 0:
                raise ValidationError(f"route {r.route_id!r}: publication interval must be positive",
                                      field="pub_interval_ms")
            known = seen.get(r.variable_id)
            try:
                known = known or self.table.pub_interval(r.variable_id)
            except KeyError:
                pass
            if known and known != inst.pub_interval_ms:
                raise ValidationError(
                    f"route {r.route_id!r}: variable {r.variable_id} is routed with publication interval "
                    f"{known} ms, not {inst.pub_interval_ms} ms", field="pub_interval_ms")
            seen[r.variable_id] = inst.pub_interval_ms

    def remove_routes(self, keys: Iterable[tuple[str, int, int]]) -> list[Route]:
        batch = list(keys)
        self._validate_removals(batch)
        return [self.table.remove(*key) for key in batch]

    def _validate_removals(self, batch: list[tuple[str, int, int]]) -> None:
        for key in batch:
            if not self.table.has(*key):
                raise NotFound(f"no route {key[0]!r} for variable {key[1]} in mode {key[2]}", field="route_id")

    # Two phases for the leaf broker: prepare holds a validated batch, commit applies it whole.
    def prepare_routes(self, transaction_id: str, installs: Iterable[RouteInstall],
                       removals: Iterable[tuple[str, int, int]] = (), *, ttl_ms: int = 30_000) -> int:
        if not transaction_id:
            raise ValidationError("transaction_id must not be empty", field="transaction_id")
        if transaction_id in self._staged:
            raise DuplicateName(f"transaction {transaction_id!r} is already prepared", field="transaction_id")
        batch, gone = list(installs), list(removals)
        self._validate_installs(batch)
        self._validate_removals(gone)
        self._staged[transaction_id] = _Staged(batch, gone, time.monotonic() + max(ttl_ms, 1) / 1000)
        return len(batch) + len(gone)

    def commit_routes(self, transaction_id: str) -> tuple[int, int]:
        staged = self._staged.pop(transaction_id, None)
        if staged is None:
            raise NotFound(f"no prepared transaction {transaction_id!r} (aborted or expired)",
                           field="transaction_id")
        # Validate again: a channel may have gone since prepare; then nothing is applied.
        self._validate_installs(staged.installs)
        removals = [k for k in staged.removals if self.table.has(*k)]
        installed = self.install_routes(staged.installs)
        for key in removals:
            self.table.remove(*key)
        return len(installed), len(removals)

    def abort_routes(self, transaction_id: str) -> bool:
        return self._staged.pop(transaction_id, None) is not None

    def expire_staged(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        expired = [t for t, s in self._staged.items() if s.deadline <= now]
        for t in expired:
            del self._staged[t]
        return len(expired)

    def set_mode(self, mode: int) -> int:
        if not 0 <= mode < MODE_SLOTS:
            raise ValidationError(f"mode {mode} is outside 0..{MODE_SLOTS - 1}", field="mode")
        previous = self.table.current_mode
        self.table.set_mode(mode)
        # The broker ends every rebuild with the current mode (broker.installer.reconcile).
        self.configured = True
        return previous

    def readiness(self) -> tuple[bool, str]:
        """Has its broker installed this boot's tables? (the router's /readyz, telemetry.serving)

        A restarted router forwards nothing until its broker rebuilds it, so it is not ready
        before: a rollout then waits for it before restarting the next router (docs/kubernetes.md).
        """
        if not self._started or self._closed:
            return False, "router is not running"
        if not self.configured:
            return False, "waiting for its broker to install its channels and routes"
        return True, f"tables installed, version {self.table.table_version}"

    def prepare_mode(self, mode: int) -> int:
        """Phase 2 of a mode change at an edge router: switch to the temporary slot (6.3.2)."""
        previous = self.table.current_mode
        self.table.prepare_temporary(mode)
        return previous

    def notify_mode(self, phase: int, mode: int, previous_mode: int, change_id: int) -> int:
        """Phases 1 and 5: send a mode notice to every subscriber channel; returns how many.

        Sent twice: a notice is idempotent (the change id) and one lost notice would only cost
        the subscriber a spurious QoS callback, but two copies make even that unlikely.
        """
        data = wire.encode_mode_notice(self.config.router_id, 0, phase=phase, mode=mode,
                                       previous_mode=previous_mode, change_id=change_id)
        told = 0
        for ch in list(self.channels.values()):
            if ch.kind is not ChannelKind.SUBSCRIBER or ch.address is None:
                continue
            told += 1
            for _ in range(2):
                try:
                    self._sendto(ch.sign_control(data), ch.address)  # signed on a keyed channel, each copy
                except OSError:
                    ch.stats.drops[DropReason.SEND_ERROR.value] += 1
        return told

    def health(self, max_age_s: float) -> tuple[bool, str]:
        """Is the router's loop making progress? (the router's /healthz, telemetry.serving)

        The liveness task stamps ``heartbeat`` every ping interval; a stamp older than
        ``max_age_s`` (at least three ping intervals) means the loop stalled or that task died.
        """
        if not self._started or self._closed:
            return False, "router is not running"
        limit = max(max_age_s, 3 * self.config.ping_interval_ms / 1000)
        age = time.monotonic() - self.heartbeat
        if age > limit:
            return False, f"loop heartbeat is {age:.1f} s old (limit {limit:.1f} s): the router's loop is stuck"
        return True, f"loop heartbeat {age * 1000:.0f} ms ago"

    def uptime_s(self) -> float:
        return time.monotonic() - self._clock.started_monotonic

    def stats(self) -> dict[str, Any]:
        fw = self.forwarder
        times = os.times()
        shed_events: Counter[str] = Counter()
        for (channel, _be), target in self.table.shed_targets.items():
            shed_events[channel] += target.events
        est = self.shedder.estimator
        return {
            "router": self.config.name,
            "router_id": self.config.router_id,
            "role": self.config.role.value,
            "variant": self.config.variant.value,
            "current_mode": self.table.current_mode,
            "table_version": self.table.table_version,
            "datagrams_in": fw.datagrams_in,
            "events_in": fw.events_in,
            "events_forwarded": fw.events_forwarded,
            "events_filtered": fw.events_filtered,
            "drops": dict(fw.drops),
            "flooded_variables": self.flooding.flooded_variables(),
            "cpu_seconds": times.user + times.system,
            "uptime_s": self.uptime_s(),
            "boot_id": self.boot_id,
            "condensations": self.condensations.statuses(),
            "load": est.load,
            "processing_delay_us": est.delay_s * 1e6,
            "shedding_timeout_s": est.timeout_s(self.config.overload.min_timeout_s),
            "shed_units": len(self.shedder.shed),
            "shed_gain": self.shedder.gain,
            "sheds": {**self.shedder.actions, **{f"notices:{k}": v for k, v in self.notices.items()}},
            "revenue": sum(ch.shaper.revenue for ch in self._shaped if ch.shaper is not None),
            "channels": [
                {
                    "name": ch.name, "up": ch.up, "events_in": ch.stats.events_in,
                    "datagrams_in": ch.stats.datagrams_in, "events_sent": ch.stats.events_sent,
                    "datagrams_sent": ch.stats.datagrams_sent, "filtered": ch.filtered,
                    "drops": _with_shed(ch.stats.drops, shed_events.get(ch.name, 0)), "queued": ch.pending(),
                    "rtt_ms": ch.rtt_ms, **_shaping_stats(ch),
                }
                for ch in self.channels.values()
            ],
        }


def _with_shed(drops: Counter[str], shed: int) -> dict[str, int]:
    out = dict(drops)
    if shed:
        out[DropReason.CPU_OVERLOAD.value] = shed
    return out


def _shaping_stats(ch: EventChannel) -> dict[str, Any]:
    sh = ch.shaper
    if sh is None:
        return {}
    return {"shaped": True, "bandwidth_bps": sh.config.bandwidth_bps, "queue_delay_ms": sh.delay_s() * 1000,
            "revenue": sh.revenue, "delivered_value": sh.delivered_value, "drop_policy": sh.config.policy.value}
