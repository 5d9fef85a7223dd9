"""The device's sockets, thin: a TCP connection (asyncio streams) and a UDP receiver.

Nothing here reads a frame: bytes go to ``session.GatewaySession`` as they come. Writes never wait
(command frames are a few dozen bytes); reads return ``b""`` once the connection ended or was aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

#: Bytes read from the device per call (a data frame of a large PDC is a few kB).
READ_SIZE = 65536


class DeviceConnection:
    """One TCP connection to the device's command (and data) port."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, host: str, port: int, *, timeout_s: float) -> DeviceConnection:
        """Raises OSError or TimeoutError when the device is not there."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        return cls(reader, writer)

    async def read(self) -> bytes:
        """The next bytes; ``b""`` at the end of the stream. Raises OSError on a reset."""
        return await self._reader.read(READ_SIZE)

    def write(self, frames: list[bytes]) -> None:
        if not self._writer.is_closing():
            self._writer.write(b"".join(frames))

    def abort(self) -> None:
        """Drop the connection now; a pending ``read`` returns ``b""``."""
        self._writer.transport.abort()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)


class DatagramReceiver(asyncio.DatagramProtocol):
    """A bound UDP socket handing each datagram and its source to ``on_datagram``."""

    def __init__(self, on_datagram: Callable[[bytes, tuple[str, int]], None]) -> None:
        self._on_datagram = on_datagram
        self.transport: asyncio.DatagramTransport | None = None

    @classmethod
    async def bind(cls, host: str, port: int,
                   on_datagram: Callable[[bytes, tuple[str, int]], None]) -> tuple[DatagramReceiver, int]:
        """The receiver and the port bound (``port`` 0: any). Raises OSError when the port is taken."""
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_datagram_endpoint(lambda: cls(on_datagram), local_addr=(host, port))
        protocol.transport = transport  # uvloop may call connection_made only after this returns
        return protocol, int(transport.get_extra_info("sockname")[1])

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport is not an asyncio.DatagramTransport subclass, but has its methods.
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        self._on_datagram(data, (str(addr[0]), int(addr[1])))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
