#!/usr/bin/env bash
# The whole test suite: installs what it needs, then checks generated code, lint, types and tests.
# Usage: scripts/test.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
# ip, tc, nft, iptables for the kernel-level chaos scenarios (tests/chaos/test_netns.py); apt-get when missing.
"$root/scripts/netns-tools.sh"
# Debian's prometheus and promtool for the live dashboard/alert tests and the rule unit tests; apt-get when missing.
"$root/scripts/prometheus.sh" >/dev/null
export PATH="$root/.venv/bin:$PATH"
echo "== generated gRPC code is fresh"
scripts/gen-protos.sh --check
echo "== ruff"
ruff check services/gridstat tests spark operator
echo "== mypy (strict on the runtime, analysis and granularity; the tools without strict; the operator strict)"
mypy
mypy --strict operator/gridstat_operator
echo "== import layers"
lint-imports .importlinter
lint-imports operator/.importlinter
echo "== CRDs in charts/gridstat/crds are generated from operator/crds"
python -m gridstat_operator.crdgen --check
echo "== Apache Kafka and Spark's Kafka source from Maven Central (cached in ~/.cache/gridstat)"
scripts/kafka.sh fetch >/dev/null
scripts/spark-deps.sh >/dev/null
echo "== Kubernetes tools (kube-apiserver, kube-controller-manager, etcd, helm; cached in ~/.cache/gridstat)"
eval "$(scripts/k8s-tools.sh all)"
echo "== the node's tools (kubelet, kube-scheduler, kube-proxy, CoreDNS, pause; containerd, runc, CNI plugins from Debian)"
scripts/cluster.sh tools
echo "== helm lint"
helm lint --strict charts/gridstat 2>&1 | grep -v "found symbolic link"
echo "== the gridstat image (scripts/build-image.sh; the engine is scripts/docker.sh, stopped at exit under CI)"
if [ -n "${CI:-}" ]; then trap 'scripts/docker.sh stop >/dev/null 2>&1 || true' EXIT; fi
scripts/build-image.sh >/dev/null
echo "== pytest"
# --durations: the slowest tests at the end of the output, to keep the run within its time budget.
python -m pytest -q -p no:cacheprovider --durations=30 "$@"
