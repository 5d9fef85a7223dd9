#!/usr/bin/env bash
# The wire decoder and the router's forwarding path (keyed and unkeyed channels) under atheris for
# RUNS inputs (default 1,000,000: at least 1M in a benchmark run, docs/benchmarks.md). Prints the
# fuzzer's last status line and the total; exits non-zero on any finding (crash input saved in WORK).
# Usage: scripts/fuzz-wire.sh [RUNS] [WORK]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-1000000}
work=${2:-$(mktemp -d)}
py=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$work"
"$py" "$root/tests/fuzz/fuzz_wire.py" --write-seeds "$work/corpus"
cd "$work"
start=$(date +%s)
"$py" "$root/tests/fuzz/fuzz_wire.py" "-runs=$runs" -max_len=4096 -print_final_stats=1 \
  "-artifact_prefix=$work/" "$work/corpus" >"$work/fuzz.log" 2>&1 || { tail -40 "$work/fuzz.log"; exit 1; }
end=$(date +%s)
grep -E "^#[0-9]+.*(DONE|cov)" "$work/fuzz.log" | tail -1
grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added" "$work/fuzz.log" || true
echo "fuzz-wire: $runs inputs in $((end - start)) s, no finding (log $work/fuzz.log)"
