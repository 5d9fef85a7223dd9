"""GridStat's deterministic rate filter (dissertation 4.2.1, Function 4.1) as pure functions.

``forward(event) iff (ts + ceil(pubInt/2)) % subInt < pubInt``

The half-interval shift absorbs publisher clock jitter; the modulo keeps only
the first phase of every subscription interval. Because the decision depends on
(pubInt, ts, subInt) only, GPS-aligned variables with equal intervals are kept or
dropped as a set at every hop, which is what makes snapshots consistent.

Two facts the routing tables build on:

* if ``s`` does not pass an event then no multiple of ``s`` passes it, since
  ``x mod k*s`` is ``x mod s`` plus a non-negative multiple of ``s``; so an
  outgoing channel only needs its smallest *non-multiple* intervals
  (dissertation 4.3: 90, 90, 180 -> [90]; 90, 180, 630, 240 -> [90, 240]);
* a subscription interval is rounded down to a multiple of the publication
  interval; one shorter than the publication interval gets every event.
"""

from __future__ import annotations

from collections.abc import Iterable

from gridstat.errors import ValidationError


def half_interval(pub_interval_ms: int) -> int:
    """``ceil(pubInt / 2)``: the shift of Function 4.1."""
    return (pub_interval_ms + 1) // 2


def round_down_interval(sub_interval_ms: int, pub_interval_ms: int) -> int:
    """Round a subscription interval down to a multiple of the publication interval (4.2)."""
    if pub_interval_ms <= 0:
        raise ValidationError(f"publication interval must be positive, got {pub_interval_ms}",
                              field="pub_interval_ms")
    if sub_interval_ms <= 0:
        raise ValidationError(f"subscription interval must be positive, got {sub_interval_ms}",
                              field="sub_interval_ms")
    return max(pub_interval_ms, (sub_interval_ms // pub_interval_ms) * pub_interval_ms)


def granted_interval_ms(asked_ms: int, pub_interval_ms: int) -> int:
    """The interval a subscription gets: rounded down to a multiple of the publication interval and at
    least that (4.2, :func:`round_down_interval`); an alert's (no publication interval) as asked."""
    return round_down_interval(asked_ms, pub_interval_ms) if pub_interval_ms > 0 and asked_ms > 0 else asked_ms


def should_forward(ts_ms: int, pub_interval_ms: int, sub_interval_ms: int) -> bool:
    """Function 4.1 for one (already rounded) subscription interval."""
    return (ts_ms + half_interval(pub_interval_ms)) % sub_interval_ms < pub_interval_ms


def smallest_non_multiples(intervals: Iterable[int]) -> tuple[int, ...]:
    """The sorted unique intervals none of which is a multiple of another in the set."""
    kept: list[int] = []
    for s in sorted(set(intervals)):
        if all(s % k for k in kept):
            kept.append(s)
    return tuple(kept)


def passes_any(ts_ms: int, pub_interval_ms: int, intervals: Iterable[int]) -> bool:
    """With several intervals on one channel, forward if any matches (4.2.1)."""
    shifted = ts_ms + half_interval(pub_interval_ms)
    return any(shifted % s < pub_interval_ms for s in intervals)
