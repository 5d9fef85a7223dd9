"""Validating a condensation function's specification: every refusal names its field."""

from __future__ import annotations

import math

import pytest

from gridstat.condensation.calculators import InputInfo
from gridstat.condensation.filters import ValueFilter
from gridstat.condensation.spec import CondensationSpec, check_inputs, spec_from_mapping, spec_from_message
from gridstat.condensation.triggers import Trigger, TriggerKind
from gridstat.errors import ValidationError
from gridstat.v1 import condensation_pb2 as cpb


def spec(**kw: object) -> CondensationSpec:
    base: dict[str, object] = {"calculator": "average", "trigger": Trigger(TriggerKind.TIME, 100)}
    base.update(kw)
    return CondensationSpec(**base)  # type: ignore[arg-type]


def field_of(fn: object) -> str | None:
    with pytest.raises(ValidationError) as info:
        fn()  # type: ignore[operator]
    return info.value.field


def test_a_good_spec_validates_to_itself() -> None:
    s = spec(parameters={"max_age_ms": 500.0}, input_filter=ValueFilter(True, 0.0, 100.0))
    assert s.validate() is s


@pytest.mark.parametrize(("kw", "field"), [
    ({"calculator": ""}, "spec.calculator"),
    ({"calculator": "9lives"}, "spec.calculator"),
    ({"calculator": "has space"}, "spec.calculator"),
    ({"trigger": Trigger(TriggerKind.TIME, 0)}, "spec.trigger.interval_ms"),
    ({"trigger": Trigger(TriggerKind.TIME, 86_400_001)}, "spec.trigger.interval_ms"),
    ({"trigger": Trigger(TriggerKind.EVENTS, 0, -1)}, "spec.trigger.count"),
    ({"trigger": Trigger(TriggerKind.ALERTS, 0, -2)}, "spec.trigger.count"),
    ({"parameters": {"high": math.inf}}, "spec.parameters.high"),
    ({"parameters": {"high": True}}, "spec.parameters.high"),
    ({"parameters": {"bad name": 1.0}}, "spec.parameters"),
    ({"input_filter": ValueFilter(True)}, "spec.input_filter.low"),
    ({"input_filter": ValueFilter(True, 2.0, 1.0)}, "spec.input_filter.low"),
    ({"output_filter": ValueFilter(True, None, math.nan)}, "spec.output_filter.high"),
    ({"output_type": "string"}, "spec.output_type"),
])
def test_each_bad_field_is_named(kw: dict[str, object], field: str) -> None:
    assert field_of(lambda: spec(**kw).validate()) == field


def test_an_events_trigger_cannot_wait_for_more_inputs_than_there_are() -> None:
    s = spec(trigger=Trigger(TriggerKind.EVENTS, 0, 3)).validate()
    inputs = [InputInfo(1), InputInfo(2)]
    assert field_of(lambda: check_inputs(inputs, s)) == "spec.trigger.count"
    assert len(check_inputs([*inputs, InputInfo(3)], s)) == 3


def test_inputs_are_numeric_scalars_each_once_and_at_least_one() -> None:
    s = spec().validate()
    assert field_of(lambda: check_inputs([], s)) == "inputs"
    assert field_of(lambda: check_inputs([InputInfo(1), InputInfo(1)], s)) == "inputs[1]"
    assert field_of(lambda: check_inputs([InputInfo(1, value_type="pmu")], s)) == "inputs[0].value_type"


def test_from_the_grpc_message_with_open_bounds_and_the_unspecified_kind() -> None:
    m = cpb.CondensationSpec(calculator="threshold_alert", parameters={"high": 1.05},
                             trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_UNSPECIFIED, interval_ms=20),
                             input_filter=cpb.ValueFilter(enabled=True, low=0.0),
                             output_filter=cpb.ValueFilter(enabled=True, low=0.5), output_type="bool")
    s = spec_from_message(m)
    assert s.trigger == Trigger(TriggerKind.TIME, 20, 0)
    assert s.input_filter == ValueFilter(True, 0.0, None, False)
    assert dict(s.parameters) == {"high": 1.05}
    assert s.output_type == "bool"


def test_from_the_message_an_unknown_trigger_kind_is_named() -> None:
    m = cpb.CondensationSpec(calculator="sum", trigger=cpb.Trigger(kind=7, interval_ms=20))
    assert field_of(lambda: spec_from_message(m)) == "spec.trigger.kind"


def test_from_yaml_trigger_kind_by_name_and_bounds_enable_a_filter() -> None:
    s = spec_from_mapping({"calculator": "max", "trigger": {"kind": "events", "count": 2},
                           "output_filter": {"high": 10, "pass_outside": True}})
    assert s.trigger == Trigger(TriggerKind.EVENTS, 0, 2)
    assert s.output_filter == ValueFilter(True, None, 10.0, True)
    assert not s.input_filter.enabled


@pytest.mark.parametrize(("doc", "field"), [
    ({"calculator": "max", "trigger": {"kind": "sometimes"}}, "spec.trigger.kind"),
    ({"calculator": "max", "trigger": {"kind": "time", "interval_ms": "100"}}, "spec.trigger.interval_ms"),
    ({"calculator": "max", "trigger": {"kind": "time", "interval_ms": 100}, "colour": 1}, "spec.colour"),
    ({"calculator": "max", "trigger": {"interval_ms": 100}, "input_filter": {"lo": 1}}, "spec.input_filter.lo"),
    ({"calculator": "max", "trigger": {"interval_ms": 100}, "parameters": {"x": "y"}}, "spec.parameters.x"),
    ({"calculator": "max", "trigger": []}, "spec.trigger"),
])
def test_from_yaml_bad_documents_name_their_field(doc: dict[str, object], field: str) -> None:
    assert field_of(lambda: spec_from_mapping(doc)) == field
