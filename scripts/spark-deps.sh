#!/usr/bin/env bash
# Spark's built-in Kafka source (spark-sql-kafka-0-10_2.13) for the pyspark in .venv, resolved from
# Maven Central with infra/spark/pom.xml into ${GRIDSTAT_CACHE:-~/.cache/gridstat}/spark-kafka-<version>/
# (outside the checkout, keyed by the Spark version), less the jars pyspark already ships.
# Prints the comma-separated jar list that spark.jars / spark-submit --jars take.
#
#   scripts/spark-deps.sh            resolve (cached) and print the jars
#   scripts/spark-deps.sh --dir      print the folder instead
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${GRIDSTAT_VENV_PYTHON:-$root/.venv/bin/python}
die() { echo "spark-deps.sh: $*" >&2; exit 1; }

read -r version jars_dir < <("$python" -c 'import os, pyspark; print(pyspark.__version__, os.path.join(os.path.dirname(pyspark.__file__), "jars"))') \
  || die "pyspark is not installed in $python (scripts/setup.sh installs it)"
dest=${GRIDSTAT_CACHE:-$HOME/.cache/gridstat}/spark-kafka-$version

if [ ! -f "$dest/.complete" ]; then
  if ! command -v mvn >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "Maven (mvn) is missing and apt-get is not available"
    echo "spark-deps.sh: installing Maven with apt-get" >&2
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven) >&2 \
      || die "apt-get could not install maven"
  fi
  echo "spark-deps.sh: resolving spark-sql-kafka-0-10_2.13:$version from Maven Central into $dest" >&2
  rm -rf "$dest.tmp"
  mkdir -p "$(dirname "$dest")"
  mvn -q -B -Dstyle.color=never -f "$root/infra/spark/pom.xml" -Dspark.version="$version" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dest.tmp" >"$dest.log" 2>&1 \
    || { tail -30 "$dest.log" >&2; die "Maven could not resolve org.apache.spark:spark-sql-kafka-0-10_2.13:$version"; }
  # Keep only what pyspark lacks: a second scala-library, slf4j or hadoop-client on the class
  # path would shadow Spark's own versions.
  for jar in "$dest.tmp"/*.jar; do
    artifact=$(basename "$jar" | sed -E 's/-[0-9][0-9A-Za-z.+-]*\.jar$//')
    if compgen -G "$jars_dir/$artifact-[0-9]*.jar" >/dev/null; then
      rm -f "$jar"
    fi
  done
  ls "$dest.tmp"/spark-sql-kafka-0-10_2.13-"$version".jar >/dev/null 2>&1 \
    || die "spark-sql-kafka-0-10_2.13-$version.jar was not resolved"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
  touch "$dest/.complete"
fi

if [ "${1:-}" = "--dir" ]; then
  echo "$dest"
else
  ls "$dest"/*.jar | paste -sd, -
fi
