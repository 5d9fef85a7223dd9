"""Every metric that a Grafana dashboard or a Prometheus alert names is really exported by the roles.

Real roles -- a parent broker, a leaf broker, two edge routers, all exporting to Kafka -- and a
subscriber in this process serve /metrics; traffic, a rejected subscription, a drop and a mode
change make every metric family carry samples. Then each PromQL expression of
deploy/grafana/dashboards/*.json and deploy/prometheus/gridstat-rules.yaml is checked: every
``gridstat_*`` metric it names is exported, and every label it selects on is one of that metric's
labels or one the scrape adds (``SCRAPE_LABELS``). ``up`` is Prometheus's own series and is allowed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from urllib.request import urlopen

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gridstat.client import Publisher, Subscriber, SubscriptionRejected
from gridstat.core import children
from gridstat.core.model import FLOAT
from gridstat.telemetry import RoleTelemetry, roles
from gridstat.v1 import broker_pb2 as bpb

from .alertsproc import alert_record, produce, start_exporter
from .brokerprocs import add_link, add_router, start_broker
from .fixtures import free_port
from .kafkaprocs import ROOT, KafkaProc
from .routerprocs import start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "gridstat-rules.yaml"
#: Series Prometheus makes itself.
BUILTIN = {"up"}
METRIC = re.compile(r"\b(gridstat_[a-zA-Z0-9_]+)\b")
SELECTOR = re.compile(r"\b(gridstat_[a-zA-Z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every dashboard target, dashboard variable query and alert rule."""
    out: list[tuple[str, str]] = []
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        for p in d["panels"]:
            for t in p.get("targets", []):
                out.append((f"{path.name}: {p['title']}", t["expr"]))
        for v in d["templating"]["list"]:
            if v.get("type") == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                out.append((f"{path.name}: variable {v['name']}", q))
    doc = yaml.safe_load(RULES.read_text())
    for g in doc["spec"]["groups"]:
        for r in g["rules"]:
            out.append((f"rules: {r['alert']}", r["expr"]))
    return out


def scrape(port: int) -> dict[str, set[str]]:
    """Exported sample name -> label names (counters under their ``_total`` name too)."""
    body = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(body):
        names = {fam.name + "_total"} if fam.type == "counter" else {fam.name}
        for name in names:
            out.setdefault(name, set())
        for s in fam.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


def test_dashboards_and_rules_are_well_formed() -> None:
    assert {p.name for p in DASHBOARDS} >= {"gridstat-routers.json", "gridstat-brokers.json",
                                           "gridstat-subscriptions.json"}
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        assert d["panels"] and all(p["targets"] for p in d["panels"]), path
        assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    doc = yaml.safe_load(RULES.read_text())
    assert doc["kind"] == "PrometheusRule"
    alerts = [r for g in doc["spec"]["groups"] for r in g["rules"]]
    assert all(r["labels"]["severity"] in ("critical", "warning", "info") and r["annotations"]["summary"]
               for r in alerts)
    names = {r["alert"] for r in alerts}
    # the four kinds: broken guarantees, drops, router overload, broker unavailability
    assert {"GridStatLatencyBoundBroken", "GridStatRouterQueueDrops", "GridStatRouterOverload",
            "GridStatBrokerUnavailable"} <= names


async def test_every_queried_metric_is_exported_by_the_roles(kafka: KafkaProc, tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("parent", "A", "e1", "e2")}
    common = ("--kafka", kafka.bootstrap)
    parent = await asyncio.to_thread(start_broker, "P", str(tmp_path / "P.sqlite"), extra=(
        "--role", "parent", *common, "--metrics-port", str(ports["parent"])))
    broker = await asyncio.to_thread(start_broker, "A", str(tmp_path / "A.sqlite"), extra=(
        *common, "--metrics-port", str(ports["A"])))
    routers = {}
    tel = RoleTelemetry("subscriber", "ops", kafka=kafka.bootstrap, metrics_port=0)
    try:
        for name, rid in (("e1", 1), ("e2", 2)):
            routers[name] = await asyncio.to_thread(start_router, name, rid, role="edge", extra=(
                "--broker", broker.address, *common, "--metrics-port", str(ports[name])))
            await asyncio.to_thread(add_router, broker, routers[name], "edge")
        await asyncio.to_thread(add_link, broker, "e1", "e2", latency_ms=1.0)
        await asyncio.to_thread(broker.stub.DefineMode, bpb.DefineModeRequest(mode=1, name="storm"), timeout=5)
        pub = await Publisher.connect("pmu1", f"127.0.0.1:{routers['e1'].control_port}")
        sub = await Subscriber.connect("ops", f"127.0.0.1:{routers['e2'].control_port}")
        try:
            freq = await pub.register("freq", FLOAT, 20)
            other = await pub.register("other", FLOAT, 20)  # never subscribed: a counted drop at e1
            await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=20, latency_ms=100)
            with pytest.raises(SubscriptionRejected):
                await sub.subscribe_remote("pmu1/other", FLOAT, interval_ms=20, latency_ms=1)
            roles.add_subscriber(tel, sub)
            await tel.start()
            await asyncio.to_thread(broker.stub.ChangeMode, bpb.ChangeModeRequest(name="storm"), timeout=10)
            await asyncio.to_thread(broker.stub.ChangeMode, bpb.ChangeModeRequest(mode=0), timeout=10)
            end = time.time() + 1.5
            ts = (time.time_ns() // 1_000_000 // 20 + 1) * 20
            while time.time() < end:
                await asyncio.sleep(max(0.0, (ts - time.time_ns() / 1e6) / 1000))
                freq.publish(60.0, ts)
                other.publish(1.0, ts)
                ts += 20
            await asyncio.sleep(0.3)
            assert tel.metrics_port is not None
            exported: dict[str, set[str]] = {}
            for port in (*ports.values(), tel.metrics_port):
                for name, labels in (await asyncio.to_thread(scrape, port)).items():
                    exported.setdefault(name, set()).update(labels)
        finally:
            await tel.stop()
            await sub.stop()
            await pub.stop()
    finally:
        for r in routers.values():
            r.stop()
        broker.stop()
        parent.stop()

    # The streaming QoS alerts' exporter, with alert records of spark/qos_alerts.py's format in Kafka
    # (docs/telemetry.md, "The QoS alerts on a dashboard").
    await asyncio.to_thread(produce, kafka.bootstrap, [
        alert_record("ops", "pmu1/freq", "latency", 150.0, 100.0, seq=1),
        alert_record("ops", "pmu1/freq", "gaps", 2.0, 0.0, seq=1)])
    alerts, alerts_port = await asyncio.to_thread(start_exporter, kafka.bootstrap)
    try:
        deadline = time.monotonic() + 30
        # its families are there from the start; their labelled samples once the records are read
        while "subscriber" not in (got := await asyncio.to_thread(scrape, alerts_port)).get(
                "gridstat_qos_alert_ratio", set()) and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
        for name, labels in got.items():
            exported.setdefault(name, set()).update(labels)
    finally:
        children.stop(alerts)

    missing: list[str] = []
    checked = 0
    for where, expr in expressions():
        names = set(METRIC.findall(expr))
        assert names or "up{" in expr.replace(" ", ""), f"{where}: names no metric: {expr}"
        for name in names - BUILTIN:
            checked += 1
            if name not in exported:
                missing.append(f"{where}: {name}")
        for name, body in SELECTOR.findall(expr):
            for label in MATCHER.findall(body):
                if name in exported and label not in exported[name] | SCRAPE_LABELS:
                    missing.append(f"{where}: {name} has no label {label!r} (has {sorted(exported[name])})")
    assert not missing, "\n".join(missing)
    assert checked > 50


#: Labels the scrape adds, not the roles (the chart's ServiceMonitors and PodMonitor: gridstat.scrapeRelabelings,
#: and the Prometheus Operator's namespace; docs/telemetry.md, "Kubernetes").
SCRAPE_LABELS = frozenset({"namespace", "cloud", "utility", "job", "instance"})


def test_the_admission_controller_serves_metrics(tmp_path: Path) -> None:
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "admission", "--port", "0", "--metrics-port",
                             str(port), "--exit-with-parent"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY name=admission port=") and f"metrics_port={port}" in line, line
        exported = scrape(port)
        assert {"gridstat_admission_info", "gridstat_admission_decisions_total", "gridstat_admission_reservations",
                "gridstat_admission_routers", "gridstat_admission_links"} <= set(exported)
        assert exported["gridstat_admission_info"] == {"admission", "policy"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
