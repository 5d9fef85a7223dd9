"""A condensation function's specification, validated once into frozen values (dissertation 7.3.1).

The same specification travels in ``gridstat.v1.CondensationSpec`` (the leaf broker's
``CreateCondensation``, the router's ``SetupCondensation``) and in the YAML file of the
standalone host (``gridstat condense host --spec``). ``spec_from_message`` reads the
message by attribute (this package does not import the generated code) and
``spec_from_mapping`` reads the YAML/JSON form; both return a ``CondensationSpec`` or
raise ``ValidationError`` whose ``field`` names the offending field as in the message
(``spec.trigger.count``, ``spec.input_filter.low`` ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from gridstat.condensation.calculators import OUTPUT_TYPES, InputInfo
from gridstat.condensation.filters import PASS_ALL, ValueFilter
from gridstat.condensation.triggers import Trigger, TriggerKind
from gridstat.errors import ValidationError

#: Most inputs one function may have (a guard against a request that would build a huge table).
MAX_INPUTS = 1024
#: Most parameters of one calculator.
MAX_PARAMETERS = 64

_CALCULATOR_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,127}")
_PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
INPUT_TYPES = ("int", "float", "bool")


@dataclass(frozen=True)
class CondensationSpec:
    """Input filter -> trigger -> calculator -> output filter (Fig 7.2)."""

    calculator: str
    trigger: Trigger
    parameters: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    input_filter: ValueFilter = PASS_ALL
    output_filter: ValueFilter = PASS_ALL
    #: "float", "int" or "bool"; "" = the calculator's default (float, bool for threshold_alert).
    output_type: str = ""

    def validate(self, *, field: str = "spec") -> CondensationSpec:
        if not isinstance(self.calculator, str) or not _CALCULATOR_NAME.fullmatch(self.calculator):
            raise ValidationError(f"calculator name {self.calculator!r} must be 1-128 letters, digits, '_', '.' "
                                  "or '-', starting with a letter", field=f"{field}.calculator")
        self.trigger.validate(field=f"{field}.trigger")
        if len(self.parameters) > MAX_PARAMETERS:
            raise ValidationError(f"at most {MAX_PARAMETERS} parameters", field=f"{field}.parameters")
        for key, value in self.parameters.items():
            if not isinstance(key, str) or not _PARAMETER_NAME.fullmatch(key):
                raise ValidationError(f"parameter name {key!r} is not a valid name", field=f"{field}.parameters")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValidationError(f"parameter {key!r} must be a finite number, got {value!r}",
                                      field=f"{field}.parameters.{key}")
        self.input_filter.validate(field=f"{field}.input_filter")
        self.output_filter.validate(field=f"{field}.output_filter")
        if self.output_type not in ("", *OUTPUT_TYPES):
            raise ValidationError(f"output_type {self.output_type!r} is not float, int or bool",
                                  field=f"{field}.output_type")
        return self


def check_inputs(inputs: Sequence[InputInfo], spec: CondensationSpec, *,
                 field: str = "inputs") -> tuple[InputInfo, ...]:
    """Inputs are numeric scalars, each variable once, at least one; the trigger must fit them."""
    if not inputs:
        raise ValidationError("a condensation function needs at least one input", field=field)
    if len(inputs) > MAX_INPUTS:
        raise ValidationError(f"at most {MAX_INPUTS} inputs, got {len(inputs)}", field=field)
    seen: set[int] = set()
    for i, info in enumerate(inputs):
        if info.value_type not in INPUT_TYPES:
            raise ValidationError(f"input {info.name or info.variable_id!r} has type {info.value_type!r}; "
                                  "condensation inputs are int, float or bool", field=f"{field}[{i}].value_type")
        if info.variable_id in seen:
            raise ValidationError(f"input {info.name or info.variable_id!r} appears twice", field=f"{field}[{i}]")
        seen.add(info.variable_id)
    spec.trigger.check_inputs(len(inputs))
    return tuple(inputs)


# -- from a gRPC message ------------------------------------------------------------------------------
class _FilterMessage(Protocol):
    enabled: bool
    low: float
    high: float
    pass_outside: bool

    def HasField(self, name: Any) -> bool: ...


def filter_from_message(m: _FilterMessage) -> ValueFilter:
    return ValueFilter(bool(m.enabled), float(m.low) if m.HasField("low") else None,
                       float(m.high) if m.HasField("high") else None, bool(m.pass_outside))


def spec_from_message(m: Any, *, field: str = "spec") -> CondensationSpec:
    """A validated spec from a ``gridstat.v1.CondensationSpec`` message."""
    trigger = Trigger(TriggerKind.parse(int(m.trigger.kind), field=f"{field}.trigger.kind"),
                      int(m.trigger.interval_ms), int(m.trigger.count))
    return CondensationSpec(
        calculator=m.calculator, trigger=trigger,
        parameters=MappingProxyType({str(k): float(v) for k, v in m.parameters.items()}),
        input_filter=filter_from_message(m.input_filter), output_filter=filter_from_message(m.output_filter),
        output_type=m.output_type,
    ).validate(field=field)


def input_from_message(m: Any) -> InputInfo:
    """An ``InputInfo`` from a ``gridstat.v1.CondensationInput`` message."""
    return InputInfo(int(m.variable_id), str(m.variable), str(m.value_type or "float"), int(m.pub_interval_ms),
                     bool(m.alert))


# -- from YAML / JSON ----------------------------------------------------------------------------------
def _number(d: Mapping[str, Any], key: str, *, field: str) -> float | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{field}.{key} must be a number, got {value!r}", field=f"{field}.{key}")
    return float(value)


def _int(d: Mapping[str, Any], key: str, *, field: str) -> int:
    value = d.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field}.{key} must be an integer, got {value!r}", field=f"{field}.{key}")
    return value


def _mapping(value: object, *, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field} must be a mapping, got {type(value).__name__}", field=field)
    return value


def filter_from_mapping(value: object, *, field: str) -> ValueFilter:
    """``{low: 0.95, high: 1.05, pass_outside: true}``; given bounds enable it unless ``enabled: false``."""
    d = _mapping(value, field=field)
    unknown = set(d) - {"enabled", "low", "high", "pass_outside"}
    if unknown:
        raise ValidationError(f"unknown key(s) {sorted(unknown)} in {field}", field=f"{field}.{sorted(unknown)[0]}")
    low, high = _number(d, "low", field=field), _number(d, "high", field=field)
    enabled = d.get("enabled", low is not None or high is not None)
    return ValueFilter(bool(enabled), low, high, bool(d.get("pass_outside", False)))


def spec_from_mapping(value: object, *, field: str = "spec") -> CondensationSpec:
    """A validated spec from its YAML/JSON form (keys as in the message; trigger kind by name)."""
    d = _mapping(value, field=field)
    unknown = set(d) - {"calculator", "parameters", "trigger", "input_filter", "output_filter", "output_type"}
    if unknown:
        raise ValidationError(f"unknown key(s) {sorted(unknown)} in {field}", field=f"{field}.{sorted(unknown)[0]}")
    t = _mapping(d.get("trigger"), field=f"{field}.trigger")
    trigger = Trigger(TriggerKind.parse(t.get("kind", 0), field=f"{field}.trigger.kind"),
                      _int(t, "interval_ms", field=f"{field}.trigger"), _int(t, "count", field=f"{field}.trigger"))
    params = _mapping(d.get("parameters"), field=f"{field}.parameters")
    for key, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValidationError(f"parameter {key!r} must be a number, got {v!r}", field=f"{field}.parameters.{key}")
    return CondensationSpec(
        calculator=str(d.get("calculator", "")), trigger=trigger,
        parameters=MappingProxyType({str(k): float(v) for k, v in params.items()}),
        input_filter=filter_from_mapping(d.get("input_filter"), field=f"{field}.input_filter"),
        output_filter=filter_from_mapping(d.get("output_filter"), field=f"{field}.output_filter"),
        output_type=str(d.get("output_type", "") or ""),
    ).validate(field=field)
