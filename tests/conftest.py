"""Shared pytest setup: integration tests run after the unit tests; hypothesis without deadlines; the
``http_get`` fixture for the roles' small HTTP endpoints (/metrics, /healthz, /readyz); no hang at exit
on a thread a test left running."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed (speed is for the benchmarks): no per-example deadline, which
# a machine busy with other work would turn into failures.
settings.register_profile("gridstat", deadline=None)
settings.load_profile("gridstat")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 1 if item.get_closest_marker("integration") else 0)


#: Grace for threads still ending after the last test, before the run ends without waiting for them.
THREAD_GRACE_S = 10.0


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A non-daemon thread a test left running (a library's reconnect thread, say) keeps the interpreter
    from exiting after the run, for ever: name it and end the process with the run's own status."""
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        left = [t.name for t in threading.enumerate()
                if t is not threading.main_thread() and not t.daemon and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        print(f"\nthreads still running after the run, not waited for: {', '.join(sorted(left))}",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        status = getattr(config, "_gridstat_exitstatus", 0)
        os._exit(int(status))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._gridstat_exitstatus = exitstatus  # type: ignore[attr-defined]


async def _http_get(port: int, path: str) -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    data = (await reader.read()).decode()
    writer.close()
    head, _, body = data.partition("\r\n\r\n")
    return head.splitlines()[0], body


@pytest.fixture
def http_get() -> Callable[[int, str], Awaitable[tuple[str, str]]]:
    """``await http_get(port, path)``: GET ``path`` from 127.0.0.1:``port``; the status line and the body."""
    return _http_get
