"""What the outstation said, turned into what to publish, sans I/O (docs/dnp3.md, "Variables").

``PointTable.update`` takes the points of a response: a periodic variable keeps its latest value, flags
and device time; an alert variable gives an ``Alert`` for every event object and for every static value
whose value or flags differ from the last one known (kept across reconnections, so an integrity poll after
a reconnect repeats nothing that did not change). ``due(now_ms)`` gives the periodic variables' latest
values at each instant of their interval's grid (``now_ms - now_ms % interval_ms``); a variable with no
value yet is left out. Clock readings come in; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridstat.core import wire
from gridstat.gateways.dnp3.mapping import PointMap, PointSpec
from gridstat.gateways.dnp3.objects import Point, PointKind, TimeSource
from gridstat.gateways.dnp3.quality import quality_option
from gridstat.gateways.dnp3.stats import Dnp3Stats


@dataclass(frozen=True, slots=True)
class Alert:
    spec: PointSpec
    #: The device time of an event with time, else the gateway's reading when it arrived.
    ts_ms: int
    value: float | bool
    option: wire.DerivedValue


@dataclass(slots=True)
class _Latest:
    spec: PointSpec
    value: float | bool | None = None
    option: wire.DerivedValue | None = None
    flags: int = -1


class PointTable:
    """The latest value of every point, and the periodic schedule."""

    def __init__(self, names: PointMap, outstation: int, *, stats: Dnp3Stats | None = None) -> None:
        self.names = names
        self.outstation = outstation
        self.stats = stats or Dnp3Stats()
        self._points: dict[tuple[PointKind, int], _Latest | None] = {}
        #: Periodic variables by interval, and each interval's next instant.
        self._periodic: dict[int, list[_Latest]] = {}
        self._next_ms: dict[int, int] = {}
        #: Variables met for the first time since the last ``take_new``: to register.
        self._new: list[PointSpec] = []

    def take_new(self) -> list[PointSpec]:
        new, self._new = self._new, []
        return new

    def specs(self) -> list[PointSpec]:
        return [p.spec for p in self._points.values() if p is not None]

    def _latest(self, kind: PointKind, index: int) -> _Latest | None:
        key = (kind, index)
        try:
            return self._points[key]
        except KeyError:
            spec = self.names.spec(self.outstation, kind, index)
            latest = None if spec is None else _Latest(spec)
            self._points[key] = latest
            if latest is not None and spec is not None:
                self._new.append(spec)
                if not spec.alert:
                    self._periodic.setdefault(spec.interval_ms, []).append(latest)
            return latest

    def update(self, points: list[Point], now_ms: int) -> list[Alert]:
        alerts: list[Alert] = []
        points_map = self._points
        for p in points:
            latest = points_map.get((p.kind, p.index)) or self._latest(p.kind, p.index)
            if latest is None:
                self.stats.points_unmapped += 1
                continue
            option = quality_option(p.flags, p.time_ms, p.time_source)
            if latest.spec.alert and (p.event or p.value != latest.value or p.flags != latest.flags):
                ts = p.time_ms if p.time_source is not TimeSource.NONE else now_ms
                alerts.append(Alert(latest.spec, ts, p.value, option))
            latest.value = p.value
            latest.flags = p.flags
            latest.option = option
        return alerts

    def due(self, now_ms: int) -> list[tuple[int, list[tuple[PointSpec, float | bool, wire.DerivedValue]]]]:
        """``(ts_ms, [(spec, value, option), ...])`` per interval whose instant came."""
        out = []
        for interval, group in self._periodic.items():
            nxt = self._next_ms.get(interval)
            if nxt is not None and now_ms < nxt:
                continue
            ts = now_ms - now_ms % interval
            self._next_ms[interval] = ts + interval
            values = [(p.spec, p.value, p.option) for p in group if p.value is not None and p.option is not None]
            if values:
                out.append((ts, values))
        return out

    def next_due_ms(self) -> int | None:
        """The earliest instant a periodic variable is due (None: none has a value yet)."""
        return min(self._next_ms.values(), default=None)
