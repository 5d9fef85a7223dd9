"""A small real utility for the operator's tests: one leaf broker, four routers, one publisher
feeding two variables, one subscriber socket. The broker keeps a fixed port and state file so a
test can stop it (the operator then sees an unavailable broker) and start it again."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gridstat.core import wire
from gridstat.v1 import broker_pb2 as bpb

from ..brokerprocs import BrokerProc, add_link, add_router, start_broker
from ..routerprocs import RouterProc, start_router
from ..udpsink import UdpSink

ROUTERS = [("e1", 1, "edge"), ("i1", 2, "internal"), ("i2", 3, "internal"), ("e2", 4, "edge")]
LINKS = [("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1", "i2", 2.0), ("i2", "e2", 2.0)]
FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)
VARIABLES = ("freq", "volt", "angle")


class Sink:
    """The subscriber's socket: (variable id, timestamp) of every event received, from a thread."""

    def __init__(self) -> None:
        self.events: list[tuple[int, int]] = []
        self.udp = UdpSink(lambda d, _: self.events.extend((e.variable_id, e.timestamp_ms) for e in d.events))

    @property
    def port(self) -> int:
        return self.udp.port

    def count(self, variable_id: int, since_ms: int = 0) -> int:
        return sum(1 for v, ts in list(self.events) if v == variable_id and ts >= since_ms)

    def close(self) -> None:
        self.udp.close()


class Feed:
    """Publishes every variable every 10 ms (aligned timestamps) until stopped."""

    def __init__(self, edge_port: int, sender: int, variables: list[int]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.args = (edge_port, sender, variables)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        port, sender, variables = self.args
        seq, last = 0, 0
        while not self._stop.is_set():
            now = time.time_ns() // 1_000_000
            ts = now - now % 10
            if ts > last:
                seq += 1
                evs = [wire.encode_event(wire.Event(ts, v, b"\0" * 8)) for v in variables]
                self.sock.sendto(wire.encode_datagram(sender, seq, evs), ("127.0.0.1", port))
                last = ts
            time.sleep(0.002)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@dataclass
class Grid:
    state: Path
    routers: dict[str, RouterProc]
    broker: BrokerProc
    sink: Sink
    feed: Feed | None = None
    variable_ids: dict[str, int] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.broker.address

    def broker_subscriptions(self, prefix: str = "k8s:") -> list[bpb.SubscribeReply]:
        reply = self.broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5)
        return [s for s in reply.subscriptions if s.subscription.subscription_id.startswith(prefix)]

    def stop_broker(self) -> None:
        self.broker.stop()

    def start_broker(self) -> None:
        self.broker = start_broker("A", str(self.state), port=self.broker.port)

    def stop(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        self.sink.close()
        self.broker.stop()
        for r in self.routers.values():
            r.stop()


def start_grid(workdir: Path) -> Grid:
    routers: dict[str, RouterProc] = {}
    sink = Sink()
    try:
        for name, rid, role in ROUTERS:
            routers[name] = start_router(name, rid, role=role)
        broker = start_broker("A", str(workdir / "A.sqlite"))
    except Exception:
        sink.close()
        for r in routers.values():
            r.stop()
        raise
    grid = Grid(workdir / "A.sqlite", routers, broker, sink)
    try:
        for name, _, role in ROUTERS:
            add_router(broker, routers[name], role)
        for a, b, lat in LINKS:
            add_link(broker, a, b, latency_ms=lat)
        pub = broker.stub.RegisterClient(bpb.RegisterClientRequest(
            name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="e1", first_time=True), timeout=5)
        broker.stub.RegisterClient(bpb.RegisterClientRequest(
            name="ems", kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router="e2", host="127.0.0.1", port=sink.port,
            first_time=True), timeout=5)
        for v in VARIABLES:
            reply = broker.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher="pmu1", variable=v, type=FLOAT, interval_ms=10, edge_router="e1")), timeout=5)
            grid.variable_ids[v] = reply.publication.variable_id
        grid.feed = Feed(routers["e1"].port, pub.client_id, list(grid.variable_ids.values()))
    except Exception:
        grid.stop()
        raise
    return grid
