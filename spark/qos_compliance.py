"""QoS compliance report: per subscription and mode, what was delivered against what was promised.

    scripts/spark-submit.sh spark/qos_compliance.py --kafka 127.0.0.1:9092 --out /tmp/qos-report

Reads every delivery sample (``gridstat.telemetry.delivery``), drop record, admission decision
and export gap now in Kafka with Spark's Kafka source, and writes under ``--out``:

* ``compliance/`` (parquet): one row per subscription and mode -- delivered interval against the
  requested one, latency p50 / p99 / p99.9 and the share of events over the bound, gaps,
  duplicates, violations, delivered against expected events, and a verdict;
* ``drops/`` (parquet): drops per role, source, channel and reason;
* ``report.html`` with plots (PNG files beside it, embedded too) and the tables.

A subscription complies in a mode when its p99.9 latency is within the bound, no expected event
was skipped (gaps), and its mean delivered interval is within ``--interval-tolerance`` of the
requested one. Records are de-duplicated on (exporter, epoch, sequence) first (the exporter
delivers at least once).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import telemetry_io as tio


def compliance(deliveries: DataFrame, *, interval_tolerance: float = 0.02) -> DataFrame:
    """One row per (subscription, mode) from parsed delivery samples."""
    keys = ["subscription", "subscriber", "variable", "mode"]
    d = deliveries.where(F.col("in_mode") | F.col("in_mode").isNull())
    weighted = F.when(F.col("delivered_interval_ms").isNotNull(), F.col("delivered"))
    base = d.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("samples"),
        F.min("ts_ms").alias("from_ms"),
        F.max("ts_ms").alias("to_ms"),
        F.max("requested_interval_ms").alias("requested_interval_ms"),
        F.max("latency_bound_ms").alias("latency_bound_ms"),
        F.sum("delivered").alias("delivered"),
        F.sum("expected").alias("expected"),
        (F.sum(F.col("delivered_interval_ms") * weighted) / F.sum(weighted)).alias("delivered_interval_ms"),
        F.sum("gaps").alias("gaps"),
        F.sum("duplicates").alias("duplicates"),
        F.sum("violations").alias("violations"),
        F.sum("extrapolated").alias("extrapolated"),
        F.sum("latency_samples_omitted").alias("latency_samples_omitted"),
    )
    lat = (d.select(*keys, "latency_bound_ms", F.explode("latency_ms").alias("latency"))
           .groupBy(*keys).agg(
               F.percentile(F.col("latency"), F.array(F.lit(0.5), F.lit(0.99), F.lit(0.999))).alias("q"),
               F.max("latency").alias("latency_max_ms"),
               F.count(F.lit(1)).alias("latency_samples"),
               F.avg((F.col("latency") > F.col("latency_bound_ms")).cast("double")).alias("over_bound_fraction")))
    out = base.join(lat, keys, "left").select(
        *keys, "samples", "from_ms", "to_ms", "requested_interval_ms", "delivered_interval_ms",
        (F.col("delivered_interval_ms") - F.col("requested_interval_ms")).alias("interval_deviation_ms"),
        "delivered", "expected", (F.col("delivered") / F.col("expected")).alias("delivery_ratio"),
        "latency_bound_ms",
        F.col("q")[0].alias("latency_p50_ms"), F.col("q")[1].alias("latency_p99_ms"),
        F.col("q")[2].alias("latency_p999_ms"), "latency_max_ms", "over_bound_fraction", "latency_samples",
        "latency_samples_omitted", "gaps", "duplicates", "violations", "extrapolated")
    latency_ok = F.coalesce(F.col("latency_p999_ms") <= F.col("latency_bound_ms"), F.lit(False))
    interval_ok = F.coalesce(
        F.col("delivered_interval_ms") <= F.col("requested_interval_ms") * (1 + interval_tolerance), F.lit(False))
    gaps_ok = F.col("gaps") == 0
    return (out.withColumn("latency_ok", latency_ok).withColumn("interval_ok", interval_ok)
            .withColumn("gaps_ok", gaps_ok)
            .withColumn("compliant", latency_ok & interval_ok & gaps_ok)
            .orderBy("subscription", "mode"))


def drops_table(drops: DataFrame) -> DataFrame:
    return (drops.groupBy("role", "source", "channel", "reason")
            .agg(F.sum("count").alias("dropped"), F.min("ts_ms").alias("first_ms"), F.max("ts_ms").alias("last_ms"))
            .orderBy(F.desc("dropped")))


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def _plots(rows: list[dict[str, Any]], timeline: list[dict[str, Any]]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    if not rows:
        return out
    labels = [f"{r['subscription']} m{r['mode']}" for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 4))
    w = 0.2
    for i, (key, name) in enumerate((("latency_p50_ms", "p50"), ("latency_p99_ms", "p99"),
                                     ("latency_p999_ms", "p99.9"), ("latency_bound_ms", "bound"))):
        ax.bar([v + (i - 1.5) * w for v in x], [float(r[key] or 0) for r in rows], w, label=name)
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency percentiles against the bound")
    ax.legend()
    out["latency.png"] = _png(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 4))
    ax.bar([v - 0.2 for v in x], [float(r["requested_interval_ms"] or 0) for r in rows], 0.4, label="requested")
    ax.bar([v + 0.2 for v in x], [float(r["delivered_interval_ms"] or 0) for r in rows], 0.4, label="delivered")
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("interval (ms)")
    ax.set_title("Delivered interval against requested")
    ax.legend()
    out["interval.png"] = _png(fig)
    plt.close(fig)

    if timeline:
        fig, ax = plt.subplots(figsize=(9, 4))
        by: dict[str, list[tuple[int, float]]] = {}
        for t in timeline:
            by.setdefault(t["subscription"], []).append((int(t["ts_ms"]), float(t["max_latency_ms"])))
        t0 = min(ts for pts in by.values() for ts, _ in pts)
        for sub, pts in sorted(by.items()):
            pts.sort()
            ax.plot([(ts - t0) / 1000 for ts, _ in pts], [v for _, v in pts], label=sub, linewidth=1)
        ax.set_xlabel("seconds")
        ax.set_ylabel("max latency per sample (ms)")
        ax.set_title("Latency over time")
        ax.legend(fontsize=7)
        out["timeline.png"] = _png(fig)
        plt.close(fig)
    return out


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        bad = r.get("compliant") is False
        style = ' class="bad"' if bad else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def write_report(out: Path, rows: list[dict[str, Any]], drops: list[dict[str, Any]],
                 decisions: list[dict[str, Any]], gaps: list[dict[str, Any]], timeline: list[dict[str, Any]]) -> Path:
    """report.html (and its PNG plots) under ``out``."""
    plots = _plots(rows, timeline)
    for name, data in plots.items():
        (out / name).write_bytes(data)
    imgs = "".join(f'<figure><img alt="{n}" src="data:image/png;base64,{base64.b64encode(d).decode()}"/>'
                   f"<figcaption>{n}</figcaption></figure>" for n, d in plots.items())
    ok = sum(1 for r in rows if r["compliant"])
    cols = ["subscription", "mode", "compliant", "requested_interval_ms", "delivered_interval_ms", "delivery_ratio",
            "latency_bound_ms", "latency_p50_ms", "latency_p99_ms", "latency_p999_ms", "over_bound_fraction",
            "gaps", "duplicates", "violations", "samples"]
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>GridStat QoS compliance</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} tr.bad td{{background:#fdd}}
figure{{display:inline-block;margin:1em}}</style></head><body>
<h1>GridStat QoS compliance</h1>
<p>{ok} of {len(rows)} subscription-modes comply (p99.9 latency within the bound, no gaps, delivered interval
within tolerance of the requested one).</p>
<h2>Per subscription and mode</h2>{_table(rows, cols)}
<h2>Plots</h2>{imgs}
<h2>Drops by reason</h2>{_table(drops, ["role", "source", "channel", "reason", "dropped"])}
<h2>Admission decisions</h2>{_table(decisions, ["decision", "reason", "count"])}
<h2>Telemetry export gaps</h2>{_table(gaps, ["role", "source", "from_ms", "to_ms", "lost"])}
</body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path


def run(spark: SparkSession, bootstrap: str, out: Path, *, interval_tolerance: float = 0.02) -> list[dict[str, Any]]:
    """Build the report under ``out``; returns the compliance rows."""
    out.mkdir(parents=True, exist_ok=True)
    deliveries = tio.read_records(spark, bootstrap, "delivery").cache()
    table = compliance(deliveries, interval_tolerance=interval_tolerance)
    table.write.mode("overwrite").parquet(str(out / "compliance"))
    drops = drops_table(tio.read_records(spark, bootstrap, "drops"))
    drops.write.mode("overwrite").parquet(str(out / "drops"))
    decisions = (tio.read_records(spark, bootstrap, "admission").groupBy("decision", "reason").count()
                 .orderBy("decision", "reason"))
    gaps = tio.read_records(spark, bootstrap, "gap").select("role", "source", "from_ms", "to_ms", "lost")
    timeline = (deliveries.where(F.size("latency_ms") > 0)
                .select("subscription", "ts_ms", F.array_max("latency_ms").alias("max_latency_ms"))
                .orderBy("ts_ms").limit(20_000))
    rows = [r.asDict() for r in spark.read.parquet(str(out / "compliance")).orderBy("subscription", "mode").collect()]
    write_report(out, rows, [r.asDict() for r in drops.collect()], [r.asDict() for r in decisions.collect()],
                 [r.asDict() for r in gaps.collect()], [r.asDict() for r in timeline.collect()])
    deliveries.unpersist()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kafka", required=True, help="Kafka bootstrap servers")
    p.add_argument("--out", required=True, help="output folder (parquet tables and report.html)")
    p.add_argument("--interval-tolerance", type=float, default=0.02,
                   help="delivered interval may exceed the requested one by this fraction")
    args = p.parse_args(argv)
    spark = tio.session("gridstat-qos-compliance")
    rows = run(spark, args.kafka, Path(args.out), interval_tolerance=args.interval_tolerance)
    bad = [r for r in rows if not r["compliant"]]
    print(f"COMPLIANCE subscription_modes={len(rows)} compliant={len(rows) - len(bad)} "
          f"report={Path(args.out) / 'report.html'}")
    for r in bad:
        print(f"  NOT COMPLIANT {r['subscription']} mode={r['mode']} p999={r['latency_p999_ms']} "
              f"bound={r['latency_bound_ms']} gaps={r['gaps']} interval={r['delivered_interval_ms']}"
              f"/{r['requested_interval_ms']}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
