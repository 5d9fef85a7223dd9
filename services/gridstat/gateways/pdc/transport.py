"""The thin asyncio layer of the PDC server: a TCP listener for PDC clients and a UDP sender.

Over TCP each connection gets a ``ClientSession`` (session.py): its commands are answered on the same
connection, and data frames go to it while its data is on (C37.118.2-2011 6.6 and Annex on TCP-only
communication). A client that does not read is not waited for: above ``max_buffer_bytes`` of unsent
data, its data frames are dropped and counted (``slow_client``), never buffered without bound.

Over UDP (spontaneous mode) data frames go to a configured destination from the start, without
waiting for a command; commands that arrive on the UDP socket are answered to their sender and turn
that stream's data on or off.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

from gridstat.core import clock
from gridstat.gateways.pdc.session import ClientSession, CommandCounters, StreamSource

DEFAULT_MAX_CLIENTS = 64
DEFAULT_MAX_BUFFER_BYTES = 1 << 20


@dataclass
class TransportStats:
    clients: int = 0
    clients_total: int = 0
    #: Connections closed at once because ``max_clients`` were connected.
    clients_refused: int = 0
    data_frames_tcp: int = 0
    data_frames_udp: int = 0
    #: Data frames not sent to a client whose unsent bytes passed ``max_buffer_bytes``.
    slow_client: int = 0
    send_errors: int = 0


class _TcpClient(asyncio.Protocol):
    def __init__(self, listener: TcpListener) -> None:
        self.listener = listener
        self.session = ClientSession(listener.stream, listener.counters)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        listener = self.listener
        if len(listener.clients) >= listener.max_clients:
            listener.stats.clients_refused += 1
            transport.close()
            return
        self.transport = transport
        listener.clients.add(self)
        listener.stats.clients_total += 1
        listener.stats.clients = len(listener.clients)

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        for reply in self.session.receive(data, clock.now_ms()):
            transport.write(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.session.close()
            self.listener.clients.discard(self)
            self.listener.stats.clients = len(self.listener.clients)
            self.transport = None

    def send_data(self, frame: bytes) -> bool:
        transport = self.transport
        if transport is None or not self.session.data_on or transport.is_closing():
            return False
        if transport.get_write_buffer_size() > self.listener.max_buffer_bytes:
            self.listener.stats.slow_client += 1
            return False
        transport.write(frame)
        return True


class TcpListener:
    """PDC clients over TCP: sessions, replies, data to those that turned it on."""

    def __init__(self, stream: StreamSource, counters: CommandCounters, stats: TransportStats, *, host: str,
                 port: int, max_clients: int = DEFAULT_MAX_CLIENTS,
                 max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> None:
        self.stream = stream
        self.counters = counters
        self.stats = stats
        self.host, self.port = host, port
        self.max_clients = max_clients
        self.max_buffer_bytes = max_buffer_bytes
        self.clients: set[_TcpClient] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen; the port bound (``port`` 0: any free one)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _TcpClient(self), self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def send_data(self, frame: bytes) -> int:
        """``frame`` to every client whose data is on; how many it went to."""
        sent = 0
        for c in self.clients:
            if c.send_data(frame):
                sent += 1
        self.stats.data_frames_tcp += sent
        return sent

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in list(self.clients):
                if c.transport is not None:
                    c.transport.close()
            await self._server.wait_closed()
            self._server = None


class UdpSender(asyncio.DatagramProtocol):
    """Spontaneous data frames to ``destination``; commands on the socket answered to their sender."""

    def __init__(self, stream: StreamSource, counters: CommandCounters, stats: TransportStats, *,
                 destination: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.session = ClientSession(stream, counters, data_on=True)
        self.stats = stats
        self.destination = destination
        self.bind = (host, port)
        self.transport: asyncio.DatagramTransport | None = None

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=self.bind)
        self.transport = transport
        return int(transport.get_extra_info("sockname")[1])

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        transport = self.transport
        if transport is None:
            return
        for reply in self.session.receive_datagram(data, clock.now_ms()):
            transport.sendto(reply, addr)

    def error_received(self, exc: Exception) -> None:
        self.stats.send_errors += 1

    def send_data(self, frame: bytes) -> bool:
        transport = self.transport
        if transport is None or not self.session.data_on:
            return False
        transport.sendto(frame, self.destination)
        self.stats.data_frames_udp += 1
        return True

    async def stop(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None
