"""Algorithm 2's BandwidthViolated: R(s) against B(s)/(m+1), refine, adopt, tell the neighbours (seed 004, 2 and 5)."""

from __future__ import annotations

import random

import pytest

from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, dz, overlay, simulating, triggers
from gridstat.granularity.overlay import Edge, Kind, Message, PeerState
from gridstat.granularity.space import Rectangle

FIG4_SUB = Rectangle.box([(0.0, 1.0), (0.0, 0.25)])      # exact mapping {0000, 0010, 1000, 1010}
UNIFORM = accuracy.UniformRates(1000.0)


def test_intersection_of_dz_expressions() -> None:
    assert dz.intersection("0", "01") == "01"
    assert dz.intersection("01", "0") == "01"
    assert dz.intersection("0", "*1") == "01"
    assert dz.intersection("*0", "1*") == "10"
    assert dz.intersection("01", "00") is None
    assert dz.intersection("", "101") == "101"


def test_surge_rates_raise_one_sub_space() -> None:
    surge = accuracy.SurgeRates(1000.0, "0", 3.0)
    assert surge.rate("") == pytest.approx(500.0 * 3 + 500.0)
    assert surge.rate("01") == pytest.approx(250.0 * 3)
    assert surge.rate("1") == pytest.approx(500.0)
    assert surge.rate("*1") == pytest.approx(250.0 * 3 + 250.0)
    # "" against the lower quarter of the second attribute: in "0" 3 * 375 events/s fall outside, in "1" 375
    assert surge.false_positive_rate("", FIG4_SUB) == pytest.approx(3 * 375.0 + 375.0)
    with pytest.raises(ValidationError):
        accuracy.SurgeRates(1000.0, "2", 2.0)


def test_the_trigger_is_the_incoming_rate_above_b_over_m_plus_one() -> None:
    budget = accuracy.Budget(1100.0, 10)                    # B/(m+1) = 100 events/s
    assert not triggers.bandwidth_violated(99.0, budget)
    assert not triggers.bandwidth_violated(100.0, budget)   # at the limit still holds
    assert triggers.bandwidth_violated(100.5, budget)


def test_incoming_rate_counts_what_each_parent_sends() -> None:
    s = PeerState("s", frozenset({""}), 4.0, 2, parents=(
        Edge("P0", "", 0.0, publisher=True),                # P0 publishes only "0": 500 events/s of it
        Edge("q", "10", 2.0), Edge("q", "101", 2.0),        # one parent, nested edges: "10" once, 250
        Edge("r", "10", 3.0),                               # a second copy of "10": another 250
    ))
    rate = triggers.incoming_rate_eps(s, UNIFORM, {"P0": frozenset({"0"})})
    assert rate == pytest.approx(500.0 + 250.0 + 250.0)
    assert triggers.incoming_rate_eps(s, UNIFORM, {"P0": frozenset({"11"})}) == pytest.approx(250.0 + 500.0)


def coarse_peer() -> PeerState:
    """``{ε}`` for the Fig. 4 subscription, fed by publisher P, forwarding to c1 (covered after refining) and c2."""
    return PeerState("s", frozenset({""}), 2.0, 2, parents=(Edge("P", "", 0.0, publisher=True),),
                     children=(Edge("c1", "0000", 3.0), Edge("c2", "01", 4.0)))


def test_above_the_budget_the_peer_refines_and_tells_its_neighbours() -> None:
    s = coarse_peer()
    budget = accuracy.Budget(300.0 * 3, 2)                  # B/(m+1) = 300 events/s
    rate = triggers.incoming_rate_eps(s, UNIFORM, {"P": frozenset({""})})
    assert rate == pytest.approx(1000.0)
    done = triggers.check_bandwidth(s, FIG4_SUB, UNIFORM, budget, rate_eps=rate, step=2, max_depth=4)
    assert done is not None and done.refined
    finer = frozenset({"0000", "0010", "1000", "1010"})
    assert done.state.mapping == finer                      # accurate: 250 events/s
    assert done.refinement.rate_eps == pytest.approx(250.0) and done.refinement.within_budget
    # the messages are exactly the ones adopt_mapping produces for the refined mapping
    assert (done.state, done.messages) == overlay.adopt_mapping(s, finer)
    assert set(done.messages) == {
        Message(Kind.NARROW, "s", "P", dz="", narrowed=("0000", "0010", "1000", "1010")),
        Message(Kind.DISCONNECT, "s", "c2", dz="01"),       # line 6: no longer covered
    }
    assert done.state.child_peers == {"c1"}
    assert [e.dz for e in done.state.parents] == ["0000", "0010", "1000", "1010"]   # same parent, narrowed
    assert triggers.incoming_rate_eps(done.state, UNIFORM, {"P": frozenset({""})}) <= budget.incoming_eps


def test_below_the_budget_nothing_changes() -> None:
    s = coarse_peer()
    budget = accuracy.Budget(1000.0 * 3, 2)                 # B/(m+1) = 1000 events/s: exactly what arrives
    assert triggers.check_bandwidth(s, FIG4_SUB, UNIFORM, budget, rate_eps=1000.0, step=2, max_depth=4) is None
    assert triggers.check_bandwidth(s, FIG4_SUB, UNIFORM, budget, rate_eps=999.0, step=2, max_depth=4) is None


def test_an_excess_the_mapping_does_not_cause_is_raised_but_not_refined() -> None:
    # Two copies arrive (1000 events/s measured) but the mapping itself brings 250: nothing to refine.
    s = PeerState("s", frozenset({"0000", "0010", "1000", "1010"}), 2.0, 2)
    done = triggers.check_bandwidth(s, FIG4_SUB, UNIFORM, accuracy.Budget(300.0 * 3, 2), rate_eps=1000.0, step=2,
                                    max_depth=4)
    assert done is not None and not done.refined
    assert done.state == s and done.messages == ()


def line_overlay() -> tuple[dict[str, PeerState], dict[str, Rectangle], dict[str, accuracy.Budget]]:
    """One attribute, 1000 events/s: P -> A ("0", over what A wants) -> C ("01"); P -> B ("1")."""
    states = {
        "P": PeerState("P", frozenset({""}), 0.0, 3, publisher=True,
                       children=(Edge("A", "0", 1.5), Edge("B", "1", 2.0))),
        "A": PeerState("A", frozenset({"0"}), 1.5, 1, parents=(Edge("P", "0", 0.0, publisher=True),),
                       children=(Edge("C", "01", 3.0),)),
        "C": PeerState("C", frozenset({"01"}), 3.0, 1, parents=(Edge("A", "01", 1.5),)),
        "B": PeerState("B", frozenset({"1"}), 2.0, 1, parents=(Edge("P", "1", 0.0, publisher=True),)),
    }
    rects = {"A": Rectangle.box([(0.0, 0.25)]), "C": Rectangle.box([(0.25, 0.5)]), "B": Rectangle.box([(0.5, 0.75)])}
    budgets = {"A": accuracy.Budget(500.0 * 2, 1),          # "0" brings 500/s: exactly B/(m+1)
               "C": accuracy.Budget(600.0 * 2, 1), "B": accuracy.Budget(600.0 * 2, 1)}
    return states, rects, budgets


def test_simulation_raises_bandwidth_violated_when_the_event_rate_changes() -> None:
    states, rects, budgets = line_overlay()
    surge = accuracy.SurgeRates(1000.0, "0", 2.0)           # from round 2 the lower half publishes twice as fast
    built = simulating.build_overlay(states, budgets, accuracy.UniformRates(1000.0),
                                     lambda _: frozenset({"P"}), rects=rects, max_depth=2, rounds=8,
                                     view_fraction=1.0, rate_changes={2: surge}, rng=random.Random(1))
    first, second = built.rounds[0], built.rounds[1]
    assert (first.bandwidth_violations, first.refinements) == (0, 0)         # 500/s within A's 500/s
    assert (second.bandwidth_violations, second.refinements) == (1, 1)       # 1000/s: A refines
    assert all(r.bandwidth_violations == 0 for r in built.rounds[2:])
    assert all(r.over_budget_pct == 0.0 for r in built.rounds)               # the budget holds afterwards
    end = built.states
    assert end["A"].mapping == {"00"}                                        # 500/s under the surge
    assert [e.dz for e in end["P"].children if e.peer == "A"] == ["00"]      # NARROW reached P
    assert end["A"].child_peers == frozenset()                               # C dropped (DISCONNECT) ...
    assert [(e.peer, e.dz) for e in end["C"].parents] == [("P", "01")]       # ... and found P
    assert end["B"].mapping == {"1"}                                         # below its budget: untouched
    for p in ("A", "B", "C"):
        assert triggers.incoming_rate_eps(end[p], built.rates, {"P": frozenset({""})}) <= budgets[p].incoming_eps


def test_simulation_with_constant_rates_never_refines() -> None:
    r = simulating.simulate_overlay(simulating.OverlayScenario(peers=128, allowed_fp=0.25, max_rounds=30, seed=3))
    assert r.refinements == 0                               # coarsening admits only mappings within the budget


def test_simulation_surge_fires_and_the_mappings_hold_the_budget_afterwards() -> None:
    kw: dict[str, object] = {"peers": 128, "allowed_fp": 0.25, "max_rounds": 40, "seed": 3}
    sc = simulating.OverlayScenario(rate_change_round=20, rate_change_factor=2.0, **kw)  # type: ignore[arg-type]
    r = simulating.simulate_overlay(sc)
    before, at = r.rounds[18], r.rounds[19]
    assert before.refinements == 0
    assert at.bandwidth_violations > 0 and at.refinements > 0
    # what is still over budget at the end is no more than before the change (duplicate arrivals, which
    # refining cannot remove), and nobody refines any more
    assert r.over_budget_pct <= before.over_budget_pct
    assert all(s.refinements == 0 for s in r.rounds[-5:])
    assert r.refinements == sum(s.refinements for s in r.rounds) > 0


def test_a_rate_change_needs_a_round() -> None:
    with pytest.raises(ValidationError):
        simulating.OverlayScenario(rate_change_round=0)
    with pytest.raises(ValidationError):
        simulating.OverlayScenario(rate_change_factor=-1.0)
