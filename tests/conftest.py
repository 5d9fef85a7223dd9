"""Shared pytest setup: integration tests run after the unit tests; hypothesis without deadlines; the
``http_get`` fixture for the roles' small HTTP endpoints (/metrics, /healthz, /readyz)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed (speed is for the benchmarks): no per-example deadline, which
# a machine busy with other work would turn into failures.
settings.register_profile("gridstat", deadline=None)
settings.load_profile("gridstat")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 1 if item.get_closest_marker("integration") else 0)


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
