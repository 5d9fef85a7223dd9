"""A real Kubernetes control plane for the tests (scripts/kube-apiserver.sh) and kubectl helpers.

The binaries are built once by scripts/k8s-tools.sh into a cache outside the checkout. When they
are missing the k8s tests are skipped locally with the command to run, and fail under CI
(``CI=true``), where .ci/run builds them first: a missing part must never pass silently.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"
CRDS = ROOT / "charts" / "gridstat" / "crds"


def tool_env() -> dict[str, str]:
    """PATH with the cached kube binaries and helm in front (scripts/k8s-tools.sh env)."""
    out = subprocess.run([str(SCRIPTS / "k8s-tools.sh"), "env"], capture_output=True, text=True, check=True).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        m = re.match(r"export (\w+)=(.*)", line)
        if m:
            env[m.group(1)] = m.group(2).replace("$PATH", os.environ.get("PATH", ""))
    return env


def require_tools(*, helm: bool = False) -> dict[str, str]:
    env = tool_env()
    have = subprocess.run([str(SCRIPTS / "k8s-tools.sh"), "check"], env=env).returncode == 0 if helm else \
        Path(env["GRIDSTAT_K8S_BIN"], "kube-apiserver").exists()
    if not have:
        message = "kube-apiserver/helm are not built: run scripts/k8s-tools.sh (cached under ~/.cache/gridstat)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return env


@dataclass
class Cluster:
    dir: Path
    kubeconfig: Path
    env: dict[str, str]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], input=input,
                              capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, manifest: Mapping[str, Any] | str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.kubectl("apply", "-f", "-", input=text, check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        proc = self.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        proc = self.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                            "-o", "json")
        return json.loads(proc.stdout)["items"]  # type: ignore[no-any-return]

    def wait_for(self, kind: str, name: str, namespace: str, predicate: Callable[[dict[str, Any] | None], bool],
                 *, timeout_s: float = 30.0, what: str = "") -> dict[str, Any] | None:
        """Poll ``kubectl get`` until ``predicate(body)`` holds; the last body in the failure message."""
        deadline = time.monotonic() + timeout_s
        body = None
        while time.monotonic() < deadline:
            body = self.get(kind, name, namespace)
            if predicate(body):
                return body
            time.sleep(0.3)
        raise AssertionError(f"{kind}/{name}: {what or 'condition'} not reached in {timeout_s} s; last: "
                             f"{json.dumps((body or {}).get('status'), indent=1)}")


def condition(body: Mapping[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((body or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return {}


def has_condition(type_: str, status: str, reason: str | None = None) -> Callable[[dict[str, Any] | None], bool]:
    def check(body: dict[str, Any] | None) -> bool:
        c = condition(body, type_)
        return bool(body) and c.get("status") == status and (reason is None or c.get("reason") == reason) \
            and (body or {}).get("status", {}).get("observedGeneration") == (body or {})["metadata"]["generation"]
    return check


def start_cluster(workdir: Path, env: dict[str, str]) -> Iterator[Cluster]:
    proc = subprocess.run([str(SCRIPTS / "kube-apiserver.sh"), "start", str(workdir)], capture_output=True,
                          text=True, env={**env, "GRIDSTAT_KUBE_PARENT_PID": str(os.getpid())}, timeout=180)
    if proc.returncode != 0 or "READY" not in proc.stdout:
        subprocess.run([str(SCRIPTS / "kube-apiserver.sh"), "stop", str(workdir)], env=env, timeout=60)
        raise RuntimeError(f"kube-apiserver did not start: {proc.stdout}\n{proc.stderr}")
    cluster = Cluster(workdir, workdir / "kubeconfig", env)
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(CRDS))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS))
        yield cluster
    finally:
        subprocess.run([str(SCRIPTS / "kube-apiserver.sh"), "stop", str(workdir)], env=env, timeout=60)
