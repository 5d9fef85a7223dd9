"""The APCI of IEC 60870-5-104 (clause 5): APDU framing and the I, S and U formats, sans I/O.

An APDU is the start byte 0x68, the length of the rest (4 .. 253), four control octets and, in an I
frame, one ASDU. The control field says the format:

* I (information transfer): bit 0 of octet 1 is 0; N(S) and N(R) are 15-bit counters, little endian,
  shifted left by one;
* S (supervisory): octet 1 is 0x01; N(R) acknowledges received I frames;
* U (unnumbered control): octet 1 has bits 0 and 1 set and exactly one of STARTDT, STOPDT or TESTFR
  act/con (bits 2 .. 7).

``ApduSplitter`` cuts a TCP byte stream into frames; it never raises: what is not an APDU is counted
(``errors.DropCounter``) and skipped up to the next 0x68.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gridstat.gateways.iec104.errors import DropCounter, DropReason

START = 0x68
#: The longest APDU: the length octet counts at most 253 (5.1, Figure 10).
MAX_LENGTH = 253
#: The longest ASDU an I frame carries.
MAX_ASDU = MAX_LENGTH - 4
#: Sequence numbers count modulo 2**15 (5.1).
SEQ_MOD = 32768


class UFunction(enum.IntEnum):
    """The U format's functions: the whole first control octet (5.3, Figure 8)."""

    STARTDT_ACT = 0x07
    STARTDT_CON = 0x0B
    STOPDT_ACT = 0x13
    STOPDT_CON = 0x23
    TESTFR_ACT = 0x43
    TESTFR_CON = 0x83


_U_BY_OCTET = {int(f): f for f in UFunction}


@dataclass(frozen=True, slots=True)
class IFrame:
    send_seq: int
    recv_seq: int
    asdu: bytes


@dataclass(frozen=True, slots=True)
class SFrame:
    recv_seq: int


@dataclass(frozen=True, slots=True)
class UFrame:
    function: UFunction


Frame = IFrame | SFrame | UFrame


def encode_i(send_seq: int, recv_seq: int, asdu: bytes) -> bytes:
    """An I frame carrying ``asdu`` (at most 249 bytes)."""
    if len(asdu) > MAX_ASDU:
        raise ValueError(f"an ASDU is at most {MAX_ASDU} bytes, got {len(asdu)}")
    ns, nr = (send_seq % SEQ_MOD) << 1, (recv_seq % SEQ_MOD) << 1
    return bytes((START, 4 + len(asdu), ns & 0xFF, ns >> 8, nr & 0xFF, nr >> 8)) + asdu


def encode_s(recv_seq: int) -> bytes:
    nr = (recv_seq % SEQ_MOD) << 1
    return bytes((START, 4, 0x01, 0x00, nr & 0xFF, nr >> 8))


def encode_u(function: UFunction) -> bytes:
    return bytes((START, 4, int(function), 0, 0, 0))


def parse_apdu(apdu: bytes | memoryview) -> Frame | DropReason:
    """One whole APDU (start byte and length included, the length already checked) as a frame, or why not."""
    c1, c2, c3, c4 = apdu[2], apdu[3], apdu[4], apdu[5]
    if not c1 & 0x01:
        return IFrame((c1 | c2 << 8) >> 1, (c3 | c4 << 8) >> 1, bytes(apdu[6:]))
    if len(apdu) != 6:
        return DropReason.BAD_LENGTH
    if not c1 & 0x02:
        if c1 != 0x01 or c2 != 0 or c3 & 0x01:
            return DropReason.BAD_CONTROL
        return SFrame((c3 | c4 << 8) >> 1)
    function = _U_BY_OCTET.get(c1)
    if function is None or c2 or c3 or c4:
        return DropReason.BAD_CONTROL
    return UFrame(function)


class ApduSplitter:
    """Bytes of one TCP connection in, frames out; losses counted in ``drops``."""

    __slots__ = ("_buf", "drops")

    def __init__(self, drops: DropCounter | None = None) -> None:
        self.drops = drops or DropCounter()
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        drops = self.drops
        pos = 0
        n = len(buf)
        while pos < n:
            if buf[pos] != START:
                nxt = buf.find(START, pos + 1)
                end = n if nxt < 0 else nxt
                drops.count(DropReason.BAD_START)
                drops.discarded_bytes += end - pos
                pos = end
                continue
            if pos + 1 >= n:
                break
            length = buf[pos + 1]
            if length < 4 or length > MAX_LENGTH:
                drops.count(DropReason.BAD_LENGTH)
                drops.discarded_bytes += 1
                pos += 1  # resynchronise on the next start byte
                continue
            end = pos + 2 + length
            if end > n:
                break
            frame = parse_apdu(bytes(buf[pos:end]))
            if isinstance(frame, DropReason):
                drops.count(frame)
                drops.discarded_bytes += end - pos
            else:
                frames.append(frame)
            pos = end
        if pos:
            del buf[:pos]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held of an APDU not complete yet."""
        return len(self._buf)

    def close(self) -> None:
        """The stream ended: a partial APDU is counted ``truncated``."""
        if self._buf:
            self.drops.count(DropReason.TRUNCATED)
            self.drops.discarded_bytes += len(self._buf)
            self._buf.clear()
