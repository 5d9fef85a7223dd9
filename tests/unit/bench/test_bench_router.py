"""The router benchmark's own rules: what counts as sustained, the burst floor, the machine-gap probe."""

from __future__ import annotations

import math

import pytest

from gridstat.bench.jitter import Gaps, probe_gaps
from gridstat.bench.report import burst_floor_us
from gridstat.bench.router import SUSTAIN_P50_US, Trial


def _trial(*, sent: int = 100_000, received: int = 100_000, p50: float | None = 300.0,
           achieved: float = 100_000.0) -> Trial:
    lat = {"n": 10, "p50": p50} if p50 is not None else {"n": 0}
    return Trial(1, 100_000, 1.0, {"sent": sent, "elapsed": 1.0, "achieved_rate": achieved, "send_errors": 0},
                 {"received": received, "lat_all": lat})


def test_sustained_needs_no_loss_a_publisher_that_kept_pace_and_no_growing_backlog() -> None:
    assert _trial().ok()
    assert _trial(p50=None).ok()  # not recorded: judged by loss and pace alone
    assert not _trial(received=99_000).ok()  # 1 % lost
    assert not _trial(achieved=50_000).ok()  # the publisher fell behind
    # No loss at all, but a backlog hidden in the socket buffer: not sustained.
    assert not _trial(p50=SUSTAIN_P50_US + 1).ok()
    assert math.isnan(_trial(p50=None).p50_us)


def test_burst_floor_is_half_the_time_the_burst_takes_to_serve() -> None:
    # 500k ev/s at 1 us/event: each 1-ms tick's 500 events take 0.5 ms; the median one waits 0.25 ms.
    assert burst_floor_us(500_000, 1.0) == pytest.approx(250.0)
    assert burst_floor_us(0, 1.0) == 0.0


def test_gap_figures() -> None:
    g = Gaps(cpu=1, seconds=2.0, threshold_us=50, gaps_us=(60, 600, 2_000))
    assert g.lost_pct == pytest.approx(100 * 2_660 / 2e6)
    assert g.per_s == 1.5 and g.largest_us == 2_000 and g.over(500) == 2
    assert Gaps(0, 0.0, 50, ()).lost_pct == 0.0 and Gaps(0, 1.0, 50, ()).largest_us == 0


def test_probe_runs_for_its_time_and_reports_gaps_above_its_threshold() -> None:
    g = probe_gaps(-1, 0.2, threshold_us=50)
    assert 0.2 <= g.seconds < 1.0
    assert all(x > 50 for x in g.gaps_us)
    assert g.lost_pct < 100.0
