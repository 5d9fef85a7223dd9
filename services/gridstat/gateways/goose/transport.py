"""The raw Ethernet socket (Linux AF_PACKET, needs root or CAP_NET_RAW), thin.

It binds to one interface for every EtherType (``ETH_P_ALL``) with a classic BPF filter that lets only
GOOSE (0x88B8) through, as libiec61850's receiver does: on ``lo`` each frame then arrives twice (the
outgoing and the incoming copy), which ``subscribing.SubscriberSession`` de-duplicates. Reads are
non-blocking from the event loop's reader callback; ``send`` never blocks (a full buffer is counted).
"""

from __future__ import annotations

import asyncio
import ctypes
import socket
import struct
from collections.abc import Callable

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
#: ldh [12]; jeq #0x88b8 jt 0 jf 1; ret #65535; ret #0 (802.1Q tags are taken off by the kernel).
_BPF_GOOSE = [(0x28, 0, 0, 12), (0x15, 0, 1, 0x88B8), (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0)]
READ_SIZE = 2048
#: Frames read per wake-up at most, so one busy interface does not starve the loop.
BATCH = 256


def packet_sockets_available() -> bool:
    """AF_PACKET exists here and this process may open one (root or CAP_NET_RAW)."""
    if not hasattr(socket, "AF_PACKET"):
        return False
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)).close()
    except OSError:
        return False
    return True


class RawSocket:
    """One AF_PACKET socket on ``interface``; raises OSError (no such interface, not permitted)."""

    def __init__(self, interface: str, *, receive: bool = True) -> None:
        self.interface = interface
        proto = ETH_P_ALL if receive else 0
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
        try:
            if receive:
                program = b"".join(struct.pack("HBBI", *ins) for ins in _BPF_GOOSE)
                buf = ctypes.create_string_buffer(program)
                fprog = struct.pack("HL", len(_BPF_GOOSE), ctypes.addressof(buf))
                self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            self.sock.bind((interface, proto))
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise
        self.mac: bytes = bytes(self.sock.getsockname()[4][:6]).ljust(6, b"\x00")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.send_errors = 0

    def start_reading(self, on_frame: Callable[[bytes], None]) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        recv = self.sock.recv

        def readable() -> None:
            for _ in range(BATCH):
                try:
                    data = recv(READ_SIZE)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    return
                on_frame(data)

        loop.add_reader(self.sock.fileno(), readable)

    def send(self, frame: bytes) -> bool:
        try:
            self.sock.send(frame)
        except OSError:
            self.send_errors += 1
            return False
        return True

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._loop = None
        self.sock.close()
