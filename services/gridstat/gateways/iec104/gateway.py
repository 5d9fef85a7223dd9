"""``Iec104Gateway``: the front object of the ``gridstat iec104-gateway`` role (docs/iec104.md).

It owns its parts by name: ``session`` (the sans-I/O link state machine), ``policy`` (the reconnect
back-off), ``publishers`` (the SDK side and the map of information objects to variables), ``stats``
(every counter), and while it runs the outstation's TCP ``connection``. ``run`` connects to the
outstation, feeds what it reads to the session, carries out the session's output, and reconnects
after the back-off when the outstation goes away, until ``stop`` is set.
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
from gridstat.gateways.iec104.asdu import GLOBAL_ADDRESS
from gridstat.gateways.iec104.mapping import PointMap
from gridstat.gateways.iec104.publishing import PointPublishers
from gridstat.gateways.iec104.session import Iec104Session, Output, SessionSettings
from gridstat.gateways.iec104.stats import GatewayStats
from gridstat.gateways.linking import LinkFailures, keep_linked, read_until_closed
from gridstat.gateways.pmu.transport import DeviceConnection

log = logging.getLogger(__name__)

#: How often the session's timers are looked at.
TICK_S = 0.05
#: IEC 60870-5-104's registered port.
DEFAULT_PORT = 2404


@dataclass(frozen=True)
class GatewayOptions:
    host: str
    #: The edge router's control port, ``host:port``.
    edge: str
    port: int = DEFAULT_PORT
    common_addresses: tuple[int, ...] = (GLOBAL_ADDRESS,)
    k: int = 12
    w: int = 8
    t0_s: float = 30.0
    t1_s: float = 15.0
    t2_s: float = 10.0
    t3_s: float = 20.0
    interrogation_period_s: float = 0.0
    retry_initial_s: float = 0.5
    retry_max_s: float = 30.0
    healthy_after_s: float = 30.0
    priority: int = PRIORITY_HIGH
    edge_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValidationError(f"port must be 1..65535, not {self.port}", field="port")
        if not self.t0_s > 0:
            raise ValidationError(f"t0 must be positive, got {self.t0_s}", field="t0_s")
        self.settings()  # k, w, t1-t3 and the common addresses checked now, not at the first connect

    def settings(self) -> SessionSettings:
        return SessionSettings(k=self.k, w=self.w, t1_s=self.t1_s, t2_s=self.t2_s, t3_s=self.t3_s,
                               common_addresses=self.common_addresses,
                               interrogation_period_s=self.interrogation_period_s)


class Iec104Gateway:
    """An IEC 60870-5-104 outstation's monitored values published as GridStat status variables."""

    def __init__(self, options: GatewayOptions, *, points: PointMap | None = None, tls: TlsFiles | None = None,
                 policy: ReconnectPolicy | None = None, attributes: Mapping[str, str] | None = None) -> None:
        self.options = options
        self.stats = GatewayStats()
        self.session = Iec104Session(options.settings(), stats=self.stats)
        self.policy = policy or ReconnectPolicy(initial_s=options.retry_initial_s, max_s=options.retry_max_s,
                                                healthy_after_s=options.healthy_after_s)
        self.publishers = PointPublishers(options.edge, stats=self.stats, points=points, tls=tls,
                                          priority=options.priority, timeout_s=options.edge_timeout_s,
                                          attributes=attributes)
        self.connection: DeviceConnection | None = None
        self._close_reason: str | None = None
        self.failures = LinkFailures(log)

    @property
    def outstation(self) -> str:
        return f"{self.options.host}:{self.options.port}"

    def apply(self, out: Output) -> None:
        """Carry out the session's output: send, publish, close."""
        conn = self.connection
        if out.send and conn is not None:
            conn.write(out.send)
        if out.values:
            self.publishers.publish(out.values, clock.now_ms())
        if out.close is not None and conn is not None:
            self._close_reason = out.close
            conn.abort()

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
            conn = await DeviceConnection.open(o.host, o.port, timeout_s=o.t0_s)
        except (OSError, TimeoutError) as exc:
            self.stats.connect_failures += 1
            self.failures.failed(f"cannot connect to {self.outstation}: {exc or type(exc).__name__}")
            self.session.disconnected("connection refused")
            return
        self.stats.connects += 1
        self.policy.connected(time.monotonic())
        self.connection = conn
        self._close_reason = None
        self.failures.connected("connected to %s again", self.outstation)
        self.apply(self.session.connected(time.monotonic(), self.outstation))
        why = await self._read(conn, stop)
        if stop.is_set():
            out = self.session.stopping()
            if out.send:
                conn.write(out.send)
        self.connection = None
        await conn.close()
        self.session.disconnected(why)
        if not stop.is_set():
            self.stats.reconnects += 1
            self.failures.failed(f"connection to {self.outstation} ended: {why}")

    async def _read(self, conn: DeviceConnection, stop: asyncio.Event) -> str:
        return await read_until_closed(conn, stop, self._received, close_reason=lambda: self._close_reason,
                                       peer="the outstation")

    def _received(self, data: bytes) -> str | None:
        out = self.session.received(data, time.monotonic())
        self.apply(out)
        return out.close

    async def _tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            if stop.is_set():
                conn = self.connection
                if conn is not None:
                    out = self.session.stopping()
                    if out.send:
                        conn.write(out.send)
                    self._close_reason = "stopped"
                    conn.abort()
                return
            self.apply(self.session.tick(time.monotonic()))
