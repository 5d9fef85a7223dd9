"""``/metrics`` over HTTP on the role's own event loop.

``prometheus_client.start_http_server`` serves from a thread; our collectors read the role's
live counters, which only the event loop may touch consistently. So this tiny HTTP/1.1 server
(GET only, one request per connection, bounded header size and time) runs on the loop and
calls ``generate_latest`` there. A scrape of a router costs well under a millisecond.

``/healthz`` answers 200 while the role's ``health`` check (if it has one) says it makes
progress, 503 with the check's reason otherwise: the router's check is the age of its loop
heartbeat (``StatusRouter.health``), so a Kubernetes livenessProbe on it restarts a router whose
loop is wedged, which a TCP probe of the control port (accepted by gRPC's own threads) cannot
see (docs/kubernetes.md). Being served by the same event loop, the endpoint cannot answer at all
while the loop is blocked, which the probe's timeout also counts as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gridstat.errors import ValidationError

log = logging.getLogger(__name__)

#: Longest request head accepted, and how long a client may take to send it.
MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0

#: A role's health check: (healthy, one line saying why).
HealthCheck = Callable[[], tuple[bool, str]]


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics``; ``port`` 0 picks a free port."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0,
                 health: HealthCheck | None = None, readiness: HealthCheck | None = None) -> None:
        self.registry = registry
        self.host, self._port = host, port
        self._server: asyncio.Server | None = None
        self.scrapes = 0
        #: ``/healthz``'s check; None: always 200 while the server answers.
        self.health = health
        #: ``/readyz``'s check; None: always 200 while the server answers.
        self.readiness = readiness

    @property
    def port(self) -> int:
        if self._server is None:
            raise ValidationError("metrics server is not started", field="state")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        if self._server is not None:
            return
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self._port)
        except OSError as exc:
            raise ValidationError(f"cannot serve /metrics on {self.host}:{self._port}: {exc}",
                                  field="metrics_port") from exc

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            if len(head) > MAX_HEAD_BYTES:
                raise ValueError("head too large")
            parts = head.split(b"\r\n", 1)[0].split()
            method, path = (parts[0], parts[1].split(b"?", 1)[0]) if len(parts) >= 2 else (b"", b"")
            if method not in (b"GET", b"HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == b"/metrics":
                self.scrapes += 1
                try:
                    status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
                except Exception:  # a collector bug must not take the role down
                    log.exception("metrics scrape failed")
                    status, ctype, body = "500 Internal Server Error", "text/plain", b"collector failed\n"
            elif path == b"/healthz":
                status, ctype, body = self._check(self.health)
            elif path == b"/readyz":
                status, ctype, body = self._check(self.readiness)
            elif path == b"/":
                status, ctype, body = "200 OK", "text/plain", b"ok: /metrics, /healthz, /readyz\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            if method != b"HEAD":
                writer.write(body)
            await asyncio.wait_for(writer.drain(), HEAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    def _check(check: HealthCheck | None) -> tuple[str, str, bytes]:
        if check is None:
            return "200 OK", "text/plain", b"ok\n"
        try:
            healthy, reason = check()
        except Exception as exc:  # a broken check is an unhealthy role, not a crashed server
            log.exception("health check failed")
            healthy, reason = False, f"health check failed: {exc}"
        status = "200 OK" if healthy else "503 Service Unavailable"
        return status, "text/plain", f"{'ok' if healthy else 'unhealthy'}: {reason}\n".encode()
