"""Fixtures of the integration suite that start real infrastructure once per session.

* ``kafka`` -- a real Apache Kafka broker (KRaft) on 127.0.0.1 (``kafkaprocs``);
* ``spark`` -- one local SparkSession with Spark's Kafka source on the class path, shared by
  every Spark test (a session takes 10-20 s to start and ~0.6 GiB).

Both start only when a test asks for them.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .kafkaprocs import ROOT, KafkaProc, start_kafka


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaProc]:
    k = start_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="session")
def spark_jars() -> str:
    return subprocess.run([str(ROOT / "scripts" / "spark-deps.sh")], check=True, capture_output=True,
                          text=True, timeout=600).stdout.strip()


@pytest.fixture(scope="session")
def spark(spark_jars: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = (SparkSession.builder.master("local[2]").appName("gridstat-tests")
               .config("spark.jars", spark_jars)
               .config("spark.driver.memory", "1g")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.warehouse.dir", str(warehouse))
               .config("spark.sql.streaming.minBatchesToRetain", "10"))
    # pyspark forks its JVM launcher with a preexec_fn; in a process that already runs gRPC's threads the
    # forked child can die before exec (seen once: JAVA_GATEWAY_EXITED, no output). Starting the JVM is
    # retried, bounded; a JVM that really cannot start still fails here, with pyspark's error.
    for attempt in range(3):
        try:
            session = builder.getOrCreate()
            break
        except Exception as exc:  # pyspark's PySparkRuntimeError
            if "JAVA_GATEWAY_EXITED" not in str(exc) or attempt == 2:
                raise
            time.sleep(1.0)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_jobs() -> Path:
    """The folder of the Spark jobs, importable as modules (``import qos_alerts``)."""
    import sys

    jobs = ROOT / "spark"
    if str(jobs) not in sys.path:
        sys.path.insert(0, str(jobs))
    return jobs
