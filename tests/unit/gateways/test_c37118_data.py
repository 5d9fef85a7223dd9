"""Data frames (C37.118.2-2011 6.3): the STAT word, values in engineering units, and what a data frame
that does not fit its configuration raises."""

from __future__ import annotations

import cmath
import dataclasses
import math

import c37118_bench
import c37118_samples as samples
import pytest

from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    AnalogScale,
    Cfg3Details,
    ConfigFrame,
    DataError,
    DataFormat,
    DataFrame,
    DataLayout,
    DropReason,
    FrameError,
    FrameType,
    PhasorKind,
    PhasorScale,
    PhasorUnit,
    PmuConfig,
    PmuData,
    PmuTimeQuality,
    Stat,
    TriggerReason,
    UnlockedTime,
    build_frame,
    parse_frame,
)
from gridstat.gateways.c37118.measurements import build_data_frame, decode_stat, parse_data_frame


def test_stat_bits_as_in_table_6() -> None:
    assert decode_stat(0x0000) == Stat()
    assert decode_stat(0x4000).data_error is DataError.PMU_ERROR
    assert decode_stat(0x8000).data_error is DataError.TEST_MODE
    assert decode_stat(0xC000).data_error is DataError.PMU_ERROR_DO_NOT_USE
    assert decode_stat(0x2000) == Stat(pmu_sync_error=True)
    assert decode_stat(0x1000) == Stat(sorted_by_arrival=True)
    assert decode_stat(0x0800) == Stat(trigger_detected=True)
    assert decode_stat(0x0400) == Stat(config_change_pending=True)
    assert decode_stat(0x0200) == Stat(data_modified=True)
    assert decode_stat(0x01C0).pmu_time_quality is PmuTimeQuality.OVER_10MS_OR_UNKNOWN
    assert decode_stat(0x0040).pmu_time_quality is PmuTimeQuality.UNDER_100NS
    assert decode_stat(0x0030).unlocked_time is UnlockedTime.OVER_1000S
    assert decode_stat(0x0010).unlocked_time is UnlockedTime.UNDER_100S
    assert decode_stat(0x0007).trigger_reason is TriggerReason.DIGITAL
    assert decode_stat(0x000F).trigger_reason == 15  # user-defined 8-15


def test_every_stat_word_round_trips() -> None:
    assert all(decode_stat(w).to_word() == w for w in range(0x10000))


ONE_VOLT_PER_BIT = PhasorUnit(PhasorKind.VOLTAGE, 100_000)


def _config(pmu: PmuConfig, frame_type: FrameType = FrameType.CFG2) -> ConfigFrame:
    return ConfigFrame(frame_type, 9, 0, 0, 1_000_000, (pmu,), 60)


def _pmu(fmt: DataFormat, *, phasors: int = 1, analogs: int = 0, cfg3: Cfg3Details | None = None,
         unit: PhasorUnit = ONE_VOLT_PER_BIT, fnom: int = 60) -> PmuConfig:
    return PmuConfig("S", 9, fmt, tuple(f"P{i}" for i in range(phasors)), tuple(f"A{i}" for i in range(analogs)),
                     phasor_units=() if cfg3 else (unit,) * phasors, analog_units=(),
                     nominal_frequency_hz=fnom, cfg3=cfg3)


def test_sixteen_bit_polar_phasor_uses_phunit_and_1e_4_radians() -> None:
    pmu = _pmu(DataFormat(phasors_polar=True), unit=PhasorUnit(PhasorKind.CURRENT, 250))  # 2.5 mA per bit
    block = PmuData(Stat(), ((40000, -15708),), -1500, 25, (), (), pmu)
    (value,) = block.phasor_values()
    assert abs(value) == pytest.approx(40000 * 250e-5)
    assert cmath.phase(value) == pytest.approx(-1.5708)
    assert block.frequency_hz() == pytest.approx(58.5)  # FNOM 60 Hz - 1500 mHz
    assert block.rocof_hz_per_s() == pytest.approx(0.25)  # DFREQ x 100


def test_float_values_are_engineering_units_already() -> None:
    pmu = _pmu(DataFormat(phasors_polar=True, phasors_float=True, freq_float=True), fnom=50)
    block = PmuData(Stat(), ((230.5, math.pi / 2),), 49.98, -0.125, (), (), pmu)
    assert block.phasor_values()[0] == pytest.approx(230.5j)
    assert block.frequency_hz() == 49.98  # float FREQ is the frequency itself (6.3, Table 6)
    assert block.rocof_hz_per_s() == -0.125
    rect = _pmu(DataFormat(phasors_float=True))
    assert PmuData(Stat(), ((3.0, -4.0),), 0, 0, (), (), rect).phasor_values() == (complex(3, -4),)


def test_cfg3_scales_phasors_and_analogs() -> None:
    details = Cfg3Details(phasor_scales=(PhasorScale(scale=2.0, angle_offset_rad=math.pi / 2),),
                          analog_scales=(AnalogScale(scale=0.5, offset=10.0),))
    pmu = _pmu(DataFormat(phasors_polar=True, analogs_float=True), analogs=1, cfg3=details)
    block = PmuData(Stat(), ((1000, 0),), 0, 0, (4.0,), (), pmu)
    # X' = Y * Xm * exp(j(phase - theta)) (6.4, Table 11, PHSCALE)
    assert block.phasor_values()[0] == pytest.approx(-2000j)
    assert block.analog_values() == (12.0,)  # M * X + B (ANSCALE)


def test_cfg12_analogs_are_as_sent() -> None:
    pmu = _pmu(DataFormat(), analogs=2)
    assert PmuData(Stat(), ((0, 0),), 0, 0, (-5, 7), (), pmu).analog_values() == (-5.0, 7.0)


def test_a_data_frame_that_does_not_fit_its_configuration() -> None:
    config = parse_frame(samples.PYPMU_CFG2)
    assert isinstance(config, ConfigFrame)
    other_stream = dataclasses.replace(config, idcode=1)
    with pytest.raises(FrameError) as info:
        parse_data_frame(samples.PYPMU_DATA, other_stream)
    assert (info.value.drop_reason, info.value.field, info.value.value) == (DropReason.UNKNOWN_IDCODE, "IDCODE", 7734)
    two = parse_frame(samples.PYPMU_CFG2_TWO_PMUS)
    assert isinstance(two, ConfigFrame)
    with pytest.raises(FrameError) as info:
        parse_data_frame(samples.PYPMU_DATA, two)
    assert info.value.drop_reason is DropReason.NUM_PMU_MISMATCH
    with pytest.raises(FrameError) as info:
        parse_data_frame(samples.PYPMU_CFG2, config)
    assert (info.value.drop_reason, info.value.field) == (DropReason.BAD_FIELD, "SYNC")


def test_a_layout_whose_frames_would_not_fit() -> None:
    big = _pmu(DataFormat(phasors_float=True), phasors=8200)
    with pytest.raises(FrameError) as info:
        DataLayout(_config(big))
    assert info.value.drop_reason is DropReason.BAD_SIZE


@pytest.mark.parametrize(("change", "field"), [
    ({"phasors": ()}, "PHASORS"),
    ({"analogs": (1.0,)}, "ANALOG"),
    ({"digitals": (1,)}, "DIGITAL"),
    ({"phasors": ((70000, 0),)}, "DATA"),  # not an i16
    ({"phasors": ((1.5, 0),)}, "DATA"),  # not an integer in a 16-bit format
    ({"freq": 40000}, "DATA"),
])
def test_build_refuses_values_that_do_not_fit(change: dict[str, object], field: str) -> None:
    config = _config(_pmu(DataFormat()))
    block = dataclasses.replace(PmuData(Stat(), ((1, 2),), 0, 0, (), (), config.pmus[0]), **change)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as info:
        build_data_frame(DataFrame(9, 0, 0, (block,), config))
    assert info.value.field == field
    with pytest.raises(ValidationError) as info:
        build_frame(DataFrame(9, 0, 0, (), config))
    assert info.value.field == "NUM_PMU"


def test_layout_is_reused_for_building() -> None:
    config = parse_frame(samples.PYPMU_CFG2)
    assert isinstance(config, ConfigFrame)
    layout = DataLayout(config)
    frame = parse_data_frame(samples.PYPMU_DATA, layout)
    assert build_data_frame(frame, layout=layout) == samples.PYPMU_DATA
    assert layout.frame_size == len(samples.PYPMU_DATA)


def test_microbenchmark_runs() -> None:
    result = c37118_bench.bench_data_frames(iterations=64)
    assert set(result) == {"layout", "decoder"}
    assert all(v > 0 for v in result.values())
