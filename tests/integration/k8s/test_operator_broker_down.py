"""A Subscription whose broker does not answer gets a status at once (docs/kubernetes.md,
"Subscriptions"). Runs its own operator (kopf.testing.KopfRunner) with a second cloud whose
"broker" accepts connections and never answers, like a Service without endpoints."""

from __future__ import annotations

import socket
import time

import pytest

from .conftest import operator
from .grid import Grid
from .kube import Cluster, condition, has_condition
from .manifests import subscription

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_new_subscription_shows_its_silent_broker_at_once(cluster: Cluster, grid: Grid, namespace: str) -> None:
    """A broker that accepts connections and never answers (like a Service without endpoints) takes
    a whole deadline per call; the status names it within a few seconds anyway, then retries."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accepted: the handshake completes, no HTTP/2 settings ever come back
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    try:
        with operator(cluster, grid, extra_clouds={"B": address}):
            started = time.monotonic()
            cluster.apply(subscription("waiting", namespace, variables=("pmu1/volt",), cloud="B"))
            body = cluster.wait_for("gsub", "waiting", namespace,
                                    lambda b: condition(b, "Ready").get("status") == "False", timeout_s=5,
                                    what="a status within a few seconds")
            assert time.monotonic() - started < 5
            ready, admitted = condition(body, "Ready"), condition(body, "Admitted")
            assert ready["reason"] in ("Pending", "BrokerUnavailable") and address in ready["message"]
            assert admitted["status"] == "Unknown" and admitted["reason"] in ("Pending", "BrokerUnavailable")
            # one deadline (GRIDSTAT_BROKER_TIMEOUT_S=3 here) later: the error, then retries with backoff
            body = cluster.wait_for("gsub", "waiting", namespace, has_condition("Ready", "False", "BrokerUnavailable"),
                                    timeout_s=8, what="BrokerUnavailable after one deadline")
            assert address in condition(body, "Ready")["message"]
            assert condition(body, "Admitted")["status"] == "Unknown"
            assert body is not None and body["status"]["broker"] == address
            cluster.kubectl("delete", "gsub", "waiting", "-n", namespace, "--wait=false")
    finally:
        silent.close()
