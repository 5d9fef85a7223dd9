"""Router CPU overload: the load estimate, link shedding with hysteresis, and the gain of HAPS (Eqs. 1-10).

**Load estimate (Eqs. 1-3).** HAPS weighs each message's processing delay into a moving average,
``Delta(m) = (1 - w) Delta(m-1) + w Delta_curr`` (Eq. 2), with ``Delta_curr = Delta_1 * N`` in its
simulator (Eq. 1: N comparisons at ``Delta_1`` each) and "the current CPU load" on a real machine.
``LoadEstimator.observe_message`` is the paper's per-message update (the simulation of
``gridstat bench overload`` feeds it). The router measures instead: the drain loop adds up the time
it is busy (two clock reads per wake-up, none per event), and every tick (``tick_s``) the estimator
takes the tick's busy time per event as ``Delta_curr`` and the tick's time per event as the
inter-arrival time ``delta``, both averaged with weight ``w`` (``LoadEstimator.observe``).
``cost_per_copy_s`` switches to the paper's synthetic model instead (``Delta_1`` per event and per
copy sent), which the tests use.

**Trigger (``Trigger``).** ``delay`` is HAPS's rule: shed when the weighted delay ``Delta`` (Eq. 2)
exceeds the drop threshold ``drop_delay_s`` (the paper's Fig. 3 runs at 2e-4 s), reintegrate below
``reintegrate_delay_s`` (the "function of the maximum processing delay" the paper leaves open).
``load`` is the router's earlier rule, kept as an option: ``load = Delta / delta`` is the share of
the CPU the router needs, shed above ``drop_load`` (0.9), reintegrate below ``reintegrate_load``
(0.6); it follows the arrival rate, which a fixed delay threshold does not. With either trigger the
shedding timeout of Eq. 3, ``sT = delta / w``, is the least time between two shed or reintegrate
actions; the router floors it by ``min_timeout_s`` because its estimate moves once per tick, not
once per message. ``decide`` is that decision as a pure function.

**Link shedding.** The unit shed is a GridStat "link": the routes of one outgoing channel, split in
two, its best-effort routes and its guaranteed ones (routes of admitted subscriptions), so guaranteed
streams are never shed while a best-effort unit is still live. Among the candidates, **cheapest**
sheds the unit with the lowest sum of route prices (HAPS's CHEAPEST; ``link_value`` weighs a
subscriber's own subscriptions by their CSC, as the paper does; GridStat has no covering, so its
routes count at CSC = 1); **largest** sheds the unit with the fewest routes (HAPS's LARGEST) and
**random** a random one, for comparison. A shed unit's routes are compiled to a counting target
(``tables.ShedTarget``): the router stops sending them, and counts what they would have sent as
``cpu_overload``. Below the reintegration threshold the most valuable shed unit comes back first
(ours; the paper does not say which).

**Gain and charging (Eqs. 5-10)** are pure functions here; ``router.shaping`` applies Eqs. 6, 7, 8 and
10 per sent event on shaped channels and the router reports Eq. 5's ``G_l1`` as a metric.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gridstat.errors import ValidationError
from gridstat.router.tables import Route, RoutingTable

#: HAPS's synthetic cost of one comparison (Eq. 1), seconds.
DELTA_1_S = 5e-8


class Strategy(enum.Enum):
    """Which link to shed (HAPS Fig. 4)."""

    CHEAPEST = "cheapest"
    LARGEST = "largest"
    RANDOM = "random"

    @classmethod
    def parse(cls, text: str) -> Strategy:
        try:
            return cls(text)
        except ValueError:
            raise ValidationError(f"shedding strategy {text!r} is not cheapest, largest or random",
                                  field="strategy") from None


class Trigger(enum.Enum):
    """When to shed or reintegrate a link (see the module docstring)."""

    DELAY = "delay"  # HAPS: the weighted delay (Eq. 2) against the drop threshold
    LOAD = "load"  # the weighted delay over the inter-arrival time against a share of the CPU

    @classmethod
    def parse(cls, text: str) -> Trigger:
        try:
            return cls(text)
        except ValueError:
            raise ValidationError(f"overload trigger {text!r} is not delay or load", field="trigger") from None


class Decision(enum.Enum):
    HOLD = "hold"
    SHED = "shed"
    REINTEGRATE = "reintegrate"


@dataclass(frozen=True)
class OverloadConfig:
    """Router CPU overload handling; ``enabled=False`` only estimates the load (a metric)."""

    enabled: bool = False
    weight: float = 0.2
    drop_load: float = 0.9
    reintegrate_load: float = 0.6
    min_timeout_s: float = 1.0
    tick_s: float = 0.1
    strategy: Strategy = Strategy.CHEAPEST
    #: > 0: the synthetic model (Eq. 1), seconds per event and per copy sent; 0: measured busy time.
    cost_per_copy_s: float = 0.0
    trigger: Trigger = Trigger.DELAY
    #: Trigger ``delay``: shed above this weighted processing delay per message (HAPS Fig. 3: 2e-4 s) ...
    drop_delay_s: float = 2e-4
    #: ... and reintegrate below this one.
    reintegrate_delay_s: float = 1.5e-4

    def __post_init__(self) -> None:
        if not 0 < self.weight <= 1:
            raise ValidationError(f"weight w must be within (0, 1], got {self.weight}", field="weight")
        if not 0 < self.reintegrate_load < self.drop_load:
            raise ValidationError(f"need 0 < reintegrate_load ({self.reintegrate_load}) < drop_load "
                                  f"({self.drop_load})", field="reintegrate_load")
        if not (math.isfinite(self.drop_delay_s) and 0 < self.reintegrate_delay_s < self.drop_delay_s):
            raise ValidationError(f"need 0 < reintegrate_delay_s ({self.reintegrate_delay_s}) < drop_delay_s "
                                  f"({self.drop_delay_s})", field="reintegrate_delay_s")
        if self.min_timeout_s < 0 or self.tick_s <= 0 or self.cost_per_copy_s < 0:
            raise ValidationError("min_timeout_s and cost_per_copy_s must be >= 0 and tick_s > 0", field="tick_s")


# -- Eqs. 1-3 -------------------------------------------------------------------------------------
def processing_delay(comparisons: int, delta_1_s: float = DELTA_1_S) -> float:
    """Eq. 1: Delta_curr = Delta_1 * N."""
    return delta_1_s * comparisons


def ewma(previous: float, current: float, weight: float) -> float:
    """Eq. 2: Delta(m) = (1 - w) Delta(m-1) + w Delta_curr."""
    return (1.0 - weight) * previous + weight * current


def shedding_timeout(interarrival_s: float, weight: float) -> float:
    """Eq. 3: sT = delta * (1 / w)."""
    return interarrival_s / weight


class LoadEstimator:
    """Delta (processing delay per message) and delta (inter-arrival time), both averaged with weight w."""

    __slots__ = ("delay_s", "interarrival_s", "last_arrival_s", "weight")

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.delay_s = 0.0
        self.interarrival_s = 0.0
        self.last_arrival_s = -math.inf

    def observe_message(self, *, arrival_s: float, delay_s: float) -> None:
        """HAPS per message: Eq. 2 with this message's ``Delta_curr`` (Eq. 1 in the paper's simulator), and
        the inter-arrival time (Eq. 3's ``delta``) averaged with the same weight."""
        gap = arrival_s - self.last_arrival_s
        first = self.last_arrival_s == -math.inf
        self.last_arrival_s = arrival_s
        if first:  # the first message seeds the delay; the gap needs a second one
            self.delay_s = delay_s
            return
        self.delay_s = ewma(self.delay_s, delay_s, self.weight)
        self.interarrival_s = gap if self.interarrival_s == 0.0 else ewma(self.interarrival_s, gap, self.weight)

    def observe(self, *, busy_s: float, events: int, elapsed_s: float) -> None:
        """One tick: ``events`` arrived in ``elapsed_s`` and took ``busy_s`` to process."""
        if elapsed_s <= 0:
            return
        if events > 0:
            current, gap = busy_s / events, elapsed_s / events
        else:  # nothing arrived: no processing delay, and the gap is at least the tick
            current, gap = 0.0, elapsed_s
        if self.interarrival_s == 0.0:  # the first tick seeds the averages
            self.delay_s, self.interarrival_s = current, gap
            return
        self.delay_s = ewma(self.delay_s, current, self.weight)
        self.interarrival_s = ewma(self.interarrival_s, gap, self.weight)

    @property
    def load(self) -> float:
        """Delta / delta: the share of the CPU the router needs (above 1 it falls behind)."""
        return self.delay_s / self.interarrival_s if self.interarrival_s > 0 else 0.0

    def timeout_s(self, floor_s: float = 0.0) -> float:
        """Eq. 3's sT, at least ``floor_s``."""
        return max(floor_s, shedding_timeout(self.interarrival_s, self.weight))


def decide(config: OverloadConfig, *, delay_s: float, load: float, since_change_s: float, timeout_s: float,
           any_shed: bool) -> Decision:
    """Shed, reintegrate or hold: the trigger's thresholds, and no action within ``timeout_s`` (Eq. 3's sT)
    of the previous one. ``delay_s`` is Eq. 2's weighted delay, ``load`` that over the inter-arrival time."""
    if since_change_s < timeout_s:
        return Decision.HOLD
    if config.trigger is Trigger.DELAY:
        over, calm = delay_s > config.drop_delay_s, delay_s < config.reintegrate_delay_s
    else:
        over, calm = load > config.drop_load, load < config.reintegrate_load
    if over:
        return Decision.SHED
    if calm and any_shed:
        return Decision.REINTEGRATE
    return Decision.HOLD


# -- Eqs. 5-10 ------------------------------------------------------------------------------------
def gain_link_shedding(shed_prices: Iterable[float], all_prices: Iterable[float]) -> float:
    """Eq. 5: G_l1 = sum of prices on the shed links / sum of prices on all outgoing links."""
    total = sum(all_prices)
    return sum(shed_prices) / total if total > 0 else 0.0


def gain_message_shedding(matched_prices: Iterable[float], link_prices: Iterable[float], queue_size: int) -> float:
    """Eq. 6: G_l2 = (sum of prices the message matches on the link / all on the link) / Q_size."""
    total = sum(link_prices)
    if total <= 0 or queue_size <= 0:
        return 0.0
    return sum(matched_prices) / total / queue_size


def update_gain(old: float, gain: float) -> float:
    """Eq. 7: G = G_old + (1 - G_old) G_l; stays within [0, 1] and never decreases."""
    return old + (1.0 - old) * min(1.0, max(0.0, gain))


def charge(gain: float, max_price: float, *, matching: bool = True, csc: float = 1.0) -> float:
    """Eqs. 8-10 at the last router: G * maxprice for a matching subscriber (Eqs. 8, 10), G * CSC *
    maxprice for one whose subscription is covered by a matching one without matching (Eq. 9).
    GridStat subscriptions are per variable, so every delivered event matches (CSC = 1)."""
    return gain * max_price * (1.0 if matching else csc)


# -- link shedding ------------------------------------------------------------------------------
Unit = tuple[str, bool]  # (channel, best_effort)


@dataclass(frozen=True)
class ShedAction:
    """One shed or reintegration: the unit, its value and the variables whose streams it changed."""

    shed: bool
    unit: Unit
    value: float
    routes: int
    variables: tuple[int, ...]
    load: float
    #: Eq. 2's weighted processing delay when it acted.
    delay_s: float = 0.0


def link_value(subscriptions: Iterable[tuple[float, float]], *, direct: bool) -> float:
    """HAPS's CHEAPEST value of a link: the sum of the maximum prices of the subscriptions stored under
    it, each times its CSC if it came straight from its subscriber (``direct``); ``(price, csc)`` pairs."""
    if direct:
        return sum(p * c for p, c in subscriptions)
    return sum(p for p, _ in subscriptions)


def unit_values(units: Mapping[Unit, Sequence[Route]]) -> dict[Unit, tuple[float, int]]:
    """(price sum, route count) per unit: ``link_value`` at CSC 1 (GridStat has no covering)."""
    return {u: (sum(r.price for r in rs), len(rs)) for u, rs in units.items() if rs}


def choose_victim(values: Mapping[Unit, tuple[float, int]], shed: Collection[Unit], strategy: Strategy,
                  rnd: Callable[[Sequence[Unit]], Unit] = random.choice) -> Unit | None:
    """The next unit to shed: best-effort units before guaranteed ones, then by the strategy."""
    excluded = set(shed)
    live = [u for u in values if u not in excluded]
    if not live:
        return None
    best_effort = [u for u in live if u[1]]
    pool = sorted(best_effort or live)
    if strategy is Strategy.RANDOM:
        return rnd(pool)
    if strategy is Strategy.LARGEST:  # the paper's naming: the unit with the fewest subscriptions
        return min(pool, key=lambda u: (values[u][1], values[u][0], u))
    return min(pool, key=lambda u: (values[u][0], values[u][1], u))


def choose_reintegration(values: Mapping[Unit, tuple[float, int]], shed: Sequence[Unit]) -> Unit | None:
    """The next unit to bring back: guaranteed before best effort, the most valuable first."""
    if not shed:
        return None
    return max(shed, key=lambda u: (not u[1], values.get(u, (0.0, 0))[0], u))


class LinkShedder:
    """HAPS link shedding over a router's routing table (see the module docstring)."""

    def __init__(self, table: RoutingTable, config: OverloadConfig, *,
                 channels: Callable[[], Iterable[str]] | None = None, rng: random.Random | None = None) -> None:
        self.table = table
        self.config = config
        self.estimator = LoadEstimator(config.weight)
        self._channels = channels
        self._rng = rng or random.Random()
        self.last_change = -math.inf
        #: Shed units in the order they were shed.
        self.shed: list[Unit] = []
        #: Shed and reintegrate actions so far, by kind.
        self.actions: dict[str, int] = {"shed": 0, "reintegrated": 0}
        self.gain = 0.0

    def tick(self, now: float, *, busy_s: float, events: int, copies: int, elapsed_s: float) -> ShedAction | None:
        """Feed one tick's measurements; shed or reintegrate one unit if the load and the timeout say so."""
        cfg = self.config
        if cfg.cost_per_copy_s > 0:
            busy_s = cfg.cost_per_copy_s * (events + copies)
        est = self.estimator
        est.observe(busy_s=busy_s, events=events, elapsed_s=elapsed_s)
        if not cfg.enabled:
            return None
        load = est.load
        decision = decide(cfg, delay_s=est.delay_s, load=load, since_change_s=now - self.last_change,
                          timeout_s=est.timeout_s(cfg.min_timeout_s), any_shed=bool(self.shed))
        if decision is Decision.HOLD:
            return None
        values = self._values()
        if decision is Decision.SHED:
            unit = choose_victim(values, self.shed, cfg.strategy, self._rng.choice)
        else:
            unit = choose_reintegration(values, self.shed)
        if unit is None:
            return None
        return self._apply(decision is Decision.SHED, unit, values, now, load)

    def reintegrate_all(self) -> list[ShedAction]:
        out = []
        values = self._values()
        while self.shed:
            unit = choose_reintegration(values, self.shed)
            assert unit is not None
            out.append(self._apply(False, unit, values, self.last_change, self.estimator.load))
        return out

    def _values(self) -> dict[Unit, tuple[float, int]]:
        units = self.table.units()
        if self._channels is not None:
            known = set(self._channels())
            units = {u: rs for u, rs in units.items() if u[0] in known}
        return unit_values(units)

    def _apply(self, shed: bool, unit: Unit, values: Mapping[Unit, tuple[float, int]], now: float,
               load: float) -> ShedAction:
        variables = self.table.set_shed(unit[0], unit[1], shed)
        if shed:
            self.shed.append(unit)
        else:
            self.shed.remove(unit)
        self.actions["shed" if shed else "reintegrated"] += 1
        self.last_change = now
        value, routes = values.get(unit, (0.0, 0))
        self.gain = gain_link_shedding((values.get(u, (0.0, 0))[0] for u in self.shed),
                                       (v for v, _ in values.values()))
        return ShedAction(shed, unit, value, routes, tuple(variables), load, self.estimator.delay_s)


__all__ = ["DELTA_1_S", "Decision", "LinkShedder", "LoadEstimator", "OverloadConfig", "ShedAction", "Strategy",
           "Trigger", "charge", "choose_reintegration", "choose_victim", "decide", "ewma", "gain_link_shedding",
           "gain_message_shedding", "link_value", "processing_delay", "shedding_timeout", "unit_values",
           "update_gain"]
