"""QoS-violation alerts, seconds after the violation: a Structured Streaming job.

    scripts/spark-submit.sh spark/qos_alerts.py --kafka 127.0.0.1:9092 --checkpoint /var/lib/gridstat/alerts-ckpt

Reads delivery samples from ``gridstat.telemetry.delivery`` as they arrive (one per
subscription per sampling period, 1 s by default) and writes one ``gridstat.alerts.qos_violation``
record (schema ``qos_alert``) per broken guarantee to ``gridstat.alerts.qos``, keyed by
subscription:

* ``latency`` -- an event of the sample arrived later than the subscription's latency bound
  (observed: the sample's worst latency);
* ``gaps`` -- expected timestamps were skipped;
* ``interval`` -- the mean delivered interval exceeded the requested one by more than
  ``--interval-tolerance``;
* ``violations`` -- the subscriber reported QoS violations (late events) in the sample.

Micro-batches run every ``--trigger-ms`` (default 1000 ms), so an alert reaches Kafka about one
sampling period plus one trigger after the violation. The query is checkpointed: restarted on
the same ``--checkpoint`` it resumes at the first sample not yet processed. The Kafka sink is at
least once; ``alert_id`` (the sample's exporter:epoch:sequence:kind) lets a consumer drop a repeat.
With ``--parquet`` the alerts are also kept in a parquet table (exactly once, a file sink).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

sys.path.insert(0, str(Path(__file__).resolve().parent))
import telemetry_io as tio


def alerts(samples: DataFrame, *, interval_tolerance: float = 0.5) -> DataFrame:
    """Alert rows (the ``qos_alert`` schema's fields) from parsed delivery samples."""
    s = samples.where(F.col("in_mode") & ~F.col("suspended"))
    worst = F.array_max("latency_ms")
    checks = F.array(
        F.when(worst > F.col("latency_bound_ms"), F.struct(
            F.lit("latency").alias("kind"), worst.cast("double").alias("observed"),
            F.col("latency_bound_ms").alias("bound"))),
        F.when(F.col("gaps") > 0, F.struct(
            F.lit("gaps").alias("kind"), F.col("gaps").cast("double").alias("observed"),
            F.lit(0.0).alias("bound"))),
        F.when(F.col("delivered_interval_ms") > F.col("requested_interval_ms") * (1 + interval_tolerance), F.struct(
            F.lit("interval").alias("kind"), F.col("delivered_interval_ms").alias("observed"),
            F.col("requested_interval_ms").cast("double").alias("bound"))),
        F.when(F.col("violations") > 0, F.struct(
            F.lit("violations").alias("kind"), F.col("violations").cast("double").alias("observed"),
            F.lit(0.0).alias("bound"))),
    )
    exploded = s.select("*", F.explode(F.filter(checks, lambda c: c.isNotNull())).alias("a"))
    return exploded.select(
        F.lit("gridstat.alerts.qos_violation").alias("schema"),
        F.lit(tio.VERSION).cast("long").alias("version"),
        (F.unix_micros(F.current_timestamp()) / 1000).cast("long").alias("ts_ms"),
        F.concat_ws(":", "exporter", F.col("epoch").cast("string"), F.col("sequence").cast("string"),
                    "a.kind").alias("alert_id"),
        F.col("a.kind").alias("kind"),
        "subscription", "subscriber", "variable", "mode",
        F.col("a.observed").alias("observed"), F.col("a.bound").alias("bound"),
        F.col("ts_ms").alias("sample_ts_ms"), F.col("exporter").alias("source_exporter"),
        F.col("epoch").alias("source_epoch"), F.col("sequence").alias("source_sequence"),
        F.format_string("%s: %s %.1f against %.1f in mode %d", "subscription", "a.kind", "a.observed", "a.bound",
                        "mode").alias("message"),
    )


def start(spark: SparkSession, bootstrap: str, checkpoint: str, *, trigger_ms: int = 1000,
          starting: str = "latest", interval_tolerance: float = 0.5, parquet: str | None = None,
          out_topic: str = tio.TOPICS["qos_alert"], query_name: str = "gridstat_qos_alerts") -> StreamingQuery:
    """Start the query (and the parquet copy with ``parquet``); returns the Kafka sink's query."""
    rows = tio.kafka_reader(spark, bootstrap, "delivery", stream=True, starting=starting)
    found = alerts(tio.parse(rows, "delivery"), interval_tolerance=interval_tolerance)
    trigger = f"{trigger_ms} milliseconds"
    if parquet:
        (found.writeStream.format("parquet").option("path", parquet)
         .option("checkpointLocation", checkpoint.rstrip("/") + "-parquet")
         .trigger(processingTime=trigger).queryName(query_name + "_parquet").start())
    return (found.select(F.col("subscription").alias("key"), F.to_json(F.struct(*found.columns)).alias("value"))
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .options(**tio.KAFKA_OPTIONS)
            .option("topic", out_topic)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger)
            .queryName(query_name)
            .start())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kafka", required=True)
    p.add_argument("--checkpoint", required=True, help="checkpoint folder (keep it: a restart resumes from it)")
    p.add_argument("--trigger-ms", type=int, default=1000)
    p.add_argument("--starting-offsets", default="latest", help="where a new query starts: latest or earliest")
    p.add_argument("--interval-tolerance", type=float, default=0.5)
    p.add_argument("--parquet", default=None, help="also keep the alerts in this parquet folder")
    p.add_argument("--timeout-s", type=float, default=None, help="stop after this long (default: run until killed)")
    tio.add_kafka_options(p)
    args = p.parse_args(argv)
    tio.use_kafka_options(p, args)
    spark = tio.session("gridstat-qos-alerts")
    query = start(spark, args.kafka, args.checkpoint, trigger_ms=args.trigger_ms, starting=args.starting_offsets,
                  interval_tolerance=args.interval_tolerance, parquet=args.parquet)
    print(f"STREAMING query={query.name} id={query.id}", flush=True)
    query.awaitTermination(args.timeout_s)
    for q in spark.streams.active:
        q.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
