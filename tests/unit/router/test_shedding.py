"""Router CPU overload: HAPS Eqs. 1-10 (worked examples, docs/overload.md), the trigger, link choice and hysteresis."""

from __future__ import annotations

import itertools
import random

import pytest

from gridstat.errors import ValidationError
from gridstat.router import shedding
from gridstat.router.shedding import Decision, LinkShedder, LoadEstimator, OverloadConfig, Strategy, Trigger
from gridstat.router.tables import Route, RoutingTable, ShedTarget, Target, Variant


def test_eqs_1_to_3() -> None:
    assert shedding.processing_delay(4000) == pytest.approx(2e-4)  # Eq. 1 with Delta_1 = 5e-8 s
    assert shedding.ewma(1e-4, 2e-4, 0.1) == pytest.approx(1.1e-4)  # Eq. 2
    assert shedding.shedding_timeout(1e-3, 0.1) == pytest.approx(0.01)  # Eq. 3


def test_per_message_estimate_follows_eqs_1_to_3() -> None:
    est = LoadEstimator(0.1)
    est.observe_message(arrival_s=0.0, delay_s=1e-4)  # the first message seeds Delta
    assert est.delay_s == pytest.approx(1e-4) and est.interarrival_s == 0.0
    est.observe_message(arrival_s=1e-3, delay_s=shedding.processing_delay(4000))  # Eq. 1: 2e-4 s
    assert est.delay_s == pytest.approx(1.1e-4)  # Eq. 2
    assert est.interarrival_s == pytest.approx(1e-3)
    assert est.timeout_s() == pytest.approx(0.01)  # Eq. 3: 1e-3 / 0.1
    est.observe_message(arrival_s=4e-3, delay_s=1.1e-4)  # a 3 ms gap moves delta by w
    assert est.interarrival_s == pytest.approx(0.9 * 1e-3 + 0.1 * 3e-3)
    assert est.delay_s == pytest.approx(1.1e-4)


def test_link_choice_and_eq5() -> None:
    # L1: two router-sourced subscriptions p=2, p=1; L2: direct p=10 at CSC 0.1; L3: direct p=4 at CSC 0.5.
    l1 = shedding.link_value([(2.0, 0.3), (1.0, 0.3)], direct=False)  # a router's: CSC not applied
    l2 = shedding.link_value([(10.0, 0.1)], direct=True)
    l3 = shedding.link_value([(4.0, 0.5)], direct=True)
    assert (l1, l2, l3) == pytest.approx((3.0, 1.0, 2.0))
    values = {("L1", True): (l1, 2), ("L2", True): (l2, 1), ("L3", True): (l3, 1)}
    assert shedding.choose_victim(values, set(), Strategy.CHEAPEST) == ("L2", True)
    assert shedding.gain_link_shedding([10], [2, 1, 10, 4]) == pytest.approx(0.588235, abs=1e-6)


def test_eqs_6_to_10() -> None:
    assert shedding.gain_message_shedding([3, 6], [1, 3, 6], 100) == pytest.approx(0.009)  # Eq. 6
    assert shedding.update_gain(0.5, 0.2) == pytest.approx(0.6)  # Eq. 7
    g = 0.6
    assert shedding.charge(g, 5) == pytest.approx(3.0)  # Eqs. 8 and 10
    assert shedding.charge(g, 5, matching=False, csc=0.25) == pytest.approx(0.75)  # Eq. 9
    # Eq. 7 keeps G in [0, 1] and never lets it fall.
    gain = 0.0
    for g_l in [0.3, 0.0, 1.0, 0.5, 2.0, -1.0]:
        new = shedding.update_gain(gain, g_l)
        assert gain <= new <= 1.0
        gain = new


def test_strategies_and_classes() -> None:
    values = {("a", True): (5.0, 1), ("b", True): (1.0, 9), ("c", False): (0.1, 1)}
    assert shedding.choose_victim(values, set(), Strategy.CHEAPEST) == ("b", True)
    assert shedding.choose_victim(values, set(), Strategy.LARGEST) == ("a", True)  # fewest subscriptions
    assert shedding.choose_victim(values, set(), Strategy.RANDOM, random.Random(1).choice) in {("a", True),
                                                                                               ("b", True)}
    # The cheap guaranteed unit goes only after every best-effort unit.
    assert shedding.choose_victim(values, {("a", True), ("b", True)}, Strategy.CHEAPEST) == ("c", False)
    assert shedding.choose_victim(values, set(values), Strategy.CHEAPEST) is None
    # Guaranteed back first, then the most valuable best-effort unit.
    assert shedding.choose_reintegration(values, [("a", True), ("c", False), ("b", True)]) == ("c", False)
    assert shedding.choose_reintegration(values, [("a", True), ("b", True)]) == ("a", True)


def test_estimator_load_and_timeout() -> None:
    est = LoadEstimator(0.5)
    est.observe(busy_s=0.05, events=1000, elapsed_s=0.1)  # 50 us per event every 100 us: half the CPU
    assert est.load == pytest.approx(0.5)
    est.observe(busy_s=0.1, events=1000, elapsed_s=0.1)
    assert est.delay_s == pytest.approx(75e-6) and est.load == pytest.approx(0.75)
    assert est.timeout_s() == pytest.approx(2e-4) and est.timeout_s(1.0) == 1.0
    est.observe(busy_s=0.0, events=0, elapsed_s=0.1)
    assert est.load < 0.75


class Q:
    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.filtered = 0
        self.events: list[bytes] = []

    def push(self, event: bytes) -> None:
        self.events.append(event)


def table() -> tuple[RoutingTable, dict[str, Q]]:
    queues: dict[str, Q] = {}

    def resolve(channel: str, priority: int) -> Target:
        return queues.setdefault(channel, Q(channel))

    t = RoutingTable(Variant.CLOSE, resolve)
    t.install(Route("hi/0", 1, 0, "sub:hi", 20, 1, price=10.0), pub_interval_ms=20)
    t.install(Route("lo/0", 1, 0, "sub:lo", 20, 1, price=0.5, best_effort=True), pub_interval_ms=20)
    t.install(Route("mid/0", 2, 0, "sub:mid", 20, 1, price=2.0, best_effort=True), pub_interval_ms=20)
    t.install(Route("mid2/0", 1, 0, "sub:mid", 20, 1, price=2.0, best_effort=True), pub_interval_ms=20)
    return t, queues


def test_shed_unit_compiles_to_a_counting_target_and_back() -> None:
    t, _queues = table()
    assert t.set_shed("sub:lo", True, True) == [1]
    entry = t.entry(1)
    assert entry is not None
    shed = [tg for tg, _ in entry.close if isinstance(tg, ShedTarget)]
    assert len(shed) == 1 and shed[0].channel == "sub:lo"
    live = {tg.channel for tg, _ in entry.close if isinstance(tg, Q)}
    assert live == {"sub:hi", "sub:mid"}
    assert t.set_shed("sub:lo", True, True) == []  # idempotent
    t.set_shed("sub:lo", True, False)
    entry = t.entry(1)
    assert entry is not None and all(isinstance(tg, Q) for tg, _ in entry.close)


def config(**kw: object) -> OverloadConfig:
    """The load trigger (the router's earlier rule), which these tests were written for."""
    base: dict[str, object] = dict(enabled=True, trigger=Trigger.LOAD, weight=1.0, drop_load=0.9,
                                   reintegrate_load=0.5, min_timeout_s=1.0)
    base.update(kw)
    return OverloadConfig(**base)  # type: ignore[arg-type]


def test_shedder_sheds_cheapest_best_effort_first_with_hysteresis() -> None:
    t, _ = table()
    s = LinkShedder(t, config())
    overloaded = dict(busy_s=0.095, events=1000, copies=0, elapsed_s=0.1)
    calm = dict(busy_s=0.01, events=1000, copies=0, elapsed_s=0.1)
    first = s.tick(10.0, **overloaded)  # type: ignore[arg-type]
    assert first is not None and first.shed and first.unit == ("sub:lo", True) and first.variables == (1,)
    assert s.tick(10.5, **overloaded) is None  # within the timeout: no second action
    second = s.tick(11.1, **overloaded)  # type: ignore[arg-type]
    assert second is not None and second.unit == ("sub:mid", True) and second.variables == (1, 2)
    third = s.tick(12.2, **overloaded)  # type: ignore[arg-type]
    assert third is not None and third.unit == ("sub:hi", False)  # guaranteed only when no best effort is left
    assert s.gain == pytest.approx(1.0)
    assert s.tick(12.9, **overloaded) is None  # within the timeout
    assert s.tick(13.0, **calm) is None  # below the threshold but within the timeout
    back = s.tick(13.3, **calm)  # type: ignore[arg-type]
    assert back is not None and not back.shed and back.unit == ("sub:hi", False)
    assert s.actions == {"shed": 3, "reintegrated": 1}
    between = dict(busy_s=0.07, events=1000, copies=0, elapsed_s=0.1)
    assert s.tick(14.4, **between) is None  # between the thresholds: hold
    everything = LinkShedder(table()[0], config())
    for now in (1.0, 2.1, 3.2):
        everything.tick(now, **overloaded)  # type: ignore[arg-type]
    assert everything.tick(4.3, **overloaded) is None  # nothing left to shed


def test_hysteresis_never_acts_twice_within_the_timeout() -> None:
    t, _ = table()
    s = LinkShedder(t, config(weight=0.3, min_timeout_s=0.5))
    rnd = random.Random(3)
    times = []
    now = 0.0
    for _ in range(400):
        now += 0.1
        busy = rnd.choice([0.01, 0.099])
        if s.tick(now, busy_s=busy, events=500, copies=0, elapsed_s=0.1) is not None:
            times.append(now)
    assert len(times) >= 2
    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(times))


def test_disabled_shedder_only_estimates() -> None:
    t, _ = table()
    s = LinkShedder(t, OverloadConfig(enabled=False))
    assert s.tick(1.0, busy_s=1.0, events=10, copies=0, elapsed_s=0.1) is None
    assert s.estimator.load > 1 and not s.shed


def test_synthetic_cost_model() -> None:
    t, _ = table()
    s = LinkShedder(t, config(cost_per_copy_s=50e-6))
    action = s.tick(5.0, busy_s=0.0, events=1000, copies=1000, elapsed_s=0.1)  # 2000 x 50 us > 0.1 s
    assert action is not None and s.estimator.load == pytest.approx(1.0)


def test_the_delay_trigger_decides_on_the_weighted_delay_and_waits_st() -> None:
    cfg = OverloadConfig(enabled=True, drop_delay_s=2e-4, reintegrate_delay_s=1.5e-4)
    assert cfg.trigger is Trigger.DELAY  # HAPS's rule is the default

    def decide(delay_s: float, *, since: float = 1.0, load: float = 0.0, shed: bool = True,
               c: OverloadConfig = cfg) -> shedding.Decision:
        return shedding.decide(c, delay_s=delay_s, load=load, since_change_s=since, timeout_s=0.01, any_shed=shed)

    assert decide(2.1e-4) is Decision.SHED  # whatever the load
    assert decide(2.1e-4, since=0.009) is Decision.HOLD  # within sT of the previous action
    assert decide(1.4e-4) is Decision.REINTEGRATE
    assert decide(1.4e-4, shed=False) is Decision.HOLD  # nothing to bring back
    assert decide(1.8e-4) is Decision.HOLD  # between the thresholds
    # The load rule, kept as an option, looks at Delta / delta instead of Delta.
    load = OverloadConfig(enabled=True, trigger=Trigger.LOAD, drop_load=0.9, reintegrate_load=0.6)
    assert decide(1.0, load=0.7, c=load) is Decision.HOLD  # a delay of 1 s, but 70 % of the CPU
    assert decide(1e-9, load=0.95, c=load) is Decision.SHED
    assert decide(1.0, load=0.5, c=load) is Decision.REINTEGRATE


def test_router_shedder_with_the_delay_trigger() -> None:
    # 20 us per event at one event every 100 us: a fifth of the CPU (the load rule would hold), but the
    # weighted delay is above a 15 us drop threshold.
    t, _ = table()
    s = LinkShedder(t, OverloadConfig(enabled=True, weight=1.0, drop_delay_s=15e-6, reintegrate_delay_s=5e-6,
                                      min_timeout_s=1.0))
    action = s.tick(10.0, busy_s=0.02, events=1000, copies=0, elapsed_s=0.1)
    assert action is not None and action.shed and action.delay_s == pytest.approx(20e-6)
    assert action.load == pytest.approx(0.2)
    assert s.tick(10.5, busy_s=0.02, events=1000, copies=0, elapsed_s=0.1) is None  # within the timeout
    back = s.tick(11.6, busy_s=0.001, events=1000, copies=0, elapsed_s=0.1)
    assert back is not None and not back.shed
    same = LinkShedder(table()[0], config(drop_load=0.9))  # the load trigger: 0.2 is no overload
    assert same.tick(10.0, busy_s=0.02, events=1000, copies=0, elapsed_s=0.1) is None


def test_paper_shedding_never_acts_twice_within_st() -> None:
    """The paper's loop: Eq. 1-2 per message, the delay trigger, sT = delta / w (Eq. 3) between actions."""
    cfg = OverloadConfig(enabled=True, weight=0.1, drop_delay_s=2e-4, reintegrate_delay_s=1.5e-4, min_timeout_s=0)
    est = LoadEstimator(cfg.weight)
    rnd = random.Random(5)
    now, last, shed = 0.0, -float("inf"), 0
    actions: list[tuple[float, float]] = []  # (time, sT then)
    for _ in range(20_000):
        now += rnd.expovariate(1000.0)  # a message every ms on average
        comparisons = rnd.randint(2000, 6000) - 1500 * shed  # every shed link saves comparisons
        est.observe_message(arrival_s=now, delay_s=shedding.processing_delay(max(0, comparisons)))
        timeout = est.timeout_s()
        d = shedding.decide(cfg, delay_s=est.delay_s, load=est.load, since_change_s=now - last, timeout_s=timeout,
                            any_shed=shed > 0)
        if d is not Decision.HOLD:
            shed += 1 if d is Decision.SHED else -1
            actions.append((now, timeout))
            last = now
    assert len(actions) >= 10
    assert all(b - a >= st for (a, _), (b, st) in itertools.pairwise(actions))
    # The first message knows no inter-arrival time yet; then delta ~ 1 ms and w = 0.1 make sT ~ 10 ms.
    assert all(0.004 < st < 0.03 for _, st in actions[1:])


def test_config_is_validated() -> None:
    with pytest.raises(ValidationError):
        OverloadConfig(drop_load=0.5, reintegrate_load=0.6)
    with pytest.raises(ValidationError):
        OverloadConfig(weight=0)
    with pytest.raises(ValidationError):
        Strategy.parse("richest")
    with pytest.raises(ValidationError):
        Trigger.parse("cpu")
    with pytest.raises(ValidationError):
        OverloadConfig(drop_delay_s=1e-4, reintegrate_delay_s=1e-4)
    with pytest.raises(ValidationError):
        OverloadConfig(drop_delay_s=float("nan"))
