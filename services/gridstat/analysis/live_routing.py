"""The pure parts of a live run of seed 001's system: routing state, workload events, predictions.

Why a live run: the model (``model``) and the simulation (``simulation``) agree by construction
of the same bookkeeping; a run of real broker processes exchanging real messages over TCP is
what shows that routing tables and message rates of a deployed hierarchy behave as predicted
(docs/analysis.md: a Spark job compares a live run's measured routing-table sizes and message
rates with the model's prediction). This module holds what those processes (``live_broker``) and
their launcher (``live``) compute without I/O, so it can be unit-tested:

* ``Router`` -- one broker's routing state for the three strategies the paper compares:
  identity-based (forward a (un)subscription to the parent only when it changes the parent's
  entry set), simple (forward every one to the root) and flooding (no subscription
  forwarding, every notification to every neighbour but the one it came from);
* ``local_events`` -- a broker's own seeded workload: Poisson subscription arrivals with
  lifetimes and Poisson publications, started in equilibrium, drawn with the simulation's
  generators (``simulation._poisson``, ``_residual``, ``_lifetime``);
* ``time_scaled`` and ``predictions`` -- the model's per-broker figures for the run's
  strategy, in messages per *wall* second of a time-compressed run.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from gridstat.analysis import model
from gridstat.analysis import simulation as sim
from gridstat.analysis.workloads import Workload
from gridstat.errors import ValidationError

STRATEGIES = ("identity", "simple", "flooding")
#: Message sources / destinations of a ``Router`` that are not child indices.
LOCAL, PARENT = -1, -2
#: Event kinds of ``local_events``.
ARRIVE, DEPART, PUBLISH = "arrive", "depart", "publish"
#: The metrics a run measures and the model predicts, per broker (docs/analysis.md, "Live run").
METRICS = ("table_entries", "local_subscriptions", "control_sent_per_s", "control_received_per_s",
           "notifications_sent_per_s", "notifications_received_per_s")


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValidationError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}", field="strategy")
    return strategy


class Router:
    """One broker's routing table for every filter class, under one strategy.

    ``children`` are indexed 0..n-1 (the order of the tree's children); ``entries`` is the
    routing-table size the model calls remote entries: (class, child) pairs with an entry.
    Every method returns the destinations (``PARENT`` or child indices) of the messages to send.
    """

    def __init__(self, strategy: str, children: int, *, root: bool) -> None:
        self.strategy = check_strategy(strategy)
        self.children = children
        self.root = root
        self.local: dict[int, int] = {}
        #: class -> child -> subscriptions behind that child (identity-based: always 1)
        self.kids: dict[int, dict[int, int]] = {}
        #: classes the parent holds an entry for us (identity-based state 1)
        self.told: set[int] = set()
        self.entries = 0
        #: the broker's own active subscriptions, all classes
        self.local_total = 0

    def subscribe(self, cls: int, src: int) -> list[int]:
        return self._change(cls, src, +1)

    def unsubscribe(self, cls: int, src: int) -> list[int]:
        return self._change(cls, src, -1)

    def _change(self, cls: int, src: int, d: int) -> list[int]:
        if src == LOCAL:
            self.local[cls] = self.local.get(cls, 0) + d
            self.local_total += d
            if self.local[cls] <= 0:
                del self.local[cls]
        elif self.strategy != "flooding":
            per = self.kids.setdefault(cls, {})
            before = per.get(src, 0)
            after = max(0, before + d) if self.strategy == "simple" else (1 if d > 0 else 0)
            if after:
                per[src] = after
            else:
                per.pop(src, None)
                if not per:
                    del self.kids[cls]
            self.entries += (after > 0) - (before > 0)
        if self.root or self.strategy == "flooding":
            return []
        if self.strategy == "simple":
            return [PARENT]
        state = cls in self.local or cls in self.kids
        if state == (cls in self.told):
            return []
        (self.told.add if state else self.told.discard)(cls)
        return [PARENT]

    def notify(self, cls: int, src: int) -> list[int]:
        """Where a notification of ``cls`` from ``src`` (``LOCAL``, ``PARENT`` or a child) goes next."""
        out = [] if self.root or src == PARENT else [PARENT]
        if self.strategy == "flooding":
            return out + [c for c in range(self.children) if c != src]
        per = self.kids.get(cls, {})
        return out + [c for c in per if c != src]


@dataclass(frozen=True)
class ClassParams:
    """One filter class at one broker: arrival rate, mean lifetime, publication rate (per second)."""

    cls: int
    arrival_per_s: float
    lifetime_s: float
    publish_per_s: float
    distribution: str


def broker_classes(workload: Workload, b: int) -> list[ClassParams]:
    """Every class (groups expanded, numbered 0..|F|-1 in file order) that is active at broker ``b``."""
    out: list[ClassParams] = []
    base = 0
    for g in workload.groups:
        lam, life, pub = g.arrival_per_s[b], g.lifetime_s[b], g.publish_per_s[b]
        if lam > 0 or pub > 0:
            out.extend(ClassParams(base + i, lam, life, pub, g.lifetime_distribution) for i in range(g.count))
        base += g.count
    return out


def _pick(rng: random.Random, weights: list[float], total: float) -> int:
    x = rng.random() * total
    for i, w in enumerate(weights):
        x -= w
        if x < 0:
            return i
    return len(weights) - 1


def local_events(classes: list[ClassParams], rng: random.Random, horizon_s: float) -> Iterator[tuple[float, str, int]]:
    """``(t, kind, class)`` in time order up to ``horizon_s``: the broker's own subscriptions and publications.

    The population starts in equilibrium (Poisson(``lambda/mu``) per class with residual
    lifetimes, as in ``simulation``), announced as arrivals at ``t = 0``.
    """
    heap: list[tuple[float, int, str, int]] = []
    n = 0
    for c in classes:
        if c.arrival_per_s > 0:
            for _ in range(sim._poisson(rng, c.arrival_per_s * c.lifetime_s)):
                heap.append((0.0, n, ARRIVE, c.cls))
                heap.append((sim._residual(rng, c.distribution, c.lifetime_s), n + 1, DEPART, c.cls))
                n += 2
    heapq.heapify(heap)
    subs = [c for c in classes if c.arrival_per_s > 0]
    pubs = [c for c in classes if c.publish_per_s > 0]
    lam_w = [c.arrival_per_s for c in subs]
    pub_w = [c.publish_per_s for c in pubs]
    lam, pub = sum(lam_w), sum(pub_w)
    if lam > 0:
        heapq.heappush(heap, (rng.expovariate(lam), n, "next-arrival", -1))
    if pub > 0:
        heapq.heappush(heap, (rng.expovariate(pub), n + 1, "next-publish", -1))
    n += 2
    while heap:
        t, _, kind, cls = heapq.heappop(heap)
        if t > horizon_s:
            return
        if kind == "next-arrival":
            c = subs[_pick(rng, lam_w, lam)]
            heapq.heappush(heap, (t + sim._lifetime(rng, c.distribution, c.lifetime_s), n, DEPART, c.cls))
            heapq.heappush(heap, (t + rng.expovariate(lam), n + 1, "next-arrival", -1))
            n += 2
            yield t, ARRIVE, c.cls
        elif kind == "next-publish":
            heapq.heappush(heap, (t + rng.expovariate(pub), n, "next-publish", -1))
            n += 1
            yield t, PUBLISH, pubs[_pick(rng, pub_w, pub)].cls
        else:
            yield t, kind, cls


def time_scaled(workload: Workload, factor: float) -> Workload:
    """The workload run ``factor`` times faster: rates times ``factor``, lifetimes divided by it.

    Loads ``lambda/mu`` (so routing-table sizes) are unchanged; every rate is ``factor`` times the
    original one, which is what a wall-clock run of a compressed workload measures.
    """
    if not math.isfinite(factor) or factor <= 0:
        raise ValidationError(f"time scale must be > 0, got {factor}", field="time_scale")
    return replace(workload, groups=tuple(replace(
        g, arrival_per_s=tuple(x * factor for x in g.arrival_per_s),
        lifetime_s=tuple(x / factor for x in g.lifetime_s),
        publish_per_s=tuple(x * factor for x in g.publish_per_s)) for g in workload.groups))


def default_time_scale(workload: Workload, seconds: float, lifetimes_per_run: float = 20.0) -> float:
    """A scale that fits ``lifetimes_per_run`` mean lifetimes (the longest one) into ``seconds``; never below 1."""
    longest = max((life for g in workload.groups for lam, life in zip(g.arrival_per_s, g.lifetime_s, strict=True)
                   if lam > 0), default=0.0)
    return max(1.0, lifetimes_per_run * longest / seconds) if seconds > 0 else 1.0


def predictions(analysis: model.Analysis, strategy: str) -> list[dict[str, Any]]:
    """Per broker, the model's value of every ``METRICS`` entry under ``strategy`` (rates per second)."""
    check_strategy(strategy)
    tree = analysis.workload.tree
    omega = analysis.workload.publication_rate
    figs = analysis.brokers
    out: list[dict[str, Any]] = []
    for b, f in enumerate(figs):
        kids = tree.children[b]
        if strategy == "flooding":
            up = 0.0 if b == tree.root else f.uplink_up_rate
            sent = up + sum(omega - figs[c].uplink_up_rate for c in kids)
            received = (0.0 if b == tree.root else omega - up) + sum(figs[c].uplink_up_rate for c in kids)
            table = ctl = ctl_in = 0.0
        else:
            sent, received, table = f.sent_rate, f.received_rate, f.remote_entries
            attr = "control_rate" if strategy == "identity" else "simple_control_rate"
            ctl, ctl_in = float(getattr(f, attr)), sum(float(getattr(figs[c], attr)) for c in kids)
        out.append({"broker": f.name, "depth": f.depth, "table_entries": table, "local_subscriptions": f.local_entries,
                    "control_sent_per_s": ctl, "control_received_per_s": ctl_in, "notifications_sent_per_s": sent,
                    "notifications_received_per_s": received})
    return out


class Meter:
    """What a broker measures over one sampling period: time-averaged table and local sizes, message counts.

    Times are the caller's clock in seconds; ``level`` changes accumulate area so the period's
    average is exact (the same time average the simulation takes), not a point sample.
    """

    COUNTERS = ("control_sent", "control_received", "notifications_sent", "notifications_received",
                "notifications_published", "subscriptions_started")

    def __init__(self, now: float) -> None:
        self.entries = 0
        self.local = 0
        self.counts = dict.fromkeys(self.COUNTERS, 0)
        self._since = self._last = now
        self._entries_area = self._local_area = 0.0

    def level(self, now: float, entries: int, local: int) -> None:
        dt = now - self._last
        self._entries_area += self.entries * dt
        self._local_area += self.local * dt
        self._last = now
        self.entries, self.local = entries, local

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def period(self, now: float) -> dict[str, Any]:
        """The period since the last call (or start): averages and counts; then a new period begins."""
        self.level(now, self.entries, self.local)
        span = now - self._since
        out: dict[str, Any] = {
            "period_ms": round(span * 1000), "entries": self.entries,
            "entries_avg": self._entries_area / span if span > 0 else float(self.entries),
            "local_subscriptions_avg": self._local_area / span if span > 0 else float(self.local),
            **self.counts}
        self.counts = dict.fromkeys(self.COUNTERS, 0)
        self._since = now
        self._entries_area = self._local_area = 0.0
        return out


def within(measured: float, predicted: float, rel_tol: float, abs_tol: float) -> bool:
    """The tolerance rule of the Spark job: ``|measured - predicted| <= rel_tol |predicted| + abs_tol``."""
    return abs(measured - predicted) <= rel_tol * abs(predicted) + abs_tol
