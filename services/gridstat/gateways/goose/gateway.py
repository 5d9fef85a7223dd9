"""``GooseGateway``: the front object of ``gridstat goose-gateway`` (docs/goose.md).

It owns its parts by name: ``session`` (the sans-I/O subscriber handler), ``publishers`` (the SDK
side), ``stats`` (every counter) and, while it runs, ``socket`` (the raw Ethernet socket on
``interface``). ``run`` reads frames, hands each to the session with the monotonic clock and publishes
what it returns, until ``stop`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from gridstat.core.aio import cancelled
from gridstat.core.model import PRIORITY_ALERT
from gridstat.core.tls import TlsFiles
from gridstat.gateways.goose.mapping import GooseMap
from gridstat.gateways.goose.publishing import PointPublishers
from gridstat.gateways.goose.stats import GooseStats
from gridstat.gateways.goose.subscribing import SubscriberSession
from gridstat.gateways.goose.transport import RawSocket

#: How often timeAllowedtoLive is looked at.
TICK_S = 0.05


@dataclass(frozen=True)
class GooseGatewayOptions:
    interface: str
    #: The edge router's control port, ``host:port``.
    edge: str
    priority: int = PRIORITY_ALERT
    edge_timeout_s: float = 10.0


class GooseGateway:
    """GOOSE data-set members published as GridStat alert variables."""

    def __init__(self, options: GooseGatewayOptions, goose_map: GooseMap, *, tls: TlsFiles | None = None,
                 open_socket: Callable[[str], RawSocket] = RawSocket, stats: GooseStats | None = None) -> None:
        self.options = options
        self.stats = stats or GooseStats()
        self.session = SubscriberSession(goose_map, stats=self.stats)
        self.publishers = PointPublishers(options.edge, list(goose_map.points.values()), stats=self.stats, tls=tls,
                                          priority=options.priority, timeout_s=options.edge_timeout_s)
        self._open_socket = open_socket
        self.socket: RawSocket | None = None

    def open(self) -> None:
        """Open the raw socket (raises OSError: no such interface, not root)."""
        if self.socket is None:
            self.socket = self._open_socket(self.options.interface)

    def on_frame(self, data: bytes) -> None:
        points = self.session.receive(data, time.monotonic())
        if points:
            self.publishers.publish(points)

    async def run(self, stop: asyncio.Event) -> None:
        self.open()
        assert self.socket is not None
        self.socket.start_reading(self.on_frame)
        registering = asyncio.ensure_future(self.publishers.run())
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), TICK_S)
                self.session.tick(time.monotonic())
        finally:
            await cancelled(registering)
            self.socket.close()
            self.socket = None
            await self.publishers.close()
