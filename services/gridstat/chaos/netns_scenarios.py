"""Chaos scenarios whose faults are done by the kernel, between network namespaces (``chaos.netns``).

Why: the 127.0.0.1 scenarios can only impair a channel in user space; here each router of the
diamond runs in a namespace of its own (``ip netns exec``, bound to the namespace's address), the
diamond's channels are veth links, and a fault is a link taken down or nftables rules on it. The
broker runs in the root namespace and reaches the routers' control ports over their management
veths; the feed sends to e1's address; the subscriber's socket lives in e2's namespace on its
127.0.0.1 (created from a thread that entered it), so nothing binds outside 127.0.0.1 in the root
namespace.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gridstat.core.children import ready_port
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb
from gridstat.v1 import router_pb2_grpc as rpb_grpc

from . import diamond
from .checks import Outcome, check_reported, first_violation
from .netns import entered
from .netns_faults import FaultLab
from .netns_queue import DelayQueue
from .procs import Broker, Router, _spawn, wait_for
from .traffic import Feed, SdkSubscriber

#: A channel is declared down after --failure-timeout-ms 300 of missed pings: report within this.
REPORT_BOUND_S = 1.0


@dataclass
class NetnsRouter(Router):
    """A router inside a namespace, bound to the namespace's address (``host``)."""

    ns: str = ""
    host: str = ""

    def start(self) -> NetnsRouter:
        cmd = ["ip", "netns", "exec", self.ns, sys.executable, "-m", "gridstat.cli.main", "router", "--name",
               self.name, "--id", str(self.router_id), "--host", self.host, "--port", str(self.port),
               "--control-port", str(self.control_port), "--role", self.role, "--ping-interval-ms", "50",
               "--failure-timeout-ms", "300", "--exit-with-parent", *self.extra]
        self.proc, ready = _spawn(cmd, f"router {self.name} in {self.ns}")
        self.port, self.control_port = ready_port(ready), ready_port(ready, "control_port")
        self.channel = self._open(f"{self.host}:{self.control_port}")
        self.stub = rpb_grpc.RouterControlStub(self.channel)  # type: ignore[no-untyped-call]
        return self

    def channel_up(self, peer: str) -> bool | None:
        """Whether this router holds its channel to ``peer`` up (None: no such channel)."""
        assert self.stub is not None
        for ch in self.stub.ListChannels(rpb.ListChannelsRequest(), timeout=2).channels:
            if ch.name == peer:
                return bool(ch.up)
        return None


@contextlib.contextmanager
def netns_cloud() -> Iterator[tuple[diamond.Cloud, FaultLab]]:
    """The diamond, one namespace per router, a veth per channel; the broker in the root namespace."""
    names = [n for n, _, _ in diamond.ROUTERS]
    with FaultLab(names, [(a, b) for a, b, _ in diamond.LINKS]) as lab, \
            tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        c = diamond.Cloud(Path(tmp))
        try:
            for name, rid, role in diamond.ROUTERS:
                node = lab.nodes[name]
                c.routers[name] = NetnsRouter(name, router_id=rid, role=role, ns=node.ns, host=node.addr).start()
            extra = ("--channel-auth", "all") if diamond.AUTH else ()
            c.broker = Broker("A", state=str(c.workdir / "A.sqlite"), extra=extra).start()
            for name, _, role in diamond.ROUTERS:
                r, addr = c.routers[name], lab.nodes[name].addr
                c.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                    name=name, role=role, capacity_eps=50_000, control_address=f"{addr}:{r.control_port}",
                    event_address=f"{addr}:{r.port}", router_id=r.router_id)), timeout=5)
            for a, b, lat in diamond.LINKS:
                c.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
                    a=a, b=b, bandwidth_bps=100_000_000, latency_ms=lat, both_directions=True)), timeout=5)
            yield c, lab
        finally:
            c.close()


def _feed(c: diamond.Cloud, lab: FaultLab) -> Feed:
    return Feed(c.routers["e1"].port, c.publisher_id, c.variable_id, diamond.PUB_INTERVAL_MS,
                key=c.publisher_key, host=lab.nodes["e1"].addr)


def _subscriber(lab: FaultLab, subscriber_id: int) -> SdkSubscriber:
    """The SDK subscriber with its socket (and event loop thread) in e2's namespace, on its 127.0.0.1."""
    with entered(lab.nodes["e2"].ns):
        return SdkSubscriber("ems", subscriber_id)


def _since(t0: float, ok: bool) -> str:
    return f"{time.monotonic() - t0:.2f} s" if ok else "never"


def path_loss(seconds: float) -> Outcome:
    """Redundancy 2 over e1-i1-e2 and e1-i2-e2: the e1-i1 link is cut (link down), healed, then degraded
    all at once: lossy (30 %) and duplicating (20 %) by nftables, delayed 5 +- 4 ms (so reordered) by an
    NFQUEUE, rate-limited by tc tbf: 0 lost, the application sees each instant once and in order, the
    cut reported by e1 (its channel to i1 down) within 1 s."""
    out = Outcome("netns-path-loss")
    with netns_cloud() as (c, lab):
        sdk = _subscriber(lab, 902)
        try:
            c.register_publisher()
            c.register_subscriber("ems", sdk)
            reply = c.subscribe("ems", redundancy=2)
            paths = sorted(tuple(p.routers) for p in reply.allocations[0].paths) if reply.admitted else []
            out.check("redundancy-2 admitted on paths over different namespaces' links", "e1-i1-e2 | e1-i2-e2",
                      " | ".join("-".join(p) for p in paths) or reply.rejection.reason,
                      paths == [("e1", "i1", "e2"), ("e1", "i2", "e2")])
            if len(paths) != 2:
                return out
            sdk.subscribe("pmu1", "freq", c.variable_id, pub_interval_ms=diamond.PUB_INTERVAL_MS,
                          interval_ms=10, latency_ms=200)
            e1 = c.routers["e1"]
            assert isinstance(e1, NetnsRouter)
            feed = _feed(c, lab)
            try:
                wait_for(lambda: len(sdk.events) > 10, timeout_s=5)
                t0 = time.monotonic()
                lab.cut("e1", "i1")
                down = _since(t0, wait_for(lambda: e1.channel_up("i1") is False, timeout_s=REPORT_BOUND_S))
                time.sleep(max(0.5, seconds))
                t1 = time.monotonic()
                lab.heal("e1", "i1")
                up = _since(t1, wait_for(lambda: e1.channel_up("i1") is True, timeout_s=5))
                lab.impair("e1", "i1", loss=0.3, duplicate=0.2)
                lab.rate("e1", "i1", kbit=48, burst_bytes=1600, latency_ms=10)
                queue = DelayQueue(lab.nodes["e1"].ns, lab.dev("e1", "i1"), delay_ms=5, jitter_ms=4)
                try:
                    time.sleep(max(1.0, seconds))
                finally:
                    queue.close()
                counts = {**lab.counters("e1", "i1"), **queue.counts, "rate": lab.rate_drops("e1", "i1")}
                lab.clear("e1", "i1")
                time.sleep(0.3)
            finally:
                sent = feed.stop()
            time.sleep(0.3)
            got = list(sdk.events)
            lost, expected = diamond.count_lost(sent, set(got))
            out.check("broken path reported: e1's channel to i1 down after the cut", f"<= {REPORT_BOUND_S:.0f} s",
                      f"down after {down}; up {up} after healing", down != "never" and up != "never")
            out.check("0 events lost (link cut, then degraded)", "0 lost", f"{lost} lost of {expected}",
                      lost == 0 and expected > 0)
            dups = sdk.subscription.stats.duplicates if sdk.subscription is not None else 0
            out.check("duplicates removed by the subscriber's de-duplication", "each instant once, in order",
                      f"{dups} copies dropped; {len(got) - len(set(got))} delivered twice, "
                      f"{'ordered' if got == sorted(got) else 'REORDERED'}",
                      dups > 0 and len(got) == len(set(got)) and got == sorted(got))
            out.check("kernel faults applied on e1->i1", "> 0 of each",
                      f"nft {counts['dropped']} dropped, {counts['duplicated']} duplicated; NFQUEUE {counts['held']} "
                      f"delayed, {counts['reordered']} reordered; tbf {counts['rate']} dropped",
                      all(counts[k] > 0 for k in ("dropped", "duplicated", "held", "reordered", "rate")))
            c.check_nothing_half_installed(out)
        finally:
            sdk.close()
    return out


def degraded_link(seconds: float) -> Outcome:
    """Redundancy 1; the path's first link loses 50 % of its datagrams (nftables): the SDK subscriber's
    violation callback fires within one subscription interval of the first missed deadline."""
    out = Outcome("netns-degraded-link")
    interval_ms, latency_ms = 100, 50
    with netns_cloud() as (c, lab):
        sdk = _subscriber(lab, 903)
        try:
            c.register_publisher()
            c.register_subscriber("ems", sdk)
            reply = c.subscribe("ems", interval_ms=interval_ms, latency_ms=latency_ms)
            path = list(reply.allocations[0].paths[0].routers) if reply.admitted else []
            out.check("single-path subscription admitted", "1 path", "-".join(path) or reply.rejection.reason,
                      len(path) == 3)
            if len(path) != 3:
                return out
            a, b = path[0], path[1]
            sdk.subscribe("pmu1", "freq", c.variable_id, pub_interval_ms=diamond.PUB_INTERVAL_MS,
                          interval_ms=interval_ms, latency_ms=latency_ms)
            feed = _feed(c, lab)
            try:
                wait_for(lambda: len(sdk.events) > 5, timeout_s=5)
                before = len(sdk.violations)
                lab.impair(a, b, loss=0.5)
                time.sleep(max(1.0, seconds))
                counts = lab.counters(a, b)
                lab.clear(a, b)
                cleared_ms = int(time.time() * 1000)
                wait_for(lambda: sdk.count_after(cleared_ms) >= 5, timeout_s=5)
            finally:
                feed.stop()
            late, _first, lag = first_violation(sdk.violations, before, latency_ms)
            check_reported(out, late, lag, interval_ms, "degraded link reported to the subscriber")
            out.check(f"kernel loss applied on {a}->{b} (nftables numgen)", "> 0 dropped",
                      f"{counts['dropped']} dropped", counts["dropped"] > 0)
            r = c.routers[a]
            if r.stub is not None:
                drops = dict(r.stub.GetStats(rpb.GetStatsRequest(), timeout=2).drops)
                out.notes.append(f"{a}'s own drops: " + (", ".join(f"{k} {v}" for k, v in sorted(drops.items()))
                                                         or "none"))
            resumed = [ts for ts in sdk.events if ts > cleared_ms]
            out.check("stream whole again once the link is clean", "> 0 events", f"{len(resumed)} events",
                      bool(resumed))
            c.check_nothing_half_installed(out)
        finally:
            sdk.close()
    return out
