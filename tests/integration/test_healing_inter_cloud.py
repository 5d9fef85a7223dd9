"""Healing across clouds (docs/redundancy.md, "Healing"): a border router on the path of a single-path
inter-cloud subscription is killed; its leaf cannot re-plan the segment that leaves through it, tells
its parent, and the parent plans the subscription again over the other inter-cloud channel. Real
brokers (a parent over two leaves) and routers; raw feed and sink sockets.

    cloud A: eA - bA1 (1 ms), eA - bA2 (2 ms)      inter-cloud: bA1 - bB1 (2 ms), bA2 - bB2 (4 ms)
    cloud B: eB - bB1 (1 ms), eB - bB2 (2 ms)      publisher at eA, subscriber at eB
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from gridstat.v1 import broker_pb2 as bpb

from . import brokerprocs
from .brokerprocs import add_link, add_router, register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.parametrize("victim", ["bA1", "bB1"])  # the publisher's exit border router, the subscriber's entry
def test_a_killed_border_router_is_planned_around_by_the_parent(tmp_path: Path, victim: str) -> None:
    sink = Sink()
    try:
        with brokerprocs.started() as (brokers, routers):
            parent = brokers["P"] = start_broker("P", str(tmp_path / "P.sqlite"), extra=("--role", "parent"))
            for k, cloud in enumerate(("A", "B"), start=1):
                leaf = brokers[cloud] = start_broker(cloud, str(tmp_path / f"{cloud}.sqlite"), extra=(
                    "--variable-id-base", str(1_000_000 * k), "--parent", parent.address))
                for n, (name, role) in enumerate(((f"e{cloud}", "edge"), (f"b{cloud}1", "border"),
                                                  (f"b{cloud}2", "border")), start=1):
                    routers[name] = start_router(name, 10 * k + n, role=role, extra=("--broker", leaf.address))
                    add_router(leaf, routers[name], role)
                add_link(leaf, f"e{cloud}", f"b{cloud}1", latency_ms=1.0)
                add_link(leaf, f"e{cloud}", f"b{cloud}2", latency_ms=2.0)
                parent.stub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
                    name=cloud, address=leaf.address)), timeout=10)
            for n, ms in ((1, 2.0), (2, 4.0)):
                parent.stub.AddInterCloudChannel(bpb.AddInterCloudChannelRequest(channel=bpb.InterCloudChannel(
                    cloud_a="A", router_a=f"bA{n}", cloud_b="B", router_b=f"bB{n}", bandwidth_bps=100_000_000,
                    latency_ms=ms)), timeout=20)
            pub_id, (var,) = register_publisher(brokers["A"], "pmu1", "eA")
            register_subscriber(brokers["B"], "ems", "eB", sink.port)
            reply = brokers["B"].stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems", variable="pmu1/freq", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT),
                edge_router="eB", qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=60)])), timeout=60)
            assert reply.admitted, reply.rejection
            assert list(reply.allocations[0].paths[0].routers) == ["eA", "bA1", "bB1", "eB"]

            def path() -> list[str]:
                (s,) = parent.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
                return list(s.allocations[0].paths[0].routers)

            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.events) > 20, timeout_s=10)
                killed = time.monotonic()
                routers[victim].stop(signal.SIGKILL)
                before = len(sink.events)
                assert wait_for(lambda: path() == ["eA", "bA2", "bB2", "eB"], timeout_s=10), path()
                planned = time.monotonic() - killed
                assert wait_for(lambda: len(sink.events) > before + 50, timeout_s=10), "events did not resume"
                resumed = time.monotonic() - killed
            finally:
                feed.stop()
            print(f"\n{victim} killed: the parent planned the subscription again {planned:.3f} s after the kill; "
                  f"events flowed again {resumed:.3f} s after it")
            assert planned <= 3.0, planned  # detection (health checks, link watch) plus at most 2 s
            # The old segments are gone from both leaves: one segment per cloud and the inter-cloud channel.
            for leaf in ("A", "B"):
                held = brokers[leaf].stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
                assert all(victim not in p.routers for s in held for a in s.allocations for p in a.paths), (leaf, held)
    finally:
        sink.close()
