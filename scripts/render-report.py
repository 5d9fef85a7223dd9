#!/usr/bin/env python3
"""Render the QoS compliance report (spark/compliance_report.py) to PNG and HTML without Spark or Kafka.

    .venv/bin/python scripts/render-report.py --out /tmp/qos-look            # synthetic rows: a look at the page
    .venv/bin/python scripts/render-report.py --from /tmp/qos --out /tmp/qos-look   # rows a job run saved

Without ``--from`` it makes a synthetic grid: operational subscriptions (one compliant in two modes, one
with a 58 ms breach of its 30 ms bound, one with gaps, one under-delivered) and archive subscriptions
with 1,000 ms bounds, over ten minutes of 1 s delivery samples. With ``--from DIR`` it reads
``DIR/report-rows.json``, which ``spark/qos_compliance.py`` writes beside report.html. Writes
``report.png`` (the whole page as one image), ``report.html`` and the plots under ``--out``
(docs/telemetry.md, "Spark jobs").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "spark"))
import compliance_report as cr  # noqa: E402


def _row(subscriber: str, variable: str, mode: int, *, kind: str = "operational", interval: int = 20,
         bound: float = 30.0, p50: float, p99: float, p999: float, worst: float, over: float = 0.0,
         gaps: int = 0, delivered_interval: float | None = None, t0: int, t1: int,
         tolerance: float = 0.02) -> dict[str, Any]:
    samples = (t1 - t0) // 1000 + 1
    expected = samples * 1000 / interval
    di = float(interval) if delivered_interval is None else delivered_interval
    delivered = round(expected * interval / di) - gaps
    return {"subscription": f"{subscriber}/{variable}", "subscriber": subscriber, "variable": variable,
            "mode": mode, "kind": kind, "samples": samples, "from_ms": t0, "to_ms": t1,
            "requested_interval_ms": interval, "delivered_interval_ms": di, "interval_deviation_ms": di - interval,
            "delivered": delivered, "expected": expected, "delivery_ratio": delivered / expected,
            "latency_bound_ms": bound, "latency_p50_ms": p50, "latency_p99_ms": p99, "latency_p999_ms": p999,
            "latency_max_ms": worst, "over_bound_fraction": over, "latency_samples": delivered,
            "latency_samples_omitted": 0, "gaps": gaps, "duplicates": 0, "violations": 1 if gaps else 0,
            "extrapolated": 0, "latency_ok": p999 <= bound, "interval_ok": di <= interval * (1 + tolerance),
            "gaps_ok": gaps == 0,
            "compliant": p999 <= bound and di <= interval * (1 + tolerance) and gaps == 0}


def synthetic(seed: int = 7) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, timeline) of a small grid over ten minutes."""
    rnd = random.Random(seed)
    t1 = (int(time.time()) // 60) * 60_000
    t0 = t1 - 600_000
    rows = [
        _row("ems-west", "pmu-a1/freq", 0, p50=6, p99=9, p999=10, worst=11, t0=t0, t1=t1),
        _row("ems-west", "pmu-a1/freq", 1, interval=40, bound=60, p50=5, p99=8, p999=9, worst=9, t0=t0, t1=t1),
        _row("protection-relay-coordinator", "substation-bus-17/voltage-angle", 0, p50=7, p99=24, p999=58,
             worst=58, over=40 / 30_050, t0=t0, t1=t1),
        _row("wams", "pmu-b2/freq", 0, p50=5, p99=9, p999=12, worst=14, gaps=2, delivered_interval=20.0, t0=t0,
             t1=t1),
        _row("scada-east", "rtu-9/breaker", 0, interval=100, bound=100, p50=20, p99=40, p999=55, worst=61,
             delivered_interval=104.0, t0=t0, t1=t1),
        _row("archive", "pmu-a1/freq", 0, kind="archive", interval=100, bound=1000, p50=310, p99=690, p999=820,
             worst=870, t0=t0, t1=t1),
        _row("archive", "pmu-b2/freq", 0, kind="archive", interval=100, bound=1000, p50=280, p99=650, p999=760,
             worst=790, t0=t0, t1=t1),
        _row("archive", "rtu-9/breaker", 0, kind="archive", interval=1000, bound=1000, p50=400, p99=980, p999=1240,
             worst=1240, over=3 / 600, t0=t0, t1=t1),
    ]
    timeline = []
    for r in rows:
        for k in range(0, 600):
            ts = t0 + 1000 * k
            base = float(r["latency_p99_ms"]) * (0.6 + 0.3 * rnd.random())
            if r["subscriber"].startswith("protection") and k in (212, 431):
                base = 58.0
            if r["subscriber"] == "archive" and r["variable"] == "rtu-9/breaker" and k in (100, 101, 102):
                base = 1240.0
            gaps = 1 if r["subscriber"] == "wams" and k in (305, 306) else 0
            timeline.append({"subscription": r["subscription"], "mode": r["mode"], "kind": r["kind"], "ts_ms": ts,
                             "max_latency_ms": round(base), "latency_bound_ms": r["latency_bound_ms"], "gaps": gaps})
    return rows, timeline


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for report.png, report.html and the plots")
    p.add_argument("--from", dest="source", default=None,
                   help="a qos_compliance.py output folder (its report-rows.json) instead of synthetic rows")
    args = p.parse_args(argv)
    if args.source:
        saved = json.loads((Path(args.source) / "report-rows.json").read_text())
        rows, timeline = saved["rows"], saved["timeline"]
        drops, decisions, gaps = saved.get("drops", []), saved.get("decisions", []), saved.get("gaps", [])
    else:
        rows, timeline = synthetic()
        drops = [{"role": "router", "source": "e2", "channel": "sub:ems-west", "reason": "queue_full", "dropped": 7}]
        decisions = [{"decision": "admitted", "reason": "", "count": 8}]
        gaps = []
    out = Path(args.out)
    path = cr.write(out, rows, drops, decisions, gaps, timeline)
    print(f"REPORT html={path} png={out / 'report.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
