"""Timestamps: milliseconds since the Unix epoch, aligned to publication intervals.

GridStat relies on GPS-synchronised clocks so that temporally related variables
carry the same timestamp and the rate filter keeps or drops them as a set
(dissertation 4.1). Here we assume NTP/PTP keeps hosts within +/- pubInt/2 of each
other (the filter's half-interval shift absorbs that jitter) and document it.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def align_ms(ts_ms: int, interval_ms: int) -> int:
    """Round a timestamp to the nearest multiple of the interval (a GPS-aligned instant)."""
    return ((ts_ms + interval_ms // 2) // interval_ms) * interval_ms


def next_aligned_ms(ts_ms: int, interval_ms: int) -> int:
    """The first multiple of the interval strictly after ``ts_ms``."""
    return (ts_ms // interval_ms + 1) * interval_ms
