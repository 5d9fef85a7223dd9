"""A real Prometheus scraping the Helm release as the chart's ServiceMonitors and PodMonitors would.

The node serves no Prometheus Operator, so the chart's monitor objects (charts/gridstat/templates/
080-Monitoring.yaml) are rendered with `helm template --api-versions monitoring.coreos.com/v1/...` from
the release's own values and translated, as the Operator would, into Kubernetes-discovered scrape configs
(monitors.py). Debian's Prometheus (scripts/prometheus.sh), built without Kubernetes discovery, runs on the
host with a temporary data directory and reads the same discovery, made here from the node's API server
(pods, Services, EndpointSlices), from file_sd files; it scrapes the pods at their pod IPs.
Every role's pod must be a target that is up, under exactly the chart's jobs and with the ``namespace``,
``cloud`` and ``utility`` labels the dashboards and alerts select on; the rules of
deploy/prometheus/gridstat-rules.yaml must load and evaluate; every panel of the Subscriptions dashboard
must return data for the release's subscriptions; no alert of a fault that is not there may hold.
docs/telemetry.md, "What is tested of the dashboards and alerts"; docs/kubernetes.md, "A cluster on one
machine".
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..promserver import (
    PromServer,
    all_panels,
    concrete,
    prometheus_binary,
    resolve_variables,
    unset,
    wait_until,
)
from ..test_prometheus_live import (
    INDUCED,
    INDUCED_EXPRESSION_ONLY,
    LOAD_DEPENDENT,
    NO_DATA_HERE,
    QUIET,
    RULES,
    alert_result,
    firing,
    plausibility,
    rule_alerts,
)
from .monitors import API_VERSIONS, kubernetes_sd, monitors, relabel, scrape_configs, sd_file
from .node import CHART, SCRIPTS, _env_lines
from .release import Release

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

VALUES = Path(__file__).with_name("values-cluster.yaml")
SUBSCRIPTIONS = CHART.parents[1] / "deploy" / "grafana" / "dashboards" / "gridstat-subscriptions.json"
#: Panels whose metrics a role the suite's release does not run serves, by a metric of their queries: they
#: are queried (a valid expression) but need no data.
NOT_IN_THIS_RELEASE = {
    "gridstat_qos_alert": "the streaming QoS alerts' exporter runs only with Kafka telemetry and the Spark "
                          "jobs (charts/gridstat/templates/059-Deployment-alerts-exporter.yaml); the suite's "
                          "release has neither",
}
#: The monitors' settings the release is scraped with: both on in a cluster that serves the Operator's kinds.
MONITOR_SETS = ("serviceMonitor.enabled=true", "serviceMonitor.subscribers=true")
#: The job of each role (app.kubernetes.io/component) with a /metrics port; the dashboards and alerts
#: select on these names (docs/telemetry.md, "Kubernetes"). Roles not here have no /metrics.
JOB_OF = {"broker": "gridstat-broker", "parent": "gridstat-broker", "router": "gridstat-router",
          "admission": "gridstat-admission", "history": "gridstat-history",
          "pdc-server": "gridstat-subscriber", "sttp-server": "gridstat-subscriber",
          "archive": "gridstat-subscriber", "condensation-host": "gridstat-subscriber"}
#: Roles in no cloud: their series have no `cloud` label.
CLOUDLESS = {"parent", "admission", "history"}
#: A condensation host for the rendering check only (the suite's release runs none; its pod is
#: scraped by the same PodMonitor as the PDC server's).
CONDENSATION = {"condensationHost": {
    "enabled": True, "edgeRouter": "e2",
    "function": {"function_id": "freq-avg",
                 "inputs": [{"variable": "PMU1/freq", "latency_ms": 100}, {"variable": "PMU2/freq", "latency_ms": 100}],
                 "output": {"publisher": "condense", "variable": "freq-avg"},
                 "spec": {"calculator": "average", "trigger": {"kind": "time", "interval_ms": 100}}}}}


def render(env: Mapping[str, str], name: str, namespace: str, *values: Path, sets: tuple[str, ...] = ()) -> str:
    """`helm template` of the chart as in a cluster that serves the Operator's monitor kinds."""
    cmd = ["helm", "template", name, str(CHART), "-n", namespace]
    for v in values:
        cmd += ["-f", str(v)]
    for s in sets:
        cmd += ["--set", s]
    for api in API_VERSIONS:
        cmd += ["--api-versions", api]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(env), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def helm_env() -> dict[str, str]:
    if subprocess.run([str(SCRIPTS / "k8s-tools.sh"), "check"], capture_output=True).returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("helm is not installed: scripts/k8s-tools.sh")
        pytest.skip("helm is not installed: scripts/k8s-tools.sh")
    out = subprocess.run([str(SCRIPTS / "k8s-tools.sh"), "all"], capture_output=True, text=True, check=True).stdout
    return _env_lines(out, os.environ)


# -- the translation, on the rendered chart -----------------------------------------------------------

def api_objects(docs: list[dict[str, Any]], namespace: str) -> dict[str, list[dict[str, Any]]]:
    """The pods, Services and EndpointSlices the API server would hold for the rendered workloads: pods
    named as their StatefulSet or Deployment names them, each with an IP, Running and Ready; each
    Service's EndpointSlice with the pods it selects and its ports."""
    pods: list[dict[str, Any]] = []
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment"):
            n = d["spec"].get("replicas", 1)
            for i in range(n):
                base = d["metadata"]["name"]
                name = f"{base}-{i}" if d["kind"] == "StatefulSet" else f"{base}-5d8f-{i}"
                pods.append({"metadata": {"name": name, "labels": d["spec"]["template"]["metadata"]["labels"]},
                             "spec": d["spec"]["template"]["spec"],
                             "status": {"podIP": f"10.0.0.{len(pods)}", "phase": "Running",
                                        "conditions": [{"type": "Ready", "status": "True"}]}})
    services = [d for d in docs if d["kind"] == "Service"]
    endpoints = []
    for svc in services:
        selector = svc["spec"].get("selector") or {}
        chosen = [p for p in pods if selector and all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        ports = []
        for sp in svc["spec"]["ports"]:
            target = sp.get("targetPort", sp["port"])
            numbers = {cp["containerPort"] for p in chosen for c in p["spec"]["containers"] for cp in c.get("ports", [])
                       if target in (cp.get("name"), cp["containerPort"])}
            assert len(numbers) == 1 or not chosen, \
                f"Service {svc['metadata']['name']} port {sp}: container ports {numbers}"
            ports += [{"name": sp.get("name", ""), "port": n, "protocol": sp.get("protocol", "TCP")} for n in numbers]
        endpoints.append({"metadata": {"name": f"{svc['metadata']['name']}-x7k2p",
                                       "labels": {"kubernetes.io/service-name": svc["metadata"]["name"]}},
                          "addressType": "IPv4", "ports": ports,
                          "endpoints": [{"addresses": [p["status"]["podIP"]], "conditions": {"ready": True},
                                         "targetRef": {"kind": "Pod", "name": p["metadata"]["name"]}} for p in chosen]})
    return {"pods": pods, "services": services, "endpointslices": endpoints}


def role_of(config: Mapping[str, Any]) -> str:
    """The discovery role of a translated monitor's scrape config."""
    return "pod" if config["job_name"].startswith("podMonitor/") else "endpointslice"


def write_sd_files(directory: Path, namespace: str, objects: Mapping[str, list[dict[str, Any]]]) -> int:
    """The file_sd files of both roles in ``namespace`` (monitors.kubernetes_sd); how many target groups."""
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for role in ("endpointslice", "pod"):
        groups = kubernetes_sd(role, namespace, **objects)
        path = sd_file(directory, role, namespace)
        text = json.dumps(groups, sort_keys=True)
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.rename(path)  # whole, as Prometheus' file watch reads it
        count += len(groups)
    return count


def test_the_charts_monitors_give_every_role_its_job_and_labels(tmp_path: Path) -> None:
    """The chart rendered with the suite's values and a condensation host; its monitors translated
    (monitors.scrape_configs) and applied to the targets Prometheus would discover: every pod with a
    /metrics port is scraped once, under its role's job, with `namespace`, `utility` and (in a cloud)
    `cloud`; promtool accepts the configuration."""
    env = helm_env()
    extra = tmp_path / "condensation.yaml"
    extra.write_text(yaml.safe_dump(CONDENSATION))
    rendered = render(env, "pacific", "grid-pacific", VALUES, extra, sets=MONITOR_SETS)
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    mons = monitors(yaml.safe_dump_all(docs))
    assert sorted((m["kind"], m["metadata"]["name"]) for m in mons) == [
        ("PodMonitor", "pacific-gridstat-subscribers"), ("ServiceMonitor", "pacific-gridstat-admission"),
        ("ServiceMonitor", "pacific-gridstat-broker"), ("ServiceMonitor", "pacific-gridstat-router")]
    configs = scrape_configs(mons, file_sd_dir=tmp_path / "sd", interval="1s")
    objects = api_objects(docs, "grid-pacific")
    found = {role: [{"__address__": g["targets"][0], **g["labels"]}
                    for g in kubernetes_sd(role, "grid-pacific", **objects)]
             for role in ("endpointslice", "pod")}
    targets: list[dict[str, str]] = []
    for c in configs:
        assert [f for sd in c["file_sd_configs"] for f in sd["files"]] == [
            str(sd_file(tmp_path / "sd", role_of(c), "grid-pacific"))], c
        for labels in found[role_of(c)]:
            got = relabel(labels, c["relabel_configs"])
            if got is not None:
                targets.append(got)
    # every pod with a container port named metrics (and no other), once, under its role's job
    component = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
                 for d in docs if d["kind"] in ("StatefulSet", "Deployment")}
    metrics_pods = sorted(f["__meta_kubernetes_pod_name"] for f in found["pod"]
                          if f["__meta_kubernetes_pod_container_port_name"] == "metrics")
    assert metrics_pods and sorted(t["pod"] for t in targets) == metrics_pods, json.dumps(targets, indent=1)
    assert {"condensation-host", "pdc-server", "parent", "admission"} <= set(component)
    for t in targets:
        role = next(f["__meta_kubernetes_pod_label_app_kubernetes_io_component"] for f in found["pod"]
                    if f["__meta_kubernetes_pod_name"] == t["pod"])
        assert t["job"] == JOB_OF[role], t
        assert t["namespace"] == "grid-pacific" and t["utility"] == "pacific" and t["endpoint"] == "metrics", t
        assert ("cloud" in t) == (role not in CLOUDLESS), t
        if t["job"] != "gridstat-subscriber":
            assert t["service"].startswith("pacific-gridstat-"), t
        assert t["instance"].startswith("10.0.0."), t
    assert {t["job"] for t in targets} == {"gridstat-broker", "gridstat-router", "gridstat-admission",
                                          "gridstat-subscriber"}
    # The configuration as Prometheus reads it (promtool, from scripts/prometheus.sh).
    promtool = subprocess.run(["which", "promtool"], capture_output=True, text=True).stdout.strip()
    if promtool:
        write_sd_files(tmp_path / "sd", "grid-pacific", objects)
        conf = tmp_path / "prometheus.yml"
        conf.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                                        "scrape_configs": configs}))
        check = subprocess.run([promtool, "check", "config", str(conf)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


# -- the release, scraped ------------------------------------------------------------------------------

def test_a_prometheus_scrapes_every_role_of_the_release_as_the_charts_monitors_would(
        release: Release, tmp_path: Path) -> None:
    prometheus_binary()
    node = release.node
    t0 = time.monotonic()
    # the chaos scenarios before may have left a replacement pod starting: every role Ready again first
    node.wait_until("every pod of the release Ready", release.all_ready, 180)
    rendered = render(node.env, release.name, release.namespace, release.values, sets=MONITOR_SETS)
    # Debian's Prometheus has no Kubernetes discovery: the same discovery, made here from the API
    # server's objects (the node's kubeconfig: its address and credentials), is read by file_sd.
    sd_dir = tmp_path / "sd"
    configs = scrape_configs(monitors(rendered), file_sd_dir=sd_dir, interval="1s")

    def discover() -> int:
        return write_sd_files(sd_dir, release.namespace, {
            kind: node.items(kind, release.namespace) for kind in ("pods", "services", "endpointslices")})
    discover()
    pods = {p["metadata"]["name"]: p for p in release.role_pods()}
    expected = {(JOB_OF[p["metadata"]["labels"]["app.kubernetes.io/component"]], name) for name, p in pods.items()
                if p["metadata"]["labels"]["app.kubernetes.io/component"] in JOB_OF}
    assert {j for j, _ in expected} >= {"gridstat-broker", "gridstat-router", "gridstat-admission",
                                        "gridstat-subscriber"}, expected
    spec_file = tmp_path / "gridstat-rules.spec.yaml"
    spec_file.write_text(yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"]))
    prom = PromServer(tmp_path / "prometheus", [], [spec_file], scrape_configs=configs)
    prom.start()
    try:
        def scraped() -> set[tuple[str, str]]:
            return {(t["labels"].get("job", ""), t["labels"].get("pod", "")) for t in prom.active_targets()}

        try:
            wait_until(lambda: discover() >= 0 and scraped() == expected
                       and all(t["health"] == "up" for t in prom.active_targets()),
                       45, "every role's pod a target, up")
        except AssertionError:
            raise AssertionError(
                "targets: " + json.dumps([(t["labels"], t["health"], t.get("lastError"))
                                          for t in prom.active_targets()], indent=1) + "\n"
                f"expected {sorted(expected)}\nprometheus log: {prom.log()[-3000:]}") from None
        up = time.monotonic() - t0

        # The series' labels, as the dashboards and alerts select on them.
        for s in prom.query("up"):
            m = s["metric"]
            role = pods[m["pod"]]["metadata"]["labels"]["app.kubernetes.io/component"]
            assert m["namespace"] == release.namespace and m["utility"] == release.name, m
            assert m["endpoint"] == "metrics" and m["instance"].startswith(pods[m["pod"]]["status"]["podIP"] + ":"), m
            if role in CLOUDLESS:
                assert "cloud" not in m, m
            else:
                assert m.get("cloud") == pods[m["pod"]]["metadata"]["labels"]["gridstat.io/cloud"], m
            if m["job"] != "gridstat-subscriber":
                assert m.get("service", "").startswith(f"{release.fullname}-"), m
        assert {s["metric"]["job"] for s in prom.query("up")} == {j for j, _ in expected}

        # The rules load and evaluate.
        assert {r["name"] for r in prom.rules()} == set(rule_alerts())
        wait_until(lambda: all(r["health"] == "ok" for r in prom.rules()), 15, "every rule evaluated")

        # The Subscriptions dashboard: a few samples for the rates over its windows (15 s at 1 s scrapes).
        time.sleep(16)
        d = json.loads(SUBSCRIPTIONS.read_text())
        vars_ = resolve_variables(d, prom)
        failures = [f"template variables with no value: {unset(d, vars_)}"] if unset(d, vars_) else []
        # the release's subscriptions: those of its subscriber pods (the PDC servers), each offered by the
        # dashboard's subscriber variable
        subscriber_pods = {n for n, p in pods.items() if JOB_OF.get(
            p["metadata"]["labels"]["app.kubernetes.io/component"]) == "gridstat-subscriber"}
        theirs = prom.query('gridstat_subscription_interval_seconds{job="gridstat-subscriber"}')
        if {s["metric"]["pod"] for s in theirs} != subscriber_pods:
            failures.append(f"subscriber pods with subscriptions: {sorted({s['metric']['pod'] for s in theirs})}, "
                            f"expected {sorted(subscriber_pods)}")
        missing = {s["metric"]["subscriber"] for s in theirs} - set(vars_.get("subscriber", []))
        if missing:
            failures.append(f"subscribers not offered by the dashboard: {sorted(missing)}")
        checked = 0
        skipped: list[str] = []
        for panel in all_panels(d):
            if panel.get("type") == "row":
                continue
            results = [(e, prom.query(e)) for e in (concrete(t["expr"], vars_, d) for t in panel.get("targets", []))]
            checked += 1
            if (SUBSCRIPTIONS.name, panel["title"]) in NO_DATA_HERE:
                continue  # the release's topology has no stations either
            if all(any(m in e for m in NOT_IN_THIS_RELEASE) for e, _ in results) and not any(r for _, r in results):
                skipped.append(panel["title"])
                continue
            if not any(r for _, r in results):
                failures.append(f"panel {panel['title']!r} returns no series: " + " | ".join(e for e, _ in results))
                continue
            for expr, r in results:
                if r:
                    failures += [f"panel {panel['title']!r}: {p} ({expr})" for p in plausibility(expr, r)]
                    wrong = [s["metric"] for s in r
                             if s["metric"].get("namespace", release.namespace) != release.namespace]
                    if wrong:
                        failures.append(f"panel {panel['title']!r}: series of another namespace {wrong}")
        assert checked >= 10, checked

        # A healthy release: no alert of a fault that is not there holds, none fires.
        quiet = QUIET | INDUCED | INDUCED_EXPRESSION_ONLY
        holding = {name: alert_result(prom, name) for name in sorted(quiet)}
        failures += [f"alert {name} holds in a healthy release: {r}" for name, r in holding.items() if r]
        fired = firing(prom)
        failures += [f"alert {name} fires in a healthy release: {fired[name]}" for name in sorted(quiet & set(fired))]
        print("load-dependent alerts holding (not asserted):",
              {n: [(s["metric"].get("subscriber", s["metric"].get("pod")), s["metric"].get("variable"),
                    round(float(s["value"][1]), 3)) for s in alert_result(prom, n)]
               for n in sorted(LOAD_DEPENDENT) if alert_result(prom, n)})
        for what, expr in (("p99 latency", 'gridstat_subscription_latency_seconds{quantile="0.99"}'),
                           ("bound", "gridstat_subscription_latency_bound_seconds"),
                           ("age of the newest value", "time() - gridstat_subscription_last_event_timestamp_seconds"),
                           ("delivered / expected", "rate(gridstat_subscription_events_delivered_total[15s])"
                                                    " * gridstat_subscription_interval_seconds")):
            print(f"subscriptions, {what}:", [(s["metric"]["subscriber"], s["metric"]["variable"],
                                               round(float(s["value"][1]), 3)) for s in prom.query(expr)])
        print(f"panels without data, their role not in the release: {skipped}")
        print(f"release scraped: {len(expected)} targets up in {up:.0f} s, {checked} panels, "
              f"{time.monotonic() - t0:.0f} s in all")
        assert not failures, "\n".join(failures)
    finally:
        prom.stop()
