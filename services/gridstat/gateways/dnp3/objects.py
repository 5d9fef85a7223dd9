"""The objects of a response, sans I/O (IEEE 1815-2012, the application layer's objects): binary and analog
inputs with their flags and times out of a fragment; every other object sized and skipped.

Read: g1v1 and g1v2 (binary input), g2v1, g2v2 and g2v3 (binary input event: no time, absolute time,
time relative to the common time of occurrence g51v1/g51v2), g30v1..v6 (analog input), g32v1..v8 (analog
input event, v3, v4, v7, v8 with time). Objects without a flag octet (g1v1, g30v3, g30v4) are ONLINE.
Times are DNP3's: milliseconds since 1970-01-01 UTC, 48 bits. Objects of other groups the parser can size
(double-bit inputs, outputs, counters, time, IIN) are skipped; an object it cannot size ends the fragment
(``unknown_object``: the points before it are kept).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from gridstat.gateways.dnp3.drops import DropCounter, DropReason


class PointKind(enum.StrEnum):
    ANALOG_INPUT = "ai"
    BINARY_INPUT = "bi"


class Flags(enum.IntFlag):
    """Point flags as the standard defines them: the low five bits are common; bit 5 and 6 are OVER_RANGE and
    REFERENCE_ERR of an analog (CHATTER_FILTER of a binary), bit 7 the binary's STATE."""

    ONLINE = 0x01
    RESTART = 0x02
    COMM_LOST = 0x04
    REMOTE_FORCED = 0x08
    LOCAL_FORCED = 0x10
    OVER_RANGE = 0x20
    REFERENCE_ERR = 0x40
    STATE = 0x80


#: Flag names as the standard spells them, per kind (bit 5 of a binary is CHATTER_FILTER).
ANALOG_FLAG_NAMES = ("ONLINE", "RESTART", "COMM_LOST", "REMOTE_FORCED", "LOCAL_FORCED", "OVER_RANGE",
                     "REFERENCE_ERR", "RESERVED")
BINARY_FLAG_NAMES = ("ONLINE", "RESTART", "COMM_LOST", "REMOTE_FORCED", "LOCAL_FORCED", "CHATTER_FILTER",
                     "RESERVED", "STATE")


def flag_names(kind: PointKind, flags: int) -> list[str]:
    names = ANALOG_FLAG_NAMES if kind is PointKind.ANALOG_INPUT else BINARY_FLAG_NAMES
    return [n for bit, n in enumerate(names) if flags >> bit & 1]


class TimeSource(enum.IntEnum):
    """Where a point's time came from."""

    #: The object has no time (static data, g2v1, g32v1/v2/v5/v6).
    NONE = 0
    #: The object's own 48-bit time (g2v2, g32v3/v4/v7/v8).
    ABSOLUTE = 1
    #: g2v3: the common time of occurrence plus the object's 16-bit offset.
    RELATIVE = 2


@dataclass(frozen=True, slots=True)
class Point:
    kind: PointKind
    index: int
    value: float | bool
    #: The flag octet as sent (for a binary, with the state in bit 7); 0x01 for objects without one.
    flags: int
    #: Milliseconds since 1970 UTC (DNP3 time), or 0 with ``time_source`` NONE.
    time_ms: int
    time_source: TimeSource
    #: An event object (group 2 or 32), not static data.
    event: bool


# (value struct or None, has flags, has 48-bit time, has 16-bit relative time) per readable object.
_READ: dict[tuple[int, int], tuple[struct.Struct | None, bool, bool, bool]] = {
    (1, 2): (None, True, False, False),
    (2, 1): (None, True, False, False),
    (2, 2): (None, True, True, False),
    (2, 3): (None, True, False, True),
    (30, 1): (struct.Struct("<i"), True, False, False),
    (30, 2): (struct.Struct("<h"), True, False, False),
    (30, 3): (struct.Struct("<i"), False, False, False),
    (30, 4): (struct.Struct("<h"), False, False, False),
    (30, 5): (struct.Struct("<f"), True, False, False),
    (30, 6): (struct.Struct("<d"), True, False, False),
    (32, 1): (struct.Struct("<i"), True, False, False),
    (32, 2): (struct.Struct("<h"), True, False, False),
    (32, 3): (struct.Struct("<i"), True, True, False),
    (32, 4): (struct.Struct("<h"), True, True, False),
    (32, 5): (struct.Struct("<f"), True, False, False),
    (32, 6): (struct.Struct("<d"), True, False, False),
    (32, 7): (struct.Struct("<f"), True, True, False),
    (32, 8): (struct.Struct("<d"), True, True, False),
}


def _object_size(group: int, variation: int) -> int:
    if (group, variation) in _READ:
        fmt, flags, abs_time, rel_time = _READ[(group, variation)]
        return (fmt.size if fmt else 0) + flags + 6 * abs_time + 2 * rel_time
    return _SKIPPED.get((group, variation), -1)


#: Octets per object of the objects skipped; bits per object (negative, -bits) for packed ones.
_SKIPPED: dict[tuple[int, int], int] = {
    (1, 1): -1, (3, 1): -2, (3, 2): 1, (4, 1): 1, (4, 2): 7, (4, 3): 3, (10, 1): -1, (10, 2): 1, (11, 1): 1,
    (11, 2): 7, (20, 1): 5, (20, 2): 3, (20, 5): 4, (20, 6): 2, (21, 1): 5, (21, 2): 3, (21, 5): 11, (21, 6): 9,
    (21, 9): 4, (21, 10): 2, (22, 1): 5, (22, 2): 3, (22, 5): 11, (22, 6): 9, (23, 1): 5, (23, 2): 3,
    (23, 5): 11, (23, 6): 9, (40, 1): 5, (40, 2): 3, (40, 3): 5, (40, 4): 9, (42, 1): 5, (42, 2): 3,
    (42, 3): 11, (42, 4): 9, (42, 5): 5, (42, 6): 9, (42, 7): 11, (42, 8): 15, (50, 1): 6, (50, 3): 6,
    (50, 4): 11, (51, 1): 6, (51, 2): 6, (52, 1): 2, (52, 2): 2, (80, 1): -1,
}

_U16 = struct.Struct("<H")


def _time48(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 6], "little")


def parse_objects(fragment: bytes, start: int, drops: DropCounter) -> list[Point]:
    """Binary and analog inputs of a response's objects (from ``start``, after the IIN); never raises."""
    points: list[Point] = []
    n = len(fragment)
    pos = start
    cto_ms: int | None = None
    while pos < n:
        if n - pos < 3:
            drops.add(DropReason.TRUNCATED_OBJECT, n - pos)
            break
        group, variation, qualifier = fragment[pos], fragment[pos + 1], fragment[pos + 2]
        pos += 3
        prefix_code = qualifier >> 4 & 0x07
        range_code = qualifier & 0x0F
        # The range: (first index, count) for start-stop ranges, (None, count) for counts.
        if range_code in (0, 1, 2):
            width = (1, 2, 4)[range_code]
            if n - pos < 2 * width:
                drops.add(DropReason.TRUNCATED_OBJECT, n - pos)
                break
            first = int.from_bytes(fragment[pos:pos + width], "little")
            last = int.from_bytes(fragment[pos + width:pos + 2 * width], "little")
            pos += 2 * width
            if last < first:
                drops.add(DropReason.BAD_RANGE, n - pos)
                break
            first_index: int | None = first
            count = last - first + 1
        elif range_code in (7, 8, 9):
            width = (1, 2, 4)[range_code - 7]
            if n - pos < width:
                drops.add(DropReason.TRUNCATED_OBJECT, n - pos)
                break
            count = int.from_bytes(fragment[pos:pos + width], "little")
            pos += width
            first_index = None
        else:
            drops.add(DropReason.UNSUPPORTED_QUALIFIER, n - pos)
            break
        if prefix_code not in (0, 1, 2, 3) or (prefix_code and first_index is not None):
            drops.add(DropReason.UNSUPPORTED_QUALIFIER, n - pos)
            break
        prefix = (0, 1, 2, 4)[prefix_code]
        size = _object_size(group, variation)
        if size == -1 and (group, variation) not in _SKIPPED:
            drops.add(DropReason.UNKNOWN_OBJECT, n - pos)
            break
        if size < 0:  # packed bits: no prefix, a start-stop range
            bits = -size
            nbytes = (count * bits + 7) // 8
            if prefix or n - pos < nbytes:
                drops.add(DropReason.TRUNCATED_OBJECT if not prefix else DropReason.UNSUPPORTED_QUALIFIER, n - pos)
                break
            if (group, variation) == (1, 1):
                base = first_index or 0
                for i in range(count):
                    state = bool(fragment[pos + (i >> 3)] >> (i & 7) & 1)
                    points.append(Point(PointKind.BINARY_INPUT, base + i, state, 0x01 | (0x80 if state else 0), 0,
                                        TimeSource.NONE, False))
            pos += nbytes
            continue
        need = count * (prefix + size)
        if n - pos < need:
            drops.add(DropReason.TRUNCATED_OBJECT, n - pos)
            break
        read = _READ.get((group, variation))
        if read is None:
            if (group, variation) in ((51, 1), (51, 2)) and count:
                cto_ms = _time48(fragment, pos + need - 6)
            pos += need
            continue
        fmt, has_flags, abs_time, rel_time = read
        kind = PointKind.BINARY_INPUT if group in (1, 2) else PointKind.ANALOG_INPUT
        event = group in (2, 32)
        for i in range(count):
            if prefix:
                index = int.from_bytes(fragment[pos:pos + prefix], "little")
                pos += prefix
            else:
                index = (first_index or 0) + i
            flags = fragment[pos] if has_flags else 0x01
            p = pos + has_flags
            value: float | bool
            if fmt is None:
                value = bool(flags & 0x80)
            else:
                value = float(fmt.unpack_from(fragment, p)[0])
                p += fmt.size
            time_ms, source = 0, TimeSource.NONE
            if abs_time:
                time_ms, source = _time48(fragment, p), TimeSource.ABSOLUTE
            elif rel_time:
                if cto_ms is None:
                    drops.add(DropReason.NO_CTO)
                else:
                    time_ms, source = cto_ms + _U16.unpack_from(fragment, p)[0], TimeSource.RELATIVE
            points.append(Point(kind, index, value, flags, time_ms, source, event))
            pos += size
    return points
