"""The leaf broker's gRPC methods for flooding (protos/gridstat/v1/broker.proto), over ``broker.flooding``.

Every reply lists ``FloodingEntry`` records, one per (variable, mode, side): the parent's setting
of a mode comes first and is the effective one; a local setting of the same mode is listed with
``from_parent=false`` (it takes over when the parent removes its own). Each entry carries the
variable's ``Publication``, so a flood-all subscriber can decode events of variables it never
subscribed to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gridstat.broker.flooding import FloodingHolder
from gridstat.core import protoconv
from gridstat.core.model import StatusVariable
from gridstat.core.protoconv import publication_to_pb, type_from_pb
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.leaf import LeafBroker


def publication_pb(holder: FloodingHolder) -> pb.Publication:
    v = holder.var
    return publication_to_pb(v, cloud=holder.cloud)


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
    return protoconv.publication_from_pb(p, t)


class FloodingHandlers:
    """The flooding RPCs of ``QoSBrokerServicer``, over the broker's ``flooding`` part."""

    def __init__(self, broker: LeafBroker) -> None:
        self.broker = broker

    async def set_flooding(self, request: pb.BrokerFloodingRequest) -> pb.BrokerFloodingReply:
        publication = None
        if request.from_parent and request.publication.variable:
            publication = publication_from_pb(request.publication)
        holder = await self.broker.flooding.set(
            request.variable, level=request.level, modes=request.modes, from_parent=request.from_parent,
            publication=publication, cloud=request.publication.cloud)
        return pb.BrokerFloodingReply(flooding=entries_pb([holder]))

    async def remove_flooding(self, request: pb.BrokerFloodingRequest) -> pb.BrokerFloodingReply:
        holder = await self.broker.flooding.remove(request.variable, modes=request.modes,
                                                   from_parent=request.from_parent)
        return pb.BrokerFloodingReply(flooding=entries_pb([] if holder is None else [holder]))

    def list_flooding(self) -> pb.BrokerFloodingReply:
        return pb.BrokerFloodingReply(flooding=entries_pb(self.broker.flooding.list()))

    async def set_flood_all(self, request: pb.SetFloodAllRequest, context: Any) -> pb.BrokerFloodingReply:
        self.broker.bind_identity(context, request.subscriber, field="subscriber")
        await self.broker.flooding.set_flood_all(request.subscriber, request.enabled)
        return pb.BrokerFloodingReply(flooding=entries_pb(self.broker.flooding.list()))
