"""Built-in calculators and the ``gridstat.calculators`` entry-point registry."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from gridstat.condensation import calculators
from gridstat.condensation.calculators import CalculatorSetup, InputInfo, InputTable
from gridstat.errors import NotFound, ValidationError

INPUTS = (InputInfo(1, "p1/v"), InputInfo(2, "p2/v"), InputInfo(3, "p3/v"))


def make(name: str, values: dict[int, tuple[float, int]], *, now: int = 1_000, **params: float) -> object:
    """Calculate once with the given (value, timestamp) per input id."""
    table = InputTable(INPUTS)
    for vid, (value, ts) in values.items():
        table[vid].value, table[vid].timestamp_ms = value, ts
        table[vid].updates = 1
    table.now_ms = now
    calc = calculators.load(name)()
    calculators.check_parameters(calculators.load(name), params)
    calc.initialize(CalculatorSetup("f", params, INPUTS), table)
    return calc


def value(name: str, values: dict[int, tuple[float, int]], **params: float) -> object:
    return make(name, values, **params).calculate()  # type: ignore[attr-defined]


FULL = {1: (1.0, 1_000), 2: (2.0, 1_000), 3: (6.0, 900)}


@pytest.mark.parametrize(("name", "expected"), [
    ("average", 3.0), ("min", 1.0), ("max", 6.0), ("sum", 9.0),
])
def test_aggregates_over_every_input_with_a_value(name: str, expected: float) -> None:
    assert value(name, FULL) == expected
    assert value(name, {}) is None  # no input has a value yet: no output


def test_max_age_leaves_out_inputs_that_went_quiet() -> None:
    assert value("average", FULL, max_age_ms=50) == 1.5
    assert value("sum", {3: (6.0, 900)}, max_age_ms=50) is None


def test_rate_of_change_is_per_second_between_two_calculations() -> None:
    calc = make("rate_of_change", {1: (50.0, 1_000)}, now=1_000)
    assert calc.calculate() is None  # type: ignore[attr-defined]  # nothing to compare with yet
    table = calc.inputs  # type: ignore[attr-defined]
    table[1].value, table[1].timestamp_ms, table.now_ms = 49.9, 1_100, 1_100
    assert calc.calculate() == pytest.approx(-1.0)  # type: ignore[attr-defined]  # -0.1 in 100 ms


def test_threshold_alert_is_true_while_any_input_is_out_of_band() -> None:
    assert value("threshold_alert", {1: (1.0, 1_000), 2: (1.02, 1_000)}, low=0.95, high=1.05) is False
    assert value("threshold_alert", {1: (1.0, 1_000), 2: (1.07, 1_000)}, low=0.95, high=1.05) is True
    assert value("threshold_alert", {1: (0.9, 1_000)}, low=0.95) is True
    assert calculators.default_output_type(calculators.load("threshold_alert")) == "bool"


@pytest.mark.parametrize(("params", "field"), [
    ({}, "spec.parameters.low"),
    ({"low": 2.0, "high": 1.0}, "spec.parameters.low"),
    ({"low": 1.0, "hihg": 2.0}, "spec.parameters.hihg"),
])
def test_threshold_alert_parameters_are_checked(params: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        make("threshold_alert", {}, **params)
    assert info.value.field == field


def test_an_unknown_name_is_not_found_with_the_field() -> None:
    with pytest.raises(NotFound) as info:
        calculators.load("no-such-calculator")
    assert info.value.field == "spec.calculator"


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed distribution registering three calculators under ``gridstat.calculators``."""
    (tmp_path / "gs_test_calcs.py").write_text(textwrap.dedent("""
        from gridstat.condensation import Calculator

        class Spread(Calculator):
            def calculate(self):
                values = self.inputs.latest()
                return max(values) - min(values) if values else None

        def first(inputs, parameters):
            return parameters.get("scale", 1.0) * next(iter(inputs))[1].value

        NOT_A_CALCULATOR = 42
    """))
    dist = tmp_path / "gs_test_calcs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gs-test-calcs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[gridstat.calculators]\nspread = gs_test_calcs:Spread\nfirst = gs_test_calcs:first\n"
        "broken = gs_test_calcs_missing:Nope\nnumber = gs_test_calcs:NOT_A_CALCULATOR\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("gs_test_calcs", None)


def test_entry_point_classes_and_functions_are_calculators(plugin: Path) -> None:
    assert {"spread", "first", "broken", "number"} <= set(calculators.names())
    assert calculators.names()[:6] == list(calculators.BUILTINS)
    assert value("spread", FULL) == 5.0
    assert value("first", FULL, scale=2.0) == 2.0


def test_a_broken_entry_point_is_a_clear_validation_error(plugin: Path) -> None:
    with pytest.raises(ValidationError, match="cannot be loaded: ModuleNotFoundError") as info:
        calculators.load("broken")
    assert info.value.field == "spec.calculator"
    with pytest.raises(ValidationError, match="neither a class nor a function"):
        calculators.load("number")


def test_a_builtin_name_wins_over_an_entry_point(plugin: Path, tmp_path: Path) -> None:
    assert calculators.load("average") is calculators.Average
