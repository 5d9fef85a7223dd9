"""Three levels of real QoS brokers over real routers: an inter-cloud subscription through the LCA.

       R                  inter-cloud channels: A-B registered at P1, B-C registered at R
     /   \\
   P1     P2             each leaf cloud X: edge router eX - border router bX (1 ms)
  /  \\     \\
 A    B     C            publisher in A, subscriber in C: path A -> B -> C, admitted by R
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import BrokerProc, register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import RouterProc

pytestmark = pytest.mark.integration

CLOUDS = {"A": 1, "B": 2, "C": 3}


@contextlib.contextmanager
def hierarchy(tmp: Path) -> Iterator[tuple[dict[str, BrokerProc], dict[str, RouterProc]]]:
    with brokerprocs.started() as (brokers, routers):
        brokers["R"] = start_broker("R", str(tmp / "R.sqlite"), extra=("--role", "parent"))
        for p in ("P1", "P2"):
            brokers[p] = start_broker(p, str(tmp / f"{p}.sqlite"), extra=("--role", "parent", "--parent",
                                                                         brokers["R"].address))
        for cloud, k in CLOUDS.items():
            brokerprocs.start_leaf(tmp, brokers, routers, brokers["P1" if cloud in "AB" else "P2"], cloud, k)
        for p in ("P1", "P2"):
            brokers["R"].stub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
                name=p, address=brokers[p].address)), timeout=10)
        brokerprocs.add_inter_cloud(brokers["P1"], "A", "B")
        brokerprocs.add_inter_cloud(brokers["R"], "B", "C")
        yield brokers, routers


def routes(r: RouterProc) -> int:
    return int(r.stub.Health(rpb.HealthRequest(), timeout=2).routes)


def subscribe(leaf: BrokerProc, subscriber: str, latency_ms: int) -> bpb.SubscribeReply:
    reply: bpb.SubscribeReply = leaf.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber=subscriber, variable="pmu1/freq", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT), edge_router="eC",
        qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=latency_ms)])), timeout=60)
    return reply


def test_inter_cloud_subscription_through_three_levels(tmp_path: Path) -> None:
    sink, other = Sink(), Sink()
    try:
        with hierarchy(tmp_path) as (brokers, routers):
            a, c, root = brokers["A"], brokers["C"], brokers["R"]
            assert sorted(root.stub.GetTopology(bpb.GetTopologyRequest(), timeout=10).clouds) == ["A", "B", "C"]
            pub_id, (var,) = register_publisher(a, "pmu1", "eA")
            assert var >= 1_000_000
            for name, s in (("ems", sink), ("ems2", other)):
                register_subscriber(c, name, "eC", s.port)

            reply = subscribe(c, "ems", 50)
            assert reply.admitted, reply.rejection
            sid = reply.subscription.subscription_id
            assert sid.startswith("C-s") and reply.variable_id == var
            path = reply.allocations[0].paths[0]
            assert list(path.routers) == ["eA", "bA", "bB", "bC", "eC"]
            assert path.latency_ms == pytest.approx(3 + 2 + 1 + 2 + 3)  # 2 links x 2 ms + 5 routers + 2 x 1 ms
            assert [s.subscription.subscription_id for s in root.stub.ListSubscriptions(
                bpb.ListSubscriptionsRequest(), timeout=5).subscriptions] == [sid]
            assert all(routes(routers[n]) == 1 for n in ("eA", "bA", "bB", "bC", "eC"))

            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.events) > 10, timeout_s=10)
            finally:
                feed.stop()
            assert {v for v, _ in sink.events} == {var}

            # Infeasible: 4 ms between clouds + 3 ms per end cloud + 1 ms through B > 8 ms.
            before = {n: routes(r) for n, r in routers.items()}
            bad = subscribe(c, "ems2", 8)
            assert not bad.admitted and bad.rejection.reason == "LatencyUnattainable", bad
            assert bad.rejection.offer.best_latency_ms == pytest.approx(11.0)
            assert {n: routes(r) for n, r in routers.items()} == before
            for leaf in ("A", "B", "C"):
                subs = brokers[leaf].stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
                assert len(subs) == 1, (leaf, subs)
            assert len(root.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions) == 1

            # The root restarts on its state file and port: it still holds the subscription.
            root.stop()
            brokers["R"] = root = start_broker("R", root.state, port=root.port, extra=("--role", "parent"))
            kept = root.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
            assert [s.subscription.subscription_id for s in kept] == [sid]
            assert list(kept[0].allocations[0].paths[0].routers) == ["eA", "bA", "bB", "bC", "eC"]

            # Unsubscribing at C's leaf goes up to R, which removes the segments in all clouds.
            assert c.stub.Unsubscribe(bpb.UnsubscribeRequest(subscription_id=sid), timeout=30).routes_removed >= 3
            assert wait_for(lambda: all(routes(r) == 0 for r in routers.values()), timeout_s=10)
            assert root.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions == []
            time.sleep(0.1)
    finally:
        sink.close()
        other.close()


def test_a_mode_change_goes_down_the_tree_one_child_at_a_time(tmp_path: Path) -> None:
    import grpc

    with hierarchy(tmp_path) as (brokers, routers):
        root = brokers["R"]
        root.stub.DefineMode(bpb.DefineModeRequest(mode=3, name="storm"), timeout=20)
        for b in ("P1", "P2", "A", "B", "C"):  # a parent defines the mode in its whole subtree
            names = {m.mode: m.name for m in brokers[b].stub.ListModes(bpb.ListModesRequest(), timeout=5).modes}
            assert names == {0: "normal", 3: "storm"}, b
        reply = root.stub.ChangeMode(bpb.ChangeModeRequest(name="storm"), timeout=60)
        assert reply.changed and list(reply.clouds) == ["A", "B", "C"]  # depth first, in order
        assert {p.cloud for p in reply.phases} == {"A", "B", "C"} and len(reply.phases) == 15
        for b in ("R", "P1", "P2", "A", "B", "C"):
            assert brokers[b].stub.ListModes(bpb.ListModesRequest(), timeout=5).current_mode == 3, b
        for r in routers.values():
            assert r.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=5).current_mode == 3
        assert not root.stub.ChangeMode(bpb.ChangeModeRequest(mode=3), timeout=60).changed
        # A leaf that cannot be reached: the error names the clouds already switched.
        brokers["C"].stop()
        with pytest.raises(grpc.RpcError) as err:
            root.stub.ChangeMode(bpb.ChangeModeRequest(mode=0), timeout=60)
        assert "clouds already in mode 0: A, B" in (err.value.details() or "")  # type: ignore[attr-defined]
        assert root.stub.ListModes(bpb.ListModesRequest(), timeout=5).current_mode == 3
