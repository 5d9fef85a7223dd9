"""gRPC methods of the leaf broker for condensing (protos/gridstat/v1/broker.proto), thin over LeafBroker.

Refusals (``UnknownVariable`` naming ``inputs[i].variable``, ``TypeMismatch``,
``NoFeasiblePath`` / ``LatencyUnattainable`` / ``CapacityExceeded`` from placement,
``Unauthorized`` for a remover who is not the creator, ``InvalidArgument`` naming the
spec field) are gRPC errors with the ``gridstat-reason`` and ``gridstat-field`` trailing
metadata, like every other command of this service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gridstat.broker.condensing import CondensationRecord
from gridstat.core.protoconv import type_to_pb
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import condensation_pb2 as cpb

if TYPE_CHECKING:
    from gridstat.broker.leaf import LeafBroker

T = TypeVar("T")


def info_pb(broker: LeafBroker, r: CondensationRecord, status: cpb.CondensationStatus | None) -> pb.CondensationInfo:
    """A placed function as the reply describes it; ``status`` None when its router did not report it."""
    output = pb.Publication(publisher=r.output_publisher, variable=r.output.split("/", 1)[1],
                            variable_id=r.output_variable_id, edge_router=r.router, priority=r.output_priority,
                            alert=r.output_alert, cloud=broker.name)
    var = next((v for v in broker.state.registry if v.variable_id == r.output_variable_id), None)
    if var is not None:
        output.type.CopyFrom(type_to_pb(var.type))
        output.interval_ms = var.interval_ms
        output.min_interval_ms = var.min_interval_ms
    if status is None:
        status = cpb.CondensationStatus(function_id=r.function_id, router=r.router,
                                        last_error=f"no report from router {r.router!r} (down, or not running it)")
    return pb.CondensationInfo(function_id=r.function_id, creator=r.creator, router=r.router, output=output,
                               input_subscriptions=[i.subscription_id for i in r.inputs], spec=r.spec_pb(),
                               placement=r.placement, status=status)


class CondensationServicerMixin:
    """Mixed into QoSBrokerServicer; uses ``self.broker`` and ``self._run``."""

    broker: LeafBroker

    async def _run(self, context: Any, call: Callable[[], Awaitable[T]]) -> T:
        raise NotImplementedError

    async def _admission(self, context: Any, declared: str, call: Callable[[], Awaitable[T]]) -> T:
        raise NotImplementedError

    async def CreateCondensation(self, request: pb.CreateCondensationRequest, context: Any) -> pb.CondensationInfo:
        async def call() -> pb.CondensationInfo:
            # The creator reads the inputs and publishes the output: the policy must allow both.
            self.broker.bind_identity(context, request.creator, field="creator")
            for i, inp in enumerate(request.inputs):
                self.broker.authorize("subscribe", request.creator, inp.variable, field=f"inputs[{i}].variable")
            out = request.output
            self.broker.authorize("publish", request.creator, f"{out.publisher}/{out.variable}",
                                  field="output.variable")
            record = await self.broker.create_condensation(request)
            statuses = await self.broker.condensation_statuses([record])
            return info_pb(self.broker, record, statuses.get(record.function_id))
        return await self._admission(context, request.creator, call)  # placement plans paths (broker.gate)

    async def RemoveCondensation(self, request: pb.RemoveCondensationRequest,
                                 context: Any) -> pb.RemoveCondensationReply:
        async def call() -> pb.RemoveCondensationReply:
            self.broker.bind_identity(context, request.creator, field="creator")
            n = await self.broker.remove_condensation(request.function_id, request.creator)
            return pb.RemoveCondensationReply(subscriptions_removed=n)
        return await self._run(context, call)

    async def ListCondensations(self, request: pb.ListCondensationsRequest,
                                context: Any) -> pb.ListCondensationsReply:
        async def call() -> pb.ListCondensationsReply:
            records = sorted(self.broker.condensations.values(), key=lambda r: r.function_id)
            statuses = await self.broker.condensation_statuses(records)
            return pb.ListCondensationsReply(functions=[info_pb(self.broker, r, statuses.get(r.function_id))
                                                        for r in records])
        return await self._run(context, call)
