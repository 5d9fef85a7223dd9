"""The IEC 104 option of every event the gateway publishes: the value's quality, cause and time tag.

An event's ``timestamp_ms`` is the CP56Time2a of a time-tagged type, as sent (read as UTC), or the
gateway's reception time for a type without one. Every event carries one option (docs/wire-format.md
3.3: routers forward options of any kind unchanged) of kind ``IEC104`` = 104 (0x68, the APDU's start
byte; docs/iec104.md, "Time and quality"):

* ``window`` (u16): bits 0-7 the quality descriptor as sent (QDS, SIQ or DIQ without the value:
  IV 0x80, NT 0x40, SB 0x20, BL 0x10, OV 0x01); bits 8-13 the cause of transmission (1 periodic,
  3 spontaneous, 20 interrogated, ...);
* ``bits`` (u32): bit 0 the time is the device's (a CP56Time2a); bit 1 its IV bit (the time is
  invalid); bit 2 its SU bit (summer time); bits 8-15 the type identification;
* ``value`` (f64): the common address of the ASDU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gridstat.core import wire
from gridstat.gateways.iec104 import cp56
from gridstat.gateways.iec104.asdu import PointValue, quality_text

#: The option kind (docs/iec104.md): 104, also the APDU start byte 0x68.
IEC104 = int(wire.OptionKind.IEC104)
DEVICE_TIME = 0x01
TIME_INVALID = 0x02
SUMMER_TIME = 0x04


@dataclass(frozen=True, slots=True)
class Quality:
    """What a subscriber reads back from an event's IEC104 option (``read_quality``)."""

    #: The quality bits as sent (``asdu.IV | NT | SB | BL | OV``).
    quality: int
    cot: int
    type_id: int
    common_address: int
    #: The timestamp is the outstation's CP56Time2a (else the gateway's reception time).
    device_time: bool
    time_invalid: bool
    summer_time: bool

    @property
    def good(self) -> bool:
        return self.quality == 0

    def __str__(self) -> str:
        return quality_text(self.quality)


def option(value: PointValue) -> wire.DerivedValue:
    """The IEC104 option of a value."""
    bits = value.type_id << 8
    if value.time_ms is not None:
        bits |= DEVICE_TIME
        if value.time_flags & cp56.TIME_INVALID:
            bits |= TIME_INVALID
        if value.time_flags & cp56.SUMMER_TIME:
            bits |= SUMMER_TIME
    return wire.DerivedValue(IEC104, (value.cot & 0x3F) << 8 | value.quality, float(value.common_address), bits)


def read_quality(options: Iterable[wire.DerivedValue]) -> Quality | None:
    """The IEC104 option of an event's options, or None without one."""
    for o in options:
        if o.kind == IEC104:
            b = o.bits
            ca = o.value
            return Quality(o.window & 0xFF, o.window >> 8 & 0x3F, b >> 8 & 0xFF,
                           int(ca) if ca == ca and 0 <= ca <= 0xFFFF else 0, bool(b & DEVICE_TIME),
                           bool(b & TIME_INVALID), bool(b & SUMMER_TIME))
    return None
