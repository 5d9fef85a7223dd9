"""Per-broker workload of the capacity model: filter classes, arrival rates, lifetimes, publication rates.

Seed 001 (section 3.1) models, for every broker ``B`` and filter class ``f``: Poisson
subscription arrivals at rate ``lambda^f(B)``, lifetimes of any distribution with mean
``mu^f(B)^-1``, and publications at rate ``omega^f(B)``. In GridStat a filter class is a
status variable (or a set of variables subscribed to as one), a broker is a status router
of the overlay tree, and a subscription arrives where its subscriber's edge router is.

Real workloads have few *kinds* of classes and many classes of each kind (a thousand
PMU phasors with the same rates), so a ``ClassGroup`` carries per-broker parameters once
and a ``count`` of identical classes. The equations are per class and the totals sums over
classes, so a group contributes ``count`` times its one-class figures: exact, and it keeps
the model pure Python for the running example's 1000 classes over 127 brokers.

Only the mean lifetime enters the model (M/G/inf insensitivity, seed 001 section 4.1); the
lifetime distribution is kept for the discrete-event simulation, which checks exactly that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gridstat.analysis.trees import BrokerTree
from gridstat.errors import ValidationError

#: Lifetime distributions the simulation can draw (the model needs only the mean).
LIFETIME_DISTRIBUTIONS = ("exponential", "deterministic", "uniform")

#: The running example (seed 001, section 3.2).
PAPER_CLASSES = 1000
PAPER_LIFETIME_S = 60.0
PAPER_PUBLICATION_RATE = 1000.0


class MissingParameter(ValidationError):
    """A workload parameter the model needs is not given (e.g. a lifetime where subscriptions arrive)."""

    reason = "MissingParameter"


@dataclass(frozen=True)
class ClassGroup:
    """``count`` filter classes with the same per-broker parameters (tuples indexed like the tree's brokers).

    ``arrival_per_s[i]`` is ``lambda^f(B_i)``, ``lifetime_s[i]`` is ``mu^f(B_i)^-1`` (ignored where
    nothing arrives) and ``publish_per_s[i]`` is ``omega^f(B_i)``, each for *one* class of the group.
    """

    name: str
    count: int
    arrival_per_s: tuple[float, ...]
    lifetime_s: tuple[float, ...]
    publish_per_s: tuple[float, ...]
    lifetime_distribution: str = "exponential"

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValidationError(f"class group {self.name!r}: count must be an integer >= 1, got {self.count!r}",
                                  field="count")
        n = len(self.arrival_per_s)
        if len(self.lifetime_s) != n or len(self.publish_per_s) != n:
            raise ValidationError(f"class group {self.name!r}: per-broker parameters differ in length",
                                  field="brokers")
        for what, values in (("arrival_per_s", self.arrival_per_s), ("publish_per_s", self.publish_per_s),
                             ("lifetime_s", self.lifetime_s)):
            for v in values:
                if not math.isfinite(v) or v < 0:
                    raise ValidationError(f"class group {self.name!r}: {what} must be finite and >= 0, got {v}",
                                          field=what)
        for i, (lam, life) in enumerate(zip(self.arrival_per_s, self.lifetime_s, strict=True)):
            if lam > 0 and life <= 0:
                raise MissingParameter(f"class group {self.name!r}: subscriptions arrive at broker #{i} but no "
                                       "lifetime is given", field="lifetime_s")
        if self.lifetime_distribution not in LIFETIME_DISTRIBUTIONS:
            raise ValidationError(f"class group {self.name!r}: lifetime distribution "
                                  f"{self.lifetime_distribution!r} is not one of {', '.join(LIFETIME_DISTRIBUTIONS)}",
                                  field="lifetime_distribution")

    def load(self, b: int) -> float:
        """``lambda/mu``: the mean number of local subscriptions of one class at broker ``b`` (eq. 2)."""
        return self.arrival_per_s[b] * self.lifetime_s[b] if self.arrival_per_s[b] > 0 else 0.0


@dataclass(frozen=True)
class Workload:
    """A broker tree and the filter classes published and subscribed on it."""

    tree: BrokerTree
    groups: tuple[ClassGroup, ...]

    def __post_init__(self) -> None:
        if not self.groups:
            raise MissingParameter("a workload needs at least one filter class", field="classes")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValidationError("class group names must be unique", field="classes")
        for g in self.groups:
            if len(g.arrival_per_s) != len(self.tree):
                raise ValidationError(f"class group {g.name!r} has parameters for {len(g.arrival_per_s)} brokers, "
                                      f"the tree has {len(self.tree)}", field="classes")

    @property
    def classes(self) -> int:
        """``|F|``."""
        return sum(g.count for g in self.groups)

    @property
    def subscriptions(self) -> float:
        """The mean overall number of subscriptions ``N_s`` (the running example's x axis)."""
        return sum(g.count * sum(g.load(b) for b in range(len(self.tree))) for g in self.groups)

    @property
    def publication_rate(self) -> float:
        """``omega``: notifications published per second, all classes and brokers."""
        return sum(g.count * sum(g.publish_per_s) for g in self.groups)

    def scaled(self, factor: float) -> Workload:
        """The same workload with every subscription arrival rate (so ``N_s``) multiplied by ``factor``."""
        if not math.isfinite(factor) or factor < 0:
            raise ValidationError(f"scale factor must be finite and >= 0, got {factor}", field="factor")
        return replace(self, groups=tuple(replace(g, arrival_per_s=tuple(x * factor for x in g.arrival_per_s))
                                          for g in self.groups))

    def with_publication_rate(self, omega: float) -> Workload:
        """The same workload with every publication rate scaled so that ``omega`` is the overall rate."""
        now = self.publication_rate
        if now <= 0:
            raise ValidationError("the workload publishes nothing; cannot rescale it", field="publication_rate")
        k = omega / now
        return replace(self, groups=tuple(replace(g, publish_per_s=tuple(x * k for x in g.publish_per_s))
                                          for g in self.groups))


def uniform_workload(tree: BrokerTree, *, subscriptions: float, classes: int = PAPER_CLASSES,
                     lifetime_s: float = PAPER_LIFETIME_S, publication_rate: float = PAPER_PUBLICATION_RATE,
                     lifetime_distribution: str = "exponential") -> Workload:
    """The running example's setting: ``N_s`` subscriptions and ``omega`` spread evenly over brokers and classes.

    ``lambda^f(B)/mu^f(B) = rho = N_s / (|B| |F|)`` and ``omega^f(B) = omega / (|B| |F|)`` (seed 001,
    section 3.2; docs/analysis.md).
    """
    if not math.isfinite(subscriptions) or subscriptions < 0:
        raise ValidationError(f"subscriptions must be finite and >= 0, got {subscriptions}", field="subscriptions")
    if not math.isfinite(lifetime_s) or lifetime_s <= 0:
        raise MissingParameter(f"lifetime_s must be > 0, got {lifetime_s}", field="lifetime_s")
    if not math.isfinite(publication_rate) or publication_rate < 0:
        raise ValidationError(f"publication_rate must be finite and >= 0, got {publication_rate}",
                              field="publication_rate")
    n = len(tree)
    rho = subscriptions / (n * classes)
    group = ClassGroup(
        name="uniform",
        count=classes,
        arrival_per_s=(rho / lifetime_s,) * n,
        lifetime_s=(lifetime_s,) * n,
        publish_per_s=(publication_rate / (n * classes),) * n,
        lifetime_distribution=lifetime_distribution,
    )
    return Workload(tree, (group,))


def per_broker(values: Sequence[float], tree: BrokerTree) -> tuple[float, ...]:
    """Check a per-broker sequence against the tree and freeze it."""
    if len(values) != len(tree):
        raise ValidationError(f"expected {len(tree)} per-broker values, got {len(values)}", field="brokers")
    return tuple(float(v) for v in values)
