"""The leaf broker's gRPC methods for condensing (protos/gridstat/v1/broker.proto), over ``broker.condensation``.

Refusals (``UnknownVariable`` naming ``inputs[i].variable``, ``TypeMismatch``,
``NoFeasiblePath`` / ``LatencyUnattainable`` / ``CapacityExceeded`` from placement,
``Unauthorized`` for a remover who is not the creator, ``InvalidArgument`` naming the
spec field) are gRPC errors with the ``gridstat-reason`` and ``gridstat-field`` trailing
metadata, like every other command of this service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gridstat.broker.condensing import CondensationRecord
from gridstat.core.protoconv import type_to_pb
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import condensation_pb2 as cpb

if TYPE_CHECKING:
    from gridstat.broker.leaf import LeafBroker


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


class CondensationHandlers:
    """The condensation RPCs of ``QoSBrokerServicer``, over the broker's ``condensation`` part."""

    def __init__(self, broker: LeafBroker) -> None:
        self.broker = broker

    async def create_condensation(self, request: pb.CreateCondensationRequest, context: Any) -> pb.CondensationInfo:
        b = self.broker
        # The creator reads the inputs and publishes the output: the policy must allow both.
        b.bind_identity(context, request.creator, field="creator")
        for i, inp in enumerate(request.inputs):
            b.authorize("subscribe", request.creator, inp.variable, field=f"inputs[{i}].variable")
        out = request.output
        b.authorize("publish", request.creator, f"{out.publisher}/{out.variable}", field="output.variable")
        record = await b.condensation.create(request)
        # its output is a new variable: the query subscriptions it matches admit it (docs/queries.md)
        b.queries.publication_added(b.state.registry.by_id(record.output_variable_id))
        statuses = await b.condensation.statuses([record])
        return info_pb(b, record, statuses.get(record.function_id))

    async def remove_condensation(self, request: pb.RemoveCondensationRequest,
                                  context: Any) -> pb.RemoveCondensationReply:
        self.broker.bind_identity(context, request.creator, field="creator")
        n = await self.broker.condensation.remove(request.function_id, request.creator)
        return pb.RemoveCondensationReply(subscriptions_removed=n)

    async def list_condensations(self) -> pb.ListCondensationsReply:
        part = self.broker.condensation
        records = sorted(part.functions.values(), key=lambda r: r.function_id)
        statuses = await part.statuses(records)
        return pb.ListCondensationsReply(functions=[info_pb(self.broker, r, statuses.get(r.function_id))
                                                    for r in records])
