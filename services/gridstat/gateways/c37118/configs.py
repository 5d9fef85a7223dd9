"""Configuration frames: what a stream's data frames carry, and CFG-1 and CFG-2 on the wire.

A configuration describes one stream (the frame's IDCODE): its TIME_BASE, DATA_RATE, and one
``PmuConfig`` per PMU block of the data frames (NUM_PMU of them, in order). CFG-1 says what the device
can send, CFG-2 what it sends now, CFG-3 the same as CFG-2 with more detail (cfg3.py). Only CFG-2 and
CFG-3 describe data frames (C37.118.2-2011 6.4).

CFG-1 and CFG-2 layout after the common fields (6.4, Tables 8 and 9)::

    14 u32 TIME_BASE     bits 31-24 reserved flags, bits 23-0 counts per second of FRACSEC
    18 u16 NUM_PMU
       then NUM_PMU times:
       16 bytes STN      station name, ASCII (read as Latin-1 so no byte is lost; padding stripped)
       u16 IDCODE        the PMU that is the source of this block
       u16 FORMAT        bit 3 FREQ/DFREQ float, bit 2 analogs float, bit 1 phasors float, bit 0 polar
       u16 PHNMR, u16 ANNMR, u16 DGNMR
       16 bytes CHNAM x (PHNMR + ANNMR + 16 x DGNMR)   each digital word names its 16 bits, bit 0 first
       u32 PHUNIT x PHNMR    byte 3: 0 voltage, 1 current; bits 23-0: 1e-5 V or A per bit
       u32 ANUNIT x ANNMR    byte 3: 0 point-on-wave, 1 rms, 2 peak, 65-255 user; bits 23-0 signed scale
       u32 DIGUNIT x DGNMR   normal-status mask, valid-inputs mask
       u16 FNOM          bit 0: 1 = 50 Hz, 0 = 60 Hz
       u16 CFGCNT        configuration change count
    -4 i16 DATA_RATE     > 0 frames per second, < 0 seconds per frame
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from fractions import Fraction

from gridstat.errors import ValidationError
from gridstat.gateways.c37118.errors import DropReason, FrameError, bad_field, truncated
from gridstat.gateways.c37118.framing import (
    CHK_SIZE,
    HEAD_SIZE,
    VERSION_2005,
    VERSION_2011,
    FrameHead,
    FrameType,
    check_range,
    expect_type,
    read_head,
    seal,
)
from gridstat.gateways.c37118.timestamps import LOCKED_TO_UTC, MAX_TIME_BASE, TimeQuality, Timestamp

#: CFG-1/2 names are fixed 16-byte fields (6.4, Table 8).
NAME_SIZE = 16
#: Each digital status word has one name per bit (6.4, Table 8, CHNAM).
NAMES_PER_DIGITAL_WORD = 16
CONFIG_TYPES = (FrameType.CFG1, FrameType.CFG2, FrameType.CFG3)

_TOP = struct.Struct(">IH")
_PMU_HEAD = struct.Struct(">16sHHHHH")
_U32 = struct.Struct(">I")
_TAIL = struct.Struct(">HH")
_DATA_RATE = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class DataFormat:
    """FORMAT (6.4, Table 9): how a PMU block encodes its values. Bits 15-4 are unused."""

    phasors_polar: bool = False
    phasors_float: bool = False
    analogs_float: bool = False
    freq_float: bool = False

    def to_word(self) -> int:
        return self.freq_float << 3 | self.analogs_float << 2 | self.phasors_float << 1 | self.phasors_polar

    @classmethod
    def from_word(cls, word: int) -> DataFormat:
        return _FORMATS[word & 0x0F]


_FORMATS = tuple(DataFormat(bool(w & 1), bool(w & 2), bool(w & 4), bool(w & 8)) for w in range(16))


class PhasorKind(enum.IntEnum):
    """PHUNIT's most significant byte (6.4, Table 9); bit 3 of PHSCALE's type byte (Table 11)."""

    VOLTAGE = 0
    CURRENT = 1


class AnalogKind(enum.IntEnum):
    """ANUNIT's most significant byte (6.4, Table 9); 65-255 are user-defined, kept as plain ints."""

    POINT_ON_WAVE = 0
    RMS = 1
    PEAK = 2


@dataclass(frozen=True, slots=True)
class PhasorUnit:
    """PHUNIT of CFG-1/2: voltage or current, and the scale of 16-bit integer phasors."""

    kind: PhasorKind = PhasorKind.VOLTAGE
    #: Unsigned 24 bits: volts or amperes per bit of a 16-bit phasor, in units of 1e-5 (ignored when
    #: the phasors are floats).
    scale_1e_5: int = 0

    def to_word(self) -> int:
        return self.kind << 24 | self.scale_1e_5


@dataclass(frozen=True, slots=True)
class AnalogUnit:
    """ANUNIT of CFG-1/2: the analog's kind (``AnalogKind`` or a user code) and a user-defined scale."""

    kind: int = AnalogKind.POINT_ON_WAVE
    #: Signed 24 bits, user-defined scaling (the standard gives it no unit; docs/c37118.md).
    scale: int = 0

    def to_word(self) -> int:
        return self.kind << 24 | (self.scale & 0xFF_FFFF)


@dataclass(frozen=True, slots=True)
class DigitalUnit:
    """DIGUNIT: two 16-bit masks for one digital status word (6.4, Table 9)."""

    #: XORed with the status word gives 0 when every input is in its normal state.
    normal_status: int = 0
    #: A bit set for each input that is currently valid.
    valid_inputs: int = 0

    def to_word(self) -> int:
        return self.normal_status << 16 | self.valid_inputs


class PhasorComponent(enum.IntEnum):
    """Bits 2-0 of PHSCALE's phasor type byte (CFG-3, 6.4, Table 11)."""

    ZERO_SEQUENCE = 0
    POSITIVE_SEQUENCE = 1
    NEGATIVE_SEQUENCE = 2
    RESERVED_3 = 3
    PHASE_A = 4
    PHASE_B = 5
    PHASE_C = 6
    RESERVED_7 = 7


class PhasorModification(enum.IntFlag):
    """The first 16 bits of PHSCALE: how a continuous process modified the phasor (Table 11)."""

    NONE = 0
    UPSAMPLED_INTERPOLATION = 1 << 1
    UPSAMPLED_EXTRAPOLATION = 1 << 2
    DOWNSAMPLED_RESELECTION = 1 << 3
    DOWNSAMPLED_FIR = 1 << 4
    DOWNSAMPLED_NON_FIR = 1 << 5
    FILTERED = 1 << 6
    MAGNITUDE_CALIBRATED = 1 << 7
    PHASE_CALIBRATED = 1 << 8
    PHASE_ROTATED = 1 << 9
    PSEUDO_PHASOR = 1 << 10
    OTHER = 1 << 15


@dataclass(frozen=True, slots=True)
class PhasorScale:
    """PHSCALE of CFG-3 (Table 11): ``X' = scale * Xm * exp(j(phase - angle_offset_rad))``."""

    kind: PhasorKind = PhasorKind.VOLTAGE
    component: PhasorComponent = PhasorComponent.POSITIVE_SEQUENCE
    modification: PhasorModification = PhasorModification.NONE
    #: PHSCALE's fourth byte, free for the user.
    user_designation: int = 0
    #: Y, a 32-bit float: to primary volts or amperes (1 for float phasors already scaled).
    scale: float = 1.0
    #: Theta, a 32-bit float, subtracted from the phase angle (0 for float phasors already adjusted).
    angle_offset_rad: float = 0.0


@dataclass(frozen=True, slots=True)
class AnalogScale:
    """ANSCALE of CFG-3 (Table 11): ``X' = scale * X + offset``, both 32-bit floats."""

    scale: float = 1.0
    offset: float = 0.0


@dataclass(frozen=True, slots=True)
class Cfg3Details:
    """What CFG-3 adds to a PMU's configuration (6.4, Tables 10 and 11)."""

    #: G_PMU_ID: 16 bytes, user-assigned.
    global_pmu_id: bytes = bytes(16)
    phasor_scales: tuple[PhasorScale, ...] = ()
    analog_scales: tuple[AnalogScale, ...] = ()
    #: WGS 84, 32-bit floats; infinity where the location is not given.
    latitude_deg: float = float("inf")
    longitude_deg: float = float("inf")
    elevation_m: float = float("inf")
    #: SVC_CLASS, one ASCII character: "M" or "P" (IEEE C37.118.1).
    service_class: str = "M"
    #: WINDOW and GRP_DLY, signed 32-bit: the measurement window and group delay of all filters.
    window_us: int = 0
    group_delay_us: int = 0


@dataclass(frozen=True, slots=True)
class PmuConfig:
    """One PMU block of the data frames. The counts follow from the tuples: PHNMR is
    ``len(phasor_names)``, ANNMR ``len(analog_names)``, DGNMR ``len(digital_units)``."""

    station_name: str
    idcode: int
    data_format: DataFormat
    phasor_names: tuple[str, ...] = ()
    analog_names: tuple[str, ...] = ()
    #: 16 per digital status word, bit 0 of the first word first.
    digital_names: tuple[str, ...] = ()
    #: PHUNIT and ANUNIT: CFG-1/2 only (CFG-3 has PHSCALE and ANSCALE in ``cfg3`` instead).
    phasor_units: tuple[PhasorUnit, ...] = ()
    analog_units: tuple[AnalogUnit, ...] = ()
    digital_units: tuple[DigitalUnit, ...] = ()
    nominal_frequency_hz: int = 60
    #: CFGCNT: incremented by the device on each change of its configuration.
    config_count: int = 0
    #: CFG-3 only.
    cfg3: Cfg3Details | None = None

    @property
    def phasor_count(self) -> int:
        return len(self.phasor_names)

    @property
    def analog_count(self) -> int:
        return len(self.analog_names)

    @property
    def digital_word_count(self) -> int:
        return len(self.digital_units)


@dataclass(frozen=True, slots=True)
class ConfigFrame:
    """A CFG-1, CFG-2 or CFG-3 frame (``frame_type``). ``version`` 0 means the standard's: 1 for
    CFG-1/2, 2 for CFG-3 (6.2.1)."""

    frame_type: FrameType
    idcode: int
    soc: int
    fracsec: int
    time_base: int
    pmus: tuple[PmuConfig, ...]
    #: > 0: frames per second; < 0: seconds per frame (6.4, Table 9).
    data_rate: int
    time_quality: TimeQuality = LOCKED_TO_UTC
    version: int = 0

    def __post_init__(self) -> None:
        if self.version == 0:
            object.__setattr__(self, "version",
                               VERSION_2011 if self.frame_type is FrameType.CFG3 else VERSION_2005)

    @property
    def num_pmu(self) -> int:
        return len(self.pmus)

    @property
    def timestamp(self) -> Timestamp:
        return Timestamp(self.soc, self.fracsec, self.time_base, self.time_quality)

    @property
    def frames_per_second(self) -> Fraction | None:
        """DATA_RATE as a rate (``Fraction(1, 5)`` for -5), None for the meaningless 0."""
        if self.data_rate > 0:
            return Fraction(self.data_rate)
        if self.data_rate < 0:
            return Fraction(1, -self.data_rate)
        return None


# -- reading ----------------------------------------------------------------------------------------

def need(field: str, pos: int, size: int, end: int) -> None:
    """Raise ``truncated`` unless ``size`` bytes of ``field`` fit between ``pos`` and ``end``."""
    if pos + size > end:
        raise truncated(field, size, end - pos)


def read_time_base(word: int) -> int:
    """TIME_BASE's low 24 bits (its high byte is reserved for flags); 0 is not a time base."""
    time_base = word & MAX_TIME_BASE
    if time_base == 0:
        raise bad_field("TIME_BASE", word, "a fraction of second needs a non-zero time base")
    return time_base


def read_nominal_frequency(fnom: int) -> int:
    return 50 if fnom & 1 else 60


def _name16(raw: bytes) -> str:
    return raw.rstrip(b" \x00").decode("latin-1")


def _phasor_unit(word: int) -> PhasorUnit:
    kind = word >> 24
    if kind > PhasorKind.CURRENT:
        raise bad_field("PHUNIT", word, "the most significant byte is 0 (voltage) or 1 (current)")
    return PhasorUnit(PhasorKind(kind), word & 0xFF_FFFF)


def _analog_unit(word: int) -> AnalogUnit:
    scale = word & 0xFF_FFFF
    return AnalogUnit(word >> 24, scale - (1 << 24) if scale & 0x80_0000 else scale)


def parse_cfg12_frame(frame: bytes, *, head: FrameHead | None = None) -> ConfigFrame:
    """Parse a CFG-1 or CFG-2 frame (``head``: its framing, already checked by ``read_head``).

    Raises:
        FrameError: the framing (``read_head``), or a field: ``truncated``, ``bad_size`` (bytes after
            DATA_RATE) or ``bad_field`` (TIME_BASE 0, NUM_PMU 0, PHUNIT).
    """
    if head is None:
        head = read_head(frame)
    expect_type(head, FrameType.CFG1, FrameType.CFG2)
    end = len(frame) - CHK_SIZE
    time_base_word, num_pmu = _TOP.unpack_from(frame, HEAD_SIZE)
    time_base = read_time_base(time_base_word)
    if num_pmu == 0:
        raise bad_field("NUM_PMU", 0, "a stream has at least one PMU block")
    pos = HEAD_SIZE + _TOP.size
    pmus: list[PmuConfig] = []
    for _ in range(num_pmu):
        need("STN", pos, _PMU_HEAD.size, end)
        stn, idcode, fmt, phnmr, annmr, dgnmr = _PMU_HEAD.unpack_from(frame, pos)
        pos += _PMU_HEAD.size
        names = phnmr + annmr + NAMES_PER_DIGITAL_WORD * dgnmr
        need("CHNAM", pos, NAME_SIZE * names + 4 * (phnmr + annmr + dgnmr) + _TAIL.size, end)
        chnam = [_name16(frame[p:p + NAME_SIZE]) for p in range(pos, pos + NAME_SIZE * names, NAME_SIZE)]
        pos += NAME_SIZE * names
        words = struct.unpack_from(f">{phnmr + annmr + dgnmr}I", frame, pos)
        pos += 4 * len(words)
        fnom, cfgcnt = _TAIL.unpack_from(frame, pos)
        pos += _TAIL.size
        pmus.append(PmuConfig(
            station_name=_name16(stn),
            idcode=idcode,
            data_format=DataFormat.from_word(fmt),
            phasor_names=tuple(chnam[:phnmr]),
            analog_names=tuple(chnam[phnmr:phnmr + annmr]),
            digital_names=tuple(chnam[phnmr + annmr:]),
            phasor_units=tuple(_phasor_unit(w) for w in words[:phnmr]),
            analog_units=tuple(_analog_unit(w) for w in words[phnmr:phnmr + annmr]),
            digital_units=tuple(DigitalUnit(w >> 16, w & 0xFFFF) for w in words[phnmr + annmr:]),
            nominal_frequency_hz=read_nominal_frequency(fnom),
            config_count=cfgcnt,
        ))
    need("DATA_RATE", pos, _DATA_RATE.size, end)
    (data_rate,) = _DATA_RATE.unpack_from(frame, pos)
    pos += _DATA_RATE.size
    if pos != end:
        raise FrameError(DropReason.BAD_SIZE, f"{end - pos} bytes after DATA_RATE", field="FRAMESIZE",
                         value=len(frame))
    return ConfigFrame(head.frame_type, head.idcode, head.soc, head.fracsec, time_base, tuple(pmus), data_rate,
                       head.time_quality, head.version)


# -- building ---------------------------------------------------------------------------------------

def _pad16(field: str, name: str) -> bytes:
    try:
        raw = name.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{field} {name!r} is not ASCII", field=field) from exc
    if len(raw) > NAME_SIZE:
        raise ValidationError(f"{field} {name!r} is longer than {NAME_SIZE} bytes", field=field)
    return raw.ljust(NAME_SIZE, b" ")


def check_counts(pmu: PmuConfig) -> None:
    """What every configuration type needs of a PMU: counts that fit a u16 and 16 names per word."""
    check_range("PHNMR", pmu.phasor_count, 0, 0xFFFF)
    check_range("ANNMR", pmu.analog_count, 0, 0xFFFF)
    check_range("DGNMR", pmu.digital_word_count, 0, 0xFFFF)
    if len(pmu.digital_names) != NAMES_PER_DIGITAL_WORD * pmu.digital_word_count:
        raise ValidationError(f"{len(pmu.digital_names)} digital names for {pmu.digital_word_count} digital "
                              f"words (16 each)", field="CHNAM")
    check_range("IDCODE", pmu.idcode, 0, 0xFFFF)
    check_range("CFGCNT", pmu.config_count, 0, 0xFFFF)
    if pmu.nominal_frequency_hz not in (50, 60):
        raise ValidationError(f"FNOM {pmu.nominal_frequency_hz} Hz is neither 50 nor 60", field="FNOM")
    for d in pmu.digital_units:
        check_range("DIGUNIT", d.normal_status, 0, 0xFFFF)
        check_range("DIGUNIT", d.valid_inputs, 0, 0xFFFF)


def check_top(config: ConfigFrame) -> None:
    check_range("TIME_BASE", config.time_base, 1, MAX_TIME_BASE)
    check_range("NUM_PMU", config.num_pmu, 1, 0xFFFF)
    check_range("DATA_RATE", config.data_rate, -0x8000, 0x7FFF)


def fnom_word(pmu: PmuConfig) -> int:
    return 1 if pmu.nominal_frequency_hz == 50 else 0


def build_cfg12_frame(config: ConfigFrame) -> bytes:
    """The bytes of a CFG-1 or CFG-2 frame.

    Raises:
        ValidationError: a value that does not fit its field, a count that does not match, or CFG-3
            details in a CFG-1/2 configuration.
    """
    if config.frame_type not in (FrameType.CFG1, FrameType.CFG2):
        raise ValidationError(f"{config.frame_type.name} is not CFG-1 or CFG-2", field="SYNC")
    check_top(config)
    parts = [_TOP.pack(config.time_base, config.num_pmu)]
    for pmu in config.pmus:
        check_counts(pmu)
        if pmu.cfg3 is not None:
            raise ValidationError("CFG-3 details in a CFG-1/2 configuration", field="PMU")
        if len(pmu.phasor_units) != pmu.phasor_count:
            raise ValidationError(f"{len(pmu.phasor_units)} PHUNIT for {pmu.phasor_count} phasors", field="PHUNIT")
        if len(pmu.analog_units) != pmu.analog_count:
            raise ValidationError(f"{len(pmu.analog_units)} ANUNIT for {pmu.analog_count} analogs", field="ANUNIT")
        parts.append(_PMU_HEAD.pack(_pad16("STN", pmu.station_name), pmu.idcode, pmu.data_format.to_word(),
                                    pmu.phasor_count, pmu.analog_count, pmu.digital_word_count))
        parts.extend(_pad16("CHNAM", n) for n in (*pmu.phasor_names, *pmu.analog_names, *pmu.digital_names))
        for p in pmu.phasor_units:
            check_range("PHUNIT", p.scale_1e_5, 0, 0xFF_FFFF)
        for a in pmu.analog_units:
            check_range("ANUNIT", a.kind, 0, 0xFF)
            check_range("ANUNIT", a.scale, -0x80_0000, 0x7F_FFFF)
        parts.extend(_U32.pack(p.to_word()) for p in pmu.phasor_units)
        parts.extend(_U32.pack(a.to_word()) for a in pmu.analog_units)
        parts.extend(_U32.pack(d.to_word()) for d in pmu.digital_units)
        parts.append(_TAIL.pack(fnom_word(pmu), pmu.config_count))
    parts.append(_DATA_RATE.pack(config.data_rate))
    return seal(config.frame_type, version=config.version, idcode=config.idcode, soc=config.soc,
                fracsec=config.fracsec, time_quality=config.time_quality, body=b"".join(parts))
