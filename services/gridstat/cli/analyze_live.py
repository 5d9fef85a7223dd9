"""``gridstat analyze TOPOLOGY.yaml --live SECONDS``: run the model's system for real and compare.

Starts one broker process per broker of the file on 127.0.0.1 (``gridstat.analysis.live``),
runs the file's workload time-compressed under ``--strategy``, and prints the model's
prediction beside what the brokers measured themselves, per broker and metric, with the
verdict against ``--tolerance``. With ``--kafka`` the brokers export ``model_broker`` records,
and ``--predictions FILE`` is the other input of ``spark/model_validation.py``, which makes the
same comparison from Kafka (the issue-8 report). Exit codes: 0 ran (whatever the verdict),
2 invalid file or options, 1 a broker failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gridstat.analysis import live
from gridstat.cli.analyze import _n

ABS_TOLERANCE = 0.5


def run(args: argparse.Namespace) -> int:
    p = live.plan(args.topology, seconds=args.live, strategy=args.strategy, time_scale=args.time_scale,
                  seed=args.seed)
    data = p.data()
    out = Path(args.predictions) if args.predictions else None
    if out is not None:  # written first: a consumer can match records to it while the run goes on
        out.write_text(json.dumps(data, indent=2))
    try:
        measured = live.run_live(p, kafka=args.kafka)
    except live.LiveRunError as exc:
        print(f"gridstat analyze: error: {exc}", file=sys.stderr)
        return 1
    rows = live.compare(p.predictions, measured, rel_tol=args.tolerance, abs_tol=ABS_TOLERANCE)
    data["measured_locally"] = measured
    data["comparison"] = rows
    if out is not None:
        out.write_text(json.dumps(data, indent=2))
    if args.output == "json":
        print(json.dumps(data, indent=2))
    else:
        _print(data, rows, args.tolerance)
    return 0


def _print(data: dict[str, Any], rows: list[dict[str, Any]], tol: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=200, soft_wrap=False)
    t = Table(title=f"{data['source']}: live run {data['run']} ({data['strategy']} routing, {data['seconds']:g} s, "
                    f"time scale {data['time_scale']:g}) against the model", title_justify="left")
    for head in ("broker", "metric", "model", "measured", "error", "rel. error", "within"):
        t.add_column(head, justify="left" if head in ("broker", "metric") else "right")
    for r in rows:
        rel = "" if r["rel_error"] is None else f"{100 * r['rel_error']:+.1f} %"
        t.add_row(r["broker"], r["metric"], _n(r["predicted"]), _n(r["measured"]), _n(r["abs_error"]), rel,
                  "yes" if r["within"] else "NO")
    console.print(t)
    ok = sum(r["within"] for r in rows)
    print(f"LIVE run={data['run']} strategy={data['strategy']} within={ok}/{len(rows)} "
          f"tolerance={tol:g}+{ABS_TOLERANCE:g} verdict={'PASS' if ok == len(rows) else 'FAIL'}")
