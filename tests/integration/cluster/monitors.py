"""The chart's ServiceMonitors and PodMonitors as the Prometheus Operator would make them scrape configs.

The node of the cluster suite serves no Prometheus Operator, so its monitor objects cannot be applied.
:func:`scrape_configs` does what the Operator does with them: each ServiceMonitor endpoint becomes a
Kubernetes-discovered job of role ``endpointslice`` (or ``endpoints``), each PodMonitor endpoint one
of role ``pod``, in the monitor's namespaces, with the Operator's relabelings -- keep the objects its
selector matches and the port it names; ``namespace``, ``service``, ``pod``, ``container``; ``job``
from ``jobLabel`` (the Service's label for a ServiceMonitor, the pod's for a PodMonitor; the Service's
name, or ``<namespace>/<monitor>``, without it); ``endpoint`` the port's name; ``instance`` the
address, as Prometheus defaults -- then the monitor's own relabelings (the chart's ``cloud`` and
``utility``). :func:`kubernetes_sd` makes that discovery's targets from the API's objects, for
Debian's Prometheus, which is built without Kubernetes discovery (file_sd instead); :func:`relabel`
applies the relabelings to a target's discovered labels, for the unit test.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

KINDS = ("ServiceMonitor", "PodMonitor")
#: The monitors' API versions, passed to `helm template` so that the chart renders them.
API_VERSIONS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor")


def sanitize(label: str) -> str:
    """A Kubernetes label's name in Prometheus' discovered meta labels (``gridstat.io/cloud`` ->
    ``gridstat_io_cloud``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def monitors(rendered: str) -> list[dict[str, Any]]:
    """The ServiceMonitors and PodMonitors of a `helm template` output."""
    return [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in KINDS]


def _relabeling(r: Mapping[str, Any]) -> dict[str, Any]:
    """A monitor's relabeling (the Operator's camelCase) as a Prometheus relabel_config."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label", "separator": "separator",
             "regex": "regex", "replacement": "replacement", "modulus": "modulus", "action": "action"}
    unknown = set(r) - set(names)
    assert not unknown, f"a relabeling field this translation does not know: {sorted(unknown)}"
    out = {names[k]: v for k, v in r.items()}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def sd_file(directory: Path | str, role: str, namespace: str) -> Path:
    """The file_sd file of one discovery role in one namespace (:func:`kubernetes_sd`)."""
    return Path(directory) / f"{role}-{namespace}.json"


def scrape_configs(objects: Iterable[Mapping[str, Any]], *, kubeconfig: Path | str | None = None,
                   file_sd_dir: Path | str | None = None, interval: str | None = None,
                   service_role: str = "endpointslice") -> list[dict[str, Any]]:
    """One scrape config per endpoint of each monitor in ``objects``, named as the Operator names them
    (``serviceMonitor/<namespace>/<name>/<i>``, ``podMonitor/...``). ``interval`` overrides the
    endpoints' own (a test scrapes every second).

    Discovery is ``kubernetes_sd_configs`` with ``kubeconfig`` (the API server's address and
    credentials), or, with ``file_sd_dir``, ``file_sd_configs`` reading the files :func:`kubernetes_sd`
    writes there: Debian's Prometheus is built without the Kubernetes discovery.

    ``service_role`` is the Operator's ``serviceDiscoveryRole`` for ServiceMonitors: ``endpointslice``
    (EndpointSlice; v1 Endpoints are deprecated since Kubernetes 1.33, and the suite's node runs no
    Endpoints controller) or ``endpoints``."""
    assert service_role in ("endpointslice", "endpoints"), service_role
    sl = "__meta_kubernetes_endpointslice_" if service_role == "endpointslice" else "__meta_kubernetes_endpoint_"
    assert (kubeconfig is None) != (file_sd_dir is None), "kubeconfig or file_sd_dir"
    out: list[dict[str, Any]] = []
    for m in objects:
        kind, meta, spec = m["kind"], m["metadata"], m["spec"]
        pod = kind == "PodMonitor"
        namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [meta["namespace"]]
        assert not (spec["selector"].get("matchExpressions")), "matchExpressions are not translated"
        # whose labels the selector and jobLabel read: the Service's (endpoints) or the pod's
        owner = "__meta_kubernetes_pod_label_" if pod else "__meta_kubernetes_service_label_"
        present = "__meta_kubernetes_pod_labelpresent_" if pod else "__meta_kubernetes_service_labelpresent_"
        endpoints = spec["podMetricsEndpoints"] if pod else spec["endpoints"]
        for i, ep in enumerate(endpoints):
            assert "port" in ep, f"{meta['name']}: only named ports are translated: {ep}"
            relabel: list[dict[str, Any]] = [
                {"source_labels": [owner + sanitize(k), present + sanitize(k)], "regex": f"({re.escape(str(v))});true",
                 "action": "keep"}
                for k, v in sorted(spec["selector"].get("matchLabels", {}).items())]
            if pod:
                relabel += [
                    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": ep["port"],
                     "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)",
                     "action": "drop"},
                    {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
                ]
            else:
                relabel += [
                    {"source_labels": [sl + "port_name"], "regex": ep["port"], "action": "keep"},
                    {"source_labels": [sl + "address_target_kind", sl + "address_target_name"],
                     "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
                    {"source_labels": [sl + "address_target_kind", sl + "address_target_name"],
                     "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                    {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)",
                     "action": "drop"},
                    {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                     "replacement": "${1}"},
                ]
            if spec.get("jobLabel"):
                relabel.append({"source_labels": [owner + sanitize(spec["jobLabel"])], "target_label": "job",
                                "regex": "(.+)", "replacement": "${1}"})
            relabel.append({"target_label": "endpoint", "replacement": str(ep["port"])})
            relabel += [_relabeling(r) for r in ep.get("relabelings", [])]
            config: dict[str, Any] = {
                "job_name": f"{'podMonitor' if pod else 'serviceMonitor'}/{meta['namespace']}/{meta['name']}/{i}",
                "honor_labels": bool(ep.get("honorLabels", False)),
                "scheme": ep.get("scheme", "http"),
                "metrics_path": ep.get("path", "/metrics"),
                "relabel_configs": relabel,
            }
            role = "pod" if pod else service_role
            if kubeconfig is not None:
                config["kubernetes_sd_configs"] = [{"role": role, "kubeconfig_file": str(kubeconfig),
                                                    "namespaces": {"names": list(namespaces)}}]
            else:
                assert file_sd_dir is not None
                config["file_sd_configs"] = [{"files": [str(sd_file(file_sd_dir, role, n)) for n in namespaces],
                                              "refresh_interval": "1s"}]
            if interval or ep.get("interval"):
                config["scrape_interval"] = interval or ep["interval"]
            if interval:
                config["scrape_timeout"] = interval
            out.append(config)
    return out


def relabel(labels: Mapping[str, str], configs: Iterable[Mapping[str, Any]]) -> dict[str, str] | None:
    """Prometheus' relabelling (actions replace, keep, drop) of one target's labels; None if dropped.
    The target's labels are what Prometheus keeps: those not starting with ``__``, ``instance`` from
    ``__address__`` when no relabeling set it."""
    out = dict(labels)
    for c in configs:
        action = c.get("action", "replace")
        value = c.get("separator", ";").join(out.get(s, "") for s in c.get("source_labels", []))
        m = re.fullmatch(c.get("regex", "(.*)"), value)
        if action == "keep":
            if not m:
                return None
        elif action == "drop":
            if m:
                return None
        elif action == "replace":
            if m:
                # ${1} and $1 as Go's Expand; an empty result removes the label
                vals: tuple[str | None, ...] = (m.group(0), *m.groups())

                def group(g: re.Match[str], vals: tuple[str | None, ...] = vals) -> str:
                    return vals[int(g.group(1))] or ""
                new = re.sub(r"\$\{?(\d+)\}?", group, str(c.get("replacement", "$1")))
                if new:
                    out[c["target_label"]] = new
                else:
                    out.pop(c["target_label"], None)
        else:
            raise AssertionError(f"relabel action {action!r} not simulated")
    out.setdefault("instance", out.get("__address__", ""))
    return {k: v for k, v in out.items() if not k.startswith("__")}


def _labels(prefix: str, labels: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in labels.items():
        out[f"__meta_kubernetes_{prefix}_label_{sanitize(k)}"] = v
        out[f"__meta_kubernetes_{prefix}_labelpresent_{sanitize(k)}"] = "true"
    return out


def _pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    meta, status = pod["metadata"], pod.get("status", {})
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
    return {"__meta_kubernetes_pod_name": meta["name"], "__meta_kubernetes_pod_ip": status.get("podIP", ""),
            "__meta_kubernetes_pod_phase": status.get("phase", ""), "__meta_kubernetes_pod_ready": str(ready).lower(),
            "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", ""),
            "__meta_kubernetes_pod_uid": meta.get("uid", ""), **_labels("pod", meta.get("labels") or {})}


def kubernetes_sd(role: str, namespace: str, *, pods: Sequence[Mapping[str, Any]],
                  services: Sequence[Mapping[str, Any]] = (), endpoints: Sequence[Mapping[str, Any]] = (),
                  endpointslices: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Prometheus' Kubernetes discovery of ``role`` (``pod``, ``endpointslice`` or ``endpoints``) in one
    namespace, made from the API's objects (``kubectl get -o json`` items): file_sd target groups with the
    meta labels it gives (https://prometheus.io/docs/prometheus/latest/configuration/configuration/#kubernetes_sd_config).
    Role pod: one target per container port of every pod with an IP. Roles endpointslice and endpoints:
    one per address and port of every EndpointSlice (Endpoints object), with its Service's labels and,
    for an address that is a pod, the pod's labels and the container that has the port."""
    ns = {"__meta_kubernetes_namespace": namespace}
    groups: list[dict[str, Any]] = []
    if role == "pod":
        for pod in pods:
            ip = pod.get("status", {}).get("podIP")
            for c in pod["spec"]["containers"] if ip else []:
                for p in c.get("ports", []):
                    groups.append({"targets": [f"{ip}:{p['containerPort']}"], "labels": {
                        **ns, **_pod_labels(pod), "__meta_kubernetes_pod_container_name": c["name"],
                        "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                        "__meta_kubernetes_pod_container_port_number": str(p["containerPort"]),
                        "__meta_kubernetes_pod_container_port_protocol": p.get("protocol", "TCP")}})
        return groups
    by_name = {p["metadata"]["name"]: p for p in pods}
    svcs = {s["metadata"]["name"]: s for s in services}

    def pod_port(labels: dict[str, str], ref: Mapping[str, str], number: int) -> None:
        pod = by_name.get(ref.get("name", "")) if ref.get("kind") == "Pod" else None
        if pod is not None:
            labels |= _pod_labels(pod)
            for c in pod["spec"]["containers"]:
                for p in c.get("ports", []):
                    if p["containerPort"] == number:
                        labels |= {"__meta_kubernetes_pod_container_name": c["name"],
                                   "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                                   "__meta_kubernetes_pod_container_port_number": str(p["containerPort"])}

    if role == "endpointslice":
        for es in endpointslices:
            es_labels = es["metadata"].get("labels") or {}
            base = {**ns, "__meta_kubernetes_endpointslice_name": es["metadata"]["name"],
                    "__meta_kubernetes_endpointslice_address_type": es.get("addressType", "IPv4"),
                    **_labels("endpointslice", es_labels)}
            svc = svcs.get(es_labels.get("kubernetes.io/service-name", ""))
            if svc is not None:
                base |= {"__meta_kubernetes_service_name": svc["metadata"]["name"],
                         **_labels("service", svc["metadata"].get("labels") or {})}
            for e in es.get("endpoints") or []:
                ref = e.get("targetRef") or {}
                cond = e.get("conditions") or {}
                for port in es.get("ports") or []:
                    labels = {**base, "__meta_kubernetes_endpointslice_port": str(port["port"]),
                              "__meta_kubernetes_endpointslice_port_name": port.get("name", ""),
                              "__meta_kubernetes_endpointslice_port_protocol": port.get("protocol", "TCP"),
                              "__meta_kubernetes_endpointslice_endpoint_conditions_ready":
                                  str(cond.get("ready", True)).lower()}
                    if ref:
                        labels |= {"__meta_kubernetes_endpointslice_address_target_kind": ref.get("kind", ""),
                                   "__meta_kubernetes_endpointslice_address_target_name": ref.get("name", "")}
                    pod_port(labels, ref, port["port"])
                    groups += [{"targets": [f"{a}:{port['port']}"], "labels": labels} for a in e["addresses"]]
        return groups
    assert role == "endpoints", role
    for ep in endpoints:
        name = ep["metadata"]["name"]
        svc = svcs.get(name)
        base = {**ns, "__meta_kubernetes_endpoints_name": name,
                **_labels("endpoints", ep["metadata"].get("labels") or {})}
        if svc is not None:
            base |= {"__meta_kubernetes_service_name": name, **_labels("service", svc["metadata"].get("labels") or {})}
        for subset in ep.get("subsets") or []:
            for ready, addresses in (("true", subset.get("addresses") or []),
                                     ("false", subset.get("notReadyAddresses") or [])):
                for a in addresses:
                    ref = a.get("targetRef") or {}
                    for port in subset.get("ports") or []:
                        labels = {**base, "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                                  "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                                  "__meta_kubernetes_endpoint_ready": ready}
                        if ref:
                            labels |= {"__meta_kubernetes_endpoint_address_target_kind": ref.get("kind", ""),
                                       "__meta_kubernetes_endpoint_address_target_name": ref.get("name", "")}
                        pod_port(labels, ref, port["port"])
                        groups.append({"targets": [f"{a['ip']}:{port['port']}"], "labels": labels})
    return groups
