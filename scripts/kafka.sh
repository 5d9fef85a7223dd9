#!/usr/bin/env bash
# Real Apache Kafka in KRaft mode (one node: broker + controller) on 127.0.0.1, for the tests,
# `gridstat up --kafka` and by hand. No ZooKeeper, no download other than Maven Central.
#
#   scripts/kafka.sh fetch                      resolve the jars (cached), print the libs folder
#   scripts/kafka.sh run   DIR [PORT [CPORT]]   format DIR if new, then exec the broker in the foreground
#   scripts/kafka.sh start DIR [PORT [CPORT]]   the same in the background; prints READY when PORT answers
#   scripts/kafka.sh stop  DIR                  stop the broker started with `start DIR`
#
# The jars come from infra/kafka/pom.xml through `mvn dependency:copy-dependencies` into
# ${GRIDSTAT_CACHE:-~/.cache/gridstat}/kafka-<version>/libs, outside the checkout and keyed by
# version, so a rerun on the same machine resolves nothing. Maven itself is installed with apt
# when missing. PORT defaults to 9092, CPORT (the KRaft controller) to PORT+1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${GRIDSTAT_KAFKA_VERSION:-4.1.1}
cache=${GRIDSTAT_CACHE:-$HOME/.cache/gridstat}/kafka-$version
libs=$cache/libs
heap=${GRIDSTAT_KAFKA_HEAP:--Xmx512m -Xms128m}

die() { echo "kafka.sh: $*" >&2; exit 1; }

need_maven() {
  command -v mvn >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "Maven (mvn) is missing and apt-get is not available"
  echo "kafka.sh: installing Maven with apt-get" >&2
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven) >&2 \
    || die "apt-get could not install maven"
}

fetch() {
  if [ -f "$libs/.complete" ]; then
    echo "$libs"
    return 0
  fi
  need_maven
  command -v java >/dev/null 2>&1 || die "java is missing (Kafka $version needs Java 17+)"
  echo "kafka.sh: resolving Apache Kafka $version from Maven Central into $libs" >&2
  rm -rf "$libs.tmp"
  mkdir -p "$cache"
  mvn -q -B -Dstyle.color=never -f "$root/infra/kafka/pom.xml" -Dkafka.version="$version" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs.tmp" >"$cache/mvn.log" 2>&1 \
    || { tail -30 "$cache/mvn.log" >&2; die "Maven could not resolve org.apache.kafka:kafka_2.13:$version"; }
  ls "$libs.tmp"/kafka_2.13-"$version".jar >/dev/null 2>&1 || die "kafka_2.13-$version.jar was not resolved"
  rm -rf "$libs"
  mv "$libs.tmp" "$libs"
  touch "$libs/.complete"
  echo "$libs"
}

# configure DIR PORT CPORT: write DIR/server.properties and format DIR/data once.
configure() {
  local dir=$1 port=$2 cport=$3
  mkdir -p "$dir/data"
  cat > "$dir/server.properties" <<PROPS
# written by scripts/kafka.sh: one KRaft node, listeners on 127.0.0.1 only
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# one node: a broker restarted after a crash re-registers after this, not the default 9 s
broker.session.timeout.ms=2500
broker.heartbeat.interval.ms=500
auto.create.topics.enable=true
log.retention.hours=24
log.segment.bytes=67108864
PROPS
  if [ ! -f "$dir/data/meta.properties" ]; then
    local id
    id=$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid)
    java -cp "$libs/*" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "formatting $dir/data failed"; }
  fi
}

# java_cmd DIR: the broker's command line, in the array `jcmd`.
java_cmd() {
  # shellcheck disable=SC2206
  jcmd=(java $heap -XX:+UseG1GC -Djava.awt.headless=true
        -Dlog4j2.configurationFile="$root/infra/kafka/log4j2.yaml"
        -cp "$libs/*" kafka.Kafka "$1/server.properties")
}

wait_port() {
  local port=$1 pid=$2 i
  for i in $(seq 1 240); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}

cmd=${1:-}
case "$cmd" in
  fetch)
    fetch
    ;;
  run|start)
    dir=${2:?usage: kafka.sh $cmd DIR [PORT [CONTROLLER_PORT]]}
    port=${3:-9092}
    cport=${4:-$((port + 1))}
    fetch >/dev/null
    dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
    configure "$dir" "$port" "$cport"
    java_cmd "$dir"
    if [ "$cmd" = run ]; then
      exec "${jcmd[@]}"
    fi
    if [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
      die "a broker is already running for $dir (pid $(cat "$dir/kafka.pid"))"
    fi
    nohup "${jcmd[@]}" >"$dir/kafka.log" 2>&1 &
    pid=$!
    echo "$pid" > "$dir/kafka.pid"
    if ! wait_port "$port" "$pid"; then
      tail -20 "$dir/kafka.log" >&2 || true
      kill "$pid" 2>/dev/null || true
      die "Kafka did not answer on 127.0.0.1:$port within 60 s (log: $dir/kafka.log)"
    fi
    echo "READY bootstrap=127.0.0.1:$port pid=$pid dir=$dir"
    ;;
  stop)
    dir=${2:?usage: kafka.sh stop DIR}
    [ -f "$dir/kafka.pid" ] || exit 0
    pid=$(cat "$dir/kafka.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 120); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/kafka.pid"
    ;;
  *)
    sed -n '2,15p' "$0" >&2
    exit 2
    ;;
esac
