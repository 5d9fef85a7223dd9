"""Pure helpers of the subscriber: de-duplication, gap arithmetic, expected instants, latency ring."""

from __future__ import annotations

import pytest

from gridstat.client.holders import DedupWindow, LatencyRing, missing_between, next_expected_ts
from gridstat.core import filtering


def test_dedup_first_copy_wins_and_duplicates_are_recognised_out_of_order() -> None:
    d = DedupWindow(size=4)
    assert d.classify(100) == DedupWindow.NEW
    assert d.classify(100) == DedupWindow.DUPLICATE
    assert d.classify(120) == DedupWindow.NEW
    # A late copy of 100 arriving after 120 is a duplicate, not stale: it is within the window.
    assert d.classify(100) == DedupWindow.DUPLICATE
    # 110 was never delivered and is older than the newest: stale.
    assert d.classify(110) == DedupWindow.STALE
    assert d.newest == 120


def test_dedup_window_is_bounded_and_old_copies_become_stale() -> None:
    d = DedupWindow(size=3)
    for ts in (10, 20, 30, 40):
        assert d.classify(ts) == DedupWindow.NEW
    assert d.classify(10) == DedupWindow.STALE  # fell out of the window
    assert d.classify(20) == DedupWindow.DUPLICATE
    assert len(d._seen) == 3


@pytest.mark.parametrize(("last", "ts", "interval", "missing"), [
    (0, 20, 20, 0), (0, 40, 20, 1), (0, 100, 20, 4), (0, 21, 20, 0), (0, 59, 20, 2), (100, 100, 20, 0),
])
def test_missing_between(last: int, ts: int, interval: int, missing: int) -> None:
    assert missing_between(last, ts, interval) == missing


@pytest.mark.parametrize(("pub", "sub"), [(10, 20), (10, 30), (10, 10), (50, 100), (30, 90)])
def test_next_expected_is_the_next_instant_passing_the_filter(pub: int, sub: int) -> None:
    last = 10 * sub
    expected = next_expected_ts(last, pub, sub)
    assert expected == last + sub
    assert filtering.should_forward(expected, pub, sub)
    assert not any(filtering.should_forward(t, pub, sub) for t in range(last + pub, expected, pub))


def test_next_expected_tolerates_a_jittered_last_timestamp() -> None:
    # pub 50 / sub 100: the phase of instant 1000 spans 975..1024 (Function 4.1 example).
    assert next_expected_ts(1010, 50, 100) == 1100
    assert next_expected_ts(990, 50, 100) == 1100


def test_latency_ring_percentiles_and_bound() -> None:
    ring = LatencyRing(size=100)
    assert ring.percentile(50) is None
    for v in range(1, 201):  # only 101..200 are kept
        ring.add(v)
    assert len(ring) == 100
    assert ring.percentile(50) == 150.0
    assert ring.percentile(99) == 199.0
    assert ring.percentile(99.9) == 200.0
    assert ring.summary()["p50"] == 150.0
