"""A parent broker of two clouds partitioned from them (docs/chaos.md)."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gridstat.v1 import broker_pb2 as bpb

from .checks import Outcome
from .diamond import FLOAT, PUB_INTERVAL_MS, check_flowing
from .procs import Broker, Router, wait_for
from .traffic import Feed, Sink

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
                check_flowing(out, f"{what} stream flows through the partition", sent, sink.timestamps(var),
                              (down_ms, up_ms), fault="partitioned")
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
