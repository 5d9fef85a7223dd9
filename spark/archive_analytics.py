"""Archive analytics example: statistics per variable and frequency deviation per region.

    scripts/spark-submit.sh spark/archive_analytics.py --table /data/gridstat/measurements \
        --regions regions.json --nominal-hz 60 --out /tmp/archive-stats

Over the archived PMU measurements (the parquet table ``archive_ingest.py`` writes, or
``--kafka`` to read the topic directly):

* ``variables/`` -- per variable: samples, first and last time, mean, min, max, standard
  deviation, p50 / p99 of the value, mean and p99 delivery latency;
* ``frequency/`` -- per region: for the frequency variables (name ending in ``freq`` or
  ``frequency``, in Hz), the mean and maximum absolute deviation from ``--nominal-hz``, its p99,
  and the share of samples outside +/- ``--band-hz`` (0.05 Hz by default), i.e. outside the
  normal operating band.

``--regions`` is a JSON object mapping a publisher (a PMU) to its region, e.g.
``{"pmu1": "west", "pmu2": "east"}``; unmapped publishers fall in region ``unmapped``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import telemetry_io as tio


def variable_stats(m: DataFrame) -> DataFrame:
    return (m.where(F.col("value_num").isNotNull()).groupBy("variable", "publisher").agg(
        F.count(F.lit(1)).alias("samples"),
        F.min("event_ts_ms").alias("first_ts_ms"), F.max("event_ts_ms").alias("last_ts_ms"),
        F.avg("value_num").alias("mean"), F.min("value_num").alias("min"), F.max("value_num").alias("max"),
        F.stddev_samp("value_num").alias("stddev"),
        F.percentile_approx("value_num", [0.5, 0.99], 10_000).alias("q"),
        F.avg("latency_ms").alias("latency_mean_ms"),
        F.percentile_approx("latency_ms", 0.99, 10_000).alias("latency_p99_ms"))
        .select("*", F.col("q")[0].alias("p50"), F.col("q")[1].alias("p99")).drop("q")
        .orderBy("variable"))


def frequency_by_region(spark: SparkSession, m: DataFrame, regions: dict[str, str], *, nominal_hz: float,
                        band_hz: float) -> DataFrame:
    mapping = spark.createDataFrame(list(regions.items()) or [("", "")], "publisher string, region string")
    freq = (m.where(F.col("variable").rlike(r"/(freq|frequency)$") & F.col("value_num").isNotNull())
            .join(F.broadcast(mapping), "publisher", "left")
            .withColumn("region", F.coalesce("region", F.lit("unmapped")))
            .withColumn("deviation_hz", F.abs(F.col("value_num") - F.lit(nominal_hz))))
    return (freq.groupBy("region").agg(
        F.countDistinct("variable").alias("variables"),
        F.count(F.lit(1)).alias("samples"),
        F.avg("value_num").alias("mean_hz"),
        F.avg("deviation_hz").alias("mean_abs_deviation_hz"),
        F.max("deviation_hz").alias("max_abs_deviation_hz"),
        F.percentile_approx("deviation_hz", 0.99, 10_000).alias("p99_abs_deviation_hz"),
        F.avg((F.col("deviation_hz") > band_hz).cast("double")).alias("outside_band_fraction"))
        .orderBy("region"))


def load(spark: SparkSession, *, table: str | None, kafka: str | None) -> DataFrame:
    if table:
        return spark.read.parquet(table)
    if kafka:
        return tio.read_records(spark, kafka, "measurement")
    raise SystemExit("give --table or --kafka")


def run(spark: SparkSession, m: DataFrame, out: Path, regions: dict[str, str], *, nominal_hz: float = 60.0,
        band_hz: float = 0.05) -> tuple[DataFrame, DataFrame]:
    # The archive delivers at least once per (variable, timestamp); count each instant once.
    m = m.dropDuplicates(["variable", "event_ts_ms"]).cache()
    stats = variable_stats(m)
    freq = frequency_by_region(spark, m, regions, nominal_hz=nominal_hz, band_hz=band_hz)
    stats.write.mode("overwrite").parquet(str(out / "variables"))
    freq.write.mode("overwrite").parquet(str(out / "frequency"))
    return spark.read.parquet(str(out / "variables")), spark.read.parquet(str(out / "frequency"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", default=None, help="parquet table written by archive_ingest.py")
    p.add_argument("--kafka", default=None, help="or read gridstat.archive.measurements from this Kafka")
    p.add_argument("--regions", default=None, help="JSON file: publisher -> region")
    p.add_argument("--nominal-hz", type=float, default=60.0)
    p.add_argument("--band-hz", type=float, default=0.05)
    p.add_argument("--out", required=True)
    tio.add_kafka_options(p)
    args = p.parse_args(argv)
    tio.use_kafka_options(p, args)
    regions = json.loads(Path(args.regions).read_text()) if args.regions else {}
    spark = tio.session("gridstat-archive-analytics")
    stats, freq = run(spark, load(spark, table=args.table, kafka=args.kafka), Path(args.out), regions,
                      nominal_hz=args.nominal_hz, band_hz=args.band_hz)
    stats.show(50, truncate=False)
    freq.show(50, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
