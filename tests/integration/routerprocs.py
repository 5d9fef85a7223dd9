"""Start real ``gridstat router`` processes on 127.0.0.1 and talk to their control API."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from gridstat.core import children
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc


def stop_process(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    """Signal a child role and reap it; SIGKILL if it has not exited within 10 s (core.children.stop)."""
    children.stop(proc, sig)


@dataclass
class RouterProc:
    name: str
    router_id: int
    proc: subprocess.Popen[str]
    port: int
    control_port: int
    channel: grpc.Channel
    stub: pb_grpc.RouterControlStub

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.channel.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start_router(name: str, router_id: int, *, port: int = 0, control_port: int = 0, variant: str = "close",
                 role: str = "internal", extra: tuple[str, ...] = (), timeout_s: float = 20.0) -> RouterProc:
    cmd = [sys.executable, "-m", "gridstat.cli.main", "router", "--name", name, "--id", str(router_id),
           "--port", str(port), "--control-port", str(control_port), "--variant", variant, "--role", role,
           "--ping-interval-ms", "50", "--failure-timeout-ms", "300", "--exit-with-parent", *extra]
    try:
        proc, ready = children.spawn(cmd, what=f"router {name}", timeout_s=timeout_s)
    except children.ChildFailed as exc:
        raise RuntimeError(str(exc)) from None
    port, control = children.ready_port(ready), children.ready_port(ready, "control_port")
    channel = grpc.insecure_channel(f"127.0.0.1:{control}")
    return RouterProc(name, router_id, proc, port, control, channel, pb_grpc.RouterControlStub(channel))


@contextlib.contextmanager
def routers(*specs: tuple[str, int, str]) -> Iterator[dict[str, RouterProc]]:
    started: dict[str, RouterProc] = {}
    try:
        for name, rid, variant in specs:
            started[name] = start_router(name, rid, variant=variant)
        yield started
    finally:
        for r in started.values():
            r.stop()


def link(a: RouterProc, b: RouterProc) -> None:
    """A bidirectional router-router event channel, named after the neighbour on each side."""
    a.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
        name=b.name, peer_id=b.router_id, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1", port=b.port)), timeout=5)
    b.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
        name=a.name, peer_id=a.router_id, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1", port=a.port)), timeout=5)


def route(r: RouterProc, route_id: str, variable_id: int, channel: str, sub_ms: int, pub_ms: int,
          priority: int = 1, mode: int = 0) -> None:
    r.stub.InstallRoutes(pb.InstallRoutesRequest(routes=[pb.Route(
        route_id=route_id, variable_id=variable_id, mode=mode, channel=channel, sub_interval_ms=sub_ms,
        priority=priority, pub_interval_ms=pub_ms)]), timeout=5)
