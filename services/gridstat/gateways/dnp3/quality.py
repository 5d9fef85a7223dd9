"""A point's flags and device time on every event: the DNP3_QUALITY option (docs/dnp3.md, "Time and
quality").

An event's option (docs/wire-format.md 3.3, ``>HHId``; routers carry kinds they do not know as is) of
kind 0x1815 (IEEE 1815, DNP3's number): ``window`` the point's flag octet as the outstation sent it
(ONLINE, RESTART, COMM_LOST, REMOTE_FORCED, LOCAL_FORCED, OVER_RANGE, REFERENCE_ERR; a binary's state
in bit 7), ``bits`` where the device time came from (``objects.TimeSource``: 0 none, 1 the object's own
48-bit time, 2 common time of occurrence plus offset), ``value`` the device time in milliseconds since
1970-01-01 UTC (DNP3 time, exact in a float64), 0 without one.
"""

from __future__ import annotations

from collections.abc import Iterable

from gridstat.core import wire
from gridstat.gateways.dnp3.objects import TimeSource

#: The option's kind: 0x1815, after IEEE 1815 (DNP3).
DNP3_QUALITY = int(wire.OptionKind.DNP3)

_NO_TIME: dict[int, wire.DerivedValue] = {}


def quality_option(flags: int, time_ms: int, source: TimeSource) -> wire.DerivedValue:
    """The DNP3_QUALITY option of a value (shared objects for the common no-time case)."""
    if source is TimeSource.NONE:
        option = _NO_TIME.get(flags)
        if option is None:
            option = _NO_TIME[flags] = wire.DerivedValue(DNP3_QUALITY, flags & 0xFF, 0.0, 0)
        return option
    return wire.DerivedValue(DNP3_QUALITY, flags & 0xFF, float(time_ms), int(source))


def read_quality(options: Iterable[wire.DerivedValue]) -> tuple[int, TimeSource, int] | None:
    """``(flags, time source, device time ms)`` of an event's DNP3_QUALITY option; None without one."""
    for o in options:
        if o.kind == DNP3_QUALITY:
            try:
                source = TimeSource(o.bits)
            except ValueError:
                return None
            t = o.value
            if t != t or not 0 <= t < 2 ** 48:
                return None
            return o.window & 0xFF, source, int(t)
    return None
