"""The PDC server's configuration from variables' metadata (docs/pdc-server.md, "CFG"): channels by
kind, one PMU block per station, IDCODEs given or assigned stably, CFG-1/2/3 that the codec reads back,
and data frames whose float values round-trip exactly."""

from __future__ import annotations

import math

import pytest

from gridstat.core.model import FLOAT, INT, StructType, TypeSpec, ValueType
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    ConfigFrame,
    DataFormat,
    DataFrame,
    FrameType,
    HeaderFrame,
    PhasorComponent,
    PhasorKind,
    StreamDecoder,
    parse_frame,
)
from gridstat.gateways.pdc.configs import (
    PHASOR_TYPE,
    SERVED_FORMAT,
    ChannelKind,
    ServedConfig,
    assign_idcodes,
    channel_of,
    f32,
)


def two_stations() -> ServedConfig:
    return ServedConfig([
        channel_of("sub1/va", PHASOR_TYPE, {"idcode": "71", "nominal_frequency_hz": "50"}),
        channel_of("sub1/f", FLOAT, {"kind": "freq"}),
        channel_of("sub2/ia", PHASOR_TYPE, {"units": "A", "component": "a"}),
        channel_of("sub1/rocof", FLOAT, {"kind": "dfreq"}),
        channel_of("sub2/p", FLOAT, {}),
        channel_of("sub2/breakers", INT, {}),
        channel_of("sub1/t", FLOAT, {"kind": "analog", "station": "sub1"}),
    ], idcode=9, frames_per_s=60)


def test_channels_take_their_kind_from_the_attribute_or_else_the_type() -> None:
    assert channel_of("p/v", PHASOR_TYPE, {}).kind is ChannelKind.PHASOR
    assert channel_of("p/x", FLOAT, {}).kind is ChannelKind.ANALOG
    assert channel_of("p/x", INT, {}).kind is ChannelKind.DIGITAL
    assert channel_of("p/x", FLOAT, {"kind": "FREQ"}).kind is ChannelKind.FREQ
    assert channel_of("p/x", INT, {"kind": "digital"}).kind is ChannelKind.DIGITAL
    rect = TypeSpec(ValueType.STRUCT, StructType("ph", (("m", "float32"), ("a", "float32"))))
    c = channel_of("p/v", rect, {"kind": "phasor", "station": "S1", "units": "kA"})
    assert (c.kind, c.station, c.name, c.phasor_fields, c.phasor_kind) == (
        ChannelKind.PHASOR, "S1", "v", ("m", "a"), PhasorKind.CURRENT)
    assert channel_of("p/v", PHASOR_TYPE, {}).station == "p"  # the publisher is the station by default


@pytest.mark.parametrize(("type_", "attributes", "field"), [
    (FLOAT, {"kind": "voltage"}, "attributes.kind"),
    (FLOAT, {"kind": "phasor"}, "type"),
    (INT, {"kind": "freq"}, "type"),
    (FLOAT, {"idcode": "0"}, "attributes.idcode"),
    (FLOAT, {"idcode": "65535"}, "attributes.idcode"),
    (FLOAT, {"idcode": "seven"}, "attributes.idcode"),
    (FLOAT, {"nominal_frequency_hz": "55"}, "attributes.nominal_frequency_hz"),
])
def test_metadata_the_stream_cannot_carry_is_refused_naming_the_attribute(
        type_: TypeSpec, attributes: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        channel_of("p/x", type_, attributes)
    assert err.value.field == field


def test_cfg2_has_one_block_per_station_in_order_with_its_channels_where_table_5_puts_them() -> None:
    served = two_stations()
    cfg = parse_frame(served.config_frames(FrameType.CFG2, 1_700_000_000, 5)[0])
    assert isinstance(cfg, ConfigFrame)
    assert (cfg.frame_type, cfg.idcode, cfg.time_base, cfg.data_rate, cfg.soc) == (
        FrameType.CFG2, 9, 1_000_000, 60, 1_700_000_000)
    s1, s2 = cfg.pmus
    assert (s1.station_name, s1.idcode, s1.nominal_frequency_hz) == ("sub1", 71, 50)
    assert s1.phasor_names == ("va",) and s1.analog_names == ("t",) and s1.digital_names == ()
    assert s2.station_name == "sub2" and s2.nominal_frequency_hz == 60
    assert s2.phasor_names == ("ia",) and s2.analog_names == ("p",)
    assert s2.digital_names == tuple(f"breakers.{b}" for b in range(16))
    assert s2.phasor_units[0].kind is PhasorKind.CURRENT and s1.phasor_units[0].kind is PhasorKind.VOLTAGE
    assert {p.data_format for p in cfg.pmus} == {SERVED_FORMAT} == {DataFormat.from_word(0x000F)}
    cfg1 = parse_frame(served.config_frames(FrameType.CFG1, 0, 0)[0])
    assert isinstance(cfg1, ConfigFrame) and cfg1.frame_type is FrameType.CFG1 and cfg1.pmus == cfg.pmus


def test_cfg3_keeps_whole_names_and_says_the_phasor_kind_and_component() -> None:
    long = "a_station_name_longer_than_sixteen_bytes"
    served = ServedConfig([channel_of(f"{long}/voltage_phase_a_magnitude", PHASOR_TYPE,
                                      {"component": "a", "latitude_deg": "46.5"})], idcode=3, frames_per_s=50)
    frames = served.config_frames(FrameType.CFG3, 1, 0)
    decoder = StreamDecoder()
    [cfg3] = decoder.feed(b"".join(frames))
    assert isinstance(cfg3, ConfigFrame) and cfg3.frame_type is FrameType.CFG3
    pmu = cfg3.pmus[0]
    assert pmu.station_name == long and pmu.phasor_names == ("voltage_phase_a_magnitude",)
    assert pmu.cfg3 is not None and pmu.cfg3.phasor_scales[0].component is PhasorComponent.PHASE_A
    assert pmu.cfg3.latitude_deg == 46.5 and math.isinf(pmu.cfg3.longitude_deg)
    cfg2 = parse_frame(served.config_frames(FrameType.CFG2, 1, 0)[0])
    assert isinstance(cfg2, ConfigFrame)
    assert cfg2.pmus[0].station_name == long[:16] and cfg2.pmus[0].phasor_names == ("voltage_phase_a_",)


def test_assigned_idcodes_are_stable_whatever_the_order_and_avoid_given_ones() -> None:
    a = assign_idcodes(["x", "y", "z"], {})
    assert a == assign_idcodes(["z", "x", "y"], {})
    assert all(1 <= v <= 0xFFFE for v in a.values()) and len(set(a.values())) == 3
    taken = assign_idcodes(["x", "y"], {"y": a["x"]})
    assert taken["y"] == a["x"] and taken["x"] != a["x"]
    one = ServedConfig([channel_of("pmuA/f", FLOAT, {"kind": "freq"})], idcode=1, frames_per_s=30)
    again = ServedConfig([channel_of("pmuB/x", FLOAT, {}), channel_of("pmuA/f", FLOAT, {"kind": "freq"})],
                         idcode=1, frames_per_s=30)
    assert one.blocks[0].idcode == again.blocks[1].idcode


@pytest.mark.parametrize("channels", [
    [],
    [("p/f", {"kind": "freq"}), ("p/g", {"kind": "freq"})],
    [("p/a", {"idcode": "5"}), ("p/b", {"idcode": "6"})],
    [("p/a", {"idcode": "5"}), ("q/b", {"idcode": "5"})],
    [("p/a", {"nominal_frequency_hz": "50"}), ("p/b", {"nominal_frequency_hz": "60"})],
    [("p/a", {}), ("p/a", {})],
])
def test_channels_that_cannot_form_one_stream_are_refused(channels: list[tuple[str, dict[str, str]]]) -> None:
    with pytest.raises(ValidationError):
        ServedConfig([channel_of(v, FLOAT, a) for v, a in channels], idcode=1, frames_per_s=60)


def test_data_frames_carry_float32_values_exactly_and_absent_ones_as_nan() -> None:
    served = two_stations()
    decoder = StreamDecoder()
    decoder.feed(served.config_frames(FrameType.CFG2, 0, 0)[0])
    # slots: 0 sub1/va, 1 sub1/f, 2 sub2/ia, 3 sub1/rocof, 4 sub2/p, 5 sub2/breakers, 6 sub1/t
    values = [(230.5, -0.25), 50.015625, None, 0.125, f32(1e39), 0x1_8001 & 0xFFFF, 3.0]
    [frame] = decoder.feed(served.pack(1_700_000_000, 16_667, 0, values, [0x0000, 0x8000]))
    assert isinstance(frame, DataFrame) and (frame.soc, frame.fracsec) == (1_700_000_000, 16_667)
    s1, s2 = frame.pmus
    assert s1.phasors == ((230.5, -0.25),) and s1.freq == 50.015625 and s1.dfreq == 0.125 and s1.analogs == (3.0,)
    assert s1.stat.to_word() == 0 and s2.stat.to_word() == 0x8000
    assert all(math.isnan(x) for x in s2.phasors[0]) and math.isnan(s2.freq) and math.isnan(s2.dfreq)
    assert s2.analogs == (math.inf,) and s2.digitals == (0x8001,)


def test_sixteen_bit_freq_for_pdcs_that_read_a_float_freq_as_a_deviation() -> None:
    served = ServedConfig([channel_of("sub1/va", PHASOR_TYPE, {"nominal_frequency_hz": "50"}),
                           channel_of("sub1/f", FLOAT, {"kind": "freq"}),
                           channel_of("sub1/rocof", FLOAT, {"kind": "dfreq"})],
                          idcode=9, frames_per_s=50, freq_float=False)
    decoder = StreamDecoder()
    decoder.feed(served.config_frames(FrameType.CFG2, 0, 0)[0])
    assert not served.config2.pmus[0].data_format.freq_float
    [frame] = decoder.feed(served.pack(1_700_000_000, 0, 0, [(1.0, 0.0), 50.012, -0.05], [0]))
    assert isinstance(frame, DataFrame)
    (pmu,) = frame.pmus
    assert (pmu.freq, pmu.dfreq) == (12, -5) and pmu.frequency_hz() == pytest.approx(50.012)
    [frame] = decoder.feed(served.pack(1_700_000_000, 20_000, 0, [(1.0, 0.0), None, 1e9], [0]))
    assert isinstance(frame, DataFrame)
    assert (frame.pmus[0].freq, frame.pmus[0].dfreq) == (-0x8000, 0x7FFF)  # absent; clamped to the field


def test_values_are_converted_to_what_their_slot_carries() -> None:
    ph = channel_of("p/v", PHASOR_TYPE, {})
    assert ph.convert({"magnitude": 1.5, "angle": -2.0}) == (1.5, -2.0)
    assert ph.convert(1.0) is None and ph.convert({"magnitude": 1.0}) is None
    dig = channel_of("p/d", INT, {})
    assert dig.convert(0x12345) == 0x2345 and dig.convert(-1) == 0xFFFF and dig.convert(1.5) is None
    an = channel_of("p/a", FLOAT, {})
    assert an.convert(2) == 2.0 and an.convert(-1e300) == -math.inf and an.convert("x") is None


def test_the_header_frame_names_the_stations_and_variables() -> None:
    served = two_stations()
    hdr = parse_frame(served.header_frame(10, 0))
    assert isinstance(hdr, HeaderFrame) and hdr.idcode == 9
    assert "sub1 IDCODE 71: sub1/va, sub1/f, sub1/rocof, sub1/t" in hdr.text


def test_attributes_of_pmu_gateway_variables_give_back_the_device_names_and_digunit() -> None:
    served = ServedConfig([
        channel_of("st1/va", PHASOR_TYPE, {"station": "ST 1", "channel": "VA ph", "units": "V",
                                            "component": "phase_a"}),
        channel_of("st1/breaker", INT, {"station": "ST 1", "kind": "digital", "channel": "BRK",
                                         "normal_status": "0x0001", "valid_inputs": "0x00ff"}),
    ], idcode=2, frames_per_s=30)
    cfg = parse_frame(served.config_frames(FrameType.CFG2, 0, 0)[0])
    assert isinstance(cfg, ConfigFrame)
    pmu = cfg.pmus[0]
    assert (pmu.station_name, pmu.phasor_names, pmu.digital_names[0]) == ("ST 1", ("VA ph",), "BRK.0")
    assert (pmu.digital_units[0].normal_status, pmu.digital_units[0].valid_inputs) == (1, 0xFF)
    assert served.channels[0].component is PhasorComponent.PHASE_A
