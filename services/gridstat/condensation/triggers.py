"""When a condensation function calculates (dissertation 7.2.2).

Three built-in triggers, as in GridStat:

* **time**: every ``interval_ms``, at the instants aligned to it (ms since the epoch
  divisible by the interval, like a publisher's GPS-aligned timestamps); the output
  is a periodic variable at that interval, so the routers' rate filter treats it like
  any publisher's.
* **events**: after ``count`` of the n inputs have delivered a new (unfiltered) event
  since the last calculation. ``count = n`` (or 0) gives a periodic output at the
  largest input interval; ``count = 1`` a sporadic one.
* **alerts**: after ``count`` alert events (``count = 0`` means 1); the output is
  aperiodic. Typical use: monitor periodic inputs, calculate only when an alert input
  fires.

The runtime triggers below keep only counters; the latest values live in the
function's input table (``calculators.InputTable``), shared with the calculator.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gridstat.errors import ValidationError

#: Longest time-trigger interval: one day, the longest publication interval a variable may have.
MAX_INTERVAL_MS = 86_400_000


class TriggerKind(enum.IntEnum):
    """Wire values of ``gridstat.v1.TriggerKind`` (0, unspecified, means TIME)."""

    TIME = 1
    EVENTS = 2
    ALERTS = 3

    @classmethod
    def parse(cls, value: int | str, *, field: str = "spec.trigger.kind") -> TriggerKind:
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ValidationError(f"trigger kind {value!r} is not time, events or alerts", field=field) from None
        if value == 0:
            return cls.TIME
        try:
            return cls(value)
        except ValueError:
            raise ValidationError(f"trigger kind {value} is not 1 (time), 2 (events) or 3 (alerts)",
                                  field=field) from None


@dataclass(frozen=True, slots=True)
class Trigger:
    kind: TriggerKind = TriggerKind.TIME
    interval_ms: int = 0
    count: int = 0

    def validate(self, *, field: str = "spec.trigger") -> Trigger:
        if self.kind is TriggerKind.TIME:
            if not 1 <= self.interval_ms <= MAX_INTERVAL_MS:
                raise ValidationError(f"a time trigger needs 1 <= interval_ms <= {MAX_INTERVAL_MS}, "
                                      f"got {self.interval_ms}", field=f"{field}.interval_ms")
        elif self.count < 0:
            raise ValidationError(f"trigger count must not be negative, got {self.count}", field=f"{field}.count")
        return self

    def check_inputs(self, n_inputs: int, *, field: str = "spec.trigger") -> None:
        """An events trigger cannot wait for more inputs than the function has."""
        if self.kind is TriggerKind.EVENTS and self.count > n_inputs:
            raise ValidationError(f"an events trigger with count {self.count} waits for more than the "
                                  f"{n_inputs} input(s)", field=f"{field}.count")


class TimeTrigger:
    """Fires at every multiple of ``interval_ms``; a late tick fires once, for the latest instant."""

    __slots__ = ("interval_ms", "last_fired_ms")

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.last_fired_ms: int | None = None

    def next_due_ms(self, now_ms: int) -> int:
        """The next aligned instant strictly after ``now_ms`` (when the host should tick next)."""
        return (now_ms // self.interval_ms + 1) * self.interval_ms

    def due(self, now_ms: int) -> int | None:
        """The aligned instant to calculate for at ``now_ms``, or None if it was done already."""
        instant = now_ms - now_ms % self.interval_ms
        if self.last_fired_ms is not None and instant <= self.last_fired_ms:
            return None
        self.last_fired_ms = instant
        return instant


class EventTrigger:
    """Fires once ``count`` distinct inputs have updated since the last firing."""

    __slots__ = ("count", "updated")

    def __init__(self, count: int, n_inputs: int) -> None:
        self.count = count if count > 0 else n_inputs
        self.updated: set[int] = set()

    def update(self, input_index: int) -> bool:
        self.updated.add(input_index)
        if len(self.updated) >= self.count:
            self.updated.clear()
            return True
        return False


class AlertTrigger:
    """Fires on every ``count``-th alert event."""

    __slots__ = ("count", "seen")

    def __init__(self, count: int) -> None:
        self.count = max(1, count)
        self.seen = 0

    def alert(self) -> bool:
        self.seen += 1
        if self.seen >= self.count:
            self.seen = 0
            return True
        return False
