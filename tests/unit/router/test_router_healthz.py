"""The router's /healthz (metrics port): 200 while its loop heartbeat is fresh, 503 once it is not.

Kubernetes restarts a router on this endpoint (the chart's livenessProbe, docs/kubernetes.md),
so a router whose loop stops making progress must turn unhealthy, and a working one must not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from gridstat.router.process import RouterConfig, StatusRouter
from gridstat.telemetry import roles

#: The ``http_get`` fixture (tests/conftest.py).
HttpGet = Callable[[int, str], Awaitable[tuple[str, str]]]


def telemetry_args(max_age_ms: int) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    roles.add_arguments(p)
    args = p.parse_args(["--metrics-port", "0"])
    args.healthz_max_age_ms = max_age_ms
    return args


@contextlib.asynccontextmanager
async def served_router(max_age_ms: int = 200) -> AsyncIterator[tuple[StatusRouter, int]]:
    """A started router and the port of its metrics server (/metrics, /healthz, /readyz)."""
    router = StatusRouter(RouterConfig(name="r", router_id=1, ping_interval_ms=20))
    await router.start()
    tel = roles.for_router(router, telemetry_args(max_age_ms=max_age_ms))
    await tel.start()
    try:
        port = tel.metrics_port
        assert port is not None
        yield router, port
    finally:
        await tel.stop()
        await router.stop()


async def test_healthz_is_200_while_the_loop_runs_and_503_once_its_heartbeat_is_stale(http_get: HttpGet) -> None:
    async with served_router() as (router, port):
        await asyncio.sleep(0.3)  # longer than the limit: a running loop keeps the heartbeat fresh
        status, body = await http_get(port, "/healthz")
        assert status == "HTTP/1.1 200 OK" and body.startswith("ok: loop heartbeat"), body
        # The task that stamps the heartbeat dies (its rounds are the loop's progress): 503 within the limit.
        liveness = next(t for t in router._tasks if t.get_name().endswith("-liveness"))
        liveness.cancel()
        await asyncio.sleep(0.35)
        status, body = await http_get(port, "/healthz")
        assert status == "HTTP/1.1 503 Service Unavailable" and body.startswith("unhealthy:"), body
        # A heartbeat older than the limit (the loop stalled that long): 503, saying by how much.
        # Nothing stamps it now, so the request sees exactly this age.
        router.heartbeat = time.monotonic() - 10
        status, body = await http_get(port, "/healthz")
        assert status == "HTTP/1.1 503 Service Unavailable", status
        assert "heartbeat is 10." in body and "stuck" in body, body
        # The loop's rounds resume: the next one makes it healthy again.
        router._tasks.append(asyncio.create_task(router._liveness()))
        await asyncio.sleep(0.1)
        assert (await http_get(port, "/healthz"))[0] == "HTTP/1.1 200 OK"
        # /metrics is unaffected by health.
        assert (await http_get(port, "/metrics"))[0] == "HTTP/1.1 200 OK"


async def test_a_blocked_loop_is_reported_once_it_runs_again_and_the_limit_is_at_least_three_pings() -> None:
    router = StatusRouter(RouterConfig(name="r", router_id=1, ping_interval_ms=100))
    await router.start()
    try:
        # The limit never undercuts three ping intervals: 0.3 s here, although 0.05 s was asked for.
        assert router.health(0.05)[0] is True
        time.sleep(0.4)  # the loop is blocked: no round of the liveness task
        healthy, reason = router.health(0.05)
        assert not healthy and "limit 0.3 s" in reason, reason
    finally:
        await router.stop()
    assert router.health(5.0) == (False, "router is not running")


async def test_readyz_is_503_until_its_broker_has_installed_the_tables_of_this_boot(http_get: HttpGet) -> None:
    async with served_router() as (router, port):
        status, body = await http_get(port, "/readyz")
        assert status == "HTTP/1.1 503 Service Unavailable" and "waiting for its broker" in body, body
        router.set_mode(0)  # what a broker's rebuild ends with (broker.installer.reconcile)
        status, body = await http_get(port, "/readyz")
        assert status == "HTTP/1.1 200 OK" and body.startswith("ok: tables installed"), body
