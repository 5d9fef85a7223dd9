"""``gridstat bench overload``'s simulated HAPS network: the shapes of the paper's Figs. 3-7 on a small
seeded run (a tenth of the bench's workload, three seeds), and the report around them."""

from __future__ import annotations

import pytest

from gridstat.bench import overload, overload_sim
from gridstat.bench.overload_sim import EDGES, LOW_PAID, WELL_PAID, Params, Simulation


@pytest.fixture(scope="module")
def sim() -> Simulation:
    return overload_sim.simulate(Params(seed=7).scaled(0.1), seeds=3)


def test_the_run_is_seeded(sim: Simulation) -> None:
    again = overload_sim.simulate(Params(seed=7).scaled(0.1), seeds=1)
    assert again.link_seeds[7] == sim.link_seeds[7] and again.message_seeds[7] == sim.message_seeds[7]


def test_fig3_the_weighted_delay_holds_at_the_threshold_while_unshed_delay_grows(sim: Simulation) -> None:
    threshold = sim.params.drop_delay_s
    edge = overload_sim.busiest_edge(sim)
    grown = [s[0] for s in sim.link["NOSHED"].delay[edge]]
    assert grown[0] < threshold < grown[-1] and grown[-1] >= 1.5 * threshold
    weighted = [s[1] for e in EDGES for s in sim.link["CHEAPEST"].delay[e]]
    assert 0.7 * threshold <= max(weighted) <= 1.05 * threshold
    actions = sim.link["CHEAPEST"].actions
    assert sum(a["shed"] for a in actions.values()) > sum(a["reintegrated"] for a in actions.values()) > 0
    assert actions["node00"] == {"shed": 0, "reintegrated": 0}  # covering keeps the core's table small
    shapes = overload_sim.shapes(sim)
    assert shapes["fig3_noshed_grows"] and shapes["fig3_shedding_holds"] and shapes["fig3_oscillates"]


def test_fig4_cheapest_link_shedding_earns_most(sim: Simulation) -> None:
    revenue = {k: sim.mean("link", k) for k, _ in overload_sim.LINK_RUNS}
    assert revenue["NOSHED"] == 0  # revenue only under overload
    assert revenue["CHEAPEST"] > revenue["LARGEST"] and revenue["CHEAPEST"] > revenue["RANDOM"]
    value = {k: sim.mean("link", k, 1) for k, _ in overload_sim.LINK_RUNS}
    assert value["NOSHED"] > value["CHEAPEST"] > max(value["LARGEST"], value["RANDOM"])
    assert overload_sim.shapes(sim)["fig4_cheapest_first"]


def test_figs5_6_cheapest_sheds_the_low_paid_subscriber(sim: Simulation) -> None:
    got = {k: r.received for k, r in sim.link.items()}
    assert got["CHEAPEST"][LOW_PAID] < 0.6 * got["CHEAPEST"][WELL_PAID]
    assert got["NOSHED"][LOW_PAID] >= 0.7 * got["NOSHED"][WELL_PAID]
    bins = sim.link["NOSHED"].pc_bins
    low, high = bins[LOW_PAID], bins[WELL_PAID]
    assert sum(low[:2]) > 0.6 * sum(low) and sum(high[-2:]) > 0.6 * sum(high)  # price times coverage


def test_fig7_cheapest_message_shedding_earns_most_random_least(sim: Simulation) -> None:
    revenue = {k: sim.mean("message", k) for k, _ in overload_sim.MESSAGE_RUNS}
    assert revenue["CHEAPEST"] > max(revenue["LOWEST"], revenue["COUNT"], revenue["RANDOM"])
    assert revenue["LOWEST"] > revenue["RANDOM"] and revenue["COUNT"] > revenue["RANDOM"]
    shed = {k: sum(r.drops.values()) for k, r in sim.message.items()}
    assert all(n > 0 for n in shed.values())
    # Subscriptions share the core's links with publications: the fair choice shed some of them too,
    # far fewer than publications (they are far fewer in the queues).
    for r in sim.message.values():
        assert 0 < r.subscription_drops < 0.2 * sum(r.drops.get(e, 0) for e in EDGES)


def test_the_report_states_each_finding(sim: Simulation) -> None:
    text = overload.simulation_report(sim)
    for fig in ("Fig. 3", "Fig. 4", "Figs. 5/6", "Fig. 7"):
        assert fig in text
    shapes = overload_sim.shapes(sim)
    assert text.count("| yes |") == sum(shapes.values())
    assert text.count("| **no** |") == len(shapes) - sum(shapes.values())
    whole = overload.report([], "facts.", 1.0, sim)
    assert whole.startswith("## Overload handling") and "Figs. 8-9" not in whole
