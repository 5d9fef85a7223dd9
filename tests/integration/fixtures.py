"""The helpers the integration tests share, in one place (a second copy is a bug waiting to diverge).

* :func:`wait_for` and :func:`eventually` (``gridstat.core.waiting``): poll a condition until it holds
  or a deadline passes, from a thread or on the event loop; with ``what=...`` a condition not reached
  fails naming what was awaited;
* :func:`free_port` (``gridstat.core.ports``) and :func:`unused_port` (bound, nobody listening);
* :func:`environment`: environment variables set for a while;
* :class:`Sink` and :class:`Feed` (``gridstat.chaos.traffic``): a raw subscriber socket and a
  publisher's feed of aligned events, each on its own thread, as the chaos suite uses them;
* :func:`launched`: chaos child processes (routers, brokers, ...) stopped in reverse order at the end;
* :class:`DatagramSink`: ``gridstat.core.udpsink.UdpSink`` handing on decoded datagrams.

Real processes (routers, brokers, Kafka) are started by ``routerprocs``, ``brokerprocs`` and
``kafkaprocs``; ``conftest`` holds the session fixtures.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from typing import Protocol, Self, TypeVar

from gridstat.chaos.traffic import Feed, Sink
from gridstat.core import udpsink, wire
from gridstat.core.ports import free_port
from gridstat.core.waiting import eventually, wait_for

__all__ = ["DatagramSink", "Feed", "Sink", "environment", "eventually", "free_port", "launched", "unused_port",
           "wait_for"]


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """The process environment with ``values`` set, each variable put back as it was on the way out."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def unused_port() -> Iterator[int]:
    """A local TCP port nobody listens on: bound (so no one else takes it) but not listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


class Child(Protocol):
    """A child process of ``gridstat.chaos.procs`` (a router, a broker, the admission controller...)."""

    def start(self) -> Self: ...

    def stop(self) -> None: ...


C = TypeVar("C", bound=Child)


@contextlib.contextmanager
def launched() -> Iterator[Callable[[C], C]]:
    """``start(child)``: starts a chaos child process and returns it; every child started is stopped on
    the way out, the last started first."""
    with contextlib.ExitStack() as stack:
        def start(child: C) -> C:
            started = child.start()
            stack.callback(started.stop)
            return started

        yield start


class DatagramSink(udpsink.UdpSink):
    """A UDP socket on 127.0.0.1 calling ``on_datagram(datagram, now_ms)`` with each datagram decoded."""

    def __init__(self, on_datagram: Callable[[wire.Datagram, int], None]) -> None:
        super().__init__(lambda data, now_ms: on_datagram(wire.decode_datagram(data), now_ms))
