"""The chart's SCADA and substation gateways, rendered by helm (docs/iec104.md, docs/dnp3.md, docs/goose.md,
"In Kubernetes"; docs/kubernetes.md, "What gets installed"): `gridstat iec104-gateway`, `gridstat dnp3-gateway`
and `gridstat goose-gateway` as publisher pods, each with its own certificate naming its publishers, its map
file from a ConfigMap, its NetworkPolicy (GOOSE: the node's network and CAP_NET_RAW instead) and the
cross-field checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridstat.cli.main import build_parser
from gridstat.gateways.dnp3 import load_point_map as load_dnp3_map
from gridstat.gateways.goose import load_map as load_goose_map
from gridstat.gateways.iec104 import load_point_map as load_iec104_map

from .test_chart import CHART, K8S_VERSION, helm, render, tools, write_values  # noqa: F401 - tools is a fixture
from .test_chart_security import cert_names, data, secrets, verify
from .test_chart_telemetry import INSECURE, KAFKA, MONITORING, ON, args_of, by_kind, failure, pod_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SCADA = Path(__file__).with_name("values-scada.yaml")
EDGE = "rel-gridstat-router-a-{}.rel-gridstat-router-a.grid.svc:7801"  # cloud A's router N, control port
TLS_ARGS = ["--tls-ca=/etc/gridstat/tls/ca.crt", "--tls-cert=/etc/gridstat/tls/tls.crt",
            "--tls-key=/etc/gridstat/tls/tls.key"]
KINDS = ("iec104-gateway", "dnp3-gateway", "goose-gateway")
ROUTERS = [{"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "rel",
                                                     "app.kubernetes.io/component": "router"}}}],
            "ports": [{"port": 7801, "protocol": "TCP"}, {"port": 7800, "protocol": "UDP"}]},
           {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]


def scada_objects(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["kind"], d["metadata"]["name"]) for d in docs
            if any(k in d["metadata"]["name"] for k in (*KINDS, "scada", "gateway-metrics", "gateways"))]


def policy(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = by_kind(docs, "NetworkPolicy")[name]["spec"]
    return spec


# -- off by default ---------------------------------------------------------------------------------------
def test_no_scada_object_by_default(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools)
    assert scada_objects(docs) == []
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment"):
            assert not [a for a in args_of(d) if a in KINDS], d["metadata"]["name"]


def test_helm_lint_passes_with_the_scada_gateways(tools: dict[str, str]) -> None:  # noqa: F811
    for values in ([], ["-f", str(SCADA)], ["-f", str(SCADA), *INSECURE]):
        proc = helm(tools, "lint", "--strict", str(CHART), "--kube-version", K8S_VERSION, *values)
        assert "0 chart(s) failed" in proc.stdout, proc.stdout


def test_rendered_scada_objects_pass_kubernetes_validate(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, SCADA, extra=KAFKA)
    out = tmp_path / "scada.yaml"
    out.write_text(yaml.safe_dump_all([d for d in docs if any(k in d["metadata"]["name"] for k in KINDS)]))
    proc = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
                           K8S_VERSION, str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the Deployments and their arguments ------------------------------------------------------------------
def test_the_rendered_arguments_are_the_commands_own(tools: dict[str, str]) -> None:  # noqa: F811
    """Every flag the chart passes is one the command takes (its own argparse parser), with the values given."""
    seen = set()
    for d in by_kind(render(tools, SCADA, extra=KAFKA), "Deployment").values():
        args = args_of(d)
        if args[1] not in KINDS:
            continue
        seen.add(args[1])
        parsed = build_parser(args[1]).parse_args(args[1:])
        assert parsed.command == args[1], d["metadata"]["name"]
        assert parsed.tls_ca == "/etc/gridstat/tls/ca.crt" and parsed.map in (None, "/etc/gridstat/map/map.yaml")
        if args[1] != "goose-gateway":
            assert parsed.allow_remote is True
        assert parsed.metrics_port == 9110 and parsed.kafka == "kafka-0.data:9092,kafka-1.data:9092"
        assert parsed.telemetry_exporter == f"grid/{d['metadata']['name']}"
    assert seen == set(KINDS)
    deployments = by_kind(render(tools, SCADA), "Deployment")
    north = build_parser("iec104-gateway").parse_args(args_of(deployments["rel-gridstat-iec104-gateway-sub-north"])[1:])
    assert (north.outstation, north.common_address, north.interval_ms, north.min_interval_ms, north.priority,
            north.interrogation_period_s, north.t3_s, north.name, north.edge, north.metrics_host) == (
        "10.20.30.41:2404", [47, 48], 2000, 10, 2, 600.0, 30.0, "sub-north", EDGE.format(0), "0.0.0.0")
    feeder = build_parser("dnp3-gateway").parse_args(args_of(deployments["rel-gridstat-dnp3-gateway-feeder7"])[1:])
    assert (feeder.outstation, feeder.address, feeder.master_address, feeder.unsolicited, feeder.event_poll_s,
            feeder.integrity_poll_s, feeder.interval_ms, feeder.priority) == (
        "rtu7.scada.example.net:20000", 10, 3, True, 0.0, 600.0, 500, 2)
    # defaults are the command's: nothing but the device, the edge router and TLS unless given
    assert args_of(deployments["rel-gridstat-dnp3-gateway-recloser2"]) == [
        "gridstat", "dnp3-gateway", "--outstation=10.20.30.43:20000", "--allow-remote", "--name=recloser2",
        f"--edge={EDGE.format(3)}", "--address=4", "--metrics-host=0.0.0.0", "--metrics-port=9110", *TLS_ARGS]
    bay = build_parser("goose-gateway").parse_args(args_of(deployments["rel-gridstat-goose-gateway-bay1"])[1:])
    assert (bay.interface, bay.name, bay.latency_ms, bay.metrics_host, bay.metrics_port) == (
        "eth1", "gridstat-goose-gateway-bay1", 20, "$(POD_IP)", 9110)


def test_each_gateway_is_a_recreated_publisher_pod(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, SCADA, extra=KAFKA)
    deployments = by_kind(docs, "Deployment")
    for name, kind in (("rel-gridstat-iec104-gateway-sub-north", "iec104-gateway"),
                       ("rel-gridstat-dnp3-gateway-feeder7", "dnp3-gateway"),
                       ("rel-gridstat-goose-gateway-bay1", "goose-gateway")):
        d = deployments[name]
        assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == kind
        assert labels["gridstat.io/scada"] == name.split("-gateway-")[1]
        pod = pod_of(d)
        (c,) = pod["containers"]
        assert pod["serviceAccountName"] == "rel-gridstat-scada"
        assert c["resources"]["limits"] == {"memory": "512Mi"}
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        # /metrics and /healthz: a port, the probes, the gateways' PodMonitor labels
        assert labels["gridstat.io/scrape-job"] == "gridstat-gateway" and labels["gridstat.io/cloud"] == "A"
        assert c["ports"] == [{"name": "metrics", "containerPort": 9110, "protocol": "TCP"}]
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "rel-gridstat-scada" in by_kind(docs, "ServiceAccount")
    assert by_kind(docs, "ServiceAccount")["rel-gridstat-scada"]["automountServiceAccountToken"] is False
    assert not [n for n in by_kind(docs, "Service") if any(k in n for k in KINDS)]  # nothing connects to one


def test_an_items_resources_win_over_scada_resources(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    own = {"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
    values = write_values(tmp_path, "res.json", {"scada": {"dnp3": [
        {"name": "d1", "edgeRouter": "e1", "outstation": "10.0.0.3:20000", "address": 1, "resources": own},
        {"name": "d2", "edgeRouter": "e1", "outstation": "10.0.0.4:20000", "address": 2}]}})
    deployments = by_kind(render(tools, values), "Deployment")
    assert pod_of(deployments["rel-gridstat-dnp3-gateway-d1"])["containers"][0]["resources"] == own
    assert pod_of(deployments["rel-gridstat-dnp3-gateway-d2"])["containers"][0]["resources"]["limits"] == \
        {"memory": "512Mi"}


def test_a_map_is_a_configmap_the_command_reads(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, SCADA)
    maps = by_kind(docs, "ConfigMap")
    loaders = {"iec104-gateway": load_iec104_map, "dnp3-gateway": load_dnp3_map, "goose-gateway": load_goose_map}
    for d in by_kind(docs, "Deployment").values():
        args = args_of(d)
        if args[1] not in KINDS:
            continue
        name = d["metadata"]["name"]
        pod = pod_of(d)
        mount = {"name": "map", "mountPath": "/etc/gridstat/map", "readOnly": True}
        mounted = mount in pod["containers"][0]["volumeMounts"]
        if name in maps:
            assert "--map=/etc/gridstat/map/map.yaml" in args and mounted, name
            assert {"name": "map", "configMap": {"name": name}} in pod["volumes"]
            assert d["spec"]["template"]["metadata"]["annotations"]["checksum/map"]
            path = tmp_path / f"{name}.yaml"
            path.write_text(maps[name]["data"]["map.yaml"])
            loaders[args[1]](str(path))  # the command's own loader takes it (raises otherwise)
        else:
            assert not [a for a in args if a.startswith("--map")] and not mounted, name
    iec = load_iec104_map(str(tmp_path / "rel-gridstat-iec104-gateway-sub-north.yaml"))
    assert dict(iec.stations) == {47: "sub_north"}
    goose = load_goose_map(str(tmp_path / "rel-gridstat-goose-gateway-bay1.yaml"))
    assert len(goose.subscribe) == 1 and len(goose.publish) == 1
    assert set(maps) == {"rel-gridstat-iec104-gateway-sub-north", "rel-gridstat-dnp3-gateway-feeder7",
                         "rel-gridstat-goose-gateway-bay1"} | {n for n in maps if not any(k in n for k in KINDS)}


def test_goose_runs_on_the_nodes_network_with_net_raw_only(tools: dict[str, str]) -> None:  # noqa: F811
    d = by_kind(render(tools, SCADA), "Deployment")["rel-gridstat-goose-gateway-bay1"]
    pod = pod_of(d)
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"gridstat.io/station-bus": "true"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
    # the other gateways: the chart's restricted context, the pod network
    for name in ("rel-gridstat-iec104-gateway-sub-north", "rel-gridstat-dnp3-gateway-feeder7"):
        other = pod_of(by_kind(render(tools, SCADA), "Deployment")[name])
        assert "hostNetwork" not in other
        assert other["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert "runAsUser" not in other["containers"][0]["securityContext"]


# -- TLS: a certificate per item naming its publishers ------------------------------------------------------
def test_each_item_has_its_own_certificate_naming_its_publishers(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, SCADA)
    s = secrets(docs)
    ca = data(s["rel-gridstat-ca"], "tls.crt")
    expected = {  # Secret -> (CN, the DNS SANs after the identity): the publishers it publishes as
        "rel-gridstat-tls-iec104-gateway-sub-north": ("gridstat-iec104-gateway-sub-north",
                                                      ["DNS:ca48", "DNS:feeder1", "DNS:sub_north"]),
        "rel-gridstat-tls-iec104-gateway-sub-south": ("gridstat-iec104-gateway-sub-south", ["DNS:sub_south"]),
        "rel-gridstat-tls-dnp3-gateway-feeder7": ("gridstat-dnp3-gateway-feeder7", ["DNS:feeder7", "DNS:grid"]),
        "rel-gridstat-tls-dnp3-gateway-recloser2": ("gridstat-dnp3-gateway-recloser2", ["DNS:dnp4"]),
        "rel-gridstat-tls-goose-gateway-bay1": ("gridstat-goose-gateway-bay1", ["DNS:ied1"])}
    for name, (cn, names) in expected.items():
        cert = data(s[name], "tls.crt")
        verify(ca, cert, tmp_path)
        got_cn, sans = cert_names(cert)
        assert got_cn == cn, name
        assert sans == [f"DNS:{cn}", *names, "DNS:localhost", "IP Address:127.0.0.1"], (name, sans)
    for d in by_kind(docs, "Deployment").values():
        if any(k in d["metadata"]["name"] for k in KINDS):
            pod = pod_of(d)
            tls = next(v for v in pod["volumes"] if v["name"] == "tls")
            assert tls["secret"]["secretName"] == d["metadata"]["name"].replace("gridstat-", "gridstat-tls-")
            assert {"name": "tls", "mountPath": "/etc/gridstat/tls", "readOnly": True} in \
                pod["containers"][0]["volumeMounts"]
            assert args_of(d)[-len(TLS_ARGS):] == TLS_ARGS or "--t3-s" in args_of(d)
    # insecure: no certificates, no --tls-* flags
    plain = render(tools, SCADA, extra=INSECURE)
    assert not [n for n in secrets(plain) if any(k in n for k in KINDS)]
    for d in by_kind(plain, "Deployment").values():
        if any(k in d["metadata"]["name"] for k in KINDS):
            assert not [a for a in args_of(d) if a.startswith("--tls")], d["metadata"]["name"]
            assert not [v for v in pod_of(d)["volumes"] if v["name"] == "tls"]


# -- NetworkPolicies and monitoring -------------------------------------------------------------------------
def test_network_policies_let_a_gateway_reach_its_outstation_routers_and_dns_only(
        tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, SCADA)
    north = policy(docs, "rel-gridstat-iec104-gateway-sub-north")
    assert north["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "iec104-gateway",
        "gridstat.io/scada": "sub-north"}
    assert north["policyTypes"] == ["Egress"] and "ingress" not in north
    assert north["egress"] == [{"ports": [{"port": 2404, "protocol": "TCP"}],
                                "to": [{"ipBlock": {"cidr": "10.20.30.41/32"}}]}, *ROUTERS]
    # an outstation by DNS name: any address on its port
    assert policy(docs, "rel-gridstat-iec104-gateway-sub-south")["egress"] == [
        {"ports": [{"port": 2404, "protocol": "TCP"}]}, *ROUTERS]
    assert policy(docs, "rel-gridstat-dnp3-gateway-feeder7")["egress"] == [
        {"ports": [{"port": 20000, "protocol": "TCP"}]}, *ROUTERS]
    assert policy(docs, "rel-gridstat-dnp3-gateway-recloser2")["egress"][0] == {
        "ports": [{"port": 20000, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.20.30.43/32"}}]}
    # the IEC 104 and DNP3 gateways' /metrics from monitoring; GOOSE (hostNetwork) gets no policy at all
    metrics = policy(docs, "rel-gridstat-gateway-metrics")
    assert metrics["podSelector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/instance", "operator": "In", "values": ["rel"]},
        {"key": "app.kubernetes.io/component", "operator": "In", "values": ["iec104-gateway", "dnp3-gateway"]}]
    assert metrics["ingress"] == [{"from": [{"namespaceSelector": {}}],
                                   "ports": [{"port": "metrics", "protocol": "TCP"}]}]
    assert not [n for n in by_kind(docs, "NetworkPolicy") if "goose" in n]
    # outstationTo replaces the default peer
    peers = [{"ipBlock": {"cidr": "10.20.30.0/24"}}]
    values = write_values(tmp_path, "peers.json", {"scada": {"dnp3": [
        {"name": "r1", "edgeRouter": "e1", "outstation": "rtu1.example.net:20001", "address": 1,
         "outstationTo": peers}]}})
    r1 = policy(render(tools, values), "rel-gridstat-dnp3-gateway-r1")
    assert r1["egress"][0] == {"ports": [{"port": 20001, "protocol": "TCP"}], "to": peers}
    assert not by_kind(render(tools, SCADA, extra=("--set", "networkPolicy.enabled=false")), "NetworkPolicy")


def test_the_gateways_podmonitor_scrapes_every_gateway(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, SCADA, extra=ON + MONITORING)
    monitors = by_kind(docs, "PodMonitor")
    assert set(monitors) == {"rel-gridstat-gateways"}  # no subscriber pod in this release
    spec = monitors["rel-gridstat-gateways"]["spec"]
    assert spec["jobLabel"] == "gridstat.io/scrape-job"
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/instance": "rel",
                                               "gridstat.io/scrape-job": "gridstat-gateway"}
    assert spec["podMetricsEndpoints"][0]["port"] == "metrics"
    assert not by_kind(render(tools, SCADA, extra=ON + MONITORING + ("--set", "serviceMonitor.gateways=false")),
                       "PodMonitor")
    assert not by_kind(render(tools, SCADA, extra=MONITORING), "PodMonitor")


# -- the cross-field checks and the schema ------------------------------------------------------------------
def test_the_chart_refuses_scada_items_it_cannot_run(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    values = write_values(tmp_path, "bad.json", {"scada": {
        "iec104": [{"name": "n1", "edgeRouter": "i1", "outstation": "10.0.0.1:2404"},
                   {"name": "n1", "cloud": "Z", "edgeRouter": "e1", "outstation": "10.0.0.2:2404",
                    "commonAddresses": [1]}],
        "dnp3": [{"name": "d1", "edgeRouter": "e9", "outstation": "10.0.0.3:20000", "address": 1}],
        "goose": [{"name": "g1", "edgeRouter": "e1", "interface": "eth1", "map": {}, "metricsPort": 7800}]}})
    err = failure(tools, "-f", str(values))
    assert "VALUES VALIDATION" in err
    for message in (
            'scada.iec104[0].edgeRouter: "i1" is not an edge router of cloud "A"',
            "scada.iec104[0]: under tls.enabled the broker takes a publisher name only from a certificate",
            'scada.iec104[1].name: "n1" appears twice in scada.iec104',
            'scada.iec104[1].cloud: cloud "Z" is not in clouds',
            'scada.dnp3[0].edgeRouter: "e9" is not an edge router of cloud "A"',
            "scada.goose[0].map: give the map file's subscribe and/or publish blocks",
            "scada.goose[0].metricsPort: 7800 is router.eventPort"):
        assert message in err, (message, err)
    # without generated certificates the gateway need not say which publishers it is
    assert "scada.iec104[0]: under" not in failure(tools, "-f", str(values), *INSECURE)
    # object names past 63 characters are refused, not truncated
    long = write_values(tmp_path, "long.json", {"scada": {"dnp3": [
        {"name": "d" * 32, "edgeRouter": "e1", "outstation": "10.0.0.3:20000", "address": 1}]}})
    err = helm(tools, "template", "pacific-transmission", str(CHART), "-f", str(long), check=False).stderr
    assert f'scada.dnp3[0].name: "{"d" * 32}" makes the object name' in err and "over the 63" in err, err


def test_the_schema_checks_each_items_fields(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    cases = [
        ({"iec104": [{"name": "n1", "edgeRouter": "e1"}]}, "/scada/iec104/0", "outstation"),
        ({"iec104": [{"name": "N_1", "edgeRouter": "e1", "outstation": "h:1"}]}, "/scada/iec104/0/name", ""),
        ({"iec104": [{"name": "n1", "edgeRouter": "e1", "outstation": "no-port"}]}, "/scada/iec104/0/outstation", ""),
        ({"iec104": [{"name": "n1", "edgeRouter": "e1", "outstation": "h:1", "commonAddresses": [0]}]},
         "/scada/iec104/0/commonAddresses/0", ""),
        ({"iec104": [{"name": "n1", "edgeRouter": "e1", "outstation": "h:1", "priority": 7}]},
         "/scada/iec104/0/priority", ""),
        ({"dnp3": [{"name": "d1", "edgeRouter": "e1", "outstation": "h:1"}]}, "/scada/dnp3/0", "address"),
        ({"dnp3": [{"name": "d1", "edgeRouter": "e1", "outstation": "h:1", "address": 70000}]},
         "/scada/dnp3/0/address", ""),
        ({"dnp3": [{"name": "d1", "edgeRouter": "e1", "outstation": "h:1", "address": 1, "priority": 0}]},
         "/scada/dnp3/0/priority", ""),
        ({"goose": [{"name": "g1", "edgeRouter": "e1", "map": {"subscribe": []}}]}, "/scada/goose/0", "interface"),
        ({"goose": [{"name": "g1", "edgeRouter": "e1", "interface": "eth1"}]}, "/scada/goose/0", "map"),
        ({"goose": [{"name": "g1", "edgeRouter": "e1", "interface": "eth1", "map": {}, "mystery": 1}]},
         "/scada/goose/0", "mystery"),
        ({"iec104": [{"name": "n1", "edgeRouter": "e1", "outstation": "h:1", "publishers": ["a/b"]}]},
         "/scada/iec104/0/publishers/0", ""),
    ]
    for i, (scada, where, what) in enumerate(cases):
        err = failure(tools, "-f", str(write_values(tmp_path, f"schema-{i}.json", {"scada": scada})))
        assert where in err and what in err, (scada, err)
