"""Model validation: a live run's measured routing-table sizes and message rates against seed 001's model.

    gridstat analyze TOPOLOGY.yaml --live 45 --kafka 127.0.0.1:9092 --predictions /tmp/pred.json
    scripts/spark-submit.sh spark/model_validation.py --kafka 127.0.0.1:9092 --predictions /tmp/pred.json \\
        --out /tmp/model-report

Reads the run's ``model_broker`` records (``gridstat.telemetry.model_brokers``; one per broker
and sampling period, de-duplicated on (exporter, epoch, sequence)) with Spark's Kafka source,
aggregates per broker over the measurement window -- the time-averaged routing-table size and local
subscriptions (each period's exact average weighted by its length), and control and
notification messages sent and received per second -- joins them with the predictions file
``gridstat analyze --live --predictions`` wrote (the model's figures for the time-compressed
workload, per wall second) and writes under ``--out``:

* ``errors/`` (parquet): one row per broker and metric: predicted, measured, absolute and
  relative error, whether it is within tolerance, and the measurement's batch-means standard
  error with ``z = |error| / stderr`` (noise of a finite run, against a real model error);
* ``summary/`` (parquet): per metric: brokers within tolerance, largest and mean relative
  error, and the error of the sum over brokers;
* ``report.md``: both tables and the verdict.

A figure is within tolerance when ``|measured - predicted| <= tolerance * |predicted| +
abs_tolerance`` (defaults 0.10 and 0.5: ten per cent, plus half an entry or half a message per
second, so that figures the model puts at zero, e.g. a leaf's table, are judged sensibly). A
broker with no records fails every metric. The verdict is PASS when every figure is within;
the exit code is 0 for PASS and 1 for FAIL.
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
import telemetry_io as tio

#: The figures compared (gridstat.analysis.live_routing.METRICS): name -> (record field, kind)
METRICS = {
    "table_entries": ("entries_avg", "average"),
    "local_subscriptions": ("local_subscriptions_avg", "average"),
    "control_sent_per_s": ("control_sent", "rate"),
    "control_received_per_s": ("control_received", "rate"),
    "notifications_sent_per_s": ("notifications_sent", "rate"),
    "notifications_received_per_s": ("notifications_received", "rate"),
}


def measured(samples: DataFrame, run: str) -> DataFrame:
    """One row per broker of ``run``: the measurement window's length and every metric."""
    s = samples.where(F.col("run") == run)
    return s.groupBy("broker").agg(F.count(F.lit(1)).alias("samples"), (F.sum("period_ms") / 1000.0).alias("seconds"),
                                   *_values())


def _values() -> list[Column]:
    """Every metric of a group of periods: length-weighted averages, counts per second."""
    total_ms = F.sum("period_ms")
    out = []
    for name, (field, kind) in METRICS.items():
        if kind == "average":
            out.append((F.sum(F.col(field) * F.col("period_ms")) / total_ms).alias(name))
        else:
            out.append((F.sum(field) * 1000.0 / total_ms).alias(name))
    return out


def stderrs(samples: DataFrame, run: str, *, batch_s: float = 5.0) -> DataFrame:
    """Per broker, the standard error of every metric by batch means (``batch_s`` batches of the window).

    Periods are autocorrelated (a subscription outlives several), so the spread of 1 s samples
    would understate the noise; means over batches several lifetimes long are nearly independent.
    The report shows ``z = error / stderr`` beside the tolerance verdict, to tell a model error
    (large z) from a short run's noise (z of 1-3).
    """
    s = samples.where(F.col("run") == run)
    t0 = s.agg(F.min("ts_ms")).first()
    start = int(t0[0]) if t0 is not None and t0[0] is not None else 0
    batched = s.withColumn("batch", F.floor((F.col("ts_ms") - F.lit(start)) / F.lit(batch_s * 1000)))
    per = batched.groupBy("broker", "batch").agg(*_values())
    return per.groupBy("broker").agg(
        F.count(F.lit(1)).alias("batches"),
        *[(F.stddev_samp(m) / F.sqrt(F.count(F.lit(1)))).alias(m) for m in METRICS])


def _long(df: DataFrame, value: str) -> DataFrame:
    pairs = ", ".join(f"'{m}', cast(`{m}` as double)" for m in METRICS)
    return df.select("broker", F.expr(f"stack({len(METRICS)}, {pairs}) as (metric, {value})"))


def errors(meas: DataFrame, predicted: DataFrame, *, tolerance: float, abs_tolerance: float,
           stderr: DataFrame | None = None) -> DataFrame:
    """Per broker and metric: predicted, measured, errors and ``within`` (every predicted broker appears)."""
    j = _long(predicted, "predicted").join(_long(meas, "measured"), ["broker", "metric"], "left")
    if stderr is not None:
        j = (j.join(_long(stderr, "stderr"), ["broker", "metric"], "left")
             .withColumn("z", F.when(F.col("stderr") > 0, F.abs(F.col("measured") - F.col("predicted"))
                                     / F.col("stderr"))))
    err = F.col("measured") - F.col("predicted")
    ok = F.abs(err) <= F.lit(tolerance) * F.abs(F.col("predicted")) + F.lit(abs_tolerance)
    return (j.withColumn("abs_error", err)
            .withColumn("rel_error", F.when(F.col("predicted") != 0, err / F.col("predicted")))
            .withColumn("within", F.coalesce(ok, F.lit(False)))
            .join(meas.select("broker", "samples", "seconds"), ["broker"], "left")
            .orderBy("broker", "metric"))


def summary(err: DataFrame) -> DataFrame:
    """Per metric: how many brokers are within, the largest and mean relative error, the total's error."""
    return (err.groupBy("metric").agg(
        F.count(F.lit(1)).alias("brokers"),
        F.sum(F.col("within").cast("int")).alias("within"),
        F.max(F.abs("rel_error")).alias("max_abs_rel_error"),
        F.avg(F.abs("rel_error")).alias("mean_abs_rel_error"),
        F.max(F.abs("abs_error")).alias("max_abs_error"),
        F.max("z").alias("max_z"),
        F.sum("predicted").alias("total_predicted"),
        F.sum("measured").alias("total_measured"))
        .withColumn("total_rel_error", F.when(F.col("total_predicted") != 0,
                                              (F.col("total_measured") - F.col("total_predicted"))
                                              / F.col("total_predicted")))
        .orderBy("metric"))


def _cell(v: Any, pct: bool = False, signed: bool = True) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**NO**"
    if isinstance(v, float):
        if pct:
            return f"{100 * v:+.1f} %" if signed else f"{100 * v:.1f} %"
        return f"{v:,.2f}"
    return str(v)


def write_report(out: Path, pred: dict[str, Any], rows: list[dict[str, Any]], summ: list[dict[str, Any]], *,
                 tolerance: float, abs_tolerance: float) -> tuple[bool, Path]:
    """``report.md`` under ``out``; returns the verdict and the path."""
    ok = all(r["within"] for r in rows) and bool(rows)
    lines = [f"# Model validation: run {pred['run']}", "",
             f"Topology `{pred['source']}`, {pred['strategy']} routing, {pred['seconds']:g} s measured after "
             f"{pred['warmup_s']:g} s warm-up, time scale {pred['time_scale']:g}. Tolerance: |measured - predicted| "
             f"<= {tolerance:g} x |predicted| + {abs_tolerance:g}.", "",
             f"**Verdict: {'PASS' if ok else 'FAIL'}** ({sum(r['within'] for r in rows)} of {len(rows)} figures "
             "within tolerance)", "", "## Per metric", "",
             "| metric | brokers within | max rel. error | mean rel. error | max abs. error | max z | total model | "
             "total measured | total rel. error |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summ:
        lines.append(f"| {s['metric']} | {s['within']}/{s['brokers']} | {_cell(s['max_abs_rel_error'], True, False)} | "
                     f"{_cell(s['mean_abs_rel_error'], True, False)} | {_cell(s['max_abs_error'])} | "
                     f"{_cell(s['max_z'])} | "
                     f"{_cell(s['total_predicted'])} | {_cell(s['total_measured'])} | "
                     f"{_cell(s['total_rel_error'], True)} |")
    lines += ["", "## Per broker", "", "stderr: batch-means standard error of the measurement (noise of a finite run); "
              "z = |error| / stderr.", "",
              "| broker | metric | model | measured | error | rel. error | stderr | z | within |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['broker']} | {r['metric']} | {_cell(r['predicted'])} | {_cell(r['measured'])} | "
                     f"{_cell(r['abs_error'])} | {_cell(r['rel_error'], True)} | {_cell(r.get('stderr'))} | "
                     f"{_cell(r.get('z'))} | {_cell(r['within'])} |")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return ok, path


def run(spark: SparkSession, bootstrap: str, pred: dict[str, Any], out: Path, *, tolerance: float = 0.10,
        abs_tolerance: float = 0.5, batch_s: float = 5.0) -> tuple[bool, list[dict[str, Any]], list[dict[str, Any]]]:
    """Build the report under ``out`` from ``pred`` (a predictions file's content); (verdict, rows, summary)."""
    out.mkdir(parents=True, exist_ok=True)
    samples = tio.read_records(spark, bootstrap, "model_broker").where(F.col("strategy") == pred["strategy"]).cache()
    meas = measured(samples, pred["run"])
    predicted = spark.createDataFrame([(str(b["broker"]), *(float(b[m]) for m in METRICS)) for b in pred["brokers"]],
                                      ["broker", *METRICS])
    err = errors(meas, predicted, tolerance=tolerance, abs_tolerance=abs_tolerance,
                 stderr=stderrs(samples, pred["run"], batch_s=batch_s))
    err.write.mode("overwrite").parquet(str(out / "errors"))
    rows_df = spark.read.parquet(str(out / "errors"))
    summary(rows_df).write.mode("overwrite").parquet(str(out / "summary"))
    rows = [r.asDict() for r in rows_df.orderBy("broker", "metric").collect()]
    summ = [r.asDict() for r in spark.read.parquet(str(out / "summary")).orderBy("metric").collect()]
    ok, _ = write_report(out, pred, rows, summ, tolerance=tolerance, abs_tolerance=abs_tolerance)
    return ok, rows, summ


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kafka", required=True, help="Kafka bootstrap servers")
    p.add_argument("--predictions", required=True, help="the JSON file of gridstat analyze --live --predictions")
    p.add_argument("--out", required=True, help="output folder (parquet tables and report.md)")
    p.add_argument("--tolerance", type=float, default=0.10, help="relative tolerance (default 0.10)")
    p.add_argument("--abs-tolerance", type=float, default=0.5, help="absolute tolerance added (default 0.5)")
    p.add_argument("--batch-seconds", type=float, default=5.0,
                   help="batch length of the batch-means standard errors (default 5)")
    tio.add_kafka_options(p)
    args = p.parse_args(argv)
    tio.use_kafka_options(p, args)
    pred = json.loads(Path(args.predictions).read_text())
    spark = tio.session("gridstat-model-validation")
    ok, rows, summ = run(spark, args.kafka, pred, Path(args.out), tolerance=args.tolerance,
                         abs_tolerance=args.abs_tolerance, batch_s=args.batch_seconds)
    print(f"MODEL_VALIDATION run={pred['run']} strategy={pred['strategy']} figures={len(rows)} "
          f"within={sum(r['within'] for r in rows)} verdict={'PASS' if ok else 'FAIL'} "
          f"report={Path(args.out) / 'report.md'}")
    for s in summ:
        print(f"  {s['metric']}: within {s['within']}/{s['brokers']} max_rel_error={s['max_abs_rel_error']} "
              f"max_z={s['max_z']} total_rel_error={s['total_rel_error']}")
    for r in rows:
        if not r["within"]:
            print(f"  OUT OF TOLERANCE {r['broker']} {r['metric']} predicted={r['predicted']:.3f} "
                  f"measured={r['measured']} z={r['z']}")
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
