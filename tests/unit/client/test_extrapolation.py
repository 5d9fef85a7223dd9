"""Extrapolation (2.2.2): the built-in methods against known functions, bad input, the spec's
validation and registry, and the subscriber filling missed instants instead of reporting them."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.client import Extrapolation, Holder, Subscriber, Subscription, Violation
from gridstat.client import extrapolation as ex
from gridstat.client.extrapolation import (
    ExtrapolateFn,
    average,
    least_squares,
    polynomial,
    polynomial_average,
    stoer_bulirsch,
)
from gridstat.core import wire
from gridstat.core.model import BOOL, FLOAT, INT, StatusVariable, StructType, TypeSpec, ValueType
from gridstat.errors import DuplicateName, GridStatError, NotFound, ValidationError

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)
COUNT = StatusVariable("pmu1", "count", INT, 20, variable_id=9)
EPOCH = 1_700_000_000_000  # realistic epoch milliseconds: the conditioning the spec must survive

BUILTINS = (average, polynomial, polynomial_average, stoer_bulirsch, least_squares)


# -- the methods ------------------------------------------------------------------------------------
def test_average_is_the_mean_of_the_window() -> None:
    assert average([-30, -20, -10, 0], [1, 2, 3, 6], 10) == 3.0
    assert average([0], [50.02], 10) == 50.02
    assert math.isnan(average([], [], 10))
    with pytest.raises(ValidationError) as info:
        average([0, 1], [1], 2)
    assert info.value.field == "x"


@pytest.mark.parametrize(("order", "coefs"), [
    (0, (3.0,)), (1, (1.0, 2.0)), (2, (1.0, -2.0, 0.5)), (3, (0.5, 0.0, -1.0, 0.25)), (3, (2.0, 1.0)),
])
@pytest.mark.parametrize("extra", [0, 3])  # window = order + 1, and more samples than that
@pytest.mark.parametrize("method", [polynomial, least_squares])
def test_polynomial_is_exact_for_polynomials_of_degree_up_to_its_order(
        order: int, coefs: tuple[float, ...], extra: int, method: ExtrapolateFn) -> None:
    def p(t: float) -> float:
        return sum(c * t ** k for k, c in enumerate(coefs))

    xs = [float(-10 * i) for i in range(order + extra, -1, -1)]
    for at in (10.0, 25.0, 40.0):
        assert method(xs, [p(x) for x in xs], at, order) == pytest.approx(  # type: ignore[call-arg]
            p(at), rel=1e-9, abs=1e-9)


def test_polynomial_is_lagrange_through_the_last_points_as_the_dissertation_says() -> None:
    # y = x^2 at x = 1..4 (dissertation 2.2.2, reference [42]): the line through the last two points
    # predicts 23 at x = 5, a quadratic or cubic through the last three or four 25; a least-squares
    # line through all four predicts 20.
    xs, ys = [1.0, 2.0, 3.0, 4.0], [1.0, 4.0, 9.0, 16.0]
    assert polynomial(xs, ys, 5.0, 1) == pytest.approx(23.0)
    assert polynomial(xs, ys, 5.0, 2) == pytest.approx(25.0)
    assert polynomial(xs, ys, 5.0, 3) == pytest.approx(25.0)
    assert least_squares(xs, ys, 5.0, 1) == pytest.approx(20.0)
    assert Extrapolation("polynomial", order=1).predict([1, 2, 3, 4], ys, 5) == pytest.approx(23.0)
    assert Extrapolation("least-squares", order=1).predict([1, 2, 3, 4], ys, 5) == pytest.approx(20.0)


def test_least_squares_averages_noise() -> None:
    # A line through noisy samples: order 1 over 6 samples is the regression line, not the last two.
    xs = [-50.0, -40.0, -30.0, -20.0, -10.0, 0.0]
    ys = [1.0, 3.0, 1.0, 3.0, 1.0, 3.0]
    # Regression line: mean 2 at x = -25, slope 30 / 1750 per ms, so 2 + 35 * 30 / 1750 at x = 10.
    assert least_squares(xs, ys, 10.0, 1) == pytest.approx(2.6)
    assert least_squares(xs[-2:], ys[-2:], 10.0, 1) == pytest.approx(5.0)
    assert polynomial(xs, ys, 10.0, 1) == pytest.approx(5.0)  # the seed's: the last two points


def test_polynomial_with_too_few_or_repeated_samples_lowers_the_degree() -> None:
    assert polynomial([-10, 0], [1, 2], 10, order=3) == pytest.approx(3.0)  # only a line fits 2 samples
    assert polynomial([0], [7.5], 10, order=2) == 7.5
    assert polynomial([0, 0, 0], [1, 2, 3], 10, order=2) == pytest.approx(3.0)  # one abscissa: its newest
    assert least_squares([0, 0, 0], [1, 2, 3], 10, order=2) == pytest.approx(2.0)  # one abscissa: the mean
    assert math.isnan(polynomial([], [], 10, order=1))
    with pytest.raises(ValidationError):
        polynomial([0], [1], 1, order=-1)


def test_polynomial_average_is_the_mean_over_orders() -> None:
    xs = [-30.0, -20.0, -10.0, 0.0]
    ys = [0.0, 1.0, 4.0, 9.0]  # (x/10 + 3)^2: the quadratic is exact, the line is not
    want = (polynomial(xs, ys, 10.0, 1) + polynomial(xs, ys, 10.0, 2)) / 2
    assert polynomial_average(xs, ys, 10.0, (1, 2)) == pytest.approx(want)
    assert polynomial_average(xs, ys, 10.0, (2, 3)) == pytest.approx(16.0)
    assert math.isnan(polynomial_average(xs, ys, 10.0, ()))


@pytest.mark.parametrize(("a", "b", "c"), [(1.0, 2.0, 0.2), (3.0, -1.0, -0.05), (0.0, 1.0, 0.1)])
@pytest.mark.parametrize("n", [3, 4, 5])
def test_stoer_bulirsch_is_exact_for_rational_functions(a: float, b: float, c: float, n: int) -> None:
    def f(t: float) -> float:
        return (a + b * t) / (1 + c * t)

    xs = [float(-(n - 1 - i)) for i in range(n)]  # -n+1 .. 0, away from the pole
    assert stoer_bulirsch(xs, [f(x) for x in xs], 1.0) == pytest.approx(f(1.0), rel=1e-9)


def test_stoer_bulirsch_at_a_sample_and_for_constants() -> None:
    assert stoer_bulirsch([-2, -1, 0], [5.0, 6.0, 8.0], -1) == 6.0
    assert stoer_bulirsch([-2, -1, 0], [4.0, 4.0, 4.0], 3) == 4.0
    assert stoer_bulirsch([-2, -1, 0], [0.0, 0.0, 0.0], 3) == 0.0
    assert stoer_bulirsch([0], [2.5], 1) == 2.5
    assert math.isnan(stoer_bulirsch([], [], 1))


def test_stoer_bulirsch_zero_denominator_falls_back_to_the_polynomial_then_the_newest_value() -> None:
    # A straight line has no diagonal rational interpolant of this size: the tableau divides by 0.
    assert ex._ratint([-1.0, 0.0], [1.0, 2.0], 1.0) is None
    assert stoer_bulirsch([-1.0, 0.0], [1.0, 2.0], 1.0) == pytest.approx(3.0)
    # 1/x at x = 0 is a pole of the interpolant itself.
    assert ex._ratint([1.0, 2.0, 3.0], [1.0, 0.5, 1 / 3], 0.0) is None
    assert math.isfinite(stoer_bulirsch([1.0, 2.0, 3.0], [1.0, 0.5, 1 / 3], 0.0))
    # When the polynomial overflows too, the newest value is all that is left.
    assert ex._ratint([-1.0, 0.0], [-1e308, 1e308], 1e10) is None
    assert math.isinf(polynomial([-1.0, 0.0], [-1e308, 1e308], 1e10, 1))
    assert stoer_bulirsch([-1.0, 0.0], [-1e308, 1e308], 1e10) == 1e308


ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(ANY_FLOAT, ANY_FLOAT), max_size=8), ANY_FLOAT, st.integers(0, 4))
def test_methods_never_raise_on_numeric_input(pairs: list[tuple[float, float]], at: float, order: int) -> None:
    xs = [p[0] for p in pairs]
    ys = [p[1] for p in pairs]
    for fn in BUILTINS:
        got = fn(xs, ys, at, order) if fn is polynomial else fn(xs, ys, at)
        assert isinstance(got, float)


@settings(max_examples=200, deadline=None)
@given(
    degree=st.integers(0, 4),
    extra_order=st.integers(0, 2),
    extra_samples=st.integers(0, 6),
    dt=st.integers(1, 200),
    ahead=st.integers(1, 3),
    coefs=st.lists(st.floats(-10, 10), min_size=5, max_size=5),
)
def test_polynomial_spec_is_exact_at_epoch_timestamps(degree: int, extra_order: int, extra_samples: int, dt: int,
                                                      ahead: int, coefs: list[float]) -> None:
    order = degree + extra_order
    window = order + 1 + extra_samples
    spec = Extrapolation("polynomial", order=order, window=window)
    base = EPOCH

    def p(ts: int) -> float:  # a polynomial of the time in seconds since ``base``
        s = (ts - base) / 1000
        return sum(c * s ** k for k, c in enumerate(coefs[:degree + 1]))

    stamps = [base + dt * i for i in range(window)]
    at = stamps[-1] + dt * ahead
    scale = 1 + sum(abs(c) * (((window + ahead) * dt / 1000) ** k) for k, c in enumerate(coefs[:degree + 1]))
    got = spec.predict(stamps, [p(t) for t in stamps], at)
    assert got is not None
    assert got == pytest.approx(p(at), abs=1e-7 * scale)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=10))
def test_average_lies_within_the_samples(ys: list[float]) -> None:
    got = average(list(range(len(ys))), ys, len(ys))
    assert min(ys) - 1e-6 <= got <= max(ys) + 1e-6


# -- the spec ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "fld"), [
    ({"method": "cubic-spline"}, "method"),
    ({"method": 42}, "method"),
    ({"order": 4, "window": 4}, "order"),
    ({"order": -1}, "order"),
    ({"order": ex.MAX_ORDER + 1, "window": ex.MAX_WINDOW}, "order"),
    ({"method": "polynomial-average", "orders": ()}, "orders"),
    ({"method": "polynomial-average", "orders": 2}, "orders"),
    ({"method": "polynomial-average", "orders": (1, 5), "window": 5}, "orders"),
    ({"window": 0}, "window"),
    ({"window": ex.MAX_WINDOW + 1}, "window"),
    ({"method": "stoer-bulirsch", "window": 1}, "window"),
    ({"max_consecutive": 0}, "max_consecutive"),
    ({"window": 4.5}, "window"),
    ({"order": True}, "order"),
])
def test_bad_specs_are_validation_errors_naming_the_field(kwargs: dict[str, object], fld: str) -> None:
    with pytest.raises(ValidationError) as info:
        Extrapolation(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == fld


def test_unknown_method_lists_the_known_ones() -> None:
    with pytest.raises(ValidationError) as info:
        Extrapolation("spline")
    for name in ex.BUILTIN_METHODS:
        assert name in str(info.value)


def test_method_names_are_normalised_and_specs_compare_by_value() -> None:
    assert Extrapolation("Stoer_Bulirsch").method == "stoer-bulirsch"
    assert Extrapolation("average", window=8) == Extrapolation("AVERAGE", window=8)
    assert Extrapolation("polynomial", order=2).name == "polynomial"
    # The order only matters to the polynomial methods.
    Extrapolation("average", order=9, window=2)


@pytest.fixture
def user_method() -> Iterator[list[tuple[list[float], list[float], float]]]:
    calls: list[tuple[list[float], list[float], float]] = []

    def last_plus_one(x: Sequence[float], y: Sequence[float], at: float) -> float:
        calls.append((list(x), list(y), at))
        return y[-1] + 1

    ex.register_extrapolation("last_plus_one", last_plus_one)
    try:
        yield calls
    finally:
        ex.unregister_extrapolation("last-plus-one")


def test_user_methods_are_registered_by_name_and_see_relative_times(
        user_method: list[tuple[list[float], list[float], float]]) -> None:
    assert "last-plus-one" in ex.methods()
    spec = Extrapolation("last-plus-one", window=3)
    assert spec.predict([EPOCH, EPOCH + 20, EPOCH + 40], [1.0, math.nan, 3.0], EPOCH + 60) == 4.0
    # Milliseconds relative to the newest sample; the NaN sample was left out.
    assert user_method == [([-40.0, 0.0], [1.0, 3.0], 20.0)]
    with pytest.raises(DuplicateName):
        ex.register_extrapolation("last-plus-one", average)
    ex.register_extrapolation("last-plus-one", average, replace=True)
    with pytest.raises(DuplicateName):
        ex.register_extrapolation("polynomial", average)
    with pytest.raises(ValidationError):
        ex.register_extrapolation("", average)
    with pytest.raises(ValidationError):
        ex.register_extrapolation("x", "not callable")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        ex.unregister_extrapolation("never-registered")


def test_a_callable_is_a_method_and_non_finite_results_mean_no_value() -> None:
    spec = Extrapolation(lambda x, y, at: math.inf)
    assert spec.name == "<lambda>"
    assert spec.predict([1, 2], [1.0, 2.0], 3) is None
    assert Extrapolation("average").predict([1, 2], [math.nan, math.inf], 3) is None
    assert Extrapolation("average").predict([], [], 3) is None


@pytest.mark.parametrize("type_spec", [BOOL, TypeSpec(ValueType.STRUCT, StructType("ph", (("m", "float64"),)))])
def test_only_numeric_variables_can_be_extrapolated(type_spec: TypeSpec) -> None:
    var = StatusVariable("pmu1", "x", type_spec, 10, variable_id=3)
    with pytest.raises(ValidationError) as info:
        Subscription(var, interval_ms=10, latency_ms=5, extrapolation="average")
    assert info.value.field == "extrapolation"
    with pytest.raises(ValidationError):
        Subscriber("s1", 21).subscribe(var, interval_ms=10, latency_ms=5, extrapolation=Extrapolation())
    Subscription(var, interval_ms=10, latency_ms=5)  # without extrapolation it is fine


def test_alerts_cannot_be_extrapolated_and_both_spellings_are_refused() -> None:
    alert = StatusVariable("pmu1", "trip", INT, 0, priority=0, alert=True, min_interval_ms=100, variable_id=8)
    with pytest.raises(ValidationError):
        Subscription(alert, interval_ms=100, latency_ms=5, extrapolation="average")
    with pytest.raises(ValidationError):
        Subscription(VAR, interval_ms=10, latency_ms=5, extrapolation="average", extrapolate=average)
    with pytest.raises(ValidationError):
        Subscription(VAR, interval_ms=10, latency_ms=5, extrapolation=3.5)  # type: ignore[arg-type]
    sub = Subscription(VAR, interval_ms=10, latency_ms=5, extrapolate=average)  # the older spelling
    assert sub.extrapolation is not None and sub.extrapolation.method is average


# -- the subscriber ---------------------------------------------------------------------------------
def line(ts: int) -> float:
    return 50.0 + 0.001 * (ts - 1000)


def dgram(*events: tuple[int, float], var: StatusVariable = VAR) -> bytes:
    return wire.encode_datagram(5, 1, [wire.encode_event(wire.Event(ts, var.variable_id,
                                                                    wire.encode_value(var.type, v)))
                                       for ts, v in events])


class Rig:
    """A Subscriber driven with datagrams and explicit clocks, recording what the app is told."""

    def __init__(self, spec: Extrapolation | str | None, *, latency: int = 5, var: StatusVariable = VAR) -> None:
        self.got: list[Holder] = []
        self.bad: list[Violation] = []
        self.subscriber = Subscriber("s1", 21)
        self.sub = self.subscriber.subscribe(var, interval_ms=20, latency_ms=latency, extrapolation=spec,
                                             on_event=lambda s, h: self.got.append(h),
                                             on_violation=lambda s, v: self.bad.append(v))
        self.var = var

    def send(self, ts: int, value: float | int, now: int | None = None) -> None:
        self.subscriber.process(dgram((ts, value), var=self.var), ts + 1 if now is None else now)

    def tick(self, now: int) -> int:
        return self.subscriber.check_deadlines(now)

    def seen(self) -> list[tuple[int, bool]]:
        return [(h.timestamp_ms, h.extrapolated) for h in self.got]


LINEAR = Extrapolation("polynomial", order=1, window=4, max_consecutive=2)


def test_a_missed_deadline_is_filled_flagged_and_not_reported() -> None:
    rig = Rig(LINEAR)
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    assert rig.tick(1085) == 0 and rig.sub.holder is not None and not rig.sub.holder.extrapolated
    assert rig.tick(1086) == 0  # 1080's deadline passed: filled instead of a violation
    h = rig.sub.holder
    assert h is not None and h.extrapolated and h.timestamp_ms == 1080
    assert h.value == pytest.approx(line(1080))
    assert (h.received_ms, h.latency_ms, h.sequence_ok) == (1086, 6, True)
    assert rig.got[-1] is h and rig.bad == []
    assert rig.sub.value == pytest.approx(line(1080))
    assert (rig.sub.stats.extrapolated, rig.sub.stats.violations, rig.sub.stats.delivered) == (1, 0, 4)


def test_more_than_max_consecutive_missed_intervals_are_reported() -> None:
    rig = Rig(LINEAR)
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    assert rig.tick(1086) == 0 and rig.tick(1106) == 0  # 1080 and 1100 filled
    assert rig.tick(1126) == 1  # 1120 is the third in a row: reported
    assert [(v.kind, v.expected_ts_ms, v.last_ts_ms, v.missed) for v in rig.bad] == [("late", 1120, 1060, 1)]
    assert rig.seen()[-2:] == [(1080, True), (1100, True)]
    h = rig.sub.holder
    assert h is not None and h.timestamp_ms == 1100 and h.extrapolated  # the last fill stays visible
    # A starved monitor: what is within the allowance is filled, the rest is one report.
    rig2 = Rig(LINEAR)
    for ts in range(1000, 1080, 20):
        rig2.send(ts, line(ts))
    assert rig2.tick(1166) == 1
    assert [(v.expected_ts_ms, v.missed) for v in rig2.bad] == [(1120, 3)]
    assert rig2.seen()[-2:] == [(1080, True), (1100, True)]


def test_a_late_real_event_replaces_the_extrapolated_value() -> None:
    rig = Rig(LINEAR)
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    rig.tick(1086)
    rig.send(1080, 99.0, now=1090)  # late beyond the 5 ms budget, but its instant was filled in time
    h = rig.sub.holder
    assert h is not None and (h.timestamp_ms, h.value, h.extrapolated) == (1080, 99.0, False)
    assert rig.seen()[-2:] == [(1080, True), (1080, False)]
    assert rig.bad == []  # no latency violation for a correction
    assert (rig.sub.stats.replaced, rig.sub.stats.delivered) == (1, 5)
    # A copy of the same event over a redundant path is a duplicate.
    rig.send(1080, 99.0, now=1091)
    assert rig.sub.stats.duplicates == 1 and len(rig.got) == 6
    # The real value is a sample now, and the allowance counts from it.
    assert rig.tick(1106) == 0 and rig.tick(1126) == 0 and rig.tick(1146) == 1
    assert [v.expected_ts_ms for v in rig.bad] == [1140]


def test_a_late_real_event_older_than_the_holder_does_not_move_it_back() -> None:
    rig = Rig(LINEAR)
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    rig.tick(1086)
    rig.tick(1106)
    rig.send(1080, line(1080), now=1107)
    h = rig.sub.holder
    assert h is not None and (h.timestamp_ms, h.extrapolated) == (1100, True)
    assert rig.seen()[-1] == (1080, False)  # the push callback still gets the real value
    assert rig.sub.stats.replaced == 1
    rig.send(1100, line(1100), now=1108)
    h = rig.sub.holder
    assert h is not None and (h.timestamp_ms, h.extrapolated) == (1100, False)
    assert rig.sub.stats.replaced == 2 and rig.bad == []


def test_a_gap_seen_by_a_newer_event_is_filled_before_it() -> None:
    rig = Rig(LINEAR, latency=1000)  # the monitor would not have reported 1080 yet
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    rig.send(1120, line(1120))  # 1080 and 1100 skipped
    assert rig.seen()[-3:] == [(1080, True), (1100, True), (1120, False)]
    assert rig.got[-2].value == pytest.approx(line(1100))
    assert rig.bad == []
    h = rig.sub.holder
    assert h is not None and not h.extrapolated and h.sequence_ok
    assert (rig.sub.stats.gaps, rig.sub.stats.extrapolated) == (2, 2)
    # Beyond max_consecutive the rest of the gap is reported, from the first unfilled instant.
    rig.send(1200, line(1200))
    assert rig.seen()[-3:] == [(1140, True), (1160, True), (1200, False)]
    assert [(v.kind, v.expected_ts_ms, v.last_ts_ms) for v in rig.bad] == [("gap", 1180, 1120)]
    assert rig.got[-1].sequence_ok is False


def test_without_extrapolation_nothing_changes() -> None:
    rig = Rig(None)
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    assert rig.tick(1086) == 1
    assert [(v.kind, v.expected_ts_ms, v.last_ts_ms) for v in rig.bad] == [("late", 1080, 1060)]
    assert rig.sub.stats.extrapolated == 0 and all(not x for _, x in rig.seen())


def test_int_variables_get_integer_extrapolations() -> None:
    rig = Rig(Extrapolation("average", window=3), var=COUNT)
    for i, ts in enumerate(range(1000, 1060, 20)):
        rig.send(ts, i + 1)  # 1, 2, 3
    rig.tick(1066)
    h = rig.sub.holder
    assert h is not None and h.extrapolated and h.value == 2 and type(h.value) is int


def test_failing_or_non_finite_methods_fall_back_to_the_violation() -> None:
    def boom(x: Sequence[float], y: Sequence[float], at: float) -> float:
        raise RuntimeError("user bug")

    for method, errors in ((boom, 1), (lambda x, y, at: math.nan, 0)):
        rig = Rig(Extrapolation(method, window=2))
        rig.send(1000, 1.0)
        assert rig.tick(1026) == 1
        assert [v.kind for v in rig.bad] == ["late"]
        assert rig.sub.stats.callback_errors == errors and rig.sub.stats.extrapolated == 0


def test_nan_samples_are_not_used_and_a_method_name_is_enough() -> None:
    rig = Rig("average")
    rig.send(1000, 2.0)
    rig.send(1020, math.nan)
    assert rig.tick(1046) == 0
    h = rig.sub.holder
    assert h is not None and h.extrapolated and h.value == 2.0


def test_extrapolated_values_do_not_complete_snapshots() -> None:
    rig = Rig(LINEAR)
    group = rig.subscriber.snapshot_group("g", [rig.sub])
    for ts in range(1000, 1080, 20):
        rig.send(ts, line(ts))
    rig.tick(1086)
    latest = group.latest()
    assert latest is not None and latest.ts_ms == 1060
    rig.send(1080, 1.0, now=1087)  # the real value still can
    latest = group.latest()
    assert latest is not None and latest.ts_ms == 1080


def test_user_callback_errors_on_extrapolated_holders_are_counted() -> None:
    def boom(s: Subscription, h: Holder) -> None:
        if h.extrapolated:
            raise RuntimeError("user bug")

    sub = Subscription(VAR, interval_ms=20, latency_ms=5, on_event=boom, extrapolation=LINEAR)
    sub.handle_event(wire.Event(1000, 7, wire.encode_value(FLOAT, 1.0)), 1001)
    assert sub.check(1026) is None
    assert sub.stats.callback_errors == 1 and sub.stats.extrapolated == 1


def test_errors_are_gridstat_errors() -> None:
    with pytest.raises(GridStatError):
        Extrapolation("nope")
