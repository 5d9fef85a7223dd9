"""gRPC servicer of the admission controller (protos/gridstat/v1/admission.proto), thin over ``AdmissionController``.

Malformed requests (a bad filter, a negative or absurd rate, an unknown id) are gRPC errors with the
``gridstat-reason`` and ``gridstat-field`` trailing metadata; a refused subscription is an ordinary
``AdmissionDecision`` with ``admitted=false`` and its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gridstat.admission import admitting, filters
from gridstat.admission.admitting import AdmissionController, Bound, Decision, Hop, Policy
from gridstat.admission.covering import Node, Requirement
from gridstat.core import rpc
from gridstat.errors import ValidationError
from gridstat.v1 import admission_pb2 as pb
from gridstat.v1 import admission_pb2_grpc as pb_grpc

T = TypeVar("T")

POLICY_PB = {Policy.FULL: pb.ADMISSION_POLICY_FULL, Policy.PERCENTAGE: pb.ADMISSION_POLICY_PERCENTAGE}
POLICY_FROM_PB = {v: k for k, v in POLICY_PB.items()}
BOUND_PB = {Bound.UPPER: pb.RATE_BOUND_UPPER, Bound.LOWER: pb.RATE_BOUND_LOWER}
BOUND_FROM_PB = {v: k for k, v in BOUND_PB.items()}


def filter_from_pb(m: pb.Filter) -> filters.Filter:
    """One of the three forms of a Filter message; giving none or several is an error."""
    forms = [bool(m.constraints), bool(m.variable), bool(m.expression)]
    if sum(forms) != 1:
        raise ValidationError("a filter needs exactly one of constraints, variable or expression", field="filter")
    if m.variable:
        return filters.Filter.for_variable(m.variable)
    if m.expression:
        return filters.Filter.parse(m.expression)
    out = []
    for c in m.constraints:
        kind = c.WhichOneof("value")
        if kind is None:
            raise ValidationError(f"constraint on {c.attribute!r} has no value", field="filter.value")
        out.append(filters.Constraint(c.attribute, c.op, c.number if kind == "number" else c.text))
    return filters.Filter.of(out)


def requirement_to_pb(r: Requirement) -> pb.Requirement:
    return pb.Requirement(min_rate_eps=r.min_rate, max_rate_eps=r.max_rate, min_count=r.min_count,
                          max_count=r.max_count, exact=r.exact, predecessors=list(r.predecessors),
                          successors=list(r.successors), overlap_rate_eps=r.overlap_rate,
                          overlap_count=r.overlap_count)


def decision_to_pb(d: Decision, epoch: str) -> pb.AdmissionDecision:
    out = pb.AdmissionDecision(
        subscription_id=d.subscription_id, admitted=d.admitted, reason=d.reason, message=d.message,
        policy=POLICY_PB[d.policy], bound=BOUND_PB[d.bound], guaranteed_fraction=d.fraction,
        reserved_eps=d.reserved_eps, epoch=epoch,
        hops=[pb.HopVerdict(router=v.hop.router, link=v.hop.link, mode=v.hop.mode, resource=v.resource,
                            required=v.required, available=v.available, ok=v.ok) for v in d.hops])
    if d.requirement is not None:
        out.requirement.CopyFrom(requirement_to_pb(d.requirement))
    return out


def node_to_pb(n: Node) -> pb.GraphNode:
    return pb.GraphNode(filter=n.key, rate_eps=n.rate, count=n.count, own_rate_eps=n.own_rate, own_count=len(n.own),
                        parents=sorted(n.parents), children=sorted(n.children))


class AdmissionServicer(pb_grpc.AdmissionControlServicer):
    def __init__(self, controller: AdmissionController) -> None:
        self.controller = controller

    async def _run(self, context: Any, call: Callable[[], T]) -> T:
        async def work() -> T:
            return call()
        return await rpc.guarded(context, work)

    async def Advertise(self, request: pb.AdvertiseRequest, context: Any) -> pb.AdvertiseReply:
        def call() -> pb.AdvertiseReply:
            a = request.advertisement
            ins = self.controller.advertise(a.advertisement_id, filter_from_pb(a.filter), a.max_rate_eps,
                                            source=a.source)
            graph = self.controller.graph
            return pb.AdvertiseReply(node=ins.node, graph_version=graph.version, epoch=self.controller.epoch,
                                     rate_eps=graph.node(ins.node).rate, d_rate=ins.d_rate, d_count=ins.d_count,
                                     created=ins.created)
        return await self._run(context, call)

    async def Unadvertise(self, request: pb.UnadvertiseRequest, context: Any) -> pb.AdvertiseReply:
        def call() -> pb.AdvertiseReply:
            rate = self.controller.unadvertise(request.advertisement_id)
            return pb.AdvertiseReply(graph_version=self.controller.graph.version, epoch=self.controller.epoch,
                                     rate_eps=rate)
        return await self._run(context, call)

    async def SyncAdvertisements(self, request: pb.SyncAdvertisementsRequest,
                                 context: Any) -> pb.SyncAdvertisementsReply:
        def call() -> pb.SyncAdvertisementsReply:
            ads = [(a.advertisement_id, filter_from_pb(a.filter), a.max_rate_eps) for a in request.advertisements]
            added, removed = self.controller.sync(request.source, ads)
            return pb.SyncAdvertisementsReply(added=added, removed=removed,
                                              graph_version=self.controller.graph.version,
                                              epoch=self.controller.epoch)
        return await self._run(context, call)

    async def DeclareResources(self, request: pb.DeclareResourcesRequest, context: Any) -> pb.DeclareResourcesReply:
        def call() -> pb.DeclareResourcesReply:
            self.controller.declare(
                [admitting.RouterCapacity(r.router, r.cpu_eps, r.memory_bytes) for r in request.routers],
                [admitting.LinkCapacity(link.link, link.bandwidth_bps) for link in request.links])
            return pb.DeclareResourcesReply(routers=len(request.routers), links=len(request.links),
                                            epoch=self.controller.epoch)
        return await self._run(context, call)

    async def GetRequirement(self, request: pb.RequirementRequest, context: Any) -> pb.RequirementReply:
        def call() -> pb.RequirementReply:
            req = self.controller.requirement(filter_from_pb(request.filter), request.interval_ms)
            return pb.RequirementReply(requirement=requirement_to_pb(req))
        return await self._run(context, call)

    async def Admit(self, request: pb.AdmitRequest, context: Any) -> pb.AdmissionDecision:
        def call() -> pb.AdmissionDecision:
            hops = [Hop(h.router, h.link, h.mode) for h in request.hops]
            d = self.controller.admit(request.subscription_id, filter_from_pb(request.filter), hops,
                                      interval_ms=request.interval_ms, policy=POLICY_FROM_PB.get(request.policy),
                                      bound=BOUND_FROM_PB.get(request.bound))
            return decision_to_pb(d, self.controller.epoch)
        return await self._run(context, call)

    async def Release(self, request: pb.ReleaseRequest, context: Any) -> pb.ReleaseReply:
        return pb.ReleaseReply(existed=self.controller.release(request.subscription_id))

    async def GetState(self, request: pb.GetAdmissionStateRequest, context: Any) -> pb.AdmissionState:
        c = self.controller
        resources = []
        for (mode, kind, name), used in sorted(c.used.items()):
            cap = c.links[name].bandwidth_bps if kind == "bandwidth" else (
                c.routers[name].cpu_eps if kind == "cpu" else c.routers[name].memory_bytes)
            resources.append(pb.ResourceUse(mode=mode, kind=kind, name=name, used=used, capacity=cap))
        return pb.AdmissionState(
            epoch=c.epoch, policy=POLICY_PB[c.policy], bound=BOUND_PB[c.bound],
            nodes=[node_to_pb(n) for n in c.graph.nodes()], resources=resources,
            admitted=[decision_to_pb(d, c.epoch) for d in c.admitted()], decisions=c.decisions,
            total_rate_eps=c.graph.total_rate, advertisements=len(c.graph.advertisements()))


def add_to_server(servicer: AdmissionServicer, server: Any) -> None:
    pb_grpc.add_AdmissionControlServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
