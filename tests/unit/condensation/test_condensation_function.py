"""The condensation function engine: counters, triggers end to end, and a calculator that raises."""

from __future__ import annotations

from typing import Any

import pytest

from gridstat.condensation import Calculator, CondensationFunction, Output
from gridstat.condensation.calculators import InputInfo
from gridstat.condensation.filters import ValueFilter
from gridstat.condensation.spec import CondensationSpec
from gridstat.condensation.triggers import Trigger, TriggerKind
from gridstat.errors import ValidationError

INPUTS = [InputInfo(1, "p1/v", pub_interval_ms=10), InputInfo(2, "p2/v", pub_interval_ms=10),
          InputInfo(3, "p3/v", value_type="bool", alert=True)]
T0 = 1_700_000_000_000


def function(calculator: str = "average", trigger: Trigger | None = None, *, calc: Any = None,
             **kw: Any) -> CondensationFunction:
    spec = CondensationSpec(calculator, trigger or Trigger(TriggerKind.TIME, 100), **kw).validate()
    return CondensationFunction(spec, INPUTS, function_id="f1", calculator=calc)


def test_time_trigger_averages_the_latest_values_at_aligned_instants() -> None:
    f = function()
    assert f.feed(1, T0, 1.0) == [] and f.feed(2, T0, 2.0) == []
    assert f.feed(1, T0 + 10, 4.0) == []  # the table keeps the latest
    assert f.next_tick_ms(T0 + 10) == T0 + 100
    assert f.tick(T0 + 100) == [Output(T0 + 100, 3.0)]
    assert f.tick(T0 + 100) == []  # once per instant
    status = f.status()
    assert (status["inputs"], status["triggers"], status["outputs"]) == (3, 1, 1)
    assert status["function_id"] == "f1" and status["calculator_errors"] == 0


def test_events_trigger_n_of_n_is_periodic_and_stamped_with_the_firing_event() -> None:
    f = function("sum", Trigger(TriggerKind.EVENTS, 0, 2), output_type="int")
    assert f.feed(1, T0, 1.4) == []
    assert f.feed(2, T0, 2.4) == [Output(T0, 4)]  # 3.8 rounded to the int output
    assert f.feed(2, T0 + 10, 2.0) == []
    assert f.feed(1, T0 + 10, 1.0) == [Output(T0 + 10, 3)]
    assert f.tick(T0 + 1_000) == [] and f.next_tick_ms(T0) is None


def test_alerts_trigger_calculates_over_periodic_inputs_when_an_alert_comes() -> None:
    f = function("max", Trigger(TriggerKind.ALERTS, 0, 1))
    f.feed(1, T0, 5.0)
    f.feed(2, T0, 7.0)
    assert f.feed(3, T0 + 3, False, alert=False) == []  # not an alert event
    assert f.feed(3, T0 + 5, True, alert=True) == [Output(T0 + 5, 7.0)]


def test_input_filter_keeps_events_from_the_table_and_the_trigger() -> None:
    f = function("average", Trigger(TriggerKind.EVENTS, 0, 1), input_filter=ValueFilter(True, 0.0, 100.0))
    assert f.feed(1, T0, 1e6) == []
    assert f.feed(1, T0 + 10, 50.0) == [Output(T0 + 10, 50.0)]
    assert f.feed(1, T0 + 10, 60.0) == []  # not newer than the held value: a duplicate
    assert f.feed(99, T0, 1.0) == []  # not an input
    s = f.counters
    assert (s.inputs, s.input_filtered, s.triggers, s.unknown_inputs) == (1, 2, 1, 1)


def test_output_filter_turns_a_periodic_result_into_alarms() -> None:
    f = function("average", Trigger(TriggerKind.EVENTS, 0, 1),
                 output_filter=ValueFilter(True, 0.95, 1.05, pass_outside=True))
    assert f.feed(1, T0, 1.0) == []
    assert f.feed(1, T0 + 10, 1.2) == [Output(T0 + 10, 1.2)]
    assert (f.counters.outputs, f.counters.output_filtered) == (1, 1)


def test_threshold_alert_defaults_to_a_bool_output() -> None:
    f = function("threshold_alert", Trigger(TriggerKind.EVENTS, 0, 1), parameters={"high": 1.05})
    assert f.output_type == "bool"
    assert f.feed(1, T0, 1.1) == [Output(T0, True)]


class Flaky(Calculator):
    """Raises on odd calls."""

    calls = 0

    def calculate(self) -> float:
        self.calls += 1
        if self.calls % 2:
            raise ZeroDivisionError("odd call")
        return 1.0


def test_a_calculator_that_raises_is_counted_and_the_function_keeps_running() -> None:
    f = function("flaky", Trigger(TriggerKind.EVENTS, 0, 1), calc=Flaky())
    outputs = [f.feed(1, T0 + 10 * i, 1.0) for i in range(4)]
    assert outputs == [[], [Output(T0 + 10, 1.0)], [], [Output(T0 + 30, 1.0)]]
    s = f.counters
    assert (s.triggers, s.outputs, s.calculator_errors) == (4, 2, 2)
    assert s.last_error == "ZeroDivisionError: odd call"


class Wrong(Calculator):
    def __init__(self, result: object) -> None:
        self.result = result

    def calculate(self) -> Any:
        return self.result


@pytest.mark.parametrize(("result", "output_type"), [
    ("3.0", "float"), (float("nan"), "int"), (2**70, "int"), ([1], "bool"), (float("nan"), "bool"),
])
def test_a_result_that_is_not_of_the_output_type_is_a_calculator_error(result: object, output_type: str) -> None:
    f = function("wrong", Trigger(TriggerKind.EVENTS, 0, 1), calc=Wrong(result), output_type=output_type)
    assert f.feed(1, T0, 1.0) == []
    assert f.counters.calculator_errors == 1 and f.counters.last_error


def test_a_long_error_is_cut_in_the_status() -> None:
    class Verbose(Calculator):
        def calculate(self) -> float:
            raise RuntimeError("x" * 1000)

    f = function("v", Trigger(TriggerKind.EVENTS, 0, 1), calc=Verbose())
    f.feed(1, T0, 1.0)
    assert len(f.counters.last_error) == 256 and f.counters.last_error.endswith("...")


def test_an_alert_output_keeps_its_minimum_interval() -> None:
    spec = CondensationSpec("max", Trigger(TriggerKind.EVENTS, 0, 1)).validate()
    f = CondensationFunction(spec, INPUTS, output_min_interval_ms=50)
    assert f.feed(1, T0, 1.0) == [Output(T0, 1.0)]
    assert f.feed(1, T0 + 10, 2.0) == []
    assert f.feed(1, T0 + 50, 3.0) == [Output(T0 + 50, 3.0)]
    assert f.counters.output_filtered == 1


def test_an_initialize_that_raises_refuses_the_setup_with_the_calculator_field() -> None:
    class Picky(Calculator):
        def initialize(self, setup: Any, inputs: Any) -> None:
            raise KeyError("needs parameter 'k'")

    with pytest.raises(ValidationError) as info:
        function("picky", calc=Picky())
    assert info.value.field == "spec.calculator"


def test_a_builtin_refuses_unknown_parameters() -> None:
    with pytest.raises(ValidationError) as info:
        function("average", parameters={"max_age": 5.0})
    assert info.value.field == "spec.parameters.max_age"
