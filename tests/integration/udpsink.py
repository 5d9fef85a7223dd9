"""One UDP receiver for the tests' subscriber sockets: a socket on 127.0.0.1 and a thread handing
every decoded datagram (and the wall clock, ms) to a callback, until closed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from gridstat.core import wire


class UdpSink:
    """Receives on 127.0.0.1 (``port``) and calls ``on_datagram(datagram, now_ms)`` from its thread."""

    def __init__(self, on_datagram: Callable[[wire.Datagram, int], None]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self._on_datagram = on_datagram
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self._on_datagram(wire.decode_datagram(data), time.time_ns() // 1_000_000)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
