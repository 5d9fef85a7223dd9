"""The chart's STTP (IEEE 2664) roles, rendered by helm (docs/sttp.md, "In Kubernetes"; docs/kubernetes.md,
"What gets installed"): `gridstat sttp-server` as a subscriber pod with a Service, `gridstat sttp-gateway` as
a publisher pod, each with its own certificate, its NetworkPolicies and the cross-field checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridstat.cli.main import build_parser

from .test_chart import CHART, K8S_VERSION, helm, render, tools, write_values  # noqa: F401 - tools is a fixture
from .test_chart_security import cert_names, data, secrets, verify
from .test_chart_telemetry import INSECURE, KAFKA, MONITORING, ON, args_of, by_kind, failure, pod_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STTP = Path(__file__).with_name("values-sttp.yaml")
EDGE = "rel-gridstat-router-a-{}.rel-gridstat-router-a.grid.svc:7801"  # cloud A's router N, control port
TLS_ARGS = ["--tls-ca=/etc/gridstat/tls/ca.crt", "--tls-cert=/etc/gridstat/tls/tls.crt",
            "--tls-key=/etc/gridstat/tls/tls.key"]


def sttp_objects(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["kind"], d["metadata"]["name"]) for d in docs if "sttp" in d["metadata"]["name"]]


def policy(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = by_kind(docs, "NetworkPolicy")[name]["spec"]
    return spec


# -- off by default ---------------------------------------------------------------------------------------
def test_no_sttp_object_by_default(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools)
    assert sttp_objects(docs) == []
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment"):
            assert "sttp" not in " ".join(args_of(d)), d["metadata"]["name"]


def test_helm_lint_passes_with_the_sttp_roles(tools: dict[str, str]) -> None:  # noqa: F811
    for values in ([], ["-f", str(STTP)], ["-f", str(STTP), *INSECURE]):
        proc = helm(tools, "lint", "--strict", str(CHART), "--kube-version", K8S_VERSION, *values)
        assert "0 chart(s) failed" in proc.stdout, proc.stdout


def test_rendered_sttp_objects_pass_kubernetes_validate(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, STTP)
    out = tmp_path / "sttp.yaml"
    out.write_text(yaml.safe_dump_all([d for d in docs if "sttp" in d["metadata"]["name"]]))
    proc = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
                           K8S_VERSION, str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the server: a subscriber pod with a Service --------------------------------------------------------
def test_a_server_is_a_subscriber_pod_serving_its_sttp_port(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, STTP)
    deployments = by_kind(docs, "Deployment")
    d = deployments["rel-gridstat-sttp-server-cc1"]
    assert args_of(d) == [
        "gridstat", "sttp-server", "--name=gridstat-sttp-server-cc1",
        "--where=signal = 'FREQ' and not source = 'sttp'", "--interval-ms=100", "--latency-ms=50",
        "--redundancy=1", "--max-clients=64", "--listen=0.0.0.0:7165", "--allow-remote", "--retry-rejected",
        f"--edge={EDGE.format(3)}", "--metrics-host=0.0.0.0", "--metrics-port=9108", *TLS_ARGS]
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
    labels = d["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "sttp-server" and labels["gridstat.io/sttp"] == "cc1"
    assert labels["gridstat.io/cloud"] == "A" and labels["gridstat.io/scrape-job"] == "gridstat-subscriber"
    assert "gridstat.io/scrape-job" not in d["spec"]["selector"]["matchLabels"]
    pod = pod_of(d)
    (c,) = pod["containers"]
    assert pod["serviceAccountName"] == "rel-gridstat-sttp"
    assert by_kind(docs, "ServiceAccount")["rel-gridstat-sttp"]["automountServiceAccountToken"] is False
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
    assert c["ports"] == [{"name": "sttp", "containerPort": 7165, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 9108, "protocol": "TCP"}]
    assert c["readinessProbe"]["tcpSocket"] == {"port": "sttp"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["resources"]["limits"] == {"memory": "512Mi"}
    # the other server: its variables, its options, its port, its extra flags last
    other = args_of(deployments["rel-gridstat-sttp-server-cc2"])
    for flag in ("--variables=pmu1/freq,pmu1/va:phasor", "--interval-ms=33", "--latency-ms=40", "--redundancy=2",
                 "--max-clients=8", "--follow-s=0.5", "--listen=0.0.0.0:7200", f"--edge={EDGE.format(0)}"):
        assert flag in other, flag
    assert not [a for a in other if a.startswith("--where")]
    assert other[-2:] == ["--stats-every-s", "10"]
    # a ClusterIP Service on the STTP port for each, selecting that server's pod alone
    services = by_kind(docs, "Service")
    for name, port in (("rel-gridstat-sttp-server-cc1", 7165), ("rel-gridstat-sttp-server-cc2", 7200)):
        spec = services[name]["spec"]
        assert spec["type"] == "ClusterIP"
        assert spec["ports"] == [{"name": "sttp", "port": port, "targetPort": "sttp", "protocol": "TCP"}]
        assert spec["selector"]["app.kubernetes.io/component"] == "sttp-server"
        assert spec["selector"]["gridstat.io/sttp"] == name.rsplit("-", 1)[1]
    assert not [n for n in services if "sttp-gateway" in n]  # nothing connects to a gateway


def test_the_rendered_arguments_are_the_commands_own(tools: dict[str, str]) -> None:  # noqa: F811
    """Every flag the chart passes is one `gridstat sttp-server` / `sttp-gateway` takes (their parsers)."""
    for d in by_kind(render(tools, STTP, extra=KAFKA), "Deployment").values():
        args = args_of(d)
        if args[1].startswith("sttp-"):
            parsed = build_parser(args[1]).parse_args(args[1:])
            assert parsed.command == args[1] and parsed.allow_remote is True, d["metadata"]["name"]
            if args[1] == "sttp-server":
                assert parsed.retry_rejected and parsed.metrics_port == 9108 and parsed.kafka


def test_a_server_exports_to_kafka_and_is_scraped_by_the_subscribers_podmonitor(
        tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, STTP, extra=KAFKA + ON + MONITORING)
    deployments = by_kind(docs, "Deployment")
    args = args_of(deployments["rel-gridstat-sttp-server-cc1"])
    assert "--kafka=kafka-0.data:9092,kafka-1.data:9092" in args
    assert "--telemetry-exporter=grid/rel-gridstat-sttp-server-cc1" in args
    assert not [a for a in args_of(deployments["rel-gridstat-sttp-gateway-openpdc"]) if a.startswith("--kafka")]
    (monitor,) = by_kind(docs, "PodMonitor").values()
    assert monitor["spec"]["selector"]["matchLabels"]["gridstat.io/scrape-job"] == "gridstat-subscriber"
    # a release whose only subscriber pods are STTP servers still gets the PodMonitor and the /metrics policy
    only = render(tools, write_values(tmp_path, "only.json", {"sttp": {"servers": [
        {"name": "cc1", "edgeRouter": "e2", "where": "signal = 'FREQ'", "intervalMs": 100}]}}), extra=ON + MONITORING)
    assert by_kind(only, "PodMonitor") and "rel-gridstat-subscriber-metrics" in by_kind(only, "NetworkPolicy")


# -- the gateway: a publisher pod ---------------------------------------------------------------------------
def test_a_gateway_is_a_publisher_pod_of_its_source(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, STTP)
    deployments = by_kind(docs, "Deployment")
    d = deployments["rel-gridstat-sttp-gateway-openpdc"]
    assert args_of(d) == [
        "gridstat", "sttp-gateway", "--source=10.20.30.40:7165", "--allow-remote", "--name=openpdc",
        f"--edge={EDGE.format(0)}", "--filter=FILTER ActiveMeasurements WHERE SignalType = 'FREQ'",
        "--frames-per-s=30", "--publisher=openpdc", "--priority=2", *TLS_ARGS]
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
    labels = d["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "sttp-gateway" and labels["gridstat.io/sttp"] == "openpdc"
    assert "gridstat.io/scrape-job" not in labels  # a publisher: no /metrics of its own
    pod = pod_of(d)
    (c,) = pod["containers"]
    assert pod["serviceAccountName"] == "rel-gridstat-sttp" and "ports" not in c
    # defaults are the command's: no filter, rate or publisher flag unless given
    relay = args_of(deployments["rel-gridstat-sttp-gateway-relay"])
    assert relay == ["gridstat", "sttp-gateway", "--source=rel-gridstat-sttp-server-cc1.grid.svc:7165",
                     "--allow-remote", "--name=relay", f"--edge={EDGE.format(3)}", *TLS_ARGS]


# -- TLS: a certificate per item ----------------------------------------------------------------------------
def test_each_item_has_its_own_certificate_naming_what_it_is(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, STTP)
    s = secrets(docs)
    ca = data(s["rel-gridstat-ca"], "tls.crt")
    expected = {  # Secret -> (CN, the DNS SANs after the identity): a gateway's publisher names
        "rel-gridstat-tls-sttp-server-cc1": ("gridstat-sttp-server-cc1", []),
        "rel-gridstat-tls-sttp-server-cc2": ("gridstat-sttp-server-cc2", []),
        "rel-gridstat-tls-sttp-gateway-openpdc": ("gridstat-sttp-gateway-openpdc", ["DNS:openpdc"]),
        "rel-gridstat-tls-sttp-gateway-relay": ("gridstat-sttp-gateway-relay", ["DNS:pmu-a1", "DNS:pmu-a2"])}
    for name, (cn, names) in expected.items():
        cert = data(s[name], "tls.crt")
        verify(ca, cert, tmp_path)
        got_cn, sans = cert_names(cert)
        assert got_cn == cn, name
        assert sans == [f"DNS:{cn}", *names, "DNS:localhost", "IP Address:127.0.0.1"], (name, sans)
    for d in by_kind(docs, "Deployment").values():
        if "sttp" in d["metadata"]["name"]:
            pod = pod_of(d)
            tls = next(v for v in pod["volumes"] if v["name"] == "tls")
            assert tls["secret"]["secretName"] == d["metadata"]["name"].replace("gridstat-", "gridstat-tls-")
            assert {"name": "tls", "mountPath": "/etc/gridstat/tls", "readOnly": True} in \
                pod["containers"][0]["volumeMounts"]
    # insecure: no certificates, no --tls-* flags; the server's name stays its identity
    plain = render(tools, STTP, extra=INSECURE)
    assert not [n for n in secrets(plain) if "sttp" in n]
    for d in by_kind(plain, "Deployment").values():
        if "sttp" in d["metadata"]["name"]:
            assert not [a for a in args_of(d) if a.startswith("--tls")], d["metadata"]["name"]
            assert not [v for v in pod_of(d)["volumes"] if v["name"] == "tls"]
    assert "--name=gridstat-sttp-server-cc1" in args_of(by_kind(plain, "Deployment")["rel-gridstat-sttp-server-cc1"])


# -- NetworkPolicies ----------------------------------------------------------------------------------------
def test_network_policies_open_the_sttp_port_and_the_events_and_close_the_gateways(
        tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    docs = render(tools, STTP)
    servers = policy(docs, "rel-gridstat-sttp-servers")
    assert servers["podSelector"]["matchLabels"] == {"app.kubernetes.io/instance": "rel",
                                                     "app.kubernetes.io/component": "sttp-server"}
    assert servers["ingress"] == [{"from": [{"podSelector": {}}], "ports": [{"port": "sttp", "protocol": "TCP"}]}]
    events = policy(docs, "rel-gridstat-sttp-server-events")
    (rule,) = events["ingress"]
    assert rule["ports"] == [{"protocol": "UDP"}]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "rel",
                                                             "app.kubernetes.io/component": "router"}}}]
    metrics = policy(docs, "rel-gridstat-subscriber-metrics")
    assert metrics["podSelector"]["matchLabels"]["gridstat.io/scrape-job"] == "gridstat-subscriber"
    routers = [{"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "rel",
                                                         "app.kubernetes.io/component": "router"}}}],
                "ports": [{"port": 7801, "protocol": "TCP"}, {"port": 7800, "protocol": "UDP"}]},
               {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]
    # a gateway: egress only, to its source (its IP when it is one), the release's routers and DNS
    openpdc = policy(docs, "rel-gridstat-sttp-gateway-openpdc")
    assert openpdc["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "sttp-gateway",
        "gridstat.io/sttp": "openpdc"}
    assert openpdc["policyTypes"] == ["Egress"] and "ingress" not in openpdc
    assert openpdc["egress"] == [{"ports": [{"port": 7165, "protocol": "TCP"}],
                                  "to": [{"ipBlock": {"cidr": "10.20.30.40/32"}}]}, *routers]
    # a source by DNS name: any address on its port
    assert policy(docs, "rel-gridstat-sttp-gateway-relay")["egress"] == [
        {"ports": [{"port": 7165, "protocol": "TCP"}]}, *routers]
    # sttp.allowFrom and a gateway's sourceTo replace the defaults
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "control-centre"}}}]
    source = [{"ipBlock": {"cidr": "10.20.30.0/24"}}]
    values = write_values(tmp_path, "peers.json", {"sttp": {"allowFrom": peers, "gateways": [
        {"name": "g1", "edgeRouter": "e1", "source": "pdc.example.net:7165", "publisher": "pdc", "sourceTo": source}]}})
    docs = render(tools, STTP, values)
    assert policy(docs, "rel-gridstat-sttp-servers")["ingress"][0]["from"] == peers
    (g1,) = [p for n, p in by_kind(docs, "NetworkPolicy").items() if n.startswith("rel-gridstat-sttp-gateway-")]
    assert g1["spec"]["egress"][0] == {"ports": [{"port": 7165, "protocol": "TCP"}], "to": source}
    # no NetworkPolicies at all when they are off
    assert not by_kind(render(tools, STTP, extra=("--set", "networkPolicy.enabled=false")), "NetworkPolicy")


# -- the cross-field checks ---------------------------------------------------------------------------------
def test_the_chart_refuses_sttp_items_it_cannot_run(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    values = write_values(tmp_path, "bad.json", {"sttp": {
        "servers": [{"name": "cc1", "edgeRouter": "i1", "intervalMs": 100, "port": 9108},
                    {"name": "cc1", "cloud": "Z", "edgeRouter": "e2", "where": "x = 1", "intervalMs": 100}],
        "gateways": [{"name": "g1", "edgeRouter": "e9", "source": "10.0.0.1:7165"}]}})
    err = failure(tools, "-f", str(values))
    assert "VALUES VALIDATION" in err
    for message in (
            'sttp.servers[0].edgeRouter: "i1" is not an edge router of cloud "A"',
            "sttp.servers[0]: give where (a where-expression, docs/queries.md) or variables",
            "sttp.servers[0].port: 9108 is sttp.metricsPort",
            'sttp.servers[1].name: "cc1" appears twice in sttp.servers',
            'sttp.servers[1].cloud: cloud "Z" is not in clouds',
            'sttp.gateways[0].edgeRouter: "e9" is not an edge router of cloud "A"',
            "sttp.gateways[0]: under tls.enabled the broker takes a publisher name only from a certificate"):
        assert message in err, (message, err)
    # without generated certificates a gateway need not name its publishers
    assert "sttp.gateways[0]: under" not in failure(tools, "-f", str(values), *INSECURE)
    # object names past 63 characters are refused, not truncated
    long = write_values(tmp_path, "long.json", {"sttp": {"servers": [
        {"name": "c" * 32, "edgeRouter": "e2", "where": "x = 1", "intervalMs": 100}]}})
    err = helm(tools, "template", "pacific-transmission", str(CHART), "-f", str(long), check=False).stderr
    assert f'sttp.servers[0].name: "{"c" * 32}" makes the object name' in err and "over the 63" in err, err


def test_the_schema_checks_each_items_fields(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    cases = [
        ({"servers": [{"name": "cc1", "edgeRouter": "e2", "where": "x = 1"}]}, "/sttp/servers/0", "intervalMs"),
        ({"servers": [{"name": "CC_1", "edgeRouter": "e2", "where": "x = 1", "intervalMs": 1}]},
         "/sttp/servers/0/name", ""),
        ({"servers": [{"name": "cc1", "edgeRouter": "e2", "variables": ["freq"], "intervalMs": 1}]},
         "/sttp/servers/0/variables/0", ""),
        ({"servers": [{"name": "cc1", "edgeRouter": "e2", "where": "x = 1", "intervalMs": 1, "port": 70000}]},
         "/sttp/servers/0/port", ""),
        ({"gateways": [{"name": "g1", "edgeRouter": "e1"}]}, "/sttp/gateways/0", "source"),
        ({"gateways": [{"name": "g1", "edgeRouter": "e1", "source": "no-port", "publisher": "p"}]},
         "/sttp/gateways/0/source", ""),
        ({"gateways": [{"name": "g1", "edgeRouter": "e1", "source": "h:1", "priority": 7, "publisher": "p"}]},
         "/sttp/gateways/0/priority", ""),
        ({"gateways": [{"name": "g1", "edgeRouter": "e1", "source": "h:1", "framesPerS": 500, "publisher": "p"}]},
         "/sttp/gateways/0/framesPerS", ""),
        ({"gateways": [{"name": "g1", "edgeRouter": "e1", "source": "h:1", "publisher": "a/b"}]},
         "/sttp/gateways/0/publisher", ""),
        ({"gateways": [{"name": "g1", "edgeRouter": "e1", "source": "h:1", "publisher": "p", "mystery": 1}]},
         "/sttp/gateways/0", "mystery"),
    ]
    for i, (sttp, where, what) in enumerate(cases):
        err = failure(tools, "-f", str(write_values(tmp_path, f"schema-{i}.json", {"sttp": sttp})))
        assert where in err and what in err, (sttp, err)
