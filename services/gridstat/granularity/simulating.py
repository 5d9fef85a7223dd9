"""A round-based simulation of the relay overlay (Algorithms 1 and 2), for the shapes of seed 004's results.

The paper used PeerSim with gossip peer sampling (pView = 5 % of the peers), ``n = 1024``
peers, ``m = log2 n``, Integer attributes on ``[1, 128]``, uniform events and two subscription
workloads (W1 uniform, W2 skewed around 20 hot spots with an 80-20 Zipf). This harness keeps
those parameters where they are stated and documents ours where they are not:

* subscription bounds lie on a grid of ``grid`` steps per attribute (8: three halvings), so
  an exact mapping has a handful of dz-expressions rather than hundreds; W1 draws a width of
  1..``grid``/2 steps and a position uniformly per attribute, W2 a hot spot by Zipf (exponent
  1.6: the top 20 % of 20 hot spots draw about 80 % of the subscriptions) and 1-2 steps
  around it;
* ``publishers`` publishers advertise equal slices of the first attribute (2: ``0`` and ``1``);
* delay is the hop count (the paper's algorithm description) and tolerances are drawn
  uniformly from ``[delta_low, delta_high]`` (real-valued, so ties do not block parents);
* the bandwidth budget is the exact subscription's rate plus ``allowed_fp`` of the overall
  event rate (the paper's Fig. 5(g)-(h) axis), with events spread evenly;
* one round: every peer runs ``connection_management`` with a fresh random 5 % view plus the
  hints it received; all messages are delivered (FIFO, in the same round); then Algorithm 2's
  TimeOut coarsens the mapping of peers whose sub-space has stayed uncovered, or covered
  only by a delay-breaking parent, for ``timeout_rounds`` rounds; then every subscriber
  measures the rate ``R(s)`` of the events arriving over its parent edges under the event
  rates in force (``triggers.incoming_rate_eps``) and, above ``B(s)/(m+1)``, Algorithm 2's
  BandwidthViolated refines its mapping and tells its parents and children
  (``triggers.on_bandwidth_violated``; the messages are delivered in the same round);
* a change in the event rate (section 5, what raises BandwidthViolated): from
  ``rate_change_round`` on, the events of the sub-space ``rate_change_dz`` come
  ``rate_change_factor`` times as fast (``accuracy.SurgeRates``); budgets stay as they were.

Metrics per round (section 6): converged (every ``dz_i`` covered), notified (receives every
relevant event within its tolerance), connection requests, false positives; and ours: how
often BandwidthViolated was raised, how many mappings it refined, and the share of
subscribers whose measured ``R(s)`` is still above ``B(s)/(m+1)`` at the end of the round.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, dz, overlay, triggers
from gridstat.granularity.space import Rectangle

WORKLOADS = ("W1", "W2")
#: Overall event rate of the simulated space (events/s); only ratios matter.
TOTAL_EPS = 10_000.0
HOT_SPOTS = 20
ZIPF_EXPONENT = 1.6


@dataclass(frozen=True)
class OverlayScenario:
    peers: int = 1024
    attributes: int = 2
    grid: int = 8
    workload: str = "W1"
    publishers: int = 2
    delta_low: float = 3.0
    delta_high: float = 8.0
    allowed_fp: float = 0.0
    #: ``m``; None: ``log2(peers)`` as in the paper
    out_degree: int | None = None
    view_fraction: float = 0.05
    timeout_rounds: int = 3
    #: bits per coarsening (and refining) step; the paper's Fig. 4 uses one halving of every attribute
    #: (``attributes``), we default to 1 so a peer can give up half a sub-space rather than a quarter at a time
    coarsen_step: int = 1
    max_rounds: int = 60
    seed: int = 1
    #: round from which the event rate changes (None: constant rates, BandwidthViolated stays quiet)
    rate_change_round: int | None = None
    #: the sub-space whose events come ``rate_change_factor`` times as fast from then on ("0": publisher P0's half)
    rate_change_dz: str = "0"
    rate_change_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ValidationError(f"workload must be one of {', '.join(WORKLOADS)}", field="workload")
        if self.peers < 2 or self.attributes < 1 or self.grid < 2 or self.grid & (self.grid - 1):
            raise ValidationError("need peers >= 2, attributes >= 1 and grid a power of two >= 2", field="scenario")
        if self.publishers < 1 or self.publishers & (self.publishers - 1):
            raise ValidationError("publishers must be a power of two", field="publishers")
        if not 1.0 <= self.delta_low <= self.delta_high:
            raise ValidationError(f"delay tolerances [{self.delta_low}, {self.delta_high}] are impossible: a relay "
                                  "subscriber is at least one hop from a publisher", field="delta",
                                  reason="ImpossibleDelayTolerance")
        if not 0.0 <= self.allowed_fp <= 1.0:
            raise ValidationError("allowed_fp is a fraction of the overall event rate (0..1)", field="allowed_fp")
        if self.rate_change_round is not None and self.rate_change_round < 1:
            raise ValidationError("rate_change_round is a round number (>= 1)", field="rate_change_round")
        accuracy.SurgeRates(TOTAL_EPS, self.rate_change_dz, self.rate_change_factor)   # raises on a bad dz or factor

    @property
    def m(self) -> int:
        return self.out_degree if self.out_degree is not None else max(1, round(math.log2(self.peers)))

    @property
    def max_depth(self) -> int:
        return self.attributes * int(math.log2(self.grid))


@dataclass(frozen=True)
class RoundStats:
    round: int
    converged_pct: float
    notified_pct: float
    connects: int
    coarsenings: int
    #: subscribers whose measured ``R(s)`` exceeded ``B(s)/(m+1)`` this round (BandwidthViolated raised)
    bandwidth_violations: int = 0
    #: of those, the ones whose mapping became finer (the others had nothing to refine)
    refinements: int = 0
    #: subscribers whose measured ``R(s)`` is above ``B(s)/(m+1)`` at the end of the round, %
    over_budget_pct: float = 0.0


@dataclass(frozen=True)
class OverlayResult:
    scenario: OverlayScenario
    rounds: tuple[RoundStats, ...]
    #: first round (1-based) at which every subscriber was converged; None if never
    construction_rounds: int | None
    converged_pct: float
    notified_pct: float
    #: mean false positives a subscriber receives, % of the overall event rate
    false_positive_pct: float
    #: mean false positives of the exact mappings (the dz grid is aligned, so normally 0)
    initial_false_positive_pct: float
    #: connection requests each subscriber sent, in order of peers
    connects_per_peer: tuple[int, ...]
    mean_in_degree: float
    mean_dz_per_subscription: float
    #: BandwidthViolated raised, summed over subscribers and rounds
    bandwidth_violations: int
    #: mappings BandwidthViolated made finer, summed over subscribers and rounds
    refinements: int
    #: subscribers whose measured ``R(s)`` is above ``B(s)/(m+1)`` after the last round, %
    over_budget_pct: float
    wall_s: float = field(default=0.0, compare=False)


def _subscriptions(sc: OverlayScenario, rng: random.Random) -> list[Rectangle]:
    g = sc.grid
    out = []
    if sc.workload == "W1":
        for _ in range(sc.peers):
            dims = []
            for _ in range(sc.attributes):
                w = rng.randint(1, g // 2)
                a = rng.randint(0, g - w)
                dims.append((a / g, (a + w) / g))
            out.append(Rectangle.box(dims))
        return out
    spots = [[rng.randrange(g) for _ in range(sc.attributes)] for _ in range(HOT_SPOTS)]
    weights = [1.0 / (k + 1) ** ZIPF_EXPONENT for k in range(HOT_SPOTS)]
    for _ in range(sc.peers):
        spot = rng.choices(spots, weights)[0]
        dims = []
        for c in spot:
            w = rng.randint(1, 2)
            a = min(max(0, c - rng.randint(0, w - 1)), g - w)
            dims.append((a / g, (a + w) / g))
        out.append(Rectangle.box(dims))
    return out


def _hops(states: dict[str, overlay.PeerState], order: list[str],
          relevant: Callable[[str], frozenset[str]]) -> dict[str, float]:
    """Delivery delay in hops per peer (inf if some relevant event cannot reach it), parents first."""
    hops: dict[str, float] = {}
    for p in order:
        s = states[p]
        if s.publisher:
            hops[p] = 0.0
            continue
        worst = 0.0
        for target in s.mapping:
            best = math.inf
            pubs = set()
            for e in s.parents:
                if dz.covers(e.dz, target):
                    if e.publisher:
                        pubs.add(e.peer)
                    else:
                        best = min(best, hops.get(e.peer, math.inf) + 1)
            if relevant(target) <= pubs:
                best = min(best, 1.0)
            worst = max(worst, best)
        hops[p] = worst
    return hops


def _late(s: overlay.PeerState, hops: dict[str, float]) -> list[str]:
    """Covered sub-spaces whose subscriber parent breaks the tolerance."""
    out = []
    for target in sorted(s.mapping):
        edges = [e for e in s.parents if not e.publisher and dz.covers(e.dz, target)]
        if edges and all(hops.get(e.peer, math.inf) + 1 > s.delta for e in edges):
            out.append(target)
    return out


def simulate_overlay(sc: OverlayScenario, *, on_round: Callable[[RoundStats], None] | None = None) -> OverlayResult:
    """Build the overlay from scratch and run it for up to ``max_rounds`` rounds."""
    import time

    t0 = time.monotonic()
    rng = random.Random(sc.seed)
    rates = accuracy.UniformRates(TOTAL_EPS)
    m = sc.m
    pub_bits = int(math.log2(sc.publishers))
    states: dict[str, overlay.PeerState] = {}
    adverts: dict[str, str] = {}
    for i in range(sc.publishers):
        name = f"P{i}"
        adv = format(i, f"0{pub_bits}b") if pub_bits else dz.EPSILON
        adverts[name] = adv
        states[name] = overlay.PeerState(name, frozenset({adv}), 0.0, m, publisher=True)

    def relevant(target: str) -> frozenset[str]:
        return frozenset(p for p, adv in adverts.items() if dz.intersects(adv, target))

    rects: dict[str, Rectangle] = {}
    budgets: dict[str, accuracy.Budget] = {}
    subs = []
    for i, rect in enumerate(_subscriptions(sc, rng)):
        name = f"S{i}"
        subs.append(name)
        rects[name] = rect
        delta = rng.uniform(sc.delta_low, sc.delta_high)
        incoming = (rect.volume() + sc.allowed_fp) * TOTAL_EPS
        budgets[name] = accuracy.Budget(incoming * (m + 1), m)
        mapping = accuracy.accurate_mapping(rect, rates, budgets[name], max_depth=sc.max_depth)
        states[name] = overlay.PeerState(name, mapping, delta, m)
    initial_fp = sum(accuracy.mapping_false_positives(states[s].mapping, rects[s], rates) for s in subs)
    dz_mean = sum(len(states[s].mapping) for s in subs) / len(subs)
    changes: dict[int, accuracy.RateModel] = {}
    if sc.rate_change_round is not None:
        changes[sc.rate_change_round] = accuracy.SurgeRates(TOTAL_EPS, sc.rate_change_dz, sc.rate_change_factor)
    built = build_overlay(states, budgets, rates, relevant, rects=rects, max_depth=sc.max_depth,
                          rounds=sc.max_rounds, view_fraction=sc.view_fraction, timeout_rounds=sc.timeout_rounds,
                          coarsen_step=sc.coarsen_step, refine_step=sc.coarsen_step, rate_changes=changes, rng=rng,
                          on_round=on_round)
    states = built.states
    rounds, construction, connects = built.rounds, built.construction_rounds, built.connects
    conv = rounds[-1].converged_pct if rounds else 0.0
    noti = rounds[-1].notified_pct if rounds else 0.0
    # False positives as a share of the overall event rate in force at the end (TOTAL_EPS unless it changed).
    fp = sum(accuracy.mapping_false_positives(states[s].mapping, rects[s], built.rates) for s in subs)
    overall_eps = built.rates.rate(dz.EPSILON)
    in_degree = sum(len({e.peer for e in states[s].parents}) for s in subs) / len(subs)
    return OverlayResult(
        scenario=sc, rounds=tuple(rounds), construction_rounds=construction, converged_pct=conv, notified_pct=noti,
        false_positive_pct=100.0 * fp / len(subs) / overall_eps,
        initial_false_positive_pct=100.0 * initial_fp / len(subs) / TOTAL_EPS,
        connects_per_peer=tuple(connects[s] for s in subs), mean_in_degree=in_degree,
        mean_dz_per_subscription=dz_mean, bandwidth_violations=sum(r.bandwidth_violations for r in rounds),
        refinements=sum(r.refinements for r in rounds), over_budget_pct=rounds[-1].over_budget_pct if rounds else 0.0,
        wall_s=time.monotonic() - t0)


@dataclass(frozen=True)
class Built:
    """The overlay after ``build_overlay``: final peer states and per-round statistics."""

    states: dict[str, overlay.PeerState]
    rounds: tuple[RoundStats, ...]
    construction_rounds: int | None
    connects: dict[str, int]
    hops: dict[str, float]
    #: the event rates in force after the last round
    rates: accuracy.RateModel


def build_overlay(states: dict[str, overlay.PeerState],
                  budgets: dict[str, accuracy.Budget], rates: accuracy.RateModel,
                  relevant: Callable[[str], frozenset[str]], *, rects: Mapping[str, Rectangle], max_depth: int,
                  rounds: int, view_fraction: float = 0.05, timeout_rounds: int = 3, coarsen_step: int = 1,
                  refine_step: int = 1, rate_changes: Mapping[int, accuracy.RateModel] | None = None,
                  rng: random.Random, on_round: Callable[[RoundStats], None] | None = None) -> Built:
    """Run Algorithms 1 and 2 in rounds over ``states`` (publishers and subscribers) until quiet or ``rounds``.

    ``budgets`` and ``rects`` (the user-level subscriptions BandwidthViolated refines towards,
    at most ``max_depth`` bits) are keyed by subscriber; publishers are the states with
    ``publisher`` set. ``rate_changes`` maps a round to the event rates in force from that round
    on. Returns new states; the input dict is not changed.
    """
    states = dict(states)
    subs = [p for p, s in states.items() if not s.publisher]
    pubs = [p for p, s in states.items() if s.publisher]
    if not subs:
        raise ValidationError("the overlay needs at least one subscriber", field="peers")
    changes = dict(rate_changes or {})
    adverts = {p: states[p].mapping for p in pubs}

    def incoming_eps(p: str) -> float:
        return triggers.incoming_rate_eps(states[p], rates, adverts)
    view_size = max(1, round(view_fraction * len(states)))
    everyone = list(states)
    stuck = dict.fromkeys(subs, 0)
    connects = dict.fromkeys(subs, 0)
    stats_all: list[RoundStats] = []
    construction: int | None = None
    hops: dict[str, float] = {}

    def deliver(queue: list[overlay.Message]) -> None:
        while queue:
            msg = queue.pop(0)
            if msg.receiver not in states:
                continue
            if msg.kind is overlay.Kind.CONNECT and msg.sender in connects:
                connects[msg.sender] += 1
            state, out = overlay.handle(states[msg.receiver], msg)
            states[msg.receiver] = state
            queue.extend(out)

    for rnd in range(1, rounds + 1):
        rates = changes.get(rnd, rates)
        hops = _hops(states, sorted(states, key=lambda p: states[p].delta), relevant)
        entries = {p: states[p].entry(hops=hops[p]) for p in states}
        pub_entries = [entries[p] for p in pubs]
        queue: list[overlay.Message] = []
        n_connects = sum(connects.values())
        for p in rng.sample(subs, len(subs)):
            s = states[p]
            sample = rng.sample(everyone, min(view_size, len(everyone)))
            view = [entries[x] for x in (*sample, *sorted(s.hints)) if x in entries and x != p]
            s = replace(s, hints=frozenset())
            s, out = overlay.connection_management(s, view, pub_entries, relevant, unsatisfied=_late(s, hops))
            states[p] = s
            queue.extend(out)
            deliver(queue)
        # Algorithm 2, TimeOut: coarsen a sub-space that stays uncovered or late.
        hops = _hops(states, sorted(states, key=lambda p: states[p].delta), relevant)
        coarsenings = 0
        for p in subs:
            s = states[p]
            bad = list(overlay.uncovered(s, relevant)) + _late(s, hops)
            if not bad:
                stuck[p] = 0
                continue
            stuck[p] += 1
            if stuck[p] < timeout_rounds:
                continue
            stuck[p] = 0
            new = accuracy.coarsen(s.mapping, rates, budgets[p], step=coarsen_step, target=bad[0])
            if new is None:
                states[p] = replace(s, tried=frozenset())
                continue
            coarsenings += 1
            s, out = overlay.adopt_mapping(s, new)
            states[p] = s
            deliver(list(out))
        # Algorithm 2, BandwidthViolated: R(s) over this round against B(s)/(m+1) (docs/granularity.md).
        violations = refinements = 0
        for p in subs:
            done = triggers.check_bandwidth(states[p], rects[p], rates, budgets[p], rate_eps=incoming_eps(p),
                                            step=refine_step, max_depth=max_depth)
            if done is None:
                continue
            violations += 1
            if done.refined:
                refinements += 1
                states[p] = done.state
                deliver(list(done.messages))
        over = sum(1 for p in subs if triggers.bandwidth_violated(incoming_eps(p), budgets[p]))
        hops = _hops(states, sorted(states, key=lambda p: states[p].delta), relevant)
        converged = sum(1 for p in subs if not overlay.uncovered(states[p], relevant))
        notified = sum(1 for p in subs if hops[p] <= states[p].delta)
        stats = RoundStats(rnd, 100.0 * converged / len(subs), 100.0 * notified / len(subs),
                           sum(connects.values()) - n_connects, coarsenings, violations, refinements,
                           100.0 * over / len(subs))
        stats_all.append(stats)
        if on_round is not None:
            on_round(stats)
        if construction is None and converged == len(subs):
            construction = rnd
        quiet = stats.connects == 0 and coarsenings == 0 and refinements == 0 and all(r <= rnd for r in changes)
        if quiet and rnd > timeout_rounds + 1 and construction is not None:
            break
    return Built(states, tuple(stats_all), construction, connects, hops, rates)
