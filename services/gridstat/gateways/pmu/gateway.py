"""``PmuGateway``: the front object of the ``gridstat pmu-gateway`` role (docs/pmu-gateway.md).

It owns its parts by name: ``session`` (the sans-I/O client state machine), ``policy`` (the reconnect
back-off), ``publishers`` (the SDK side), ``stats`` (every counter), and while it runs the device's TCP
``connection`` and, with UDP data, the ``udp`` receiver. ``run`` connects to the device, feeds what it
reads to the session, carries out the session's output, and reconnects after the back-off when the
device goes away, until ``stop`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gridstat.core.backoff import ReconnectPolicy
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.gateways.linking import LinkFailures, keep_linked, read_until_closed
from gridstat.gateways.pmu.mapping import NameMap
from gridstat.gateways.pmu.publishing import StationPublishers
from gridstat.gateways.pmu.session import GatewaySession, Output, SessionSettings
from gridstat.gateways.pmu.stats import GatewayStats
from gridstat.gateways.pmu.transport import DatagramReceiver, DeviceConnection

log = logging.getLogger(__name__)

#: How often the session's timeouts are looked at.
TICK_S = 0.05


@dataclass(frozen=True)
class GatewayOptions:
    device_host: str
    device_port: int
    #: The edge router's control port, ``host:port``.
    edge: str
    idcode: int
    #: ``tcp``: data frames on the command connection; ``udp``: data frames to ``udp_host:udp_port``.
    data: str = "tcp"
    udp_host: str = "127.0.0.1"
    udp_port: int = 4713
    cfg3: bool = False
    request_header: bool = True
    connect_timeout_s: float = 5.0
    config_timeout_s: float = 5.0
    data_timeout_s: float = 5.0
    config_poll_s: float = 0.0
    retry_initial_s: float = 0.5
    retry_max_s: float = 30.0
    healthy_after_s: float = 30.0
    priority: int = PRIORITY_HIGH
    edge_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.data not in ("tcp", "udp"):
            raise ValidationError(f"data must be tcp or udp, not {self.data!r}", field="data")
        if not 0 < self.device_port < 65536 or not 0 <= self.udp_port < 65536:
            raise ValidationError("ports are 1..65535 (the UDP port may be 0: any)", field="port")

    def settings(self) -> SessionSettings:
        return SessionSettings(self.idcode, cfg3=self.cfg3, request_header=self.request_header,
                               config_timeout_s=self.config_timeout_s, data_timeout_s=self.data_timeout_s,
                               config_poll_s=self.config_poll_s)


class PmuGateway:
    """A C37.118 device's channels published as GridStat status variables."""

    def __init__(self, options: GatewayOptions, *, names: NameMap | None = None, tls: TlsFiles | None = None,
                 policy: ReconnectPolicy | None = None, only: frozenset[str] | None = None,
                 attributes: Mapping[str, str] | None = None) -> None:
        self.options = options
        self.stats = GatewayStats()
        self.session = GatewaySession(options.settings(), names=names, stats=self.stats)
        self.policy = policy or ReconnectPolicy(initial_s=options.retry_initial_s, max_s=options.retry_max_s,
                                                healthy_after_s=options.healthy_after_s)
        self.publishers = StationPublishers(options.edge, stats=self.stats, tls=tls, priority=options.priority,
                                            timeout_s=options.edge_timeout_s, only=only, attributes=attributes)
        self.connection: DeviceConnection | None = None
        self.udp: DatagramReceiver | None = None
        #: The UDP port bound (with ``data="udp"``), once running.
        self.udp_port: int | None = None
        self._device_addresses: set[str] = set()
        self._close_reason: str | None = None
        self.failures = LinkFailures(log)

    # -- the session's output ---------------------------------------------------------------------

    def apply(self, out: Output) -> None:
        conn = self.connection
        if out.send and conn is not None:
            conn.write(out.send)
        for plan in out.plans:
            self.publishers.want(plan)
        publish = self.publishers.publish
        for sample in out.samples:
            publish(sample)
        if out.close is not None and conn is not None:
            self._close_reason = out.close
            conn.abort()

    def _on_datagram(self, data: bytes, source: tuple[str, int]) -> None:
        if self._device_addresses and source[0] not in self._device_addresses:
            self.stats.udp_foreign += 1
            return
        self.apply(self.session.datagram(data, time.monotonic()))

    # -- running ----------------------------------------------------------------------------------

    async def start_udp(self) -> int:
        """Bind the UDP data port (``data="udp"``); the port bound."""
        o = self.options
        self.udp, self.udp_port = await DatagramReceiver.bind(o.udp_host, o.udp_port, self._on_datagram)
        return self.udp_port

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; everything started is closed on the way out."""
        o = self.options
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            infos = await loop.getaddrinfo(o.device_host, o.device_port, type=socket.SOCK_STREAM)
            self._device_addresses = {str(info[4][0]) for info in infos}
        if o.data == "udp" and self.udp is None:
            await self.start_udp()
        try:
            await keep_linked(stop, self.policy, self._connect_once, failures=self.failures,
                              background=(self.publishers.run(), self._tick(stop)))
        finally:
            if self.udp is not None:
                self.udp.close()
                self.udp = None
            await self.publishers.close()

    async def _connect_once(self, stop: asyncio.Event) -> None:
        o = self.options
        self.session.connecting()
        try:
            conn = await DeviceConnection.open(o.device_host, o.device_port, timeout_s=o.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            self.stats.connect_failures += 1
            self.failures.failed(f"cannot connect to {o.device_host}:{o.device_port}: {exc or type(exc).__name__}")
            self.session.disconnected("connection refused")
            return
        self.stats.connects += 1
        self.policy.connected(time.monotonic())
        self.connection = conn
        self._close_reason = None
        self.failures.connected("connected to %s:%d again", o.device_host, o.device_port)
        self.apply(self.session.connected(time.monotonic()))
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
            self.failures.failed(f"connection to {o.device_host}:{o.device_port} ended: {why}")

    async def _read(self, conn: DeviceConnection, stop: asyncio.Event) -> str:
        return await read_until_closed(conn, stop, self._received, close_reason=lambda: self._close_reason,
                                       peer="the device")

    def _received(self, data: bytes) -> str | None:
        out = self.session.tcp_bytes(data, time.monotonic())
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
