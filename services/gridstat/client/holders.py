"""What a subscriber keeps per subscription: the holder, violations, counters, de-duplication.

GridStat's subscriber side offers three models (dissertation 2.1.5): *pull* (a holder the
application reads whenever it likes), *push* (a callback per event) and a *QoS-violation* callback.
Everything here is pure and I/O-free so the unit tests can drive it with explicit timestamps;
``subscription.py`` wires it together.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gridstat.core import filtering
from gridstat.core.wire import SKIP_BITS, DerivedValue

#: Latency samples kept per subscription: enough for a p99.9 without unbounded memory.
LATENCY_RING = 4096
#: Timestamps remembered for de-duplication; copies older than this window count as stale.
DEDUP_WINDOW = 64


@dataclass(slots=True)
class Holder:
    """The newest delivered event of one subscription (the pull model).

    A fresh Holder replaces the previous one on every delivery, so a reference the application
    keeps is a consistent view of one event, never a half-updated mix of two.
    """

    value: object
    timestamp_ms: int
    received_ms: int
    #: Received wall clock minus the publisher's timestamp (needs NTP/PTP-aligned clocks, README).
    latency_ms: int
    options: tuple[DerivedValue, ...] = ()
    #: True when the value was extrapolated for a missed instant rather than received (2.2.2,
    #: ``extrapolation.py``); a real event for that instant replaces it with a False holder.
    extrapolated: bool = False
    #: False when timestamps were skipped between this event and the previous one.
    sequence_ok: bool = True
    alert: bool = False
    #: True when the event was lost on the way and recovered later from the history service
    #: (``gapfill.py``, docs/gap-recovery.md); such a holder never replaces a newer one.
    recovered: bool = False


@dataclass(frozen=True, slots=True)
class Violation:
    """A breach of a subscription's QoS.

    ``late``: the next expected event had not arrived by its deadline (reported by the monitor,
    once per missed deadline); ``gap``: an arriving event skipped expected timestamps whose
    deadline the monitor had not reported yet; ``latency``: an event arrived, but later than the
    latency budget; ``shed``: a router's overload handling stopped the subscription's stream
    (``reason`` cpu_overload) or dropped ``dropped`` of its events (``reason`` link_overload), as
    its shed notice said (docs/overload.md).
    """

    kind: str
    expected_ts_ms: int
    detected_ms: int
    last_ts_ms: int | None
    #: For ``latency``: the event's latency; None otherwise.
    latency_ms: int | None = None
    #: For ``late``: deadlines missed since the last report (1 unless the monitor was starved).
    missed: int = 1
    #: For ``shed``: ``cpu_overload`` or ``link_overload``, and the events dropped (link overload).
    reason: str = ""
    dropped: int = 0


class LatencyRing:
    """The last ``size`` latency samples; percentiles by nearest rank over a sorted copy."""

    __slots__ = ("_samples",)

    def __init__(self, size: int = LATENCY_RING) -> None:
        self._samples: deque[int] = deque(maxlen=size)

    def add(self, latency_ms: int) -> None:
        self._samples.append(latency_ms)

    def __len__(self) -> int:
        return len(self._samples)

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile (``q`` in 0..100); None when there are no samples."""
        if not self._samples:
            return None
        ordered = sorted(self._samples)
        rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
        return float(ordered[rank])

    def summary(self) -> dict[str, float | None]:
        return {"p50": self.percentile(50), "p99": self.percentile(99), "p999": self.percentile(99.9)}

    def recent(self, n: int) -> list[int]:
        """The newest ``n`` samples (fewer if the ring holds fewer), oldest first (telemetry sampling)."""
        samples = self._samples
        n = min(n, len(samples))
        return list(itertools.islice(samples, len(samples) - n, None)) if n > 0 else []


@dataclass
class SubscriptionStats:
    delivered: int = 0
    duplicates: int = 0
    stale: int = 0
    #: Events the subscription's own rate filter rejected (a channel shared with a shorter interval).
    filtered: int = 0
    #: Expected timestamps that never arrived, computed from the delivered timestamps: ``lost``
    #: (published, lost on the way) plus ``unpublished`` (the publisher skipped the instant, as its
    #: next event's SKIPPED note says: docs/wire-format.md 3.4).
    gaps: int = 0
    lost: int = 0
    unpublished: int = 0
    #: Events that arrived after a newer one (a slower redundant path): their instant, counted as a
    #: gap when the newer one came, is taken out of ``gaps`` and ``lost`` again.
    out_of_order: int = 0
    #: The publisher's skipped instants in all, as its newest SKIPPED note said.
    publisher_skipped: int = 0
    violations: int = 0
    callback_errors: int = 0
    #: Missed instants filled with an extrapolated value (2.2.2) instead of a violation.
    extrapolated: int = 0
    #: Extrapolated values later replaced by the real event of their instant.
    replaced: int = 0
    #: QoS violations not reported because a mode change was running (6.3.2 requirement 3).
    suppressed: int = 0
    #: Shed notices received for this subscription, and the events they said were dropped.
    shed_notices: int = 0
    shed_dropped: int = 0
    #: Gap recovery (docs/gap-recovery.md): ``lost`` instants found in the history service and
    #: delivered, those it gave up on, and those still being looked for. With recovery on,
    #: ``lost == recovered + unrecoverable + recovery_pending``.
    recovered: int = 0
    unrecoverable: int = 0
    recovery_pending: int = 0
    latency: LatencyRing = field(default_factory=LatencyRing)


class DedupWindow:
    """First copy wins: classifies a timestamp as new, duplicate or stale in O(1).

    Redundant disjoint paths (dissertation 2.1.5, "redundancy") deliver the same (variable,
    timestamp) more than once. Only timestamps newer than the newest delivered one are delivered
    (so the holder only moves forward); a recently delivered timestamp is a duplicate even when its
    copy arrives after newer ones, and anything else older is stale.
    """

    __slots__ = ("_order", "_seen", "newest")

    NEW, DUPLICATE, STALE = 0, 1, 2

    def __init__(self, size: int = DEDUP_WINDOW) -> None:
        self._seen: set[int] = set()
        self._order: deque[int] = deque(maxlen=size)
        self.newest: int | None = None

    def classify(self, ts_ms: int) -> int:
        if ts_ms in self._seen:
            return self.DUPLICATE
        if self.newest is not None and ts_ms <= self.newest:
            return self.STALE
        order = self._order
        if len(order) == order.maxlen:
            self._seen.discard(order[0])
        order.append(ts_ms)
        self._seen.add(ts_ms)
        self.newest = ts_ms
        return self.NEW


def next_expected_ts(last_ts_ms: int, pub_interval_ms: int, sub_interval_ms: int) -> int:
    """The nominal instant of the next filter phase after ``last_ts_ms`` (Function 4.1, 4.2.1).

    The filter passes ``ts`` when ``(ts + ceil(pub/2)) % sub < pub``; phases are centred on the
    multiples of ``sub``, so for GPS-aligned publishers this is simply ``last_ts + sub``.
    """
    half = filtering.half_interval(pub_interval_ms)
    return ((last_ts_ms + half) // sub_interval_ms + 1) * sub_interval_ms


def unpublished_among(missing: int, sub_interval_ms: int, pub_interval_ms: int, note: DerivedValue | None) -> int:
    """Of the ``missing`` expected instants right before an event (the newest 1, 2, ... subscription
    intervals back), how many its publisher never published, by the event's SKIPPED note
    (docs/wire-format.md 3.4: the run skipped right before it, then a bitmap of the 32 instants
    before the one published ahead of the run). Instants the note does not cover count as published."""
    run, marked = unpublished_split(missing, sub_interval_ms, pub_interval_ms, note)
    return run + len(marked)


_NONE: tuple[int, ...] = ()


def unpublished_split(missing: int, sub_interval_ms: int, pub_interval_ms: int,
                      note: DerivedValue | None) -> tuple[int, Sequence[int]]:
    """Which instants ``unpublished_among`` counts: the newest ``run`` of them (offsets 1..run, ``j``
    subscription intervals back), then the offsets ``j > run`` the bitmap marks (at most 32)."""
    if note is None or missing <= 0:
        return 0, _NONE
    ratio = max(1, sub_interval_ms // pub_interval_ms)
    run = note.window
    count = min(missing, run // ratio)  # instants k <= run publication intervals back: the run
    marked: list[int] = []
    j = count + 1
    while j <= missing:
        i = j * ratio - run - 2  # k = run + 1 is the instant published before the run
        if i >= SKIP_BITS:
            break
        if i >= 0 and note.bits >> i & 1:
            marked.append(j)
        j += 1
    return count, marked


def missing_between(last_ts_ms: int, ts_ms: int, sub_interval_ms: int) -> int:
    """Expected timestamps skipped between two delivered ones: round((ts-last)/interval) - 1."""
    steps = (ts_ms - last_ts_ms + sub_interval_ms // 2) // sub_interval_ms
    return steps - 1 if steps > 1 else 0
