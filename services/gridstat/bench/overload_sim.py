"""A simulated HAPS network for the shapes of seed 000's Figs. 3-7 (``gridstat bench overload``).

HAPS's experiments ran a 20-node content-based network in OMNeT++ with a synthetic processing cost
(``Delta_1 = 5e-8`` s per comparison). This is a small discrete-event model of such a network,
driven through the router's own pure cores: ``router.shedding`` (Eqs. 1-3 through
``LoadEstimator.observe_message``, the trigger ``decide``, ``choose_victim`` and
``choose_reintegration``, ``link_value``, Eqs. 5 and 7) and ``router.shaping`` (``red_probability``,
``choose_kind``, ``subscription_value``, ``MessageStrategy``). What the paper does not give is ours
and named so below.

**Network.** 20 nodes: a core router ``node00`` and three edge routers (``node01`` .. ``node03``),
each edge router with one publisher (``node17`` .. ``node19``) and 4, 4 and 5 subscribers (``node04``
.. ``node16``), so publications cross the core from edge to edge and an edge router that sheds its
link to the core cuts its publisher off from everyone else. ``node04`` subscribes mostly at low
prices and ``node13`` mostly at high ones, both with "many" subscriptions (``MANY`` times the mean;
the paper's Figs. 5/6 subscribers); the others draw prices from ``[0.1, 10]`` and every subscription
a CSC from ``[0.05, 0.1]``, as the paper. Counts per subscriber and per publisher are normal with a
standard deviation of 25 % of the mean; publications outnumber subscriptions about two to one.

**Content.** A publication is one attribute (of ``ATTRIBUTES``) with an integer value in 0..99; a
subscription one constraint ``attr < x`` (x up to 50) or ``attr > x`` (x from 50): interest in the
extremes, so that the further a value from the middle, the more it is worth (ours: single-attribute
publications and single-constraint subscriptions, as the paper's protocol description). Each
subscriber is interested in ``INTEREST`` of the attributes. Subscriptions spread from the edge
routers to every router, not forwarded on a link that already carries a covering one; a forwarded
subscription's price is Eq. 4 over what it covers at that router, itself included (the paper leaves
that open), at CSC 1 beyond (ours). A subscription that is not forwarded because one already sent
covers it still raises that one's price upstream (a price update, ours: Eq. 4 is computed "before
forwarding", and without the update a link's aggregated price would stop growing once its widest
subscriptions have gone, and CHEAPEST would shed it for cheap).

**Link shedding (Figs. 3-6).** Every message a router handles costs ``Delta_1`` per subscription in
its table on links not shed (HAPS's naive matching: N comparisons, Eq. 1), fed per message into Eq. 2;
the trigger is HAPS's: the weighted delay against ``drop_delay_s`` (2e-4 s, Fig. 3's level), no
action within Eq. 3's ``sT`` of the previous one. Links are free and instantaneous in these runs, and
the model does not queue messages behind a busy CPU (the paper's figure reads the delay, not a
queue). Publications pick up Eq. 5's gain at each router with shed links (Eq. 7), and the edge
router charges on delivery (Eq. 10 for the receiving subscriber's matching subscriptions, Eq. 9 for
its non-matching ones covered by one of them; the paper also charges subscribers that receive
nothing, which is left out).

**Message shedding (Fig. 7).** No CPU cost; instead the core's links to the edge routers and the edge
routers' links to their subscribers carry fewer messages a second than offered: one message at a
time, each ``1 / rate`` long (messages of one size), with modified RED on the queue's expected delay
(``drop_start`` .. ``drop_all``). The victim's kind is HAPS's fair choice (``choose_kind``:
subscriptions forwarded by the core share its links to the edges with publications); its value is
the strategy's, recomputed at each drop from the routing table (CHEAPEST: matching prices on the
link; COUNT: matching subscriptions; LOWEST: the publication's gain ``G``; RANDOM: none), a
subscription's being its forwarded price (Eq. 4 already sums what it covers). Every drop is one
Eq. 6 update for each surviving publication in that queue, at most ``Q_size`` (the queue's size at
``drop_all``) of them.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gridstat.router import shaping, shedding
from gridstat.router.shaping import MessageKind, MessageStrategy
from gridstat.router.shedding import Decision, OverloadConfig, Strategy, Trigger

VALUES = 100
ATTRIBUTES = 6
INTEREST = 3
CORE = "node00"
EDGES: dict[str, tuple[str, ...]] = {
    "node01": ("node04", "node05", "node06", "node07"),
    "node02": ("node08", "node09", "node10", "node11"),
    "node03": ("node12", "node13", "node14", "node15", "node16"),
}
#: Publisher -> its edge router.
PUBLISHERS = {"node17": "node01", "node18": "node02", "node19": "node03"}
LOW_PAID, WELL_PAID = "node04", "node13"
#: The paper's Figs. 5/6 subscribers have "many" subscriptions: this many times the mean (ours, not drawn).
MANY = 1.3
#: Price times coverage bins of Figs. 5/6 (the range is [0.005, 1]).
PC_BINS = (0.05, 0.1, 0.25, 0.5)
PC_LABELS = ("< 0.05", "0.05-0.1", "0.1-0.25", "0.25-0.5", ">= 0.5")
SLICES = 10

ROUTER, SUBSCRIBER, PUBLISHER = 0, 1, 2
PUB, SUB = 0, 1


@dataclass(frozen=True)
class Params:
    """One simulated workload. ``quick`` scales it down for tests."""

    seed: int = 7
    #: Subscriptions per subscriber (normal, std 25 %).
    subs_mean: int = 1500
    #: Publications per publisher (normal, std 25 %); three publishers, about twice the subscriptions.
    pubs_mean: int = 13_000
    #: Simulated seconds: about 39 publications a second, so that the constrained links' queues
    #: (``Q_size``, about a dozen messages) do not change with ``scaled``.
    duration_s: float = 1000.0
    #: Subscriptions arrive in this first share of the run (the paper's "no new subscriptions" after 1 d 6 h).
    subscribe_share: float = 0.6
    delta_1_s: float = shedding.DELTA_1_S
    drop_delay_s: float = 2e-4
    reintegrate_delay_s: float = 1.5e-4
    weight: float = 0.05
    #: Fig. 7: the messages a second the constrained links carry, as a share of the publications offered.
    edge_link_share: float = 0.6
    subscriber_link_share: float = 0.35
    drop_start_s: float = 0.2
    drop_all_s: float = 0.5

    def scaled(self, factor: float) -> Params:
        """The same shape with ``factor`` times the subscriptions, publications, thresholds and duration
        (the same rates)."""
        return dataclasses.replace(self, subs_mean=max(10, round(self.subs_mean * factor)),
                                   pubs_mean=max(20, round(self.pubs_mean * factor)),
                                   duration_s=self.duration_s * factor,
                                   drop_delay_s=self.drop_delay_s * factor,
                                   reintegrate_delay_s=self.reintegrate_delay_s * factor)


@dataclass(frozen=True)
class Subscription:
    subscriber: str
    k: int  # attribute * 2 + (0 for "<", 1 for ">")
    x: int
    price: float
    csc: float


@dataclass(frozen=True)
class Workload:
    #: (time s, seq, node, Subscription | (attribute, value)) in time order.
    arrivals: list[tuple[float, int, str, Any]]
    subscriptions: int
    publications: int


def workload(p: Params) -> Workload:
    rnd = random.Random(p.seed)
    out: list[tuple[float, int, str, Any]] = []
    subs = pubs = 0
    for edge in EDGES.values():
        for s in edge:
            if s in (LOW_PAID, WELL_PAID):
                n = round(MANY * p.subs_mean)
            else:
                n = max(1, round(rnd.gauss(p.subs_mean, 0.25 * p.subs_mean)))
            attrs = rnd.sample(range(ATTRIBUTES), INTEREST)
            for _ in range(n):
                op = rnd.randrange(2)
                # Interest in the extremes (an alarm below x or above it): the further a value from the
                # middle, the more subscriptions it matches, so publications differ in value.
                x = rnd.randint(1, VALUES // 2) if op == 0 else rnd.randint(VALUES // 2, VALUES - 2)
                if s in (LOW_PAID, WELL_PAID) and rnd.random() < 0.8:
                    price = rnd.uniform(0.1, 1.0) if s == LOW_PAID else rnd.uniform(5.0, 10.0)
                else:
                    price = rnd.uniform(0.1, 10.0)
                sub = Subscription(s, rnd.choice(attrs) * 2 + op, x, price, rnd.uniform(0.05, 0.1))
                out.append((rnd.uniform(0, p.subscribe_share * p.duration_s), 0, s, sub))
                subs += 1
    for pub in PUBLISHERS:
        n = max(1, round(rnd.gauss(p.pubs_mean, 0.25 * p.pubs_mean)))
        for _ in range(n):
            out.append((rnd.uniform(0, p.duration_s), 0, pub, (rnd.randrange(ATTRIBUTES), rnd.randrange(VALUES))))
            pubs += 1
    out.sort(key=lambda a: a[0])
    return Workload([(t, i, node, m) for i, (t, _, node, m) in enumerate(out)], subs, pubs)


def _bin(pc: float) -> int:
    for i, edge in enumerate(PC_BINS):
        if pc < edge:
            return i
    return len(PC_BINS)


class _Link:
    """A router's side of one link: the subscriptions received over it (its routing-table entry), and
    the queue of what is sent over it when the link is constrained."""

    def __init__(self, peer: str, kind: int, *, tracked: bool) -> None:
        self.peer = peer
        self.kind = kind
        self.n = 0
        self.p_sum = 0.0  # raw prices (Eqs. 5, 6)
        self.value = 0.0  # CHEAPEST's link value (CSC-weighted from a subscriber, raw from a router)
        ks = 2 * ATTRIBUTES
        self.cnt = [[0] * VALUES for _ in range(ks)]  # [k][v]: subscriptions matching value v
        self.mp = [[0.0] * VALUES for _ in range(ks)]  # ... their prices
        self.mcp = [[0.0] * VALUES for _ in range(ks)]  # ... their prices times CSC
        self.hcp = [[0.0] * VALUES for _ in range(ks)]  # [k][x]: price times CSC of threshold x (Eq. 4)
        self.cpk = [0.0] * ks
        self.bins = [[[0] * VALUES for _ in range(ks)] for _ in PC_LABELS] if tracked else None
        self.wide: list[int | None] = [None] * ks  # the widest threshold forwarded over it (covering)
        self.rate = 0.0  # messages a second; 0 = unconstrained
        self.queue: deque[list[Any]] = deque()
        self.q_size = 1

    def add(self, k: int, x: int, price: float, csc: float) -> None:
        lo, hi = (0, x) if k & 1 == 0 else (x + 1, VALUES)
        if lo < hi:
            cp = price * csc
            counts = self.cnt[k]
            counts[lo:hi] = [a + 1 for a in counts[lo:hi]]
            for rows, inc in ((self.mp, price), (self.mcp, cp)):
                row = rows[k]
                row[lo:hi] = [a + inc for a in row[lo:hi]]
            if self.bins is not None:
                binned = self.bins[_bin(cp)][k]
                binned[lo:hi] = [a + 1 for a in binned[lo:hi]]
        self.hcp[k][x] += price * csc
        self.cpk[k] += price * csc
        self.n += 1
        self.p_sum += price
        self.value += price * csc if self.kind == SUBSCRIBER else price

    def add_price(self, k: int, x: int, delta: float) -> None:
        """A price update: the subscription ``k x`` received over this link covers more by ``delta``."""
        lo, hi = (0, x) if k & 1 == 0 else (x + 1, VALUES)
        for rows in (self.mp, self.mcp):
            row = rows[k]
            row[lo:hi] = [a + delta for a in row[lo:hi]]
        self.hcp[k][x] += delta
        self.cpk[k] += delta
        self.p_sum += delta
        self.value += delta

    def covered_cp(self, k: int, x: int) -> float:
        """Price times CSC of the subscriptions here that ``k x`` covers."""
        row = self.hcp[k]
        return sum(row[: x + 1]) if k & 1 == 0 else sum(row[x:])


class _Router:
    def __init__(self, name: str, config: OverloadConfig | None, rng: random.Random) -> None:
        self.name = name
        self.links: dict[str, _Link] = {}
        self.config = config
        self.estimator = shedding.LoadEstimator(config.weight if config else 0.05)
        self.shed: list[tuple[str, bool]] = []
        self.shed_names: set[str] = set()
        self.last_change = -math.inf
        self.rng = rng
        self.actions = {"shed": 0, "reintegrated": 0}
        #: Per slice: (largest Delta_curr, sum of Eq. 2's Delta, messages, least Delta, largest Delta).
        self.slices = [[0.0, 0.0, 0, math.inf, 0.0] for _ in range(SLICES)]


@dataclass
class Result:
    label: str
    revenue: float = 0.0
    value: float = 0.0
    delivered: int = 0
    revenue_slices: list[float] = field(default_factory=lambda: [0.0] * SLICES)
    #: subscriber -> publications received
    received: dict[str, int] = field(default_factory=dict)
    #: subscriber -> per price-times-coverage bin, matching subscriptions of received publications
    pc_bins: dict[str, list[int]] = field(default_factory=dict)
    #: router -> per slice (largest Delta_curr, mean Delta, least Delta, largest Delta)
    delay: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    actions: dict[str, dict[str, int]] = field(default_factory=dict)
    #: link (by its far end) -> messages shed on it; how many of them were subscriptions
    drops: dict[str, int] = field(default_factory=dict)
    subscription_drops: int = 0
    offered: int = 0


class Network:
    """One run over a workload: link shedding by ``link_strategy`` (None: NOSHED, the delay is still
    estimated) or, with ``message_strategy``, message shedding on the constrained links."""

    def __init__(self, p: Params, label: str, *, link_strategy: Strategy | None = None,
                 message_strategy: MessageStrategy | None = None) -> None:
        self.p = p
        self.rng = random.Random(p.seed * 7919 + 1)
        self.message_strategy = message_strategy
        config = None
        if link_strategy is not None:
            config = OverloadConfig(enabled=True, weight=p.weight, strategy=link_strategy, trigger=Trigger.DELAY,
                                    drop_delay_s=p.drop_delay_s, reintegrate_delay_s=p.reintegrate_delay_s,
                                    min_timeout_s=0.0)
        self.cost = message_strategy is None  # the link-shedding runs model the CPU; Fig. 7's the links
        self.routers = {n: _Router(n, config, self.rng) for n in (CORE, *EDGES)}
        core = self.routers[CORE]
        for e, subs in EDGES.items():
            core.links[e] = _Link(e, ROUTER, tracked=False)
            self.routers[e].links[CORE] = _Link(CORE, ROUTER, tracked=False)
            for s in subs:
                self.routers[e].links[s] = _Link(s, SUBSCRIBER, tracked=s in (LOW_PAID, WELL_PAID))
        for pub, e in PUBLISHERS.items():
            self.routers[e].links[pub] = _Link(pub, PUBLISHER, tracked=False)
        self.home = {s: e for e, subs in EDGES.items() for s in subs} | PUBLISHERS
        self.result = Result(label)
        self.events: list[tuple[float, int, int, Any]] = []
        self.seq = itertools.count(1 << 40)
        self.now = 0.0

    # -- driving ----------------------------------------------------------------------------------
    def run(self, w: Workload) -> Result:
        p = self.p
        if self.message_strategy is not None:
            offered_rate = w.publications / p.duration_s
            for e in EDGES:
                self._constrain(self.routers[CORE].links[e], p.edge_link_share * offered_rate)
                for s in EDGES[e]:
                    self._constrain(self.routers[e].links[s], p.subscriber_link_share * offered_rate)
        self.result.offered = w.publications
        events = self.events
        arrivals = iter(w.arrivals)
        nxt = next(arrivals, None)
        while nxt is not None or events:
            if nxt is not None and (not events or nxt[0] <= events[0][0]):
                t, _, node, msg = nxt
                nxt = next(arrivals, None)
                self.now = t
                if isinstance(msg, Subscription):
                    self._subscription_at(self.routers[self.home[node]], node,
                                          msg.k, msg.x, msg.price, msg.csc, t)
                else:
                    self._publication_at(self.routers[self.home[node]], node, [PUB, msg[0], msg[1], 0.0, 0, 0], t)
            else:
                t, _, _, (router, link) = heapq.heappop(events)
                self.now = t
                self._departed(router, link, t)
        return self._finish()

    def _constrain(self, link: _Link, rate: float) -> None:
        link.rate = rate
        link.q_size = max(1, math.ceil(rate * self.p.drop_all_s))

    def _slice(self, t: float) -> int:
        return min(SLICES - 1, int(t / self.p.duration_s * SLICES))

    # -- the CPU of a router (Eqs. 1-3, link shedding) ----------------------------------------------
    def _handle(self, r: _Router, t: float) -> None:
        if not self.cost:
            return
        n = sum(lk.n for name, lk in r.links.items() if name not in r.shed_names)
        current = shedding.processing_delay(n, self.p.delta_1_s)  # Eq. 1
        est = r.estimator
        est.observe_message(arrival_s=t, delay_s=current)  # Eq. 2
        sl = r.slices[self._slice(t)]
        sl[0] = max(sl[0], current)
        sl[1] += est.delay_s
        sl[2] += 1
        sl[3] = min(sl[3], est.delay_s)
        sl[4] = max(sl[4], est.delay_s)
        cfg = r.config
        if cfg is None:
            return
        decision = shedding.decide(cfg, delay_s=est.delay_s, load=est.load, since_change_s=t - r.last_change,
                                   timeout_s=est.timeout_s(), any_shed=bool(r.shed))  # Eq. 3's sT
        if decision is Decision.HOLD:
            return
        values = {(name, True): (lk.value, lk.n) for name, lk in r.links.items() if lk.n}
        if decision is Decision.SHED:
            unit = shedding.choose_victim(values, r.shed, cfg.strategy, r.rng.choice)
            if unit is None:
                return
            r.shed.append(unit)
            r.shed_names.add(unit[0])
            r.actions["shed"] += 1
        else:
            unit = shedding.choose_reintegration(values, r.shed)
            if unit is None:
                return
            r.shed.remove(unit)
            r.shed_names.discard(unit[0])
            r.actions["reintegrated"] += 1
        r.last_change = t

    # -- subscriptions ------------------------------------------------------------------------------
    def _subscription_at(self, r: _Router, frm: str, k: int, x: int, price: float, csc: float, t: float) -> None:
        self._handle(r, t)
        r.links[frm].add(k, x, price, csc)
        lt = k & 1 == 0
        for name, link in r.links.items():
            if name == frm or link.kind != ROUTER:
                continue
            wide = link.wide[k]
            if wide is not None and (wide >= x if lt else wide <= x):
                # A covering subscription went this way already: only its price grows (ours).
                self._price_at(self.routers[name], r.name, k, wide, price * csc)
                continue
            link.wide[k] = x
            covered = sum(lk.covered_cp(k, x) for nm, lk in r.links.items() if nm != name)  # Eq. 4, itself included
            own = price * csc
            value = shaping.subscription_value(own, (covered - own,))
            self._send(r, link, [SUB, k, x, value, 0, 0], t)

    def _price_at(self, r: _Router, frm: str, k: int, x: int, delta: float) -> None:
        """A price update for the subscription ``k x`` received from ``frm``, passed on along the
        subscriptions that cover it (no cost: it is not a message the paper has)."""
        r.links[frm].add_price(k, x, delta)
        for name, link in r.links.items():
            wide = link.wide[k]
            if name != frm and link.kind == ROUTER and wide is not None:
                self._price_at(self.routers[name], r.name, k, wide, delta)

    # -- publications -------------------------------------------------------------------------------
    def _publication_at(self, r: _Router, frm: str, msg: list[Any], t: float) -> None:
        self._handle(r, t)
        if r.shed:  # Eq. 5 once per message, then Eq. 7
            total = sum(lk.p_sum for lk in r.links.values())
            shed_p = sum(r.links[u[0]].p_sum for u in r.shed)
            msg[3] = shedding.update_gain(msg[3], shedding.gain_link_shedding((shed_p,), (total,)))
        k0 = 2 * msg[1]
        v = msg[2]
        for name, link in r.links.items():
            if name == frm or link.kind == PUBLISHER or name in r.shed_names:
                continue
            if link.cnt[k0][v] or link.cnt[k0 + 1][v]:
                self._send(r, link, [PUB, msg[1], v, msg[3], 0, 0], t)

    def _delivered(self, r: _Router, link: _Link, msg: list[Any], t: float) -> None:
        """The last router bills what it sends its subscriber (Eqs. 9, 10)."""
        k0, v, gain = 2 * msg[1], msg[2], msg[3]
        res = self.result
        matched = link.mp[k0][v] + link.mp[k0 + 1][v]
        covered = sum(link.cpk[k] - link.mcp[k][v] for k in (k0, k0 + 1) if link.cnt[k][v])
        charge = shedding.charge(gain, matched) + shedding.charge(gain, covered, matching=False)
        res.revenue += charge
        res.revenue_slices[self._slice(t)] += charge
        res.value += matched
        res.delivered += 1
        res.received[link.peer] = res.received.get(link.peer, 0) + 1
        if link.bins is not None:
            bins = res.pc_bins.setdefault(link.peer, [0] * len(PC_LABELS))
            for b, rows in enumerate(link.bins):
                bins[b] += rows[k0][v] + rows[k0 + 1][v]

    # -- links --------------------------------------------------------------------------------------
    def _send(self, r: _Router, link: _Link, msg: list[Any], t: float) -> None:
        if not link.rate:
            self._arrived(r, link, msg, t)
            return
        q = link.queue
        msg[5] = next(self.seq)
        q.append(msg)
        if len(q) == 1:  # the link was idle: this one is on the wire now
            heapq.heappush(self.events, (t + 1 / link.rate, next(self.seq), 0, (r, link)))
            return
        delay = len(q) / link.rate
        p = self.p
        if delay > p.drop_start_s and self.rng.random() < shaping.red_probability(delay, p.drop_start_s,
                                                                                   p.drop_all_s):
            self._shed_message(r, link)

    def _departed(self, r: _Router, link: _Link, t: float) -> None:
        q = link.queue
        msg = q.popleft()
        if q:
            heapq.heappush(self.events, (t + 1 / link.rate, next(self.seq), 0, (r, link)))
        self._arrived(r, link, msg, t)

    def _arrived(self, r: _Router, link: _Link, msg: list[Any], t: float) -> None:
        if link.kind == SUBSCRIBER:
            if msg[0] == PUB:
                self._delivered(r, link, msg, t)
            return
        nxt = self.routers[link.peer]
        if msg[0] == PUB:
            self._publication_at(nxt, r.name, msg, t)
        else:
            self._subscription_at(nxt, r.name, msg[1], msg[2], msg[3], 1.0, t)

    def _shed_message(self, r: _Router, link: _Link) -> None:
        """Drop one queued message (not the one on the wire): the kind by HAPS's fair choice, then the
        strategy's lowest value, the oldest among equals; the survivors' gains take one Eq. 6 update."""
        q = link.queue
        rnd = self.rng
        pubs = sum(1 for i in range(1, len(q)) if q[i][0] == PUB)
        kind = shaping.choose_kind(pubs, len(q) - 1 - pubs, rnd.random())
        if kind is None:
            return
        want = PUB if kind is MessageKind.PUBLICATION else SUB
        candidates = [i for i in range(1, len(q)) if q[i][0] == want]
        strategy = self.message_strategy
        if strategy is MessageStrategy.RANDOM:
            victim = rnd.choice(candidates)
        else:
            value = self._message_value(link, strategy)
            victim = min(candidates, key=lambda i: (value(q[i]), q[i][5]))
        del q[victim]
        self.result.drops[link.peer] = self.result.drops.get(link.peer, 0) + 1
        self.result.subscription_drops += want == SUB
        total = link.p_sum
        if total <= 0:
            return
        for m in q:
            if m[0] == PUB and m[4] < link.q_size:
                k0 = 2 * m[1]
                matched = link.mp[k0][m[2]] + link.mp[k0 + 1][m[2]]
                m[3] = shedding.update_gain(m[3], shedding.gain_message_shedding((matched,), (total,), link.q_size))
                m[4] += 1

    @staticmethod
    def _message_value(link: _Link, strategy: MessageStrategy | None) -> Callable[[list[Any]], float]:
        def value(m: list[Any]) -> float:
            if m[0] == SUB:
                return float(m[3])
            k0, v = 2 * m[1], m[2]
            if strategy is MessageStrategy.LOWEST:
                return float(m[3])
            if strategy is MessageStrategy.COUNT:
                return float(link.cnt[k0][v] + link.cnt[k0 + 1][v])
            return float(link.mp[k0][v] + link.mp[k0 + 1][v])

        return value

    def _finish(self) -> Result:
        res = self.result
        for name, r in self.routers.items():
            res.actions[name] = dict(r.actions)
            res.delay[name] = [(s[0], s[1] / s[2] if s[2] else 0.0, s[3] if s[2] else 0.0, s[4])
                               for s in r.slices]
        return res


LINK_RUNS: tuple[tuple[str, Strategy | None], ...] = (
    ("NOSHED", None), ("CHEAPEST", Strategy.CHEAPEST), ("LARGEST", Strategy.LARGEST), ("RANDOM", Strategy.RANDOM))
MESSAGE_RUNS: tuple[tuple[str, MessageStrategy], ...] = (
    ("CHEAPEST", MessageStrategy.CHEAPEST), ("LOWEST", MessageStrategy.LOWEST), ("COUNT", MessageStrategy.COUNT),
    ("RANDOM", MessageStrategy.RANDOM))


@dataclass
class Simulation:
    """Figs. 3-7 over ``seeds`` workloads: the first seed's runs in full, every seed's revenues."""

    params: Params
    subscriptions: int
    publications: int
    link: dict[str, Result]
    message: dict[str, Result]
    #: seed -> run -> (revenue, delivered value)
    link_seeds: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)
    message_seeds: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)

    def mean(self, which: str, label: str, index: int = 0) -> float:
        """The mean over seeds of a run's revenue (``index`` 0) or delivered value (1)."""
        runs = self.link_seeds if which == "link" else self.message_seeds
        return sum(r[label][index] for r in runs.values()) / max(1, len(runs))


def simulate(p: Params, *, seeds: int = 1, log: Callable[[str], None] = lambda _: None) -> Simulation:
    """Figs. 3-6 (link shedding: NOSHED and three strategies) and Fig. 7 (message shedding: four strategies)
    on ``seeds`` workloads, seeds ``p.seed``, ``p.seed + 1``, ..."""
    sim: Simulation | None = None
    for i in range(seeds):
        ps = dataclasses.replace(p, seed=p.seed + i)
        w = workload(ps)
        link = {label: Network(ps, label, link_strategy=st).run(w) for label, st in LINK_RUNS}
        message = {label: Network(ps, label, message_strategy=st).run(w) for label, st in MESSAGE_RUNS}
        if sim is None:
            sim = Simulation(p, w.subscriptions, w.publications, link, message)
        sim.link_seeds[ps.seed] = {k: (r.revenue, r.value) for k, r in link.items()}
        sim.message_seeds[ps.seed] = {k: (r.revenue, r.value) for k, r in message.items()}
        log(f"  seed {ps.seed}: link shedding revenue "
            + ", ".join(f"{k} {r.revenue:.4g}" for k, r in link.items() if r.revenue)
            + "; message shedding revenue " + ", ".join(f"{k} {r.revenue:.4g}" for k, r in message.items()))
    assert sim is not None
    return sim


def busiest_edge(sim: Simulation) -> str:
    """The edge router whose table grew largest without shedding (Fig. 3's router)."""
    noshed = sim.link["NOSHED"]
    return max(EDGES, key=lambda e: max(s[0] for s in noshed.delay[e]))


def shapes(sim: Simulation) -> dict[str, bool]:
    """The paper's findings for Figs. 3-7, checked on a simulation (the report and the tests read these)."""
    p = sim.params
    threshold = p.drop_delay_s
    edge = busiest_edge(sim)
    noshed, cheapest = sim.link["NOSHED"].delay[edge], sim.link["CHEAPEST"].delay
    grown = [s[0] for s in noshed]
    weighted = [s[1] for e in EDGES for s in cheapest[e]]
    lr = {k: sim.mean("link", k) for k, _ in LINK_RUNS}
    mr = {k: sim.mean("message", k) for k, _ in MESSAGE_RUNS}
    got = {k: r.received for k, r in sim.link.items()}
    return {
        # Fig. 3: without shedding the delay grows past the threshold and stays; with it, hovers below it.
        "fig3_noshed_grows": grown[-1] >= 1.5 * threshold and all(b >= a for a, b in itertools.pairwise(grown)),
        "fig3_shedding_holds": max(weighted) <= 1.05 * threshold and max(weighted) >= 0.7 * threshold,
        "fig3_oscillates": sum(r["reintegrated"] for r in sim.link["CHEAPEST"].actions.values()) > 0,
        # Fig. 4: CHEAPEST earns more than LARGEST and RANDOM.
        "fig4_cheapest_first": lr["CHEAPEST"] > max(lr["LARGEST"], lr["RANDOM"]),
        # Figs. 5/6: under CHEAPEST the low-paid subscriber receives fewer publications than the well-paid
        # one; without shedding about as many.
        "fig56_low_paid_shed": got["CHEAPEST"].get(LOW_PAID, 0) < 0.6 * got["CHEAPEST"].get(WELL_PAID, 0)
        and got["NOSHED"].get(LOW_PAID, 0) >= 0.7 * got["NOSHED"].get(WELL_PAID, 0),
        # Fig. 7: CHEAPEST earns the most; LOWEST less, but more than COUNT and RANDOM.
        "fig7_cheapest_first": mr["CHEAPEST"] > max(mr["LOWEST"], mr["COUNT"], mr["RANDOM"]),
        "fig7_lowest_above_random": mr["LOWEST"] > mr["RANDOM"],
        "fig7_lowest_above_count": mr["LOWEST"] > mr["COUNT"],
    }


__all__ = ["EDGES", "LINK_RUNS", "LOW_PAID", "MESSAGE_RUNS", "PC_LABELS", "WELL_PAID", "Network", "Params",
           "Result", "Simulation", "Workload", "busiest_edge", "shapes", "simulate", "workload"]
