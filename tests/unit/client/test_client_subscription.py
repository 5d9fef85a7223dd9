"""Subscription semantics driven with explicit clocks: holder, filter, dedup, gaps, violations."""

from __future__ import annotations

from gridstat.client import Holder, Subscription, Violation
from gridstat.core import wire
from gridstat.core.model import FLOAT, INT, StatusVariable

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)
ALERT = StatusVariable("pmu1", "trip", INT, 0, priority=0, alert=True, min_interval_ms=100, variable_id=8)


def ev(ts: int, value: float = 1.0, var: StatusVariable = VAR) -> wire.Event:
    return wire.Event(ts, var.variable_id, wire.encode_value(var.type, value), 0,
                      (wire.DerivedValue(1, 4, 2.5),))


def make(interval: int = 20, latency: int = 5) -> tuple[Subscription, list[Holder], list[Violation]]:
    got: list[Holder] = []
    bad: list[Violation] = []
    sub = Subscription(VAR, interval_ms=interval, latency_ms=latency,
                       on_event=lambda s, h: got.append(h), on_violation=lambda s, v: bad.append(v))
    return sub, got, bad


def test_interval_is_rounded_down_to_a_multiple_of_the_publication_interval() -> None:
    assert Subscription(VAR, interval_ms=35, latency_ms=0).interval_ms == 30
    assert Subscription(VAR, interval_ms=3, latency_ms=0).interval_ms == 10


def test_holder_carries_value_timestamps_latency_and_options() -> None:
    sub, got, _ = make()
    assert sub.holder is None and sub.value is None
    assert sub.handle_event(ev(1000, 50.02), now_ms=1003)
    h = sub.holder
    assert h is not None and got == [h]
    assert (h.value, h.timestamp_ms, h.received_ms, h.latency_ms) == (50.02, 1000, 1003, 3)
    assert h.options == (wire.DerivedValue(1, 4, 2.5),)
    assert h.extrapolated is False and h.sequence_ok is True
    sub.handle_event(ev(1020, 50.03), now_ms=1021)
    assert sub.holder is not h and h.value == 50.02  # a kept holder never changes
    assert sub.value == 50.03


def test_subscriber_side_rate_filter_and_dedup() -> None:
    sub, got, _ = make(interval=20)
    for ts in range(1000, 1100, 10):
        sub.handle_event(ev(ts), now_ms=ts + 1)
    sub.handle_event(ev(1040), now_ms=1200)  # a redundant path's copy, after newer ones
    sub.handle_event(ev(1020), now_ms=1200)
    assert [h.timestamp_ms for h in got] == [1000, 1020, 1040, 1060, 1080]
    assert sub.stats.filtered == 5
    assert sub.stats.duplicates == 2
    assert sub.stats.delivered == 5
    assert sub.stats.gaps == 0


def test_gaps_are_counted_from_timestamps_and_flag_the_holder() -> None:
    sub, got, bad = make(interval=20, latency=100)
    sub.handle_event(ev(1000), now_ms=1001)
    sub.handle_event(ev(1080), now_ms=1081)  # 1020, 1040, 1060 missing
    assert sub.stats.gaps == 3
    assert got[-1].sequence_ok is False
    assert [v.kind for v in bad] == ["gap"]
    assert (bad[0].expected_ts_ms, bad[0].last_ts_ms) == (1020, 1000)


def test_late_violation_fires_once_per_missed_deadline() -> None:
    sub, _, bad = make(interval=20, latency=5)
    assert sub.check(5000) is None  # nothing delivered yet: no baseline
    sub.handle_event(ev(1000), now_ms=1002)
    assert sub.expected_ts_ms == 1020
    assert sub.check(1025) is None  # exactly at the deadline is on time
    v = sub.check(1026)
    assert v is not None and (v.kind, v.expected_ts_ms, v.detected_ms, v.last_ts_ms) == ("late", 1020, 1026, 1000)
    for now in range(1027, 1046):  # the next deadline is 1045: no repeats meanwhile
        assert sub.check(now) is None
    assert sub.check(1046) is not None
    assert sub.stats.violations == 2 and len(bad) == 2
    # A starved monitor reports the missed deadlines in one violation.
    v = sub.check(1046 + 60)
    assert v is not None and v.missed == 3 and v.expected_ts_ms == 1060
    # The next event arrives on time for the deadline now expected: no extra violation, gaps counted.
    assert sub.expected_ts_ms == 1120
    sub.handle_event(ev(1120), now_ms=1121)
    assert len(bad) == 3
    assert sub.stats.gaps == 5


def test_no_gap_violation_for_deadlines_already_reported_late() -> None:
    sub, _, bad = make(interval=20, latency=5)
    sub.handle_event(ev(1000), now_ms=1000)
    sub.check(1030)  # 1020 late
    sub.handle_event(ev(1040), now_ms=1041)
    assert [v.kind for v in bad] == ["late"]
    assert sub.stats.gaps == 1


def test_late_arrival_counts_a_latency_violation() -> None:
    sub, _, bad = make(interval=20, latency=5)
    sub.handle_event(ev(1000), now_ms=1006)
    assert [(v.kind, v.latency_ms) for v in bad] == [("latency", 6)]
    assert sub.stats.latency.percentile(50) == 6.0


def test_callback_errors_are_counted_not_raised() -> None:
    def boom(s: Subscription, h: object) -> None:
        raise RuntimeError("user bug")

    sub = Subscription(VAR, interval_ms=10, latency_ms=50, on_event=boom, on_violation=boom)
    assert sub.handle_event(ev(1000), now_ms=1001)
    sub.check(2000)
    assert sub.stats.callback_errors == 2
    assert sub.stats.delivered == 1


def test_alerts_are_not_rate_filtered_nor_monitored() -> None:
    sub = Subscription(ALERT, interval_ms=100, latency_ms=10)
    assert sub.handle_event(ev(1003, 1, ALERT), now_ms=1004)
    assert sub.handle_event(ev(1177, 2, ALERT), now_ms=1178)
    assert sub.check(10_000) is None
    assert sub.stats.gaps == 0 and sub.value == 2


def test_wrong_value_bytes_are_not_delivered() -> None:
    sub, got, _ = make()
    assert not sub.handle_event(wire.Event(1000, 7, b"\x01\x02"), now_ms=1000)
    assert got == []


def test_unsubscribe_is_idempotent_and_stops_monitoring() -> None:
    sub, _, _ = make()
    sub.handle_event(ev(1000), now_ms=1000)
    sub.unsubscribe()
    sub.unsubscribe()
    assert sub.check(9999) is None


def test_subscriber_filter_is_function_4_1_for_jittered_timestamps() -> None:
    from gridstat.core import filtering

    for interval in (10, 20, 30, 50):
        for ts in range(1000, 1100):
            sub = Subscription(VAR, interval_ms=interval, latency_ms=1000)
            assert sub.handle_event(ev(ts), now_ms=ts) is filtering.should_forward(ts, 10, interval), (interval, ts)
