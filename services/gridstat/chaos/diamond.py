"""The cloud every process scenario of the chaos suite runs in (docs/chaos.md): real routers, a leaf
broker and clients on 127.0.0.1.

The cloud is the diamond of the integration tests, with a leaf broker in front::

    pmu1 -> e1 - i1 - e2 -> subscriber
             \\        /
              i2 -----

and, for the healing scenarios, a slower spare interior ``i3`` (``cloud(spare=True)``).

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
from gridstat.v1 import router_pb2 as rpb

from .checks import Outcome
from .procs import Admission, Broker, Router, wait_for
from .traffic import Feed, SdkSubscriber, Sink

#: Run the scenarios with authenticated event channels (``gridstat chaos run --auth``): the broker
#: gets ``--channel-auth all``, the feed signs, the subscribers verify.
AUTH = False

ROUTERS = [("e1", 1, "edge"), ("i1", 2, "internal"), ("i2", 3, "internal"), ("e2", 4, "edge")]
LINKS = [("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1", "i2", 2.0), ("i2", "e2", 2.0)]
#: The spare interior the broker re-plans onto when i1 or i2 fails (docs/redundancy.md, "Healing").
SPARE = ("i3", 5, "internal")
SPARE_LINKS = [("e1", "i3", 3.0), ("i3", "e2", 3.0)]
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

    def start(self, *, broker_extra: tuple[str, ...] = (), event_ports: dict[str, int] | None = None,
              spare: bool = False) -> None:
        """Start the routers not started yet and the broker, and give it the topology; ``event_ports``
        names a router's event address other than its own port (a relay in front of it); ``spare``
        adds the spare interior i3."""
        routers, links = ([*ROUTERS, SPARE], [*LINKS, *SPARE_LINKS]) if spare else (ROUTERS, LINKS)
        for name, rid, role in routers:
            if name not in self.routers:
                self.routers[name] = Router(name, router_id=rid, role=role).start()
        if AUTH:
            broker_extra = (*broker_extra, "--channel-auth", "all")
        self.broker = Broker("A", state=str(self.workdir / "A.sqlite"), extra=broker_extra).start()
        for name, _, role in routers:
            r = self.routers[name]
            port = (event_ports or {}).get(name, r.port)
            self.event_ports[name] = port
            self.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                name=name, role=role, capacity_eps=50_000, control_address=f"127.0.0.1:{r.control_port}",
                event_address=f"127.0.0.1:{port}", router_id=r.router_id)), timeout=5)
        for a, b, lat in links:
            self.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
                a=a, b=b, bandwidth_bps=100_000_000, latency_ms=lat, both_directions=True)), timeout=5)

    @property
    def stub(self):  # type: ignore[no-untyped-def]
        assert self.broker is not None and self.broker.stub is not None
        return self.broker.stub

    def close(self) -> None:
        """Close the subscribers registered (their threads and sockets), then stop every child."""
        for sub in self.subscribers:
            with contextlib.suppress(Exception):
                sub.close()
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
        """Register ``target``'s socket as subscriber ``name`` at e2; the cloud closes it when it closes."""
        if target not in self.subscribers:
            self.subscribers.append(target)
        reply = self.stub.RegisterClient(bpb.RegisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router="e2", host="127.0.0.1", port=target.port,
            first_time=True), timeout=5)
        if reply.channel_key:
            target.set_key(reply.channel_key)

    def sink(self, name: str) -> Sink:
        """A raw subscriber socket registered as ``name`` (closed with the cloud)."""
        sink = Sink()
        self.register_subscriber(name, sink)
        return sink

    def sdk_subscriber(self, name: str, subscriber_id: int) -> SdkSubscriber:
        """The SDK's subscriber registered as ``name`` (closed with the cloud)."""
        sdk = SdkSubscriber(name, subscriber_id)
        self.register_subscriber(name, sdk)
        return sdk

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
        """Restart a dead router at its ports, announcing its start to the broker (``--broker``); seconds
        from its READY line until the broker rebuilt it: its channels back, exactly its desired routes (none
        when healing moved its paths elsewhere while it was dead) and the broker's mode (inf if never)."""
        r = self.routers[name]
        if "--broker" not in r.extra and self.broker is not None:
            r.extra = (*r.extra, "--broker", f"127.0.0.1:{self.broker.port}")
        r.start()
        t0 = time.monotonic()
        assert r.stub is not None
        stub = r.stub

        def rebuilt() -> bool:
            want = {m: n for (rn, m), n in self.desired_routes().items() if rn == name}
            listed = stub.ListRoutes(rpb.ListRoutesRequest(), timeout=2)
            have = Counter(route.mode for route in listed.routes)
            channels = stub.ListChannels(rpb.ListChannelsRequest(), timeout=2).channels
            mode = self.stub.ListModes(bpb.ListModesRequest(), timeout=2).current_mode
            return bool(channels) and dict(have) == want and listed.current_mode == mode

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


def check_flowing(out: Outcome, invariant: str, sent: list[int], got: set[int], window: tuple[int, int], *,
                  fault: str, also: bool = True) -> None:
    """The invariant that a stream flowed through a fault (``window``: its first and last ms on the wall
    clock; ``fault`` says what it was, e.g. "down") and lost none of the events ``sent``."""
    during = [ts for ts in got if window[0] <= ts <= window[1]]
    lost, expected = count_lost(sent, got)
    out.check(invariant, "events flow, 0 lost", f"{len(during)} events while {fault}, {lost} lost of {expected}",
              also and bool(during) and lost == 0 and expected > 0)


def fmt_s(s: float) -> str:
    return "never" if s == float("inf") else f"{s:.2f} s"
