#!/usr/bin/env bash
# Regenerate the Python gRPC code from protos/ into services/gridstat/v1/.
# Usage: scripts/gen-protos.sh [--check]   (--check fails if the checked-in code is stale)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
export PATH="$(dirname "$py"):$PATH"
out=$root/services/gridstat/v1
target=$out
if [ "${1:-}" = "--check" ]; then
  target=$(mktemp -d)
  trap 'rm -rf "$target"' EXIT
fi
mkdir -p "$target"
tmp=$(mktemp -d)
"$py" -m grpc_tools.protoc -I "$root/protos" \
  --python_out="$tmp" --grpc_python_out="$tmp" --mypy_out="$tmp" \
  "$root"/protos/gridstat/v1/*.proto
# protoc writes gridstat/v1/*; imports inside are "from gridstat.v1 import ..." which is our package path.
cp "$tmp"/gridstat/v1/* "$target"/
rm -rf "$tmp"
[ -f "$target/__init__.py" ] || printf '"""Generated gRPC code (scripts/gen-protos.sh); do not edit."""\n' > "$target/__init__.py"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r -q -x __pycache__ "$out" "$target" >/dev/null; then
    echo "generated gRPC code in services/gridstat/v1 is stale: run scripts/gen-protos.sh" >&2
    diff -r -x __pycache__ "$out" "$target" | head -40 >&2
    exit 1
  fi
  echo "generated gRPC code is up to date"
fi
