"""The Helm chart against real tools and a real API server (docs/kubernetes.md).

helm lint; helm template validated offline (kubernetes-validate, schemas of Kubernetes 1.36) and
by a server-side dry run; helm install into the API server creating every object; and the
operator running under the chart's own ServiceAccount and Role, as two peered replicas.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner

from gridstat.core import children

from ..fixtures import environment
from .grid import Grid
from .kube import ROOT, Cluster, has_condition, require_tools
from .manifests import subscription

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CHART = ROOT / "charts" / "gridstat"
TWO_CLOUDS = Path(__file__).with_name("values-two-clouds.yaml")
SECURE = Path(__file__).with_name("values-secure.yaml")  # over TWO_CLOUDS: every security option on
K8S_VERSION = "1.36.0"


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    return require_tools(helm=True)


def helm(env: dict[str, str], *args: str, kubeconfig: Path | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    extra = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    proc = subprocess.run(["helm", *args, *extra], capture_output=True, text=True, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {proc.stderr}")
    return proc


def render(env: dict[str, str], *values: Path, namespace: str = "grid", crds: bool = False,
           extra: tuple[str, ...] = ()) -> list[dict]:
    args = ["template", "rel", str(CHART), "--namespace", namespace, "--kube-version", K8S_VERSION]
    args += [a for v in values for a in ("-f", str(v))]
    if crds:
        args.append("--include-crds")
    return [d for d in yaml.safe_load_all(helm(env, *args, *extra).stdout) if d]


def write_values(tmp_path: Path, name: str, values: dict[str, Any]) -> Path:
    """A values file in JSON (valid YAML): every string quoted, so `y` stays a string for Helm."""
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return path


def test_helm_lint_passes_with_defaults_and_with_every_part_on(tools: dict[str, str]) -> None:
    for values in ([], ["-f", str(TWO_CLOUDS)], ["-f", str(TWO_CLOUDS), "-f", str(SECURE)]):
        proc = helm(tools, "lint", "--strict", str(CHART), "--kube-version", K8S_VERSION, *values)
        assert "0 chart(s) failed" in proc.stdout


def test_values_are_checked_by_the_schema_and_the_cross_field_rules(tools: dict[str, str]) -> None:
    bad = helm(tools, "template", "rel", str(CHART), "--set", "router.eventPort=high", check=False)
    assert bad.returncode != 0 and "/router/eventPort" in bad.stderr
    sets = ["clouds[0].name=A", "clouds[0].routers[0].name=e1", "clouds[0].routers[0].id=1",
            "clouds[0].routers[0].role=edge", "clouds[0].links[0].a=e1", "clouds[0].links[0].b=zz"]
    dup = helm(tools, "template", "rel", str(CHART), *(a for s in sets for a in ("--set", s)), check=False)
    assert dup.returncode != 0 and "VALUES VALIDATION" in dup.stderr and "zz" in dup.stderr
    two = helm(tools, "template", "rel", str(CHART), "-f", str(TWO_CLOUDS), "--set", "parent.enabled=false",
               check=False)
    assert two.returncode != 0 and "parent.enabled" in two.stderr


def test_one_workload_per_role_with_probes_pdbs_policies_and_least_privilege(tools: dict[str, str]) -> None:
    docs = render(tools, TWO_CLOUDS)
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    workloads = {n: k for k, n in kinds if k in ("StatefulSet", "Deployment")}
    assert workloads == {"rel-gridstat-broker-a": "StatefulSet", "rel-gridstat-broker-b": "StatefulSet",
                         "rel-gridstat-router-a": "StatefulSet", "rel-gridstat-router-b": "StatefulSet",
                         "rel-gridstat-parent": "StatefulSet", "rel-gridstat-operator": "Deployment",
                         "rel-gridstat-condensation-host": "Deployment", "rel-gridstat-admission": "Deployment"}
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment") and "condensation" not in d["metadata"]["name"]:
            c = d["spec"]["template"]["spec"]["containers"][0]
            assert "livenessProbe" in c and "readinessProbe" in c, d["metadata"]["name"]
            assert all(c["securityContext"]["readOnlyRootFilesystem"] is True
                       for c in d["spec"]["template"]["spec"]["containers"])
    # leaf brokers and routers per cloud, the parent, the admission controller, the operator
    assert sorted(n for k, n in kinds if k == "PodDisruptionBudget") == [
        "rel-gridstat-admission", "rel-gridstat-broker-a", "rel-gridstat-broker-b", "rel-gridstat-operator",
        "rel-gridstat-parent", "rel-gridstat-router-a", "rel-gridstat-router-b"]
    # default deny, brokers, routers, edge proxies, admission, operator, condensation host, the subscriber
    # pods' /metrics (the condensation host's)
    assert sum(k == "NetworkPolicy" for k, _ in kinds) == 8
    (role,) = [d for d in docs if d["kind"] == "Role"]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert "secrets" not in resources and "pods" not in resources
    assert all("*" not in rule["verbs"] for rule in role["rules"])
    dashboards = [d for d in docs if d["kind"] == "ConfigMap" and "dashboard" in d["metadata"]["name"]]
    assert len(dashboards) >= 1 and all(json.loads(next(iter(d["data"].values())))["uid"] for d in dashboards)


def test_rendered_manifests_pass_kubernetes_validate(tools: dict[str, str], tmp_path: Path) -> None:
    for i, values in enumerate(([], [TWO_CLOUDS], [TWO_CLOUDS, SECURE])):
        out = tmp_path / f"rendered-{i}.yaml"
        docs = render(tools, *values, crds=True)
        out.write_text(yaml.safe_dump_all(docs))
        proc = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
                               K8S_VERSION, str(out)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # every object but the KopfPeering (a custom resource, checked by the dry run below) has a schema
        assert proc.stdout.count(" passed for resource ") == len(docs) - 1, proc.stdout


def _pod_specs(docs: list[dict]) -> dict[str, dict]:
    """Every pod spec of the rendered chart (workloads' templates and the helm test Pod), by object name."""
    specs = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs
             if d["kind"] in ("StatefulSet", "Deployment", "DaemonSet", "Job", "ReplicaSet")}
    specs.update({d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Pod"})
    specs.update({d["metadata"]["name"]: d["spec"]["jobTemplate"]["spec"]["template"]["spec"]
                  for d in docs if d["kind"] == "CronJob"})
    return specs


def test_every_pod_is_restricted_by_default(tools: dict[str, str]) -> None:
    """docs/kubernetes.md, "Security": non-root 10001, RuntimeDefault seccomp, no privilege escalation, read-only
    root, no capabilities, writable paths only on volumes -- for every role and the test pod."""
    for values in ([], [TWO_CLOUDS], [TWO_CLOUDS, SECURE]):
        docs = render(tools, *values)
        specs = _pod_specs(docs)
        assert "rel-gridstat-test-brokers" in specs and "rel-gridstat-operator" in specs
        assert any("broker" in n for n in specs) and any("router" in n for n in specs)
        for name, spec in specs.items():
            assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                               "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}, name
            assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            assert not any("hostPath" in v for v in volumes.values()), name
            for c in spec["containers"] + spec.get("initContainers", []):
                what = f"{name}/{c['name']}"
                assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}}, what
                mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
                if c["name"] != "topology":  # the sidecar writes nothing
                    assert "emptyDir" in volumes[mounts["/tmp"]["name"]], what
                for path, m in mounts.items():
                    if path.startswith("/etc/gridstat/"):  # configuration, certificates, keys
                        assert m.get("readOnly") is True, (what, path)
        for d in docs:
            if d["kind"] == "ServiceAccount":
                assert d["automountServiceAccountToken"] is d["metadata"]["name"].endswith("-operator"), d


def test_tls_channel_auth_and_policy_render_flags_and_mounts(tools: dict[str, str]) -> None:
    docs = render(tools, TWO_CLOUDS, SECURE)
    specs = _pod_specs(docs)
    tls = "/etc/gridstat/tls/"

    def container(workload: str, name: str) -> dict:
        return next(c for c in specs[workload]["containers"] if c["name"] == name)

    def args(c: dict) -> str:
        return " ".join(c.get("command", []) + c["args"])

    def secret_mounted(workload: str, c: dict, volume: str, secret: str, path: str) -> None:
        (m,) = [m for m in c["volumeMounts"] if m["name"] == volume]
        assert m["mountPath"] == path and m["readOnly"] is True, (workload, m)
        (v,) = [v for v in specs[workload]["volumes"] if v["name"] == volume]
        assert v["secret"]["secretName"] == secret, (workload, v)

    for cloud in ("a", "b"):
        broker = container(f"rel-gridstat-broker-{cloud}", "broker")
        a = args(broker)
        for flag in (f"--tls-cert={tls}tls.crt", f"--tls-key={tls}tls.key", f"--tls-client-ca={tls}ca.crt",
                     f"--router-tls-ca={tls}ca.crt", f"--peer-tls-ca={tls}ca.crt", "--channel-auth=all",
                     "--channel-key-file=/etc/gridstat/channel-key/channel-key",
                     "--policy=/etc/gridstat/policy/policy.yaml", "--trusted-proxy=gridstat",
                     "--trusted-proxy=gridstat-*"):
            assert flag in broker["args"], (cloud, flag, a)
        secret_mounted(f"rel-gridstat-broker-{cloud}", broker, "tls", "gridstat-tls", "/etc/gridstat/tls")
        secret_mounted(f"rel-gridstat-broker-{cloud}", broker, "channel-key", "gridstat-channel-key",
                       "/etc/gridstat/channel-key")
        (key,) = [v for v in specs[f"rel-gridstat-broker-{cloud}"]["volumes"] if v["name"] == "channel-key"]
        assert key["secret"]["items"] == [{"key": "channel-key", "path": "channel-key"}]
        (policy,) = [v for v in specs[f"rel-gridstat-broker-{cloud}"]["volumes"] if v["name"] == "policy"]
        assert policy["configMap"]["name"] == "rel-gridstat-policy"
        sidecar = container(f"rel-gridstat-broker-{cloud}", "topology")
        assert {e["name"] for e in sidecar["env"]} >= {"GRIDSTAT_TLS_CA", "GRIDSTAT_TLS_CERT", "GRIDSTAT_TLS_KEY"}
        router = container(f"rel-gridstat-router-{cloud}", "router")
        for flag in (f"--tls-cert={tls}tls.crt", f"--tls-key={tls}tls.key", f"--tls-client-ca={tls}ca.crt"):
            assert flag in args(router).split(), (cloud, flag)
        # towards the broker: only edge routers proxy (their line of the router ConfigMap)
        (routers,) = [d for d in docs
                      if d["kind"] == "ConfigMap" and d["metadata"]["name"] == f"rel-gridstat-router-{cloud}"]
        # Every router calls its broker (it announces its start; an edge router also relays its clients).
        for line in routers["data"].values():
            for flag in (f"--broker-tls-ca={tls}ca.crt", f"--broker-tls-cert={tls}tls.crt",
                         f"--broker-tls-key={tls}tls.key"):
                assert flag in line.split(), (cloud, flag, line)
        secret_mounted(f"rel-gridstat-router-{cloud}", router, "tls", "gridstat-tls", "/etc/gridstat/tls")
    parent = container("rel-gridstat-parent", "parent")
    for flag in (f"--tls-cert={tls}tls.crt", f"--tls-client-ca={tls}ca.crt", f"--peer-tls-ca={tls}ca.crt"):
        assert flag in parent["args"], flag
    assert not any(a.startswith(("--channel-key-file", "--policy", "--trusted-proxy"))
                   for a in parent["args"])  # leaf-only flags
    # Inter-cloud channels are keyed by the parent (a random key per channel, sent to both leaves).
    assert "--channel-auth=routers" in parent["args"]
    secret_mounted("rel-gridstat-parent", parent, "tls", "gridstat-tls", "/etc/gridstat/tls")
    host = container("rel-gridstat-condensation-host", "condensation-host")
    assert f"--tls-ca={tls}ca.crt" in host["args"] and f"--tls-cert={tls}tls.crt" in host["args"]
    for workload, name, volume in (("rel-gridstat-operator", "operator", "tls"),
                                   ("rel-gridstat-test-brokers", "test", "tls"),
                                   ("rel-gridstat-parent", "topology", "tls-operator")):
        c = container(workload, name)
        assert {e["name"]: e["value"] for e in c["env"] if "value" in e}["GRIDSTAT_TLS_CA"] == f"{tls}ca.crt"
        secret_mounted(workload, c, volume, "gridstat-tls", "/etc/gridstat/tls")
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-gridstat-policy"]
    assert yaml.safe_load(cm["data"]["policy.yaml"]) == yaml.safe_load(SECURE.read_text())["authorization"]["policy"]
    # one shared certificate: its identities act as every component (--grant on every gRPC server)
    for workload, name in (("rel-gridstat-broker-a", "broker"), ("rel-gridstat-router-a", "router"),
                           ("rel-gridstat-parent", "parent"), ("rel-gridstat-admission", "admission")):
        a = args(container(workload, name)).replace("'", "").split()
        for role in ("admin", "broker", "router"):
            assert f"--grant={role}=gridstat-*" in a and f"--grant={role}=gridstat" in a, (workload, role, a)
    # explicitly insecure: none of the flags, volumes, Secrets or the ConfigMap
    plain = render(tools, extra=("--set", "tls.enabled=false", "--set", "dataPlaneAuth.enabled=false",
                                 "--set", "security.insecure=true"))
    assert not any(d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-gridstat-policy" for d in plain)
    assert not any(d["kind"] == "Secret" for d in plain)
    text = yaml.safe_dump_all(plain)
    assert "--channel-auth" not in text and "--policy=/" not in text and "--tls-" not in text


def test_network_policies_open_only_each_planes_traffic(tools: dict[str, str]) -> None:
    docs = render(tools, TWO_CLOUDS)
    policies = {d["metadata"]["name"].removeprefix("rel-gridstat-"): d["spec"] for d in docs
                if d["kind"] == "NetworkPolicy"}
    assert policies["default-deny"].get("ingress") is None and policies["default-deny"]["policyTypes"] == ["Ingress"]

    def components(peer: dict) -> set[str]:
        exprs = peer["podSelector"].get("matchExpressions") or []
        values = [e["values"] for e in exprs if e["key"] == "app.kubernetes.io/component"]
        labels = peer["podSelector"].get("matchLabels") or {}
        return set(values[0]) if values else {labels["app.kubernetes.io/component"]}

    def rules(name: str) -> dict[tuple[str, str], list[dict]]:
        return {(p.get("port", "*"), p["protocol"]): rule.get("from", []) for rule in policies[name]["ingress"]
                for p in rule["ports"]}

    brokers = rules("brokers")
    assert set(brokers) == {("grpc", "TCP"), ("metrics", "TCP")}
    assert components(brokers[("grpc", "TCP")][0]) == {"router", "operator", "broker", "parent", "test"}
    routers = rules("routers")
    assert set(routers) == {("events", "UDP"), ("control", "TCP"), ("metrics", "TCP")}
    assert [components(p) for p in routers[("control", "TCP")]] == [{"broker", "parent"}]  # brokers only
    # events: by default only from pods of the release namespace (its routers, condensation host and
    # clients), no other namespace; the edge proxies likewise
    assert routers[("events", "UDP")] == [{"podSelector": {}}]
    assert rules("edge-proxies")[("control", "TCP")] == [{"podSelector": {}}]
    admission = rules("admission")
    assert set(admission) == {("grpc", "TCP"), ("metrics", "TCP")}
    assert [components(p) for p in admission[("grpc", "TCP")]] == [{"broker"}]  # the leaf brokers only
    assert admission[("grpc", "TCP")][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "rel"
    edges = policies["edge-proxies"]
    (names,) = [e["values"] for e in edges["podSelector"]["matchExpressions"]
                if e["key"] == "statefulset.kubernetes.io/pod-name"]
    assert names == ["rel-gridstat-router-a-0", "rel-gridstat-router-b-0"]  # e1 and e2, not the border routers
    assert set(rules("edge-proxies")) == {("control", "TCP")}
    assert set(rules("condensation-host")) == {("*", "UDP")}
    assert components(rules("condensation-host")[("*", "UDP")][0]) == {"router"}
    assert set(rules("operator")) == {("health", "TCP")}
    for name in ("brokers", "routers", "admission"):
        (metrics,) = rules(name)[("metrics", "TCP")]
        assert set(metrics) == {"namespaceSelector"}


def test_clients_of_other_namespaces_reach_the_routers_only_when_opted_in(tools: dict[str, str],
                                                                          tmp_path: Path) -> None:
    def peers(docs: list[dict[str, Any]], policy: str, port: str) -> list[dict[str, Any]]:
        (spec,) = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == policy]
        return next(r["from"] for r in spec["ingress"] if r["ports"][0].get("port") == port)

    selector = {"matchLabels": {"gridstat.io/clients": "pacific"}}
    chosen = render(tools, write_values(tmp_path, "sel.yaml", {"networkPolicy": {"clientNamespaceSelector": selector}}))
    assert peers(chosen, "rel-gridstat-routers", "events") == [{"podSelector": {}}, {"namespaceSelector": selector}]
    assert peers(chosen, "rel-gridstat-edge-proxies", "control") == [{"podSelector": {}},
                                                                      {"namespaceSelector": selector}]
    anyns = render(tools, write_values(tmp_path, "any.yaml", {"networkPolicy": {"clientNamespaceSelector": {}}}))
    assert peers(anyns, "rel-gridstat-routers", "events") == [{"podSelector": {}}, {"namespaceSelector": {}}]


def test_names_that_are_not_dns_labels_are_refused_with_the_field_named(tools: dict[str, str],
                                                                       tmp_path: Path) -> None:
    for bad in ("North_A", "West.Coast", "-a", "a-"):
        values = write_values(tmp_path, "bad.yaml", {"clouds": [
            {"name": bad, "routers": [{"name": "e1", "id": 1, "role": "edge"}]}]})
        proc = helm(tools, "template", "rel", str(CHART), "-f", str(values), check=False)
        assert proc.returncode != 0 and "/clouds/0/name" in proc.stderr and bad in proc.stderr, (bad, proc.stderr)
        # without the schema (--skip-schema-validation), gridstat.validateValues says it in words
        proc = helm(tools, "template", "rel", str(CHART), "-f", str(values), "--skip-schema-validation", check=False)
        assert proc.returncode != 0 and "VALUES VALIDATION" in proc.stderr, proc.stderr
        assert f'clouds[0].name: "{bad}" is not a DNS-1123 label once lower-cased' in proc.stderr, proc.stderr
    values = write_values(tmp_path, "names.yaml", {
        "utility": "Pacific_Grid", "parent": {"enabled": True, "name": "north.region"},
        "clouds": [{"name": "A", "routers": [{"name": "e_1", "id": 1, "role": "edge"}]}]})
    proc = helm(tools, "template", "rel", str(CHART), "-f", str(values), check=False)
    for field in ("/utility", "/parent/name", "/clouds/0/routers/0/name"):
        assert field in proc.stderr, (field, proc.stderr)
    proc = helm(tools, "template", "rel", str(CHART), "-f", str(values), "--skip-schema-validation", check=False)
    for field in ("utility:", "parent.name:", "clouds[0].routers[0].name:"):
        assert field in proc.stderr, (field, proc.stderr)
    # two clouds whose names differ only in case would share every object
    values = write_values(tmp_path, "case.yaml", {"parent": {"enabled": True}, "clouds": [
        {"name": "a", "routers": [{"name": "e1", "id": 1, "role": "edge"}]},
        {"name": "A", "routers": [{"name": "e2", "id": 2, "role": "edge"}]}]})
    proc = helm(tools, "template", "rel", str(CHART), "-f", str(values), check=False)
    assert proc.returncode != 0 and 'cloud "A" appears twice' in proc.stderr, proc.stderr
    # upper case is fine: names are lower-cased into object names (the label keeps the cloud's name)
    ok = write_values(tmp_path, "ok.yaml", {"clouds": [
        {"name": "NorthA", "routers": [{"name": "E1", "id": 1, "role": "edge"}]}]})
    docs = render(tools, ok)
    assert {"rel-gridstat-broker-northa", "rel-gridstat-router-northa"} <= {d["metadata"]["name"] for d in docs}


def test_names_too_long_for_kubernetes_are_refused_with_the_field_and_the_length(tools: dict[str, str],
                                                                                 tmp_path: Path) -> None:
    release = "pacific-transmission-ops"  # 24 + "-gridstat" = 33 characters of prefix
    cloud = {"name": "northwest", "routers": [{"name": "e1", "id": 1, "role": "edge"}]}
    values = write_values(tmp_path, "long.yaml", {"clouds": [cloud]})
    proc = helm(tools, "template", release, str(CHART), "-f", str(values), check=False)
    # "-router-northwest" (17) -> 50 characters: fits in 52
    assert proc.returncode == 0, proc.stderr
    cloud["name"] = "northwest-1"  # -> 52: the most a StatefulSet name may have
    assert helm(tools, "template", release, str(CHART), "-f", str(values), check=False).returncode == 0
    cloud["name"] = "northwest-12"  # -> 53: its pods' controller-revision-hash label would pass 63
    values = write_values(tmp_path, "long.yaml", {"clouds": [cloud]})
    proc = helm(tools, "template", release, str(CHART), "-f", str(values), check=False)
    assert proc.returncode != 0 and "VALUES VALIDATION" in proc.stderr, proc.stderr
    assert (f'clouds[0].name: cloud "northwest-12" makes the StatefulSet name "{release}-gridstat-router-northwest-12" '
            "53 characters long, over the 52") in proc.stderr, proc.stderr
    # the parent and the single-role objects too
    values = write_values(tmp_path, "parent.yaml", {"parent": {"enabled": True}, "clouds": [
        {"name": "a", "routers": [{"name": "e1", "id": 1, "role": "edge"}]}]})
    long_release = "x" * 53
    proc = helm(tools, "template", long_release, str(CHART), "-f", str(values), check=False)
    assert "parent.enabled: the parent's StatefulSet name" in proc.stderr and "69 characters long" in proc.stderr
    assert f'admission.enabled: the admission object name "{long_release}-gridstat-admission"' in proc.stderr


def test_monitoring_objects_only_where_the_cluster_serves_them(tools: dict[str, str]) -> None:
    on = ("--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true")
    kinds = {d["kind"] for d in render(tools, extra=on)}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}  # no Prometheus Operator: skipped, no failure
    served = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
              "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    docs = render(tools, extra=on + served)
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"rel-gridstat-broker", "rel-gridstat-router", "rel-gridstat-admission"}
    assert monitors["rel-gridstat-admission"]["spec"]["selector"]["matchLabels"]["gridstat.io/scrape-job"] == \
        "gridstat-admission"
    assert sum(d["kind"] == "PrometheusRule" for d in docs) == 1
    # served but not enabled: none
    assert not {d["kind"] for d in render(tools, extra=served)} & {"ServiceMonitor", "PrometheusRule"}


def test_extra_args_take_a_flag_and_its_value_as_two_items(tools: dict[str, str], tmp_path: Path) -> None:
    docs = render(tools, extra=("--set", "router.extraArgs={--busy-poll-us,100}",
                                "--set", "broker.extraArgs={--admission-deadline-ms,1500}",
                                "--set", "operator.kopfArgs={--verbose}"))
    specs = _pod_specs(docs)
    broker = specs["rel-gridstat-broker-a"]["containers"][0]["args"]
    assert broker[-2:] == ["--admission-deadline-ms", "1500"]
    assert specs["rel-gridstat-operator"]["containers"][0]["args"][-1] == "--verbose"
    (script,) = specs["rel-gridstat-router-a"]["containers"][0]["args"]
    assert script.endswith(" '--busy-poll-us' '100'"), script
    # from a values file (numbers are floats there), with words the shell or Kubernetes would change
    tricky = ["--shape", "sub:ems=1000000:red", "it's $(HOME) \"q\" *", 2.5, True, 1000000]
    values = write_values(tmp_path, "args.yaml", {"router": {"extraArgs": tricky}, "broker": {"extraArgs": tricky}})
    specs = _pod_specs(render(tools, values))
    expected = ["--shape", "sub:ems=1000000:red", "it's $(HOME) \"q\" *", "2.5", "true", "1000000"]
    broker = specs["rel-gridstat-broker-a"]["containers"][0]["args"]
    # Kubernetes turns $$ into $: the broker gets each item literally
    assert [a.replace("$$", "$") for a in broker[-6:]] == expected
    (script,) = specs["rel-gridstat-router-a"]["containers"][0]["args"]
    tail = script.split("--healthz-max-age-ms=5000", 1)[1].replace("$$", "$")
    words = subprocess.run(["sh", "-c", f"printf '%s\\n' {tail}"], capture_output=True, text=True, check=True)
    assert words.stdout.splitlines() == expected, (tail, words.stdout)
    # the schema took them all; a newline inside one item is refused (it would end the shell line)
    bad = write_values(tmp_path, "nl.yaml", {"router": {"extraArgs": ["--a\nb"]}})
    proc = helm(tools, "template", "rel", str(CHART), "-f", str(bad), check=False)
    assert proc.returncode != 0 and "/router/extraArgs/0" in proc.stderr


def test_secret_names_and_user_strings_stay_strings(tools: dict[str, str], tmp_path: Path) -> None:
    """A Secret named `y`, `on` or `0123` (YAML 1.1 boolean or octal when unquoted) is rendered quoted."""
    values = write_values(tmp_path, "secrets.yaml", {
        "tls": {"enabled": True, "secretName": "on"},
        "dataPlaneAuth": {"enabled": True, "secretName": "y", "secretKey": "0123"},
        "broker": {"persistence": {"storageClass": "0777", "size": "1Gi"}},
        "parent": {"enabled": True, "name": "no"}, "utility": "yes",
        "clouds": [{"name": "y", "routers": [{"name": "on", "id": 1, "role": "edge"},
                                             {"name": "0123", "id": 2, "role": "border"}]},
                   {"name": "n", "routers": [{"name": "off", "id": 3, "role": "edge"}]}]})
    docs = render(tools, values)
    specs = _pod_specs(docs)
    broker = specs["rel-gridstat-broker-y"]
    secrets = {v["name"]: v["secret"] for v in broker["volumes"] if "secret" in v}
    assert secrets["tls"]["secretName"] == "on" and secrets["channel-key"]["secretName"] == "y"
    assert secrets["channel-key"]["items"] == [{"key": "0123", "path": "channel-key"}]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "rel-gridstat-broker-y"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "0777"
    assert sts["metadata"]["labels"]["gridstat.io/utility"] == "yes"
    assert sts["metadata"]["labels"]["gridstat.io/cloud"] == "y"
    (topology,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-gridstat-topology"]
    topo = yaml.safe_load(topology["data"]["topology.yaml"])
    assert topo["parent"]["name"] == "no"
    assert [c["name"] for c in topo["clouds"]] == ["y", "n"]
    assert [r["name"] for r in topo["clouds"][0]["routers"]] == ["on", "0123"]
    # unquoted in a values file, `y` is a YAML boolean: the schema refuses it with the field named
    unquoted = tmp_path / "unquoted.yaml"
    unquoted.write_text("dataPlaneAuth: {enabled: true, secretName: y}\n")
    proc = helm(tools, "template", "rel", str(CHART), "-f", str(unquoted), check=False)
    assert proc.returncode != 0 and "/dataPlaneAuth/secretName" in proc.stderr, proc.stderr
    raw = helm(tools, "template", "rel", str(CHART), "--namespace", "grid", "-f", str(values)).stdout
    for quoted in ('secretName: "y"', 'secretName: "on"', 'key: "0123"', 'storageClassName: "0777"'):
        assert quoted in raw, quoted


def test_admission_controller_is_a_workload_and_the_leaf_brokers_consult_it(tools: dict[str, str]) -> None:
    docs = render(tools, TWO_CLOUDS, SECURE)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    name = "rel-gridstat-admission"
    deploy = by[("Deployment", name)]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert by[("ServiceAccount", name)]["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["args"][:2] == ["gridstat", "admission"]
    tls = "/etc/gridstat/tls/"
    for flag in ("--host=0.0.0.0", "--port=7702", "--metrics-host=0.0.0.0", "--metrics-port=9103",
                 f"--tls-cert={tls}tls.crt", f"--tls-key={tls}tls.key", f"--tls-client-ca={tls}ca.crt"):
        assert flag in c["args"], flag
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(c)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"grpc": 7702, "metrics": 9103}
    service = by[("Service", name)]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"grpc": 7702, "metrics": 9103}
    assert service["metadata"]["labels"]["gridstat.io/scrape-job"] == "gridstat-admission"
    assert by[("PodDisruptionBudget", name)]["spec"]["maxUnavailable"] == 1
    for cloud in ("a", "b"):
        args = by[("StatefulSet", f"rel-gridstat-broker-{cloud}")]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--admission={name}.grid.svc:7702" in args and "--admission-deadline-ms=2000" in args
        assert f"--admission-tls-ca={tls}ca.crt" in args
    parent = by[("StatefulSet", "rel-gridstat-parent")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--admission") for a in parent)  # a parent never consults it
    # off: no object and no flag
    off = render(tools, extra=("--set", "admission.enabled=false"))
    assert not [d for d in off if d["metadata"]["name"] == name]
    assert "--admission" not in yaml.safe_dump_all(off)
    plain = render(tools, extra=("--set", "tls.enabled=false", "--set", "security.insecure=true"))  # no TLS
    args = _pod_specs(plain)["rel-gridstat-broker-a"]["containers"][0]["args"]
    assert "--admission=rel-gridstat-admission.grid.svc:7702" in args
    assert not any(a.startswith("--admission-tls-ca") for a in args)


def test_parent_probes_and_pdb_and_routers_spread_over_nodes(tools: dict[str, str], tmp_path: Path) -> None:
    docs = render(tools, TWO_CLOUDS)
    specs = _pod_specs(docs)
    parent = specs["rel-gridstat-parent"]["containers"][0]
    assert parent["startupProbe"]["tcpSocket"] == {"port": "grpc"}
    assert parent["startupProbe"]["failureThreshold"] * parent["startupProbe"]["periodSeconds"] >= 60
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == "rel-gridstat-parent"]
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "parent"
    for cloud in ("A", "B"):
        router = specs[f"rel-gridstat-router-{cloud.lower()}"]
        (term,) = router["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        labels = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        assert labels["gridstat.io/cloud"] == cloud and labels["app.kubernetes.io/component"] == "router"
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in router["affinity"]["podAntiAffinity"]
        # the liveness of a router is its loop's progress (/healthz), not an open port
        c = router["containers"][0]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert "--healthz-max-age-ms=5000" in c["args"][0]
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "grid", "operator": "In", "values": ["yes"]}]}]}}}
    values = write_values(tmp_path, "aff.yaml", {"router": {"affinity": own}})
    assert _pod_specs(render(tools, values))["rel-gridstat-router-a"]["affinity"] == own


def test_the_guides_example_installs_without_the_prometheus_operator(tools: dict[str, str], cluster: Cluster,
                                                                     tmp_path: Path) -> None:
    """docs/kubernetes.md's pacific.yaml enables ServiceMonitors and the PrometheusRule: on a cluster
    without their CRDs the install succeeds, creates neither, and NOTES says so."""
    guide = (ROOT / "docs" / "kubernetes.md").read_text()
    block = guide.split("```yaml\n# pacific.yaml\n", 1)[1].split("```", 1)[0]
    pacific = yaml.safe_load(block)
    assert pacific["serviceMonitor"]["enabled"] and pacific["prometheusRule"]["enabled"]
    values = write_values(tmp_path, "pacific.yaml", pacific)
    env = {**tools, "KUBECONFIG": str(cluster.kubeconfig)}
    namespace = "grid-pacific"
    proc = helm(env, "install", "pacific", str(CHART), "-n", namespace, "--create-namespace", "-f", str(values))
    try:
        assert "no ServiceMonitor was created" in proc.stdout and "the alerts were not installed" in proc.stdout
        manifest = helm(env, "get", "manifest", "pacific", "-n", namespace).stdout
        kinds = {d["kind"] for d in yaml.safe_load_all(manifest) if d}
        assert "ServiceMonitor" not in kinds and "PrometheusRule" not in kinds
        assert {"StatefulSet", "Deployment", "NetworkPolicy"} <= kinds
        assert cluster.kubectl("get", "deployment", "pacific-gridstat-admission", "-n", namespace,
                               check=False).returncode == 0
    finally:
        helm(env, "uninstall", "pacific", "-n", namespace, "--wait=false", check=False)
    # helm install refuses a name too long for Kubernetes before creating anything
    pacific["clouds"][0]["name"] = "northwest-12"
    values = write_values(tmp_path, "long.yaml", pacific)
    proc = helm(env, "install", "pacific-transmission-ops", str(CHART), "-n", namespace, "-f", str(values),
                check=False)
    assert proc.returncode != 0 and "clouds[0].name" in proc.stderr and "53 characters long" in proc.stderr
    assert helm(env, "status", "pacific-transmission-ops", "-n", namespace, check=False).returncode != 0


def test_a_server_side_dry_run_accepts_everything(tools: dict[str, str], cluster: Cluster) -> None:
    cluster.kubectl("create", "namespace", "dry")
    for values in ([], [TWO_CLOUDS], [TWO_CLOUDS, SECURE]):
        docs = render(tools, *values, namespace="dry", crds=True)
        # Pods are admitted only with their ServiceAccount present: create those for real first.
        accounts = [d for d in docs if d["kind"] == "ServiceAccount"]
        cluster.kubectl("apply", "-n", "dry", "-f", "-", input=yaml.safe_dump_all(accounts))
        proc = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-n", "dry", "-f", "-",
                               input=yaml.safe_dump_all(docs), check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("(server dry run)") == len(docs)


@pytest.fixture(scope="module")
def release(tools: dict[str, str], cluster: Cluster) -> Iterator[str]:
    namespace = "utility"
    env = {**tools, "KUBECONFIG": str(cluster.kubeconfig)}
    helm(env, "install", "rel", str(CHART), "--namespace", namespace, "--create-namespace",
         "--set", "operator.replicas=2")
    yield namespace
    helm(env, "uninstall", "rel", "--namespace", namespace, "--wait=false", check=False)


def test_helm_install_creates_every_object(tools: dict[str, str], cluster: Cluster, release: str) -> None:
    env = {**tools, "KUBECONFIG": str(cluster.kubeconfig)}
    manifest = [d for d in yaml.safe_load_all(helm(env, "get", "manifest", "rel", "-n", release).stdout) if d]
    assert len(manifest) >= 25
    for d in manifest:
        got = cluster.kubectl("get", d["kind"].lower() + "." + d["apiVersion"].split("/")[0]
                              if "/" in d["apiVersion"] else d["kind"].lower(), d["metadata"]["name"],
                              "-n", release, "-o", "name", check=False)
        assert got.returncode == 0, f"{d['kind']}/{d['metadata']['name']}: {got.stderr}"
    # kube-controller-manager acts on them: the operator's and the admission controller's Deployments
    # get their ReplicaSets.
    replicas: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rs = json.loads(cluster.kubectl("get", "replicasets", "-n", release, "-o", "json").stdout)["items"]
        replicas = {r["metadata"]["labels"]["app.kubernetes.io/component"]: r["spec"]["replicas"] for r in rs}
        if {"operator", "admission"} <= set(replicas):
            break
        time.sleep(0.5)
    assert replicas.get("operator") == 2 and replicas.get("admission") == 1, replicas
    for verb, resource, allowed in (("patch", "subscriptions.gridstat.io/status", "yes"),
                                    ("watch", "modes.gridstat.io", "yes"), ("get", "secrets", "no"),
                                    ("list", "pods", "no"), ("delete", "subscriptions.gridstat.io", "no")):
        answer = cluster.kubectl("auth", "can-i", verb, resource, "-n", release,
                                 f"--as=system:serviceaccount:{release}:rel-gridstat-operator", check=False)
        assert answer.stdout.strip() == allowed, (verb, resource, answer.stdout, answer.stderr)


def _can_i(cluster: Cluster, sa: str, namespace: str, verb: str, resource: str, *scope: str) -> str:
    answer = cluster.kubectl("auth", "can-i", verb, resource, *scope,
                             f"--as=system:serviceaccount:{namespace}:{sa}", check=False)
    return answer.stdout.strip()


def test_service_accounts_have_exactly_the_rights_they_need(cluster: Cluster, release: str) -> None:
    """kubectl auth can-i against the real API server's RBAC after helm install."""
    ns = ("-n", release)
    operator = "rel-gridstat-operator"
    for resource in ("subscriptions", "modes", "activemodes", "condensationfunctions"):
        for verb in ("get", "list", "watch", "patch"):
            assert _can_i(cluster, operator, release, verb, f"{resource}.gridstat.io", *ns) == "yes", (verb, resource)
        assert _can_i(cluster, operator, release, "patch", f"{resource}.gridstat.io/status", *ns) == "yes"
        for verb in ("create", "delete", "update", "deletecollection"):
            assert _can_i(cluster, operator, release, verb, f"{resource}.gridstat.io", *ns) == "no", (verb, resource)
        # namespaced: nothing in another namespace
        assert _can_i(cluster, operator, release, "list", f"{resource}.gridstat.io", "-n", "default") == "no"
    assert _can_i(cluster, operator, release, "create", "events", *ns) == "yes"
    assert _can_i(cluster, operator, release, "create", "events.events.k8s.io", *ns) == "yes"
    assert _can_i(cluster, operator, release, "patch", "kopfpeerings.kopf.dev", *ns) == "yes"
    assert _can_i(cluster, operator, release, "watch", "namespaces") == "yes"  # kopf's observation
    assert _can_i(cluster, operator, release, "list", "customresourcedefinitions.apiextensions.k8s.io") == "yes"
    for verb, resource, scope in (("create", "pods", ns), ("list", "pods", ns), ("exec", "pods", ns),
                                  ("get", "secrets", ns), ("list", "secrets", ("--all-namespaces",)),
                                  ("get", "configmaps", ns), ("delete", "namespaces", ()),
                                  ("create", "namespaces", ()), ("delete", "events", ns),
                                  ("create", "customresourcedefinitions.apiextensions.k8s.io", ()),
                                  ("create", "rolebindings.rbac.authorization.k8s.io", ns),
                                  ("escalate", "roles.rbac.authorization.k8s.io", ns),
                                  ("impersonate", "serviceaccounts", ns), ("create", "serviceaccounts/token", ns),
                                  ("patch", "statefulsets.apps", ns), ("delete", "kopfpeerings.kopf.dev", ns),
                                  ("get", "nodes", ())):
        assert _can_i(cluster, operator, release, verb, resource, *scope) == "no", (verb, resource, scope)
    # the data and management planes never talk to the Kubernetes API: no rights at all
    for sa in ("rel-gridstat-broker", "rel-gridstat-router", "rel-gridstat-condensation-host"):
        for verb, resource, scope in (("get", "subscriptions.gridstat.io", ns), ("list", "pods", ns),
                                      ("get", "secrets", ns), ("get", "configmaps", ns), ("create", "events", ns),
                                      ("list", "namespaces", ()), ("patch", "kopfpeerings.kopf.dev", ns),
                                      ("*", "*", ("--all-namespaces",))):
            assert _can_i(cluster, sa, release, verb, resource, *scope) == "no", (sa, verb, resource)
        account = cluster.get("serviceaccount", sa, release)
        assert account is not None and account["automountServiceAccountToken"] is False


def _sa_kubeconfig(cluster: Cluster, namespace: str, path: Path) -> Path:
    token = cluster.kubectl("create", "token", "rel-gridstat-operator", "-n", namespace, "--duration=1h").stdout
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token.strip()}}]
    path.write_text(yaml.safe_dump(config))
    return path


def test_two_operator_replicas_under_the_charts_rbac_take_turns(
        tools: dict[str, str], cluster: Cluster, grid: Grid, release: str, tmp_path: Path) -> None:
    kubeconfig = _sa_kubeconfig(cluster, release, tmp_path / "operator.kubeconfig")
    env = {**tools, "KUBECONFIG": str(kubeconfig), "GRIDSTAT_BROKERS": f"A={grid.address}",
           "GRIDSTAT_OPERATOR_PEERING_LIFETIME_S": "10", "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "standby.log").open("w+")
    standby = subprocess.Popen(
        [sys.executable, "-m", "gridstat_operator", "--namespace", release, "--peering", "rel-gridstat",
         "--liveness", "http://127.0.0.1:0/healthz"],
        env={**env, "GRIDSTAT_OPERATOR_PRIORITY": "1"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        with environment(**env, GRIDSTAT_OPERATOR_PRIORITY="1000"), \
                KopfRunner(["run", "--namespace", release, "--peering", "rel-gridstat", "-m",
                            "gridstat_operator.handlers"], timeout=60):
            cluster.apply(subscription("first", release, variables=("pmu1/volt",)))
            cluster.wait_for("gsub", "first", release, has_condition("Ready", "True"), timeout_s=30, what="Ready")
            # both replicas announce themselves in the chart's KopfPeering; the lower priority one waits
            peering = cluster.wait_for("kopfpeering", "rel-gridstat", release,
                                       lambda b: len((b or {}).get("status") or {}) == 2, what="two peers")
            assert peering is not None
            assert sorted(p["priority"] for p in peering["status"].values()) == [1, 1000]
            admitted = [e for e in cluster.events(release, "first") if e["reason"] == "Admitted"]
            assert sum(e.get("count", 1) for e in admitted) == 1  # acted on once, not twice
        # the active replica is gone: the standby resumes and takes the next resource
        cluster.apply(subscription("second", release, variables=("pmu1/angle",)))
        cluster.wait_for("gsub", "second", release, has_condition("Ready", "True"), timeout_s=60, what="Ready")
        cluster.kubectl("delete", "gsub", "first", "second", "-n", release, "--timeout=30s")
        assert grid.broker_subscriptions(f"k8s:{release}:") == []
    finally:
        children.stop(standby, grace_s=20)
        log.close()


def test_every_value_is_documented_in_the_schema_and_the_readme() -> None:
    import re

    text = (CHART / "values.yaml").read_text()
    params = re.findall(r"## @param (\S+) ", text)
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()
    for param in params:
        assert f"`{param}`" in readme, f"{param} is not in charts/gridstat/README.md"
        node = schema
        for part in re.findall(r"[^.\[\]]+|\[\d+\]", param):
            node = node["items"] if part.startswith("[") else node["properties"][part]
    values = yaml.safe_load(text)

    def covered(path: str) -> bool:
        return any(p == path or p.startswith((path + ".", path + "[")) or path.startswith(p + ".")
                   for p in params)

    for key, value in values.items():
        assert covered(key), f"{key} has no ## @param"
        if isinstance(value, dict):
            for sub in value:
                assert covered(f"{key}.{sub}"), f"{key}.{sub} has no ## @param"


def test_an_edge_border_router_gets_the_edge_proxy_policy_and_its_role(tools: dict[str, str],
                                                                       tmp_path: Path) -> None:
    """``role: edge-border`` (docs/topology.md, "Router roles"): the router's clients reach its control
    port like an edge router's, and the router starts with that role."""
    values = write_values(tmp_path, "eb.yaml", {"clouds": [{"name": "A", "routers": [
        {"name": "sub1", "id": 1, "role": "edge-border"}, {"name": "i1", "id": 2, "role": "internal"},
        {"name": "e1", "id": 3, "role": "edge"}], "links": [
        {"a": "sub1", "b": "i1", "latencyMs": 1}, {"a": "i1", "b": "e1", "latencyMs": 1}]}]})
    docs = render(tools, values)
    (edges,) = [d for d in docs
                if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "rel-gridstat-edge-proxies"]
    (names,) = [e["values"] for e in edges["spec"]["podSelector"]["matchExpressions"]
                if e["key"] == "statefulset.kubernetes.io/pod-name"]
    assert names == ["rel-gridstat-router-a-0", "rel-gridstat-router-a-2"]  # sub1 and e1, not i1
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "0" in (d.get("data") or {})
                  and "--role" in d["data"]["0"])
    assert "--name sub1 --id 1 --role edge-border " in config["data"]["0"], config["data"]["0"]
