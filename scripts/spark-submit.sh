#!/usr/bin/env bash
# Run a Spark job of spark/ with the .venv's pyspark and Spark's built-in Kafka source.
#   scripts/spark-submit.sh spark/qos_compliance.py --kafka 127.0.0.1:9092 --out /tmp/qos
# Extra spark-submit options go in SPARK_SUBMIT_OPTS_EXTRA (e.g. "--master spark://...").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
job=${1:?usage: spark-submit.sh JOB.py [job args...]}
shift
jars=$("$root/scripts/spark-deps.sh")
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$root/.venv/bin/python}
# shellcheck disable=SC2086
exec "$root/.venv/bin/spark-submit" --master "${SPARK_MASTER:-local[2]}" --jars "$jars" \
  --driver-memory "${SPARK_DRIVER_MEMORY:-1g}" \
  --conf spark.ui.enabled=false --conf spark.sql.shuffle.partitions=4 \
  --conf spark.driver.extraJavaOptions=-Dlog4j2.level=WARN \
  ${SPARK_SUBMIT_OPTS_EXTRA:-} "$job" "$@"
