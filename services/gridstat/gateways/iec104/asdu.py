"""The ASDUs the gateway reads and sends (IEC 60870-5-101 7.2-7.3 as -104 clause 8 profiles them), sans I/O.

Data unit identifier (6 octets in -104): type identification, variable structure qualifier (SQ bit 7,
number of objects bits 0-6), cause of transmission (cause bits 0-5, P/N bit 6, T bit 7), originator
address, common address of ASDU (2 octets, little endian). Then the information objects, each with a
3-octet information object address (IOA); with SQ = 1 only the first carries one, the others follow
at consecutive addresses.

Monitoring types read (``MONITORED``): single points M_SP_NA_1/M_SP_TB_1 (SIQ), double points
M_DP_NA_1/M_DP_TB_1 (DIQ), measured values normalized M_ME_NA_1/M_ME_TD_1 (NVA, QDS), scaled
M_ME_NB_1/M_ME_TE_1 (SVA, QDS) and short floating point M_ME_NC_1/M_ME_TF_1 (IEEE 754, QDS); the
``_TB``/``_TD``/``_TE``/``_TF`` types add a CP56Time2a. System types read: C_IC_NA_1 (the
interrogation's confirmation and termination) and M_EI_NA_1 (end of initialization).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from gridstat.gateways.iec104 import cp56
from gridstat.gateways.iec104.errors import DropReason, Iec104Error, bad_field

HEADER_SIZE = 6
IOA_SIZE = 3
#: The common address that addresses every station (broadcast, 8.2 of -104 / 7.2.4 of -101).
GLOBAL_ADDRESS = 0xFFFF
#: QOI of a general (station) interrogation (7.2.6.22).
QOI_STATION = 20


class TypeId(enum.IntEnum):
    M_SP_NA_1 = 1
    M_DP_NA_1 = 3
    M_ME_NA_1 = 9
    M_ME_NB_1 = 11
    M_ME_NC_1 = 13
    M_SP_TB_1 = 30
    M_DP_TB_1 = 31
    M_ME_TD_1 = 34
    M_ME_TE_1 = 35
    M_ME_TF_1 = 36
    M_EI_NA_1 = 70
    C_IC_NA_1 = 100
    C_CS_NA_1 = 103


class Cot(enum.IntEnum):
    """Causes of transmission used here (7.2.3)."""

    PERIODIC = 1
    BACKGROUND = 2
    SPONTANEOUS = 3
    INITIALIZED = 4
    REQUEST = 5
    ACTIVATION = 6
    ACTIVATION_CON = 7
    DEACTIVATION = 8
    DEACTIVATION_CON = 9
    ACTIVATION_TERMINATION = 10
    INTERROGATED_BY_STATION = 20
    UNKNOWN_TYPE = 44
    UNKNOWN_CAUSE = 45
    UNKNOWN_COMMON_ADDRESS = 46
    UNKNOWN_IOA = 47


class Kind(enum.Enum):
    """What a monitored value is, and so the variable's type (docs/iec104.md, "Variables")."""

    SINGLE = "single"          # SPI: bool, an alert variable
    DOUBLE = "double"          # DPI 0 .. 3: int, an alert variable
    NORMALIZED = "normalized"  # NVA: float in [-1, 1 - 2**-15]
    SCALED = "scaled"          # SVA: int16
    FLOAT = "float"            # IEEE 754 short floating point

    @property
    def is_point(self) -> bool:
        return self in (Kind.SINGLE, Kind.DOUBLE)


#: Quality bits of QDS (7.2.6.3): OV, BL, SB, NT, IV; SIQ and DIQ (7.2.6.1-2) have all but OV.
OV, BL, SB, NT, IV = 0x01, 0x10, 0x20, 0x40, 0x80
QUALITY_NAMES = (("IV", IV), ("NT", NT), ("SB", SB), ("BL", BL), ("OV", OV))

#: Per monitored type: its kind, the element's size without the time tag, whether it has a CP56Time2a.
MONITORED: dict[int, tuple[Kind, int, bool]] = {
    TypeId.M_SP_NA_1: (Kind.SINGLE, 1, False), TypeId.M_SP_TB_1: (Kind.SINGLE, 1, True),
    TypeId.M_DP_NA_1: (Kind.DOUBLE, 1, False), TypeId.M_DP_TB_1: (Kind.DOUBLE, 1, True),
    TypeId.M_ME_NA_1: (Kind.NORMALIZED, 3, False), TypeId.M_ME_TD_1: (Kind.NORMALIZED, 3, True),
    TypeId.M_ME_NB_1: (Kind.SCALED, 3, False), TypeId.M_ME_TE_1: (Kind.SCALED, 3, True),
    TypeId.M_ME_NC_1: (Kind.FLOAT, 5, False), TypeId.M_ME_TF_1: (Kind.FLOAT, 5, True),
}

_I16 = struct.Struct("<h")
_F32 = struct.Struct("<f")


def quality_text(quality: int) -> str:
    """``IV|NT`` for the bits set, ``good`` for none."""
    return "|".join(name for name, bit in QUALITY_NAMES if quality & bit) or "good"


@dataclass(frozen=True, slots=True)
class Header:
    type_id: int
    sq: bool
    count: int
    cot: int
    negative: bool
    test: bool
    originator: int
    common_address: int


@dataclass(frozen=True, slots=True)
class PointValue:
    """One monitored information object as received."""

    common_address: int
    ioa: int
    type_id: int
    kind: Kind
    #: bool (single point), int (double point DPI, scaled SVA), float (normalized, short float).
    value: bool | int | float
    #: The quality bits as sent (``OV | BL | SB | NT | IV``).
    quality: int
    cot: int
    #: The CP56Time2a as milliseconds since 1970 UTC, or None for a type without a time tag.
    time_ms: int | None = None
    #: ``cp56.TIME_INVALID | cp56.SUMMER_TIME``.
    time_flags: int = 0


def decode_header(asdu: bytes) -> Header:
    if len(asdu) < HEADER_SIZE:
        raise Iec104Error(DropReason.TRUNCATED, f"data unit identifier needs 6 bytes, got {len(asdu)}",
                          field="data unit identifier")
    vsq, cot = asdu[1], asdu[2]
    return Header(asdu[0], bool(vsq & 0x80), vsq & 0x7F, cot & 0x3F, bool(cot & 0x40), bool(cot & 0x80), asdu[3],
                  asdu[4] | asdu[5] << 8)


def decode_values(header: Header, asdu: bytes) -> list[PointValue]:
    """The information objects of a monitored type's ASDU; raises Iec104Error when they do not fit."""
    spec = MONITORED.get(header.type_id)
    if spec is None:
        raise Iec104Error(DropReason.UNSUPPORTED_TYPE, f"type identification {header.type_id}",
                          field="type identification")
    kind, size, timed = spec
    if header.count == 0:
        raise bad_field("number of information objects", 0, "an ASDU carries at least one")
    element = size + (cp56.SIZE if timed else 0)
    n = header.count
    need = HEADER_SIZE + (IOA_SIZE + n * element if header.sq else n * (IOA_SIZE + element))
    if len(asdu) != need:
        reason = DropReason.TRUNCATED if len(asdu) < need else DropReason.BAD_FIELD
        raise Iec104Error(reason, f"{n} objects of type {header.type_id} need {need} bytes, got {len(asdu)}",
                          field="number of information objects")
    values: list[PointValue] = []
    pos = HEADER_SIZE
    ioa = 0
    ca, tid, cot = header.common_address, header.type_id, header.cot
    for i in range(n):
        if not header.sq or i == 0:
            ioa = asdu[pos] | asdu[pos + 1] << 8 | asdu[pos + 2] << 16
            pos += IOA_SIZE
        else:
            ioa += 1
        value: bool | int | float
        if kind is Kind.SINGLE:
            b = asdu[pos]
            value, quality = bool(b & 0x01), b & 0xF0
        elif kind is Kind.DOUBLE:
            b = asdu[pos]
            value, quality = b & 0x03, b & 0xF0
        elif kind is Kind.FLOAT:
            value, quality = _F32.unpack_from(asdu, pos)[0], asdu[pos + 4] & 0xF1
        else:
            raw = _I16.unpack_from(asdu, pos)[0]
            value = raw / 32768.0 if kind is Kind.NORMALIZED else raw
            quality = asdu[pos + 2] & 0xF1
        pos += size
        if timed:
            t = cp56.decode(asdu, pos)
            pos += cp56.SIZE
            values.append(PointValue(ca, ioa, tid, kind, value, quality, cot, t.epoch_ms, t.flags))
        else:
            values.append(PointValue(ca, ioa, tid, kind, value, quality, cot))
    return values


# -- encoding (the interrogation command; monitored types for test peers and the benchmark) -------------

def encode_header(type_id: int, count: int, cot: int, common_address: int, *, sq: bool = False,
                  negative: bool = False, test: bool = False, originator: int = 0) -> bytes:
    if not 0 <= count <= 127:
        raise ValueError(f"an ASDU holds 0 .. 127 objects, not {count}")
    return bytes((type_id, count | (0x80 if sq else 0), cot | (0x40 if negative else 0) | (0x80 if test else 0),
                  originator, common_address & 0xFF, common_address >> 8))


def encode_ioa(ioa: int) -> bytes:
    return bytes((ioa & 0xFF, ioa >> 8 & 0xFF, ioa >> 16 & 0xFF))


def encode_interrogation(common_address: int, *, cot: int = Cot.ACTIVATION, qoi: int = QOI_STATION,
                         negative: bool = False) -> bytes:
    """C_IC_NA_1: a general interrogation (activation), or an outstation's confirmation/termination."""
    return encode_header(TypeId.C_IC_NA_1, 1, cot, common_address, negative=negative) + encode_ioa(0) + bytes((qoi,))


def encode_element(kind: Kind, value: bool | int | float, quality: int) -> bytes:
    if kind is Kind.SINGLE:
        return bytes(((1 if value else 0) | (quality & 0xF0),))
    if kind is Kind.DOUBLE:
        return bytes(((int(value) & 0x03) | (quality & 0xF0),))
    if kind is Kind.FLOAT:
        return _F32.pack(float(value)) + bytes((quality & 0xF1,))
    raw = round(float(value) * 32768) if kind is Kind.NORMALIZED else int(value)
    return _I16.pack(max(-32768, min(32767, raw))) + bytes((quality & 0xF1,))


def encode_values(type_id: int, cot: int, common_address: int,
                  objects: list[tuple[int, bool | int | float, int, int | None]]) -> bytes:
    """An ASDU (SQ = 0) of ``(ioa, value, quality, time_ms)`` objects of one monitored type."""
    kind, _size, timed = MONITORED[type_id]
    parts = [encode_header(type_id, len(objects), cot, common_address)]
    for ioa, value, quality, time_ms in objects:
        parts.append(encode_ioa(ioa) + encode_element(kind, value, quality))
        if timed:
            parts.append(cp56.encode(time_ms if time_ms is not None else 0))
    return b"".join(parts)
