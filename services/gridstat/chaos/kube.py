"""The chaos suite against a Helm release's pods (``gridstat chaos run --kube``): kubectl, the release's
layout, and the pure parts the ``kube-*`` scenarios (``chaos.kube_scenarios``) are built from.

Why: the local scenarios start their own processes on 127.0.0.1; a chaos-test pipeline needs the same
invariants against a real cluster. Everything here talks to the cluster through ``kubectl`` in a
subprocess (no Kubernetes client library), every call bounded in time. Two faults need the node
itself (root, as ``cluster.sh`` runs it): a container's main process is killed from the root PID
namespace (inside its own PID namespace the router is PID 1, which ignores ``kill -9`` from there),
and network faults go into the pod's network namespace (``/run/netns/cni-*``, found by the pod's IP).

Pure functions (manifests, parsing stats and kubectl output, choosing the router on a path) carry no
I/O and are unit-tested in ``tests/unit/chaos``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gridstat.core import waiting

from .procs import ChaosError

API = "gridstat.io/v1alpha1"
IMAGE = "gridstat:dev"
FULLNAME_SUFFIX = "gridstat"
BROKER_PORT = 7700
CONTROL_PORT = 7801
METRICS_PORT = 9102
KUBECTL_TIMEOUT_S = 30.0
#: Labels of every pod and Subscription a scenario creates (so a crashed run's leftovers can be found).
PART_OF = "gridstat-chaos"
#: Where the chart's pods mount their certificate, and where a client pod gets its own (docs/kubernetes.md,
#: "Security"); the ``gridstat`` options that use it.
TLS_DIR = "/etc/gridstat/tls"
TLS_ARGS = ("--tls-ca", f"{TLS_DIR}/ca.crt", "--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key")
T = TypeVar("T")


# -- pure: manifests ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Names:
    """What one scenario creates in the namespace: client pods, their variable, the Subscription."""

    publisher: str = "chaos-pmu"
    subscriber: str = "chaos-ems"
    variable: str = "freq"
    extra_variable: str = "angle"

    @property
    def full_variable(self) -> str:
        return f"{self.publisher}/{self.variable}"

    @property
    def full_extra_variable(self) -> str:
        return f"{self.publisher}/{self.extra_variable}"

    @property
    def subscription(self) -> str:
        return f"{self.subscriber}-{self.variable}"

    @property
    def extra_subscription(self) -> str:
        return f"{self.subscriber}-{self.extra_variable}"


def client_pod(name: str, namespace: str, args: Sequence[str], *, port: int | None = None,
               image: str = IMAGE, tls_secret: str | None = None) -> dict[str, Any]:
    """A pod of the project's image running ``gridstat ARGS`` as the chart's roles run (restricted); with
    ``tls_secret`` (kubernetes.io/tls with ca.crt) its certificate is mounted and ``gridstat`` uses it."""
    container: dict[str, Any] = {
        "name": "client", "image": image, "imagePullPolicy": "IfNotPresent", "args": ["gridstat", *args],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    if port:
        container["ports"] = [{"name": "events", "containerPort": port, "protocol": "UDP"}]
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": PART_OF, "gridstat.io/client": name}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [container]},
    }
    if tls_secret:
        if len(args) > 0:
            container["args"] = [*container["args"], *TLS_ARGS]
        container["volumeMounts"] = [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
        pod["spec"]["volumes"] = [{"name": "tls", "secret": {"secretName": tls_secret, "defaultMode": 0o440}}]
        pod["spec"]["securityContext"]["fsGroup"] = 10001
    return pod


def publisher_pod(names: Names, namespace: str, edge_address: str, interval_ms: int,
                  tls_secret: str | None = None) -> dict[str, Any]:
    """``gridstat publish`` of both variables of ``names`` at ``edge_address`` (the edge's control port)."""
    return client_pod(names.publisher, namespace, [
        "publish", "--name", names.publisher, "--edge", edge_address, "--variable", names.variable,
        "--variable", names.extra_variable, "--type", "float", "--interval-ms", str(interval_ms), "-o", "json"],
        tls_secret=tls_secret)


def subscriber_pod(names: Names, namespace: str, edge_address: str, interval_ms: int,
                   port: int = 9000, tls_secret: str | None = None) -> dict[str, Any]:
    """``gridstat subscribe`` (registered only: the operator admits its Subscriptions), both variables."""
    return client_pod(names.subscriber, namespace, [
        "subscribe", "--name", names.subscriber, "--edge", edge_address, "--variable", names.full_variable,
        "--variable", names.full_extra_variable, "--interval-ms", str(interval_ms), "--listen-host", "0.0.0.0",
        "--port", str(port), "--stats-every-s", "0.5", "-o", "json"], port=port, tls_secret=tls_secret)


def client_secret_name(client: str) -> str:
    """The Secret holding a client pod's certificate (``KubeTarget.client_certificate``)."""
    return f"gridstat-client-{client}"


def subscription(name: str, namespace: str, variable: str, *, subscriber: str, edge: str, cloud: str,
                 interval_ms: int, latency_ms: int, redundancy: int) -> dict[str, Any]:
    """A ``Subscription`` resource of one variable in the normal mode."""
    return {"apiVersion": API, "kind": "Subscription",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": PART_OF}},
            "spec": {"subscriber": subscriber, "edgeRouter": edge, "cloud": cloud, "variables": [variable],
                     "qos": {"intervalMs": interval_ms, "latencyMs": latency_ms, "redundancy": redundancy}}}


# -- pure: reading what kubectl and the pods say ---------------------------------------------------------
@dataclass(frozen=True)
class RouterPod:
    name: str
    cloud: str
    pod: str
    #: The router's StatefulSet (its headless Service has the same name).
    statefulset: str


def routers_from_configmaps(items: Iterable[Mapping[str, Any]]) -> dict[str, RouterPod]:
    """Router name -> its pod, from the chart's router ConfigMaps (pod N runs the arguments in key N)."""
    out: dict[str, RouterPod] = {}
    for cm in items:
        meta = cm.get("metadata") or {}
        sts, cloud = meta.get("name", ""), (meta.get("labels") or {}).get("gridstat.io/cloud", "")
        for key, argv in (cm.get("data") or {}).items():
            if not key.isdigit():
                continue
            words = shlex.split(argv)
            if "--name" in words[:-1]:
                name = words[words.index("--name") + 1]
                out[name] = RouterPod(name, cloud, f"{sts}-{key}", sts)
    return out


def pod_ready(pod: Mapping[str, Any] | None) -> bool:
    """Running, Ready and not being deleted."""
    if not pod:
        return False
    conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or ()}
    return (pod.get("status") or {}).get("phase") == "Running" and conditions.get("Ready") == "True" \
        and not (pod.get("metadata") or {}).get("deletionTimestamp")


def container_status(pod: Mapping[str, Any] | None, container: str) -> dict[str, Any]:
    for st in ((pod or {}).get("status") or {}).get("containerStatuses") or ():
        if st.get("name") == container:
            return dict(st)
    return {}


def restart_count(pod: Mapping[str, Any] | None, container: str) -> int:
    return int(container_status(pod, container).get("restartCount", 0))


def container_id(pod: Mapping[str, Any] | None, container: str) -> str:
    """The runtime's id of a running container (``containerd://ID`` -> ``ID``), "" if none."""
    return str(container_status(pod, container).get("containerID", "")).rpartition("://")[2]


def ready_now(body: Mapping[str, Any] | None) -> bool:
    """Ready=True for the current generation (what ``kubectl wait --for=condition=Ready`` checks)."""
    if not body:
        return False
    status = body.get("status") or {}
    ready = [c for c in status.get("conditions") or () if c.get("type") == "Ready"]
    return bool(ready) and ready[0].get("status") == "True" \
        and status.get("observedGeneration") == body["metadata"].get("generation")


def normal_paths(body: Mapping[str, Any] | None, variable: str) -> list[list[str]]:
    """The allocated paths (router names) of ``variable`` in the normal mode, in index order, from a
    Subscription's ``status.paths``."""
    paths = [p for p in ((body or {}).get("status") or {}).get("paths") or ()
             if p.get("variable") == variable and (p.get("modeId") == 0 or p.get("mode") in ("normal", 0, "0"))]
    return [list(p.get("routers") or ()) for p in sorted(paths, key=lambda p: p.get("index", 0))]


def disjoint(paths: Sequence[Sequence[str]]) -> bool:
    """Two or more paths that share no interior router."""
    inner = [set(p[1:-1]) for p in paths]
    return len(paths) >= 2 and all(not (a & b) for i, a in enumerate(inner) for b in inner[i + 1:])


def choose_victim(paths: Sequence[Sequence[str]], prefer: str = "") -> str:
    """An interior router of one path that no other path uses (``prefer`` if it is one); "" if none.
    Its failure breaks exactly one path, so a redundancy-2 stream must lose nothing."""
    candidates = []
    for i, p in enumerate(paths):
        others = {r for j, q in enumerate(paths) if j != i for r in q}
        candidates += [r for r in p[1:-1] if r not in others]
    if prefer and prefer in candidates:
        return prefer
    return candidates[0] if candidates else ""


def last_stats(log: str, kind: str = "subscribe") -> dict[str, Any] | None:
    """The newest JSON stats line of ``kind`` in a client pod's log."""
    for line in reversed(log.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("kind") == kind:
                return doc
    return None


@dataclass(frozen=True)
class Delivery:
    """A subscriber's cumulative counts of one variable (``gridstat subscribe -o json``)."""

    received: int = 0
    distinct: int = 0
    duplicates: int = 0
    missing: int = 0
    latency_p99_ms: float | None = None
    bound: bool = False
    ts_ms: int = 0

    def describe(self) -> str:
        return f"{self.missing} lost of {self.distinct + self.missing} ({self.duplicates} duplicates dropped)"


def delivery(stats: Mapping[str, Any] | None, variable: str) -> Delivery:
    """``variable``'s counts in a subscriber's stats line (zeros when absent)."""
    if not stats:
        return Delivery()
    d = ((stats.get("variables") or {}).get(variable)) or {}
    lat = d.get("latency_ms") or {}
    return Delivery(received=int(d.get("received", 0)), distinct=int(d.get("distinct", 0)),
                    duplicates=int(d.get("duplicates", 0)), missing=int(d.get("missing", 0)),
                    latency_p99_ms=lat.get("p99"), bound=bool(d.get("bound")), ts_ms=int(stats.get("ts_ms", 0)))


def netns_with_ip(addresses: Mapping[str, str], ip: str) -> str:
    """The namespace (of ``{netns: 'ip -o -4 addr' output}``) holding address ``ip``; "" if none."""
    pattern = re.compile(rf"\binet {re.escape(ip)}/\d+")
    found = [ns for ns, text in addresses.items() if pattern.search(text)]
    return found[0] if len(found) == 1 else ""


def device_of_ip(addr_output: str, ip: str) -> str:
    """The interface (``eth0``) carrying ``ip`` in ``ip -o -4 addr`` output."""
    for line in addr_output.splitlines():
        m = re.match(rf"\d+:\s+(\S+)\s+inet {re.escape(ip)}/", line)
        if m:
            return m.group(1).split("@")[0]
    return ""


def is_container_init(cgroup: str, status: str, cid: str) -> bool:
    """Is the process with this ``/proc/PID/cgroup`` and ``/proc/PID/status`` its container's PID 1?"""
    if not cid or cid not in cgroup:
        return False
    m = re.search(r"^NSpid:\s+(.*)$", status, re.M)
    return bool(m) and m.group(1).split()[-1] == "1"  # type: ignore[union-attr]


def channel_up_samples(lines: Iterable[str]) -> list[tuple[int, int]]:
    """(time ms, 1/0) samples printed by ``LINK_WATCH`` ("T UP" per line; other lines ignored)."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1] in ("0", "1"):
            out.append((int(parts[0]), int(parts[1])))
    return out


def down_interval(samples: Sequence[tuple[int, int]], since_ms: int) -> tuple[int | None, int | None]:
    """The first sample at or after ``since_ms`` showing the channel down, and the first one up after
    it (ms), or None."""
    down = next((t for t, up in samples if t >= since_ms and up == 0), None)
    if down is None:
        return None, None
    return down, next((t for t, up in samples if t > down and up == 1), None)


def leader_operator(peering: Mapping[str, Any] | None, pods: Iterable[str]) -> str:
    """The operator pod whose kopf peer has the highest priority in the KopfPeering's status; ""."""
    peers = (peering or {}).get("status") or {}
    ranked = sorted(((v.get("priority", 0), k) for k, v in peers.items() if isinstance(v, dict)), reverse=True)
    names = list(pods)
    for _, peer in ranked:
        match = [p for p in names if f"@{p}/" in peer or peer.endswith(f"@{p}")]
        if match:
            return match[0]
    return ""


def routes_mention(routes: Mapping[str, Any] | None, variable_id: int | None, variable: str) -> bool:
    """Does ``gridstat routes ROUTER -o json`` hold a route of the variable (by id, else by name)?"""
    entries = (routes or {}).get("routes") or []
    if variable_id is not None and any(r.get("variable_id") == variable_id for r in entries if isinstance(r, dict)):
        return True
    return variable in json.dumps(entries) or variable.rpartition("/")[2] in json.dumps(entries)


def subscription_ids(listing: Any) -> set[str]:
    """The ids in ``gridstat sub list -o json`` (a list of subscriptions, or ``{"subscriptions": [...]}``)."""
    items = listing.get("subscriptions", []) if isinstance(listing, dict) else listing or []
    return {str(s.get("subscription_id") or s.get("id")) for s in items
            if isinstance(s, dict) and (s.get("subscription_id") or s.get("id"))}


#: Runs in the edge router's container (``kubectl exec ... python3 -c``): prints "ms up" for the router's
#: channel to argv[1] every 0.1 s from its own /metrics, for at most argv[2] seconds.
LINK_WATCH = r"""
import sys, time, urllib.request, re
peer, until = sys.argv[1], time.time() + float(sys.argv[2])
pat = re.compile(r'^gridstat_router_channel_up\{[^}]*channel="%s"[^}]*\} (\S+)' % re.escape(peer), re.M)
while time.time() < until:
    try:
        m = pat.search(urllib.request.urlopen('http://127.0.0.1:%d/metrics', timeout=1).read().decode())
        if m:
            print(int(time.time() * 1000), 1 if float(m.group(1)) >= 1 else 0, flush=True)
    except Exception:
        pass
    time.sleep(0.1)
"""


# -- kubectl -------------------------------------------------------------------------------------------------
@dataclass
class Kubectl:
    """``kubectl`` against one namespace, every call bounded; ChaosError with stderr on failure."""

    namespace: str
    kubeconfig: str = ""
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def argv(self, *args: str) -> list[str]:
        base = ["kubectl"] + (["--kubeconfig", self.kubeconfig] if self.kubeconfig else [])
        return [*base, "-n", self.namespace, *args]

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = KUBECTL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(self.argv(*args), input=input, capture_output=True, text=True, env=self.env,
                                  timeout=timeout, check=False)
        except FileNotFoundError as exc:
            raise ChaosError("--kube needs kubectl on PATH (scripts/cluster.sh env puts it there)") from exc
        except subprocess.TimeoutExpired as exc:
            raise ChaosError(f"kubectl {' '.join(args)}: no answer within {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise ChaosError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
        return proc

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        proc = self.run("get", kind, name, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise ChaosError(f"kubectl get {kind} {name}: {proc.stderr.strip()[-600:]}")
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    def items(self, kind: str, *selector: str) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"] + (["-l", ",".join(selector)] if selector else [])
        return json.loads(self.run(*args).stdout)["items"]  # type: ignore[no-any-return]

    def apply(self, *manifests: Mapping[str, Any]) -> None:
        self.run("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(dict(m)) for m in manifests))

    def delete(self, kind: str, *names: str, wait: bool = False, timeout_s: float = 30) -> None:
        if names:
            self.run("delete", kind, *names, "--ignore-not-found", f"--wait={'true' if wait else 'false'}",
                     f"--timeout={int(timeout_s)}s", timeout=timeout_s + 10)

    def logs(self, pod: str, container: str = "") -> str:
        return self.run("logs", pod, *(["-c", container] if container else []), check=False).stdout

    def exec(self, pod: str, container: str, *cmd: str, check: bool = True,
             timeout: float = KUBECTL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return self.run("exec", pod, "-c", container, "--", *cmd, check=check, timeout=timeout)

    def popen_exec(self, pod: str, container: str, *cmd: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv("exec", pod, "-c", container, "--", *cmd), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, env=self.env)


def wait_until(what: str, predicate: Callable[[], T | None], timeout_s: float, step_s: float = 0.5) -> T:
    """Poll until ``predicate`` returns something truthy (returned), else ChaosError after ``timeout_s``
    (core.waiting.until). A ChaosError of one poll (kubectl failing while a pod restarts) counts as "not yet"."""
    try:
        return waiting.until(predicate, what=what, timeout_s=timeout_s, step_s=step_s, tolerate=(ChaosError,))
    except waiting.NotReached as exc:
        raise ChaosError(str(exc)) from None


# -- the release -------------------------------------------------------------------------------------------
@dataclass
class KubeTarget:
    """A Helm release of the chart: where ``--kube`` scenarios run."""

    kubectl: Kubectl
    release: str
    _routers: dict[str, RouterPod] = field(default_factory=dict)
    _tls: bool | None = None

    @property
    def namespace(self) -> str:
        return self.kubectl.namespace

    @property
    def fullname(self) -> str:
        return self.release if FULLNAME_SUFFIX in self.release else f"{self.release}-{FULLNAME_SUFFIX}"

    def selector(self, component: str = "") -> list[str]:
        sel = [f"app.kubernetes.io/instance={self.release}"]
        return sel + ([f"app.kubernetes.io/component={component}"] if component else [])

    def routers(self) -> dict[str, RouterPod]:
        if not self._routers:
            self._routers = routers_from_configmaps(self.kubectl.items("configmap", *self.selector("router")))
            if not self._routers:
                raise ChaosError(f"no router ConfigMaps of release {self.release!r} in namespace {self.namespace!r}: "
                                 "is --release the Helm release name?")
        return self._routers

    def router(self, name: str) -> RouterPod:
        try:
            return self.routers()[name]
        except KeyError:
            raise ChaosError(f"release {self.release} has no router {name!r} (has {sorted(self.routers())})") from None

    def control_address(self, router: str) -> str:
        r = self.router(router)
        return f"{r.pod}.{r.statefulset}.{self.namespace}.svc.cluster.local:{CONTROL_PORT}"

    def broker_pod(self, cloud: str) -> str:
        return f"{self.fullname}-broker-{cloud.lower()}-0"

    def tls(self) -> bool:
        """Whether the release runs with mTLS (the chart's default): its broker pods mount a certificate."""
        if self._tls is None:
            pods = self.kubectl.items("pods", *self.selector("broker"))
            self._tls = any(m.get("mountPath") == TLS_DIR for p in pods for c in p["spec"]["containers"]
                            for m in c.get("volumeMounts") or ())
        return self._tls

    def client_certificate(self, client: str) -> str | None:
        """With mTLS: a certificate for ``client`` (its name: the broker binds its calls to it) issued from
        the CA the chart generated (Secret ``<release>-gridstat-ca``), kept in Secret
        ``gridstat-client-<client>`` (issued again on every run); its name. None without mTLS. A release
        on certificates of the user's own (``tls.secrets``, ``tls.secretName``) has no CA key here:
        ChaosError saying so."""
        if not self.tls():
            return None
        secret = client_secret_name(client)
        ca = self.kubectl.get("secret", f"{self.fullname}-ca")
        data = (ca or {}).get("data") or {}
        if "tls.key" not in data:
            raise ChaosError(f"release {self.release} runs mTLS but Secret {self.fullname}-ca with the CA's key is "
                             f"not there (certificates of your own?): create Secret {secret} (kubernetes.io/tls "
                             f"with ca.crt) for client {client!r}, then run again")
        from gridstat.core import certs

        ca_crt, ca_key = (base64.b64decode(data[k]) for k in ("tls.crt", "tls.key"))
        crt, key = certs.issue_pem(ca_crt, ca_key, client)
        self.kubectl.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                            "metadata": {"name": secret, "namespace": self.namespace,
                                         "labels": {"app.kubernetes.io/part-of": PART_OF}},
                            "data": {k: base64.b64encode(v).decode()
                                     for k, v in (("tls.crt", crt), ("tls.key", key), ("ca.crt", ca_crt))}})
        return secret

    def gridstat(self, cloud: str, *args: str) -> Any:
        """``gridstat ARGS -o json`` in the cloud's broker pod against its own broker (with the broker's own
        certificate under mTLS); None if it fails."""
        tls = TLS_ARGS if self.tls() else ()
        proc = self.kubectl.exec(self.broker_pod(cloud), "broker", "gridstat", *args, "--broker",
                                 f"127.0.0.1:{BROKER_PORT}", *tls, "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return None

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.kubectl.get("pod", name)

    def check(self) -> None:
        """The release is there and every role pod is Ready (else ChaosError saying which is not)."""
        pods = [p for p in self.kubectl.items("pods", *self.selector())
                if "helm.sh/hook" not in (p["metadata"].get("annotations") or {})
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        if not pods:
            raise ChaosError(f"no pods of release {self.release!r} in namespace {self.namespace!r}")
        waiting = [p["metadata"]["name"] for p in pods if not pod_ready(p)]
        if waiting:
            raise ChaosError(f"pods of release {self.release} not Ready: {', '.join(waiting)}")


# -- the node: processes and network namespaces of pods (root) ----------------------------------------------
def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ChaosError(f"{what} needs root on the node running the pods (it acts from the node, as kubelet does)")


def container_init_pid(cid: str, proc: Path = Path("/proc")) -> int:
    """The host PID of a container's PID 1 (by its runtime id in /proc/PID/cgroup); 0 if not on this node."""
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if is_container_init((d / "cgroup").read_text(), (d / "status").read_text(), cid):
                return int(d.name)
        except OSError:
            continue
    return 0


def pod_netns(ip: str) -> str:
    """The ``/run/netns`` namespace (``cni-*``) holding pod address ``ip``."""
    from .netns import run

    listing = run("ip", "netns", "list")
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    addresses = {}
    for ns in names:
        try:
            addresses[ns] = run("ip", "-n", ns, "-o", "-4", "addr", "show")
        except ChaosError:
            continue
    found = netns_with_ip(addresses, ip)
    if not found:
        raise ChaosError(f"no network namespace under /run/netns holds {ip}: is this the pod's node?")
    return found
