"""The time of a C37.118 frame: SOC, FRACSEC over TIME_BASE, and the message time quality byte.

Every frame carries SOC (seconds since 1970-01-01 UTC, leap seconds not counted) and FRACSEC, whose
low 24 bits count fractions of a second in units of 1/TIME_BASE and whose high byte is the message time
quality (C37.118.2-2011 6.2.2, Tables 3 and 4). The time is ``SOC + FRACSEC / TIME_BASE``: kept here as
the three integers and offered as an exact ``Fraction`` or floored integer nanoseconds, never as a
float (a float of today's SOC has no room left for the sub-microsecond part).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction

#: FRACSEC's fraction-of-second count is its low 24 bits (6.2, Table 2); TIME_BASE is 24 bits too.
FRACSEC_MASK = 0xFF_FFFF
MAX_TIME_BASE = 0xFF_FFFF
SECONDS_PER_DAY = 86_400
_NS_PER_S = 1_000_000_000
_US_PER_S = 1_000_000


class MessageTimeQuality(enum.IntEnum):
    """FRACSEC bits 27-24: the worst-case error of the time in this message (6.2.2, Table 4)."""

    LOCKED = 0x0
    WITHIN_1NS = 0x1
    WITHIN_10NS = 0x2
    WITHIN_100NS = 0x3
    WITHIN_1US = 0x4
    WITHIN_10US = 0x5
    WITHIN_100US = 0x6
    WITHIN_1MS = 0x7
    WITHIN_10MS = 0x8
    WITHIN_100MS = 0x9
    WITHIN_1S = 0xA
    WITHIN_10S = 0xB
    #: 0xC to 0xE are not assigned by Table 4; kept so a peer's value survives a round trip.
    UNASSIGNED_C = 0xC
    UNASSIGNED_D = 0xD
    UNASSIGNED_E = 0xE
    CLOCK_FAILURE = 0xF


@dataclass(frozen=True, slots=True)
class TimeQuality:
    """FRACSEC bits 31-24 (6.2.2, Table 3). Bit 7 is reserved: read as anything, written as 0."""

    message_time_quality: MessageTimeQuality = MessageTimeQuality.LOCKED
    #: Bit 4: a leap second is due within the next 60 s (cleared in the second after it).
    leap_second_pending: bool = False
    #: Bit 5: a leap second occurred in the last 24 h.
    leap_second_occurred: bool = False
    #: Bit 6: the pending or occurred leap second is a deletion (0: an insertion).
    leap_second_deletion: bool = False

    def to_byte(self) -> int:
        return (self.leap_second_deletion << 6 | self.leap_second_occurred << 5
                | self.leap_second_pending << 4 | self.message_time_quality)


#: All clear: the clock is locked to UTC and no leap second is near (the builders' default).
LOCKED_TO_UTC = TimeQuality()


def _quality_of(byte: int) -> TimeQuality:
    return TimeQuality(MessageTimeQuality(byte & 0x0F), bool(byte & 0x10), bool(byte & 0x20), bool(byte & 0x40))


#: Every quality byte decoded once: the hot path indexes this tuple instead of building an object.
TIME_QUALITIES: tuple[TimeQuality, ...] = tuple(_quality_of(b) for b in range(256))


def split_fracsec(fracsec_word: int) -> tuple[int, TimeQuality]:
    """The 32-bit FRACSEC word as (fraction-of-second count, time quality)."""
    return fracsec_word & FRACSEC_MASK, TIME_QUALITIES[fracsec_word >> 24]


def join_fracsec(fracsec: int, quality: TimeQuality) -> int:
    """The 32-bit FRACSEC word of a count and a time quality."""
    return quality.to_byte() << 24 | fracsec


@dataclass(frozen=True, slots=True)
class Timestamp:
    """An exact frame time: ``soc + fracsec / time_base`` seconds since 1970-01-01 UTC.

    ``soc`` does not count leap seconds (6.2, Table 2): during an inserted leap second the SOC of
    the following midnight is sent with the pending bit still set (6.2.3), which
    ``is_inserted_leap_second`` recognises.
    """

    soc: int
    #: The 24-bit fraction-of-second count, in units of 1/``time_base`` s.
    fracsec: int
    #: TIME_BASE of the stream's configuration (6.4, Table 9): counts per second.
    time_base: int
    quality: TimeQuality = LOCKED_TO_UTC

    @property
    def seconds(self) -> Fraction:
        """Seconds since the epoch, exactly."""
        return self.soc + Fraction(self.fracsec, self.time_base)

    @property
    def unix_ns(self) -> int:
        """Nanoseconds since the epoch, floored; exact when ``time_base`` divides 10**9."""
        return self.soc * _NS_PER_S + self.fracsec * _NS_PER_S // self.time_base

    @property
    def unix_us(self) -> int:
        """Microseconds since the epoch, floored; exact when ``time_base`` divides 10**6."""
        return self.soc * _US_PER_S + self.fracsec * _US_PER_S // self.time_base

    @property
    def is_exact_in_ns(self) -> bool:
        return self.fracsec * _NS_PER_S % self.time_base == 0

    @property
    def is_inserted_leap_second(self) -> bool:
        """This is the 23:59:60 of an inserted leap second (6.2.3, "Added leap second")."""
        q = self.quality
        return q.leap_second_pending and not q.leap_second_deletion and self.soc % SECONDS_PER_DAY == 0

    @classmethod
    def from_unix_ns(cls, unix_ns: int, *, time_base: int, quality: TimeQuality = LOCKED_TO_UTC) -> Timestamp:
        """The timestamp nearest below ``unix_ns`` on the ``time_base`` grid (for builders)."""
        soc, ns = divmod(unix_ns, _NS_PER_S)
        return cls(soc, ns * time_base // _NS_PER_S, time_base, quality)
