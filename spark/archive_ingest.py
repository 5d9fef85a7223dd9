"""Archive ingestion: ``gridstat.archive.measurements`` into a parquet table, exactly once.

    scripts/spark-submit.sh spark/archive_ingest.py --kafka 127.0.0.1:9092 \
        --out /data/gridstat/measurements --checkpoint /data/gridstat/measurements-ckpt

A Structured Streaming query with Spark's Kafka source and the parquet file sink, partitioned
by day and publisher. Exactly once: the checkpoint records which Kafka offsets each
micro-batch covers before it runs, and the file sink commits a batch's files in its
``_spark_metadata`` log only once; a query stopped or killed mid-stream and restarted on the
same checkpoint re-runs at most the uncommitted batch, whose files readers never see twice.
Read the table with Spark (``spark.read.parquet(out)``), which honours ``_spark_metadata``.
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


def measurements(rows: DataFrame) -> DataFrame:
    """Parsed measurement records with an event time and a day to partition by."""
    m = tio.parse(rows, "measurement")
    return (m.withColumn("event_time", tio.ms_to_ts("event_ts_ms"))
            .withColumn("day", F.to_date("event_time")))


def start(spark: SparkSession, bootstrap: str, out: str, checkpoint: str, *, trigger_ms: int = 1000,
          max_offsets_per_trigger: int | None = None, query_name: str = "gridstat_archive_ingest") -> StreamingQuery:
    rows = tio.kafka_reader(spark, bootstrap, "measurement", stream=True, starting="earliest",
                            max_offsets_per_trigger=max_offsets_per_trigger)
    return (measurements(rows).writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .partitionBy("day", "publisher")
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .queryName(query_name)
            .start())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kafka", required=True)
    p.add_argument("--out", required=True, help="parquet table folder")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder (a restart resumes from it)")
    p.add_argument("--trigger-ms", type=int, default=1000)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--timeout-s", type=float, default=None, help="stop after this long (default: run until killed)")
    p.add_argument("--available-now", action="store_true", help="ingest what is in Kafka now, then stop")
    args = p.parse_args(argv)
    spark = tio.session("gridstat-archive-ingest")
    if args.available_now:
        rows = tio.kafka_reader(spark, args.kafka, "measurement", stream=True, starting="earliest",
                                max_offsets_per_trigger=args.max_offsets_per_trigger)
        query = (measurements(rows).writeStream.format("parquet").option("path", args.out)
                 .option("checkpointLocation", args.checkpoint).partitionBy("day", "publisher")
                 .trigger(availableNow=True).start())
    else:
        query = start(spark, args.kafka, args.out, args.checkpoint, trigger_ms=args.trigger_ms,
                      max_offsets_per_trigger=args.max_offsets_per_trigger)
    print(f"STREAMING query={query.name} id={query.id}", flush=True)
    query.awaitTermination(args.timeout_s)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
