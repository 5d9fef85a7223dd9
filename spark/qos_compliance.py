"""QoS compliance report: per subscription and mode, what was delivered against what was promised.

    scripts/spark-submit.sh spark/qos_compliance.py --kafka 127.0.0.1:9092 --out /tmp/qos-report

Reads every delivery sample (``gridstat.telemetry.delivery``), drop record, admission decision
and export gap now in Kafka with Spark's Kafka source, and writes under ``--out``:

* ``compliance/`` (parquet): one row per subscription and mode -- its kind (``archive`` when
  ``gridstat archive`` exported the samples, role ``archive``; else ``operational``), delivered
  interval against the requested one, latency p50 / p99 / p99.9 and the share of events over the
  bound, p99.9 and the worst latency as ratios to the bound, gaps, duplicates, violations,
  delivered against expected events, a verdict and the reasons of a breach (``late``, ``gaps``,
  ``under-delivered``);
* ``drops/`` (parquet): drops per role, source, channel and reason;
* ``report.html`` (plots embedded, their PNG files beside it), ``report.png`` (the same page as one
  image) and ``report-rows.json`` (what the page was made from; ``scripts/render-report.py --from``
  renders it again). The page is ``compliance_report.py``'s.

A subscription complies in a mode when its p99.9 latency is within the bound, no expected event
was skipped (gaps), and its mean delivered interval is within ``--interval-tolerance`` of the
requested one. Records are de-duplicated on (exporter, epoch, sequence) first (the exporter
delivers at least once).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compliance_report as report
import telemetry_io as tio


def kind(role: str = "role") -> Column:
    """``archive`` for samples the archive role exported, else ``operational`` (compliance_report.kind_of)."""
    return F.when(F.col(role) == "archive", F.lit("archive")).otherwise(F.lit("operational"))


def compliance(deliveries: DataFrame, *, interval_tolerance: float = 0.02) -> DataFrame:
    """One row per (subscription, mode) from parsed delivery samples."""
    keys = ["subscription", "subscriber", "variable", "mode", "kind"]
    d = deliveries.where(F.col("in_mode") | F.col("in_mode").isNull()).withColumn("kind", kind())
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
    verdict = (out.withColumn("latency_ok", latency_ok).withColumn("interval_ok", interval_ok)
               .withColumn("gaps_ok", gaps_ok)
               .withColumn("compliant", latency_ok & interval_ok & gaps_ok))
    # the reasons as compliance_report.reasons says them, from its table of reasons and verdict columns
    listed = F.filter(F.array(*(F.when(~F.col(ok), F.lit(name)) for name, ok in report.REASONS)),
                      lambda c: c.isNotNull())
    reasons = (F.when(F.col("compliant"), F.array().cast("array<string>"))
               .when(F.coalesce(F.col("delivered"), F.lit(0)) == 0, F.array(F.lit("nothing delivered")))
               .otherwise(listed))
    return (verdict
            .withColumn("latency_ratio", F.col("latency_p999_ms") / F.col("latency_bound_ms"))
            .withColumn("worst_latency_ratio", F.col("latency_max_ms") / F.col("latency_bound_ms"))
            .withColumn("reasons", reasons)
            .orderBy("subscription", "mode"))


def drops_table(drops: DataFrame) -> DataFrame:
    return (drops.groupBy("role", "source", "channel", "reason")
            .agg(F.sum("count").alias("dropped"), F.min("ts_ms").alias("first_ms"), F.max("ts_ms").alias("last_ms"))
            .orderBy(F.desc("dropped")))


#: The report's timeline: at most this many delivery samples, the latest.
TIMELINE_POINTS = 50_000


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
    timeline = (deliveries.where((F.size("latency_ms") > 0) & (F.col("in_mode") | F.col("in_mode").isNull()))
                .select("subscription", "mode", kind().alias("kind"), "ts_ms", "latency_bound_ms", "gaps",
                        F.array_max("latency_ms").alias("max_latency_ms"))
                .orderBy(F.desc("ts_ms")).limit(TIMELINE_POINTS))
    rows = [r.asDict() for r in spark.read.parquet(str(out / "compliance")).orderBy("subscription", "mode").collect()]
    found = {"rows": rows, "drops": [r.asDict() for r in drops.collect()],
             "decisions": [r.asDict() for r in decisions.collect()], "gaps": [r.asDict() for r in gaps.collect()],
             "timeline": [r.asDict() for r in timeline.collect()]}
    (out / "report-rows.json").write_text(json.dumps(found, default=str))
    report.write(out, rows, found["drops"], found["decisions"], found["gaps"], found["timeline"])
    deliveries.unpersist()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kafka", required=True, help="Kafka bootstrap servers")
    p.add_argument("--out", required=True, help="output folder (parquet tables and report.html)")
    p.add_argument("--interval-tolerance", type=float, default=0.02,
                   help="delivered interval may exceed the requested one by this fraction")
    tio.add_kafka_options(p)
    args = p.parse_args(argv)
    tio.use_kafka_options(p, args)
    spark = tio.session("gridstat-qos-compliance")
    rows = run(spark, args.kafka, Path(args.out), interval_tolerance=args.interval_tolerance)
    bad = [r for r in rows if not r["compliant"]]
    print(f"COMPLIANCE subscription_modes={len(rows)} compliant={len(rows) - len(bad)} "
          f"report={Path(args.out) / 'report.html'}")
    for r in bad:
        print(f"  NOT COMPLIANT {r['kind']} {r['subscription']} {report.why(r)}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
