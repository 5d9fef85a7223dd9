"""The equations of seed 001 against the paper's statements about its running example (docs/analysis.md)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, getcontext

import pytest

from gridstat.analysis import model, trees, workloads

TREES = trees.paper_trees()


def uniform(name: str, n_s: float, omega: float = 1000.0) -> workloads.Workload:
    return workloads.uniform_workload(TREES[name], subscriptions=n_s, publication_rate=omega)


def peaks(values: list[float]) -> list[int]:
    return [i for i in range(1, len(values) - 1) if values[i] > values[i - 1] and values[i] >= values[i + 1]]


def test_uniform_setting_spreads_load_evenly() -> None:
    w = uniform("T8", 127_000)
    g = w.groups[0]
    assert g.count == 1000
    assert g.load(5) == pytest.approx(1.0)  # rho = N_s / (127 * 1000)
    assert g.arrival_per_s[5] == pytest.approx(1 / 60)
    assert w.subscriptions == pytest.approx(127_000)
    assert w.publication_rate == pytest.approx(1000)


def test_single_link_by_hand() -> None:
    # R <- B: one class, rho = 1 at B only, publications at B only.
    tree = trees.BrokerTree.from_parents({"R": None, "B": "R"})
    g = workloads.ClassGroup("f", 1, (0.0, 0.5), (0.0, 2.0), (0.0, 3.0))
    t = model.totals(workloads.Workload(tree, (g,)))
    p0 = math.exp(-1.0)
    assert t.remote_entries == pytest.approx(1 - p0)             # (4), (5)
    assert t.b_n == pytest.approx((1 - p0) * 3.0)                # (6)
    assert t.b_p == pytest.approx(3.0 * p0)                      # (7)
    assert t.b_c == pytest.approx(2 * 0.5 * p0)                  # (9), (10)
    assert t.b_cs == pytest.approx(2 * 0.5)                      # (14)
    assert t.b_f == pytest.approx(3.0)                           # (11)
    assert t.b_s == pytest.approx(3.0 - 3.0)                     # (12): B's publications always go up
    assert t.b == pytest.approx(-2 * 0.5 * p0)                   # (13)


@pytest.mark.parametrize("name", list(TREES))
def test_limits_for_many_subscriptions(name: str) -> None:
    t = model.totals(uniform(name, 1e9))
    assert t.remote_entries == pytest.approx(126_000)            # Fig. 3: links x |F|
    assert t.notification_rate == pytest.approx(126_000)         # Fig. 4
    assert t.b_c == pytest.approx(0, abs=1e-6)                   # Fig. 5
    assert t.b == pytest.approx(0, abs=1e-6)                     # Fig. 6


@pytest.mark.parametrize("name", list(TREES))
def test_without_subscriptions(name: str) -> None:
    t = model.totals(uniform(name, 0.0))
    assert t.b_c == 0.0
    assert t.remote_entries == 0.0
    # Every notification climbs to the root: b_p(0) = omega * mean depth; b = 126 000 - that
    # (the paper's "126 000 if there are no subscriptions" is approximate, docs/analysis.md).
    assert t.b_p == pytest.approx(1000 * TREES[name].mean_depth())
    assert t.b == pytest.approx(126_000 - 1000 * TREES[name].mean_depth())


def test_fig3_routing_tables_grow_strictly_with_decreasing_gradient() -> None:
    ns = model.log_space(10, 7e5, 60)
    for name in TREES:
        xr = [model.totals(uniform(name, n)).remote_entries for n in ns]
        assert all(b > a for a, b in itertools.pairwise(xr)), name
    # A longer average path is steeper at low N_s and flatter at high N_s.
    low = {n: model.totals(uniform(n, 100)).remote_entries for n in ("T1", "T64")}
    high = {n: model.totals(uniform(n, 3e5)).remote_entries for n in ("T1", "T64")}
    assert low["T1"] > low["T64"]
    assert 126_000 - high["T1"] < 126_000 - high["T64"]


def test_fig4_notifications_rise_and_bp_dominates_small_loads() -> None:
    ns = model.log_space(10, 7e5, 40)
    for name in TREES:
        ts = [model.totals(uniform(name, n)) for n in ns]
        rates = [t.notification_rate for t in ts]
        assert all(b >= a - 1e-6 for a, b in itertools.pairwise(rates)), name
        assert ts[0].b_p > ts[0].b_n
        assert ts[-1].b_n > ts[-1].b_p
    # The more balanced, the less b_p matters.
    bp = [model.totals(uniform(n, 1000)).b_p for n in TREES]
    assert bp == sorted(bp, reverse=True)


def test_fig5_control_rate_unimodal_except_t2_t4_with_an_extra_local_maximum() -> None:
    ns = model.log_space(10, 7e5, 200)
    found = {}
    for name in TREES:
        bc = [model.totals(uniform(name, n)).b_c for n in ns]
        found[name] = peaks(bc)
        assert bc[-1] < max(bc)
        assert model.totals(uniform(name, 1e7)).b_c < 0.01 * max(bc)  # converges towards 0
    assert {n: len(p) for n, p in found.items()} == {"T1": 1, "T2": 2, "T4": 2, "T8": 1, "T16": 1, "T32": 1, "T64": 1}
    # T1 peaks at a much smaller number of subscriptions than the others.
    assert ns[found["T1"][0]] * 10 < min(ns[found[n][0]] for n in ("T8", "T16", "T32", "T64"))


def test_fig6_saving_falls_and_steeper_for_unbalanced_trees() -> None:
    ns = model.log_space(10, 7e5, 40)
    for name in TREES:
        b = [model.totals(uniform(name, n)).b for n in ns]
        assert b[0] > b[-1] >= -1e-6
    at = [model.totals(uniform(n, 3000)).b for n in TREES]
    assert at == sorted(at)                                      # T1 (most unbalanced) has saved least


def test_fig7_break_even_against_flooding_for_t8_at_omega_32() -> None:
    w = uniform("T8", 1000, omega=32)
    identity = model.break_even(w, "identity")
    simple = model.break_even(w, "simple")
    assert identity.subscriptions == pytest.approx(1.0e5, rel=0.03)   # "N_s > 100 000"
    assert simple.subscriptions == pytest.approx(9.4e3, rel=0.03)     # "N_s > 10 000" (9.4e3 exactly, docs/analysis.md)
    assert identity.subscriptions > simple.subscriptions                # identity outperforms simple routing


def test_identity_control_never_exceeds_simple() -> None:
    for name in TREES:
        for n in (10, 1e3, 1e5, 7e5):
            t = model.totals(uniform(name, n))
            assert t.b_c <= t.b_cs + 1e-9
            assert t.b >= t.b_simple - 1e-9


def test_per_link_rates_add_up_to_the_paper_totals() -> None:
    tree = trees.BrokerTree.from_parents({"R": None, "a": "R", "b": "R", "c": "a", "d": "a", "e": "b"})
    g1 = workloads.ClassGroup("x", 7, (0.0, 0.01, 0.2, 0.0, 0.05, 0.3), (1, 60, 30, 1, 10, 5), (2, 0, 1, 4, 0, 0.5))
    g2 = workloads.ClassGroup("y", 3, (0.1,) * 6, (20.0,) * 6, (0.0, 0.0, 0.0, 0.0, 0.0, 9.0))
    a = model.analyze(workloads.Workload(tree, (g1, g2)))
    links = sum(b.uplink_rate for b in a.brokers)
    assert links == pytest.approx(a.totals.notification_rate)
    assert sum(b.remote_entries for b in a.brokers) == pytest.approx(a.totals.remote_entries)
    assert sum(b.control_rate for b in a.brokers) == pytest.approx(a.totals.b_c)
    assert sum(b.simple_control_rate for b in a.brokers) == pytest.approx(a.totals.b_cs)
    assert sum(b.sent_rate for b in a.brokers) == pytest.approx(links)
    assert sum(b.received_rate for b in a.brokers) == pytest.approx(links)


def test_a_workload_without_subscriptions_has_no_break_even() -> None:
    with pytest.raises(Exception, match="no subscriptions"):
        model.break_even(uniform("T8", 0.0))


def test_missing_lifetime_where_subscriptions_arrive() -> None:
    with pytest.raises(workloads.MissingParameter):
        workloads.ClassGroup("x", 1, (0.1,), (0.0,), (0.0,))


def _reference_saving(w: workloads.Workload, scale: float, routing: str) -> Decimal:
    """Eq. (13) (identity) or b_s - b_cs (simple), evaluated in 60-digit decimal arithmetic from the
    per-link form of eq. (12): no subtraction of near-equal totals and no float rounding."""
    getcontext().prec = 60
    tree, s = w.tree, Decimal(scale)
    total = Decimal(0)
    for g in w.groups:
        lam = [Decimal(v) * s for v in g.arrival_per_s]
        load = [lam[b] * Decimal(g.lifetime_s[b]) for b in range(len(tree))]
        pub = [Decimal(v) for v in g.publish_per_s]
        omega_f = sum(pub, Decimal(0))
        sub_load, lam_a, pub_sub = list(load), list(lam), list(pub)
        for b in tree.post_order:
            for c in tree.children[b]:
                sub_load[b] += sub_load[c]
                lam_a[b] += lam_a[c]
                pub_sub[b] += pub_sub[c]
        for b in range(len(tree)):
            if b == tree.root:
                continue
            p0 = (-sub_load[b]).exp()
            control = 2 * lam_a[b] * (p0 if routing == "identity" else 1)
            total += g.count * (p0 * (omega_f - pub_sub[b]) - control)
    return total


@pytest.mark.parametrize("routing", ["identity", "simple"])
@pytest.mark.parametrize("omega", [32.0, 1000.0])
def test_break_even_agrees_with_a_cancellation_free_evaluation(routing: str, omega: float) -> None:
    # The running example (T_8) at the paper's omega = 1000 and Fig. 7's 32: near the identity break-even
    # b_s is ~1e-13 of b_f, where b_f - (b_n + b_p) in floats was off by ~10 % (docs/analysis.md).
    w = uniform("T8", 1000, omega=omega)
    found = model.break_even(w, routing)
    assert found.scale is not None
    lo, hi = found.scale * (1 - 1e-6), found.scale * (1 + 1e-6)
    assert _reference_saving(w, lo, routing) > 0 > _reference_saving(w, hi, routing)
    for scale in (1.0, 10.0, found.scale / 2, found.scale * 0.99):
        t = model.totals(w.scaled(scale))
        want = _reference_saving(w, scale, routing)
        got = model.saving(t, routing)
        assert abs(Decimal(got) - want) <= Decimal("1e-9") * abs(want) + Decimal("1e-12") * Decimal(t.b_f)
