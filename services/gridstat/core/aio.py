"""asyncio helpers: the event loop policy and guarded background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


def install_fast_loop() -> str:
    """Use uvloop when it is installed (the data plane's datagram path is several times cheaper)."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def create_guarded_task(coro: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
    """A background task whose crash is logged at once, not when someone awaits it."""
    task = asyncio.get_running_loop().create_task(coro, name=name)

    def _report(t: asyncio.Task[None]) -> None:
        if not t.cancelled() and t.exception() is not None:
            log.error("background task %s crashed", name, exc_info=t.exception())

    task.add_done_callback(_report)
    return task


async def cancelled(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any, and not done) and wait until it has ended; its cancellation is not raised."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def exit_with_parent(sig: int = 15) -> bool:
    """Ask Linux to send ``sig`` (SIGTERM) to this process when its parent dies (PR_SET_PDEATHSIG).

    Child roles started by a supervisor (``gridstat up``, the benchmarks) use it so that a
    supervisor killed with SIGKILL leaves no orphans. Returns False where unsupported.
    """
    import ctypes
    import os

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(1, sig, 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False
    if ok and os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)
    return bool(ok)
