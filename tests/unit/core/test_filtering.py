"""GridStat's rate filter (dissertation 4.2.1) and its worked examples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.core import filtering
from gridstat.errors import ValidationError


def forwarded(ts_range: range, pub: int, subs: list[int]) -> list[int]:
    return [ts for ts in ts_range if filtering.passes_any(ts, pub, subs)]


def test_dissertation_figure_2_4_example() -> None:
    # Publication every 10 ms; subscribers at 20 ms and 30 ms: the router sends at
    # 0, 20, 30, 40, 60, ... and at 60 only one copy (the channel sees one event).
    assert forwarded(range(0, 70, 10), 10, [20, 30]) == [0, 20, 30, 40, 60]
    assert filtering.should_forward(60, 10, 20) and filtering.should_forward(60, 10, 30)


def test_half_interval_shift_absorbs_jitter() -> None:
    # pubInt=50, subInt=100: original timestamps 75..124 are forwarded, 125..174 are not (4.2.1).
    assert all(filtering.should_forward(ts, 50, 100) for ts in range(75, 125))
    assert not any(filtering.should_forward(ts, 50, 100) for ts in range(125, 175))


def test_ceil_of_odd_publication_interval() -> None:
    assert filtering.half_interval(33) == 17
    assert filtering.half_interval(10) == 5


@pytest.mark.parametrize(("sub", "pub", "expected"), [(20, 10, 20), (25, 10, 20), (35, 10, 30), (5, 10, 10),
                                                      (630, 30, 630), (100, 33, 99)])
def test_round_down_interval(sub: int, pub: int, expected: int) -> None:
    assert filtering.round_down_interval(sub, pub) == expected


@pytest.mark.parametrize(("sub", "pub", "field"), [(0, 10, "sub_interval_ms"), (10, 0, "pub_interval_ms"),
                                                   (-5, 10, "sub_interval_ms")])
def test_round_down_rejects_non_positive(sub: int, pub: int, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        filtering.round_down_interval(sub, pub)
    assert err.value.field == field


def test_smallest_non_multiples_examples_of_chapter_4() -> None:
    assert filtering.smallest_non_multiples([90, 90, 180]) == (90,)
    assert filtering.smallest_non_multiples([180]) == (180,)
    assert filtering.smallest_non_multiples([90, 180, 630, 240, 630]) == (90, 240)
    assert filtering.smallest_non_multiples([]) == ()


@given(pub=st.integers(1, 50), k=st.integers(1, 20), m=st.integers(2, 6), ts=st.integers(0, 10**7))
def test_a_multiple_never_passes_what_its_divisor_drops(pub: int, k: int, m: int, ts: int) -> None:
    s = pub * k
    if filtering.should_forward(ts, pub, s * m):
        assert filtering.should_forward(ts, pub, s)


@given(pub=st.integers(1, 40), ks=st.lists(st.integers(1, 30), min_size=1, max_size=8),
       ts=st.integers(0, 10**7))
def test_reducing_to_non_multiples_keeps_the_decision(pub: int, ks: list[int], ts: int) -> None:
    intervals = [pub * k for k in ks]
    assert filtering.passes_any(ts, pub, intervals) == filtering.passes_any(
        ts, pub, filtering.smallest_non_multiples(intervals))


@given(pub=st.integers(1, 40), k=st.integers(1, 30), start=st.integers(0, 10**6))
def test_exactly_one_event_per_subscription_interval(pub: int, k: int, start: int) -> None:
    # Aligned publishers: one event of every k passes (first phase only).
    sub = pub * k
    base = start * sub
    passed = [ts for ts in range(base, base + sub, pub) if filtering.should_forward(ts, pub, sub)]
    assert len(passed) == 1
