"""Simulated PMU publishers and the subscribers of the embedded runner (client SDK, in-process).

They all run on the ``gridstat up`` process's event loop; only the routers are
child processes. A publisher sends, at every aligned instant of each of its
publication intervals, all its variables of that interval in one packed
datagram (a PMU's phasors of one instant travel together). Only variables that
some subscription asks for are published: an edge router counts events of a
variable it has no route for as ``unknown_variable`` drops, which would only
hide real drops in the view.

Each subscription is its own ``Subscriber`` (its own UDP socket and subscriber
channel at its edge router); the SDK de-duplicates the copies that redundant
paths deliver. A ``RateMeter`` per subscription records arrival times for the
delivered rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gridstat.client import Holder, PublicationHandle, Publisher, Subscriber, Subscription
from gridstat.core import clock
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable
from gridstat.demo import topology as topo
from gridstat.demo.planner import effective_interval_ms

#: Window of the live rate (seconds).
RATE_WINDOW_S = 5.0


def status_variable(var: topo.Variable) -> StatusVariable:
    return StatusVariable(var.publisher, var.name, var.type_spec, var.interval_ms, var.priority,
                          variable_id=var.variable_id)


def value_function(var: topo.Variable, seed: int) -> Callable[[int], object]:
    """A plausible PMU signal for the variable's name: frequency, voltage magnitude, angle, or noise."""
    rng = random.Random(seed)
    phase = rng.uniform(0, 2 * math.pi)
    name = var.name.lower()

    def wave(ts: int, period_s: float) -> float:
        return math.sin(2 * math.pi * ts / 1000 / period_s + phase)

    if var.type == "bool":
        return lambda ts: wave(ts, 20.0) > 0
    if var.type == "int":
        return lambda ts: ts // var.interval_ms
    if "freq" in name:
        return lambda ts: 60.0 + 0.02 * wave(ts, 12.0) + rng.gauss(0, 0.001)
    if "vmag" in name or "volt" in name:
        return lambda ts: 1.0 + 0.01 * wave(ts, 30.0) + rng.gauss(0, 0.0005)
    if "ang" in name:
        return lambda ts: ((ts / 1000 * 3.6 + math.degrees(phase)) + 180.0) % 360.0 - 180.0
    return lambda ts: wave(ts, 10.0)


@dataclass
class RateMeter:
    """Arrival times of delivered events: the live rate over a window and the whole-run rate."""

    first_ms: int | None = None
    last_ms: int | None = None
    count: int = 0
    window: deque[int] = field(default_factory=deque)

    def add(self, received_ms: int) -> None:
        if self.first_ms is None:
            self.first_ms = received_ms
        self.last_ms = received_ms
        self.count += 1
        self.window.append(received_ms)

    def live_rate(self, now_ms: int) -> float | None:
        """Events/s over the last RATE_WINDOW_S, decaying when events stop."""
        horizon = now_ms - RATE_WINDOW_S * 1000
        while self.window and self.window[0] < horizon:
            self.window.popleft()
        if len(self.window) < 2:
            return None if self.count < 2 else 0.0
        return (len(self.window) - 1) * 1000 / max(1, now_ms - self.window[0])

    def run_rate(self) -> float | None:
        """Events/s between the first and the last delivery of the run."""
        if self.count < 2 or self.first_ms is None or self.last_ms is None or self.last_ms <= self.first_ms:
            return None
        return (self.count - 1) * 1000 / (self.last_ms - self.first_ms)


@dataclass
class SubscriptionEndpoint:
    spec: topo.Subscription
    variable: topo.Variable
    subscriber: Subscriber
    subscription: Subscription | None = None
    meter: RateMeter = field(default_factory=RateMeter)

    @property
    def effective_interval_ms(self) -> int:
        return effective_interval_ms(self.spec.interval_ms, self.variable.interval_ms)

    @property
    def expected_rate(self) -> float:
        return 1000.0 / self.effective_interval_ms

    def _on_event(self, sub: Subscription, holder: Holder) -> None:
        self.meter.add(holder.received_ms)

    async def start(self) -> None:
        await self.subscriber.start()
        self.subscription = self.subscriber.subscribe(
            status_variable(self.variable), interval_ms=self.spec.interval_ms,
            latency_ms=self.spec.latency_ms, on_event=self._on_event)

    async def stop(self) -> None:
        await self.subscriber.stop()


class PublisherEndpoint:
    """One simulated PMU: a Publisher and one sending task per distinct publication interval."""

    def __init__(self, spec: topo.Publisher, variables: list[topo.Variable], edge: tuple[str, int]) -> None:
        self.spec = spec
        self.variables = variables
        self.publisher = Publisher(spec.name, spec.publisher_id, edge=edge)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        await self.publisher.start()
        groups: dict[int, list[tuple[PublicationHandle, Callable[[int], object]]]] = {}
        for v in self.variables:
            handle = self.publisher.variable(status_variable(v))
            groups.setdefault(v.interval_ms, []).append((handle, value_function(v, v.variable_id)))
        for interval, items in sorted(groups.items()):
            self._tasks.append(create_guarded_task(self._run(interval, items),
                                                   name=f"{self.spec.name}-{interval}ms"))

    async def _run(self, interval: int, items: list[tuple[PublicationHandle, Callable[[int], object]]]) -> None:
        last = 0
        while not self._stopping.is_set():
            now = clock.now_ms()
            # max(): a timer that fires a little early must not send the same instant twice
            ts = clock.next_aligned_ms(max(now, last), interval)
            last = ts
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), (ts - now) / 1000)
            if self._stopping.is_set():
                break
            self.publisher.publish_many([(h, fn(ts)) for h, fn in items], ts_ms=ts)

    async def stop(self) -> None:
        self._stopping.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.publisher.stop()
