"""Chaos against the operator (docs/chaos.md): ``operator-kill`` on the session's real kube-apiserver, and
the clear error ``gridstat chaos run operator-kill`` gives when the Kubernetes tools are missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridstat.chaos import checks, kube_operator
from gridstat.cli.main import main

from .kube import Cluster

pytestmark = pytest.mark.integration

EXPECTED = [
    "operator killed (kill -9) during churn: after the restart every resource settles",
    "operator killed (kill -9): deleted resources gone, their broker subscriptions and routes removed",
    "operator killed (kill -9): nothing half-installed",
    "operator stopped (SIGSTOP) during churn: after SIGCONT every resource settles",
    "operator stopped (SIGSTOP): deleted resources gone, their broker subscriptions and routes removed",
    "operator stopped (SIGSTOP): nothing half-installed",
    "admitted stream never stops (kill and stop of the operator)",
    "broker holds exactly what the resources ask",
    "nothing half-installed",
]


@pytest.mark.timeout(240)
def test_operator_killed_and_stopped_during_churn_converges_and_streams_never_stop(cluster: Cluster) -> None:
    outcome = kube_operator.operator_kill(1.0, kube_operator.Kube(cluster.kubeconfig, cluster.env))
    text = checks.table(outcome)
    print(text)
    assert [i for i in EXPECTED if i not in {c.invariant for c in outcome.checks}] == [], text
    assert outcome.ok, text
    # the scenario cleans up after itself: its namespace holds no resource with a finalizer
    assert "chaos-" not in cluster.kubectl("get", "gsub,gmode", "-A", "-o", "name").stdout


def test_missing_kubernetes_tools_are_named_with_the_script_that_builds_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def no_tools(root: Path) -> dict[str, str]:
        return {"GRIDSTAT_K8S_BIN": str(tmp_path), "PATH": str(tmp_path)}

    monkeypatch.setattr(kube_operator, "tool_env", no_tools)
    assert main(["chaos", "run", "operator-kill", "--seconds", "1"]) == 2
    err = capsys.readouterr().err
    for name in ("kube-apiserver", "kube-controller-manager", "etcd", "kubectl", "scripts/k8s-tools.sh"):
        assert name in err, err
