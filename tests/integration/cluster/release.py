"""One release of the chart on the node: its pods by role, and client pods that publish and subscribe."""

from __future__ import annotations

import json
from dataclasses import dataclass
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
TLS_ARGS = kube.TLS_ARGS


@dataclass
class Release:
    node: Node
    name: str
    namespace: str
    values: Path

    def client_certificate(self, name: str) -> str:
        """Secret ``gridstat-client-NAME`` with a certificate for client NAME from the release's CA (the
        product's own ``chaos.kube.KubeTarget.client_certificate``)."""
        secret = self.target().client_certificate(name)
        assert secret is not None, "the release runs without mTLS"
        return secret

    def target(self) -> kube.KubeTarget:
        return kube.KubeTarget(kube.Kubectl(self.namespace, kubeconfig=str(self.node.kubeconfig), env=self.node.env),
                               self.name)

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
        pod: dict[str, Any] = kube.client_pod(name, self.namespace, args, port=port,
                                              tls_secret=self.client_certificate(name))
        pod["metadata"]["labels"]["app.kubernetes.io/part-of"] = CLIENTS
        return pod

    def _also(self, edges: tuple[str, ...]) -> list[str]:
        return [a for e in edges for a in ("--also-edge", f"{self.router_host(e)}:{CONTROL_PORT}")]

    def publisher(self, name: str, edge: str, variables: tuple[str, ...], interval_ms: int, *,
                  also: tuple[str, ...] = ()) -> dict[str, Any]:
        """A `gridstat publish` pod at ``edge`` (and ``also``: a multi-homed publisher)."""
        return self.client(name, ["publish", "--name", name, "--edge", f"{self.router_host(edge)}:{CONTROL_PORT}",
                                  *self._also(also), *(a for v in variables for a in ("--variable", v)),
                                  "--type", "float", "--interval-ms", str(interval_ms), "-o", "json"])

    def subscriber(self, name: str, edge: str, variable: str, interval_ms: int, port: int = 9000, *,
                   also: tuple[str, ...] = ()) -> dict[str, Any]:
        """A `gridstat subscribe` pod at ``edge`` (and ``also``: a multi-homed subscriber)."""
        return self.client(name, ["subscribe", "--name", name, "--edge",
                                  f"{self.router_host(edge)}:{CONTROL_PORT}", *self._also(also), "--variable", variable,
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
