"""The filter language and the covering test (RacsCBPS Defs. 1-6; checklist item 1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.admission.filters import Constraint, Filter, Interval
from gridstat.errors import ValidationError


def f(text: str) -> Filter:
    return Filter.parse(text)


def test_worked_example_covering_relations() -> None:
    # Checklist 3.5.1: price>7 ∧ DEU is covered by price>5 and by price>3 ∧ DEU, and covers price>8 ∧ DEU.
    assert f("price>5").covers(f("price>7, name=DEU"))
    assert f("price>3, name=DEU").covers(f("price>7, name=DEU"))
    assert f("price>7, name=DEU").covers(f("price>8, name=DEU"))
    # price>2 ∧ DEU is not covered by price>5 (price 3 matches it, not price>5).
    assert not f("price>5").covers(f("price>2, name=DEU"))
    # price>9 is not covered by price>8 ∧ DEU: it says nothing about the name.
    assert not f("price>8, name=DEU").covers(f("price>9"))


def test_covering_is_reflexive_and_respects_open_and_closed_ends() -> None:
    assert f("price>5").covers(f("price>5"))
    assert f("price>=5").covers(f("price>5"))
    assert not f("price>5").covers(f("price>=5"))
    assert f("price>=5").covers(f("price=5"))
    assert f("*").covers(f("price>1"))
    assert not f("price>1").covers(f("*"))


def test_intersection() -> None:
    assert f("price>5").intersects(f("price<6"))
    assert not f("price>5").intersects(f("price<=5"))
    assert f("price>5").intersects(f("name=DEU"))  # different attributes can both hold
    assert not f("name=DEU").intersects(f("name=FRA"))


def test_canonical_keys_are_equal_for_equal_event_sets() -> None:
    assert f("name=DEU, price>3") == f("price>3 ∧ name=DEU") == f("price > 3 and name = DEU")
    assert f("price>3, price>1").key == "price>3"
    assert f("price>=3, price<=3") == f("price=3")
    assert f('code="5"') != f("code=5")  # quotes make a text


def test_gridstat_variable_names() -> None:
    one = Filter.for_variable("pmu1/freq")
    assert one == f("publisher=pmu1, variable=freq")
    assert Filter.for_variable("pmu1/*").covers(one)
    assert Filter.for_variable("*/freq").covers(one)
    assert not Filter.for_variable("pmu2/*").intersects(one)


@pytest.mark.parametrize("bad", ["price>5, price<3", "price>5, price<=5", "price=1, price=2", "price>1, price=abc"])
def test_a_filter_that_matches_nothing_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="covers nothing"):
        f(bad)


@pytest.mark.parametrize("bad", ["price", "price!=3", "1abc>2", "/", "*/*", "pmu", "pmu/"])
def test_malformed_filters_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        Filter.for_variable(bad) if "/" in bad or bad == "pmu" else f(bad)


def test_constraint_values_must_be_finite() -> None:
    with pytest.raises(ValidationError):
        Constraint("price", ">", float("nan"))
    with pytest.raises(ValidationError):
        Constraint("price", ">", float("inf"))
    with pytest.raises(ValidationError):
        Constraint("price", "~", 1.0)


_ENDS = st.sampled_from([None, 0.0, 1.0, 2.0, 3.0])


@given(_ENDS, st.booleans(), _ENDS, st.booleans(), _ENDS, st.booleans(), _ENDS, st.booleans())
def test_overlaps_agrees_with_the_intersection_built_by_narrowing(lo1: float | None, c1: bool, hi1: float | None,
                                                                  d1: bool, lo2: float | None, c2: bool,
                                                                  hi2: float | None, d2: bool) -> None:
    a, b = Interval(True, lo1, c1, hi1, d1), Interval(True, lo2, c2, hi2, d2)
    if a.is_empty() or b.is_empty():
        return
    both = a
    if b.lo is not None:
        both = both.narrow(">=" if b.lo_closed else ">", b.lo)
    if b.hi is not None:
        both = both.narrow("<=" if b.hi_closed else "<", b.hi)
    assert a.overlaps(b) == (not both.is_empty()) == b.overlaps(a)
