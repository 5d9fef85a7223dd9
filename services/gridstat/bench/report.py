"""Markdown report of the benchmarks: machine facts, tables beside the dissertation's and the baseline's.

``docs/benchmarks.md`` holds one section per command between HTML comment
markers, so ``gridstat bench router --write`` and ``gridstat bench tables
--write`` each replace only their own section.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from gridstat.bench.router import PACINGS, SUSTAIN_P50_US, Profile, Trial
from gridstat.bench.tables import TableResult

# -- reference figures ----------------------------------------------------------------------------
#: Measured once on the same machine type (2026-11-25), 8 events per datagram: Python relays, C, NATS,
#: Zenoh and DDS over one forwarding hop (reproduced in docs/benchmarks.md).
#: name -> (max events/s, hop CPU us/event, hop p50/p99/p99.9 us)
BASELINE: dict[str, tuple[int, float, tuple[int, int, int]]] = {
    "Python drain relay, 8 ev/dgram (default loop)": (565_685, 1.69, (127, 214, 335)),
    "Python asyncio relay, 8 ev/dgram (uvloop)": (461_229, 2.17, (86, 202, 386)),
    "C relay recvmmsg/sendmmsg (1 ev/dgram)": (142_705, 4.06, (36, 108, 178)),
}
#: Dissertation Tables 8.7-8.9 (one SR i0): tlv -> (mean s0/s2/s4 ms, model ms, TP pub ev/ms, i0 CPU %, drop %)
DISS_LOAD = {
    0: (".749/.783/.708", ".646", ".058", "0.1-0.5", "0"),
    10: (".654/.614/.671", ".669", "4.862", "4-9", "0"),
    40: (".672/.598/.63", ".731", "17.744", "19-26", "0"),
    80: (".672/.671/.671", ".795", "31.396", "35-40", "0"),
    120: (".672/.665/.631", ".841", "41.154", "52-58", ".001"),
    160: (".672/.678/.678", ".884", "49.908", "70-80", ".005"),
    200: (".678/.657/.626", ".915", "57.32", "74-85", "1.631"),
    240: (".7/.659/.622", ".932", "62.488", "85-90", "3.969"),
}
#: Dissertation Tables 8.12-8.18: tlv -> mean ms for 1..7 SRs, and delta per hop (ms).
DISS_HOPS = {
    40: ((.644, .986, 1.371, 1.706, 2.083, 2.518, 2.823), .360),
    80: ((.652, 1.101, 1.489, 1.831, 2.263, 2.708, 3.149), .416),
    120: ((.677, 1.154, 1.559, 1.999, 2.397, 2.867, 3.361), .447),
    160: ((.696, 1.235, 1.754, 2.273, 2.73, 3.476, 3.89), .532),
}
DISS_TP = {40: 17.7, 80: 31.3, 120: 41.0, 160: 49.7}  # events/ms, flat across hops

TARGET_RATE = 200_000
TARGET_HOP_P50 = 100.0
TARGET_HOP_P99 = 500.0

SECTION = "<!-- bench:{name}:{edge} -->"


# -- formatting ---------------------------------------------------------------------------------------
def f0(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.0f}"


def f1(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.1f}"


def f2(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.2f}"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def machine_facts() -> dict[str, str]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version

        uv = f"uvloop {version('uvloop')} on (gridstat router's default loop)"
    except (ImportError, PackageNotFoundError):
        uv = "uvloop not installed (routers use the default asyncio loop)"
    try:
        rmem = Path("/proc/sys/net/core/rmem_max").read_text().strip()
    except OSError:
        rmem = "?"
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "loop": uv,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "rmem_max": rmem,
    }


def median_range(xs: Sequence[float], fmt: str) -> str:
    """``median (min-max)`` of repeated runs, each formatted with ``fmt``."""
    return f"{format(median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def facts_md(facts: dict[str, str]) -> str:
    return (f"Run {facts['date']}: {facts['nproc']} CPUs ({facts['cpu']}), Linux {facts['kernel']}, Python "
            f"{facts['python']}, {facts['loop']}; net.core.rmem_max {facts['rmem_max']}; load average at start "
            f"{facts['load']}. Loopback only (127.0.0.1).")


def pf(ok: bool) -> str:
    return "**PASS**" if ok else "**FAIL**"


# -- router report ------------------------------------------------------------------------------------
def _lat(t: Trial, key: str, which: str = "lat_all") -> float:
    v = t.sub.get(which, {}).get(key)
    return float(v) if v is not None else float("nan")


def _med(xs: Sequence[float]) -> float:
    ys = [x for x in xs if not math.isnan(x)]
    return median(ys) if ys else float("nan")


def profile_figures(prof: Profile) -> dict[str, Any]:
    """Medians over one profile's repetitions: saturation, CPU, per-hop latency, the 70 % check, gaps."""
    sat_trials = [s.trial for s in prof.saturation if s.trial is not None]
    hop: dict[str, dict[str, float]] = {}
    e2e0: dict[str, dict[str, float]] = {}
    e2e1: dict[str, dict[str, float]] = {}
    for pacing, (lat0, lat1) in prof.lat.items():
        hop[pacing], e2e0[pacing], e2e1[pacing] = {}, {}, {}
        for k in ("p50", "p99", "p999", "mean"):
            hop[pacing][k] = _med([_lat(b, k) - _lat(a, k) for a, b in zip(lat0, lat1, strict=True)])
            e2e0[pacing][k] = _med([_lat(a, k) for a in lat0])
            e2e1[pacing][k] = _med([_lat(b, k) for b in lat1])
    spread_sats = [s.rate for s in prof.saturation_spread]
    return {"saturation_offered": prof.sat_rate,
            "saturation_spread_offered": int(median(spread_sats)) if spread_sats else 0,
            "forwarded": _med([t.forwarded_rate for t in sat_trials]),
            "cpu_pct": _med([t.cpu_pct for t in sat_trials]),
            "us_per_event": _med([t.us_per_event for t in sat_trials]),
            "publisher_bound": any(s.publisher_bound for s in prof.saturation),
            "hop": hop, "e2e0": e2e0, "e2e1": e2e1,
            "drops70": sum(t.lost + t.drops for t in prof.at70),
            "gaps_lost_pct": _med([g.lost_pct for g in prof.gaps]),
            "gaps_over_500_per_s": _med([g.over(500) / g.seconds for g in prof.gaps if g.seconds]),
            "gaps_largest_us": max((g.largest_us for g in prof.gaps), default=0)}


def burst_floor_us(half_rate: float, us_per_event: float) -> float:
    """Median wait behind a 1-ms burst: the tick's events arrive at once and take rho ms to serve
    (rho = rate x service time), so the median event waits rho/2 ms in any FIFO server."""
    return 500.0 * half_rate * us_per_event / 1e6


def router_report(res: dict[str, Any], facts: dict[str, str]) -> tuple[str, dict[str, Any]]:
    profiles: list[Profile] = res["profiles"]
    reps = len(profiles[0].saturation)
    sat_rate = profiles[0].sat_rate
    per = {p.name: profile_figures(p) for p in profiles}
    main = per[profiles[0].name]
    fwd, cpu, usev = main["forwarded"], main["cpu_pct"], main["us_per_event"]
    hop = main["hop"]
    pass_rate = fwd >= TARGET_RATE
    passes: dict[str, bool] = {"rate": pass_rate}
    for name, f in per.items():
        h = f["hop"]["spread"]
        tag = "" if name == profiles[0].name else "_" + re.sub(r"\W+", "_", name).strip("_")
        passes["latency_spread" + tag] = h["p50"] <= TARGET_HOP_P50 and h["p99"] <= TARGET_HOP_P99
        passes["no_drops_70" + tag] = f["drops70"] == 0
    all_trials = [t for p in profiles for s in p.saturation for t in s.trials] + \
        [t for p in profiles for l0, l1 in p.lat.values() for t in (*l0, *l1)] + [t for p in profiles for t in p.at70]
    noise = [t.other_cpu_pct for t in all_trials]
    figures = {**main, "profiles": per, "pass": passes}
    d = res["durations"]
    out: list[str] = []
    out.append("## Router benchmark (`gridstat bench router`" + (" --quick" if res["quick"] else "") + ")\n")
    out.append(facts_md(facts) + f" Whole run {res['wall_s']:.0f} s.\n")
    out.append(
        "**Method.** Real processes on 127.0.0.1: one load generator -> a chain of N `gridstat router` processes "
        f"-> one subscriber (routers launched as {res.get('launcher', '?')}; channels and routes installed over "
        "the gRPC control API; counters from GetStats). The load generator is *not* a GridStat publisher SDK: "
        "it writes GridStat wire-format datagrams directly, 16 events per datagram (reference datagrams carry "
        "one event). Load variables are published every 1 ms (offered load R events/s = R/1000 load "
        "variables, 16 per datagram, every 1-ms tick on CLOCK_MONOTONIC); one reference variable every 50 ms. "
        "Two pacings: **burst** sends a tick's datagrams back to back (like the dissertation's publishers: x "
        "events, then sleep), **spread** spaces them evenly over the millisecond (sleeps only, 1-us timer "
        "slack; what many independent PMUs with their own phases look like to a router). Saturation, the "
        "70 % check and the hop table use burst pacing; latency and the load table are measured in both. "
        "Every event's `timestamp_ms` is real wall-clock ms (the router's default 5000 ms future tolerance "
        "applies); its 8-byte value is `time.monotonic_ns()` taken just before the datagram is sent, and the "
        "subscriber takes `time.monotonic_ns()` right after `recv`, so one-way latency is nanosecond-precise on "
        "one clock. Latency percentiles are over **every** event delivered in the trial (load and reference; "
        "the reference variable alone gives too few samples for p99.9 and is shown separately as the mean). "
        "Routes: every variable at its publication interval (1 ms, or 50 ms for the reference), so the rate "
        "filter passes everything and a router forwards every event; variant "
        f"`{res['variant']}`. "
        + ("The router under test (r1) pinned to core 1; publisher, subscriber, orchestrator and the routers "
           "r2..r7 (used only by the hop table) to core 0 (`os.sched_setaffinity`, every thread), so the "
           "router under test has a core to itself; "
           if res["pinned"] else "Not pinned (fewer than 2 cores); ")
        + "router CPU is the on-CPU time of all the router's threads from /proc/PID/task/*/schedstat (ns) over "
        "the trial, divided by the publishing time; us/event is that CPU time over the events the router "
        f"received. **Saturation** is the highest *sustained* offered rate: paced trials of {d['saturation']} s "
        "with <= 0.1 % loss (publisher sent minus subscriber received), a publisher that kept pace (>= 95 % of "
        f"the offered rate) and a median end-to-end latency <= {SUSTAIN_P50_US:,.0f} us (a router that falls "
        "behind lets its 4 MiB socket buffer hide the backlog for a whole short trial: no loss, but a median "
        "in the tens of ms; before this rule the benchmark reported such rates as saturation), searched (x1.5 "
        f"up, then bisection) to within 10 %; {reps} repetition(s), medians quoted. Latency: {d['latency']} s "
        "per pacing at 50 % of that repetition's saturation through 0 routers (publisher -> subscriber direct) "
        "and 1 router; per-hop added latency = e2e(1 router) - e2e(0 hops) per percentile (tails do not "
        "subtract exactly: read p99.9 as an indication). Seven router processes run throughout; chain length N "
        "uses r1..rN and its own block of variable ids, so idle routers only exchange liveness pings. "
        "**Profiles:** *default* is `gridstat router` as started by default (the event loop sleeps in epoll "
        "when the socket is empty); *busy poll* starts fresh routers with `--busy-poll-us` (after the socket "
        "runs dry the router polls it that long before sleeping: the low-latency setting for a router with a "
        "dedicated core; its CPU column then includes the polling). **Machine gaps:** between the saturation "
        "search and the latency trials, a probe spins on the router's core with the routers idle and records "
        "every gap > 50 us between consecutive clock readings (`gridstat.bench.jitter`): time the machine "
        "itself took from that core, which no process on it can beat.\n")
    out.append("### Headline (medians of repetitions) and targets\n")
    rows = [
        ["events/s forwarded by one router at sustained saturation (default profile)", f0(fwd),
         f">= {TARGET_RATE:,}" + (" (publisher-bound: a lower bound)" if main["publisher_bound"] else ""),
         pf(pass_rate)],
        ["router CPU at saturation (% of one core)", f0(cpu), "-", ""],
        ["router CPU per event at saturation (us)", f2(usev), "-", ""],
    ]
    for prof in profiles:
        f = per[prof.name]
        if prof is not profiles[0]:
            rows.append([f"**{prof.name}**: events/s at sustained saturation, burst pacing", f0(f["forwarded"]),
                         "-", ""])
        rows.append([f"{prof.name}: sustained saturation offered, spread pacing (ev/s)",
                     f0(f["saturation_spread_offered"]), "-", ""])
        for p in PACINGS:
            half = 0.5 * f["saturation_offered" if p == "burst" else "saturation_spread_offered"]
            h, a0, a1 = f["hop"][p], f["e2e0"][p], f["e2e1"][p]
            if p == "spread":
                target, verdict = f"p50 <= {TARGET_HOP_P50:.0f}, p99 <= {TARGET_HOP_P99:.0f}", pf(
                    h["p50"] <= TARGET_HOP_P50 and h["p99"] <= TARGET_HOP_P99)
            else:
                target = (f"p50 floor of any FIFO server for 1-ms bursts at this load: "
                          f"{f0(burst_floor_us(half, usev))} (see below)")
                verdict = "-"
            rows += [
                [f"{prof.name}: per-hop added latency p50 / p99 / p99.9 at 50 % saturation ({f0(half)} ev/s), "
                 f"{p} pacing (us)", f"{f0(h['p50'])} / {f0(h['p99'])} / {f0(h['p999'])}", target, verdict],
                [f"{prof.name}: e2e 0 hops / 1 router p50, p99, p99.9, {p} pacing (us)",
                 f"{f0(a0['p50'])}, {f0(a0['p99'])}, {f0(a0['p999'])} / {f0(a1['p50'])}, {f0(a1['p99'])}, "
                 f"{f0(a1['p999'])}", "-", ""],
            ]
        rows += [
            [f"{prof.name}: events lost + router drops at 70 % of saturation (all reps)", f0(f["drops70"]), "0",
             pf(f["drops70"] == 0)],
            [f"{prof.name}: machine gaps on the router's idle core: % of time / gaps > 500 us per s / largest us",
             f"{f['gaps_lost_pct']:.2f} / {f1(f['gaps_over_500_per_s'])} / {f0(f['gaps_largest_us'])}", "-", ""],
        ]
    out.append(table(["figure", "measured", "target", ""], rows) + "\n")
    out.append(
        "The per-hop targets are judged in spread pacing. Under burst pacing a whole tick's events reach the "
        "router at once; at 50 % load serving them takes half the tick, so the median event waits a quarter "
        "of a millisecond whatever the router does (the floor column is 500 us x load x the router's us/event "
        "at saturation). The dissertation's publishers sent in bursts; its per-SR latency was 0.36-0.53 ms.\n")
    out.append(f"Machine noise: other processes (not this benchmark's) used {f0(res.get('background_before', 0))} % "
               f"of a core just before the run and a median {f0(_med(noise))} % (max {f0(max(noise, default=0))} %)"
               " during the trials above (sum of their /proc/PID/stat CPU); "
               f"{res.get('retries', 0)} trial(s) were repeated because other processes took more than 25 % of a "
               "core during them (at most 2 repeats per trial, 20 per run, 3 with --quick; the last attempt is "
               "reported).\n")
    out.append("### Against reference relays (Python, C, NATS, Zenoh, DDS; same machine type)\n")
    brows: list[list[str]] = []
    for name, (b_rate, b_us, bh) in BASELINE.items():
        brows.append([name, f0(b_rate), f2(b_us), f"{bh[0]} / {bh[1]} / {bh[2]}",
                      f"{fwd / b_rate:.2f}x", f"{usev / b_us:.2f}x"])
    out.append(table(["baseline relay", "max events/s", "hop CPU us/event", "hop p50/p99/p99.9 us",
                      "GridStat router / baseline (rate)", "GridStat router / baseline (us/event)"], brows))
    hb, hs = hop.get("burst", {}), hop.get("spread", {})
    out.append(f"\nGridStat router: {f0(fwd)} events/s, {f2(usev)} us/event; hop p50 / p99 / p99.9 "
               f"{f0(hs.get('p50', math.nan))} / {f0(hs.get('p99', math.nan))} / {f0(hs.get('p999', math.nan))} us "
               f"(spread), {f0(hb.get('p50', math.nan))} / {f0(hb.get('p99', math.nan))} / "
               f"{f0(hb.get('p999', math.nan))} us (burst). The baseline's relays forward blindly; the router "
               "also validates every event, looks up the routing table and applies the rate filter, and "
               "re-packs per outgoing channel. The baseline measured its hop at 1,000 events/s; this table's "
               "hop latency is at 50 % of saturation, which includes batching delay (see below).\n")
    out.append("### Per repetition\n")
    prow = []
    for prof in profiles:
        for i, s in enumerate(prof.saturation):
            t = s.trial
            lat_cells = []
            for p in prof.lat:
                t0_, t1_ = prof.lat[p][0][i], prof.lat[p][1][i]
                lat_cells.append(f"at {f0(t1_.offered)} ev/s: {f0(_lat(t0_, 'p50'))}, {f0(_lat(t0_, 'p99'))}, "
                                 f"{f0(_lat(t0_, 'p999'))} / {f0(_lat(t1_, 'p50'))}, {f0(_lat(t1_, 'p99'))}, "
                                 f"{f0(_lat(t1_, 'p999'))}")
            g = prof.gaps[i]
            a70 = prof.at70[i]
            prow.append([prof.name, str(i + 1), f0(s.rate), f0(prof.saturation_spread[i].rate),
                         f0(t.forwarded_rate if t else float("nan")), f0(t.cpu_pct if t else float("nan")),
                         f2(t.us_per_event if t else float("nan")), "yes" if s.publisher_bound else "no",
                         f"{g.lost_pct:.2f} / {g.over(500)} / {g.largest_us:,}",
                         *lat_cells, f"{f0(a70.offered)}: lost {a70.lost}, drops {a70.drops}"])
    out.append(table(["profile", "rep", "saturation burst ev/s", "saturation spread ev/s", "forwarded ev/s (burst)",
                      "router CPU %", "us/event", "publisher-bound", "idle-core gaps: % time / > 500 us / largest us",
                      *[f"{p}: 0-hop p50, p99, p99.9 / 1 router (us)" for p in PACINGS], "70 % check"], prow) + "\n")
    out.append("Saturation-search trials (all profiles and repetitions): offered -> forwarded ev/s, loss %, "
               "median latency, router CPU %, us/event, router drops, publisher kept pace:\n")
    srow = []
    for prof in profiles:
        for pacing, sat_list in (("burst", prof.saturation), ("spread", prof.saturation_spread)):
            for i, s in enumerate(sat_list):
                for t in s.trials:
                    srow.append([prof.name, pacing, str(i + 1), f0(t.offered), f0(t.forwarded_rate),
                                 f"{100 * t.loss:.3f}", f0(t.p50_us), f0(t.cpu_pct), f2(t.us_per_event),
                                 str(t.drops), "yes" if t.kept_pace else "no",
                                 f"{t.pub_cpu_pct:.0f} / {t.sub_cpu_pct:.0f}",
                                 str(t.udp_err.get("RcvbufErrors", 0)), f0(t.other_cpu_pct),
                                 "yes" if t.ok() else "no"])
    out.append(table(["profile", "pacing", "rep", "offered ev/s", "forwarded ev/s", "loss %", "p50 us",
                      "router CPU %", "us/event", "router drops", "pub kept pace", "pub / sub CPU %",
                      "UDP RcvbufErrors", "other procs CPU %", "sustained"], srow) + "\n")
    # load scalability
    out.append("### Load scalability: one router (cf. dissertation Tables 8.7-8.9)\n")
    out.append(f"One router, {d['load']} s per load, one repetition. The dissertation's tlv (load variables "
               "at 1 ms, nominally tlv events/ms) is matched to an offered load of tlv x 1000 events/s; its "
               "TP column is what its publishers actually achieved. Its means are ms through publisher -> ESR "
               "-> i0 -> ESR -> subscriber (three SRs); ours are us through one router.\n")
    lrow = []
    for row in res["load_rows"]:
        tb_, ts_ = row["burst"], row["spread"]
        tlv = tb_.offered // 1000
        dref = DISS_LOAD.get(tlv) if tb_.offered % 1000 == 0 else None
        frac = tb_.offered / sat_rate if sat_rate else float("nan")
        lrow.append([f0(tb_.offered), f"{100 * frac:.0f} %", f0(tb_.forwarded_rate), f"{100 * tb_.loss:.3f}",
                     str(tb_.drops), f1(_lat(tb_, "mean")), f0(_lat(tb_, "p50")), f0(_lat(tb_, "p99")),
                     f0(_lat(tb_, "p999")), f0(_lat(tb_, "mean", "lat_ref")), f0(tb_.cpu_pct), f2(tb_.us_per_event),
                     f"{100 * ts_.loss:.3f}", f0(_lat(ts_, "p50")), f0(_lat(ts_, "p99")), f0(_lat(ts_, "p999")),
                     f0(ts_.cpu_pct), f2(ts_.us_per_event),
                     *(dref if dref else ("", "", "", "", ""))])
    out.append(table(["offered ev/s", "of sat.", "burst: received ev/s", "loss %", "router drops",
                      "mean us", "p50 us", "p99 us", "p99.9 us", "ref mean us", "router CPU %", "us/event",
                      "spread: loss %", "p50 us", "p99 us", "p99.9 us", "router CPU %", "us/event",
                      "diss. mean s0/s2/s4 ms", "diss. model ms", "diss. TP ev/ms", "diss. i0 CPU %",
                      "diss. drop %"], lrow) + "\n")
    # hop scalability
    hop_rows: dict[int, list[Trial]] = res["hop_rows"]
    hl = res["hop_load"]
    ref_tlv = min(DISS_TP, key=lambda k: abs(DISS_TP[k] * 1000 - hl))
    out.append("### Hop scalability: chains of 1..N routers at a fixed load (cf. dissertation Tables 8.12-8.18)\n")
    out.append(f"Offered load {hl:,} events/s, burst pacing ({d['hop']} s per chain, one repetition; all routers "
               "share core 1). "
               f"Reference column: the dissertation's tlv={ref_tlv} row (it achieved {DISS_TP[ref_tlv]} "
               "events/ms, the nearest to our load), mean ms. Delta/hop = (e2e(N) - e2e(0 hops)) / N.\n")
    base = hop_rows.get(0, [None])[0]
    hrow = []
    xs: list[float] = []
    ys: list[float] = []
    for n in sorted(hop_rows):
        t = hop_rows[n][0]
        if base is not None and n > 0:
            dmean = (_lat(t, "mean") - _lat(base, "mean")) / n
            dp50 = (_lat(t, "p50") - _lat(base, "p50")) / n
            dp99 = (_lat(t, "p99") - _lat(base, "p99")) / n
        else:
            dmean = dp50 = dp99 = float("nan")
        if n > 0:
            xs.append(n)
            ys.append(_lat(t, "mean"))
        diss = DISS_HOPS[ref_tlv][0][n - 1] if 1 <= n <= 7 else None
        hrow.append([str(n), f1(_lat(t, "mean")), f0(_lat(t, "p50")), f0(_lat(t, "p99")), f0(_lat(t, "p999")),
                     f0(_lat(t, "mean", "lat_ref")), f1(dmean), f1(dp50), f1(dp99), f"{100 * t.loss:.3f}",
                     str(t.drops), f0(sum(t.router_cpu_s) / t.elapsed * 100 if t.elapsed else float("nan")),
                     f"{diss:.3f}" if diss is not None else "-"])
    out.append(table(["routers", "mean us", "p50 us", "p99 us", "p99.9 us", "ref mean us", "Δ/hop mean us",
                      "Δ/hop p50 us", "Δ/hop p99 us", "loss %", "router drops", "all routers CPU %",
                      f"diss. mean ms (tlv={ref_tlv})"], hrow))
    slope = _slope(xs, ys)
    out.append(f"\nLeast-squares slope of the mean over 1..{max(hop_rows)} routers: **{f1(slope)} us/hop** "
               f"(dissertation: {DISS_HOPS[ref_tlv][1] * 1000:.0f} us/hop at tlv={ref_tlv}, "
               f"{', '.join(f'{v[1] * 1000:.0f}' for v in DISS_HOPS.values())} us/hop at tlv 40/80/120/160).\n")
    return "\n".join(out), figures


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else float("nan")


# -- tables report ------------------------------------------------------------------------------------
def tables_report(results: Sequence[TableResult], facts: dict[str, str], reps: int, wall_s: float) -> str:
    from gridstat.bench import tables as tb

    out = ["## Routing-table micro-benchmark (`gridstat bench tables`)\n", facts_md(facts) +
           f" Whole run {wall_s:.0f} s.\n"]
    doc = (tb.__doc__ or "").split("\n\n", 1)[1].strip()
    out.append("**Method.** " + re.sub(r"\s*\n\s*", " ", doc) + f" Repetitions: {reps}.\n")
    ks = sorted({r.intervals for r in results})
    for variant in ("close", "sparse"):
        rows = []
        for c in sorted({r.channels for r in results}):
            byk = {r.intervals: r for r in results if r.variant == variant and r.channels == c}
            rows.append([str(c)] + [f"{f0(byk[k].ns_process)} / {f0(byk[k].ns_flush)}" if k in byk else "-"
                                    for k in ks])
        out.append(f"**{variant}**: ns per input event, `process` / `process + flush` (medians):\n")
        out.append(table(["channels \\ intervals K"] + [str(k) for k in ks], rows) + "\n")
    rows = []
    for c in sorted({r.channels for r in results}):
        byk = {r.intervals: r for r in results if r.variant == "close" and r.channels == c}
        rows.append([str(c)] + [f2(byk[k].pushes_per_event) if k in byk else "-" for k in ks])
    out.append("Channel copies per input event (the same for both variants, which select the same channels):\n")
    out.append(table(["channels \\ intervals K"] + [str(k) for k in ks], rows) + "\n")
    best = min(results, key=lambda r: r.ns_process)
    out.append(f"Cheapest case: {best.variant} C={best.channels} K={best.intervals}: {f0(best.ns_process)} ns/event "
               f"(`process`), {f0(best.ns_flush)} ns/event with packing; the reference Python drain relay spends "
               "1,690 ns/event for the whole hop (recv + unpack + repack + send).\n")
    return "\n".join(out)


# -- document -----------------------------------------------------------------------------------------
HEADER = """# GridStat benchmarks

Generated by `gridstat bench router`, `gridstat bench tables` and `gridstat bench broker`
(module `gridstat.bench`); each command rewrites only its own section. Figures are from one machine
and one run: compare shapes and ratios, not absolute numbers across machines. Reference figures:
the dissertation's Chapter 8 (a Java prototype on 2005 hardware) and reference measurements of
one forwarding hop (Python relays vs C, NATS, Zenoh, DDS) made once on this machine type.
"""


def write_section(path: Path, name: str, body: str) -> None:
    start, end = SECTION.format(name=name, edge="start"), SECTION.format(name=name, edge="end")
    text = path.read_text() if path.exists() else HEADER
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        pre, rest = text.split(start, 1)
        _, post = rest.split(end, 1)
        text = pre + block + post
    else:
        order = ["router", "tables"]
        # keep router before tables whatever order the commands ran in
        if name == "router" and SECTION.format(name="tables", edge="start") in text:
            pre, post = text.split(SECTION.format(name="tables", edge="start"), 1)
            text = pre + block + "\n\n" + SECTION.format(name="tables", edge="start") + post
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        del order
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
