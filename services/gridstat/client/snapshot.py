"""Snapshot groups: in-phase sets of temporally related variables (group subscription, 2.1.5).

Why this works at all: publishers stamp GPS-aligned timestamps and Function 4.1 keeps or drops
equal-interval variables *as a set* at every hop (4.1, 4.2.1), so the members of a snapshot
arrive with the same timestamp. A group collects members' values per aligned timestamp (within
the smallest publication interval of the members, as the seed's ``eventsReceived`` does) and
fires once when the set is complete. Sets that can no longer complete are discarded and counted.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from gridstat.core import clock
from gridstat.errors import DuplicateName, NotFound, ValidationError

from .holders import Holder
from .subscription import call_guarded

if TYPE_CHECKING:
    from .subscription import Subscription

log = logging.getLogger(__name__)

#: Incomplete sets kept at most; older ones are discarded first.
MAX_PENDING = 64


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One complete in-phase set; ``values`` is read-only and keyed by ``publisher/variable``."""

    ts_ms: int
    values: Mapping[str, object]


@dataclass
class GroupStats:
    complete: int = 0
    incomplete: int = 0
    callback_errors: int = 0


SnapshotCallback = Callable[["SnapshotGroup", Snapshot], None]


class SnapshotGroup:
    """A named set of subscriptions delivered together (``createGroupSubscription`` in the seed)."""

    def __init__(
        self,
        name: str,
        members: Iterable[Subscription] = (),
        *,
        history: int = 1,
        on_snapshot: SnapshotCallback | None = None,
        max_age_ms: int | None = None,
    ) -> None:
        if history < 1:
            raise ValidationError(f"snapshot history must be at least 1, got {history}", field="history")
        self.name = name
        self.on_snapshot = on_snapshot
        self.stats = GroupStats()
        self._history: deque[Snapshot] = deque(maxlen=history)
        self._members: dict[str, Subscription] = {}
        self._pending: dict[int, dict[str, object]] = {}
        self._last_complete: int | None = None
        self._fixed_age = max_age_ms
        self._window = 1
        self._max_age = 0
        for sub in members:
            self.add(sub)

    # -- membership (may change at runtime, 2.1.5) -------------------------------------------------
    @property
    def members(self) -> tuple[Subscription, ...]:
        return tuple(self._members.values())

    def add(self, sub: Subscription) -> None:
        if sub.full_name in self._members:
            raise DuplicateName(f"group {self.name!r} already has {sub.full_name!r}", field="variable")
        self._members[sub.full_name] = sub
        sub.groups.append(self)
        self._resize()

    def remove(self, sub: Subscription) -> None:
        if self._members.get(sub.full_name) is not sub:
            raise NotFound(f"group {self.name!r} has no member {sub.full_name!r}", field="variable")
        del self._members[sub.full_name]
        if self in sub.groups:
            sub.groups.remove(self)
        for values in self._pending.values():
            values.pop(sub.full_name, None)
        self._resize()

    def _resize(self) -> None:
        subs = self._members.values()
        self._window = min((s.pub_interval_ms for s in subs), default=1)
        if self._fixed_age is not None:
            self._max_age = self._fixed_age
        else:
            # Long enough for the slowest member to arrive within its budget.
            self._max_age = max((4 * s.interval_ms + s.latency_ms for s in subs), default=0)

    # -- reading (atomic: snapshots are immutable and replaced whole) -------------------------------
    def latest(self) -> Snapshot | None:
        return self._history[-1] if self._history else None

    def history(self, n: int | None = None) -> list[Snapshot]:
        """The last ``n`` complete sets (all kept when None), oldest first."""
        items = list(self._history)
        return items if n is None else items[-n:] if n > 0 else []

    # -- the event path ------------------------------------------------------------------------------
    def offer(self, sub: Subscription, holder: Holder) -> Snapshot | None:
        """Add one member's delivered event; returns the snapshot if it completed a set."""
        key = clock.align_ms(holder.timestamp_ms, self._window)
        if self._last_complete is not None and key <= self._last_complete:
            return None  # that set was completed or already counted as incomplete
        pending = self._pending
        values = pending.get(key)
        if values is None:
            values = pending[key] = {}
            self._prune(key)
        values[sub.full_name] = holder.value
        if len(values) < len(self._members):
            return None
        del pending[key]
        # Every member has delivered ``key``; members only move forward, so older sets are dead.
        for old in [k for k in pending if k < key]:
            del pending[old]
            self.stats.incomplete += 1
        snap = Snapshot(key, MappingProxyType(values))
        self._last_complete = key
        self._history.append(snap)
        self.stats.complete += 1
        if self.on_snapshot is not None and not call_guarded(
                self.on_snapshot, (self, snap), f"group {self.name}", self.stats.callback_errors):
            self.stats.callback_errors += 1
        return snap

    def _prune(self, newest: int) -> None:
        """Discard sets older than the age bound, and the oldest beyond ``MAX_PENDING``."""
        pending = self._pending
        limit = newest - self._max_age
        for old in [k for k in pending if k < limit]:
            del pending[old]
            self.stats.incomplete += 1
        while len(pending) > MAX_PENDING:
            del pending[min(pending)]
            self.stats.incomplete += 1

    @property
    def pending(self) -> int:
        return len(self._pending)
