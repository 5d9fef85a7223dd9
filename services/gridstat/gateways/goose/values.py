"""MMS ``Data`` values of a GOOSE data set (IEC 61850-8-1, the ``Data`` CHOICE of ISO 9506-2) as Python.

| MMS type | tag | Python |
|---|---|---|
| boolean | [3] | ``bool`` |
| bit-string | [4] | ``BitString`` (quality, Dbpos, ...) |
| integer, unsigned | [5], [6] | ``int`` (``Unsigned`` when encoding as [6]) |
| floating-point | [7] | ``float`` (single or double precision) |
| octet-string | [9] | ``bytes`` |
| visible-string, MMSString | [10], [16] | ``str`` |
| utc-time | [17] | ``UtcTime`` |
| structure | [2] | ``tuple`` of members |
| array | [1] | ``list`` of members |

Others (binary-time, bcd, generalized-time, ...) decode as ``Other(tag, raw)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gridstat.gateways.goose.ber import CONSTRUCTED, decode_integer, encode_integer, iter_tlvs, tlv
from gridstat.gateways.goose.errors import DropReason, FrameError

ARRAY, STRUCTURE, BOOLEAN, BIT_STRING, INTEGER, UNSIGNED, FLOATING_POINT = 0xA1, 0xA2, 0x83, 0x84, 0x85, 0x86, 0x87
OCTET_STRING, VISIBLE_STRING, MMS_STRING, UTC_TIME = 0x89, 0x8A, 0x90, 0x91

#: 2**24: the UtcTime fraction's scale (IEC 61850-8-1 8.1.3.7: 24 bits of a second).
FRACTION_SCALE = 1 << 24


@dataclass(frozen=True, slots=True)
class BitString:
    """``size`` bits, bit 0 first on the wire (the MSB of the first octet); ``value`` has bit 0 as its
    most significant of ``size`` bits, so a 13-bit quality of 0 is good."""

    value: int
    size: int

    def bit(self, i: int) -> bool:
        return bool(self.value >> (self.size - 1 - i) & 1)


@dataclass(frozen=True, slots=True)
class UtcTime:
    """IEC 61850 UtcTime: seconds since 1970 (UTC), a 24-bit fraction and the TimeQuality octet."""

    seconds: int
    fraction: int
    quality: int = 0

    @property
    def microseconds(self) -> int:
        """The fraction in microseconds, to the nearest (at most 999,999)."""
        return min(999_999, (self.fraction * 1_000_000 + FRACTION_SCALE // 2) // FRACTION_SCALE)

    @property
    def ms(self) -> int:
        """Milliseconds since 1970, to the nearest: libiec61850 writes ``floor(ms * 2**24 / 1000)``, so
        rounding down would read 123 ms back as 122."""
        return self.seconds * 1000 + (self.fraction * 1000 + FRACTION_SCALE // 2) // FRACTION_SCALE

    @classmethod
    def from_ms(cls, ms: int, quality: int = 0) -> UtcTime:
        """As libiec61850 writes it (``MmsValue_setUtcTimeMs``): the fraction rounded down."""
        seconds, rest_ms = divmod(ms, 1000)
        return cls(seconds, rest_ms * FRACTION_SCALE // 1000, quality)


@dataclass(frozen=True, slots=True)
class Unsigned:
    """An integer to encode as MMS unsigned [6] (decoding gives a plain ``int``)."""

    value: int


@dataclass(frozen=True, slots=True)
class Other:
    """A Data member of a type this gateway does not read (kept raw)."""

    tag: int
    raw: bytes


Value = bool | int | float | str | bytes | BitString | UtcTime | Unsigned | Other | tuple["Value", ...] | list["Value"]


def decode_utc_time(raw: bytes | memoryview) -> UtcTime:
    if len(raw) != 8:
        raise FrameError(DropReason.BAD_FIELD, f"UtcTime of {len(raw)} octets")
    return UtcTime(int.from_bytes(raw[0:4], "big"), int.from_bytes(raw[4:7], "big"), raw[7])


def encode_utc_time(t: UtcTime) -> bytes:
    return t.seconds.to_bytes(4, "big") + t.fraction.to_bytes(3, "big") + bytes((t.quality,))


def decode_value(tag: int, raw: bytes | memoryview, depth: int = 0) -> Value:
    """One Data member from its tag and content octets."""
    if tag == BOOLEAN:
        if len(raw) != 1:
            raise FrameError(DropReason.BAD_FIELD, f"boolean of {len(raw)} octets")
        return raw[0] != 0
    if tag in (INTEGER, UNSIGNED):
        return decode_integer(raw)
    if tag == FLOATING_POINT:
        if len(raw) == 5 and raw[0] == 8:
            return float(struct.unpack(">f", raw[1:5])[0])
        if len(raw) == 9 and raw[0] == 11:
            return float(struct.unpack(">d", raw[1:9])[0])
        raise FrameError(DropReason.BAD_FIELD, f"floating-point of {len(raw)} octets")
    if tag == BIT_STRING:
        if not raw or raw[0] > 7 or (len(raw) == 1 and raw[0]):
            raise FrameError(DropReason.BAD_FIELD, "bit-string without a valid unused-bits octet")
        unused = raw[0]
        size = (len(raw) - 1) * 8 - unused
        return BitString(int.from_bytes(raw[1:], "big") >> unused, size)
    if tag == UTC_TIME:
        return decode_utc_time(raw)
    if tag in (VISIBLE_STRING, MMS_STRING):
        try:
            return bytes(raw).decode("utf-8" if tag == MMS_STRING else "ascii")
        except UnicodeDecodeError:
            raise FrameError(DropReason.BAD_FIELD, "string not ASCII/UTF-8") from None
    if tag == OCTET_STRING:
        return bytes(raw)
    if tag in (STRUCTURE, ARRAY):
        if depth >= 8:
            raise FrameError(DropReason.BAD_FIELD, "Data nested deeper than 8")
        members = [decode_value(t, raw[a:b], depth + 1) for t, a, b in iter_tlvs(raw, 0, len(raw))]
        return tuple(members) if tag == STRUCTURE else members
    if tag & CONSTRUCTED:
        raise FrameError(DropReason.BAD_FIELD, f"unknown constructed Data tag 0x{tag:02x}")
    return Other(tag, bytes(raw))


def encode_value(value: Value) -> bytes:
    """One Data member's TLV. Raises ``ValueError`` for a value no MMS type holds."""
    if isinstance(value, bool):
        return tlv(BOOLEAN, b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return tlv(INTEGER, encode_integer(value))
    if isinstance(value, Unsigned):
        if value.value < 0:
            raise ValueError(f"unsigned {value.value}")
        return tlv(UNSIGNED, encode_integer(value.value))
    if isinstance(value, float):
        return tlv(FLOATING_POINT, b"\x08" + struct.pack(">f", value))
    if isinstance(value, BitString):
        nbytes = (value.size + 7) // 8
        unused = nbytes * 8 - value.size
        return tlv(BIT_STRING, bytes((unused,)) + (value.value << unused).to_bytes(nbytes, "big"))
    if isinstance(value, UtcTime):
        return tlv(UTC_TIME, encode_utc_time(value))
    if isinstance(value, str):
        return tlv(VISIBLE_STRING, value.encode("ascii"))
    if isinstance(value, bytes):
        return tlv(OCTET_STRING, value)
    if isinstance(value, Other):
        return tlv(value.tag, value.raw)
    if isinstance(value, tuple):
        return tlv(STRUCTURE, b"".join(encode_value(v) for v in value))
    if isinstance(value, list):
        return tlv(ARRAY, b"".join(encode_value(v) for v in value))
    raise ValueError(f"no MMS type for {type(value).__name__}")
