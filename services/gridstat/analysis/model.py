"""The stochastic capacity model of hierarchical identity-based routing (seed 001, equations 1-14).

Why a closed-form model: before a utility puts a status-dissemination overlay into
production it needs to know how large the routers' routing tables get, how many control
messages subscription churn costs and how many notifications cross each link, for many
candidate topologies and workloads, without building each one. Mühl et al. model every
(broker, filter class) subscription population as an M/G/inf queue; the equations then
follow from one bottom-up pass over the tree per class.

Routing modelled (seed 001, section 2): subscriptions travel up towards the root and stop
at the first broker that already forwarded one of the same class (identity-based); a broker
toggles between "nothing for f in my subtree" (state 0) and "something" (state 1) and sends
one control message to its parent per toggle. Notifications always travel up to the root
and down every link with a routing entry. *Simple routing* sends every subscription and
unsubscription to the root (eq. 14); *flooding* sends every notification over every link
(eq. 11).

Equation numbers are the paper's. Every function is pure; ``analyze`` evaluates one
workload, ``break_even`` searches the subscription load at which filtering stops paying off
against flooding (the paper's Fig. 7 statement for ``T_8``, ``omega = 32``).

Per-link rates are our extension (the paper's "next step"; docs/analysis.md): on the
link between ``B`` and its parent, every notification published in ``B``'s subtree goes up,
and every other notification comes down iff ``B``'s subtree holds a subscription. Summed
over links they give exactly ``b_n + b_p`` (tested), so the per-broker table adds up to the
paper's totals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridstat.analysis.trees import BrokerTree
from gridstat.analysis.workloads import ClassGroup, Workload
from gridstat.errors import ValidationError

# -- equations, one filter class -------------------------------------------------------------------


def p_empty_local(arrival_per_s: float, lifetime_s: float) -> float:
    """Eq. (1): ``p_0^f(B) = exp(-lambda/mu)``, no local subscription (M/G/inf, Jain)."""
    return math.exp(-arrival_per_s * lifetime_s) if arrival_per_s > 0 else 1.0


def local_entries(arrival_per_s: float, lifetime_s: float) -> float:
    """Eq. (2): ``x_l^f(B) = lambda / mu``, expected local routing entries."""
    return arrival_per_s * lifetime_s if arrival_per_s > 0 else 0.0


def p_empty_subtree(tree: BrokerTree, group: ClassGroup) -> tuple[float, ...]:
    """Eq. (3): ``P_0^f(B) = p_0^f(B) * prod_{C in C(B)} P_0^f(C)`` (empty product 1 at leaves)."""
    out = [1.0] * len(tree)
    for b in tree.post_order:
        v = p_empty_local(group.arrival_per_s[b], group.lifetime_s[b])
        for c in tree.children[b]:
            v *= out[c]
        out[b] = v
    return tuple(out)


def remote_entries(tree: BrokerTree, p0: Sequence[float]) -> tuple[float, ...]:
    """Eq. (4): ``x_r^f(B) = sum_{C in C(B)} (1 - P_0^f(C))``, expected remote routing entries of ``B``."""
    return tuple(sum(1.0 - p0[c] for c in tree.children[b]) for b in range(len(tree)))


def accumulated_arrivals(tree: BrokerTree, group: ClassGroup) -> tuple[float, ...]:
    """Eq. (8): ``lambda_a^f(B) = lambda^f(B) + sum_{C in C(B)} lambda_a^f(C)``."""
    out = [0.0] * len(tree)
    for b in tree.post_order:
        out[b] = group.arrival_per_s[b] + sum(out[c] for c in tree.children[b])
    return tuple(out)


def toggle_rates(tree: BrokerTree, lam_a: Sequence[float], p0: Sequence[float]) -> tuple[float, ...]:
    """Eq. (9): ``M^f(B) = 2 lambda_a^f(B) P_0^f(B)``; the root sends nothing up (eq. 10 sums B != R).

    An arrival in ``B``'s subtree toggles ``B`` iff the subtree was empty (PASTA: probability
    ``P_0``); in equilibrium departures that empty it are as frequent, hence the factor 2.
    """
    return tuple(0.0 if b == tree.root else 2.0 * lam_a[b] * p0[b] for b in range(len(tree)))


def additional_rate(tree: BrokerTree, group: ClassGroup, p0: Sequence[float]) -> float:
    """Eq. (7), one class: ``sum_{B != R} omega^f(B) sum_{B' in P(B)} P_0^f(B')``, literally."""
    return sum(group.publish_per_s[b] * sum(p0[x] for x in tree.path_to_root(b))
               for b in range(len(tree)) if b != tree.root and group.publish_per_s[b] > 0)


def subtree_publications(tree: BrokerTree, group: ClassGroup) -> tuple[float, ...]:
    """Notifications of one class published per second in each broker's subtree."""
    out = [0.0] * len(tree)
    for b in tree.post_order:
        out[b] = group.publish_per_s[b] + sum(out[c] for c in tree.children[b])
    return tuple(out)


# -- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerFigures:
    """Expected figures of one broker, summed over all filter classes (rates per second)."""

    name: str
    depth: int
    children: int
    #: eq. (2) summed over classes
    local_entries: float
    #: eq. (4) summed over classes: the routing-table size that costs matching and forwarding
    remote_entries: float
    #: eq. (9) summed over classes: control messages this broker sends its parent (identity-based)
    control_rate: float
    #: ``2 lambda_a(B)``: control messages this broker sends its parent under simple routing (eq. 14's terms)
    simple_control_rate: float
    #: notifications this broker sends up to its parent (all published in its subtree)
    uplink_up_rate: float
    #: notifications its parent sends down to it
    uplink_down_rate: float
    #: notifications flooding sends over the uplink (every notification once, eq. 11's terms)
    uplink_flooding_rate: float
    #: notifications this broker sends (up to its parent and down to its children)
    sent_rate: float
    #: notifications this broker receives (from its parent and its children)
    received_rate: float

    @property
    def uplink_rate(self) -> float:
        return self.uplink_up_rate + self.uplink_down_rate


@dataclass(frozen=True)
class Totals:
    """The paper's system-wide figures (per second where a rate)."""

    classes: int
    #: ``N_s``
    subscriptions: float
    #: ``omega``
    publication_rate: float
    links: int
    #: sum of eq. (2)
    local_entries: float
    #: eq. (5): ``x_r``
    remote_entries: float
    #: eq. (6)
    b_n: float
    #: eq. (7)
    b_p: float
    #: eq. (10)
    b_c: float
    #: eq. (11)
    b_f: float
    #: eq. (12) ``b_f - (b_n + b_p)``, computed per link without that subtraction (``totals``)
    b_s: float
    #: eq. (13) ``b_s - b_c``: overall saving of identity-based routing against flooding
    b: float
    #: eq. (14)
    b_cs: float

    @property
    def notification_rate(self) -> float:
        """``b_n + b_p``: the overall notification rate of Fig. 4."""
        return self.b_n + self.b_p

    @property
    def b_simple(self) -> float:
        """``b_s - b_cs``: overall saving of simple routing against flooding (Fig. 7)."""
        return self.b_s - self.b_cs


@dataclass(frozen=True)
class Analysis:
    workload: Workload
    brokers: tuple[BrokerFigures, ...]
    totals: Totals


@dataclass(frozen=True)
class _Group:
    """One class's vectors, before multiplying by the group's count."""

    p0: tuple[float, ...]
    lam_a: tuple[float, ...]
    x_r: tuple[float, ...]
    toggles: tuple[float, ...]
    pub_sub: tuple[float, ...]
    b_p: float


def _evaluate_group(tree: BrokerTree, group: ClassGroup) -> _Group:
    p0 = p_empty_subtree(tree, group)
    lam_a = accumulated_arrivals(tree, group)
    return _Group(p0=p0, lam_a=lam_a, x_r=remote_entries(tree, p0), toggles=toggle_rates(tree, lam_a, p0),
                  pub_sub=subtree_publications(tree, group), b_p=additional_rate(tree, group, p0))


def totals(workload: Workload) -> Totals:
    """Equations (5)-(14) for a whole workload (the fast path of sweeps and break-even searches)."""
    tree = workload.tree
    x_l = x_r = b_n = b_p = b_c = b_cs = b_s = 0.0
    for g in workload.groups:
        ev = _evaluate_group(tree, g)
        omega_f = sum(g.publish_per_s)
        # (12) per link: flooding sends omega_f down the link to B's parent; filtering sends what B's
        # subtree publishes up and, unless the subtree is empty of subscriptions (P_0), the rest down.
        # The difference, P_0(B) * (omega_f - subtree publications), is a sum of non-negative terms;
        # b_f - (b_n + b_p) would subtract two near-equal totals at high loads (docs/analysis.md).
        b_s += g.count * sum(ev.p0[b] * (omega_f - ev.pub_sub[b]) for b in range(len(tree)) if b != tree.root)
        xr_f = sum(ev.x_r)                                                       # (5)
        x_l += g.count * sum(local_entries(g.arrival_per_s[b], g.lifetime_s[b]) for b in range(len(tree)))
        x_r += g.count * xr_f
        b_n += g.count * xr_f * omega_f                                          # (6)
        b_p += g.count * ev.b_p                                                  # (7)
        b_c += g.count * sum(ev.toggles)                                         # (10)
        b_cs += g.count * 2.0 * sum(ev.lam_a[b] for b in range(len(tree)) if b != tree.root)  # (14)
    omega = workload.publication_rate
    b_f = tree.links * omega                                                     # (11)
    return Totals(classes=workload.classes, subscriptions=workload.subscriptions, publication_rate=omega,
                  links=tree.links, local_entries=x_l, remote_entries=x_r, b_n=b_n, b_p=b_p, b_c=b_c,
                  b_f=b_f, b_s=b_s, b=b_s - b_c, b_cs=b_cs)                       # (13)


def analyze(workload: Workload) -> Analysis:
    """Per-broker expected routing-table sizes and message rates, plus the paper's totals."""
    tree = workload.tree
    n = len(tree)
    loc = [0.0] * n
    rem = [0.0] * n
    ctl = [0.0] * n
    simple = [0.0] * n
    up = [0.0] * n
    down = [0.0] * n
    for g in workload.groups:
        ev = _evaluate_group(tree, g)
        omega_f = sum(g.publish_per_s)
        k = g.count
        for b in range(n):
            loc[b] += k * local_entries(g.arrival_per_s[b], g.lifetime_s[b])
            rem[b] += k * ev.x_r[b]
            ctl[b] += k * ev.toggles[b]
            if b != tree.root:
                simple[b] += k * 2.0 * ev.lam_a[b]
                up[b] += k * ev.pub_sub[b]
                down[b] += k * (1.0 - ev.p0[b]) * (omega_f - ev.pub_sub[b])
    omega = workload.publication_rate
    figures = []
    for b in range(n):
        kids = tree.children[b]
        figures.append(BrokerFigures(
            name=tree.names[b], depth=tree.depths[b], children=len(kids), local_entries=loc[b],
            remote_entries=rem[b], control_rate=ctl[b], simple_control_rate=simple[b], uplink_up_rate=up[b],
            uplink_down_rate=down[b], uplink_flooding_rate=0.0 if b == tree.root else omega,
            sent_rate=up[b] + sum(down[c] for c in kids), received_rate=down[b] + sum(up[c] for c in kids)))
    return Analysis(workload=workload, brokers=tuple(figures), totals=totals(workload))


# -- break-even against flooding -------------------------------------------------------------------

ROUTING = ("identity", "simple")


@dataclass(frozen=True)
class BreakEven:
    """Where filtering stops saving messages against flooding, for one routing algorithm.

    ``scale`` multiplies the workload's subscription arrival rates; ``subscriptions`` is the
    resulting ``N_s``. ``None`` fields mean: no crossing in the searched range (``saving_at_low``
    tells on which side the whole range lies).
    """

    routing: str
    scale: float | None
    subscriptions: float | None
    saving_at_low: float


def saving(t: Totals, routing: str) -> float:
    """Messages per second saved against flooding: ``b`` (eq. 13) or ``b_s - b_cs`` for simple routing."""
    if routing == "identity":
        return t.b
    if routing == "simple":
        return t.b_simple
    raise ValidationError(f"routing must be one of {', '.join(ROUTING)}, got {routing!r}", field="routing")


def break_even(workload: Workload, routing: str = "identity", *, low: float = 1e-6, high: float = 1e9,
               points_per_decade: int = 8, tolerance: float = 1e-9) -> BreakEven:
    """The smallest subscription scale at which the saving against flooding turns negative.

    Scans ``log10(scale)`` on a grid from ``low`` to ``high`` (the saving need not be monotone:
    ``b_c`` rises and falls), then bisects the first sign change in log space to ``tolerance``.
    """
    if not (0 < low < high) or not math.isfinite(high):
        raise ValidationError(f"need 0 < low < high, got {low}, {high}", field="range")
    base = workload.subscriptions
    if base <= 0:
        raise ValidationError("the workload has no subscriptions to scale", field="subscriptions")

    def f(log_s: float) -> float:
        return saving(totals(workload.scaled(10.0 ** log_s)), routing)

    return _first_crossing(f, math.log10(low), math.log10(high), points_per_decade, tolerance, routing, base)


def _first_crossing(f: Callable[[float], float], lo: float, hi: float, per_decade: int, tol: float, routing: str,
                    base: float) -> BreakEven:
    steps = max(2, math.ceil((hi - lo) * per_decade))
    xs = [lo + (hi - lo) * i / steps for i in range(steps + 1)]
    prev_x, prev_y = xs[0], f(xs[0])
    first = prev_y
    if prev_y <= 0:
        return BreakEven(routing, None, None, first)
    for x in xs[1:]:
        y = f(x)
        if y <= 0:
            a, b = prev_x, x
            while b - a > tol:
                m = (a + b) / 2
                if f(m) > 0:
                    a = m
                else:
                    b = m
            s = 10.0 ** ((a + b) / 2)
            return BreakEven(routing, s, s * base, first)
        prev_x, prev_y = x, y
    return BreakEven(routing, None, None, first)


def sweep(workload: Workload, scales: Sequence[float]) -> tuple[Totals, ...]:
    """Totals at each subscription scale (the x axis of the paper's Figs. 3-7)."""
    return tuple(totals(workload.scaled(s)) for s in scales)


def log_space(low: float, high: float, points: int) -> tuple[float, ...]:
    """``points`` values spaced evenly in log10 from ``low`` to ``high`` inclusive."""
    if points < 2 or not 0 < low < high:
        raise ValidationError(f"need points >= 2 and 0 < low < high, got {points}, {low}, {high}", field="range")
    a, b = math.log10(low), math.log10(high)
    return tuple(10.0 ** (a + (b - a) * i / (points - 1)) for i in range(points))
