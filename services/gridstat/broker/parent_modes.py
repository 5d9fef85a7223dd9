"""Operating modes at a parent broker: delegation down the tree (dissertation 6.3.1, Fig 6.2).

A parent ignores a request for its current mode; otherwise it calls each child sequentially and
synchronously (depth first: a child parent does the same below it) and sets its own current mode
after they all returned. Mode ids are global to the hierarchy, so a parent also defines a mode in
every child. If a child fails, the children already switched stay switched and the error names
them (the dissertation's own flaw, 10.2.2: neighbouring clouds can end up in different modes);
the operator repeats the change, which is a no-op for the clouds already there.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import grpc

from gridstat.broker import modes
from gridstat.errors import GridStatError, ModeChangeInProgress
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.delegation import Peers
    from gridstat.broker.parent_store import ParentStore

#: A child's whole subtree switches within one call; generous, a leaf takes tens of ms.
CHILD_TIMEOUT_S = 60.0


class ParentModes:
    """The mode registry and current mode of one parent broker."""

    def __init__(self, name: str, store: ParentStore, peers: Peers, children: dict[str, pb.ChildBroker]) -> None:
        self.name, self.store, self.peers, self.children = name, store, peers, children
        self.modes: dict[int, str] = dict(modes.DEFAULT_MODES)
        for d in store.all("mode"):
            self.modes[int(d["mode"])] = d["name"]
        state = {d["key"]: d["value"] for d in store.all("modestate")}
        self.current_mode = int(state.get("current_mode", 0))
        self.changing = False
        self._lock = asyncio.Lock()

    async def define(self, mode: int, name: str) -> tuple[int, str]:
        new = modes.define(self.modes, mode, name)
        for child in self._ordered():  # every child must know the mode before it can be switched to
            await self.peers(child.address).broker.DefineMode(pb.DefineModeRequest(mode=mode, name=name),
                                                              timeout=CHILD_TIMEOUT_S)
        self.modes = new
        self.store.put("mode", str(mode), {"mode": mode, "name": name})
        return mode, name

    def _ordered(self) -> list[pb.ChildBroker]:
        return [self.children[n] for n in sorted(self.children)]

    async def change(self, target: int) -> pb.ChangeModeReply:
        if target not in self.modes:
            raise GridStatError(f"mode {target} is not defined; define it first (DefineMode)", reason="UnknownMode",
                                field="mode")
        if target == self.current_mode and not self.changing:
            return pb.ChangeModeReply(previous_mode=target, current_mode=target, changed=False)
        if self.changing:
            raise ModeChangeInProgress(f"parent broker {self.name} is already changing mode", field="mode")
        self.changing = True
        try:
            async with self._lock:
                return await self._change_locked(target)
        finally:
            self.changing = False

    async def _change_locked(self, target: int) -> pb.ChangeModeReply:
        previous = self.current_mode
        started = time.perf_counter()
        reply = pb.ChangeModeReply(previous_mode=previous, current_mode=target, changed=True)
        for child in self._ordered():
            try:
                r: pb.ChangeModeReply = await self.peers(child.address).broker.ChangeMode(
                    pb.ChangeModeRequest(mode=target), timeout=CHILD_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                done = ", ".join(reply.clouds) or "none"
                raise GridStatError(
                    f"mode change {previous} -> {target} stopped at child {child.name}: {exc.details()}; "
                    f"clouds already in mode {target}: {done}; repeat the change to finish it",
                    reason="ModeChangeIncomplete", field="mode") from exc
            reply.phases.extend(r.phases)
            reply.clouds.extend(r.clouds or [child.name])
        self.current_mode = target
        self.store.put("modestate", "current_mode", {"key": "current_mode", "value": target})
        reply.duration_ms = (time.perf_counter() - started) * 1000
        return reply

    def list(self) -> pb.ListModesReply:
        return pb.ListModesReply(
            modes=[pb.ModeInfo(mode=m, name=n, current=m == self.current_mode) for m, n in sorted(self.modes.items())],
            current_mode=self.current_mode, changing=self.changing)
