"""``gridstat analyze TOPOLOGY.yaml``: expected routing-table sizes and message rates (seed 001's model).

Prints, per broker, the expected routing entries, the control messages it sends its parent
under identity-based and simple routing, and the notifications on its uplink against
flooding; then the paper's totals (eqs. 5-14) and the subscription load at which filtering
stops paying off against flooding (the break-even). ``--plots DIR`` writes PNGs; ``--simulate
SECONDS`` also runs the discrete-event simulation and prints its estimates beside the model;
``--live SECONDS`` runs real broker processes instead and compares what they measure
(``cli.analyze_live``). The input schema is in ``docs/analysis.md``. Exit codes: 0 ok, 2 invalid
file or options, 1 a live broker failed.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gridstat.analysis import loading, model
from gridstat.analysis import simulation as sim
from gridstat.errors import ValidationError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", metavar="TOPOLOGY.yaml", help="broker tree and workload (docs/analysis.md)")
    p.add_argument("--plots", metavar="DIR", default=None, help="write brokers.png and sweep.png into DIR")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--simulate", metavar="SECONDS", type=float, default=0.0,
                   help="also simulate each class group for SECONDS of model time and compare")
    p.add_argument("--replicas", type=int, default=8, help="simulated classes per group (default 8)")
    p.add_argument("--seed", type=int, default=1, help="simulation (and --live workload) seed (default 1)")
    live = p.add_argument_group("live run (docs/analysis.md, 'Live run'; compare with spark/model_validation.py)")
    live.add_argument("--live", metavar="SECONDS", type=float, default=0.0,
                      help="run one broker process per broker on 127.0.0.1 for SECONDS and measure")
    live.add_argument("--strategy", choices=["identity", "simple", "flooding"], default="identity",
                      help="routing of the live brokers (default identity)")
    live.add_argument("--kafka", metavar="HOST:PORT", default=None,
                      help="export the brokers' model_broker records to this Kafka")
    live.add_argument("--time-scale", type=float, default=None,
                      help="run the workload this many times faster (default: 20 mean lifetimes per run)")
    live.add_argument("--predictions", metavar="FILE", default=None,
                      help="write the model's per-broker predictions (and the run id) as JSON for the Spark job")
    live.add_argument("--tolerance", type=float, default=0.10,
                      help="relative tolerance of the printed comparison (default 0.10, plus 0.5 absolute)")
    p.epilog = "exit codes: 0 ok, 2 invalid topology file or options, 1 a --live broker failed"


def run(args: argparse.Namespace) -> int:
    if args.live:
        from gridstat.cli import analyze_live

        return analyze_live.run(args)
    workload = loading.load_analysis_file(args.topology)
    analysis = model.analyze(workload)
    breaks = _break_evens(workload)
    data = analysis_data(analysis, breaks, source=args.topology)
    if args.simulate:
        if args.simulate < 0 or not math.isfinite(args.simulate):
            raise ValidationError(f"--simulate must be > 0 seconds, got {args.simulate}", field="simulate")
        result = sim.simulate(workload, horizon_s=args.simulate, replicas=args.replicas, seed=args.seed)
        data["simulation"] = simulation_data(result, analysis.totals)
    if args.plots:
        from gridstat.analysis import plotting

        out = Path(args.plots)
        data["plots"] = [str(plotting.broker_bars(analysis, out / "brokers.png")),
                         str(plotting.load_sweep(workload, out / "sweep.png", breaks=breaks))]
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        _print_tables(data)
    return 0


def _break_evens(workload: Any) -> list[model.BreakEven]:
    if workload.subscriptions <= 0:
        return []
    return [model.break_even(workload, r) for r in model.ROUTING]


def analysis_data(analysis: model.Analysis, breaks: list[model.BreakEven], *, source: str) -> dict[str, Any]:
    """Plain JSON-able data: what ``-o json`` prints and the tables are drawn from."""
    t = analysis.totals
    return {
        "source": source,
        "brokers": [{**asdict(b), "uplink_rate": b.uplink_rate} for b in analysis.brokers],
        "totals": {**asdict(t), "notification_rate": t.notification_rate, "b_simple": t.b_simple},
        "break_even": [asdict(b) for b in breaks],
    }


def simulation_data(result: sim.SimulationResult, t: model.Totals) -> dict[str, Any]:
    rows = {}
    for name, est, expected in (("local_entries", result.local_entries, t.local_entries),
                                ("remote_entries", result.remote_entries, t.remote_entries),
                                ("notification_rate", result.notification_rate, t.notification_rate),
                                ("b_c", result.b_c, t.b_c), ("b_cs", result.b_cs, t.b_cs)):
        rows[name] = {"model": expected, "simulated": est.mean, "stderr": est.stderr, "z": est.z(expected)}
    return {"horizon_s": result.horizon_s, "replicas": result.replicas, "seed": result.seed,
            "events": result.events, "figures": rows}


def _n(x: float) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:,.2f}"
    return f"{x:.3g}"


def _print_tables(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=200, soft_wrap=False)
    t = data["totals"]
    table = Table(title=f"{data['source']}: expected figures per broker (seed 001 model)", title_justify="left")
    for head in ("broker", "depth", "children", "local entries", "remote entries", "ctl/s identity",
                 "ctl/s simple", "uplink up/s", "uplink down/s", "uplink flooding/s", "sent/s", "received/s"):
        table.add_column(head, justify="left" if head == "broker" else "right")
    for b in data["brokers"]:
        table.add_row(str(b["name"]), str(b["depth"]), str(b["children"]), _n(b["local_entries"]),
                      _n(b["remote_entries"]), _n(b["control_rate"]), _n(b["simple_control_rate"]),
                      _n(b["uplink_up_rate"]), _n(b["uplink_down_rate"]), _n(b["uplink_flooding_rate"]),
                      _n(b["sent_rate"]), _n(b["received_rate"]))
    console.print(table)
    tot = Table(title="totals (equation numbers of seed 001)", title_justify="left")
    tot.add_column("figure")
    tot.add_column("value", justify="right")
    for label, key in (("filter classes |F|", "classes"), ("mean subscriptions N_s", "subscriptions"),
                       ("publication rate omega /s", "publication_rate"), ("overlay links", "links"),
                       ("local entries (2)", "local_entries"), ("remote entries x_r (5)", "remote_entries"),
                       ("notifications b_n /s (6)", "b_n"), ("additional upward b_p /s (7)", "b_p"),
                       ("notifications b_n + b_p /s", "notification_rate"),
                       ("control b_c /s, identity (10)", "b_c"), ("control b_cs /s, simple (14)", "b_cs"),
                       ("flooding b_f /s (11)", "b_f"), ("notifications saved b_s /s (12)", "b_s"),
                       ("overall saved b /s, identity (13)", "b"), ("overall saved /s, simple", "b_simple")):
        tot.add_row(label, _n(t[key]))
    console.print(tot)
    for be in data["break_even"]:
        if be["subscriptions"] is None:
            side = "saves messages" if be["saving_at_low"] > 0 else "costs more than flooding"
            console.print(f"break-even ({be['routing']} routing): none between 1e-6x and 1e9x this load; "
                          f"filtering {side} throughout")
        else:
            verdict = "below" if t["subscriptions"] < be["subscriptions"] else "ABOVE"
            console.print(f"break-even ({be['routing']} routing): filtering beats flooding up to N_s = "
                          f"{be['subscriptions']:,.0f} ({be['scale']:.3g}x this load; this file is {verdict} it)")
    if "simulation" in data:
        s = data["simulation"]
        st = Table(title=f"simulation: {s['replicas']} classes per group x {s['horizon_s']:g} s, seed {s['seed']}",
                   title_justify="left")
        for head in ("figure", "model", "simulated", "stderr", "z"):
            st.add_column(head, justify="left" if head == "figure" else "right")
        for name, row in s["figures"].items():
            st.add_row(name, _n(row["model"]), _n(row["simulated"]), _n(row["stderr"]), f"{row['z']:.2f}")
        console.print(st)
    for p in data.get("plots", []):
        console.print(f"wrote {p}")
