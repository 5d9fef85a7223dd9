"""The DNP3 application layer's headers and the master's requests, sans I/O (IEEE 1815-2012 clause 4).

A fragment starts with APPLICATION CONTROL -- FIR (0x80), FIN (0x40), CON (0x20), UNS (0x10) and a 4-bit
sequence number -- and the FUNCTION CODE; a response then carries the two internal indication octets (IIN)
and its objects (``objects.parse_objects``). The master asks with READ of the class objects (group 60),
confirms with CONFIRM, turns unsolicited responses on and off and clears the restart indication with WRITE
of g80v1 index 7.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

FIR = 0x80
FIN = 0x40
CON = 0x20
UNS = 0x10


class FunctionCode(enum.IntEnum):
    """The function codes the master sends or reads."""

    CONFIRM = 0x00
    READ = 0x01
    WRITE = 0x02
    ENABLE_UNSOLICITED = 0x14
    DISABLE_UNSOLICITED = 0x15
    RESPONSE = 0x81
    UNSOLICITED_RESPONSE = 0x82


class Iin(enum.IntFlag):
    """Internal indications: IIN1 in the low octet, IIN2 in the high one."""

    BROADCAST = 0x0001
    CLASS_1_EVENTS = 0x0002
    CLASS_2_EVENTS = 0x0004
    CLASS_3_EVENTS = 0x0008
    NEED_TIME = 0x0010
    LOCAL_CONTROL = 0x0020
    DEVICE_TROUBLE = 0x0040
    DEVICE_RESTART = 0x0080
    NO_FUNC_CODE_SUPPORT = 0x0100
    OBJECT_UNKNOWN = 0x0200
    PARAMETER_ERROR = 0x0400
    EVENT_BUFFER_OVERFLOW = 0x0800
    ALREADY_EXECUTING = 0x1000
    CONFIG_CORRUPT = 0x2000


#: The indications whose name goes to the stats line when a response carries them.
IIN_NAMES = {int(flag): str(flag.name).lower() for flag in Iin}
EVENTS_PENDING = Iin.CLASS_1_EVENTS | Iin.CLASS_2_EVENTS | Iin.CLASS_3_EVENTS

#: Group 60's variations: class 0 (static data) and classes 1, 2, 3 (events).
CLASS_0 = 1
CLASS_1 = 2
CLASS_2 = 3
CLASS_3 = 4
#: Qualifier 0x06: all objects, no range.
ALL_OBJECTS = 0x06


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    control: int
    function: int
    iin: int

    @property
    def sequence(self) -> int:
        return self.control & 0x0F

    @property
    def fir(self) -> bool:
        return bool(self.control & FIR)

    @property
    def fin(self) -> bool:
        return bool(self.control & FIN)

    @property
    def con(self) -> bool:
        return bool(self.control & CON)

    @property
    def unsolicited(self) -> bool:
        return bool(self.control & UNS)


def parse_response_header(fragment: bytes) -> ResponseHeader | None:
    """The header of a response fragment, or None when it is shorter than one."""
    if len(fragment) < 4:
        return None
    return ResponseHeader(fragment[0], fragment[1], fragment[2] | fragment[3] << 8)


def _control(sequence: int, *, uns: bool = False) -> int:
    return FIR | FIN | (UNS if uns else 0) | (sequence & 0x0F)


def class_objects(variations: tuple[int, ...]) -> bytes:
    return b"".join(bytes((60, v, ALL_OBJECTS)) for v in variations)


def read_request(sequence: int, variations: tuple[int, ...]) -> bytes:
    """READ of group 60 variations: (CLASS_1, CLASS_2, CLASS_3, CLASS_0) is the integrity poll."""
    return bytes((_control(sequence), FunctionCode.READ)) + class_objects(variations)


def confirm(sequence: int, *, unsolicited: bool) -> bytes:
    """CONFIRM of a response fragment; UNS echoes an unsolicited response's."""
    return bytes((_control(sequence, uns=unsolicited), FunctionCode.CONFIRM))


def unsolicited_request(sequence: int, *, enable: bool, variations: tuple[int, ...] = (CLASS_1, CLASS_2, CLASS_3)
                        ) -> bytes:
    function = FunctionCode.ENABLE_UNSOLICITED if enable else FunctionCode.DISABLE_UNSOLICITED
    return bytes((_control(sequence), function)) + class_objects(variations)


def clear_restart(sequence: int) -> bytes:
    """WRITE g80v1, qualifier 0x00 (one-octet start and stop) 7..7, value 0: clears IIN1.7."""
    return bytes((_control(sequence), FunctionCode.WRITE, 80, 1, 0x00, 7, 7, 0x00))
