"""Limited flooding at a parent broker: propagation down the tree (dissertation 5.2).

A parent asked by an application floods to its own *height* (a parent of leaves has height
2; a broker's height is one more than its tallest child's) unless a lower level is named. A
parent asked by its own parent (``from_parent``) takes that level. Like a leaf it keeps a
``FloodingHolder`` per variable with both sides per mode, the parent's overriding its own,
and hands its *effective* level down as its children's ``from_parent`` setting, so the
precedence holds at every depth of the hierarchy.

Which children are told: level L covers every cloud under the ancestor of height L of the
publisher's cloud. So when L is at least this broker's height every child gets the setting,
and otherwise only the child whose subtree holds the publisher's cloud (it narrows further
down the same way). The other children are told to remove the parent side of that mode.
Children are called one at a time, depth first (each call returns once its subtree is done);
a child that fails does not stop the others, and the command then fails naming it: repeating
the command is safe, every call states the full desired setting of the modes it names.

The flood crosses between clouds only over inter-cloud channels whose level is at most L; the
broker that registers an inter-cloud channel (the lowest common ancestor of its clouds) gives
it its own height as level (``ParentBroker.add_channel``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from gridstat.broker import parent as plan
from gridstat.broker.flooding import FloodingHolder, check_level, check_modes
from gridstat.broker.flooding_service import entries_pb, publication_from_pb, publication_pb
from gridstat.core.model import split_variable_name
from gridstat.errors import ChannelUnavailable, NotFound, UnknownVariable
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.parent_service import ParentBroker

T = TypeVar("T")
#: A child's whole subtree is told within one call.
CHILD_TIMEOUT_S = 30.0
_TOPOLOGY_TIMEOUT_S = 5.0


async def height(broker: ParentBroker) -> int:
    """This broker's height in the hierarchy: 1 + its tallest child's (a leaf is 1)."""

    async def of(child: pb.ChildBroker) -> int:
        if child.leaf:
            return 1
        view: pb.TopologyView = await broker.peers(child.address).broker.GetTopology(
            pb.GetTopologyRequest(), timeout=_TOPOLOGY_TIMEOUT_S)
        return 1 + max([await of(c) for c in view.children], default=1)

    return 1 + max([await of(c) for c in list(broker.children.values())], default=1)


def child_requests(holder: FloodingHolder, modes: tuple[int, ...], *, in_scope: bool,
                   height: int) -> list[tuple[bool, pb.BrokerFloodingRequest]]:
    """(set?, request) calls that give one child the holder's effective level of ``modes``."""
    by_level: dict[int, list[int]] = {}
    gone: list[int] = []
    for m in modes:
        level = holder.level(m)
        if level is not None and (in_scope or level >= height):
            by_level.setdefault(level, []).append(m)
        else:
            gone.append(m)
    publication = publication_pb(holder)
    out = [(True, pb.BrokerFloodingRequest(variable=holder.name, level=level, modes=ms, from_parent=True,
                                           publication=publication)) for level, ms in sorted(by_level.items())]
    if gone:
        out.append((False, pb.BrokerFloodingRequest(variable=holder.name, modes=gone, from_parent=True)))
    return out


class ParentFlooding:
    """The flooded variables of one parent broker and their propagation to its children."""

    def __init__(self, broker: ParentBroker) -> None:
        self.broker = broker
        self.holders: dict[str, FloodingHolder] = {}
        for d in broker.store.all("flooding"):
            h = FloodingHolder.from_json(d)
            self.holders[h.name] = h
        self._lock = asyncio.Lock()

    async def height(self) -> int:
        return await height(self.broker)

    async def set(self, r: pb.BrokerFloodingRequest) -> FloodingHolder:
        split_variable_name(r.variable)
        h = await self.height()
        level = check_level(r.level, height=h, from_parent=r.from_parent)
        ms = check_modes(r.modes) or (self.broker.modes.current_mode,)
        async with self._lock:
            await self.broker.refresh()
            pub = r.publication if r.from_parent and r.publication.variable else await self.broker.resolve(r.variable)
            if pub is None:
                raise UnknownVariable(f"no cloud under {self.broker.name!r} publishes {r.variable!r}", field="variable")
            var = publication_from_pb(pub)
            holder = self.holders.get(var.full_name) or FloodingHolder(var)
            holder.var, holder.cloud = var, pub.cloud or holder.cloud
            holder.set(ms, level, from_parent=r.from_parent)
            self.holders[holder.name] = holder
            self.broker.store.put("flooding", holder.name, holder.to_json())
            await self._push(holder, ms, h)
            return holder

    async def remove(self, r: pb.BrokerFloodingRequest) -> FloodingHolder | None:
        split_variable_name(r.variable)
        ms = check_modes(r.modes) or (self.broker.modes.current_mode,)
        async with self._lock:
            holder = self.holders.get(r.variable)
            if holder is None:
                if r.from_parent:
                    return None
                raise NotFound(f"{r.variable!r} is not flooded by {self.broker.name!r}", field="variable")
            if not holder.remove(ms, from_parent=r.from_parent) and not r.from_parent:
                raise NotFound(f"{r.variable!r} is not flooded by {self.broker.name!r} in modes {list(ms)}",
                               field="modes")
            if holder.empty:
                del self.holders[holder.name]
                self.broker.store.delete("flooding", holder.name)
            else:
                self.broker.store.put("flooding", holder.name, holder.to_json())
            await self.broker.refresh()
            await self._push(holder, ms, await self.height())
            return holder

    def list(self) -> list[FloodingHolder]:
        return [self.holders[n] for n in sorted(self.holders)]

    async def _push(self, holder: FloodingHolder, modes: tuple[int, ...], h: int) -> None:
        b = self.broker
        home = plan.child_for(holder.cloud, b.child_clouds) if holder.cloud else None
        failed: list[str] = []
        for name in sorted(b.children):
            child = b.children[name]
            stub = b.peers(child.address).broker
            try:
                for is_set, req in child_requests(holder, modes, in_scope=name == home, height=h):
                    call = stub.SetFlooding if is_set else stub.RemoveFlooding
                    await call(req, timeout=CHILD_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                failed.append(f"{name} ({exc.code().name}: {exc.details()})")
        if failed:
            raise ChannelUnavailable(f"flooding of {holder.name!r} is stored at {b.name!r} but did not reach "
                                     f"children {', '.join(failed)}; repeat the request", field="children")


class ParentFloodingServicerMixin:
    """Mixed into ParentServicer; uses ``self.broker.flooding`` and ``self._run``."""

    broker: ParentBroker

    if TYPE_CHECKING:
        async def _run(self, context: Any, call: Callable[[], Awaitable[T]]) -> T: ...

    async def SetFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            holder = await self.broker.flooding.set(request)
            return pb.BrokerFloodingReply(flooding=entries_pb([holder]))
        return await self._run(context, call)

    async def RemoveFlooding(self, request: pb.BrokerFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        async def call() -> pb.BrokerFloodingReply:
            holder = await self.broker.flooding.remove(request)
            return pb.BrokerFloodingReply(flooding=entries_pb([] if holder is None else [holder]))
        return await self._run(context, call)

    async def ListFlooding(self, request: pb.ListFloodingRequest, context: Any) -> pb.BrokerFloodingReply:
        return pb.BrokerFloodingReply(flooding=entries_pb(self.broker.flooding.list()))

    async def SetFloodAll(self, request: pb.SetFloodAllRequest, context: Any) -> pb.BrokerFloodingReply:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "SetFloodAll is a leaf broker call: a flood-all "
                            "subscription is set at the subscriber's own cloud (through its edge router)")
        raise AssertionError("unreachable: abort raises")
