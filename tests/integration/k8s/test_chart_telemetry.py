"""The chart's telemetry, archive, Spark jobs and scrape objects, rendered by helm (docs/kubernetes.md,
"Telemetry, archive and Spark jobs"; docs/telemetry.md, "Kubernetes" and "Subscribers")."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from .test_chart import TWO_CLOUDS, helm, render, tools, write_values  # noqa: F401 - tools is a fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KAFKA = ("--set", r"telemetry.kafka.bootstrap=kafka-0.data:9092\,kafka-1.data:9092")
MONITORING = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
              "--api-versions", "monitoring.coreos.com/v1/PodMonitor",
              "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
ON = ("--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true")
PDC = {"c37118": {"pdcServers": [{"name": "cc1", "edgeRouter": "e2", "variables": ["pmu1/freq"],
                                  "framesPerS": 10}]}}
SPARK_IMAGE = ("--set", "spark.image.repository=registry.example.com/grid/gridstat-spark",
               "--set-string", "spark.image.tag=4.2.0")
INSECURE = ("--set", "tls.enabled=false", "--set", "security.insecure=true")


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_of(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "CronJob":
        spec: dict[str, Any] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    spec = doc["spec"]["template"]["spec"]
    return spec


def args_of(doc: dict[str, Any]) -> list[str]:
    """The first container's arguments; a router's ``sh -c`` string split as the shell would (its
    ``$$`` and ``${...}`` left as written)."""
    c = pod_of(doc)["containers"][0]
    if c.get("command") == ["/bin/sh", "-c"]:
        return shlex.split(c["args"][0])
    return [str(a) for a in c["args"]]


def failure(tools: dict[str, str], *args: str) -> str:  # noqa: F811
    proc = helm(tools, "template", "rel", str(Path(__file__).parents[3] / "charts" / "gridstat"), "-n", "grid",
                *args, check=False)
    assert proc.returncode != 0, "expected the chart to refuse these values"
    return proc.stderr


# -- scrape objects: only where the cluster serves the kinds ------------------------------------------
def test_scrape_objects_only_where_the_cluster_serves_them_and_only_when_enabled(
        tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    pdc = write_values(tmp_path, "pdc.json", {**PDC, "clouds": [{"name": "A", "routers": [
        {"name": "e1", "id": 1, "role": "edge"}, {"name": "e2", "id": 2, "role": "edge"}],
        "links": [{"a": "e1", "b": "e2", "latencyMs": 1}]}]})
    kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    # a bare cluster (the guide's example): enabled, but nothing the API server would refuse
    bare = render(tools, pdc, extra=ON)
    assert not {d["kind"] for d in bare} & kinds
    # served and enabled: ServiceMonitors, the subscribers' PodMonitor, the rules
    served = render(tools, pdc, extra=ON + MONITORING)
    assert set(by_kind(served, "ServiceMonitor")) == {"rel-gridstat-broker", "rel-gridstat-router",
                                                      "rel-gridstat-admission"}
    (monitor,) = by_kind(served, "PodMonitor").values()
    assert monitor["metadata"]["name"] == "rel-gridstat-subscribers"
    assert monitor["spec"]["jobLabel"] == "gridstat.io/scrape-job"
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/instance": "rel",
                                                          "gridstat.io/scrape-job": "gridstat-subscriber"}
    assert len(by_kind(served, "PrometheusRule")) == 1
    # served, not enabled: none (the values switch)
    assert not {d["kind"] for d in render(tools, pdc, extra=MONITORING)} & kinds
    # ServiceMonitor served but not PodMonitor: the ServiceMonitors only
    only_sm = render(tools, pdc, extra=(*ON, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"))
    assert by_kind(only_sm, "ServiceMonitor") and not by_kind(only_sm, "PodMonitor")
    # the subscribers' PodMonitor can be switched off alone, and is not made without subscriber pods
    off = render(tools, pdc, extra=ON + MONITORING + ("--set", "serviceMonitor.subscribers=false"))
    assert by_kind(off, "ServiceMonitor") and not by_kind(off, "PodMonitor")
    assert not by_kind(render(tools, extra=ON + MONITORING), "PodMonitor")


def test_every_scrape_endpoint_labels_its_series_with_the_cloud_and_utility(
        tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    extra = write_values(tmp_path, "relabel.json", {"serviceMonitor": {"relabelings": [
        {"targetLabel": "region", "replacement": "west"}]}})
    docs = render(tools, TWO_CLOUDS, extra, extra=ON + MONITORING)
    endpoints = [e for d in by_kind(docs, "ServiceMonitor").values() for e in d["spec"]["endpoints"]]
    endpoints += [e for d in by_kind(docs, "PodMonitor").values() for e in d["spec"]["podMetricsEndpoints"]]
    assert len(endpoints) == 4  # broker, router, admission; the condensation host's PodMonitor
    for e in endpoints:
        assert e["port"] == "metrics"
        assert e["relabelings"] == [
            {"sourceLabels": ["__meta_kubernetes_pod_label_gridstat_io_cloud"], "targetLabel": "cloud"},
            {"sourceLabels": ["__meta_kubernetes_pod_label_gridstat_io_utility"], "targetLabel": "utility"},
            {"targetLabel": "region", "replacement": "west"}]
    # the labels those relabelings read are on the pods: every leaf broker's and router's, and the subscribers'
    for name, sts in by_kind(docs, "StatefulSet").items():
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert labels["gridstat.io/utility"] == "pacific"
        if name != "rel-gridstat-parent":  # above the clouds: no cloud
            assert labels["gridstat.io/cloud"] in ("A", "B"), name
    host = by_kind(docs, "Deployment")["rel-gridstat-condensation-host"]
    assert host["spec"]["template"]["metadata"]["labels"]["gridstat.io/cloud"] == "A"
    # and the pods that serve /metrics are those the monitors select (the services' scrape-job labels)
    services = by_kind(docs, "Service")
    assert {s["metadata"]["labels"].get("gridstat.io/scrape-job") for s in services.values()} >= {
        "gridstat-broker", "gridstat-router", "gridstat-admission"}


# -- subscriber pods serve /metrics ---------------------------------------------------------------------
def test_subscriber_pods_serve_metrics_to_monitoring_only(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    values = write_values(tmp_path, "pdc.json", {**PDC, "clouds": [{"name": "A", "routers": [
        {"name": "e1", "id": 1, "role": "edge"}, {"name": "e2", "id": 2, "role": "edge"}],
        "links": [{"a": "e1", "b": "e2", "latencyMs": 1}]}], "condensationHost": {"enabled": True}})
    docs = render(tools, values)
    deployments = by_kind(docs, "Deployment")
    for name, port in (("rel-gridstat-pdc-cc1", 9105), ("rel-gridstat-condensation-host", 9106)):
        d = deployments[name]
        (c,) = pod_of(d)["containers"]
        assert "--metrics-host=0.0.0.0" in c["args"] and f"--metrics-port={port}" in c["args"], name
        assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in c["ports"], name
        assert d["spec"]["template"]["metadata"]["labels"]["gridstat.io/scrape-job"] == "gridstat-subscriber"
        assert "gridstat.io/scrape-job" not in d["spec"]["selector"]["matchLabels"]  # selectors stay as they were
    policy = by_kind(docs, "NetworkPolicy")["rel-gridstat-subscriber-metrics"]["spec"]
    assert policy["podSelector"]["matchLabels"]["gridstat.io/scrape-job"] == "gridstat-subscriber"
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}] and rule["from"] == [{"namespaceSelector": {}}]


# -- Kafka telemetry ------------------------------------------------------------------------------------
def test_every_role_exports_to_kafka_when_a_bootstrap_is_set(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    pdc = write_values(tmp_path, "pdc.json", {"c37118": {"pdcServers": [
        {**PDC["c37118"]["pdcServers"][0], "cloud": "B"}]}})
    bootstrap = "--kafka=kafka-0.data:9092,kafka-1.data:9092"
    off = render(tools, TWO_CLOUDS, pdc)
    for d in off:
        if d["kind"] in ("StatefulSet", "Deployment"):
            assert not [a for a in args_of(d) if a.startswith(("--kafka", "--telemetry"))], d["metadata"]["name"]
    docs = render(tools, TWO_CLOUDS, pdc, extra=(*KAFKA, "--set", "telemetry.intervalMs=500"))
    workloads = {**by_kind(docs, "StatefulSet"), **by_kind(docs, "Deployment")}
    expected = {  # workload -> its exporter id (--telemetry-exporter)
        "rel-gridstat-broker-a": "grid/rel-gridstat-broker-a-0",
        "rel-gridstat-broker-b": "grid/rel-gridstat-broker-b-0",
        "rel-gridstat-parent": "grid/rel-gridstat-parent-0", "rel-gridstat-admission": "grid/rel-gridstat-admission",
        "rel-gridstat-condensation-host": "grid/rel-gridstat-condensation-host",
        "rel-gridstat-pdc-cc1": "grid/rel-gridstat-pdc-cc1",
        "rel-gridstat-router-a": "grid/${HOSTNAME}", "rel-gridstat-router-b": "grid/${HOSTNAME}"}
    for name, exporter in expected.items():
        args = args_of(workloads[name])
        assert bootstrap in args, (name, args)
        assert f"--telemetry-exporter={exporter}" in args, (name, args)
        assert "--telemetry-interval-ms=500" in args and "--telemetry-buffer=20000" in args, name
    # the operator and the gateways have no telemetry options: none passed
    assert not [a for a in args_of(workloads["rel-gridstat-operator"]) if a.startswith("--kafka")]


KAFKA_SECURE = ("--set", "telemetry.kafka.tls.secretName=kafka-client",
                "--set", "telemetry.kafka.tls.clientCertificate=true",
                "--set", "telemetry.kafka.sasl.secretName=kafka-user",
                "--set", "telemetry.kafka.sasl.mechanism=SCRAM-SHA-256")


def test_kafka_tls_and_sasl_reach_every_kafka_client(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    pdc = write_values(tmp_path, "pdc.json", {"c37118": {"pdcServers": [
        {**PDC["c37118"]["pdcServers"][0], "cloud": "B"}]}})
    archive = write_values(tmp_path, "archive.json", {"archive": {"enabled": True, "variables": ["pmu1/freq"]}})
    docs = render(tools, TWO_CLOUDS, pdc, archive, extra=(*KAFKA, *KAFKA_SECURE, "--set", "history.enabled=true"))
    workloads = {**by_kind(docs, "StatefulSet"), **by_kind(docs, "Deployment")}
    clients = [n for n, d in workloads.items() if any(a.startswith("--kafka=") for a in args_of(d))]
    assert {"rel-gridstat-broker-a", "rel-gridstat-parent", "rel-gridstat-router-a", "rel-gridstat-admission",
            "rel-gridstat-condensation-host", "rel-gridstat-pdc-cc1", "rel-gridstat-archive",
            "rel-gridstat-history"} <= set(clients), clients
    for name in clients:
        args = args_of(workloads[name])
        for flag in ("--kafka-tls-ca=/etc/gridstat/kafka-tls/ca.crt",
                     "--kafka-tls-cert=/etc/gridstat/kafka-tls/tls.crt",
                     "--kafka-tls-key=/etc/gridstat/kafka-tls/tls.key", "--kafka-sasl-mechanism=SCRAM-SHA-256"):
            assert flag in args, (name, flag, args)
        assert not [a for a in args if "password" in a or "username" in a], (name, args)  # never as args
        pod = pod_of(workloads[name])
        (volume,) = [v for v in pod["volumes"] if v["name"] == "kafka-tls"]
        assert volume["secret"] == {"secretName": "kafka-client", "defaultMode": 0o440}, name
        container = pod["containers"][0]  # the Kafka client (args_of reads the first container)
        assert {"name": "kafka-tls", "mountPath": "/etc/gridstat/kafka-tls", "readOnly": True} in \
            container["volumeMounts"], name
        env = {e["name"]: e for e in container.get("env", [])}
        for var, key in (("GRIDSTAT_KAFKA_SASL_USERNAME", "username"), ("GRIDSTAT_KAFKA_SASL_PASSWORD", "password")):
            assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "kafka-user", "key": key}, (name, env)
    # the operator has no Kafka client: nothing of it
    operator = pod_of(workloads["rel-gridstat-operator"])
    assert not [v for v in operator.get("volumes", []) if v["name"] == "kafka-tls"]
    # without a bootstrap the roles get none of it (no --kafka); the history service still does (history.kafka)
    quiet = render(tools, extra=(*KAFKA_SECURE, "--set", "history.enabled=true", "--set", "history.kafka=archive:9093"))
    for d in [*by_kind(quiet, "StatefulSet").values(), *by_kind(quiet, "Deployment").values()]:
        has = any(a.startswith("--kafka-tls") for a in args_of(d))
        assert has == (d["metadata"]["name"] == "rel-gridstat-history"), d["metadata"]["name"]
    # TLS only, no client certificate, no SASL: the CA alone
    ca_only = render(tools, extra=(*KAFKA, "--set", "telemetry.kafka.tls.secretName=kafka-ca"))
    args = args_of(by_kind(ca_only, "StatefulSet")["rel-gridstat-broker-a"])
    assert "--kafka-tls-ca=/etc/gridstat/kafka-tls/ca.crt" in args
    assert not [a for a in args if a.startswith(("--kafka-tls-cert", "--kafka-sasl"))]
    assert "env" not in pod_of(by_kind(ca_only, "StatefulSet")["rel-gridstat-broker-a"])["containers"][0]


def test_kafka_sasl_without_tls_and_an_unknown_mechanism_are_refused(tools: dict[str, str]) -> None:  # noqa: F811
    err = failure(tools, *KAFKA, "--set", "telemetry.kafka.sasl.secretName=kafka-user")
    assert "telemetry.kafka.sasl.secretName: SASL needs TLS" in err
    err = failure(tools, *KAFKA, *KAFKA_SECURE, "--set", "telemetry.kafka.sasl.mechanism=GSSAPI")
    assert "mechanism" in err
    assert "clientCertificate" in failure(tools, *KAFKA, "--set", "telemetry.kafka.tls.clientCertificate=true")


def test_lint_strict_passes_with_kafka_tls_and_sasl(tools: dict[str, str]) -> None:  # noqa: F811
    chart = Path(__file__).parents[3] / "charts" / "gridstat"
    helm(tools, "lint", "--strict", str(chart), *KAFKA, *KAFKA_SECURE, "--set", "history.enabled=true")


def test_the_history_service_reads_the_telemetry_kafka_by_default(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, extra=(*KAFKA, "--set", "history.enabled=true"))
    history = by_kind(docs, "Deployment")["rel-gridstat-history"]
    assert "--kafka=kafka-0.data:9092,kafka-1.data:9092" in args_of(history)
    own = render(tools, extra=(*KAFKA, "--set", "history.enabled=true", "--set", "history.kafka=archive:9092"))
    assert "--kafka=archive:9092" in args_of(by_kind(own, "Deployment")["rel-gridstat-history"])
    assert "history.kafka" in failure(tools, "--set", "history.enabled=true")


# -- the archive ----------------------------------------------------------------------------------------
def test_the_archive_is_a_subscriber_pod_writing_to_kafka(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    values = write_values(tmp_path, "archive.json", {"archive": {
        "enabled": True, "edgeRouter": "e2", "variables": ["pmu1/freq:100", "pmu2/freq"], "intervalMs": 200}})
    assert not [d for d in render(tools) if "archive" in d["metadata"]["name"]]  # off by default
    docs = render(tools, values, extra=KAFKA + INSECURE + ON + MONITORING)
    d = by_kind(docs, "Deployment")["rel-gridstat-archive"]
    args = args_of(d)
    assert args[:2] == ["gridstat", "archive"] and args[-2:] == ["pmu1/freq:100", "pmu2/freq"]
    for flag in ("--name=archive", "--edge=rel-gridstat-router-a-3.rel-gridstat-router-a.grid.svc:7801",
                 "--interval-ms=200", "--latency-ms=1000", "--type=float", "--metrics-host=0.0.0.0",
                 "--metrics-port=9107", "--kafka=kafka-0.data:9092,kafka-1.data:9092",
                 "--telemetry-exporter=grid/rel-gridstat-archive"):
        assert flag in args, flag
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
    pod = pod_of(d)
    assert pod["serviceAccountName"] == "rel-gridstat-archive"
    assert by_kind(docs, "ServiceAccount")["rel-gridstat-archive"]["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert d["spec"]["template"]["metadata"]["labels"]["gridstat.io/scrape-job"] == "gridstat-subscriber"
    assert "rel-gridstat-subscribers" in by_kind(docs, "PodMonitor")
    events = by_kind(docs, "NetworkPolicy")["rel-gridstat-archive-events"]["spec"]
    assert events["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "router"


def test_under_mtls_the_archive_has_its_own_certificate_and_name(tools: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    values = write_values(tmp_path, "archive.json", {"archive": {"enabled": True, "variables": ["pmu1/freq"]}})
    docs = render(tools, values, extra=KAFKA)  # tls.enabled is the default
    d = by_kind(docs, "Deployment")["rel-gridstat-archive"]
    args = args_of(d)
    for flag in ("--name=gridstat-archive", "--tls-ca=/etc/gridstat/tls/ca.crt", "--tls-cert=/etc/gridstat/tls/tls.crt",
                 "--tls-key=/etc/gridstat/tls/tls.key"):
        assert flag in args, flag
    pod = pod_of(d)
    secret = next(v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "tls")
    assert "archive" in secret, secret
    assert any(m["mountPath"] == "/etc/gridstat/tls" for m in pod["containers"][0]["volumeMounts"])
    assert not any(a.startswith("--tls") for a in args_of(by_kind(render(tools, values, extra=KAFKA + INSECURE),
                                                                  "Deployment")["rel-gridstat-archive"]))


def test_the_archive_needs_kafka_variables_and_an_edge_router(tools: dict[str, str]) -> None:  # noqa: F811
    err = failure(tools, "--set", "archive.enabled=true", "--set", "archive.edgeRouter=i1")
    assert "archive.enabled: needs telemetry.kafka.bootstrap" in err
    assert "archive.variables: name what to archive" in err
    assert 'archive.edgeRouter: "i1" is not an edge router of cloud "A"' in err
    assert "archive" not in failure(tools, "--set", "archive.enabled=true", "--set", "archive.variables={a/b}",
                                    *KAFKA, *INSECURE, "--set", "router.eventPort=x")  # only the schema's error


# -- the Spark jobs -------------------------------------------------------------------------------------
def test_the_spark_jobs_are_a_cronjob_and_a_deployment(tools: dict[str, str]) -> None:  # noqa: F811
    assert not [d for d in render(tools) if "spark" in d["metadata"]["name"]]  # off by default
    docs = render(tools, extra=KAFKA + SPARK_IMAGE + (
        "--set", "spark.compliance.enabled=true", "--set", "spark.alerts.enabled=true",
        "--set", "spark.alerts.existingClaim=qos-alerts-checkpoint",
        "--set", "spark.alerts.extraArgs={--starting-offsets,earliest}"))
    (cron,) = by_kind(docs, "CronJob").values()
    assert cron["metadata"]["name"] == "rel-gridstat-spark-compliance"
    assert cron["spec"]["schedule"] == "17 2 * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    kafka = "--kafka=kafka-0.data:9092,kafka-1.data:9092"
    image = "registry.example.com/grid/gridstat-spark:4.2.0"
    assert args_of(cron) == ["/opt/spark/bin/spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                             "--conf", "spark.sql.shuffle.partitions=4", "/opt/gridstat/spark/qos_compliance.py",
                             kafka, "--out=/data/qos"]
    alerts = by_kind(docs, "Deployment")["rel-gridstat-spark-alerts"]
    assert args_of(alerts)[-5:] == ["/opt/gridstat/spark/qos_alerts.py", kafka, "--checkpoint=/data/checkpoint",
                                    "--starting-offsets", "earliest"]
    assert alerts["spec"]["replicas"] == 1 and alerts["spec"]["strategy"]["type"] == "Recreate"
    for d in (cron, alerts):
        pod = pod_of(d)
        (c,) = pod["containers"]
        assert c["image"] == image and c["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": "GRIDSTAT_SCHEMAS", "value": "/opt/gridstat/schemas"} in c["env"]
        assert pod["serviceAccountName"] == "rel-gridstat-spark"
        assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp", "/data"}
    volumes = {v["name"]: v for v in pod_of(alerts)["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "qos-alerts-checkpoint"
    assert "emptyDir" in {v["name"]: v for v in pod_of(cron)["volumes"]}["data"]


def test_the_spark_jobs_need_kafka_and_an_image(tools: dict[str, str]) -> None:  # noqa: F811
    err = failure(tools, "--set", "spark.compliance.enabled=true", "--set", "spark.alerts.enabled=true")
    assert "spark.compliance.enabled: needs telemetry.kafka.bootstrap" in err
    assert "spark.alerts.enabled: needs telemetry.kafka.bootstrap" in err
    assert "spark.image: the Spark jobs need an image" in err


# -- the QoS alerts exporter ------------------------------------------------------------------------------
def test_the_alerts_exporter_runs_with_the_spark_alerts_job_and_is_scraped(tools: dict[str, str]) -> None:  # noqa: F811
    name = "rel-gridstat-alerts-exporter"
    assert name not in by_kind(render(tools, extra=KAFKA), "Deployment")  # off by default
    spark = (*KAFKA, *SPARK_IMAGE, "--set", "spark.alerts.enabled=true")
    docs = render(tools, extra=(*spark, *MONITORING, *ON, "--set", "alertsExporter.forgetAfterS=600",
                                "--set", "alertsExporter.extraArgs={--log-level,INFO}"))
    exporter = by_kind(docs, "Deployment")[name]
    assert args_of(exporter) == ["gridstat", "alerts-exporter", "--kafka=kafka-0.data:9092,kafka-1.data:9092",
                                 "--topic=gridstat.alerts.qos", "--group=gridstat-alerts-exporter",
                                 "--metrics-host=0.0.0.0", "--metrics-port=9110", "--forget-after-s=600",
                                 "--max-series=10000", "--log-level", "INFO"]
    assert exporter["spec"]["replicas"] == 1
    pod = pod_of(exporter)
    (c,) = pod["containers"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9110, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == name and name in by_kind(docs, "ServiceAccount")
    service = by_kind(docs, "Service")[name]
    assert service["metadata"]["labels"]["gridstat.io/scrape-job"] == "gridstat-alerts-exporter"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9110, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = by_kind(docs, "ServiceMonitor")[name]
    assert monitor["spec"]["selector"]["matchLabels"]["gridstat.io/scrape-job"] == "gridstat-alerts-exporter"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # its own switch: off beside the job, or on without it (an alerts job run elsewhere)
    off = render(tools, extra=(*spark, "--set", "alertsExporter.enabled=false"))
    assert name not in by_kind(off, "Deployment") and "rel-gridstat-spark-alerts" in by_kind(off, "Deployment")
    alone = render(tools, extra=(*KAFKA, "--set", "alertsExporter.enabled=true"))
    assert name in by_kind(alone, "Deployment") and "rel-gridstat-spark-alerts" not in by_kind(alone, "Deployment")
    assert "alertsExporter.enabled: needs telemetry.kafka.bootstrap" in failure(
        tools, "--set", "alertsExporter.enabled=true")


def test_the_alerts_exporter_gets_kafka_tls_and_sasl_and_a_metrics_policy(tools: dict[str, str]) -> None:  # noqa: F811
    name = "rel-gridstat-alerts-exporter"
    docs = render(tools, extra=(*KAFKA, *KAFKA_SECURE, "--set", "alertsExporter.enabled=true",
                                "--set", "networkPolicy.enabled=true"))
    exporter = by_kind(docs, "Deployment")[name]
    args = args_of(exporter)
    for flag in ("--kafka-tls-ca=/etc/gridstat/kafka-tls/ca.crt", "--kafka-tls-cert=/etc/gridstat/kafka-tls/tls.crt",
                 "--kafka-tls-key=/etc/gridstat/kafka-tls/tls.key", "--kafka-sasl-mechanism=SCRAM-SHA-256"):
        assert flag in args, (flag, args)
    assert not [a for a in args if "password" in a or "username" in a]
    pod = pod_of(exporter)
    (c,) = pod["containers"]
    assert {"name": "kafka-tls", "mountPath": "/etc/gridstat/kafka-tls", "readOnly": True} in c["volumeMounts"]
    env = {e["name"]: e for e in c["env"]}
    assert env["GRIDSTAT_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kafka-user", "key": "password"}
    policy = by_kind(docs, "NetworkPolicy")[name]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "alerts-exporter"
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == ["metrics"]
    chart = Path(__file__).parents[3] / "charts" / "gridstat"
    helm(tools, "lint", "--strict", str(chart), *KAFKA, *KAFKA_SECURE, "--set", "alertsExporter.enabled=true")
