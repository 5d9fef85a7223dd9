"""Redundancy across clouds (docs/redundancy.md, "Across clouds"): an inter-cloud subscription with two
node-disjoint paths, over two parallel inter-cloud channels between distinct border routers; a border
router on one path is killed with SIGKILL under traffic and the subscriber loses no event. Real brokers
(a parent over two leaves) and routers; raw feed and sink sockets.

    cloud A: eA - bA1 (1 ms), eA - bA2 (2 ms)      inter-cloud: bA1 - bB1 (2 ms), bA2 - bB2 (4 ms)
    cloud B: eB - bB1 (1 ms), eB - bB2 (2 ms)      publisher at eA, subscriber at eB
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gridstat.core.clock import now_ms
from gridstat.v1 import broker_pb2 as bpb

from . import brokerprocs
from .brokerprocs import BrokerProc, add_link, add_router, register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import RouterProc, start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FIRST, SECOND = ["eA", "bA1", "bB1", "eB"], ["eA", "bA2", "bB2", "eB"]


@contextlib.contextmanager
def two_clouds(tmp_path: Path) -> Iterator[tuple[dict[str, BrokerProc], dict[str, RouterProc], int, int]]:
    """The parent P over leaves A and B (module docstring): brokers, routers, pmu1's client id and
    the id of pmu1/freq; the caller registers the subscriber ems at eB."""
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
        yield brokers, routers, pub_id, var


def subscribe(leaf: BrokerProc, *qos: bpb.ModeQoS) -> bpb.SubscribeReply:
    reply: bpb.SubscribeReply = leaf.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber="ems", variable="pmu1/freq", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT), edge_router="eB",
        qos=list(qos))), timeout=60)
    return reply


def parent_paths(parent: BrokerProc, mode: int = 0) -> list[list[str]]:
    (s,) = parent.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
    (a,) = [a for a in s.allocations if a.mode == mode]
    return sorted(list(p.routers) for p in a.paths if p.routers)


def leaf_paths(leaf: BrokerProc) -> list[list[str]]:
    held = leaf.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
    return sorted(list(p.routers) for s in held for a in s.allocations for p in a.paths)


@pytest.mark.parametrize("victim", ["bA1", "bB2"])  # a publisher-side exit, a subscriber-side entry
def test_two_disjoint_inter_cloud_paths_lose_no_event_to_a_killed_border_router(tmp_path: Path,
                                                                               victim: str) -> None:
    sink = Sink()
    try:
        with two_clouds(tmp_path) as (brokers, routers, pub_id, var):
            parent = brokers["P"]
            register_subscriber(brokers["B"], "ems", "eB", sink.port)

            def qos(redundancy: int) -> bpb.ModeQoS:
                return bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=60, redundancy=redundancy)

            # Three paths do not exist: refused, offering the two that do, and nothing is left held.
            refused = subscribe(brokers["B"], qos(3))
            assert not refused.admitted
            assert refused.rejection.reason == "NoFeasiblePath", refused.rejection
            assert refused.rejection.offer.max_redundancy == 2, refused.rejection
            assert not parent.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions

            reply = subscribe(brokers["B"], qos(2))
            assert reply.admitted, reply.rejection
            assert sorted(list(p.routers) for p in reply.allocations[0].paths) == [FIRST, SECOND]
            # One segment per path in each cloud, each on its own border router.
            assert leaf_paths(brokers["A"]) == [["eA", "bA1"], ["eA", "bA2"]]
            assert leaf_paths(brokers["B"]) == [["bB1", "eB"], ["bB2", "eB"]]

            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.timestamps(var)) > 50, timeout_s=10), "no events"
                start_ms = max(sink.timestamps(var))  # from here on every event is counted
                assert len(sink.events) > len(sink.timestamps(var)) + 20, "both paths should deliver copies"
                killed = time.monotonic()
                routers[victim].stop(signal.SIGKILL)
                survivor = SECOND if victim in FIRST else FIRST
                # The parent drops the broken path and keeps the other one untouched (nothing to plan it on).
                assert wait_for(lambda: parent_paths(parent) == [survivor], timeout_s=10), parent_paths(parent)
                dropped = time.monotonic() - killed
                time.sleep(2.0)  # under traffic on the surviving path alone
                end_ms = now_ms() - 300
            finally:
                sent = feed.stop()
            time.sleep(0.3)
            got = sink.timestamps(var)
            counted = [ts for ts in sent if start_ms < ts <= end_ms]
            lost = [ts for ts in counted if ts not in got]
            print(f"\n{victim} killed: {len(counted)} events counted, {len(lost)} lost; the parent dropped the "
                  f"broken path {dropped:.3f} s after the kill")
            assert len(counted) > 150, len(counted)
            assert lost == [], f"{len(lost)} of {len(counted)} events lost: {lost[:10]}"
            for leaf in ("A", "B"):  # the broken path's segments are gone from both leaves, the other stays
                routes = leaf_paths(brokers[leaf])
                assert len(routes) == 1 and all(r in survivor for r in routes[0]), (leaf, routes)

            # The router restarts on its ports: its leaf tells the parent, which plans the missing path again.
            old, cloud = routers[victim], victim[1]
            routers[victim] = start_router(victim, old.router_id, role="border", port=old.port,
                                           control_port=old.control_port, extra=("--broker", brokers[cloud].address))
            back = time.monotonic()
            assert wait_for(lambda: parent_paths(parent) == [FIRST, SECOND], timeout_s=15), parent_paths(parent)
            print(f"{victim} restarted: both paths held again {time.monotonic() - back:.3f} s after its READY")
            mark = len(sink.events)
            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.events) - mark > 150, timeout_s=10), "events did not flow"
            finally:
                feed.stop()
            again = sink.events[mark:]
            assert len(again) > len(set(again)) + 20, "both paths should deliver copies again"
    finally:
        sink.close()


def test_both_paths_are_kept_through_a_mode_change(tmp_path: Path) -> None:
    """Each mode has its two paths; after the switch to mode 1 both deliver, and a border router
    killed then costs nothing either."""
    sink = Sink()
    try:
        with two_clouds(tmp_path) as (brokers, routers, pub_id, var):
            parent = brokers["P"]
            register_subscriber(brokers["B"], "ems", "eB", sink.port)
            parent.stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=20)
            reply = subscribe(brokers["B"], bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=60, redundancy=2),
                              bpb.ModeQoS(mode=1, interval_ms=20, latency_ms=60, redundancy=2))
            assert reply.admitted, reply.rejection
            assert parent_paths(parent, 0) == parent_paths(parent, 1) == [FIRST, SECOND]
            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.timestamps(var)) > 50, timeout_s=10), "no events"
                changed = parent.stub.ChangeMode(bpb.ChangeModeRequest(name="contingency"), timeout=60)
                assert changed.changed and list(changed.clouds) == ["A", "B"], changed
                switched_ms = now_ms() + 50  # events already under way may still be mode 0's
                time.sleep(1.0)
                after = [ts for v, ts in sink.events if v == var and ts > switched_ms]
                assert after and all(ts % 20 == 0 for ts in after), sorted(set(after))[:10]  # mode 1: every 20 ms
                assert len(after) > len(set(after)) + 20, "both paths should deliver copies in mode 1"
                start_ms = max(after)
                routers["bA1"].stop(signal.SIGKILL)
                assert wait_for(lambda: parent_paths(parent, 1) == [SECOND], timeout_s=10), parent_paths(parent, 1)
                assert parent_paths(parent, 0) == [SECOND]
                time.sleep(2.0)
                end_ms = now_ms() - 300
            finally:
                sent = feed.stop()
            time.sleep(0.3)
            got = sink.timestamps(var)
            counted = [ts for ts in sent if start_ms < ts <= end_ms and ts % 20 == 0]
            lost = [ts for ts in counted if ts not in got]
            print(f"\nmode 1, bA1 killed: {len(counted)} events counted, {len(lost)} lost")
            assert len(counted) > 75, len(counted)
            assert lost == [], f"{len(lost)} of {len(counted)} events lost: {lost[:10]}"
    finally:
        sink.close()
