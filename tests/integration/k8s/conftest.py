"""Session fixtures of the Kubernetes suites: a real control plane, a real utility, the operator."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kopf.testing import KopfRunner

from ..fixtures import environment
from .grid import Grid, start_grid
from .kube import Cluster, require_tools, start_cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = require_tools()
    yield from start_cluster(tmp_path_factory.mktemp("kube"), env)


@pytest.fixture(scope="session")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Grid]:
    g = start_grid(tmp_path_factory.mktemp("grid"))
    try:
        yield g
    finally:
        g.stop()


@contextlib.contextmanager
def operator(cluster: Cluster, grid: Grid, *, extra_clouds: dict[str, str] | None = None) -> Iterator[KopfRunner]:
    """The operator in this process (kopf.testing.KopfRunner), all namespaces, no peering."""
    clouds = {"A": grid.address, **(extra_clouds or {})}
    with environment(KUBECONFIG=str(cluster.kubeconfig), GRIDSTAT_BROKERS=",".join(f"{c}={a}" for c, a in
                                                                                    clouds.items()),
                     GRIDSTAT_DRIFT_CHECK_S="10", GRIDSTAT_BROKER_TIMEOUT_S="3"), \
            KopfRunner(["run", "--all-namespaces", "--standalone", "-m", "gridstat_operator.handlers"],
                       timeout=60) as runner:
        yield runner


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


__all__ = ["Path", "operator"]
