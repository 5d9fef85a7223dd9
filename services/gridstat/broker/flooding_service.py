"""gRPC methods of the leaf broker for flooding (protos/gridstat/v1/broker.proto), thin over LeafBroker.

Every reply lists ``FloodingEntry`` records, one per (variable, mode, side): the parent's setting
of a mode comes first and is the effective one; a local setting of the same mode is listed with
``from_parent=false`` (it takes over when the parent removes its own). Each entry carries the
variable's ``Publication``, so a flood-all subscriber can decode events of variables it never
subscribed to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from gridstat.broker.flooding import FloodingHolder
from gridstat.core.model import StatusVariable
from gridstat.core.protoconv import priority_of, type_from_pb, type_to_pb
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.leaf import LeafBroker

T = TypeVar("T")


def publication_pb(holder: FloodingHolder) -> pb.Publication:
    v = holder.var
    return pb.Publication(publisher=v.publisher, variable=v.name, type=type_to_pb(v.type), interval_ms=v.interval_ms,
                          priority=v.priority, alert=v.alert, min_interval_ms=v.min_interval_ms,
                          variable_id=v.variable_id, cloud=holder.cloud)


def entries_pb(holders: Iterable[FloodingHolder]) -> list[pb.FloodingEntry]:
    out: list[pb.FloodingEntry] = []
    for h in holders:
        publication = publication_pb(h)
        out += [pb.FloodingEntry(variable=h.name, variable_id=h.var.variable_id, mode=mode, level=level,
                                 from_parent=from_parent, publication=publication)
                for mode, level, from_parent in h.entries()]
    return out


def publication_from_pb(p: pb.Publication) -> StatusVariable:
    """A parent's resolved publication of a variable (possibly published in another cloud)."""
    t = type_from_pb(p.type, field="publication.type")
    if t is None or not p.variable_id:
        raise ValidationError("a parent's flooding request carries the publication with its type and id",
                              field="publication")
    return StatusVariable(p.publisher, p.variable, t, p.interval_ms, priority_of(p), p.alert, p.min_interval_ms,
                          variable_id=p.variable_id)


class FloodingServicerMixin:
    """Mixed into QoSBrokerServicer; uses self.broker and self._run."""

    broker: LeafBroker

    if TYPE_CHECKING:
        async def _run(self, context: Any, call: Callable[[], Awaitable[T]]) -> T: ...

    async def SetFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            publication = None
            if request.from_parent and request.publication.variable:
                publication = publication_from_pb(request.publication)
            holder = await self.broker.set_flooding(
                request.variable, level=request.level, modes=request.modes, from_parent=request.from_parent,
                publication=publication, cloud=request.publication.cloud)
            return pb.BrokerFloodingReply(flooding=entries_pb([holder]))
        return await self._run(context, call)

    async def RemoveFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            holder = await self.broker.remove_flooding(request.variable, modes=request.modes,
                                                       from_parent=request.from_parent)
            return pb.BrokerFloodingReply(flooding=entries_pb([] if holder is None else [holder]))
        return await self._run(context, call)

    async def ListFlooding(self, request: pb.ListFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        return pb.BrokerFloodingReply(flooding=entries_pb(self.broker.list_flooding()))

    async def SetFloodAll(self, request: pb.SetFloodAllRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            self.broker.bind_identity(context, request.subscriber, field="subscriber")
            await self.broker.set_flood_all(request.subscriber, request.enabled)
            return pb.BrokerFloodingReply(flooding=entries_pb(self.broker.list_flooding()))
        return await self._run(context, call)
