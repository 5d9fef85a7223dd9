"""``Dnp3Gateway``: the front object of the ``gridstat dnp3-gateway`` role (docs/dnp3.md).

It owns its parts by name: ``session`` (the sans-I/O master), ``table`` (the points' latest values and the
periodic schedule), ``policy`` (the reconnect back-off), ``publishers`` (the SDK side), ``stats`` (every
counter), and while it runs the outstation's TCP ``connection``. ``run`` connects, feeds what it reads to
the session and the table, carries out their output, publishes periodic values on their grid, and
reconnects after the back-off when the outstation goes away, until ``stop`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gridstat.core import clock
from gridstat.core.backoff import ReconnectPolicy
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.gateways.dnp3.mapping import PointMap
from gridstat.gateways.dnp3.points import PointTable
from gridstat.gateways.dnp3.publishing import PointPublishers
from gridstat.gateways.dnp3.session import MasterSession, Output, SessionSettings
from gridstat.gateways.dnp3.stats import Dnp3Stats
from gridstat.gateways.linking import LinkFailures, keep_linked, read_until_closed
from gridstat.gateways.pmu.transport import DeviceConnection

log = logging.getLogger(__name__)

#: The longest sleep between two looks at the session's timeouts and polls; the periodic grid's next
#: instant wakes the loop sooner.
TICK_S = 0.05
#: The shortest sleep (a grid instant due now is published at once; this keeps the loop from spinning).
MIN_TICK_S = 0.001


@dataclass(frozen=True)
class GatewayOptions:
    host: str
    port: int
    #: The edge router's control port, ``host:port``.
    edge: str
    settings: SessionSettings
    connect_timeout_s: float = 5.0
    retry_initial_s: float = 0.5
    retry_max_s: float = 30.0
    healthy_after_s: float = 30.0
    priority: int = PRIORITY_HIGH
    edge_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValidationError(f"port must be 1..65535, not {self.port}", field="port")


class Dnp3Gateway:
    """A DNP3 outstation's analog and binary inputs published as GridStat status variables."""

    def __init__(self, options: GatewayOptions, *, names: PointMap | None = None, tls: TlsFiles | None = None,
                 policy: ReconnectPolicy | None = None, attributes: Mapping[str, str] | None = None) -> None:
        self.options = options
        self.stats = Dnp3Stats()
        self.session = MasterSession(options.settings, stats=self.stats)
        self.table = PointTable(names or PointMap(), options.settings.outstation_address, stats=self.stats)
        self.policy = policy or ReconnectPolicy(initial_s=options.retry_initial_s, max_s=options.retry_max_s,
                                                healthy_after_s=options.healthy_after_s)
        self.publishers = PointPublishers(options.edge, stats=self.stats, tls=tls, priority=options.priority,
                                          timeout_s=options.edge_timeout_s, attributes=attributes)
        self.connection: DeviceConnection | None = None
        self._close_reason: str | None = None
        self.failures = LinkFailures(log)

    # -- the session's output ---------------------------------------------------------------------

    def apply(self, out: Output) -> None:
        conn = self.connection
        if out.send and conn is not None:
            conn.write(out.send)
        if out.points:
            table = self.table
            alerts = table.update(out.points, clock.now_ms())
            for spec in table.take_new():
                self.publishers.want(spec)
            publish = self.publishers.publish_alert
            for alert in alerts:
                publish(alert)
        if out.close is not None and conn is not None:
            self._close_reason = out.close
            conn.abort()

    def publish_due(self, now_ms: int) -> None:
        publish = self.publishers.publish_periodic
        for ts_ms, items in self.table.due(now_ms):
            publish(ts_ms, items)

    # -- running ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; everything started is closed on the way out."""
        try:
            await keep_linked(stop, self.policy, self._connect_once, failures=self.failures,
                              background=(self.publishers.run(), self._tick(stop)))
        finally:
            await self.publishers.close()

    async def _connect_once(self, stop: asyncio.Event) -> None:
        o = self.options
        self.session.connecting()
        try:
            conn = await DeviceConnection.open(o.host, o.port, timeout_s=o.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            self.stats.connect_failures += 1
            self.failures.failed(f"cannot connect to {o.host}:{o.port}: {exc or type(exc).__name__}")
            self.session.disconnected()
            return
        self.stats.connects += 1
        self.policy.connected(time.monotonic())
        self.connection = conn
        self._close_reason = None
        self.failures.connected("connected to outstation %s:%d again", o.host, o.port)
        self.apply(self.session.connected(time.monotonic()))
        why = await self._read(conn, stop)
        self.connection = None
        await conn.close()
        self.session.disconnected()
        if not stop.is_set():
            self.stats.reconnects += 1
            self.failures.failed(f"connection to outstation {o.host}:{o.port} ended: {why}")

    async def _read(self, conn: DeviceConnection, stop: asyncio.Event) -> str:
        return await read_until_closed(conn, stop, self._received, close_reason=lambda: self._close_reason,
                                       peer="the outstation")

    def _received(self, data: bytes) -> str | None:
        out = self.session.tcp_bytes(data, time.monotonic())
        self.apply(out)
        return out.close

    async def _tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            sleep_s = TICK_S
            due_ms = self.table.next_due_ms()
            if due_ms is not None:
                sleep_s = min(TICK_S, max(MIN_TICK_S, (due_ms - clock.now_ms()) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), sleep_s)
            if stop.is_set():
                conn = self.connection
                if conn is not None:
                    self._close_reason = "stopped"
                    conn.abort()
                return
            self.apply(self.session.tick(time.monotonic()))
            self.publish_due(clock.now_ms())
