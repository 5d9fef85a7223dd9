"""History queries checked and planned (gridstat.history.querying; docs/history.md)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.core import filtering
from gridstat.errors import ValidationError
from gridstat.history import querying
from gridstat.history.querying import Answering, Bounds, SpanTooLong, TooManyEvents, rule_for, validate

T0 = 1_795_000_000_000
HOUR = 3_600_000


def q(interval_ms: int = 0, *, span_ms: int = HOUR, max_events: int = 0,
      bounds: Bounds | None = None) -> querying.Query:
    return validate("pmu1/freq", from_ms=T0, to_ms=T0 + span_ms, interval_ms=interval_ms, max_events=max_events,
                    bounds=bounds or Bounds())


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"variable": ""}, "variable"),
    ({"variable": "nofreq"}, "variable"),
    ({"from_ms": T0, "to_ms": T0}, "from_ms"),
    ({"from_ms": T0 + 5, "to_ms": T0}, "from_ms"),
    ({"from_ms": 1_795_000_000}, "from_ms"),  # seconds, not milliseconds
    ({"to_ms": 10**17}, "to_ms"),
    ({"interval_ms": -1}, "interval_ms"),
    ({"max_events": -3}, "max_events"),
    ({"interval_ms": True}, "interval_ms"),
    ({"from_ms": 1.5}, "from_ms"),
])
def test_a_bad_query_names_its_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"variable": "pmu1/freq", "from_ms": T0, "to_ms": T0 + HOUR, **kwargs}
    variable = args.pop("variable")
    with pytest.raises(ValidationError) as info:
        validate(variable, **args)  # type: ignore[arg-type]
    assert info.value.field == field


def test_a_span_past_the_bound_is_refused_with_both_figures() -> None:
    with pytest.raises(SpanTooLong) as info:
        q(span_ms=2 * HOUR, bounds=Bounds(max_span_ms=HOUR))
    assert info.value.field == "to_ms" and "7200000" in str(info.value) and "3600000" in str(info.value)
    assert q(span_ms=HOUR, bounds=Bounds(max_span_ms=HOUR)).to_ms == T0 + HOUR


def test_the_callers_event_bound_never_exceeds_the_servers() -> None:
    assert q(max_events=10).max_events == 10
    assert q(max_events=10**9, bounds=Bounds(max_events=1000)).max_events == 1000
    assert q().max_events == querying.DEFAULT_MAX_EVENTS


@pytest.mark.parametrize("bad", [0, -1, True])
def test_bounds_must_be_positive(bad: int) -> None:
    with pytest.raises(ValidationError):
        Bounds(max_span_ms=bad)
    with pytest.raises(ValidationError):
        Bounds(max_events=bad)


def test_every_archived_event_without_an_interval() -> None:
    rule = rule_for(q(0), archive_interval_ms=16, pub_interval_ms=16, frames_per_s=60)
    assert rule.keep is None and rule.interval_ms == 0 and rule.notes == ()


def test_an_interval_below_the_archives_is_answered_at_the_archives_and_said_so() -> None:
    rule = rule_for(q(100), archive_interval_ms=200, pub_interval_ms=20, frames_per_s=0)
    assert rule.keep is None and rule.interval_ms == 200
    assert any("below the archive's 200 ms" in n for n in rule.notes)


def test_an_interval_is_rounded_down_as_live_and_said_so() -> None:
    rule = rule_for(q(110), archive_interval_ms=20, pub_interval_ms=20, frames_per_s=0)
    assert rule.interval_ms == 100 and rule.keep is not None
    assert any("rounded to 100 ms" in n for n in rule.notes)


def test_a_non_multiple_of_the_archives_interval_says_events_are_missing() -> None:
    rule = rule_for(q(300), archive_interval_ms=200, pub_interval_ms=20, frames_per_s=0)
    assert any("not a multiple" in n for n in rule.notes)
    assert not rule_for(q(400), archive_interval_ms=200, pub_interval_ms=20, frames_per_s=0).notes


def test_records_without_publication_parameters_use_the_archives_interval() -> None:
    rule = rule_for(q(200), archive_interval_ms=100, pub_interval_ms=None, frames_per_s=None)
    assert rule.pub_interval_ms == 100 and rule.keep is not None
    assert any("no publication interval" in n for n in rule.notes)


def test_an_alert_variable_is_not_rate_filtered() -> None:
    rule = rule_for(q(1000), archive_interval_ms=0, pub_interval_ms=0, frames_per_s=0)
    assert rule.keep is None and any("aperiodic" in n for n in rule.notes)


@given(ts=st.integers(min_value=T0, max_value=T0 + 10 * HOUR), pub=st.integers(min_value=1, max_value=1000),
       interval=st.integers(min_value=1, max_value=60_000))
def test_the_rule_is_the_live_rule_in_milliseconds(ts: int, pub: int, interval: int) -> None:
    rule = rule_for(q(interval), archive_interval_ms=pub, pub_interval_ms=pub, frames_per_s=0)
    granted = filtering.round_down_interval(interval, pub)
    expected = filtering.should_forward(ts, pub, granted)
    assert (rule.keep(ts) if rule.keep is not None else True) == expected


@given(frame=st.integers(min_value=0, max_value=10**7), fps=st.sampled_from([25, 30, 50, 60, 120]),
       interval=st.integers(min_value=1, max_value=10_000), nearest=st.booleans())
def test_the_rule_is_the_live_rule_at_device_frame_rates(frame: int, fps: int, interval: int, nearest: bool) -> None:
    # a frame's millisecond timestamp, floor or nearest (docs/frame-rates.md)
    ts = T0 + ((2000 * frame + fps) // (2 * fps) if nearest else 1000 * frame // fps)
    pub = 1000 // fps
    rule = rule_for(q(interval), archive_interval_ms=pub, pub_interval_ms=pub, frames_per_s=fps)
    granted = filtering.round_down_interval(interval, pub, fps)
    expected = filtering.should_forward(ts, pub, granted, fps)
    assert (rule.keep(ts) if rule.keep is not None else True) == expected


def test_one_hour_at_100_ms_of_60_frames_keeps_ten_a_second() -> None:
    rule = rule_for(q(100), archive_interval_ms=16, pub_interval_ms=16, frames_per_s=60)
    assert rule.keep is not None
    kept = [f for f in range(60 * 3600) if rule.keep(T0 + (2000 * f + 60) // 120)]
    assert len(kept) == 36_000 and all(b - a == 6 for a, b in itertools.pairwise(kept))


def test_too_many_events_is_refused_before_anything_is_sent() -> None:
    answering = Answering(q(0, max_events=1000))
    with pytest.raises(TooManyEvents) as info:
        answering.choose(archive_interval_ms=16, pub_interval_ms=16, frames_per_s=60)
    assert info.value.field == "max_events" and "216001" in str(info.value)
    ok = Answering(q(0, max_events=216_001))
    ok.choose(archive_interval_ms=16, pub_interval_ms=16, frames_per_s=60)


def test_a_denser_archive_than_announced_ends_with_the_error() -> None:
    answering = Answering(q(1000, max_events=3601))
    answering.choose(archive_interval_ms=1000, pub_interval_ms=1000, frames_per_s=0)
    answering.count(3601)
    assert answering.room() == 0
    err = answering.over()
    assert isinstance(err, TooManyEvents) and err.field == "max_events" and "3601" in str(err)


def test_a_change_of_the_archives_subscription_is_noted() -> None:
    answering = Answering(q(0))
    answering.choose(archive_interval_ms=100, pub_interval_ms=20, frames_per_s=0)
    answering.choose(archive_interval_ms=200, pub_interval_ms=20, frames_per_s=0)
    assert any("changed within the range" in n for n in answering.notes())
