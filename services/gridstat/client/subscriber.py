"""The subscriber end of event channels: one UDP socket, a drain loop and a deadline monitor.

An edge router's subscriber channel sends this socket the events of every subscription of the
subscriber (dissertation 2.1.1, Fig 2.1); the variable id in each event picks the subscription.
The receive path is the router's: ``add_reader`` on a non-blocking socket and ``recv`` until
EAGAIN (docs/benchmarks.md). Peer input never raises out of the loop: a bad datagram is counted
by its ``DropReason`` and a failing user callback is logged and counted (docs/wire-format.md, "Drop reasons").
One monitor task per subscriber checks every subscription's next deadline on a short tick; that
is GridStat's QoS-violation callback model (2.1.5).

A multi-homed subscriber (``also_edges``, docs/redundancy.md "Multi-homed clients") registers the
same socket at more edge routers: a subscription's redundant paths then end at different edge
routers, each signing with its own channel key (picked by the datagram's sender id), and the
subscription's duplicate window keeps one copy of each event.

With a history service (``history=``, docs/gap-recovery.md) the subscriber owns a ``GapFiller`` and
its driver task: subscriptions with recovery on (``subscribe_remote(recover=True)``, ``recover``)
report their lost instants to it, and it delivers them late from the archive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gridstat.core import clock, wire
from gridstat.core.aio import cancelled, create_guarded_task
from gridstat.core.model import PRIORITY_HIGH, StatusVariable, TypeSpec, check_name, split_variable_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import DuplicateName, GridStatError, ValidationError

from .extrapolation import ExtrapolationLike, as_extrapolation
from .flooded import FloodedCallback, FloodedFeed
from .gapfill import GIVE_UP_AFTER_MS, RECOVER_AFTER_MS, GapFiller, HistorySource, drive
from .history import HistoryClient
from .querying import QuerySubscription
from .session import EdgeSession, ModeQoS
from .snapshot import SnapshotCallback, SnapshotGroup
from .subscription import EventCallback, Subscription, ViolationCallback

log = logging.getLogger(__name__)

_UNKNOWN_VARIABLE = wire.DropReason.UNKNOWN_VARIABLE.value
_KIND_EVENTS = wire.KIND_EVENTS
_AUTH_FAILED = wire.DropReason.AUTH_FAILED.value
_REPLAYED = wire.DropReason.REPLAYED.value
_SENDER_SEQ = struct.Struct(">II")
#: How recovered events are delivered (docs/gap-recovery.md).
RECOVERED_DELIVERY = ("callback", "in_order")


@dataclass
class SubscriberStats:
    datagrams: int = 0
    events: int = 0
    #: Datagrams or events not delivered, by reason (DropReason values, ``unknown_variable``).
    drops: Counter[str] = field(default_factory=Counter)
    callback_errors: int = 0
    mode_notices: int = 0
    #: Shed notices from routers' overload handling (docs/overload.md).
    shed_notices: int = 0


class Subscriber:
    """A subscriber process's client: owns the socket every subscription's events arrive on."""

    def __init__(self, name: str, subscriber_id: int, host: str = "127.0.0.1", port: int = 0, *,
                 socket_buffer_bytes: int = 4 * 1024 * 1024, drain_batch: int = 256,
                 key: bytes | None = None, history: HistorySource | None = None,
                 recover_after_ms: int = RECOVER_AFTER_MS, give_up_after_ms: int = GIVE_UP_AFTER_MS,
                 gap_filler: GapFiller | None = None) -> None:
        check_name(name, what="subscriber")
        if not 1 <= subscriber_id <= 0xFFFF_FFFF:
            raise ValidationError(f"subscriber id {subscriber_id} is outside 1..2**32-1", field="subscriber_id")
        self.name = name
        self.subscriber_id = subscriber_id
        self.stats = SubscriberStats()
        #: The event channel key (docs/security.md): with it, every datagram (events, mode and shed
        #: notices) must carry a valid tag and a fresh sequence number (per sending router), or it is
        #: dropped as auth_failed/replayed.
        self.key = wire.check_key(key) if key is not None else None
        #: A multi-homed subscriber's channel keys by sender id (edge router id); None: ``key`` for all.
        self._keys: dict[int, bytes] | None = None
        self._replay: dict[int, wire.ReplayWindow] = {}
        self._bind = (host, port)
        self._buffer = socket_buffer_bytes
        self._batch = drain_batch
        self._subs: dict[int, Subscription] = {}
        self._groups: dict[str, SnapshotGroup] = {}
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._state = "new"  # new -> started -> stopped
        #: The management-plane session of a subscriber made by ``connect`` (None when built directly).
        self.session: EdgeSession | None = None
        self._owns_session = False
        #: Broker subscription id of each remote subscription, by variable id.
        self._remote_ids: dict[int, str] = {}
        #: The flood-all subscription (``subscribe_flooded``), if any.
        self.flooded: FloodedFeed | None = None
        #: Operating modes (6.3): the current one, the one a running change goes to, and a
        #: callback ``on_mode_change(phase, mode, previous)`` with phase prepare, commit or abort.
        self.current_mode = 0
        self.next_mode: int | None = None
        self.on_mode_change: Callable[[str, int, int], None] | None = None
        self._notices: deque[tuple[int, int]] = deque(maxlen=16)
        #: Sessions with the other edge routers of a multi-homed subscriber.
        self.also_sessions: list[EdgeSession] = []
        #: Gap recovery (docs/gap-recovery.md): where lost events are looked up, and the filler of
        #: the subscriptions that ask for it (``gap_filler`` for other bounds than the defaults).
        self.history = history
        self.gapfill: GapFiller | None = None
        if history is not None:
            self.gapfill = gap_filler if gap_filler is not None else GapFiller(
                recover_after_ms=recover_after_ms, give_up_after_ms=give_up_after_ms)
        self._owns_history = False
        self._gapfill_task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, name: str, edge_control: str, *, tls: TlsFiles | None = None, first_time: bool = True,
                      host: str = "127.0.0.1", port: int = 0, session: EdgeSession | None = None,
                      also_edges: Sequence[str] = (), history: str | HistorySource | None = None,
                      **kwargs: Any) -> Subscriber:
        """Start the UDP socket and register its address with the leaf broker through the edge router
        at ``edge_control`` (``host:port`` of its control port); the broker's client id becomes
        ``subscriber_id``. ``first_time=True`` (after a crash) drops what the broker held (3.7).
        ``also_edges``: control ports of more edge routers to attach the same socket at
        (multi-homed; docs/redundancy.md). ``history``: the history service (``HOST:PORT``, with
        ``tls``, or a client) that subscriptions with recovery on fill their gaps from, after
        ``recover_after_ms`` (docs/gap-recovery.md)."""
        source: HistorySource | None = None
        if isinstance(history, str):
            source = await HistoryClient.connect(history, tls=tls)
        elif history is not None:
            source = history
        try:
            sub = cls(name, 1, host, port, history=source, **kwargs)  # id 1 until the broker assigns one
        except BaseException:
            if isinstance(source, HistoryClient) and isinstance(history, str):
                await source.close()
            raise
        sub._owns_history = isinstance(history, str)
        owns = session is None
        sess = EdgeSession(edge_control, tls=tls) if session is None else session
        sub.session = sess
        sub._owns_session = owns
        try:
            await sub.start()
            client_id = await sess.register_subscriber(name, sub.address, first_time=first_time)
            if not 1 <= client_id <= 0xFFFF_FFFF:
                raise ValidationError(f"broker assigned subscriber id {client_id} outside 1..2**32-1",
                                      field="subscriber_id")
            sub.subscriber_id = client_id
            sub.current_mode = sess.current_mode
            key = sess.channel_keys.get(("subscriber", name))
            if key:
                sub.key = wire.check_key(key)
            for control in also_edges:
                await sub.attach(control, tls=tls)
        except BaseException:
            await sub.stop()
            raise
        return sub

    async def attach(self, edge_control: str, *, tls: TlsFiles | None = None) -> None:
        """Attach this subscriber's socket at one more edge router (its control port)."""
        if self.session is None:
            raise ValidationError(f"subscriber {self.name} has no edge session; use Subscriber.connect",
                                  field="session")
        sess = self.session.sibling(edge_control, tls=tls)
        try:
            client_id = await sess.register_subscriber(self.name, self.address, also=True)
            if client_id != self.subscriber_id:
                raise ValidationError(f"edge router {edge_control} gave subscriber {self.name} id {client_id}, its "
                                      f"first edge router {self.subscriber_id}: they serve different clouds",
                                      field="also_edges")
        except BaseException:
            await sess.close()
            raise
        self.also_sessions.append(sess)
        key = sess.channel_keys.get(("subscriber", self.name))
        if key or self.key is not None:
            keys = self._keys if self._keys is not None else {self.session.edge_router_id: self.key or b""}
            keys[sess.edge_router_id] = wire.check_key(key) if key else b""
            self._keys = keys
            if self.key is None:  # a keyed leg turns verification on for all: an unkeyed one then fails
                self.key = keys[sess.edge_router_id]

    async def subscribe_remote(self, variable_full_name: str, type: TypeSpec, *, interval_ms: int, latency_ms: int,
                               redundancy: int = 1, priority: int = PRIORITY_HIGH, mode: int = 0,
                               on_event: EventCallback | None = None, on_violation: ViolationCallback | None = None,
                               extrapolate: Callable[..., Any] | None = None,
                               extrapolation: ExtrapolationLike | None = None,
                               modes: Mapping[int, int] | None = None, price: float = 1.0,
                               best_effort: bool = False, recover: bool = False,
                               on_recovered: EventCallback | None = None,
                               recovered: Literal["callback", "in_order"] = "callback") -> Subscription:
        """Subscribe through the edge router (the broker admits it and installs the routes), then
        subscribe locally with the variable id and publication interval of the reply. Raises
        ``SubscriptionRejected`` (``reason``, ``offer``) when the broker refuses.

        ``modes`` (mode -> interval_ms) subscribes in several operating modes at once, with the same
        latency, redundancy and priority; ``interval_ms`` and ``mode`` are then ignored. ``price`` is
        what one delivered event is worth and ``best_effort`` asks for no guarantee: routers under
        overload shed best-effort and low-priced streams first (docs/overload.md).

        ``recover`` fills the subscription's gaps from the history service, delivered to
        ``on_recovered`` or, with ``recovered="in_order"``, to ``on_event`` (``recover``; an alert
        variable is aperiodic and has no gaps: for it ``recover`` is ignored)."""
        if self.session is None:
            raise ValidationError(f"subscriber {self.name} has no edge session; use Subscriber.connect",
                                  field="session")
        as_extrapolation(extrapolation, type)  # a bad request fails before the broker is asked
        if recover:
            self._check_recovery(on_recovered, recovered)
        publisher, name = split_variable_name(variable_full_name)
        wanted = dict(modes) if modes else {mode: interval_ms}
        if modes:
            interval_ms = wanted.get(self.current_mode, next(iter(wanted.values())))
        result = await self.session.subscribe(self.name, variable_full_name, type,
                                              [ModeQoS(m, i, latency_ms, redundancy, priority, price, best_effort)
                                               for m, i in wanted.items()])
        # The broker states the interval it granted per mode (dissertation 4.2's rounding): use that.
        granted = {m: result.granted_interval_ms.get(m, i) for m, i in wanted.items()}
        interval_ms = granted.get(self.current_mode, next(iter(granted.values()))) if modes else \
            granted.get(mode, interval_ms)
        try:
            if result.pub_interval_ms:
                var = StatusVariable(publisher, name, type, result.pub_interval_ms, priority,
                                     variable_id=result.variable_id, frames_per_s=result.frames_per_s,
                                     attributes=result.attributes)
            else:  # an alert variable: aperiodic, no publication interval
                var = StatusVariable(publisher, name, type, 0, priority, alert=True,
                                     min_interval_ms=max(1, interval_ms), variable_id=result.variable_id)
            sub = self.subscribe(var, interval_ms=interval_ms, latency_ms=latency_ms, on_event=on_event,
                                 on_violation=on_violation, extrapolate=extrapolate, extrapolation=extrapolation)
        except GridStatError:
            with contextlib.suppress(GridStatError):
                await self.session.unsubscribe(result.subscription_id)
            raise
        if recover and not var.alert:
            self.recover(sub, on_recovered=on_recovered, recovered=recovered)
        self._remote_ids[var.variable_id] = result.subscription_id
        sub.admission = result.admission
        # The modes it has QoS in, one or several: in another mode nothing is routed to it, so nothing is
        # expected (no gaps, no violations; gridstat_subscription_active 0; docs/modes.md).
        sub.mode_intervals = granted
        sub.in_mode = self.current_mode in wanted
        return sub

    def recover(self, sub: Subscription, *, on_recovered: EventCallback | None = None,
                recovered: Literal["callback", "in_order"] = "callback") -> None:
        """Fill ``sub``'s gaps from the history service (docs/gap-recovery.md): every instant it counts
        as ``lost`` is looked up ``recover_after_ms`` later and, when found, delivered with its
        archived value and timestamp on a holder flagged ``recovered`` -- to ``on_recovered(sub,
        holder)`` (``recovered="callback"``), or to its ``on_event`` in timestamp order within the
        gap (``"in_order"``; the pull holder never moves back to it). Counted in ``sub.stats``:
        ``recovered``, ``unrecoverable``, ``recovery_pending``.

        Raises:
            ValidationError: the subscriber has no history service (``field="history"``), the
                variable is an alert (aperiodic: no gaps), ``recovered`` is neither value, or
                ``"callback"`` without ``on_recovered``.
        """
        self._check_recovery(on_recovered, recovered)
        if sub.variable.alert:
            raise ValidationError(f"{sub.full_name!r} is an alert variable: aperiodic, it has no gaps to recover",
                                  field="recover")
        sub.enable_recovery(self.gapfill, on_recovered=on_recovered, in_order=recovered == "in_order")

    def _check_recovery(self, on_recovered: EventCallback | None, recovered: str) -> None:
        if self.gapfill is None:
            raise ValidationError(f"subscriber {self.name} has no history service to recover gaps from; "
                                  "give Subscriber.connect(history=...)", field="history")
        if recovered not in RECOVERED_DELIVERY:
            raise ValidationError(f"recovered must be one of {', '.join(RECOVERED_DELIVERY)}, got {recovered!r}",
                                  field="recovered")
        if recovered == "callback" and on_recovered is None:
            raise ValidationError('recovered="callback" needs on_recovered (or recovered="in_order")',
                                  field="on_recovered")

    async def unsubscribe_remote(self, sub: Subscription) -> None:
        """Remove a subscription made by ``subscribe_remote`` at the broker, then locally."""
        sid = self._remote_ids.pop(sub.variable.variable_id, None)
        if sid is not None and self.session is not None:
            await self.session.unsubscribe(sid)
        self._forget(sub)

    async def subscribe_query(self, where: str, *, interval_ms: int, latency_ms: int, redundancy: int = 1,
                              priority: int = PRIORITY_HIGH, mode: int = 0, price: float = 1.0,
                              best_effort: bool = False, on_event: EventCallback | None = None,
                              on_violation: ViolationCallback | None = None,
                              follow_s: float | None = 1.0) -> QuerySubscription:
        """A standing query subscription (docs/queries.md): the broker admits every variable ``where``
        matches, now and later, each with this QoS, and drops those unregistered. Returns the local
        side (``gridstat.client.querying.QuerySubscription``): a local subscription per admitted
        variable, the rejected ones with their reason, kept in step every ``follow_s`` seconds (None:
        only when ``refresh()`` is called). ValidationError with the column for a bad expression."""
        if self.session is None:
            raise ValidationError(f"subscriber {self.name} has no edge session; use Subscriber.connect",
                                  field="session")
        reply = await self.session.subscribe_query(
            self.name, where, [ModeQoS(mode, interval_ms, latency_ms, redundancy, priority, price, best_effort)])
        query = QuerySubscription(self, self.session, reply.query.query_id, reply.query.where,
                                  latency_ms=latency_ms, mode=mode, on_event=on_event, on_violation=on_violation)
        query.apply(reply)
        if follow_s is not None:
            query.follow(follow_s)
        return query

    async def subscribe_flooded(self, on_event: FloodedCallback | None = None) -> FloodedFeed:
        """A flood-all subscription (dissertation 5.1): every variable flooded in the cloud is
        delivered without subscribing to it, to ``on_event(variable, holder)`` and the feed's holders."""
        session = self.session
        if session is None:
            raise ValidationError(f"subscriber {self.name} has no edge session; use Subscriber.connect",
                                  field="session")
        variables = await session.set_flood_all(self.name, True)
        if self.flooded is not None:
            self.flooded.close()
        self.flooded = FloodedFeed(self.name, variables, on_event=on_event,
                                   refresh=lambda: session.set_flood_all(self.name, True))
        return self.flooded

    async def unsubscribe_flooded(self) -> None:
        """End the flood-all subscription; flooded variables it does not subscribe to stop arriving."""
        if self.session is not None:
            await self.session.set_flood_all(self.name, False)
        if self.flooded is not None:
            self.flooded.close()
            self.flooded = None

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        """Where an edge router's subscriber channel must send (``add_channel(address=...)``)."""
        if self._sock is None:
            raise ValidationError(f"subscriber {self.name} is not started", field="state")
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    async def start(self) -> None:
        if self._state != "new":
            return
        self._state = "started"
        self._loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError):  # capped by the kernel, not fatal
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._buffer)
        sock.bind(self._bind)
        sock.setblocking(False)
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self._on_readable)
        self._monitor = create_guarded_task(self._watch(), name=f"{self.name}-qos-monitor")
        if self.gapfill is not None and self.history is not None:
            self._gapfill_task = create_guarded_task(drive(self.gapfill, self.history),
                                                     name=f"{self.name}-gapfill")

    async def stop(self) -> None:
        others, self.also_sessions = self.also_sessions, []
        for sess in others:
            await sess.close()
        if self.session is not None and self._owns_session:
            self._owns_session = False
            await self.session.close()
        await cancelled(self._gapfill_task)  # before its history client closes
        if self._owns_history and isinstance(self.history, HistoryClient):
            self._owns_history = False
            await self.history.close()
        if self._state != "started":
            self._state = "stopped"
            return
        self._state = "stopped"
        if self.flooded is not None:
            self.flooded.close()
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()

    async def __aenter__(self) -> Subscriber:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- subscriptions ------------------------------------------------------------------------------
    def subscribe(self, var: StatusVariable, *, interval_ms: int, latency_ms: int,
                  on_event: EventCallback | None = None, on_violation: ViolationCallback | None = None,
                  extrapolate: Callable[..., Any] | None = None,
                  extrapolation: ExtrapolationLike | None = None) -> Subscription:
        """Subscribe to ``var``; the caller installs the routes that bring its events here.
        ``extrapolation`` fills missed instants instead of reporting them (2.2.2, ``Extrapolation``)."""
        if var.variable_id in self._subs:
            raise DuplicateName(f"subscriber {self.name} already subscribes to {var.full_name!r}",
                                field="variable")
        sub = Subscription(var, interval_ms=interval_ms, latency_ms=latency_ms, on_event=on_event,
                           on_violation=on_violation, extrapolate=extrapolate, subscriber=self,
                           extrapolation=extrapolation)
        self._subs[var.variable_id] = sub
        return sub

    def subscriptions(self) -> list[Subscription]:
        return list(self._subs.values())

    def _forget(self, sub: Subscription) -> None:
        if self._subs.get(sub.variable.variable_id) is sub:
            del self._subs[sub.variable.variable_id]
        if self.gapfill is not None:
            self.gapfill.forget(sub)

    def snapshot_group(self, name: str, subscriptions: Iterable[Subscription], *, history: int = 1,
                       on_snapshot: SnapshotCallback | None = None) -> SnapshotGroup:
        """A group subscription (2.1.5): complete in-phase sets of the given subscriptions."""
        if name in self._groups:
            raise DuplicateName(f"subscriber {self.name} already has group {name!r}", field="name")
        members = list(subscriptions)
        for sub in members:
            if self._subs.get(sub.variable.variable_id) is not sub:
                raise ValidationError(f"{sub.full_name!r} is not a subscription of {self.name}",
                                      field="subscriptions")
        group = SnapshotGroup(name, members, history=history, on_snapshot=on_snapshot)
        self._groups[name] = group
        return group

    def remove_group(self, name: str) -> None:
        group = self._groups.pop(name, None)
        if group is not None:
            for sub in group.members:
                group.remove(sub)

    # -- receive path -------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        sock = self._sock
        assert sock is not None
        recv = sock.recv
        stats = self.stats
        now_ms = clock.now_ms()
        for _ in range(self._batch):
            try:
                data = recv(65536)
            except BlockingIOError:
                break
            except OSError:
                stats.drops[wire.DropReason.SEND_ERROR.value] += 1
                continue
            self.process(data, now_ms)

    def process(self, data: bytes, now_ms: int) -> None:
        """Decode one datagram and deliver its events; never raises on peer input."""
        stats = self.stats
        stats.datagrams += 1
        key = self.key
        if key is not None:  # events and control datagrams (mode, shed notices) alike
            keys = self._keys
            if keys is not None:  # multi-homed: the sending edge router's key
                key = keys.get(_SENDER_SEQ.unpack_from(data, 4)[0], b"") if len(data) >= 12 else b""
            if not key or not wire.verify_datagram(key, data):
                stats.drops[_AUTH_FAILED] += 1
                return
            sender, seq = _SENDER_SEQ.unpack_from(data, 4)
            if not self._replay.setdefault(sender, wire.ReplayWindow()).accept(seq):
                stats.drops[_REPLAYED] += 1
                return
        try:
            dgram = wire.decode_datagram(data)
        except wire.DecodeError as exc:
            stats.drops[exc.reason.value] += 1
            return
        if dgram.kind != _KIND_EVENTS:
            if dgram.mode_notice is not None:
                self._on_mode_notice(*dgram.mode_notice, now_ms)
            elif dgram.shed_notice is not None:
                self._on_shed_notice(dgram.shed_notice, now_ms)
            else:
                stats.drops["control"] += 1
            return
        subs = self._subs
        for ev in dgram.events:
            stats.events += 1
            sub = subs.get(ev.variable_id)
            if sub is None:
                if self.flooded is None or not self.flooded.handle(ev, now_ms):
                    stats.drops[_UNKNOWN_VARIABLE] += 1
                continue
            sub.handle_event(ev, now_ms)

    def _on_shed_notice(self, notice: wire.ShedNotice, now_ms: int) -> None:
        """A router shed (or restored, or dropped events of) some of our streams under overload."""
        self.stats.shed_notices += 1
        reason, action = notice.reason_name, notice.action_name
        for vid, dropped in notice.entries:
            sub = self._subs.get(vid)
            if sub is not None:
                sub.handle_shed(reason, action, dropped, now_ms)

    # -- operating modes (6.3.2) ---------------------------------------------------------------------
    def _on_mode_notice(self, phase: int, mode: int, previous: int, change_id: int, now_ms: int) -> None:
        """newModePreparation / newMode from the edge router; each notice comes twice, once counts."""
        key = (change_id, phase)
        if key in self._notices:
            return
        self._notices.append(key)
        if phase == wire.MODE_PREPARE:
            self.next_mode = mode
            for sub in self._subs.values():
                sub.begin_mode_change(mode)
        else:  # COMMIT, or ABORT with the mode that stays
            self.current_mode = mode
            self.next_mode = None
            for sub in self._subs.values():
                sub.end_mode_change(mode, now_ms)
        self.stats.mode_notices += 1
        if self.on_mode_change is not None:
            name = {wire.MODE_PREPARE: "prepare", wire.MODE_COMMIT: "commit", wire.MODE_ABORT: "abort"}[phase]
            try:
                self.on_mode_change(name, mode, previous)
            except Exception:
                self.stats.callback_errors += 1
                log.exception("subscriber %s: on_mode_change callback failed", self.name)

    @property
    def is_mode_change(self) -> bool:
        """True between a change's first and last notice (the dissertation's isModeChange)."""
        return self.next_mode is not None

    # -- QoS monitor ----------------------------------------------------------------------------------
    def tick_ms(self) -> int:
        """A quarter of the shortest subscription interval, within 1..50 ms."""
        shortest = min((s.interval_ms for s in self._subs.values()), default=200)
        return max(1, min(50, shortest // 4))

    def check_deadlines(self, now_ms: int) -> int:
        """Report late events to their subscriptions; returns how many violations fired."""
        fired = 0
        for sub in list(self._subs.values()):
            if sub.check(now_ms) is not None:
                fired += 1
        return fired

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.tick_ms() / 1000)
            self.check_deadlines(clock.now_ms())
