"""The leaf broker's gRPC methods for operating modes (protos/gridstat/v1/broker.proto), over ``broker.modes``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gridstat.broker import modes
from gridstat.broker.modes import ModeChange
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.leaf import LeafBroker


def change_to_pb(c: ModeChange) -> pb.ChangeModeReply:
    return pb.ChangeModeReply(
        previous_mode=c.previous_mode, current_mode=c.current_mode, changed=c.changed, duration_ms=c.duration_ms,
        clouds=list(c.clouds),
        phases=[pb.PhaseTiming(cloud=p.cloud, phase=p.phase, name=p.name, routers=p.routers,
                               duration_ms=p.duration_ms) for p in c.phases])


class ModeHandlers:
    """The mode RPCs of ``QoSBrokerServicer``, over the broker's ``modes`` part; the servicer runs them
    guarded (``core.rpc.guarded``)."""

    def __init__(self, broker: LeafBroker) -> None:
        self.broker = broker

    async def list_modes(self) -> pb.ListModesReply:
        m = self.broker.modes
        counts = m.subscription_counts()
        return pb.ListModesReply(
            modes=[pb.ModeInfo(mode=mode, name=n, current=mode == m.current, subscriptions=counts.get(mode, 0))
                   for mode, n in sorted(m.names.items())],
            current_mode=m.current, changing=m.changing)

    async def define_mode(self, request: pb.DefineModeRequest) -> pb.ModeInfo:
        m = self.broker.modes
        mode, name = m.define(request.mode, request.name)
        return pb.ModeInfo(mode=mode, name=name, current=mode == m.current,
                           subscriptions=m.subscription_counts().get(mode, 0))

    async def change_mode(self, request: pb.ChangeModeRequest) -> pb.ChangeModeReply:
        target = modes.resolve(self.broker.modes.names, mode=request.mode, name=request.name)
        # Through the front's ``change_mode``, which telemetry records (docs/telemetry.md).
        return change_to_pb(await self.broker.change_mode(target))
