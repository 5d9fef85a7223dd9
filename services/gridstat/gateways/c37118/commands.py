"""Command frames: what a PDC asks of a PMU or PDC stream (C37.118.2-2011 6.6, Tables 14 and 15).

Layout after the common fields (IDCODE is the destination stream)::

    14 u16 CMD           the command (``Command``; 0x0100-0x0FFF user-defined)
    16 ... EXTFRAME      extended frame data, 0 to 65518 bytes, user-defined
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from gridstat.gateways.c37118.framing import (
    CHK_SIZE,
    HEAD_SIZE,
    VERSION_2005,
    FrameHead,
    FrameType,
    check_range,
    expect_type,
    read_head,
    seal,
)
from gridstat.gateways.c37118.timestamps import LOCKED_TO_UTC, TimeQuality

_CMD = struct.Struct(">H")


class Command(enum.IntEnum):
    """CMD codes (6.6, Table 15)."""

    DATA_OFF = 0x01
    DATA_ON = 0x02
    SEND_HEADER = 0x03
    SEND_CFG1 = 0x04
    SEND_CFG2 = 0x05
    #: Optional: a device need not implement CFG-3.
    SEND_CFG3 = 0x06
    EXTENDED_FRAME = 0x08


_COMMANDS = frozenset(Command)


@dataclass(frozen=True, slots=True)
class CommandFrame:
    idcode: int
    soc: int
    fracsec: int
    #: A ``Command``, or a user-defined code (``is_user_defined``), or a reserved one as received.
    command: int
    extended_frame: bytes = b""
    time_quality: TimeQuality = LOCKED_TO_UTC
    version: int = VERSION_2005

    @property
    def is_user_defined(self) -> bool:
        """Codes 0000 yyyy xxxx xxxx with yyyy not 0 are for user designation (Table 15)."""
        return self.command >> 12 == 0 and (self.command >> 8) & 0x0F != 0


def parse_command_frame(frame: bytes, *, head: FrameHead | None = None) -> CommandFrame:
    """Parse a command frame. Raises FrameError on bad framing (``read_head``)."""
    if head is None:
        head = read_head(frame)
    expect_type(head, FrameType.COMMAND)
    (cmd,) = _CMD.unpack_from(frame, HEAD_SIZE)
    return CommandFrame(head.idcode, head.soc, head.fracsec, Command(cmd) if cmd in _COMMANDS else cmd,
                        frame[HEAD_SIZE + _CMD.size:-CHK_SIZE], head.time_quality, head.version)


def build_command_frame(frame: CommandFrame) -> bytes:
    """The bytes of a command frame. Raises ValidationError for a value that does not fit its field."""
    check_range("CMD", frame.command, 0, 0xFFFF)
    return seal(FrameType.COMMAND, version=frame.version, idcode=frame.idcode, soc=frame.soc, fracsec=frame.fracsec,
                time_quality=frame.time_quality, body=_CMD.pack(frame.command) + frame.extended_frame)
