"""What the gateway benchmarks share (bench pmu, iec104, dnp3, goose): the rig's cloud -- a broker and
two edge routers e1 and e2 on 127.0.0.1, joined by one channel -- the gateway publishing into e1 and
its subscribers on e2."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

from gridstat.bench.pmu import Child
from gridstat.core import children
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc


@dataclass(frozen=True)
class EdgeCloud:
    """The rig's two edge routers: their control addresses and their processes (for their CPU)."""

    e1: str
    e2: str
    routers: dict[str, Child]


async def edge_cloud(tmp: str, started: list[Child]) -> EdgeCloud:
    """Start broker A and routers e1, e2 (appended to ``started``) and tell the broker about them."""
    py = sys.executable
    broker = Child([py, "-m", "gridstat.broker.main", "--name", "A", "--port", "0", "--state",
                    str(Path(tmp) / "A.sqlite"), "--exit-with-parent"], "broker A")
    started.append(broker)
    address = f"127.0.0.1:{children.ready_port(broker.ready)}"
    ports: dict[str, tuple[int, int]] = {}
    routers: dict[str, Child] = {}
    for rid, name in enumerate(("e1", "e2"), start=1):
        r = Child([py, "-m", "gridstat.cli.main", "router", "--name", name, "--id", str(rid), "--port", "0",
                   "--control-port", "0", "--role", "edge", "--broker", address, "--exit-with-parent"],
                  f"router {name}")
        started.append(r)
        routers[name] = r
        ports[name] = (children.ready_port(r.ready), children.ready_port(r.ready, "control_port"))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = bpb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
        for rid, name in enumerate(("e1", "e2"), start=1):
            await stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                name=name, role="edge", capacity_eps=10_000_000, control_address=f"127.0.0.1:{ports[name][1]}",
                event_address=f"127.0.0.1:{ports[name][0]}", router_id=rid)), timeout=10)
        await stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
            a="e1", b="e2", bandwidth_bps=10_000_000_000, latency_ms=1, both_directions=True)), timeout=10)
    return EdgeCloud(f"127.0.0.1:{ports['e1'][1]}", f"127.0.0.1:{ports['e2'][1]}", routers)
