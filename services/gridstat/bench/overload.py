"""``gridstat bench overload``: the shapes of HAPS's experiments (seed 000, Figs. 3-9).

Figs. 3-7 (link shedding under router overload, message shedding under link overload) come from a
simulated 20-node network driven through the router's own shedding cores (``bench.overload_sim``).
Figs. 8-9 (a link failure) come from a real router:

one real ``gridstat router`` process forwards a publisher's streams to a control centre over one
outgoing channel shaped in software by the router's token bucket (``SetChannelShaping``). The
channel runs at 100 kbit/s, fails over to a 1 kbit/s backup for ``failure_s``, then the primary
returns. Two high-value streams (price 10 each, one event a second each, half a second apart) share
the link with twenty low-value ones (prices 0.10 .. 1.05, ten events a second each: about 44 kbit/s
in all), all at the same GridStat priority, so the queue is served in arrival order and only the
dropping strategy differs between runs:

* **no shedding**: the queue only grows (the paper's NODROP);
* **FIFO tail drop**: the arrival is dropped once the queue's expected delay passes ``drop_all``;
* **lowest value first**: the lowest-valued queued event is dropped once it passes ``drop_all``;
* **RED**: modified RED between ``drop_start`` and ``drop_all``, lowest value first (HAPS).

Latency is publish-to-receive on one host clock (timestamps in ms). The bucket counts 28 bytes of
UDP/IP header and 16 of datagram header per datagram (one datagram of two events takes 0.74 s at
1 kbit/s). The high-value streams' bound is the paper's threshold, 1 s, which is also ``drop_all``.
Revenue is the router's HAPS charging on the link (Eqs. 6-8, 10: the gain from the drops each
delivered event survived, times its value); *delivered value* sums the prices of what arrived.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import grpc

from gridstat.bench import overload_sim as sim_
from gridstat.bench.router import router_command
from gridstat.core import children, wire
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

PUB_ID = 900_101
SUB_ID = 900_102
PRIMARY_BPS = 100_000
BACKUP_BPS = 1_000
DROP_START_MS = 500.0
DROP_ALL_MS = 1000.0
WINDOW_MS = 600.0
#: The high-value streams' latency bound: the paper's threshold (Fig. 8), here also drop_all.
BOUND_MS = 1000
QUEUE_SIZE = 256  # the channel's capacity: Eq. 6's Q_size
HIGH = {1: (10.0, 0), 2: (10.0, 500)}  # variable -> (price, phase ms) at 1000 ms
LOW = {10 + i: 0.10 + 0.05 * i for i in range(20)}  # variable -> price, at 100 ms
HIGH_INTERVAL_MS = 1000
LOW_INTERVAL_MS = 100
STRATEGIES = (("none", "no shedding (NODROP)"), ("tail", "FIFO tail drop"), ("value", "lowest value first"),
              ("red", "RED, lowest value first (HAPS)"))
METHOD = (
    "One real `gridstat router` process forwards a publisher's streams to a control centre over one outgoing "
    "channel shaped in software by the router's token bucket (`SetChannelShaping`): 100 kbit/s, then a 1 kbit/s "
    "backup for the failure, then 100 kbit/s again. Two high-value streams (price 10 each, one event a second "
    "each, half a second apart) share the link with twenty low-value ones (prices 0.10 .. 1.05, ten events a "
    "second each; about 44 kbit/s in all), all at the same GridStat priority, so the queue is served in arrival "
    "order and only the dropping strategy differs between runs: **no shedding** (the queue only grows: the "
    "paper's NODROP); **FIFO tail drop** (the arrival is dropped once the queue's expected delay passes "
    "`drop_all`); **lowest value first** (the lowest-valued queued event is dropped once it passes `drop_all`: "
    "the paper's CHEAPEST victim); **RED** (modified RED between `drop_start` and `drop_all`, lowest value "
    "first: HAPS). Latency is publish-to-receive on one host clock (ms). The bucket counts 28 bytes of UDP/IP "
    "header and 16 of datagram header per datagram (a two-event datagram takes 0.74 s at 1 kbit/s); shed "
    "notices go outside it, like liveness pings. The high-value bound is the paper's threshold, 1 s (here "
    "also `drop_all`). Revenue is the router's HAPS charging on the link (Eqs. 6-8, 10: the gain from the "
    "drops each delivered event survived, times its value); *delivered value* sums the prices of what arrived.")

SIM_METHOD = (
    "The paper ran a 20-node content-based network in OMNeT++ with a synthetic cost per comparison; this is a small "
    "discrete-event model of one (`bench/overload_sim.py`) driven through the router's own pure cores "
    "(`router/shedding.py`: Eqs. 1-3 per message, the delay trigger and sT, the link choice, Eqs. 5, 7; "
    "`router/shaping.py`: modified RED, the publication-or-subscription choice, the message strategies). "
    "20 nodes: a core router, three edge routers each with a publisher and 4, 4 and 5 subscribers; node04 "
    "subscribes mostly at low prices, node13 mostly at high ones. Prices in [0.1, 10], CSC in [0.05, 0.1], counts "
    "normal with a standard deviation of 25 % of the mean, about two publications per subscription; single-"
    "attribute publications (6 attributes, values 0..99), single-constraint subscriptions (`<` or `>`, interest "
    "in the extremes), spread with covering and Eq. 4 prices. Ours, where the paper is silent: a subscription "
    "covered on a link still raises the covering one's price upstream (a price update), Eq. 9 charges only "
    "subscribers the publication reaches, routers do not queue behind a busy CPU (the delay is read, as in "
    "Fig. 3), and the link-shedding runs have free links. Link shedding (Figs. 3-6): each message costs "
    "`Delta_1` per subscription in the table on links not shed (Eq. 1), the weighted delay (Eq. 2) is held "
    "against the drop threshold, at most one action per sT (Eq. 3); NOSHED estimates without shedding. Message "
    "shedding (Fig. 7): the core's links to the edges and the edges' links to subscribers are slower than "
    "offered, one message at a time, modified RED on the expected delay; the victim's kind by HAPS's fair "
    "choice, its value by the strategy, recomputed at each drop; each drop is one Eq. 6 update for the "
    "publications that survive it. Revenue is what the edge routers bill on their subscriber links; "
    "*delivered value* the matching subscriptions' prices of what was delivered (G = 1).")

Log = Callable[[str], None]


def run_simulation(*, quick: bool, seeds: int, log: Log) -> sim_.Simulation:
    """Figs. 3-7: the full workload (about 20,000 subscriptions, 40,000 publications per seed), or a
    third of it with ``quick``."""
    params = sim_.Params()
    if quick:
        params = params.scaled(0.3)
    log(f"overload: simulated HAPS network, {seeds} seed(s) ...")
    return sim_.simulate(params, seeds=seeds, log=log)


@dataclass
class Run:
    policy: str
    label: str
    phases: tuple[float, float, float]
    #: (phase, variable, publish ts ms, receive wall ms)
    received: list[tuple[str, int, int, int]] = field(default_factory=list)
    sent: dict[int, int] = field(default_factory=dict)
    sent_failure: dict[int, int] = field(default_factory=dict)
    revenue: float = 0.0
    link_value: float = 0.0
    drops: dict[str, int] = field(default_factory=dict)
    notices: int = 0
    series: list[tuple[float, float | None, float | None]] = field(default_factory=list)


class _Publisher(threading.Thread):
    """Every 5 ms: the variables whose phase it is, in one datagram, stamped with the wall clock."""

    def __init__(self, port: int, t0_ms: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.port = port
        self.t0_ms = t0_ms
        self.stop_flag = threading.Event()
        self.sent: list[tuple[int, int]] = []  # (variable, ts)

    def run(self) -> None:
        seq = 0
        last = 0
        while not self.stop_flag.is_set():
            now = time.time_ns() // 1_000_000
            ts = now - now % 5
            if ts > last:
                last = ts
                due = [v for v, (_, phase) in HIGH.items() if (ts - phase) % HIGH_INTERVAL_MS == 0]
                due += [v for v in LOW if ts % LOW_INTERVAL_MS == 0]
                if due:
                    seq += 1
                    evs = [wire.encode_event(wire.Event(ts, v, b"\0" * 8)) for v in due]
                    self.sock.sendto(wire.encode_datagram(PUB_ID, seq, evs), ("127.0.0.1", self.port))
                    self.sent.extend((v, ts) for v in due)
            time.sleep(0.001)
        self.sock.close()


class _Receiver(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.stop_flag = threading.Event()
        self.got: list[tuple[int, int, int]] = []  # (variable, ts, receive ms)
        self.notices = 0

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            now = time.time_ns() // 1_000_000
            try:
                d = wire.decode_datagram(data)
            except wire.DecodeError:
                continue
            if d.shed_notice is not None:
                self.notices += 1
            self.got.extend((e.variable_id, e.timestamp_ms, now) for e in d.events)
        self.sock.close()


def _start_router() -> tuple[subprocess.Popen[str], int, int]:
    base, _ = router_command()
    proc, ready = children.spawn([*base, "--name", "r1", "--id", "1", "--control-port", "0"], what="router r1",
                                 timeout_s=30)
    return proc, children.ready_port(ready), children.ready_port(ready, "control_port")


def _shaping(bps: float, policy: str) -> pb.Shaping:
    return pb.Shaping(bandwidth_bps=bps, drop_policy=policy, drop_start_ms=DROP_START_MS, drop_all_ms=DROP_ALL_MS,
                      window_ms=WINDOW_MS)


def run_strategy(stub: Any, router_port: int, policy: str, label: str, phases: tuple[float, float, float],
                 log: Log) -> Run:
    normal_s, failure_s, recovery_s = phases
    rcv = _Receiver()
    rcv.start()
    name = f"sub:ops-{policy}"
    stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
        name=name, peer_id=SUB_ID, kind=pb.CHANNEL_KIND_SUBSCRIBER, host="127.0.0.1", port=rcv.port,
        capacity=QUEUE_SIZE, shaping=_shaping(PRIMARY_BPS, policy))), timeout=5)
    routes = [pb.Route(route_id=f"hi{v}", variable_id=v, mode=0, channel=name, sub_interval_ms=HIGH_INTERVAL_MS,
                       priority=1, pub_interval_ms=HIGH_INTERVAL_MS, price=p) for v, (p, _) in HIGH.items()]
    routes += [pb.Route(route_id=f"lo{v}", variable_id=v, mode=0, channel=name, sub_interval_ms=LOW_INTERVAL_MS,
                        priority=1, pub_interval_ms=LOW_INTERVAL_MS, price=p) for v, p in LOW.items()]
    stub.InstallRoutes(pb.InstallRoutesRequest(routes=routes), timeout=5)
    t0 = time.time_ns() // 1_000_000
    pub = _Publisher(router_port, t0)
    pub.start()
    time.sleep(normal_s)
    fail_ms = time.time_ns() // 1_000_000
    stub.SetChannelShaping(pb.SetChannelShapingRequest(name=name, shaping=_shaping(BACKUP_BPS, policy)), timeout=5)
    time.sleep(failure_s)
    back_ms = time.time_ns() // 1_000_000
    stub.SetChannelShaping(pb.SetChannelShapingRequest(name=name, shaping=_shaping(PRIMARY_BPS, policy)), timeout=5)
    time.sleep(recovery_s)
    pub.stop_flag.set()
    pub.join(timeout=2)
    time.sleep(0.5)
    stats = stub.GetStats(pb.GetStatsRequest(), timeout=5)
    ch = next(c for c in stats.channels if c.name == name)
    stub.RemoveChannel(pb.RemoveChannelRequest(name=name), timeout=5)
    rcv.stop_flag.set()
    rcv.join(timeout=2)

    def phase(ts: int) -> str:
        return "normal" if ts < fail_ms else "failure" if ts < back_ms else "recovery"

    run = Run(policy, label, phases)
    run.received = [(phase(ts), v, ts, at) for v, ts, at in rcv.got]
    for v, ts in pub.sent:
        run.sent[v] = run.sent.get(v, 0) + 1
        if phase(ts) == "failure":
            run.sent_failure[v] = run.sent_failure.get(v, 0) + 1
    run.revenue, run.link_value = ch.revenue, ch.delivered_value
    run.drops = dict(ch.drops)
    run.notices = rcv.notices
    end = max((at for _, _, _, at in run.received), default=back_ms)
    for start in range(t0, end + 1, 500):  # per half second of publishing: worst latency, high and low
        hi = [at - ts for _, v, ts, at in run.received if v in HIGH and start <= ts < start + 500]
        lo = [at - ts for _, v, ts, at in run.received if v in LOW and start <= ts < start + 500]
        run.series.append(((start - fail_ms) / 1000, max(hi) if hi else None, max(lo) if lo else None))
    log(f"  {label}: high max {max((at - ts for _, v, ts, at in run.received if v in HIGH), default=0)} ms, "
        f"drops {sum(run.drops.values())}, revenue {run.revenue:.4g}")
    return run


def run_overload(*, quick: bool, log: Log) -> list[Run]:
    phases = (1.5, 4.0, 4.0) if quick else (3.0, 8.0, 8.0)
    proc, port, control = _start_router()
    channel = grpc.insecure_channel(f"127.0.0.1:{control}")
    stub = pb_grpc.RouterControlStub(channel)  # type: ignore[no-untyped-call]
    try:
        stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(name="pub", peer_id=PUB_ID,
                                                                kind=pb.CHANNEL_KIND_PUBLISHER)), timeout=5)
        runs = []
        for policy, label in STRATEGIES:
            log(f"overload: {label} ({phases[0]:.1f} s at 100 kbit/s, {phases[1]:.1f} s at 1 kbit/s, "
                f"{phases[2]:.1f} s back at 100 kbit/s) ...")
            runs.append(run_strategy(stub, port, policy, label, phases, log))
        return runs
    finally:
        channel.close()
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        if proc.stdout is not None:
            proc.stdout.close()


# -- report ------------------------------------------------------------------------------------------
def _pct(xs: list[int], q: float) -> float:
    if not xs:
        return float("nan")
    ys = sorted(xs)
    return float(ys[min(len(ys) - 1, int(q * len(ys)))])


def _ms(x: float) -> str:
    return "-" if x != x else f"{x:,.0f}"


def summary(run: Run) -> dict[str, Any]:
    def lat(which: dict[int, Any], ph: str) -> list[int]:
        return [at - ts for p, v, ts, at in run.received if v in which and p == ph]

    hi_fail, hi_rec = lat(HIGH, "failure"), lat(HIGH, "recovery")
    lo_fail = lat(LOW, "failure")
    got_fail: dict[int, int] = {}
    for p, v, _, _ in run.received:
        if p == "failure":
            got_fail[v] = got_fail.get(v, 0) + 1
    hi_sent = sum(run.sent_failure.get(v, 0) for v in HIGH)
    lo_sent = sum(run.sent_failure.get(v, 0) for v in LOW)
    hi_in_bound = sum(1 for x in hi_fail if x <= BOUND_MS)
    value = sum(HIGH[v][0] * n if v in HIGH else LOW.get(v, 0.0) * n for v, n in got_fail.items())
    settle = next((t for t, hi, lo in run.series if t > run.phases[1]
                   and (hi is None or hi <= 100) and (lo is None or lo <= 100)), None)
    return {"hi_p50": median(hi_fail) if hi_fail else float("nan"), "hi_p99": _pct(hi_fail, 0.99),
            "hi_max": max(hi_fail, default=float("nan")), "hi_rec_max": max(hi_rec, default=float("nan")),
            "hi_delivered": 100 * len(hi_fail) / hi_sent if hi_sent else float("nan"),
            "hi_in_bound": 100 * hi_in_bound / hi_sent if hi_sent else float("nan"),
            "lo_delivered": 100 * len(lo_fail) / lo_sent if lo_sent else float("nan"),
            "lo_max": max(lo_fail, default=float("nan")), "value": value,
            "settle_s": settle - run.phases[1] if settle is not None else None,
            "drops": sum(n for k, n in run.drops.items() if k in ("link_overload", "queue_full"))}


def router_report(runs: list[Run]) -> str:
    """Figs. 8-9: the real router's link failure."""
    from gridstat.bench.report import table

    sums = {r.policy: summary(r) for r in runs}
    phases = runs[0].phases if runs else (0.0, 0.0, 0.0)
    out = ["### Figs. 8-9: a real router's 100 kbit/s link failing over to 1 kbit/s\n",
           "**Method.** " + METHOD +
           f" Phases: {phases[0]:g} s at 100 kbit/s, {phases[1]:g} s at 1 kbit/s, {phases[2]:g} s back at "
           f"100 kbit/s; `drop_start` {DROP_START_MS:g} ms, `drop_all` {DROP_ALL_MS:g} ms, datagrams of at most "
           f"{WINDOW_MS:g} ms of bandwidth, Q_size {QUEUE_SIZE}. Figures for events *published during the "
           "failure* unless marked.\n"]
    rows = []
    for r in runs:
        s = sums[r.policy]
        rows.append([r.label, _ms(s["hi_p50"]), _ms(s["hi_p99"]), _ms(s["hi_max"]), f"{s['hi_in_bound']:.0f} %",
                     f"{s['hi_delivered']:.0f} %", _ms(s["hi_rec_max"]), f"{s['lo_delivered']:.1f} %",
                     _ms(s["lo_max"]), str(s["drops"]), f"{s['value']:,.1f}", f"{r.revenue:.4g}",
                     "-" if s["settle_s"] is None else f"{s['settle_s']:.1f} s", str(r.notices)])
    out.append(table(["strategy", "high p50 ms", "high p99 ms", "high max ms", f"high within {BOUND_MS} ms",
                      "high delivered", "high max ms after recovery", "low delivered", "low max ms",
                      "events shed", "delivered value", "revenue (Eq. 10)", "back to normal after recovery",
                      "shed notices"], rows) + "\n")
    out.append("Worst latency per half second of publishing (ms, high / low; time from the failure, s):\n")
    keep = [r for r in runs if r.policy in ("none", "red")]
    times = sorted({round(t, 1) for r in keep for t, _, _ in r.series})
    srows = []
    for t in times:
        cells = []
        for r in keep:
            pt = next(((hi, lo) for tt, hi, lo in r.series if round(tt, 1) == t), (None, None))
            cells.append(f"{_ms(pt[0] if pt[0] is not None else float('nan'))} / "
                         f"{_ms(pt[1] if pt[1] is not None else float('nan'))}")
        srows.append([f"{t:+.1f}", *cells])
    out.append(table(["t (s)", *[r.label for r in keep]], srows) + "\n")
    out.append("Beside the paper (HAPS, Figs. 7-9; curves only, no tables):\n")
    red, none_, tail, value = (sums.get(k, {}) for k in ("red", "none", "tail", "value"))
    paper = [
        ["NODROP: publication flow time explodes during the failure, with a long-term effect after it",
         f"no shedding: high max {_ms(none_.get('hi_max', float('nan')))} ms during the failure, "
         f"{_ms(none_.get('hi_rec_max', float('nan')))} ms after the primary returned"],
        ["DROP (HAPS): latency never exceeds the 1 s threshold and returns to normal with the primary link",
         f"RED: high max {_ms(red.get('hi_max', float('nan')))} ms, lowest value first "
         f"{_ms(value.get('hi_max', float('nan')))} ms (threshold {BOUND_MS} ms); "
         f"{red.get('hi_delivered', float('nan')):.0f} % / {value.get('hi_delivered', float('nan')):.0f} % of "
         f"high events delivered; back to normal {red.get('settle_s') or 0:.1f} s after the primary returned"],
        ["revenue accrues only during overload (Fig. 9)",
         f"no shedding: revenue {next((r.revenue for r in runs if r.policy == 'none'), 0):.4g}; shedding "
         "strategies earn only from events that survived drops"],
        ["CHEAPEST (sum of matching prices) gives the highest revenue among message-shedding strategies (Fig. 7)",
         f"lowest value first {next((r.revenue for r in runs if r.policy == 'value'), 0):.4g} and RED "
         f"{next((r.revenue for r in runs if r.policy == 'red'), 0):.4g} vs FIFO tail drop "
         f"{next((r.revenue for r in runs if r.policy == 'tail'), 0):.4g}; delivered value "
         f"{value.get('value', 0):,.1f} / {red.get('value', 0):,.1f} vs {tail.get('value', 0):,.1f}"],
    ]
    out.append(table(["paper's finding", "here"], paper) + "\n")
    return "\n".join(out)


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _us(x: float) -> str:
    return f"{x * 1e6:,.0f}"


def simulation_report(sim: sim_.Simulation) -> str:
    """Figs. 3-7: the simulated network, beside the paper's findings."""
    from gridstat.bench.report import table

    p = sim.params
    seeds = sorted(sim.link_seeds)
    edge = sim_.busiest_edge(sim)
    ok = sim_.shapes(sim)
    slice_s = p.duration_s / sim_.SLICES
    out = ["### Figs. 3-7: a simulated 20-node HAPS network\n",
           "**Method.** " + SIM_METHOD + f" First seed: {sim.subscriptions:,} subscriptions, {sim.publications:,} "
           f"publications over {p.duration_s:g} simulated seconds (subscriptions in the first "
           f"{p.subscribe_share * 100:.0f} %); seeds {', '.join(map(str, seeds))} for the revenues. `Delta_1` "
           f"{p.delta_1_s:g} s, drop threshold {_us(p.drop_delay_s)} us, reintegration below "
           f"{_us(p.reintegrate_delay_s)} us, `w` {p.weight:g}; constrained links carry "
           f"{p.edge_link_share * 100:.0f} % (core to edge) and {p.subscriber_link_share * 100:.0f} % (edge to "
           f"subscriber) of the publications offered a second, `drop_start` {p.drop_start_s:g} s, `drop_all` "
           f"{p.drop_all_s:g} s.\n"]

    noshed, cheapest = sim.link["NOSHED"].delay[edge], sim.link["CHEAPEST"].delay[edge]
    rows = [[f"{i * slice_s:,.0f}-{(i + 1) * slice_s:,.0f}", _us(a[0]), _us(b[0]), _us(b[1]),
             f"{_us(b[2])} .. {_us(b[3])}"] for i, (a, b) in enumerate(zip(noshed, cheapest, strict=True))]
    out.append(f"Fig. 3, processing delay per message at {edge}, the busiest edge router (us; drop threshold "
               f"{_us(p.drop_delay_s)}):\n")
    out.append(table(["simulated s", "no shedding: max delay", "CHEAPEST: max delay",
                      "CHEAPEST: weighted delay (Eq. 2), mean", "min .. max"], rows) + "\n")

    rows = []
    for label, _ in sim_.LINK_RUNS:
        r = sim.link[label]
        acts = sum(a["shed"] for a in r.actions.values()), sum(a["reintegrated"] for a in r.actions.values())
        rows.append([label, *(_num(sim.link_seeds[sd][label][0]) for sd in seeds),
                     _num(sim.mean("link", label)), _num(sim.mean("link", label, 1)), f"{r.delivered:,}",
                     f"{acts[0]} / {acts[1]}"])
    out.append("Fig. 4, revenue on the subscriber links per link-shedding strategy (Eqs. 5, 7, 9, 10), and the "
               "value delivered (the matching subscriptions' prices, G = 1):\n")
    out.append(table(["strategy", *(f"revenue, seed {sd}" for sd in seeds), "revenue, mean",
                      "delivered value, mean", f"deliveries (seed {seeds[0]})", "shed / reintegrated"], rows) + "\n")
    rows = [[f"{i * slice_s:,.0f}-{(i + 1) * slice_s:,.0f}",
             *(_num(sim.link[label].revenue_slices[i]) for label, st in sim_.LINK_RUNS if st is not None)]
            for i in range(sim_.SLICES)]
    out.append(f"Fig. 4 over time (seed {seeds[0]}): revenue per slice of simulated time:\n")
    out.append(table(["simulated s", *(label for label, st in sim_.LINK_RUNS if st is not None)], rows) + "\n")

    rows = []
    for sub in (sim_.LOW_PAID, sim_.WELL_PAID):
        for label in ("NOSHED", "CHEAPEST"):
            r = sim.link[label]
            bins = r.pc_bins.get(sub, [0] * len(sim_.PC_LABELS))
            total = sum(bins) or 1
            rows.append([sub, label, f"{r.received.get(sub, 0):,}", *(f"{100 * b / total:.0f} %" for b in bins),
                         f"{sum(bins):,}"])
    out.append(f"Figs. 5/6, what {sim_.LOW_PAID} (mostly low prices) and {sim_.WELL_PAID} (mostly high prices) "
               f"received (seed {seeds[0]}): publications, and the matching subscriptions behind them by price "
               "times coverage:\n")
    out.append(table(["subscriber", "run", "publications received", *(f"p*c {b}" for b in sim_.PC_LABELS),
                      "matching subscriptions"], rows) + "\n")

    rows = []
    for label, _ in sim_.MESSAGE_RUNS:
        r = sim.message[label]
        rows.append([label, *(_num(sim.message_seeds[sd][label][0]) for sd in seeds),
                     _num(sim.mean("message", label)), _num(sim.mean("message", label, 1)),
                     f"{sum(r.drops.values()):,} ({r.subscription_drops:,})", f"{r.delivered:,}"])
    out.append("Fig. 7, router revenue per message-shedding strategy (Eqs. 6, 7, 9, 10), and the value "
               "delivered:\n")
    out.append(table(["strategy", *(f"revenue, seed {sd}" for sd in seeds), "revenue, mean",
                      "delivered value, mean", f"messages shed (subscriptions), seed {seeds[0]}",
                      f"deliveries (seed {seeds[0]})"], rows) + "\n")

    lm = {k: sim.mean("link", k) for k, _ in sim_.LINK_RUNS}
    mm = {k: sim.mean("message", k) for k, _ in sim_.MESSAGE_RUNS}
    mv = {k: sim.mean("message", k, 1) for k, _ in sim_.MESSAGE_RUNS}
    got = {k: r.received for k, r in sim.link.items()}
    below = sum(1 for e in sim_.EDGES for sl in sim.link["CHEAPEST"].delay[e] if sl[1] <= p.drop_delay_s)

    def yes(key: str) -> str:
        return "yes" if ok[key] else "**no**"

    def first(runs: dict[int, dict[str, tuple[float, float]]], label: str) -> int:
        """In how many seeds ``label`` earned the most."""
        return sum(1 for r in runs.values() if max(r, key=lambda k: r[k][0]) == label)

    paper = [
        ["Fig. 3: without shedding the delay grows while subscriptions arrive, then stays",
         f"{edge}: {_us(noshed[0][0])} us in the first slice, {_us(noshed[-1][0])} us in the last "
         f"(threshold {_us(p.drop_delay_s)})", yes("fig3_noshed_grows")],
        ["Fig. 3: with shedding the weighted delay (Eq. 2) oscillates around the threshold",
         f"held at it, but from below: it moves between the reintegration and the drop threshold, the slice "
         f"means at most {_us(max(sl[1] for e in sim_.EDGES for sl in sim.link['CHEAPEST'].delay[e]))} us "
         f"({below} of {len(sim_.EDGES) * sim_.SLICES} edge-router slices at or below the threshold; HAPS does "
         "not give its reintegration threshold, and one below the drop threshold keeps the delay under it)",
         yes("fig3_shedding_holds")],
        ["Fig. 3: links are shed and reintegrated as the load moves (sT, Eq. 3, keeps them apart)",
         "shed / reintegrated: " + ", ".join(f"{n} {a['shed']} / {a['reintegrated']}"
                                            for n, a in sim.link["CHEAPEST"].actions.items() if a["shed"]),
         yes("fig3_oscillates")],
        ["Fig. 4: CHEAPEST earns more than LARGEST and RANDOM",
         f"mean revenue CHEAPEST {_num(lm['CHEAPEST'])}, LARGEST {_num(lm['LARGEST'])}, RANDOM "
         f"{_num(lm['RANDOM'])}; CHEAPEST first in {first(sim.link_seeds, 'CHEAPEST')} of {len(seeds)} seeds",
         yes("fig4_cheapest_first")],
        ["Figs. 5/6: under CHEAPEST the low-paid subscriber receives fewer publications than the well-paid one",
         f"CHEAPEST {got['CHEAPEST'].get(sim_.LOW_PAID, 0):,} vs {got['CHEAPEST'].get(sim_.WELL_PAID, 0):,}; "
         f"NOSHED {got['NOSHED'].get(sim_.LOW_PAID, 0):,} vs {got['NOSHED'].get(sim_.WELL_PAID, 0):,}",
         yes("fig56_low_paid_shed")],
        ["Fig. 7: CHEAPEST earns the most",
         ", ".join(f"{k} {_num(v)}" for k, v in sorted(mm.items(), key=lambda kv: -kv[1]))
         + f"; CHEAPEST first in {first(sim.message_seeds, 'CHEAPEST')} of {len(seeds)} seeds",
         yes("fig7_cheapest_first")],
        ["Fig. 7: LOWEST loses less than RANDOM", f"LOWEST {_num(mm['LOWEST'])}, RANDOM {_num(mm['RANDOM'])}",
         yes("fig7_lowest_above_random")],
        ["Fig. 7: LOWEST loses less than COUNT",
         f"LOWEST {_num(mm['LOWEST'])}, COUNT {_num(mm['COUNT'])}"
         + ("" if ok["fig7_lowest_above_count"] else
            f". Delivered value: COUNT {_num(mv['COUNT'])} against CHEAPEST's {_num(mv['CHEAPEST'])}, LOWEST "
            f"{_num(mv['LOWEST'])} against RANDOM's {_num(mv['RANDOM'])}. Prices are drawn per subscription, so "
            "the number of matching subscriptions on a link tells nearly as much as their price sum; a "
            "publication's gain tells little of its value, for it is 0 until the publication survives drops "
            "(it has none at the first constrained link) and then grows with the drops it waited through"),
         yes("fig7_lowest_above_count")],
    ]
    out.append("Beside the paper (HAPS, Figs. 3-7; curves only, no tables):\n")
    out.append(table(["paper's finding", "here", "holds"], paper) + "\n")
    return "\n".join(out)


def report(runs: list[Run], facts_line: str, wall_s: float, sim: sim_.Simulation | None = None) -> str:
    """The whole section: Figs. 3-7 (when simulated) and Figs. 8-9 (when the router ran)."""
    out = ["## Overload handling (`gridstat bench overload`): HAPS (seed 000), Figs. 3-9\n",
           facts_line + f" Whole run {wall_s:.0f} s.\n"]
    if sim is not None:
        out.append(simulation_report(sim))
    if runs:
        out.append(router_report(runs))
    return "\n".join(out)


__all__ = ["SIM_METHOD", "Run", "report", "router_report", "run_overload", "run_simulation", "simulation_report",
           "summary"]
