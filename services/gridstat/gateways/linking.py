"""What the TCP device gateways share on the device side (pmu, iec104, dnp3): staying linked.

``keep_linked`` connects to the device again and again until ``stop`` is set -- one connection per
``connect_once(stop)`` call, which returns when that connection ends or cannot be made -- waiting the
``ReconnectPolicy``'s capped, jittered back-off (gridstat.core.backoff) between them, with the
gateway's background tasks (registering its variables, ticking its session) running meanwhile and
cancelled on the way out; ``read_until_closed`` feeds a connection's bytes to the gateway's session
until the connection ends. ``LinkFailures`` logs a link's failures once, until they change or the link
is back (state changes only). What a connection does stays in each gateway (its session is sans-I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

from gridstat.core.aio import cancelled
from gridstat.core.backoff import ReconnectPolicy


class Readable(Protocol):
    async def read(self) -> bytes: ...


async def read_until_closed(conn: Readable, stop: asyncio.Event, received: Callable[[bytes], str | None], *,
                            close_reason: Callable[[], str | None], peer: str) -> str:
    """Hand every read of ``conn`` to ``received`` (which returns why the session closes the connection, or
    None) until the connection ends; why it ended (``close_reason()`` first: the gateway's own reason)."""
    while True:
        try:
            data = await conn.read()
        except OSError as exc:
            return close_reason() or f"read failed: {exc}"
        if not data:
            return close_reason() or ("stopped" if stop.is_set() else f"{peer} closed the connection")
        closed = received(data)
        if closed is not None:
            return closed


class LinkFailures:
    """A device link's failures, logged on ``log`` when they change, and its recovery."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        #: The failure logged last ("" while the link works).
        self.last = ""

    def failed(self, message: str) -> None:
        """Log a failure once, until it changes or the device is back (state changes only)."""
        if message != self.last:
            self.log.warning("%s; reconnecting with back-off", message)
            self.last = message

    def connected(self, message: str, *args: object) -> None:
        """Log ``message % args`` when connected after a failure."""
        if self.last:
            self.log.warning(message, *args)
            self.last = ""


async def keep_linked(stop: asyncio.Event, policy: ReconnectPolicy,
                      connect_once: Callable[[asyncio.Event], Awaitable[None]], *, failures: LinkFailures,
                      background: Sequence[Coroutine[Any, Any, None]] = ()) -> None:
    """Connect with ``connect_once`` until ``stop`` is set, with ``policy``'s back-off between attempts;
    ``background`` runs meanwhile (started first, cancelled last-started first on the way out)."""
    tasks = [asyncio.ensure_future(c) for c in background]
    try:
        while not stop.is_set():
            await connect_once(stop)
            if stop.is_set():
                break
            delay_s = policy.failed(time.monotonic())
            if failures.last:
                failures.log.debug("next attempt in %.1f s", delay_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay_s)
    finally:
        for task in reversed(tasks):
            await cancelled(task)
