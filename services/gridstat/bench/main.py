"""``gridstat bench router`` and ``gridstat bench tables``.

``router``: real router processes on 127.0.0.1 (saturation, per-hop latency,
load and hop scalability beside the dissertation's Chapter 8); about 4-5
minutes, ``--quick`` under a minute. ``tables``: the routing-table forwarding
path in-process (ns/event by variant, channels and distinct intervals).
``shapes``: the dissertation's multicast-with-filtering and condensation
experiments on trees of router processes (4-7 minutes, ``--quick`` under 2).
Each prints Markdown and, with ``--write PATH``, replaces its section of
``docs/benchmarks.md`` (the default for full runs; ``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gridstat.bench import dnp3 as dnp3_bench
from gridstat.bench import goose as goose_bench
from gridstat.bench import granularity

DEFAULT_DOC = "docs/benchmarks.md"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    r = sub.add_parser("router", help="router processes on 127.0.0.1: saturation, latency, load and hop tables")
    r.add_argument("--quick", action="store_true", help="short trials, one repetition (< 60 s)")
    r.add_argument("--reps", type=int, default=0, help="repetitions of saturation and latency (default 3, quick 1)")
    r.add_argument("--variant", default="close", choices=["close", "sparse"])
    r.add_argument("--hop-load", type=int, default=18_000,
                   help="offered events/s of the hop-scalability table (default 18,000: the dissertation's "
                        "tlv=40 achieved 17.7 events/ms)")
    r.add_argument("--max-hops", type=int, default=7, help="longest chain (1..7)")
    r.add_argument("--busy-poll-us", type=int, default=100,
                   help="also measure the low-latency profile: fresh routers with --busy-poll-us N (0: skip)")
    _write_args(r)
    t = sub.add_parser("tables", help="in-process micro-benchmark of the routing-table forwarding path")
    t.add_argument("--quick", action="store_true", help="K in 1, 2, 5, 10 only and fewer repetitions")
    t.add_argument("--reps", type=int, default=0, help="repetitions per cell (default 7, quick 3)")
    _write_args(t)
    b = sub.add_parser("broker", help="admission decisions and installs on a generated 200-router cloud")
    b.add_argument("--quick", action="store_true", help="40 routers, 1,000 subscriptions")
    b.add_argument("--routers", type=int, default=0, help="routers in the cloud (default 200)")
    b.add_argument("--subs", type=int, default=0, help="subscriptions (default 10,000)")
    b.add_argument("--farms", type=int, default=4, help="router farm processes")
    b.add_argument("--concurrency", type=int, default=1024, help="Subscribe RPCs in flight")
    b.add_argument("--decisions-only", action="store_true", help="skip the install through real processes")
    _write_args(b)
    m = sub.add_parser("modes", help="mode-change time with 10,000 subscriptions over 20 routers, one cloud and "
                                     "a two-level hierarchy, with probe streams checked for loss")
    m.add_argument("--quick", action="store_true", help="1,000 subscriptions, 6 switches, one cloud only")
    m.add_argument("--subs", type=int, default=0, help="subscriptions (default 10,000)")
    m.add_argument("--switches", type=int, default=0, help="switches per set-up (default 20)")
    m.add_argument("--no-hierarchy", action="store_true", help="one cloud only")
    _write_args(m)
    h = sub.add_parser("heal", help="redundancy restored after a router is killed: 1,000 redundancy-2 subscriptions "
                                    "re-planned around it (docs/redundancy.md, \"Healing\")")
    h.add_argument("--quick", action="store_true", help="200 subscriptions, one repetition")
    h.add_argument("--subs", type=int, default=0, help="affected subscriptions (default 1,000)")
    h.add_argument("--reps", type=int, default=0, help="repetitions (default 3, quick 1)")
    _write_args(h)
    pm = sub.add_parser("pmu", help="C37.118 in and out: 100 PMUs x 10 phasors at 60 frames/s through pmu-gateway, "
                                     "two routers and pdc-server (docs/interop.md)")
    pm.add_argument("--quick", action="store_true", help="a shorter window, one repetition")
    pm.add_argument("--pmus", type=int, default=100, help="PMUs in the simulated stream (default 100)")
    pm.add_argument("--reps", type=int, default=0, help="repetitions (default 3, quick 1)")
    pm.add_argument("--served", default="", metavar="N,N",
                    help="PMUs the PDC server serves, one run each (default: half of --pmus, then 5)")
    pm.add_argument("--no-subscribers", action="store_true",
                    help="without the SDK subscribers (the PDC path alone: less load on a small machine)")
    _write_args(pm)
    go = sub.add_parser("goose", help="IEC 61850 GOOSE into GridStat: points/s per goose-gateway core and alert "
                                      "latency through two routers (docs/goose.md; root; < 2 min)")
    goose_bench.add_arguments(go)
    _write_args(go)
    dn = sub.add_parser("dnp3", help="DNP3 into GridStat: points/s per dnp3-gateway core and alert latency through "
                                     "two routers (docs/dnp3.md; < 2 min)")
    dnp3_bench.add_arguments(dn)
    _write_args(dn)
    ie = sub.add_parser("iec104", help="IEC 60870-5-104 into GridStat: points/s per iec104-gateway core and alert "
                                        "latency through two routers (docs/iec104.md; < 2 min)")
    ie.add_argument("--quick", action="store_true", help="shorter windows, one repetition")
    ie.add_argument("--points", type=int, default=300, help="measured values the outstation sends (default 300)")
    ie.add_argument("--reps", type=int, default=0, help="repetitions (default 2, quick 1)")
    _write_args(ie)
    granularity.add_parsers(sub, _write_args)
    s = sub.add_parser("shapes", help="the dissertation's multicast-with-filtering and condensation experiments "
                                      "(Tables 8.28-8.32, 8.37-8.47): shapes beside its figures")
    s.add_argument("--quick", action="store_true", help="one load each, one repetition, 1.5 s trials (< 2 min)")
    s.add_argument("--reps", type=int, default=0, help="repetitions (default 3, quick 1)")
    s.add_argument("--duration", type=float, default=0.0, help="seconds per trial (default 3, quick 1.5)")
    s.add_argument("--filter-rates", default="", metavar="EV/S,...",
                   help="offered loads of the filtering experiment (default 250000,500000; quick 500000)")
    s.add_argument("--cond-rates", default="", metavar="EV/S,...",
                   help="offered loads of the condensation experiment (default 250000,500000,750000; quick 500000)")
    s.add_argument("--only", choices=["filtering", "condensation"], default=None, help="run one experiment")
    _write_args(s)
    o = sub.add_parser("overload", help="HAPS (seed 000): Figs. 3-7 on a simulated 20-node network (link and message "
                                        "shedding per strategy) and Figs. 8-9 on a real router (a 100 kbit/s link "
                                        "failing over to 1 kbit/s); about 2.5 min")
    o.add_argument("--quick", action="store_true", help="a third of the simulated workload, shorter phases (~1 min)")
    o.add_argument("--seeds", type=int, default=3, help="simulated workloads per strategy (default 3)")
    o.add_argument("--only", choices=["simulation", "router"], default=None,
                   help="run one part (Figs. 3-7 or Figs. 8-9); prints only, since the section holds both")
    _write_args(o)
    a = sub.add_parser("auth", help="datagram authentication off vs on (the secure defaults): router saturation, "
                                    "CPU per event, per-hop latency (~3 min)")
    a.add_argument("--quick", action="store_true", help="one repetition (~1 min)")
    a.add_argument("--reps", type=int, default=0, help="repetitions (default 3, quick 1)")
    _write_args(a)
    hi = sub.add_parser("history", help="history queries: a 1-hour window of a 60 Hz variable out of a 24-hour "
                                         "Kafka archive, full rate and 100 ms (starts a local Kafka; ~5 min)")
    hi.add_argument("--quick", action="store_true", help="a 2-hour archive, 3 windows (~1 min)")
    hi.add_argument("--hours", type=float, default=0.0, help="hours archived (default 24, quick 2)")
    hi.add_argument("--others", type=int, default=3, help="other variables at 10 Hz in the topic (default 3)")
    hi.add_argument("--partitions", type=int, default=1, help="partitions of the archive topic (default 1)")
    hi.add_argument("--reps", type=int, default=0, help="windows timed per rate (default 5, quick 3)")
    hi.add_argument("--kafka", default=None, metavar="HOST:PORT",
                    help="use this Kafka (an empty one: the archive topic is created) instead of starting one")
    _write_args(hi)
    k = sub.add_parser("telemetry", help="telemetry export on vs off: router throughput and CPU per event; Kafka "
                                         "ingest rate through one exporter (starts a local Kafka; ~3 min)")
    k.add_argument("--quick", action="store_true", help="one repetition, default sampling only (~1 min)")
    k.add_argument("--reps", type=int, default=0, help="repetitions (default 3, quick 1)")
    k.add_argument("--kafka", default=None, metavar="HOST:PORT", help="use this Kafka instead of starting one")
    _write_args(k)


def _write_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--write", metavar="PATH", default=None,
                   help=f"write the Markdown section into PATH (default {DEFAULT_DOC} for a full run)")
    p.add_argument("--no-write", action="store_true", help="print only")


def _target(args: argparse.Namespace) -> Path | None:
    if args.no_write:
        return None
    if args.write:
        return Path(args.write)
    return None if args.quick else Path(DEFAULT_DOC)


def _publish(body: str, target: Path | None, section: str) -> int:
    """Print a benchmark's Markdown section and write it into ``target`` (docs/benchmarks.md) if given."""
    from gridstat.bench import report

    print(body)
    if target is not None:
        report.write_section(target, section, body)
        _log(f"wrote {target}")
    return 0


def run(args: argparse.Namespace) -> int:
    from gridstat.bench import report

    facts = report.machine_facts()
    target = _target(args)
    if args.bench in ("analysis", "granularity"):
        return granularity.run(args, target=target, facts=facts, log=_log)
    if args.bench == "tables":
        from gridstat.bench.tables import run_tables

        reps = args.reps or (3 if args.quick else 7)
        t0 = time.monotonic()
        results = run_tables(quick=args.quick, reps=reps, log=_log)
        body = report.tables_report(results, facts, reps, time.monotonic() - t0)
        return _publish(body, target, "tables")
    if args.bench == "broker":
        from gridstat.bench import broker

        routers = args.routers or (40 if args.quick else 200)
        subs = args.subs or (1_000 if args.quick else 10_000)
        dec, inst = broker.run_broker_bench(routers=routers, subs=subs, farms=args.farms,
                                            concurrency=args.concurrency, install=not args.decisions_only, log=_log)
        body = broker.report(dec, inst, routers=routers, subs=subs, concurrency=args.concurrency, facts=facts)
        return _publish(body, target, "broker")
    if args.bench == "modes":
        from gridstat.bench import modes

        subs = args.subs or (1_000 if args.quick else 10_000)
        switches = args.switches or (6 if args.quick else 20)
        _log(f"modes: one cloud, {subs} subscriptions ...")
        one = modes.bench_one_cloud(subs, switches, _log)
        two = None
        if not (args.quick or args.no_hierarchy):
            _log(f"modes: parent + two clouds, {subs} subscriptions ...")
            two = modes.bench_hierarchy(subs, switches, _log)
        body = modes.report(one, two, subs=subs, switches=switches, facts=facts)
        return _publish(body, target, "modes")
    if args.bench == "heal":
        from gridstat.bench import heal

        runs = heal.run_heal_bench(subs=args.subs or (200 if args.quick else 1_000),
                                   reps=args.reps or (1 if args.quick else 3), log=_log)
        return _publish(heal.report(runs, report.facts_md(facts)), target, "heal")
    if args.bench == "pmu":
        from gridstat.bench import pmu

        served = tuple(int(n) for n in args.served.split(",") if n.strip()) or (args.pmus // 2, min(5, args.pmus))
        pmu_runs = pmu.run_pmu_bench(pmus=args.pmus, reps=args.reps or (1 if args.quick else 3), quick=args.quick,
                                     log=_log, served=served, subscribers=not args.no_subscribers)
        return _publish(pmu.report(pmu_runs, report.facts_md(facts)), target, "pmu")
    if args.bench == "iec104":
        from gridstat.bench import iec104

        iec104_runs = iec104.run_iec104_bench(points=args.points, reps=args.reps or (1 if args.quick else 2),
                                              quick=args.quick, log=_log)
        return _publish(iec104.report(iec104_runs, report.facts_md(facts)), target, "iec104")
    if args.bench == "goose":
        goose_runs = goose_bench.run_goose_bench(blocks=args.blocks, members=args.members,
                                                 states_per_s=args.states_per_s,
                                                 reps=args.reps or (1 if args.quick else 2),
                                                 window_s=5.0 if args.quick else 10.0, log=_log)
        return _publish(goose_bench.report(goose_runs, report.facts_md(facts)), target, "goose")
    if args.bench == "dnp3":
        dnp3_runs = dnp3_bench.run_dnp3_bench(analogs=args.analogs or (300 if args.quick else 1_000),
                                              reps=args.reps or (1 if args.quick else 2),
                                              window_s=5.0 if args.quick else 10.0, log=_log)
        return _publish(dnp3_bench.report(dnp3_runs, report.facts_md(facts)), target, "dnp3")
    if args.bench == "auth":
        from gridstat.bench import auth

        res = auth.run_auth_bench(quick=args.quick, reps=args.reps or (1 if args.quick else 3), log=_log)
        body = auth.auth_report(res, facts)
        return _publish(body, target, "auth")
    if args.bench == "history":
        from gridstat.bench import history

        hist = history.run_history_bench(hours=args.hours or (2.0 if args.quick else 24.0), others=args.others,
                                         reps=args.reps or (3 if args.quick else 5), partitions=args.partitions,
                                         kafka=args.kafka, log=_log)
        return _publish(history.history_report(hist, facts), target, "history")
    if args.bench == "telemetry":
        from gridstat.bench import telemetry

        res = telemetry.run_telemetry_bench(quick=args.quick, reps=args.reps or (1 if args.quick else 3),
                                            kafka=args.kafka, log=_log)
        body = telemetry.telemetry_report(res, facts)
        return _publish(body, target, "telemetry")
    if args.bench == "overload":
        from gridstat.bench import overload

        if args.seeds < 1:
            _log("--seeds must be at least 1")
            return 2
        t0 = time.monotonic()
        sim = None if args.only == "router" else overload.run_simulation(quick=args.quick, seeds=args.seeds, log=_log)
        failover = [] if args.only == "simulation" else overload.run_overload(quick=args.quick, log=_log)
        body = overload.report(failover, report.facts_md(facts), time.monotonic() - t0, sim)
        if args.only is not None and target is not None:
            _log("--only: printing only; the section holds both parts")
            target = None
        return _publish(body, target, "overload")
    if args.bench == "shapes":
        from gridstat.bench import shape_plans as plans
        from gridstat.bench import shapes

        def rates(text: str, default: tuple[int, ...]) -> list[int]:
            return [int(x) for x in text.split(",") if x.strip()] if text else list(default)

        body, cond_ok = shapes.run_shapes(
            quick=args.quick, reps=args.reps or (1 if args.quick else 3),
            filter_rates=rates(args.filter_rates, plans.QUICK_FILTER_RATES if args.quick else plans.FILTER_RATES),
            cond_rates=rates(args.cond_rates, plans.QUICK_COND_RATES if args.quick else plans.COND_RATES),
            duration=args.duration or (1.5 if args.quick else 3.0), only=args.only,
            facts_line=report.facts_md(facts), log=_log)
        _publish(body, target, "shapes")
        if not cond_ok:
            _log("condensation experiment did not run: see its section")
        return 0 if cond_ok else 1
    from gridstat.bench.router import run_router_bench

    reps = args.reps or (1 if args.quick else 3)
    res = run_router_bench(quick=args.quick, reps=reps, variant=args.variant, hop_load=args.hop_load,
                           max_hops=args.max_hops, log=_log, busy_poll_us=args.busy_poll_us)
    body, figures = report.router_report(res, facts)
    _publish(body, target, "router")
    # Targets are reported, not enforced: the exit status says the benchmark ran, not that it passed.
    _log("targets: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in figures["pass"].items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m gridstat.bench.main router ...``: the same as ``gridstat bench router ...``."""
    p = argparse.ArgumentParser(prog="gridstat bench", description=(__doc__ or "").splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
