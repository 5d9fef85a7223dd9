#!/usr/bin/env bash
# A Docker engine for the image build and the container tests, started and stopped by the project.
#
#   scripts/docker.sh start    install Debian's docker.io if missing, start dockerd unless one
#                              answers already; prints READY socket=...
#   scripts/docker.sh stop     stop the dockerd that `start` started (and its containerd), nothing else
#   scripts/docker.sh status   exit 0 while the engine answers
#
# The engine changes nothing on the host's network: it runs with --bridge=none --iptables=false
# --ip6tables=false, so there is no docker0 bridge, no NAT rule and no forwarding rule to undo.
# Containers use host networking only (`docker run --network host`, `docker build --network host`),
# which is what the tests need: they talk to 127.0.0.1 and nothing else. The engine's files live
# under ${GRIDSTAT_DOCKER_ROOT:-/var/lib/gridstat-docker}, apart from any other Docker on the host.
set -euo pipefail

state=${GRIDSTAT_DOCKER_STATE:-/run/gridstat-docker}
data=${GRIDSTAT_DOCKER_ROOT:-/var/lib/gridstat-docker}
sock=$state/docker.sock
export DOCKER_HOST=unix://$sock

die() { echo "docker.sh: $*" >&2; exit 1; }

install() {
  command -v dockerd >/dev/null 2>&1 && command -v containerd >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 \
    && return 0
  command -v apt-get >/dev/null 2>&1 || die "dockerd is missing and apt-get is not available"
  echo "docker.sh: installing docker.io, containerd and runc with apt-get" >&2
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
     docker.io containerd runc iptables) >&2 || die "apt-get could not install docker.io"
}

answers() { docker version >/dev/null 2>&1; }

start() {
  install
  mkdir -p "$state" "$data"
  if answers; then
    echo "READY socket=$sock"
    return 0
  fi
  # A stale pid file from an engine that died keeps dockerd from starting.
  rm -f "$state/dockerd.pid" "$state/containerd.pid" "$sock"
  setsid dockerd --host "unix://$sock" --data-root "$data" --exec-root "$state/exec" \
    --pidfile "$state/dockerd.pid" --bridge none --iptables=false --ip6tables=false \
    --storage-driver overlay2 --log-level warn >"$state/dockerd.log" 2>&1 </dev/null &
  echo $! > "$state/dockerd.launcher.pid"
  local i
  for i in $(seq 1 150); do
    answers && { echo "READY socket=$sock"; return 0; }
    kill -0 "$(cat "$state/dockerd.launcher.pid")" 2>/dev/null || break
    sleep 0.2
  done
  tail -20 "$state/dockerd.log" >&2
  die "dockerd did not start (log: $state/dockerd.log)"
}

stop() {
  local pid i
  for f in "$state/dockerd.pid" "$state/dockerd.launcher.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

case ${1:-} in
  start) start;;
  stop) stop;;
  status) answers;;
  env) echo "export DOCKER_HOST=unix://$sock";;
  *) die "usage: $0 start|stop|status|env";;
esac
