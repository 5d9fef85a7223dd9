"""Configurations and data frames the pmu-gateway unit tests feed the session with (built by our codec)."""

from __future__ import annotations

import dataclasses

from gridstat.gateways.c37118 import (
    AnalogUnit,
    ConfigFrame,
    DataFormat,
    DataFrame,
    DigitalUnit,
    FrameType,
    PhasorKind,
    PhasorUnit,
    PmuConfig,
    PmuData,
    Stat,
    TimeQuality,
    build_frame,
)

STREAM = 7734
TIME_BASE = 1_000_000
SOC = 1_700_000_000
GOOD = Stat()
LOCKED = TimeQuality()

#: 16-bit rectangular phasors (PHUNIT scaled), 16-bit FREQ/DFREQ and analogs, one digital word.
INT_PMU = PmuConfig(
    station_name="Station A", idcode=7734, data_format=DataFormat(),
    phasor_names=("VA", "I1"), analog_names=("ANALOG1",),
    digital_names=("BREAKER 1 STATUS", *(f"B{i}" for i in range(2, 17))),
    phasor_units=(PhasorUnit(PhasorKind.VOLTAGE, 915527), PhasorUnit(PhasorKind.CURRENT, 45776)),
    analog_units=(AnalogUnit(1, 1),), digital_units=(DigitalUnit(0, 0xFFFF),),
    nominal_frequency_hz=60, config_count=22)

#: Float polar phasors, float FREQ/DFREQ and analogs, no digitals.
FLOAT_PMU = PmuConfig(
    station_name="PMU/2 east", idcode=12, data_format=DataFormat(True, True, True, True),
    phasor_names=("V1",), analog_names=("P",), phasor_units=(PhasorUnit(PhasorKind.VOLTAGE, 0),),
    analog_units=(AnalogUnit(2, 0),), nominal_frequency_hz=50, config_count=3)


def config(*pmus: PmuConfig, rate: int = 30, idcode: int = STREAM, frame_type: FrameType = FrameType.CFG2,
           time_base: int = TIME_BASE) -> ConfigFrame:
    return ConfigFrame(frame_type, idcode, SOC, 0, time_base, pmus or (INT_PMU,), rate)


def block(pmu: PmuConfig, k: int = 0, stat: Stat = GOOD) -> PmuData:
    """Block ``k`` of a stream: values that depend on ``k``."""
    f = pmu.data_format
    if f.phasors_float:
        phasors = tuple((float(1000 + k + i), 0.25 * (i + 1)) for i in range(pmu.phasor_count))
    elif f.phasors_polar:
        phasors = tuple((1000 + k + i, 2500 * (i + 1)) for i in range(pmu.phasor_count))
    else:
        phasors = tuple((14635 + k, -100 * (i + 1)) for i in range(pmu.phasor_count))
    freq, dfreq = (60.25 + k, 0.5) if f.freq_float else (250 + k, 12)
    analogs = tuple(float(10 * k + i) if f.analogs_float else 10 * k + i for i in range(pmu.analog_count))
    digitals = tuple((0x3C12 + k) & 0xFFFF for _ in range(pmu.digital_word_count))
    return PmuData(stat, phasors, freq, dfreq, analogs, digitals, pmu)


def data(cfg: ConfigFrame, k: int = 0, *, stat: Stat = GOOD, fracsec: int | None = None,
         quality: TimeQuality = LOCKED) -> bytes:
    rate = cfg.data_rate
    count = fracsec if fracsec is not None else round(k % rate * cfg.time_base / rate)
    frame = DataFrame(cfg.idcode, SOC + k // rate, count, tuple(block(p, k, stat) for p in cfg.pmus), cfg,
                      time_quality=quality)
    return build_frame(frame)


def cfg_bytes(cfg: ConfigFrame) -> bytes:
    return build_frame(cfg)


def with_channel(pmu: PmuConfig, name: str) -> PmuConfig:
    """``pmu`` with one more analog channel and CFGCNT + 1 (a configuration change)."""
    return dataclasses.replace(pmu, analog_names=(*pmu.analog_names, name),
                               analog_units=(*pmu.analog_units, AnalogUnit(0, 0)),
                               config_count=pmu.config_count + 1)
