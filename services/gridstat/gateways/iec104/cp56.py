"""CP56Time2a, the seven-octet time tag of IEC 60870-5-4 6.8 ("binary time 2a") used by -104's
time-tagged types, to and from milliseconds since 1970-01-01 UTC.

| octet | bits | field |
|---|---|---|
| 1-2 | 16 | milliseconds in the minute, 0 .. 59,999, little endian |
| 3 | 0-5, 7 | minutes 0 .. 59; IV (the time is invalid) |
| 4 | 0-4, 7 | hours 0 .. 23; SU (summer time) |
| 5 | 0-4, 5-7 | day of month 1 .. 31; day of week 1 .. 7 (0: not used) |
| 6 | 0-3 | month 1 .. 12 |
| 7 | 0-6 | year 0 .. 99 (2000 .. 2099, as lib60870 reads it) |

The gateway reads the tag as UTC (docs/iec104.md, "Time and quality"): an outstation set to local
time shifts every timestamp by its offset, which the gateway cannot know.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass

from gridstat.gateways.iec104.errors import DropReason, Iec104Error

SIZE = 7
#: Bits of ``flags``: the IV bit of the minutes octet and the SU bit of the hours octet.
TIME_INVALID = 0x01
SUMMER_TIME = 0x02

_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True, slots=True)
class Cp56Time:
    epoch_ms: int
    #: ``TIME_INVALID`` | ``SUMMER_TIME``.
    flags: int = 0


def decode(data: bytes | memoryview, offset: int = 0) -> Cp56Time:
    """The tag at ``offset``; raises Iec104Error (``bad_time``, ``truncated``) when it is not a date."""
    if len(data) - offset < SIZE:
        raise Iec104Error(DropReason.TRUNCATED, f"CP56Time2a needs 7 bytes, {len(data) - offset} left",
                          field="CP56Time2a")
    ms = data[offset] | data[offset + 1] << 8
    minute, hour, day, month, year = (data[offset + 2] & 0x3F, data[offset + 3] & 0x1F, data[offset + 4] & 0x1F,
                                      data[offset + 5] & 0x0F, data[offset + 6] & 0x7F)
    if ms > 59_999 or minute > 59 or hour > 23 or year > 99 or not 1 <= month <= 12 \
            or not 1 <= day <= _DAYS_IN_MONTH[month - 1]:
        raise Iec104Error(DropReason.BAD_TIME, f"not a time: {year:02d}-{month:02d}-{day:02d} {hour:02d}:"
                          f"{minute:02d} +{ms} ms", field="CP56Time2a")
    flags = (TIME_INVALID if data[offset + 2] & 0x80 else 0) | (SUMMER_TIME if data[offset + 3] & 0x80 else 0)
    seconds = calendar.timegm((2000 + year, month, day, hour, minute, 0, 0, 0, 0))
    return Cp56Time(seconds * 1000 + ms, flags)


def encode(epoch_ms: int, flags: int = 0) -> bytes:
    """The tag of a UTC time in 2000 .. 2099 (a test peer's and the benchmark's outstation's)."""
    seconds, ms_in_s = divmod(epoch_ms, 1000)
    t = time.gmtime(seconds)
    if not 2000 <= t.tm_year <= 2099:
        raise ValueError(f"CP56Time2a holds the years 2000 .. 2099, not {t.tm_year}")
    ms = t.tm_sec * 1000 + ms_in_s
    return bytes((ms & 0xFF, ms >> 8, t.tm_min | (0x80 if flags & TIME_INVALID else 0),
                  t.tm_hour | (0x80 if flags & SUMMER_TIME else 0), t.tm_mday | ((t.tm_wday + 1) << 5),
                  t.tm_mon, t.tm_year - 2000))
