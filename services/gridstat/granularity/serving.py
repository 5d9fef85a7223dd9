"""Which subscriptions ride the relay overlay, and the relay plan for those that do.

GridStat's router paths are for guarantees: the QoS broker admits a subscription whole, with
its interval, latency bound and disjoint paths, and reserves for it. Dashboards, archives
and historians want something else: many variables selected by attributes ("all bus
voltages in the west"), a delay they can *tolerate* rather than a bound they must have, and
a cap on what their link can take. Seed 004 serves exactly those with a peer overlay. So:

* a ``hard`` subscription always takes a router path (``PATH_ROUTER``); nothing here touches it;
* a ``best-effort`` subscription with a delay tolerance and a bandwidth limit takes the
  overlay (``PATH_OVERLAY``): it is a relay peer, fed by a *feed* peer (a best-effort router
  subscription at an edge router, the overlay's publisher with ``Delta = 0``).

Delay is counted in relay hops (the paper's metric): a tolerance of ``T`` ms over relay hops
of ``h`` ms each allows ``Delta = T / h`` hops. Bad input gets a specific error: a tolerance
below one hop (``ImpossibleDelayTolerance``), a bandwidth below one event per second after
reserving ``m`` forwards (``BandwidthBelowOneEvent``), a subscription whose exact rate is
already above its budget (``BandwidthBelowSubscription``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, dz, overlay, simulating
from gridstat.granularity.space import AttributeSpace, Rectangle

GUARANTEES = ("hard", "best-effort")
PATH_ROUTER = "router"
PATH_OVERLAY = "overlay"
#: Relay hop delay assumed when none is given: one UDP hop between pods plus a Python relay's batching.
DEFAULT_HOP_DELAY_MS = 2.0


@dataclass(frozen=True)
class Declared:
    """A subscription as declared, validated, with the path it takes."""

    name: str
    rect: Rectangle
    guarantee: str
    path: str
    #: hops the subscriber tolerates (``Delta``); 0 for router-path subscriptions
    delta_hops: float
    budget: accuracy.Budget | None


def declare(space: AttributeSpace, *, name: str, constraints: Mapping[str, object], guarantee: str = "best-effort",
            delay_tolerance_ms: float | None = None, bandwidth_eps: float | None = None, out_degree: int = 4,
            hop_delay_ms: float = DEFAULT_HOP_DELAY_MS) -> Declared:
    """Validate a subscription and choose its path.

    Raises:
        ValidationError: unknown guarantee or attribute; reason ``ImpossibleDelayTolerance`` when
            the tolerance is not above zero or below one relay hop; ``MissingParameter`` when a
            best-effort subscription lacks its tolerance or bandwidth.
        BandwidthTooLow: reason ``BandwidthBelowOneEvent`` (budget under one event/s).
    """
    if guarantee not in GUARANTEES:
        raise ValidationError(f"{name}: guarantee must be one of {', '.join(GUARANTEES)}, got {guarantee!r}",
                              field="guarantee")
    rect = space.rectangle(constraints)
    if guarantee == "hard":
        return Declared(name, rect, guarantee, PATH_ROUTER, 0.0, None)
    if delay_tolerance_ms is None or bandwidth_eps is None:
        missing = "delay_tolerance_ms" if delay_tolerance_ms is None else "bandwidth_eps"
        raise ValidationError(f"{name}: a best-effort relay subscription needs {missing}", field=missing,
                              reason="MissingParameter")
    if not math.isfinite(hop_delay_ms) or hop_delay_ms <= 0:
        raise ValidationError(f"hop delay must be > 0 ms, got {hop_delay_ms}", field="hop_delay_ms")
    if not math.isfinite(delay_tolerance_ms) or delay_tolerance_ms < hop_delay_ms:
        raise ValidationError(f"{name}: a delay tolerance of {delay_tolerance_ms} ms is impossible: one relay hop "
                              f"takes {hop_delay_ms} ms", field="delay_tolerance_ms",
                              reason="ImpossibleDelayTolerance")
    budget = accuracy.Budget(bandwidth_eps, out_degree)
    return Declared(name, rect, guarantee, PATH_OVERLAY, delay_tolerance_ms / hop_delay_ms, budget)


@dataclass(frozen=True)
class RelayPlan:
    """Relay peers and feeds after Algorithm 1/2: who forwards what to whom."""

    peers: Mapping[str, overlay.PeerState]
    rects: Mapping[str, Rectangle]
    hops: Mapping[str, float]
    rounds: int

    def notified(self, name: str) -> bool:
        return self.hops.get(name, math.inf) <= self.peers[name].delta

    def unserved(self) -> tuple[str, ...]:
        return tuple(sorted(p for p, s in self.peers.items() if not s.publisher and not self.notified(p)))


def plan_relays(space: AttributeSpace, subscriptions: Sequence[Declared], catalogue: accuracy.RateModel, *,
                feeds: Mapping[str, frozenset[str]], feed_out_degree: int, max_depth: int, rounds: int = 40,
                seed: int = 1) -> RelayPlan:
    """Arrange the overlay subscriptions (router-path ones are skipped) under the ``feeds``.

    ``feeds`` maps a feed peer to its advertisement (dz-expressions of what its router
    subscription brings); ``catalogue`` gives rates for the bandwidth budgets.
    """
    if not feeds:
        raise ValidationError("the overlay needs at least one feed", field="feeds")
    states: dict[str, overlay.PeerState] = {}
    for f, adv in feeds.items():
        states[f] = overlay.PeerState(f, frozenset(adv), 0.0, feed_out_degree, publisher=True)
    rects: dict[str, Rectangle] = {}
    budgets: dict[str, accuracy.Budget] = {}
    for sub in subscriptions:
        if sub.path != PATH_OVERLAY or sub.budget is None:
            continue
        if sub.name in states:
            raise ValidationError(f"duplicate peer {sub.name!r}", field="name")
        mapping = accuracy.accurate_mapping(sub.rect, catalogue, sub.budget, max_depth=max_depth)
        states[sub.name] = overlay.PeerState(sub.name, mapping, sub.delta_hops, sub.budget.out_degree)
        rects[sub.name] = sub.rect
        budgets[sub.name] = sub.budget

    def relevant(target: str) -> frozenset[str]:
        return frozenset(f for f, adv in feeds.items() if any(dz.intersects(a, target) for a in adv))

    built = simulating.build_overlay(states, budgets, catalogue, relevant, rects=rects, max_depth=max_depth,
                                     rounds=rounds, view_fraction=1.0, rng=random.Random(seed))
    return RelayPlan(built.states, rects, built.hops, len(built.rounds))
