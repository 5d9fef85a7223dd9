"""One subscription at the subscriber: rate check, de-duplication, holder, push and violations.

A subscription asks for a variable at an interval with a latency bound (dissertation 2.1.5).
The routers already rate-filter (Function 4.1); the subscriber re-applies the same rule so a
channel shared with a shorter interval cannot deliver extra phases, drops the copies that
redundant paths deliver, and watches the deadline of the next expected event. Everything is
driven with explicit ``now_ms`` so the unit tests never sleep; ``Subscriber`` feeds it from the
socket and from its monitor task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gridstat.core import filtering, wire
from gridstat.core.model import StatusVariable
from gridstat.errors import NotFound, TypeMismatch, ValidationError

from .holders import DedupWindow, Holder, SubscriptionStats, Violation, missing_between, next_expected_ts

if TYPE_CHECKING:
    from .snapshot import SnapshotGroup
    from .subscriber import Subscriber

log = logging.getLogger(__name__)

EventCallback = Callable[["Subscription", Holder], None]
ViolationCallback = Callable[["Subscription", Violation], None]


def call_guarded(fn: Callable[..., Any], args: tuple[Any, ...], owner: str, errors: int) -> bool:
    """Run a user callback; an exception is logged (1st, 2nd, 4th, 8th ... time) and reported.

    A user's bug must never stop the receive loop (issue 2), and logging every failure at event
    rate would flood the log, hence the power-of-two back-off. Returns False on failure.
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
    ) -> None:
        if latency_ms < 0:
            raise ValidationError(f"latency budget must not be negative, got {latency_ms}", field="latency_ms")
        self.variable = variable
        self.pub_interval_ms = variable.effective_interval_ms
        # 4.2: a non-multiple interval is rounded down to a multiple of the publication interval.
        self.interval_ms = filtering.round_down_interval(interval_ms, self.pub_interval_ms)
        self.latency_ms = latency_ms
        self.on_event = on_event
        self.on_violation = on_violation
        #: Stored for the extrapolation holders of a later issue; not applied yet.
        self.extrapolate = extrapolate
        self.holder: Holder | None = None
        self.stats = SubscriptionStats()
        self.active = True
        self.groups: list[SnapshotGroup] = []
        self._subscriber = subscriber
        self._dedup = DedupWindow()
        # Alerts are aperiodic: no phases, no deadlines, no gaps (2.1.3).
        self._periodic = not variable.alert
        self._half = filtering.half_interval(self.pub_interval_ms)
        #: The next expected timestamp whose deadline has not been reported yet.
        self._expected: int | None = None

    @property
    def full_name(self) -> str:
        return self.variable.full_name

    @property
    def value(self) -> object:
        """The newest delivered value (pull model); None before the first event."""
        return None if self.holder is None else self.holder.value

    @property
    def expected_ts_ms(self) -> int | None:
        return self._expected

    def __repr__(self) -> str:
        return f"Subscription({self.full_name!r}, interval_ms={self.interval_ms}, latency_ms={self.latency_ms})"

    # -- the event path (no logging, no exceptions out) ------------------------------------------
    def handle_event(self, event: wire.Event, now_ms: int) -> bool:
        """Deliver one event received at wall clock ``now_ms``; True if it was delivered."""
        ts = event.timestamp_ms
        stats = self.stats
        interval = self.interval_ms
        if self._periodic and (ts + self._half) % interval >= self.pub_interval_ms:
            stats.filtered += 1
            return False
        verdict = self._dedup.classify(ts)
        if verdict:
            if verdict == DedupWindow.DUPLICATE:
                stats.duplicates += 1
            else:
                stats.stale += 1
            return False
        try:
            value = wire.decode_value(self.variable.type, event.value)
        except TypeMismatch:
            stats.filtered += 1
            return False
        last = self.holder.timestamp_ms if self.holder is not None else None
        latency = now_ms - ts
        sequence_ok = True
        gap: Violation | None = None
        if self._periodic and last is not None:
            missing = missing_between(last, ts, interval)
            if missing:
                stats.gaps += missing
                sequence_ok = False
            expected = self._expected
            if expected is not None and (ts - expected + interval // 2) // interval >= 1:
                gap = Violation("gap", expected, now_ms, last)
        if self._periodic:
            self._expected = next_expected_ts(ts, self.pub_interval_ms, interval)
        holder = Holder(value, ts, now_ms, latency, event.options, False, sequence_ok, event.is_alert)
        self.holder = holder
        stats.delivered += 1
        stats.latency.add(latency)
        if gap is not None:
            self._violate(gap)
        if latency > self.latency_ms:
            self._violate(Violation("latency", ts, now_ms, last, latency))
        if self.on_event is not None:
            self._call(self.on_event, (self, holder))
        for group in self.groups:
            group.offer(self, holder)
        return True

    def check(self, now_ms: int) -> Violation | None:
        """The monitor's deadline test: the next expected event is late if nothing newer came by
        ``expected + latency`` (= last + interval + latency for aligned publishers). One report per
        missed deadline: the expected timestamp moves past every deadline this call reports."""
        expected = self._expected
        if expected is None or not self.active:
            return None
        deadline = expected + self.latency_ms
        if now_ms <= deadline:
            return None
        missed = (now_ms - deadline - 1) // self.interval_ms + 1
        self._expected = expected + missed * self.interval_ms
        v = Violation("late", expected, now_ms, None if self.holder is None else self.holder.timestamp_ms,
                      missed=missed)
        self._violate(v)
        return v

    def _violate(self, v: Violation) -> None:
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
        if self._subscriber is not None:
            self._subscriber._forget(self)
