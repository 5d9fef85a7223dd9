"""The chart is secure by default (docs/kubernetes.md, "Security"): mTLS and datagram authentication on,
a CA, one certificate per component role and the channel master secret generated on install (Helm's
genCA/genSignedCert/randBytes) and kept across upgrades (lookup); turning either off needs
`security.insecure: true`, and NOTES say so loudly.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .kube import Cluster
from .test_chart import CHART, TWO_CLOUDS, helm, render, write_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TLS = "/etc/gridstat/tls/"
#: Role -> (the Secret's suffix, the certificate's identity), per docs/kubernetes.md's table.
ROLES = {"broker-a": "gridstat-broker-a", "broker-b": "gridstat-broker-b", "parent": "gridstat-parent",
         "router": "gridstat-router", "operator": "gridstat-operator", "admission": "gridstat-admission",
         "condense": "gridstat-condense"}


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    from .kube import require_tools

    return require_tools(helm=True)


def openssl(*args: str, input: bytes) -> str:
    proc = subprocess.run(["openssl", *args], input=input, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def cert_names(pem: bytes) -> tuple[str, list[str]]:
    """(CN, DNS and IP SANs in order) of a PEM certificate, read by openssl."""
    text = openssl("x509", "-noout", "-subject", "-ext", "subjectAltName", "-nameopt", "multiline", input=pem)
    cn = next(line.split("=", 1)[1].strip() for line in text.splitlines() if "commonName" in line)
    sans = text.split("Subject Alternative Name:", 1)[1].strip() if "Subject Alternative Name:" in text else ""
    return cn, [s.strip() for s in sans.replace("\n", ",").split(",") if s.strip()]


def secrets(docs: list[dict]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}


def data(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def verify(ca: bytes, cert: bytes, tmp: Path) -> None:
    (tmp / "ca.pem").write_bytes(ca)
    out = openssl("verify", "-CAfile", str(tmp / "ca.pem"), input=cert)
    assert "OK" in out, out


def pod_args(docs: list[dict], workload: str, container: str) -> list[str]:
    (d,) = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment") and d["metadata"]["name"] == workload]
    (c,) = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return " ".join(c.get("command", []) + c["args"]).replace("'", "").split()


def test_defaults_generate_a_ca_and_a_certificate_per_role(tools: dict[str, str], tmp_path: Path) -> None:
    values = write_values(tmp_path, "all.json", {**yaml.safe_load(TWO_CLOUDS.read_text()), "tls": {}})
    docs = render(tools, values)
    by = secrets(docs)
    ca = by["rel-gridstat-ca"]
    assert ca["type"] == "kubernetes.io/tls" and set(ca["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert cert_names(data(ca, "tls.crt"))[0].startswith("gridstat-ca")
    for role, identity in ROLES.items():
        s = by[f"rel-gridstat-tls-{role}"]
        assert s["type"] == "kubernetes.io/tls" and set(s["data"]) == {"tls.crt", "tls.key", "ca.crt"}, role
        assert data(s, "ca.crt") == data(ca, "tls.crt"), role
        cn, sans = cert_names(data(s, "tls.crt"))
        assert cn == identity and sans[0] == f"DNS:{identity}", (role, cn, sans)
        assert "DNS:localhost" in sans and "IP Address:127.0.0.1" in sans, sans
        verify(data(ca, "tls.crt"), data(s, "tls.crt"), tmp_path)
        # the key belongs to the certificate
        assert openssl("pkey", "-pubout", input=data(s, "tls.key")) == \
            openssl("x509", "-noout", "-pubkey", input=data(s, "tls.crt"))
    # the names the components dial each other by (gRPC checks them): Services and router pods
    # each leaf broker's certificate names its own Service only
    _, broker_a = cert_names(data(by["rel-gridstat-tls-broker-a"], "tls.crt"))
    assert {"DNS:rel-gridstat-broker-a.grid.svc", "DNS:rel-gridstat-broker-a.grid.svc.cluster.local"} <= set(broker_a)
    assert not any("broker-b" in n for n in broker_a), broker_a
    _, broker_b = cert_names(data(by["rel-gridstat-tls-broker-b"], "tls.crt"))
    assert "DNS:rel-gridstat-broker-b.grid.svc" in broker_b and not any("broker-a" in n for n in broker_b)
    _, router = cert_names(data(by["rel-gridstat-tls-router"], "tls.crt"))
    assert {"DNS:*.rel-gridstat-router-a.grid.svc", "DNS:*.rel-gridstat-router-b.grid.svc.cluster.local"} <= set(router)
    _, parent = cert_names(data(by["rel-gridstat-tls-parent"], "tls.crt"))
    assert "DNS:rel-gridstat-parent.grid.svc" in parent
    _, admission = cert_names(data(by["rel-gridstat-tls-admission"], "tls.crt"))
    assert "DNS:rel-gridstat-admission.grid.svc" in admission
    key = data(by["rel-gridstat-channel-key"], "channel-key").decode()
    assert len(key) == 64 and int(key, 16) >= 0
    # roles that are off get no certificate
    plain = secrets(render(tools))
    assert "rel-gridstat-tls-parent" not in plain and "rel-gridstat-tls-condense" not in plain
    assert {"rel-gridstat-tls-broker-a", "rel-gridstat-tls-router", "rel-gridstat-tls-operator",
            "rel-gridstat-tls-admission", "rel-gridstat-ca", "rel-gridstat-channel-key"} <= set(plain)


def test_defaults_run_every_role_with_mtls_and_channel_auth(tools: dict[str, str], tmp_path: Path) -> None:
    values = write_values(tmp_path, "all.json", {**yaml.safe_load(TWO_CLOUDS.read_text()), "tls": {}})
    docs = render(tools, values)
    for cloud in ("a", "b"):
        a = pod_args(docs, f"rel-gridstat-broker-{cloud}", "broker")
        for flag in (f"--tls-cert={TLS}tls.crt", f"--tls-client-ca={TLS}ca.crt", f"--router-tls-ca={TLS}ca.crt",
                     f"--peer-tls-ca={TLS}ca.crt", f"--admission-tls-ca={TLS}ca.crt", "--channel-auth=all",
                     "--channel-key-file=/etc/gridstat/channel-key/channel-key",
                     # edge proxies and the components that act for clients
                     "--trusted-proxy=gridstat-router", "--trusted-proxy=gridstat-operator",
                     "--trusted-proxy=gridstat-condense"):
            assert flag in a, (cloud, flag, a)
        assert not any(x.startswith("--grant") for x in a), a  # the default grants name the per-role identities
        r = pod_args(docs, f"rel-gridstat-router-{cloud}", "router")
        # a cloud's routers take control calls from that cloud's leaf broker only
        for flag in (f"--tls-cert={TLS}tls.crt", f"--tls-client-ca={TLS}ca.crt",
                     f"--broker-identity=gridstat-broker-{cloud}"):
            assert flag in r, (cloud, flag)
        (routers,) = [d for d in docs
                      if d["kind"] == "ConfigMap" and d["metadata"]["name"] == f"rel-gridstat-router-{cloud}"]
        # Every router announces itself to its broker, and edge routers proxy there, with the router's
        # certificate (docs/redundancy.md, "Healing").
        for line in routers["data"].values():
            assert f"--broker-tls-cert={TLS}tls.crt" in line.split(), line
    assert "--channel-auth=routers" in pod_args(docs, "rel-gridstat-parent", "parent")
    assert f"--tls-client-ca={TLS}ca.crt" in pod_args(docs, "rel-gridstat-admission", "admission")
    assert f"--tls-cert={TLS}tls.crt" in pod_args(docs, "rel-gridstat-condensation-host", "condensation-host")
    # each role mounts its own Secret; the brokers' topology sidecars and the helm test pod the operator's
    mounts: dict[tuple[str, str], str] = {}
    for d in docs:
        spec = d["spec"]["template"]["spec"] if d["kind"] in ("StatefulSet", "Deployment") else \
            d["spec"] if d["kind"] == "Pod" else None
        if spec is None:
            continue
        volumes = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        for c in spec["containers"]:
            for m in c.get("volumeMounts", []):
                if m["mountPath"] == TLS.rstrip("/"):
                    mounts[(d["metadata"]["name"], c["name"])] = volumes[m["name"]]
    assert mounts == {
        ("rel-gridstat-broker-a", "broker"): "rel-gridstat-tls-broker-a",
        ("rel-gridstat-broker-a", "topology"): "rel-gridstat-tls-operator",
        ("rel-gridstat-broker-b", "broker"): "rel-gridstat-tls-broker-b",
        ("rel-gridstat-broker-b", "topology"): "rel-gridstat-tls-operator",
        ("rel-gridstat-parent", "parent"): "rel-gridstat-tls-parent",
        ("rel-gridstat-parent", "topology"): "rel-gridstat-tls-operator",
        ("rel-gridstat-router-a", "router"): "rel-gridstat-tls-router",
        ("rel-gridstat-router-b", "router"): "rel-gridstat-tls-router",
        ("rel-gridstat-operator", "operator"): "rel-gridstat-tls-operator",
        ("rel-gridstat-admission", "admission"): "rel-gridstat-tls-admission",
        ("rel-gridstat-condensation-host", "condensation-host"): "rel-gridstat-tls-condense",
        ("rel-gridstat-test-brokers", "test"): "rel-gridstat-tls-operator",
    }, mounts


def test_existing_secrets_per_role_are_used_and_not_generated(tools: dict[str, str]) -> None:
    docs = render(tools, extra=("--set", "tls.secrets.broker=broker-cm", "--set", "tls.secrets.router=router-cm",
                                "--set", "dataPlaneAuth.secretName=my-key"))
    by = secrets(docs)
    assert not any(n.startswith("rel-gridstat-tls-broker") for n in by) and "rel-gridstat-tls-router" not in by
    assert "rel-gridstat-channel-key" not in by
    assert "rel-gridstat-tls-operator" in by  # the others are still generated
    text = yaml.safe_dump_all(docs)
    assert "secretName: broker-cm" in text and "secretName: router-cm" in text and "secretName: my-key" in text
    # one Secret shared by every leaf broker: a router cannot tell its own broker from another's
    assert not any(a.startswith("--broker-identity") for a in pod_args(docs, "rel-gridstat-router-a", "router"))


def test_a_leaf_brokers_own_secret_wins_over_the_shared_one(tools: dict[str, str], tmp_path: Path) -> None:
    values = write_values(tmp_path, "all.json", {**yaml.safe_load(TWO_CLOUDS.read_text()), "tls": {}})
    docs = render(tools, values, extra=("--set", "tls.secrets.broker=shared-cm", "--set", "tls.secrets.broker-a=a-cm"))
    assert not any(n.startswith("rel-gridstat-tls-broker") for n in secrets(docs))
    volumes = {d["metadata"]["name"]: {v["name"]: v["secret"]["secretName"]
                                       for v in d["spec"]["template"]["spec"]["volumes"] if "secret" in v}
               for d in docs if d["kind"] == "StatefulSet"}
    assert volumes["rel-gridstat-broker-a"]["tls"] == "a-cm" and volumes["rel-gridstat-broker-b"]["tls"] == "shared-cm"
    # cloud A's routers know their broker's identity (its own Secret, CN gridstat-broker-a); B's cannot
    assert "--broker-identity=gridstat-broker-a" in pod_args(docs, "rel-gridstat-router-a", "router")
    assert not any(a.startswith("--broker-identity") for a in pod_args(docs, "rel-gridstat-router-b", "router"))
    # a per-cloud key must name a cloud-shaped Secret key: the schema refuses anything else in tls.secrets
    proc = helm(tools, "template", "rel", str(CHART), "--set", "tls.secrets.brokerx=x", check=False)
    assert proc.returncode != 0 and "brokerx" in proc.stderr, proc.stderr


def test_turning_security_off_needs_the_acknowledgement(tools: dict[str, str]) -> None:
    for value in ("tls.enabled", "dataPlaneAuth.enabled"):
        proc = helm(tools, "template", "rel", str(CHART), "--set", f"{value}=false", check=False)
        assert proc.returncode != 0, value
        assert "security.insecure" in proc.stderr and f"{value}=false" in proc.stderr, proc.stderr
        ok = helm(tools, "template", "rel", str(CHART), "--set", f"{value}=false", "--set", "security.insecure=true")
        assert ok.returncode == 0
    bad = helm(tools, "template", "rel", str(CHART), "--set", "security.insecur=true", check=False)
    assert bad.returncode != 0  # a misspelt key is refused by the schema, not ignored


def _secret(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "secret", name, "-n", namespace, "-o", "json").stdout)  # type: ignore[no-any-return]


def test_install_generates_and_upgrades_keep_the_keys(tools: dict[str, str], cluster: Cluster,
                                                      tmp_path: Path) -> None:
    env = {**tools, "KUBECONFIG": str(cluster.kubeconfig)}
    ns = "secure-defaults"
    names = ["rel-gridstat-ca", "rel-gridstat-tls-broker-a", "rel-gridstat-tls-router", "rel-gridstat-tls-operator",
             "rel-gridstat-tls-admission", "rel-gridstat-channel-key"]
    proc = helm(env, "install", "rel", str(CHART), "-n", ns, "--create-namespace")
    try:
        assert "WARNING" not in proc.stdout and "mTLS is on" in proc.stdout, proc.stdout
        first = {n: _secret(cluster, ns, n)["data"] for n in names}
        helm(env, "upgrade", "rel", str(CHART), "-n", ns, "--reuse-values", "--set", "operator.replicas=1")
        second = {n: _secret(cluster, ns, n)["data"] for n in names}
        assert second == first, "helm upgrade changed a key or certificate"
        # a cloud added: the certificates whose names it changes are issued again from the same CA
        two = write_values(tmp_path, "two.json", {**yaml.safe_load(TWO_CLOUDS.read_text()), "tls": {}})
        helm(env, "upgrade", "rel", str(CHART), "-n", ns, "-f", str(two))
        third = {n: _secret(cluster, ns, n)["data"] for n in names}
        assert third["rel-gridstat-ca"] == first["rel-gridstat-ca"]
        assert third["rel-gridstat-channel-key"] == first["rel-gridstat-channel-key"]
        assert third["rel-gridstat-tls-operator"] == first["rel-gridstat-tls-operator"]
        # cloud A's broker keeps its certificate (its names did not change); cloud B's broker gets one
        assert third["rel-gridstat-tls-broker-a"] == first["rel-gridstat-tls-broker-a"]
        broker_b = _secret(cluster, ns, "rel-gridstat-tls-broker-b")["data"]
        cn, sans = cert_names(base64.b64decode(broker_b["tls.crt"]))
        assert cn == "gridstat-broker-b" and "DNS:rel-gridstat-broker-b.secure-defaults.svc" in sans
        verify(base64.b64decode(first["rel-gridstat-ca"]["tls.crt"]), base64.b64decode(broker_b["tls.crt"]), tmp_path)
        # the routers' certificate names every cloud's router pods: issued again, from the same CA
        router = third["rel-gridstat-tls-router"]
        assert router != first["rel-gridstat-tls-router"]
        _, sans = cert_names(base64.b64decode(router["tls.crt"]))
        assert "DNS:*.rel-gridstat-router-b.secure-defaults.svc" in sans
        verify(base64.b64decode(first["rel-gridstat-ca"]["tls.crt"]), base64.b64decode(router["tls.crt"]), tmp_path)
        parent = _secret(cluster, ns, "rel-gridstat-tls-parent")["data"]
        assert parent["ca.crt"] == first["rel-gridstat-ca"]["tls.crt"]
        # explicitly insecure: NOTES print the WARNING block naming what is off
        insecure = helm(env, "upgrade", "rel", str(CHART), "-n", ns, "-f", str(two), "--set", "tls.enabled=false",
                        "--set", "security.insecure=true")
        assert "WARNING: INSECURE" in insecure.stdout and "tls.enabled=false" in insecure.stdout, insecure.stdout
        assert "dataPlaneAuth.enabled=false" not in insecure.stdout
    finally:
        helm(env, "uninstall", "rel", "-n", ns, "--wait=false", check=False)
