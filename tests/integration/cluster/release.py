"""One release of the chart on the node: its pods by role, and client pods that publish and subscribe."""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gridstat.chaos import kube

from .node import Node, pod_ready

FULLNAME_SUFFIX = "gridstat"
CONTROL_PORT = 7801
BROKER_PORT = 7700
API = kube.API
#: The label value of this suite's client pods.
CLIENTS = "gridstat-tests"
#: Where a client pod mounts its certificate (and where every role pod mounts its own).
TLS_DIR = "/etc/gridstat/tls"
TLS_ARGS = ("--tls-ca", f"{TLS_DIR}/ca.crt", "--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key")


def issue_client_certificate(ca_crt: bytes, ca_key: bytes, name: str) -> tuple[bytes, bytes]:
    """A client certificate named ``name`` (CN and DNS SAN: the identity the broker binds its calls to)
    signed by the release's CA, with openssl as docs/kubernetes.md ("Client certificates") shows.
    Returns (certificate PEM, key PEM)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "ca.crt").write_bytes(ca_crt)
        (d / "ca.key").write_bytes(ca_key)
        (d / "ext").write_text(f"subjectAltName=DNS:{name}\nextendedKeyUsage=clientAuth\n")

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", "tls.key", "-subj", f"/CN={name}", "-out", "tls.csr")
        openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "30", "-extfile", "ext", "-out", "tls.crt")
        return (d / "tls.crt").read_bytes(), (d / "tls.key").read_bytes()


def client_secret_name(name: str) -> str:
    return f"gridstat-client-{name}"


def with_client_tls(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """A client pod (chaos.kube.client_pod) given the certificate of Secret ``gridstat-client-NAME``."""
    container = pod["spec"]["containers"][0]
    if container["args"][:1] == ["gridstat"] and len(container["args"]) > 1:
        container["args"] = [*container["args"], *TLS_ARGS]
    container.setdefault("volumeMounts", []).append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    pod["spec"].setdefault("volumes", []).append(
        {"name": "tls", "secret": {"secretName": client_secret_name(name), "defaultMode": 0o440}})
    pod["spec"]["securityContext"]["fsGroup"] = 10001
    return pod


@dataclass
class Release:
    node: Node
    name: str
    namespace: str
    values: Path
    _issued: set[tuple[str, str]] = field(default_factory=set)

    @property
    def ca_secret(self) -> str:
        """The CA the chart generated on install (docs/kubernetes.md, "Security")."""
        return f"{self.fullname}-ca"

    def client_certificate(self, name: str, namespace: str | None = None) -> str:
        """Secret ``gridstat-client-NAME`` (kubernetes.io/tls: tls.crt, tls.key, ca.crt) in the namespace, with
        a certificate for client NAME issued from the release's CA Secret (read with kubectl)."""
        ns = namespace or self.namespace
        secret = client_secret_name(name)
        if (ns, name) in self._issued:
            return secret
        ca = json.loads(self.node.kubectl("get", "secret", self.ca_secret, "-n", self.namespace, "-o", "json").stdout)
        ca_crt, ca_key = (base64.b64decode(ca["data"][k]) for k in ("tls.crt", "tls.key"))
        crt, key = issue_client_certificate(ca_crt, ca_key, name)
        self.node.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                         "metadata": {"name": secret, "namespace": ns,
                                      "labels": {"app.kubernetes.io/part-of": CLIENTS}},
                         "data": {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode(),
                                  "ca.crt": base64.b64encode(ca_crt).decode()}})
        self._issued.add((ns, name))
        return secret

    @property
    def fullname(self) -> str:
        return f"{self.name}-{FULLNAME_SUFFIX}"

    def clouds(self) -> list[dict[str, Any]]:
        return yaml.safe_load(self.values.read_text())["clouds"]  # type: ignore[no-any-return]

    def router_pod(self, router: str) -> str:
        """Pod N of a cloud's router StatefulSet runs the cloud's router N."""
        for cloud in self.clouds():
            for i, r in enumerate(cloud["routers"]):
                if r["name"] == router:
                    return f"{self.fullname}-router-{cloud['name'].lower()}-{i}"
        raise KeyError(router)

    def router_host(self, router: str) -> str:
        pod = self.router_pod(router)
        return f"{pod}.{pod.rsplit('-', 1)[0]}.{self.namespace}.svc.cluster.local"

    def broker_pod(self, cloud: str) -> str:
        return f"{self.fullname}-broker-{cloud.lower()}-0"

    def role_pods(self) -> list[dict[str, Any]]:
        """The release's long-running pods (not helm test pods)."""
        return [p for p in self.node.pods(self.namespace, f"app.kubernetes.io/instance={self.name}")
                if p["status"].get("phase") not in ("Succeeded", "Failed")
                and "helm.sh/hook" not in (p["metadata"].get("annotations") or {})]

    def all_ready(self) -> bool:
        pods = self.role_pods()
        return bool(pods) and all(pod_ready(p) for p in pods)

    def gridstat(self, cloud: str, *args: str, check: bool = True) -> Any:
        """`gridstat ARGS -o json` in the cloud's broker pod, against its own broker."""
        # with the broker's own certificate (gridstat-broker: its reads are allowed; valid for 127.0.0.1)
        proc = self.node.exec(self.namespace, self.broker_pod(cloud), "gridstat", *args, "--broker",
                              f"127.0.0.1:{BROKER_PORT}", *TLS_ARGS, "-o", "json", container="broker", check=check)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def client(self, name: str, args: list[str], *, port: int | None = None) -> dict[str, Any]:
        """A client pod (chaos.kube.client_pod) labelled as this suite's, apart from the chaos scenarios' own."""
        pod: dict[str, Any] = kube.client_pod(name, self.namespace, args, port=port)
        pod["metadata"]["labels"]["app.kubernetes.io/part-of"] = CLIENTS
        self.client_certificate(name)
        return with_client_tls(pod, name)

    def publisher(self, name: str, edge: str, variables: tuple[str, ...], interval_ms: int) -> dict[str, Any]:
        return self.client(name, ["publish", "--name", name, "--edge", f"{self.router_host(edge)}:{CONTROL_PORT}",
                                      *(a for v in variables for a in ("--variable", v)),
                                      "--type", "float", "--interval-ms", str(interval_ms), "-o", "json"])

    def subscriber(self, name: str, edge: str, variable: str, interval_ms: int, port: int = 9000) -> dict[str, Any]:
        return self.client(name, ["subscribe", "--name", name, "--edge",
                                      f"{self.router_host(edge)}:{CONTROL_PORT}", "--variable", variable,
                                      "--interval-ms", str(interval_ms), "--listen-host", "0.0.0.0",
                                      "--port", str(port), "-o", "json"], port=port)

    def last_stats(self, pod: str, kind: str) -> dict[str, Any] | None:
        """The newest JSON stats line a client pod printed."""
        for line in reversed(self.node.logs(self.namespace, pod).splitlines()):
            if line.startswith("{"):
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if doc.get("kind") == kind:
                    return doc  # type: ignore[no-any-return]
        return None


def subscription(name: str, namespace: str, variable: str, *, subscriber: str, edge: str, interval_ms: int,
                 latency_ms: int, redundancy: int, modes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"subscriber": subscriber, "edgeRouter": edge, "cloud": "A", "variables": [variable],
                            "qos": {"intervalMs": interval_ms, "latencyMs": latency_ms, "redundancy": redundancy}}
    if modes is not None:
        spec["modes"] = modes
    return {"apiVersion": API, "kind": "Subscription", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


ready_now = kube.ready_now
