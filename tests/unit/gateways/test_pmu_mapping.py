"""Channels to status variables (gateways/pmu/mapping.py): names, the map file, types, attributes,
values in engineering units."""

from __future__ import annotations

import math
from pathlib import Path

import pmu_samples as s
import pytest

from gridstat.core.model import FLOAT, INT, check_name
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    AnalogScale,
    Cfg3Details,
    FrameType,
    PhasorComponent,
    PhasorKind,
    PhasorScale,
    PmuData,
    Stat,
)
from gridstat.gateways.pmu import PHASOR, NameMap, load_name_map, plan_stream, sanitize_name
from gridstat.gateways.pmu.mapping import rate_of


@pytest.mark.parametrize(("raw", "want"), [
    ("VA", "VA"), ("Station A", "Station_A"), ("BREAKER 1 STATUS", "BREAKER_1_STATUS"), ("  _x/y ", "x_y"),
    ("Ωmega", "mega"), ("--", "fallback"), ("", "fallback"), ("a" * 200, "a" * 128), ("V:1.a-b", "V:1.a-b"),
])
def test_sanitized_names_follow_gridstats_rule(raw: str, want: str) -> None:
    got = sanitize_name(raw, "fallback")
    assert got == want
    check_name(got, what="variable")


def test_a_stream_becomes_typed_variables_with_attributes() -> None:
    plan = plan_stream(s.config(s.INT_PMU, s.FLOAT_PMU, rate=30))
    assert plan.interval_ms == 33 and plan.frames_per_s == 30
    names = [(c.full_name, c.kind, c.type) for c in plan.channels]
    assert names == [
        ("Station_A/VA", "phasor", PHASOR), ("Station_A/I1", "phasor", PHASOR), ("Station_A/freq", "freq", FLOAT),
        ("Station_A/dfreq", "dfreq", FLOAT), ("Station_A/ANALOG1", "analog", FLOAT),
        ("Station_A/BREAKER_1_STATUS", "digital", INT),
        ("PMU_2_east/V1", "phasor", PHASOR), ("PMU_2_east/freq", "freq", FLOAT), ("PMU_2_east/dfreq", "dfreq", FLOAT),
        ("PMU_2_east/P", "analog", FLOAT)]
    va, i1, freq, dfreq, an, dig = plan.blocks[0].channels
    assert va.attributes_dict == {"station": "Station A", "idcode": "7734", "stream_idcode": "7734",
                                  "nominal_frequency_hz": "60", "kind": "phasor",
                                  "channel": "VA", "units": "V", "signal": "VPHS"}
    assert (i1.attributes_dict["units"], i1.attributes_dict["signal"]) == ("A", "IPHS")
    assert (freq.attributes_dict["units"], dfreq.attributes_dict["units"]) == ("Hz", "Hz/s")
    assert [c.attributes_dict["signal"] for c in (freq, dfreq, an, dig)] == ["FREQ", "DFDT", "ALOG", "DIGI"]
    assert an.attributes_dict["units"] == "rms"
    assert dig.attributes_dict["normal_status"] == "0x0000" and dig.attributes_dict["valid_inputs"] == "0xffff"
    assert plan.blocks[1].channels[3].attributes_dict["units"] == "peak"
    assert plan.blocks[1].channels[0].attributes_dict["nominal_frequency_hz"] == "50"
    assert all(c.interval_ms == 33 and c.frames_per_s == 30 for c in plan.channels)


def test_rates_below_one_frame_per_second_and_refused_rates() -> None:
    assert rate_of(s.config(rate=-5)) == (5000, 0)
    assert rate_of(s.config(rate=60)) == (16, 60)
    assert rate_of(s.config(rate=400)) == (2, 400)
    for bad in (0, 401):
        with pytest.raises(ValidationError):
            rate_of(s.config(rate=bad))


def test_unnamed_digitals_colliding_names_and_unusable_names() -> None:
    import dataclasses

    pmu = dataclasses.replace(s.INT_PMU, phasor_names=("freq", "???"), digital_names=("",) * 16,
                              analog_names=("freq",))
    names = [c.variable for c in plan_stream(s.config(pmu)).channels]
    assert names == ["freq", "phasor1", "freq_2", "dfreq", "freq_3", "digital0"]


def test_a_map_file_renames_stations_and_channels(tmp_path: Path) -> None:
    f = tmp_path / "map.yaml"
    f.write_text('"Station A": sub1\n"Station A/VA": sub1/bus1_va\n"Station A/FREQ": grid/f60\n'
                 '"PMU/2 east/V1": east/v1\n')
    names = load_name_map(f)
    plan = plan_stream(s.config(s.INT_PMU, s.FLOAT_PMU), names)
    assert [c.full_name for c in plan.channels][:5] == ["sub1/bus1_va", "sub1/I1", "grid/f60", "sub1/dfreq",
                                                        "sub1/ANALOG1"]
    assert plan.blocks[1].channels[0].full_name == "east/v1"
    assert plan.blocks[1].channels[0].key == "PMU/2 east/V1"
    j = tmp_path / "map.json"
    j.write_text('{"Station A/VA": "x/y"}')
    assert load_name_map(j).channels == {"Station A/VA": ("x", "y")}


@pytest.mark.parametrize(("text", "needle"), [
    ('"Station A/VA": "bad name/x"\n', ":1: Station A/VA"),
    ('a: b\n"S/X": 3\n', ":2: S/X"),
    ("- a\n- b\n", "a mapping"),
    ("a: [\n", "not valid YAML"),
    ("a: b\na: c\n", "duplicate key"),
    ("", "empty"),
])
def test_bad_map_files_say_where(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(ValidationError) as err:
        load_name_map(f)
    assert needle in str(err.value)


def test_missing_map_file() -> None:
    with pytest.raises(ValidationError, match="cannot read"):
        load_name_map("/nonexistent/map.yaml")


def test_values_in_engineering_units() -> None:
    plan = plan_stream(s.config(s.INT_PMU, s.FLOAT_PMU))
    ints, floats = plan.blocks
    va, i1, freq, dfreq, an, dig = ints.values(s.block(s.INT_PMU, 0))
    assert math.isclose(va["magnitude"], math.hypot(14635, 100) * 915527e-5)  # type: ignore[index]
    assert math.isclose(va["angle"], math.atan2(-100, 14635))  # type: ignore[index]
    assert math.isclose(i1["magnitude"], math.hypot(14635, 200) * 45776e-5)  # type: ignore[index]
    assert math.isclose(freq, 60.25) and math.isclose(dfreq, 0.12)  # type: ignore[arg-type]
    assert an == 0.0 and dig == 0x3C12
    v1, f, df, p = floats.values(s.block(s.FLOAT_PMU, 2))
    assert v1 == {"magnitude": 1002.0, "angle": 0.25}
    assert (f, df, p) == (62.25, 0.5, 20.0)


def test_polar_16_bit_and_absent_values() -> None:
    import dataclasses

    from gridstat.gateways.c37118 import DataFormat

    pmu = dataclasses.replace(s.INT_PMU, data_format=DataFormat(phasors_polar=True))
    plan = plan_stream(s.config(pmu))
    va = plan.blocks[0].values(s.block(pmu, 0))[0]
    assert va == {"magnitude": 1000 * (915527 * 1e-5), "angle": 2500 * 1e-4}
    absent = PmuData(Stat(), ((5, -0x8000), (1, 1)), -0x8000, -0x8000, (-0x8000,), (0,), pmu)
    vals = plan.blocks[0].values(absent)
    assert math.isnan(vals[0]["magnitude"]) and not math.isnan(vals[1]["magnitude"])  # type: ignore[index]
    assert all(math.isnan(v) for v in vals[2:5])  # type: ignore[arg-type]
    rect = plan_stream(s.config(s.INT_PMU)).blocks[0]
    assert math.isnan(rect.values(dataclasses.replace(absent, config=s.INT_PMU))[0]["magnitude"])  # type: ignore[index]


def test_cfg3_phase_component_and_scales() -> None:
    import dataclasses

    details = Cfg3Details(phasor_scales=(PhasorScale(PhasorKind.VOLTAGE, PhasorComponent.PHASE_B, scale=2.0),
                                         PhasorScale(PhasorKind.CURRENT, PhasorComponent.POSITIVE_SEQUENCE)),
                          analog_scales=(AnalogScale(10.0, 1.0),))
    pmu = dataclasses.replace(s.INT_PMU, phasor_units=(), analog_units=(), cfg3=details)
    plan = plan_stream(s.config(pmu, frame_type=FrameType.CFG3))
    va, i1, _, _, an, _ = plan.blocks[0].channels
    assert va.attributes_dict["phase"] == "B" and va.attributes_dict["component"] == "phase_b"
    assert va.attributes_dict["units"] == "V" and i1.attributes_dict["units"] == "A"
    assert "phase" not in i1.attributes_dict and i1.attributes_dict["component"] == "positive_sequence"
    assert "units" not in an.attributes_dict
    values = plan.blocks[0].values(s.block(pmu, 1))
    assert math.isclose(values[0]["magnitude"], 2 * math.hypot(14636, 100))  # type: ignore[index]
    assert values[4] == 10.0 * 10 + 1.0


def test_name_map_parse_needs_a_mapping() -> None:
    with pytest.raises(ValidationError):
        NameMap.parse(["x"])
