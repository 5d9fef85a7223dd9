"""A seeded discrete-event simulation of hierarchical identity-based routing, to check the model.

Mühl et al. validated their equations against simulation of over 1400 scenarios (seed 001,
section 3.2). This module is our version of that check: it does not evaluate any equation;
it runs the routing itself and counts.

* Every (broker, class) population is an M/G/inf queue: Poisson arrivals at ``lambda^f(B)``,
  lifetimes drawn from the group's distribution (exponential, deterministic or uniform on
  ``[0, 2 mean]``) with mean ``mu^f(B)^-1``. The run starts in equilibrium: Poisson(``lambda/mu``)
  subscriptions per broker with residual lifetimes from the excess distribution, so no
  warm-up is discarded.
* Each broker keeps its local count and the set of children it has a routing entry for; a
  broker whose subtree goes from empty to non-empty (or back) sends one toggle to its parent,
  which updates its entry and may toggle in turn (identity-based routing, section 2).
  Simple routing is counted alongside: every subscription and unsubscription costs ``depth(B)``
  messages to the root.
* Notifications are published as Poisson processes at ``omega^f(B)`` and routed hop by hop:
  up to the root, and down every link whose routing entry exists, never back where they came
  from. Every link crossed counts one message.

Classes are independent and the classes of a group identical, so each group is simulated as
``replicas`` independent classes; the group's estimate is ``count`` times their mean and the
standard error comes from their spread. The model should sit within a few standard errors
(the tests use 4) of every estimate.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass

from gridstat.analysis.trees import BrokerTree
from gridstat.analysis.workloads import ClassGroup, Workload
from gridstat.errors import ValidationError

_ARRIVE, _DEPART, _PUBLISH = 0, 1, 2


@dataclass(frozen=True)
class Estimate:
    """A simulated figure: mean over replicas (scaled to the group counts) and its standard error."""

    mean: float
    stderr: float

    def z(self, expected: float) -> float:
        """How many standard errors ``expected`` lies from the mean (``inf`` when the error is 0 and they differ)."""
        d = abs(self.mean - expected)
        if self.stderr > 0:
            return d / self.stderr
        return 0.0 if d <= 1e-9 * max(1.0, abs(expected)) else math.inf


@dataclass(frozen=True)
class SimulationResult:
    """Simulated counterparts of the model's totals, plus per-broker routing-table sizes and toggle rates."""

    horizon_s: float
    replicas: int
    seed: int
    local_entries: Estimate
    remote_entries: Estimate
    notification_rate: Estimate
    b_c: Estimate
    b_cs: Estimate
    broker_remote_entries: tuple[float, ...]
    broker_control_rate: tuple[float, ...]
    events: int


@dataclass
class _ClassRun:
    """What one simulated class produced over the horizon."""

    local_area: float = 0.0
    remote_area: float = 0.0
    notifications: int = 0
    toggles: int = 0
    simple: int = 0
    events: int = 0


def _lifetime(rng: random.Random, dist: str, mean: float) -> float:
    if dist == "exponential":
        return rng.expovariate(1.0 / mean)
    if dist == "deterministic":
        return mean
    return rng.uniform(0.0, 2.0 * mean)  # uniform


def _residual(rng: random.Random, dist: str, mean: float) -> float:
    """A residual lifetime in equilibrium: density ``(1 - F(x)) / mean`` (the excess distribution)."""
    if dist == "exponential":
        return rng.expovariate(1.0 / mean)
    if dist == "deterministic":
        return rng.uniform(0.0, mean)
    return 2.0 * mean * (1.0 - math.sqrt(1.0 - rng.random()))  # uniform on [0, 2 mean]


def _poisson(rng: random.Random, mean: float) -> int:
    """Poisson variate (inversion for small means, normal approximation above 500)."""
    if mean <= 0:
        return 0
    if mean > 500:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    k, p, s = 0, math.exp(-mean), math.exp(-mean)
    u = rng.random()
    while u > s:
        k += 1
        p *= mean / k
        s += p
    return k


def _simulate_class(tree: BrokerTree, g: ClassGroup, horizon: float, rng: random.Random,
                    broker_area: list[float], broker_toggles: list[int]) -> _ClassRun:
    n = len(tree)
    parents, children, depths, root = tree.parents, tree.children, tree.depths, tree.root
    local = [0] * n
    kids = [0] * n         # children this broker holds a routing entry for
    entry = [False] * n    # state 1: something for this class in the subtree (the parent's entry for it)
    last = [0.0] * n       # last change of kids[b], for the time average of per-broker entries
    heap: list[tuple[float, int, int]] = []
    dist = g.lifetime_distribution
    run = _ClassRun()

    for b in range(n):
        if g.arrival_per_s[b] > 0:
            for _ in range(_poisson(rng, g.load(b))):
                local[b] += 1
                heapq.heappush(heap, (_residual(rng, dist, g.lifetime_s[b]), _DEPART, b))
    for b in tree.post_order:  # equilibrium start: entries as the routing would have left them
        if local[b] or kids[b]:
            entry[b] = True
            if b != root:
                kids[parents[b]] += 1
    total_local = sum(local)
    total_remote = sum(kids)

    lam_cum: list[float] = []
    acc = 0.0
    for b in range(n):
        acc += g.arrival_per_s[b]
        lam_cum.append(acc)
    lam_total = acc
    pub_cum: list[float] = []
    acc = 0.0
    for b in range(n):
        acc += g.publish_per_s[b]
        pub_cum.append(acc)
    pub_total = acc
    if lam_total > 0:
        heapq.heappush(heap, (rng.expovariate(lam_total), _ARRIVE, -1))
    if pub_total > 0:
        heapq.heappush(heap, (rng.expovariate(pub_total), _PUBLISH, -1))

    now = 0.0
    while heap:
        t, kind, b = heapq.heappop(heap)
        if t > horizon:
            break
        run.local_area += total_local * (t - now)
        run.remote_area += total_remote * (t - now)
        now = t
        run.events += 1
        if kind == _PUBLISH:
            heapq.heappush(heap, (t + rng.expovariate(pub_total), _PUBLISH, -1))
            src = min(bisect.bisect_right(pub_cum, rng.random() * pub_total), n - 1)
            run.notifications += _route(src, parents, children, entry)
            continue
        if kind == _ARRIVE:
            heapq.heappush(heap, (t + rng.expovariate(lam_total), _ARRIVE, -1))
            b = min(bisect.bisect_right(lam_cum, rng.random() * lam_total), n - 1)
            local[b] += 1
            total_local += 1
            heapq.heappush(heap, (t + _lifetime(rng, dist, g.lifetime_s[b]), _DEPART, b))
        else:
            local[b] -= 1
            total_local -= 1
        run.simple += depths[b]
        # Identity-based propagation: toggles travel up while subtrees change between empty and not.
        x = b
        while x != root:
            now_entry = local[x] > 0 or kids[x] > 0
            if now_entry == entry[x]:
                break
            entry[x] = now_entry
            run.toggles += 1
            broker_toggles[x] += 1
            p = parents[x]
            broker_area[p] += kids[p] * (t - last[p])
            last[p] = t
            kids[p] += 1 if now_entry else -1
            total_remote += 1 if now_entry else -1
            x = p
        if x == root:
            entry[root] = local[root] > 0 or kids[root] > 0
    run.local_area += total_local * (horizon - now)
    run.remote_area += total_remote * (horizon - now)
    for b in range(n):
        broker_area[b] += kids[b] * (horizon - last[b])
    return run


def _route(src: int, parents: tuple[int, ...], children: tuple[tuple[int, ...], ...], entry: list[bool]) -> int:
    """Messages one notification published at ``src`` causes: up to the root, down every entry, never back."""
    msgs = 0
    stack: list[int] = []
    came_from = -1
    x = src
    while True:
        for c in children[x]:
            if c != came_from and entry[c]:
                stack.append(c)
        p = parents[x]
        if p == -1:
            break
        msgs += 1  # always up (hierarchical routing)
        came_from, x = x, p
    while stack:
        c = stack.pop()
        msgs += 1
        for cc in children[c]:
            if entry[cc]:
                stack.append(cc)
    return msgs


def simulate(workload: Workload, *, horizon_s: float, replicas: int = 8, seed: int = 1) -> SimulationResult:
    """Simulate ``replicas`` independent classes per group for ``horizon_s`` seconds each.

    Raises:
        ValidationError: horizon not positive, fewer than two replicas (no error estimate).
    """
    if not math.isfinite(horizon_s) or horizon_s <= 0:
        raise ValidationError(f"horizon_s must be > 0, got {horizon_s}", field="horizon_s")
    if replicas < 2:
        raise ValidationError(f"replicas must be >= 2 for an error estimate, got {replicas}", field="replicas")
    tree = workload.tree
    n = len(tree)
    rng = random.Random(seed)
    sums = {k: [0.0, 0.0] for k in ("loc", "rem", "not", "tog", "sim")}  # mean, variance of group totals
    area = [0.0] * n
    toggles = [0.0] * n
    events = 0
    for g in workload.groups:
        per: dict[str, list[float]] = {k: [] for k in sums}
        for _ in range(replicas):
            b_area = [0.0] * n
            b_tog = [0] * n
            r = _simulate_class(tree, g, horizon_s, random.Random(rng.getrandbits(64)), b_area, b_tog)
            events += r.events
            per["loc"].append(r.local_area / horizon_s)
            per["rem"].append(r.remote_area / horizon_s)
            per["not"].append(r.notifications / horizon_s)
            per["tog"].append(r.toggles / horizon_s)
            per["sim"].append(r.simple / horizon_s)
            w = g.count / replicas
            for b in range(n):
                area[b] += w * b_area[b] / horizon_s
                toggles[b] += w * b_tog[b] / horizon_s
        for k, xs in per.items():
            m = sum(xs) / replicas
            var = sum((x - m) ** 2 for x in xs) / (replicas - 1)
            sums[k][0] += g.count * m
            sums[k][1] += g.count ** 2 * var / replicas

    def est(k: str) -> Estimate:
        return Estimate(sums[k][0], math.sqrt(sums[k][1]))

    return SimulationResult(horizon_s=horizon_s, replicas=replicas, seed=seed, local_entries=est("loc"),
                            remote_entries=est("rem"), notification_rate=est("not"), b_c=est("tog"),
                            b_cs=est("sim"), broker_remote_entries=tuple(area), broker_control_rate=tuple(toggles),
                            events=events)
