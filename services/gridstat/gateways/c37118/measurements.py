"""Data frames: one block per PMU of the stream's configuration, each headed by its STAT word.

Layout after the common fields, NUM_PMU blocks in the configuration's order, then CHK
(C37.118.2-2011 6.3, Tables 5 and 6)::

    u16 STAT                      bit-mapped flags (``Stat``)
    PHASORS x PHNMR               16-bit: rectangular (i16 real, i16 imaginary) or polar (u16 magnitude,
                                  i16 angle in 1e-4 rad); float: two f32 (real, imaginary or magnitude, rad)
    FREQ, DFREQ                   i16 deviation from FNOM in mHz and ROCOF in Hz/s x 100, or f32 frequency
                                  in Hz and ROCOF in Hz/s
    ANALOG x ANNMR                i16 or f32
    DIGITAL x DGNMR               u16

Nothing in a data frame says how it is laid out: a ``DataLayout`` compiled once per configuration
holds one ``struct.Struct`` for every block of the frame, so parsing a frame is one ``unpack_from`` and
slicing (the hot path: no per-frame dictionaries, no per-value calls). ``PmuData`` keeps the values as
they are on the wire (integers stay integers, so a frame rebuilds to the same bytes) and converts them
to engineering units on request, with the configuration's PHUNIT or CFG-3 PHSCALE/ANSCALE.
"""

from __future__ import annotations

import cmath
import enum
import functools
import struct
from dataclasses import dataclass, field

from gridstat.errors import ValidationError
from gridstat.gateways.c37118.configs import ConfigFrame, PmuConfig
from gridstat.gateways.c37118.errors import DropReason, FrameError
from gridstat.gateways.c37118.framing import (
    CHK_SIZE,
    HEAD_SIZE,
    MAX_FRAME_SIZE,
    FrameHead,
    FrameType,
    expect_type,
    read_head,
    seal,
)
from gridstat.gateways.c37118.timestamps import LOCKED_TO_UTC, TimeQuality, Timestamp

#: Angle of a 16-bit polar phasor: radians x 10**4 (6.3, Table 6).
ANGLE_PER_BIT_RAD = 1e-4
#: PHUNIT's 24-bit scale is in 10**-5 V or A per bit (6.4, Table 9).
PHUNIT_PER_BIT = 1e-5
#: 16-bit FREQ is the deviation from FNOM in mHz; 16-bit DFREQ is Hz/s x 100 (6.3, Table 6).
FREQ_PER_BIT_HZ = 1e-3
DFREQ_PER_BIT_HZ_PER_S = 1e-2


class DataError(enum.IntEnum):
    """STAT bits 15-14 (6.3, Table 6)."""

    GOOD = 0
    #: PMU error, no information about the data.
    PMU_ERROR = 1
    #: PMU in test mode, or absent data inserted by a PDC: do not use the values.
    TEST_MODE = 2
    #: PMU error: do not use the values.
    PMU_ERROR_DO_NOT_USE = 3


class PmuTimeQuality(enum.IntEnum):
    """STAT bits 8-6: the PMU's maximum time uncertainty at the time of measurement (6.3.1, Table 7)."""

    NOT_USED = 0
    UNDER_100NS = 1
    UNDER_1US = 2
    UNDER_10US = 3
    UNDER_100US = 4
    UNDER_1MS = 5
    UNDER_10MS = 6
    OVER_10MS_OR_UNKNOWN = 7


class UnlockedTime(enum.IntEnum):
    """STAT bits 5-4: how long time synchronisation has been lost (6.3.1)."""

    UNDER_10S = 0
    UNDER_100S = 1
    UNDER_1000S = 2
    OVER_1000S = 3


class TriggerReason(enum.IntEnum):
    """STAT bits 3-0 (6.3, Table 6); 8-15 are user-defined and kept as plain ints."""

    MANUAL = 0
    MAGNITUDE_LOW = 1
    MAGNITUDE_HIGH = 2
    PHASE_ANGLE_DIFFERENCE = 3
    FREQUENCY_HIGH_OR_LOW = 4
    DF_DT_HIGH = 5
    RESERVED = 6
    DIGITAL = 7


@dataclass(frozen=True, slots=True)
class Stat:
    """The STAT word heading a PMU's block (6.3, Table 6; 6.3.1). Every bit has a meaning."""

    data_error: DataError = DataError.GOOD
    #: Bit 13: the PMU lost its UTC-traceable time source.
    pmu_sync_error: bool = False
    #: Bit 12: the block was placed in this frame by arrival, not by its time tag.
    sorted_by_arrival: bool = False
    #: Bit 11.
    trigger_detected: bool = False
    #: Bit 10: the configuration changes in a minute; fetch it again.
    config_change_pending: bool = False
    #: Bit 9: the data was modified by post-processing (interpolation, down-sampling, ...).
    data_modified: bool = False
    pmu_time_quality: PmuTimeQuality = PmuTimeQuality.NOT_USED
    unlocked_time: UnlockedTime = UnlockedTime.UNDER_10S
    #: ``TriggerReason`` or a user-defined 8-15.
    trigger_reason: int = TriggerReason.MANUAL

    def to_word(self) -> int:
        return (self.data_error << 14 | self.pmu_sync_error << 13 | self.sorted_by_arrival << 12
                | self.trigger_detected << 11 | self.config_change_pending << 10 | self.data_modified << 9
                | self.pmu_time_quality << 6 | self.unlocked_time << 4 | self.trigger_reason)


@functools.lru_cache(maxsize=1024)
def decode_stat(word: int) -> Stat:
    """The STAT word as a ``Stat`` (cached: a stream repeats a handful of words)."""
    reason = word & 0x0F
    return Stat(DataError(word >> 14), bool(word & 0x2000), bool(word & 0x1000), bool(word & 0x0800),
                bool(word & 0x0400), bool(word & 0x0200), PmuTimeQuality((word >> 6) & 0x07),
                UnlockedTime((word >> 4) & 0x03), TriggerReason(reason) if reason <= TriggerReason.DIGITAL else reason)


@dataclass(frozen=True, slots=True)
class PmuData:
    """One PMU's block of a data frame, values as on the wire; ``config`` says what they mean."""

    stat: Stat
    #: (real, imaginary) or (magnitude, angle) pairs: ints in 16-bit formats, floats in float formats.
    phasors: tuple[tuple[float, float], ...]
    #: FREQ: 16-bit, the deviation from FNOM in mHz; float, the frequency in Hz.
    freq: float
    #: DFREQ: 16-bit, ROCOF in Hz/s x 100; float, ROCOF in Hz/s.
    dfreq: float
    analogs: tuple[float, ...]
    digitals: tuple[int, ...]
    config: PmuConfig = field(compare=False, repr=False)

    def frequency_hz(self) -> float:
        if self.config.data_format.freq_float:
            return self.freq
        return self.config.nominal_frequency_hz + self.freq * FREQ_PER_BIT_HZ

    def rocof_hz_per_s(self) -> float:
        return self.dfreq if self.config.data_format.freq_float else self.dfreq * DFREQ_PER_BIT_HZ_PER_S

    def phasor_values(self) -> tuple[complex, ...]:
        """The phasors as complex numbers in volts or amperes (each channel's PHUNIT or PHSCALE kind):
        16-bit values times PHUNIT's scale (CFG-1/2) or PHSCALE's Y, rotated by -theta (CFG-3)."""
        fmt = self.config.data_format
        details = self.config.cfg3
        out: list[complex] = []
        for i, (a, b) in enumerate(self.phasors):
            if fmt.phasors_polar:
                value = cmath.rect(a, b if fmt.phasors_float else b * ANGLE_PER_BIT_RAD)
            else:
                value = complex(a, b)
            if details is not None:
                scale = details.phasor_scales[i]
                value *= scale.scale
                if scale.angle_offset_rad:
                    value *= cmath.rect(1.0, -scale.angle_offset_rad)
            elif not fmt.phasors_float:
                value *= self.config.phasor_units[i].scale_1e_5 * PHUNIT_PER_BIT
            out.append(value)
        return tuple(out)

    def analog_values(self) -> tuple[float, ...]:
        """CFG-3: ``M * X + B`` with ANSCALE. CFG-1/2: the values as sent (ANUNIT's scaling is
        user-defined; the standard gives it no unit)."""
        details = self.config.cfg3
        if details is None:
            return tuple(float(x) for x in self.analogs)
        return tuple(s.scale * x + s.offset for s, x in zip(details.analog_scales, self.analogs, strict=True))


@dataclass(frozen=True, slots=True)
class DataFrame:
    """A data frame: one ``PmuData`` per PMU of ``config``, all measured at ``timestamp``."""

    idcode: int
    soc: int
    fracsec: int
    pmus: tuple[PmuData, ...]
    config: ConfigFrame = field(compare=False, repr=False)
    time_quality: TimeQuality = LOCKED_TO_UTC
    version: int = 1

    @property
    def timestamp(self) -> Timestamp:
        return Timestamp(self.soc, self.fracsec, self.config.time_base, self.time_quality)


class DataLayout:
    """The data frames of one configuration, compiled: one struct for all blocks, and where each
    block's values sit in its flat tuple."""

    __slots__ = ("_blocks", "body", "config", "frame_size")

    def __init__(self, config: ConfigFrame) -> None:
        """Raises FrameError (``bad_size``) when the data frames would not fit 65535 bytes."""
        fmt = [">"]
        blocks: list[tuple[int, int, int, int, int, PmuConfig]] = []
        pos = 0
        for pmu in config.pmus:
            f = pmu.data_format
            n_ph, n_an, n_dg = pmu.phasor_count, pmu.analog_count, pmu.digital_word_count
            if f.phasors_float:
                phasors = f"{2 * n_ph}f"
            elif f.phasors_polar:
                phasors = "Hh" * n_ph
            else:
                phasors = f"{2 * n_ph}h"
            fmt.append(f"H{phasors}{'2f' if f.freq_float else '2h'}{n_an}{'f' if f.analogs_float else 'h'}{n_dg}H")
            ph_end = pos + 1 + 2 * n_ph
            an_end = ph_end + 2 + n_an
            blocks.append((pos, ph_end, an_end, an_end + n_dg, n_ph, pmu))
            pos = an_end + n_dg
        self.body = struct.Struct("".join(fmt))
        self.frame_size = HEAD_SIZE + self.body.size + CHK_SIZE
        if self.frame_size > MAX_FRAME_SIZE:
            raise FrameError(DropReason.BAD_SIZE, f"its data frames would have {self.frame_size} bytes",
                             field="NUM_PMU", value=config.num_pmu)
        self.config = config
        self._blocks = tuple(blocks)

    def unpack(self, frame: bytes, head: FrameHead) -> DataFrame:
        """The data frame, its framing checked and its size equal to ``frame_size``."""
        values = self.body.unpack_from(frame, HEAD_SIZE)
        pmus = []
        for start, ph_end, an_end, end, n_ph, pmu in self._blocks:
            ph = values[start + 1:ph_end]
            pmus.append(PmuData(
                decode_stat(values[start]),
                tuple(zip(ph[0::2], ph[1::2], strict=True)) if n_ph else (),
                values[ph_end],
                values[ph_end + 1],
                values[ph_end + 2:an_end],
                values[an_end:end],
                pmu,
            ))
        return DataFrame(head.idcode, head.soc, head.fracsec, tuple(pmus), self.config, head.time_quality,
                         head.version)

    def pack(self, frame: DataFrame) -> bytes:
        """The bytes of ``frame``.

        Raises:
            ValidationError: a block whose counts do not match this configuration, or a value that
                does not fit its field.
        """
        if len(frame.pmus) != len(self._blocks):
            raise ValidationError(f"{len(frame.pmus)} PMU blocks for NUM_PMU {len(self._blocks)}", field="NUM_PMU")
        values: list[float] = []
        for data, (_, _, _, _, n_ph, pmu) in zip(frame.pmus, self._blocks, strict=True):
            if len(data.phasors) != n_ph:
                raise ValidationError(f"{len(data.phasors)} phasors for PHNMR {n_ph}", field="PHASORS")
            if len(data.analogs) != pmu.analog_count:
                raise ValidationError(f"{len(data.analogs)} analogs for ANNMR {pmu.analog_count}", field="ANALOG")
            if len(data.digitals) != pmu.digital_word_count:
                raise ValidationError(f"{len(data.digitals)} digital words for DGNMR {pmu.digital_word_count}",
                                      field="DIGITAL")
            values.append(data.stat.to_word())
            for a, b in data.phasors:
                values += (a, b)
            values += (data.freq, data.dfreq, *data.analogs, *data.digitals)
        try:
            body = self.body.pack(*values)
        except (struct.error, OverflowError) as exc:
            raise ValidationError(f"a value does not fit its field: {exc}", field="DATA") from exc
        return seal(FrameType.DATA, version=frame.version, idcode=frame.idcode, soc=frame.soc, fracsec=frame.fracsec,
                    time_quality=frame.time_quality, body=body)


def parse_data_frame(frame: bytes, layout: DataLayout | ConfigFrame, *, head: FrameHead | None = None) -> DataFrame:
    """Parse a data frame against its stream's configuration (compile a ``DataLayout`` once per
    configuration and pass it: a ``ConfigFrame`` is compiled on every call).

    Raises:
        FrameError: the framing (``read_head``), ``unknown_idcode`` (the frame is not from the
            configuration's stream) or ``num_pmu_mismatch`` (its size is not the configuration's).
    """
    if head is None:
        head = read_head(frame)
    expect_type(head, FrameType.DATA)
    if isinstance(layout, ConfigFrame):
        layout = DataLayout(layout)
    if head.idcode != layout.config.idcode:
        raise FrameError(DropReason.UNKNOWN_IDCODE, f"IDCODE {head.idcode}, configuration of {layout.config.idcode}",
                         field="IDCODE", value=head.idcode)
    if len(frame) != layout.frame_size:
        raise FrameError(DropReason.NUM_PMU_MISMATCH,
                         f"{len(frame)} bytes, the configuration's {layout.config.num_pmu} blocks take "
                         f"{layout.frame_size}", field="FRAMESIZE", value=len(frame))
    return layout.unpack(frame, head)


def build_data_frame(frame: DataFrame, *, layout: DataLayout | None = None) -> bytes:
    """The bytes of a data frame (pass the configuration's compiled ``layout`` on a hot path)."""
    return (layout if layout is not None else DataLayout(frame.config)).pack(frame)
