"""CFG-3 frames: variable-length names, the 2011 details, and fragmentation by CONT_IDX.

Layout after the common fields (C37.118.2-2011 6.4, Tables 10, 11 and 12)::

    14 u16 CONT_IDX      0 the only frame; 1 the first of a series; 2-65534 the next ones, in
                         order; 0xFFFF the last
    16 u32 TIME_BASE, u16 NUM_PMU   as in CFG-1/2
       then NUM_PMU times:
       name STN          u8 length, then that many bytes of UTF-8 (Table 12)
       u16 IDCODE, 16 bytes G_PMU_ID, u16 FORMAT, u16 PHNMR, u16 ANNMR, u16 DGNMR
       name CHNAM x (PHNMR + ANNMR + 16 x DGNMR)
       PHSCALE x PHNMR   u16 modification flags, u8 phasor type (bit 3 current, bits 2-0 component),
                         u8 user designation, f32 scale Y, f32 angle offset theta (radians)
       ANSCALE x ANNMR   f32 scale M, f32 offset B
       u32 DIGUNIT x DGNMR
       f32 PMU_LAT, f32 PMU_LON, f32 PMU_ELEV, u8 SVC_CLASS, i32 WINDOW, i32 GRP_DLY, u16 FNOM, u16 CFGCNT
    -4 i16 DATA_RATE

A configuration too large for one frame (FRAMESIZE is a u16) is sent as a series. The standard numbers
the series but does not draw the cut; this codec reads a series as one body -- every field after
CONT_IDX, TIME_BASE to DATA_RATE -- cut into consecutive pieces, each piece in a frame with its own
common fields and CONT_IDX, and builds series the same way (docs/c37118.md, "CFG-3 fragments").
``reassembling.ConfigReassembler`` puts a series back together.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gridstat.errors import ValidationError
from gridstat.gateways.c37118.configs import (
    NAMES_PER_DIGITAL_WORD,
    AnalogScale,
    Cfg3Details,
    ConfigFrame,
    DataFormat,
    DigitalUnit,
    PhasorComponent,
    PhasorKind,
    PhasorModification,
    PhasorScale,
    PmuConfig,
    check_counts,
    check_top,
    fnom_word,
    need,
    read_nominal_frequency,
    read_time_base,
)
from gridstat.gateways.c37118.errors import DropReason, FrameError, bad_field
from gridstat.gateways.c37118.framing import (
    CHK_SIZE,
    HEAD_SIZE,
    MAX_FRAME_SIZE,
    VERSION_2011,
    FrameHead,
    FrameType,
    check_range,
    expect_type,
    read_head,
    seal,
)
from gridstat.gateways.c37118.timestamps import LOCKED_TO_UTC, TimeQuality

#: CONT_IDX values (6.4, Table 11).
CONT_ONLY = 0
CONT_FIRST = 1
CONT_LAST = 0xFFFF
#: Bytes a CFG-3 frame spends besides its piece of the body: common fields, CONT_IDX, CHK.
FRAGMENT_OVERHEAD = HEAD_SIZE + 2 + CHK_SIZE
#: A name field holds at most 255 bytes (Table 12).
MAX_NAME_BYTES = 255

_CONT_IDX = struct.Struct(">H")
_TOP = struct.Struct(">IH")
_PMU_HEAD = struct.Struct(">H16sHHHH")
_PHSCALE = struct.Struct(">HBBff")
_ANSCALE = struct.Struct(">ff")
_DIGUNIT = struct.Struct(">HH")
_TAIL = struct.Struct(">fffciiHH")
_DATA_RATE = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ConfigFragment:
    """One frame of a CFG-3 series (CONT_IDX not 0): its common fields and its piece of the body."""

    idcode: int
    soc: int
    fracsec: int
    cont_idx: int
    body: bytes
    time_quality: TimeQuality = LOCKED_TO_UTC
    version: int = VERSION_2011


# -- reading ----------------------------------------------------------------------------------------

def _name(data: bytes, pos: int, end: int, field: str) -> tuple[str, int]:
    need(field, pos, 1, end)
    n = data[pos]
    need(field, pos + 1, n, end)
    raw = data[pos + 1:pos + 1 + n]
    try:
        return raw.decode("utf-8"), pos + 1 + n
    except UnicodeDecodeError as exc:
        raise bad_field(field, raw, "names are UTF-8 (Table 12)") from exc


def _phasor_scale(flags: int, type_byte: int, user: int, scale: float, angle: float) -> PhasorScale:
    return PhasorScale(PhasorKind((type_byte >> 3) & 1), PhasorComponent(type_byte & 0x07), PhasorModification(flags),
                       user, scale, angle)


def parse_cfg3_body(head: FrameHead, body: bytes) -> ConfigFrame:
    """A configuration from a CFG-3 body (TIME_BASE to DATA_RATE, from one frame or a whole series).

    Raises:
        FrameError: ``truncated``, ``bad_size`` (bytes after DATA_RATE) or ``bad_field``.
    """
    end = len(body)
    need("TIME_BASE", 0, _TOP.size, end)
    time_base_word, num_pmu = _TOP.unpack_from(body, 0)
    time_base = read_time_base(time_base_word)
    if num_pmu == 0:
        raise bad_field("NUM_PMU", 0, "a stream has at least one PMU block")
    pos = _TOP.size
    pmus: list[PmuConfig] = []
    for _ in range(num_pmu):
        stn, pos = _name(body, pos, end, "STN")
        need("IDCODE", pos, _PMU_HEAD.size, end)
        idcode, g_pmu_id, fmt, phnmr, annmr, dgnmr = _PMU_HEAD.unpack_from(body, pos)
        pos += _PMU_HEAD.size
        n_names = phnmr + annmr + NAMES_PER_DIGITAL_WORD * dgnmr
        need("CHNAM", pos, n_names, end)  # at least the length byte of each name
        names: list[str] = []
        for _ in range(n_names):
            name, pos = _name(body, pos, end, "CHNAM")
            names.append(name)
        need("PHSCALE", pos, _PHSCALE.size * phnmr + _ANSCALE.size * annmr + _DIGUNIT.size * dgnmr + _TAIL.size,
             end)
        phscales = tuple(_phasor_scale(*_PHSCALE.unpack_from(body, pos + _PHSCALE.size * i)) for i in range(phnmr))
        pos += _PHSCALE.size * phnmr
        anscales = tuple(AnalogScale(*_ANSCALE.unpack_from(body, pos + _ANSCALE.size * i)) for i in range(annmr))
        pos += _ANSCALE.size * annmr
        digunits = tuple(DigitalUnit(*_DIGUNIT.unpack_from(body, pos + _DIGUNIT.size * i)) for i in range(dgnmr))
        pos += _DIGUNIT.size * dgnmr
        lat, lon, elev, svc, window, grp_dly, fnom, cfgcnt = _TAIL.unpack_from(body, pos)
        pos += _TAIL.size
        pmus.append(PmuConfig(
            station_name=stn,
            idcode=idcode,
            data_format=DataFormat.from_word(fmt),
            phasor_names=tuple(names[:phnmr]),
            analog_names=tuple(names[phnmr:phnmr + annmr]),
            digital_names=tuple(names[phnmr + annmr:]),
            digital_units=digunits,
            nominal_frequency_hz=read_nominal_frequency(fnom),
            config_count=cfgcnt,
            cfg3=Cfg3Details(g_pmu_id, phscales, anscales, lat, lon, elev, svc.decode("latin-1"), window, grp_dly),
        ))
    need("DATA_RATE", pos, _DATA_RATE.size, end)
    (data_rate,) = _DATA_RATE.unpack_from(body, pos)
    pos += _DATA_RATE.size
    if pos != end:
        raise FrameError(DropReason.BAD_SIZE, f"{end - pos} bytes after DATA_RATE", field="FRAMESIZE", value=end)
    return ConfigFrame(FrameType.CFG3, head.idcode, head.soc, head.fracsec, time_base, tuple(pmus), data_rate,
                       head.time_quality, head.version)


def parse_cfg3_frame(frame: bytes, *, head: FrameHead | None = None) -> ConfigFrame | ConfigFragment:
    """Parse a CFG-3 frame: the configuration when it is the only frame (CONT_IDX 0), else the fragment.

    Raises:
        FrameError: the framing (``read_head``) or, for a whole configuration, a field.
    """
    if head is None:
        head = read_head(frame)
    expect_type(head, FrameType.CFG3)
    (cont_idx,) = _CONT_IDX.unpack_from(frame, HEAD_SIZE)
    body = frame[HEAD_SIZE + _CONT_IDX.size:-CHK_SIZE]
    if cont_idx == CONT_ONLY:
        return parse_cfg3_body(head, body)
    return ConfigFragment(head.idcode, head.soc, head.fracsec, cont_idx, body, head.time_quality, head.version)


# -- building ---------------------------------------------------------------------------------------

def _name_field(field: str, name: str) -> bytes:
    raw = name.encode("utf-8")
    if len(raw) > MAX_NAME_BYTES:
        raise ValidationError(f"{field} {name!r} is longer than {MAX_NAME_BYTES} bytes of UTF-8", field=field)
    return bytes((len(raw),)) + raw


def _f32(field: str, value: float) -> None:
    try:
        struct.pack(">f", value)
    except OverflowError as exc:
        raise ValidationError(f"{field}={value} does not fit a 32-bit float", field=field) from exc


def build_cfg3_body(config: ConfigFrame) -> bytes:
    """Every field of a CFG-3 configuration after CONT_IDX (TIME_BASE to DATA_RATE).

    Raises:
        ValidationError: a value that does not fit its field, a count that does not match, a PMU
            without CFG-3 details, or one with CFG-1/2 units.
    """
    if config.frame_type is not FrameType.CFG3:
        raise ValidationError(f"{config.frame_type.name} is not CFG-3", field="SYNC")
    check_top(config)
    parts = [_TOP.pack(config.time_base, config.num_pmu)]
    for pmu in config.pmus:
        check_counts(pmu)
        details = pmu.cfg3
        if details is None:
            raise ValidationError(f"PMU {pmu.idcode} has no CFG-3 details", field="PMU")
        if pmu.phasor_units or pmu.analog_units:
            raise ValidationError("PHUNIT/ANUNIT in a CFG-3 configuration (it has PHSCALE/ANSCALE)", field="PHUNIT")
        if len(details.phasor_scales) != pmu.phasor_count:
            raise ValidationError(f"{len(details.phasor_scales)} PHSCALE for {pmu.phasor_count} phasors",
                                  field="PHSCALE")
        if len(details.analog_scales) != pmu.analog_count:
            raise ValidationError(f"{len(details.analog_scales)} ANSCALE for {pmu.analog_count} analogs",
                                  field="ANSCALE")
        if len(details.global_pmu_id) != 16:
            raise ValidationError(f"G_PMU_ID has {len(details.global_pmu_id)} bytes, not 16", field="G_PMU_ID")
        try:
            svc = details.service_class.encode("latin-1")
        except UnicodeEncodeError as exc:
            raise ValidationError(f"SVC_CLASS {details.service_class!r} is not ASCII", field="SVC_CLASS") from exc
        if len(svc) != 1:
            raise ValidationError(f"SVC_CLASS {details.service_class!r} is not one character", field="SVC_CLASS")
        parts.append(_name_field("STN", pmu.station_name))
        parts.append(_PMU_HEAD.pack(pmu.idcode, details.global_pmu_id, pmu.data_format.to_word(), pmu.phasor_count,
                                    pmu.analog_count, pmu.digital_word_count))
        parts.extend(_name_field("CHNAM", n) for n in (*pmu.phasor_names, *pmu.analog_names, *pmu.digital_names))
        for s in details.phasor_scales:
            check_range("PHSCALE", s.modification, 0, 0xFFFF)
            check_range("PHSCALE", s.user_designation, 0, 0xFF)
            _f32("PHSCALE", s.scale)
            _f32("PHSCALE", s.angle_offset_rad)
            parts.append(_PHSCALE.pack(s.modification, s.kind << 3 | s.component, s.user_designation, s.scale,
                                       s.angle_offset_rad))
        for a in details.analog_scales:
            _f32("ANSCALE", a.scale)
            _f32("ANSCALE", a.offset)
            parts.append(_ANSCALE.pack(a.scale, a.offset))
        parts.extend(_DIGUNIT.pack(d.normal_status, d.valid_inputs) for d in pmu.digital_units)
        for field, value in (("PMU_LAT", details.latitude_deg), ("PMU_LON", details.longitude_deg),
                             ("PMU_ELEV", details.elevation_m)):
            _f32(field, value)
        check_range("WINDOW", details.window_us, -(2**31), 2**31 - 1)
        check_range("GRP_DLY", details.group_delay_us, -(2**31), 2**31 - 1)
        parts.append(_TAIL.pack(details.latitude_deg, details.longitude_deg, details.elevation_m, svc,
                                details.window_us, details.group_delay_us, fnom_word(pmu), pmu.config_count))
    parts.append(_DATA_RATE.pack(config.data_rate))
    return b"".join(parts)


def build_cfg3_frame(config: ConfigFrame) -> bytes:
    """One CFG-3 frame (CONT_IDX 0). Raises ValidationError when it does not fit 65535 bytes: use
    ``build_cfg3_frames`` for a configuration that large."""
    return _fragment(config, CONT_ONLY, build_cfg3_body(config))


def build_cfg3_frames(config: ConfigFrame, *, max_frame_size: int = MAX_FRAME_SIZE) -> list[bytes]:
    """The CFG-3 configuration as one frame, or as a series of frames of at most ``max_frame_size`` bytes.

    Raises:
        ValidationError: as ``build_cfg3_body``, or a series longer than CONT_IDX can number.
    """
    check_range("max_frame_size", max_frame_size, FRAGMENT_OVERHEAD + 1, MAX_FRAME_SIZE)
    body = build_cfg3_body(config)
    piece = max_frame_size - FRAGMENT_OVERHEAD
    if len(body) <= piece:
        return [_fragment(config, CONT_ONLY, body)]
    pieces = [body[i:i + piece] for i in range(0, len(body), piece)]
    check_range("CONT_IDX", len(pieces), 2, CONT_LAST)
    return [_fragment(config, CONT_LAST if n == len(pieces) else n, p) for n, p in enumerate(pieces, start=1)]


def _fragment(config: ConfigFrame, cont_idx: int, piece: bytes) -> bytes:
    return seal(FrameType.CFG3, version=config.version, idcode=config.idcode, soc=config.soc, fracsec=config.fracsec,
                time_quality=config.time_quality, body=_CONT_IDX.pack(cont_idx) + piece)


def build_fragment(fragment: ConfigFragment) -> bytes:
    """The frame of one fragment, as received (for relaying a series unchanged)."""
    check_range("CONT_IDX", fragment.cont_idx, CONT_FIRST, CONT_LAST)
    return seal(FrameType.CFG3, version=fragment.version, idcode=fragment.idcode, soc=fragment.soc,
                fracsec=fragment.fracsec, time_quality=fragment.time_quality,
                body=_CONT_IDX.pack(fragment.cont_idx) + fragment.body)
