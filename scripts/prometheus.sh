#!/usr/bin/env bash
# Debian's Prometheus server and promtool, for the live dashboard and alert tests
# (tests/integration/test_prometheus_live.py) and the rule unit tests (deploy/prometheus/tests,
# tests/unit/telemetry/test_rules_promtool.py); docs/telemetry.md, "What is tested of the dashboards
# and alerts". Installed with apt-get when missing (package `prometheus`, which ships both); idempotent,
# and nothing to do once installed. Prints the two binaries' paths as shell assignments:
#
#   scripts/prometheus.sh          install what is missing; print PROMETHEUS=... PROMTOOL=...
#   scripts/prometheus.sh check    exit 0 when both are there, 1 otherwise (nothing installed)
#
# The package's own service (prometheus.service, listening on :9090) is not started by this script:
# policy-rc.d refuses it during the install, and the tests run their own server on 127.0.0.1.
set -euo pipefail
die() { echo "prometheus.sh: $*" >&2; exit 1; }

find_tools() {
  PROMETHEUS=$(command -v prometheus 2>/dev/null || true)
  PROMTOOL=$(command -v promtool 2>/dev/null || true)
  [ -n "$PROMETHEUS" ] && [ -n "$PROMTOOL" ]
}

if find_tools; then
  [ "${1:-}" = check ] && exit 0
  echo "PROMETHEUS=$PROMETHEUS"
  echo "PROMTOOL=$PROMTOOL"
  exit 0
fi
[ "${1:-}" = check ] && exit 1
command -v apt-get >/dev/null 2>&1 || die "apt-get is not available to install prometheus"
[ "$(id -u)" = 0 ] || die "installing prometheus needs root"
echo "prometheus.sh: installing prometheus (server and promtool) with apt-get" >&2
# Do not let the package start its system service: the tests run their own servers.
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
fi
cleanup() { if [ -n "$own_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
  apt-get update -q >&2
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >&2 \
  || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       prometheus >&2; } || die "apt-get could not install prometheus"
find_tools || die "prometheus installed, but prometheus or promtool is not on PATH"
echo "PROMETHEUS=$PROMETHEUS"
echo "PROMTOOL=$PROMTOOL"
