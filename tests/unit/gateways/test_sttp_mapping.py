"""The pure mappings of the STTP gateways (gateways/sttp/mapping.py, docs/sttp.md): names, signal IDs,
signal types, phasors, values, time, connection strings and throttling, and the republish plan."""

from __future__ import annotations

import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.core import filtering
from gridstat.core.model import ValueType
from gridstat.errors import ValidationError
from gridstat.gateways.sttp import mapping

PHASOR = ("magnitude", "angle")


def test_signal_ids_are_uuid5_of_the_point_tag_and_stable() -> None:
    assert mapping.signal_id("pmu1/freq") == uuid.uuid5(mapping.SIGNAL_NAMESPACE, "pmu1/freq")
    assert mapping.signal_id("pmu1/freq").version == 5
    assert mapping.signal_id("pmu1/freq") != mapping.signal_id("pmu2/freq")
    # Pinned: a changed namespace would change every ID subscribers stored.
    assert str(mapping.SIGNAL_NAMESPACE) == "6f1d3c2e-8a47-5b0e-9c61-2b7d4e9a0f35"


def test_a_scalar_is_one_measurement_tagged_with_its_full_name() -> None:
    served = mapping.serve_variable("pmu1/freq", ValueType.FLOAT, attributes={"signal": "FREQ", "station": "STN A",
                                                                              "channel": "FREQ"},
                                    interval_ms=33, frames_per_s=30)
    (p,) = served.points
    assert (p.point_tag, p.signal_type, p.device, p.component, p.description) == \
        ("pmu1/freq", "FREQ", "STN A", "", "FREQ")
    assert p.signal_id == mapping.signal_id("pmu1/freq")
    assert mapping.values_of(served, 59.98) == [59.98]


@pytest.mark.parametrize(("kind", "attributes", "expected"), [
    (ValueType.FLOAT, {"signal": "dfdt"}, "DFDT"),
    (ValueType.FLOAT, {"signal": "ALOG"}, "ALOG"),
    (ValueType.FLOAT, {"signal": "VPHM"}, "VPHM"),  # a republished magnitude keeps its type
    (ValueType.FLOAT, {"kind": "freq"}, "FREQ"),
    (ValueType.FLOAT, {"kind": "dfreq"}, "DFDT"),
    (ValueType.FLOAT, {"kind": "analog"}, "ALOG"),
    (ValueType.INT, {"kind": "digital"}, "DIGI"),
    (ValueType.FLOAT, {"signal": "nonsense"}, "CALC"),
    (ValueType.FLOAT, {}, "CALC"),
    (ValueType.INT, {}, "DIGI"),
    (ValueType.BOOL, {}, "DIGI"),
])
def test_signal_types(kind: ValueType, attributes: dict[str, str], expected: str) -> None:
    assert mapping.scalar_signal_type(kind, attributes) == expected


def test_the_device_is_the_station_else_the_publisher() -> None:
    served = mapping.serve_variable("sub2/p", ValueType.FLOAT, attributes={}, interval_ms=100)
    assert served.points[0].device == "sub2"


@pytest.mark.parametrize(("attributes", "types"), [
    ({"signal": "VPHS"}, ("VPHM", "VPHA")),
    ({"signal": "IPHS"}, ("IPHM", "IPHA")),
    ({"kind": "phasor", "units": "A"}, ("IPHM", "IPHA")),
    ({}, ("VPHM", "VPHA")),
])
def test_a_phasor_is_two_measurements(attributes: dict[str, str], types: tuple[str, str]) -> None:
    served = mapping.serve_variable("sub1/va", ValueType.STRUCT, attributes=attributes, interval_ms=16,
                                    frames_per_s=60, struct_fields=PHASOR)
    assert [(p.point_tag, p.signal_type, p.component) for p in served.points] == [
        ("sub1/va.magnitude", types[0], "magnitude"), ("sub1/va.angle", types[1], "angle")]
    assert [p.signal_id for p in served.points] == [mapping.signal_id("sub1/va.magnitude"),
                                                    mapping.signal_id("sub1/va.angle")]
    assert mapping.values_of(served, {"magnitude": 230.5, "angle": math.pi / 2}) == [230.5, 90.0]


def test_another_struct_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValidationError, match="sub1/x: a struct of fields") as err:
        mapping.serve_variable("sub1/x", ValueType.STRUCT, attributes={}, interval_ms=10, struct_fields=("a", "b"))
    assert err.value.field == "type"


def test_values_that_do_not_fit_are_none() -> None:
    scalar = mapping.serve_variable("p/v", ValueType.FLOAT, attributes={}, interval_ms=10)
    phasor = mapping.serve_variable("p/ph", ValueType.STRUCT, attributes={}, interval_ms=10, struct_fields=PHASOR)
    assert mapping.values_of(scalar, "text") is None
    assert mapping.values_of(scalar, True) == [1.0]
    assert mapping.values_of(phasor, 1.0) is None
    assert mapping.values_of(phasor, {"magnitude": 1.0}) is None
    assert mapping.values_of(phasor, {"magnitude": "x", "angle": 0.0}) is None


def test_device_rates() -> None:
    a = mapping.serve_variable("a/f", ValueType.FLOAT, attributes={"station": "A"}, interval_ms=16, frames_per_s=60)
    b = mapping.serve_variable("a/g", ValueType.FLOAT, attributes={"station": "A"}, interval_ms=33, frames_per_s=30)
    c = mapping.serve_variable("c/h", ValueType.FLOAT, attributes={}, interval_ms=100)
    assert mapping.device_rates([a, b, c]) == {"A": 60, "c": 10}
    # Served at a longer interval: the served rate (whole frames), which a republisher takes.
    slow = mapping.serve_variable("d/f", ValueType.FLOAT, attributes={}, interval_ms=16, frames_per_s=60,
                                  served_interval_ms=100)
    slower = mapping.serve_variable("e/f", ValueType.FLOAT, attributes={}, interval_ms=100, served_interval_ms=1000)
    assert mapping.device_rates([slow, slower]) == {"d": 10, "e": 1}


def test_ticks_and_milliseconds() -> None:
    assert mapping.ticks_of_ms(0) == 621_355_968_000_000_000
    ts = 1_790_000_000_033
    assert mapping.ms_of_ticks(mapping.ticks_of_ms(ts)) == (ts, True)
    assert mapping.ms_of_ticks(mapping.ticks_of_ms(ts) + 3_333) == (ts, False)  # 0.3333 ms cut off


def test_device_time_carries_the_tick_and_the_flags_stat_can_hold() -> None:
    ticks = mapping.ticks_of_ms(1_790_000_000_033) + 3_333  # 33.3333 ms into the second
    stat, fracsec, base = mapping.device_time_of_ticks(ticks, mapping.BADDATA | mapping.BADTIME | 0x40)
    assert (stat, fracsec, base) == (0x4000 | 0x2000, 333_333, 10_000_000)
    ts_ms, _ = mapping.ms_of_ticks(ticks)
    assert mapping.UNIX_EPOCH_TICKS + ts_ms // 1000 * base + fracsec == ticks  # the tick, whole


@pytest.mark.parametrize(("flags", "stat"), [
    (0, 0), (mapping.BADDATA, 0x4000), (mapping.BADTIME, 0x2000), (mapping.BADDATA | mapping.BADTIME, 0x6000),
    (0x2 | 0x20000 | 0x1000, 0),  # suspect data, suspect time, calculated: no place in STAT
])
def test_state_flags_to_stat(flags: int, stat: int) -> None:
    assert mapping.stat_of_state_flags(flags) == stat


def test_connection_strings() -> None:
    text = ("filterExpression={FILTER ActiveMeasurements WHERE SignalType = 'FREQ'; x=1};throttled=True;"
            "publishInterval=0.200000;includeTime=True;junk")
    params = mapping.connection_parameters(text)
    assert params["filterexpression"] == "FILTER ActiveMeasurements WHERE SignalType = 'FREQ'; x=1"
    assert mapping.throttle_interval_ms(params) == 200
    assert mapping.throttle_interval_ms({"throttled": "False", "publishinterval": "1"}) == 0
    assert mapping.throttle_interval_ms({"throttled": "true", "publishinterval": "0"}) == 0
    assert mapping.throttle_interval_ms({"throttled": "true", "publishinterval": "-1"}) == 0
    with pytest.raises(ValidationError, match="publishInterval 'soon'") as err:
        mapping.throttle_interval_ms({"throttled": "true", "publishinterval": "soon"})
    assert err.value.field == "publishInterval"


def test_throttling_is_gridstats_rate_filter_in_whole_frames() -> None:
    served = mapping.serve_variable("p/f", ValueType.FLOAT, attributes={}, interval_ms=33, frames_per_s=30)
    stamps = [1000 * 1_790_000_000 + k * 1000 // 30 for k in range(60)]
    kept = [k for k, ts in enumerate(stamps) if mapping.throttle_passes(ts, 200, served)]
    assert kept == list(range(0, 60, 6))
    assert all(mapping.throttle_passes(ts, 0, served) for ts in stamps)
    ms = mapping.serve_variable("p/g", ValueType.FLOAT, attributes={}, interval_ms=100)
    kept_ms = [t for t in range(0, 2000, 100) if mapping.throttle_passes(t, 450, ms)]
    assert kept_ms == [t for t in range(0, 2000, 100) if filtering.should_forward(t, 100, 400)]
    assert len(kept_ms) == 5


def src(tag: str, device: str = "PMU1", signal: str = "FREQ", fps: int = 30) -> mapping.SourceMeasurement:
    return mapping.SourceMeasurement(uuid.uuid5(uuid.NAMESPACE_URL, f"{device}|{tag}"), tag, device, signal,
                                     f"about {tag}", fps)


def test_republished_names() -> None:
    assert mapping.republished_name(src("PMU1:FREQ")) == ("PMU1", "FREQ")
    assert mapping.republished_name(src("PMU1/FREQ")) == ("PMU1", "FREQ")
    assert mapping.republished_name(src("DOM_GPLAINS-BUS1:VH", device="DOM GPLAINS")) == \
        ("DOM_GPLAINS", "DOM_GPLAINS-BUS1:VH")
    assert mapping.republished_name(src("PMU1:FREQ"), publisher="grid") == ("grid", "PMU1:FREQ")
    assert mapping.republished_name(src("pmu-a1/freq", device="pmu-a1"), publisher="relay") == \
        ("relay", "pmu-a1_freq")
    weird = src("  ", device="")
    assert mapping.republished_name(weird) == ("sttp", f"m{weird.signal_id.hex[:12]}")


def test_the_republish_plan_keeps_the_metadata_as_attributes() -> None:
    variables, refused = mapping.plan_republish([src("PMU1:FREQ"), src("PMU1:VA.ANG", signal="VPHA"),
                                                 src("PMU1:X", signal="", fps=0)])
    assert refused == {src("PMU1:X").signal_id: "no_rate"}
    freq, angle = variables
    assert (freq.full_name, freq.frames_per_s, freq.interval_ms) == ("PMU1/FREQ", 30, 33)
    assert freq.attributes == {"source": "sttp", "signal_id": str(freq.signal_id), "point_tag": "PMU1:FREQ",
                               "station": "PMU1", "signal": "FREQ", "kind": "freq", "units": "Hz",
                               "description": "about PMU1:FREQ"}
    assert angle.attributes["signal"] == "VPHA" and angle.attributes["units"] == "Degrees"
    assert "kind" not in angle.attributes


def test_the_republish_rate_may_be_given_and_names_stay_unique() -> None:
    a, b = src("PMU1:F 1"), src("PMU1:F_1")
    variables, refused = mapping.plan_republish([a, b, a], frames_per_s=60)
    assert refused == {}
    assert [(v.full_name, v.frames_per_s, v.interval_ms) for v in variables] == [("PMU1/F_1", 60, 16),
                                                                                  ("PMU1/F_1_2", 60, 16)]


def test_a_rate_beyond_gridstats_is_refused() -> None:
    _, refused = mapping.plan_republish([src("PMU1:F", fps=1000)])
    assert list(refused.values()) == ["no_rate"]


@given(st.text(alphabet=st.sampled_from("=;{}ab1.-eEtrueTRUEthrottledpublishInterval \x00é"), max_size=80))
def test_any_connection_string_is_parameters_or_a_named_error(text: str) -> None:
    params = mapping.connection_parameters(text)
    assert all(k == k.lower() for k in params)
    try:
        assert mapping.throttle_interval_ms(params) >= 0
    except ValidationError as exc:
        assert exc.field == "publishInterval"


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_any_ticks_are_milliseconds(ticks: int) -> None:
    ms, exact = mapping.ms_of_ticks(ticks)
    assert mapping.ticks_of_ms(ms) <= ticks < mapping.ticks_of_ms(ms + 1)
    assert exact == (mapping.ticks_of_ms(ms) == ticks)
