"""``GoosePublisherGateway``: the front object of ``gridstat goose-publisher`` (docs/goose.md, "Publishing").

It subscribes (SDK ``Subscriber``, through the edge router) to the alert variables of the map's
``publish`` blocks and sends each block as GOOSE on ``interface``: every alert is a new state (stNum + 1,
sqNum 0, ``t`` the alert's timestamp), retransmitted on the curve of ``retransmission.Retransmitter``.
Parts by name: ``blocks`` (one ``Retransmitter`` per control block), ``subscriber``, ``stats``, ``socket``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.core.aio import cancelled
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError
from gridstat.gateways.goose.mapping import GooseMap, PublishedMember
from gridstat.gateways.goose.retransmission import Retransmitter
from gridstat.gateways.goose.stats import GooseStats
from gridstat.gateways.goose.transport import RawSocket

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoosePublisherOptions:
    interface: str
    edge: str
    name: str = "goose-publisher"
    latency_ms: int = 50
    edge_timeout_s: float = 10.0
    #: The address of its subscriber's socket, registered with its edge router: in a pod, the pod's
    #: (``POD_IP``), so a router in another pod can send it the alerts (docs/goose.md, "In Kubernetes").
    subscriber_host: str = "127.0.0.1"


class GoosePublisherGateway:
    def __init__(self, options: GoosePublisherOptions, goose_map: GooseMap, *, tls: TlsFiles | None = None,
                 open_socket: Callable[..., RawSocket] = RawSocket, stats: GooseStats | None = None) -> None:
        self.options = options
        self.map = goose_map
        self.tls = tls
        self.stats = stats or GooseStats()
        self.blocks: list[Retransmitter] = []
        #: variable -> [(its block, member index, member)]
        self._members: dict[str, list[tuple[Retransmitter, int, PublishedMember]]] = {}
        self._open_socket = open_socket
        self.socket: RawSocket | None = None
        self.subscriber: Subscriber | None = None
        self.subscriptions: list[Subscription] = []
        self._wake = asyncio.Event()
        self._last_error = ""

    def open(self) -> None:
        if self.socket is None:
            self.socket = self._open_socket(self.options.interface, receive=False)
            self.blocks = [Retransmitter(b, src_mac=self.socket.mac) for b in self.map.publish]
            self._members.clear()
            for r in self.blocks:
                for i, m in enumerate(r.block.members):
                    self._members.setdefault(m.full_name, []).append((r, i, m))

    def send(self, frames: list[bytes]) -> None:
        sock = self.socket
        for f in frames:
            if sock is not None and sock.send(f):
                self.stats.frames_sent += 1
            else:
                self.stats.send_errors += 1

    def alert(self, full_name: str, value: object, ts_ms: int) -> None:
        """A new value of ``full_name``: a new state of each block it is a member of."""
        self.stats.alerts += 1
        now = time.monotonic()
        for r, i, member in self._members.get(full_name, ()):
            try:
                mms = member.mms_value(value)
            except (ValueError, TypeError):
                self.stats.points_failed += 1
                continue
            self.send([r.change({i: mms}, ts_ms, now)])
        self._wake.set()

    def _on_event(self, sub: Subscription, holder: Holder) -> None:
        self.alert(sub.variable.full_name, holder.value, holder.timestamp_ms)

    async def subscribe(self, stop: asyncio.Event) -> None:
        """Connect and subscribe to every member's variable, retrying with a capped back-off while the
        edge router is away or a variable is not registered yet (``UnknownVariable``)."""
        o = self.options
        delay_s = 0.2
        todo = list(self._members)
        while todo and not stop.is_set():
            try:
                if self.subscriber is None:
                    self.subscriber = await Subscriber.connect(o.name, o.edge, tls=self.tls, first_time=True,
                                                               host=o.subscriber_host)
                full_name = todo[0]
                sub = await self.subscriber.subscribe_remote(full_name, self._members[full_name][0][2].type,
                                                             interval_ms=1, latency_ms=o.latency_ms,
                                                             on_event=self._on_event)
            except (GridStatError, OSError) as exc:
                self.stats.registration_errors += 1
                if str(exc) != self._last_error:
                    log.warning("subscribing through edge router %s: %s; retrying", o.edge, exc)
                    self._last_error = str(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay_s)
                delay_s = min(5.0, delay_s * 2)
                continue
            todo.pop(0)
            self.subscriptions.append(sub)
            self.stats.registrations += 1

    async def run(self, stop: asyncio.Event, *, subscribed: asyncio.Event | None = None) -> None:
        """Send every block's first state, subscribe, then retransmit until ``stop`` is set."""
        self.open()
        now = time.monotonic()
        for r in self.blocks:
            self.send([r.change({}, int(time.time() * 1000), now)])
        ticking = asyncio.ensure_future(self._retransmit(stop))
        try:
            await self.subscribe(stop)
            if subscribed is not None:
                subscribed.set()
            await stop.wait()
        finally:
            await cancelled(ticking)
            if self.subscriber is not None:
                with contextlib.suppress(GridStatError, OSError):
                    await self.subscriber.stop()
            if self.socket is not None:
                self.socket.close()
                self.socket = None

    async def _retransmit(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            now = time.monotonic()
            for r in self.blocks:
                frames = r.due(now)
                if frames:
                    self.send(frames)
            dues = [r.next_due_s for r in self.blocks if r.next_due_s is not None]
            wait_s = max(0.0, min(dues) - time.monotonic()) if dues else 0.1
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(wait_s, 0.1))
