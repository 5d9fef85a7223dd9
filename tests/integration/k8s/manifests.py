"""Custom resources as the tests apply them."""

from __future__ import annotations

from typing import Any

API = "gridstat.io/v1alpha1"


def subscription(name: str, namespace: str, *, variables: tuple[str, ...] = ("pmu1/freq",), interval_ms: int = 20,
                 latency_ms: int = 50, redundancy: int = 1, labels: dict[str, str] | None = None,
                 modes: list[dict[str, Any]] | None = None, cloud: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"subscriber": "ems", "edgeRouter": "e2", "variables": list(variables),
                            "qos": {"intervalMs": interval_ms, "latencyMs": latency_ms, "redundancy": redundancy}}
    if modes is not None:
        spec["modes"] = modes
    if cloud is not None:
        spec["cloud"] = cloud
    return {"apiVersion": API, "kind": "Subscription",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


def mode(name: str, namespace: str, mode_id: int, *, match_labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"id": mode_id}
    if match_labels:
        spec["subscriptionSelector"] = {"matchLabels": match_labels}
    return {"apiVersion": API, "kind": "Mode", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def active_mode(namespace: str, target: str, name: str = "current") -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ActiveMode", "metadata": {"name": name, "namespace": namespace},
            "spec": {"mode": target}}
