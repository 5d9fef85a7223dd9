"""Archive ingestion: ``gridstat.archive.measurements`` into a parquet table, exactly once.

    scripts/spark-submit.sh spark/archive_ingest.py --kafka 127.0.0.1:9092 \
        --out /data/gridstat/measurements --checkpoint /data/gridstat/measurements-ckpt

A Structured Streaming query with Spark's Kafka source and the parquet file sink, partitioned
by day and publisher. Each record reaches the table once (docs/telemetry.md, "Exactly once"):

* *Copies of a record in Kafka* (the exporter is at least once: a batch resent by a new producer
  session after a failure may have been written already) are dropped by their key
  ``(exporter, epoch, sequence)``: ``dropDuplicatesWithinWatermark`` with a watermark on the
  Kafka timestamp, ``--dedup-horizon`` (10 minutes) behind the newest seen. Copies that reach
  Kafka within the horizon of each other are one row; the keys seen are state in the checkpoint,
  so a copy read after a restart of this job still finds its original.
* *A restart of this job*: the checkpoint records which Kafka offsets each micro-batch covers
  before it runs, and the file sink commits a batch's files in its ``_spark_metadata`` log only
  once; a query stopped or killed mid-stream and restarted on the same checkpoint re-runs at most
  the uncommitted batch -- the same offsets, from the de-duplication state the batch before it
  left -- and readers never see its files twice.

The horizon is on Kafka timestamps (the producer's clock when it sent the batch), not on the
records' own ``ts_ms``: a record held in an exporter's buffer through an outage is sent late but
gets a fresh timestamp, so it is not dropped as late data. Only a record whose Kafka timestamp is
more than the horizon behind the newest already read is dropped as late (a producer clock that
far off). The state has ``spark.sql.shuffle.partitions`` partitions (4 under
scripts/spark-submit.sh), fixed by the checkpoint's first run. Read the table with Spark
(``spark.read.parquet(out)``), which honours ``_spark_metadata``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

sys.path.insert(0, str(Path(__file__).resolve().parent))
import telemetry_io as tio

#: How far apart (Kafka timestamps) two copies of a record may reach Kafka and still be one row.
DEFAULT_DEDUP_HORIZON = "10 minutes"


def measurements(rows: DataFrame) -> DataFrame:
    """Parsed measurement records with an event time and a day to partition by."""
    m = tio.parse(rows, "measurement")
    return (m.withColumn("event_time", tio.ms_to_ts("event_ts_ms"))
            .withColumn("day", F.to_date("event_time")))


def deduplicated(m: DataFrame, horizon: str = DEFAULT_DEDUP_HORIZON) -> DataFrame:
    """One row per record key (``tio.KEY``) among copies whose Kafka timestamps are within ``horizon``."""
    return m.withWatermark("kafka_ts", horizon).dropDuplicatesWithinWatermark(list(tio.KEY))


def _writer(spark: SparkSession, bootstrap: str, out: str, checkpoint: str, *, dedup_horizon: str | None,
            max_offsets_per_trigger: int | None) -> DataStreamWriter:
    rows = tio.kafka_reader(spark, bootstrap, "measurement", stream=True, starting="earliest",
                            max_offsets_per_trigger=max_offsets_per_trigger)
    m = measurements(rows)
    if dedup_horizon is not None:  # None: every copy in Kafka becomes a row (the tests' control)
        m = deduplicated(m, dedup_horizon)
    return (m.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .partitionBy("day", "publisher"))


def start(spark: SparkSession, bootstrap: str, out: str, checkpoint: str, *, trigger_ms: int = 1000,
          max_offsets_per_trigger: int | None = None, query_name: str = "gridstat_archive_ingest",
          dedup_horizon: str | None = DEFAULT_DEDUP_HORIZON) -> StreamingQuery:
    """Start the query; ``dedup_horizon=None`` writes every copy in Kafka (not exactly once)."""
    return (_writer(spark, bootstrap, out, checkpoint, dedup_horizon=dedup_horizon,
                    max_offsets_per_trigger=max_offsets_per_trigger)
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
    p.add_argument("--dedup-horizon", default=DEFAULT_DEDUP_HORIZON,
                   help="copies of a record whose Kafka timestamps are this close are one row (a Spark interval)")
    p.add_argument("--timeout-s", type=float, default=None, help="stop after this long (default: run until killed)")
    p.add_argument("--available-now", action="store_true", help="ingest what is in Kafka now, then stop")
    tio.add_kafka_options(p)
    args = p.parse_args(argv)
    tio.use_kafka_options(p, args)
    spark = tio.session("gridstat-archive-ingest")
    if args.available_now:
        query = (_writer(spark, args.kafka, args.out, args.checkpoint, dedup_horizon=args.dedup_horizon,
                         max_offsets_per_trigger=args.max_offsets_per_trigger)
                 .trigger(availableNow=True).start())
    else:
        query = start(spark, args.kafka, args.out, args.checkpoint, trigger_ms=args.trigger_ms,
                      max_offsets_per_trigger=args.max_offsets_per_trigger, dedup_horizon=args.dedup_horizon)
    print(f"STREAMING query={query.name} id={query.id}", flush=True)
    query.awaitTermination(args.timeout_s)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
