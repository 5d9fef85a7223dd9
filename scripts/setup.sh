#!/usr/bin/env bash
# Install everything the project needs into .venv (idempotent; fast when nothing changed).
# Versions are pinned by services/constraints.txt; pip's cache makes reruns quick.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${GRIDSTAT_PYTHON:-python3}
stamp=.venv/.gridstat-setup
want=$(cat services/pyproject.toml services/constraints.txt operator/pyproject.toml | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "== setup: installing gridstat and its tools into .venv" >&2
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# [spark]: pyspark for spark/ and its tests (PyPI serves a ~450 MB sdist; pip caches the wheel it builds).
# [dev]: the test tools, among them synchrophasor (pypmu, a pre-release, pinned in services/constraints.txt):
# the C37.118 codec's tests compare frames with it (tests/unit/gateways).
.venv/bin/pip install -q -c services/constraints.txt -e "services[dev,spark]"
# The Kubernetes operator (operator/, distribution gridstat-operator: kopf) beside it.
.venv/bin/pip install -q -c services/constraints.txt -e operator
# atheris (coverage-guided fuzzing of the wire parser and the forwarder): the suite runs it, so it must install.
.venv/bin/pip install -q -c services/constraints.txt atheris \
  || { echo "setup: atheris did not install (the fuzz suite needs it: tests/fuzz/test_atheris.py)" >&2; exit 1; }
echo "$want" > "$stamp"
