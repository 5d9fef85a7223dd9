"""A subscriber's socket stood in for by a thread: the chaos suite's raw subscribers and the tests'.

:class:`UdpSink` binds a UDP socket on 127.0.0.1 and hands every datagram it receives, with its
arrival on the wall clock (ms, the clock event timestamps use), to a callback from its own daemon
thread until :meth:`UdpSink.close`. The receive waits a short while at a time (``poll_s``), so
``close`` joins the thread within a bound, and a subclass's :meth:`UdpSink.tick` runs at least that
often (the chaos suite's impaired relay releases its delayed datagrams there); what a datagram means
(decoding, verifying its tag) is the callback's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

#: How long one receive waits before the thread looks at its stop flag again.
POLL_S = 0.05


class UdpSink:
    """Receives on 127.0.0.1 (``port``) and calls ``on_datagram(data, arrived_ms)`` from its thread."""

    def __init__(self, on_datagram: Callable[[bytes, int], None], *, name: str = "udp-sink",
                 poll_s: float = POLL_S) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(poll_s)
        #: The port it receives on (kept: the socket is gone once closed).
        self.port = int(self.sock.getsockname()[1])
        self._on_datagram = on_datagram
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except OSError:  # the receive's timeout (TimeoutError is one), or the socket closed
                pass
            else:
                self._on_datagram(data, time.time_ns() // 1_000_000)
            self.tick()

    def tick(self) -> None:
        """Called from the thread after every receive, or ``poll_s`` without one: a subclass's timers."""

    def close(self) -> None:
        """Stop the thread (joined within a bound) and close the socket."""
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
