"""Simulated PMU publishers and the subscribers of the embedded runner (client SDK, in-process).

They all run on the ``gridstat up`` process's event loop and reach the management plane only
through their edge router's proxy (``Publisher.connect`` / ``register``, ``Subscriber.connect`` /
``subscribe_remote``): the leaf QoS broker assigns client and variable ids, admits each
subscription and installs its routes. A publisher sends, at every aligned instant of each of its
publication intervals, all its variables of that interval in one packed datagram (a PMU's phasors
of one instant travel together). Only variables that some admitted subscription asks for are
sent: an edge router counts events of a variable it has no route for as ``unknown_variable``
drops, which would only hide real drops in the view.

Each subscription is its own ``Subscriber`` (its own UDP socket and subscriber channel at its edge
router); the SDK de-duplicates the copies that redundant paths deliver. A refused subscription
keeps the broker's reason and offer. A ``RateMeter`` per subscription records arrival times for
the delivered rate.

By default each publisher and subscriber connects with the certificate of its own name (``tls``):
the leaf broker binds a client's name to its certificate identity, and the channel key it returns
makes the publisher sign and the subscriber verify every datagram (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gridstat.client import (
    Holder,
    Offer,
    PublicationHandle,
    Publisher,
    Subscriber,
    Subscription,
    SubscriptionRejected,
)
from gridstat.core import clock, filtering
from gridstat.core.aio import create_guarded_task
from gridstat.core.tls import TlsFiles
from gridstat.demo import topology as topo
from gridstat.errors import GridStatError

#: Window of the live rate (seconds).
RATE_WINDOW_S = 5.0


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


def format_offer(offer: Offer | None) -> str:
    """``best_latency_ms=12.0,max_redundancy=1`` or ``-`` (what the broker could grant instead)."""
    if offer is None:
        return "-"
    parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
             for k, v in (("best_latency_ms", offer.best_latency_ms), ("max_redundancy", offer.max_redundancy),
                          ("min_interval_ms", offer.min_interval_ms)) if v is not None]
    return ",".join(parts) or "-"


@dataclass
class SubscriptionEndpoint:
    """One subscription: its own Subscriber, connected through its edge router's proxy."""

    spec: topo.Subscription
    variable: topo.Variable
    edge_control: str
    subscriber: Subscriber | None = None
    subscription: Subscription | None = None
    meter: RateMeter = field(default_factory=RateMeter)
    #: pending, admitted, rejected (the broker refused: ``reason`` and ``offer``) or failed.
    status: str = "pending"
    reason: str = ""
    message: str = ""
    offer: Offer | None = None
    #: The subscriber's certificate (its name), its key and the CA; None = plaintext (--insecure).
    tls: TlsFiles | None = None

    @property
    def effective_interval_ms(self) -> int:
        return topo.effective_interval_ms(self.spec.interval_ms, self.variable.interval_ms,
                                          self.variable.frames_per_s)

    @property
    def expected_rate(self) -> float:
        rate = self.variable.frames_per_s
        if rate:  # whole frames (docs/frame-rates.md)
            return rate / filtering.frames_in(self.effective_interval_ms, rate)
        return 1000.0 / self.effective_interval_ms

    @property
    def admitted(self) -> bool:
        return self.status == "admitted"

    def reject(self, reason: str, message: str, offer: Offer | None = None) -> None:
        self.status, self.reason, self.message, self.offer = "rejected", reason, message, offer

    def _on_event(self, sub: Subscription, holder: Holder) -> None:
        self.meter.add(holder.received_ms)

    async def start(self) -> None:
        """Connect and subscribe; a refusal or an error is recorded, never raised."""
        s, v = self.spec, self.variable
        try:
            self.subscriber = await Subscriber.connect(s.name, self.edge_control, tls=self.tls)
            self.subscription = await self.subscriber.subscribe_remote(
                v.full_name, v.type_spec, interval_ms=s.interval_ms, latency_ms=s.latency_ms,
                redundancy=s.redundancy, priority=v.priority, on_event=self._on_event)
        except SubscriptionRejected as exc:
            self.reject(exc.reason, exc.message, exc.offer)
            return
        except GridStatError as exc:
            self.status, self.reason, self.message = "failed", exc.reason, exc.message
            return
        self.status = "admitted"

    def drops(self) -> int:
        return sum(self.subscriber.stats.drops.values()) if self.subscriber is not None else 0

    async def stop(self) -> None:
        if self.subscriber is not None:
            await self.subscriber.stop()


class PublisherEndpoint:
    """One simulated PMU: a Publisher connected through its edge router, one sending task per interval."""

    def __init__(self, spec: topo.Publisher, edge_control: str, tls: TlsFiles | None = None) -> None:
        self.spec = spec
        self.edge_control = edge_control
        self.tls = tls
        self.publisher: Publisher | None = None
        #: The broker's view of each registered variable (its variable id), by full name.
        self.handles: dict[str, PublicationHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def connect(self) -> None:
        """Register the publisher and every variable of it with the leaf broker (through the edge)."""
        self.publisher = await Publisher.connect(self.spec.name, self.edge_control, tls=self.tls)
        for v in self.spec.variables:
            self.handles[v.full_name] = await self.publisher.register(
                v.name, v.type_spec, v.interval_ms, priority=v.priority, attributes=self.spec.attributes or None)

    def start_sending(self, wanted: set[str]) -> int:
        """Send the variables in ``wanted``; returns how many."""
        groups: dict[int, list[tuple[PublicationHandle, Callable[[int], object]]]] = {}
        for v in self.spec.variables:
            if v.full_name in wanted:
                groups.setdefault(v.interval_ms, []).append((self.handles[v.full_name],
                                                             value_function(v, v.variable_id)))
        for interval, items in sorted(groups.items()):
            self._tasks.append(create_guarded_task(self._run(interval, items),
                                                   name=f"{self.spec.name}-{interval}ms"))
        return sum(len(items) for items in groups.values())

    async def _run(self, interval: int, items: list[tuple[PublicationHandle, Callable[[int], object]]]) -> None:
        assert self.publisher is not None
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
        if self.publisher is not None:
            await self.publisher.stop()
