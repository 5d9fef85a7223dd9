"""Accuracy of the subscription mapping: bandwidth budgets, rate estimates, coarsening and refining.

Seed 004, section 5.1: a subscriber may receive more than it asked for (false positives) as
long as its incoming rate stays within its share of its access bandwidth, ``R(s) <= B(s)/(m+1)``
(section 2: it must be able to forward every event to up to ``m`` children). It adjusts its
peer-level mapping one step at a time: *coarsen* (replace enclosed sub-spaces by one from
``DZ_-1``) when it cannot find a parent that meets its delay (Algorithm 2, TimeOut), *refine*
(replace a sub-space with many false positives by its relevant part of ``DZ_+1``) when the
rate breaks the budget (Algorithm 2, BandwidthViolated). Coarsening never leaves the budget;
refining keeps the existing parents, since the finer mapping is covered by the old one.

Rates come from a ``RateModel``: ``UniformRates`` (events spread evenly, the paper's
evaluation), ``CatalogueRates`` (GridStat: every status variable's attribute point and
publication rate are known from its advertisement, so rates are exact) or ``MeasuredRates``
(the paper's way: count what arrives for ``DZ_+1``, aggregate other peers' piggybacked
measurements for ``DZ_-1``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gridstat.errors import ValidationError
from gridstat.granularity import dz
from gridstat.granularity.space import Rectangle

#: Bytes one status event costs on the wire: 16-byte event head + 8-byte scalar (docs/wire-format.md).
EVENT_BYTES = 24


class BandwidthTooLow(ValidationError):
    """A bandwidth limit that cannot carry what is asked (below one event, or below the exact subscription)."""

    reason = "BandwidthBelowOneEvent"


class RateModel(Protocol):
    """Events per second in a sub-space, and the part of them outside a user-level rectangle."""

    def rate(self, expr: str) -> float: ...

    def false_positive_rate(self, expr: str, rect: Rectangle) -> float: ...


@dataclass(frozen=True)
class UniformRates:
    """Events spread evenly over ``Omega`` at ``total_eps`` (the paper's uniform event distribution)."""

    total_eps: float

    def rate(self, expr: str) -> float:
        return self.total_eps * dz.volume(expr)

    def false_positive_rate(self, expr: str, rect: Rectangle) -> float:
        return self.rate(expr) * (1.0 - dz.overlap_fraction(expr, rect))


@dataclass(frozen=True)
class SurgeRates:
    """Uniform events at ``total_eps`` except in the sub-space ``surge``, which publishes ``factor`` times as fast.

    A change in the event rate (section 5: what raises BandwidthViolated), e.g. the status
    variables of one region reporting faster during a disturbance.
    """

    total_eps: float
    surge: str
    factor: float

    def __post_init__(self) -> None:
        dz.check(self.surge)
        if not (math.isfinite(self.factor) and self.factor >= 0):
            raise ValidationError(f"surge factor must be a finite number >= 0, got {self.factor}", field="factor")

    def rate(self, expr: str) -> float:
        both = dz.intersection(expr, self.surge)
        extra = 0.0 if both is None else (self.factor - 1.0) * self.total_eps * dz.volume(both)
        return self.total_eps * dz.volume(expr) + extra

    def false_positive_rate(self, expr: str, rect: Rectangle) -> float:
        base = self.total_eps * dz.volume(expr) * (1.0 - dz.overlap_fraction(expr, rect))
        both = dz.intersection(expr, self.surge)
        if both is None:
            return base
        return base + (self.factor - 1.0) * self.total_eps * dz.volume(both) * (1.0 - dz.overlap_fraction(both, rect))


@dataclass(frozen=True)
class CatalogueRates:
    """Exact rates from a catalogue of status variables: ``(point, events/s)`` each (GridStat's advertisements)."""

    variables: tuple[tuple[tuple[float, ...], float], ...]

    def rate(self, expr: str) -> float:
        return sum(r for p, r in self.variables if dz.contains(expr, p))

    def false_positive_rate(self, expr: str, rect: Rectangle) -> float:
        return sum(r for p, r in self.variables if dz.contains(expr, p) and not rect.contains(p))


class MeasuredRates:
    """The paper's estimates: counted arrivals for what the peer receives, aggregated reports for the rest.

    ``observe`` counts received events by their point; ``report`` stores another peer's
    measured rate for a sub-space (piggybacked on peer-view maintenance, section 5.1).
    ``rate`` of a sub-space the peer receives whole is its count over the window; otherwise
    the reports inside it give an event density (statistical aggregation) that is scaled to
    its volume.
    """

    def __init__(self, *, depth: int, window_s: float) -> None:
        if window_s <= 0:
            raise ValidationError(f"window_s must be > 0, got {window_s}", field="window_s")
        self.depth = depth
        self.window_s = window_s
        self.receiving: frozenset[str] = frozenset()
        self._counts: dict[str, int] = {}
        self._fp: dict[str, int] = {}
        self._reports: dict[str, float] = {}

    def observe(self, point: Sequence[float], *, matched: bool, n: int = 1) -> None:
        key = dz.point_dz(point, self.depth)
        self._counts[key] = self._counts.get(key, 0) + n
        if not matched:
            self._fp[key] = self._fp.get(key, 0) + n

    def report(self, expr: str, eps: float) -> None:
        self._reports[dz.check(expr)] = eps

    def reset(self) -> None:
        self._counts.clear()
        self._fp.clear()

    def _counted(self, expr: str, counts: Mapping[str, int]) -> float:
        return sum(c for k, c in counts.items() if dz.covers(expr, k)) / self.window_s

    def rate(self, expr: str) -> float:
        if dz.covered_by(expr, self.receiving):
            return self._counted(expr, self._counts)
        inside = dz.minimal(k for k in self._reports if dz.covers(expr, k))
        outside = [k for k in self._reports if dz.covers(k, expr)]
        if inside:
            vol = sum(dz.volume(k) for k in inside)
            return sum(self._reports[k] for k in inside) / vol * dz.volume(expr)
        if outside:
            k = min(outside, key=len, default=None)
            if k is not None:
                return self._reports[k] * dz.volume(expr) / dz.volume(k)
        return math.inf  # unknown: never coarsen into the dark

    def false_positive_rate(self, expr: str, rect: Rectangle) -> float:
        if dz.covered_by(expr, self.receiving):
            return self._counted(expr, self._fp)
        return self.rate(expr) * (1.0 - dz.overlap_fraction(expr, rect))


def mapping_rate(mapping: Iterable[str], rates: RateModel) -> float:
    """``R(s)``: events per second a peer-level mapping brings in (nested sub-spaces counted once)."""
    return sum(rates.rate(x) for x in dz.minimal(mapping))


def mapping_false_positives(mapping: Iterable[str], rect: Rectangle, rates: RateModel) -> float:
    return sum(rates.false_positive_rate(x, rect) for x in dz.minimal(mapping))


@dataclass(frozen=True)
class Budget:
    """A subscriber's incoming budget ``B(s)/(m+1)`` in events per second (section 2)."""

    bandwidth_eps: float
    out_degree: int

    def __post_init__(self) -> None:
        if isinstance(self.out_degree, bool) or not isinstance(self.out_degree, int) or self.out_degree < 0:
            raise ValidationError(f"out-degree m must be an integer >= 0, got {self.out_degree!r}",
                                  field="out_degree")
        if not math.isfinite(self.bandwidth_eps) or self.bandwidth_eps <= 0 or self.incoming_eps < 1.0:
            raise BandwidthTooLow(
                f"bandwidth {self.bandwidth_eps:g} events/s leaves {self.bandwidth_eps / (self.out_degree + 1):g} "
                f"events/s to receive with out-degree {self.out_degree} (B/(m+1)); that is below one event per "
                "second", field="bandwidth")

    @classmethod
    def from_bytes(cls, bandwidth_bps: float, out_degree: int, *, event_bytes: int = EVENT_BYTES) -> Budget:
        """A budget from an access bandwidth in bytes/s; below one event (of ``event_bytes``) per second is an error."""
        if not math.isfinite(bandwidth_bps) or bandwidth_bps / (out_degree + 1) < event_bytes:
            raise BandwidthTooLow(f"bandwidth {bandwidth_bps:g} bytes/s with out-degree {out_degree} leaves less "
                                  f"than one {event_bytes}-byte event per second to receive", field="bandwidth")
        return cls(bandwidth_bps / event_bytes, out_degree)

    @property
    def incoming_eps(self) -> float:
        return self.bandwidth_eps / (self.out_degree + 1)

    def admits(self, rate_eps: float) -> bool:
        return rate_eps <= self.incoming_eps * (1 + 1e-12)


def accurate_mapping(rect: Rectangle, rates: RateModel, budget: Budget, *, max_depth: int) -> dz.DzSet:
    """The exact mapping; ``BandwidthTooLow`` (reason ``BandwidthBelowSubscription``) if even it breaks the budget."""
    mapping = dz.encode(rect, max_depth=max_depth)
    need = mapping_rate(mapping, rates) - mapping_false_positives(mapping, rect, rates)
    if not budget.admits(need):
        raise BandwidthTooLow(f"the subscription alone brings {need:.3g} events/s, above the incoming budget of "
                              f"{budget.incoming_eps:.3g} events/s (B/(m+1))", field="bandwidth",
                              reason="BandwidthBelowSubscription")
    return mapping


def coarsen(mapping: Iterable[str], rates: RateModel, budget: Budget, *, step: int,
            target: str | None = None) -> dz.DzSet | None:
    """One coarsening step (Algorithm 2, TimeOut): replace enclosed sub-spaces by one from ``DZ_-1``.

    With ``target`` (the sub-space no parent covers) only its own coarser sub-space is tried;
    otherwise the ``DZ_-1`` candidate that adds the fewest events per second. ``None`` if no
    candidate stays within the budget (or the mapping is ``{ε}`` already).
    """
    current = dz.minimal(mapping)
    if step < 1:
        raise ValidationError(f"step must be >= 1, got {step}", field="step")
    pool = [dz.coarser(target, step)] if target is not None else sorted(dz.coarser_set(current, step))
    best: tuple[float, dz.DzSet] | None = None
    now = mapping_rate(current, rates)
    for c in pool:
        if c in current:
            continue
        new = dz.minimal([*(x for x in current if not dz.covers(c, x)), c])
        r = mapping_rate(new, rates)
        if budget.admits(r) and (best is None or r - now < best[0]):
            best = (r - now, new)
    return None if best is None else best[1]


@dataclass(frozen=True)
class Refinement:
    mapping: dz.DzSet
    rate_eps: float
    within_budget: bool


def refine(mapping: Iterable[str], rect: Rectangle, rates: RateModel, budget: Budget, *, step: int,
           max_depth: int) -> Refinement:
    """Refine until the budget holds (Algorithm 2, BandwidthViolated).

    Repeatedly replaces the sub-space with the most false positives per second by its
    relevant ``DZ_+1`` children. The new mapping is covered by the old one, so existing
    parents stay. ``within_budget`` is False when nothing is left to refine (the exact
    mapping itself is over budget, or ``max_depth`` reached).
    """
    current = set(dz.minimal(mapping))
    while True:
        r = mapping_rate(current, rates)
        if budget.admits(r):
            return Refinement(frozenset(current), r, True)
        scored = [(rates.false_positive_rate(x, rect), x) for x in current if len(x) + step <= max_depth]
        scored = [s for s in scored if s[0] > 0]
        if not scored:
            return Refinement(frozenset(current), r, False)
        _, worst = max(scored)
        current.remove(worst)
        current |= dz.finer(worst, rect, step)
