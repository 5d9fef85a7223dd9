#!/usr/bin/env bash
# The whole test suite: installs what it needs, then checks generated code, lint, types and tests.
# Usage: scripts/test.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
export PATH="$root/.venv/bin:$PATH"
echo "== generated gRPC code is fresh"
scripts/gen-protos.sh --check
echo "== ruff"
ruff check services/gridstat tests
echo "== mypy (strict on core and router)"
mypy
echo "== import layers"
lint-imports .importlinter
echo "== pytest"
python -m pytest -q -p no:cacheprovider "$@"
