"""Device frame rates that do not divide a second into whole milliseconds (docs/frame-rates.md):
the rate filter keeps every n-th frame exactly, evenly spaced, across second boundaries."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.core import filtering, wire
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import ValidationError

RATES = (10, 12, 15, 20, 25, 30, 50, 60, 100, 120, 240, 400)
EPOCH_S = 1_795_000_000  # a recent SOC


def frame_ms(k: int, rate: int, *, nearest: bool = False) -> int:
    """The millisecond timestamp of frame k since the epoch: rounded down as devices stamp it
    (SOC*1000 + FRACSEC*1000 // TIME_BASE), or to the nearest."""
    return (2000 * k + rate) // (2 * rate) if nearest else 1000 * k // rate


def kept(rate: int, n: int, frames: range, *, nearest: bool = False) -> list[int]:
    sub_ms = filtering.frame_interval_ms(n, rate)
    pub_ms = filtering.nominal_interval_ms(rate)
    return [k for k in frames if filtering.should_forward(frame_ms(k, rate, nearest=nearest), pub_ms, sub_ms, rate)]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("nearest", [False, True])
def test_every_nth_frame_exactly_once_across_second_boundaries(rate: int, nearest: bool) -> None:
    first = EPOCH_S * rate - 3 * rate  # three seconds before a whole second, through 7 boundaries
    frames = range(first, first + 10 * rate)
    for n in sorted({1, 2, 3, 4, 5, 6, 7, 10, rate // 2 or 1, rate, 2 * rate, 3 * rate + 1}):
        got = kept(rate, n, frames, nearest=nearest)
        assert got, (rate, n)
        assert all(k % n == 0 for k in got), (rate, n)
        assert all(b - a == n for a, b in itertools.pairwise(got)), (rate, n)
        assert len(got) == len([k for k in frames if k % n == 0])


@pytest.mark.parametrize(("rate", "asked_ms", "frames", "granted_ms"), [
    (30, 33, 1, 33), (30, 66, 1, 33), (30, 67, 2, 67), (30, 100, 3, 100), (30, 1000, 30, 1000),
    (60, 17, 1, 17), (60, 33, 2, 33), (60, 50, 3, 50), (60, 100, 6, 100), (60, 1000, 60, 1000),
    (60, 10_000, 600, 10_000), (120, 8, 1, 8), (120, 25, 3, 25), (25, 40, 1, 40), (50, 100, 5, 100),
    (60, 1, 1, 17), (30, 86_400_000, 2_592_000, 86_400_000),
])
def test_intervals_are_whole_frames(rate: int, asked_ms: int, frames: int, granted_ms: int) -> None:
    assert filtering.frames_in(asked_ms, rate) == frames
    assert filtering.round_down_interval(asked_ms, filtering.nominal_interval_ms(rate), rate) == granted_ms
    assert filtering.frames_in(granted_ms, rate) == frames  # the milliseconds mean the frames again


@given(st.integers(1, 400), st.integers(1, 100_000))
def test_granted_milliseconds_name_their_frames(rate: int, n: int) -> None:
    ms = filtering.frame_interval_ms(n, rate)
    assert filtering.frames_in(ms, rate) == n
    assert filtering.round_down_interval(ms, filtering.nominal_interval_ms(rate), rate) == ms


@given(st.sampled_from(RATES), st.integers(1, 50), st.integers(0, 10**9))
def test_any_window_of_n_frames_holds_exactly_one(rate: int, n: int, start: int) -> None:
    got = kept(rate, n, range(EPOCH_S * rate + start, EPOCH_S * rate + start + n))
    assert len(got) == 1


def test_the_millisecond_rule_drifts_where_the_frame_rule_does_not() -> None:
    # Why frames: at 60 frames/s the nearest whole-millisecond period (17 ms) loses the phase within
    # a second, so a 6-frame (100 ms) subscription would get a doubled or missing frame.
    frames = range(EPOCH_S * 60, EPOCH_S * 60 + 600)
    by_ms = [k for k in frames if filtering.should_forward(frame_ms(k, 60), 17, 102)]
    assert any(b - a != 6 for a, b in itertools.pairwise(by_ms))
    assert kept(60, 6, frames) == [k for k in frames if k % 6 == 0]


def test_a_frame_variable_states_its_nominal_interval() -> None:
    var = StatusVariable("pmu1", "freq", FLOAT, 16, frames_per_s=60, attributes={"units": "Hz"})
    assert var.frames_per_s == 60 and var.attributes == {"units": "Hz"}
    with pytest.raises(ValidationError, match="must be 16 ms") as e:
        StatusVariable("pmu1", "freq", FLOAT, 17, frames_per_s=60)
    assert e.value.field == "interval_ms"
    for bad in (0.5, 401, -1, True):
        with pytest.raises(ValidationError) as e:
            StatusVariable("pmu1", "freq", FLOAT, 16, frames_per_s=bad)  # type: ignore[arg-type]
        assert e.value.field in ("frames_per_s", "interval_ms")
    with pytest.raises(ValidationError, match="no frame rate"):
        StatusVariable("pmu1", "trip", FLOAT, 0, alert=True, min_interval_ms=10, frames_per_s=60)


@pytest.mark.parametrize(("attributes", "field"), [
    ({"bad name": "x"}, "attributes"), ({"units": "\x00"}, "attributes.units"),
    ({"units": "x" * 257}, "attributes.units"),
    ({f"a{i}": "x" for i in range(33)}, "attributes"), ({"units": 5}, "attributes.units"),
])
def test_bad_attributes_name_the_attribute(attributes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        StatusVariable("pmu1", "freq", FLOAT, 16, attributes=attributes)  # type: ignore[arg-type]
    assert e.value.field == field


def test_device_time_option_round_trips_on_the_wire() -> None:
    option = wire.device_time(0x8040, (0x0B << 24) | 533_333, 1_000_000)
    ts = wire.device_timestamp_ms(EPOCH_S, 533_333, 1_000_000)
    assert ts == EPOCH_S * 1000 + 533 and ts // 1000 == EPOCH_S
    datagram = wire.encode_datagram(1, 1, [wire.encode_event(wire.Event(ts, 7, wire.encode_value(FLOAT, 1.0),
                                                                        options=(option,)))])
    (event,) = wire.decode_datagram(datagram).events
    assert wire.read_device_time(event.options) == (0x8040, (0x0B << 24) | 533_333, 1_000_000)
    assert wire.read_device_time(()) is None
    assert wire.read_device_time((wire.DerivedValue(wire.OptionKind.DEVICE_TIME, 0, float("nan")),)) is None
    for args, field in (((0x10000, 0, 1), "stat"), ((0, 1 << 32, 1), "fracsec"), ((0, 0, 0), "time_base")):
        with pytest.raises(ValidationError) as e:
            wire.device_time(*args)
        assert e.value.field == field


@pytest.mark.parametrize("variant", ["close", "sparse"])
def test_a_router_keeps_every_nth_frame_for_each_channel(variant: str) -> None:
    from gridstat.router.tables import Route, RoutingTable, Variant, select_close, select_sparse

    targets: dict[str, str] = {}
    table = RoutingTable(Variant(variant), lambda channel, _p: targets.setdefault(channel, channel))  # type: ignore[arg-type,return-value]
    rate = 60
    for channel, n in (("every", 1), ("half", 2), ("third", 3), ("tenth", 6), ("second", 60)):
        table.install(Route(channel, 1, 0, channel, filtering.frame_interval_ms(n, rate), 1), pub_interval_ms=16,
                      frames_per_s=rate)
    entry = table.entry(1)
    assert entry is not None and not entry.plain
    select = select_close if variant == "close" else select_sparse
    frames = range(EPOCH_S * rate - 90, EPOCH_S * rate + 150)
    got: dict[str, list[int]] = {}
    for k in frames:
        for target in select(entry, frame_ms(k, rate)):
            got.setdefault(str(target), []).append(k)
    for channel, n in (("every", 1), ("half", 2), ("third", 3), ("tenth", 6), ("second", 60)):
        assert got[channel] == [k for k in frames if k % n == 0], channel
    with pytest.raises(ValidationError, match="16 ms"):
        table.install(Route("x", 2, 0, "every", 100, 1), pub_interval_ms=17, frames_per_s=rate)
    with pytest.raises(ValidationError, match="frames/s"):
        table.install(Route("y", 1, 0, "every", 100, 1), pub_interval_ms=16)


def test_a_subscriber_at_a_frame_rate_sees_one_event_per_interval_and_no_false_gap() -> None:
    from gridstat.client import Subscriber

    rate = 30
    sub = Subscriber("ems", 5)
    var = StatusVariable("pmu1", "freq", FLOAT, filtering.nominal_interval_ms(rate), frames_per_s=rate,
                         variable_id=7)
    bad: list[object] = []
    s = sub.subscribe(var, interval_ms=100, latency_ms=20, on_violation=lambda _s, v: bad.append(v))
    assert s.interval_ms == 100
    got: list[int] = []
    s.on_event = lambda _s, h: got.append(h.timestamp_ms)
    first = EPOCH_S * rate - 45
    for k in range(first, first + 300):
        ts = frame_ms(k, rate)
        sub.process(wire.encode_datagram(1, k - first + 1, [wire.encode_event(
            wire.Event(ts, 7, wire.encode_value(FLOAT, 50.0)))]), ts + 2)
        assert sub.check_deadlines(ts + 3) == 0
    assert got == [frame_ms(k, rate) for k in range(first, first + 300) if k % 3 == 0]
    assert bad == [] and s.stats.gaps == 0 and s.stats.filtered == 200
    # A missing group is one gap, not two, and the deadline names the missing frame's timestamp.
    last = first + 300 - 3
    assert sub.check_deadlines(frame_ms(last + 3, rate) + 21) == 1
    assert s.expected_ts_ms == frame_ms(last + 6, rate)
    ts = frame_ms(last + 6, rate)
    sub.process(wire.encode_datagram(1, 999, [wire.encode_event(wire.Event(ts, 7, wire.encode_value(FLOAT, 1.0)))]),
                ts + 1)
    assert s.stats.gaps == 1
