"""Shared by the Spark jobs: the session, Kafka reading, and record schemas from the JSON Schemas.

The jobs read the records the roles export (services/gridstat/telemetry, docs/telemetry.md).
Their Spark schemas are *derived* from the same JSON Schema files the exporter's records are
tested against, so the two cannot drift apart. ``(exporter, epoch, sequence)`` identifies a
record (``KEY``); the exporter delivers to Kafka at least once, so the jobs de-duplicate on it
(docs/telemetry.md, "Exactly once").

Records of schema version 2 (``schemas/v2``, made now) and 1 (``schemas/v1``, still in Kafka
after an upgrade) are both read, as version 2 columns: a version 1 record's ``instance`` and
``seq`` become ``exporter`` = ``role/source``, ``epoch`` = minus the first 60 bits of its
``instance`` (hexadecimal; never a version 2 epoch, which is positive) and ``sequence`` = ``seq``.

Run the jobs with scripts/spark-submit.sh, which puts Spark's built-in Kafka source
(spark-sql-kafka-0-10 and its dependencies, resolved from Maven Central by
scripts/spark-deps.sh) on the class path.

A Kafka with TLS or SASL: every job takes ``--kafka-option KEY=VALUE`` (repeated) and
``--kafka-options-file FILE`` (``KEY=VALUE`` lines, for ``kafka.sasl.jaas.config`` and its password),
passed to Spark's Kafka source and sink as they are (``kafka.security.protocol``, ``kafka.ssl.*``,
``kafka.sasl.*``; docs/telemetry.md, "Kafka security", and Spark's Structured Streaming + Kafka
Integration Guide, "Kafka Specific Configurations").
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: The folder of the JSON Schemas, one subfolder per major version (package data of gridstat.telemetry);
#: GRIDSTAT_SCHEMAS overrides.
SCHEMA_ROOT = Path(os.environ.get(
    "GRIDSTAT_SCHEMAS", Path(__file__).resolve().parents[1] / "services" / "gridstat" / "telemetry" / "schemas"))
#: The major version the jobs write and read records as; ``VERSIONS`` are all they read.
VERSION = 2
VERSIONS = (1, 2)
#: What identifies a record (stamped by the exporter).
KEY = ("exporter", "epoch", "sequence")

TOPICS = {
    "counters": "gridstat.telemetry.counters",
    "delivery": "gridstat.telemetry.delivery",
    "drops": "gridstat.telemetry.drops",
    "admission": "gridstat.telemetry.admission",
    "mode_change": "gridstat.telemetry.modes",
    "gap": "gridstat.telemetry.gaps",
    "measurement": "gridstat.archive.measurements",
    "qos_alert": "gridstat.alerts.qos",
    "model_broker": "gridstat.telemetry.model_brokers",
}


def session(app: str, *, master: str | None = None) -> SparkSession:
    """The job's session; spark-submit's --master and --jars (scripts/spark-submit.sh) apply."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _spark_type(spec: dict[str, Any]) -> T.DataType:
    types = spec.get("type")
    if isinstance(types, list):
        types = next((t for t in types if t != "null"), None)
    if types is None and "const" in spec:
        types = "integer" if isinstance(spec["const"], int) else "string"
    if types == "integer":
        return T.LongType()
    if types == "number":
        return T.DoubleType()
    if types == "boolean":
        return T.BooleanType()
    if types == "array":
        return T.ArrayType(_spark_type(spec.get("items", {})), containsNull=True)
    if types == "object":
        return T.StructType([T.StructField(k, _spark_type(v), True) for k, v in spec.get("properties", {}).items()])
    # string, or any JSON value (a measurement's value): kept as its JSON text
    return T.StringType()


def _schema_doc(kind: str, version: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SCHEMA_ROOT / f"v{version}" / f"{kind}.schema.json").read_text())
    return doc


def schema_for(kind: str, version: int = VERSION) -> T.StructType:
    """The Spark schema of a record kind (``counters``, ``delivery``, ...), from its JSON Schema."""
    result = _spark_type(_schema_doc(kind, version))
    assert isinstance(result, T.StructType)
    return result


#: Options of Spark's Kafka source and sink beyond the bootstrap servers (``--kafka-option``), set by
#: :func:`use_kafka_options`: ``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*`` ...
KAFKA_OPTIONS: dict[str, str] = {}
#: Chosen by the jobs themselves, not by --kafka-option.
RESERVED_KAFKA_OPTIONS = ("kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "topic")


def parse_kafka_options(items: Iterable[str]) -> dict[str, str]:
    """``["kafka.security.protocol=SSL", ...]`` -> ``{"kafka.security.protocol": "SSL"}``; the value may hold
    ``=`` (a JAAS line does). ValueError for an item without ``=``, a key not under ``kafka.`` (Spark passes
    only those to the Kafka client) or one the jobs set themselves."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--kafka-option {key or item!r}: give KEY=VALUE")
        if key in RESERVED_KAFKA_OPTIONS:
            raise ValueError(f"--kafka-option {key}: set by the job itself (--kafka)")
        if not key.startswith("kafka."):
            raise ValueError(f"--kafka-option {key}: Kafka client options are kafka.<name> "
                             "(kafka.security.protocol, kafka.ssl.truststore.location, kafka.sasl.jaas.config ...)")
        out[key] = value
    return out


def read_kafka_options_file(path: str) -> list[str]:
    """The ``KEY=VALUE`` lines of ``path`` (blank lines and ``#`` comments skipped)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def add_kafka_options(p: argparse.ArgumentParser) -> None:
    """``--kafka-option KEY=VALUE`` (repeated) and ``--kafka-options-file FILE``, for every job."""
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of Spark's Kafka source and sink, e.g. kafka.security.protocol=SASL_SSL "
                        "(repeat it; docs/telemetry.md, Kafka security)")
    p.add_argument("--kafka-options-file", default=None, metavar="FILE",
                   help="KEY=VALUE lines like --kafka-option: for kafka.sasl.jaas.config, whose password the "
                        "command line would show")


def use_kafka_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Parse the job's ``--kafka-option``/``--kafka-options-file`` into ``KAFKA_OPTIONS`` (a usage error
    through ``p`` if one is wrong); the file's come first, the command line's win."""
    items: list[str] = []
    try:
        if args.kafka_options_file:
            items += read_kafka_options_file(args.kafka_options_file)
        options = parse_kafka_options([*items, *args.kafka_option])
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    KAFKA_OPTIONS.clear()
    KAFKA_OPTIONS.update(options)
    return options


def kafka_reader(spark: SparkSession, bootstrap: str, kind: str, *, stream: bool = False,
                 starting: str = "earliest", max_offsets_per_trigger: int | None = None) -> DataFrame:
    """Kafka rows (key, value, topic, partition, offset, timestamp) of a record kind's topic."""
    reader = spark.readStream if stream else spark.read
    r = (reader.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", TOPICS[kind])
         .option("startingOffsets", starting)
         .option("failOnDataLoss", "false")
         .options(**KAFKA_OPTIONS))
    if not stream:
        r = r.option("endingOffsets", "latest")
    if stream and max_offsets_per_trigger:
        r = r.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return r.load()


def parse(rows: DataFrame, kind: str) -> DataFrame:
    """Parse Kafka rows into typed records of ``kind`` with the columns of schema ``VERSION``.

    Records of every version in ``VERSIONS`` are read (a version 1 record's identity mapped as the
    module docstring says; ``version`` keeps the record's own); other schemas and versions are
    skipped. Adds the Kafka record's ``kafka_ts`` (its timestamp), ``kafka_partition`` and
    ``kafka_offset``.
    """
    current = schema_for(kind)
    names = set(current.fieldNames())
    older = [f for v in VERSIONS if v != VERSION for f in schema_for(kind, v).fields if f.name not in names]
    schema = T.StructType([*current.fields, *{f.name: f for f in older}.values()])
    name = _schema_doc(kind, VERSION)["properties"]["schema"]["const"]
    parsed = rows.select(F.from_json(F.col("value").cast("string"), schema).alias("r"),
                         F.col("timestamp").alias("kafka_ts"), F.col("partition").alias("kafka_partition"),
                         F.col("offset").alias("kafka_offset"))
    r = parsed.where((F.col("r.schema") == name) & F.col("r.version").isin(*VERSIONS))
    v1 = F.col("r.version") == 1
    mapped: dict[str, Column] = {}
    if set(KEY) <= names:
        mapped = {
            "exporter": F.when(v1, F.concat_ws("/", "r.role", "r.source")).otherwise(F.col("r.exporter")),
            "epoch": F.when(v1, -F.conv(F.substring("r.instance", 1, 15), 16, 10).cast("long"))
                      .otherwise(F.col("r.epoch")),
            "sequence": F.when(v1, F.col("r.seq")).otherwise(F.col("r.sequence")),
        }
    return r.select(*(mapped.get(f, F.col(f"r.{f}")).alias(f) for f in current.fieldNames()),
                    "kafka_ts", "kafka_partition", "kafka_offset")


def topics(spark: SparkSession, bootstrap: str, *, timeout_s: float = 30.0) -> set[str]:
    """The topics Kafka has now (through the kafka-clients AdminClient on Spark's class path)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", bootstrap)
    props.put("request.timeout.ms", str(int(timeout_s * 1000)))
    for key, value in KAFKA_OPTIONS.items():  # the Kafka client's own names, without Spark's "kafka."
        props.put(key.removeprefix("kafka."), value)
    admin = jvm.org.apache.kafka.clients.admin.AdminClient.create(props)
    try:
        return set(admin.listTopics().names().get())
    finally:
        admin.close()


def read_records(spark: SparkSession, bootstrap: str, kind: str, *, known: set[str] | None = None) -> DataFrame:
    """Every record of ``kind`` now in Kafka, parsed and de-duplicated on ``KEY`` (exporter, epoch, sequence).

    A topic that does not exist yet (nothing of that kind was ever exported) reads as empty."""
    present = topics(spark, bootstrap) if known is None else known
    if TOPICS[kind] not in present:
        empty = T.StructType([*schema_for(kind).fields, T.StructField("kafka_ts", T.TimestampType()),
                              T.StructField("kafka_partition", T.IntegerType()),
                              T.StructField("kafka_offset", T.LongType())])
        return spark.createDataFrame([], empty)
    return parse(kafka_reader(spark, bootstrap, kind), kind).dropDuplicates(list(KEY))


def ms_to_ts(col: str | Column) -> Column:
    c = F.col(col) if isinstance(col, str) else col
    return F.timestamp_millis(c)
