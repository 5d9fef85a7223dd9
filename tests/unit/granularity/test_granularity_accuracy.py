"""Bandwidth budgets R(s) <= B(s)/(m+1), rate models and Algorithm 2's coarsening and refining (seed 004, 5.1)."""

from __future__ import annotations

import pytest

from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, dz
from gridstat.granularity.space import Rectangle

FIG4_SUB = Rectangle.box([(0.0, 1.0), (0.0, 0.25)])
UNIFORM = accuracy.UniformRates(1000.0)


def test_budget_is_bandwidth_over_m_plus_one() -> None:
    b = accuracy.Budget(1100.0, 10)
    assert b.incoming_eps == pytest.approx(100.0)
    assert b.admits(100.0)
    assert not b.admits(100.5)


def test_bandwidth_below_one_event_is_a_specific_error() -> None:
    with pytest.raises(accuracy.BandwidthTooLow) as err:
        accuracy.Budget(5.0, 10)                  # 5/11 events/s
    assert err.value.reason == "BandwidthBelowOneEvent"
    with pytest.raises(accuracy.BandwidthTooLow):
        accuracy.Budget.from_bytes(200.0, 10)     # 18 bytes/s < one 24-byte event
    assert accuracy.Budget.from_bytes(24.0 * 11 * 50, 10).incoming_eps == pytest.approx(50.0)
    with pytest.raises(ValidationError):
        accuracy.Budget(100.0, -1)


def test_a_budget_below_the_exact_subscription_is_rejected() -> None:
    with pytest.raises(accuracy.BandwidthTooLow) as err:
        accuracy.accurate_mapping(FIG4_SUB, UNIFORM, accuracy.Budget(200.0, 1), max_depth=8)   # needs 250/s
    assert err.value.reason == "BandwidthBelowSubscription"
    exact = accuracy.accurate_mapping(FIG4_SUB, UNIFORM, accuracy.Budget(500.0, 1), max_depth=8)
    assert exact == {"0000", "0010", "1000", "1010"}


def test_fig4_coarsening_goes_to_dz_minus_one_only_within_budget() -> None:
    current = frozenset({"00", "10"})             # 500 events/s, 250 of them false positives
    tight = accuracy.Budget(600.0 * 2, 1)
    assert accuracy.coarsen(current, UNIFORM, tight, step=2) is None        # ε would bring 1000/s
    loose = accuracy.Budget(1000.0 * 2, 1)
    assert accuracy.coarsen(current, UNIFORM, loose, step=2) == {dz.EPSILON}


def test_refining_after_a_rate_rise_reaches_the_accurate_mapping_and_stays() -> None:
    budget = accuracy.Budget(300.0 * 11, 10)
    coarse = frozenset({""})
    r = accuracy.refine(coarse, FIG4_SUB, UNIFORM, budget, step=2, max_depth=8)
    assert r.within_budget
    assert r.rate_eps <= 300.0
    assert dz.encloses(r.mapping, FIG4_SUB)        # refining never loses events
    assert all(dz.covered_by(x, coarse) for x in r.mapping)   # the old parents still cover it
    again = accuracy.refine(r.mapping, FIG4_SUB, UNIFORM, budget, step=2, max_depth=8)
    assert again.mapping == r.mapping              # stationary: converged, no further change


def test_refining_reports_when_nothing_is_left() -> None:
    exact = dz.encode(FIG4_SUB, max_depth=4)
    r = accuracy.refine(exact, FIG4_SUB, UNIFORM, accuracy.Budget(200.0 * 2, 1), step=2, max_depth=4)
    assert not r.within_budget


def test_catalogue_rates_are_exact_per_variable() -> None:
    cat = accuracy.CatalogueRates((((0.1, 0.1), 30.0), ((0.6, 0.1), 60.0), ((0.6, 0.9), 120.0)))
    assert cat.rate("") == 210.0
    assert cat.rate("*0") == 90.0
    assert cat.false_positive_rate("*0", Rectangle.box([(0.0, 0.5), (0.0, 1.0)])) == 60.0


def test_measured_rates_count_and_aggregate() -> None:
    m = accuracy.MeasuredRates(depth=6, window_s=10.0)
    m.receiving = frozenset({"00"})
    for _ in range(50):
        m.observe((0.1, 0.1), matched=True)
    for _ in range(30):
        m.observe((0.3, 0.2), matched=False)
    assert m.rate("00") == pytest.approx(8.0)                          # DZ_+1 and own: counted
    assert m.false_positive_rate("00", FIG4_SUB) == pytest.approx(3.0)
    m.report("01", 4.0)                                                # another peer's measurement
    m.report("10", 6.0)
    assert m.rate("0") == pytest.approx((4.0 / 0.25) * 0.5)            # DZ_-1 by aggregation
    assert m.rate("1") == pytest.approx(12.0)
    assert m.rate("11") == float("inf")                                # unknown: never coarsen into it
