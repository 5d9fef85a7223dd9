"""The discrete-event simulation agrees with the model (seed 001 section 3.2: simulation confirms the model).

Tolerance: every simulated figure within 4 standard errors of the model (the error is
estimated from independent simulated classes), and within 8 % relative. Seeds are fixed.
"""

from __future__ import annotations

import pytest

from gridstat.analysis import model, simulation, trees, workloads
from gridstat.errors import ValidationError

Z_MAX = 4.0
REL_MAX = 0.08


def check(w: workloads.Workload, *, horizon_s: float, replicas: int, seed: int) -> None:
    s = simulation.simulate(w, horizon_s=horizon_s, replicas=replicas, seed=seed)
    t = model.totals(w)
    for name, est, expected in (("local entries", s.local_entries, t.local_entries),
                                ("remote entries x_r", s.remote_entries, t.remote_entries),
                                ("notifications b_n + b_p", s.notification_rate, t.notification_rate),
                                ("control b_c", s.b_c, t.b_c), ("simple control b_cs", s.b_cs, t.b_cs)):
        assert est.z(expected) <= Z_MAX, f"{name}: simulated {est.mean:.1f} +- {est.stderr:.1f}, model {expected:.1f}"
        assert abs(est.mean - expected) <= REL_MAX * expected, f"{name}: {est.mean:.1f} vs {expected:.1f}"


@pytest.mark.parametrize(("shape", "n_s"), [("T8", 3e3), ("T2", 3e4), ("T64", 1e5)])
def test_running_example_scenarios(shape: str, n_s: float) -> None:
    w = workloads.uniform_workload(trees.paper_tree(int(shape[1:])), subscriptions=n_s)
    check(w, horizon_s=1200, replicas=40, seed=11)


def test_only_the_mean_lifetime_matters() -> None:
    for dist in ("deterministic", "uniform"):
        w = workloads.uniform_workload(trees.paper_tree(8), subscriptions=1e4, lifetime_distribution=dist)
        check(w, horizon_s=1200, replicas=40, seed=5)


def test_heterogeneous_brokers_and_classes() -> None:
    tree = trees.BrokerTree.from_parents({"R": None, "a": "R", "b": "R", "c": "a", "d": "a", "e": "b"})
    g1 = workloads.ClassGroup("x", 50, (0.0, 0.01, 0.02, 0.0, 0.05, 0.03), (1, 60, 30, 1, 10, 5),
                              (0.5, 0, 0.25, 1, 0, 0.2))
    g2 = workloads.ClassGroup("y", 20, (0.01,) * 6, (20.0,) * 6, (0.0, 0.0, 0.0, 0.0, 0.0, 2.0))
    check(workloads.Workload(tree, (g1, g2)), horizon_s=2000, replicas=60, seed=3)


def test_per_broker_figures_follow_the_model() -> None:
    tree = trees.paper_tree(4, brokers=15)
    w = workloads.uniform_workload(tree, subscriptions=300, classes=20, publication_rate=5)
    s = simulation.simulate(w, horizon_s=4000, replicas=40, seed=9)
    a = model.analyze(w)
    for b, fig in enumerate(a.brokers):
        assert s.broker_remote_entries[b] == pytest.approx(fig.remote_entries, rel=0.05, abs=0.05)
    # Toggles come in bursts; compare them per tree level, where there are enough of them.
    for depth in range(1, max(tree.depths) + 1):
        level = [b for b in range(len(tree)) if tree.depths[b] == depth]
        simulated = sum(s.broker_control_rate[b] for b in level)
        expected = sum(a.brokers[b].control_rate for b in level)
        assert simulated == pytest.approx(expected, rel=0.1), f"depth {depth}"


def test_same_seed_same_result() -> None:
    w = workloads.uniform_workload(trees.paper_tree(8), subscriptions=1000)
    a = simulation.simulate(w, horizon_s=100, replicas=2, seed=4)
    b = simulation.simulate(w, horizon_s=100, replicas=2, seed=4)
    assert a == b


def test_bad_simulation_parameters() -> None:
    w = workloads.uniform_workload(trees.paper_tree(8), subscriptions=1000)
    with pytest.raises(ValidationError):
        simulation.simulate(w, horizon_s=0, replicas=4)
    with pytest.raises(ValidationError):
        simulation.simulate(w, horizon_s=10, replicas=1)
