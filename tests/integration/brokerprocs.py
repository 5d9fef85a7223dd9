"""Start real ``gridstat broker`` processes on 127.0.0.1 and build clouds of real routers behind them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from gridstat.core import children
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

from .routerprocs import RouterProc, start_router, stop_process


@dataclass
class BrokerProc:
    name: str
    proc: subprocess.Popen[str]
    port: int
    state: str
    channel: grpc.Channel
    stub: bpb_grpc.QoSBrokerStub

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.channel.close()


def start_broker(name: str, state: str, *, port: int = 0, extra: tuple[str, ...] = ()) -> BrokerProc:
    cmd = [sys.executable, "-m", "gridstat.broker.main", "--name", name, "--port", str(port), "--state", state,
           "--supervise-interval-ms", "200", "--exit-with-parent", *extra]
    try:
        proc, ready = children.spawn(cmd, what=f"broker {name}")
    except children.ChildFailed as exc:
        raise RuntimeError(str(exc)) from None
    bound = children.ready_port(ready)
    channel = grpc.insecure_channel(f"127.0.0.1:{bound}")
    return BrokerProc(name, proc, bound, state, channel, bpb_grpc.QoSBrokerStub(channel))


def add_router(broker: BrokerProc, r: RouterProc, role: str, capacity_eps: int = 50_000) -> None:
    broker.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
        name=r.name, role=role, capacity_eps=capacity_eps, control_address=f"127.0.0.1:{r.control_port}",
        event_address=f"127.0.0.1:{r.port}", router_id=r.router_id)), timeout=5)


def add_link(broker: BrokerProc, a: str, b: str, *, latency_ms: float = 1.0, bandwidth_bps: int = 100_000_000) -> None:
    broker.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
        a=a, b=b, bandwidth_bps=bandwidth_bps, latency_ms=latency_ms, both_directions=True)), timeout=5)


def wait_for(predicate: object, timeout_s: float = 10.0, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(step_s)
    return bool(predicate())  # type: ignore[operator]


__all__ = ["BrokerProc", "RouterProc", "add_link", "add_router", "start_broker", "start_router", "wait_for"]


def tls_args(certs: Path, role: str) -> tuple[str, ...]:
    """A server's mTLS options with the certificate of ``role`` (scripts/gen-certs.sh names: ROLE.pem,
    ROLE.key, ca.pem): TLS only, client certificates from that CA required."""
    return ("--tls-cert", str(certs / f"{role}.pem"), "--tls-key", str(certs / f"{role}.key"),
            "--tls-client-ca", str(certs / "ca.pem"))
