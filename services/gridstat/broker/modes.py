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

Resources: every mode's paths were admitted against the capacities, and each router forwards
under exactly one table at a time, so a channel never carries more than the larger of its two
modes' reservations. ``check_switch`` re-checks the target mode against today's topology
(capacities may have shrunk, routers may be down) before anything is touched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gridstat.broker.installer import RouterLink, RouterUnavailable, call_routers
from gridstat.broker.topology import RouterRole, Topology
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
    from gridstat.broker.resources import Reservations
    from gridstat.broker.state import CloudState
    from gridstat.broker.store import BrokerStore
    from gridstat.broker.supervisor import RouterSupervisor

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

class ModesMixin:
    """LeafBroker's mode commands; LeafBroker provides the state, links, lock and store."""

    name: str
    state: CloudState
    links: dict[str, RouterLink]
    lock: asyncio.Lock
    store: BrokerStore
    supervisor: RouterSupervisor
    current_mode: int
    modes: dict[int, str]
    mode_changing: bool
    mode_change_id: int

    def _load_modes(self) -> None:
        raw = self.store.get_meta("modes")
        self.modes = {int(k): v for k, v in json.loads(raw).items()} if raw else dict(DEFAULT_MODES)
        self.mode_change_id = int(self.store.get_meta("mode_change_id") or 0)
        if self.current_mode not in self.modes:  # a state written before modes had names
            self.modes[self.current_mode] = f"mode-{self.current_mode}"

    def define_mode(self, mode: int, name: str) -> tuple[int, str]:
        self.modes = define(self.modes, mode, name)
        self.store.set_meta("modes", json.dumps({str(k): v for k, v in sorted(self.modes.items())}))
        return mode, self.modes[mode]

    def check_modes_defined(self, modes: Iterable[int]) -> None:
        """A subscription may only name defined modes (a typo would silently never switch in)."""
        for m in modes:
            check_mode_id(m, field_name="qos.mode")
            if m not in self.modes:
                raise NotFound(f"mode {m} is not defined; define it first (DefineMode)", reason="UnknownMode",
                               field="qos.mode")

    def mode_subscriptions(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for record in self.state.subscriptions.values():
            for q in record.qos:
                counts[q.mode] = counts.get(q.mode, 0) + 1
        return counts

    async def change_mode(self, target: int) -> ModeChange:
        """Switch the cloud to ``target`` in five phases; a no-op when it is already current."""
        check_mode_id(target)
        if target not in self.modes:
            raise NotFound(f"mode {target} is not defined; define it first (DefineMode)", reason="UnknownMode",
                           field="mode")
        if target == self.current_mode and not self.mode_changing:
            return ModeChange(target, target, False, clouds=(self.name,))
        if self.mode_changing:
            raise ModeChangeInProgress(f"broker {self.name} is already changing mode; retry when it is done",
                                       field="mode")
        self.mode_changing = True
        try:
            async with self.lock:
                return await self._change_locked(target)
        finally:
            self.mode_changing = False

    async def _change_locked(self, target: int) -> ModeChange:
        previous = self.current_mode
        if target == previous:
            return ModeChange(target, target, False, clouds=(self.name,))
        problems = check_switch(self.state.topology, self.state.reservations(target), self.state.down)
        if problems:
            raise CapacityExhausted(f"mode {target} cannot be switched to now: " + "; ".join(problems),
                                    field="mode")
        started = time.perf_counter()
        self.mode_change_id += 1
        change_id = self.mode_change_id
        self.store.set_meta("mode_change_id", change_id)
        routers = [n for n in sorted(self.links) if n not in self.state.down]
        skipped = [n for n in sorted(self.links) if n in self.state.down]
        edges = [n for n in routers if self.state.topology.routers[n].role is RouterRole.EDGE]
        inner = [n for n in routers if n not in edges]
        timings: list[PhaseTiming] = []

        async def phase(number: int, names: list[str], call: Callable[[RouterLink], Awaitable[Any]]) -> list[str]:
            t0 = time.perf_counter()
            failed = await call_routers(self.links, names, call, what="mode change")
            timings.append(PhaseTiming(self.name, number, len(names), (time.perf_counter() - t0) * 1000))
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
        self.current_mode = target
        self.store.set_meta("current_mode", target)
        lagging += await phase(5, edges, notify(rpb.MODE_PHASE_COMMIT, target))
        for name in (*lagging, *skipped):
            self.supervisor.mark_dirty(name)
        if lagging:
            log.warning("broker %s: mode %d -> %d; routers %s missed a phase and will be rebuilt", self.name,
                        previous, target, ", ".join(sorted(set(lagging))))
        return ModeChange(previous, target, True, (time.perf_counter() - started) * 1000, tuple(timings),
                          (self.name,), tuple(sorted(set(lagging))))

    async def _abandon(self, previous: int, edges: list[str], tell: Callable[[RouterLink], Awaitable[Any]]) -> None:
        back = rpb.SetModeRequest(mode=previous)
        failed = await call_routers(self.links, edges, lambda link: link.stub.SetMode(back, timeout=PHASE_TIMEOUT_S),
                                    what="mode change")
        await call_routers(self.links, edges, tell, what="mode change")
        for name in failed:
            self.supervisor.mark_dirty(name)


__all__ = ["DEFAULT_MODES", "PHASE_NAMES", "ModeChange", "ModesMixin", "PhaseTiming", "check_mode_id",
           "check_switch", "define", "resolve"]
