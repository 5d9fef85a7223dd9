"""Gap recovery: lost instants looked up in the history service and delivered late (docs/gap-recovery.md).

A subscription already knows which expected instants never came: when an event arrives past a gap,
``Subscription._count_gap`` separates the instants its publisher never published (the SKIPPED note,
docs/wire-format.md 3.4) from those lost on the way. With recovery on, it reports the lost ones here
as one *window*. The archive (``gridstat archive``) is itself a subscriber, often at the publisher's
own edge router, so it usually received what this subscriber lost; it writes to Kafka within its
latency bound plus the exporter's linger, and the history service reads them back rate-filtered at
any interval with the live rule (dissertation 4.2.1, Function 4.1).

So a window waits ``recover_after_ms`` (time for the archive to have written it), is then asked
for at the subscription's interval, and is asked again with a doubling back-off while instants are
still missing (the archive may be late, the history service may be down) until ``give_up_after_ms``
after the gap was seen; what is still missing then counts as ``unrecoverable``. A late copy of a
lost instant (a slower path) takes it out of its window, and a recovered instant is settled in the
subscription, so a copy that comes later still is stale: nothing is delivered twice. A late copy
is otherwise not delivered (the holder only moves forward); with recovery on it is delivered like
an archived one, once, but counted as ``out_of_order`` (not lost), not as ``recovered``.

Bounds: at most ``max_windows_per_subscription`` windows per subscription and ``max_windows`` in
all, and ``max_window_instants`` instants per window (the newest are kept); what does not fit counts
as ``unrecoverable`` at once and in ``GapFillStats``. ``report`` and ``arrived`` run on the receive
path: they do not block, log or raise, and allocate only when a gap is seen.

``GapFiller`` is the sans-I/O core (explicit ``now_ms``: the unit tests never sleep); ``drive``
is its asyncio driver, which asks a ``HistorySource`` (the SDK's ``HistoryClient``) for due windows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gridstat.core import clock
from gridstat.errors import ValidationError

if TYPE_CHECKING:
    from .subscription import Subscription

log = logging.getLogger(__name__)

#: Wait before the first query: the archive's latency bound (``gridstat archive`` default 1 s) plus
#: the exporter's linger and Kafka's write, with room to spare (docs/gap-recovery.md).
RECOVER_AFTER_MS = 3_000
#: First wait between queries while instants are still missing; doubled after each.
RETRY_AFTER_MS = 1_000
#: Give up on a window this long after its gap was seen.
GIVE_UP_AFTER_MS = 30_000
MAX_WINDOWS_PER_SUBSCRIPTION = 8
MAX_WINDOWS = 128
#: Instants kept per window: 40 s of a 100 Hz stream.
MAX_WINDOW_INSTANTS = 4_096
#: How often the driver looks for due windows at most, and how many queries it runs at once.
DRIVER_TICK_MS = 100
MAX_QUERIES_IN_FLIGHT = 4
QUERY_TIMEOUT_S = 10.0


class HistoryEventLike(Protocol):
    """One archived event as the history service answers it (``client.history.HistoryEvent``)."""

    @property
    def timestamp_ms(self) -> int: ...

    @property
    def value(self) -> object: ...

    @property
    def extrapolated(self) -> bool: ...


class HistorySource(Protocol):
    """Where lost events are looked up: ``client.history.HistoryClient`` or a fake in the tests."""

    async def fetch(self, variable: str, *, from_ms: int, to_ms: int,
                    interval_ms: int = ...) -> Sequence[HistoryEventLike]: ...


@dataclass
class GapFillStats:
    """The filler's own counts; per subscription counts are in ``SubscriptionStats``."""

    windows: int = 0
    queries: int = 0
    query_errors: int = 0
    #: Windows refused because the per-subscription or overall bound was reached.
    dropped_windows: int = 0
    #: Instants beyond ``max_window_instants`` not looked for.
    truncated_instants: int = 0


@dataclass(eq=False, slots=True)
class GapWindow:
    """Lost instants of one subscription, between two events it received."""

    sub: Subscription
    #: Nominal instants (the subscription's rule units, ``Subscription.phase_of``) still missing.
    missing: set[int]
    first: int
    last: int
    #: The subscription's interval when the gap was seen (ms, and in rule units): a mode change
    #: (6.3) may change it before the window is answered.
    interval_ms: int
    step: int
    #: The timestamps asked for, inclusive: the filter slots of ``first`` and ``last``.
    from_ms: int
    to_ms: int
    due_ms: int
    deadline_ms: int
    backoff_ms: int
    #: Found instants not delivered yet, in order behind an older missing one: instant -> (ts, value,
    #: whether it came as a late copy, already counted out of ``lost`` and ``recovery_pending``).
    held: dict[int, tuple[int, object, bool]] = field(default_factory=dict)
    attempts: int = 0
    in_flight: bool = False
    closed: bool = False


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValidationError(f"{name} must be a positive integer, got {value!r}", field=name)
    return value


class GapFiller:
    """The windows being recovered for a subscriber's subscriptions (the sans-I/O core).

    Args:
        recover_after_ms: wait after a gap is seen before the first query (default 3000).
        retry_after_ms: first wait between queries while instants are missing, doubled each time.
        give_up_after_ms: after a gap is seen, when what is still missing is unrecoverable.
        max_windows_per_subscription, max_windows: pending windows allowed.
        max_window_instants: instants looked for per window (the newest).

    Raises:
        ValidationError: a bound is not a positive integer (``recover_after_ms`` may be 0), or
            ``give_up_after_ms`` is shorter than ``recover_after_ms``; ``field`` names it.
    """

    def __init__(
        self,
        *,
        recover_after_ms: int = RECOVER_AFTER_MS,
        retry_after_ms: int = RETRY_AFTER_MS,
        give_up_after_ms: int = GIVE_UP_AFTER_MS,
        max_windows_per_subscription: int = MAX_WINDOWS_PER_SUBSCRIPTION,
        max_windows: int = MAX_WINDOWS,
        max_window_instants: int = MAX_WINDOW_INSTANTS,
    ) -> None:
        if not isinstance(recover_after_ms, int) or isinstance(recover_after_ms, bool) or recover_after_ms < 0:
            raise ValidationError(f"recover_after_ms must be an integer >= 0, got {recover_after_ms!r}",
                                  field="recover_after_ms")
        self.recover_after_ms = recover_after_ms
        self.retry_after_ms = _positive("retry_after_ms", retry_after_ms)
        self.give_up_after_ms = _positive("give_up_after_ms", give_up_after_ms)
        if give_up_after_ms < recover_after_ms:
            raise ValidationError(f"give_up_after_ms ({give_up_after_ms}) is shorter than recover_after_ms "
                                  f"({recover_after_ms})", field="give_up_after_ms")
        self.max_windows_per_subscription = _positive("max_windows_per_subscription", max_windows_per_subscription)
        self.max_windows = _positive("max_windows", max_windows)
        self.max_window_instants = _positive("max_window_instants", max_window_instants)
        self.stats = GapFillStats()
        self._windows: dict[Subscription, list[GapWindow]] = {}
        self._count = 0

    def __len__(self) -> int:
        """Windows pending."""
        return self._count

    def windows(self, sub: Subscription | None = None) -> list[GapWindow]:
        """The pending windows (of ``sub``), oldest first."""
        if sub is not None:
            return list(self._windows.get(sub, ()))
        return [w for ws in self._windows.values() for w in ws]

    # -- the receive path ---------------------------------------------------------------------------
    def report(self, sub: Subscription, instants: range, unpublished: Collection[int], now_ms: int) -> None:
        """The expected ``instants`` (rule units, ascending) never came; the ``unpublished`` ones among
        them were never published. The rest is a window, due ``recover_after_ms`` from ``now_ms``."""
        lost = len(instants) - len(unpublished)
        if lost <= 0:
            return
        stats = sub.stats
        pending = self._windows.get(sub)
        if self._count >= self.max_windows or (pending is not None
                                                and len(pending) >= self.max_windows_per_subscription):
            self.stats.dropped_windows += 1
            stats.unrecoverable += lost
            sub.settle_gaps(instants[0], instants[-1])
            return
        missing: set[int] = set()
        cap = self.max_window_instants
        for t in reversed(instants):  # the newest first, up to the cap
            if t not in unpublished:
                if len(missing) == cap:
                    break
                missing.add(t)
        cut = lost - len(missing)
        if cut:
            self.stats.truncated_instants += cut
            stats.unrecoverable += cut
        first, last = min(missing), max(missing)
        if cut:
            sub.settle_gaps(instants[0], first - 1)
        window = GapWindow(sub, missing, first, last, sub.interval_ms, instants.step,
                           sub.span_ms(first)[0], sub.span_ms(last)[1],
                           now_ms + self.recover_after_ms, now_ms + self.give_up_after_ms, self.retry_after_ms)
        if pending is None:
            self._windows[sub] = [window]
        else:
            pending.append(window)
        self._count += 1
        self.stats.windows += 1
        stats.recovery_pending += len(missing)

    def arrived(self, sub: Subscription, instant: int, ts_ms: int, value: object, now_ms: int) -> None:
        """A late copy of a lost instant came after all (counted out of ``lost`` by the subscription):
        it is no longer looked for; it is delivered in its place (once, if it was found already)."""
        for w in self._windows.get(sub, ()):
            if w.first <= instant <= w.last:
                held = w.held
                if instant in w.missing:
                    w.missing.discard(instant)
                    held[instant] = (ts_ms, value, True)
                elif instant in held:
                    ts_ms, value, _ = held[instant]
                    held[instant] = (ts_ms, value, True)
                else:
                    continue
                sub.stats.recovery_pending -= 1
                self._release(w, now_ms)
                if not w.missing and not held:
                    self._close(w)
                return

    def forget(self, sub: Subscription) -> None:
        """``sub`` ended: its pending windows are dropped undelivered, what they held unrecoverable."""
        for w in self._windows.get(sub, [])[:]:
            n = len(w.missing) + sum(1 for *_, late in w.held.values() if not late)
            sub.stats.unrecoverable += n
            sub.stats.recovery_pending -= n
            w.missing.clear()
            w.held.clear()
            self._close(w)

    # -- the driver's side --------------------------------------------------------------------------
    def next_due_ms(self) -> int | None:
        """When the earliest window not being asked for is due; None when there is none."""
        return min((w.due_ms for ws in self._windows.values() for w in ws if not w.in_flight), default=None)

    def due(self, now_ms: int, limit: int | None = None) -> list[GapWindow]:
        """Windows to ask the history service for now (at most ``limit``), oldest due first; each is
        marked in flight until ``answer`` or ``failed``."""
        ready = sorted((w for ws in self._windows.values() for w in ws if not w.in_flight and w.due_ms <= now_ms),
                       key=lambda w: w.due_ms)
        if limit is not None:
            ready = ready[:max(0, limit)]
        for w in ready:
            w.in_flight = True
            w.attempts += 1
            self.stats.queries += 1
        return ready

    def answer(self, window: GapWindow, events: Iterable[HistoryEventLike], now_ms: int) -> None:
        """The history service's answer for ``window``: missing instants found in it are delivered (or
        held, in order, behind an older missing one); the rest is asked for again or given up."""
        window.in_flight = False
        if window.closed:
            return
        sub = window.sub
        missing = window.missing
        held = window.held
        for ev in events:
            if ev.extrapolated:  # the archive's own guess, not the published value
                continue
            ts = ev.timestamp_ms
            instant = sub.phase_of(ts, window.step)
            if instant in missing:
                missing.discard(instant)
                held[instant] = (ts, ev.value, False)
        self._release(window, now_ms)
        self._reschedule(window, now_ms)

    def failed(self, window: GapWindow, now_ms: int) -> None:
        """The query for ``window`` failed (the history service unreachable, timed out, refused)."""
        window.in_flight = False
        self.stats.query_errors += 1
        if not window.closed:
            self._reschedule(window, now_ms)

    # -- internals ----------------------------------------------------------------------------------
    def _reschedule(self, w: GapWindow, now_ms: int) -> None:
        if not w.missing:
            self._release(w, now_ms, final=True)
            self._close(w)
        elif now_ms >= w.deadline_ms:
            self._give_up(w, now_ms)
        else:
            w.due_ms = min(now_ms + w.backoff_ms, w.deadline_ms)
            w.backoff_ms *= 2

    def _release(self, w: GapWindow, now_ms: int, *, final: bool = False) -> None:
        """Deliver held instants: all of them for a callback or at the end, else those older than
        the oldest still missing (in order)."""
        held = w.held
        if not held:
            return
        sub = w.sub
        if final or not sub.recovered_in_order:
            ready = sorted(held)
        else:
            oldest = min(w.missing) if w.missing else None
            ready = sorted(t for t in held if oldest is None or t < oldest)
        if not ready:
            return
        stats = sub.stats
        for instant in ready:
            ts, value, late = held.pop(instant)
            if not late:
                stats.recovered += 1
                stats.recovery_pending -= 1
            sub.settle_gaps(instant, instant)
            sub.deliver_recovered(ts, value, now_ms)

    def _give_up(self, w: GapWindow, now_ms: int) -> None:
        self._release(w, now_ms, final=True)
        n = len(w.missing)
        if n:
            stats = w.sub.stats
            stats.unrecoverable += n
            stats.recovery_pending -= n
            w.sub.settle_gaps(w.first, w.last)
            w.missing.clear()
        self._close(w)

    def _close(self, w: GapWindow) -> None:
        if w.closed:
            return
        w.closed = True
        ws = self._windows.get(w.sub)
        if ws is not None:
            ws.remove(w)
            if not ws:
                del self._windows[w.sub]
        self._count -= 1


async def drive(filler: GapFiller, source: HistorySource, *, now_ms: Callable[[], int] = clock.now_ms,
                tick_ms: int = DRIVER_TICK_MS, max_in_flight: int = MAX_QUERIES_IN_FLIGHT,
                timeout_s: float = QUERY_TIMEOUT_S) -> None:
    """Run ``filler`` against ``source`` until cancelled: wake at the next due window (at least every
    ``tick_ms``), ask for due windows with at most ``max_in_flight`` queries at once, each bounded by
    ``timeout_s``. A failed query is counted and retried by the filler's back-off, never raised."""
    running: set[asyncio.Task[None]] = set()
    failures = 0

    async def ask(w: GapWindow) -> None:
        nonlocal failures
        try:
            events = await asyncio.wait_for(
                source.fetch(w.sub.full_name, from_ms=w.from_ms, to_ms=w.to_ms, interval_ms=w.interval_ms),
                timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the history service's errors, timeouts, unreachable: retried
            failures += 1
            if failures & (failures - 1) == 0:  # 1st, 2nd, 4th ... failure: not one line per retry
                log.warning("gap recovery of %s [%d, %d] failed (%d failures so far): %s",
                            w.sub.full_name, w.from_ms, w.to_ms, failures, exc)
            filler.failed(w, now_ms())
            return
        filler.answer(w, events, now_ms())

    try:
        while True:
            now = now_ms()
            for w in filler.due(now, max_in_flight - len(running)):
                task = asyncio.get_running_loop().create_task(ask(w), name=f"gapfill-{w.sub.full_name}")
                running.add(task)
                task.add_done_callback(running.discard)
            nxt = filler.next_due_ms()
            wait = tick_ms if nxt is None or len(running) >= max_in_flight else max(1, min(tick_ms, nxt - now))
            await asyncio.sleep(wait / 1000)
    finally:
        for task in list(running):
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
