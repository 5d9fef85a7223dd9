"""Input and output filters, and the three built-in triggers (dissertation 7.2.1, 7.2.2, 7.2.4)."""

from __future__ import annotations

import math

import pytest

from gridstat.condensation.filters import PASS_ALL, ValueFilter
from gridstat.condensation.triggers import AlertTrigger, EventTrigger, TimeTrigger, TriggerKind
from gridstat.errors import ValidationError


@pytest.mark.parametrize(("f", "passing", "stopped"), [
    (ValueFilter(True, 0.95, 1.05), [0.95, 1.0, 1.05], [0.94, 1.06]),
    (ValueFilter(True, 0.95, 1.05, pass_outside=True), [0.94, 1.06], [0.95, 1.0, 1.05]),
    (ValueFilter(True, None, 10.0), [-1e9, 10.0], [10.5]),
    (ValueFilter(True, 5.0, None, pass_outside=True), [4.9], [5.0, 1e9]),
    (PASS_ALL, [math.nan, -1.0, 1e300], []),
])
def test_range_checks_and_alarms(f: ValueFilter, passing: list[float], stopped: list[float]) -> None:
    assert all(f.passes(v) for v in passing)
    assert not any(f.passes(v) for v in stopped)


def test_nan_never_passes_an_enabled_filter() -> None:
    assert not ValueFilter(True, 0.0, 1.0).passes(math.nan)
    assert not ValueFilter(True, 0.0, 1.0, pass_outside=True).passes(math.nan)


def test_time_trigger_fires_once_per_aligned_instant_and_a_late_tick_once() -> None:
    t = TimeTrigger(100)
    assert t.next_due_ms(1_050) == 1_100
    assert t.next_due_ms(1_100) == 1_200
    assert t.due(1_100) == 1_100
    assert t.due(1_100) is None and t.due(1_199) is None
    assert t.due(1_201) == 1_200
    assert t.due(1_650) == 1_600  # three instants missed: one calculation, for the latest


def test_events_trigger_fires_after_x_distinct_inputs_of_n() -> None:
    every = EventTrigger(0, 3)  # 0 = all inputs: periodic output
    assert [every.update(i) for i in (0, 0, 1, 2)] == [False, False, False, True]
    assert [every.update(i) for i in (2, 1, 0)] == [False, False, True]
    any_one = EventTrigger(1, 3)
    assert [any_one.update(i) for i in (0, 0, 2)] == [True, True, True]
    two = EventTrigger(2, 3)
    assert [two.update(i) for i in (1, 1, 2, 0, 2)] == [False, False, True, False, True]


def test_alert_trigger_fires_on_every_xth_alert() -> None:
    t = AlertTrigger(3)
    assert [t.alert() for _ in range(7)] == [False, False, True, False, False, True, False]
    assert AlertTrigger(0).alert()  # 0 means 1


def test_trigger_kinds_parse_from_numbers_and_names() -> None:
    assert TriggerKind.parse(0) is TriggerKind.TIME
    assert TriggerKind.parse("Alerts") is TriggerKind.ALERTS
    with pytest.raises(ValidationError):
        TriggerKind.parse(4)
