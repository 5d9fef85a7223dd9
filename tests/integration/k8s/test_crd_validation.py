"""Invalid resources are refused by the API server itself, with messages that name the field
(the CRDs' OpenAPI schemas and CEL rules; docs/kubernetes.md). No operator is involved."""

from __future__ import annotations

from typing import Any

import pytest

from .kube import Cluster
from .manifests import API, subscription

pytestmark = pytest.mark.integration


def refused(cluster: Cluster, manifest: dict[str, Any]) -> str:
    proc = cluster.apply(manifest, check=False)
    assert proc.returncode != 0, f"accepted: {manifest}"
    return proc.stderr


@pytest.mark.parametrize(("change", "message"), [
    ({"qos": {"intervalMs": "fast", "latencyMs": 20}}, 'spec.qos.intervalMs: Invalid value: "string"'),
    ({"qos": {"intervalMs": 20, "latencyMs": 0}}, "spec.qos.latencyMs in body should be greater than or equal to 1"),
    ({"qos": {"intervalMs": 20, "latencyMs": 20, "redundancy": 9}},
     "spec.qos.redundancy in body should be less than or equal to 8"),
    ({"qos": {"intervalMs": 20, "latencyMs": 20, "priority": 7}},
     "spec.qos.priority in body should be less than or equal to 6"),
    ({"variables": ["pmu1freq"]}, "each variable must be PUBLISHER/VARIABLE"),
    ({"variables": []}, "spec.variables in body should have at least 1 items"),
    ({"modes": [{"mode": "storm"}, {"mode": "storm"}]}, "spec.modes[1]: Duplicate value"),
    ({"modes": [{"mode": "Storm!"}]}, "spec.modes[0].mode in body should match"),
    ({"type": "double"}, 'spec.type: Unsupported value: "double"'),
    ({"qos": {"intervalMs": 20, "latencyMs": 20, "extrapolation": {"method": "average", "window": 0}}},
     "spec.qos.extrapolation.window in body should be greater than or equal to 1"),
])
def test_an_invalid_subscription_is_refused_with_a_clear_message(
        cluster: Cluster, change: dict[str, Any], message: str) -> None:
    manifest = subscription("bad", "default")
    manifest["spec"].update(change)
    assert message in refused(cluster, manifest)


def test_a_subscription_without_qos_or_subscriber_is_refused(cluster: Cluster) -> None:
    manifest = subscription("bad", "default")
    del manifest["spec"]["qos"], manifest["spec"]["subscriber"]
    err = refused(cluster, manifest)
    assert "spec.qos: Required value" in err and "spec.subscriber: Required value" in err


def test_invalid_modes_and_active_modes_are_refused(cluster: Cluster) -> None:
    mode = {"apiVersion": API, "kind": "Mode", "metadata": {"name": "storm", "namespace": "default"},
            "spec": {"id": 16}}
    assert "spec.id in body should be less than or equal to 15" in refused(cluster, mode)
    normal = {**mode, "metadata": {"name": "normal", "namespace": "default"}, "spec": {"id": 3}}
    assert "the mode named normal is mode 0" in refused(cluster, normal)
    mode["spec"] = {"id": 3}
    cluster.apply(mode)
    try:
        mode["spec"] = {"id": 4}
        assert "spec.id is immutable" in refused(cluster, mode)
    finally:
        cluster.kubectl("delete", "mode", "storm", "-n", "default", "--wait=false")
    active = {"apiVersion": API, "kind": "ActiveMode", "metadata": {"name": "x", "namespace": "default"},
              "spec": {}}
    assert "spec.mode: Required value" in refused(cluster, active)


def test_an_invalid_condensation_function_is_refused(cluster: Cluster) -> None:
    cf = {"apiVersion": API, "kind": "CondensationFunction", "metadata": {"name": "cf", "namespace": "default"},
          "spec": {"output": {"variable": "avg"}, "calculator": "average",
                   "inputs": [{"variable": "pmu1/freq", "latencyMs": 10}],
                   "trigger": {"kind": "events", "count": 3}, "inputFilter": {"low": 2, "high": 1}}}
    err = refused(cluster, cf)
    assert "low must not exceed high" in err
    assert "spec.trigger.count cannot wait for more inputs than spec.inputs has" in err


def test_kubectl_lists_every_kind_in_the_gridstat_category(cluster: Cluster) -> None:
    out = cluster.kubectl("api-resources", "--categories=gridstat", "-o", "name").stdout.split()
    assert sorted(out) == ["activemodes.gridstat.io", "condensationfunctions.gridstat.io", "modes.gridstat.io",
                           "subscriptions.gridstat.io"]
    short = cluster.kubectl("api-resources", "--api-group=gridstat.io").stdout
    for name in ("gsub", "gmode", "gam", "gcf"):
        assert name in short


def test_the_guides_examples_are_accepted(cluster: Cluster) -> None:
    """Every custom resource shown in docs/kubernetes.md passes the API server's validation."""
    import re

    import yaml

    from .kube import ROOT

    text = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "gridstat.io/v1alpha1" in b]
    assert len(blocks) >= 4
    cluster.kubectl("create", "namespace", "grid-pacific", check=False)
    for block in blocks:
        doc = yaml.safe_load(block)
        doc["metadata"]["namespace"] = "grid-pacific"
        proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False)
        assert proc.returncode == 0, f"{doc['kind']}/{doc['metadata']['name']}: {proc.stderr}"
