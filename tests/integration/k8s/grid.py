"""A small real utility for the operator's tests: one leaf broker, four routers, one publisher
feeding two variables, one subscriber socket. The broker keeps a fixed port and state file so a
test can stop it (the operator then sees an unavailable broker) and start it again."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gridstat.chaos.diamond import LINKS, ROUTERS
from gridstat.v1 import broker_pb2 as bpb

from ..brokerprocs import BrokerProc, add_link, add_router, register_publisher, register_subscriber, start_broker
from ..fixtures import Feed, Sink
from ..routerprocs import RouterProc, start_router

VARIABLES = ("freq", "volt", "angle")


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
        pub_id, ids = register_publisher(broker, "pmu1", "e1", VARIABLES)
        register_subscriber(broker, "ems", "e2", sink.port)
        grid.variable_ids.update(zip(VARIABLES, ids, strict=True))
        grid.feed = Feed(routers["e1"].port, pub_id, ids)
    except Exception:
        grid.stop()
        raise
    return grid
