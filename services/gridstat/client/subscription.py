"""One subscription at the subscriber: rate check, de-duplication, holder, push and violations.

A subscription asks for a variable at an interval with a latency bound (dissertation 2.1.5).
The routers already rate-filter (Function 4.1); the subscriber re-applies the same rule so a
channel shared with a shorter interval cannot deliver extra phases, drops the copies that
redundant paths deliver, and watches the deadline of the next expected event. Everything is
driven with explicit ``now_ms`` so the unit tests never sleep; ``Subscriber`` feeds it from the
socket and from its monitor task.

With ``extrapolation`` (2.2.2) a missed instant -- the monitor's deadline passed, or a newer event
skipped it (the same two rules that report ``late`` and ``gap``) -- is filled with a value
extrapolated from the newest received samples, flagged on its holder, instead of a violation,
for at most ``max_consecutive`` intervals after the newest received event. A real event for a
filled instant that arrives later still replaces it.

With gap recovery on (``Subscriber.recover``, docs/gap-recovery.md) the instants counted as lost
are reported to the subscriber's ``GapFiller``, which later finds them in the history service and
hands them back through ``deliver_recovered``; a late copy of one of them is reported too, so
nothing is delivered twice.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gridstat.core import filtering, wire
from gridstat.core.model import StatusVariable, ValueType
from gridstat.errors import NotFound, TypeMismatch, ValidationError

from .extrapolation import Extrapolation, ExtrapolationLike, as_extrapolation
from .holders import (
    DedupWindow,
    Holder,
    SubscriptionStats,
    Violation,
    missing_between,
    next_expected_ts,
    unpublished_split,
)

if TYPE_CHECKING:
    from .gapfill import GapFiller
    from .snapshot import SnapshotGroup
    from .subscriber import Subscriber

log = logging.getLogger(__name__)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: How many of the newest gap instants a subscription remembers for late copies.
GAP_PHASES_KEPT = 64

EventCallback = Callable[["Subscription", Holder], None]
ViolationCallback = Callable[["Subscription", Violation], None]


def call_guarded(fn: Callable[..., Any], args: tuple[Any, ...], owner: str, errors: int) -> bool:
    """Run a user callback; an exception is logged (1st, 2nd, 4th, 8th ... time) and reported.

    A user's bug must never stop the receive loop (docs/wire-format.md, "Drop reasons"), and logging
    every failure at event rate would flood the log, hence the power-of-two back-off. Returns False
    on failure.
    """
    try:
        fn(*args)
    except Exception:
        n = errors + 1
        if n & (n - 1) == 0:
            log.exception("%s: user callback %r failed (%d failures so far)", owner, fn, n)
        return False
    return True


class Subscription:
    """A subscription's state; created by ``Subscriber.subscribe`` (or directly in tests)."""

    def __init__(
        self,
        variable: StatusVariable,
        *,
        interval_ms: int,
        latency_ms: int,
        on_event: EventCallback | None = None,
        on_violation: ViolationCallback | None = None,
        extrapolate: Callable[..., Any] | None = None,
        subscriber: Subscriber | None = None,
        extrapolation: ExtrapolationLike | None = None,
    ) -> None:
        if latency_ms < 0:
            raise ValidationError(f"latency budget must not be negative, got {latency_ms}", field="latency_ms")
        if extrapolate is not None and extrapolation is not None:
            raise ValidationError("give extrapolation or its older spelling extrapolate, not both",
                                  field="extrapolation")
        spec = as_extrapolation(extrapolation if extrapolate is None else extrapolate, variable.type,
                                alert=variable.alert)
        self.variable = variable
        self.pub_interval_ms = variable.effective_interval_ms
        #: The rule's arithmetic runs in units of 1/scale ms: milliseconds, or 1/R ms at a device frame
        #: rate R, where a frame is exactly ``_pub`` = 1000 units (core/filtering.py, docs/frame-rates.md).
        #: ``_interval``, ``_expected``, phases and filled instants are in those units.
        self._scale, self._pub, self._half = filtering.filter_scale(self.pub_interval_ms, variable.frames_per_s)
        self.interval_ms = 0
        self._interval = 0
        # 4.2: a non-multiple interval is rounded down to a multiple of the publication interval.
        self._set_interval(interval_ms)
        self.latency_ms = latency_ms
        self.on_event = on_event
        self.on_violation = on_violation
        #: The older ``extrapolate=fn`` spelling, as given; ``extrapolation`` is what is applied.
        self.extrapolate = extrapolate
        #: How missed instants are filled (2.2.2); None reports them as violations.
        self.extrapolation: Extrapolation | None = spec
        #: The newest received (timestamp, value) samples, oldest first; never extrapolated ones.
        self._samples: deque[tuple[int, float]] = deque(maxlen=spec.window if spec is not None else 1)
        #: Nominal instants filled with an extrapolated value and newer than the newest real event.
        self._filled: set[int] = set()
        self._last_real: int | None = None
        self.holder: Holder | None = None
        self.stats = SubscriptionStats()
        self.active = True
        self.groups: list[SnapshotGroup] = []
        self._subscriber = subscriber
        self._dedup = DedupWindow()
        #: The newest instants counted as gaps, so a copy that comes after a newer event (a slower
        #: redundant path) is taken out of the count again.
        self._gap_phases: dict[int, None] = {}
        # Alerts are aperiodic: no phases, no deadlines, no gaps (2.1.3).
        self._periodic = not variable.alert
        #: The next expected instant (in rule units) whose deadline has not been reported yet.
        self._expected: int | None = None
        #: Operating modes (6.3): the interval in each mode of the subscription (None: one mode, as
        #: given); ``in_mode`` is False while the current mode is not one of them (nothing expected);
        #: ``suspended`` while a mode change runs, when violations are counted, not reported.
        self.mode_intervals: dict[int, int] | None = None
        self.in_mode = True
        self.suspended = False
        #: Why a router stopped this subscription's stream (``cpu_overload``) until it is restored; else None.
        self.shed_reason: str | None = None
        #: The admission controller's note of a remote subscription (``Subscriber.subscribe_remote``).
        self.admission: Any = None
        #: Gap recovery (docs/gap-recovery.md): the subscriber's filler lost instants are reported
        #: to (None: off), and where recovered events go: ``on_recovered``, else ``on_event`` in order.
        self._gapfill: GapFiller | None = None
        self.on_recovered: EventCallback | None = None
        self.recovered_in_order = False

    @property
    def full_name(self) -> str:
        return self.variable.full_name

    @property
    def value(self) -> object:
        """The newest delivered value (pull model); None before the first event."""
        return None if self.holder is None else self.holder.value

    @property
    def expected_ts_ms(self) -> int | None:
        return None if self._expected is None else self._ms(self._expected)

    def _ms(self, instant: int) -> int:
        """An instant in rule units as a timestamp: milliseconds, rounded down as devices stamp them."""
        return instant // self._scale

    def _set_interval(self, interval_ms: int) -> None:
        frames_per_s = self.variable.frames_per_s
        self.interval_ms = filtering.round_down_interval(interval_ms, self.pub_interval_ms, frames_per_s)
        self._interval = filtering.scaled_interval(self.interval_ms, self.pub_interval_ms, frames_per_s)

    def __repr__(self) -> str:
        return f"Subscription({self.full_name!r}, interval_ms={self.interval_ms}, latency_ms={self.latency_ms})"

    # -- the event path (no logging, no exceptions out) ------------------------------------------
    def handle_event(self, event: wire.Event, now_ms: int) -> bool:
        """Deliver one event received at wall clock ``now_ms``; True if it was delivered."""
        ts = event.timestamp_ms
        stats = self.stats
        interval = self._interval
        scale = self._scale
        at = ts * scale  # the timestamp in rule units
        if self._periodic and (at + self._half) % interval >= self._pub:
            stats.filtered += 1
            return False
        verdict = self._dedup.classify(ts)
        if verdict:
            if verdict == DedupWindow.DUPLICATE:
                stats.duplicates += 1
            elif self._gap_phases and self._phase(at) in self._gap_phases:
                self._late_copy(self._phase(at), event, now_ms)
            else:
                stats.stale += 1
            return False
        try:
            value = wire.decode_value(self.variable.type, event.value)
        except TypeMismatch:
            stats.filtered += 1
            return False
        last = self._last_real
        latency = now_ms - ts
        sequence_ok = True
        gap: Violation | None = None
        phase = (at + self._half) // interval * interval  # the nominal instant (``_phase``)
        filled = self._filled
        replaces = phase in filled
        if self._periodic and last is not None:
            missing = missing_between(last * scale, at, interval)
            if missing:
                self._count_gap(missing, at, event.options, now_ms)
            expected = self._expected
            if expected is not None and (at - expected + interval // 2) // interval >= 1:
                # Fill the skipped instants (2.2.2) before this event; report what cannot be.
                unfilled = self._fill_until(expected, phase, now_ms)
                if unfilled is not None:
                    gap = Violation("gap", self._ms(unfilled), now_ms, last)
            prev = self.holder.timestamp_ms if self.holder is not None else last
            sequence_ok = missing_between(prev * scale, at, interval) == 0
        if self._periodic:
            nxt = next_expected_ts(at, self._pub, interval)
            self._expected = nxt if self._expected is None else max(self._expected, nxt)
        options = event.options
        if options and any(o.kind == wire.OptionKind.SKIPPED for o in options):
            stats.publisher_skipped = max(int(o.value) for o in options if o.kind == wire.OptionKind.SKIPPED)
            options = tuple(o for o in options if o.kind != wire.OptionKind.SKIPPED)
        holder = Holder(value, ts, now_ms, latency, options, False, sequence_ok, event.is_alert)
        # A late real event for a filled instant older than the holder's does not move it back.
        if self.holder is None or not filled or phase >= self._phase(self.holder.timestamp_ms * scale):
            self.holder = holder
        self._last_real = ts
        if self.extrapolation is not None:
            if replaces:
                stats.replaced += 1
            if filled:
                self._filled = {t for t in filled if t > phase}
            if isinstance(value, (int, float)):  # always: checked at subscribe time
                self._samples.append((ts, float(value)))
        stats.delivered += 1
        stats.latency.add(latency)
        if gap is not None:
            self._violate(gap)
        # The instant was already filled in time: its late real value is a correction, not a breach.
        if latency > self.latency_ms and not replaces:
            self._violate(Violation("latency", ts, now_ms, last, latency))
        if self.on_event is not None:
            self._call(self.on_event, (self, holder))
        for group in self.groups:
            group.offer(self, holder)
        return True

    def _count_gap(self, missing: int, at: int, options: tuple[wire.DerivedValue, ...], now_ms: int) -> None:
        """``missing`` expected instants before the event at ``at`` (rule units) never came: lost in the
        network or never published, as the event's SKIPPED note tells (docs/wire-format.md 3.4).
        With recovery on, the lost ones go to the gap filler (docs/gap-recovery.md)."""
        stats = self.stats
        note = next((o for o in options if o.kind == wire.OptionKind.SKIPPED), None) if options else None
        run, marked = unpublished_split(missing, self._interval, self._pub, note)
        unpublished = run + len(marked)
        stats.gaps += missing
        stats.unpublished += unpublished
        stats.lost += missing - unpublished
        phases = self._gap_phases
        phase = self._phase(at)
        interval = self._interval
        for j in range(min(missing, GAP_PHASES_KEPT), 0, -1):
            phases[phase - j * interval] = None
        while len(phases) > GAP_PHASES_KEPT:
            del phases[next(iter(phases))]
        if self._gapfill is not None and missing > unpublished:
            # The run skipped right before this event is left out; the bitmap's few are named.
            self._gapfill.report(self, range(phase - missing * interval, phase - run * interval, interval),
                                 {phase - j * interval for j in marked}, now_ms)

    def _late_copy(self, phase: int, event: wire.Event, now_ms: int) -> None:
        """An instant counted as a gap arrived after all, behind a newer event: it was published and
        not lost, so it leaves the gap count (it is not delivered: the holder only moves forward;
        with recovery on, the gap filler delivers it as it would have delivered the archived one)."""
        del self._gap_phases[phase]
        stats = self.stats
        stats.out_of_order += 1
        stats.gaps -= 1
        if stats.lost:
            stats.lost -= 1
        else:
            stats.unpublished -= 1
        if self._gapfill is not None:
            try:
                value = wire.decode_value(self.variable.type, event.value)
            except TypeMismatch:
                return
            self._gapfill.arrived(self, phase, event.timestamp_ms, value, now_ms)

    # -- gap recovery (docs/gap-recovery.md) ----------------------------------------------------------
    def enable_recovery(self, filler: GapFiller | None, *, on_recovered: EventCallback | None = None,
                        in_order: bool = False) -> None:
        """Report lost instants to ``filler`` (None turns recovery off); recovered events go to
        ``on_recovered`` or, with ``in_order``, to ``on_event`` flagged ``recovered``."""
        if filler is None and self._gapfill is not None:
            self._gapfill.forget(self)
        self._gapfill = filler
        self.on_recovered = on_recovered
        self.recovered_in_order = in_order

    def phase_of(self, ts_ms: int, interval: int | None = None) -> int:
        """The nominal instant (rule units) of the filter phase a timestamp is in (Function 4.1), at the
        subscription's interval or at ``interval`` (rule units: one it had before a mode change)."""
        step = self._interval if interval is None else interval
        return (ts_ms * self._scale + self._half) // step * step

    def span_ms(self, phase: int) -> tuple[int, int]:
        """The first and last timestamp (ms, inclusive) the rate filter passes for ``phase``: the
        publication slot ``[phase - half, phase - half + pub)`` in rule units (core/filtering.py)."""
        lo = phase - self._half
        return -(-lo // self._scale), (lo + self._pub - 1) // self._scale

    def settle_gaps(self, first: int, last: int) -> None:
        """Gap instants ``first..last`` (rule units) are recovered or given up: a late copy of one of
        them is then a stale copy, not a gap filled (so it is neither delivered nor counted twice)."""
        phases = self._gap_phases
        if phases:
            for p in [p for p in phases if first <= p <= last]:
                del phases[p]

    def deliver_recovered(self, ts_ms: int, value: object, now_ms: int) -> None:
        """Deliver one event the gap filler recovered: to ``on_recovered``, or in order to ``on_event``;
        flagged ``recovered``. The holder only moves forward: a recovered event is older than the
        event whose arrival revealed its gap, so it replaces the holder only if that one is older."""
        holder = Holder(value, ts_ms, now_ms, now_ms - ts_ms, (), False, True, False, True)
        if not self.recovered_in_order:
            if self.on_recovered is not None:
                self._call(self.on_recovered, (self, holder))
            return
        if self.holder is None or self.holder.timestamp_ms < ts_ms:
            self.holder = holder
        if self.on_event is not None:
            self._call(self.on_event, (self, holder))

    def check(self, now_ms: int) -> Violation | None:
        """The monitor's deadline test: the next expected event is late if nothing newer came by
        ``expected + latency`` (= last + interval + latency for aligned publishers). One report per
        missed deadline: the expected timestamp moves past every deadline this call reports."""
        expected = self._expected
        if expected is None or not self.active or self.suspended or not self.in_mode:
            return None
        scale = self._scale
        deadline = expected + self.latency_ms * scale
        now = now_ms * scale
        if now <= deadline:
            return None
        missed = (now - deadline - 1) // self._interval + 1
        self._expected = expected + missed * self._interval
        unfilled = self._fill_until(expected, self._expected, now_ms)
        if unfilled is None:
            return None
        missed -= (unfilled - expected) // self._interval
        v = Violation("late", self._ms(unfilled), now_ms, self._last_real, missed=missed)
        self._violate(v)
        return v

    def handle_shed(self, reason: str, action: str, dropped: int, now_ms: int) -> Violation | None:
        """A router's shed notice about this subscription (docs/overload.md): reported as a ``shed``
        violation, except ``restored``, which ends the shed state."""
        self.stats.shed_notices += 1
        if action == "restored":
            self.shed_reason = None
            return None
        self.stats.shed_dropped += dropped
        if action == "shed":
            self.shed_reason = reason
        expected = self._ms(self._expected) if self._expected is not None else now_ms
        v = Violation("shed", expected, now_ms, self._last_real,
                      reason=reason, dropped=dropped)
        self._violate(v)
        return v

    # -- extrapolation (2.2.2) ----------------------------------------------------------------------
    def _phase(self, at: int) -> int:
        """The nominal instant (a multiple of the interval) whose filter phase ``at`` (rule units) is in."""
        return (at + self._half) // self._interval * self._interval

    def _fill_until(self, first: int, stop: int, now_ms: int) -> int | None:
        """Fill the missed nominal instants ``first, first + interval, ...`` before ``stop``; returns
        the first instant that could not be filled (None when all were), which the caller reports.

        An instant is filled only within ``max_consecutive`` intervals of the newest received event
        and when the method yields a finite value; after the first failure the rest are reported.
        """
        spec = self.extrapolation
        if spec is None or self._last_real is None:
            return first if first < stop else None
        interval = self._interval
        limit = self._phase(self._last_real * self._scale) + spec.max_consecutive * interval
        t = first
        while t < stop:
            if t > limit or not self._fill(spec, t, now_ms):
                return t
            t += interval
        return None

    def _fill(self, spec: Extrapolation, instant: int, now_ms: int) -> bool:
        samples = self._samples
        t = self._ms(instant)
        out: list[float | None] = []

        def extrapolate() -> None:
            out.append(spec.predict([s[0] for s in samples], [s[1] for s in samples], t))

        # A user-defined method is user code: guarded like a callback (1st, 2nd, 4th ... failure logged).
        self._call(extrapolate, ())
        value: float | int | None = out[0] if out else None
        if value is None:
            return False
        if self.variable.type.kind is ValueType.INT:
            if not _INT64_MIN <= value <= _INT64_MAX:
                return False
            value = round(value)
        prev = self.holder.timestamp_ms if self.holder is not None else None
        seq = prev is None or missing_between(prev * self._scale, instant, self._interval) == 0
        holder = Holder(value, t, now_ms, now_ms - t, (), True, seq, False)
        self.holder = holder
        self._filled.add(instant)
        self.stats.extrapolated += 1
        if self.on_event is not None:
            self._call(self.on_event, (self, holder))
        return True

    # -- operating modes (6.3.2) ---------------------------------------------------------------------
    def begin_mode_change(self, mode: int) -> None:
        """Phase 1: a change to ``mode`` is coming. Until it ends, events may arrive at either mode's
        interval, so the rate filter takes the shorter one, and violations are not reported."""
        self.suspended = True
        if self.mode_intervals is not None and mode in self.mode_intervals and self.in_mode:
            self._set_interval(min(self.interval_ms, self._rounded(self.mode_intervals[mode])))

    def end_mode_change(self, mode: int, now_ms: int) -> None:
        """Phase 5 (or an abandoned change, with the mode that stays): apply ``mode``'s interval and
        expect the next event at its next instant after ``now_ms``."""
        self.suspended = False
        if self.mode_intervals is None:
            return
        self.in_mode = mode in self.mode_intervals
        if not self.in_mode:
            self._expected = None
            return
        self._set_interval(self.mode_intervals[mode])
        interval = self._interval
        if self._periodic:
            # Publishers stamp the nearest instant, up to half an interval ahead of the wall clock:
            # an event already received for the first instant after ``now_ms`` is not expected again.
            expected = (now_ms * self._scale // interval + 1) * interval
            if self._last_real is not None:
                expected = max(expected, next_expected_ts(self._last_real * self._scale, self._pub, interval))
            self._expected = expected

    def _rounded(self, interval_ms: int) -> int:
        return filtering.round_down_interval(interval_ms, self.pub_interval_ms, self.variable.frames_per_s)

    def _violate(self, v: Violation) -> None:
        if self.suspended or not self.in_mode:
            self.stats.suppressed += 1
            return
        self.stats.violations += 1
        if self.on_violation is not None:
            self._call(self.on_violation, (self, v))

    def _call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if not call_guarded(fn, args, self.full_name, self.stats.callback_errors):
            self.stats.callback_errors += 1
            if self._subscriber is not None:
                self._subscriber.stats.callback_errors += 1

    # -- lifecycle ----------------------------------------------------------------------------------
    def unsubscribe(self) -> None:
        """Stop delivering; leaves every snapshot group. Idempotent."""
        if not self.active:
            return
        self.active = False
        for group in list(self.groups):
            try:
                group.remove(self)
            except NotFound:
                pass
        if self._gapfill is not None:
            self._gapfill.forget(self)
        if self._subscriber is not None:
            self._subscriber._forget(self)
