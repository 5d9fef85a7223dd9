"""Samplers: turn a role's own counters into telemetry records, off the data plane.

The data plane is not instrumented. Routers, brokers and subscribers already count what they
do (``StatusRouter.stats()``, ``Subscriber.stats`` and each ``Subscription.stats``); a sampler
reads those counters once per period on the role's event loop (a few microseconds per channel
or subscription), subtracts the previous reading and emits records of the differences. So
export costs the forwarding loop nothing per event, and a slow or absent Kafka cannot slow it.

The telemetry package sits below the roles (.importlinter), so samplers see the roles through
the small ``Protocol``s below, never by importing them.

``Reporter`` is the one background task that drives every sampler of a process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gridstat.core.aio import cancelled, create_guarded_task

from . import records
from .records import TOPICS

log = logging.getLogger(__name__)

#: (topic, key, record) as handed to ``TelemetryExporter.emit``.
Emitted = tuple[str, str, dict[str, Any]]


class Sampler(Protocol):
    def sample(self, now_ms: int) -> list[Emitted]: ...


class Emitter(Protocol):
    def emit(self, topic: str, record: dict[str, Any], *, key: str | bytes | None = None) -> bool: ...


# -- routers -------------------------------------------------------------------------------------

def _drop_records(channel: str, now: Mapping[str, int], before: Mapping[str, int], key: str,
                  ts_ms: int) -> list[Emitted]:
    out: list[Emitted] = []
    for reason, total in now.items():
        n = int(total) - int(before.get(reason, 0))
        if n > 0:
            out.append((TOPICS.drops, key, records.drops(channel=channel, reason=reason, count=n, total=int(total),
                                                         ts_ms=ts_ms)))
    return out


class RouterSampler:
    """Counters and drops of a router and each of its channels, from ``StatusRouter.stats()``.

    Args:
        name: the router's name (the records' key prefix).
        stats: returns the router's ``stats()`` dict.
        capacities: returns each channel's queue capacity (events), optional.
    """

    def __init__(self, name: str, stats: Callable[[], Mapping[str, Any]],
                 capacities: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.name = name
        self._stats = stats
        self._capacities = capacities
        self._prev: dict[str, Mapping[str, Any]] = {}
        self._prev_ms: int | None = None
        self._mode: int | None = None

    def sample(self, now_ms: int) -> list[Emitted]:
        s = self._stats()
        period = now_ms - self._prev_ms if self._prev_ms is not None else int(float(s.get("uptime_s", 0)) * 1000)
        self._prev_ms = now_ms
        caps = self._capacities() if self._capacities is not None else {}
        out: list[Emitted] = []
        channels = list(s.get("channels", ()))
        router_drops: dict[str, int] = dict(s.get("drops", {}))
        all_drops = sum(router_drops.values()) + sum(sum(c.get("drops", {}).values()) for c in channels)
        prev = self._prev.get("", {})
        dgram_out = sum(int(c.get("datagrams_sent", 0)) for c in channels)
        out.append((TOPICS.counters, f"{self.name}/", records.counters(
            period_ms=period, channel="",
            events_in=int(s["events_in"]) - int(prev.get("events_in", 0)),
            events_out=int(s["events_forwarded"]) - int(prev.get("events_forwarded", 0)),
            datagrams_in=int(s["datagrams_in"]) - int(prev.get("datagrams_in", 0)),
            datagrams_out=dgram_out - int(prev.get("datagrams_sent", 0)),
            filtered=int(s["events_filtered"]) - int(prev.get("events_filtered", 0)),
            dropped=all_drops - int(prev.get("dropped", 0)),
            events_in_total=int(s["events_in"]), events_out_total=int(s["events_forwarded"]),
            dropped_total=all_drops, cpu_seconds=float(s.get("cpu_seconds", 0.0)),
            mode=int(s.get("current_mode", 0)), ts_ms=now_ms)))
        out.extend(_drop_records("", router_drops, prev.get("drops", {}), f"router/{self.name}", now_ms))
        self._prev[""] = {**s, "datagrams_sent": dgram_out, "dropped": all_drops, "drops": router_drops}
        for c in channels:
            name = str(c["name"])
            p = self._prev.get(name, {})
            drops = dict(c.get("drops", {}))
            dropped = sum(drops.values())
            out.append((TOPICS.counters, f"{self.name}/{name}", records.counters(
                period_ms=period, channel=name, up=bool(c.get("up", True)),
                events_in=int(c["events_in"]) - int(p.get("events_in", 0)),
                events_out=int(c["events_sent"]) - int(p.get("events_sent", 0)),
                datagrams_in=int(c["datagrams_in"]) - int(p.get("datagrams_in", 0)),
                datagrams_out=int(c["datagrams_sent"]) - int(p.get("datagrams_sent", 0)),
                filtered=int(c.get("filtered", 0)) - int(p.get("filtered", 0)),
                dropped=dropped - int(p.get("dropped", 0)),
                events_in_total=int(c["events_in"]), events_out_total=int(c["events_sent"]), dropped_total=dropped,
                queued=int(c.get("queued", 0)), queue_capacity=caps.get(name),
                rtt_ms=c.get("rtt_ms"), ts_ms=now_ms)))
            out.extend(_drop_records(name, drops, p.get("drops", {}), f"router/{self.name}", now_ms))
            self._prev[name] = {**c, "dropped": dropped, "drops": drops}
        mode = int(s.get("current_mode", 0))
        if self._mode is not None and mode != self._mode:
            out.append((TOPICS.modes, f"router/{self.name}",
                        records.mode_change(mode=mode, previous_mode=self._mode, outcome="observed", ts_ms=now_ms)))
        self._mode = mode
        return out


# -- subscribers ---------------------------------------------------------------------------------

# Read-only properties, so that the SDK's concrete (and mutable) attributes match covariantly.
class _VariableLike(Protocol):
    @property
    def full_name(self) -> str: ...
    @property
    def variable_id(self) -> int: ...


class _HolderLike(Protocol):
    @property
    def timestamp_ms(self) -> int: ...


class _RingLike(Protocol):
    def recent(self, n: int) -> list[int]: ...
    def percentile(self, q: float) -> float | None: ...


class _SubStatsLike(Protocol):
    @property
    def delivered(self) -> int: ...
    @property
    def gaps(self) -> int: ...
    @property
    def duplicates(self) -> int: ...
    @property
    def stale(self) -> int: ...
    @property
    def violations(self) -> int: ...
    @property
    def extrapolated(self) -> int: ...
    @property
    def latency(self) -> _RingLike: ...


class SubscriptionLike(Protocol):
    """What the samplers and collectors read of a ``client.Subscription``."""

    @property
    def variable(self) -> _VariableLike: ...
    @property
    def interval_ms(self) -> int: ...
    @property
    def latency_ms(self) -> int | float: ...
    @property
    def stats(self) -> _SubStatsLike: ...
    @property
    def in_mode(self) -> bool: ...
    @property
    def suspended(self) -> bool: ...
    @property
    def holder(self) -> _HolderLike | None: ...


class _SubscriberStatsLike(Protocol):
    @property
    def drops(self) -> Mapping[str, int]: ...
    @property
    def callback_errors(self) -> int: ...


class SubscriberLike(Protocol):
    """What the samplers and collectors read of a ``client.Subscriber``."""

    @property
    def name(self) -> str: ...
    @property
    def current_mode(self) -> int: ...
    @property
    def stats(self) -> _SubscriberStatsLike: ...

    def subscriptions(self) -> Iterable[SubscriptionLike]: ...


@dataclass
class _SubPrev:
    delivered: int = 0
    gaps: int = 0
    duplicates: int = 0
    stale: int = 0
    violations: int = 0
    extrapolated: int = 0
    holder_ts: int | None = None
    at_ms: int = 0


class SubscriberSampler:
    """Delivery samples of every subscription of a ``client.Subscriber``, plus its drops and modes."""

    def __init__(self, subscriber: SubscriberLike) -> None:
        self.subscriber = subscriber
        self._prev: dict[int, _SubPrev] = {}
        self._drops: dict[str, int] = {}
        self._mode: int | None = None
        self._started_ms = records.now_ms()

    def sample(self, now_ms: int) -> list[Emitted]:
        sub = self.subscriber
        out: list[Emitted] = []
        seen: set[int] = set()
        for s in sub.subscriptions():
            vid = s.variable.variable_id
            seen.add(vid)
            p = self._prev.get(vid)
            if p is None:
                p = self._prev[vid] = _SubPrev(at_ms=self._started_ms)
            st = s.stats
            delivered = st.delivered - p.delivered
            holder = s.holder
            ts = holder.timestamp_ms if holder is not None else None
            interval: float | None = None
            if delivered > 0 and ts is not None and p.holder_ts is not None and ts > p.holder_ts:
                interval = (ts - p.holder_ts) / delivered
            name = s.variable.full_name
            out.append((TOPICS.delivery, f"{sub.name}/{name}", records.delivery(
                subscriber=sub.name, variable=name, variable_id=vid, mode=sub.current_mode,
                period_ms=now_ms - p.at_ms, requested_interval_ms=s.interval_ms, latency_bound_ms=float(s.latency_ms),
                delivered=delivered, gaps=st.gaps - p.gaps, duplicates=st.duplicates - p.duplicates,
                stale=st.stale - p.stale, violations=st.violations - p.violations,
                extrapolated=st.extrapolated - p.extrapolated, latency_ms=st.latency.recent(delivered),
                delivered_interval_ms=interval, previous_ts_ms=p.holder_ts, last_ts_ms=ts if delivered else None,
                in_mode=s.in_mode, suspended=s.suspended, ts_ms=now_ms)))
            self._prev[vid] = _SubPrev(st.delivered, st.gaps, st.duplicates, st.stale, st.violations, st.extrapolated,
                                       ts if ts is not None else p.holder_ts, now_ms)
        for vid in set(self._prev) - seen:
            del self._prev[vid]
        drops = dict(sub.stats.drops)
        if sub.stats.callback_errors:
            drops["callback_error"] = sub.stats.callback_errors
        out.extend(_drop_records("", drops, self._drops, f"subscriber/{sub.name}", now_ms))
        self._drops = drops
        if self._mode is not None and sub.current_mode != self._mode:
            out.append((TOPICS.modes, f"subscriber/{sub.name}", records.mode_change(
                mode=sub.current_mode, previous_mode=self._mode, outcome="observed", ts_ms=now_ms)))
        self._mode = sub.current_mode
        return out


# -- brokers -------------------------------------------------------------------------------------

class BrokerModeSampler:
    """Mode changes of a broker that did not come through ``recording.BrokerRecorder`` (e.g. a
    restarted broker's restored mode), seen by sampling ``current_mode``."""

    def __init__(self, name: str, current_mode: Callable[[], int]) -> None:
        self.name = name
        self._mode_fn = current_mode
        #: The last mode reported; ``BrokerRecorder`` moves it when it reports a change itself.
        self.mode: int | None = None

    def sample(self, now_ms: int) -> list[Emitted]:
        mode = self._mode_fn()
        out: list[Emitted] = []
        if self.mode is not None and mode != self.mode:
            out.append((TOPICS.modes, f"broker/{self.name}", records.mode_change(
                mode=mode, previous_mode=self.mode, outcome="observed", ts_ms=now_ms)))
        self.mode = mode
        return out


# -- the driver ----------------------------------------------------------------------------------

@dataclass
class ReporterStats:
    passes: int = 0
    records: int = 0
    errors: int = 0
    #: Seconds the last pass took on the role's event loop.
    last_pass_s: float = 0.0
    sampler_errors: dict[str, int] = field(default_factory=dict)


class Reporter:
    """One background task that runs every sampler each ``interval_s`` and emits their records.

    A failing sampler is logged (1st, 2nd, 4th ... time) and counted, never fatal. ``stop`` runs
    one last pass so the final counts of a stopping role are exported too.
    """

    def __init__(self, emitter: Emitter, samplers: Iterable[Sampler] = (), *, interval_s: float = 1.0) -> None:
        if interval_s <= 0:
            raise ValueError(f"sampling interval must be positive, got {interval_s}")
        self.emitter = emitter
        self.samplers: list[Sampler] = list(samplers)
        self.interval_s = interval_s
        self.stats = ReporterStats()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def add(self, sampler: Sampler) -> None:
        self.samplers.append(sampler)

    async def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = create_guarded_task(self._run(), name="telemetry-reporter")

    async def stop(self, *, final_pass: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        await cancelled(self._task)
        if final_pass:
            self.run_once()

    def run_once(self, now_ms: int | None = None) -> int:
        """One pass over every sampler; returns how many records were emitted."""
        t0 = time.perf_counter()
        now = records.now_ms() if now_ms is None else now_ms
        n = 0
        for sampler in self.samplers:
            try:
                batch = sampler.sample(now)
            except Exception:
                self.stats.errors += 1
                name = type(sampler).__name__
                count = self.stats.sampler_errors[name] = self.stats.sampler_errors.get(name, 0) + 1
                if count & (count - 1) == 0:
                    log.exception("telemetry sampler %s failed (%d times)", name, count)
                continue
            for topic, key, record in batch:
                self.emitter.emit(topic, record, key=key)
            n += len(batch)
        self.stats.passes += 1
        self.stats.records += n
        self.stats.last_pass_s = time.perf_counter() - t0
        return n

    async def _run(self) -> None:
        # Align passes to multiples of the interval on the wall clock, so that the records of
        # every role of a utility describe the same periods.
        while True:
            await asyncio.sleep(self.interval_s - (time.time() % self.interval_s))
            self.run_once()
