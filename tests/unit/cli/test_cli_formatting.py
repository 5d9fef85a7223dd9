"""The operator commands' pure parts: requests from options, replies to data, data to tables."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from gridstat.cli import formatting as fmt
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb


def render(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def subscribe_kwargs(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"subscriber": "ops", "edge": "e2", "interval_ms": 100, "latency_ms": 50}
    return base | kw


def test_subscription_request_one_qos_per_mode() -> None:
    sub = fmt.subscription_request("pmu/freq", **subscribe_kwargs(redundancy=2, priority=3, modes=[2, 0],
                                                                  value_type="float"))
    assert sub.variable == "pmu/freq" and sub.subscriber == "ops" and sub.edge_router == "e2"
    assert [q.mode for q in sub.qos] == [0, 2]
    assert all((q.interval_ms, q.latency_ms, q.redundancy, q.priority) == (100, 50, 2, 3) for q in sub.qos)
    assert sub.type.kind == bpb.VALUE_KIND_FLOAT
    assert not fmt.subscription_request("pmu/freq", **subscribe_kwargs()).HasField("type")


@pytest.mark.parametrize(("variable", "kw", "field"), [
    ("pmufreq", {}, "variable"),
    ("/freq", {}, "variable"),
    ("pmu/", {}, "variable"),
    ("pmu/freq", {"subscriber": " "}, "subscriber"),
    ("pmu/freq", {"edge": ""}, "edge_router"),
    ("pmu/freq", {"interval_ms": 0}, "interval_ms"),
    ("pmu/freq", {"latency_ms": -5}, "latency_ms"),
    ("pmu/freq", {"redundancy": 0}, "redundancy"),
    ("pmu/freq", {"priority": 7}, "priority"),
    ("pmu/freq", {"modes": [16]}, "mode"),
    ("pmu/freq", {"modes": [1, 1]}, "mode"),
    ("pmu/freq", {"value_type": "struct"}, "type"),
])
def test_subscription_request_rejects_bad_options(variable: str, kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        fmt.subscription_request(variable, **subscribe_kwargs(**kw))  # type: ignore[arg-type]
    assert info.value.field == field


def admitted_reply() -> bpb.SubscribeReply:
    return bpb.SubscribeReply(
        admitted=True, variable_id=17, pub_interval_ms=50,
        subscription=bpb.Subscription(subscription_id="sub-1", subscriber="ops", variable="pmu/freq",
                                      edge_router="e2", qos=[bpb.ModeQoS(mode=0, interval_ms=100, latency_ms=50,
                                                                         redundancy=2, priority=1)]),
        allocations=[bpb.Allocation(mode=0, paths=[
            bpb.Path(routers=["e1", "i1", "e2"], latency_ms=12.5, redundant_index=0),
            bpb.Path(routers=["e1", "i2", "e2"], latency_ms=20.25, redundant_index=1)])])


def test_admission_data_and_view() -> None:
    d = fmt.admission_data(admitted_reply())
    assert d["subscription_id"] == "sub-1" and d["variable_id"] == 17
    assert d["allocations"][0]["paths"][1] == {"redundant_index": 1, "routers": ["e1", "i2", "e2"],
                                               "latency_ms": 20.25}
    assert json.loads(fmt.to_json(d)) == d
    text = render(fmt.admission_view(d))
    assert "sub-1" in text and "variable id 17" in text
    assert "e1 -> i1 -> e2" in text and "12.50" in text and "20.25" in text


def test_rejection_from_reply_keeps_only_set_offer_fields() -> None:
    reply = bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(
        reason="LatencyUnattainable", message="best path takes 30 ms", field="qos.latency_ms",
        offer=bpb.Offer(best_latency_ms=30.0, max_redundancy=1)))
    d = fmt.rejection_from_reply(reply)
    assert d == {"admitted": False, "rejection": {
        "reason": "LatencyUnattainable", "message": "best path takes 30 ms", "field": "qos.latency_ms",
        "offer": {"best_latency_ms": 30.0, "max_redundancy": 1}}}
    lines = fmt.rejection_lines(d)
    assert lines[0] == "rejected: LatencyUnattainable"
    assert "offer: best latency 30.00 ms, max redundancy 1" in lines


def test_rejection_reason_falls_back_to_trailing_metadata() -> None:
    d = fmt.rejection_from_reply(bpb.SubscribeReply(admitted=False), "CapacityExceeded")
    assert d["rejection"]["reason"] == "CapacityExceeded" and d["rejection"]["offer"] == {}
    assert fmt.rejection_lines(d)[-1] == "offer: none"


def test_subscriptions_sorted_and_empty_table() -> None:
    second = admitted_reply()
    second.subscription.subscription_id = "sub-0"
    subs = fmt.subscriptions_data(bpb.ListSubscriptionsReply(subscriptions=[admitted_reply(), second]))
    assert [s["subscription_id"] for s in subs] == ["sub-0", "sub-1"]
    text = render(fmt.subscriptions_view(subs))
    assert "mode 0: 100 ms, <= 50 ms, x2, prio 1" in text
    assert "no subscriptions" in render(fmt.subscriptions_view([]))


def topology() -> bpb.TopologyView:
    return bpb.TopologyView(
        broker="west", topology_version=4,
        routers=[bpb.RouterInfo(name="e2", role="edge", capacity_eps=5000, up=False, control_address="h:2"),
                 bpb.RouterInfo(name="e1", role="edge", capacity_eps=10000, up=True, control_address="h:1",
                                router_id=1)],
        channels=[bpb.TopologyChannel(a="e1", b="e2", bandwidth_bps=100_000_000, latency_ms=2.5,
                                      both_directions=True)],
        inter_cloud_channels=[bpb.InterCloudChannel(cloud_a="west", router_a="b1", cloud_b="east",
                                                    router_b="b9", bandwidth_bps=1_000_000_000, latency_ms=10)],
        children=[bpb.ChildBroker(name="west-sub", address="h:7701", leaf=True)])


def test_topology_data_and_view() -> None:
    d = fmt.topology_data(topology())
    assert [r["name"] for r in d["routers"]] == ["e1", "e2"]
    assert d["routers"][1]["up"] is False
    assert d["channels"][0]["bandwidth_bps"] == 100_000_000
    assert d["inter_cloud_channels"][0]["router_b"] == "b9" and d["children"][0]["leaf"] is True
    text = render(fmt.topology_view(d))
    assert "broker west, topology version 4" in text
    assert "100 Mbit/s" in text and "1 Gbit/s" in text and "2.50" in text
    assert "down" in text and "west-sub" in text
    assert fmt.find_router(topology(), "e2") is not None and fmt.find_router(topology(), "x") is None


def test_routes_data_and_view() -> None:
    routes = rpb.ListRoutesReply(current_mode=1, table_version=9, routes=[
        rpb.Route(route_id="s1/0", variable_id=7, mode=1, channel="e2", sub_interval_ms=100, priority=2,
                  pub_interval_ms=50),
        rpb.Route(route_id="s0/0", variable_id=3, mode=0, channel="e2", sub_interval_ms=0, priority=0,
                  alert=True)])
    channels = rpb.ListChannelsReply(channels=[
        rpb.Channel(name="e2", kind=rpb.CHANNEL_KIND_ROUTER, peer_id=2, host="127.0.0.1", port=9000, up=True,
                    rtt_ms=0.42),
        rpb.Channel(name="pub", kind=rpb.CHANNEL_KIND_PUBLISHER, peer_id=100)])
    d = fmt.routes_data("r1", "127.0.0.1:5000", routes, channels)
    assert [r["route_id"] for r in d["routes"]] == ["s0/0", "s1/0"]
    assert d["channels"][0] == {"name": "e2", "kind": "router", "peer_id": 2, "address": "127.0.0.1:9000",
                                "up": True, "rtt_ms": pytest.approx(0.42)}
    assert d["channels"][1]["address"] == "" and d["channels"][1]["kind"] == "publisher"
    text = render(fmt.routes_view(d))
    assert "router r1 at 127.0.0.1:5000: mode 1, table version 9" in text
    assert "0 (alert)" in text and "0.42" in text and "s1/0" in text
    empty = render(fmt.routes_view(fmt.routes_data("r1", "a:1", rpb.ListRoutesReply(), rpb.ListChannelsReply())))
    assert "no routes" in empty and "no channels" in empty


def test_admission_note_in_replies_and_rejections() -> None:
    from gridstat.v1 import admission_pb2 as apb

    reply = admitted_reply()
    reply.admission.CopyFrom(bpb.AdmissionNote(consulted=True, fallback=True, decided_by="broker",
                                               controller="127.0.0.1:7800",
                                               note="admission controller 127.0.0.1:7800 unreachable: admitted by the "
                                                    "leaf broker's own reservation check alone"))
    d = fmt.admission_data(reply)
    assert d["admission"]["fallback"] and "unreachable" in render(fmt.admission_view(d))
    refused = bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(reason="CapacityExceeded", message="full"),
                                 admission=bpb.AdmissionNote(consulted=True, decided_by="controller", note="full",
                                                             decision=apb.AdmissionDecision(reason="CapacityExceeded",
                                                                                            hops=[apb.HopVerdict(
                                                                 router="e1", link="e1>i1", resource="memory",
                                                                 required=4012, available=2279, ok=False)])))
    lines = fmt.rejection_lines(fmt.rejection_from_reply(refused))
    assert lines[0] == "rejected: CapacityExceeded"
    assert any(line.startswith("admission: decided by the controller") for line in lines)
    assert "  hop e1 (e1>i1, mode 0): memory needs 4012, 2279 left" in lines
    sub = fmt.subscription_request("pmu/freq", subscriber="ops", edge="e2", interval_ms=100, latency_ms=50,
                                   price=7.5, best_effort=True)
    assert sub.qos[0].price == 7.5 and sub.qos[0].best_effort
