"""Calculators: the application logic of a condensation function (dissertation 7.2.3, Fig A.35).

GridStat's calculator interface has two methods: ``initialize(setupHolder, statusHolders)``
gives the calculator the setup and the structure the trigger fills with the latest value
of every input, and ``calculate()`` produces the output. Ours keeps that shape::

    class Calculator:
        def initialize(self, setup: CalculatorSetup, inputs: InputTable) -> None: ...
        def calculate(self) -> float | int | bool | None: ...   # None: no new value

``inputs`` is shared and updated in place by the trigger; ``inputs.now_ms`` is the instant
the calculation is for. Built-ins: ``average``, ``min``, ``max``, ``sum``,
``rate_of_change`` and ``threshold_alert``. Any other name is looked up in the entry-point
group ``gridstat.calculators``; the object it names may be a ``Calculator`` subclass (or any
class with ``initialize``/``calculate``) or a plain function
``f(inputs: InputTable, parameters: Mapping[str, float]) -> value | None``.

Why entry points and not GridStat's "calculator URI": a router runs only code its operator
installed into the router's image or environment, never code named by a remote request.

A calculator runs on the router's event loop: it must be quick and must not block. An
exception it raises is caught, counted and reported by the function (``calculator_errors``,
``last_error``); it never reaches the router.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from gridstat.errors import NotFound, ValidationError

ENTRY_POINT_GROUP = "gridstat.calculators"

#: Output value types a condensation function may publish.
OUTPUT_TYPES = ("float", "int", "bool")

Value = float | int | bool


@dataclass(frozen=True, slots=True)
class InputInfo:
    """One input variable of a function, as the leaf broker resolved it."""

    variable_id: int
    name: str = ""  # "publisher/variable"
    value_type: str = "float"  # "int", "float" or "bool"
    pub_interval_ms: int = 0
    alert: bool = False


class InputValue:
    """The latest accepted event of one input."""

    __slots__ = ("alert", "timestamp_ms", "updates", "value")

    def __init__(self) -> None:
        self.value: Value | None = None
        self.timestamp_ms = 0
        self.alert = False
        #: Accepted events of this input so far.
        self.updates = 0

    def __repr__(self) -> str:
        return f"InputValue(value={self.value!r}, timestamp_ms={self.timestamp_ms}, alert={self.alert})"


class InputTable:
    """The latest value of every input, shared by the trigger and the calculator (7.2.2)."""

    def __init__(self, infos: tuple[InputInfo, ...]) -> None:
        self.infos = infos
        self._by_id: dict[int, InputValue] = {i.variable_id: InputValue() for i in infos}
        #: The instant the current calculation is for (the trigger instant or the firing event's timestamp).
        self.now_ms = 0

    def __getitem__(self, variable_id: int) -> InputValue:
        return self._by_id[variable_id]

    def __contains__(self, variable_id: object) -> bool:
        return variable_id in self._by_id

    def __iter__(self) -> Iterator[tuple[InputInfo, InputValue]]:
        for info in self.infos:
            yield info, self._by_id[info.variable_id]

    def __len__(self) -> int:
        return len(self.infos)

    def latest(self, *, max_age_ms: int = 0) -> list[float]:
        """The values (as floats) of the inputs that have one, no older than ``max_age_ms`` (0: any age)."""
        out: list[float] = []
        horizon = self.now_ms - max_age_ms
        for v in self._by_id.values():
            if v.value is not None and (not max_age_ms or v.timestamp_ms >= horizon):
                out.append(float(v.value))
        return out


@dataclass(frozen=True)
class CalculatorSetup:
    """What ``initialize`` is given besides the input table (the setup holder of the dissertation)."""

    function_id: str
    parameters: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    inputs: tuple[InputInfo, ...] = ()
    output_type: str = "float"


class Calculator:
    """Base class of calculators; subclasses implement ``calculate`` (and may extend ``initialize``)."""

    #: The output type when the spec leaves ``output_type`` empty.
    default_output_type: ClassVar[str] = "float"
    #: Parameters a built-in accepts (None: any, as for user calculators).
    parameter_names: ClassVar[frozenset[str] | None] = None

    setup: CalculatorSetup
    inputs: InputTable

    def initialize(self, setup: CalculatorSetup, inputs: InputTable) -> None:
        self.setup = setup
        self.inputs = inputs

    def calculate(self) -> Value | None:
        raise NotImplementedError


# -- built-ins --------------------------------------------------------------------------------------
class _Aggregate(Calculator):
    """Reduces the inputs' latest values; ``max_age_ms`` leaves out inputs that went quiet."""

    parameter_names = frozenset({"max_age_ms"})
    max_age_ms = 0

    def initialize(self, setup: CalculatorSetup, inputs: InputTable) -> None:
        super().initialize(setup, inputs)
        age = setup.parameters.get("max_age_ms", 0.0)
        if age < 0:
            raise ValidationError(f"max_age_ms must not be negative, got {age:g}", field="spec.parameters.max_age_ms")
        self.max_age_ms = int(age)

    def values(self) -> list[float]:
        return self.inputs.latest(max_age_ms=self.max_age_ms)


class Average(_Aggregate):
    def calculate(self) -> float | None:
        values = self.values()
        return math.fsum(values) / len(values) if values else None


class Minimum(_Aggregate):
    def calculate(self) -> float | None:
        values = self.values()
        return min(values) if values else None


class Maximum(_Aggregate):
    def calculate(self) -> float | None:
        values = self.values()
        return max(values) if values else None


class Sum(_Aggregate):
    def calculate(self) -> float | None:
        values = self.values()
        return math.fsum(values) if values else None


class RateOfChange(_Aggregate):
    """Change per second of the inputs' average between two calculations (one input: its ROCOF)."""

    _previous: tuple[int, float] | None = None

    def calculate(self) -> float | None:
        values = self.values()
        if not values:
            return None
        now, mean = self.inputs.now_ms, math.fsum(values) / len(values)
        previous, self._previous = self._previous, (now, mean)
        if previous is None or now <= previous[0]:
            return None
        return (mean - previous[1]) * 1000.0 / (now - previous[0])


class ThresholdAlert(_Aggregate):
    """True while any input is below ``low`` or above ``high``; an output filter keeps only the alarms."""

    default_output_type = "bool"
    parameter_names = frozenset({"low", "high", "max_age_ms"})

    def initialize(self, setup: CalculatorSetup, inputs: InputTable) -> None:
        super().initialize(setup, inputs)
        self.low = setup.parameters.get("low")
        self.high = setup.parameters.get("high")
        if self.low is None and self.high is None:
            raise ValidationError("threshold_alert needs parameter low or high", field="spec.parameters.low")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValidationError(f"threshold_alert: low {self.low:g} is above high {self.high:g}",
                                  field="spec.parameters.low")

    def calculate(self) -> bool | None:
        values = self.values()
        if not values:
            return None
        low, high = self.low, self.high
        return any((low is not None and v < low) or (high is not None and v > high) for v in values)


BUILTINS: Mapping[str, type[Calculator]] = MappingProxyType({
    "average": Average,
    "min": Minimum,
    "max": Maximum,
    "sum": Sum,
    "rate_of_change": RateOfChange,
    "threshold_alert": ThresholdAlert,
})


# -- user calculators ---------------------------------------------------------------------------------
class FunctionCalculator(Calculator):
    """Wraps a plain function ``f(inputs, parameters)`` registered as a calculator."""

    def __init__(self, fn: Callable[[InputTable, Mapping[str, float]], Value | None]) -> None:
        self.fn = fn

    def calculate(self) -> Value | None:
        return self.fn(self.inputs, self.setup.parameters)


CalculatorFactory = Callable[[], Any]


def _factory(obj: object, name: str, *, field: str) -> CalculatorFactory:
    if inspect.isclass(obj):
        if not callable(getattr(obj, "calculate", None)):
            raise ValidationError(f"calculator {name!r} ({obj.__qualname__}) has no calculate() method", field=field)
        return obj
    if callable(obj):
        fn = obj
        return lambda: FunctionCalculator(fn)
    raise ValidationError(f"calculator {name!r} is neither a class nor a function: {obj!r}", field=field)


def entry_point(name: str) -> importlib.metadata.EntryPoint | None:
    """The entry point registering calculator ``name`` (the first, if several do)."""
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep
    return None


def load(name: str, *, field: str = "spec.calculator") -> CalculatorFactory:
    """A factory of calculator ``name``: a built-in, else the entry point of that name.

    Raises NotFound when no calculator has that name here, ValidationError when the entry
    point's object cannot be imported or is not a calculator (the import error is in the message).
    """
    builtin = BUILTINS.get(name)
    if builtin is not None:
        return builtin
    ep = entry_point(name)
    if ep is None:
        raise NotFound(f"no calculator {name!r}: not a built-in ({', '.join(BUILTINS)}) and no "
                       f"{ENTRY_POINT_GROUP!r} entry point of that name is installed", field=field)
    try:
        obj = ep.load()
    except Exception as exc:  # an import error of user code must not take the host down
        raise ValidationError(f"calculator {name!r} ({ep.value}) cannot be loaded: {type(exc).__name__}: {exc}",
                              field=field) from exc
    return _factory(obj, name, field=field)


def names() -> list[str]:
    """Every calculator name available here: the built-ins, then the installed entry points."""
    extra = sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)} - set(BUILTINS))
    return [*BUILTINS, *extra]


def default_output_type(factory: CalculatorFactory) -> str:
    value = getattr(factory, "default_output_type", "float")
    return value if value in OUTPUT_TYPES else "float"


def check_parameters(factory: CalculatorFactory, parameters: Mapping[str, float], *,
                     field: str = "spec.parameters") -> None:
    """Built-ins refuse parameters they do not know (a typo would otherwise be silently ignored)."""
    allowed = getattr(factory, "parameter_names", None)
    if allowed is None:
        return
    for key in parameters:
        if key not in allowed:
            raise ValidationError(f"parameter {key!r} is not one of {sorted(allowed)}", field=f"{field}.{key}")
