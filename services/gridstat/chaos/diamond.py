"""The cloud every process scenario of the chaos suite runs in (docs/chaos.md): real routers, a leaf
broker and clients on 127.0.0.1.

The cloud is the diamond of the integration tests, with a leaf broker in front::

    pmu1 -> e1 - i1 - e2 -> subscriber
             \\        /
              i2 -----

Every scenario is bounded: ``seconds`` scales the fault (how long a router stays dead or stopped,
how long traffic runs impaired), every wait has a deadline, every child is reaped.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gridstat.v1 import broker_pb2 as bpb

from .checks import Outcome
from .procs import Admission, Broker, Router, wait_for
from .traffic import Feed, SdkSubscriber, Sink

#: Run the scenarios with authenticated event channels (``gridstat chaos run --auth``): the broker
#: gets ``--channel-auth all``, the feed signs, the subscribers verify.
AUTH = False

ROUTERS = [("e1", 1, "edge"), ("i1", 2, "internal"), ("i2", 3, "internal"), ("e2", 4, "edge")]
LINKS = [("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1", "i2", 2.0), ("i2", "e2", 2.0)]
FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)
PUB_INTERVAL_MS = 10
#: A restarted router must be rebuilt (channels and routes back) within this (docs/chaos.md).
REBUILD_BOUND_S = 2.0


@dataclass
class Cloud:
    """Four routers and a leaf broker (and optionally an admission controller), all child processes."""

    workdir: Path
    routers: dict[str, Router] = field(default_factory=dict)
    broker: Broker | None = None
    admission: Admission | None = None
    event_ports: dict[str, int] = field(default_factory=dict)
    publisher_id: int = 0
    variable_id: int = 0
    publisher_key: bytes = b""
    subscribers: list[Sink | SdkSubscriber] = field(default_factory=list)

    def start(self, *, broker_extra: tuple[str, ...] = (), event_ports: dict[str, int] | None = None) -> None:
        for name, rid, role in ROUTERS:
            self.routers[name] = Router(name, router_id=rid, role=role).start()
        if AUTH:
            broker_extra = (*broker_extra, "--channel-auth", "all")
        self.broker = Broker("A", state=str(self.workdir / "A.sqlite"), extra=broker_extra).start()
        for name, _, role in ROUTERS:
            r = self.routers[name]
            port = (event_ports or {}).get(name, r.port)
            self.event_ports[name] = port
            self.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                name=name, role=role, capacity_eps=50_000, control_address=f"127.0.0.1:{r.control_port}",
                event_address=f"127.0.0.1:{port}", router_id=r.router_id)), timeout=5)
        for a, b, lat in LINKS:
            self.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
                a=a, b=b, bandwidth_bps=100_000_000, latency_ms=lat, both_directions=True)), timeout=5)

    @property
    def stub(self):  # type: ignore[no-untyped-def]
        assert self.broker is not None and self.broker.stub is not None
        return self.broker.stub

    def close(self) -> None:
        for child in [self.broker, self.admission, *self.routers.values()]:
            if child is not None:
                with contextlib.suppress(Exception):
                    child.stop()

    # -- clients -------------------------------------------------------------------------------
    def register_publisher(self) -> None:
        pub = self.stub.RegisterClient(bpb.RegisterClientRequest(
            name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="e1", first_time=True), timeout=5)
        reply = self.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
            publisher="pmu1", variable="freq", type=FLOAT, interval_ms=PUB_INTERVAL_MS, edge_router="e1")), timeout=5)
        self.publisher_id, self.variable_id = pub.client_id, reply.publication.variable_id
        self.publisher_key = pub.channel_key

    def register_subscriber(self, name: str, target: Sink | SdkSubscriber) -> None:
        reply = self.stub.RegisterClient(bpb.RegisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router="e2", host="127.0.0.1", port=target.port,
            first_time=True), timeout=5)
        if reply.channel_key:
            target.set_key(reply.channel_key)
        if target not in self.subscribers:
            self.subscribers.append(target)

    def subscribe(self, name: str, *, redundancy: int = 1, interval_ms: int = 10, latency_ms: int = 50,
                  modes: tuple[int, ...] = (0,)) -> bpb.SubscribeReply:
        reply: bpb.SubscribeReply = self.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber=name, variable="pmu1/freq", type=FLOAT, edge_router="e2",
            qos=[bpb.ModeQoS(mode=m, interval_ms=interval_ms * (1 + m), latency_ms=latency_ms, redundancy=redundancy)
                 for m in modes])), timeout=10)
        return reply

    def feed(self) -> Feed:
        return Feed(self.routers["e1"].port, self.publisher_id, self.variable_id, PUB_INTERVAL_MS,
                    key=self.publisher_key)

    # -- invariants ----------------------------------------------------------------------------
    def desired_routes(self) -> Counter[tuple[str, int]]:
        """Routes the broker holds, per (router, mode): one per router of each admitted path."""
        want: Counter[tuple[str, int]] = Counter()
        for s in self.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions:
            if s.admitted:
                for alloc in s.allocations:
                    for path in alloc.paths:
                        for r in path.routers:
                            want[(r, alloc.mode)] += 1
        return want

    def installed_routes(self) -> Counter[tuple[str, int]]:
        have: Counter[tuple[str, int]] = Counter()
        for name, r in self.routers.items():
            if r.running:
                for route in r.routes():
                    have[(name, route.mode)] += 1
        return have

    def half_installed(self) -> str:
        """'' when every running router holds exactly the routes the broker wants, else the diff."""
        try:
            want, have = self.desired_routes(), self.installed_routes()
        except grpc.RpcError as exc:
            return f"unreadable: {exc.code().name}"
        live = {n for n, r in self.routers.items() if r.running}
        want = Counter({k: v for k, v in want.items() if k[0] in live})
        if want == have:
            return ""
        keys = sorted(set(want) | set(have))
        return ", ".join(f"{r}/mode{m}: want {want[(r, m)]} have {have[(r, m)]}"
                         for r, m in keys if want[(r, m)] != have[(r, m)])

    def check_nothing_half_installed(self, out: Outcome, timeout_s: float = 5.0) -> None:
        diff = ""

        def settled() -> bool:
            nonlocal diff
            diff = self.half_installed()
            return diff == ""

        wait_for(settled, timeout_s=timeout_s, step_s=0.1)
        want = sum(self.desired_routes().values())
        out.check("nothing half-installed", "routers' routes == broker's desired",
                  diff or f"{want} routes match", not diff)
        if AUTH:
            self.check_authenticated(out)

    def check_authenticated(self, out: Outcome) -> None:
        """With --auth: every channel keyed, every delivered datagram verified, no legitimate one refused."""
        from gridstat.v1 import router_pb2 as rpb

        plain = [f"{n}/{ch.name}" for n, r in self.routers.items() if r.running and r.stub is not None
                 for ch in r.stub.ListChannels(rpb.ListChannelsRequest(), timeout=2).channels
                 if not ch.authenticated]
        drops: Counter[str] = Counter()
        for r in self.routers.values():
            if r.running and r.stub is not None:
                drops.update(dict(r.stub.GetStats(rpb.GetStatsRequest(), timeout=2).drops))
        sinks = [s for s in self.subscribers if isinstance(s, Sink)]
        verified = sum(s.verified for s in sinks)
        unverified = sum(s.unverified for s in sinks)
        sdk_failed = sum(s.sub.stats.drops["auth_failed"] for s in self.subscribers if isinstance(s, SdkSubscriber))
        out.check("every event channel authenticated", "0 unkeyed channels",
                  f"{len(plain)} unkeyed{': ' + ', '.join(plain) if plain else ''}", not plain)
        out.check("no legitimate datagram refused", "auth_failed 0 (routers, subscribers)",
                  f"routers {drops['auth_failed']}, subscribers {unverified + sdk_failed}; {verified} verified",
                  drops["auth_failed"] == 0 and unverified + sdk_failed == 0)
        if drops["replayed"]:
            out.notes.append(f"{drops['replayed']} datagrams counted replayed (a restarted sender before its "
                             "neighbours were re-keyed)")

    def restart_router(self, name: str) -> float:
        """Restart a dead router at its ports; seconds until it holds all its desired routes (inf if never)."""
        r = self.routers[name].start()
        t0 = time.monotonic()

        def rebuilt() -> bool:
            want = {m: n for (rn, m), n in self.desired_routes().items() if rn == name}
            have = Counter(route.mode for route in r.routes())
            return bool(want) and dict(have) == want

        ok = wait_for(rebuilt, timeout_s=10, step_s=0.02)
        return time.monotonic() - t0 if ok else float("inf")


@contextlib.contextmanager
def cloud(**start: object) -> Iterator[Cloud]:
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        c = Cloud(Path(tmp))
        try:
            c.start(**start)  # type: ignore[arg-type]
            yield c
        finally:
            c.close()


def count_lost(sent: list[int], got: set[int], since: int | None = None) -> tuple[int, int]:
    """(lost, expected) over the published timestamps from the first received one on."""
    if not got:
        return len(sent), len(sent)
    first = min(got) if since is None else max(since, min(got))
    expected = [ts for ts in sent if ts >= first]
    # The last few may still be in flight when the feed stops: judge up to the newest received.
    expected = [ts for ts in expected if ts <= max(got)]
    return sum(1 for ts in expected if ts not in got), len(expected)


def fmt_s(s: float) -> str:
    return "never" if s == float("inf") else f"{s:.2f} s"
