"""``gridstat chaos --kube`` against the package's release (conftest.release): each kube-* scenario sets
up its own clients (chaos-pmu, chaos-ems, variable chaos-pmu/freq: distinct from test_release's flow)
and must hold every invariant. About a minute per scenario at most.

The release runs with the chart's defaults, mTLS and datagram authentication on (docs/kubernetes.md,
"Security"): the scenarios' client pods get certificates of their own from the release's CA, and their
``gridstat`` calls in a broker pod present the broker's certificate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gridstat.chaos import checks, kube, kube_scenarios

from .release import TLS_ARGS, Release, with_client_tls

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


class TlsKubeTarget(kube.KubeTarget):
    """The release, with ``gridstat`` in a broker pod called over mTLS (the broker's own certificate)."""

    def gridstat(self, cloud: str, *args: str) -> Any:
        return super().gridstat(cloud, *args, *TLS_ARGS)


@pytest.mark.parametrize("name", list(kube_scenarios.SCENARIOS))
def test_kube_scenario_holds_its_invariants(release: Release, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = kube.client_pod

    def client_pod(pod: str, namespace: str, args: Sequence[str], **kw: Any) -> dict[str, Any]:
        release.client_certificate(pod, namespace)
        return with_client_tls(plain(pod, namespace, args, **kw), pod)

    monkeypatch.setattr(kube, "client_pod", client_pod)
    env = release.node.env
    target = TlsKubeTarget(kube.Kubectl(release.namespace, kubeconfig=str(release.node.kubeconfig), env=env),
                           release.name)
    outcome = kube_scenarios.run(name, target, 2.0)
    print(checks.table(outcome))
    assert outcome.ok, checks.table(outcome)
