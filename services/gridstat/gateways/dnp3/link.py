"""The DNP3 data link layer, sans I/O (IEEE 1815-2012 clause 9): frames out of a TCP byte stream, and the
master's frames built.

A frame is a 10-octet header -- start octets 0x05 0x64, LENGTH, CONTROL, DESTINATION and SOURCE (16 bits,
low octet first) and the header's CRC -- then the user data in blocks of at most 16 octets, each followed
by its CRC. LENGTH counts CONTROL, the addresses and the user data (5 .. 255). ``LinkDecoder.feed`` takes
any bytes and returns the frames whole and valid; everything else is a counted drop (``drops``): octets
before a start pair, a header or block CRC that is wrong, a LENGTH below 5 (docs/dnp3.md, "Counters").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gridstat.gateways.dnp3.crc import crc16, crc_bytes
from gridstat.gateways.dnp3.drops import DropCounter, DropReason

START = b"\x05\x64"
HEADER_SIZE = 10
BLOCK_SIZE = 16
#: User data octets in one frame at most (LENGTH 255 less CONTROL and the two addresses).
MAX_USER_DATA = 250

#: CONTROL bits: DIR (set in a master's frames), PRM (a primary frame), FCB, FCV / DFC.
DIR = 0x80
PRM = 0x40
FCB = 0x20
FCV = 0x10


class PrimaryFunction(enum.IntEnum):
    """Link functions of a primary frame (PRM = 1)."""

    RESET_LINK_STATES = 0
    TEST_LINK_STATES = 2
    CONFIRMED_USER_DATA = 3
    UNCONFIRMED_USER_DATA = 4
    REQUEST_LINK_STATUS = 9


class SecondaryFunction(enum.IntEnum):
    """Link functions of a secondary frame (PRM = 0)."""

    ACK = 0
    NACK = 1
    LINK_STATUS = 11
    NOT_SUPPORTED = 15


@dataclass(frozen=True, slots=True)
class LinkFrame:
    control: int
    destination: int
    source: int
    user_data: bytes

    @property
    def function(self) -> int:
        return self.control & 0x0F

    @property
    def primary(self) -> bool:
        return bool(self.control & PRM)

    @property
    def from_master(self) -> bool:
        return bool(self.control & DIR)


def frame_size(length: int) -> int:
    """Octets of a whole frame whose LENGTH is ``length`` (>= 5)."""
    data = length - 5
    return HEADER_SIZE + data + 2 * ((data + BLOCK_SIZE - 1) // BLOCK_SIZE)


def encode_frame(control: int, destination: int, source: int, user_data: bytes = b"") -> bytes:
    """One frame with its CRCs; ``user_data`` at most 250 octets."""
    if len(user_data) > MAX_USER_DATA:
        raise ValueError(f"a link frame carries at most {MAX_USER_DATA} octets of user data, not {len(user_data)}")
    header = START + bytes((5 + len(user_data), control & 0xFF)) + destination.to_bytes(2, "little") \
        + source.to_bytes(2, "little")
    out = bytearray(header)
    out += crc_bytes(header)
    for i in range(0, len(user_data), BLOCK_SIZE):
        block = user_data[i:i + BLOCK_SIZE]
        out += block
        out += crc_bytes(block)
    return bytes(out)


class LinkDecoder:
    """Frames out of a byte stream; bad input counted in ``drops`` and skipped."""

    __slots__ = ("_buffer", "_in_garbage", "drops")

    def __init__(self, drops: DropCounter | None = None) -> None:
        self.drops = drops if drops is not None else DropCounter()
        self._buffer = bytearray()
        self._in_garbage = False

    def reset(self) -> None:
        """Forget a partial frame (a new connection)."""
        self._buffer.clear()
        self._in_garbage = False

    def feed(self, data: bytes) -> list[LinkFrame]:
        buf = self._buffer
        buf += data
        frames: list[LinkFrame] = []
        pos = 0
        end = len(buf)
        drops = self.drops
        while True:
            start = buf.find(START, pos)
            if start < 0:
                # Keep a trailing 0x05: it may be the first start octet of the next read.
                keep = 1 if end > pos and buf[end - 1] == 0x05 else 0
                self._skip(end - keep - pos)
                pos = end - keep
                break
            if start > pos:
                self._skip(start - pos)
                pos = start
            if end - pos < HEADER_SIZE:
                break
            header = buf[pos:pos + 8]
            if crc16(header) != int.from_bytes(buf[pos + 8:pos + 10], "little"):
                drops.add(DropReason.BAD_HEADER_CRC, 1)
                pos += 1
                continue
            length = buf[pos + 2]
            if length < 5:
                drops.add(DropReason.BAD_LENGTH, 1)
                pos += 1
                continue
            size = frame_size(length)
            if end - pos < size:
                break
            user = bytearray()
            body = pos + HEADER_SIZE
            remaining = length - 5
            ok = True
            while remaining:
                n = min(BLOCK_SIZE, remaining)
                block = buf[body:body + n]
                if crc16(block) != int.from_bytes(buf[body + n:body + n + 2], "little"):
                    ok = False
                    break
                user += block
                body += n + 2
                remaining -= n
            if not ok:
                drops.add(DropReason.BAD_BLOCK_CRC, size)
                pos += size
                continue
            self._in_garbage = False
            frames.append(LinkFrame(buf[pos + 3], int.from_bytes(buf[pos + 4:pos + 6], "little"),
                                    int.from_bytes(buf[pos + 6:pos + 8], "little"), bytes(user)))
            pos += size
        del buf[:pos]
        return frames

    def _skip(self, n: int) -> None:
        if n <= 0:
            return
        if not self._in_garbage:
            self.drops.add(DropReason.BAD_SYNC)
            self._in_garbage = True
        self.drops.discarded_bytes += n
