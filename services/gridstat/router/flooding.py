"""Limited flooding in a status router (dissertation 5.3.2, Fig 5.1).

A flooded variable skips the routing algorithm inside its hierarchical scope: a router
forwards the *first* copy of each of its events to every event channel of level 1..L
(``L`` = the flooding level, 1 = this cloud), never back to the channel the copy came
in on, and drops the later copies. Channels of a higher level keep their normal,
rate-filtered routes, so subscriptions outside the scope never notice the flooding.

What this module keeps, per router:

* the flooding setting per (variable, mode): level, publication interval, alert flag,
  and the shared :class:`FloodState` holding ``m_lastFlood``, the timestamp of the last
  flooded event (``testAndSetFlooded``);
* the level table (``m_levelTbl``): the router's channels by their hierarchy level.

``RoutingTable`` asks :meth:`FloodTable.plan` whenever it compiles a (variable, mode)
and keeps the returned :class:`FloodPlan` on the compiled entry (``CompiledEntry.flood``),
so the forwarding loop pays one attribute test per event for variables that are not
flooded. A plan lists the flood targets (the alert queue of each channel in scope) and
the names of those channels; the entry's normal routes are compiled without them, since
they get every event anyway. A flooded variable has a compiled entry even where it has
no route at all.

Who gets a flooded copy:

* router channels of level <= L (with an address);
* subscriber channels of level <= L that either carry a route of the variable in that
  mode (the subscription then sees every event while it is flooded, as in 5.3.3) or
  have ``flood_all`` set (a flood-all subscription, 5.1);
* nothing else: publisher channels are inbound only, and other channels (condensation
  slots) keep their normal routes.

Flooded copies go into the alert queue of each channel, as ``pushAlertEvent`` does.

The forged-timestamp attack (5.3.2): one injected event of a flooded variable with a
huge timestamp would set ``m_lastFlood`` everywhere in scope and block every later event.
Two mitigations are implemented here:

* clock check (the dissertation's mitigation 3): a flooded event stamped more than
  ``tolerance_ms`` ahead of the router's clock is dropped (``flood_clock``) before it
  can touch ``m_lastFlood``;
* periodic reset (mitigation 1): every ``reset_interval_ms`` each ``m_lastFlood`` ahead
  of the router's clock is brought back to the clock. The dissertation resets to 0,
  which lets a copy still in flight be flooded a second time; clamping to the clock
  clears anything a forger could have written and never re-floods a past event.

``m_lastFlood`` survives recompiles and level changes of a (variable, mode), so changing
the channels or the level never floods an event twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gridstat.core.model import MAX_MODES, PRIORITY_ALERT
from gridstat.core.wire import DropReason
from gridstat.errors import NotFound, ValidationError
from gridstat.router.channels import ChannelKind, EventChannel, PriorityQueue

#: Deepest hierarchy a flooding level may name (levels are broker heights, 1 = one cloud).
MAX_LEVEL = 64
#: Default clock check: a flooded event may be stamped at most this far ahead of the router.
DEFAULT_TOLERANCE_MS = 500
#: Default period of the reset of ``m_lastFlood`` (mitigation 1).
DEFAULT_RESET_INTERVAL_MS = 1_000

_R_DUPLICATE = DropReason.FLOOD_DUPLICATE.value
_R_CLOCK = DropReason.FLOOD_CLOCK.value


class FloodState:
    """``m_lastFlood`` of one (variable, mode): the timestamp of the last event flooded."""

    __slots__ = ("last_ms",)

    def __init__(self) -> None:
        self.last_ms = 0


class FloodPlan:
    """What the forwarding loop does with an event of a flooded variable (compiled, read only)."""

    __slots__ = ("channels", "drops", "level", "state", "targets", "tolerance_ms")

    def __init__(self, level: int, targets: tuple[tuple[EventChannel, PriorityQueue], ...], state: FloodState,
                 drops: Counter[str], tolerance_ms: int) -> None:
        self.level = level
        #: (channel, its alert queue) for every channel in scope, in name order.
        self.targets = targets
        #: Names of the channels in ``targets``: the entry's normal routes leave them out.
        self.channels = frozenset(ch.name for ch, _ in targets)
        self.state = state
        self.drops = drops
        self.tolerance_ms = tolerance_ms

    def forward(self, event: bytes, ts: int, source: EventChannel, now_ms: int) -> int:
        """Flood one event if it is the first copy: the number of channels it went to, or -1 if dropped.

        ``source`` is the channel the copy came in on; it never gets the copy back.
        """
        state = self.state
        if ts <= state.last_ms:
            self.drops[_R_DUPLICATE] += 1
            return -1
        if ts > now_ms + self.tolerance_ms:
            self.drops[_R_CLOCK] += 1
            return -1
        state.last_ms = ts
        n = 0
        for channel, target in self.targets:
            if channel is not source:
                target.push(event)
                n += 1
        return n


@dataclass
class FloodSetting:
    """The flooding of one variable in one mode, as the leaf broker set it."""

    level: int
    pub_interval_ms: int
    alert: bool
    state: FloodState


@dataclass(frozen=True)
class FloodingEntry:
    """One (variable, level) with the modes it is flooded to that level in (for listings)."""

    variable_id: int
    pub_interval_ms: int
    level: int
    modes: tuple[int, ...]
    alert: bool


class Refresher(Protocol):
    """What the flood table recompiles through: ``RoutingTable.refresh``."""

    def refresh(self, variable_id: int, mode: int) -> None: ...

    def pub_interval(self, variable_id: int) -> int:
        """The publication interval the variable is routed with; KeyError if it has no route."""
        ...


def check_modes(modes: Iterable[int], *, field: str = "modes") -> tuple[int, ...]:
    out = tuple(dict.fromkeys(modes))
    for m in out:
        if not 0 <= m < MAX_MODES:
            raise ValidationError(f"mode {m} is outside 0..{MAX_MODES - 1}", field=field)
    return out


class FloodTable:
    """The flooding settings and the level table of one router."""

    def __init__(self, table: Refresher, channels: Mapping[str, EventChannel], *, drops: Counter[str],
                 tolerance_ms: int = DEFAULT_TOLERANCE_MS,
                 reset_interval_ms: int = DEFAULT_RESET_INTERVAL_MS) -> None:
        if tolerance_ms < 0:
            raise ValidationError("the flooding clock tolerance must not be negative", field="flood_tolerance_ms")
        if reset_interval_ms <= 0:
            raise ValidationError("the flooding reset interval must be positive", field="flood_reset_ms")
        self._table = table
        self._channels = channels
        self.drops = drops
        self.tolerance_ms = tolerance_ms
        self.reset_interval_ms = reset_interval_ms
        self.settings: dict[tuple[int, int], FloodSetting] = {}
        #: ``m_levelTbl``: channels that can carry flooded copies, by level (rebuilt on channel changes).
        self.level_table: dict[int, list[EventChannel]] = {}
        self._next_reset_ms = 0
        #: Resets of ``m_lastFlood`` that moved a timestamp from the future back to the clock.
        self.resets = 0
        self._rebuild_levels()

    # -- settings (setupFlooding / terminateFlooding) ---------------------------------------------------
    def set(self, variable_id: int, *, pub_interval_ms: int, level: int, modes: Iterable[int],
            alert: bool = False) -> None:
        """Flood ``variable_id`` to ``level`` in ``modes``, replacing the level of modes already flooded.

        The publication interval must agree with the one the variable is routed with here, if any.
        """
        ms = check_modes(modes)
        if not ms:
            raise ValidationError("name at least one mode to flood in", field="modes")
        if not 1 <= level <= MAX_LEVEL:
            raise ValidationError(f"flooding level {level} is outside 1..{MAX_LEVEL}", field="level")
        if pub_interval_ms <= 0:
            raise ValidationError(f"publication interval must be positive, got {pub_interval_ms}",
                                  field="pub_interval_ms")
        try:
            routed_interval_ms: int | None = self._table.pub_interval(variable_id)
        except KeyError:
            routed_interval_ms = None
        if routed_interval_ms is not None and routed_interval_ms != pub_interval_ms:
            raise ValidationError(f"variable {variable_id} is routed with publication interval {routed_interval_ms} "
                                  f"ms, not {pub_interval_ms} ms", field="pub_interval_ms")
        for m in ms:
            old = self.settings.get((variable_id, m))
            state = old.state if old is not None else FloodState()
            self.settings[(variable_id, m)] = FloodSetting(level, pub_interval_ms, alert, state)
        for m in ms:
            self._table.refresh(variable_id, m)

    def remove(self, variable_id: int, modes: Iterable[int] = ()) -> int:
        """Stop flooding ``variable_id`` in ``modes`` (all its modes if none); returns how many were flooded.

        Idempotent: removing what is not flooded is not an error (a rebuild may repeat it).
        """
        ms = check_modes(modes) or tuple(m for v, m in self.settings if v == variable_id)
        gone = [m for m in ms if self.settings.pop((variable_id, m), None) is not None]
        for m in gone:
            self._table.refresh(variable_id, m)
        return len(gone)

    def setting(self, variable_id: int, mode: int) -> FloodSetting:
        s = self.settings.get((variable_id, mode))
        if s is None:
            raise NotFound(f"variable {variable_id} is not flooded in mode {mode}", field="variable_id")
        return s

    def entries(self) -> list[FloodingEntry]:
        """The settings grouped by (variable, level), modes in order."""
        groups: dict[tuple[int, int], list[int]] = {}
        info: dict[tuple[int, int], FloodSetting] = {}
        for (vid, mode), s in sorted(self.settings.items()):
            groups.setdefault((vid, s.level), []).append(mode)
            info[(vid, s.level)] = s
        return [FloodingEntry(vid, info[(vid, level)].pub_interval_ms, level, tuple(ms), info[(vid, level)].alert)
                for (vid, level), ms in groups.items()]

    def flooded_variables(self) -> int:
        return len({vid for vid, _ in self.settings})

    def flooded(self) -> list[tuple[int, int]]:
        """Every flooded (variable, mode)."""
        return list(self.settings)

    # -- the level table -------------------------------------------------------------------------------
    def channels_changed(self) -> None:
        """A channel was added, removed or changed: rebuild the level table and every flooded entry."""
        self._rebuild_levels()
        for vid, mode in list(self.settings):
            self._table.refresh(vid, mode)

    def _rebuild_levels(self) -> None:
        levels: dict[int, list[EventChannel]] = {}
        for ch in sorted(self._channels.values(), key=lambda c: c.name):
            if ch.address is not None and ch.kind in (ChannelKind.ROUTER, ChannelKind.SUBSCRIBER):
                levels.setdefault(ch.level, []).append(ch)
        self.level_table = levels

    # -- compiling (called by RoutingTable) ---------------------------------------------------------------
    def plan(self, variable_id: int, mode: int, routed: Collection[str]) -> FloodPlan | None:
        """The flood plan of a (variable, mode), or None if it is not flooded; ``routed`` names the
        channels the variable has routes on in that mode."""
        s = self.settings.get((variable_id, mode))
        if s is None:
            return None
        chosen: list[EventChannel] = []
        for level in range(1, s.level + 1):
            for ch in self.level_table.get(level, ()):
                if ch.kind is ChannelKind.ROUTER or ch.flood_all or ch.name in routed:
                    chosen.append(ch)
        chosen.sort(key=lambda c: c.name)
        return FloodPlan(s.level, tuple((ch, ch.queue(PRIORITY_ALERT)) for ch in chosen), s.state, self.drops,
                         self.tolerance_ms)

    def pub_interval(self, variable_id: int, mode: int) -> tuple[int, bool]:
        s = self.setting(variable_id, mode)
        return s.pub_interval_ms, s.alert

    # -- mitigation 1 ------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> int:
        """Run the periodic reset when it is due; returns how many timestamps it moved back."""
        if now_ms < self._next_reset_ms:
            return 0
        self._next_reset_ms = now_ms + self.reset_interval_ms
        return self.reset(now_ms)

    def reset(self, now_ms: int) -> int:
        """Bring every ``m_lastFlood`` that is ahead of ``now_ms`` back to it."""
        moved = 0
        for s in self.settings.values():
            if s.state.last_ms > now_ms:
                s.state.last_ms = now_ms
                moved += 1
        self.resets += moved
        return moved


__all__ = ["DEFAULT_RESET_INTERVAL_MS", "DEFAULT_TOLERANCE_MS", "MAX_LEVEL", "FloodPlan", "FloodSetting",
           "FloodState", "FloodTable", "FloodingEntry", "check_modes"]
