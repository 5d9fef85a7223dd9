"""The admission controller as its own process, consulted by a real leaf broker over real routers.

Admitted with the controller's decision; refused by the controller (memory at the first hop, which
the broker's own model does not see) with its reasons and nothing installed; the controller stopped:
the broker's own reservation check decides and says so; the percentage criterion admits part of a
subscription and its routes become best effort in the routers.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gridstat.core import children
from gridstat.v1 import admission_pb2 as apb
from gridstat.v1 import admission_pb2_grpc as apb_grpc
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import FLOAT, BrokerProc, Cloud
from .routerprocs import RouterProc, stop_process

pytestmark = pytest.mark.integration
# Memory per hop is 512 + rate * 35 bytes: 4,012 bytes for 100 events/s; 6 KiB holds one such hop.
TINY_MEMORY_MB = "0.006"


@contextlib.contextmanager
def controller(*extra: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    cmd = [sys.executable, "-m", "gridstat.cli.main", "admission", "--port", "0", "--exit-with-parent", *extra]
    proc, ready = children.spawn(cmd, what="admission controller")
    try:
        yield proc, children.ready_port(ready)
    finally:
        stop_process(proc)


def cloud(tmp_path: Path, controller_port: int, names: tuple[str, ...]) -> contextlib.AbstractContextManager[Cloud]:
    """A leaf broker deciding through the controller at ``controller_port``, over routers ``names`` in a line."""
    roles = [(name, i, "edge" if name.startswith("e") else "internal") for i, name in enumerate(names, 1)]
    return brokerprocs.cloud(tmp_path, roles, [(a, b, 1.0) for a, b in itertools.pairwise(names)], broker_extra=(
        "--admission", f"127.0.0.1:{controller_port}", "--admission-deadline-ms", "1500"))


def setup_clients(broker: BrokerProc) -> None:
    stub = broker.stub
    stub.RegisterClient(bpb.RegisterClientRequest(name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="e1",
                                                  first_time=True), timeout=5)
    for i, name in enumerate(("ems", "ems2")):
        stub.RegisterClient(bpb.RegisterClientRequest(name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router="e2",
                                                      host="127.0.0.1", port=45000 + i, first_time=True), timeout=5)
    stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
        publisher="pmu1", variable="freq", type=FLOAT, interval_ms=10, edge_router="e1")), timeout=5)
    stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
        publisher="pmu1", variable="volt", type=FLOAT, interval_ms=10, edge_router="e1", max_rate_eps=120)),
        timeout=5)


def subscribe(broker: BrokerProc, subscriber: str, variable: str) -> bpb.SubscribeReply:
    reply: bpb.SubscribeReply = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber=subscriber, variable=variable, type=FLOAT, edge_router="e2",
        qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=50)])), timeout=10)
    return reply


def routes(r: RouterProc) -> list[rpb.Route]:
    return list(r.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=5).routes)


def test_admitted_refused_with_reasons_then_fallback_when_the_controller_is_down(tmp_path: Path) -> None:
    with controller("--router-memory-mb", TINY_MEMORY_MB) as (proc, port), \
            cloud(tmp_path, port, ("e1", "i1", "e2")) as (broker, routers):
        setup_clients(broker)
        for bad in (-5.0, float("nan"), 5e9, 50.0):  # negative, not a number, absurd, below its interval's rate
            with pytest.raises(grpc.RpcError) as err:
                broker.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                    publisher="pmu1", variable="bad", type=FLOAT, interval_ms=10, edge_router="e1",
                    max_rate_eps=bad)), timeout=5)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert dict(err.value.trailing_metadata())["gridstat-field"] == "publication.max_rate_eps"

        ok = subscribe(broker, "ems", "pmu1/freq")
        assert ok.admitted, ok.rejection
        note = ok.admission
        assert note.consulted and not note.fallback and note.decided_by == "controller"
        assert note.decision.reason == "Admitted" and note.decision.requirement.max_rate_eps == 100
        assert [h.router for h in note.decision.hops if h.resource == "cpu"] == ["e1", "i1", "e2"]

        refused = subscribe(broker, "ems2", "pmu1/volt")
        assert not refused.admitted
        assert refused.rejection.reason == "CapacityExceeded" and "admission controller" in refused.rejection.message
        bad_hops = [h for h in refused.admission.decision.hops if not h.ok]
        assert [(h.router, h.resource) for h in bad_hops] == [("e1", "memory")]  # rejected at the first full hop
        assert {h.router for h in refused.admission.decision.hops} == {"e1"}
        assert len(broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions) == 1
        assert all(r.route_id.startswith("A-s1/") for r in routes(routers["e1"]))  # nothing of it installed

        # The controller's view: both advertisements, Theorem 1 for a wildcard, a filter covering nothing.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = apb_grpc.AdmissionControlStub(ch)
            state = stub.GetState(apb.GetAdmissionStateRequest(), timeout=5)
            assert state.advertisements == 2 and len(state.admitted) == 1
            req = stub.GetRequirement(apb.RequirementRequest(filter=apb.Filter(variable="pmu1/*")), timeout=5)
            assert (req.requirement.min_rate_eps, req.requirement.max_rate_eps) == (120, 220)
            with pytest.raises(grpc.RpcError) as err:
                stub.GetRequirement(apb.RequirementRequest(filter=apb.Filter(variable="pmu9/*")), timeout=5)
            assert dict(err.value.trailing_metadata())["gridstat-reason"] == "NoMatchingAdvertisement"
            with pytest.raises(grpc.RpcError) as err:
                stub.Advertise(apb.AdvertiseRequest(advertisement=apb.Advertisement(
                    advertisement_id="x", filter=apb.Filter(expression="price>1"), max_rate_eps=-1)), timeout=5)
            assert dict(err.value.trailing_metadata())["gridstat-reason"] == "InvalidAdvertisement"

        stop_process(proc)  # the controller goes away: the broker decides alone, and says so
        fallback = subscribe(broker, "ems2", "pmu1/volt")
        assert fallback.admitted, fallback.rejection
        assert fallback.admission.fallback and fallback.admission.decided_by == "broker"
        assert "unreachable" in fallback.admission.note and "own reservation check" in fallback.admission.note
        assert any(r.route_id.startswith(fallback.subscription.subscription_id) for r in routes(routers["e2"]))


def test_percentage_policy_admits_the_guaranteed_fraction_with_best_effort_routes(tmp_path: Path) -> None:
    with controller("--router-memory-mb", TINY_MEMORY_MB, "--policy", "percentage") as (_, port), \
            cloud(tmp_path, port, ("e1", "e2")) as (broker, routers):
        setup_clients(broker)
        first = subscribe(broker, "ems", "pmu1/freq")
        assert first.admitted and first.admission.decision.reason == "Admitted"
        part = subscribe(broker, "ems2", "pmu1/volt")
        assert part.admitted, part.rejection
        d = part.admission.decision
        assert d.reason == "PartiallyGuaranteed" and 0 < d.guaranteed_fraction < 1
        assert {h.router for h in d.hops} == {"e1", "e2"}  # every hop was examined
        assert part.subscription.qos[0].best_effort
        by_id = {r.route_id.split("/")[0]: r for r in routes(routers["e2"])}
        assert by_id[first.subscription.subscription_id].best_effort is False
        assert by_id[part.subscription.subscription_id].best_effort is True


def test_a_restarted_controller_learns_every_held_subscription_again(tmp_path: Path) -> None:
    with controller() as (proc, port), cloud(tmp_path, port, ("e1", "i1", "e2")) as (broker, _routers):
        setup_clients(broker)
        assert subscribe(broker, "ems", "pmu1/freq").admission.decided_by == "controller"
        stop_process(proc)
        fallback = subscribe(broker, "ems2", "pmu1/volt")  # admitted by the broker alone
        assert fallback.admitted and fallback.admission.fallback
        # The controller comes back at the same address with empty (in-memory) state.
        with controller("--port", str(port)) as (_proc2, port2):
            assert port2 == port
            # The broker's gRPC channel reconnects with back-off; until it does, the broker decides alone.
            for _ in range(20):
                after = subscribe(broker, "ems", "pmu1/volt")
                if after.admission.decided_by == "controller":
                    break
                broker.stub.Unsubscribe(bpb.UnsubscribeRequest(subscription_id=after.subscription.subscription_id),
                                        timeout=5)
                time.sleep(0.5)
            assert after.admitted and after.admission.decided_by == "controller", after.admission
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                state = apb_grpc.AdmissionControlStub(ch).GetState(apb.GetAdmissionStateRequest(), timeout=5)
            # All three held subscriptions, the one admitted during the outage included, count against capacity.
            assert len(state.admitted) == 3, [a.subscription_id for a in state.admitted]
