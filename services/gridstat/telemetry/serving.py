"""``/metrics``, ``/healthz`` and ``/readyz`` over HTTP on the role's own event loop (an aiohttp app).

``prometheus_client.start_http_server`` serves from a thread; our collectors read the role's
live counters, which only the event loop may touch consistently. So an aiohttp application runs
on the loop and calls prometheus-client's ``generate_latest`` there. A scrape of a router costs
well under a millisecond. Every answer closes its connection (probes and scrapers open one each).

``/healthz`` answers 200 while the role's ``health`` check (if it has one) says it makes
progress, 503 with the check's reason otherwise: the router's check is the age of its loop
heartbeat (``StatusRouter.health``), so a Kubernetes livenessProbe on it restarts a router whose
loop is wedged, which a TCP probe of the control port (accepted by gRPC's own threads) cannot
see (docs/kubernetes.md). Being served by the same event loop, the endpoint cannot answer at all
while the loop is blocked, which the probe's timeout also counts as a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gridstat.errors import ValidationError

log = logging.getLogger(__name__)

#: Longest request head accepted (aiohttp's limits), and how long a client may take to send it.
MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0

#: A role's health check: (healthy, one line saying why).
HealthCheck = Callable[[], tuple[bool, str]]


@web.middleware
async def _one_request_per_connection(request: web.Request, handler: Callable[..., object]) -> web.StreamResponse:
    """Every answer, errors (404, 405) included, closes its connection: a probe or a scraper sends one
    request and reads to the end."""
    try:
        response = await handler(request)  # type: ignore[misc]
    except web.HTTPException as exc:
        response = web.Response(status=exc.status, reason=exc.reason, text=f"{exc.reason}\n")
    assert isinstance(response, web.StreamResponse)
    response.force_close()
    return response


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics``; ``port`` 0 picks a free port."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0,
                 health: HealthCheck | None = None, readiness: HealthCheck | None = None) -> None:
        self.registry = registry
        self.host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.scrapes = 0
        #: ``/healthz``'s check; None: always 200 while the server answers.
        self.health = health
        #: ``/readyz``'s check; None: always 200 while the server answers.
        self.readiness = readiness

    @property
    def port(self) -> int:
        addresses = self._runner.addresses if self._runner is not None else []
        if not addresses:
            raise ValidationError("metrics server is not started", field="state")
        return int(addresses[0][1])

    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application(middlewares=[_one_request_per_connection],
                              handler_args={"max_line_size": MAX_HEAD_BYTES, "max_field_size": MAX_HEAD_BYTES})
        app.router.add_route("GET", "/metrics", self._metrics)
        app.router.add_route("GET", "/healthz", self._healthz)
        app.router.add_route("GET", "/readyz", self._readyz)
        app.router.add_route("GET", "/", self._index)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ValidationError(f"cannot serve /metrics on {self.host}:{self._port}: {exc}",
                                  field="metrics_port") from exc
        self._runner, self._site = runner, site

    async def stop(self) -> None:
        runner, self._runner, self._site = self._runner, None, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        self.scrapes += 1
        try:
            body = generate_latest(self.registry)
        except Exception:  # a collector bug must not take the role down
            log.exception("metrics scrape failed")
            return await self._answer("500 Internal Server Error", b"collector failed\n")
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return await self._answer(*self._check(self.health))

    async def _readyz(self, _: web.Request) -> web.Response:
        return await self._answer(*self._check(self.readiness))

    async def _index(self, _: web.Request) -> web.Response:
        return await self._answer("200 OK", b"ok: /metrics, /healthz, /readyz\n")

    @staticmethod
    async def _answer(status: str, body: bytes) -> web.Response:
        code, _, reason = status.partition(" ")
        return web.Response(status=int(code), reason=reason, body=body, content_type="text/plain")

    @staticmethod
    def _check(check: HealthCheck | None) -> tuple[str, bytes]:
        if check is None:
            return "200 OK", b"ok\n"
        try:
            healthy, reason = check()
        except Exception as exc:  # a broken check is an unhealthy role, not a crashed server
            log.exception("health check failed")
            healthy, reason = False, f"health check failed: {exc}"
        status = "200 OK" if healthy else "503 Service Unavailable"
        return status, f"{'ok' if healthy else 'unhealthy'}: {reason}\n".encode()
