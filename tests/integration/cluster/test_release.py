"""The Helm release running on a real node: every role a pod, the operator in a pod, events between pods.

One release for the module (conftest.release); the tests run in order over one publisher pod, one
subscriber pod and one Subscription with two paths, whose subscriber counts every missing timestamp
since its first event: each fault below must leave that count at 0. Both clients are multi-homed
(docs/redundancy.md): the publisher at e1 and e1b, the subscriber at e2 and e2b, so the two paths
share no router at all and no single router's restart cuts both.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gridstat.chaos import kube

from .node import CHART, SCRIPTS, Node, pod_ready
from .release import API, CLIENTS, Release, ready_now, subscription

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

VARIABLE = "pmu1/freq"
INTERVAL_MS = 20
LATENCY_MS = 50


@pytest.fixture(scope="module")
def flow(release: Release) -> Iterator[Release]:
    """Publisher pmu1 at e1 and e1b, subscriber ems at e2 and e2b, Mode contingency, Subscription ems-freq
    (k=2 in both modes)."""
    node = release.node
    node.apply(release.publisher("pmu1", "e1", ("freq", "angle"), INTERVAL_MS, also=("e1b",)),
               release.subscriber("ems", "e2", VARIABLE, INTERVAL_MS, also=("e2b",)),
               {"apiVersion": API, "kind": "Mode", "metadata": {"name": "contingency", "namespace": release.namespace},
                "spec": {"id": 1}})
    node.wait_until("client pods Ready", lambda: all(
        pod_ready(p) for p in node.pods(release.namespace, f"app.kubernetes.io/part-of={CLIENTS}")), 120)
    node.wait_until("pmu1 registered", lambda: "READY" in node.logs(release.namespace, "pmu1"), 120)
    node.wait_until("ems registered", lambda: "READY" in node.logs(release.namespace, "ems"), 120)
    node.apply(subscription("ems-freq", release.namespace, VARIABLE, subscriber="ems", edge="e2",
                            interval_ms=INTERVAL_MS, latency_ms=LATENCY_MS, redundancy=2,
                            modes=[{"mode": "normal"}, {"mode": "contingency"}]))
    yield release


def delivered(release: Release) -> dict[str, Any]:
    stats = release.last_stats("ems", "subscribe") or {}
    return (stats.get("variables") or {}).get(VARIABLE) or {}


def flowing_since(release: Release, received: int, more: int) -> dict[str, Any]:
    """Wait until ``more`` events beyond ``received`` arrived; the subscriber's cumulative counts."""
    return release.node.wait_until(  # type: ignore[no-any-return]
        f"{more} more events at the subscriber pod",
        lambda: (d := delivered(release)) and d.get("received", 0) >= received + more and d, 120)


def has_route(release: Release, router: str, variable_id: int) -> bool:
    """Whether the router's own table (asked through its broker) routes the variable."""
    table = release.gridstat("A", "routes", router, check=False) or {}
    return any(r["variable_id"] == variable_id for r in table.get("routes", []))


def assert_nothing_lost(d: dict[str, Any], during: str) -> None:
    assert d["missing"] == 0, f"{d['missing']} events lost {during}: {json.dumps(d)}"


def test_every_role_runs_and_helm_test_passes(release: Release) -> None:
    node = release.node
    # the chaos scenarios before may have left a replacement pod starting: every role Ready again first
    node.wait_until("every pod of the release Ready", release.all_ready, 180)
    pods = release.role_pods()
    components = sorted({p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods})
    c37118 = yaml.safe_load(release.values.read_text()).get("c37118") or {}
    roles = {"simulators": "pmu-simulator", "gateways": "pmu-gateway", "pdcServers": "pdc-server"}
    expected = {"admission", "broker", "operator", "parent", "router"} | {r for k, r in roles.items() if c37118.get(k)}
    assert components == sorted(expected), components
    routers = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == "router"]
    assert len(routers) == sum(len(c["routers"]) for c in release.clouds())
    assert all(pod_ready(p) for p in pods)
    test = node.helm("test", release.name, "-n", release.namespace, "--timeout", "3m")
    assert "Phase:          Succeeded" in test.stdout or "Succeeded" in test.stdout, test.stdout
    # the brokers hold their routers: the topology sidecars registered every router of each cloud
    for cloud in release.clouds():
        shown = release.gridstat(cloud["name"], "topology", "show")
        names = {r["name"] for r in shown["routers"]}
        assert names == {r["name"] for r in cloud["routers"]}, shown


def test_a_subscription_with_two_paths_flows_from_a_publisher_pod_to_a_subscriber_pod(flow: Release) -> None:
    node = flow.node
    body = node.wait_until("ems-freq Ready", lambda: ready_now(b := node.get("gsub", "ems-freq", flow.namespace))
                           and b, 120)
    paths = [p for p in body["status"]["paths"] if p.get("variable") == VARIABLE]
    normal = [p for p in paths if p.get("mode") in ("normal", 0)]
    assert len(normal) == 2, body["status"]["paths"]
    # multi-homed ends: the two paths share no router, edge routers included
    assert sorted(tuple(p["routers"]) for p in normal) == [("e1", "i1", "e2"), ("e1b", "i2", "e2b")], normal
    d = flowing_since(flow, 0, 100)
    # the routes are in the running routers' tables: every router of both paths
    for router in ("e1", "i1", "e2", "e1b", "i2", "e2b"):
        assert has_route(flow, router, d["variable_id"]), f"no route for {VARIABLE} in {router}"
    assert d["interval_ms"] == pytest.approx(INTERVAL_MS, rel=0.1), d
    assert d["latency_ms"]["p99"] <= LATENCY_MS, d
    assert_nothing_lost(d, "in steady state")


def test_a_mode_switch_happens_in_the_running_routers(flow: Release) -> None:
    node = flow.node
    before = delivered(flow)["received"]
    node.apply({"apiVersion": API, "kind": "ActiveMode", "metadata": {"name": "current", "namespace": flow.namespace},
                "spec": {"mode": "contingency"}})
    body = node.wait_until("switched to contingency", lambda: (b := node.get("gam", "current", flow.namespace))
                           and (b.get("status") or {}).get("phase") == "Active" and ready_now(b) and b, 120)
    assert body["status"]["currentMode"] == "contingency", body["status"]
    phases = body["status"]["phases"]
    assert phases and all("durationMs" in p for p in phases), body["status"]
    modes = node.wait_until("routers in mode 1", lambda: all(
        (flow.gridstat("A", "routes", r) or {}).get("current_mode") in (1, "contingency")
        for r in ("e1", "i1", "e2", "e1b", "i2", "e2b")), 60)
    assert modes
    assert_nothing_lost(flowing_since(flow, before, 100), "across the mode switch")
    node.apply({"apiVersion": API, "kind": "ActiveMode", "metadata": {"name": "current", "namespace": flow.namespace},
                "spec": {"mode": "normal"}})
    node.wait_until("back to normal", lambda: (b := node.get("gam", "current", flow.namespace))
                    and (b.get("status") or {}).get("phase") == "Active"
                    and (b.get("status") or {}).get("currentMode") == "normal" and ready_now(b), 120)
    assert_nothing_lost(flowing_since(flow, before, 200), "switching back")


def _recreated(node: Node, namespace: str, pod: str, old_uid: str) -> bool:
    body = node.get("pod", pod, namespace)
    return body is not None and body["metadata"]["uid"] != old_uid and pod_ready(body)


def test_a_deleted_broker_pod_comes_back_with_its_state_and_the_data_plane_goes_on(flow: Release) -> None:
    node = flow.node
    pod = flow.broker_pod("A")
    held = {s["subscription_id"] for s in flow.gridstat("A", "sub", "list")}
    assert held
    uid = node.get("pod", pod, flow.namespace)["metadata"]["uid"]  # type: ignore[index]
    before = delivered(flow)["received"]
    node.kubectl("delete", "pod", pod, "-n", flow.namespace, "--wait=false")
    # events keep flowing while the broker is away (routers forward on their installed tables)
    during = flowing_since(flow, before, 50)
    node.wait_until("broker pod recreated and Ready", lambda: _recreated(node, flow.namespace, pod, uid), 180)
    after = {s["subscription_id"] for s in flow.gridstat("A", "sub", "list")}
    assert held <= after, f"subscriptions lost with the broker pod: {held - after}"
    assert_nothing_lost(flowing_since(flow, during["received"], 100), "while the broker pod was replaced")


def test_a_deleted_router_pod_on_one_path_loses_nothing_and_is_rebuilt(flow: Release) -> None:
    node = flow.node
    pod = flow.router_pod("i1")
    uid = node.get("pod", pod, flow.namespace)["metadata"]["uid"]  # type: ignore[index]
    before = delivered(flow)["received"]
    node.kubectl("delete", "pod", pod, "-n", flow.namespace, "--wait=false")
    node.wait_until("router pod recreated and Ready", lambda: _recreated(node, flow.namespace, pod, uid), 180)
    # its broker rebuilds it: the route is back in the new pod's table
    node.wait_until("i1 rebuilt", lambda: has_route(flow, "i1", delivered(flow)["variable_id"]), 120)
    assert_nothing_lost(flowing_since(flow, before, 150), "while a router on one of two paths was replaced")


def test_the_standby_operator_takes_over_when_the_leader_pod_goes(flow: Release) -> None:
    node = flow.node
    peering = node.get("kopfpeering", flow.fullname, flow.namespace)
    peers = (peering or {}).get("status") or {}
    assert len(peers) == 2, peers
    leader_id = max(peers, key=lambda k: peers[k]["priority"])
    operators = node.pods(flow.namespace, f"app.kubernetes.io/instance={flow.name}",
                          "app.kubernetes.io/component=operator")
    leader = [p["metadata"]["name"] for p in operators if p["metadata"]["name"] in leader_id]
    assert len(leader) == 1, (leader_id, [p["metadata"]["name"] for p in operators])
    node.kubectl("delete", "pod", leader[0], "-n", flow.namespace, "--wait=false")
    node.apply(subscription("ems-angle", flow.namespace, "pmu1/angle", subscriber="ems", edge="e2",
                            interval_ms=100, latency_ms=LATENCY_MS, redundancy=1))
    started = time.monotonic()
    node.wait_until("a Subscription applied during the takeover is admitted",
                    lambda: ready_now(node.get("gsub", "ems-angle", flow.namespace)), 120)
    node.timings["operator takeover to admission"] = time.monotonic() - started
    node.kubectl("delete", "gsub", "ems-angle", "-n", flow.namespace, "--timeout=60s")


class RolloutWatch:
    """Samples the router pods while a rollout runs: the most routers of one cloud not Ready at once, and
    each router's windows of not being Ready (wall-clock ms, the clock the events are stamped with)."""

    def __init__(self, node: Node, release: Release) -> None:
        self.node, self.release, self.max_unready = node, release, 0
        self.down: dict[str, list[list[int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pods_of = {r["name"]: self.release.router_pod(r["name"]) for c in self.release.clouds() for r in c["routers"]}
        while not self._stop.is_set():
            pods = self.node.pods(self.release.namespace, f"app.kubernetes.io/instance={self.release.name}",
                                  "app.kubernetes.io/component=router")
            now = time.time_ns() // 1_000_000
            ready = {p["metadata"]["name"] for p in pods if pod_ready(p)}
            for router, pod in pods_of.items():
                windows = self.down.setdefault(router, [])
                if pod not in ready:
                    if windows and windows[-1][1] == 0:
                        continue
                    windows.append([now, 0])
                elif windows and windows[-1][1] == 0:
                    windows[-1][1] = now
            for cloud in self.release.clouds():
                names = {pods_of[r["name"]] for r in cloud["routers"]}
                self.max_unready = max(self.max_unready, len(names - ready))
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def during(self, routers: tuple[str, ...], gap: dict[str, int], before_ms: int = 1000,
               after_ms: int = 8000) -> str | None:
        """The router among ``routers`` whose restart explains a gap (it was down from shortly before the
        gap's first missing event until shortly before its last), or None."""
        for router in routers:
            for start, end in self.down.get(router, ()):
                if start - before_ms <= gap["from_ts_ms"] and gap["to_ts_ms"] <= (end or start) + after_ms:
                    return router
        return None


def _image_ids(node: Node, release: Release, component: str) -> set[str]:
    return {c["imageID"] for p in node.pods(release.namespace, f"app.kubernetes.io/instance={release.name}",
                                            f"app.kubernetes.io/component={component}")
            for c in p["status"].get("containerStatuses") or ()}


def test_helm_upgrade_and_rollback_roll_the_routers_one_at_a_time(flow: Release) -> None:
    """Every router restarts, one at a time per cloud, edge routers included. The subscription's two
    paths share no router (multi-homed clients, docs/redundancy.md), so while any router restarts the
    other path carries every event: nothing may be lost, across the upgrade and the rollback."""
    node = flow.node
    # a new image: the same build with a changed label (a new digest), loaded into the node's runtime
    node.run(str(SCRIPTS / "build-image.sh"), "gridstat:upgrade", timeout=900,
             env_extra={"GRIDSTAT_IMAGE_LABEL": f"io.gridstat.build={time.time_ns()}"})
    node.run(str(SCRIPTS / "cluster.sh"), "load-image", "gridstat:upgrade", timeout=300)
    old = _image_ids(node, flow, "router")
    first = delivered(flow)
    watcher = RolloutWatch(node, flow)
    try:
        for revision, args in (("upgrade", ("upgrade", flow.name, str(CHART), "-n", flow.namespace, "--reuse-values",
                                           "--set", "image.tag=upgrade")),
                               ("rollback", ("rollback", flow.name, "1", "-n", flow.namespace))):
            before = delivered(flow)
            started = time.monotonic()
            node.helm(*args, "--wait", "--timeout", "10m")
            node.wait_until(f"{revision}: every pod Ready", flow.all_ready, 300)
            node.timings[f"helm {revision} to all Ready"] = time.monotonic() - started
            now = _image_ids(node, flow, "router")
            assert now and now.isdisjoint(old), f"{revision}: routers still on the old image: {now & old}"
            old = now
            after = flowing_since(flow, before["received"], 100)
            node.timings[f"helm {revision}: events lost (multi-homed, k=2)"] = after["missing"] - before["missing"]
    finally:
        watcher.stop()
    assert watcher.max_unready <= 1, f"{watcher.max_unready} routers of a cloud were down at once"
    restarted = {r for r, windows in watcher.down.items() if windows}
    assert {"e1", "e1b", "e2", "e2b", "i1", "i2"} <= restarted, f"routers seen restarting: {sorted(restarted)}"
    gaps = [g for g in after["gaps"] if g["from_ts_ms"] > (first["last_ts_ms"] or 0)]
    explained = [(g, watcher.during(tuple(watcher.down), g)) for g in gaps]
    assert_nothing_lost({"missing": after["missing"] - first["missing"], "gaps": explained},
                        "across helm upgrade and rollback")


CONNECT = """import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as exc:
    print("refused", type(exc).__name__)
"""


def test_network_policies_refuse_what_they_do_not_allow(flow: Release) -> None:
    """kube-router's policy controller enforces the chart's NetworkPolicies on the node: the leaf broker's
    gRPC port answers its operator, and refuses a pod of another namespace and a client of its own."""
    node = flow.node
    broker_ip = node.get("pod", flow.broker_pod("A"), flow.namespace)["status"]["podIP"]  # type: ignore[index]
    outsider = f"{flow.namespace}-outsider"
    before = delivered(flow)
    node.kubectl("create", "namespace", outsider)
    try:
        probe = kube.client_pod("probe", outsider, [])
        probe["spec"]["containers"][0]["args"] = ["sleep", "600"]
        node.apply(probe)
        node.wait_until("probe pod Ready", lambda: pod_ready(node.get("pod", "probe", outsider) or {}), 120)
        operator = node.pods(flow.namespace, f"app.kubernetes.io/instance={flow.name}",
                             "app.kubernetes.io/component=operator")[0]["metadata"]["name"]

        def connect(namespace: str, pod: str) -> str:
            return node.exec(namespace, pod, "python3", "-c", CONNECT, broker_ip, "7700").stdout.strip()

        # The policy controller applies a new pod's rules within seconds (as every enforcing CNI does).
        started = time.monotonic()
        node.wait_until("a pod of another namespace refused by the broker's policy",
                        lambda: connect(outsider, "probe").startswith("refused"), 60, 1.0)
        node.timings["a new pod's policy enforced after, s"] = time.monotonic() - started
        assert connect(flow.namespace, "pmu1").startswith("refused"), "a client reached the broker directly"
        assert connect(flow.namespace, operator) == "connected"  # allowed: the operator calls its brokers
        after = flowing_since(flow, before["received"], 100)
        lost = after["missing"] - before["missing"]
        assert lost == 0, f"{lost} events lost while the policies were enforced: {json.dumps(after)}"
    finally:
        node.kubectl("delete", "namespace", outsider, "--wait=false", check=False)
