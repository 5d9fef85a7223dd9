"""Per-variable, per-mode routing tables in GridStat's two variants (dissertation 4.2-4.3).

The leaf broker installs one *route* per subscription path per hop: "in mode m,
send variable v on outgoing channel c at subscription interval s with priority p".
The table keeps those routes as the source of truth and compiles, per
(variable, mode), the structure the forwarding loop walks:

* **close** (Fig 4.3): per outgoing channel the sorted smallest non-multiple
  intervals; the first interval that passes an event sends it on that channel.
  Best when a variable's intervals are close together.
* **sparse** (Fig 4.4): one holder per distinct interval with the bit mask of the
  channels that hold it; pass 1 ORs the masks of passing intervals, pass 2 sends
  on the flagged channels. Best when intervals are spread out.

Both compile from the same routes and must select exactly the same channels
(a property test checks it). Compiling happens on table changes only, which are
rare; forwarding reads ``active`` (the compiled dict of the current mode), so a
mode switch is one pointer swap (dissertation 6.3.2, phase 3).

Each channel appears at most once per compiled entry, which is GridStat's
multicast: one copy per channel per timestamp, however many subscriptions share
the channel.

Overload handling (HAPS, docs/overload.md) is compiled in too, so the forwarding
loop never computes it: each route carries a price and a best-effort flag; the
target of a channel that is shaped carries the sum of the prices of the entry's
routes on it and whether one of them is guaranteed (``Target.valued``), and the
routes of a *shed unit* (a channel's best-effort or guaranteed routes, shed by
``router.shedding`` under CPU overload) are compiled to a ``ShedTarget`` that only
counts what they would have sent.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gridstat.core import filtering
from gridstat.core.model import MAX_MODES, PRIORITIES, PRIORITY_ALERT, TEMPORARY_MODE_SLOT
from gridstat.errors import NotFound, ValidationError

if TYPE_CHECKING:
    from gridstat.router.flooding import FloodPlan, FloodTable

MODE_SLOTS = MAX_MODES + 1  # sixteen modes and the temporary slot of edge routers
#: The largest price a route may carry (router.shaping keeps value sums below its GUARANTEED offset).
MAX_PRICE = 1e9


class Variant(enum.Enum):
    CLOSE = "close"
    SPARSE = "sparse"

    @classmethod
    def parse(cls, text: str) -> Variant:
        try:
            return cls(text)
        except ValueError:
            raise ValidationError(f"routing variant {text!r} is not 'close' or 'sparse'",
                                  field="variant") from None


class Target(Protocol):
    """What a compiled entry pushes an event to: one priority queue of one channel."""

    #: Events of a routed variable this channel did not want at their timestamp.
    filtered: int

    def push(self, event: bytes) -> None: ...


#: Resolves (channel name, priority) to the target queue; raises NotFound for an unknown channel.
#: A resolved target with a ``valued(value, guaranteed, count)`` method (a channel's queue) is asked for
#: the target that carries an entry's value: itself, or on a shaped channel one that feeds the shaper.
Resolver = Callable[[str, int], Target]


class ShedTarget:
    """Where a shed unit's routes point (link shedding): it counts the events they would have sent."""

    __slots__ = ("channel", "events", "filtered")

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.events = 0
        self.filtered = 0

    def push(self, event: bytes) -> None:
        self.events += 1


@dataclass(frozen=True, slots=True)
class Route:
    """One hop of one subscription path in one mode (cf. ``setupPath``, dissertation A)."""

    route_id: str
    variable_id: int
    mode: int
    channel: str
    sub_interval_ms: int
    priority: int
    version: int = 0
    #: What one delivered event of this route is worth (HAPS ``maxprice``): orders shedding.
    price: float = 1.0
    #: Not admitted with a guarantee: shed before every guaranteed route.
    best_effort: bool = False

    def __post_init__(self) -> None:
        if not self.route_id:
            raise ValidationError("route_id must not be empty", field="route_id")
        if not 0 <= self.mode < MODE_SLOTS:
            raise ValidationError(f"mode {self.mode} is outside 0..{MODE_SLOTS - 1}", field="mode")
        if self.sub_interval_ms <= 0:
            raise ValidationError(f"subscription interval must be positive, got {self.sub_interval_ms}",
                                  field="sub_interval_ms")
        if self.priority not in PRIORITIES:
            raise ValidationError(f"priority {self.priority} is outside 0..6", field="priority")
        if not self.channel:
            raise ValidationError("channel must not be empty", field="channel")
        if not (isinstance(self.price, int | float) and math.isfinite(self.price) and 0 <= self.price <= MAX_PRICE):
            raise ValidationError(f"price {self.price!r} is outside 0..{MAX_PRICE:g}", field="price")


class CompiledEntry:
    """What the forwarding loop reads for one variable in one mode.

    ``flood`` is None unless the variable is flooded in that mode (``router.flooding``); then the
    close and sparse structures hold only the routes on channels outside the flooding scope.
    """

    __slots__ = ("close", "flood", "full_mask", "half", "plain", "pub", "scale", "sparse_holders", "sparse_targets")

    def __init__(self, pub: int, close: tuple[tuple[Target, tuple[int, ...]], ...],
                 sparse_holders: tuple[tuple[int, int], ...], sparse_targets: tuple[Target, ...],
                 flood: FloodPlan | None = None, frames_per_s: int = 0) -> None:
        # The rule runs on ``ts * scale``: milliseconds, or 1/R ms at a frame rate R, where ``pub`` is
        # one frame and the intervals in ``close``/``sparse_holders`` whole frames (core/filtering.py).
        self.scale, self.pub, self.half = filtering.filter_scale(pub, frames_per_s)
        self.close = close
        self.sparse_holders = sparse_holders
        self.sparse_targets = sparse_targets
        self.full_mask = (1 << len(sparse_targets)) - 1
        self.flood = flood
        #: Neither flooded nor at a frame rate: the forwarding loop's short way.
        self.plain = flood is None and self.scale == 1


def select_close(entry: CompiledEntry, ts_ms: int) -> list[Target]:
    """Reference walk of a close entry (the router inlines the same loop)."""
    shifted = ts_ms * entry.scale + entry.half
    pub = entry.pub
    out = []
    for target, elements in entry.close:
        for s in elements:
            if shifted % s < pub:
                out.append(target)
                break
    return out


def select_sparse(entry: CompiledEntry, ts_ms: int) -> list[Target]:
    """Reference walk of a sparse entry (the router inlines the same loop)."""
    shifted = ts_ms * entry.scale + entry.half
    pub = entry.pub
    mask = 0
    for s, bits in entry.sparse_holders:
        if shifted % s < pub:
            mask |= bits
    return [t for i, t in enumerate(entry.sparse_targets) if mask >> i & 1]


class _VariableRoutes:
    __slots__ = ("alert", "frames_per_s", "modes", "pub_interval_ms")

    def __init__(self, pub_interval_ms: int, alert: bool, frames_per_s: int = 0) -> None:
        self.pub_interval_ms = pub_interval_ms
        self.alert = alert
        self.frames_per_s = frames_per_s
        self.modes: list[dict[str, Route]] = [{} for _ in range(MODE_SLOTS)]


class RoutingTable:
    """The routes of one router and their compiled form for the current mode."""

    def __init__(self, variant: Variant, resolve: Resolver) -> None:
        self.variant = variant
        self._resolve = resolve
        self._vars: dict[int, _VariableRoutes] = {}
        self._compiled: list[dict[int, CompiledEntry]] = [{} for _ in range(MODE_SLOTS)]
        self.current_mode = 0
        #: The compiled entries of the current mode: the forwarding loop's only read.
        self.active: dict[int, CompiledEntry] = self._compiled[0]
        #: Bumped on every applied change, so the management plane can tell whether it is in step.
        self.table_version = 0
        #: The mode the temporary slot was filled from (phase 2 of a mode change).
        self._temporary_from = 0
        #: Limited flooding settings (``router.flooding``), asked at every compile; None = no flooding.
        self.flooding: FloodTable | None = None
        #: Shed units (channel, best_effort): their routes compile to a ShedTarget (``router.shedding``).
        self.shed_units: set[tuple[str, bool]] = set()
        self.shed_targets: dict[tuple[str, bool], ShedTarget] = {}

    # -- changes ------------------------------------------------------------
    def install(self, route: Route, *, pub_interval_ms: int, alert: bool = False, frames_per_s: int = 0) -> Route:
        """Add or replace a route; the interval is rounded down to a multiple of pubInt (whole frames
        at a device frame rate, docs/frame-rates.md).

        Replaying a route with a version lower than the installed one is a no-op,
        so a retried or reordered control call never undoes a newer one.
        """
        if pub_interval_ms <= 0:
            raise ValidationError(f"publication interval must be positive, got {pub_interval_ms}",
                                  field="pub_interval_ms")
        if frames_per_s:
            filtering.check_frames_per_s(frames_per_s)
            if alert or pub_interval_ms != filtering.nominal_interval_ms(frames_per_s):
                raise ValidationError(f"variable {route.variable_id} at {frames_per_s} frames/s needs publication "
                                      f"interval {1000 // frames_per_s} ms and no alert flag, got "
                                      f"{pub_interval_ms} ms", field="pub_interval_ms")
        self._resolve(route.channel, route.priority)  # unknown channel -> NotFound before any change
        vr = self._vars.get(route.variable_id)
        if vr is None:
            vr = self._vars[route.variable_id] = _VariableRoutes(pub_interval_ms, alert, frames_per_s)
        elif vr.pub_interval_ms != pub_interval_ms or vr.frames_per_s != frames_per_s:
            raise ValidationError(
                f"variable {route.variable_id} is routed with publication interval {vr.pub_interval_ms} ms"
                f"{f' at {vr.frames_per_s} frames/s' if vr.frames_per_s else ''}, not {pub_interval_ms} ms"
                f"{f' at {frames_per_s} frames/s' if frames_per_s else ''}; change it with set_pub_interval",
                field="pub_interval_ms")
        existing = vr.modes[route.mode].get(route.route_id)
        if existing is not None and existing.version > route.version:
            return existing
        rounded = filtering.round_down_interval(route.sub_interval_ms, pub_interval_ms, frames_per_s)
        if rounded != route.sub_interval_ms:
            route = dataclasses.replace(route, sub_interval_ms=rounded)
        vr.alert = vr.alert or alert
        vr.modes[route.mode][route.route_id] = route
        self._recompile(route.variable_id, route.mode)
        return route

    def remove(self, route_id: str, variable_id: int, mode: int) -> Route:
        vr = self._vars.get(variable_id)
        route = vr.modes[mode].pop(route_id, None) if vr is not None and 0 <= mode < MODE_SLOTS else None
        if route is None:
            raise NotFound(f"no route {route_id!r} for variable {variable_id} in mode {mode}", field="route_id")
        self._recompile(variable_id, mode)
        assert vr is not None
        if not any(vr.modes):
            del self._vars[variable_id]  # empty entries are deleted (dissertation 4.2.2)
        return route

    def remove_channel_routes(self, channel: str) -> list[Route]:
        removed = [r for r in self.routes() if r.channel == channel]
        for r in removed:
            self.remove(r.route_id, r.variable_id, r.mode)
        return removed

    def set_pub_interval(self, variable_id: int, pub_interval_ms: int) -> None:
        vr = self._vars.get(variable_id)
        if vr is None:
            raise NotFound(f"variable {variable_id} has no routes", field="variable_id")
        if pub_interval_ms <= 0:
            raise ValidationError("publication interval must be positive", field="pub_interval_ms")
        vr.pub_interval_ms = pub_interval_ms
        vr.frames_per_s = 0  # a new period in whole milliseconds
        for mode, routes in enumerate(vr.modes):
            for rid, r in list(routes.items()):
                routes[rid] = dataclasses.replace(
                    r, sub_interval_ms=filtering.round_down_interval(r.sub_interval_ms, pub_interval_ms))
            self._recompile(variable_id, mode)

    def set_mode(self, mode: int) -> None:
        """Switch the current mode: a pointer swap, as in phase 3 of the mode change."""
        if not 0 <= mode < MODE_SLOTS:
            raise ValidationError(f"mode {mode} is outside 0..{MODE_SLOTS - 1}", field="mode")
        self.current_mode = mode
        self.active = self._compiled[mode]
        self.table_version += 1

    def prepare_temporary(self, new_mode: int) -> int:
        """Phase 2 of a mode change at an edge router (dissertation 6.3.2): fill the temporary
        slot with the current mode's entries of the variables routed in both the current and
        ``new_mode``, then switch to it. Old-only streams stop here, so load only falls; common
        streams keep their old interval until phase 4 switches this router to ``new_mode``.
        Returns the number of variables kept.
        """
        if not 0 <= new_mode < MAX_MODES:
            raise ValidationError(f"mode {new_mode} is outside 0..{MAX_MODES - 1}", field="mode")
        current = self.current_mode
        if current == TEMPORARY_MODE_SLOT:
            return len(self._compiled[TEMPORARY_MODE_SLOT])  # a repeated phase 2: already prepared
        old, new = self._compiled[current], self._compiled[new_mode]
        temporary = self._compiled[TEMPORARY_MODE_SLOT]
        temporary.clear()
        temporary.update((vid, entry) for vid, entry in old.items() if vid in new)
        self._temporary_from = current
        self.set_mode(TEMPORARY_MODE_SLOT)
        return len(temporary)

    def recompile_all(self) -> None:
        """Rebuild every compiled entry, e.g. after a channel's queues were replaced."""
        for var_id, vr in self._vars.items():
            for mode in range(MODE_SLOTS):
                if vr.modes[mode]:
                    self._recompile(var_id, mode)
        if self.flooding is not None:
            for var_id, mode in self.flooding.flooded():
                self._recompile(var_id, mode)

    def refresh(self, variable_id: int, mode: int) -> None:
        """Recompile one (variable, mode), e.g. after its flooding changed."""
        self._recompile(variable_id, mode)

    def set_shed(self, channel: str, best_effort: bool, shed: bool) -> list[int]:
        """Shed (or reintegrate) the unit of ``channel``'s best-effort or guaranteed routes in every mode;
        returns the variable ids whose entries changed."""
        unit = (channel, best_effort)
        if (unit in self.shed_units) == shed:
            return []
        if shed:
            self.shed_units.add(unit)
            self.shed_targets.setdefault(unit, ShedTarget(channel))
        else:
            self.shed_units.discard(unit)
        touched: set[tuple[int, int]] = {(r.variable_id, r.mode) for r in self.routes()
                                         if r.channel == channel and r.best_effort == best_effort}
        for variable_id, mode in sorted(touched):
            self._recompile(variable_id, mode)
        return sorted({v for v, _ in touched})

    def units(self, mode: int | None = None) -> dict[tuple[str, bool], list[Route]]:
        """The routes of ``mode`` (default: the current one) grouped by shedding unit (channel, best_effort)."""
        mode = self.current_mode if mode is None else mode
        if mode == TEMPORARY_MODE_SLOT:
            mode = self._temporary_from
        out: dict[tuple[str, bool], list[Route]] = {}
        for vr in self._vars.values():
            for r in vr.modes[mode].values():
                out.setdefault((r.channel, r.best_effort), []).append(r)
        return out

    # -- reading ------------------------------------------------------------
    def routes(self) -> Iterator[Route]:
        for vr in list(self._vars.values()):
            for routes in vr.modes:
                yield from list(routes.values())

    def has(self, route_id: str, variable_id: int, mode: int) -> bool:
        vr = self._vars.get(variable_id)
        return vr is not None and 0 <= mode < MODE_SLOTS and route_id in vr.modes[mode]

    def pub_interval(self, variable_id: int) -> int:
        return self._vars[variable_id].pub_interval_ms

    def frames_per_s(self, variable_id: int) -> int:
        return self._vars[variable_id].frames_per_s

    def entry(self, variable_id: int, mode: int | None = None) -> CompiledEntry | None:
        return self._compiled[self.current_mode if mode is None else mode].get(variable_id)

    def __len__(self) -> int:
        return sum(len(m) for vr in self._vars.values() for m in vr.modes)

    # -- compiling ----------------------------------------------------------
    def _recompile(self, variable_id: int, mode: int) -> None:
        self._compile(variable_id, mode)
        if self.current_mode == TEMPORARY_MODE_SLOT and mode == self._temporary_from:
            # A change to the old mode during a mode change reaches the temporary slot too,
            # so it never forwards to a removed channel's queues.
            temporary = self._compiled[TEMPORARY_MODE_SLOT]
            if variable_id in temporary:
                entry = self._compiled[mode].get(variable_id)
                if entry is None:
                    del temporary[variable_id]
                else:
                    temporary[variable_id] = entry

    def _compile(self, variable_id: int, mode: int) -> None:
        self.table_version += 1
        compiled = self._compiled[mode]
        vr = self._vars.get(variable_id)
        routes = vr.modes[mode] if vr is not None else {}
        flood = None
        if self.flooding is not None:
            flood = self.flooding.plan(variable_id, mode, {r.channel for r in routes.values()})
        if flood is None and (not routes or vr is None):
            compiled.pop(variable_id, None)
            return
        # Key (channel, 0) holds the live routes of a channel; (channel, 1) and (channel, 2) its shed
        # guaranteed and best-effort routes, which only count (link shedding).
        by_channel: dict[tuple[str, int], list[Route]] = {}
        shed_units = self.shed_units
        for r in routes.values():
            if flood is None or r.channel not in flood.channels:  # flooded channels get every event
                part = (2 if r.best_effort else 1) if shed_units and (r.channel, r.best_effort) in shed_units else 0
                by_channel.setdefault((r.channel, part), []).append(r)
        if vr is not None:
            pub, frames_per_s = vr.pub_interval_ms, vr.frames_per_s
        else:  # flooded here without any route
            assert self.flooding is not None
            pub, frames_per_s = self.flooding.pub_interval(variable_id, mode)[0], 0
        targets: list[Target] = []
        elements: list[tuple[int, ...]] = []
        # An alert variable's events are aperiodic: the interval grid of the rate filter (4.1) would
        # drop every alert off it, so every alert passes (its rate is the publisher's min_interval_ms at
        # most; docs/management-plane.md, "Alerts").
        alert = vr is not None and vr.alert
        for key in sorted(by_channel):
            channel, part = key
            rs = by_channel[key]
            # Alerts bypass FIFO: an alert variable uses the alert queue of every channel.
            priority = PRIORITY_ALERT if vr is not None and vr.alert else min(r.priority for r in rs)
            target: Target
            if part:
                unit = (channel, part == 2)
                target = self.shed_targets.setdefault(unit, ShedTarget(channel))
            else:
                target = self._resolve(channel, priority)
                valued = getattr(target, "valued", None)
                if valued is not None:
                    target = valued(sum(r.price for r in rs), any(not r.best_effort for r in rs), len(rs))
            targets.append(target)
            elements.append(filtering.smallest_non_multiples(
                filtering.scaled_interval(pub if alert else r.sub_interval_ms, pub, frames_per_s) for r in rs))
        close = tuple(zip(targets, elements, strict=True))
        masks: dict[int, int] = {}
        for i, elems in enumerate(elements):
            for s in elems:
                masks[s] = masks.get(s, 0) | (1 << i)
        sparse = tuple(sorted(masks.items()))
        compiled[variable_id] = CompiledEntry(pub, close, sparse, tuple(targets), flood, frames_per_s)


__all__ = ["MAX_PRICE", "MODE_SLOTS", "TEMPORARY_MODE_SLOT", "CompiledEntry", "Route", "RoutingTable", "ShedTarget",
           "Target", "Variant", "select_close", "select_sparse"]
