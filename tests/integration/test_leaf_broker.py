"""A real leaf broker over real routers: admission, disjoint paths, router and broker recovery."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gridstat.chaos.diamond import LINKS, ROUTERS
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import BrokerProc, Cloud, add_router, register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import start_router

pytestmark = pytest.mark.integration

#  Diamond with a tail:   e1 - i1 - e2
#                          \       /
#                           i2 ---


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Cloud]:
    with brokerprocs.cloud(tmp_path, ROUTERS, LINKS) as c:
        yield c


def register(broker: BrokerProc, sink: Sink) -> tuple[int, int]:
    """pmu1 at e1 publishing freq, ems at e2 on ``sink``: the publisher's client id and the variable id."""
    pub_id, (var,) = register_publisher(broker, "pmu1", "e1")
    register_subscriber(broker, "ems", "e2", sink.port)
    return pub_id, var


def subscribe(broker: BrokerProc, *, redundancy: int = 1, latency_ms: int = 50,
              interval_ms: int = 10) -> bpb.SubscribeReply:
    reply: bpb.SubscribeReply = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber="ems", variable="pmu1/freq", type=brokerprocs.FLOAT, edge_router="e2",
        qos=[bpb.ModeQoS(mode=0, interval_ms=interval_ms, latency_ms=latency_ms, redundancy=redundancy)])),
        timeout=10)
    return reply


def test_redundant_subscription_survives_kill_of_a_path_router_and_router_is_rebuilt(cloud: Cloud) -> None:
    broker, routers = cloud
    sink = Sink()
    pub_id, var = register(broker, sink)
    reply = subscribe(broker, redundancy=2)
    assert reply.admitted, reply.rejection
    paths = [tuple(p.routers) for p in reply.allocations[0].paths]
    assert sorted(paths) == [("e1", "i1", "e2"), ("e1", "i2", "e2")]
    assert not set(paths[0][1:-1]) & set(paths[1][1:-1])  # node-disjoint interiors
    feed = Feed(routers["e1"].port, pub_id, var)
    try:
        assert wait_for(lambda: len(sink.events) > 20)
        victim = routers["i1"]
        port, control_port = victim.port, victim.control_port
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=5)
        victim.channel.close()
        time.sleep(1.0)
        # Restart at the same addresses (a StatefulSet pod keeps its name): the broker sees a new
        # boot id and rebuilds the router's channels and routes.
        routers["i1"] = restarted = start_router("i1", 2, port=port, control_port=control_port)
        assert wait_for(lambda: restarted.stub.Health(rpb.HealthRequest(), timeout=2).routes == 1, timeout_s=10)
        time.sleep(0.5)
    finally:
        sent = feed.stop()
    time.sleep(0.3)
    sink.close()
    got = {ts for v, ts in sink.events if v == var}
    first = min(got)
    expected = [ts for ts in sent if ts >= first]
    missing = [ts for ts in expected if ts not in got]
    assert missing == [], f"{len(missing)} of {len(expected)} events lost"
    # Both paths deliver: copies arrive twice while both are up.
    assert len(sink.events) > len(got)


def test_a_router_announced_again_at_a_new_address_keeps_its_paths_and_is_rebuilt_there(cloud: Cloud) -> None:
    """A rescheduled pod: the same router (name, id, role) at new ports, announced while it carries a path."""
    broker, routers = cloud
    sink = Sink()
    pub_id, var = register(broker, sink)
    assert subscribe(broker, redundancy=2).admitted
    feed = Feed(routers["e1"].port, pub_id, var)
    try:
        assert wait_for(lambda: len(sink.events) > 20)
        old = routers["i1"]
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait(timeout=5)
        old.channel.close()
        routers["i1"] = moved = start_router("i1", 2)  # new ports: a new address
        assert (moved.port, moved.control_port) != (old.port, old.control_port)
        add_router(broker, moved, "internal")  # refused before: "router 'i1' carries subscriptions"
        assert wait_for(lambda: moved.stub.Health(rpb.HealthRequest(), timeout=2).routes == 1, timeout_s=10)
        held = {r.name: r for r in broker.stub.GetTopology(bpb.GetTopologyRequest(), timeout=5).routers}
        assert held["i1"].event_address == f"127.0.0.1:{moved.port}" and held["i1"].up
        # e1's channel to i1 follows the move, before the broker rebuilds i1 (which makes it Ready, and a
        # rollout restarts the next router then): by the time AddRouter returns, not a pass later
        e1 = routers["e1"].stub.ListChannels(rpb.ListChannelsRequest(), timeout=5).channels
        assert [c.port for c in e1 if c.name == "i1"] == [moved.port], e1
        assert wait_for(lambda: moved.stub.GetStats(rpb.GetStatsRequest(), timeout=2).events_forwarded > 10,
                        timeout_s=10)
        # the same router under another id or role is refused, naming the field
        with pytest.raises(grpc.RpcError) as err:
            broker.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                name="i1", role="internal", control_address=f"127.0.0.1:{moved.control_port}",
                event_address=f"127.0.0.1:{moved.port}", router_id=9)), timeout=5)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "id 2, not 9" in str(err.value.details())
        assert ("gridstat-field", "router.router_id") in tuple(err.value.trailing_metadata() or ())
    finally:
        sent = feed.stop()
    time.sleep(0.3)
    sink.close()
    got = {ts for v, ts in sink.events if v == var}
    missing = [ts for ts in sent if ts >= min(got) and ts not in got]
    assert missing == [], f"{len(missing)} events lost while i1 moved"


def test_admission_rejections_name_their_reason(cloud: Cloud) -> None:
    broker, _ = cloud
    sink = Sink()
    try:
        register(broker, sink)
        r = subscribe(broker, redundancy=3)
        assert not r.admitted and r.rejection.reason == "NoFeasiblePath"
        assert r.rejection.offer.max_redundancy == 2
        r = subscribe(broker, latency_ms=2)
        assert not r.admitted and r.rejection.reason == "LatencyUnattainable"
        assert r.rejection.offer.best_latency_ms == pytest.approx(5.0)  # 2 link ms + 3 routers x 1 ms
        r = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber="ems", variable="pmu1/nope", edge_router="e2",
            qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=50)])), timeout=5)
        assert not r.admitted and r.rejection.reason == "UnknownVariable"
        r = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber="ems", variable="pmu1/freq", type=bpb.ValueType(kind=bpb.VALUE_KIND_INT), edge_router="e2",
            qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=50)])), timeout=5)
        assert not r.admitted and r.rejection.reason == "TypeMismatch"
        # Nothing was installed by the rejected requests.
        assert broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions == []
    finally:
        sink.close()


def test_broker_restart_recovers_state_while_routers_keep_forwarding(cloud: Cloud) -> None:
    broker, routers = cloud
    sink = Sink()
    pub_id, var = register(broker, sink)
    assert subscribe(broker).admitted
    feed = Feed(routers["e1"].port, pub_id, var)
    try:
        assert wait_for(lambda: len(sink.events) > 10)
        broker.stop(signal.SIGKILL)
        before = len(sink.events)
        time.sleep(0.5)
        assert len(sink.events) > before + 20  # the data plane does not need the broker
        again = start_broker("A", broker.state)
        try:
            subs = again.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
            assert [s.subscription.variable for s in subs] == ["pmu1/freq"]
            assert [tuple(p.routers) for p in subs[0].allocations[0].paths] == [("e1", "i1", "e2")]
            topo = again.stub.GetTopology(bpb.GetTopologyRequest(), timeout=5)
            assert sorted(r.name for r in topo.routers) == ["e1", "e2", "i1", "i2"]
            # The recovered broker still decides with the recovered reservations and ids.
            assert again.stub.Unsubscribe(bpb.UnsubscribeRequest(subscription_id=subs[0].subscription.subscription_id),
                                          timeout=5).routes_removed == 3
            assert wait_for(lambda: routers["e1"].stub.Health(rpb.HealthRequest(), timeout=2).routes == 0)
        finally:
            again.stop()
    finally:
        feed.stop()
        sink.close()


def test_a_restarted_router_reporting_a_new_event_address_is_moved_before_it_is_rebuilt(cloud: Cloud) -> None:
    """A pod restarted at a new IP under the same DNS name (its control address): with
    ``--advertise-host`` its Health says where its events go now, and the broker points its
    neighbours there before it rebuilds it (which makes it Ready), with no re-registration at all."""
    broker, routers = cloud
    sink = Sink()
    pub_id, var = register(broker, sink)
    assert subscribe(broker).admitted  # one path: e1 - i1 - e2
    old = routers["i1"]
    old.proc.send_signal(signal.SIGKILL)
    old.proc.wait(timeout=5)
    old.channel.close()
    # the same control address, a new event port (the new pod's new IP, here a new port on 127.0.0.1)
    routers["i1"] = moved = start_router("i1", 2, control_port=old.control_port,
                                         extra=("--advertise-host", "127.0.0.1"))
    assert moved.port != old.port
    feed = Feed(routers["e1"].port, pub_id, var)
    try:
        # Rebuilt: its channels back. (Its route does not come back: healing moved the path to i2 while
        # it was down, docs/redundancy.md "Healing".)
        def rebuilt() -> bool:
            have = {c.name for c in moved.stub.ListChannels(rpb.ListChannelsRequest(), timeout=2).channels}
            return {"e1", "e2"} <= have
        assert wait_for(rebuilt, timeout_s=15, step_s=0.01)
        # the moment it holds its channels again, its neighbour already sends to the new address
        e1 = routers["e1"].stub.ListChannels(rpb.ListChannelsRequest(), timeout=5).channels
        assert [c.port for c in e1 if c.name == "i1"] == [moved.port], e1
        health = moved.stub.Health(rpb.HealthRequest(), timeout=2)
        assert (health.event_host, health.event_port) == ("127.0.0.1", moved.port)
        held = {r.name: r for r in broker.stub.GetTopology(bpb.GetTopologyRequest(), timeout=5).routers}
        assert held["i1"].event_address == f"127.0.0.1:{moved.port}"
        n = len(sink.events)
        assert wait_for(lambda: len(sink.events) > n + 20, timeout_s=5)  # the path delivers again
    finally:
        feed.stop()
        sink.close()
