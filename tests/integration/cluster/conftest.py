"""Fixtures of the cluster suite: one real node for the package, one release of the chart on it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .node import CHART, SCRIPTS, Node, control_plane_rss_mib, pod_ready, require_node_tools, start_node
from .release import Release

VALUES = Path(__file__).with_name("values-cluster.yaml")


#: What the suite measured (node Ready, helm install to all Ready, ...), printed at the end of the run.
MEASURED: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MEASURED:
        terminalreporter.section("cluster suite: measured")
        for what, value in MEASURED.items():
            terminalreporter.write_line(f"{what:<55} {value:10.1f}")


@pytest.fixture(scope="package")
def node() -> Iterator[Node]:
    for n in start_node(require_node_tools()):
        MEASURED.update(n.timings)
        n.timings = MEASURED
        yield n


@pytest.fixture(scope="package")
def release(node: Node) -> Iterator[Release]:
    """`helm install` of a two-cloud utility with a parent broker; every pod Running and Ready."""
    rel = Release(node, name="pacific", namespace="grid-pacific", values=VALUES)
    node.kubectl("create", "namespace", rel.namespace)
    started = time.monotonic()
    # helm's own wait ends before pytest's timeout, so a pod that never becomes Ready is named, with
    # its events and logs, instead of the run being cut off in the middle of `helm install`.
    try:
        node.helm("install", rel.name, str(CHART), "-n", rel.namespace, "-f", str(VALUES), "--wait",
                  "--timeout", "6m", timeout=420)
        node.wait_until("every pod of the release Ready",
                        lambda: (pods := node.pods(rel.namespace, f"app.kubernetes.io/instance={rel.name}"))
                        and all(pod_ready(p) for p in pods), timeout_s=60)
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        raise AssertionError(f"the release did not become Ready: {exc}\n{node.diagnose(rel.namespace)}") from None
    node.timings["helm install to all Ready"] = time.monotonic() - started
    yield rel
    MEASURED["control plane and node RSS with the release running, MiB"] = control_plane_rss_mib()
    # The resources first, while the operator runs, so their finalizers remove their routes (docs/kubernetes.md).
    node.kubectl("delete", "gam,gsub,gcf,gmode", "--all", "-n", rel.namespace, "--timeout=120s", check=False)
    node.helm("uninstall", rel.name, "-n", rel.namespace, "--wait", "--timeout", "2m", check=False)
    node.kubectl("delete", "namespace", rel.namespace, "--timeout=120s", check=False)
    node.run(str(SCRIPTS / "cluster.sh"), "recycle-volumes", check=False)
