"""The publisher end of an event channel: GPS-aligned events sent to the edge status router.

A publisher (a PMU, a SCADA front end) sends each status variable at its publication interval
to its edge router (dissertation 2.1.1, 2.1.3). Timestamps are aligned to the interval (GPS in
the seed, NTP/PTP here, README "Clocks") so that Function 4.1 keeps or drops related variables as
a set (4.1); the application may pass its own (GPS) timestamp instead. Publishing never blocks
the caller: a full socket buffer drops the datagram and counts it (``stats.dropped``).

A multi-homed publisher (``also_edges``, docs/redundancy.md "Multi-homed clients") is attached at
more edge routers and sends every datagram to each, signed with each edge's channel key: the
broker then plans a subscription's redundant paths from different edge routers, so restarting one
of them loses nothing.

Alerts (2.1.3) carry ``FLAG_ALERT`` and are rate-limited by their ``min_interval_ms``. We chose
to *raise* ``AlertTooEarly`` (retriable) for an alert sent too soon rather than drop it silently:
an alert is rare and important, so the application must learn that it was not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gridstat.core import clock, wire
from gridstat.core.model import PRIORITY_HIGH, StatusVariable, TypeSpec, check_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import ChannelUnavailable, GridStatError, ValidationError

from .session import EdgeSession


class AlertTooEarly(GridStatError):
    """An alert came less than ``min_interval_ms`` after the previous one of its variable."""

    reason = "AlertRateLimited"
    retriable = True


@dataclass
class PublisherStats:
    published: int = 0  # events handed to the socket (towards at least one edge router)
    dropped: int = 0  # events lost to a full socket buffer or a send error (towards every edge router)
    datagrams: int = 0
    alerts_rejected: int = 0
    #: Datagrams a multi-homed publisher could not send to one of its edge routers (others took them).
    edge_send_errors: int = 0
    #: Instants of periodic variables that were never published (a late wake-up, or a caller that
    #: skipped them); the next event of the variable says so (docs/wire-format.md 3.4).
    skipped: int = 0


@dataclass
class EdgeLeg:
    """One more edge router of a multi-homed publisher: its session, event address and channel key."""

    session: EdgeSession
    address: tuple[str, int]
    key: bytes | None


class SkipNotes:
    """Skipped instants of a periodic variable (docs/wire-format.md 3.4): the newest published
    timestamp, the instants skipped in all, and which of the SKIP_BITS instants before the newest one
    were skipped."""

    __slots__ = ("_bits", "_last_ts", "skipped", "variable")

    def __init__(self, var: StatusVariable) -> None:
        self.variable = var
        self._last_ts: int | None = None
        self.skipped = 0
        self._bits = 0

    def note(self, ts_ms: int, options: Sequence[wire.DerivedValue]) -> tuple[int, Sequence[wire.DerivedValue]]:
        """The instants skipped right before ``ts_ms`` and ``options``, with the SKIPPED option added
        while any of the last ``run + SKIP_BITS`` instants was skipped."""
        last = self._last_ts
        if last is not None and ts_ms <= last:
            return 0, options  # the same instant again, or an older one: not a skip
        self._last_ts = ts_ms
        if last is None:
            return 0, options
        var = self.variable
        if var.frames_per_s:  # whole frames of 1000/R ms (docs/frame-rates.md)
            rate = var.frames_per_s
            run = (ts_ms * rate + 500) // 1000 - (last * rate + 500) // 1000 - 1
        else:
            run = (ts_ms - last) // var.effective_interval_ms - 1
        run = max(run, 0)  # closer than one interval (a stamp off the grid): the next instant
        older = self._bits
        self._bits = 0xFFFF_FFFF if run >= wire.SKIP_BITS else ((1 << run) - 1 | older << (run + 1)) & 0xFFFF_FFFF
        if run > 0:
            self.skipped += run
        elif not older:
            return 0, options
        return run, (*options, wire.DerivedValue(wire.OptionKind.SKIPPED, min(run, 0xFFFF), float(self.skipped),
                                                 older))


class PublicationHandle:
    """One status variable of a publisher; ``publish`` encodes and sends one event."""

    def __init__(self, publisher: Publisher, var: StatusVariable) -> None:
        self.publisher = publisher
        self.variable = var
        self._last_alert_ms: int | None = None
        self._skips = SkipNotes(var)

    @property
    def skipped(self) -> int:
        """Instants of this variable its publisher skipped (docs/wire-format.md 3.4)."""
        return self._skips.skipped

    def encode(self, value: object, ts_ms: int, options: Sequence[wire.DerivedValue] = ()) -> bytes:
        """Check the type and the alert rate, then encode; raises TypeMismatch or AlertTooEarly."""
        var = self.variable
        data = wire.encode_value(var.type, value)
        flags = 0
        if var.alert:
            last = self._last_alert_ms
            if last is not None and ts_ms - last < var.min_interval_ms:
                self.publisher.stats.alerts_rejected += 1
                raise AlertTooEarly(f"alert {var.full_name!r} at {ts_ms} is {ts_ms - last} ms after the "
                                    f"previous one; min_interval_ms is {var.min_interval_ms}",
                                    field="ts_ms")
            self._last_alert_ms = ts_ms
            flags = wire.FLAG_ALERT
        else:
            options = self._note_skips(ts_ms, options)
        return wire.encode_event(wire.Event(ts_ms, var.variable_id, data, flags, tuple(options)))

    def _note_skips(self, ts_ms: int, options: Sequence[wire.DerivedValue]) -> Sequence[wire.DerivedValue]:
        """Count the instants skipped since the newest published one and tell subscribers which of
        their missing events were never published (``SkipNotes``, docs/wire-format.md 3.4)."""
        run, options = self._skips.note(ts_ms, options)
        if run:
            self.publisher.stats.skipped += run
        return options

    def default_ts(self) -> int:
        """Now, aligned to the publication interval (alerts are aperiodic: not aligned)."""
        now = clock.now_ms()
        var = self.variable
        if var.frames_per_s:  # the nearest frame, rounded down to the millisecond as devices stamp it
            return (now * var.frames_per_s + 500) // 1000 * 1000 // var.frames_per_s
        return now if var.alert else clock.align_ms(now, var.interval_ms)

    def publish(self, value: object, ts_ms: int | None = None, *,
                options: Sequence[wire.DerivedValue] = ()) -> int:
        """Send one event; returns the timestamp used. ``options`` are derived values (3.2.1)."""
        ts = self.default_ts() if ts_ms is None else ts_ms
        self.publisher._send([self.encode(value, ts, options)])
        return ts


def source_address(host: str) -> str:
    """The local IPv4 address the kernel picks to reach ``host`` (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((host, 9))
        return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


class Publisher:
    """A publisher's client: one non-blocking UDP socket towards its edge router's event port."""

    def __init__(self, name: str, publisher_id: int, edge: tuple[str, int], *, mtu: int = wire.DEFAULT_MTU,
                 key: bytes | None = None) -> None:
        check_name(name, what="publisher")
        if not 1 <= publisher_id <= 0xFFFF_FFFF:
            raise ValidationError(f"publisher id {publisher_id} is outside 1..2**32-1", field="publisher_id")
        self.name = name
        self.publisher_id = publisher_id
        self.edge = edge
        self.mtu = mtu
        #: The event channel key (docs/security.md): every datagram is signed with it when set.
        self.key = wire.check_key(key) if key is not None else None
        self.stats = PublisherStats()
        self._sequence = 0
        self._sock: socket.socket | None = None
        self._state = "new"  # new -> started -> stopped
        self._stopping = asyncio.Event()
        #: The management-plane session of a publisher made by ``connect`` (None when built directly).
        self.session: EdgeSession | None = None
        self._owns_session = False
        #: The other edge routers of a multi-homed publisher (``connect(also_edges=...)``).
        self.legs: list[EdgeLeg] = []
        #: Those of them the last ``refresh_edge`` could not ask (control address -> why).
        self.refresh_errors: dict[str, str] = {}

    @classmethod
    async def connect(cls, name: str, edge_control: str, *, tls: TlsFiles | None = None, first_time: bool = True,
                      mtu: int = wire.DEFAULT_MTU, session: EdgeSession | None = None,
                      also_edges: Sequence[str] = ()) -> Publisher:
        """Register with the leaf broker through the edge router at ``edge_control`` (its control
        port, ``host:port``), learn the client id and the edge's event address, and start.
        ``first_time=True`` (after a crash) drops what the broker held for this publisher (3.7).
        ``also_edges``: control ports of more edge routers to attach at and send every event to
        (multi-homed; docs/redundancy.md)."""
        check_name(name, what="publisher")
        owns = session is None
        sess = EdgeSession(edge_control, tls=tls) if session is None else session
        try:
            client_id, event_address = await sess.register_publisher(name, first_time=first_time)
            pub = cls(name, client_id, event_address, mtu=mtu,
                      key=sess.channel_keys.get(("publisher", name)) or None)
        except BaseException:
            if owns:
                await sess.close()
            raise
        pub.session = sess
        pub._owns_session = owns
        try:
            for control in also_edges:
                await pub.attach(control, tls=tls)
        except BaseException:
            await pub.stop()
            raise
        await pub.start()
        return pub

    async def attach(self, edge_control: str, *, tls: TlsFiles | None = None) -> EdgeLeg:
        """Attach at one more edge router (its control port) and send every event there too."""
        sess = self.session.sibling(edge_control, tls=tls) if self.session else EdgeSession(edge_control, tls=tls)
        try:
            client_id, address = await sess.register_publisher(self.name, also=True)
            if client_id != self.publisher_id:
                raise ValidationError(f"edge router {edge_control} gave publisher {self.name} id {client_id}, its "
                                      f"first edge router {self.publisher_id}: they serve different clouds",
                                      field="also_edges")
        except BaseException:
            await sess.close()
            raise
        key = sess.channel_keys.get(("publisher", self.name))
        leg = EdgeLeg(sess, address, wire.check_key(key) if key else None)
        self.legs.append(leg)
        return leg

    async def register(self, variable: str, type: TypeSpec, interval_ms: int, *, priority: int = PRIORITY_HIGH,
                       alert: bool = False, min_interval_ms: int = 0, first_time: bool = True,
                       frames_per_s: int = 0, attributes: Mapping[str, str] | None = None) -> PublicationHandle:
        """Register ``name/variable`` with the leaf broker (through the edge router) and return its
        handle, carrying the variable id the broker assigned. Needs a publisher made by ``connect``.

        ``frames_per_s`` publishes at a device's frame rate (``interval_ms`` is then
        ``1000 // frames_per_s``; intervals are whole frames, docs/frame-rates.md); ``attributes``
        describe the variable to its subscribers (station, units ...)."""
        if self.session is None:
            raise ValidationError(f"publisher {self.name} has no edge session; use Publisher.connect",
                                  field="session")
        var = await self.session.register_publication(self.name, variable, type, interval_ms, priority, alert,
                                                      min_interval_ms, first_time=first_time,
                                                      frames_per_s=frames_per_s, attributes=attributes)
        return self.variable(var)

    async def start(self) -> None:
        if self._state != "new":
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # The local address the kernel would use towards the edge router: 127.0.0.1 for an edge on
        # this host, the pod's own address in a cluster; never every interface.
        sock.bind((source_address(self.edge[0]), 0))
        sock.setblocking(False)
        self._sock = sock
        self._state = "started"

    async def refresh_edge(self, *, timeout_s: float = 2.0) -> bool:
        """Ask each edge router again where its events go and send there from now on; True when one
        moved (a restarted edge router pod comes back at a new address, docs/kubernetes.md#upgrades).
        Needs a publisher made by ``connect``; its client id stays (``first_time=False``). The edge
        routers are asked at once, each within ``timeout_s``: one that is down (its old address may
        not even refuse) delays no other. A multi-homed publisher's other edge routers that do not
        answer keep their last address; the first one's failure is raised (ChannelUnavailable)."""
        session = self.session
        if session is None:
            raise ValidationError(f"publisher {self.name} has no edge session; use Publisher.connect",
                                  field="session")

        async def ask(sess: EdgeSession, also: bool) -> tuple[str, int]:
            try:
                _, address = await asyncio.wait_for(sess.register_publisher(self.name, first_time=False, also=also),
                                                    timeout_s)
            except TimeoutError:
                raise ChannelUnavailable(f"edge router {sess.edge_control} did not answer within {timeout_s:g} s",
                                         field="edge") from None
            return address

        answers = await asyncio.gather(ask(session, False), *(ask(leg.session, True) for leg in self.legs),
                                       return_exceptions=True)
        moved = False
        self.refresh_errors = {}
        for leg, answer in zip(self.legs, answers[1:], strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, GridStatError):
                    raise answer
                self.refresh_errors[leg.session.edge_control] = str(answer)
            elif answer != leg.address:
                key = leg.session.channel_keys.get(("publisher", self.name))
                leg.address, leg.key, moved = answer, (wire.check_key(key) if key else None), True
        first = answers[0]
        if isinstance(first, BaseException):
            raise first
        if first != self.edge:
            self.edge = first
            key = session.channel_keys.get(("publisher", self.name))
            self.key = wire.check_key(key) if key else None
            moved = True
        return moved

    async def stop(self) -> None:
        if self._state == "started" and self._sock is not None:
            self._sock.close()
        self._state = "stopped"
        self._stopping.set()
        legs, self.legs = self.legs, []
        for leg in legs:
            await leg.session.close()
        if self.session is not None and self._owns_session:
            self._owns_session = False
            await self.session.close()

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def variable(self, var: StatusVariable) -> PublicationHandle:
        if var.publisher != self.name:
            raise ValidationError(f"{var.full_name!r} belongs to publisher {var.publisher!r}, not {self.name!r}",
                                  field="variable")
        return PublicationHandle(self, var)

    def publish_many(self, items: Sequence[tuple[PublicationHandle, object]], ts_ms: int | None = None, *,
                     options: Sequence[wire.DerivedValue] = ()) -> int:
        """Publish several variables with one timestamp, packed in as few datagrams as the MTU allows
        (a PMU's phasors of one instant travel together). All are type-checked before any is sent.
        ``options`` go with every event (a device's time and quality, docs/wire-format.md 3.5)."""
        if not items:
            raise ValidationError("publish_many needs at least one (handle, value)", field="items")
        if ts_ms is None:
            periodic = [h.variable.interval_ms for h, _ in items if not h.variable.alert]
            now = clock.now_ms()
            ts_ms = clock.align_ms(now, min(periodic)) if periodic else now
        events = [h.encode(v, ts_ms, options) for h, v in items]
        self._send(events)
        return ts_ms

    def _send(self, events: list[bytes]) -> None:
        for batch in wire.pack_events(events, mtu=self.payload_mtu + wire.HEADER_SIZE):
            self._emit(len(batch), b"".join(batch))

    @property
    def payload_mtu(self) -> int:
        """The bytes of events one datagram may carry: the MTU less the header and any tag."""
        keyed = self.key is not None or any(leg.key is not None for leg in self.legs)
        return self.mtu - wire.HEADER_SIZE - (wire.AUTH_TAG_LEN if keyed else 0)

    def _emit(self, count: int, body: bytes) -> None:
        """One events datagram of ``count`` encoded events (``body``): to the edge router and every
        other edge router of a multi-homed publisher, signed per channel. Never blocks: counted."""
        sock = self._sock
        if sock is None or self._state != "started":
            raise ValidationError(f"publisher {self.name} is not started", field="state")
        key, legs = self.key, self.legs
        self._sequence = (self._sequence + 1) & 0xFFFF_FFFF
        plain = wire.encode_header(wire.KIND_EVENTS, self.publisher_id, self._sequence, count) + body
        sent = False
        try:
            sock.sendto(wire.sign_datagram(key, plain) if key is not None else plain, self.edge)
            sent = True
        except OSError:  # BlockingIOError (buffer full) or ICMP refusal: never block, count
            if legs:
                self.stats.edge_send_errors += 1
        for leg in legs:  # a multi-homed publisher: the same datagram to each edge router, its own tag
            try:
                sock.sendto(wire.sign_datagram(leg.key, plain) if leg.key is not None else plain, leg.address)
                sent = True
            except OSError:
                self.stats.edge_send_errors += 1
        if not sent:
            self.stats.dropped += count
            return
        self.stats.published += count
        self.stats.datagrams += 1

    async def run_periodic(self, handle: PublicationHandle, value_fn: Callable[[int], object], *,
                           count: int | None = None) -> int:
        """Publish ``value_fn(ts)`` at every aligned instant of the interval until ``count`` events
        or ``stop()``; returns how many were published. Sleeps to each next aligned millisecond."""
        interval = handle.variable.effective_interval_ms
        done = 0
        last = 0
        while (count is None or done < count) and self._state == "started":
            now = clock.now_ms()
            # A timer may wake a little early; never stamp the same instant twice.
            ts = clock.next_aligned_ms(max(now, last), interval)
            last = ts
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), (ts - now) / 1000)
            if self._state != "started":
                break
            handle.publish(value_fn(ts), ts)
            done += 1
        return done
