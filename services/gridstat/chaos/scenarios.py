"""The chaos scenarios: a real cloud on 127.0.0.1, one fault each, invariants checked.

The cloud is the diamond of the integration tests, with a leaf broker in front::

    pmu1 -> e1 - i1 - e2 -> subscriber
             \\        /
              i2 -----

parent-partition builds its own hierarchy instead (``Hierarchy``: a parent broker over clouds A and B).

Every scenario is bounded: ``seconds`` scales the fault (how long a router stays dead or
stopped, how long traffic runs impaired), every wait has a deadline, every child is reaped.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import condensation_pb2 as cpb

from .checks import Outcome, check_reported, first_violation
from .procs import Admission, Broker, CondenseHost, Router, wait_for
from .traffic import Feed, ImpairedLink, SdkSubscriber, Sink

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


def _lost(sent: list[int], got: set[int], since: int | None = None) -> tuple[int, int]:
    """(lost, expected) over the published timestamps from the first received one on."""
    if not got:
        return len(sent), len(sent)
    first = min(got) if since is None else max(since, min(got))
    expected = [ts for ts in sent if ts >= first]
    # The last few may still be in flight when the feed stops: judge up to the newest received.
    expected = [ts for ts in expected if ts <= max(got)]
    return sum(1 for ts in expected if ts not in got), len(expected)


def _fmt_s(s: float) -> str:
    return "never" if s == float("inf") else f"{s:.2f} s"


# -- scenarios ------------------------------------------------------------------------------------

def path_loss(seconds: float) -> Outcome:
    """Redundancy 2; kill -9 a router on one path, restart it: 0 events lost, rebuilt within 2 s."""
    out = Outcome("path-loss")
    with cloud() as c:
        sink = Sink()
        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            reply = c.subscribe("ems", redundancy=2)
            paths = sorted(tuple(p.routers) for p in reply.allocations[0].paths) if reply.admitted else []
            out.check("redundancy-2 admitted on disjoint paths", "2 node-disjoint paths",
                      " | ".join("-".join(p) for p in paths) or reply.rejection.reason, len(paths) == 2)
            if len(paths) != 2:
                return out
            feed = c.feed()
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                c.routers["i1"].kill()
                time.sleep(max(0.5, seconds))
                rebuild = c.restart_router("i1")
                time.sleep(0.5)
            finally:
                sent = feed.stop()
            time.sleep(0.2)
            lost, expected = _lost(sent, sink.timestamps(c.variable_id))
            out.check("redundancy-2 loses no event when one path fails", "0 lost",
                      f"{lost} lost of {expected}", lost == 0 and expected > 0)
            out.check("restarted router rebuilt", f"<= {REBUILD_BOUND_S:.0f} s", _fmt_s(rebuild),
                      rebuild <= REBUILD_BOUND_S)
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
    return out


def router_kill(seconds: float) -> Outcome:
    """Redundancy 1; kill -9 the path's interior router, restart it: rebuilt within 2 s, the stream resumes."""
    out = Outcome("router-kill")
    with cloud() as c:
        sink = Sink()
        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            reply = c.subscribe("ems")
            path = list(reply.allocations[0].paths[0].routers) if reply.admitted else []
            victim = path[1] if len(path) > 2 else "i1"
            feed = c.feed()
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                c.routers[victim].kill()
                killed_ms = int(time.time() * 1000)
                time.sleep(max(0.5, seconds))
                restart_ms = int(time.time() * 1000)
                rebuild = c.restart_router(victim)
                time.sleep(0.5)
            finally:
                sent = feed.stop()
            time.sleep(0.2)
            got = sink.timestamps(c.variable_id)
            out.check(f"restarted router {victim} rebuilt", f"<= {REBUILD_BOUND_S:.0f} s", _fmt_s(rebuild),
                      rebuild <= REBUILD_BOUND_S)
            after = sorted(ts for ts in got if ts > restart_ms)
            restored_s = (after[0] - restart_ms) / 1000 if after else float("inf")
            out.check("delivery restored after the restart", f"<= {REBUILD_BOUND_S:.0f} s", _fmt_s(restored_s),
                      restored_s <= REBUILD_BOUND_S)
            lost, expected = _lost(sent, got, since=after[0] if after else None)
            out.check("no loss once restored", "0 lost", f"{lost} lost of {expected}", lost == 0 and bool(after))
            rebuilt_ms = after[0] if after else restart_ms
            outage = [ts for ts in sent if killed_ms <= ts <= rebuilt_ms and ts not in got]
            out.notes.append(f"redundancy 1: {len(outage)} events lost while {victim} was dead (expected; "
                             f"redundancy 2 covers this, see path-loss)")
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
    return out


def router_stop(seconds: float) -> Outcome:
    """SIGSTOP the path's router: the SDK subscriber is told of the broken guarantee within one
    interval of the missed deadline; SIGCONT: the stream resumes."""
    out = Outcome("router-stop")
    interval_ms, latency_ms = 100, 50
    with cloud() as c:
        sdk = SdkSubscriber("ems", 900)
        try:
            c.register_publisher()
            c.register_subscriber("ems", sdk)
            reply = c.subscribe("ems", interval_ms=interval_ms, latency_ms=latency_ms)
            path = list(reply.allocations[0].paths[0].routers) if reply.admitted else []
            victim = path[1] if len(path) > 2 else "i1"
            sdk.subscribe("pmu1", "freq", c.variable_id, pub_interval_ms=PUB_INTERVAL_MS, interval_ms=interval_ms,
                          latency_ms=latency_ms)
            feed = c.feed()
            try:
                wait_for(lambda: len(sdk.events) > 5, timeout_s=5)
                before = len(sdk.violations)
                stopped_ms = int(time.time() * 1000)
                c.routers[victim].pause()
                time.sleep(max(1.0, seconds))
                c.routers[victim].resume()
                resumed_ms = int(time.time() * 1000)
                wait_for(lambda: sum(1 for ts in sdk.events if ts > resumed_ms) >= 5, timeout_s=5)
            finally:
                feed.stop()
            # The first expected event the stop kept back, and its deadline.
            late, first, lag = first_violation(sdk.violations, before, latency_ms)
            check_reported(out, late, lag, interval_ms, "broken guarantee reported to the subscriber")
            if first is not None:
                out.notes.append(f"first violation {first.kind} for ts {first.expected_ts_ms}, "
                                 f"{first.detected_ms - stopped_ms} ms after SIGSTOP")
            resumed = [ts for ts in sdk.events if ts > resumed_ms]
            out.check("stream resumes after SIGCONT", "> 0 events", f"{len(resumed)} events", bool(resumed))
            c.check_nothing_half_installed(out)
        finally:
            sdk.close()
    return out


def broker_kill(seconds: float) -> Outcome:
    """kill -9 the leaf broker: the data plane never stops; restarted on its state, it recovers everything."""
    out = Outcome("broker-kill")
    with cloud() as c:
        sink = Sink()
        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            reply = c.subscribe("ems", redundancy=2)
            before = [(s.subscription.subscription_id, sorted(tuple(p.routers) for a in s.allocations for p in a.paths))
                      for s in c.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions]
            feed = c.feed()
            assert c.broker is not None
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                c.broker.kill()
                down_ms = int(time.time() * 1000)
                time.sleep(max(0.5, seconds))
                up_ms = int(time.time() * 1000)
                c.broker.start()
                time.sleep(0.5)
            finally:
                sent = feed.stop()
            time.sleep(0.2)
            got = sink.timestamps(c.variable_id)
            during = [ts for ts in got if down_ms <= ts <= up_ms]
            lost, expected = _lost(sent, got)
            out.check("data plane never stops while the broker is down", "events flow, 0 lost",
                      f"{len(during)} events while down, {lost} lost of {expected}", bool(during) and lost == 0)
            after = [(s.subscription.subscription_id, sorted(tuple(p.routers) for a in s.allocations for p in a.paths))
                     for s in c.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions]
            out.check("broker recovers its subscriptions", "same ids and paths",
                      f"{len(after)} subscriptions, {'same' if after == before else 'DIFFERENT'}",
                      after == before and reply.admitted)
            health = c.stub.Health(bpb.BrokerHealthRequest(), timeout=5)
            out.check("broker recovers its topology", "4 routers up", f"{health.routers_up} up, "
                      f"{health.routers_down} down", health.routers_up == 4)
            c.register_subscriber("ems2", sink)
            again = c.subscribe("ems2", interval_ms=20)
            out.check("recovered broker admits", "new subscription admitted",
                      "admitted" if again.admitted else again.rejection.reason, again.admitted)
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
    return out


def mode_switch_router_down(seconds: float) -> Outcome:
    """ChangeMode while a path router is dead (kill -9): the change completes or rolls back, never
    half; the restarted router is rebuilt into the broker's current mode."""
    out = Outcome("mode-switch-router-down")
    with cloud() as c:
        sink = Sink()
        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            c.stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=5)
            reply = c.subscribe("ems", modes=(0, 1))
            out.check("subscription admitted in modes 0 and 1", "admitted", "admitted" if reply.admitted
                      else reply.rejection.reason, reply.admitted)
            feed = c.feed()
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 10, timeout_s=5)
                c.routers["i1"].kill()
                t0 = time.monotonic()
                try:
                    change = c.stub.ChangeMode(bpb.ChangeModeRequest(name="contingency"), timeout=15)
                    result = f"completed ({change.duration_ms:.0f} ms)"
                except grpc.RpcError as exc:
                    result = f"refused: {exc.code().name}"
                took = time.monotonic() - t0
                modes = c.stub.ListModes(bpb.ListModesRequest(), timeout=5)
                target = 1 if result.startswith("completed") else 0
                out.check("mode change completes or rolls back", "current == 1 if completed else 0, not changing",
                          f"{result} in {took:.2f} s; current {modes.current_mode}, changing {modes.changing}",
                          modes.current_mode == target and not modes.changing)
                time.sleep(max(0.3, seconds / 2))
                rebuild = c.restart_router("i1")
                out.check("dead router rebuilt into the current mode", f"<= {REBUILD_BOUND_S:.0f} s, mode "
                          f"{modes.current_mode}", f"{_fmt_s(rebuild)}, mode {c.routers['i1'].current_mode()}",
                          rebuild <= REBUILD_BOUND_S and c.routers["i1"].current_mode() == modes.current_mode)
                modes_seen = {n: r.current_mode() for n, r in c.routers.items()}
                out.check("every router in the broker's mode", f"all {modes.current_mode}",
                          " ".join(f"{n}={m}" for n, m in modes_seen.items()),
                          set(modes_seen.values()) == {modes.current_mode})
                resumed_ms = int(time.time() * 1000)
                wait_for(lambda: sum(1 for ts in sink.timestamps(c.variable_id) if ts > resumed_ms) >= 10,
                         timeout_s=3)
            finally:
                feed.stop()
            out.check("stream flows after the change", "> 0 events",
                      f"{sum(1 for ts in sink.timestamps(c.variable_id) if ts > resumed_ms)} events",
                      any(ts > resumed_ms for ts in sink.timestamps(c.variable_id)))
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
    return out


def admission_kill(seconds: float) -> Outcome:
    """kill -9 the admission controller: the broker decides with its own reservation and says so;
    restarted at its port, the controller decides again."""
    out = Outcome("admission-kill")
    deadline_ms = 500
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        adm = Admission("admission").start()
        c = Cloud(Path(tmp), admission=adm)
        sink = Sink()
        try:
            c.start(broker_extra=("--admission", adm.address, "--admission-deadline-ms", str(deadline_ms)))
            c.register_publisher()
            for name in ("ems1", "ems2", "ems3", "ems4"):
                c.register_subscriber(name, sink)
            first = c.subscribe("ems1", interval_ms=10)
            out.check("controller decides while up", "decided_by controller",
                      f"{first.admission.decided_by or '-'}",
                      first.admitted and first.admission.decided_by == "controller")
            adm.pause()
            t0 = time.monotonic()
            second = c.subscribe("ems2", interval_ms=20)
            took = time.monotonic() - t0
            adm.resume()
            out.check("controller stopped (SIGSTOP): broker falls back within the deadline, says so",
                      f"admitted, fallback, note, <= {deadline_ms + 1000} ms",
                      f"admitted={second.admitted} fallback={second.admission.fallback} ({took * 1000:.0f} ms)",
                      second.admitted and second.admission.fallback and bool(second.admission.note)
                      and took * 1000 <= deadline_ms + 1000)
            adm.kill()
            t0 = time.monotonic()
            third = c.subscribe("ems3", interval_ms=30)
            took = time.monotonic() - t0
            out.check("controller dead (kill -9): broker falls back and says so", "admitted, fallback, note",
                      f"admitted={third.admitted} fallback={third.admission.fallback} ({took * 1000:.0f} ms)",
                      third.admitted and third.admission.fallback and bool(third.admission.note))
            time.sleep(max(0.2, seconds / 4))
            adm.start()
            restarted = time.monotonic()
            fourth = None
            for _ in range(40):  # bounded: gRPC's reconnect back-off decides when the broker sees it again
                fourth = c.subscribe("ems4", interval_ms=40)
                if not fourth.admitted or fourth.admission.decided_by == "controller":
                    break
                c.stub.Unsubscribe(bpb.UnsubscribeRequest(subscription_id=fourth.subscription.subscription_id),
                                   timeout=5)
                if time.monotonic() - restarted > 10:
                    break
                time.sleep(0.25)
            took = time.monotonic() - restarted
            ok = fourth is not None and fourth.admitted and fourth.admission.decided_by == "controller"
            out.check("restarted controller decides again", "decided_by controller within 10 s",
                      f"{'controller' if ok else 'broker'} after {took:.1f} s", ok)
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
            c.close()
    return out


def degraded_channel(seconds: float) -> Outcome:
    """One path's event channel degraded (20 % loss, 5+-4 ms delay so reordering, 5 % duplication) by a
    user-space relay: a redundancy-2 subscriber loses nothing and its application sees each instant once,
    in order."""
    out = Outcome("degraded-channel")
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        c = Cloud(Path(tmp))
        sdk = SdkSubscriber("ems", 901)
        relay: ImpairedLink | None = None
        try:
            # Start i1 first to know its event port, put the relay in front of it, and tell the broker
            # that i1's event address is the relay: e1 -> i1 traffic crosses the impaired channel.
            for name, rid, role in ROUTERS:
                c.routers[name] = Router(name, router_id=rid, role=role).start()
            relay = ImpairedLink(c.routers["i1"].port, loss=0.2, delay_ms=5, jitter_ms=4, duplicate=0.05)
            routers, c.routers = c.routers, {}
            _start_broker_over(c, routers, {"i1": relay.port})
            c.register_publisher()
            c.register_subscriber("ems", sdk)
            reply = c.subscribe("ems", redundancy=2)
            out.check("redundancy-2 admitted", "2 paths", f"{len(reply.allocations[0].paths) if reply.admitted else 0}",
                      reply.admitted and len(reply.allocations[0].paths) == 2)
            sdk.subscribe("pmu1", "freq", c.variable_id, pub_interval_ms=PUB_INTERVAL_MS, interval_ms=10,
                          latency_ms=200)
            feed = c.feed()
            try:
                wait_for(lambda: len(sdk.events) > 10, timeout_s=5)
                time.sleep(max(1.0, seconds))
            finally:
                sent = feed.stop()
            time.sleep(0.3)
            got = list(sdk.events)
            lost, expected = _lost(sent, set(got))
            out.check("no event lost with one path degraded", "0 lost", f"{lost} lost of {expected}",
                      lost == 0 and expected > 0)
            out.check("application sees each instant once, in order", "no duplicate, increasing",
                      f"{len(got) - len(set(got))} duplicates, {'ordered' if got == sorted(got) else 'REORDERED'}",
                      len(got) == len(set(got)) and got == sorted(got))
            out.notes.append("impaired relay: " + ", ".join(f"{k} {v}" for k, v in relay.counts.items()))
            c.check_nothing_half_installed(out)
        finally:
            sdk.close()
            if relay is not None:
                relay.close()
            c.close()
    return out


def _start_broker_over(c: Cloud, routers: dict[str, Router], event_ports: dict[str, int]) -> None:
    """Cloud.start with routers already running (so a relay can sit in front of one)."""
    c.routers = routers
    extra = ("--channel-auth", "all") if AUTH else ()
    c.broker = Broker("A", state=str(c.workdir / "A.sqlite"), extra=extra).start()
    for name, _, role in ROUTERS:
        r = c.routers[name]
        port = event_ports.get(name, r.port)
        c.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
            name=name, role=role, capacity_eps=50_000, control_address=f"127.0.0.1:{r.control_port}",
            event_address=f"127.0.0.1:{port}", router_id=r.router_id)), timeout=5)
    for a, b, lat in LINKS:
        c.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
            a=a, b=b, bandwidth_bps=100_000_000, latency_ms=lat, both_directions=True)), timeout=5)


# -- a cloud partitioned from its parent broker ----------------------------------------------------

#: Two leaf clouds under a parent broker P; the inter-cloud channel bA-bB is registered at P::
#:
#:     pmu1 -> eA - bA ====== bB - eB -> inter-cloud subscriber (cloud B)
#:              \
#:               fA -> in-cloud subscriber (cloud A)
HIER_ROUTERS = {"A": [("eA", 11, "edge"), ("fA", 13, "edge"), ("bA", 12, "border")],
                "B": [("eB", 21, "edge"), ("bB", 22, "border")]}
HIER_LINKS = {"A": [("eA", "bA"), ("eA", "fA")], "B": [("eB", "bB")]}
#: The client's deadline on a Subscribe that needs the (partitioned) parent.
PARTITION_CALL_DEADLINE_S = 3.0
RETRIABLE = {"DEADLINE_EXCEEDED", "UNAVAILABLE", "Unavailable", "DeadlineExceeded"}


@dataclass
class Hierarchy:
    """A parent broker P over leaf brokers A and B, each with its routers; all child processes."""

    workdir: Path
    parent: Broker | None = None
    leaves: dict[str, Broker] = field(default_factory=dict)
    routers: dict[str, Router] = field(default_factory=dict)

    def start(self) -> None:
        self.parent = Broker("P", state=str(self.workdir / "P.sqlite"), extra=("--role", "parent")).start()
        for k, (cloud, rs) in enumerate(HIER_ROUTERS.items(), start=1):
            leaf = self.leaves[cloud] = Broker(cloud, state=str(self.workdir / f"{cloud}.sqlite"), extra=(
                "--variable-id-base", str(1_000_000 * k), "--parent", self.parent.address)).start()
            for name, rid, role in rs:
                r = self.routers[name] = Router(name, router_id=rid, role=role).start()
                leaf.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(  # type: ignore[union-attr]
                    name=name, role=role, capacity_eps=50_000, control_address=f"127.0.0.1:{r.control_port}",
                    event_address=f"127.0.0.1:{r.port}", router_id=rid)), timeout=5)
            for a, b in HIER_LINKS[cloud]:
                leaf.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(  # type: ignore[union-attr]
                    a=a, b=b, bandwidth_bps=100_000_000, latency_ms=1.0, both_directions=True)), timeout=5)
            self.pstub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
                name=cloud, address=leaf.address)), timeout=10)
        self.pstub.AddInterCloudChannel(bpb.AddInterCloudChannelRequest(channel=bpb.InterCloudChannel(
            cloud_a="A", router_a="bA", cloud_b="B", router_b="bB", bandwidth_bps=100_000_000,
            latency_ms=2.0)), timeout=20)

    @property
    def pstub(self):  # type: ignore[no-untyped-def]
        assert self.parent is not None and self.parent.stub is not None
        return self.parent.stub

    def leaf(self, cloud: str):  # type: ignore[no-untyped-def]
        stub = self.leaves[cloud].stub
        assert stub is not None
        return stub

    def close(self) -> None:
        for child in [*self.leaves.values(), self.parent, *self.routers.values()]:
            if child is not None:
                with contextlib.suppress(Exception):
                    child.stop()

    def register_subscriber(self, cloud: str, name: str, edge: str, sink: Sink) -> None:
        reply = self.leaf(cloud).RegisterClient(bpb.RegisterClientRequest(
            name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=edge, host="127.0.0.1", port=sink.port,
            first_time=True), timeout=5)
        if reply.channel_key:
            sink.set_key(reply.channel_key)

    def subscribe(self, cloud: str, name: str, edge: str, *, interval_ms: int = 10,
                  timeout: float = 30.0) -> bpb.SubscribeReply:
        reply: bpb.SubscribeReply = self.leaf(cloud).Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber=name, variable="pmu1/freq", type=FLOAT, edge_router=edge,
            qos=[bpb.ModeQoS(mode=0, interval_ms=interval_ms, latency_ms=50)])), timeout=timeout)
        return reply

    def half_installed(self) -> tuple[str, int]:
        """('' or the diff, routes wanted): every router holds one route per admitted path through it,
        over the subscriptions the parent and the leaves hold (by id; the parent's view of an inter-cloud one)."""
        subs = {s.subscription.subscription_id: s for s in self.pstub.ListSubscriptions(
            bpb.ListSubscriptionsRequest(), timeout=5).subscriptions if s.admitted}
        inter = set(subs)
        for cloud in self.leaves:  # a leaf lists its segment of an inter-cloud one as "<id>.m<mode>.r<k>"
            for s in self.leaf(cloud).ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions:
                if s.admitted and s.subscription.subscription_id.split(".")[0] not in inter:
                    subs[s.subscription.subscription_id] = s
        want: Counter[tuple[str, int]] = Counter()
        for s in subs.values():
            for alloc in s.allocations:
                for path in alloc.paths:
                    for r in path.routers:
                        want[(r, alloc.mode)] += 1
        have: Counter[tuple[str, int]] = Counter()
        for name, r in self.routers.items():
            for route in r.routes():
                have[(name, route.mode)] += 1
        diff = ", ".join(f"{r}/mode{m}: want {want[(r, m)]} have {have[(r, m)]}"
                         for r, m in sorted(set(want) | set(have)) if want[(r, m)] != have[(r, m)])
        return diff, sum(want.values())

    def check_nothing_half_installed(self, out: Outcome, timeout_s: float = 5.0) -> None:
        diff, want = "", 0

        def settled() -> bool:
            nonlocal diff, want
            diff, want = self.half_installed()
            return diff == ""

        wait_for(settled, timeout_s=timeout_s, step_s=0.1)
        out.check("nothing half-installed", "routers' routes == brokers' desired",
                  diff or f"{want} routes match", not diff)


def parent_partition(seconds: float) -> Outcome:
    """SIGSTOP the parent broker of two clouds: in-cloud and installed inter-cloud streams lose nothing;
    a new inter-cloud subscription fails within its deadline with a retriable status; after SIGCONT a
    new one is admitted and nothing is half-installed."""
    out = Outcome("parent-partition")
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        h = Hierarchy(Path(tmp))
        local, remote, late = Sink(), Sink(), Sink()
        try:
            h.start()
            pub = h.leaf("A").RegisterClient(bpb.RegisterClientRequest(
                name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="eA", first_time=True), timeout=5)
            var = h.leaf("A").RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher="pmu1", variable="freq", type=FLOAT, interval_ms=PUB_INTERVAL_MS, edge_router="eA")),
                timeout=5).publication.variable_id
            h.register_subscriber("A", "ems-a", "fA", local)
            for name, sink in (("ems-b", remote), ("ems-b2", late), ("ems-b3", late)):
                h.register_subscriber("B", name, "eB", sink)
            in_cloud = h.subscribe("A", "ems-a", "fA")
            inter = h.subscribe("B", "ems-b", "eB")
            out.check("in-cloud and inter-cloud subscriptions admitted", "both admitted",
                      f"in-cloud {'admitted' if in_cloud.admitted else in_cloud.rejection.reason}, inter-cloud "
                      + ("-".join(inter.allocations[0].paths[0].routers) if inter.admitted else inter.rejection.reason),
                      in_cloud.admitted and inter.admitted)
            if not (in_cloud.admitted and inter.admitted):
                return out
            assert h.parent is not None
            feed = Feed(h.routers["eA"].port, pub.client_id, var, PUB_INTERVAL_MS, key=pub.channel_key)
            try:
                wait_for(lambda: len(local.timestamps(var)) > 20 and len(remote.timestamps(var)) > 20, timeout_s=5)
                h.parent.pause()
                down_ms = int(time.time() * 1000)
                t0 = time.monotonic()
                try:
                    during = h.subscribe("B", "ems-b2", "eB", interval_ms=20, timeout=PARTITION_CALL_DEADLINE_S)
                    status = "admitted" if during.admitted else f"rejected {during.rejection.reason}"
                    retriable = not during.admitted and during.rejection.reason in RETRIABLE
                except grpc.RpcError as exc:
                    status = f"{exc.code().name}: {(exc.details() or '')[:60]}"
                    retriable = exc.code() in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                               grpc.StatusCode.UNAVAILABLE)
                took = time.monotonic() - t0
                time.sleep(max(0.0, max(0.5, seconds) - took))
                up_ms = int(time.time() * 1000)
                h.parent.resume()
                time.sleep(0.5)
            finally:
                sent = feed.stop()
            time.sleep(0.2)
            out.check("new inter-cloud subscription during the partition fails, retriable, within its deadline",
                      f"DEADLINE_EXCEEDED/UNAVAILABLE <= {PARTITION_CALL_DEADLINE_S + 1:.0f} s",
                      f"{status} ({took:.2f} s)", retriable and took <= PARTITION_CALL_DEADLINE_S + 1)
            for what, sink in (("in-cloud", local), ("installed inter-cloud", remote)):
                got = sink.timestamps(var)
                while_down = [ts for ts in got if down_ms <= ts <= up_ms]
                lost, expected = _lost(sent, got)
                out.check(f"{what} stream flows through the partition", "events flow, 0 lost",
                          f"{len(while_down)} events while partitioned, {lost} lost of {expected}",
                          bool(while_down) and lost == 0 and expected > 0)
            # The timed-out request was queued at the parent; once it runs again it may still admit it
            # (the client was told DEADLINE_EXCEEDED): report it, and retire it so the retry is clean.
            ghosts = [s.subscription.subscription_id for s in h.pstub.ListSubscriptions(
                bpb.ListSubscriptionsRequest(), timeout=5).subscriptions if s.subscription.subscriber == "ems-b2"]
            if ghosts:
                out.notes.append(f"the request that timed out was admitted after SIGCONT as {', '.join(ghosts)} "
                                 "(the parent ran the queued call; the client should retry with a subscription id)")
            else:
                out.notes.append("the leaf does not fail fast on a stopped parent (its own call up has a 30 s "
                                 f"deadline); the client's {PARTITION_CALL_DEADLINE_S:.0f} s deadline ended the call, "
                                 "and no subscription was admitted for it after SIGCONT")
            healed, after = time.monotonic(), None
            for _ in range(20):  # bounded: the leaf's channel to the parent reconnects with back-off
                try:
                    after = h.subscribe("B", "ems-b3", "eB", interval_ms=20, timeout=10)
                    break
                except grpc.RpcError:
                    if time.monotonic() - healed > 10:
                        break
                    time.sleep(0.25)
            took = time.monotonic() - healed
            out.check("after healing a new inter-cloud subscription is admitted", "admitted within 10 s",
                      (("admitted" if after.admitted else after.rejection.reason) if after is not None else "error")
                      + f" after {took:.2f} s", after is not None and after.admitted and took <= 10)
            h.check_nothing_half_installed(out)
        finally:
            for s in (local, remote, late):
                s.close()
            h.close()
    return out


# -- a condensation function's host router killed and stopped --------------------------------------

CF_INTERVAL_MS = 100
#: The supervisor re-installs a restarted router's routes and function; its output must be back within this.
CF_RESUME_BOUND_S = REBUILD_BOUND_S + CF_INTERVAL_MS / 1000


def _router_functions(c: Cloud) -> dict[str, list[str]]:
    from gridstat.v1 import router_pb2 as rpb

    return {n: sorted(f.function_id for f in r.stub.GetStats(rpb.GetStatsRequest(), timeout=2).condensations)
            for n, r in c.routers.items() if r.running and r.stub is not None}


def condensation_host_kill(seconds: float) -> Outcome:
    """A condensation function (average of pmu1 on e1 and pmu2 on e2) placed by the leaf broker in a
    router slot: kill -9 its host router and restart it at the same ports, then SIGSTOP/SIGCONT it. The
    output resumes within a bound after the restart, the output subscriber is told of the stop within
    one interval, the redundancy-2 raw stream never stops, and nothing is half-installed."""
    out = Outcome("condensation-host-kill")
    latency_ms = 50
    with cloud() as c:
        raw, sdk = Sink(), SdkSubscriber("ems-cf", 902)
        feeds: list[Feed] = []
        try:
            c.register_publisher()
            pmu2 = c.stub.RegisterClient(bpb.RegisterClientRequest(
                name="pmu2", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="e2", first_time=True), timeout=5)
            var2 = c.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher="pmu2", variable="freq", type=FLOAT, interval_ms=PUB_INTERVAL_MS, edge_router="e2")),
                timeout=5).publication.variable_id
            info = c.stub.CreateCondensation(bpb.CreateCondensationRequest(
                creator="ops", function_id="avg",
                output=bpb.Publication(publisher="cf", variable="avg", type=FLOAT, interval_ms=CF_INTERVAL_MS),
                inputs=[bpb.CondensationInputRequest(variable=v, latency_ms=latency_ms)
                        for v in ("pmu1/freq", "pmu2/freq")],
                spec=cpb.CondensationSpec(calculator="average", trigger=cpb.Trigger(
                    kind=cpb.TRIGGER_KIND_TIME, interval_ms=CF_INTERVAL_MS))), timeout=15)
            host, out_var = info.router, info.output.variable_id
            c.register_subscriber("ems", raw)
            c.register_subscriber("ems-cf", sdk)
            raw_reply = c.subscribe("ems", redundancy=2)
            cf_reply = c.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems-cf", variable="cf/avg", type=FLOAT, edge_router="e2",
                qos=[bpb.ModeQoS(mode=0, interval_ms=CF_INTERVAL_MS, latency_ms=latency_ms)])), timeout=10)
            ok = host in ("i1", "i2") and raw_reply.admitted and cf_reply.admitted
            out.check("function placed off the raw stream's edges; raw (redundancy 2) and output admitted",
                      "host i1/i2, both admitted", f"host {host} ({info.placement}), raw "
                      f"{'admitted' if raw_reply.admitted else raw_reply.rejection.reason}, output "
                      f"{'admitted' if cf_reply.admitted else cf_reply.rejection.reason}", ok)
            if not ok:
                return out
            sdk.subscribe("cf", "avg", out_var, pub_interval_ms=CF_INTERVAL_MS, interval_ms=CF_INTERVAL_MS,
                          latency_ms=latency_ms)
            feeds += [c.feed(), Feed(c.routers["e2"].port, pmu2.client_id, var2, PUB_INTERVAL_MS,
                                     key=pmu2.channel_key)]
            try:
                wait_for(lambda: len(sdk.events) >= 3 and len(raw.timestamps(c.variable_id)) > 20, timeout_s=5)
                # 1. kill -9 the host router, restart it at the same ports.
                c.routers[host].kill()
                time.sleep(max(0.5, seconds))
                restart_ms = int(time.time() * 1000)
                rebuild = c.restart_router(host)
                wait_for(lambda: any(ts > restart_ms for ts in sdk.events), timeout_s=5)
                after = [ts for ts in sdk.events if ts > restart_ms]
                resumed_s = (after[0] - restart_ms) / 1000 if after else float("inf")
                installed = wait_for(lambda: _router_functions(c).get(host) == ["avg"], timeout_s=2)
                out.check("killed host: supervisor re-installs the function, output resumes",
                          f"function back on {host}, output <= {CF_RESUME_BOUND_S:.1f} s after restart",
                          f"{'installed' if installed else 'NOT installed'} (routes {_fmt_s(rebuild)}), output "
                          f"after {_fmt_s(resumed_s)}", installed and resumed_s <= CF_RESUME_BOUND_S)
                # 2. SIGSTOP / SIGCONT the host.
                wait_for(lambda: sum(1 for ts in sdk.events if ts > restart_ms) >= 3, timeout_s=3)
                before = len(sdk.violations)
                stopped_ms = int(time.time() * 1000)
                c.routers[host].pause()
                time.sleep(max(1.0, seconds))
                c.routers[host].resume()
                resumed_ms = int(time.time() * 1000)
                wait_for(lambda: sum(1 for ts in sdk.events if ts > resumed_ms) >= 3, timeout_s=5)
            finally:
                stopped = [f.stop() for f in feeds]
            sent = stopped[0]
            time.sleep(0.2)
            late, first, lag = first_violation(sdk.violations, before, latency_ms)
            out.check("stopped host: output subscriber's violation callback fires within one interval",
                      f">= 1 late/gap, <= {CF_INTERVAL_MS} ms after the missed deadline",
                      f"{len(late)} violations, first {lag} ms" if lag is not None else "never",
                      lag is not None and lag <= CF_INTERVAL_MS)
            if first is not None:
                out.notes.append(f"first violation {first.kind} for ts {first.expected_ts_ms}, "
                                 f"{first.detected_ms - stopped_ms} ms after SIGSTOP")
            resumed = [ts for ts in sdk.events if ts > resumed_ms]
            out.check("output resumes after SIGCONT", "> 0 events", f"{len(resumed)} events", bool(resumed))
            lost, expected = _lost(sent, raw.timestamps(c.variable_id))
            out.check("raw admitted stream never stops (redundancy 2, through kill and stop)", "0 lost",
                      f"{lost} lost of {expected}", lost == 0 and expected > 0)
            where = _router_functions(c)
            placed = {n: fs for n, fs in where.items() if fs}
            out.check("function installed once, on its host only", f"{host}: avg",
                      " ".join(f"{n}: {','.join(fs)}" for n, fs in placed.items()) or "nowhere",
                      placed == {host: ["avg"]})
            _standalone_host(c, out, seconds, latency_ms)
            c.check_nothing_half_installed(out)
        finally:
            raw.close()
            sdk.close()
    return out


HOST_SPEC = """function_id: host1
inputs:
  - {variable: pmu1/freq, latency_ms: 50}
output: {publisher: hostpub, variable: avg}
spec:
  calculator: average
  trigger: {kind: time, interval_ms: 100}
"""


def _standalone_host(c: Cloud, out: Outcome, seconds: float, latency_ms: int) -> None:
    """The standalone ``gridstat condense host`` through an edge router e3 (``--broker``, linked to i2):
    SIGSTOP/SIGCONT it (the output subscriber is told within one interval, the output recovers), then
    kill -9 and restart it (its output resumes for a subscriber that subscribes again)."""
    assert c.broker is not None
    e3 = c.routers["e3"] = Router("e3", router_id=5, role="edge", extra=("--broker", c.broker.address)).start()
    c.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
        name="e3", role="edge", capacity_eps=50_000, control_address=f"127.0.0.1:{e3.control_port}",
        event_address=f"127.0.0.1:{e3.port}", router_id=e3.router_id)), timeout=5)
    c.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
        a="e3", b="i2", bandwidth_bps=100_000_000, latency_ms=1.0, both_directions=True)), timeout=5)
    spec = c.workdir / "host1.yaml"
    spec.write_text(HOST_SPEC)
    host = CondenseHost("host1", edge_control_port=e3.control_port, spec=str(spec))
    sdk = SdkSubscriber("ems-host", 903)
    feed = c.feed()
    try:
        host.start()
        c.register_subscriber("ems-host", sdk)

        def subscribe_output() -> bool:
            reply = c.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems-host", variable="hostpub/avg", type=FLOAT, edge_router="e2",
                qos=[bpb.ModeQoS(mode=0, interval_ms=CF_INTERVAL_MS, latency_ms=latency_ms)])), timeout=10)
            sdk.subscribe("hostpub", "avg", host.variable_id, pub_interval_ms=CF_INTERVAL_MS,
                          interval_ms=CF_INTERVAL_MS, latency_ms=latency_ms)
            return bool(reply.admitted)

        admitted = subscribe_output()
        wait_for(lambda: len(sdk.events) >= 3, timeout_s=5)
        flowing = len(sdk.events)
        before = len(sdk.violations)
        host.pause()
        time.sleep(max(1.0, seconds))
        host.resume()
        resumed_ms = int(time.time() * 1000)
        wait_for(lambda: sum(1 for ts in sdk.events if ts > resumed_ms) >= 3, timeout_s=5)
        late = [v for _, v in sdk.violations[before:] if v.kind in ("late", "gap")]
        lag = (late[0].detected_ms - (late[0].expected_ts_ms + latency_ms)) if late else None
        recovered = sum(1 for ts in sdk.events if ts > resumed_ms)
        out.check("standalone host stopped: violation within one interval, output recovers after SIGCONT",
                  f"output flowing; >= 1 late/gap <= {CF_INTERVAL_MS} ms; > 0 events after",
                  f"{flowing} events, {'admitted' if admitted else 'REFUSED'}; {len(late)} violations, first "
                  f"{lag} ms; {recovered} events after", admitted and flowing > 0 and lag is not None
                  and lag <= CF_INTERVAL_MS and recovered > 0)
        old_id = host.variable_id
        host.kill()
        time.sleep(max(0.3, seconds / 2))
        restart_ms = int(time.time() * 1000)
        host.start()
        kept = any(s.subscription.subscriber == "ems-host" and s.admitted for s in c.stub.ListSubscriptions(
            bpb.ListSubscriptionsRequest(), timeout=5).subscriptions)
        again = kept or subscribe_output()
        wait_for(lambda: any(ts > restart_ms for ts in sdk.events), timeout_s=5)
        after = sorted(ts for ts in sdk.events if ts > restart_ms)
        resumed_s = (after[0] - restart_ms) / 1000 if after else float("inf")
        out.check("standalone host killed and restarted: its output resumes",
                  f"<= {CF_RESUME_BOUND_S:.1f} s after the restart", f"{_fmt_s(resumed_s)}"
                  f"{'' if kept else ' (after subscribing again)'}", again and resumed_s <= CF_RESUME_BOUND_S)
        if not kept:
            out.notes.append(f"the restarted host registered its output afresh (variable id {old_id} -> "
                             f"{host.variable_id}) and the broker dropped the output's subscriptions with the old "
                             "publication: a subscriber must subscribe again")
    finally:
        feed.stop()
        host.stop()
        sdk.close()


#: The deadline of each subscription call in broker-stop's churn.
CHURN_DEADLINE_S = 1.0


def broker_stop(seconds: float) -> Outcome:
    """SIGSTOP the leaf broker during subscription churn, then SIGCONT: the data plane keeps flowing,
    calls during the stop end at their deadline (no hang), churn works again, nothing half-installed."""
    out = Outcome("broker-stop")
    with cloud() as c:
        sink, churn_sink = Sink(), Sink()
        calls: list[tuple[float, float, str, str]] = []  # (start, end, op, status) in monotonic seconds
        stop = threading.Event()

        def churn() -> None:
            for _ in range(500):  # bounded in count; each call bounded by its deadline
                if stop.is_set():
                    return
                t0 = time.monotonic()
                try:
                    reply = c.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                        subscriber="ems2", variable="pmu1/freq", type=FLOAT, edge_router="e2",
                        qos=[bpb.ModeQoS(mode=0, interval_ms=20, latency_ms=50)])), timeout=CHURN_DEADLINE_S)
                    calls.append((t0, time.monotonic(), "subscribe", "OK" if reply.admitted else "rejected"))
                    if reply.admitted:
                        t1 = time.monotonic()
                        c.stub.Unsubscribe(bpb.UnsubscribeRequest(
                            subscription_id=reply.subscription.subscription_id), timeout=CHURN_DEADLINE_S)
                        calls.append((t1, time.monotonic(), "unsubscribe", "OK"))
                except grpc.RpcError as exc:
                    calls.append((t0, time.monotonic(), "call", exc.code().name))
                time.sleep(0.05)

        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            c.register_subscriber("ems2", churn_sink)
            reply = c.subscribe("ems")
            assert c.broker is not None
            feed = c.feed()
            worker = threading.Thread(target=churn, name="chaos-churn", daemon=True)
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                worker.start()
                time.sleep(0.5)
                stopped = time.monotonic()
                down_ms = int(time.time() * 1000)
                c.broker.pause()
                time.sleep(max(3 * CHURN_DEADLINE_S, seconds))  # so that a whole call falls within the stop
                up_ms = int(time.time() * 1000)
                c.broker.resume()
                resumed = time.monotonic()
                wait_for(lambda: any(t0 > resumed and st == "OK" for t0, _, _, st in calls), timeout_s=10)
                stop.set()
                worker.join(timeout=2 * CHURN_DEADLINE_S + 1)
            finally:
                stop.set()
                sent = feed.stop()
            time.sleep(0.2)
            got = sink.timestamps(c.variable_id)
            during = [ts for ts in got if down_ms <= ts <= up_ms]
            lost, expected = _lost(sent, got)
            out.check("data plane keeps flowing while the broker is stopped", "events flow, 0 lost",
                      f"{len(during)} events while stopped, {lost} lost of {expected}",
                      reply.admitted and bool(during) and lost == 0)
            # Calls started during the stop whose deadline came before SIGCONT.
            blocked = [(t1 - t0, st) for t0, t1, _, st in calls if stopped <= t0 and t0 + CHURN_DEADLINE_S < resumed]
            hung = [(d, st) for d, st in blocked if st != "DEADLINE_EXCEEDED" or d > CHURN_DEADLINE_S + 0.5]
            longest = max((d for d, _ in blocked), default=0.0)
            out.check("calls during the stop end at their deadline (no hang)",
                      f">= 1 call, all DEADLINE_EXCEEDED <= {CHURN_DEADLINE_S + 0.5:.1f} s",
                      f"{len(blocked)} calls, {len(hung)} otherwise, longest {longest:.2f} s",
                      bool(blocked) and not hung and not worker.is_alive())
            ok_after = [t0 - resumed for t0, _, _, st in calls if t0 > resumed and st == "OK"]
            out.check("churn works again after SIGCONT", "a subscribe admitted within 10 s",
                      f"after {ok_after[0]:.2f} s, {len(ok_after)} calls OK" if ok_after else "never",
                      bool(ok_after))
            left = [s.subscription.subscription_id for s in c.stub.ListSubscriptions(
                bpb.ListSubscriptionsRequest(), timeout=5).subscriptions if s.subscription.subscriber == "ems2"]
            if left:
                out.notes.append(f"{len(left)} churn subscription(s) admitted by calls whose client gave up at the "
                                 f"deadline (queued while stopped): {', '.join(left)}")
            c.check_nothing_half_installed(out)
        finally:
            stop.set()
            sink.close()
            churn_sink.close()
    return out


def _operator_kill(seconds: float) -> Outcome:
    """chaos.kube_operator (imported here: it builds on this module); needs scripts/k8s-tools.sh."""
    from .kube_operator import operator_kill

    return operator_kill(seconds)


def _netns(name: str) -> Callable[[float], Outcome]:
    """A scenario of chaos.netns_scenarios (kernel faults between network namespaces; root and
    scripts/netns-tools.sh), imported when run: it builds on this module."""
    def go(seconds: float) -> Outcome:
        from . import netns_scenarios

        fn: Callable[[float], Outcome] = getattr(netns_scenarios, name)
        return fn(seconds)

    return go


#: name -> (function(seconds) -> Outcome, one-line description)
SCENARIOS: dict[str, tuple[Callable[[float], Outcome], str]] = {
    "path-loss": (path_loss, "redundancy 2, kill -9 a path router: 0 events lost, rebuilt within 2 s"),
    "router-kill": (router_kill, "redundancy 1, kill -9 the path router and restart it: rebuilt within 2 s"),
    "router-stop": (router_stop, "SIGSTOP/SIGCONT a path router: violation reported within one interval"),
    "broker-kill": (broker_kill, "kill -9 the leaf broker: data plane never stops, state recovered"),
    "mode-switch-router-down": (mode_switch_router_down,
                                "ChangeMode while a path router is dead: completes or rolls back cleanly"),
    "admission-kill": (admission_kill, "kill -9 / SIGSTOP the admission controller: broker falls back, says so"),
    "degraded-channel": (degraded_channel, "one path lossy, delayed, reordered, duplicated: redundancy 2 loses 0"),
    "condensation-host-kill": (condensation_host_kill,
                               "kill -9 / SIGSTOP a condensation function's router and standalone host: output back"),
    "broker-stop": (broker_stop, "SIGSTOP the leaf broker during subscription churn: data flows, calls hit deadlines"),
    "parent-partition": (parent_partition,
                         "SIGSTOP the parent of two clouds: streams lose 0, new inter-cloud calls end at the deadline"),
    "netns-path-loss": (_netns("path_loss"), "routers in network namespaces, redundancy 2: one veth link cut, then "
                        "lossy, duplicating, delayed/reordered, rate-limited (kernel): 0 lost, the cut reported"),
    "netns-degraded-link": (_netns("degraded_link"), "routers in network namespaces, redundancy 1: the path's link "
                            "loses 50 % (nftables): violation reported within one interval"),
    "operator-kill": (_operator_kill,
                      "kill -9 / SIGSTOP the Kubernetes operator during churn: resources settle, streams lose 0"),
}


def run(name: str, seconds: float = 2.0, *, auth: bool = False) -> Outcome:
    global AUTH
    fn, _ = SCENARIOS[name]
    t0 = time.monotonic()
    AUTH = auth
    try:
        out = fn(seconds)
    finally:
        AUTH = False
    if auth:
        out.scenario += " (authenticated channels)"
    out.seconds = time.monotonic() - t0
    return out
