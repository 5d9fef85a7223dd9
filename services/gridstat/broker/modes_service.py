"""gRPC methods of the leaf broker for operating modes (protos/gridstat/v1/broker.proto), thin over LeafBroker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gridstat.broker import modes
from gridstat.broker.modes import ModeChange
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.leaf import LeafBroker

T = TypeVar("T")


def change_to_pb(c: ModeChange) -> pb.ChangeModeReply:
    return pb.ChangeModeReply(
        previous_mode=c.previous_mode, current_mode=c.current_mode, changed=c.changed, duration_ms=c.duration_ms,
        clouds=list(c.clouds),
        phases=[pb.PhaseTiming(cloud=p.cloud, phase=p.phase, name=p.name, routers=p.routers,
                               duration_ms=p.duration_ms) for p in c.phases])


class ModesServicerMixin:
    """Mixed into QoSBrokerServicer; uses ``self.broker`` and ``self._run``."""

    broker: LeafBroker

    async def _run(self, context: Any, call: Callable[[], Awaitable[T]]) -> T:
        raise NotImplementedError

    def _modes_reply(self) -> pb.ListModesReply:
        b = self.broker
        counts = b.mode_subscriptions()
        return pb.ListModesReply(
            modes=[pb.ModeInfo(mode=m, name=n, current=m == b.current_mode, subscriptions=counts.get(m, 0))
                   for m, n in sorted(b.modes.items())],
            current_mode=b.current_mode, changing=b.mode_changing)

    async def DefineMode(self, request: pb.DefineModeRequest, context: Any) -> pb.ModeInfo:
        async def call() -> pb.ModeInfo:
            mode, name = self.broker.define_mode(request.mode, request.name)
            return pb.ModeInfo(mode=mode, name=name, current=mode == self.broker.current_mode,
                               subscriptions=self.broker.mode_subscriptions().get(mode, 0))
        return await self._run(context, call)

    async def ListModes(self, request: pb.ListModesRequest, context: Any) -> pb.ListModesReply:
        async def call() -> pb.ListModesReply:
            return self._modes_reply()
        return await self._run(context, call)

    async def ChangeMode(self, request: pb.ChangeModeRequest, context: Any) -> pb.ChangeModeReply:
        async def call() -> pb.ChangeModeReply:
            target = modes.resolve(self.broker.modes, mode=request.mode, name=request.name)
            return change_to_pb(await self.broker.change_mode(target))
        return await self._run(context, call)
