"""Waiting for a condition: poll it until it holds or a deadline passes, the one loop the chaos
suite, the tools and the tests use (a child role coming up, a route rebuilt, events arriving).

:func:`wait_for` blocks the calling thread; :func:`eventually` awaits on the running event loop;
:func:`until` blocks for the condition's value (a pod's body, a reply). All are bounded in time, and so
in the number of polls; ``wait_for`` and ``eventually`` raise when the deadline passes only when
asked to name what was awaited, ``until`` always does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar, cast

T = TypeVar("T")

#: Exceptions a poll may raise that count as "not yet" (e.g. ``grpc.RpcError`` of a child still starting).
Tolerated = tuple[type[BaseException], ...]


class NotReached(AssertionError):
    """The awaited condition did not hold by the deadline (an AssertionError, so a test fails on it)."""


def wait_for(predicate: Callable[[], object], *, timeout_s: float = 10.0, step_s: float = 0.02,
             tolerate: Tolerated = (), what: str = "") -> bool:
    """Poll ``predicate`` every ``step_s`` until it is true or ``timeout_s`` has passed; whether it held.

    A poll that raises one of ``tolerate`` counts as false. With ``what``, a condition not reached
    raises :class:`NotReached` naming it instead of returning False.
    """
    deadline = time.monotonic() + timeout_s
    while (held := _poll(predicate, tolerate, deadline, what, timeout_s)) is None:
        time.sleep(step_s)
    return held


async def eventually(predicate: Callable[[], object], *, timeout_s: float = 3.0, step_s: float = 0.005,
                     tolerate: Tolerated = (), what: str = "") -> bool:
    """:func:`wait_for` on the running event loop: sleeps with ``asyncio.sleep`` between polls."""
    deadline = time.monotonic() + timeout_s
    while (held := _poll(predicate, tolerate, deadline, what, timeout_s)) is None:
        await asyncio.sleep(step_s)
    return held


def until(predicate: Callable[[], T | None], *, what: str, timeout_s: float, step_s: float = 0.5,
          tolerate: Tolerated = ()) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that (:func:`wait_for`'s polls);
    :class:`NotReached` naming ``what`` and the last thing seen (a value or a tolerated error) after
    ``timeout_s``."""
    seen: list[object] = [None]

    def probe() -> object:
        try:
            seen[0] = predicate()
        except tolerate as exc:
            seen[0] = exc
            return False
        return seen[0]

    if wait_for(probe, timeout_s=timeout_s, step_s=step_s):
        return cast(T, seen[0])
    raise NotReached(f"{what}: not reached within {timeout_s:g} s (last: {str(seen[0])[:300]})")


def _poll(predicate: Callable[[], object], tolerate: Tolerated, deadline: float, what: str,
          timeout_s: float) -> bool | None:
    """One poll: True if the condition holds, False (or NotReached, with ``what``) once the deadline
    has passed, None to poll again."""
    try:
        if predicate():
            return True
    except tolerate:
        pass
    if time.monotonic() < deadline:
        return None
    if what:
        raise NotReached(f"{what}: not reached within {timeout_s:g} s")
    return False
