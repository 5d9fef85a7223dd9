"""Published frames, byte for byte (c37118_samples): the standard's annex example as pypmu publishes it,
and frames captured from real PMU and PDC sessions. Each parses to the values it carries and builds
back to the same bytes."""

from __future__ import annotations

import cmath
import math
from fractions import Fraction

import c37118_samples as samples
import pytest

from gridstat.gateways.c37118 import (
    AnalogKind,
    AnalogUnit,
    Command,
    CommandFrame,
    ConfigFrame,
    DataFormat,
    DataFrame,
    DigitalUnit,
    FrameType,
    HeaderFrame,
    MessageTimeQuality,
    PhasorKind,
    PhasorUnit,
    PmuConfig,
    PmuData,
    Stat,
    StreamDecoder,
    TimeQuality,
    build_frame,
    parse_frame,
)
from gridstat.gateways.c37118.splitting import FrameSplitter

STATION_A = PmuConfig(
    station_name="Station A",
    idcode=7734,
    data_format=DataFormat(phasors_polar=False, phasors_float=False, analogs_float=True, freq_float=False),
    phasor_names=("VA", "VB", "VC", "I1"),
    analog_names=("ANALOG1", "ANALOG2", "ANALOG3"),
    digital_names=tuple(f"BREAKER {c} STATUS" for c in "123456789ABCDEFG"),
    phasor_units=(PhasorUnit(PhasorKind.VOLTAGE, 915527),) * 3 + (PhasorUnit(PhasorKind.CURRENT, 45776),),
    analog_units=(AnalogUnit(AnalogKind.POINT_ON_WAVE, 1), AnalogUnit(AnalogKind.RMS, 1),
                  AnalogUnit(AnalogKind.PEAK, 1)),
    digital_units=(DigitalUnit(normal_status=0x0000, valid_inputs=0xFFFF),),
    nominal_frequency_hz=60,
    config_count=22,
)
# FRACSEC 0x56 071098: a leap second deletion pending, time within 1e-4 s of UTC (Table 3, Table 4).
ANNEX_CFG2 = ConfigFrame(FrameType.CFG2, idcode=7734, soc=1149577200, fracsec=463000, time_base=1_000_000,
                         pmus=(STATION_A,), data_rate=30,
                         time_quality=TimeQuality(MessageTimeQuality.WITHIN_100US, leap_second_pending=True,
                                                  leap_second_deletion=True))
ANNEX_BLOCK = PmuData(Stat(), ((14635, 0), (-7318, -12676), (-7318, 12675), (1092, 0)), 2500, 0,
                      (100.0, 1000.0, 10000.0), (0x3C12,), STATION_A)


def test_annex_configuration_frame() -> None:
    assert parse_frame(samples.PYPMU_CFG2) == ANNEX_CFG2
    assert build_frame(ANNEX_CFG2) == samples.PYPMU_CFG2


def test_annex_data_frame() -> None:
    frame = parse_frame(samples.PYPMU_DATA, config=ANNEX_CFG2)
    assert frame == DataFrame(7734, 1149580800, 16817, (ANNEX_BLOCK,), ANNEX_CFG2)
    assert isinstance(frame, DataFrame)
    assert build_frame(frame) == samples.PYPMU_DATA
    assert samples.PYPMU_DATA[-2:] == bytes.fromhex("d43f")
    assert frame.timestamp.seconds == 1149580800 + Fraction(16817, 1_000_000)
    assert frame.timestamp.unix_ns == 1149580800_016817000
    block = frame.pmus[0]
    assert block.frequency_hz() == pytest.approx(62.5)  # FNOM 60 Hz + 2500 mHz
    assert block.rocof_hz_per_s() == 0
    va, vb, vc, i1 = block.phasor_values()
    assert va == pytest.approx(14635 * 9.15527)  # PHUNIT 915527 x 1e-5 V per bit
    assert vb == pytest.approx(complex(-7318, -12676) * 9.15527)
    assert abs(vc) == pytest.approx(abs(vb), rel=1e-4)
    assert cmath.phase(vb) == pytest.approx(-2 * math.pi / 3, abs=1e-4)
    assert i1 == pytest.approx(1092 * 0.45776)
    assert block.analog_values() == (100.0, 1000.0, 10000.0)


def test_annex_frames_for_two_pmus() -> None:
    two = ConfigFrame(FrameType.CFG2, 7734, 1149577200, 463000, 1_000_000, (STATION_A, STATION_A), 30,
                      ANNEX_CFG2.time_quality)
    assert parse_frame(samples.PYPMU_CFG2_TWO_PMUS) == two
    assert build_frame(two) == samples.PYPMU_CFG2_TWO_PMUS
    data = DataFrame(7734, 1149580800, 16817, (ANNEX_BLOCK, ANNEX_BLOCK), two)
    assert parse_frame(samples.PYPMU_DATA_TWO_PMUS, config=two) == data
    assert build_frame(data) == samples.PYPMU_DATA_TWO_PMUS


def test_annex_header_and_command_frames() -> None:
    clock_failure = TimeQuality(MessageTimeQuality.CLOCK_FAILURE)
    header = HeaderFrame(7734, 1149591600, 770000, "Hello I'm Header Frame.", clock_failure)
    command = CommandFrame(7734, 1149591600, 770000, Command.DATA_ON, time_quality=clock_failure)
    assert parse_frame(samples.PYPMU_HEADER) == header
    assert parse_frame(samples.PYPMU_COMMAND) == command
    assert build_frame(header) == samples.PYPMU_HEADER
    assert build_frame(command) == samples.PYPMU_COMMAND


# -- captured sessions ------------------------------------------------------------------------------

CAPTURED = [samples.UDP_COMMANDS, samples.UDP_CFG2 + samples.UDP_DATA, samples.TCP_CFG2 + samples.TCP_DATA,
            samples.FOUR_PMU_CFG2 + samples.FOUR_PMU_DATA + samples.FOUR_PMU_STREAM_WITH_PADDING]


@pytest.mark.parametrize("stream", CAPTURED, ids=["udp-commands", "udp-pmu", "tcp-pmu", "tcp-pdc-4-pmus"])
def test_every_captured_frame_builds_back_to_its_bytes(stream: bytes) -> None:
    splitter = FrameSplitter()
    decoder = StreamDecoder()
    raws = splitter.feed(stream)
    frames = decoder.feed(stream)
    assert len(frames) == len(raws) >= 2
    assert [build_frame(f) for f in frames] == raws


def test_captured_commands() -> None:
    frames = StreamDecoder().feed(samples.UDP_COMMANDS)
    assert [(f.idcode, f.command) for f in frames if isinstance(f, CommandFrame)] == [
        (60, Command.SEND_CFG2), (60, Command.DATA_ON), (60, Command.DATA_OFF)]


def test_captured_udp_pmu() -> None:
    cfg = parse_frame(samples.UDP_CFG2)
    assert isinstance(cfg, ConfigFrame)
    assert (cfg.frame_type, cfg.idcode, cfg.time_base, cfg.data_rate, cfg.num_pmu) == (FrameType.CFG2, 60, 10**6, 50, 1)
    (pmu,) = cfg.pmus
    assert (pmu.station_name, pmu.idcode, pmu.nominal_frequency_hz, pmu.config_count) == ("PMU1", 61, 50, 1)
    assert pmu.data_format == DataFormat(phasors_polar=True, phasors_float=True, analogs_float=True)
    assert pmu.phasor_names == ("VA", "VB", "VC")
    assert pmu.phasor_units == (PhasorUnit(PhasorKind.VOLTAGE, 1220),) * 3
    assert pmu.digital_units == (DigitalUnit(0, 0),) and len(pmu.digital_names) == 16
    data = parse_frame(samples.UDP_DATA, config=cfg)
    assert isinstance(data, DataFrame)
    assert (data.soc, data.fracsec) == (1217607491, 580000)
    assert data.timestamp.seconds == Fraction(60880374579, 50)
    (block,) = data.pmus
    assert block.stat == Stat()
    assert block.phasors[0] == pytest.approx((100.07758331298828, -1.5673449039459229))
    assert block.frequency_hz() == 50.0  # FREQ 0: nominal
    # Polar floats are already in volts: PHUNIT's scale is ignored (6.4, Table 9).
    assert abs(block.phasor_values()[0]) == pytest.approx(100.07758331298828)


def test_captured_tcp_pmu_with_the_largest_time_base() -> None:
    cfg = parse_frame(samples.TCP_CFG2)
    assert isinstance(cfg, ConfigFrame)
    assert (cfg.idcode, cfg.time_base, cfg.pmus[0].station_name, cfg.pmus[0].config_count) == (241, 2**24 - 1,
                                                                                                "Blue PMU", 89)
    assert cfg.pmus[0].data_format == DataFormat(phasors_polar=False, phasors_float=True, analogs_float=True)
    frames = StreamDecoder().feed(samples.TCP_CFG2 + samples.TCP_DATA)
    first = frames[1]
    assert isinstance(first, DataFrame)
    ts = first.timestamp
    assert (ts.soc, ts.fracsec, ts.time_base) == (1217606730, 2013266, 16777215)
    assert ts.seconds == 1217606730 + Fraction(2013266, 16777215)  # exact, where a float would round
    assert not ts.is_exact_in_ns
    assert ts.unix_ns == 1217606730_000000000 + 2013266 * 10**9 // 16777215
    assert first.pmus[0].stat.trigger_detected
    assert first.pmus[0].phasor_values()[0] == pytest.approx(complex(123.27957153320312, -100044.2734375))


def test_captured_pdc_stream_of_four_pmus() -> None:
    cfg = parse_frame(samples.FOUR_PMU_CFG2)
    assert isinstance(cfg, ConfigFrame)
    assert (cfg.idcode, cfg.num_pmu, cfg.data_rate) == (60, 4, 50)
    shape = [(p.station_name, p.idcode, p.phasor_count, p.analog_count, p.digital_word_count) for p in cfg.pmus]
    assert shape == [("PMU1", 61, 3, 0, 1), ("PMU2", 62, 14, 8, 1), ("PMU3", 63, 14, 4, 1), ("PMU4", 64, 14, 0, 1)]
    assert cfg.pmus[1].analog_units[0] == AnalogUnit(kind=70, scale=0)  # a user-defined ANUNIT kind (65-255)
    assert cfg.pmus[2].digital_units == (DigitalUnit(0, 51),)
    data = parse_frame(samples.FOUR_PMU_DATA, config=cfg)
    assert isinstance(data, DataFrame)
    assert len(data.pmus) == 4
    assert [len(p.phasors) for p in data.pmus] == [3, 14, 14, 14]
    assert [p.digitals for p in data.pmus] == [(0,), (0,), (51,), (0,)]


def test_captured_padding_between_frames_is_one_counted_resync() -> None:
    decoder = StreamDecoder()
    frames = decoder.feed(samples.FOUR_PMU_CFG2 + samples.FOUR_PMU_STREAM_WITH_PADDING)
    assert [type(f) for f in frames] == [ConfigFrame, DataFrame, DataFrame]
    assert decoder.drops.as_dict() == {"bad_sync": 1}
    assert decoder.drops.discarded_bytes == 10
