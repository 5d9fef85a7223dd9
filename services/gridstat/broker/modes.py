"""Operating modes at the leaf broker: the mode registry and the five-phase change (dissertation 6.3).

A mode is a pre-allocated subscription set: every subscription lists its modes, a path is
admitted and installed for each, and every router holds a table per mode (``router.tables``).
Switching is therefore no re-allocation, only five rounds of control calls, each to every
router of the phase in parallel and each complete before the next starts (6.3.2):

1. warn: the edge routers tell their subscribers a change is coming (no false QoS callbacks);
2. prepare: the edge routers switch to the temporary slot (only streams of both modes flow);
3. switch-internal: the internal and border routers swap to the new table;
4. switch-edge: the edge routers swap from the temporary slot to the new table;
5. commit: the edge routers tell their subscribers the change is done.

The change holds the broker lock, so no subscription is installed half-way through it and the
supervisor cannot rebuild a router into the old mode meanwhile. A failure in phases 1-2 is
undone (the edges go back to the old mode and subscribers are told the change was abandoned);
in phases 3-5 the change rolls forward and the supervisor rebuilds the routers that missed it
into the new mode, because by then part of the cloud already forwards the new mode's streams.

At the leaf broker this is :class:`ModeCoordinator` (``LeafBroker.modes``), which owns the mode
registry, the current mode and the change in progress; the other parts read the current mode
from it. A parent broker delegates a change down its tree instead (``parent_modes``).

Resources: every mode's paths were admitted against the capacities, and each router forwards
under exactly one table at a time, so a channel never carries more than the larger of its two
modes' reservations. ``check_switch`` re-checks the target mode against today's topology
(capacities may have shrunk, routers may be down) before anything is touched.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gridstat.broker.installer import RouterLink, RouterUnavailable, call_routers
from gridstat.broker.topology import Topology
from gridstat.core.model import MAX_MODES
from gridstat.errors import (
    CapacityExhausted,
    DuplicateName,
    ModeChangeInProgress,
    NotFound,
    ValidationError,
)
from gridstat.v1 import router_pb2 as rpb

if TYPE_CHECKING:
    from gridstat.broker.cloud import Cloud
    from gridstat.broker.resources import Reservations

log = logging.getLogger(__name__)

#: Each phase's control calls must answer within this (a router pointer swap takes microseconds).
PHASE_TIMEOUT_S = 5.0
DEFAULT_MODES = {0: "normal"}
PHASE_NAMES = {1: "warn", 2: "prepare", 3: "switch-internal", 4: "switch-edge", 5: "commit"}


# -- pure parts -------------------------------------------------------------------------------------

def check_mode_id(mode: int, *, field_name: str = "mode") -> None:
    if not 0 <= mode < MAX_MODES:
        raise ValidationError(f"mode {mode} is outside 0..{MAX_MODES - 1}", field=field_name)


def define(modes: dict[int, str], mode: int, name: str) -> dict[int, str]:
    """The registry after defining (or renaming) ``mode`` as ``name``; names are unique."""
    check_mode_id(mode)
    name = name.strip()
    if not name:
        raise ValidationError("a mode needs a name", field="name")
    if len(name) > 63 or not all(c.isalnum() or c in "-_." for c in name):
        raise ValidationError(f"mode name {name!r} must be 1-63 letters, digits, '-', '_' or '.'", field="name")
    for other, other_name in modes.items():
        if other_name == name and other != mode:
            raise DuplicateName(f"mode name {name!r} is already mode {other}", field="name")
    return {**modes, mode: name}


def resolve(modes: dict[int, str], *, mode: int, name: str = "") -> int:
    """The id of the mode named ``name`` or, without a name, the defined mode ``mode``."""
    if name:
        for m, n in modes.items():
            if n == name:
                return m
        known = ", ".join(f"{n} ({m})" for m, n in sorted(modes.items()))
        raise NotFound(f"no mode is named {name!r}; defined: {known}", reason="UnknownMode", field="name")
    check_mode_id(mode)
    if mode not in modes:
        raise NotFound(f"mode {mode} is not defined; define it first (DefineMode)", reason="UnknownMode",
                       field="mode")
    return mode


def check_switch(topology: Topology, reservations: Reservations, down: Iterable[str]) -> list[str]:
    """What stops a switch to the mode of ``reservations`` today; empty when it may go ahead.

    The target mode was admitted against the capacities of its time; a channel or router may
    since have lost capacity or gone down. Reported per resource, in words an operator can act on.
    """
    problems: list[str] = []
    down = set(down)
    used_routers: set[str] = set()
    for name, ch in topology.channels.items():
        load = reservations.channel_load(name)
        if not load:
            continue
        used_routers.update((ch.src, ch.dst))
        capacity = topology.channel_capacity_eps(name)
        if load > capacity:
            problems.append(f"channel {name} would carry {float(load):.1f} events/s, capacity {float(capacity):.1f}")
    for name, router in topology.routers.items():
        load = reservations.router_load(name)
        if load:
            used_routers.add(name)
        if load > router.capacity_eps:
            problems.append(f"router {name} would forward {float(load):.1f} events/s, "
                            f"capacity {router.capacity_eps:.1f}")
    for name in sorted(used_routers & down):
        problems.append(f"router {name} is down and carries paths of this mode")
    return problems


@dataclass(frozen=True)
class PhaseTiming:
    cloud: str
    phase: int
    routers: int
    duration_ms: float

    @property
    def name(self) -> str:
        return PHASE_NAMES[self.phase]


@dataclass(frozen=True)
class ModeChange:
    previous_mode: int
    current_mode: int
    changed: bool
    duration_ms: float = 0.0
    phases: tuple[PhaseTiming, ...] = ()
    clouds: tuple[str, ...] = ()
    #: Routers that missed a phase after the point of no return; the supervisor rebuilds them.
    lagging: tuple[str, ...] = field(default=())


# -- the leaf broker's part -------------------------------------------------------------------------

class ModeCoordinator:
    """The leaf broker's operating modes: it owns the mode registry, the current mode and the change
    in progress; the routers are reached through the ``Cloud`` it is given."""

    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        #: Defined modes, id -> name (the registry; mode 0 "normal" until one is renamed).
        self.names: dict[int, str] = dict(DEFAULT_MODES)
        #: The mode the cloud's routers forward in.
        self.current = 0
        #: True while a five-phase change runs.
        self.changing = False
        #: Numbers the changes, so that routers tell a change's notices from an earlier one's.
        self.change_id = 0

    def load(self) -> None:
        """Restore the registry and the current mode from the store (a restarted broker)."""
        store = self.cloud.store
        self.current = int(store.get_meta("current_mode") or 0)
        raw = store.get_meta("modes")
        self.names = {int(k): v for k, v in json.loads(raw).items()} if raw else dict(DEFAULT_MODES)
        self.change_id = int(store.get_meta("mode_change_id") or 0)
        if self.current not in self.names:  # a state written before modes had names
            self.names[self.current] = f"mode-{self.current}"

    def define(self, mode: int, name: str) -> tuple[int, str]:
        self.names = define(self.names, mode, name)
        self.cloud.store.set_meta("modes", json.dumps({str(k): v for k, v in sorted(self.names.items())}))
        return mode, self.names[mode]

    def check_defined(self, modes: Iterable[int]) -> None:
        """A subscription may only name defined modes (a typo would silently never switch in)."""
        for m in modes:
            check_mode_id(m, field_name="qos.mode")
            if m not in self.names:
                raise NotFound(f"mode {m} is not defined; define it first (DefineMode)", reason="UnknownMode",
                               field="qos.mode")

    def subscription_counts(self) -> dict[int, int]:
        """How many subscriptions have a path in each mode."""
        counts: dict[int, int] = {}
        for record in self.cloud.state.subscriptions.values():
            for q in record.qos:
                counts[q.mode] = counts.get(q.mode, 0) + 1
        return counts

    async def change(self, target: int) -> ModeChange:
        """Switch the cloud to ``target`` in five phases; a no-op when it is already current."""
        name = self.cloud.name
        check_mode_id(target)
        if target not in self.names:
            raise NotFound(f"mode {target} is not defined; define it first (DefineMode)", reason="UnknownMode",
                           field="mode")
        if target == self.current and not self.changing:
            return ModeChange(target, target, False, clouds=(name,))
        if self.changing:
            raise ModeChangeInProgress(f"broker {name} is already changing mode; retry when it is done",
                                       field="mode")
        self.changing = True
        try:
            async with self.cloud.lock:
                return await self._change_locked(target)
        finally:
            self.changing = False

    async def _change_locked(self, target: int) -> ModeChange:
        cloud, st = self.cloud, self.cloud.state
        name, links, store = cloud.name, cloud.links, cloud.store
        previous = self.current
        if target == previous:
            return ModeChange(target, target, False, clouds=(name,))
        problems = check_switch(st.topology, st.reservations(target), st.down)
        if problems:
            raise CapacityExhausted(f"mode {target} cannot be switched to now: " + "; ".join(problems),
                                    field="mode")
        started = time.perf_counter()
        self.change_id += 1
        change_id = self.change_id
        store.set_meta("mode_change_id", change_id)
        routers = [n for n in sorted(links) if n not in st.down]
        skipped = [n for n in sorted(links) if n in st.down]
        edges = [n for n in routers if st.topology.routers[n].role.hosts_clients]
        inner = [n for n in routers if n not in edges]
        timings: list[PhaseTiming] = []

        async def phase(number: int, names: list[str], call: Callable[[RouterLink], Awaitable[Any]]) -> list[str]:
            t0 = time.perf_counter()
            failed = await call_routers(links, names, call, what="mode change")
            timings.append(PhaseTiming(name, number, len(names), (time.perf_counter() - t0) * 1000))
            return failed

        def notify(phase_kind: rpb.ModePhase.ValueType, mode: int) -> Callable[[RouterLink], Awaitable[Any]]:
            request = rpb.NotifyModeRequest(mode=mode, phase=phase_kind, previous_mode=previous, change_id=change_id)
            return lambda link: link.stub.NotifyMode(request, timeout=PHASE_TIMEOUT_S)

        set_new = rpb.SetModeRequest(mode=target)
        # Phases 1 and 2: nothing has switched yet, so a failure is undone.
        failed = await phase(1, edges, notify(rpb.MODE_PHASE_PREPARE, target))
        if not failed:
            failed = await phase(2, edges, lambda link: link.stub.PrepareMode(set_new, timeout=PHASE_TIMEOUT_S))
        if failed:
            await self._abandon(previous, edges, notify(rpb.MODE_PHASE_ABORT, previous))
            raise RouterUnavailable(f"mode change {previous} -> {target} abandoned: router(s) "
                                    f"{', '.join(failed)} did not answer; the cloud stays in mode {previous}",
                                    field="mode")
        # Phases 3-5: the point of no return; laggards are rebuilt into the new mode.
        lagging = await phase(3, inner, lambda link: link.stub.SetMode(set_new, timeout=PHASE_TIMEOUT_S))
        lagging += await phase(4, edges, lambda link: link.stub.SetMode(set_new, timeout=PHASE_TIMEOUT_S))
        self.current = target
        store.set_meta("current_mode", target)
        lagging += await phase(5, edges, notify(rpb.MODE_PHASE_COMMIT, target))
        for router in (*lagging, *skipped):
            cloud.supervisor.mark_dirty(router)
        if lagging:
            log.warning("broker %s: mode %d -> %d; routers %s missed a phase and will be rebuilt", name,
                        previous, target, ", ".join(sorted(set(lagging))))
        return ModeChange(previous, target, True, (time.perf_counter() - started) * 1000, tuple(timings),
                          (name,), tuple(sorted(set(lagging))))

    async def _abandon(self, previous: int, edges: list[str], tell: Callable[[RouterLink], Awaitable[Any]]) -> None:
        links = self.cloud.links
        back = rpb.SetModeRequest(mode=previous)
        failed = await call_routers(links, edges, lambda link: link.stub.SetMode(back, timeout=PHASE_TIMEOUT_S),
                                    what="mode change")
        await call_routers(links, edges, tell, what="mode change")
        for router in failed:
            self.cloud.supervisor.mark_dirty(router)


__all__ = ["DEFAULT_MODES", "PHASE_NAMES", "ModeChange", "ModeCoordinator", "PhaseTiming", "check_mode_id",
           "check_switch", "define", "resolve"]
