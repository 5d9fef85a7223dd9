"""``promtool test rules`` over deploy/prometheus/tests/*.yaml: every alert of
deploy/prometheus/gridstat-rules.yaml fires when its condition holds long enough, and not otherwise
(docs/telemetry.md, "What is tested of the dashboards and alerts").

The rule file is a ``PrometheusRule``; its ``spec`` is the plain rule file promtool reads, written to a
temporary directory as ``gridstat-rules.spec.yaml`` beside copies of the test files. promtool is
Debian's (``scripts/prometheus.sh``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "prometheus" / "gridstat-rules.yaml"
TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yaml"))
SPEC_NAME = "gridstat-rules.spec.yaml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed: run scripts/prometheus.sh (Debian's prometheus package)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["spec"]["groups"] for r in g["rules"]]


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        doc = load(path)
        assert doc["rule_files"] == [SPEC_NAME], f"{path.name}: rule_files must be [{SPEC_NAME}]"
        for group in doc["tests"]:
            for case in group.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r["alert"] for r in alerts()}
    assert names, "no alerts in the rule file"
    assert not names - fired, f"alerts no test expects to fire: {sorted(names - fired)}"
    assert not names - quiet, f"alerts no test expects to stay quiet: {sorted(names - quiet)}"
    assert not (fired | quiet) - names, f"tests of alerts that do not exist: {sorted((fired | quiet) - names)}"


def test_the_rule_file_is_valid_for_promtool(tmp_path: Path) -> None:
    tool = promtool()
    spec = tmp_path / SPEC_NAME
    spec.write_text(yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"]))
    proc = subprocess.run([tool, "check", "rules", str(spec)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout, proc.stdout


@pytest.mark.parametrize("path", TESTS, ids=[p.stem for p in TESTS])
def test_promtool_unit_tests_of_the_alerts(path: Path, tmp_path: Path) -> None:
    tool = promtool()
    (tmp_path / SPEC_NAME).write_text(yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"]))
    shutil.copy(path, tmp_path / path.name)
    proc = subprocess.run([tool, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{path.name}:\n{proc.stdout}{proc.stderr}"
    assert "SUCCESS" in proc.stdout, proc.stdout
