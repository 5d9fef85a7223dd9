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
from typing import TYPE_CHECKING

import grpc

from gridstat.broker import parent as plan
from gridstat.broker.flooding import FloodingHolder, check_level, check_modes
from gridstat.broker.flooding_service import publication_from_pb, publication_pb
from gridstat.core.model import split_variable_name
from gridstat.errors import ChannelUnavailable, NotFound, UnknownVariable
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.parent_modes import ParentModes
    from gridstat.broker.parent_store import ParentStore
    from gridstat.broker.subtree import Subtree

#: A child's whole subtree is told within one call.
CHILD_TIMEOUT_S = 30.0


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
    """The flooded variables of one parent broker and their propagation to its children.

    It owns the holders; the children and where each publisher's cloud is come from the parent's
    ``Subtree``, the current mode from its ``ParentModes``.
    """

    def __init__(self, name: str, store: ParentStore, tree: Subtree, modes: ParentModes) -> None:
        self.name, self.store, self.tree, self.modes = name, store, tree, modes
        self.holders: dict[str, FloodingHolder] = {}
        for d in store.all("flooding"):
            h = FloodingHolder.from_json(d)
            self.holders[h.name] = h
        self._lock = asyncio.Lock()

    async def set(self, r: pb.BrokerFloodingRequest) -> FloodingHolder:
        split_variable_name(r.variable)
        h = await self.tree.height()
        level = check_level(r.level, height=h, from_parent=r.from_parent)
        ms = check_modes(r.modes) or (self.modes.current_mode,)
        async with self._lock:
            await self.tree.refresh()
            pub = r.publication if r.from_parent and r.publication.variable else await self.tree.resolve(r.variable)
            if pub is None:
                raise UnknownVariable(f"no cloud under {self.name!r} publishes {r.variable!r}", field="variable")
            var = publication_from_pb(pub)
            holder = self.holders.get(var.full_name) or FloodingHolder(var)
            holder.var, holder.cloud = var, pub.cloud or holder.cloud
            holder.set(ms, level, from_parent=r.from_parent)
            self.holders[holder.name] = holder
            self.store.put("flooding", holder.name, holder.to_json())
            await self._push(holder, ms, h)
            return holder

    async def remove(self, r: pb.BrokerFloodingRequest) -> FloodingHolder | None:
        split_variable_name(r.variable)
        ms = check_modes(r.modes) or (self.modes.current_mode,)
        async with self._lock:
            holder = self.holders.get(r.variable)
            if holder is None:
                if r.from_parent:
                    return None
                raise NotFound(f"{r.variable!r} is not flooded by {self.name!r}", field="variable")
            if not holder.remove(ms, from_parent=r.from_parent) and not r.from_parent:
                raise NotFound(f"{r.variable!r} is not flooded by {self.name!r} in modes {list(ms)}",
                               field="modes")
            if holder.empty:
                del self.holders[holder.name]
                self.store.delete("flooding", holder.name)
            else:
                self.store.put("flooding", holder.name, holder.to_json())
            await self.tree.refresh()
            await self._push(holder, ms, await self.tree.height())
            return holder

    async def _push(self, holder: FloodingHolder, modes: tuple[int, ...], h: int) -> None:
        tree = self.tree
        home = plan.child_for(holder.cloud, tree.child_clouds) if holder.cloud else None
        failed: list[str] = []
        for name in sorted(tree.children):
            child = tree.children[name]
            stub = tree.peers(child.address).broker
            try:
                for is_set, req in child_requests(holder, modes, in_scope=name == home, height=h):
                    call = stub.SetFlooding if is_set else stub.RemoveFlooding
                    await call(req, timeout=CHILD_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                failed.append(f"{name} ({exc.code().name}: {exc.details()})")
        if failed:
            raise ChannelUnavailable(f"flooding of {holder.name!r} is stored at {self.name!r} but did not reach "
                                     f"children {', '.join(failed)}; repeat the request", field="children")

    def list(self) -> list[FloodingHolder]:
        return [self.holders[n] for n in sorted(self.holders)]
