"""``gridstat bench shapes``: the shapes of the dissertation's filtering and condensation experiments.

Two experiments with real ``gridstat router`` processes on 127.0.0.1, one paced
load generator (``bench.peers pub``, load variables every 1 ms, burst pacing) and
counting subscribers (``bench.peers sub``); channels and routes are installed
directly over the RouterControl gRPC API, as a leaf broker would install them.

1. **Multicast with filtering** (dissertation Tables 8.28-8.32): the 4-SR tree of
   its multicast experiment, e -> i1 -> i2 -> i3 -> i4 where the publisher's edge
   router e feeds the chain and every i_k also feeds one load subscriber s_k. In
   variant ``filt=f`` the last f subscribers (s4, s3, ...) subscribe at 2 ms, the
   others at 1 ms. Routes are installed per subscription path, so the rate filter
   runs as near the source as the downstream subscriptions allow: f = 1 filters on
   i3 -> i4, f = 2 on i2 -> i3, f = 3 on i1 -> i2, f = 4 at the publisher's edge
   (e -> i1), so the last f routers of the chain carry half the events.
2. **Condensation** (Tables 8.37-8.47): i0 -> i1 -> i2, i2 the multicast split to
   load subscribers s3 and s4. Without the function s3 and s4 subscribe to every
   load variable at 1 ms; with it they subscribe to the output of an ``average``
   condensation function in i0's slot (time trigger 1 ms, output every 1 ms), whose
   inputs reach it by routes on i0 to the channel ``SetupCondensation`` returned.

Each trial reads, per router, the on-CPU time of all its threads (schedstat) and
the GetStats counters, and per link the events one end sent and the other
received, so drops include socket-buffer losses as well as the routers' counters.
One reference variable (50 ms) goes to reference subscribers whose one-way
latency is recorded (e2e through the tree, the dissertation's "Mean" column).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence

from gridstat.bench.router import (
    QUIET_PCT,
    wait_for_quiet,
)
from gridstat.bench.shape_plans import (
    COND_CHAIN,
    COND_MAX_AGE_MS,
    COND_SUBS,
    DISS_COND,
    DISS_FILTER,
    DISS_FILTER_CPU,
    FILTER_CHAIN,
    FILTER_SUBS,
    MAX_FILT,
    QUICK_RETRIES,
    QUICK_WAIT_S,
    RETRIES,
    WAIT_S,
    filtering_point,
    med,
    sub_tp_model,
)
from gridstat.bench.shape_rig import NoiseBudget, ShapeTrial
from gridstat.bench.shape_runs import CondResult, FilterResult, run_condensation, run_filtering

Log = Callable[[str], None]

# -- report -------------------------------------------------------------------------------------------------
#: Our offered events/s per dissertation tlv (load variables at 1 ms): 250,000 ev/s ~ tlv 40, 500,000 ~ tlv 80.
TLV_SCALE = 6_250


def nearest_tlv(rate: int, tlvs: Iterable[int]) -> int:
    """The dissertation's tlv row our offered load stands for (rate / TLV_SCALE, nearest row)."""
    return min(tlvs, key=lambda k: (abs(k * TLV_SCALE - rate), k))


def _f0(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:,.0f}"


def _f1(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:,.1f}"


def _f2(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _f3(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _where(ts: Sequence[ShapeTrial]) -> str:
    """Where events were lost over the repetitions: counters by router, socket losses by link."""
    tot: dict[str, int] = {}
    for t in ts:
        for k, v in t.counted_drops.items():
            if v:
                tot[f"{k} (counted)"] = tot.get(f"{k} (counted)", 0) + v
        for k, v in t.link_lost.items():
            if v:
                tot[k] = tot.get(k, 0) + v
    return ", ".join(f"{k} {v:,}" for k, v in sorted(tot.items(), key=lambda kv: -kv[1])) or "-"


def _drop_cell(ts: Sequence[ShapeTrial]) -> str:
    vals = [t.drop_pct for t in ts]
    return f"{_f3(med(vals))} (max {_f3(max(vals))})" if vals else "-"


def filtering_report(res: FilterResult) -> tuple[str, list[str]]:
    """The filtering section's Markdown and its shape statements."""
    out: list[str] = []
    notes: list[str] = []
    chain = FILTER_CHAIN
    out.append("### Multicast with filtering (cf. dissertation Tables 8.28-8.32)\n")
    out.append(
        f"Tree e -> i1 -> i2 -> i3 -> i4, i_k feeding load subscriber s_k (the dissertation's 4-SR multicast tree; "
        "e is the publisher's edge router). In filt=f the last f subscribers take the load variables at 2 ms, the "
        "others at 1 ms; routes are installed per subscription path, so the filtering point is where the table "
        "puts it (column 'filtered on'). Sub TP is the load events/ms the four load subscribers received together; "
        "model = (4 - f/2) x pub TP (the dissertation's model without its reference term). CPU in % of one core, "
        "medians over "
        f"{res.reps} repetition(s) of {res.duration:g} s; drop % = events lost anywhere (router and channel "
        "counters, and events a link's sender sent that its receiver never read: socket-buffer drops) over the "
        "events the publisher sent, median (max) over repetitions. Reference mean: e2e one-way latency of the "
        "50-ms reference variable through e, i1..i4 to its own subscriber at i4 (median over repetitions of "
        "each trial's mean; the dissertation's 'Mean' is ms through its tree). 'Lost where' names the socket that "
        "overflowed (a -> b: sent by a, never read by b), not necessarily the slowest router: every process here "
        "competes for the same 2 cores, so a saturated machine overflows whichever socket's reader is descheduled "
        "longest, usually the first hops'.\n")
    for rate in res.rates:
        tlv = nearest_tlv(rate, DISS_FILTER)
        diss = DISS_FILTER[tlv]
        rows = []
        cpu0 = cpu4 = float("nan")
        drops: list[float] = []
        for f in range(MAX_FILT + 1):
            ts = res.trials.get((rate, f), [])
            if not ts:
                continue
            tp_pub = med(t.tp_pub for t in ts)
            tp_sub = med(t.tp_subs(FILTER_SUBS) for t in ts)
            cpu = {n: med(t.cpu_pct[n] for t in ts) for n in chain}
            total = med(t.cpu_total for t in ts)
            if f == 0:
                cpu0 = total
            if f == MAX_FILT:
                cpu4 = total
            drops.append(med(t.drop_pct for t in ts))
            ref_mean = med(t.ref_mean_us("ref") for t in ts)
            ref_n = sum(t.ref_n("ref") for t in ts)
            d_mean, _d_sd, d_tp, d_drop = diss[f]
            rows.append([str(f), filtering_point(f), _f1(tp_pub), f"{_f1(tp_sub)} ({_f1(sub_tp_model(tp_pub, f))})",
                         *(_f0(cpu[n]) for n in chain), _f0(total), _drop_cell(ts), _where(ts),
                         f"{_f0(ref_mean)} ({ref_n})", f"{d_tp:.2f}", f"{d_drop:.3f}", f"{d_mean:.3f}"])
        out.append(f"**Offered {rate:,} events/s** ({rate // 1000} load variables at 1 ms, 16 events per datagram; "
                   f"set beside the dissertation's tlv={tlv}):\n")
        out.append(_table(["filt", "filtered on", "pub TP ev/ms", "sub TP ev/ms (model)",
                           *(f"CPU {n} %" for n in chain), "CPU routers %", "drop % (max)", "lost where (all reps)",
                           "ref mean us (n)", f"diss. sub TP (tlv={tlv})", "diss. drop %", "diss. mean ms"], rows))
        out.append("")
        # shape statements for this load
        tsd = {f: res.trials.get((rate, f), []) for f in range(MAX_FILT + 1)}
        if all(tsd.values()):
            by_f = {f: med(t.tp_subs(FILTER_SUBS) for t in tsd[f]) for f in tsd}
            ratios = [by_f[f] / sub_tp_model(med(t.tp_pub for t in tsd[f]), f) for f in tsd]
            bad = [f for f, r in zip(tsd, ratios, strict=True) if abs(r - 1) > 0.1]
            notes.append(
                f"{rate:,} ev/s: sub TP / model (4 - f/2) x pub TP = {' / '.join(f'{r:.2f}' for r in ratios)} for "
                f"f = 0..4, f=4 / f=0 = {by_f[MAX_FILT] / by_f[0]:.2f} (the dissertation's Sub TP is within 2 % of its "
                "model at every f, f=4 / f=0 = 0.50 at tlv 40 and 80) - "
                + ("**matches** (within 10 %)" if not bad else
                   f"**below the model at f = {', '.join(map(str, bad))}**, by the events lost there") + ".")
            totals = [med(t.cpu_total for t in tsd[f]) for f in range(MAX_FILT + 1)]
            mono = all(b <= a * 1.05 for a, b in itertools.pairwise(totals))
            saturated = drops[0] > 1.0
            notes.append(
                f"{rate:,} ev/s: the routers' CPU goes from {_f0(cpu0)} % (f=0) to {_f0(cpu4)} % (f=4), x "
                f"{cpu4 / cpu0:.2f}, " + ("falling monotonically (within 5 %)" if mono and cpu4 < cpu0
                                          else "**not falling monotonically**")
                + ". Per router, CPU with its input filtered to 2 ms vs at 1 ms (medians over the variants): "
                + "; ".join(_split_saving(res, rate, k) for k in range(1, MAX_FILT + 1))
                + f". Dissertation: {DISS_FILTER_CPU}."
                + (" Here the machine is saturated at f=0 (events lost), so the routers' CPU there is the share the "
                   "scheduler gave them, not what the load needs." if saturated else ""))
            row = "/".join(f"{x[3]:.3f}" for x in diss)
            if max(drops) > 0.01:
                falling = drops[-1] < drops[0]
                mono_drops = all(b <= a for a, b in itertools.pairwise(drops))
                notes.append(
                    f"{rate:,} ev/s: drops {' / '.join(_f3(d) for d in drops)} % for f = 0..4 (dissertation tlv "
                    f"{tlv}: {row}) - "
                    + (("**falling as the filtering moves toward the source, as in the dissertation**"
                        + ("" if mono_drops else " (f=4 below f=0, though not at every step)"))
                       if falling else "**not falling with f**") + ".")
            else:
                notes.append(f"{rate:,} ev/s: no drops in any variant (median drop % <= 0.01; dissertation tlv {tlv}: "
                             f"{row}).")
    return "\n".join(out), notes


def _split_saving(res: FilterResult, rate: int, k: int) -> str:
    """CPU of i_k when its input is filtered (f >= 5 - k) vs not, medians over those variants and repetitions."""
    name = FILTER_CHAIN[k]
    full = [t.cpu_pct[name] for f in range(MAX_FILT + 1) if f < MAX_FILT + 1 - k
            for t in res.trials.get((rate, f), [])]
    half = [t.cpu_pct[name] for f in range(MAX_FILT + 1) if f >= MAX_FILT + 1 - k
            for t in res.trials.get((rate, f), [])]
    a, b = med(full), med(half)
    return f"{name} {_f0(a)} -> {_f0(b)} % (x {b / a:.2f}, {_f0(a - b)} points)" if full and half else f"{name} -"


def condensation_report(res: CondResult) -> tuple[str, list[str]]:
    out: list[str] = []
    notes: list[str] = []
    out.append("### Condensation function (cf. dissertation Tables 8.37-8.47, CF-average)\n")
    out.append(
        "Chain i0 -> i1 -> i2, i2 the multicast split to load subscribers s3 and s4; the publisher sends to i0. "
        "Without: s3 and s4 subscribe to every load variable at 1 ms. With: an `average` condensation function in "
        f"i0's slot (SetupCondensation; inputs: the load variables, 8-byte ints, routed on i0 to the channel the "
        f"call returned; **time trigger {res.trigger_ms} ms**, output a float variable every {res.trigger_ms} ms, "
        f"inputs older than {COND_MAX_AGE_MS} ms left out so the output stops with the publisher) and s3, s4 "
        "subscribe to its output only, routed i0 -> i1 -> i2 -> s3, s4. The function is set up just before each "
        "with-trial and terminated after it. Reference variable (50 ms): s1 at i0 (one router) and s2 at i2 (three "
        "routers), as the dissertation's p1 -> s1 via i0 and p1 -> s2 via i2. Medians over "
        f"{res.reps} repetition(s) of {res.duration:g} s; cells read without -> with.\n")
    if res.error:
        out.append(f"**Not measured: {res.error}**\n")
        notes.append(f"Condensation: not measured ({res.error}).")
        return "\n".join(out), notes
    rows = []
    for rate in res.rates:
        wo, wi = res.trials.get((rate, False), []), res.trials.get((rate, True), [])
        if not wo or not wi:
            continue
        tlv = nearest_tlv(rate, DISS_COND)
        d = DISS_COND[tlv]

        def pair(fn: Callable[[ShapeTrial], float], fmt: Callable[[float], str] = _f0,
                 a: Sequence[ShapeTrial] = wo, b: Sequence[ShapeTrial] = wi) -> str:
            return f"{fmt(med(fn(t) for t in a))} -> {fmt(med(fn(t) for t in b))}"

        def cpu_of(n: str) -> Callable[[ShapeTrial], float]:
            return lambda tr: tr.cpu_pct[n]

        cpu = ", ".join(pair(cpu_of(n)) for n in COND_CHAIN)
        outs = med(t.function.get("outputs", 0) / t.elapsed / 1000 for t in wi)
        rows.append([f"{rate:,} (tlv {tlv})", _f1(med(t.tp_pub for t in wo)),
                     pair(lambda t: t.tp_subs(COND_SUBS), _f1), cpu,
                     pair(lambda t: t.us_per_event(COND_CHAIN[0]), _f2),
                     f"{_f3(med(t.drop_pct for t in wo))} -> {_f3(med(t.drop_pct for t in wi))}",
                     pair(lambda t: t.ref_mean_us("ref1")), pair(lambda t: t.ref_mean_us("ref2")),
                     f"{outs:.2f}", _where([*wo, *wi]), d[2], d[3], d[4], d[0], d[1]])
        c_wo = {n: med(t.cpu_pct[n] for t in wo) for n in COND_CHAIN}
        c_wi = {n: med(t.cpu_pct[n] for t in wi) for n in COND_CHAIN}
        s2 = (med(t.ref_mean_us("ref2") for t in wo), med(t.ref_mean_us("ref2") for t in wi))
        dr = (med(t.drop_pct for t in wo), med(t.drop_pct for t in wi))
        notes.append(
            f"Condensation {rate:,} ev/s: sub TP {_f1(med(t.tp_subs(COND_SUBS) for t in wo))} -> "
            f"{_f1(med(t.tp_subs(COND_SUBS) for t in wi))} ev/ms (dissertation tlv {tlv}: {d[2]}); i1 x "
            f"{c_wi['i1'] / c_wo['i1']:.2f}, i2 x {c_wi['i2'] / c_wo['i2']:.2f} ("
            + ("**falls to near idle, as in the dissertation**" if c_wi["i1"] < 0.35 * c_wo["i1"]
               and c_wi["i2"] < 0.35 * c_wo["i2"] else "**does not fall as far as the dissertation's**")
            + f"); i0 x {c_wi['i0'] / c_wo['i0']:.2f} ("
            + ("unchanged within 15 %, as in the dissertation" if abs(c_wi["i0"] / c_wo["i0"] - 1) <= 0.15
               else "**the dissertation's i0 stayed unchanged: here the function costs more than the forwarding "
                    "it saves**" if c_wi["i0"] > c_wo["i0"] else "**lower, unlike the dissertation's unchanged i0**")
            + f"); drop % {_f3(dr[0])} -> {_f3(dr[1])} ("
            + ("no drops with the function, as in the dissertation" if dr[1] <= 0.01
               else "**drops with the function, unlike the dissertation**")
            + f"); s2 reference mean {_f0(s2[0])} -> {_f0(s2[1])} us (x {s2[1] / s2[0]:.2f}; dissertation "
            f"{d[1]} ms); function output {outs:.2f} /ms (trigger {res.trigger_ms} ms).")
    out.append(_table(["offered ev/s", "pub TP ev/ms", "sub TP ev/ms", "CPU i0, i1, i2 %", "i0 CPU us/event", "drop %",
                       "s1 ref mean us", "s2 ref mean us", "function outputs /ms", "lost where (all reps)",
                       "diss. sub TP ev/ms", "diss. CPU i0, i1, i2 %", "diss. drop %", "diss. s1 ms",
                       "diss. s2 ms"], rows))
    out.append("")
    return "\n".join(out), notes


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report(filt: FilterResult | None, cond: CondResult | None, *, facts_line: str, quick: bool, wall_s: float,
           background: float) -> str:
    out = ["## Shapes: multicast with filtering, condensation (`gridstat bench shapes`"
           + (" --quick" if quick else "") + ")\n",
           facts_line + f" Whole run {wall_s:.0f} s.\n"]
    rates = sorted({*(filt.rates if filt else []), *(cond.rates if cond else [])})
    out.append(
        "**Method.** The shapes of the dissertation's two experiments, with real `gridstat router` processes on "
        "127.0.0.1 (not pinned: the routers, the load generator, the subscribers and this orchestrator share the "
        "machine's cores), channels and routes installed over RouterControl (AddChannel, InstallRoutes, "
        "SetupCondensation) as a leaf broker would, counters from GetStats, router CPU from "
        "/proc/PID/task/*/schedstat over the trial divided by the publishing time. The load generator "
        "(`bench.peers pub`) publishes R/1000 load variables every 1 ms in bursts of 16-event datagrams (the "
        "dissertation's publishers: x events, then sleep) plus one reference variable every 50 ms. **Loads:** "
        f"{', '.join(f'{r:,}' for r in rates)} events/s, set beside the dissertation's tlv = R / {TLV_SCALE:,} "
        "(250,000 ~ tlv 40, 500,000 ~ tlv 80, 750,000 ~ tlv 120). Its tlv 40 and 80 achieved 17.7 and 31.3 "
        "events/ms, about 1/3 and 3/5 of one SR's saturation (~50-57 events/ms); strictly in proportion to our "
        "router's saturation (1.18 M events/s alone on a core, router section) they would be ~400,000 and "
        "~700,000 events/s. Ours are about 0.7 of that because the dissertation ran one SR per host and here "
        "the whole tree (5 or 3 routers, the publisher and 4-6 subscribers) shares 2 cores: at 500,000 events/s "
        "the filtering tree at f=0 saturates the machine, as tlv 80 saturated the dissertation's split SRs (3.5 % "
        "drops). The machine is shared: before each trial the benchmark waits while other processes (not this "
        f"benchmark's) take more than {QUIET_PCT:.0f} % of a core, and repeats a trial once if they did during it "
        f"(at most {WAIT_S:.0f} s of waiting and {RETRIES} repeats per run, {QUICK_WAIT_S:.0f} s and "
        f"{QUICK_RETRIES} with --quick; the last attempt is reported); other processes used {background:.0f} % of "
        "a core just before the run.\n")
    notes: list[str] = []
    if filt is not None:
        body, n = filtering_report(filt)
        out.append(body)
        notes += n
        noise = [t.other_cpu_pct for ts in filt.trials.values() for t in ts]
        out.append(f"Other processes used a median {_f0(med(noise))} % (max {_f0(max(noise, default=0))} %) of a "
                   f"core during these trials; {filt.repeated} trial(s) repeated, {filt.waited_s:.0f} s spent waiting "
                   f"for a quieter machine. {filt.wall_s:.0f} s.\n")
    if cond is not None:
        body, n = condensation_report(cond)
        out.append(body)
        notes += n
        noise = [t.other_cpu_pct for ts in cond.trials.values() for t in ts]
        if noise:
            out.append(f"Other processes used a median {_f0(med(noise))} % (max {_f0(max(noise, default=0))} %) "
                       f"of a core during these trials; {cond.repeated} trial(s) repeated, {cond.waited_s:.0f} s "
                       f"spent waiting for a quieter machine. {cond.wall_s:.0f} s.\n")
    out.append("### Shapes: what matches and what does not\n")
    out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def run_shapes(*, quick: bool, reps: int, filter_rates: Sequence[int], cond_rates: Sequence[int],
               duration: float, only: str | None, facts_line: str, log: Log) -> tuple[str, bool]:
    """The whole benchmark; returns the Markdown and whether the condensation half ran."""
    t0 = time.monotonic()
    background = wait_for_quiet(5.0 if quick else 30.0, log)
    filt = cond = None
    budget = NoiseBudget(retries=QUICK_RETRIES if quick else RETRIES, wait_s=QUICK_WAIT_S if quick else WAIT_S)
    if only in (None, "filtering"):
        log(f"filtering: loads {', '.join(f'{r:,}' for r in filter_rates)} ev/s, filt=0..{MAX_FILT}, {reps} rep(s) "
            f"of {duration:g} s")
        filt = run_filtering(rates=filter_rates, reps=reps, duration=duration, log=log, budget=budget)
    if only in (None, "condensation"):
        log(f"condensation: loads {', '.join(f'{r:,}' for r in cond_rates)} ev/s, without/with, {reps} rep(s) "
            f"of {duration:g} s")
        cond = run_condensation(rates=cond_rates, reps=reps, duration=duration, log=log, budget=budget)
    body = report(filt, cond, facts_line=facts_line, quick=quick, wall_s=time.monotonic() - t0,
                  background=background)
    return body, cond is None or not cond.error
