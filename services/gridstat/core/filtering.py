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

**Device frame rates** (docs/frame-rates.md). A variable published at a device's frame rate R
(``frames_per_s``: 30, 60, 120 frames/s ...) has a period of 1000/R ms, which is not always a whole
number of milliseconds. Its intervals are whole numbers of frames, and the same rule is applied in
units of 1/R ms: ``(ts·R + 500) % (n·1000) < 1000``, i.e. the frame nearest ``ts`` is the first of
its group of ``n`` frames. The decision stays exact at every hop, across second boundaries, for
millisecond timestamps (floor or nearest) of frames up to ``MAX_FRAMES_PER_S``. Its ``interval_ms``
is ``1000 // R`` (the resource accounting rounds its rate up) and a subscription interval in
milliseconds means ``frames_in(interval_ms, R)`` frames, written back as ``frame_interval_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable

from gridstat.core.model import MAX_FRAMES_PER_S
from gridstat.errors import ValidationError


def half_interval(pub_interval_ms: int) -> int:
    """``ceil(pubInt / 2)``: the shift of Function 4.1."""
    return (pub_interval_ms + 1) // 2


def nominal_interval_ms(frames_per_s: int) -> int:
    """The ``interval_ms`` of a variable published at ``frames_per_s``: the period rounded down."""
    check_frames_per_s(frames_per_s)
    return 1000 // frames_per_s


def check_frames_per_s(frames_per_s: int) -> int:
    if isinstance(frames_per_s, bool) or not isinstance(frames_per_s, int) \
            or not 1 <= frames_per_s <= MAX_FRAMES_PER_S:
        raise ValidationError(f"frames_per_s must be a whole number of frames per second 1..{MAX_FRAMES_PER_S}, "
                              f"got {frames_per_s!r}", field="frames_per_s")
    return frames_per_s


def frames_in(sub_interval_ms: int, frames_per_s: int) -> int:
    """The whole frames in ``sub_interval_ms`` (at least 1), with half a millisecond of slack so that
    the rounded milliseconds of ``n`` frames (:func:`frame_interval_ms`) mean ``n`` frames again."""
    return max(1, (2 * sub_interval_ms + 1) * frames_per_s // 2000)


def frame_interval_ms(frames: int, frames_per_s: int) -> int:
    """``frames`` frames in milliseconds, rounded to the nearest (2 frames at 30/s: 67 ms)."""
    return (2000 * frames + frames_per_s) // (2 * frames_per_s)


def filter_scale(pub_interval_ms: int, frames_per_s: int = 0) -> tuple[int, int, int]:
    """``(scale, pub, half)`` of the rule ``(ts·scale + half) % interval < pub``: ``(1, pubInt,
    ceil(pubInt/2))`` in milliseconds, ``(R, 1000, 500)`` in units of 1/R ms for a frame rate R."""
    if frames_per_s:
        return frames_per_s, 1000, 500
    return 1, pub_interval_ms, half_interval(pub_interval_ms)


def scaled_interval(sub_interval_ms: int, pub_interval_ms: int, frames_per_s: int = 0) -> int:
    """A (rounded) subscription interval in the units of :func:`filter_scale`."""
    if frames_per_s:
        return frames_in(sub_interval_ms, frames_per_s) * 1000
    return round_down_interval(sub_interval_ms, pub_interval_ms)


def round_down_interval(sub_interval_ms: int, pub_interval_ms: int, frames_per_s: int = 0) -> int:
    """Round a subscription interval down to a multiple of the publication interval (4.2); at a device
    frame rate, down to whole frames, written in (rounded) milliseconds."""
    if frames_per_s:
        if sub_interval_ms <= 0:
            raise ValidationError(f"subscription interval must be positive, got {sub_interval_ms}",
                                  field="sub_interval_ms")
        return frame_interval_ms(frames_in(sub_interval_ms, check_frames_per_s(frames_per_s)), frames_per_s)
    if pub_interval_ms <= 0:
        raise ValidationError(f"publication interval must be positive, got {pub_interval_ms}",
                              field="pub_interval_ms")
    if sub_interval_ms <= 0:
        raise ValidationError(f"subscription interval must be positive, got {sub_interval_ms}",
                              field="sub_interval_ms")
    return max(pub_interval_ms, (sub_interval_ms // pub_interval_ms) * pub_interval_ms)


def granted_interval_ms(asked_ms: int, pub_interval_ms: int, frames_per_s: int = 0) -> int:
    """The interval a subscription gets: rounded down to a multiple of the publication interval and at
    least that (4.2, :func:`round_down_interval`); an alert's (no publication interval) as asked."""
    if pub_interval_ms > 0 and asked_ms > 0:
        return round_down_interval(asked_ms, pub_interval_ms, frames_per_s)
    return asked_ms


def should_forward(ts_ms: int, pub_interval_ms: int, sub_interval_ms: int, frames_per_s: int = 0) -> bool:
    """Function 4.1 for one (already rounded) subscription interval."""
    scale, pub, half = filter_scale(pub_interval_ms, frames_per_s)
    return (ts_ms * scale + half) % scaled_interval(sub_interval_ms, pub_interval_ms, frames_per_s) < pub


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
