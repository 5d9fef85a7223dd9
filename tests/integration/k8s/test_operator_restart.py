"""The operator stopped and started again (docs/kubernetes.md: resume after restart; bad input: a
deleted namespace mid-reconcile). Each test runs its own operator (kopf.testing.KopfRunner)."""

from __future__ import annotations

import time

import pytest

from gridstat.v1 import broker_pb2 as bpb

from .conftest import operator
from .grid import Grid
from .kube import Cluster, condition, has_condition
from .manifests import subscription

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_a_restarted_operator_resumes_and_repairs_what_changed_meanwhile(
        cluster: Cluster, grid: Grid, namespace: str) -> None:
    with operator(cluster, grid):
        cluster.apply(subscription("kept", namespace, variables=("pmu1/volt",)))
        cluster.apply(subscription("edited", namespace, variables=("pmu1/angle",)))
        for name in ("kept", "edited"):
            cluster.wait_for("gsub", name, namespace, has_condition("Ready", "True"), what="Ready")
    # while the operator is down: the broker loses one subscription, and a spec is changed
    (lost,) = grid.broker_subscriptions(f"k8s:{namespace}:kept:")
    grid.broker.stub.Unsubscribe(bpb.UnsubscribeRequest(subscription_id=lost.subscription.subscription_id),
                                 timeout=5)
    cluster.apply(subscription("edited", namespace, variables=("pmu1/angle",), interval_ms=40))
    with operator(cluster, grid):
        body = cluster.wait_for("gsub", "edited", namespace, has_condition("Ready", "True"), what="the edit applied")
        assert body is not None and body["status"]["modes"][0]["intervalMs"] == 40
        (held,) = grid.broker_subscriptions(f"k8s:{namespace}:edited:")
        assert held.subscription.qos[0].interval_ms == 40
        # the drift check (GRIDSTAT_DRIFT_CHECK_S=10 here) puts the lost one back
        deadline = time.monotonic() + 40
        while not grid.broker_subscriptions(f"k8s:{namespace}:kept:") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert grid.broker_subscriptions(f"k8s:{namespace}:kept:")
        assert condition(cluster.get("gsub", "kept", namespace), "Ready")["status"] == "True"
        cluster.kubectl("delete", "gsub", "kept", "edited", "-n", namespace, "--timeout=30s")


def test_a_namespace_deleted_while_the_broker_is_down_is_cleaned_up_when_it_returns(
        cluster: Cluster, grid: Grid) -> None:
    ns = f"mid-{int(time.time())}"
    cluster.kubectl("create", "namespace", ns)
    with operator(cluster, grid):
        cluster.apply(subscription("installed", ns, variables=("pmu1/volt",)))
        cluster.wait_for("gsub", "installed", ns, has_condition("Ready", "True"), what="Ready")
        grid.stop_broker()
        try:
            cluster.apply(subscription("pending", ns, variables=("pmu1/angle",)))
            cluster.wait_for("gsub", "pending", ns, has_condition("Ready", "False", "BrokerUnavailable"),
                             timeout_s=30)
            cluster.kubectl("delete", "namespace", ns, "--wait=false")
            time.sleep(3)  # the finalizers hold while the broker does not answer
            assert cluster.get("gsub", "installed", ns) is not None
        finally:
            grid.start_broker()
        deadline = time.monotonic() + 90
        while cluster.kubectl("get", "namespace", ns, check=False).returncode == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert cluster.kubectl("get", "namespace", ns, check=False).returncode != 0, "namespace still there"
        assert grid.broker_subscriptions(f"k8s:{ns}:") == []


def test_a_paused_subscription_is_left_alone_until_resumed(cluster: Cluster, grid: Grid, namespace: str) -> None:
    with operator(cluster, grid):
        cluster.apply(subscription("held", namespace, variables=("pmu1/volt",)))
        cluster.wait_for("gsub", "held", namespace, has_condition("Ready", "True"), what="Ready")
        cluster.kubectl("annotate", "gsub", "held", "-n", namespace, "gridstat.io/pause-reconciliation=true")
        cluster.apply({**subscription("held", namespace, variables=("pmu1/volt",), interval_ms=100),
                       "metadata": {"name": "held", "namespace": namespace,
                                    "annotations": {"gridstat.io/pause-reconciliation": "true"}}})
        body = cluster.wait_for("gsub", "held", namespace,
                                has_condition("ReconciliationPaused", "True"), what="paused")
        assert condition(body, "Ready")["status"] == "Unknown"
        (held,) = grid.broker_subscriptions(f"k8s:{namespace}:held:")
        assert held.subscription.qos[0].interval_ms == 20  # untouched
        cluster.kubectl("annotate", "gsub", "held", "-n", namespace, "gridstat.io/pause-reconciliation-")
        body = cluster.wait_for("gsub", "held", namespace, has_condition("Ready", "True"), what="resumed")
        (held,) = grid.broker_subscriptions(f"k8s:{namespace}:held:")
        assert held.subscription.qos[0].interval_ms == 100
        cluster.kubectl("delete", "gsub", "held", "-n", namespace, "--timeout=30s")
