"""What every C37.118 frame shares: SYNC, FRAMESIZE, IDCODE, SOC, FRACSEC first and CHK last.

Layout (C37.118.2-2011 6.2, Table 2; big-endian throughout)::

    0  u8  0xAA
    1  u8  bit 7 reserved (0), bits 6-4 frame type, bits 3-0 version
    2  u16 FRAMESIZE     bytes in the frame, CHK included
    4  u16 IDCODE        the data stream (source of data, configuration and header; destination of commands)
    6  u32 SOC           seconds since 1970-01-01 UTC (timestamps.py)
    10 u32 FRACSEC       time quality byte, then the 24-bit fraction-of-second count
    14 ... the frame type's fields
    -2 u16 CHK           CRC-CCITT of everything before it: polynomial 0x1021, initial value 0xFFFF,
                         no reflection and no final mask (6.2.1)

``read_head`` checks a complete frame's framing; ``seal`` wraps a body into a frame. Both are pure.
"""

from __future__ import annotations

import binascii
import enum
import struct
from dataclasses import dataclass

from gridstat.errors import ValidationError
from gridstat.gateways.c37118.errors import DropReason, FrameError, bad_field
from gridstat.gateways.c37118.timestamps import FRACSEC_MASK, TIME_QUALITIES, TimeQuality

SYNC_BYTE = 0xAA
#: FRAMESIZE is a u16 (6.2, Table 2).
MAX_FRAME_SIZE = 0xFFFF
HEAD = struct.Struct(">BBHHII")
HEAD_SIZE = HEAD.size  # 14
CHK_SIZE = 2
#: The smallest frame of any type: the common fields and CHK.
MIN_FRAME_SIZE = HEAD_SIZE + CHK_SIZE
#: Version 1 for the frames of C37.118-2005, version 2 for CFG-3, added in 2011 (6.2.1).
VERSION_2005 = 1
VERSION_2011 = 2


class FrameType(enum.IntEnum):
    """SYNC bits 6-4 (6.2, Table 2)."""

    DATA = 0
    HEADER = 1
    CFG1 = 2
    CFG2 = 3
    COMMAND = 4
    CFG3 = 5


#: The smallest FRAMESIZE of each type: a command has CMD; CFG-1/2 have TIME_BASE, NUM_PMU and
#: DATA_RATE; a CFG-3 frame (or fragment) has CONT_IDX.
MIN_SIZE_OF_TYPE: dict[FrameType, int] = {
    FrameType.DATA: MIN_FRAME_SIZE,
    FrameType.HEADER: MIN_FRAME_SIZE,
    FrameType.CFG1: MIN_FRAME_SIZE + 8,
    FrameType.CFG2: MIN_FRAME_SIZE + 8,
    FrameType.COMMAND: MIN_FRAME_SIZE + 2,
    FrameType.CFG3: MIN_FRAME_SIZE + 2,
}
#: Indexed by the SYNC's second byte: the smallest FRAMESIZE, or 0 where the byte is not a valid
#: frame type and version (bit 7 set, type 6 or 7, version 0). The splitter's resync test.
MIN_SIZE_OF_SYNC: tuple[int, ...] = tuple(
    MIN_SIZE_OF_TYPE[FrameType(b >> 4)] if b < 0x80 and (b >> 4) <= FrameType.CFG3 and b & 0x0F else 0
    for b in range(256)
)


def crc_ccitt(data: bytes | bytearray | memoryview) -> int:
    """CHK (6.2.1): CRC-CCITT, polynomial 0x1021, initial value 0xFFFF, no reflection, no final mask."""
    return binascii.crc_hqx(data, 0xFFFF)


@dataclass(frozen=True, slots=True)
class FrameHead:
    """The common fields of a received frame."""

    frame_type: FrameType
    version: int
    idcode: int
    soc: int
    fracsec: int
    time_quality: TimeQuality


def read_head(frame: bytes, *, check_crc: bool = True) -> FrameHead:
    """Check the framing of one complete frame (SYNC, FRAMESIZE, CHK) and read its common fields
    (``check_crc`` False: CHK was checked already, by the splitter).

    Raises:
        FrameError: ``bad_sync``, ``truncated`` (shorter than FRAMESIZE), ``bad_size`` (longer than
            FRAMESIZE, or FRAMESIZE too small for the type) or ``bad_crc``.
    """
    if len(frame) < 4:
        raise FrameError(DropReason.TRUNCATED, f"{len(frame)} bytes, not even SYNC and FRAMESIZE",
                         field="FRAMESIZE", value=len(frame))
    if frame[0] != SYNC_BYTE or not MIN_SIZE_OF_SYNC[frame[1]]:
        raise FrameError(DropReason.BAD_SYNC, f"SYNC {frame[0]:02x}{frame[1]:02x}", field="SYNC",
                         value=frame[:2].hex())
    size = frame[2] << 8 | frame[3]
    if size < MIN_SIZE_OF_SYNC[frame[1]]:
        raise FrameError(DropReason.BAD_SIZE, f"FRAMESIZE {size} below the minimum of its type",
                         field="FRAMESIZE", value=size)
    if len(frame) < size:
        raise FrameError(DropReason.TRUNCATED, f"{len(frame)} bytes of a {size}-byte frame",
                         field="FRAMESIZE", value=size)
    if len(frame) > size:
        raise FrameError(DropReason.BAD_SIZE, f"{len(frame)} bytes for FRAMESIZE {size}",
                         field="FRAMESIZE", value=size)
    chk = frame[-2] << 8 | frame[-1]
    if check_crc and crc_ccitt(memoryview(frame)[:-2]) != chk:
        raise FrameError(DropReason.BAD_CRC, f"CHK {chk:04x} does not match", field="CHK", value=chk)
    _, sync, _, idcode, soc, fracsec_word = HEAD.unpack_from(frame)
    return FrameHead(FrameType(sync >> 4), sync & 0x0F, idcode, soc, fracsec_word & FRACSEC_MASK,
                     TIME_QUALITIES[fracsec_word >> 24])


def expect_type(head: FrameHead, *types: FrameType) -> None:
    if head.frame_type not in types:
        raise bad_field("SYNC", head.frame_type.name, f"expected {'/'.join(t.name for t in types)}")


def check_range(field: str, value: int, lo: int, hi: int) -> None:
    """Builders' argument check: ``lo <= value <= hi`` or ValidationError naming the field."""
    if not lo <= value <= hi:
        raise ValidationError(f"{field}={value} is outside {lo}..{hi}", field=field)


def seal(frame_type: FrameType, *, version: int, idcode: int, soc: int, fracsec: int,
         time_quality: TimeQuality, body: bytes) -> bytes:
    """The complete frame: common fields, ``body``, CHK.

    Raises:
        ValidationError: a common field out of range, or the frame longer than 65535 bytes.
    """
    check_range("version", version, 1, 15)
    check_range("IDCODE", idcode, 0, 0xFFFF)
    check_range("SOC", soc, 0, 0xFFFF_FFFF)
    check_range("FRACSEC", fracsec, 0, FRACSEC_MASK)
    size = HEAD_SIZE + len(body) + CHK_SIZE
    check_range("FRAMESIZE", size, MIN_FRAME_SIZE, MAX_FRAME_SIZE)
    head = HEAD.pack(SYNC_BYTE, frame_type << 4 | version, size, idcode, soc,
                     time_quality.to_byte() << 24 | fracsec)
    out = head + body
    return out + crc_ccitt(out).to_bytes(2, "big")
