#!/usr/bin/env bash
# Install what is needed, then run the embedded demo utility on 127.0.0.1 (Ctrl-C stops it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
exec "$root/.venv/bin/gridstat" up "$@"
