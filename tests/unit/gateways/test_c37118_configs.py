"""Configuration frames (C37.118.2-2011 6.4): CFG-1/2 and CFG-3 fields a parser refuses, what a
builder refuses, and the defaults of a configuration."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import c37118_samples as samples
import pytest

from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    AnalogScale,
    AnalogUnit,
    Cfg3Details,
    ConfigFrame,
    DataFormat,
    DigitalUnit,
    DropReason,
    FrameError,
    FrameType,
    PhasorScale,
    PhasorUnit,
    PmuConfig,
    build_frame,
    crc_ccitt,
    parse_frame,
)
from gridstat.gateways.c37118.cfg3 import build_cfg3_frame

ANNEX = parse_frame(samples.PYPMU_CFG2)
assert isinstance(ANNEX, ConfigFrame)
STATION = ANNEX.pmus[0]
# Offsets in the annex CFG-2 (6.4, Table 8): 4 phasors, 3 analogs, 1 digital word, so 23 names.
TIME_BASE_AT, NUM_PMU_AT, PHUNIT_AT = 14, 18, 46 + 16 * 23


def _patched(frame: bytes, at: int, value: bytes) -> bytes:
    body = frame[:at] + value + frame[at + len(value):-2]
    return body + crc_ccitt(body).to_bytes(2, "big")


def _resized(body: bytes) -> bytes:
    """``body`` (a frame without CHK) with FRAMESIZE and CHK made right."""
    body = body[:2] + (len(body) + 2).to_bytes(2, "big") + body[4:]
    return body + crc_ccitt(body).to_bytes(2, "big")


def _parse_error(frame: bytes) -> FrameError:
    with pytest.raises(FrameError) as info:
        parse_frame(frame)
    return info.value


@pytest.mark.parametrize(("frame", "reason", "field"), [
    (_patched(samples.PYPMU_CFG2, TIME_BASE_AT, bytes.fromhex("ff000000")), DropReason.BAD_FIELD, "TIME_BASE"),
    (_patched(samples.PYPMU_CFG2, NUM_PMU_AT, b"\x00\x00"), DropReason.BAD_FIELD, "NUM_PMU"),
    (_patched(samples.PYPMU_CFG2, NUM_PMU_AT, b"\x00\x02"), DropReason.TRUNCATED, "STN"),
    (_patched(samples.PYPMU_CFG2, 40, b"\x00\x20"), DropReason.TRUNCATED, "CHNAM"),  # PHNMR 32
    (_patched(samples.PYPMU_CFG2, 44, b"\xff\xff"), DropReason.TRUNCATED, "CHNAM"),  # DGNMR 65535
    (_patched(samples.PYPMU_CFG2, PHUNIT_AT, b"\x02"), DropReason.BAD_FIELD, "PHUNIT"),
    (_resized(samples.PYPMU_CFG2[:-2] + b"\x00"), DropReason.BAD_SIZE, "FRAMESIZE"),
    (_resized(samples.PYPMU_CFG2[:-4]), DropReason.TRUNCATED, "DATA_RATE"),
])
def test_cfg2_fields_a_parser_refuses(frame: bytes, reason: DropReason, field: str) -> None:
    err = _parse_error(frame)
    assert (err.drop_reason, err.field) == (reason, field)


def test_time_base_flags_and_fnom_reserved_bits_are_ignored() -> None:
    flagged = _patched(samples.PYPMU_CFG2, TIME_BASE_AT, bytes.fromhex("7f0f4240"))
    flagged = _patched(flagged, PHUNIT_AT + 4 * (4 + 3 + 1), b"\xff\xfe")  # FNOM bits 15-1 set, bit 0: 60 Hz
    assert parse_frame(flagged) == ANNEX


CFG3_PMU = PmuConfig(
    "Ünïcode station", 5, DataFormat(phasors_polar=True), ("V\N{GREEK SMALL LETTER ALPHA}",),
    cfg3=Cfg3Details(phasor_scales=(PhasorScale(),), service_class="P", latitude_deg=46.5, window_us=-20_000),
)
CFG3 = ConfigFrame(FrameType.CFG3, 5, 1, 2, 1000, (CFG3_PMU,), 10)


def test_cfg3_defaults_and_utf8_names() -> None:
    assert CFG3.version == 2 and ANNEX.version == 1
    raw = build_frame(CFG3)
    assert raw[1] == 0x52  # CFG-3, version 2 (6.4, Table 11)
    assert raw[14:16] == b"\x00\x00"  # CONT_IDX 0: the only frame
    assert parse_frame(raw) == CFG3
    assert "Ünïcode station".encode() in raw


def test_cfg3_fields_a_parser_refuses() -> None:
    raw = build_frame(CFG3)
    name_at = 22  # STN's length byte: after CONT_IDX, TIME_BASE and NUM_PMU
    assert raw[name_at] == len("Ünïcode station".encode())
    err = _parse_error(_patched(raw, name_at + 1, b"\xff"))
    assert (err.drop_reason, err.field) == (DropReason.BAD_FIELD, "STN")
    err = _parse_error(_patched(raw, name_at, b"\xf0"))
    assert err.drop_reason is DropReason.TRUNCATED
    err = _parse_error(_resized(raw[:-2] + b"\x00\x00"))
    assert (err.drop_reason, err.field) == (DropReason.BAD_SIZE, "FRAMESIZE")


def _build_error(config: ConfigFrame) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        build_frame(config)
    return info.value


def _annex_with(**change: object) -> ConfigFrame:
    return dataclasses.replace(ANNEX, pmus=(dataclasses.replace(STATION, **change),))  # type: ignore[arg-type]


@pytest.mark.parametrize(("config", "field"), [
    (_annex_with(station_name="seventeen chars!!"), "STN"),
    (_annex_with(station_name="Gdańsk"), "STN"),
    (_annex_with(phasor_names=("VA", "VB", "VC", "a name of 17 char")), "CHNAM"),
    (_annex_with(digital_names=("B1",) * 15), "CHNAM"),
    (_annex_with(phasor_units=()), "PHUNIT"),
    (_annex_with(phasor_units=(PhasorUnit(scale_1e_5=2**24),) * 4), "PHUNIT"),
    (_annex_with(analog_units=(AnalogUnit(scale=2**23),) * 3), "ANUNIT"),
    (_annex_with(analog_units=(AnalogUnit(kind=256),) * 3), "ANUNIT"),
    (_annex_with(digital_units=(DigitalUnit(0x10000, 0),)), "DIGUNIT"),
    (_annex_with(nominal_frequency_hz=55), "FNOM"),
    (_annex_with(config_count=-1), "CFGCNT"),
    (_annex_with(cfg3=Cfg3Details()), "PMU"),
    (dataclasses.replace(ANNEX, time_base=0), "TIME_BASE"),
    (dataclasses.replace(ANNEX, pmus=()), "NUM_PMU"),
    (dataclasses.replace(ANNEX, data_rate=40000), "DATA_RATE"),
])
def test_cfg12_values_a_builder_refuses(config: ConfigFrame, field: str) -> None:
    assert _build_error(config).field == field


def _cfg3_with(**details: object) -> ConfigFrame:
    pmu = CFG3.pmus[0]
    assert pmu.cfg3 is not None
    return dataclasses.replace(CFG3, pmus=(dataclasses.replace(pmu, cfg3=dataclasses.replace(pmu.cfg3, **details)),))  # type: ignore[arg-type]


@pytest.mark.parametrize(("config", "field"), [
    (_cfg3_with(global_pmu_id=b"short"), "G_PMU_ID"),
    (_cfg3_with(service_class="MP"), "SVC_CLASS"),
    (_cfg3_with(service_class="Ω"), "SVC_CLASS"),
    (_cfg3_with(phasor_scales=()), "PHSCALE"),
    (_cfg3_with(phasor_scales=(PhasorScale(scale=1e39),)), "PHSCALE"),
    (_cfg3_with(analog_scales=(AnalogScale(),)), "ANSCALE"),  # one ANSCALE, no analog
    (_cfg3_with(latitude_deg=-1e40), "PMU_LAT"),
    (_cfg3_with(window_us=2**31), "WINDOW"),
    (_cfg3_with(group_delay_us=-(2**31) - 1), "GRP_DLY"),
    (dataclasses.replace(CFG3, pmus=(dataclasses.replace(CFG3.pmus[0], station_name="x" * 256),)), "STN"),
    (dataclasses.replace(CFG3, pmus=(dataclasses.replace(CFG3.pmus[0], cfg3=None),)), "PMU"),
    (dataclasses.replace(CFG3, pmus=(dataclasses.replace(CFG3.pmus[0], phasor_units=(PhasorUnit(),)),)), "PHUNIT"),
])
def test_cfg3_values_a_builder_refuses(config: ConfigFrame, field: str) -> None:
    assert _build_error(config).field == field


def test_a_cfg3_too_large_for_one_frame() -> None:
    names = tuple("n" * 255 for _ in range(300))
    pmu = dataclasses.replace(CFG3.pmus[0], phasor_names=names,
                              cfg3=Cfg3Details(phasor_scales=(PhasorScale(),) * len(names)))
    with pytest.raises(ValidationError) as info:
        build_cfg3_frame(dataclasses.replace(CFG3, pmus=(pmu,)))
    assert info.value.field == "FRAMESIZE"


def test_data_rate_as_a_rate() -> None:
    assert ANNEX.frames_per_second == 30
    assert dataclasses.replace(ANNEX, data_rate=-5).frames_per_second == Fraction(1, 5)
    assert dataclasses.replace(ANNEX, data_rate=0).frames_per_second is None
    assert ANNEX.timestamp.seconds == 1149577200 + Fraction(463000, 10**6)
