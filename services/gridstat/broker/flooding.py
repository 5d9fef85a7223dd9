"""Limited flooding at the leaf broker: per variable and mode, pushed to the routers (dissertation 5.2, 5.3.1).

A variable is flooded by a management application (``SetFlooding`` at this broker, level 1:
the cloud) or by an ancestor (``from_parent``, to the ancestor's height, so that the flood
crosses the inter-cloud channels of the clouds in its scope). Each flooded variable has a
:class:`FloodingHolder` with both settings per mode; **the parent's setting overrides the
local one** (5.2) and removing it falls back to the local one.

The effective level of every mode named by a command is pushed to *every* router of the
cloud (``SetFlooding`` / ``RemoveFlooding``, router.proto); routers switch independently,
without synchronisation, which is what keeps existing subscriptions whole during the switch
(5.3.3). A router that is down or misses the push is marked dirty: the supervisor's
reconciliation then calls :meth:`FloodingCoordinator.reconcile_router`, which makes the router's
settings equal to the holders (this is also how a restarted router gets them back). The
holders are written through to the store (table ``flooding``) before a command answers.

A flood-all subscription (5.1) is the ``flood_all`` flag of a subscriber's channel on its
edge router: ``CloudState.flood_all`` feeds the desired channels, the store keeps it (table
``flood_all``) and the router changes the flag in place (``UpdateChannel``), so the
subscriber's other streams on that channel never stop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from gridstat.broker.installer import call_routers
from gridstat.broker.store import var_from_json, var_to_json
from gridstat.core.model import MAX_MODES, StatusVariable, split_variable_name
from gridstat.errors import NotFound, UnknownVariable, ValidationError
from gridstat.v1 import router_pb2 as rpb

if TYPE_CHECKING:
    from gridstat.broker.cloud import Cloud
    from gridstat.broker.installer import RouterLink
    from gridstat.broker.modes import ModeCoordinator

log = logging.getLogger(__name__)

#: Deepest level a flooding request may name (a router accepts 1..64 too).
MAX_LEVEL = 64
#: A leaf broker's height in the management hierarchy: level 1 is its own cloud.
LEAF_HEIGHT = 1
RPC_TIMEOUT_S = 5.0


def check_modes(modes: Iterable[int]) -> tuple[int, ...]:
    """The modes of a request, in order without repeats; each must be 0..15."""
    out = tuple(dict.fromkeys(int(m) for m in modes))
    for m in out:
        if not 0 <= m < MAX_MODES:
            raise ValidationError(f"mode {m} is outside 0..{MAX_MODES - 1}", field="modes")
    return out


def check_level(level: int, *, height: int, from_parent: bool) -> int:
    """The level a request floods to: 0 means the broker's own height.

    An ancestor may name any level up to its own height (it is above this broker's); an
    application may not flood beyond this broker's scope.
    """
    if level == 0:
        if from_parent:
            raise ValidationError("a parent broker names the level it floods to", field="level")
        return height
    if from_parent:
        if not 1 <= level <= MAX_LEVEL:
            raise ValidationError(f"flooding level {level} is outside 1..{MAX_LEVEL}", field="level")
        return level
    if not 1 <= level <= height:
        raise ValidationError(f"flooding level {level} is above this broker's height {height}: it floods the "
                              f"clouds below it only; ask an ancestor broker for a wider scope", field="level")
    return level


@dataclass
class FloodingHolder:
    """``FloodingHolder`` (5.3.1): one flooded variable's level per mode, set locally and by the parent."""

    var: StatusVariable
    local: dict[int, int] = field(default_factory=dict)
    parent: dict[int, int] = field(default_factory=dict)
    #: The publisher's cloud when known (parent brokers flood below one child only when the level is
    #: below their height).
    cloud: str = ""

    @property
    def name(self) -> str:
        return self.var.full_name

    def level(self, mode: int) -> int | None:
        """The effective level in ``mode``: the parent's if it set one, else the local one."""
        level = self.parent.get(mode)
        return self.local.get(mode) if level is None else level

    def effective(self) -> dict[int, int]:
        return {m: lvl for m in sorted({*self.local, *self.parent}) if (lvl := self.level(m)) is not None}

    def set(self, modes: Iterable[int], level: int, *, from_parent: bool) -> None:
        target = self.parent if from_parent else self.local
        for m in modes:
            target[m] = level

    def remove(self, modes: Iterable[int], *, from_parent: bool) -> int:
        """Drop the setting of one side in ``modes``; returns how many modes had one."""
        target = self.parent if from_parent else self.local
        return sum(1 for m in modes if target.pop(m, None) is not None)

    @property
    def empty(self) -> bool:
        return not self.local and not self.parent

    def entries(self) -> list[tuple[int, int, bool]]:
        """(mode, level, from_parent) of every setting, the parent's first within a mode."""
        out = [(m, lvl, True) for m, lvl in self.parent.items()]
        out += [(m, lvl, False) for m, lvl in self.local.items()]
        return sorted(out, key=lambda e: (e[0], not e[2]))

    def to_json(self) -> dict[str, Any]:
        return {"variable": var_to_json(self.var), "local": {str(m): lvl for m, lvl in self.local.items()},
                "parent": {str(m): lvl for m, lvl in self.parent.items()}, "cloud": self.cloud}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FloodingHolder:
        return cls(var_from_json(d["variable"]), {int(m): int(v) for m, v in d["local"].items()},
                   {int(m): int(v) for m, v in d["parent"].items()}, d.get("cloud", ""))


def router_requests(holder: FloodingHolder, modes: Iterable[int]) -> tuple[list[rpb.SetFloodingRequest],
                                                                           rpb.RemoveFloodingRequest | None]:
    """What every router must be told for ``modes``: one SetFlooding per level, one RemoveFlooding."""
    by_level: dict[int, list[int]] = {}
    gone: list[int] = []
    for m in modes:
        level = holder.level(m)
        if level is None:
            gone.append(m)
        else:
            by_level.setdefault(level, []).append(m)
    var = holder.var
    sets = [rpb.SetFloodingRequest(variable_id=var.variable_id, pub_interval_ms=var.effective_interval_ms,
                                   level=level, modes=ms, alert=var.alert) for level, ms in sorted(by_level.items())]
    remove = rpb.RemoveFloodingRequest(variable_id=var.variable_id, modes=gone) if gone else None
    return sets, remove


def reconcile_plan(holders: Iterable[FloodingHolder], have: Iterable[rpb.SetFloodingRequest]
                   ) -> tuple[list[rpb.SetFloodingRequest], list[rpb.RemoveFloodingRequest]]:
    """The calls that make a router's flooding (``have``, from ListRoutes) equal to ``holders``."""
    current: dict[tuple[int, int], tuple[int, int, bool]] = {}
    for s in have:
        for m in s.modes:
            current[(s.variable_id, m)] = (s.level, s.pub_interval_ms, s.alert)
    sets: list[rpb.SetFloodingRequest] = []
    wanted: set[tuple[int, int]] = set()
    for h in holders:
        eff = h.effective()
        var = h.var
        wanted.update((var.variable_id, m) for m in eff)
        stale = [m for m, lvl in eff.items()
                 if current.get((var.variable_id, m)) != (lvl, var.effective_interval_ms, var.alert)]
        sets += router_requests(h, stale)[0]
    extra: dict[int, list[int]] = {}
    for vid, m in sorted(current):
        if (vid, m) not in wanted:
            extra.setdefault(vid, []).append(m)
    return sets, [rpb.RemoveFloodingRequest(variable_id=vid, modes=ms) for vid, ms in extra.items()]


class FloodingCoordinator:
    """The leaf broker's flooding: it owns the holders of the flooded variables and the flood-all
    subscribers (``CloudState.flood_all``, which the desired channels read); the current mode is
    the ``ModeCoordinator``'s."""

    def __init__(self, cloud: Cloud, modes: ModeCoordinator) -> None:
        self.cloud = cloud
        self.modes = modes
        #: Flooded variables by full name ("publisher/variable").
        self.holders: dict[str, FloodingHolder] = {}

    def load(self) -> None:
        """Restore the holders and flood-all subscribers of a restarted broker."""
        store = self.cloud.store
        for d in store.all("flooding"):
            h = FloodingHolder.from_json(d)
            self.holders[h.name] = h
        self.cloud.state.flood_all.update(d["subscriber"] for d in store.all("flood_all"))

    # -- commands (setFlooding / removeFlooding, 5.2) -------------------------------------------------
    async def set(self, variable: str, *, level: int = 0, modes: Iterable[int] = (), from_parent: bool = False,
                  publication: StatusVariable | None = None, cloud: str = "") -> FloodingHolder:
        """Flood ``variable`` in this cloud in ``modes`` (the current mode if none).

        From an application the level is 0 or 1 (this cloud). From a parent it is the parent's
        scope, ``publication`` describes a variable published in another cloud and ``cloud`` names
        the publisher's cloud.
        """
        split_variable_name(variable)
        level = check_level(level, height=LEAF_HEIGHT, from_parent=from_parent)
        store = self.cloud.store
        async with self.cloud.lock:
            ms = check_modes(modes) or (self.modes.current,)
            var = self._flooded_variable(variable, publication if from_parent else None)
            holder = self.holders.get(var.full_name)
            if holder is None:
                holder = FloodingHolder(var, cloud=cloud)
            else:
                holder.var = var
            holder.set(ms, level, from_parent=from_parent)
            self.holders[holder.name] = holder
            with store.transaction():
                store.put("flooding", holder.name, holder.to_json())
            await self._push(holder, ms)
            return holder

    async def remove(self, variable: str, *, modes: Iterable[int] = (),
                     from_parent: bool = False) -> FloodingHolder | None:
        """Stop this broker's (or the parent's) flooding of ``variable`` in ``modes`` (the current mode
        if none); the other side's setting, if any, takes over. A parent's removal of what is not
        flooded here is a no-op (a child added later never had it)."""
        split_variable_name(variable)
        store = self.cloud.store
        async with self.cloud.lock:
            ms = check_modes(modes) or (self.modes.current,)
            holder = self.holders.get(variable)
            if holder is None:
                if from_parent:
                    return None
                self.cloud.state.registry.lookup(variable)  # UnknownVariable first, if it is not published here
                raise NotFound(f"{variable!r} is not flooded", field="variable")
            removed = holder.remove(ms, from_parent=from_parent)
            if not removed and not from_parent:
                raise NotFound(f"{variable!r} is not flooded by this broker in modes {list(ms)}", field="modes")
            with store.transaction():
                if holder.empty:
                    del self.holders[holder.name]
                    store.delete("flooding", holder.name)
                else:
                    store.put("flooding", holder.name, holder.to_json())
            await self._push(holder, ms)
            return holder

    def list(self) -> list[FloodingHolder]:
        """The holders, by variable name."""
        return [self.holders[n] for n in sorted(self.holders)]

    async def set_flood_all(self, subscriber: str, enabled: bool) -> None:
        """Turn a subscriber's flood-all subscription on or off (the flag of its channel, in place)."""
        cloud, st, store = self.cloud, self.cloud.state, self.cloud.store
        async with cloud.lock:
            client = st.client("subscriber", subscriber)
            if enabled == (subscriber in st.flood_all):
                return
            with store.transaction():
                if enabled:
                    st.flood_all.add(subscriber)
                    store.put("flood_all", subscriber, {"subscriber": subscriber})
                else:
                    st.flood_all.discard(subscriber)
                    store.delete("flood_all", subscriber)
            router = client.edge_router
            link = cloud.links.get(router)
            if link is None or router in st.down:
                cloud.supervisor.mark_dirty(router)
                return
            try:
                await link.stub.UpdateChannel(rpb.UpdateChannelRequest(name=client.channel, level=1,
                                                                       flood_all=enabled), timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                log.warning("flood-all of %s on %s: %s; the router will be reconciled", subscriber, router,
                            exc.details())
                cloud.supervisor.mark_dirty(router)

    def forget_flood_all(self, subscriber: str) -> None:
        """A subscriber that left or restarted holds no flood-all subscription any more (3.7)."""
        st, store = self.cloud.state, self.cloud.store
        if subscriber in st.flood_all:
            st.flood_all.discard(subscriber)
            with store.transaction():
                store.delete("flood_all", subscriber)

    # -- the routers ------------------------------------------------------------------------------------
    def _flooded_variable(self, variable: str, publication: StatusVariable | None) -> StatusVariable:
        try:
            return self.cloud.state.registry.lookup(variable)
        except UnknownVariable:
            if publication is None:
                raise
            if publication.full_name != variable or not publication.variable_id:
                raise ValidationError(f"the parent's publication {publication.full_name!r} (id "
                                      f"{publication.variable_id}) does not describe {variable!r}",
                                      field="publication") from None
            return publication

    async def _push(self, holder: FloodingHolder, modes: Iterable[int]) -> None:
        """Tell every router of the cloud the effective level of ``modes`` (routers switch on their own)."""
        links, down = self.cloud.links, self.cloud.state.down
        sets, remove = router_requests(holder, modes)

        async def push(link: RouterLink) -> None:
            for req in sets:
                await link.stub.SetFlooding(req, timeout=RPC_TIMEOUT_S)
            if remove is not None:
                await link.stub.RemoveFlooding(remove, timeout=RPC_TIMEOUT_S)

        up = [n for n in links if n not in down]
        missed = await call_routers(links, up, push, what=f"flooding {holder.name}")
        for name in (*missed, *(n for n in links if n in down)):
            self.cloud.supervisor.mark_dirty(name)  # reconciled when it answers again

    async def reconcile_router(self, link: RouterLink) -> int:
        """Make one router's flooding settings equal to the holders; the supervisor calls it after a
        reconcile (a router seen for the first time, restarted, or marked dirty)."""
        listed = await link.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=RPC_TIMEOUT_S)
        sets, removes = reconcile_plan(self.holders.values(), listed.flooding)
        for req in sets:
            await link.stub.SetFlooding(req, timeout=RPC_TIMEOUT_S)
        for rem in removes:
            await link.stub.RemoveFlooding(rem, timeout=RPC_TIMEOUT_S)
        return len(sets) + len(removes)


__all__ = ["LEAF_HEIGHT", "MAX_LEVEL", "FloodingCoordinator", "FloodingHolder", "check_level", "check_modes",
           "reconcile_plan", "router_requests"]
