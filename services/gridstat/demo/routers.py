"""Router child processes of the embedded runner and their gRPC control connections.

Each status router is its own process, ``python -m gridstat.cli.main router ...`` with
ephemeral ports; we read its ``READY name=.. port=.. control_port=..`` line, then talk
to it over ``RouterControl``. Its stderr goes to ``<log dir>/<name>.log``.
``stop`` sends SIGTERM (the router stops cleanly on it), waits, then SIGKILLs what
is left, and always reaps: no orphans, no zombies.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc

from gridstat.demo.planner import PlannedChannel, PlannedRoute
from gridstat.errors import GridStatError
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

READY_RE = re.compile(r"^READY name=(\S+) port=(\d+) control_port=(\d+)\s*$")
READY_TIMEOUT_S = 30.0
RPC_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0

_KINDS = {"router": pb.CHANNEL_KIND_ROUTER, "subscriber": pb.CHANNEL_KIND_SUBSCRIBER,
          "publisher": pb.CHANNEL_KIND_PUBLISHER}


class StartupError(GridStatError):
    """A router process did not come up, or refused its channels or routes."""

    reason = "Unavailable"


@dataclass
class RouterProcess:
    name: str
    router_id: int
    role: str
    cloud: str
    variant: str
    log_path: Path
    proc: asyncio.subprocess.Process | None = None
    port: int = 0
    control_port: int = 0
    channel: grpc.aio.Channel | None = None
    stub: pb_grpc.RouterControlStub | None = None
    last_stats: pb.RouterStats | None = None
    error: str = ""
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "gridstat.cli.main", "router", "--name", self.name,
                "--id", str(self.router_id), "--port", "0", "--control-port", "0",
                "--role", self.role, "--variant", self.variant, "--exit-with-parent"]

    async def start(self) -> None:
        self._log = self.log_path.open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            *self.command(), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=self._log)
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), READY_TIMEOUT_S)
        except TimeoutError:
            raise StartupError(f"router {self.name} did not print READY within {READY_TIMEOUT_S:.0f} s "
                               f"(log: {self.log_path})") from None
        m = READY_RE.match(line.decode(errors="replace"))
        if m is None:
            raise StartupError(f"router {self.name} exited or printed {line!r} instead of READY "
                               f"(log: {self.log_path})")
        self.port, self.control_port = int(m.group(2)), int(m.group(3))
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.control_port}")
        self.stub = pb_grpc.RouterControlStub(self.channel)  # type: ignore[no-untyped-call]

    async def _call(self, what: str, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise StartupError(f"router {self.name}: {what} failed: {exc.code().name}: {exc.details()}"
                               ) from None

    async def add_channels(self, channels: Sequence[PlannedChannel],
                           addresses: dict[tuple[str, str], tuple[str, int]]) -> None:
        """Add channels; ``addresses`` maps (kind, peer) to where the channel sends."""
        assert self.stub is not None
        for c in channels:
            host, port = addresses.get((c.kind, c.peer), ("", 0))
            msg = pb.Channel(name=c.name, peer_id=c.peer_id, kind=_KINDS[c.kind], host=host, port=port,
                             level=c.level)
            await self._call(f"AddChannel {c.name}", self.stub.AddChannel, pb.AddChannelRequest(channel=msg))

    async def install_routes(self, routes: Sequence[PlannedRoute]) -> int:
        assert self.stub is not None
        if not routes:
            return 0
        msgs = [pb.Route(route_id=r.route_id, variable_id=r.variable_id, mode=r.mode, channel=r.channel,
                         sub_interval_ms=r.sub_interval_ms, priority=r.priority,
                         pub_interval_ms=r.pub_interval_ms, version=1) for r in routes]
        reply = await self._call("InstallRoutes", self.stub.InstallRoutes, pb.InstallRoutesRequest(routes=msgs))
        return int(reply.installed)

    async def poll_stats(self) -> pb.RouterStats | None:
        """GetStats; on failure keeps the last answer and records the error."""
        if self.stub is None or not self.running:
            self.error = "not running"
            return self.last_stats
        try:
            self.last_stats = await self.stub.GetStats(pb.GetStatsRequest(), timeout=1.0)
            self.error = ""
        except grpc.aio.AioRpcError as exc:
            self.error = exc.code().name
        return self.last_stats

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, grace: float = 0.0) -> int | None:
        """Reap the process: wait ``grace`` seconds for it to exit by itself, then SIGTERM, then
        SIGKILL after STOP_TIMEOUT_S. Returns the exit code."""
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await self.channel.close(grace=None)
            self.channel = None
            self.stub = None
        proc = self.proc
        if proc is not None:
            if proc.returncode is None and grace > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), grace)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
            else:
                await proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return proc.returncode if proc is not None else None
