"""``gridstat chaos --kube`` against the package's release (conftest.release): each kube-* scenario sets
up its own clients (chaos-pmu, chaos-ems, variable chaos-pmu/freq: distinct from test_release's flow)
and must hold every invariant. About a minute per scenario at most.

The release runs with the chart's defaults, mTLS and datagram authentication on (docs/kubernetes.md,
"Security"): ``chaos.kube`` gives the scenarios' client pods certificates of their own from the release's
CA, and its ``gridstat`` calls in a broker pod present the broker's certificate, as a user's
``gridstat chaos run --kube`` does."""

from __future__ import annotations

import pytest

from gridstat.chaos import checks, kube, kube_scenarios

from .release import Release

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.mark.parametrize("name", list(kube_scenarios.SCENARIOS))
def test_kube_scenario_holds_its_invariants(release: Release, name: str) -> None:
    env = release.node.env
    target = kube.KubeTarget(kube.Kubectl(release.namespace, kubeconfig=str(release.node.kubeconfig), env=env),
                             release.name)
    outcome = kube_scenarios.run(name, target, 2.0)
    print(checks.table(outcome))
    assert outcome.ok, checks.table(outcome)
