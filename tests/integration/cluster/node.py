"""A real single-node Kubernetes whose pods run (scripts/cluster.sh) and kubectl/helm helpers.

The node's tools are built once by ``scripts/cluster.sh tools`` into a cache outside the checkout.
When they are missing these tests are skipped locally with the command to run, and fail under CI
(``CI=true``), where scripts/test.sh builds them first.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridstat.chaos import kube

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"
CHART = ROOT / "charts" / "gridstat"
CLUSTER_DIR = Path(os.environ.get("GRIDSTAT_CLUSTER_DIR", "/tmp/gridstat-cluster"))
SYSCTLS = ("kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
           "net.ipv4.ip_forward", "net.ipv4.conf.all.route_localnet", "net.bridge.bridge-nf-call-iptables")


def _env_lines(out: str, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    for line in out.splitlines():
        for m in re.finditer(r"(\w+)=(\S+)", line.removeprefix("export ")):
            env[m.group(1)] = m.group(2).replace("$PATH", base.get("PATH", ""))
    return env


def require_node_tools() -> dict[str, str]:
    """The environment of scripts/cluster.sh env, or a skip (a failure under CI) when tools are missing."""
    tools = subprocess.run([str(SCRIPTS / "k8s-tools.sh"), "check"]).returncode == 0 and \
        subprocess.run([str(SCRIPTS / "k8s-tools.sh"), "check-node"]).returncode == 0
    if not tools or os.geteuid() != 0:
        message = ("the node's tools are not built (scripts/cluster.sh tools; cached under ~/.cache/gridstat)"
                   if tools is False else "a node needs root")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    out = subprocess.run([str(SCRIPTS / "cluster.sh"), "env"], capture_output=True, text=True, check=True,
                         env={**os.environ, "GRIDSTAT_CLUSTER_DIR": str(CLUSTER_DIR)}).stdout
    return _env_lines(out, {**os.environ, "GRIDSTAT_CLUSTER_DIR": str(CLUSTER_DIR)})


def host_state() -> dict[str, Any]:
    """What `cluster.sh down` must put back: firewall rules, links, network namespaces, mounts, sysctls."""
    def run(*cmd: str) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        return proc.stdout if proc.returncode == 0 else ""

    rules = [re.sub(r"\[\d+:\d+\]", "", line) for line in run("iptables-save").splitlines()
             if not line.startswith("#")]
    return {
        "iptables": sorted(rules),
        "nft tables": sorted(run("nft", "list", "tables").splitlines()),
        "links": sorted(line.split(":")[1].strip().split("@")[0] for line in run("ip", "-o", "link").splitlines()),
        "netns": sorted(run("ip", "netns", "list").split()),
        "ipsets": sorted(run("ipset", "list", "-n").split()),
        "mounts": sorted(line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                         if str(CLUSTER_DIR) in line.split()[1]),
        "sysctls": {k: run("sysctl", "-n", k).strip() for k in SYSCTLS},
        "processes": sorted(p.name for p in Path("/proc").iterdir() if p.name.isdigit()
                            and _cmdline_has(p, str(CLUSTER_DIR))),
    }


def control_plane_rss_mib() -> float:
    """Resident memory of the node's own processes (API server, etcd, controller manager, scheduler,
    kubelet, kube-proxy, CoreDNS, containerd): those whose command line names the cluster's directory."""
    total_kib = 0
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and _cmdline_has(p, str(CLUSTER_DIR)):
            try:
                status = (p / "status").read_text()
            except OSError:
                continue
            m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
            total_kib += int(m.group(1)) if m else 0
    return total_kib / 1024


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@dataclass
class Node:
    env: dict[str, str]
    kubeconfig: Path
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, *cmd: str, input: str | None = None, check: bool = True, timeout: float = 120,
            env_extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(cmd), input=input, capture_output=True, text=True,
                              env={**self.env, **(env_extra or {})}, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", "--kubeconfig", str(self.kubeconfig), *args, input=input, check=check,
                        timeout=timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run("helm", "--kubeconfig", str(self.kubeconfig), *args, check=check, timeout=timeout)

    def apply(self, *manifests: Mapping[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(dict(m)) for m in manifests))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        proc = self.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    def items(self, kind: str, namespace: str, *selector: str) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", ",".join(selector)]
        return json.loads(self.kubectl(*args).stdout)["items"]  # type: ignore[no-any-return]

    def pods(self, namespace: str, *selector: str) -> list[dict[str, Any]]:
        return self.items("pods", namespace, *selector)

    def exec(self, namespace: str, pod: str, *cmd: str, container: str | None = None,
             check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        args = ["exec", "-n", namespace, pod]
        if container:
            args += ["-c", container]
        return self.kubectl(*args, "--", *cmd, check=check, timeout=timeout)

    def logs(self, namespace: str, pod: str, *, container: str | None = None) -> str:
        args = ["logs", "-n", namespace, pod]
        if container:
            args += ["-c", container]
        return self.kubectl(*args, check=False).stdout

    def diagnose(self, namespace: str) -> str:
        """What a failed wait needs to be understood: the pods, the namespace's events, and for every pod
        not Ready its description and the last lines of its containers' logs (this run and the previous)."""
        out = [self.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout,
               self.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout[-6000:]]
        for pod in self.items("pods", namespace):
            if pod_ready(pod):
                continue
            name = pod["metadata"]["name"]
            out.append(self.kubectl("describe", "pod", "-n", namespace, name, check=False).stdout[-3000:])
            for previous in ("", "--previous"):
                proc = self.kubectl("logs", "-n", namespace, name, "--all-containers", "--tail=40",
                                    *([previous] if previous else []), check=False)
                out.append(f"--- logs {name} {previous}\n{proc.stdout}{proc.stderr}")
        return "\n".join(out)

    def wait_until(self, what: str, predicate: Callable[[], Any], timeout_s: float = 120,
                   interval_s: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval_s)
        raise AssertionError(f"{what}: not reached in {timeout_s} s (last: {last!r})")


pod_ready = kube.pod_ready


def start_node(env: dict[str, str]) -> Iterator[Node]:
    """`cluster.sh up` (a watcher takes it down if this process dies), then `down`, checked against the
    host's state before `up`: nothing may be left behind. A node that was already up (a developer's
    `scripts/cluster.sh up`) is used as it is and left up."""
    if subprocess.run([str(SCRIPTS / "cluster.sh"), "status"], env=env).returncode == 0:
        yield Node(env, CLUSTER_DIR / "kubeconfig")
        return
    if CLUSTER_DIR.exists():
        # What a node that died or was killed left (a directory, mounts, the bridge, rules): `down`
        # clears it first, so "nothing left behind" compares with the host as it was before any node.
        subprocess.run([str(SCRIPTS / "cluster.sh"), "down"], env=env, timeout=600, capture_output=True)
    before = host_state()
    started = time.monotonic()
    proc = subprocess.run([str(SCRIPTS / "cluster.sh"), "up"], capture_output=True, text=True, timeout=1800,
                          env={**env, "GRIDSTAT_KUBE_PARENT_PID": str(os.getpid())})
    if proc.returncode != 0 or "READY" not in proc.stdout:
        subprocess.run([str(SCRIPTS / "cluster.sh"), "down"], env=env, timeout=300)
        raise RuntimeError(f"scripts/cluster.sh up failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    node = Node(env, CLUSTER_DIR / "kubeconfig")
    node.timings["node Ready (up, warm tools)"] = time.monotonic() - started
    print(proc.stderr)  # each step's time, for the record (pytest -s, or the captured log on failure)
    try:
        yield node
    finally:
        down = subprocess.run([str(SCRIPTS / "cluster.sh"), "down"], capture_output=True, text=True, env=env,
                              timeout=600)
        after = host_state()
        assert down.returncode == 0, f"scripts/cluster.sh down failed: {down.stderr[-3000:]}"
        left = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        assert not left, f"scripts/cluster.sh down left something behind: {json.dumps(left, indent=1)}"
