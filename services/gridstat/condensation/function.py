"""The condensation function engine: filter, trigger, calculate, filter, publish (dissertation 7.2).

``CondensationFunction`` is pure and clock-free: its host (a router slot,
``router.condensation``, or the standalone host role, ``cli.condense``) feeds it input
events with ``feed`` and, for a time trigger, calls ``tick`` at the aligned instants
``next_tick_ms`` names; both return the outputs to publish. Every step is counted
(``FunctionCounters``, reported as ``CondensationStatus``):

* ``inputs``: input events accepted into the input table;
* ``input_filtered``: input events the input filter stopped, or not newer than the
  input's latest (a duplicate or a reordered copy);
* ``triggers``: calculations started;
* ``outputs``: output events produced;
* ``output_filtered``: results the output filter stopped (or, for an alert output,
  that came sooner than its minimum interval);
* ``calculator_errors`` / ``last_error``: ``calculate()`` raised, or returned a value
  that is not a number of the output type. The error is caught here and counted; the
  function keeps running and the host never sees the exception.

Output timestamps: a time trigger stamps its output with the aligned instant it fired
for, so the output is as periodic (and as filterable) as a publisher's variable; an
events or alerts trigger stamps it with the timestamp of the event that fired it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from gridstat.condensation import calculators
from gridstat.condensation.calculators import CalculatorSetup, InputInfo, InputTable, Value
from gridstat.condensation.filters import as_number
from gridstat.condensation.spec import CondensationSpec, check_inputs
from gridstat.condensation.triggers import AlertTrigger, EventTrigger, TimeTrigger, TriggerKind
from gridstat.errors import GridStatError, ValidationError

#: ``last_error`` is cut to this many characters (it travels in every status report).
LAST_ERROR_MAX = 256
#: Largest int an int output may carry (the wire's signed 64 bits).
_INT_MAX = 2**63 - 1


class Output(NamedTuple):
    """One output event: publish ``value`` at ``timestamp_ms``."""

    timestamp_ms: int
    value: Value


@dataclass
class FunctionCounters:
    inputs: int = 0
    input_filtered: int = 0
    triggers: int = 0
    outputs: int = 0
    output_filtered: int = 0
    calculator_errors: int = 0
    last_error: str = ""
    #: Events of variables that are not inputs of this function (not reported; a routing mistake).
    unknown_inputs: int = 0

    def as_status(self) -> dict[str, Any]:
        """The fields of ``gridstat.v1.CondensationStatus`` (without function_id and router)."""
        d = asdict(self)
        d.pop("unknown_inputs")
        return d


def convert_output(value: object, output_type: str) -> Value:
    """The calculator's result as the output type; TypeError/ValueError if it is not one."""
    if output_type == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value)):
            return bool(value)
        raise TypeError(f"calculate() returned {value!r}, not a bool")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"calculate() returned {type(value).__name__} {value!r}, not a number")
    if output_type == "int":
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"calculate() returned {value!r}, which is not an int")
        result = round(value)
        if not -_INT_MAX - 1 <= result <= _INT_MAX:
            raise ValueError(f"calculate() returned {value!r}, beyond 64 bits")
        return result
    return float(value)


class CondensationFunction:
    """One condensation function; see the module docstring for its contract."""

    def __init__(self, spec: CondensationSpec, inputs: Sequence[InputInfo], *, function_id: str = "",
                 calculator: Any = None, output_min_interval_ms: int = 0) -> None:
        """Build and initialize the function.

        Args:
            spec: the validated specification.
            inputs: the input variables (numeric scalars).
            function_id: for the calculator's setup and the status.
            calculator: an initialized-to-be calculator object; default: ``calculators.load(spec.calculator)()``.
            output_min_interval_ms: for an alert output, the smallest gap between two outputs.

        Raises:
            ValidationError: a bad input list, trigger count or calculator parameter, or an
                ``initialize`` that raised (field ``spec.calculator``).
            NotFound: no calculator of that name is installed here.
        """
        self.spec = spec
        self.inputs = check_inputs(inputs, spec)
        self.function_id = function_id
        self.counters = FunctionCounters()
        self.output_min_interval_ms = max(0, output_min_interval_ms)
        self._last_output_ms: int | None = None
        self.table = InputTable(self.inputs)
        self._index = {info.variable_id: i for i, info in enumerate(self.inputs)}
        factory = None
        if calculator is None:
            factory = calculators.load(spec.calculator)
            calculators.check_parameters(factory, spec.parameters)
        self.output_type = spec.output_type or calculators.default_output_type(factory or type(calculator))
        setup = CalculatorSetup(function_id, MappingProxyType(dict(spec.parameters)), self.inputs, self.output_type)
        try:
            self.calculator = factory() if factory is not None else calculator
            initialize = getattr(self.calculator, "initialize", None)
            if initialize is not None:
                initialize(setup, self.table)
        except GridStatError:
            raise
        except Exception as exc:
            raise ValidationError(f"calculator {spec.calculator!r} failed to initialize: {type(exc).__name__}: "
                                  f"{exc}", field="spec.calculator") from exc
        kind = spec.trigger.kind
        self.time_trigger = TimeTrigger(spec.trigger.interval_ms) if kind is TriggerKind.TIME else None
        self.event_trigger = EventTrigger(spec.trigger.count, len(self.inputs)) if kind is TriggerKind.EVENTS else None
        self.alert_trigger = AlertTrigger(spec.trigger.count) if kind is TriggerKind.ALERTS else None

    # -- the host's calls -----------------------------------------------------------------------------
    def feed(self, variable_id: int, timestamp_ms: int, value: Value, alert: bool = False) -> list[Output]:
        """One input event; returns the outputs it triggered (an events or alerts trigger)."""
        c = self.counters
        index = self._index.get(variable_id)
        if index is None:
            c.unknown_inputs += 1
            return []
        held = self.table[variable_id]
        if held.updates and timestamp_ms <= held.timestamp_ms:
            c.input_filtered += 1  # a duplicate or a reordered copy: the table keeps the newest
            return []
        if not self.spec.input_filter.passes(as_number(value)):
            c.input_filtered += 1
            return []
        held.value, held.timestamp_ms, held.alert = value, timestamp_ms, alert
        held.updates += 1
        c.inputs += 1
        if self.event_trigger is not None and self.event_trigger.update(index):
            return self._calculate(timestamp_ms)
        if self.alert_trigger is not None and alert and self.alert_trigger.alert():
            return self._calculate(timestamp_ms)
        return []

    def next_tick_ms(self, now_ms: int) -> int | None:
        """When a time trigger fires next (an aligned instant after ``now_ms``); None for other triggers."""
        return None if self.time_trigger is None else self.time_trigger.next_due_ms(now_ms)

    def tick(self, now_ms: int) -> list[Output]:
        """Fire a time trigger due at ``now_ms`` (once per aligned instant); other triggers ignore it."""
        if self.time_trigger is None:
            return []
        instant = self.time_trigger.due(now_ms)
        return [] if instant is None else self._calculate(instant)

    def status(self) -> dict[str, Any]:
        return {"function_id": self.function_id, **self.counters.as_status()}

    # -- internals --------------------------------------------------------------------------------
    def _calculate(self, instant_ms: int) -> list[Output]:
        c = self.counters
        c.triggers += 1
        self.table.now_ms = instant_ms
        try:
            result = self.calculator.calculate()
            if result is None:
                return []
            value = convert_output(result, self.output_type)
        except Exception as exc:  # a user's bug is counted and reported, never propagated
            self._error(exc)
            return []
        if not self.spec.output_filter.passes(as_number(value)):
            c.output_filtered += 1
            return []
        last = self._last_output_ms
        if self.output_min_interval_ms and last is not None and instant_ms - last < self.output_min_interval_ms:
            c.output_filtered += 1
            return []
        self._last_output_ms = instant_ms
        c.outputs += 1
        return [Output(instant_ms, value)]

    def _error(self, exc: BaseException) -> None:
        c = self.counters
        c.calculator_errors += 1
        text = f"{type(exc).__name__}: {exc}"
        c.last_error = text if len(text) <= LAST_ERROR_MAX else text[:LAST_ERROR_MAX - 3] + "..."
