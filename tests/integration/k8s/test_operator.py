"""The operator against a real kube-apiserver, with real brokers and routers behind it (docs/kubernetes.md).

kubectl applies resources; the operator (kopf.testing.KopfRunner, in this process) turns them
into broker calls; the tests check the status the API server holds, the events posted, what the
broker holds, and the events that reach the subscriber's socket.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kopf.testing import KopfRunner

from gridstat.v1 import broker_pb2 as bpb

from .conftest import operator
from .grid import Grid
from .kube import Cluster, condition, has_condition
from .manifests import active_mode, mode, subscription

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def op(cluster: Cluster, grid: Grid) -> Iterator[KopfRunner]:
    with operator(cluster, grid) as runner:
        yield runner


def reasons(cluster: Cluster, namespace: str, name: str) -> list[str]:
    return [e["reason"] for e in cluster.events(namespace, name)]


def wait_events(cluster: Cluster, namespace: str, name: str, reason: str, timeout_s: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = reasons(cluster, namespace, name)
        if reason in got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"no {reason} event on {name}: {reasons(cluster, namespace, name)}")


def test_a_subscription_is_admitted_with_paths_and_events_reach_the_subscriber(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(subscription("ems-freq", namespace, redundancy=2))
    body = cluster.wait_for("gsub", "ems-freq", namespace, has_condition("Ready", "True", "Installed"), what="Ready")
    assert body is not None
    assert condition(body, "Admitted")["status"] == "True"
    assert condition(body, "Degraded")["status"] == "False"
    status = body["status"]
    assert status["pathCount"] == 2 and status["cloud"] == "A"
    assert sorted(tuple(p["routers"]) for p in status["paths"]) == [("e1", "i1", "e2"), ("e1", "i2", "e2")]
    assert status["subscriptionIds"] == [f"k8s:{namespace}:ems-freq:pmu1#freq"]
    # kubectl wait agrees with the operator's own readiness
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "gsub/ems-freq", "--timeout=5s")
    assert "Admitted" in wait_events(cluster, namespace, "ems-freq", "Admitted")
    since = int(time.time() * 1000)
    freq = grid.variable_ids["freq"]
    deadline = time.monotonic() + 5
    while grid.sink.count(freq, since) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert grid.sink.count(freq, since) >= 20  # 20 ms interval: ~50 events/s reach the subscriber
    cluster.kubectl("delete", "gsub", "ems-freq", "-n", namespace, "--timeout=30s")


def test_an_infeasible_subscription_is_rejected_with_its_reason(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(subscription("three-paths", namespace, variables=("pmu1/volt",), redundancy=3))
    body = cluster.wait_for("gsub", "three-paths", namespace, has_condition("Ready", "False", "Rejected"),
                            what="Rejected")
    admitted = condition(body, "Admitted")
    assert admitted["status"] == "False" and admitted["reason"] == "NoFeasiblePath"
    assert body is not None and body["status"]["rejection"]["offer"] == {"maxRedundancy": 2}
    assert "Rejected" in wait_events(cluster, namespace, "three-paths", "Rejected")
    assert grid.broker_subscriptions(f"k8s:{namespace}:three-paths:") == []

    cluster.apply(subscription("too-fast", namespace, variables=("pmu1/volt",), latency_ms=1))
    body = cluster.wait_for("gsub", "too-fast", namespace, has_condition("Admitted", "False", "LatencyUnattainable"))
    assert condition(body, "Ready")["reason"] == "Rejected"


def test_a_subscription_is_admitted_whole_or_not_at_all(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(subscription("half", namespace, variables=("pmu1/freq", "pmu1/missing")))
    body = cluster.wait_for("gsub", "half", namespace, has_condition("Admitted", "False", "UnknownVariable"))
    assert body is not None and body["status"]["rejection"]["variable"] == "pmu1/missing"
    assert grid.broker_subscriptions(f"k8s:{namespace}:half:") == []  # pmu1/freq was rolled back


def test_deleting_a_subscription_removes_its_routes(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(subscription("angle", namespace, variables=("pmu1/angle",)))
    cluster.wait_for("gsub", "angle", namespace, has_condition("Ready", "True"), what="Ready")
    angle = grid.variable_ids["angle"]
    assert grid.broker_subscriptions(f"k8s:{namespace}:angle:")
    cluster.kubectl("delete", "gsub", "angle", "-n", namespace, "--timeout=30s")
    assert grid.broker_subscriptions(f"k8s:{namespace}:angle:") == []
    time.sleep(0.3)  # events in flight
    since = int(time.time() * 1000)
    time.sleep(0.5)
    assert grid.sink.count(angle, since) == 0


def test_an_update_that_does_not_fit_keeps_the_previous_subscription(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(subscription("grow", namespace, variables=("pmu1/volt",), redundancy=1))
    cluster.wait_for("gsub", "grow", namespace, has_condition("Ready", "True"), what="Ready")
    cluster.apply(subscription("grow", namespace, variables=("pmu1/volt",), redundancy=3))
    body = cluster.wait_for("gsub", "grow", namespace, has_condition("Ready", "False", "Rejected"))
    assert condition(body, "Degraded")["reason"] == "PreviousSpecInstalled"
    (held,) = grid.broker_subscriptions(f"k8s:{namespace}:grow:")
    assert [q.redundancy for q in held.subscription.qos] == [1]
    cluster.apply(subscription("grow", namespace, variables=("pmu1/volt",), redundancy=2))
    body = cluster.wait_for("gsub", "grow", namespace, has_condition("Ready", "True"), what="Ready")
    assert body is not None and body["status"]["pathCount"] == 2


def test_an_unknown_mode_is_reported_until_the_mode_exists(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(subscription("storm", namespace, variables=("pmu1/volt",),
                               modes=[{"mode": "normal"}, {"mode": "storm", "intervalMs": 100}]))
    body = cluster.wait_for("gsub", "storm", namespace, has_condition("Admitted", "False", "UnknownMode"))
    assert condition(body, "Ready")["reason"] == "Invalid"
    assert "create a Mode named 'storm'" in condition(body, "Ready")["message"]
    cluster.apply(mode("storm", namespace, 2))
    cluster.wait_for("gmode", "storm", namespace, has_condition("Ready", "True", "Defined"))
    body = cluster.wait_for("gsub", "storm", namespace, has_condition("Ready", "True"), timeout_s=30, what="Ready")
    assert body is not None
    assert [m["mode"] for m in body["status"]["modes"]] == ["normal", "storm"]
    assert {p["mode"] for p in body["status"]["paths"]} == {"normal", "storm"}


def test_activating_a_mode_reports_its_phases(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(mode("contingency", namespace, 1, match_labels={"tier": "protection"}))
    cluster.wait_for("gmode", "contingency", namespace, has_condition("Ready", "True"))
    cluster.apply(subscription("prot", namespace, variables=("pmu1/angle",), labels={"tier": "protection"}))
    body = cluster.wait_for("gsub", "prot", namespace,
                            lambda b: has_condition("Ready", "True")(b) and len((b or {})["status"]["modes"]) == 2,
                            timeout_s=30, what="Ready in normal and contingency")
    m = cluster.wait_for("gmode", "contingency", namespace,
                         lambda b: (b or {}).get("status", {}).get("selected") == ["prot"], timeout_s=30)
    assert m is not None
    try:
        cluster.apply(active_mode(namespace, "contingency"))
        body = cluster.wait_for("gam", "current", namespace, has_condition("Ready", "True", "ModeActive"))
        assert body is not None
        status = body["status"]
        assert status["phase"] == "Active" and status["currentMode"] == "contingency"
        assert status["previousMode"] == "normal" and status["changed"] is True
        assert [p["name"] for p in status["phases"]] == ["warn", "prepare", "switch-internal", "switch-edge",
                                                         "commit"]
        assert all(p["cloud"] == "A" for p in status["phases"]) and status["durationMs"] > 0
        assert "ModeChanged" in wait_events(cluster, namespace, "current", "ModeChanged")
        cluster.wait_for("gmode", "contingency", namespace, lambda b: (b or {}).get("status", {}).get("current"),
                         timeout_s=30, what="current")
        refused = cluster.apply(active_mode(namespace, "nope", name="typo"), check=True)
        assert refused.returncode == 0
        typo = cluster.wait_for("gam", "typo", namespace, has_condition("Ready", "False", "UnknownMode"))
        assert typo is not None and typo["status"]["phase"] == "Failed"
        # the mode an ActiveMode asks for is not deleted from under it
        cluster.kubectl("delete", "gmode", "contingency", "-n", namespace, "--wait=false")
        assert "ModeIsActive" in wait_events(cluster, namespace, "contingency", "ModeIsActive")
        assert cluster.get("gmode", "contingency", namespace) is not None
    finally:
        cluster.apply(active_mode(namespace, "normal"))
        cluster.wait_for("gam", "current", namespace,
                         lambda b: has_condition("Ready", "True")(b) and b["status"]["currentMode"] == "normal")
    cluster.wait_for("gmode", "contingency", namespace, lambda b: b is None, timeout_s=60, what="deleted")
    body = cluster.wait_for("gsub", "prot", namespace,
                            lambda b: has_condition("Ready", "True")(b) and len((b or {})["status"]["modes"]) == 1,
                            timeout_s=30, what="back to normal only")


def test_an_unavailable_broker_is_reported_and_retried(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    grid.stop_broker()
    try:
        cluster.apply(subscription("patient", namespace, variables=("pmu1/volt",)))
        body = cluster.wait_for("gsub", "patient", namespace,
                                has_condition("Ready", "False", "BrokerUnavailable"), timeout_s=30)
        assert condition(body, "Admitted")["status"] == "Unknown"
        assert "BrokerUnavailable" in wait_events(cluster, namespace, "patient", "BrokerUnavailable")
    finally:
        grid.start_broker()
    cluster.wait_for("gsub", "patient", namespace, has_condition("Ready", "True"), timeout_s=60, what="Ready")


def test_a_dry_run_reports_which_subscriptions_a_switch_stops_without_switching(
        cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply(mode("drill", namespace, 5))
    cluster.wait_for("gmode", "drill", namespace, has_condition("Ready", "True"))
    cluster.apply(subscription("kept", namespace, variables=("pmu1/volt",),
                               modes=[{"mode": "normal"}, {"mode": "drill", "intervalMs": 100}]))
    cluster.apply(subscription("dropped", namespace, variables=("pmu1/angle",)))
    for name in ("kept", "dropped"):
        cluster.wait_for("gsub", name, namespace, has_condition("Ready", "True"), timeout_s=30, what="Ready")
    dry = active_mode(namespace, "drill", name="preview")
    dry["spec"]["dryRun"] = True
    cluster.apply(dry)
    body = cluster.wait_for("gam", "preview", namespace, has_condition("Planned", "True", "DryRun"), what="Planned")
    assert body is not None
    status = body["status"]
    assert status["phase"] == "Planned" and condition(body, "Ready")["reason"] == "DryRun"
    assert status["plan"]["stopping"] == {"count": 1, "names": ["dropped"]}
    assert status["plan"]["changing"] == {"count": 1, "names": ["kept"]}
    assert "SwitchPlanned" in wait_events(cluster, namespace, "preview", "SwitchPlanned")
    assert "STOPS" in cluster.kubectl("get", "gam", "preview", "-n", namespace).stdout
    time.sleep(1)
    modes_now = grid.broker.stub.ListModes(bpb.ListModesRequest(), timeout=5)
    assert modes_now.current_mode == 0  # nothing switched
    # a real switch writes the plan (and its event) before phase 1
    cluster.kubectl("patch", "gam", "preview", "-n", namespace, "--type", "merge", "-p", '{"spec":{"dryRun":false}}')
    try:
        body = cluster.wait_for("gam", "preview", namespace, has_condition("Ready", "True", "ModeActive"),
                                what="switched")
        assert body is not None and body["status"]["plan"]["stopping"]["count"] == 1
        assert condition(body, "Planned")["reason"] == "Computed"
        assert "ModeChanged" in wait_events(cluster, namespace, "preview", "ModeChanged")
    finally:
        cluster.apply(active_mode(namespace, "normal", name="preview"))
        cluster.wait_for("gam", "preview", namespace,
                         lambda b: has_condition("Ready", "True")(b) and b["status"]["currentMode"] == "normal")
        cluster.kubectl("delete", "gam", "preview", "-n", namespace)


def test_a_deleted_namespace_leaves_nothing_behind(cluster: Cluster, grid: Grid, op: KopfRunner) -> None:
    ns = f"gone-{int(time.time())}"
    cluster.kubectl("create", "namespace", ns)
    cluster.apply(subscription("doomed", ns, variables=("pmu1/volt", "pmu1/angle")))
    cluster.wait_for("gsub", "doomed", ns, has_condition("Ready", "True"), what="Ready")
    assert len(grid.broker_subscriptions(f"k8s:{ns}:")) == 2
    cluster.kubectl("delete", "namespace", ns, "--timeout=90s", timeout=120)
    assert grid.broker_subscriptions(f"k8s:{ns}:") == []


def test_a_condensation_function_is_placed(cluster: Cluster, grid: Grid, op: KopfRunner, namespace: str) -> None:
    cluster.apply({"apiVersion": "gridstat.io/v1alpha1", "kind": "CondensationFunction",
                   "metadata": {"name": "avg", "namespace": namespace},
                   "spec": {"output": {"variable": "avg-freq", "intervalMs": 100}, "calculator": "average",
                            "inputs": [{"variable": "pmu1/freq", "latencyMs": 20},
                                       {"variable": "pmu1/volt", "latencyMs": 20}],
                            "trigger": {"kind": "time", "intervalMs": 100}}})
    body = cluster.wait_for("gcf", "avg", namespace, has_condition("Ready", "True", "Placed"), what="Placed")
    assert body is not None
    assert body["status"]["router"] == "e1" and body["status"]["output"] == f"{namespace}.avg/avg-freq"
    cluster.kubectl("delete", "gcf", "avg", "-n", namespace, "--timeout=30s")
