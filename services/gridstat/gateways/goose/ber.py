"""A small BER (ITU-T X.690) TLV reader and writer: what the GOOSE PDU needs and no more.

Single-byte tags only (every tag of the goosePdu and of MMS ``Data`` is below 31), definite lengths
of up to four length octets. Reading never raises anything but ``FrameError(BAD_BER)``.
"""

from __future__ import annotations

from collections.abc import Iterator

from gridstat.gateways.goose.errors import DropReason, FrameError

#: The constructed bit of a tag octet.
CONSTRUCTED = 0x20


def read_tlv(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """``(tag, value_start, value_end)`` of the TLV at ``pos``, which must end by ``end``."""
    if pos + 2 > end:
        raise FrameError(DropReason.BAD_BER, f"TLV at {pos} truncated")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise FrameError(DropReason.BAD_BER, f"multi-byte tag at {pos}")
    first = data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        if n == 0 or n > 4 or pos + n > end:
            raise FrameError(DropReason.BAD_BER, f"bad length octets at {pos - 1}")
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    if pos + length > end:
        raise FrameError(DropReason.BAD_BER, f"TLV of {length} bytes at {pos} runs past its container")
    return tag, pos, pos + length


def iter_tlvs(data: bytes | memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int]]:
    while pos < end:
        tag, start, stop = read_tlv(data, pos, end)
        yield tag, start, stop
        pos = stop


def encode_length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(raw),)) + raw


def tlv(tag: int, value: bytes) -> bytes:
    return bytes((tag,)) + encode_length(len(value)) + value


def encode_integer(value: int) -> bytes:
    """The content octets of a BER INTEGER: two's complement, as few octets as hold it."""
    size = max(1, (value + (value < 0)).bit_length() // 8 + 1)
    return value.to_bytes(size, "big", signed=True)


def decode_integer(raw: bytes | memoryview) -> int:
    if not 1 <= len(raw) <= 9:
        raise FrameError(DropReason.BAD_FIELD, f"INTEGER of {len(raw)} octets")
    return int.from_bytes(raw, "big", signed=True)


def decode_unsigned(raw: bytes | memoryview, bits: int = 32) -> int:
    """An INTEGER that must be 0 .. 2**bits - 1 (stNum, sqNum, confRev, timeAllowedtoLive)."""
    value = decode_integer(raw)
    if not 0 <= value < 1 << bits:
        raise FrameError(DropReason.BAD_FIELD, f"{value} is not an unsigned {bits}-bit value")
    return value
