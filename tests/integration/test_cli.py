"""``gridstat sub|topology|routes`` as subprocesses against a fake QoS broker and a real router process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import router_pb2 as rpb

from .fixtures import unused_port
from .routerprocs import RouterProc, route, start_router

pytestmark = pytest.mark.integration


@dataclass
class FakeBroker(bpb_grpc.QoSBrokerServicer):
    """Admits pmu/freq; rejects pmu/slow in the reply and pmu/missing, pmu/bad with an error status."""

    routers: list[bpb.RouterInfo] = field(default_factory=list)
    subs: dict[str, bpb.SubscribeReply] = field(default_factory=dict)

    def Subscribe(self, request: bpb.SubscribeRequest, context: Any) -> bpb.SubscribeReply:
        s = request.subscription
        if s.variable == "pmu/slow":
            context.set_trailing_metadata((("gridstat-reason", "LatencyUnattainable"),
                                           ("gridstat-field", "qos.latency_ms")))
            return bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(
                reason="LatencyUnattainable", message="the best path takes 31.5 ms", field="qos.latency_ms",
                offer=bpb.Offer(best_latency_ms=31.5, max_redundancy=1)))
        if s.variable == "pmu/missing":
            context.set_trailing_metadata((("gridstat-reason", "UnknownVariable"), ("gridstat-field", "variable")))
            context.abort(grpc.StatusCode.NOT_FOUND, "UnknownVariable: no publication pmu/missing")
        if s.variable == "pmu/bad":
            context.set_trailing_metadata((("gridstat-reason", "InvalidArgument"), ("gridstat-field", "qos")))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument: interval below the publication's")
        sub = bpb.Subscription()
        sub.CopyFrom(s)
        sub.subscription_id = f"sub-{len(self.subs) + 1}"
        sub.cloud = "west"
        reply = bpb.SubscribeReply(admitted=True, subscription=sub, variable_id=17, pub_interval_ms=50, allocations=[
            bpb.Allocation(mode=q.mode, paths=[bpb.Path(routers=["e1", "r1", s.edge_router], latency_ms=7.25)])
            for q in s.qos])
        self.subs[sub.subscription_id] = reply
        return reply

    def ListSubscriptions(self, request: bpb.ListSubscriptionsRequest, context: Any) -> bpb.ListSubscriptionsReply:
        return bpb.ListSubscriptionsReply(subscriptions=[
            r for r in self.subs.values() if not request.subscriber or r.subscription.subscriber == request.subscriber])

    def Unsubscribe(self, request: bpb.UnsubscribeRequest, context: Any) -> bpb.UnsubscribeReply:
        if self.subs.pop(request.subscription_id, None) is None:
            context.set_trailing_metadata((("gridstat-reason", "NotFound"), ("gridstat-field", "subscription_id")))
            context.abort(grpc.StatusCode.NOT_FOUND, f"NotFound: no subscription {request.subscription_id!r}")
        return bpb.UnsubscribeReply(routes_removed=3)

    def GetTopology(self, request: bpb.GetTopologyRequest, context: Any) -> bpb.TopologyView:
        return bpb.TopologyView(broker="west", topology_version=5, routers=self.routers, channels=[
            bpb.TopologyChannel(a="e1", b="r1", bandwidth_bps=100_000_000, latency_ms=2.5, both_directions=True)],
            inter_cloud_channels=[bpb.InterCloudChannel(cloud_a="west", router_a="r1", cloud_b="east",
                                                        router_b="b9", bandwidth_bps=10_000_000, latency_ms=12)],
            children=[])


@pytest.fixture(scope="module")
def router() -> Iterator[RouterProc]:
    r = start_router("r1", 1)
    try:
        r.stub.AddChannel(rpb.AddChannelRequest(channel=rpb.Channel(
            name="ops", peer_id=2000, kind=rpb.CHANNEL_KIND_SUBSCRIBER, host="127.0.0.1", port=9)), timeout=5)
        route(r, "sub-1/0", 17, "ops", 100, 50, priority=2)
        yield r
    finally:
        r.stop()


@pytest.fixture(scope="module")
def broker(router: RouterProc) -> Iterator[tuple[FakeBroker, str]]:
    fake = FakeBroker(routers=[
        bpb.RouterInfo(name="r1", router_id=1, role="internal", capacity_eps=20000, up=True,
                       control_address=f"127.0.0.1:{router.control_port}"),
        bpb.RouterInfo(name="e1", router_id=2, role="edge", capacity_eps=10000, up=False,
                       control_address="127.0.0.1:1"),
        bpb.RouterInfo(name="nowhere", router_id=3, role="edge")])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    bpb_grpc.add_QoSBrokerServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def cli(*argv: str, broker: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRIDSTAT_BROKER"}
    if broker is not None:
        env["GRIDSTAT_BROKER"] = broker
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *argv], capture_output=True, text=True,
                          timeout=60, env=env)


ADD = ("sub", "add", "--subscriber", "ops", "--edge", "e2", "--interval-ms", "100", "--latency-ms", "20")


def test_sub_add_list_rm(broker: tuple[FakeBroker, str]) -> None:
    fake, address = broker
    fake.subs.clear()
    done = cli(*ADD, "pmu/freq", "--mode", "0", "2", "--redundancy", "1", "--type", "float", "--broker", address)
    assert done.returncode == 0, done.stderr
    assert "admitted" in done.stdout and "sub-1" in done.stdout and "variable id 17" in done.stdout
    assert "e1 -> r1 -> e2" in done.stdout and "7.25" in done.stdout
    sent = fake.subs["sub-1"].subscription
    assert [q.mode for q in sent.qos] == [0, 2] and sent.type.kind == bpb.VALUE_KIND_FLOAT

    done = cli(*ADD, "pmu/freq", "--output", "json", broker=address)  # the address from $GRIDSTAT_BROKER
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["subscription_id"] == "sub-2" and data["allocations"][0]["paths"][0]["latency_ms"] == 7.25

    listed = cli("sub", "list", "--output", "json", "--broker", address)
    assert listed.returncode == 0, listed.stderr
    assert [s["subscription_id"] for s in json.loads(listed.stdout)] == ["sub-1", "sub-2"]
    assert json.loads(cli("sub", "list", "--subscriber", "nobody", "-o", "json", broker=address).stdout) == []
    table = cli("sub", "list", broker=address)
    assert table.returncode == 0 and "pmu/freq" in table.stdout and "mode 2: 100 ms" in table.stdout

    removed = cli("sub", "rm", "sub-1", "--broker", address)
    assert removed.returncode == 0 and "removed subscription sub-1 (3 routes removed)" in removed.stdout
    again = cli("sub", "rm", "sub-1", "--broker", address)
    assert again.returncode == 2
    assert "NotFound" in again.stderr and "sub-1" in again.stderr and "subscription_id" in again.stderr


def test_sub_add_rejected_in_the_reply(broker: tuple[FakeBroker, str]) -> None:
    _, address = broker
    done = cli(*ADD, "pmu/slow", "--broker", address)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[0] == "rejected: LatencyUnattainable"
    assert "the best path takes 31.5 ms" in done.stdout
    assert "offer: best latency 31.50 ms, max redundancy 1" in done.stdout
    data = json.loads(cli(*ADD, "pmu/slow", "-o", "json", "--broker", address).stdout)
    assert data["rejection"]["offer"] == {"best_latency_ms": 31.5, "max_redundancy": 1}
    assert data["rejection"]["field"] == "qos.latency_ms"


def test_sub_add_rejected_with_an_error_status(broker: tuple[FakeBroker, str]) -> None:
    _, address = broker
    done = cli(*ADD, "pmu/missing", "--broker", address)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[0] == "rejected: UnknownVariable"
    assert "message: no publication pmu/missing" in done.stdout and "field: variable" in done.stdout
    invalid = cli(*ADD, "pmu/bad", "--broker", address)
    assert invalid.returncode == 2
    assert "InvalidArgument: interval below the publication's (field qos)" in invalid.stderr


def test_topology_show(broker: tuple[FakeBroker, str]) -> None:
    _, address = broker
    done = cli("topology", "show", "--broker", address)
    assert done.returncode == 0, done.stderr
    assert "broker west, topology version 5" in done.stdout
    assert "100 Mbit/s" in done.stdout and "20000" in done.stdout and "down" in done.stdout
    assert "inter-cloud channels" in done.stdout and "b9" in done.stdout
    data = json.loads(cli("topology", "show", "-o", "json", broker=address).stdout)
    assert [r["name"] for r in data["routers"]] == ["e1", "nowhere", "r1"]
    assert data["channels"][0]["latency_ms"] == 2.5 and data["inter_cloud_channels"][0]["cloud_b"] == "east"


def test_routes_from_the_router_itself(broker: tuple[FakeBroker, str], router: RouterProc) -> None:
    _, address = broker
    done = cli("routes", "r1", "--output", "json", "--broker", address)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["control_address"] == f"127.0.0.1:{router.control_port}"
    assert [(r["route_id"], r["variable_id"], r["mode"], r["channel"], r["sub_interval_ms"], r["priority"])
            for r in data["routes"]] == [("sub-1/0", 17, 0, "ops", 100, 2)]
    assert data["channels"][0]["name"] == "ops" and data["channels"][0]["kind"] == "subscriber"
    table = cli("routes", "r1", broker=address)
    assert table.returncode == 0 and "sub-1/0" in table.stdout and "ops" in table.stdout


def test_routes_errors(broker: tuple[FakeBroker, str]) -> None:
    _, address = broker
    unknown = cli("routes", "r9", "--broker", address)
    assert unknown.returncode == 2 and "'r9' is not in the topology" in unknown.stderr and "r1" in unknown.stderr
    nowhere = cli("routes", "nowhere", "--broker", address)
    assert nowhere.returncode == 2 and "no control address" in nowhere.stderr
    down = cli("routes", "e1", "--broker", address, "--timeout", "2")
    assert down.returncode == 4 and "router e1 at 127.0.0.1:1 is unavailable" in down.stderr


def test_broker_unreachable_exits_4() -> None:
    with unused_port() as port:
        for argv in (("topology", "show"), ("sub", "list"), (*ADD, "pmu/freq"), ("routes", "r1")):
            done = cli(*argv, "--broker", f"127.0.0.1:{port}", "--timeout", "2")
            assert done.returncode == 4, (argv, done.stderr)
            assert f"broker at 127.0.0.1:{port} is unavailable" in done.stderr
            assert "Traceback" not in done.stderr
